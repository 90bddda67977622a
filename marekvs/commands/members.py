"""Per-member TTL (KeyDB's EXPIREMEMBER family) for every collection with ORSWOT members.

KeyDB's extension, with its syntax and replies (``expire.cpp``)::

    EXPIREMEMBER key member delay [s | ms]      1 set, 0 no key / no such member
    EXPIREMEMBERAT key member unix-time-seconds
    PEXPIREMEMBERAT key member unix-time-milliseconds
    TTL key member / PTTL key member            (commands/keys.py) -2 no key, -1 no member
                                                TTL (or no such member), else the TTL

A member's deadline is its element record's envelope deadline (``keyspace/members.py``):
an LWW write of the record's header, so it converges with no expiry message and past it
the member reads as absent on every replica. It works for hash fields, set members and
zset members alike: the member's kind comes from the record-kind registry
(``members.member_kind``), so any collection type whose elements are ORSWOT records gets
it. A deadline at or before now removes the member (a remove of the adds it saw), as
KeyDB's expiry would at once. On any other type KeyDB answers "object type is
unsupported".

This module also owns what the collection families (hashes, sets, lists, sorted sets, geo)
share in the commands layer: the keyspace notifications of a collection command (``fire``,
``fire_removal``; see "Keyspace notifications" below).

EXPIREMEMBER fires no event, as in KeyDB (``expireMemberCore``); a deadline at or before now
removes the member at once, and fires what that member's expiry fires
(``node/events.py``: ``hexpired`` for a hash field, ``srem`` for a set member, then ``del``
if the key went with it).
"""

from __future__ import annotations

from marekvs.commands import args as A
from marekvs.commands import errors
from marekvs.commands.errors import CommandError
from marekvs.commands.table import command
from marekvs.core import keys as K
from marekvs.keyspace import Keyspace
from marekvs.keyspace import members as M

_ACL_W_FAST = "keyspace write fast"
# member tag -> the event its expiry fires (node/events.py fires the same at a deadline)
_EXPIRED_EVENTS = {K.TAG_HASH: ("h", b"hexpired"), K.TAG_SET: ("s", b"srem")}


# =========================================================================================
# Keyspace notifications of the collection commands
# =========================================================================================
# A command fires Redis's event after its write (``ctx.fire``); one that removes members
# fires ``del`` (class g) after it when the key is gone (Redis deletes an emptied
# collection). With nobody listening (``events.on`` false) each costs one attribute test.

def fire(ctx, cls: str, event: bytes, key: bytes) -> None:
    """``event`` on ``key`` (a key the command created fires Redis's ``new`` first:
    ``node/events.py``)."""
    ev = ctx.node.events
    if ev.on:
        ev.fire(cls, event, key)


def fire_removal(ctx, cls: str, event: bytes, key: bytes) -> None:
    """``event`` of a command that removed from ``key``, then ``del`` if the key is gone."""
    ev = ctx.node.events
    if ev.on:
        ev.fire(cls, event, key)
        if not ctx.ks.exists(key, ctx.ks.now()):
            ev.fire("g", b"del", key)


def member_ttl(ks: Keyspace, key: bytes, member: bytes, now: int) -> int | None:
    """KeyDB's ``TTL key member``: -2 if no key, -1 if the member has no TTL (or does
    not exist, or the key has no members), else its deadline (absolute ms)."""
    found, _, rec = M.member_record(ks, key, member, now)
    if found == M.NO_KEY:
        return -2
    if rec is None or not M.deadline_of(rec):
        return -1
    return M.deadline_of(rec)


def _expire_member(ctx, args: list[bytes], base: int, unit_ms: int, name: str) -> int:
    ks, now = ctx.ks, ctx.ks.now()
    when = A.int_arg(args[3])
    deadline = when * unit_ms + (now if base else 0)
    if not -(1 << 63) <= deadline < 1 << 63:
        raise CommandError(errors.invalid_expire(name))
    found, mk, rec = M.member_record(ks, args[1], args[2], now)
    if found == M.UNSUPPORTED:
        raise CommandError(errors.TYPE_UNSUPPORTED)
    if rec is None:
        return 0
    if deadline <= now:
        ks.apply([(mk, M.remove(rec, ks.hlc.now(), ks.node_id))])
        expired = _EXPIRED_EVENTS.get(mk[K.TAG_AT:K.TAG_AT + 1])
        if expired is not None:
            fire_removal(ctx, expired[0], expired[1], args[1])
    else:
        M.set_deadline(ks, mk, rec, deadline)
    return 1


@command("expiremember", -4, "write fast", (1, 1, 1), group="generic", acl=_ACL_W_FAST,
         summary="Set a timeout on a member of a hash, set or sorted set (KeyDB)", since="6.0.0",
         complexity="O(1)", syntax="key member delay [unit]")
def expiremember(ctx, args: list[bytes]):
    A.int_arg(args[3])  # KeyDB parses the delay first
    if len(args) > 5:
        raise CommandError(errors.INVALID_NUMBER_OF_ARGUMENTS)
    unit = 1000
    if len(args) == 5:
        u = args[4].lower()
        if u not in (b"s", b"ms"):
            raise CommandError(errors.INVALID_UNIT)
        unit = 1000 if u == b"s" else 1
    return _expire_member(ctx, args, 1, unit, "expiremember")


@command("expirememberat", 4, "write fast", (1, 1, 1), group="generic", acl=_ACL_W_FAST,
         summary="Set the expiration of a member of a hash, set or sorted set as a UNIX timestamp (KeyDB)",
         since="6.0.0", complexity="O(1)", syntax="key member unix-time-seconds")
def expirememberat(ctx, args: list[bytes]):
    return _expire_member(ctx, args, 0, 1000, "expirememberat")


@command("pexpirememberat", 4, "write fast", (1, 1, 1), group="generic", acl=_ACL_W_FAST,
         summary="Set the expiration of a member of a hash, set or sorted set as a UNIX timestamp in "
                 "milliseconds (KeyDB)", since="6.0.0", complexity="O(1)",
         syntax="key member unix-time-milliseconds")
def pexpirememberat(ctx, args: list[bytes]):
    return _expire_member(ctx, args, 0, 1, "pexpirememberat")
