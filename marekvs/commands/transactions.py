"""MULTI, EXEC, DISCARD, WATCH, UNWATCH (Redis 7.0 ``multi.c``).

After MULTI the dispatcher queues every command (``Node.dispatch``: after the checks a
command meets before it runs, so an unknown command, a wrong arity or a command not
allowed in a transaction is refused at once and makes EXEC fail with EXECABORT) except
EXEC, DISCARD, MULTI, WATCH, QUIT and RESET, which run at once. EXEC runs the queue through
the same dispatch, one command after the other with nothing in between; an error of one
command is its reply and the others still run. Commands that would block answer at once
(``ctx.deny_blocking``), as in Redis. ACL rules are checked when a command is queued and again
when EXEC runs it (``ctx.acl_context`` is MULTI then), as in Redis.

Atomic on the cluster: EXEC runs inside one event-loop tick and the engine commits a tick
as ONE WriteBatch with ONE replication-log entry (scans inside the transaction read the
pending writes rather than committing them), so the transaction is durable whole or not at
all, and a peer applies it whole or not at all. Isolation is per node: a transaction run
on node A and a concurrent one on node B are not ordered against each other; their records
merge by the data model's rules (docs/divergences.md).

WATCH (``node/watch.py``) aborts EXEC with a null reply when a watched key changed since:
by a write on this node, a record merged from a peer, a FLUSHALL or an expiry.
"""

from __future__ import annotations

from marekvs.commands import errors, reply
from marekvs.commands.context import MULTI
from marekvs.commands.errors import CommandError
from marekvs.commands.table import command

_TX = dict(group="transactions")


@command("multi", 1, "noscript loading stale fast allow_busy", acl="fast transaction",
         summary="Mark the start of a transaction block", since="1.2.0", **_TX)
def multi(ctx, args):
    if ctx.multi is not None:
        raise CommandError(errors.MULTI_NESTED)
    ctx.multi = []
    ctx.multi_error = False
    return reply.OK


@command("exec", 1, "noscript loading stale skip_slowlog", acl="slow transaction",
         summary="Execute all commands issued after MULTI", since="1.2.0",
         complexity="Depends on commands in the transaction", **_TX)
def exec_(ctx, args):
    queued = ctx.multi
    if queued is None:
        raise CommandError(errors.EXEC_WITHOUT_MULTI)
    node = ctx.node
    ctx.multi = None
    failed = ctx.multi_error
    valid = node.watches.still_valid(ctx)
    node.watches.unwatch_all(ctx)
    if failed:
        raise CommandError(errors.EXECABORT)
    if not valid:
        return reply.NULL_ARRAY
    dispatch = node.dispatch
    deny, where = ctx.deny_blocking, ctx.acl_context
    ctx.deny_blocking = True
    ctx.acl_context = MULTI  # (ACL: a command its user may no longer run gets EXEC's text)
    try:
        return [dispatch(ctx, argv) for _, argv in queued]
    finally:
        ctx.deny_blocking = deny
        ctx.acl_context = where


@command("discard", 1, "noscript loading stale fast allow_busy", acl="fast transaction",
         summary="Discard all commands issued after MULTI", since="2.0.0",
         complexity="O(N), when N is the number of queued commands", **_TX)
def discard(ctx, args):
    if ctx.multi is None:
        raise CommandError(errors.DISCARD_WITHOUT_MULTI)
    ctx.multi = None
    ctx.node.watches.unwatch_all(ctx)
    return reply.OK


@command("watch", -2, "noscript loading stale fast allow_busy", specs="RO index 1 range -1",
         acl="fast transaction", summary="Watch the given keys to determine execution of the MULTI/EXEC block",
         since="2.2.0", complexity="O(1) for every key.", syntax="key [key ...]", **_TX)
def watch(ctx, args):
    if ctx.multi is not None:
        raise CommandError(errors.WATCH_IN_MULTI)
    ctx.node.watches.watch(ctx, args[1:])
    return reply.OK


@command("unwatch", 1, "noscript loading stale fast allow_busy", acl="fast transaction",
         summary="Forget about all watched keys", since="2.2.0", **_TX)
def unwatch(ctx, args):
    ctx.node.watches.unwatch_all(ctx)
    return reply.OK
