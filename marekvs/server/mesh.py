"""The mesh between the shard workers of one node (docs/shards.md §2; issue 33, slice 2).

A node of N worker processes (``shards N`` with N > 1; ``auto``, the default, is one per core), each a ``Node``
over one contiguous range of the 4096 partitions (its own RocksDB directory), each
accepting clients on the node's one port (``SO_REUSEPORT``: the kernel spreads the
connections). A client's command runs where its keys live:

- **local** (its keys on this worker, or a keyless command this worker answers alone):
  ``Node.execute`` here, exactly as a single process runs it;
- **remote** (its keys all on one other worker): carried there over the mesh and
  answered here. A ``ShardConnection`` gathers the run of consecutive commands of one
  connection for that worker; each ``Link`` (one unix socket to each sibling, abstract
  namespace, named by the supervisor) sends ONE msgpack frame per event-loop tick with
  every connection's commands for it — after this worker's own commit, so a write a
  connection made here earlier is committed before its later commands run elsewhere.
  A frame is ``[[client id, protocol, command index, argv], ...]`` (the index into the
  command table's ``all_commands()``, identical in every worker: admission, with the ACL
  check, ran here). The owner (``Owner``) runs each through ``Node.execute`` on a proxy
  context per (front worker, client id), encodes each reply in the client's protocol and
  sends the frame's replies ``[resp_bytes, ...]`` after its own commit; the front splices
  the bytes into the connection's output in order (bench/bench_hop.py measured this
  framing and its costs);
- **node-wide** (DBSIZE, KEYS, RANDOMKEY, INFO, CONFIG SET, FLUSHALL, PUBLISH, CLIENT
  LIST/KILL/PAUSE, SCRIPT LOAD, SLOWLOG, DEBUG DIGEST, ...: ``shards/fanout.py`` names
  them and how their replies merge): the entry goes to every sibling as ``_FAN`` plus the
  command's index, each runs it on its own partitions and state and answers the reply
  as a value (``fanout.pack``); the connection's worker runs it too and merges (a
  Blocking reply: the connection's later commands wait, as for WAIT). SCAN is routed by
  its cursor, a partition: the worker owning it scans on, and the cursor it returns at
  the end of its range is the next worker's first partition. SUBSCRIBE and PSUBSCRIBE
  run where the connection is (PUBLISH reaches every worker, and the connection's worker
  alone relays it to the peers: ``PubSub.fanned``); a keyspace notification is fired by
  the worker that changed the key and posted to the others (``_NOTIFY``, which also
  carries a message a peer relayed to one worker) after its commit, and the tick's
  replies wait until every sibling delivered it (``Mesh.gate``), so subscribers see
  notifications in the order the commands ran. What a unit's part, or a command a
  transaction or script carries to another worker, would deliver (notifications, a
  PUBLISH, invalidations for clients of other workers) is held there (``held``) and
  goes back with its reply: the coordinator delivers it in the order of the whole
  (``Mesh.deliver_held``), as one process delivers an EXEC's or a script's. SHUTDOWN asks the supervisor, which
  stops every worker. WAIT counts a peer once the log of every worker the client wrote
  to is acknowledged there (``ShardConnection._wait``);
- **a unit** (MSET, MGET, MSETNX, DEL, UNLINK, EXISTS, TOUCH, RENAME, RENAMENX, COPY,
  LMOVE, RPOPLPUSH, SMOVE, SUNION, SINTER, SDIFF, SINTERCARD, ZUNION, ZINTER, ZDIFF,
  ZINTERCARD and the STORE forms, ZRANGESTORE, PFCOUNT, PFMERGE, BITOP, LCS,
  GEOSEARCHSTORE, GEORADIUS[BYMEMBER] STORE, LMPOP, ZMPOP, XREAD without BLOCK,
  XREADGROUP that does not block with keys on several workers, SORT and SORT_RO with
  BY/GET patterns (every worker) or a STORE on another worker: ``shards/units.py``
  splits them into phases of commands per worker, client commands or its part
  commands such as ``~zread``, numbered after the table's, and makes the reply): the
  connection's worker coordinates. It locks each worker of the unit in worker order (``_LOCK``, granted by a
  ``{"g": unit}`` frame; its own worker directly), runs each worker's part there
  (``_PART`` plus the part command's index, answered by a ``{"u": unit, "r": value}``
  frame; MSETNX has two phases, EXISTS then MSET), merges, and unlocks (``_UNLOCK``). A
  worker locked for a unit runs that unit's parts and nothing else: its client
  connections hold their next command (``Mesh.held``) and the entries of siblings wait
  in their ``Owner.queue``, in order, until the unit releases it; then the next unit
  waiting gets the lock (``Mesh.lock_queue``, request order). So no command sees one
  worker's part done and another's not, and as every unit locks in the same order, two
  units never wait for each other (no deadlock). A sibling that goes down fails the units
  waiting on it (LOADING) and releases, on the others, the locks its own units held.
  An EXEC whose queue runs on several workers is a unit too (``Mesh.run_transaction``),
  and so is the EXEC of a client that WATCHes keys of other workers (each worker watches
  its keys on the client's proxy; the EXEC asks each under its lock, ``_WATCHED``);
- **a script over several workers** (EVAL/EVALSHA/FCALL whose declared keys are on
  several workers, ``SCRIPT``; or one remembered for reaching keys it did not declare:
  ``Plan.escalated``, every worker): the connection's worker locks them and itself, as a
  unit, and runs it; each ``redis.call`` runs where its keys are (``Mesh.route``), carried
  to a locked worker over a blocking socket of that pair (``SyncLink``, an ``_SCALL``
  entry: Lua runs synchronously inside this worker's tick), as a unit's phases, or on
  every worker; a worker a script did not declare is locked on its way (``_hold``, a
  bounded wait). An EXEC queueing a script that does not run on one worker locks every
  worker and runs its queue through the same route (``EVERYWHERE``); node-wide commands
  and units of several phases in an EXEC run in segments under the EXEC's locks
  (``Mesh._segment``).
  A busy script makes every worker answer BUSY (``_BUSY``), and SCRIPT KILL through any
  worker reaches it (docs/shards.md §3 as built);
- **refused**: what is not carried across workers yet answers
  ``ERR <command> is not supported with shards > 1 yet`` (``Plan``): a node-wide
  command ``fanout.MERGES`` would not name (none is left), a command whose keys are on
  several workers that no unit carries (none is left but for the blocking ones, which
  wait in rounds), an EXEC queueing a command not carried. (An EXEC queueing a blocking
  command over keys of several workers, or a script calling one, runs its non-blocking
  form as a unit, as Redis runs a blocking command there: ``Mesh._block_now``.)

**Client tracking** (``node/tracking.py``): a tracking client's entries carry its state
(``_entry``), so a read carried to another worker registers the client in that worker's
table; a change there is told to the client's worker (``_INVALIDATE``: after the reply of
the client's own command when that is what changed it), which resolves its REDIRECT, to
a client of a third worker if need be (``_PUSH``). Both go as keyspace notifications do
(``Mesh.gate``): the replies of the tick that made the change wait until the client's
worker has the invalidation, so it is in the client's output before anything the client
sends after seeing those replies (Redis writes it into the client's buffer before it
replies). CLIENT TRACKING ... REDIRECT asks the
target's worker whether it is connected (``_HAS_CLIENT``). A BCAST client's prefixes go
to every sibling (``_BCAST``), and CLIENT TRACKING answers once each has them.

**MONITOR** (``node/monitor.py``): a client's commands are shown by its own worker,
wherever they ran (a unit or a command carried elsewhere once it ran, the queue of a
transaction across workers in order; never a unit's parts), and the calls of a script by
the worker running it; each line goes to the monitors of every worker (``_MONITOR``, with the
tick's notifications: the client's reply waits until they have it, ``Mesh.gate``),
those of the siblings that have any (``_MONITORS``: MONITOR answers once each knows).

**Node records** (ACL SETUSER/DELUSER/LOAD, FUNCTION LOAD/DELETE/FLUSH/RESTORE: the
router's ``node-record`` class) run on the connection's worker; the users and libraries
they write reach every worker before the reply (``SHARED``; ``server/noderecords.py``).

A blocking command (BLPOP, XREAD BLOCK, ...) whose keys are on one other worker waits
there (``_BLOCKING``): the owner runs it on the client's proxy, which may block, and
answers in a ``{"b": client id}`` frame when it ends; a ``_DROP`` cancels the wait.

A blocking command whose keys are on **several** workers (BLPOP/BRPOP/BLMPOP,
BZPOPMIN/BZPOPMAX/BZMPOP, BLMOVE/BRPOPLPUSH from one worker to another, XREAD BLOCK,
XREADGROUP BLOCK with ``>``; ``BLOCK_ACROSS``) runs in rounds from the connection's
worker (``ShardConnection._rounds``; its arguments are parsed first, as its handler
parses them, so a bad one gets the handler's error). A round is a unit
(``units._Round``): unless another client comes first for one of its keys (``~held``: it
holds it, or the key changed and its waiters were not served yet), the command's
non-blocking form (LMPOP, ZMPOP, LMOVE, RPOPLPUSH, XREAD, XREADGROUP) across the
workers, answered at once if it found something; else, under the same locks (no write
between the attempt and the waits), a last phase sets the client's *watch* on each
worker of its keys (``~wait``; XREAD's ``$`` resolved there to the stream's last id). A
watch does not pop: the first change of a watched key ends it (``node/blocking.py``) and
holds that key (its other waiters, local ones too, wait) while the owner tells the
client's worker (a ``{"w": client id}`` frame), which runs the next round; the round
releases the hold and the key's other waiters are served. A round that found nothing
watches again in its place (not woken again for the same change). So the elements of a
push are popped by one client only, and waiters already watching are served first come,
first served on every worker. The command ends with its reply, the timeout (kept on the
client's worker: the nil reply), CLIENT UNBLOCK (which ends the watches, or, between
rounds, the rounds themselves), or the client's going away; each end drops the watches
everywhere (``_UNWAIT``, or ``_DROP``).

A proxy context runs what a handler would do in steps (DBSIZE, KEYS, the first read of a
cold zset) to its end at once (``deny_blocking``, as inside MULTI): the owner's other
clients wait meanwhile.

**Order.** A connection's commands take effect in the order it sent them: while a
connection's run waits for its replies (``ctx.blocked``, as for BLPOP) its later commands
wait in ``Connection.backlog``. So a pipeline ``SET data x`` (worker A) ``SET ready 1``
(worker B) is never seen as ``ready`` without ``data``; it costs one round trip per change
of worker within a pipeline, not per command.

**Failure.** When a sibling dies its link drops: connections with commands in flight to it
are closed (their outcome is unknown, as after a crashed server), and until the link is
back (``Link`` reconnects every 50 ms; the supervisor restarts the worker on its own
directory) its partitions answer ``-LOADING shard worker for partitions F-L is restarting``
at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import select
import socket
import time
from collections import deque
from typing import Any, Callable, Iterator

import msgpack

from marekvs.commands import errors
from marekvs.commands.aclrules import User
from marekvs.commands.context import MULTI, Context
from marekvs.commands.errors import CommandError
from marekvs.commands.reply import NO_REPLY, NULL_ARRAY, OK, Blocking, Err
from marekvs.commands.table import Command
from marekvs.core.partition import ShardMap, partition_of
from marekvs.node import Node
from marekvs.node.monitor import PROXY_ADDR
from marekvs.node.scripting import libs
from marekvs.server import resp
from marekvs.server.listener import Connection, RespServer
from marekvs.server.metrics import Row, worker_rows
from marekvs.server.noderecords import RECORDS, SharedRecords
from marekvs.shards.clients import CLIENTS_FILE, SharedClients
from marekvs.shards.fanout import FAN_PARTS, MERGES, VIA, Merge, pack, scan_walk, unpack
from marekvs.shards.router import ALL, FRONT, KEY, NODE_RECORD, Router
from marekvs.shards.units import PART_COMMANDS, UNITS, BlockCall, Got, Unit, Waiting, blocking_call, final

log = logging.getLogger("marekvs.mesh")

_enc = resp._enc
_R_OK = resp.R_OK
_packb = msgpack.packb
_DROP = -1  # a frame entry's command index: forget the proxy context of this client
_DEFAULT_USER = b"default"


def _entry(ctx: Context, ci: int, args: Any) -> list[Any]:
    """A frame entry running command index ``ci`` with ``args`` for the client ``ctx``:
    [client id, protocol, index, args], and the name of the client's user when it is not
    the default user (else None, when more follows), and its tracking state when it tracks
    keys in the default mode (``[redirect, noloop, optin, optout, caching]``). The proxy
    of the client runs as that user (``Owner._proxy``): the client's worker checked the
    command against it, and what the command runs in turn (a script's calls) is checked
    there against the same user; a read there registers the client in that worker's
    tracking table (``node/tracking.py``)."""
    u = ctx.user
    t = ctx.tracking
    if t is None or t.bcast:
        if u.name == _DEFAULT_USER:
            return [ctx.id, ctx.proto, ci, args]
        return [ctx.id, ctx.proto, ci, args, u.name]
    return [ctx.id, ctx.proto, ci, args, None if u.name == _DEFAULT_USER else u.name,
            [t.redirect, t.noloop, t.optin, t.optout, t.caching]]
_NOTIFY = -2  # ... a keyspace notification to deliver here: [channel, message, number], or a message a peer
# relayed (an SPUBLISH: [channel, message, number, 1]); acknowledged by an "n" frame at once
_LOCK = -3  # ... lock this worker for the unit in the client id's slot (no reply: a "g" frame later)
_UNLOCK = -4  # ... the unit is done here
_SCRIPT = -5  # ... a script body to cache here (EVAL elsewhere: EVALSHA then works on every worker)
_WATCHED = -6  # ... (under a unit's lock) are the client's watches here still valid? then unwatch
_UNWATCH = -7  # ... forget the client's watches here (UNWATCH, DISCARD, RESET, an EXEC that ran)
_UNWAIT = -8  # ... the client's blocking command over several workers ended: its watch here too
_INVALIDATE = -9  # ... keys our client read changed there: [keys or None, by its own command?, number]
_PUSH = -10  # ... an invalidation for our client that another worker's client REDIRECTs to: [keys, number]
# (both go as a notification does, ``Mesh.gate``: acknowledged by an "n" frame at once)
_MONITOR = -11  # ... a MONITOR line for our monitors: [line, number] (acknowledged as _NOTIFY is)
_HAS_CLIENT = 1 << 19  # ... is the client of this id (the args) connected here? (a value)
_BCAST = _HAS_CLIENT + 1  # ... a BCAST tracking client of the sender began ([prefixes, noloop]) or ended (None)
_MONITORS = _HAS_CLIENT + 2  # ... the sender (its index in the client id's slot) has monitors (True) or none
_METRICS = _HAS_CLIENT + 3  # ... this worker's metrics rows, for a scrape of the node's metrics port (a value)
_SCALL = -12  # ... run [command index, argv, frozen time or None, unit] now for the unit holding this worker
_ESCALATE = -13  # ... a script reached keys of workers it did not declare: lock every worker for its runs
_BUSY = -14  # ... [kind or None, worker]: a script of that worker is busy ("eval"/"function"), or no more
_SKIPPED = -15  # (never sent: a command left in Owner.queue that is not run, Owner._steps)
_SYNC = -16  # ... the sender's blocking socket (SyncLink): what we answer on it is never held by ``gate``
_FAN = 1 << 16  # ... plus a command's index: a node-wide command, its reply as a value (fanout.py)
_PART = 1 << 17  # ... plus a command's index: a part of the unit holding this worker (a "u" frame)
_BLOCKING = 1 << 18  # ... plus a command's index: a blocking command of a client (a "b" frame when it ends)
_RECONNECT_S = 0.05

# keyless commands a worker cannot answer for the node yet: they need every worker's state
_FRONT_REFUSED: frozenset[str] = frozenset()
# node-wide commands a worker answers alone: SWAPDB (one database: its error), SHUTDOWN (the
# worker asks the supervisor, which stops every worker: Node.shutdown_hook); WAIT (queued in
# MULTI: its EXEC runs it here; otherwise ``ShardConnection._wait``)
_ALL_HERE = frozenset(("wait", "swapdb", "shutdown"))
_STEPWISE = frozenset(("dbsize", "keys", "debug|digest"))  # (commands/stepwise.py: Fan.steps)
_EVALS = frozenset(("eval", "eval_ro"))
_RUNNERS = frozenset(("eval", "evalsha", "eval_ro", "evalsha_ro", "fcall", "fcall_ro"))
LOCK_WAIT_S = 2.0  # how long a script waits for the lock of a worker it did not declare
SYNC_REPLY_S = 60.0  # ... for the reply of a worker locked for it (then: the worker is taken as lost)

# a plan's kinds
_LOCAL, _KEY, _KEYS, _REFUSE, _EXEC, _SORT, _FANOUT, _SCANS, _RECORD, _TRACK, _RUNNER = range(11)


_GONE = object()  # a unit inside a transaction lost a worker
_CANCELLED = object()  # (Owner._ended: the client went away)
TRANSACTION = object()  # Plan.where's answer for an EXEC whose queue spans workers
EVERYWHERE = object()  # ... for an EXEC queueing a node-wide command, a unit of several phases or a script
SCRIPT = object()  # ... for a script whose declared keys are on several workers (or remembered: every worker)
WATCH = object()  # ... for a WATCH of keys of other workers (watches live with the key's owner)
SHARED = object()  # ... for a command writing node records: here, its reply once every worker has them
BLOCK_ACROSS = object()  # ... for a blocking command whose keys are on several workers
WAIT_ACROSS = object()  # ... for WAIT: the acks of every worker's log the client wrote to
SCAN_ACROSS = object()  # ... for SCAN: its cursor's worker, then the next while the call wants more
_SCAN = FAN_PARTS["~scan"]
_WAIT_POLL_S = 0.01
# the reply of a hopped command that runs in steps (a cold zset's first read: commands/stepwise.py),
# in a "s" frame when its last step ran; and of the client's later commands of that run, not run
# (the front sends them again once it has that reply: Owner.stepping)
_LATER, _NOT_RUN = b"", b"\x00"
_ENDS_WATCH = frozenset(("exec", "discard", "unwatch", "reset"))


class BlockAt:
    """Plan.where's answer for a blocking command whose keys are all on worker ``j``."""

    __slots__ = ("j",)

    def __init__(self, j: int):
        self.j = j


class AskClient:
    """Plan.where's answer for CLIENT TRACKING ... REDIRECT to a client of worker ``j``:
    ask it whether client ``rid`` is there, then run the command here."""

    __slots__ = ("j", "rid")

    def __init__(self, j: int, rid: int):
        self.j, self.rid = j, rid


class Fan:
    """A node-wide command run on every worker: its number in the frames, how its
    replies merge (``shards/fanout.py``), the part command each worker runs instead of it
    (``via``: ``fanout.VIA``), and whether it runs in steps (``steps``: DBSIZE, KEYS, DEBUG
    DIGEST go to the siblings as a client's blocking command does, so a sibling serves
    its other clients between its steps, as the connection's worker does)."""

    __slots__ = ("number", "merge", "via", "steps")

    def __init__(self, number: int, merge: Merge, via: Command | None, steps: bool):
        self.number = number
        self.merge = merge
        self.via = via
        self.steps = steps

    def here(self, node: Node, ctx: Context, cmd: Command, args: list[bytes]) -> Any:
        """Run it on this worker: the command, or its ``via`` (the command counted once
        for INFO commandstats, as one process counts it: the part is in no table)."""
        if self.via is None:
            return node.execute(ctx, cmd, args)
        return as_command(node, ctx, cmd, args, self.via, args)


def as_command(node: Node, ctx: Context, cmd: Command, args: list[bytes], part: Command, pargs: list[bytes]) -> Any:
    """Run ``part`` for the client's ``cmd`` here: ``cmd`` counted (INFO commandstats) and
    shown to MONITOR as one process does (the part is in no table, and never shown)."""
    cmd.calls += 1
    r = node.execute(ctx, part, pargs)
    if node.monitor_on and not cmd.admin:
        node.feed_monitors(ctx, args)
    return r


@contextlib.contextmanager
def held(node: Node, fanned: bool = False) -> Iterator[list[Any]]:
    """Run a command whose deliveries to subscribers (keyspace notifications, a PUBLISH:
    ``PubSub.held``) are held in the list this yields, ``(channel, message, shard)`` in
    order, for the coordinator of a transaction, script or unit across workers to deliver
    on every worker in the order of the whole (``Mesh.opened``), as one process delivers
    them. Else a worker's would reach its own subscribers at once and the others' after
    its commit, and a subscriber could see a later command's before an earlier one's of
    another worker. ``fanned``: a copy of a node-wide command (PUBLISH on each worker),
    whose receivers here are counted but which the coordinator's copy delivers, relays to
    the peers and logs (slow log)."""
    pubsub, slowlog = node.pubsub, node.slowlog
    saved = pubsub.held
    out: list[Any] = []
    pubsub.held = out
    if fanned:
        pubsub.fanned = slowlog.muted = True
    try:
        yield out
    finally:
        pubsub.held = saved
        if fanned:
            pubsub.fanned = slowlog.muted = False


def _answer(batch: list[Any], reply: Any) -> None:
    for job in batch:
        if not job[4].done():
            job[4].set_result(reply)


def part_command(table: Any, name: bytes) -> Command:
    """The command a unit's part names: a client command, or a part command
    (``units.PART_COMMANDS``)."""
    cmd = PART_COMMANDS.get(name) or table.lookup(name)
    assert cmd is not None
    return cmd  # type: ignore[no-any-return]


def script_key(name: str, args: list[bytes]) -> bytes:
    """What a script is remembered by (``Plan.escalated``): its sha, or ``f:`` and its
    function's name."""
    if name.startswith("fcall"):
        return b"f:" + args[1]
    return args[1].lower() if name.startswith("evalsha") else libs.sha1hex(args[1])


def mesh_address(name: str, index: int) -> str:
    """The abstract unix socket worker ``index`` of the node ``name`` accepts siblings on
    (no file: nothing to clean up after a SIGKILL, no path length limit)."""
    return f"\0{name}-w{index}"


def _seq(entry: list[Any]) -> int:
    """The number of an entry ``Mesh.gate`` sends (``_NOTIFY``, ``_MONITOR``, ``_INVALIDATE``,
    ``_PUSH``): the receiver acknowledges the highest it delivered."""
    args, ci = entry[3], entry[2]
    return int(args[2] if ci == _NOTIFY or ci == _INVALIDATE else args[1])


def unsupported(cmd: Command, why: str = "") -> str:
    name = cmd.fullname.replace("|", " ").upper()
    return f"ERR {name} is not supported with shards > 1 yet" + (f" ({why})" if why else "")


def loading(shards: ShardMap, j: int) -> bytes:
    return b"-LOADING shard worker for partitions %s is restarting\r\n" % str(shards.ranges[j]).encode()


class Plan:
    """Where each command of the table runs on a node of several workers (see the module
    docstring), decided once per command: ``where(ctx, cmd, args)`` is None (here), a
    worker's index (there), or an error text (refused)."""

    def __init__(self, node: Node, shards: ShardMap, index: int):
        self.router = router = Router(node.table, shards)
        self.index = index
        self.owner = shards.owner
        table = list(node.table.all_commands())
        self.commands: list[Command] = (table + list(PART_COMMANDS.values())  # (parts: never planned)
                                        + list(FAN_PARTS.values()))
        self.number = {id(c): i for i, c in enumerate(self.commands)}
        self.plan: dict[int, tuple[int, Any]] = {}
        self.block_at = [BlockAt(j) for j in range(len(shards))]
        self.escalated: set[bytes] = set()  # scripts (script_key) that lock every worker (Mesh.route)
        for cmd in table:
            cls = router.class_of(cmd)
            blocking = "blocking" in cmd.flags
            if cls == FRONT:
                p: tuple[int, Any] = (_REFUSE, unsupported(cmd)) if cmd.fullname in _FRONT_REFUSED else (
                    (_TRACK, None) if cmd.fullname == "client|tracking" else (_LOCAL, None))
            elif cls == ALL and cmd.fullname in MERGES:
                via = VIA.get(cmd.fullname)
                p = (_FANOUT, Fan(self.number[id(via or cmd)] + _FAN, MERGES[cmd.fullname], via,
                                  cmd.fullname in _STEPWISE))
            elif cls == ALL and cmd.fullname == "scan":
                p = (_SCANS, None)
            elif cls == ALL and cmd.fullname in _ALL_HERE:
                p = (_LOCAL, None)
            elif cls == NODE_RECORD:  # (server/noderecords.py)
                p = (_RECORD, None)
            elif cls == ALL:
                p = (_REFUSE, unsupported(cmd))
            elif cmd.fullname == "exec":
                p = (_EXEC, None)
            elif cmd.fullname in ("sort", "sort_ro"):
                p = (_SORT, None)
            elif cmd.fullname in _RUNNERS:
                p = (_RUNNER, None)
            elif cls == KEY and not blocking:
                p = (_KEY, router.route(cmd).pos)
            else:
                p = (_KEYS, blocking)
            self.plan[id(cmd)] = p

    def where(self, ctx: Context, cmd: Command, args: list[bytes]) -> Any:
        kind, arg = self.plan[id(cmd)]
        if kind == _KEY:
            j = self.owner[partition_of(args[arg])]
            return None if j == self.index else j
        if kind == _LOCAL:
            return WAIT_ACROSS if cmd.fullname == "wait" and ctx.multi is None else None
        if kind == _TRACK:
            return self._redirect(args)
        if kind == _REFUSE or kind == _FANOUT:
            return arg  # type: ignore[no-any-return]
        if kind == _RECORD:  # (queued in MULTI: EXEC runs it here, and every worker has it soon after)
            return SHARED if ctx.multi is None else None
        if kind == _SCANS:  # the cursor is a partition: its worker scans on (commands/keys.py)
            return SCAN_ACROSS
        if kind == _EXEC:
            return self._exec(ctx, cmd)
        if kind == _RUNNER:
            if self.escalated and script_key(cmd.fullname, args) in self.escalated:
                return SCRIPT
        elif kind == _SORT and any(a.lower() in (b"by", b"get") for a in args[2:]):
            return UNITS[cmd.fullname]  # (BY and GET patterns may read keys of every worker)
        shards = self.router.shards_of(cmd, args)
        if not shards and cmd.fullname == "pfmerge" and len(args) == 2:  # (Redis 7.0 finds no key in
            shards = {self.owner[partition_of(args[1])]}  # PFMERGE destkey alone; it reads destkey)
        if not shards or shards == {self.index}:
            return None
        if cmd.fullname == "watch":  # watches live with the key's owner
            return WATCH
        if len(shards) > 1:
            if kind == _RUNNER:
                return SCRIPT
            unit = UNITS.get(cmd.fullname)
            if unit is not None and (not arg or not unit.would_block(args)):
                return unit
            if arg:
                return BLOCK_ACROSS
            return unsupported(cmd, "its keys are on several shard workers")
        if kind == _KEYS and arg:  # a blocking command waits where its keys are
            return self.block_at[shards.pop()]
        return shards.pop()

    def _redirect(self, args: list[bytes]) -> AskClient | None:
        """CLIENT TRACKING ... REDIRECT id where client ``id`` would be on another worker."""
        for i in range(3, len(args) - 1):
            if args[i].lower() == b"redirect":
                v = args[i + 1]
                if not v.isdigit() or len(v) > 18:
                    return None  # (its error, or no such client: from here)
                j = int(v) % len(self.block_at)
                return None if j == self.index else AskClient(j, int(v))
        return None

    def _exec(self, ctx: Context, cmd: Command) -> Any:
        """An EXEC runs here when every queued command would; as a transaction unit
        (``TRANSACTION``: ``Mesh.run_transaction``) when some run on other workers (on
        one, as a unit over several, or node-wide on every worker); with every worker locked
        (``EVERYWHERE``) when one is a script that does not run here, or a blocking command
        over keys of several workers (it runs as its non-blocking form: ``Mesh._block_now``);
        else it is refused (a queued command not carried yet)."""
        if ctx.multi_error or not ctx.multi:
            return None  # (EXECABORT, or an empty transaction: here)
        elsewhere = everywhere = False
        for c, a in ctx.multi:
            w = self.where(ctx, c, a)
            if w is None or type(w) is AskClient:  # (CLIENT TRACKING: here, as queued)
                continue
            if type(w) is BlockAt:  # (inside MULTI it does not block: a plain hop)
                w = w.j
            if type(w) is int and c.fullname in _RUNNERS:
                everywhere = True  # (a script runs here, its calls carried: Mesh.route)
            elif w is SCRIPT or w is BLOCK_ACROSS or w is SCAN_ACROSS:  # (BLOCK_ACROSS: its non-blocking
                everywhere = True  # form, SCAN_ACROSS: over the workers while it wants more, Mesh.route)
            elif type(w) is not int and type(w) is not Fan and not isinstance(w, Unit):
                return unsupported(cmd, "a queued command is not carried across shard workers yet")
            elsewhere = True
        return EVERYWHERE if everywhere else TRANSACTION if elsewhere else None


class Session:
    """The workers a script or a transaction running on this worker holds (``Mesh.route``):
    those locked for its unit up front, and those it locked on its way (a script's keys it
    did not declare), released when it ends."""

    __slots__ = ("uid", "locked", "taken", "lazy", "strayed")

    def __init__(self, uid: int, locked: set[int], lazy: bool):
        self.uid, self.locked, self.lazy = uid, locked, lazy
        self.taken: list[int] = []
        self.strayed = False  # a script reached a worker it did not declare (Plan.escalated)


class SyncLink:
    """A blocking unix socket to sibling ``j`` for what a script or a transaction running
    on this worker carries there while it runs: Lua runs synchronously inside this
    worker's tick, so each ``redis.call`` waits for its reply here (the sibling serves it
    as any sibling's connection: an ``Owner``, told by a first ``_SYNC`` entry that this
    worker reads nothing else meanwhile: ``Mesh.sync_owners``)."""

    def __init__(self, address: str):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            self.sock.connect(address)
            self.sock.sendall(_packb([[0, 0, _SYNC, None]]))
        except OSError:
            self.sock.close()
            raise
        self.unpacker = msgpack.Unpacker(raw=False)

    def send(self, entries: list[list[Any]]) -> None:
        self.sock.settimeout(SYNC_REPLY_S)
        self.sock.sendall(_packb(entries))

    def wait(self, key: str, unit: int, timeout: float) -> Any:
        """The ``r`` of the next frame ``{key: unit}`` (earlier frames are stale: a grant
        that came after its wait timed out); raises ``TimeoutError`` or ``OSError``."""
        deadline = time.monotonic() + timeout
        while True:
            for frame in self.unpacker:
                if type(frame) is dict and frame.get(key) == unit:
                    return frame["r"]
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            self.sock.settimeout(left)
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionResetError
            self.unpacker.feed(data)

    def close(self) -> None:
        self.sock.close()


class Link(asyncio.Protocol):
    """This worker's connection to sibling ``j``: frames of commands out, replies in."""

    def __init__(self, mesh: Mesh, j: int):
        self.mesh, self.j = mesh, j
        self.node = mesh.node
        self.transport: Any = None
        self.unpacker = msgpack.Unpacker(raw=False)
        self.out: list[list[Any]] = []  # this tick's entries
        self.queued: list[tuple[int, Callable[[list[bytes] | None], None]]] = []
        self.inflight: deque[tuple[int, Callable[[list[bytes] | None], None]]] = deque()
        self.got: list[bytes] = []
        self.scheduled = False
        self.flush_cb = self._flush

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def send(self, entries: list[list[Any]], done: Callable[[list[bytes] | None], None]) -> None:
        """Carry ``entries`` to the sibling; ``done(replies)`` gets their RESP replies in
        order, or None if they may not have run (the link dropped, or our commit failed)."""
        self.out += entries
        self.queued.append((len(entries), done))
        if not self.scheduled:
            self.scheduled = True
            self.node.after_commit(self.flush_cb)

    def post(self, entry: list[Any]) -> None:
        """Carry an entry that has no reply (``_DROP``, ``_NOTIFY``)."""
        self.out.append(entry)
        if not self.scheduled:
            self.scheduled = True
            self.node.after_commit(self.flush_cb)

    def _flush(self, committed: bool) -> None:
        self.scheduled = False
        out, queued = self.out, self.queued
        self.out, self.queued = [], []
        if not committed or self.transport is None or self.transport.is_closing():
            for _, done in queued:
                done(None)
            return
        self.inflight.extend(queued)
        self.transport.write(_packb(out))

    def data_received(self, data: bytes) -> None:
        self.unpacker.feed(data)
        got, inflight = self.got, self.inflight
        for frame in self.unpacker:
            if type(frame) is dict:  # a unit's lock granted, its part's reply, notifications acknowledged
                self.mesh.unit_message(self.j, frame)
                continue
            got += frame
        while inflight and len(got) >= inflight[0][0]:
            n, done = inflight.popleft()
            if n == len(got):
                replies, got = got, []
            else:
                replies, got = got[:n], got[n:]
            done(replies)
        self.got = got

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        failed = list(self.inflight) + self.queued
        self.inflight.clear()
        self.queued = []
        self.mesh.link_lost(self)
        for _, done in failed:
            done(None)


class Owner(asyncio.Protocol):
    """A sibling's connection to this worker: its clients' commands for our partitions,
    run on proxy contexts, replies after our commit."""

    def __init__(self, mesh: Mesh):
        self.mesh = mesh
        self.node = mesh.node
        self.transport: Any = None
        self.unpacker = msgpack.Unpacker(raw=False)
        self.proxies: dict[int, Context] = {}
        self.out: list[bytes] = []
        self.replies: list[bytes] = []  # the replies of this turn's entries, in order
        self.queue: deque[list[Any]] = deque()  # entries waiting for a unit to release this worker
        self.locks: set[int] = set()  # the units of this sibling holding (or waiting for) this worker
        self.parts: list[bytes] = []  # the replies of the holder's parts in this frame
        self.noted = 0  # the number of the last notification delivered from this data (to acknowledge)
        self.blocked: dict[int, asyncio.Task[None]] = {}  # clients' blocking commands waiting here
        self.stepping: set[int] = set()  # clients whose hopped command runs in steps here
        self.scheduled = False
        self.flush_cb = self._flush

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.mesh.owners.add(self)

    def data_received(self, data: bytes) -> None:
        self.unpacker.feed(data)
        for frame in self.unpacker:
            if type(frame) is dict:  # the answer of a sibling's busy script (Mesh._forward_busy)
                self.mesh.busy_answer(frame)
            else:
                self._frame(frame)
        if self.noted:  # acknowledged at once, not after our commit (Mesh.gate: never held)
            if self.transport is not None and not self.transport.is_closing():
                self.transport.write(_packb({"n": self.noted}))
            self.noted = 0
        self.mesh.announced.clear()  # (a client of ours killed from here: nobody waits for that news)
        self._emit()

    def _frame(self, frame: list[Any]) -> None:
        mesh = self.mesh
        queue = self.queue
        for e in frame:
            ci = e[2]
            if _PART <= ci < _BLOCKING or ci < _DROP:  # a unit's lock, unlock or part, a notification: now
                self._now(e)
            elif queue or mesh.holder is not None:  # (this worker is locked for a unit)
                queue.append(e)
            elif 0 <= ci < _FAN and e[0] in self.stepping:
                self.replies.append(_NOT_RUN)
            else:
                self._run(e)
        if self.parts:  # the holder's parts of this frame: their replies in one frame
            self._unit_frame({"u": mesh.holder, "r": self.parts})
            self.parts = []

    def _run(self, e: list[Any]) -> None:
        cid, proto, ci, args = e[0], e[1], e[2], e[3]
        if ci == _SKIPPED:
            self.replies.append(_NOT_RUN)
            return
        if ci == _DROP:
            gone = self.proxies.pop(cid, None)
            if gone is not None and gone.watched is not None:
                self.node.watches.unwatch_all(gone)
            task = self.blocked.pop(cid, None)
            if task is not None:  # the client went away while blocked here: its wait ends
                task.cancel()
            self.node.blocking.unwatch(cid)
            return
        if ci >= RECORDS:  # node records written by the sibling, or asked for (server/noderecords.py)
            self.replies.append(self.mesh.records.received(ci, args))
            return
        if ci == _HAS_CLIENT:
            self.replies.append(self._value(int(args in self.node.clients)))
            return
        if ci == _METRICS:
            self.replies.append(self._value(worker_rows(self.node)))
            return
        if ci == _BCAST or ci == _MONITORS:  # (answered: the command that announced it waits)
            if ci == _BCAST:
                self.node.tracking.bcast_of(cid, args)
            else:
                self.mesh.monitors_of(cid, args)
            self.replies.append(_R_OK)
            return
        ctx = self._proxy(e)
        if ci >= _BLOCKING:
            self._block(ctx, self.mesh.plan.commands[ci - _BLOCKING], args)
            return
        if ci >= _FAN:
            pubsub, slowlog = self.node.pubsub, self.node.slowlog
            pubsub.fanned = True  # (a PUBLISH fanned out: the connection's worker relays it to the peers)
            slowlog.muted = True  # (the connection's worker logs the command, once)
            try:
                self.replies.append(self._value(self.node.execute(ctx, self.mesh.plan.commands[ci - _FAN], args)))
            finally:
                pubsub.fanned = slowlog.muted = False
            self._deferred(ctx)
            return
        if cid in self.stepping:  # (queued behind a unit meanwhile: _steps)
            self.replies.append(_NOT_RUN)
            return
        ctx.deny_blocking = False  # (what runs in steps does: the plan sends no blocking command here)
        try:
            r = self.node.execute(ctx, self.mesh.plan.commands[ci], args)
        finally:
            ctx.deny_blocking = True
        if type(r) is Blocking:
            self._steps(ctx, r.awaitable)
        elif r is NO_REPLY:
            self.replies.append(b"-ERR internal error: a blocking command on a shard worker proxy\r\n")
        else:
            out: list[bytes] = []
            _enc(r, proto, out)
            if ctx.deferred is not None:  # (invalidations of its own write: right after its reply)
                for m in ctx.deferred:
                    _enc(m, proto, out)
            self.replies.append(b"".join(out))
        ctx.deferred = None

    def _steps(self, ctx: Context, awaitable: Any) -> None:
        """A client's hopped command that runs in steps (commands/stepwise.py): its reply
        slot says ``_LATER``, and the bytes come in a "s" frame once its last step ran;
        the client's later commands of the same run are not run here (``_NOT_RUN``, also
        those waiting behind a unit's lock): the front sends them again after that reply,
        so they run after it, as on one process, while every other client is served."""
        cid = ctx.id
        self.replies.append(_LATER)
        self.stepping.add(cid)

        async def steps() -> None:
            r = await self._ended(cid, awaitable, "a command in steps")
            if r is _CANCELLED:
                self.stepping.discard(cid)
                return
            for k, e in enumerate(self.queue):  # (its later commands behind a unit: answered not run)
                if e[0] == cid and 0 <= e[2] < _FAN:
                    self.queue[k] = [cid, e[1], _SKIPPED, None]
            self.stepping.discard(cid)
            out: list[bytes] = []
            _enc(r, ctx.proto, out)
            if ctx.deferred is not None:
                for m in ctx.deferred:
                    _enc(m, ctx.proto, out)
                ctx.deferred = None
            self._unit_frame({"s": cid, "r": b"".join(out)})

        self.blocked[cid] = asyncio.get_running_loop().create_task(steps())

    def _deferred(self, ctx: Context) -> None:
        """What a proxy's command left for after its reply (invalidations of the client's
        own writes), where its reply is a value: to the client's worker, which sends it
        after the reply."""
        if ctx.deferred is not None:
            for m in ctx.deferred:
                self.mesh.told(ctx.id, m)
            ctx.deferred = None

    def _block(self, ctx: Context, cmd: Command, args: list[bytes]) -> None:
        """A client's blocking command for our keys: it waits here (as a client of ours
        would: woken by any write to its keys, CLIENT UNBLOCK, its timeout) and its reply
        goes in a "b" frame when it ends (other entries' replies do not wait for it)."""
        ctx.deny_blocking = False
        try:
            r = self.node.execute(ctx, cmd, args)
        finally:
            ctx.deny_blocking = True
        self._deferred(ctx)
        if type(r) is not Blocking:
            self._unit_frame({"b": ctx.id, "r": self._value(r)})
            return
        task = asyncio.get_running_loop().create_task(self._wait(ctx.id, r.awaitable))
        self.blocked[ctx.id] = task

    async def _wait(self, cid: int, awaitable: Any) -> None:
        r = await self._ended(cid, awaitable, "a blocking command")
        if r is not _CANCELLED:
            self._unit_frame({"b": cid, "r": self._value(r)})

    async def _ended(self, cid: int, awaitable: Any, what: str) -> Any:
        """The reply of client ``cid``'s command that went on after it returned here (a
        blocking one, one in steps), or ``_CANCELLED`` (the client went away)."""
        try:
            return await awaitable
        except CommandError as e:
            return Err(e.message)
        except asyncio.CancelledError:
            return _CANCELLED
        except Exception:
            log.exception("%s on a shard worker proxy failed", what)
            return Err(f"ERR internal error: {what} on a shard worker proxy")
        finally:
            if self.blocked.get(cid) is asyncio.current_task():
                del self.blocked[cid]

    def _proxy(self, e: list[Any]) -> Context:
        """The proxy context of the client of entry ``e`` (``_entry``), with its protocol
        and its user: this worker's user of that name (a user deleted meanwhile stands as a
        disabled user with no permission)."""
        cid = e[0]
        ctx = self.proxies.get(cid)
        if ctx is None:
            ctx = self.proxies[cid] = Context(self.node, cid, addr=PROXY_ADDR)
            ctx.deny_blocking = True  # what runs in steps (a cold zset, DBSIZE) runs to its end here
        ctx.proto = e[1]
        acl = self.node.acl
        if len(e) > 4 and e[4] is not None:
            ctx.user = acl.users.get(e[4]) or User(e[4])
        elif ctx.user is not acl.default:
            ctx.user = acl.default
        if len(e) > 5:
            self.node.tracking.proxy_state(ctx, e[5])
        elif ctx.tracking is not None:
            ctx.tracking = None
        return ctx

    def _now(self, e: list[Any]) -> None:
        """An entry that does not wait for the unit holding this worker: the lock protocol,
        the holder's own parts, a notification."""
        cid, ci, args = e[0], e[2], e[3]
        mesh = self.mesh
        if ci == _NOTIFY:
            self.node.pubsub.deliver(args[0], args[1], len(args) > 3)  # (an SPUBLISH a peer relayed)
            self.noted = max(self.noted, args[2])
        elif ci == _INVALIDATE:
            self.node.tracking.invalidated(cid, args[0], args[1])
            self.noted = max(self.noted, args[2])
        elif ci == _PUSH:
            target = self.node.clients.get(cid)
            if target is not None:
                self.node.tracking.send(target, args[0], None)
            self.noted = max(self.noted, args[1])
        elif ci == _MONITOR:
            self.node.deliver_monitor_line(args[0])
            self.noted = max(self.noted, args[1])
            for m in self.node.monitors:  # (written before the acknowledgement: Connection.push_now)
                conn = getattr(m.on_push, "__self__", None)
                if isinstance(conn, Connection):
                    conn.push_now()
        elif ci == _SYNC:  # (serving a sibling's blocking socket: ``Mesh.sync_owners``)
            mesh.sync_owners.add(self)
        elif ci == _UNWAIT:
            self.node.blocking.unwatch(cid)
        elif ci == _SCRIPT:
            self.node.scripting.script_load(args)
        elif ci == _WATCHED or ci == _UNWATCH:
            ctx = self._proxy(e)
            valid = ctx.watched is None or self.node.watches.still_valid(ctx)
            if ctx.watched is not None:
                self.node.watches.unwatch_all(ctx)
            if ci == _WATCHED:
                self.parts.append(self._value(int(valid)))
        elif ci == _LOCK:  # its parts run once it is granted, their replies in the grant
            self.locks.add(cid)
            mesh.acquire(cid, lambda: self._unit_frame({"g": cid, "r": [self._part(e) for e in args]}))
        elif ci == _UNLOCK:
            self.locks.discard(cid)
            mesh.release(cid)
        elif ci == _SCALL:  # a script's (or a transaction's) command, for the unit holding us
            self.parts.append(self._scall(e) if mesh.holder == args[3] else
                              self._value(Err("ERR internal error: a unit's part on a shard worker not locked for it")))
        elif ci == _ESCALATE:
            mesh.plan.escalated.add(args)
        elif ci == _BUSY:
            mesh.busy_by = None if args[0] is None else self
            self.node.scripting.busy_elsewhere = args[0]
            if args[0] is None:
                mesh.busy_over()
        else:  # _PART: only the holder sends one (it has every lock it needs)
            self.parts.append(self._part(e) if mesh.holder is not None else
                              self._value(Err("ERR internal error: a unit's part on a shard worker not locked for it")))

    def _scall(self, e: list[Any]) -> Any:
        """Run a command a script or a transaction on the worker holding this one carries
        here (``Mesh.route``), in the script's frozen time: its reply, packed (with what
        it held for subscribers, ``[reply, held]``: ``Mesh.opened``)."""
        number, argv, now = e[3][0], e[3][1], e[3][2]
        node = self.node
        cmd = self.mesh.plan.commands[number]
        if now is None:  # a transaction's command: on the client's proxy
            ctx = self._proxy(e)
            with self._holding(cmd) as out:
                r = node.execute(ctx, cmd, argv)
            ctx.deferred = None
            return self._value(r) if not out else [self._value(r), out]
        # a script's call: as this worker's Lua client (what handlers refuse from scripts,
        # XREAD BLOCK, ...), in the script's protocol, as its user, in its time snapshot
        sctx, ks = node.scripting.ctx, node.ks
        saved, wall = (sctx.proto, sctx.user), ks.now
        sctx.proto = e[1]
        sctx.user = (node.acl.users.get(e[4]) or User(e[4])) if len(e) > 4 else node.acl.default
        ks.now = lambda: now  # (no key expires meanwhile)
        node.feed_muted += 1  # (the script's worker shows its calls: Mesh.route)
        try:
            with self._holding(cmd) as out:
                r = node.execute(sctx, cmd, argv)
                if node.tracking.pending:  # (BCAST clients of the script's worker: with the reply)
                    out += [(None, cid, keys, own, prefix) for cid, prefix, keys, own in node.tracking.take_remote()]
        finally:
            node.feed_muted -= 1
            ks.now = wall
            sctx.proto, sctx.user = saved
            sctx.deferred = None
        return self._value(r) if not out else [self._value(r), out]

    def _part(self, e: list[Any]) -> Any:
        """Run a part of the unit holding this worker: its reply, packed (with what it
        held for subscribers, ``[reply, held]``: ``Mesh.opened``)."""
        ci, args = e[2], e[3]
        ctx = self._proxy(e)
        cmd = self.mesh.plan.commands[ci - _PART]
        with self._holding(cmd) as out:
            r = self.node.execute(ctx, cmd, args)
        self._deferred(ctx)
        return self._value(r) if not out else [self._value(r), out]

    def _holding(self, cmd: Command) -> contextlib.AbstractContextManager[list[Any]]:
        """What a part of a unit, or a call of the script or transaction holding this
        worker, would deliver to subscribers is held and goes back with its reply (``held``);
        the copy of a node-wide command (a PUBLISH fanned out to each worker) counts this
        worker's receivers only and is not in the slow log (the coordinator's copy delivers
        it, relays it to the peers and is logged)."""
        return held(self.node, self.mesh.plan.plan.get(id(cmd), (None,))[0] == _FANOUT)

    def drain(self) -> None:
        """Run what waited for a unit to release this worker (in arrival order)."""
        queue, mesh = self.queue, self.mesh
        while queue and mesh.holder is None:
            self._run(queue.popleft())
        self._emit()

    def _unit_frame(self, frame: dict[str, Any]) -> None:
        self.out.append(_packb(frame))
        if not self.scheduled:
            self.scheduled = True
            self.node.after_commit(self.flush_cb)

    def _emit(self) -> None:
        if self.replies:
            self.out.append(_packb(self.replies))
            self.replies = []
        if self.out and not self.scheduled:
            self.scheduled = True
            self.node.after_commit(self.flush_cb)

    @staticmethod
    def _value(r: Any) -> bytes:
        """A node-wide command's reply, as a value for the front's merge."""
        if type(r) is Blocking or r is NO_REPLY:
            r = Err("ERR internal error: a blocking node-wide command on a shard worker proxy")
        try:
            return pack(r)
        except TypeError as e:
            log.error("shard worker proxy: %s", e)
            return pack(Err("ERR internal error: a reply that cannot cross the mesh"))

    def _flush(self, committed: bool) -> None:
        self.scheduled = False
        out, self.out = self.out, []
        t = self.transport
        if t is None or t.is_closing():
            return
        if not committed:  # none of these writes may be acknowledged: the front closes its clients
            t.abort()
            return
        t.write(out[0] if len(out) == 1 else b"".join(out))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self.mesh.busy_by is self:  # (its busy script ended with it)
            self.mesh.busy_by = None
            self.node.scripting.busy_elsewhere = None
            self.mesh.busy_over()
        for cid in self.proxies:
            self.node.blocking.unwatch(cid)
        self.proxies.clear()
        for task in self.blocked.values():
            task.cancel()
        self.blocked.clear()
        self.queue.clear()  # (their front closed their clients: outcome unknown)
        self.mesh.owners.discard(self)
        self.mesh.sync_owners.discard(self)
        for unit in list(self.locks):  # its units' coordinator is gone: release what they hold
            self.mesh.release(unit)
        self.locks.clear()


class Mesh:
    """Worker ``index`` of ``shards`` (named ``name`` by the supervisor): its server for
    the siblings, and a ``Link`` to each (None while that sibling is down)."""

    def __init__(self, node: Node, shards: ShardMap, index: int, name: str):
        self.node, self.shards, self.index, self.name = node, shards, index, name
        self.plan = Plan(node, shards, index)
        self.links: list[Link | None] = [None] * len(shards)
        node.pubsub.siblings = self.notify
        # keyspace notifications for the siblings' subscribers (``notify``, ``gate``) and
        # tracking invalidations for their clients (``_invalidate``, ``_forward``): this
        # tick's (the invalidations by worker), the number of the last posted and
        # acknowledged per sibling, and the ticks whose replies wait for acknowledgements
        # (what each waits for, its callbacks)
        self.notes: list[list[Any]] = []
        self.notes_to: dict[int, list[list[Any]]] = {}
        self.note_seq = 0
        self.note_posted = [0] * len(shards)
        self.note_acked = [0] * len(shards)
        self.gated: deque[tuple[list[int], list[Callable[[bool], None]], bool]] = deque()
        node.reply_gate = self.gate
        self.records = node.records = SharedRecords(self)  # ACL users, function libraries
        self.loading = [loading(shards, j) for j in range(len(shards))]
        self.loading_err = [Err(b[1:-2].decode()) for b in self.loading]  # (the same, as a reply value)
        self.server: Any = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = False
        # units (shards/units.py): the one holding this worker, those waiting for it (and
        # what grants each), the client connections and siblings' connections whose
        # commands wait meanwhile; this worker's own units: a counter, and what each
        # awaits from a sibling (a grant, a part's reply) by (unit, sibling)
        self.holder: int | None = None
        self.lock_queue: deque[tuple[int, Callable[[], None]]] = deque()
        self.held: list[Callable[[], None]] = []
        self.owners: set[Owner] = set()
        # the owners serving a sibling's blocking socket (``SyncLink``): the sibling waits on it
        # and reads nothing else, so what they answer goes out once committed, never held by
        # ``gate`` for acknowledgements (what their calls would deliver goes back with the replies)
        self.sync_owners: set[Owner] = set()
        self.unit_seq = 0
        self.unit_waits: dict[tuple[int, int], asyncio.Future[Any]] = {}
        self.batch: list[Any] = []  # units waiting for the batch running (``submit``)
        self.parked: dict[tuple[int, int], asyncio.Future[Any]] = {}  # (client id, worker): a blocking command
        self.stepped: dict[tuple[int, int], asyncio.Future[Any]] = {}  # ... the reply of one run in steps
        self.woken: dict[int, asyncio.Future[Any]] = {}  # client id: its watches over several workers
        node.blocking.woke = self.woke
        node.blocking.unblock_rounds = self._unblock_rounds
        tracking = node.tracking
        tracking.remote, tracking.forward, tracking.on_bcast = self._invalidate, self._forward, self._bcast
        self.monitor_workers: set[int] = set()  # siblings with monitors (MONITOR)
        self.announced: list[asyncio.Future[None]] = []  # what the command running told every sibling
        # client ids growing over the node, maxclients for the node (the supervisor's file)
        path = os.path.join(os.path.dirname(os.path.abspath(node.config.data_dir)), CLIENTS_FILE)
        node.shared_clients = SharedClients(path, index, len(shards))
        node.slowlog.take_id = node.shared_clients.next_slowlog_id
        node.monitors_changed = self._monitors_changed
        node.watches.elsewhere = self._watch_changed
        self.watchers: dict[int, set[int]] = {}  # client id -> the workers where it watches keys
        node.monitor_siblings = self._monitor_line
        self.batching = False
        # scripts and transactions holding workers, their calls carried synchronously (route)
        self.session: Session | None = None
        self.scripts: list[tuple[set[int], Callable[[], Any], asyncio.Future[Any]]] = []  # (run_script)
        self.scripting_batch = False
        self.sync: list[SyncLink | None] = [None] * len(shards)
        node.scripting.route = self.route
        # the connection of the sibling whose script is busy (its clients get BUSY here too), and
        # the commands carried to it meanwhile (_forward_busy) by client id
        self.busy_by: Owner | None = None
        self.busy_waits: dict[int, asyncio.Future[Any]] = {}
        node.scripting.busy_notice = self._busy_notice
        node.scripting.forward_busy = self._forward_busy
        node.scripting.busy_fds = self._busy_fds
        node.scripting.run_ended = self._script_ended

    async def start(self) -> None:
        """Accept siblings, then connect to each (waiting until every one is up)."""
        loop = asyncio.get_running_loop()
        self.server = await loop.create_unix_server(lambda: Owner(self), mesh_address(self.name, self.index))
        await asyncio.gather(*(self._connect(j) for j in range(len(self.shards)) if j != self.index))

    async def _connect(self, j: int) -> None:
        loop = asyncio.get_running_loop()
        while not self.stopping:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:  # (uvloop connects to an abstract address only through a socket of ours)
                await loop.sock_connect(sock, mesh_address(self.name, j))
                _, link = await loop.create_unix_connection(lambda: Link(self, j), sock=sock)
            except OSError:
                sock.close()
                await asyncio.sleep(_RECONNECT_S)
                continue
            self.links[j] = link
            self._hello(link)
            log.info("shard worker %d: linked to worker %d (partitions %s)", self.index, j, self.shards.ranges[j])
            return

    # -- the lock protocol of units -------------------------------------------------------
    def acquire(self, unit: int, grant: Callable[[], None]) -> None:
        """Lock this worker for ``unit``: ``grant()`` once it holds it (in request order)."""
        if self.holder is None and not self.lock_queue:
            self.holder = unit
            grant()
        else:
            self.lock_queue.append((unit, grant))

    def release(self, unit: int) -> None:
        """``unit`` is done here (or withdrawn): what waited runs, in order, then the next
        unit waiting gets the lock."""
        if self.holder != unit:
            self.lock_queue = deque(w for w in self.lock_queue if w[0] != unit)
            return
        self.holder = None
        for owner in list(self.owners):
            owner.drain()
        held, self.held = self.held, []
        for resume in held:
            resume()  # (a resumed connection that meets a new holder is held again)
        if self.holder is None and self.lock_queue:
            unit, grant = self.lock_queue.popleft()
            self.holder = unit
            grant()

    def submit(self, unit: Unit, parts: dict[int, list[bytes]], where: list[int], ctx: Context,
               remote: set[int]) -> Any:
        """Run a unit for ``ctx``: the awaitable of its reply. Units run in batches, one at
        a time per coordinating worker, like a group commit: the units submitted while a
        batch runs make the next one (one lock per worker for all of them, one frame of
        parts per worker), in the order submitted; a unit of several phases runs alone."""
        loop = self.node.loop
        assert loop is not None
        fut: asyncio.Future[Any] = loop.create_future()
        self.batch.append((unit, parts, where, ctx, fut, remote))  # (remote: workers holding a proxy of ctx)
        if not self.batching:
            self.batching = True
            loop.call_soon(self._next_batch)
        return fut

    def _next_batch(self) -> None:
        """Start the next batch: the waiting units up to the first of several phases (or
        that one alone)."""
        batch = self.batch
        if not batch or self.stopping:
            self.batching = False
            return
        n = 1
        if batch[0][0].phases == 1:
            while n < len(batch) and batch[n][0].phases == 1:
                n += 1
        run, self.batch = batch[:n], batch[n:]
        task = asyncio.get_running_loop().create_task(self._run_batch(run))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def _run_batch(self, batch: list[Any]) -> None:
        """Lock every worker of the batch in worker order, each lock request carrying the
        batch's first-phase parts for that worker (run as soon as the lock is granted: no
        other command can see them before every part ran, since each worker stays locked
        until the end); then the later phases; answer each unit; unlock."""
        uid = self.new_unit()
        locked: list[int] = []
        try:
            live = []
            for job in batch:  # a unit needing a worker that is down: LOADING, nothing run
                down = next((j for j in job[1] if j != self.index and self.links[j] is None), None)
                if down is None:
                    live.append(job)
                else:
                    job[4].done() or job[4].set_result(self.loading_err[down])
            workers = sorted({j for job in live for j in job[1]})
            got: list[Got] = [[] for _ in live]
            notes: list[list[Any]] = [[] for _ in live]  # what each unit's parts held for subscribers
            phase = 0
            while live:
                replies = await self._phase(uid, phase, live, workers, locked, got, notes)
                if type(replies) is int:  # worker ``replies`` is down: LOADING (if nothing ran yet)
                    _answer(live, self.loading_err[replies] if phase == 0 and not locked else Err(
                        "LOADING a shard worker stopped while running the command: it may have run on some "
                        "workers only"))
                    return
                going, going_got, going_notes = [], [], []
                for job, g, r, held_ in zip(live, got, replies, notes):
                    unit, parts, where, fut = job[0], job[1], job[2], job[4]
                    g.append(r)
                    err = next((v for vs in r.values() for v in vs if type(v) is Err), None)
                    if phase == 0:
                        self._count_lookups(unit.lookups(where, g))
                    done = err if err is not None else unit.after(phase, parts, where, g)
                    if done is None and phase < unit.phases - 1:
                        going.append(job)
                        going_got.append(g)
                        going_notes.append(held_)
                    elif not fut.done():
                        self._fire(unit, where, g, held_, err)  # (before the reply: ``gate``)
                        fut.set_result(final(done))
                live, got, notes = going, going_got, going_notes
                phase += 1
        except BaseException:
            _answer(batch, Err("ERR internal error: a unit across shard workers failed"))
            raise
        finally:
            for j in locked:
                self.unlock(j, uid)
            self._next_batch()

    def _count_lookups(self, found: list[tuple[bytes, bool]]) -> None:
        """A unit's reads that its parts made muted (``Unit.lookups``): counted here, and
        keymiss fired, in the order the command reads its keys."""
        if not found:
            return
        node = self.node
        ks = node.ks
        for key, hit in found:
            if hit:
                ks.hits += 1
            else:
                ks.misses += 1
                if ks.on_miss is not None:
                    ks.on_miss(key)

    def _fire(self, unit: Unit, where: Any, got: Got, notes: list[Any], err: Any) -> None:
        """A unit's end, at its coordinator: what its parts held for subscribers (in the
        order of its phases, then of the workers), then the events of the whole command
        (``Unit.events``) if it ended without an error."""
        self.deliver_held(notes)
        if err is None and self.node.events.on:
            for cls, event, key in unit.events(where, got):
                self.node.events.fire(cls, event, key)

    def opened(self, v: Any, into: list[Any] | None = None) -> Any:
        """The value of a part's (or a carried call's) reply from a sibling (``Owner``);
        what it held for subscribers (``held``) is added to ``into``, to be delivered in
        the order of the whole, or (None) delivered now."""
        if type(v) is list:
            if into is None:
                self.deliver_held(v[1])
            else:
                into += v[1]
            return unpack(v[0])
        return unpack(v)

    def deliver_held(self, notes: list[Any]) -> None:
        """Deliver what parts held (``held``), in order: messages here, and to every
        sibling's subscribers as this worker's own notifications (``notify``, ``gate``);
        tracking invalidations (``(None, client id, keys, own)``, own None: a REDIRECT's
        target; a BCAST client's with its prefix, gathered with this tick's) to the client
        here, or to its worker as this worker's own. (A part's
        worker that sent them itself would hold its reply until this worker acknowledged
        them: a script waiting for that reply here would never read them.)"""
        node = self.node
        pubsub, tracking, n = node.pubsub, node.tracking, len(self.shards)
        for item in notes:
            if item[0] is not None:
                channel, message, shard = item
                pubsub.deliver(channel, message, bool(shard))
                self.notify(channel, message, bool(shard))
                continue
            if len(item) == 5:  # a BCAST client's, of its tick on a worker a script's call ran
                _, cid, keys, own, prefix = item
                if cid % n == self.index:  # (one message per prefix with this tick's: flush_bcast)
                    tracking.pending.setdefault((cid, prefix), []).extend(keys)
                    if own:
                        tracking.pending_own.add(cid)
                    node.request_tick()
                    continue
            else:
                _, cid, keys, own = item
            if cid % n != self.index:
                if own is None:
                    self._forward(cid, keys)
                else:
                    self._invalidate(cid, keys, own)
            elif own is None:
                target = node.clients.get(cid)
                if target is not None:
                    tracking.send(target, keys, None)
            else:
                tracking.invalidated(cid, keys, own)

    async def _phase(self, uid: int, phase: int, batch: list[Any], workers: list[int],
                     locked: list[int], got: list[Got], notes: list[list[Any]]) -> Any:
        """One phase of every unit of ``batch``: each unit's replies by worker, a list per
        worker (or the index of a worker that is or went down). The first phase takes the
        locks (``locked``), in order: every worker of the batch, with or without a part.
        What each unit's parts would deliver to subscribers is added to its ``notes``."""
        node, table = self.node, self.node.table
        steps = [job[0].step(phase, job[1], job[2], g) for job, g in zip(batch, got)]
        out: list[dict[int, list[Any]]] = [{} for _ in batch]
        waits = []
        # every worker's entries first: each carries the client's state as the command found it
        # (CLIENT CACHING's, which a read run here would end)
        made: list[tuple[int, list[tuple[int, Command, list[bytes], Context]], list[int], list[list[Any]]]] = []
        for j in workers:
            local: list[tuple[int, Command, list[bytes], Context]] = []
            ks: list[int] = []
            entries = []
            for k, job in enumerate(batch):
                ctx, remote = job[3], job[5]
                cmds = steps[k].get(j, ())
                for argv in cmds:
                    cmd = part_command(table, argv[0])
                    if j == self.index:
                        local.append((k, cmd, argv, ctx))
                    else:
                        ks.append(k)
                        entries.append(self.part_entry(ctx, cmd, argv))
                        remote.add(j)
            made.append((j, local, ks, entries))
        for j, local, ks, entries in made:
            if phase == 0:  # take j's lock (with its parts: run once granted), then the next
                granted = await self.lock(j, uid, entries)
                if granted is None:
                    return j
                locked.append(j)
                for k, v in zip(ks, granted):
                    out[k].setdefault(j, []).append(self.opened(v, notes[k]))
            elif entries:
                waits.append((j, ks, self.parts_of(j, uid, entries)))
            for k, cmd, argv, ctx in local:  # (this worker's lock held; MONITOR shows the command, not its parts)
                node.feed_muted += 1
                try:
                    with held(node) as mine:
                        r = node.execute(ctx, cmd, argv)
                finally:
                    node.feed_muted -= 1
                notes[k] += mine
                out[k].setdefault(j, []).append(await r.awaitable if type(r) is Blocking else r)  # type: ignore[misc]
        for j, ks, fut in waits:
            replies = await fut
            if replies is None:
                return j
            for k, v in zip(ks, replies):
                out[k].setdefault(j, []).append(self.opened(v, notes[k]))
        return out

    async def run_transaction(self, ctx: Context, remote: set[int], watching: set[int],
                              everywhere: bool = False) -> Any:
        """EXEC of a queue whose commands run on several workers (each on one): lock the
        workers of the queue and this one, in order; then, under the locks, EXEC's own
        checks (WATCH: a client's watches are on this worker), each worker's commands sent
        at once (in queue order) while this worker's run here, the replies in queue order.
        ``everywhere`` (a queued node-wide command, unit of several phases or script):
        every worker locked, and the commands run one after the other, each where its keys
        are (``route``: carried synchronously, as a script's calls)."""
        node, plan = self.node, self.plan
        queued = ctx.multi or []
        places: list[Any] = []  # per queued command: None (here), a worker, or a unit's split
        units: list[Any] = []  # ... and its unit (or None)
        if everywhere:
            workers = list(range(len(self.shards)))
        else:
            for c, a in queued:
                w = plan.where(ctx, c, a)
                if type(w) is BlockAt:
                    w = w.j
                elif type(w) is AskClient:
                    w = None
                places.append(w.split(a, plan.owner, partition_of, ctx) or None if isinstance(w, Unit) else w)
                units.append(w if isinstance(w, Unit) else None)
            every = range(len(self.shards))
            workers = sorted({j for p in places if p is not None
                              for j in (p[0] if type(p) is tuple else every if type(p) is Fan else (p,))}
                             | {self.index} | watching)
        uid = self.new_unit()
        locked: list[int] = []
        try:
            for j in workers:
                if j != self.index and self.links[j] is None:
                    self._end_multi(ctx)
                    return self.loading_err[j]
            for j in workers:
                if await self.lock(j, uid, []) is None:
                    self._end_multi(ctx)
                    return self.loading_err[j]
                locked.append(j)
            valid = node.watches.still_valid(ctx)
            self._end_multi(ctx)
            for j in sorted(watching):  # the watches on other workers (each checked and dropped there)
                got = await self.parts_of(j, uid, [_entry(ctx, _WATCHED, None)])
                if got is None:
                    return self.loading_err[j]
                valid = valid and bool(unpack(got[0]))
            watching.clear()
            if not valid:
                return NULL_ARRAY
            if everywhere:
                return self._exec_everywhere(ctx, queued, uid, workers, remote)
            replies: list[Any] = [None] * len(queued)
            segment: list[int] = []  # queue indices run at once (each on one worker, or a one-phase unit)
            gone = Err("LOADING a shard worker stopped while running the transaction: it may have run on some "
                       "workers only")
            for i, p in enumerate(places):
                cmd, args = queued[i]
                if p is not None and ctx.user.restricted:  # (here: dispatch checks it)
                    denied = self._recheck(ctx, cmd, args)
                    if denied is not None:  # the user's rules changed since it was queued
                        replies[i] = node.rejected(ctx, cmd, denied)
                        continue
                if type(p) is tuple and units[i].phases > 1:  # (after what came before it, alone)
                    if not await self._segment(ctx, uid, segment, places, units, queued, replies, remote):
                        return gone
                    segment = []
                    r = await self._unit_in(ctx, uid, units[i], p, remote)
                    if r is _GONE:
                        return gone
                    replies[i] = r
                else:
                    segment.append(i)
            if not await self._segment(ctx, uid, segment, places, units, queued, replies, remote):
                return gone
            if node.monitor_on:
                for c, a in queued:
                    if not c.admin:
                        node.feed_monitors(ctx, a)
            return replies
        finally:
            for j in locked:
                self.unlock(j, uid)

    async def _segment(self, ctx: Context, uid: int, idx: list[int], places: list[Any], units: list[Any],
                       queued: list[Any], replies: list[Any], remote: set[int]) -> bool:
        """Run the queued commands ``idx`` of a transaction (its workers locked): each
        worker's sent at once, in queue order, while this worker's run here; one-phase
        units merged. What each command would deliver to subscribers (its keyspace
        notifications, a PUBLISH) is held where it ran (``held``) and delivered from here
        once every reply is in, in queue order, as one process delivers a transaction's;
        a unit's lookups and events come in its place too. False if a worker went down
        meanwhile."""
        node = self.node
        notes: dict[int, list[Any]] = {i: [] for i in idx}  # what each command held for subscribers
        split: dict[int, dict[int, list[Any]]] = {}  # a unit's (or a node-wide command's) replies by worker
        sends: dict[int, list[tuple[int, list[Any]]]] = {}  # per worker: (queue index, entry)
        here: list[tuple[int, Any, list[bytes]]] = []  # (queue index, command, arguments)
        for i in idx:
            p = places[i]
            cmd, args = queued[i]
            if p is None:
                here.append((i, None, args))
            elif type(p) is Fan:  # node-wide: on every worker, merged (as ShardConnection._fan)
                split[i] = {}
                if p.via is not None:
                    cmd.calls += 1  # (Fan.here)
                here.append((i, p.via or cmd, args))
                for j in range(len(self.shards)):
                    if j != self.index:
                        sends.setdefault(j, []).append((i, self.part_entry(ctx, p.via or cmd, args)))
            elif type(p) is int:
                sends.setdefault(p, []).append((i, self.part_entry(ctx, cmd, args)))
            else:  # a unit's parts, each on its worker
                split[i] = {}
                for j, cmds in units[i].step(0, p[0], p[1], []).items():
                    for argv in cmds:
                        pc = part_command(node.table, argv[0])
                        if j == self.index:
                            here.append((i, pc, argv))
                        else:
                            sends.setdefault(j, []).append((i, self.part_entry(ctx, pc, argv)))
        waits = []
        for j, items in sends.items():
            remote.add(j)
            waits.append((j, [i for i, _ in items], self.parts_of(j, uid, [e for _, e in items])))
        with self._in_exec(ctx):
            for i, pc, argv in here:  # (in queue order)
                with held(node) as mine:
                    if pc is None:
                        replies[i] = node.dispatch(ctx, argv)
                    else:
                        split[i].setdefault(self.index, []).append(node.execute(ctx, pc, argv))
                notes[i] += mine
        for j, ks, fut in waits:
            got = await fut
            if got is None:
                return False
            for i, v in zip(ks, got):
                if i in split:
                    split[i].setdefault(j, []).append(self.opened(v, notes[i]))
                else:
                    replies[i] = self.opened(v, notes[i])
        for i in idx:
            parts = split.get(i)
            if parts is None:
                self.deliver_held(notes[i])
                continue
            p = places[i]
            if type(p) is Fan:  # (the connection's worker's reply first, then the others', as _gather)
                replies[i] = p.merge([parts[self.index][0], *(parts[j][0] for j in sorted(parts) if j != self.index)],
                                     queued[i][1])
                self.deliver_held(notes[i])
                continue
            unit, got_ = units[i], [parts]
            err = next((r for rs in parts.values() for r in rs if type(r) is Err), None)
            self._count_lookups(unit.lookups(p[1], got_))
            self._fire(unit, p[1], got_, notes[i], err)
            replies[i] = err if err is not None else final(unit.after(0, p[0], p[1], got_))
        return True

    async def _unit_in(self, ctx: Context, uid: int, unit: Unit, p: Any, remote: set[int]) -> Any:
        """A unit of several phases queued in a transaction (its workers locked with the
        transaction's), phase after phase as ``_run_batch`` runs one: its reply (``_GONE``:
        a worker went down meanwhile)."""
        node, table = self.node, self.node.table
        got: list[dict[int, list[Any]]] = []
        notes: list[Any] = []  # what its parts held for subscribers (delivered at its end: ``_fire``)
        for phase in range(unit.phases):
            steps = unit.step(phase, p[0], p[1], got)
            out: dict[int, list[Any]] = {}
            waits = []
            for j, cmds in steps.items():
                if j != self.index and cmds:
                    remote.add(j)
                    waits.append((j, self.parts_of(j, uid, [self.part_entry(ctx, part_command(table, a[0]), a)
                                                            for a in cmds])))
            with self._in_exec(ctx), held(node) as mine:
                for a in steps.get(self.index, ()):
                    out.setdefault(self.index, []).append(node.execute(ctx, part_command(table, a[0]), a))
            notes += mine
            for j, fut in waits:
                replies = await fut
                if replies is None:
                    return _GONE
                out[j] = [self.opened(v, notes) for v in replies]
            got.append(out)
            if phase == 0:
                self._count_lookups(unit.lookups(p[1], got))
            err = next((v for vs in out.values() for v in vs if type(v) is Err), None)
            done = err if err is not None else unit.after(phase, p[0], p[1], got)
            if done is not None or phase == unit.phases - 1:
                self._fire(unit, p[1], got, notes, err)
                return done if err is not None else final(done)
        return None

    @contextlib.contextmanager
    def _in_exec(self, ctx: Context) -> Iterator[None]:
        """What runs here for a transaction: as EXEC runs its queue (no blocking, the ACL
        check's MULTI context), not shown to MONITOR (the queue is, in order, at its end)."""
        node = self.node
        deny, acl_where = ctx.deny_blocking, ctx.acl_context
        ctx.deny_blocking = True
        ctx.acl_context = MULTI
        node.feed_muted += 1
        try:
            yield
        finally:
            ctx.deny_blocking = deny
            ctx.acl_context = acl_where
            node.feed_muted -= 1

    def _recheck(self, ctx: Context, cmd: Command, args: list[bytes]) -> str | None:
        """EXEC's ACL check of a queued command that runs on another worker (the
        denial's text is EXEC's: the rules changed after it was queued)."""
        where = ctx.acl_context
        ctx.acl_context = MULTI
        try:
            return self.node.acl.check(ctx, cmd, args)  # type: ignore[no-any-return]
        finally:
            ctx.acl_context = where

    # -- scripts and transactions that hold workers while they run -------------------------
    async def run_script(self, ctx: Context, cmd: Command, args: list[bytes]) -> Any:
        """A script whose declared keys are on several workers (or one remembered for
        reaching undeclared ones: every worker): lock its workers and this one, in order,
        then run it here; its calls for keys of other workers are carried there
        synchronously (``route``)."""
        if self.plan.escalated and script_key(cmd.fullname, args) in self.plan.escalated:
            workers = set(range(len(self.shards)))
        else:
            workers = self.plan.router.shards_of(cmd, args) | {self.index}
        loop = self.node.loop
        assert loop is not None
        fut: asyncio.Future[Any] = loop.create_future()
        self.scripts.append((workers, lambda: self.node.execute(ctx, cmd, args), fut))
        if not self.scripting_batch:
            self.scripting_batch = True
            loop.call_soon(self._next_scripts)
        return await fut

    def _next_scripts(self) -> None:
        """Run the scripts waiting (``run_script``) as one batch, like units (``submit``):
        one lock of each worker for all of them, then each in the order they came."""
        batch, self.scripts = self.scripts, []
        if not batch or self.stopping:
            self.scripting_batch = False
            return
        workers = sorted(set().union(*(w for w, _, _ in batch)))

        def run() -> None:
            for _, body, fut in batch:
                if not fut.done():
                    fut.set_result(body())

        async def go() -> None:
            try:
                r = await self.run_locked(workers, run)
                for _, _, fut in batch:  # (a worker down: LOADING, none ran)
                    fut.done() or fut.set_result(r)
            except BaseException:
                for _, _, fut in batch:
                    fut.done() or fut.set_result(Err("ERR internal error: a script across shard workers failed"))
                raise
            finally:
                self._next_scripts()

        task = asyncio.get_running_loop().create_task(go())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def run_locked(self, workers: list[int], body: Callable[[], Any]) -> Any:
        """Lock ``workers`` in order (a unit), run ``body()`` with them held (a
        ``Session``: ``route`` carries its commands), unlock them and what it took on its
        way; ``body``'s reply (LOADING if a worker is down before it ran)."""
        uid = self.new_unit()
        locked: list[int] = []
        try:
            for j in workers:
                if j != self.index and self.links[j] is None:
                    return self.loading_err[j]
            for j in workers:
                if await self.lock(j, uid, []) is None:
                    return self.loading_err[j]
                locked.append(j)
            loop = self.node.loop
            assert loop is not None
            ticked: asyncio.Future[bool] = loop.create_future()
            self.node.after_commit(lambda ok: ticked.done() or ticked.set_result(ok))
            await ticked  # (the replies of this tick go first: a busy script serves them BUSY then)
            session = self.session = Session(uid, set(workers), False)
            try:
                return body()
            finally:
                self.session = None
                self._release_taken(session)
        finally:
            for j in locked:
                self.unlock(j, uid)

    # -- a gateway's sessions (marekvs/gateway/kafka/rounds.py) -----------------------------
    async def open_session(self, every: bool = True) -> Session:
        """Lock every live worker, in order (as a unit), for a session whose synchronous
        calls ``route`` and ``carry`` run where their keys are, until ``close_session``;
        a worker down now is left out (its keys answer LOADING, or it is locked on the
        way if it is back). With ``every`` false, this worker only: a sibling is locked
        when a call first reaches it (``_hold``, a bounded wait, as a script's undeclared
        keys), and held until the session closes. The caller runs the session's steps
        itself."""
        uid = self.new_unit()
        locked: list[int] = []
        try:
            for j in (range(len(self.shards)) if every else (self.index,)):
                if await self.lock(j, uid, []) is not None:
                    locked.append(j)
        except BaseException:
            for j in locked:
                self.unlock(j, uid)
            raise
        session = self.session = Session(uid, set(locked), not every)
        return session

    def close_session(self, session: Session) -> None:
        if self.session is session:
            self.session = None
        taken = set(session.taken)
        self._release_taken(session)
        for j in sorted(session.locked - taken):
            self.unlock(j, session.uid)

    def carry(self, ctx: Context, j: int, calls: list[tuple[Command, list[bytes]]]) -> list[Any]:
        """Run admitted ``calls`` on worker ``j`` for the running session, in one frame
        (each reply after ``j`` committed it)."""
        if j == self.index:
            return [self.node.execute(ctx, c, a) for c, a in calls]
        err = self._hold([j])
        return [err] * len(calls) if err is not None else self._carry(ctx, j, calls)

    def route(self, ctx: Context, cmd: Command, argv: list[bytes]) -> Any:
        """Run an admitted command of a script (the Lua client's ``ctx``) or of a
        transaction holding workers (``run_transaction``'s EVERYWHERE) where its keys are,
        synchronously: here, on the worker of its keys (carried there, ``_SCALL``), as a
        unit's phases, or on every worker (merged as ``fanout`` merges). A worker the
        running unit does not hold is locked first (``_hold``)."""
        w = self.plan.where(ctx, cmd, argv)
        if w is None or w is SCRIPT or (type(w) is int and cmd.fullname in _RUNNERS):
            return self.node.execute(ctx, cmd, argv)  # (a script queued in a transaction: it runs here)
        node = self.node
        node.feed_muted += 1  # (MONITOR: the call once, from here, in the order the calls ran)
        try:
            r = self._route(ctx, cmd, argv, w)
        finally:
            node.feed_muted -= 1
        if node.monitor_on and not cmd.admin:
            node.feed_monitors(ctx, argv)
        return r

    def _route(self, ctx: Context, cmd: Command, argv: list[bytes], w: Any) -> Any:
        if w is SCAN_ACROSS:
            return self._scan_now(ctx, cmd, argv)
        if w is BLOCK_ACROSS:
            return self._block_now(ctx, cmd, argv)
        if type(w) is BlockAt:  # (a script's or a transaction's blocking command does not block)
            w = w.j
        if type(w) is int:
            err = self._hold([w])
            return err if err is not None else self._carry(ctx, w, [(cmd, argv)])[0]
        if type(w) is Fan:
            every = list(range(len(self.shards)))
            err = self._hold(every)
            if err is not None:
                return err
            with held(self.node) as mine:  # (a PUBLISH: delivered on every worker from here, its
                replies = [w.here(self.node, ctx, cmd, argv)]  # copies count their receivers)
            for j in every:
                if j != self.index:
                    replies.append(self._carry(ctx, j, [(w.via or cmd, argv)])[0])
            self.deliver_held(mine)
            for r in replies[1:]:
                if type(r) is Err and r.startswith("LOADING"):
                    return r
            return w.merge(replies, argv)
        if isinstance(w, Unit):
            return self._unit_now(ctx, w, cmd, argv)
        if type(w) is str:
            return self.node.rejected(ctx, cmd, w)
        return self.node.rejected(ctx, cmd, unsupported(cmd, "inside a script or a transaction across workers"))

    def _block_now(self, ctx: Context, cmd: Command, argv: list[bytes]) -> Any:
        """A blocking command over keys of several workers in a transaction or a script:
        as Redis runs it there, its non-blocking form (``units.blocking_call``: BLPOP as
        LMPOP ... COUNT 1, BLMOVE as LMOVE, XREAD BLOCK as XREAD, ...) as a unit, the
        reply in the blocking command's shape, or its nil when nothing was there."""
        call = blocking_call(cmd.fullname, argv, ctx)
        if call is None:  # not the command's arguments: its own error, from here
            return self.node.execute(ctx, cmd, argv)
        unit = UNITS[call.argv[0].decode().lower()]
        r = self._unit_now(ctx, unit, part_command(self.node.table, call.argv[0]), call.argv)
        if r is None or r is NULL_ARRAY or type(r) is Err or call.shape is None:
            return r
        return call.shape(r)

    def _scan_now(self, ctx: Context, cmd: Command, argv: list[bytes]) -> Any:
        """SCAN in a script or a transaction holding workers (``ShardConnection._scan``)."""
        node = self.node
        c = argv[1]
        if not c.isdigit() or len(c) > 4 or int(c) >= len(self.plan.owner):
            return node.execute(ctx, cmd, argv)  # (an invalid cursor's error, or "nothing is left")
        cmd.calls += 1
        walk = scan_walk(self.shards.ranges, self.plan.owner[int(c)], int(c), argv)
        try:
            j, pargs = next(walk)
            while True:
                if j == self.index:
                    step = node.execute(ctx, _SCAN, pargs)
                else:
                    err = self._hold([j])
                    step = err if err is not None else self._carry(ctx, j, [(_SCAN, pargs)])[0]
                j, pargs = walk.send(step)
        except StopIteration as done:
            return done.value

    def _unit_now(self, ctx: Context, unit: Unit, cmd: Command, argv: list[bytes]) -> Any:
        """A command whose keys are on several workers, its phases run synchronously on
        the workers the session holds (``_run_batch``'s steps, one unit)."""
        node = self.node
        split = unit.split(argv, self.plan.owner, partition_of, ctx)
        if split is None:  # not the command's arguments: its error, from here
            return node.execute(ctx, cmd, argv)
        parts, where = split
        got: list[Got] = []
        for phase in range(unit.phases):
            steps = unit.step(phase, parts, where, got)
            err = self._hold(sorted(steps))
            if err is not None:
                return err
            out: dict[int, list[Any]] = {}
            for j, cmds in steps.items():
                calls = [(part_command(node.table, a[0]), a) for a in cmds]
                out[j] = [node.execute(ctx, c, a) for c, a in calls] if j == self.index else self._carry(ctx, j, calls)
            got.append(out)  # type: ignore[arg-type]
            if phase == 0:
                self._count_lookups(unit.lookups(where, got))  # type: ignore[arg-type]
            err = next((v for vs in out.values() for v in vs if type(v) is Err), None)
            done = err if err is not None else unit.after(phase, parts, where, got)
            if done is not None or phase == unit.phases - 1:
                self._fire(unit, where, got, [], err)  # type: ignore[arg-type]
                return final(done)
        return None

    def _hold(self, workers: list[int]) -> Err | None:
        """Make sure the running session holds ``workers``: a script without one (its
        keys on this worker, or none) starts one; a worker it does not hold is locked now,
        waiting at most ``LOCK_WAIT_S`` (another unit may hold it and wait for this
        worker, which runs the script and answers nobody meanwhile: never a deadlock)."""
        session = self.session
        for j in workers:
            if j == self.index or (session is not None and j in session.locked):
                continue
            if session is None:
                session = self.session = Session(self.new_unit(), set(), True)
            session.strayed = True
            err = self._lock_now(j, session.uid)
            if err is not None:
                return err
            session.locked.add(j)
            session.taken.append(j)
        return None

    def _sync(self, j: int) -> SyncLink | None:
        link = self.sync[j]
        if link is None and self.links[j] is not None:
            try:
                link = self.sync[j] = SyncLink(mesh_address(self.name, j))
            except OSError:
                return None
        return link

    def _drop_sync(self, j: int) -> None:
        link = self.sync[j]
        self.sync[j] = None
        if link is not None:
            link.close()

    def _lock_now(self, j: int, uid: int) -> Err | None:
        link = self._sync(j)
        if link is None:
            return self.loading_err[j]
        try:
            link.send([[uid, 0, _LOCK, []]])
            link.wait("g", uid, LOCK_WAIT_S)
            return None
        except TimeoutError:
            try:
                link.send([[uid, 0, _UNLOCK, None]])  # (withdrawn: released if granted meanwhile)
            except OSError:
                self._drop_sync(j)
            return Err(errors.OTHER_SHARD_WORKER_BUSY)
        except OSError:
            self._drop_sync(j)
            return self.loading_err[j]

    def _carry(self, ctx: Context, j: int, calls: list[tuple[Command, list[bytes]]]) -> list[Any]:
        """Run ``calls`` on worker ``j`` (held by the session) for ``ctx``, waiting for
        their replies (each after ``j`` committed it); in a script, in its frozen time."""
        session = self.session
        assert session is not None
        uid = session.uid
        now = self.node.ks.now() if self.node.scripting.running is not None else None
        number = self.plan.number
        link = self._sync(j)
        if link is not None:
            try:
                link.send([_entry(ctx, _SCALL, [number[id(c)], a, now, uid]) for c, a in calls])
                return [self.opened(v) for v in link.wait("u", uid, SYNC_REPLY_S)]
            except (OSError, TimeoutError):
                self._drop_sync(j)
        err = Err("LOADING a shard worker stopped while running the command: it may have run on some workers only")
        return [err] * len(calls)

    def _release_taken(self, session: Session) -> None:
        for j in session.taken:
            link = self.sync[j]
            if link is not None:
                try:
                    link.send([[session.uid, 0, _UNLOCK, None]])
                except OSError:
                    self._drop_sync(j)
        session.taken = []

    # -- a busy script: BUSY on every worker ------------------------------------------------
    def _busy_notice(self, run: Any) -> None:
        """A script of this worker became busy (or, ``run`` None, ended busy): told to
        every sibling over this worker's blocking socket to it, on which the sibling then
        carries SCRIPT KILL, FUNCTION KILL, FUNCTION STATS and SHUTDOWN here
        (``_forward_busy``), read by the script's poll (``_busy_fds``) while it runs."""
        kind = None if run is None else "eval" if run.eval_mode else "function"
        for j in range(len(self.shards)):
            if j == self.index:
                continue
            link = self._sync(j)
            if link is None:
                continue
            try:
                if run is None:
                    self._busy_serve(link)  # (what came before the end: answered as not busy)
                link.send([[0, 0, _BUSY, [kind]]])
            except OSError:
                self._drop_sync(j)

    def _busy_fds(self) -> dict[int, Callable[[], None]]:
        fds: dict[int, Callable[[], None]] = {}
        for j, link in enumerate(self.sync):
            if link is not None:
                fds[link.sock.fileno()] = lambda j=j, link=link: self._busy_read(j, link)
        return fds

    def _busy_read(self, j: int, link: SyncLink) -> None:
        try:
            self._busy_serve(link)
        except OSError:
            self._drop_sync(j)

    def _busy_serve(self, link: SyncLink) -> None:
        """Answer the commands a sibling carried here for our busy script (``{"busy":
        entry}`` frames on our blocking socket to it), as our own clients are answered
        then; other frames there are stale (no call of ours waits on it meanwhile)."""
        if not select.select([link.sock], [], [], 0)[0]:
            return
        data = link.sock.recv(1 << 16)
        if not data:
            raise ConnectionResetError
        link.unpacker.feed(data)
        node = self.node
        for frame in link.unpacker:
            if type(frame) is not dict or "busy" not in frame:
                continue
            e = frame["busy"]
            ctx = Context(node, e[0], addr="shard-worker-proxy")
            ctx.proto = e[1]
            if len(e) > 4:
                ctx.user = node.acl.users.get(e[4]) or User(e[4])
            scripting = node.scripting
            r = scripting.busy_dispatch(ctx, e[3]) if scripting.running is not None else node.dispatch(ctx, e[3])
            link.sock.settimeout(SYNC_REPLY_S)
            link.sock.sendall(_packb({"k": e[0], "r": Owner._value(r)}))

    def _forward_busy(self, ctx: Context, args: list[bytes]) -> Any:
        """SCRIPT KILL, FUNCTION KILL, FUNCTION STATS or SHUTDOWN while a sibling's script
        is busy: carried there and answered as it answers them (SHUTDOWN NOSAVE ends the
        node: the client gets no reply)."""
        owner = self.busy_by
        if owner is None or owner.transport is None:
            return self.node.dispatch(ctx, args)
        loop = self.node.loop
        assert loop is not None
        fut: asyncio.Future[Any] = loop.create_future()
        self.busy_waits[ctx.id] = fut
        owner.transport.write(_packb({"busy": _entry(ctx, 0, args)}))

        async def reply() -> Any:
            try:
                got = await asyncio.wait_for(fut, SYNC_REPLY_S)
            except asyncio.TimeoutError:
                got = None
            finally:
                self.busy_waits.pop(ctx.id, None)
            if got is not None:
                return unpack(got)
            if args[0].lower() == b"shutdown":  # (the node is going: no reply)
                ctx.closing = True
                return NO_REPLY
            return self.node.dispatch(ctx, args)  # (the script ended meanwhile: as if not busy)
        return Blocking(reply())

    def busy_answer(self, frame: dict[str, Any]) -> None:
        fut = self.busy_waits.get(frame.get("k", -1))
        if fut is not None and not fut.done():
            fut.set_result(frame["r"])

    def busy_over(self) -> None:
        """The sibling's busy script ended (or the sibling went down): what was carried
        to it and not answered runs here, as if not busy."""
        for fut in list(self.busy_waits.values()):
            if not fut.done():
                fut.set_result(None)

    def _script_ended(self, run: Any) -> None:
        """A script ended: the workers it locked on its way are released; one that reached
        a worker it did not declare is remembered, on every worker, so that its next runs
        lock every worker up front (``Plan.where``'s SCRIPT) instead of waiting here."""
        if run.busy:
            self._busy_notice(None)
        session = self.session
        if session is None or not session.strayed:
            return
        session.strayed = False
        key = run.name.lower() if run.eval_mode else b"f:" + run.name
        if key not in self.plan.escalated:
            self.plan.escalated.add(key)
            for link in self.links:
                if link is not None:
                    link.post([0, 0, _ESCALATE, key])
        if session.lazy:
            self.session = None
            self._release_taken(session)

    def _exec_everywhere(self, ctx: Context, queued: list[Any], uid: int, workers: list[int],
                         remote: set[int]) -> list[Any]:
        """The commands of an EXEC holding every worker, in queue order, each admitted
        again (as ``node.dispatch`` does for a transaction run here) and run where its
        keys are (``route``)."""
        node = self.node
        remote.update(j for j in workers if j != self.index)
        session = self.session = Session(uid, set(workers), False)
        deny, acl_where = ctx.deny_blocking, ctx.acl_context
        ctx.deny_blocking = True
        ctx.acl_context = MULTI
        replies: list[Any] = []
        try:
            for _, args in queued:
                c = node.admit(ctx, args)
                replies.append(self.route(ctx, c, args) if isinstance(c, Command) else c)
        finally:
            ctx.deny_blocking = deny
            ctx.acl_context = acl_where
            self.session = None
            self._release_taken(session)
        return replies

    def _end_multi(self, ctx: Context) -> None:
        ctx.multi = None
        ctx.multi_error = False
        self.node.watches.unwatch_all(ctx)
        ctx.watch_dirty = False  # (also when it watched keys of other workers only)

    def part_entry(self, ctx: Context, cmd: Command, argv: list[bytes]) -> list[Any]:
        """The entry running ``argv`` for ``ctx`` as a part of the unit holding a worker."""
        return _entry(ctx, _PART + self.plan.number[id(cmd)], argv)

    def new_unit(self) -> int:
        self.unit_seq += 1
        return self.unit_seq << 8 | self.index

    def lock(self, j: int, unit: int, parts: list[list[Any]]) -> asyncio.Future[Any]:
        """Ask worker ``j`` for ``unit``'s lock, ``parts`` to run there once it is held:
        the future gets their replies, packed (``[]`` for this worker's own lock, whose
        parts the caller runs), or None if ``j`` is down."""
        loop = self.node.loop
        assert loop is not None
        fut: asyncio.Future[Any] = loop.create_future()
        if j == self.index:
            self.acquire(unit, lambda: fut.done() or fut.set_result([]))
            return fut
        link = self.links[j]
        if link is None:
            fut.set_result(None)
            return fut
        self.unit_waits[(unit, j)] = fut
        link.post([unit, 0, _LOCK, parts])
        return fut

    def unlock(self, j: int, unit: int) -> None:
        if j == self.index:
            self.release(unit)
            return
        link = self.links[j]
        if link is not None:  # (a sibling that went down released it with our link)
            link.post([unit, 0, _UNLOCK, None])

    def parts_of(self, j: int, unit: int, entries: list[list[Any]]) -> asyncio.Future[Any]:
        """Run parts of ``unit`` (holding ``j``) there: the future gets their replies, packed,
        in order (None if ``j`` went down)."""
        loop = self.node.loop
        assert loop is not None
        fut: asyncio.Future[Any] = loop.create_future()
        link = self.links[j]
        if link is None:
            fut.set_result(None)
            return fut
        self.unit_waits[(unit, j)] = fut
        for e in entries:
            link.post(e)
        return fut

    def unit_message(self, j: int, frame: dict[str, Any]) -> None:
        """A lock granted (``g``, with its parts' replies), parts' replies (``u``), the
        end of a client's blocking command (``b``), notifications delivered (``n``), a
        watch that ended (``w``) or a watched key changed (``d``), or a reply after its
        steps (``s``)."""
        if "n" in frame:
            if frame["n"] > self.note_acked[j]:
                self.note_acked[j] = frame["n"]
            self._release_gated()
            return
        if "b" in frame:
            parked = self.parked.pop((frame["b"], j), None)
            if parked is not None and not parked.done():
                parked.set_result(frame["r"])
            return
        if "s" in frame:  # a hopped command's reply, after its steps (Owner._steps)
            parked = self.parked.pop((frame["s"], j), None)
            if parked is None:  # (before the replies of its run: ShardConnection._later takes it)
                done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
                done.set_result(frame["r"])
                self.stepped[(frame["s"], j)] = done
            elif not parked.done():
                parked.set_result(frame["r"])
            return
        if "w" in frame:
            self._woken(frame["w"], unpack(frame["r"]))
            return
        if "d" in frame:  # a client's watched key changed there (CLIENT LIST's "d" flag)
            ws = self.watchers.get(frame["d"])
            c = self.node.clients.get(frame["d"])
            if ws is not None and j in ws and c is not None:
                c.watch_dirty = True
            return
        fut = self.unit_waits.pop((frame["g"] if "g" in frame else frame["u"], j), None)
        if fut is not None and not fut.done():
            fut.set_result(frame["r"])

    # -- blocking commands over keys of several workers ------------------------------------
    def woke(self, cid: int, value: Any) -> None:
        """A client's watch here ended (``node/blocking.py``: 1 a key changed, None or an
        error: CLIENT UNBLOCK): to its connection's worker."""
        front = cid % len(self.shards)
        if front == self.index:
            self._woken(cid, value)
            return
        for owner in self.owners:
            if cid in owner.proxies:
                owner._unit_frame({"w": cid, "r": pack(value)})
                return

    def _unblock_rounds(self, cid: int, error: bool) -> bool:
        fut = self.woken.get(cid)
        if fut is None or fut.done():
            return False
        fut.set_result(Err(errors.UNBLOCKED) if error else None)
        return True

    def _watch_changed(self, cid: int) -> None:
        """A key the proxy of client ``cid`` watches here changed: to the client's worker,
        on the link its watches came by (after the replies before it, so never after the
        reply of the EXEC or UNWATCH that ended them)."""
        for owner in self.owners:
            if cid in owner.proxies:
                owner._unit_frame({"d": cid})
                return

    def _woken(self, cid: int, value: Any) -> None:
        fut = self.woken.get(cid)
        if fut is not None and not fut.done():
            fut.set_result(value)

    def unwait(self, ctx: Context, workers: set[int]) -> None:
        """The client's blocking command ended: its watches end on ``workers``."""
        for j in workers:
            if j == self.index:
                self.node.blocking.unwatch(ctx.id)
            else:
                link = self.links[j]
                if link is not None:
                    link.post(_entry(ctx, _UNWAIT, None))

    # -- client tracking and MONITOR across workers (node/tracking.py, node/monitor.py) ------
    def _hello(self, link: Link) -> None:
        """A sibling (re)linked: what it must know of ours (BCAST clients, monitors)."""
        entries = [[c.id, 0, _BCAST, [c.tracking.prefixes, c.tracking.noloop]]
                   for c in self.node.tracking.bcast.values() if c.tracking is not None]
        if self.node.monitors:
            entries.append([self.index, 0, _MONITORS, True])
        if entries:
            link.send(entries, lambda replies: None)

    def _announce(self, entry: list[Any]) -> None:
        """Tell every sibling ``entry``; the command running (CLIENT TRACKING ... BCAST,
        MONITOR) answers once each has it (``announced``), so that no write after its
        reply misses the new BCAST client or monitor."""
        loop = self.node.loop
        assert loop is not None
        for link in self.links:
            if link is not None:
                fut: asyncio.Future[None] = loop.create_future()
                link.send([entry], lambda replies, f=fut: f.done() or f.set_result(None))
                self.announced.append(fut)

    async def gather_metrics(self, here: list[Row], timeout: float) -> list[list[Row] | None]:
        """A scrape of the node's metrics port (``server/metrics.py``): each worker's rows,
        ``here`` this one's, None for a sibling that is down or did not answer within
        ``timeout`` (a unit or a busy script holding it)."""
        out = await self._ask_siblings([self.index, 0, _METRICS, None], timeout)
        out[self.index] = here
        return out

    async def gather_part(self, ctx: Context, part: Command, args: list[bytes], timeout: float) -> list[Any]:
        """Run the part command ``part`` (``fanout.FAN_PARTS``) on every sibling for
        ``ctx`` (its proxy there) over the links: each sibling's value, None for one
        that is down, did not answer within ``timeout`` (a unit holding it) or answered an
        error; this worker's own entry None too (the caller has it). Used by the Kafka
        gateway's poll of the workers' replication figures (``gateway/kafka/replicas.py``)."""
        out = await self._ask_siblings(_entry(ctx, self.plan.number[id(part)] + _FAN, args), timeout)
        return [None if type(v) is Err else v for v in out]

    async def _ask_siblings(self, entry: list[Any], timeout: float) -> list[Any]:
        """Send ``entry`` to every live sibling and wait at most ``timeout`` seconds: each
        one's first reply value, unpacked; None for this worker and for a sibling that is
        down or did not answer in time."""
        loop = self.node.loop
        assert loop is not None
        out: list[Any] = [None] * len(self.links)
        waits: dict[int, asyncio.Future[list[bytes] | None]] = {}
        for j, link in enumerate(self.links):
            if link is not None and j != self.index:
                fut: asyncio.Future[list[bytes] | None] = loop.create_future()
                link.send([entry], lambda replies, f=fut: f.done() or f.set_result(replies))
                waits[j] = fut
        if waits:
            await asyncio.wait(waits.values(), timeout=timeout)
        for j, fut in waits.items():
            got = fut.result() if fut.done() else None
            if got:
                out[j] = unpack(got[0])
        return out

    def _post(self, j: int, entry: list[Any]) -> None:
        if j != self.index:
            link = self.links[j]
            if link is not None:
                link.post(entry)

    def _invalidate(self, cid: int, keys: list[bytes] | None, own: bool) -> None:
        held_ = self.node.pubsub.held
        if held_ is not None:  # (a part: its coordinator tells the client's worker, ``deliver_held``)
            held_.append((None, cid, keys, own))
            return
        self.note_seq += 1
        self._note_to(cid % len(self.shards), [cid, 0, _INVALIDATE, [keys, own, self.note_seq]])

    def _note_to(self, j: int, entry: list[Any]) -> None:
        """An invalidation for a client of worker ``j``: sent with this tick's notifications,
        and the tick's replies held until ``j`` delivered it (``gate``), as Redis's is in the
        client's output before the reply of the command that caused it. (So a client whose
        next command turns tracking off, or reads the key again, got the message first.)"""
        if j != self.index:
            self.notes_to.setdefault(j, []).append(entry)
            self.node.request_tick()

    def told(self, cid: int, push: Any) -> None:
        """An invalidation of client ``cid``'s own write made here (``Push``), to its worker."""
        if len(push) == 2 and push[0] == b"invalidate":
            self._invalidate(cid, push[1], True)

    def _forward(self, rid: int, keys: list[bytes] | None) -> None:
        held_ = self.node.pubsub.held
        if held_ is not None:
            held_.append((None, rid, keys, None))
            return
        self.note_seq += 1
        self._note_to(rid % len(self.shards), [rid, 0, _PUSH, [keys, self.note_seq]])

    def _bcast(self, cid: int, state: Any) -> None:
        self._announce([cid, 0, _BCAST, state])

    def _monitors_changed(self) -> None:
        self._announce([self.index, 0, _MONITORS, bool(self.node.monitors)])

    def monitors_of(self, j: int, on: bool) -> None:
        if on:
            self.monitor_workers.add(j)
        else:
            self.monitor_workers.discard(j)
        self.node.remote_monitors(bool(self.monitor_workers))

    def _monitor_line(self, status: bytes) -> None:
        """A MONITOR line of this worker, for the monitors of the siblings that have any:
        sent with the tick's notifications (``gate``), so the client's reply waits until
        every monitor has it, as on one process (a monitor that reads up to a client's
        command has it by the time that client has its reply)."""
        if self.monitor_workers:
            self.note_seq += 1
            self.notes.append([0, 0, _MONITOR, [bytes(status), self.note_seq]])
            self.node.request_tick()

    def share_script(self, body: bytes) -> None:
        """EVAL of ``body``, wherever it runs: cached here and on every sibling (Redis
        caches what EVAL ran, and EVALSHA may come through any worker). A body cached here
        was shared already (SCRIPT FLUSH empties every worker)."""
        scripting = self.node.scripting
        if libs.sha1hex(body) in scripting.scripts:
            return
        scripting.script_load(body)  # (a script that does not compile: EVAL answers why)
        for link in self.links:
            if link is not None:
                link.post([0, 0, _SCRIPT, body])

    def notify(self, channel: bytes, message: bytes, shard: bool) -> None:
        """A keyspace notification fired here, or a message a peer relayed here (``shard``:
        an SPUBLISH), to the subscribers of the other workers (a worker that is down misses
        it, as a disconnected subscriber would): sent once this tick is committed (``gate``)."""
        self.note_seq += 1
        self.notes.append([0, 0, _NOTIFY, [channel, message, self.note_seq, 1] if shard
                           else [channel, message, self.note_seq]])
        self.node.request_tick()

    def gate(self, waiting: list[Callable[[bool], None]], committed: bool) -> bool:
        """``Node.end_tick``, after the commit: send the tick's notifications to every
        sibling, and hold the tick's replies and frames (``waiting``) until each sibling has
        delivered them (its ``n`` frame), and until the ticks held before it are released.
        So notifications reach every subscriber in the order the commands ran, as on one
        process: a client's next command, wherever it runs, comes after its previous
        command's notifications are with every subscriber's connection (a notification of
        worker A and a later one of worker B would otherwise race over two sockets to the
        subscriber's worker). Costs a round trip only for the ticks that notify.
        Acknowledgements are written at once by the siblings, never held by a gate of
        theirs: no two workers wait for each other. True when it took ``waiting``."""
        notes, to = self.notes, self.notes_to
        if (notes or to or self.gated) and any(getattr(fn, "__self__", None) in self.sync_owners for fn in waiting):
            now = [fn for fn in waiting if getattr(fn, "__self__", None) in self.sync_owners]
            waiting = [fn for fn in waiting if getattr(fn, "__self__", None) not in self.sync_owners]
            for fn in now:  # (a sibling waiting on its blocking socket: ``sync_owners``)
                fn(committed)
        if notes or to:
            self.notes, self.notes_to = [], {}
            if committed:  # (a failed commit: the writes they tell of are not made)
                frame = _packb(notes) if notes else b""
                last = _seq(notes[-1]) if notes else 0
                for j, link in enumerate(self.links):
                    if link is None or link.transport is None or link.transport.is_closing():
                        continue
                    mine = to.get(j)
                    if mine:
                        link.transport.write(_packb(notes + mine))
                        self.note_posted[j] = max(last, _seq(mine[-1]))
                    elif frame:
                        link.transport.write(frame)
                        self.note_posted[j] = last
        elif not self.gated:
            return False
        self.gated.append((self.note_posted.copy(), waiting, committed))
        self._release_gated()
        return True

    def _release_gated(self) -> None:
        """Run the held ticks' callbacks, in order, while every sibling has acknowledged
        what the first held tick waits for (a sibling that went down counts as done). Not
        while notifications of a tick not yet committed wait (``notes``): a held tick's
        callbacks also write what was added to their connections and links since (a
        pipeline's later commands), which must not overtake those notifications; that
        tick's ``gate`` sends them, then releases."""
        gated, acked = self.gated, self.note_acked
        if self.notes or self.notes_to:
            return
        while gated:
            wanted, waiting, committed = gated[0]
            if any(acked[j] < w for j, w in enumerate(wanted)):
                return
            gated.popleft()
            for fn in waiting:
                fn(committed)

    def link_lost(self, link: Link) -> None:
        j = link.j
        if self.links[j] is link:
            self.links[j] = None
        self.note_acked[j] = self.note_posted[j]  # (what it did not acknowledge, it will never deliver)
        self._release_gated()
        n = len(self.shards)
        rb = self.node.tracking.remote_bcast
        for cid in [c for c in rb if c % n == j]:  # (its clients are gone with it)
            del rb[cid]
        if j in self.monitor_workers:
            self.monitors_of(j, False)
        self._drop_sync(j)
        for waits in (self.unit_waits, self.parked):  # our units and blocked clients waiting on it fail
            for key in [k for k in waits if k[1] == j]:
                fut = waits.pop(key)
                if not fut.done():
                    fut.set_result(None)
        for key in [k for k in self.stepped if k[1] == j]:
            del self.stepped[key]
        if self.stopping:
            return
        log.warning("shard worker %d: lost worker %d; its partitions %s answer LOADING until it is back",
                    self.index, j, self.shards.ranges[j])
        task = asyncio.get_running_loop().create_task(self._connect(j))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def stop(self) -> None:
        self.stopping = True
        for j in range(len(self.sync)):
            self._drop_sync(j)
        for t in list(self.tasks):
            t.cancel()
        if self.server is not None:
            self.server.close()
        for link in self.links:
            if link is not None and link.transport is not None:
                link.transport.close()


class ShardConnection(Connection):
    """A client connection of a worker: ``Connection`` with each admitted command run
    where ``Plan.where`` says (the module docstring). Its ``_run`` is ``Connection._run``
    with that one branch; a single process keeps using ``Connection`` untouched."""

    __slots__ = ("mesh", "admitted", "remote", "in_mesh", "eof", "watching", "unit_held")

    def __init__(self, server: RespServer, mesh: Mesh, adopt: Any = None):
        super().__init__(server, adopt)
        self.mesh = mesh
        self.admitted: Any = None  # the next backlog command, admitted while gathering a run
        self.remote: set[int] = set()  # siblings holding a proxy context of this client
        self.in_mesh = False  # a hop, node-wide command or unit of ours is out on the mesh
        self.eof = False  # the client shut its writing side: close once those replies went
        self.watching: set[int] = set()  # the other workers where this client WATCHes keys
        self.unit_held = False  # its commands wait for a unit holding this worker (Mesh.held)

    def eof_received(self) -> bool | None:
        """The client half-closed (``nc -N``): what it sent before still gets its replies,
        as from one process, also those coming back from other workers; then the
        connection closes. (A blocking command waiting is dropped, as Redis does.)"""
        if self.in_mesh:
            self.eof = True
            return True  # keep the transport open until they are written
        return None

    def _on_mesh(self, awaitable: Any) -> Blocking:
        """The reply of a command out on the mesh (a node-wide command, a unit): the
        connection's later commands wait for it (``in_mesh`` meanwhile)."""
        self.in_mesh = True

        async def reply() -> Any:
            try:
                return await awaitable
            finally:
                self.in_mesh = False
        return Blocking(reply())

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        self.mesh.announced.clear()  # (its BCAST tracking ended: nobody waits for that news)
        if self.ctx is not None:
            self.mesh.watchers.pop(self.ctx.id, None)
            fut = self.mesh.woken.get(self.ctx.id)
            if fut is not None and not fut.done():  # (its blocking command ends: ctx.closing)
                fut.set_result(None)
            for j in self.remote:
                link = self.mesh.links[j]
                if link is not None:
                    link.post([self.ctx.id, 0, _DROP, None])

    def busy_unhold(self) -> bool:
        """A script of this worker became busy (``server/busy.py``) while this connection
        waited for the unit lock the script holds here: it is served as while any busy
        script (BUSY, SCRIPT KILL, ...), its waiting commands first."""
        mesh = self.mesh
        session = mesh.session
        if not self.unit_held or session is None or mesh.holder != session.uid:
            return False
        self.held = self.unit_held = False
        return True

    def _run(self, cmds: list[list[bytes]], err: str | None) -> None:  # noqa: C901 - Connection._run's shape
        ctx = self.ctx
        node = self.node
        mesh = self.mesh
        if node.scripting.running is not None and self.dispatch != node.dispatch:  # (a busy script: served
            # by server/busy.py, BUSY or what is allowed)
            Connection._run(self, cmds, err)
            return
        admit, execute, where = node.admit, node.execute, mesh.plan.where
        while cmds:
            ctx.last_active = time.monotonic()
            out = self.out
            n = len(cmds)
            i = 0
            while i < n:
                args = cmds[i]
                if node.client_pause.on and node.client_pause.holds(ctx, args):  # (see Connection._run)
                    self.held = True
                    self.backlog = cmds[i:]
                    self.backlog_err = err
                    node.client_pause.hold(self._resume)
                    self._end_run(None)  # (the replies before it go now)
                    return
                if mesh.holder is not None:  # a unit holds this worker: wait for it
                    self.held = self.unit_held = True
                    self.backlog = cmds[i:]
                    self.backlog_err = err
                    mesh.held.append(self._resume)
                    self._end_run(None)
                    return
                if i and not ctx.authed and self.parser.auth_required and self.admitted is None:
                    bad = self.parser.unauthenticated_error(args)  # (see Connection._run)
                    if bad is not None:
                        err = bad
                        break
                muted = ctx.reply_mode
                r = self.admitted
                if r is not None:
                    self.admitted = None
                elif mesh.busy_by is not None:  # a sibling's script is busy: BUSY, or what is allowed
                    r = node.scripting.busy_dispatch(ctx, args)
                else:
                    r = admit(ctx, args)
                if isinstance(r, Command):
                    if r.fullname in _EVALS and len(args) > 2 and args[2].isdigit() and int(args[2]) <= len(args) - 3:
                        mesh.share_script(args[1])  # (Redis caches it after numkeys' checks)
                    w = where(ctx, r, args)
                    if self.watching and r.fullname in _ENDS_WATCH:
                        w = self._end_watch(r, w)
                    if w is None:
                        r = execute(ctx, r, args)
                        if mesh.announced and type(r) is not Blocking:
                            r = self._announced(r)
                    elif type(w) is int:
                        i = self._hop(cmds, i, w, r, muted, err)
                        if i < 0:
                            return  # the run went to worker w: the rest waits for its replies
                        continue
                    elif type(w) is Fan:
                        r = self._fan(w, r, args)
                    elif w is SHARED:
                        r = self._shared(r, args)
                    elif type(w) is AskClient:
                        r = self._ask_client(w, r, args)
                    elif type(w) is not str:
                        cmd = r
                        if type(w) is BlockAt:
                            r = self._block_at(w.j, r, args)
                        elif w is BLOCK_ACROSS:
                            r = self._block_across(r, args)
                        elif w is WAIT_ACROSS:
                            r = self._wait(r, args)
                        elif w is SCAN_ACROSS:
                            r = self._scan(r, args)
                        elif w is TRANSACTION or w is EVERYWHERE:
                            r = self._on_mesh(mesh.run_transaction(ctx, self.remote, self.watching, w is EVERYWHERE))
                        elif w is SCRIPT:
                            r = self._on_mesh(mesh.run_script(ctx, r, args))
                        elif w is WATCH:
                            r = self._watch(r, args)
                        else:
                            r = self._unit(w, r, args)
                        if node.monitor_on and type(r) is Blocking and not cmd.admin and not cmd.skip_monitor:
                            r = Blocking(self._shown(r.awaitable, args))  # (MONITOR: once it ran; a
                            # script is shown before its calls, where it runs)
                    else:
                        exec_ = r.fullname == "exec"
                        r = node.rejected(ctx, r, w)  # type: ignore[arg-type]
                        if exec_:
                            self._abort_multi()
                if muted and self._mute(muted):
                    if ctx.closing:
                        break
                    i += 1
                    continue
                t = type(r)
                if t is bytes:
                    out.append(b"$%d\r\n%s\r\n" % (len(r), r))
                elif r is OK:
                    out.append(_R_OK)
                elif t is int:
                    out.append(b":%d\r\n" % r)
                elif t is Blocking:
                    ctx.blocked = True
                    self.backlog = cmds[i + 1:]
                    self.backlog_err = err
                    node.loop.create_task(self._unblock(r))  # type: ignore[union-attr]
                    err = None
                    break
                elif r is not NO_REPLY:
                    _enc(r, ctx.proto, out)
                if ctx.deferred is not None:
                    for m in ctx.deferred:
                        _enc(m, ctx.proto, out)
                    ctx.deferred = None
                if ctx.closing:
                    break
                i += 1
            if ctx.blocked or ctx.closing or err is not None:
                break
            cmds, err = self.parser.more()
        self._end_run(err)

    def _end_run(self, err: str | None) -> None:
        if err is not None:
            self.protocol_error(err)
        if self.out and not self.scheduled:
            self.scheduled = True
            self.node.after_commit(self.flush_cb)
        if self.eof and not self.in_mesh and not self.ctx.blocked and self.transport is not None:
            self.eof = False  # (half-closed: every reply is out now; close after their flush)
            t = self.transport
            self.node.after_commit(lambda ok: t.close())

    def _announced(self, r: Any) -> Blocking:
        """The reply of a command that told every sibling something (``Mesh.announce``),
        once they all have it."""
        waits, self.mesh.announced = self.mesh.announced, []

        async def reply() -> Any:
            for fut in waits:
                await fut
            return r
        return self._on_mesh(reply())

    async def _shown(self, awaitable: Any, args: list[bytes]) -> Any:
        """A command carried out on other workers, shown to the node's monitors once it
        ran (its worker shows its clients' commands: docs/shards.md §4)."""
        try:
            return await awaitable
        finally:
            if self.node.monitor_on:
                self.node.feed_monitors(self.ctx, args)

    def _ask_client(self, w: AskClient, cmd: Command, args: list[bytes]) -> Any:
        """CLIENT TRACKING ... REDIRECT to a client of another worker: whether it is
        connected there decides, as ``node.clients`` does for one of ours."""
        link = self.mesh.links[w.j]
        node, ctx = self.node, self.ctx
        if link is None:
            return node.execute(ctx, cmd, args)  # (not connected now: its error)
        loop = node.loop
        assert loop is not None
        fut: asyncio.Future[list[bytes] | None] = loop.create_future()
        link.send([[ctx.id, ctx.proto, _HAS_CLIENT, w.rid]], lambda replies: fut.done() or fut.set_result(replies))

        async def run() -> Any:
            got = await fut
            elsewhere = node.tracking.elsewhere
            if got is not None and unpack(got[0]):
                elsewhere.add(w.rid)
            try:
                return node.execute(ctx, cmd, args)
            finally:
                elsewhere.discard(w.rid)
        return self._on_mesh(run())

    def _end_watch(self, cmd: Command, w: Any) -> Any:
        """EXEC, DISCARD, UNWATCH or RESET of a client watching keys of other workers: an
        EXEC that runs checks them under the transaction's locks; otherwise they are
        dropped there (as here)."""
        ctx = self.ctx
        if cmd.fullname == "exec" and ctx.multi is not None and not ctx.multi_error and (
                w is None or w is TRANSACTION or w is EVERYWHERE):
            return w if w is EVERYWHERE else TRANSACTION
        for j in self.watching:
            link = self.mesh.links[j]
            if link is not None:
                link.post(_entry(ctx, _UNWATCH, None))
        self.watching.clear()
        if ctx.watched is None:
            ctx.watch_dirty = False
        return w

    def _shared(self, cmd: Command, args: list[bytes]) -> Any:
        """ACL SETUSER, FUNCTION LOAD, ...: run here; the reply once every sibling holds
        the node records it wrote (``server/noderecords.py``)."""
        records = self.mesh.records
        records.acks = []
        ctx = self.ctx
        r = self.node.execute(ctx, cmd, args)
        acked = records.take_acks()
        if acked is None:
            return r
        closing = ctx.closing  # (ACL DELUSER of its own user: the reply, then the connection closes)
        ctx.closing = False

        async def reply() -> Any:
            err = await acked
            if closing:  # (nothing after it runs; the flush that sends the reply closes)
                self.backlog, self.backlog_err = [], None
                self.node.after_commit(lambda ok: setattr(ctx, "closing", True))
            return r if err is None else err
        return self._on_mesh(reply())

    def _watch(self, cmd: Command, args: list[bytes]) -> Any:
        """WATCH of keys of other workers: each worker watches its keys (for this client's
        proxy there); EXEC checks them all under its locks."""
        mesh, ctx, node = self.mesh, self.ctx, self.node
        if ctx.multi is not None:  # (WATCH inside MULTI: its error, from here)
            return node.execute(ctx, cmd, args)
        owner = mesh.plan.owner
        by_worker: dict[int, list[bytes]] = {}
        for key in args[1:]:
            by_worker.setdefault(owner[partition_of(key)], []).append(key)
        for j in by_worker:
            if j != mesh.index and mesh.links[j] is None:
                return mesh.loading_err[j]
        loop = node.loop
        assert loop is not None
        waits = []
        number = mesh.plan.number[id(cmd)]
        for j, keys in by_worker.items():
            if j == mesh.index:
                continue
            fut: asyncio.Future[list[bytes] | None] = loop.create_future()
            link = mesh.links[j]
            assert link is not None
            link.send([_entry(ctx, number, [b"WATCH", *keys])],
                      lambda replies, f=fut: f.done() or f.set_result(replies))
            waits.append(fut)
            self.remote.add(j)
            self.watching.add(j)
            mesh.watchers[ctx.id] = self.watching
        here = by_worker.get(mesh.index)
        node.feed_muted += 1  # (MONITOR shows the whole WATCH once it ran)
        try:
            r = node.execute(ctx, cmd, [b"WATCH", *here]) if here else OK
        finally:
            node.feed_muted -= 1

        async def gathered() -> Any:
            for fut in waits:
                got = await fut
                if got is None:
                    return Err("LOADING a shard worker stopped while watching keys")
            return r
        return self._on_mesh(gathered())

    def _abort_multi(self) -> None:
        """A refused EXEC ends the transaction, as an EXEC that ran would."""
        ctx = self.ctx
        ctx.multi = None
        ctx.multi_error = False
        if ctx.watched is not None:
            self.node.watches.unwatch_all(ctx)
        if self.watching:
            self._end_watch(ctx.node.table.lookup(b"unwatch"), None)  # type: ignore[arg-type]

    def _hop(self, cmds: list[list[bytes]], i: int, j: int, cmd: Command, muted: int, err: str | None) -> int:
        """Send the run of commands from ``cmds[i]`` that go to worker ``j`` (admitting
        each next one; the first that goes elsewhere waits in ``admitted``). Returns -1
        when they went (the connection waits for their replies), or the index to go on
        from when ``j`` is down (each answered LOADING at once)."""
        ctx, node, plan = self.ctx, self.node, self.mesh.plan
        number = plan.number
        entries = []
        mutes = []
        n = len(cmds)
        k = i
        shown: list[list[bytes]] | None = [] if node.monitor_on else None
        while True:
            entries.append(_entry(ctx, number[id(cmd)], cmds[k]))
            mutes.append(bool(muted and self._mute(muted)))
            if ctx.tracking is not None and cmd.readonly:
                ctx.tracking.caching = None  # (CLIENT CACHING covers one command: sent with this one)
            if shown is not None and not cmd.admin:
                if cmd.skip_monitor:  # (a script: shown before the commands it calls)
                    node.feed_monitors(ctx, cmds[k])
                else:
                    shown.append(cmds[k])
            k += 1
            if k >= n:
                break
            muted = ctx.reply_mode
            nxt = node.admit(ctx, cmds[k])
            if isinstance(nxt, Command) and plan.where(ctx, nxt, cmds[k]) == j:
                cmd = nxt
                continue
            self.admitted = nxt
            break
        link = self.mesh.links[j]
        if link is None:
            refused = self.mesh.loading[j]
            for m in mutes:
                node.count_error(refused[1:].decode())
                if not m:
                    self.out.append(refused)
            return k
        ctx.blocked = True
        self.backlog = cmds[k:]
        self.backlog_err = err
        self.remote.add(j)
        self.in_mesh = True
        link.send(entries, lambda replies: self._hopped(mutes, replies, shown, j, entries))
        return -1

    def _fan(self, fan: Fan, cmd: Command, args: list[bytes]) -> Any:
        """A node-wide command: sent to every sibling, run here, the replies merged (a
        Blocking reply: the connection's later commands wait for it, as for WAIT)."""
        mesh, ctx, node = self.mesh, self.ctx, self.node
        for j, link in enumerate(mesh.links):
            if link is None and j != mesh.index:
                return mesh.loading_err[j]
        loop = node.loop
        assert loop is not None
        entry = [_entry(ctx, fan.number, args)]
        waits: list[asyncio.Future[Any]] = []
        for j, link in enumerate(mesh.links):
            if link is not None:
                fut: asyncio.Future[Any] = loop.create_future()
                if fan.steps:  # (as a blocking command: its reply in a "b" frame when its last step ran)
                    mesh.parked[(ctx.id, j)] = fut
                    link.post(_entry(ctx, fan.number - _FAN + _BLOCKING, args))
                else:
                    link.send(entry, lambda replies, f=fut: f.done() or f.set_result(replies and replies[0]))
                waits.append(fut)
                self.remote.add(j)
        return self._on_mesh(self._gather(fan, args, fan.here(node, ctx, cmd, args), waits))

    async def _gather(self, fan: Fan, args: list[bytes], here: Any, waits: list[asyncio.Future[Any]]) -> Any:
        if type(here) is Blocking:
            here = await here.awaitable  # type: ignore[misc]
        replies = [here]
        for fut in waits:
            got = await fut
            if got is None:
                return Err("LOADING a shard worker stopped while running the command: it may have run on some "
                           "workers only")
            replies.append(unpack(got))
        return fan.merge(replies, args)

    def _later(self, mutes: list[bool], shown: list[list[bytes]] | None, j: int, rest: list[list[Any]]) -> None:
        """Wait for the reply of a command that runs in steps on worker ``j`` (a "s"
        frame), then send ``rest`` (the run's commands after it, not run there) again."""
        mesh, loop = self.mesh, self.node.loop
        assert loop is not None
        fut = mesh.stepped.pop((self.ctx.id, j), None)  # (its "s" frame may have come first)
        if fut is None:
            fut = mesh.parked[(self.ctx.id, j)] = loop.create_future()

        def done(f: asyncio.Future[Any]) -> None:
            got = f.result()
            if got is None or self.ctx.closing:  # (the worker went down: outcome unknown)
                self._hopped(mutes, None, shown)
                return
            if not mutes[0]:
                self.out.append(got)
            link = mesh.links[j]
            if not rest:
                self._hopped([], [], shown)
            elif link is None:
                self._hopped(mutes, None, shown)
            else:
                link.send(rest, lambda replies: self._hopped(mutes[1:], replies, shown, j, rest))
        fut.add_done_callback(done)

    def _scan(self, cmd: Command, args: list[bytes]) -> Any:
        """SCAN: a step on the worker its cursor names (``~scan``), and on the next ones
        while the call wants more keys (``fanout.scan_walk``), the keys put together."""
        mesh, node, ctx = self.mesh, self.node, self.ctx
        c = args[1]
        if not c.isdigit() or len(c) > 4 or int(c) >= len(mesh.plan.owner):
            return node.execute(ctx, cmd, args)  # (an invalid cursor's error, or "nothing is left")
        cmd.calls += 1  # (and shown to MONITOR once it ran; when it goes on: as a Blocking reply)
        walk = scan_walk(mesh.shards.ranges, mesh.plan.owner[int(c)], int(c), args)
        j, pargs = next(walk)
        if j == mesh.index:
            try:
                j, pargs = walk.send(node.execute(ctx, _SCAN, pargs))
            except StopIteration as done:
                if node.monitor_on:
                    node.feed_monitors(ctx, args)
                return done.value
        return self._on_mesh(self._scan_on(walk, j, pargs))

    async def _scan_on(self, walk: Any, j: int, pargs: list[bytes]) -> Any:
        """The rest of ``_scan``: each step where ``walk`` says, its reply sent back to it."""
        mesh, node, ctx = self.mesh, self.node, self.ctx
        number = mesh.plan.number[id(_SCAN)] + _FAN
        loop = node.loop
        assert loop is not None
        try:
            while True:
                if j == mesh.index:
                    step = node.execute(ctx, _SCAN, pargs)
                else:
                    link = mesh.links[j]
                    if link is None:
                        return mesh.loading_err[j]
                    fut: asyncio.Future[Any] = loop.create_future()
                    link.send([_entry(ctx, number, pargs)], lambda rs, f=fut: f.done() or f.set_result(rs and rs[0]))
                    self.remote.add(j)
                    got = await fut
                    if got is None:
                        return mesh.loading_err[j]
                    step = unpack(got)
                j, pargs = walk.send(step)
        except StopIteration as done:
            return done.value

    def _wait(self, cmd: Command, args: list[bytes]) -> Any:
        """WAIT numreplicas timeout: the client's writes are in the logs of the workers
        that ran them (this one's, and those of the siblings holding a proxy of it), each
        shipped to a peer on links of its own; a peer counts once every one of those
        logs' acks reached the client's last write there. The count: the lowest of this
        worker's (WAIT's own handler, on the client's context) and each such sibling's
        (a ``WAIT 0 0`` on the client's proxy there, which answers at once), asked once
        this worker's own count reached numreplicas (or its timeout passed), then again
        every ``_WAIT_POLL_S`` until the lowest reaches it or the timeout passes."""
        node, ctx, mesh = self.node, self.ctx, self.mesh
        here = node.execute(ctx, cmd, args)  # this worker's count (it waits for its own acks)
        if type(here) is not int and type(here) is not Blocking:
            return here  # the arguments' error
        need, timeout = int(args[1]), int(args[2])  # (parsed by the handler above)
        loop = node.loop
        assert loop is not None
        number = mesh.plan.number[id(cmd)]
        deadline = loop.time() + timeout / 1000 if timeout else None

        async def ask(j: int) -> int:
            link = mesh.links[j]
            if link is None:
                return 0  # (a worker restarting: what it wrote is not known to be acknowledged)
            fut: asyncio.Future[list[bytes] | None] = loop.create_future()
            link.send([_entry(ctx, number, [b"WAIT", b"0", b"0"])], lambda r, f=fut: f.done() or f.set_result(r))
            got = await fut
            if not got or not got[0].startswith(b":"):
                return 0
            return int(got[0][1:-2])

        async def waiting() -> int:
            if type(here) is Blocking:
                await here.awaitable  # type: ignore[misc]
            while True:
                n = node.replication.acked_count(ctx.last_write_seq)
                for j in sorted(self.remote):
                    if n <= 0:
                        break
                    n = min(n, await ask(j))
                if n >= need or (deadline is not None and loop.time() >= deadline):
                    return n
                await asyncio.sleep(_WAIT_POLL_S)
        return self._on_mesh(waiting())

    def _block_at(self, j: int, cmd: Command, args: list[bytes]) -> Any:
        """A blocking command whose keys are on worker ``j``: it waits there; this
        connection holds its later commands until the reply comes (a Blocking reply)."""
        mesh, ctx = self.mesh, self.ctx
        link = mesh.links[j]
        if link is None:
            return mesh.loading_err[j]
        loop = self.node.loop
        assert loop is not None
        fut: asyncio.Future[Any] = loop.create_future()
        mesh.parked[(ctx.id, j)] = fut
        self.remote.add(j)
        link.post(_entry(ctx, _BLOCKING + mesh.plan.number[id(cmd)], args))
        return Blocking(self._parked(fut))

    def _block_across(self, cmd: Command, args: list[bytes]) -> Any:
        """A blocking command whose keys are on several workers: rounds of its
        non-blocking form as a unit, each ending, when it found nothing, with the client's
        watches set on every worker of its keys (``units._Round``); the first change of a
        watched key starts the next round (the module docstring)."""
        call = blocking_call(cmd.fullname, args, self.ctx)
        if call is None:  # not the command's arguments: its own error, from here
            return self.node.execute(self.ctx, cmd, args)
        self.ctx.trying = True  # (until its first round ran: then it waits, or answered)
        return Blocking(self._rounds(call))

    async def _rounds(self, call: BlockCall) -> Any:
        mesh, ctx = self.mesh, self.ctx
        loop = self.node.loop
        assert loop is not None
        deadline = loop.time() + call.timeout if call.timeout > 0 else None
        watching: set[int] = set()
        again = False
        try:
            while not ctx.closing:
                woken = mesh.woken[ctx.id] = loop.create_future()
                made = call.round(again, mesh.plan.owner, partition_of, ctx)
                if made is None:
                    return Err("ERR internal error: a blocking command across shard workers")
                r = await mesh.submit(made[0], made[1], made[2], ctx, self.remote)
                ctx.trying = False
                if type(r) is not Waiting:
                    return call.reply(r)
                watching.update(r.workers)
                if call.ids is not None:
                    for i, v in r.ids.items():
                        call.ids[i] = v
                left = None if deadline is None else deadline - loop.time()
                if left is not None and left <= 0:
                    return call.nil
                try:
                    v = await asyncio.wait_for(woken, left)
                except asyncio.TimeoutError:
                    return call.nil
                if v is None or type(v) is Err:  # CLIENT UNBLOCK (or the client went away)
                    return NO_REPLY if ctx.closing else (call.nil if v is None else v)
                again = True
            return NO_REPLY
        finally:
            ctx.trying = False
            if mesh.woken.get(ctx.id) is not None:
                del mesh.woken[ctx.id]
            mesh.unwait(ctx, watching)

    async def _parked(self, fut: asyncio.Future[Any]) -> Any:
        got = await fut
        if got is None:  # the worker went down: the command's outcome is unknown
            self._close_now()
            return NO_REPLY
        return unpack(got)

    def _unit(self, unit: Unit, cmd: Command, args: list[bytes]) -> Any:
        """A command whose keys are on several workers, as one unit (``shards/units.py``):
        each worker's part runs while every worker of the unit is locked for it."""
        ctx = self.ctx
        split = unit.split(args, self.mesh.plan.owner, partition_of, ctx)
        if split is None:  # not the command's arguments: its error, from here
            return self.node.execute(ctx, cmd, args)
        done = self.mesh.submit(unit, split[0], split[1], ctx, self.remote)
        if ctx.tracking is None or not cmd.readonly:
            return self._on_mesh(done)

        async def read() -> Any:
            try:
                return await done
            finally:
                if ctx.tracking is not None:
                    ctx.tracking.caching = None  # (CLIENT CACHING covered this read, on every worker)
        return self._on_mesh(read())

    def _hopped(self, mutes: list[bool], replies: list[bytes] | None, shown: list[list[bytes]] | None,
                j: int = -1, entries: list[list[Any]] | None = None) -> None:
        """The replies of a run sent by ``_hop``: spliced in order (then what waited for
        them: invalidations of the client's own writes), the commands shown to the
        monitors, then the backlog runs. A command of the run that runs in steps there
        (``Owner._steps``) is answered later: the commands after it are sent again once
        its reply came."""
        ctx = self.ctx
        self.in_mesh = False
        if replies is None:  # the owner died (or a commit failed): their outcome is unknown
            self.admitted = None
            self._close_now()
            return
        if ctx.closing:
            ctx.blocked = False
            return
        out = self.out
        for k, (m, b) in enumerate(zip(mutes, replies)):
            if not b and entries is not None:  # (_LATER: no reply is empty)
                self.in_mesh = True
                self._later(mutes[k:], shown, j, entries[k + 1:])
                return
            if not m:
                out.append(b)
        ctx.blocked = False
        self.emit_deferred()
        if shown and self.node.monitor_on:
            for args in shown:
                self.node.feed_monitors(ctx, args)
        cmds, err = self.backlog, self.backlog_err
        self.backlog, self.backlog_err = [], None
        self._run(cmds, err)
