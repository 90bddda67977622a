"""Multi-key commands whose keys are on several shard workers (docs/shards.md §3; issue 33,
slice 4): each becomes one **unit**, its parts run on the workers owning the keys while
every one of those workers is locked for the unit, so no other command sees a state
between two parts (the mesh's lock protocol is in ``server/mesh.py``).

A ``Unit`` says how a command splits (``split``: the workers it needs, and what each
phase needs of the arguments), which commands each worker runs in each phase (``step``,
from the replies of the phases before), and what the reply is (``after``: None to go on
to the next phase, else the reply; an error reply of any part ends the unit with it):

- MSET: ``MSET`` of each worker's pairs; OK.
- MSETNX: ``EXISTS`` of each worker's keys, then (none existing) ``MSET`` of its pairs;
  1, else 0 with nothing written.
- MGET: ``MGET`` of each worker's keys; the values put back in the order asked.
- DEL, UNLINK, EXISTS, TOUCH: the command on each worker's keys; the counts summed
  (EXISTS counts a key named twice twice, as Redis does: each part keeps its repeats).
- RENAME, RENAMENX, COPY: ``~export`` of the source (its record and live element records)
  and ``EXISTS`` of the destination, then ``~adopt`` at the destination and, for a rename,
  ``DEL`` of the source. The destination's records are those one process writes
  (``collections.adopt_records``: each element at its own position or id, the TTLs kept),
  not a DUMP's rebuilt value: a list's positions decide how a peer's concurrent push
  merges with it (the history test on three nodes of two workers found a COPY whose
  RESTOREd positions lost two elements to such a push). The parts run muted (``~mute``: no event, no keyspace hit or
  miss; COPY's read of its source counts and fires keymiss, as Redis's lookupKeyRead) and
  the coordinator fires the command's own events (``Unit.events``): ``new`` (also for a
  destination that existed: Redis deletes it, then adds), ``rename_from`` and
  ``rename_to``, or ``copy_to``.
- LMOVE, RPOPLPUSH, SMOVE: ``TYPE`` of both keys, muted (a missing source: nil or 0; a key of
  another type: WRONGTYPE, nothing moved), then the pop or ``SREM`` at the source, then
  the push or ``SADD`` at the destination with what moved (LMOVE's muted: Redis fires
  the push's event before the pop's, so the coordinator fires them).

- Commands over the values of keys (``_Gather``): SUNION, SINTER, SDIFF, SINTERCARD,
  ZUNION, ZINTER, ZDIFF, ZINTERCARD and their STORE forms, PFCOUNT, PFMERGE, BITOP, LCS.
  Each key is read on its worker by a *part command* (``PART_COMMANDS``: ``~smembers``,
  ``~zread``, ``~sread``, ``~hread``, which answer a
  key of another type with a mark, not an error, so the command's own error wins in its
  own key order), then the computing code of the single-process command (factored out of
  the commands layer: ``zsets.setop_result``, ``keyspace/bitmaps.bitop``,
  ``strings.lcs_of``, the registers' maximum and ``keyspace/hll.estimate``) makes the
  reply here, and a STORE's result is written at the destination's worker by a part
  command that writes as the command does, with its events (``~sstore``: ``sunionstore``
  and the others, ``~zstore``: ``zunionstore`` and the others; ``~bstore``: ``set`` or
  ``del``; ``~hmerge``: PFMERGE's registers raised, ``pfadd``).
- ZRANGESTORE, GEOSEARCHSTORE, GEORADIUS[BYMEMBER] ... STORE|STOREDIST (``_Capture``):
  the command runs whole at its source's worker with its write kept, not made
  (``~capture``, ``zsets.stores_captured``), then ``~zstore`` writes it at the
  destination's.
- LMPOP, ZMPOP (``_Mpop``): the TYPE of every key, then the command on the first key of
  its type, at its worker (WRONGTYPE for a key of another type before it).
- XREAD without BLOCK (``_Xread``): each worker reads its streams, the replies merge in
  the order the keys were given (an id that does not parse: the TYPE of the keys before
  it decides between WRONGTYPE and the id's error, as Redis checks them key by key).
- XREADGROUP that does not block (``_XreadGroup``): each worker checks its streams as
  Redis does before reading any (``~xgcheck``: type, group, id; the first key in the
  order given that fails answers its error, nothing read), then reads them with the
  group; the replies merge in the order given.
- SORT and SORT_RO with BY or GET patterns (their keys may be on any worker: every worker
  is locked), or a STORE whose destination is on another worker (``_Sort``): the pattern
  keys every element may name, at the sorted key's worker (``~sortkeys``); their values,
  each worker reading its own (``~pread``); the command at the sorted key's worker with
  those values (``~sortrun``), and a STORE's list written at the destination's worker
  (``~lstore``, its ``sortstore`` event).
- Blocking commands over keys of several workers (``blocking_call``, ``_Round``): each
  round is its non-blocking form as a unit (BLPOP/BRPOP: LMPOP ... COUNT 1, BZPOPMIN/MAX:
  ZMPOP, BLMPOP/BZMPOP: LMPOP/ZMPOP, BLMOVE/BRPOPLPUSH: LMOVE/RPOPLPUSH, XREAD BLOCK:
  XREAD, XREADGROUP BLOCK: XREADGROUP), and when that found nothing, a last phase
  setting the client's watches (``~wait``) on the workers of its keys under the same
  locks (the mesh's module docstring has the rounds).

Keyspace events and keyspace hits and misses are the whole command's, in the order one
process has them (``Unit.events``, ``Unit.lookups``: the parts that would fire or count
otherwise run muted, ``~mute``, and the coordinator fires and counts; with notifications
on, MSET, DEL, UNLINK, EXISTS, TOUCH and MGET run key by key, ``KeyByKey``, for the
order of the keys). Command statistics are the parts': a two-worker ZUNIONSTORE counts
``~zread`` and ``~zstore`` calls (which no client sees), not a ``zunionstore`` call;
LMPOP counts TYPE and LMPOP calls.

``split`` returns None where the arguments are not the command's (MSET with a key and no
value, COPY with an option it does not know): the connection's worker runs the command
whole, and it answers Redis's error.
"""

from __future__ import annotations

from typing import Any, Sequence

from marekvs.commands import args as A
from marekvs.commands import bitmaps, errors, lists, sets, sort, streams, strings, zsets
from marekvs.commands.errors import CommandError
from marekvs.commands.reply import NULL_ARRAY, OK, Err, Map, SetReply
from marekvs.commands.table import Command
from marekvs.core import keys as K
from marekvs.keyspace import bitmaps as kbit
from marekvs.keyspace import collections as kcoll
from marekvs.keyspace import hll as khll
from marekvs.keyspace import sets as kset
from marekvs.keyspace import strings as kstr
from marekvs.keyspace import zsets as Z
from marekvs.keyspace.status import KeyspaceError, WrongType

Parts = dict[int, Any]  # the workers a unit locks, each with what its parts need
Steps = dict[int, list[list[bytes]]]  # one phase: the commands each worker runs, in order
Got = list[dict[int, list[Any]]]  # the replies of each phase so far, by worker


class KeyByKey:
    """The ``where`` of a unit run key by key (``Unit.by_key``): the worker of each key
    and the keys (pairs: the keys and values), in the order given."""

    __slots__ = ("at", "args")

    def __init__(self, at: list[int], args: list[bytes]):
        self.at, self.args = at, args

    def in_order(self, got: dict[int, list[Any]], per_key: int) -> list[list[Any]]:
        """The replies of each key's ``per_key`` commands, in the order of the keys."""
        seen = dict.fromkeys(got, 0)
        out = []
        for j in self.at:
            i = seen[j]
            out.append(got[j][i:i + per_key])
            seen[j] = i + per_key
        return out


class Unit:
    """How one command runs as a unit across workers (the module docstring)."""

    name: str
    pairs = False  # its arguments are key value pairs
    phases = 1
    # with keyspace events on, the commands each key runs, muted (``KeyByKey``), so that
    # the coordinator fires the events in the order of the keys, as one process does: each
    # (command, whether it takes the key's value too); None: the parts fire their own (a
    # worker's come in that worker's turn)
    by_key: tuple[tuple[bytes, bool], ...] | None = None

    def split(self, args: list[bytes], owner: Sequence[int], pid_of: Any, ctx: Any = None
              ) -> tuple[Parts, Any] | None:
        """(each worker's arguments, the worker of each key in the order given); ``ctx``:
        the client's context (its protocol and limits, for units that shape the reply)."""
        step = 2 if self.pairs else 1
        if len(args) < 2 or (self.pairs and len(args) % 2 == 0):
            return None
        parts: Parts = {}
        where: list[int] = []
        for i in range(1, len(args), step):
            j = owner[pid_of(args[i])]
            where.append(j)
            part = parts.get(j)
            if part is None:
                part = parts[j] = []
            part.extend(args[i:i + step])
        if self.by_key is not None and ctx is not None and ctx.node.events.on:
            return parts, KeyByKey(where, args[1:])
        return parts, where

    def would_block(self, args: list[bytes]) -> bool:
        """Whether this call of a blocking command blocks (no unit carries one yet)."""
        return True

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        if type(where) is KeyByKey:
            return self._key_by_key(where)
        return {j: [[self.name.upper().encode(), *own]] for j, own in parts.items()}

    def _key_by_key(self, where: KeyByKey) -> Steps:
        steps: Steps = {}
        n = 2 if self.pairs else 1
        assert self.by_key is not None
        for i, j in enumerate(where.at):
            own = where.args[i * n:i * n + n]
            steps.setdefault(j, []).extend([b"~mute", c, *(own if whole else own[:1])] for c, whole in self.by_key)
        return steps

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        if type(where) is KeyByKey:
            return self.merge_by_key(where.in_order(got[phase], len(self.by_key or ())))
        return self.merge({j: r[0] for j, r in got[phase].items()}, where)

    def merge_by_key(self, replies: list[list[Any]]) -> Any:
        """The reply from each key's replies to its ``by_key`` commands, in key order."""
        raise NotImplementedError

    def lookups(self, where: Any, got: Got) -> list[tuple[bytes, bool]]:
        """The keys the command looks up as Redis's lookupKeyRead, in order, each with
        whether it was found: the coordinator counts them (keyspace_hits, keyspace_misses)
        and fires keymiss, where the parts that read them ran muted. Also for a unit that
        ended with an error (the keys read before it). None by default."""
        return []

    def events(self, where: Any, got: Got) -> list[tuple[str, bytes, bytes]]:
        """The keyspace events (class, event, key) the coordinator fires, in order, once
        the unit ended without an error: those of the whole command, where its parts ran
        muted (``~mute``). None by default: the parts fire their own."""
        return []

    def merge(self, replies: dict[int, Any], where: Any) -> Any:
        raise NotImplementedError


class _Sum(Unit):
    """DEL, UNLINK (each deleted key fires ``del``), EXISTS, TOUCH (each key is looked up:
    a hit, or a miss and keymiss)."""

    def __init__(self, name: str):
        self.name = name
        self.by_key = ((name.upper().encode(), True),)
        self.reads = name in ("exists", "touch")

    def merge(self, replies: dict[int, Any], where: Any) -> Any:
        return sum(replies.values())

    def merge_by_key(self, replies: list[list[Any]]) -> Any:
        return sum(r[0] for r in replies)

    def events(self, where: Any, got: Got) -> list[tuple[str, bytes, bytes]]:
        if type(where) is not KeyByKey or self.reads:
            return []
        return [("g", b"del", k) for k, r in zip(where.args, where.in_order(got[0], 1)) if r[0]]

    def lookups(self, where: Any, got: Got) -> list[tuple[bytes, bool]]:
        if type(where) is not KeyByKey or not self.reads:
            return []
        return [(k, bool(r[0])) for k, r in zip(where.args, where.in_order(got[0], 1))]


class _Mget(Unit):
    name = "mget"
    by_key = ((b"MGET", True), (b"EXISTS", True))  # (EXISTS: a key of another type is found, MGET's nil)

    def merge_by_key(self, replies: list[list[Any]]) -> Any:
        return [r[0][0] for r in replies]

    def lookups(self, where: Any, got: Got) -> list[tuple[bytes, bool]]:
        if type(where) is not KeyByKey:
            return []
        return [(k, bool(r[1])) for k, r in zip(where.args, where.in_order(got[0], 2))]

    def merge(self, replies: dict[int, Any], where: Any) -> Any:
        at = dict.fromkeys(replies, 0)
        out = []
        for j in where:
            out.append(replies[j][at[j]])
            at[j] += 1
        return out


class _Mset(Unit):
    name = "mset"
    pairs = True
    by_key = ((b"EXISTS", False), (b"SET", True))

    def merge(self, replies: dict[int, Any], where: Any) -> Any:
        return OK

    def merge_by_key(self, replies: list[list[Any]]) -> Any:
        return OK

    def events(self, where: Any, got: Got) -> list[tuple[str, bytes, bytes]]:
        return _set_events(where, got[0])


def _set_events(where: Any, replies: dict[int, list[Any]]) -> list[tuple[str, bytes, bytes]]:
    """MSET's and MSETNX's events from their key-by-key writes' ``replies``: per key in
    order, ``new`` if it did not exist, then ``set``."""
    if type(where) is not KeyByKey:
        return []
    out: list[tuple[str, bytes, bytes]] = []
    for k, r in zip(where.args[0::2], where.in_order(replies, 2)):
        if not r[0]:
            out.append(("n", b"new", k))
        out.append(("$", b"set", k))
    return out


class _Msetnx(Unit):
    """EXISTS everywhere, then MSET everywhere if none exists."""

    name = "msetnx"
    pairs = True
    phases = 2
    by_key = _Mset.by_key  # (its second phase: MSET's, key by key)

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        if phase == 0:  # (Redis looks them up for writing: no keymiss, no hit or miss)
            return {j: [[b"~mute", b"EXISTS", *own[0::2]]] for j, own in parts.items()}
        if type(where) is KeyByKey:
            return self._key_by_key(where)
        return {j: [[b"MSET", *own]] for j, own in parts.items()}

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        if phase == 0:
            return 0 if sum(r[0] for r in got[0].values()) else None
        return 1

    def events(self, where: Any, got: Got) -> list[tuple[str, bytes, bytes]]:
        return _set_events(where, got[1]) if len(got) == 2 else []


class _TwoKeys(Unit):
    """A command from a source key to a destination key on another worker: ``where`` is
    (source worker, destination worker, the arguments)."""

    def split(self, args: list[bytes], owner: Sequence[int], pid_of: Any, ctx: Any = None
              ) -> tuple[Parts, Any] | None:
        if len(args) < 3 or not self.valid(args):
            return None
        js, jd = owner[pid_of(args[1])], owner[pid_of(args[2])]
        return {js: None, jd: None}, (js, jd, args)

    def valid(self, args: list[bytes]) -> bool:
        return True


class _Move(_TwoKeys):
    """RENAME, RENAMENX, COPY: the source's records read where it is (``~export``), and the
    destination's written where it is (``~adopt``), as one process writes them."""

    phases = 2

    def __init__(self, name: str):
        self.name = name
        self.nx = name == "renamenx"
        self.copy = name == "copy"

    def valid(self, args: list[bytes]) -> bool:
        if not self.copy:
            return len(args) == 3
        rest = [a.lower() for a in args[3:]]
        i = 0
        while i < len(rest):  # REPLACE, DB 0 (any other option: the command's own error)
            if rest[i] == b"replace":
                i += 1
            elif rest[i] == b"db" and i + 1 < len(rest) and rest[i + 1] == b"0":
                i += 2
            else:
                return False
        return True

    def _replace(self, args: list[bytes]) -> bool:
        return self.copy and b"replace" in (a.lower() for a in args[3:])

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        js, jd, args = where
        src, dst = args[1], args[2]
        if phase == 0:  # (COPY reads its source as Redis's lookupKeyRead: a hit, or a miss and keymiss)
            return {js: [[b"~export", src] if self.copy else [b"~mute", b"~export", src]],
                    jd: [[b"~mute", b"EXISTS", dst]]}
        # the records one process writes (commands/keys.py), each element at its own
        # position or id: a DUMP and RESTORE would rebuild a list from its center, and a
        # peer's concurrent push would then merge with other positions than one process's
        steps = {jd: [[b"~mute", b"~adopt", dst, *got[0][js][0]]]}
        if not self.copy:
            steps[js] = [[b"~mute", b"DEL", src]]
        return steps

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        js, jd, args = where
        if phase == 0:
            if got[0][js][0] is None:  # no source
                return 0 if self.copy else Err(errors.NO_SUCH_KEY)
            if got[0][jd][0] and (self.nx or (self.copy and not self._replace(args))):  # the destination exists
                return 0
            return None
        return OK if self.name == "rename" else 1

    def events(self, where: Any, got: Got) -> list[tuple[str, bytes, bytes]]:
        js, jd, args = where  # as the single process fires them (commands/keys.py)
        if len(got) < 2:  # (nothing moved)
            return []
        new = ("n", b"new", args[2])  # (a destination that existed too: Redis deletes it, then adds)
        if self.copy:
            return [new, ("g", b"copy_to", args[2])]
        return [new, ("g", b"rename_from", args[1]), ("g", b"rename_to", args[2])]


def _wrong_types(got: Got, js: int, jd: int, kind: bytes) -> Any:
    """After the TYPE of both keys: the reply when nothing moves (None: go on)."""
    src_type, dst_type = got[0][js][0], got[0][jd][0]
    if src_type == b"none":
        return Missing
    if src_type != kind or dst_type not in (b"none", kind):
        return Err(errors.WRONGTYPE)
    return None


Missing = object()  # (the source does not exist: the command's own reply for that)


class _ListMove(_TwoKeys):
    """LMOVE source destination LEFT|RIGHT LEFT|RIGHT, RPOPLPUSH source destination."""

    phases = 3

    def __init__(self, name: str):
        self.name = name

    def valid(self, args: list[bytes]) -> bool:
        if self.name == "rpoplpush":
            return len(args) == 3
        return len(args) == 5 and all(a.lower() in (b"left", b"right") for a in args[3:5])

    def _ends(self, args: list[bytes]) -> tuple[bytes, bytes]:
        if self.name == "rpoplpush":
            return b"RPOP", b"LPUSH"
        return (b"LPOP" if args[3].lower() == b"left" else b"RPOP",
                b"LPUSH" if args[4].lower() == b"left" else b"RPUSH")

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        js, jd, args = where
        if phase == 0:
            return {js: [[b"~mute", b"TYPE", args[1]]], jd: [[b"~mute", b"TYPE", args[2]]]}
        pop, push = self._ends(args)
        if phase == 1:  # (muted: Redis fires the push's events first, ``events``)
            return {js: [[b"~mute", pop, args[1]], [b"~mute", b"EXISTS", args[1]]]}
        return {jd: [[b"~mute", push, args[2], got[1][js][0]]]}

    def events(self, where: Any, got: Got) -> list[tuple[str, bytes, bytes]]:
        """As Redis's LMOVE: ``new`` for a destination it creates, the push, the pop, and
        ``del`` for a source it emptied."""
        js, jd, args = where
        if len(got) < 3:
            return []
        pop, push = self._ends(args)
        out = [("n", b"new", args[2])] if got[0][jd][0] == b"none" else []
        out += [("l", push.lower(), args[2]), ("l", pop.lower(), args[1])]
        if not got[1][js][1]:
            out.append(("g", b"del", args[1]))
        return out

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        js, jd, _ = where
        if phase == 0:
            r = _wrong_types(got, js, jd, b"list")
            return _NIL if r is Missing else r
        if phase == 1:
            return _NIL if got[1][js][0] is None else None
        return got[1][js][0]


_NIL = object()  # LMOVE's reply when nothing moved: a null bulk string (None would mean "go on")


class _Smove(_TwoKeys):
    """SMOVE source destination member."""

    name = "smove"
    phases = 3

    def valid(self, args: list[bytes]) -> bool:
        return len(args) == 4

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        js, jd, args = where
        if phase == 0:
            return {js: [[b"~mute", b"TYPE", args[1]]], jd: [[b"~mute", b"TYPE", args[2]]]}
        if phase == 1:
            return {js: [[b"SREM", args[1], args[3]]]}
        return {jd: [[b"SADD", args[2], args[3]]]}

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        js, jd, _ = where
        if phase == 0:
            r = _wrong_types(got, js, jd, b"set")
            return 0 if r is Missing else r
        if phase == 1:
            return 0 if got[1][js][0] == 0 else None
        return 1


# -- part commands: what a unit runs on a worker that no client command does ------------------

WRONG = 0  # a ``~sread``/``~hread`` of a key of another type (Redis's error depends on the command)
INVALID_HLL = 1  # a ``~hread`` of a string (not a HyperLogLog here)


def _zread(ctx: Any, args: list[bytes]) -> Any:
    """``~zread key``: the members and scores of the zset or set at ``key`` (a set's at 1,
    a missing key's none), as ZUNION & co. read their sources; WRONGTYPE for another type."""
    z, now = Z.state(ctx.ks), ctx.ks.now()
    found = Z.lookup_setlike(z, args[1], now)
    return {} if found is None else dict(Z.members_of(z, found[0], found[1], now))


def _sread(ctx: Any, args: list[bytes]) -> Any:
    """``~sread key``: the string at ``key`` (None if absent; ``WRONG`` for another type)."""
    try:
        return kstr.read(ctx.ks, args[1], ctx.ks.now())
    except WrongType:
        return WRONG


def _hread(ctx: Any, args: list[bytes]) -> Any:
    """``~hread key``: the registers of the HyperLogLog at ``key`` as PFCOUNT reads them
    (None if absent; ``WRONG``, ``INVALID_HLL``)."""
    try:
        return khll.ranks_or_none(ctx.ks, khll.cache_for(ctx.ks), args[1], ctx.ks.now())
    except WrongType:
        return WRONG
    except khll.InvalidHll:
        return INVALID_HLL


def _hmerge(ctx: Any, args: list[Any]) -> Any:
    """``~hmerge dest ranks``: PFMERGE's write of the sources' union ``ranks`` at ``dest``
    (its type was checked under the same lock)."""
    ks, dest, now = ctx.ks, args[1], ctx.ks.now()
    cache = khll.cache_for(ks)
    khll.raise_registers(ks, cache, dest, khll.lookup(ks, dest, now, cache), args[2], now)
    ctx.fire("$", b"pfadd", dest)
    return OK


def _bstore(ctx: Any, args: list[Any]) -> Any:
    """``~bstore dest value``: BITOP's write of its result (and its events, its reply)."""
    n, deleted = kbit.store_result(ctx.ks, args[1], args[2], ctx.ks.now())
    return bitmaps.bitop_stored(ctx, args[1], n, deleted)


def _capture(ctx: Any, args: list[bytes]) -> Any:
    """``~capture command args...``: a STORE command of one source (ZRANGESTORE,
    GEOSEARCHSTORE, GEORADIUS ... STORE) run here, where the source lives, its write kept
    (``zsets.stores_captured``): [its reply] or [its reply, destination, event, entries]
    for ``~zstore`` on the destination's worker. Its parsing, checks and errors are the
    command's own, in its order."""
    cmd = ctx.node.table.lookup(args[1])
    assert cmd is not None and cmd.handler is not None
    deny = ctx.deny_blocking
    ctx.deny_blocking = True  # (what would run in steps runs to its end inside the capture)
    try:
        with zsets.stores_captured() as kept:
            r = cmd.handler(ctx, args[1:])
    finally:
        ctx.deny_blocking = deny
    if not kept:
        return [r]
    dest, event, entries = kept[0]
    return [r, dest, event, [[s, m] for s, m in entries]]


def _export(ctx: Any, args: list[bytes]) -> Any:
    """``~export key``: [its record's key, the record, its live elements] (a collection's:
    ``collections.live_elements``; a string: none), read as COPY reads its source (a hit,
    or a miss and keymiss), for ``~adopt`` on the destination's worker; None if absent."""
    ks, key, now = ctx.ks, args[1], ctx.ks.now()
    found = ks.read_record(key, now)
    if found is None:
        return None
    ikey, rec = found
    if ikey[K.TAG_AT] == K.ORD_STRING:
        return [ikey, rec, []]
    return [ikey, rec, [[tag, [[s, r] for s, r in live]] for tag, live in kcoll.live_elements(ks, key, rec, now)]]


def _adopt(ctx: Any, args: list[Any]) -> Any:
    """``~adopt dest ikey record elements``: what RENAME and COPY write at their destination
    (commands/keys.py, one apply) from what ``~export`` read at the source's worker."""
    ks, dst, now = ctx.ks, args[1], ctx.ks.now()
    ikey, rec, elements = args[2], args[3], args[4]
    dst_found = ks.live_record(dst, now)
    if ikey[K.TAG_AT] == K.ORD_STRING:
        kstr.copy(ks, rec, dst, dst_found, now)
    else:
        live = [(tag, [(s, r) for s, r in pairs]) for tag, pairs in elements]
        ks.apply(kcoll.adopt_records(ks, rec, live, dst, dst_found, now))
    return 1


def _smembers(ctx: Any, args: list[bytes]) -> Any:
    """``~smembers key``: the members of the set at ``key`` (None if absent; ``WRONG`` for
    another type)."""
    try:
        return kset.union(ctx.ks, [args[1]], ctx.ks.now()) or None
    except WrongType:
        return WRONG


def _sstore(ctx: Any, args: list[Any]) -> Any:
    """``~sstore dest event members``: SUNIONSTORE & co.'s write of their result."""
    return sets.store_result(ctx, args[1], args[2], args[3])


def _zstore(ctx: Any, args: list[Any]) -> Any:
    """``~zstore dest event entries``: the write ``~capture`` or ZUNIONSTORE & co. kept."""
    return zsets.store_entries(ctx, args[1], args[2], [(s, m) for s, m in args[3]])


def _mute(ctx: Any, args: list[bytes]) -> Any:
    """``~mute command args...``: the command run here with no keyspace event and no
    keyspace hit or miss counted (``Events.muted``): a part of a unit whose events are the
    whole command's (``Unit.events``), or a lookup Redis makes for writing (RENAME's, LMOVE's)."""
    cmd = PART_COMMANDS.get(args[1]) or ctx.node.table.lookup(args[1])
    assert cmd is not None and cmd.handler is not None
    with ctx.node.events.muted():
        return cmd.handler(ctx, args[1:])


def _sortkeys(ctx: Any, args: list[Any]) -> Any:
    """``~sortkeys key flags option...``: the (key, field) pairs SORT's patterns name for
    the elements of ``key`` (flags: read-only, full key access)."""
    return sort.sort_part(ctx, [b"SORT", args[1], *args[3:]], args[2][0] == 49, args[2][1] == 49, None, True,
                          False)


def _pread(ctx: Any, args: list[bytes]) -> Any:
    """``~pread key field ...``: whether each pattern key exists here and the value it (its
    hash field, if not empty) holds, as SORT's BY and GET read it (counted by ``~sortrun``,
    once per lookup)."""
    now, ks = ctx.ks.now(), ctx.ks
    return [[ks.live_record(args[i], now) is not None, sort.read_pattern_key(ctx, args[i], args[i + 1] or None, now,
                                                                             False)]
            for i in range(1, len(args) - 1, 2)]


def _sortrun(ctx: Any, args: list[Any]) -> Any:
    """``~sortrun key flags values option...``: SORT with the pattern keys' ``values``
    ([key, field, [exists, value]] each); flags: read-only, full key access, STORE
    elsewhere (then its [length, items])."""
    flags = args[2]
    got = {(k, f or None): v for k, f, v in args[3]}
    return sort.sort_part(ctx, [b"SORT", args[1], *args[4:]], flags[0] == 49, flags[1] == 49, got, False,
                          flags[2] == 49)


def _lstore(ctx: Any, args: list[Any]) -> Any:
    """``~lstore dest items``: SORT ... STORE's write of its result at the destination."""
    return sort.store_list(ctx, args[1], args[2], ctx.ks.now())


def _part_command(name: str, handler: Any, write: bool) -> Command:
    return Command(name=name, handler=handler, arity=-2, flags=("write",) if write else ("readonly",),
                   first_key=1, last_key=1, step=1)


PART_COMMANDS: dict[bytes, Command] = {c.name.encode(): c for c in (
    _part_command("~zread", _zread, False), _part_command("~sread", _sread, False),
    _part_command("~hread", _hread, False), _part_command("~capture", _capture, False),
    _part_command("~hmerge", _hmerge, True), _part_command("~bstore", _bstore, True),
    _part_command("~zstore", _zstore, True), _part_command("~sortkeys", _sortkeys, False),
    _part_command("~pread", _pread, False), _part_command("~sortrun", _sortrun, True),
    _part_command("~lstore", _lstore, True), _part_command("~smembers", _smembers, False),
    _part_command("~sstore", _sstore, True), _part_command("~export", _export, False),
    _part_command("~adopt", _adopt, True),
    Command(name="~mute", handler=_mute, arity=-2, flags=("write",), first_key=0, last_key=0, step=0),
)}
"""The commands units run as parts besides the client commands (``~`` names no client can
send: they are in no command table, so COMMAND, INFO commandstats and ACL never show
them). Each worker numbers them after its table's commands, in this order."""


# -- units over the values of several keys ----------------------------------------------------

class _Gather(Unit):
    """A command over the values of keys on several workers: each key is read on its
    worker (``read``: a part command that answers its value, or a mark for a key of
    another type), then the command's own code computes the reply from the values here
    (``compute``, in the commands layer: the same code a single process runs after its
    reads), and a STORE writes its result at the destination's worker (``write``)."""

    read = b"~zread"

    def __init__(self, name: str, store: bool):
        self.name = name
        self.store = store
        self.phases = 2 if store else 1

    def keys(self, args: list[bytes], ctx: Any) -> tuple[list[bytes], bytes | None]:
        """(the keys read, in the order the command checks them; the destination or None).
        A CommandError: not the command's arguments (the connection's worker answers it)."""
        raise NotImplementedError

    def split(self, args: list[bytes], owner: Sequence[int], pid_of: Any, ctx: Any = None
              ) -> tuple[Parts, Any] | None:
        try:
            keys, dst = self.keys(args, ctx)
        except CommandError:
            return None
        at = [owner[pid_of(k)] for k in keys]
        parts: Parts = dict.fromkeys(at)
        jd = None if dst is None else owner[pid_of(dst)]
        if jd is not None:
            parts[jd] = None
        w = {"args": args, "keys": keys, "at": at, "dst": dst, "jd": jd, "proto": getattr(ctx, "proto", 2),
             "write": None, "reply": None}
        self.prepare(w, ctx)
        return parts, w

    def prepare(self, w: dict[str, Any], ctx: Any) -> None:
        """What the computation needs of the client's context, taken now."""

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        steps: Steps = {}
        if phase == 0:  # (muted: the reads counted and keymiss fired here, in key order: ``lookups``)
            for k, j in zip(where["keys"], where["at"]):
                steps.setdefault(j, []).append([b"~mute", self.read, k])
            return steps
        return {where["jd"]: [where["write"]]}

    def _values(self, where: Any, got: Got) -> list[Any]:
        seen = dict.fromkeys(got[0], 0)
        values = []
        for j in where["at"]:
            values.append(got[0][j][seen[j]])
            seen[j] += 1
        return values

    def lookups(self, where: Any, got: Got) -> list[tuple[bytes, bool]]:
        """Each key read, in order, up to the first of another type (where Redis stops
        with its error: found, so a hit)."""
        if not got:
            return []
        out = []
        for k, v in zip(where["keys"], self._values(where, got)):
            if type(v) is int or type(v) is Err:  # (WRONG, INVALID_HLL, a ~zread's WRONGTYPE)
                out.append((k, True))
                break
            out.append((k, v is not None and v != {}))
        return out

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        if phase == 1:
            return where["reply"] if where["reply"] is not None else got[1][where["jd"]][-1]
        values = self._values(where, got)
        try:
            return self.compute(where, values)
        except CommandError as e:
            return Err(e.message)
        except KeyspaceError as e:
            return Err(errors.status_text(e))

    def compute(self, w: dict[str, Any], values: list[Any]) -> Any:
        """The reply (or an error to raise) from the keys' ``values``; a STORE sets
        ``w["write"]`` (the part command writing the result) and returns None, or its reply
        in ``w["reply"]`` when the write's own reply is not the command's."""
        raise NotImplementedError


class _ZsetAlgebra(_Gather):
    """ZUNION, ZINTER, ZDIFF, ZINTERCARD and the STORE forms: each source read on its
    worker (``~zread``: WRONGTYPE for a key neither a zset nor a set, before the options
    are parsed, as Redis reads them), the options and the algebra here
    (``zsets.setop_result``), and a STORE's entries written by ``~zstore`` (its event is
    the command's: ``zunionstore``, ...)."""

    def __init__(self, name: str):
        super().__init__(name, name.endswith("store"))
        self.at = 2 if self.store else 1
        self.op = "union" if "union" in name else "inter" if "inter" in name else "diff"
        self.card = name == "zintercard"

    def keys(self, args: list[bytes], ctx: Any) -> tuple[list[bytes], bytes | None]:
        n = zsets.setop_numkeys(args, self.at)
        return args[self.at + 1:self.at + 1 + n], args[1] if self.store else None

    def compute(self, w: dict[str, Any], values: list[Any]) -> Any:
        r = zsets.setop_result(w["args"], self.at, self.op, self.store, self.card, values)
        if self.card:
            return r
        if not self.store:
            return zsets.scored(w["proto"], r[1], r[0])
        w["write"] = [b"~zstore", w["dst"], b"z" + self.op.encode() + b"store", [[s, m] for s, m in r[1]]]
        return None


class _SetAlgebra(_Gather):
    """SUNION, SINTER, SDIFF, SINTERCARD and the STORE forms: each key's members read on
    its worker (``~smembers``: None for a missing key, ``WRONG`` for another type), the
    algebra here in byte order as ``keyspace/sets.py`` answers it, WRONGTYPE at the first
    key of another type (Redis looks every key up before it combines), and a STORE's
    result written by ``~sstore`` with the one-process write and event
    (``sets.store_result``: ``sunionstore``, ..., or ``del`` for an empty result)."""

    read = b"~smembers"

    def __init__(self, name: str):
        super().__init__(name, name.endswith("store"))
        self.op = "union" if "union" in name else "inter" if "inter" in name else "diff"

    def keys(self, args: list[bytes], ctx: Any) -> tuple[list[bytes], bytes | None]:
        if self.name == "sintercard":
            n, _ = sets.sintercard_args(args)
            return args[2:2 + n], None
        if self.store:
            return args[2:], args[1]
        return args[1:], None

    def compute(self, w: dict[str, Any], values: list[Any]) -> Any:
        if any(type(v) is int for v in values):
            raise WrongType()
        found = [set(v) if v is not None else set() for v in values]
        if self.op == "union":
            members = set().union(*found)
        elif self.op == "inter":
            members = set.intersection(*found)
        else:
            members = found[0].difference(*found[1:])
        out = sorted(members)
        if self.name == "sintercard":
            limit = sets.sintercard_args(w["args"])[1]
            return min(len(out), limit) if limit else len(out)
        if self.store:
            w["write"] = [b"~sstore", w["dst"], self.name.encode(), out]
            return None
        return SetReply(out)


class _Bitop(_Gather):
    """BITOP op dest key...: each source read on its worker (``~sread``), the operation here
    (``keyspace/bitmaps.bitop``), the result written at the destination's (``~bstore``)."""

    read = b"~sread"

    def __init__(self) -> None:
        super().__init__("bitop", True)

    def keys(self, args: list[bytes], ctx: Any) -> tuple[list[bytes], bytes | None]:
        bitmaps.bitop_of(args)  # (its errors: before any key is read)
        return args[3:], args[2]

    def compute(self, w: dict[str, Any], values: list[Any]) -> Any:
        if any(type(v) is int for v in values):  # (WRONG)
            raise WrongType()
        w["write"] = [b"~bstore", w["dst"], kbit.bitop(bitmaps.bitop_of(w["args"]), values)]
        return None


class _Lcs(_Gather):
    """LCS key1 key2 ...: both strings read on their workers, the rest here
    (``strings.lcs_of``)."""

    read = b"~sread"

    def __init__(self) -> None:
        super().__init__("lcs", False)

    def keys(self, args: list[bytes], ctx: Any) -> tuple[list[bytes], bytes | None]:
        return args[1:3], None

    def prepare(self, w: dict[str, Any], ctx: Any) -> None:
        w["max"] = A.proto_max_bulk_len(ctx)

    def compute(self, w: dict[str, Any], values: list[Any]) -> Any:
        if any(type(v) is int for v in values):
            raise CommandError(errors.LCS_NOT_STRINGS)
        return strings.lcs_of(w["args"], values[0] or b"", values[1] or b"", w["max"])


class _Hll(_Gather):
    """PFCOUNT key... and PFMERGE dest source...: each HyperLogLog's registers read on its
    worker (``~hread``; PFMERGE reads the destination first, as Redis checks it), their
    union here (a register's maximum), then the estimate, or the destination's registers
    raised to the sources' union at its worker (``~hmerge``, with its ``pfadd`` event)."""

    read = b"~hread"

    def keys(self, args: list[bytes], ctx: Any) -> tuple[list[bytes], bytes | None]:
        return args[1:], args[1] if self.store else None

    def compute(self, w: dict[str, Any], values: list[Any]) -> Any:
        union: bytes | None = None
        for i, v in enumerate(values):
            if type(v) is int:
                raise khll.InvalidHll() if v == INVALID_HLL else WrongType()
            if v is not None and (i or not self.store):
                union = v if union is None else bytes(map(max, union, v))
        if not self.store:
            return 0 if union is None else khll.estimate(union)
        w["write"] = [b"~hmerge", w["dst"], bytes(khll.M) if union is None else union]
        return None


class _Capture(Unit):
    """ZRANGESTORE, GEOSEARCHSTORE, GEORADIUS[BYMEMBER] ... STORE|STOREDIST with the
    source on one worker and the destination on another: the command runs at the source
    (``~capture``: its own parsing, checks and errors, in its order), then what it would
    have written is written at the destination (``~zstore``, with the command's event)."""

    phases = 2

    def __init__(self, name: str):
        self.name = name

    def _keys(self, args: list[bytes]) -> tuple[bytes, bytes] | None:
        if self.name in ("zrangestore", "geosearchstore"):
            return (args[2], args[1]) if len(args) > 2 else None
        dst = None
        i = 5  # (Redis's georadiusGetKeys: from the 6th argument, the last one given)
        while i < len(args) - 1:
            if args[i].lower() in (b"store", b"storedist"):
                dst = args[i + 1]
                i += 1
            i += 1
        return None if dst is None else (args[1], dst)

    def split(self, args: list[bytes], owner: Sequence[int], pid_of: Any, ctx: Any = None
              ) -> tuple[Parts, Any] | None:
        keys = self._keys(args)
        if keys is None:
            return None
        js, jd = owner[pid_of(keys[0])], owner[pid_of(keys[1])]
        return {js: None, jd: None}, [js, jd, args, None]

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        if phase == 0:
            return {where[0]: [[b"~capture", *where[2]]]}
        return {where[1]: [[b"~zstore", *where[3]]]}

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        if phase == 1:
            return got[1][where[1]][0]
        r = got[0][where[0]][0]
        if len(r) == 1:  # nothing stored
            return r[0]
        where[3] = r[1:]
        return None


class _Sort(Unit):
    """SORT and SORT_RO with BY or GET patterns, or a STORE on another worker (the module
    docstring): four phases, the last two at the sorted key's worker and the
    destination's; a pattern's keys are read on every worker (all locked for the unit)."""

    phases = 4

    def __init__(self, name: str):
        self.name = name
        self.readonly = name == "sort_ro"

    def split(self, args: list[bytes], owner: Sequence[int], pid_of: Any, ctx: Any = None
              ) -> tuple[Parts, Any] | None:
        dst = None if self.readonly else sort.store_key(args)
        jk = owner[pid_of(args[1])]
        jd = None if dst is None else owner[pid_of(dst)]
        if any(a.lower() in (b"by", b"get") for a in args[2:]):
            parts: Parts = dict.fromkeys(range(max(owner) + 1))
        else:
            parts = dict.fromkeys((jk, jd) if jd is not None else (jk,))
        full = ctx is None or sort.full_key_access(ctx, args, ctx.node.table.lookup(self.name.encode()))
        capture = jd is not None and jd != jk
        flags = b"%d%d%d" % (self.readonly, full, capture)
        return parts, {"args": args, "jk": jk, "jd": jd, "flags": flags, "pairs": [], "values": [], "items": None,
                       "at": lambda k: owner[pid_of(k)]}

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        args, jk = where["args"], where["jk"]
        if phase == 0:
            return {jk: [[b"~sortkeys", args[1], where["flags"], *args[2:]]]}
        if phase == 1:
            steps: dict[int, list[bytes]] = {}
            for k, f in where["pairs"]:
                steps.setdefault(where["at"](k), [b"~pread"]).extend((k, f or b""))
            return {j: [cmd] for j, cmd in steps.items()}
        if phase == 2:
            return {jk: [[b"~sortrun", args[1], where["flags"], where["values"], *args[2:]]]}
        return {where["jd"]: [[b"~lstore", sort.store_key(args), where["items"]]]}

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        if phase == 0:
            where["pairs"] = list(dict.fromkeys((k, f) for k, f in got[0][where["jk"]][0]))
            return None
        if phase == 1:
            seen = dict.fromkeys(got[1], 0)
            for k, f in where["pairs"]:
                j = where["at"](k)
                where["values"].append([k, f or b"", got[1][j][0][seen[j]]])
                seen[j] += 1
            return None
        if phase == 2:
            r = got[2][where["jk"]][0]
            if where["flags"][2] != 49:
                return r
            where["items"] = r[1]
            return None
        return got[3][where["jd"]][0]


class _Mpop(Unit):
    """LMPOP and ZMPOP numkeys key... over keys of several workers: the TYPE of every key
    on its worker, then the command on the first key holding its type, at its worker
    (WRONGTYPE when a key of another type comes before it; the null reply when none)."""

    phases = 2

    def __init__(self, name: str):
        self.name = name
        self.kind = b"list" if name == "lmpop" else b"zset"
        self.parse = lists.mpop_args if name == "lmpop" else zsets.mpop_args

    def split(self, args: list[bytes], owner: Sequence[int], pid_of: Any, ctx: Any = None
              ) -> tuple[Parts, Any] | None:
        try:
            keys = self.parse(args, 1)[0]
        except CommandError:
            return None
        at = [owner[pid_of(k)] for k in keys]
        return dict.fromkeys(at), [keys, at, args, 2 + len(keys), None, False]

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        keys, at, args, rest, chosen = where[:5]
        if phase == 0:
            steps: Steps = {}
            for k, j in zip(keys, at):
                steps.setdefault(j, []).append([b"TYPE", k])
            return steps
        return {at[chosen]: [[args[0], b"1", keys[chosen], *args[rest:]]]}

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        if phase == 1:
            return got[1][where[1][where[4]]][0]
        seen = dict.fromkeys(got[0], 0)
        for i, j in enumerate(where[1]):
            t = got[0][j][seen[j]]
            seen[j] += 1
            if t == b"none" or (t != self.kind and where[5]):  # (a blocked client's retry skips it)
                continue
            if t != self.kind:
                return Err(errors.WRONGTYPE)
            where[4] = i
            return None
        return NULL_ARRAY


class _Xread(Unit):
    """XREAD [COUNT n] STREAMS key... id... (not BLOCK) over streams of several workers:
    each worker reads its streams (XREAD of them), the replies merge in the order the keys
    were given. An id that does not parse is an error unless a key before it (or its own)
    is of another type (Redis checks each key's type, then its id): then the TYPE of those
    keys decides."""

    name = "xread"

    def would_block(self, args: list[bytes]) -> bool:
        try:
            return streams.parse_read(args, False).timeout is not None
        except CommandError:
            return False

    def split(self, args: list[bytes], owner: Sequence[int], pid_of: Any, ctx: Any = None
              ) -> tuple[Parts, Any] | None:
        try:
            r = streams.parse_read(args, False)
        except CommandError:
            return None
        bad: tuple[int, str] | None = None
        for i, arg in enumerate(r.ids):
            if arg == b">":
                bad = (i, errors.XREAD_GT_OPTION)
            elif arg != b"$":
                try:
                    streams.full_id(arg)
                except CommandError as e:
                    bad = (i, e.message)
            if bad is not None:
                break
        keys = r.keys if bad is None else r.keys[:bad[0] + 1]
        at = [owner[pid_of(k)] for k in keys]
        return dict.fromkeys(at), [keys, at, r.ids, r.count, bad, getattr(ctx, "proto", 2)]

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        keys, at, ids, count, bad, _ = where
        steps: Steps = {}
        if bad is not None:
            for k, j in zip(keys, at):
                steps.setdefault(j, []).append([b"TYPE", k])
            return steps
        mine = _streams_by_worker(keys, ids, at)
        head = [b"XREAD"] + ([b"COUNT", b"%d" % count] if count else []) + [b"STREAMS"]
        return {j: [[*head, *ks, *idl]] for j, (ks, idl) in mine.items()}

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        keys, at, ids, count, bad, proto = where[:6]
        if bad is not None:
            seen = dict.fromkeys(got[0], 0)
            for j in at:
                t = got[0][j][seen[j]]
                seen[j] += 1
                if t not in (b"none", b"stream"):
                    return Err(errors.WRONGTYPE)
            return Err(bad[1])
        served: dict[int, list[tuple[bytes, Any]]] = {}
        for j, rs in got[0].items():
            r = rs[0]
            if r is None or r is NULL_ARRAY or not r:
                served[j] = []
            elif isinstance(r, Map):
                served[j] = [(r[i], r[i + 1]) for i in range(0, len(r), 2)]
            else:
                served[j] = [(p[0], p[1]) for p in r]
        out = []
        for k, j in zip(keys, at):
            mine = served[j]
            if mine and mine[0][0] == k:
                out.append(mine.pop(0))
        return streams.read_reply(proto, out) if out else NULL_ARRAY


def _streams_by_worker(keys: list[bytes], ids: list[bytes], at: list[int]
                       ) -> dict[int, tuple[list[bytes], list[bytes]]]:
    """Each worker's streams and their ids, in the order given."""
    mine: dict[int, tuple[list[bytes], list[bytes]]] = {}
    for k, i, j in zip(keys, ids, at):
        ks, idl = mine.setdefault(j, ([], []))
        ks.append(k)
        idl.append(i)
    return mine


class _XreadGroup(_Xread):
    """XREADGROUP GROUP group consumer [COUNT n] [NOACK] STREAMS key... id... (not BLOCK)
    over streams of several workers: first each worker checks its streams as Redis does
    before reading any (``~xgcheck``: the key's type, its group, then its id), and the
    first key in the order given that fails answers its error with nothing read; then each
    worker reads its streams (XREADGROUP of them), the replies merge in the order given."""

    name = "xreadgroup"
    phases = 2

    def would_block(self, args: list[bytes]) -> bool:
        try:
            r = streams.parse_read(args, True)
        except CommandError:
            return False
        return r.timeout is not None and all(i == b">" for i in r.ids)

    def split(self, args: list[bytes], owner: Sequence[int], pid_of: Any, ctx: Any = None
              ) -> tuple[Parts, Any] | None:
        try:
            r = streams.parse_read(args, True)
        except CommandError:
            return None
        assert r.group is not None
        at = [owner[pid_of(k)] for k in r.keys]
        head = [b"XREADGROUP", b"GROUP", r.group, r.consumer] + ([b"COUNT", b"%d" % r.count] if r.count else []) + (
            [b"NOACK"] if r.noack else []) + [b"STREAMS"]
        return dict.fromkeys(at), [r.keys, at, r.ids, head, None, getattr(ctx, "proto", 2), r.group]

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        keys, at, ids, head = where[:4]
        mine = _streams_by_worker(keys, ids, at)
        if phase == 0:
            return {j: [[b"~xgcheck", where[6], *(x for pair in zip(ks, idl) for x in pair)]]
                    for j, (ks, idl) in mine.items()}
        return {j: [[*head, *ks, *idl]] for j, (ks, idl) in mine.items()}

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        if phase == 1:
            return super().after(0, parts, where, got[1:])
        seen = dict.fromkeys(got[0], 0)
        for j in where[1]:
            bad = got[0][j][0][seen[j]]
            seen[j] += 1
            if bad is not None:
                return Err(bad)
        return None


def _int(b: bytes) -> int | None:
    try:
        return int(b) if b.lstrip(b"-").isdigit() else None
    except ValueError:
        return None


def final(reply: Any) -> Any:
    """A unit's reply as the client gets it (``_NIL``: the null reply)."""
    return None if reply is _NIL else reply


UNITS: dict[str, Unit] = {u.name: u for u in (
    _Mget(), _Mset(), _Msetnx(), _Sum("del"), _Sum("unlink"), _Sum("exists"), _Sum("touch"),
    _Move("rename"), _Move("renamenx"), _Move("copy"), _ListMove("lmove"), _ListMove("rpoplpush"), _Smove(),
    *(_SetAlgebra(n) for n in ("sunion", "sinter", "sdiff", "sintercard", "sunionstore", "sinterstore",
                               "sdiffstore")),
    *(_ZsetAlgebra(n) for n in ("zunion", "zinter", "zdiff", "zintercard", "zunionstore", "zinterstore",
                                "zdiffstore")),
    _Bitop(), _Lcs(), _Hll("pfcount", False), _Hll("pfmerge", True),
    *(_Capture(n) for n in ("zrangestore", "geosearchstore", "georadius", "georadiusbymember")),
    _Mpop("lmpop"), _Mpop("zmpop"), _Xread(), _XreadGroup(), _Sort("sort"), _Sort("sort_ro"),
)}


# -- blocking commands over keys of several workers (issue 33, slice 5) ----------------------

class Waiting:
    """A blocking round's reply when the command found nothing: its watches are set on
    ``workers``; ``ids`` are XREAD's ids with each ``$`` resolved (by key position)."""

    __slots__ = ("workers", "ids")

    def __init__(self, workers: list[int], ids: dict[int, bytes]):
        self.workers, self.ids = workers, ids


class _Round(Unit):
    """One round of a blocking command over keys of several workers: whether another
    client holds one of its keys (``~held``: a watching client woken for it, whose round
    has not run yet; then this one does not try, it watches behind it), its
    non-blocking form (``inner``, a unit), and when that found nothing (a null reply), a
    last phase under the same locks setting the client's watches (``~wait``) on every
    worker of its keys: no write comes between the attempt and the watches. ``where`` is
    ``[inner's where, the watch phase, {worker: [key positions]}, again, stream ids,
    keys]``."""

    def __init__(self, inner: Unit):
        self.inner = inner
        self.name = inner.name
        self.phases = inner.phases + 2

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        keys, again, ids = where[5], where[3], where[4]
        if phase == 0:
            return {j: [[b"~held", *(keys[i] for i in pos)]] for j, pos in where[2].items()}
        if phase != where[1]:
            return self.inner.step(phase - 1, parts, where[0], got[1:])
        steps: Steps = {}
        for j, pos in where[2].items():
            if ids is None:
                steps[j] = [[b"~wait", again, b"-", *(keys[i] for i in pos)]]
            else:
                steps[j] = [[b"~wait", again, b"x", *(keys[i] for i in pos), *(ids[i] for i in pos)]]
        return steps

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        if phase == where[1]:
            ids: dict[int, bytes] = {}
            for j, pos in where[2].items():
                ids.update(zip(pos, got[phase][j][0]))
            return Waiting(sorted(where[2]), ids)
        if phase == 0:
            if any(r[0] for r in got[0].values()):
                where[1] = 1
            return None
        if phase == 1 and where[3] == b"1" and isinstance(self.inner, _ListMove):
            js = where[0][0]  # (a retry: a source of another type keeps it waiting, as Redis)
            if got[1][js][0] != b"list":
                where[1] = phase + 1
                return None
        r = self.inner.after(phase - 1, parts, where[0], got[1:])
        if r is NULL_ARRAY or r is _NIL:
            where[1] = phase + 1
            return None
        return r

    def events(self, where: Any, got: Got) -> list[tuple[str, bytes, bytes]]:
        """The events of its non-blocking form when that ran and found something (the
        round did not end watching): LMOVE's push and pop, ... (its parts ran muted)."""
        if where[1] != -1:
            return []
        return self.inner.events(where[0], got[1:])


class BlockCall:
    """A blocking command over keys of several workers, parsed: ``round`` makes each
    round's unit; ``shape`` turns the non-blocking form's reply into the command's."""

    def __init__(self, argv: list[bytes], keys: list[bytes], timeout: float, nil: Any, shape: Any = None,
                 ids: list[bytes] | None = None):
        self.argv, self.keys, self.timeout, self.nil, self.shape = argv, keys, timeout, nil, shape
        self.ids = ids  # XREAD's ids, ``$`` resolved after the first round

    def round(self, again: bool, owner: Sequence[int], pid_of: Any, ctx: Any) -> tuple[Unit, Parts, Any] | None:
        argv = self.argv
        if self.ids is not None and argv[0] == b"XREAD":
            argv = argv[:len(argv) - len(self.ids)] + self.ids
        inner = UNITS[argv[0].decode().lower()]
        split = inner.split(argv, owner, pid_of, ctx)
        if split is None:
            return None
        watches: dict[int, list[int]] = {}
        for i, k in enumerate(self.keys):
            watches.setdefault(owner[pid_of(k)], []).append(i)
        unit = _ROUNDS[inner.name]
        if again and isinstance(inner, _Mpop):
            split[1][5] = True  # a blocked client's retry skips keys of another type (Redis's serving)
        return unit, split[0], [split[1], -1, watches, b"1" if again else b"0", self.ids, self.keys]

    def reply(self, r: Any) -> Any:
        if r is _NIL:
            return None
        return r if self.shape is None or type(r) is Err else self.shape(r)


_ROUNDS = {n: _Round(UNITS[n]) for n in ("lmpop", "zmpop", "lmove", "rpoplpush", "xread", "xreadgroup")}


def _num(keys: list[bytes]) -> bytes:
    return b"%d" % len(keys)


def blocking_call(name: str, args: list[bytes], ctx: Any) -> BlockCall | None:
    """The blocking command ``args`` parsed as its handler parses it (None: not its
    arguments; the handler answers the error)."""
    try:
        if name in ("blpop", "brpop"):
            timeout = lists.parse_timeout(args[-1])
            keys = args[1:-1]
            return BlockCall([b"LMPOP", _num(keys), *keys, b"LEFT" if name == "blpop" else b"RIGHT"], keys,
                             timeout, NULL_ARRAY, lambda r: [r[0], r[1][0]])
        if name == "blmpop":
            keys = lists.mpop_args(args, 2)[0]
            return BlockCall([b"LMPOP", *args[2:]], keys, lists.parse_timeout(args[1]), NULL_ARRAY)
        if name in ("bzpopmin", "bzpopmax"):
            timeout = zsets.timeout_arg(ctx, args[-1])
            keys = args[1:-1]
            return BlockCall([b"ZMPOP", _num(keys), *keys, b"MIN" if name == "bzpopmin" else b"MAX"], keys,
                             timeout, NULL_ARRAY, lambda r: [r[0], r[1][0][0], r[1][0][1]])
        if name == "bzmpop":
            keys = zsets.mpop_args(args, 2)[0]
            return BlockCall([b"ZMPOP", *args[2:]], keys, zsets.timeout_arg(ctx, args[1]), NULL_ARRAY)
        if name == "blmove":
            ends = [b"LEFT" if lists._where(a) else b"RIGHT" for a in args[3:5]]
            return BlockCall([b"LMOVE", args[1], args[2], *ends], [args[1]], lists.parse_timeout(args[5]),
                             NULL_ARRAY)  # (the timeout reply: a null array, as Redis 7)
        if name == "brpoplpush":
            return BlockCall([b"RPOPLPUSH", args[1], args[2]], [args[1]], lists.parse_timeout(args[3]), NULL_ARRAY)
        r = streams.parse_read(args, name == "xreadgroup", ctx)
        assert r.timeout is not None
        if name == "xread":
            head = [b"XREAD"] + ([b"COUNT", b"%d" % r.count] if r.count else []) + [b"STREAMS"]
            return BlockCall([*head, *r.keys, *r.ids], r.keys, r.timeout / 1000.0, NULL_ARRAY, ids=list(r.ids))
        return BlockCall(_no_block(args), r.keys, r.timeout / 1000.0, NULL_ARRAY)
    except CommandError:
        return None


def _no_block(args: list[bytes]) -> list[bytes]:
    """XREADGROUP's arguments without BLOCK ms (before STREAMS)."""
    out = [args[0]]
    i = 1
    while i < len(args):
        a = args[i].lower()
        if a == b"streams":
            return out + args[i:]
        if a == b"block":
            i += 2
            continue
        n = 3 if a == b"group" else 2 if a == b"count" else 1
        out += args[i:i + n]
        i += n
    return out


def _wait(ctx: Any, args: list[bytes]) -> Any:
    """``~wait again kind key... [id...]``: the client's watch of its keys here
    (``node/blocking.py``); for streams (kind ``x``) the ids with ``$`` resolved."""
    again, kind = args[1] == b"1", args[2]
    rest = args[3:]
    if kind == b"x":
        n = len(rest) // 2
        keys, ids = rest[:n], list(rest[n:])
        for i, k in enumerate(keys):
            if ids[i] == b"$":
                try:
                    st = streams._lookup(ctx, k)
                except WrongType:
                    st = None
                ids[i] = streams.fmt(streams.MIN_ID if st is None else st.last_id)
    else:
        keys, ids = rest, []
    ctx.node.blocking.watch(ctx, keys, again)
    return ids


def _xgcheck(ctx: Any, args: list[bytes]) -> Any:
    """``~xgcheck group key id ...``: per key, None or the error XREADGROUP answers for it
    (its type, its group, its id: ``streams._resolve``'s checks)."""
    out: list[str | None] = []
    for i in range(2, len(args) - 1, 2):
        r = streams._ReadArgs()
        r.group, r.keys, r.ids = args[1], [args[i]], [args[i + 1]]
        try:
            streams._resolve(ctx, r, True)
            out.append(None)
        except CommandError as e:
            out.append(e.message)
        except WrongType:
            out.append(errors.WRONGTYPE)
    return out


def _held(ctx: Any, args: list[bytes]) -> Any:
    """``~held key...``: 1 if another client holds one of these keys here, or one changed
    and its waiters were not served yet (the registry serves them on the next turn): they
    come first."""
    return int(ctx.node.blocking.taken(ctx.id, args[1:]))


PART_COMMANDS[b"~wait"] = _part_command("~wait", _wait, False)
PART_COMMANDS[b"~held"] = _part_command("~held", _held, False)
PART_COMMANDS[b"~xgcheck"] = _part_command("~xgcheck", _xgcheck, False)
