"""Sorted sets: a collection head, a member record and a score-index record per member.

Records (``core/zset.py`` has the byte layouts):

- the head ``[pid]'M'[klen][key]`` (ctype ZSET) gates the collection: DEL, EXPIRE and a
  store that replaces the key are one write of it;
- the member record ``[pid]'z'[klen][key][member]``, an ORSWOT element whose top live
  dot holds the score (8 bytes, binary64): the truth;
- the score-index record ``[pid]'Z'[klen][key][score:u64][member]``, an LWW record with
  no payload, live while the member's score is the one its key spells.

Every command writes the member records, the index record of each new score (stamped
with the command's dot) and, when it creates the key, the head, in ONE apply: one
replication-log entry, one batch. Removing members never writes the head: an emptied
zset does not exist (EXISTS 0, as in Redis) by the keyspace's one existence rule
(``Keyspace.present``), and a member added concurrently on another node keeps it.

The ordered view. Score and lex ranges, ranks, pops and counts read an in-memory mirror of
one zset's order (``Order``: a ``SortedList`` of ``(score, member)``, a dict member ->
score, the members with a TTL in a heap), built on first use by a scan of the score index
whose hits are confirmed against the member records, and kept in step by the node's
change feed, which reports every changed record, local or merged from a peer. Ranks and
rank ranges cost O(log n), score and lex ranges O(log n + m), ZCARD O(1), instead of a
scan or a sort of the whole set per call. Mirrors are kept for the zsets in use, least
recently used first out past ``MAX_CACHED_MEMBERS`` members in all; a dropped mirror is
rebuilt on its next use. A read command that can wait builds it in steps
(``Zsets.warming``, ``commands/zsets.ordered``): ``BUILD_STEP`` records per step, other
clients served between event-loop turns, the writes made meanwhile applied to it at the
end (measured on a million members after a restart: the first ZCARD 9.1 s, while
another client's PINGs were answered, p50 9 ms); a write that needs the order (ZPOPMIN,
ZREMRANGEBY*) or a command inside MULTI/EXEC or a script builds it at once. A mirror is
dropped when its head's delete clock changes (DEL, a store replacing the key, a
re-created key); members whose own TTL passes leave it when it is next read.

The index is a hint, confirmed by the members (``core/zset.py``). An index record
``Z(s, m)`` stands for "m has score s" exactly when a live dot of m's member record holds
s, whatever the index record's own envelope says: concurrent commands can leave an index
record dead while its member holds its score (a remove on one node tombstoned it, an add
on another that never saw the removed add wrote it again with an older clock), and live
while its member moved on. Readers therefore never trust the index record's liveness;
nothing is repaired, so a replica never writes records of its own while it merges, and
what a merge leaves is decided by the records alone. The sweeper removes index records
no live dot of their member holds (``core/sweep.py``). Liveness everywhere else is the
keyspace's: a member's own TTL and the head's delete clock (``head.element_live``).
"""

from __future__ import annotations

import heapq
import math
import random
from collections import OrderedDict
from typing import Final, Generator, Iterable, Iterator, NamedTuple

from sortedcontainers import SortedList  # type: ignore[import-untyped]

from marekvs.core import envelope as env
from marekvs.core import head
from marekvs.core import keys as K
from marekvs.core import orswot, zset
from marekvs.core.head import CollectionType
from marekvs.core.partition import hash64
from marekvs.keyspace.keyspace import Keyspace
from marekvs.keyspace.status import KeyspaceError, WrongType
from marekvs.storage.engine import prefix_end

ZSET = CollectionType.ZSET
SET = CollectionType.SET
RTYPE = zset.RTYPE
MAX_CACHED_MEMBERS = 4_000_000  # members held by all mirrors together (~250 bytes each)
MIRROR_OVERHEAD = 32  # what a mirror itself counts for, in members
BUILD_STEP = 4096  # records a step of a mirror's build reads (``Zsets.warming``)
SMALL_SCAN = 128  # ZSCAN returns a zset this small (and its members short) in one reply

_ORD_Z = K.TAG_ZSET[0]
_ORD_ZSCORE = K.TAG_ZSCORE[0]
_ORD_HEAD = K.ORD_HEAD
_HEADER: Final = env.HEADER
_TOMB = env.FLAG_TOMBSTONE
_is_live = env.is_live
_score_of = zset.score_of
_encode_score = K.encode_score
INF = math.inf


class NotAScore(KeyspaceError):
    """An INCR made the score NaN (Redis: "resulting score is not a number (NaN)")."""


Entry = tuple[float, bytes]  # (score, member): the order of a zset


# =========================================================================================
# Keys of one zset
# =========================================================================================

class Prefixes(NamedTuple):
    """The member-record and index prefixes of one user key (one partition hash)."""

    key: bytes
    members: bytes  # [pid]'z'[klen][key]
    by_score: bytes  # [pid]'Z'[klen][key]
    head: bytes  # [pid]'M'[klen][key]

    def member_key(self, member: bytes) -> bytes:
        return self.members + member

    def index_key(self, score: float, member: bytes) -> bytes:
        return self.by_score + _encode_score(score) + member


def prefixes(key: bytes) -> Prefixes:
    return prefixes_of_head(key, K.encode_head_key(key))


def prefixes_of_head(key: bytes, hk: bytes) -> Prefixes:
    """The prefixes of ``key`` from its head key (same partition and klen: no hash)."""
    pid, rest = hk[:2], hk[3:]
    return Prefixes(key, pid + K.TAG_ZSET + rest, pid + K.TAG_ZSCORE + rest, hk)


# =========================================================================================
# The ordered mirror of one zset
# =========================================================================================

class Order:
    """One zset's live members in Redis's order: by score, then member bytes."""

    __slots__ = ("sl", "scores", "deadlines", "heap", "head", "clock", "by_hash")

    def __init__(self, entries: list[Entry], deadlines: dict[bytes, int], head_rec: bytes, clock: int):
        self.sl = SortedList(entries)
        self.scores: dict[bytes, float] = {m: s for s, m in entries}
        self.deadlines = deadlines  # members with their own TTL -> deadline
        self.heap: list[tuple[int, bytes]] = [(d, m) for m, d in deadlines.items()]
        heapq.heapify(self.heap)
        self.head = head_rec
        self.clock = clock  # the head's delete clock it was built under
        self.by_hash: SortedList | None = None  # (hash, member), built by ZSCAN of a big zset

    def __len__(self) -> int:
        return len(self.scores)

    def put(self, member: bytes, score: float, deadline: int) -> None:
        old = self.scores.get(member)
        if old is not None:
            if old.hex() == score.hex() and self.deadlines.get(member, 0) == deadline:
                return
            self.sl.remove((old, member))
        elif self.by_hash is not None:
            self.by_hash.add((_hash(member), member))
        self.scores[member] = score
        self.sl.add((score, member))
        if deadline:
            self.deadlines[member] = deadline
            heapq.heappush(self.heap, (deadline, member))
        else:
            self.deadlines.pop(member, None)

    def discard(self, member: bytes) -> bool:
        old = self.scores.pop(member, None)
        if old is None:
            return False
        self.sl.remove((old, member))
        self.deadlines.pop(member, None)
        if self.by_hash is not None:
            self.by_hash.discard((_hash(member), member))
        return True

    def expire(self, now: int) -> None:
        """Drop the members whose own TTL has passed (their records read as dead now)."""
        heap = self.heap
        while heap and heap[0][0] <= now:
            d, m = heapq.heappop(heap)
            if self.deadlines.get(m) == d:
                self.discard(m)

    # -- reads ---------------------------------------------------------------------------
    def rank(self, member: bytes) -> int | None:
        s = self.scores.get(member)
        if s is None:
            return None
        r: int = self.sl.bisect_left((s, member))
        return r

    def first_index(self, lo: ScoreRange) -> int:
        """Index of the first entry whose score is inside ``lo``'s lower bound."""
        if lo.minex:
            if lo.min == INF:
                return len(self.sl)
            i: int = self.sl.bisect_left((math.nextafter(lo.min, INF), b""))
            return i
        i = self.sl.bisect_left((lo.min, b""))
        return i

    def end_index(self, hi: ScoreRange) -> int:
        """One past the last entry whose score is inside ``hi``'s upper bound."""
        if hi.maxex:
            i: int = self.sl.bisect_left((hi.max, b""))
            return i
        if hi.max == INF:
            return len(self.sl)
        i = self.sl.bisect_left((math.nextafter(hi.max, INF), b""))
        return i

    def single_score(self) -> bool:
        """True if every member has the same score (lex ranges are then bisections)."""
        sl = self.sl
        return not sl or sl[0][0] == sl[-1][0]


_hash = hash64  # ZSCAN's order of a big zset


# =========================================================================================
# Ranges
# =========================================================================================

class ScoreRange(NamedTuple):
    min: float
    max: float
    minex: bool = False
    maxex: bool = False

    def empty(self) -> bool:
        return self.min > self.max or (self.min == self.max and (self.minex or self.maxex))

    def gte_min(self, s: float) -> bool:
        return s > self.min if self.minex else s >= self.min

    def lte_max(self, s: float) -> bool:
        return s < self.max if self.maxex else s <= self.max


class _Bound:
    """Lex range bounds "-" and "+": below and above every member."""

    __slots__ = ("sign",)

    def __init__(self, sign: int):
        self.sign = sign


LEX_MIN = _Bound(-1)
LEX_MAX = _Bound(1)
LexItem = bytes | _Bound


def _cmplex(a: LexItem, b: LexItem) -> int:
    """Redis's sdscmplex: "-" < every member < "+"."""
    if a is b:
        return 0
    if isinstance(a, _Bound):
        return a.sign
    if isinstance(b, _Bound):
        return -b.sign
    return (a > b) - (a < b)


class LexRange(NamedTuple):
    min: LexItem
    max: LexItem
    minex: bool = False
    maxex: bool = False

    def empty(self) -> bool:
        c = _cmplex(self.min, self.max)
        return c > 0 or (c == 0 and (self.minex or self.maxex))

    def gte_min(self, m: bytes) -> bool:
        c = _cmplex(m, self.min)
        return c > 0 if self.minex else c >= 0

    def lte_max(self, m: bytes) -> bool:
        c = _cmplex(m, self.max)
        return c < 0 if self.maxex else c <= 0


# =========================================================================================
# Per-node state: the mirrors
# =========================================================================================

class Zsets:
    """The sorted-set state of one node's keyspace: the mirrors of the zsets in use, kept
    from the keyspace's change feed (followed while a mirror is held)."""

    def __init__(self, ks: Keyspace):
        self.ks = ks
        self.orders: OrderedDict[bytes, Order] = OrderedDict()
        self.cached = 0  # members (plus overhead) held by all mirrors
        self.budget = MAX_CACHED_MEMBERS
        self.following = False
        self.building: dict[bytes, _Build] = {}  # mirrors built in steps (``warming``)

    def apply(self, records: list[tuple[bytes, bytes]]) -> None:
        if records:
            self.ks.apply(records)

    # -- mirrors ---------------------------------------------------------------------------
    def order(self, p: Prefixes, head_rec: bytes, now: int) -> Order:
        """The mirror of the zset at ``p`` (``head_rec`` its head, live or dead), built
        if it is not held."""
        o = self.orders.get(p.key)
        if o is not None:
            if o.head is head_rec or o.head == head_rec or o.clock == head.delete_clock(head_rec, now):
                self.orders.move_to_end(p.key)
                if o.heap:
                    o.expire(now)
                return o
            self._drop(p.key)
        steps = self._scan_order(p, head_rec, now)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                built: Order = done.value
                break
        self._install(p.key, built)
        return built

    def _install(self, key: bytes, o: Order) -> None:
        self._follow_feed()
        self.orders[key] = o
        self.cached += len(o) + MIRROR_OVERHEAD
        self._evict(key)

    def _follow_feed(self) -> None:
        if not self.following:
            self.ks.changes.subscribe(self.on_changes)
            self.following = True

    # -- a mirror built in steps ------------------------------------------------------------
    def warming(self, key: bytes, now: int) -> Iterator[None] | None:
        """The steps that build the mirror of the zset ``key`` before a command reads its
        order, for a command that can wait (``commands/stepwise.py``): each step reads
        about ``BUILD_STEP`` records, so the first read of a big zset (after a restart, or
        once its mirror was evicted) no longer stops the event loop for the whole scan
        (a million members: seconds). None when there is nothing to build: the mirror is
        held, or the key holds no zset (the command answers as it would). Two commands
        waiting for one zset drive one build."""
        if key in self.orders:
            return None
        b = self.building.get(key)
        if b is None:
            try:
                zs = lookup(self, key, now)
            except KeyspaceError:
                return None
            if zs is None:
                return None
            self._follow_feed()  # (before the scans begin: every later change is seen)
            b = self.building[key] = _Build(zs.head, head.delete_clock(zs.head, now))
            b.steps = self._build_steps(zs.p, b, now)
        return _advance(b)

    def _build_steps(self, p: Prefixes, b: _Build, now: int) -> Iterator[None]:
        """Scan the zset in steps (the scans read the records as they were when it
        began), then bring the order up to date with the member records that changed
        since (``b.changed``, from the change feed) and hold it, unless the key was
        deleted or re-created meanwhile (the command then looks it up again)."""
        try:
            o = yield from self._scan_order(p, b.head, now)
        finally:
            if self.building.get(p.key) is b:
                del self.building[p.key]
            b.done = True
        if b.stale or p.key in self.orders:
            return
        o.head = b.head
        if b.changed:
            now = self.ks.now()
            for member, rec in b.changed.items():
                self._follow(o, member, rec, now)
        self._install(p.key, o)

    def _drop(self, key: bytes) -> None:
        o = self.orders.pop(key, None)
        if o is not None:
            self.cached -= len(o) + MIRROR_OVERHEAD

    def _evict(self, keep: bytes) -> None:
        while self.cached > self.budget and len(self.orders) > 1:
            key = next(iter(self.orders))
            if key == keep:
                self.orders.move_to_end(key)
                continue
            self._drop(key)

    def _scan_order(self, p: Prefixes, head_rec: bytes, now: int) -> Generator[None, None, Order]:
        """The order of the live members of one zset: the score index scanned in order,
        each entry confirmed against its member's score (the index record's own
        liveness is no evidence, see the module docstring); a live member the index
        has no entry for (not expected) is added and the order sorted. Yields after
        every ``BUILD_STEP`` records read; both scans are opened at once, so they read
        the same records however many event-loop turns the steps take."""
        ks = self.ks
        dc = head.delete_clock(head_rec, now)
        members = ks.engine.scan(p.members, prefix_end(p.members))
        index = ks.engine.scan(p.by_score, prefix_end(p.by_score))
        want: dict[bytes, tuple[bytes, float, int]] = {}  # live member -> (score key, score, deadline)
        n = len(p.members)
        for i, (ik, rec) in enumerate(members, 1):
            if _is_live(rec, now) and orswot.gate_clock(rec) > dc:
                sc = _score_of(rec)
                if sc is not None:
                    want[ik[n:]] = (_encode_score(sc), sc, env.ttl_of(rec))
            if not i % BUILD_STEP:
                yield
        entries: list[Entry] = []
        deadlines: dict[bytes, int] = {}
        n = len(p.by_score)
        for i, (ik, _) in enumerate(index, 1):
            if not i % BUILD_STEP:
                yield
            m = ik[n + 8:]
            w = want.get(m)
            if w is not None and w[0] == ik[n:n + 8]:
                del want[m]
                entries.append((w[1], m))
                if w[2]:
                    deadlines[m] = w[2]
        if want:
            for m, (_, sc, d) in want.items():
                entries.append((sc, m))
                if d:
                    deadlines[m] = d
            entries.sort()
        return Order(entries, deadlines, head_rec, dc)

    # -- the change feed ----------------------------------------------------------------------
    def on_changes(self, changes: list[tuple[bytes, bytes | None, bytes]]) -> None:
        """Keep the held mirrors in step with every changed member record and head."""
        orders, building = self.orders, self.building
        if not orders and not building:
            return
        now = 0
        for ik, _, new in changes:
            t = ik[2]
            if t == _ORD_Z:
                key, member = K.decode_zset_member_key(ik)
                o = orders.get(key)
                if o is not None:
                    if not now:
                        now = self.ks.now()
                    self._follow(o, member, new, now)
                elif building:
                    b = building.get(key)
                    if b is not None:
                        b.changed[member] = new
            elif t == _ORD_HEAD:
                key = K.decode_head_key(ik)
                o = orders.get(key)
                b = building.get(key) if building else None
                if o is None and b is None:
                    continue
                if not now:
                    now = self.ks.now()
                dc = head.delete_clock(new, now) if head.ctype_of(new) == ZSET else -1
                if o is not None:
                    if dc == o.clock:
                        o.head = new
                    else:
                        self._drop(key)
                if b is not None:
                    if dc == b.clock:
                        b.head = new
                    else:
                        b.stale = True

    def _follow(self, o: Order, member: bytes, rec: bytes, now: int) -> None:
        """Bring one member of a mirror in step with its record."""
        if _is_live(rec, now) and orswot.gate_clock(rec) > o.clock:
            s = _score_of(rec)
            if s is not None:
                o.put(member, s, env.ttl_of(rec))
                return
        o.discard(member)


class _Build:
    """A mirror being built in steps (``Zsets.warming``): the head it is built under
    (kept up to date), the member records changed since its scans began (the latest
    record of each), and whether the key was deleted or re-created meanwhile."""

    __slots__ = ("head", "clock", "changed", "stale", "done", "steps")

    def __init__(self, head_rec: bytes, clock: int):
        self.head = head_rec
        self.clock = clock
        self.changed: dict[bytes, bytes] = {}
        self.stale = False
        self.done = False
        self.steps: Iterator[None] = iter(())


def _advance(b: _Build) -> Iterator[None]:
    """Drive the build ``b`` one step per ``next`` until it is done (by this caller or
    another one waiting for the same zset)."""
    while not b.done:
        try:
            next(b.steps)
        except StopIteration:
            return
        yield


def state(ks: Keyspace) -> Zsets:
    """The node's sorted-set state (one per keyspace)."""
    z: Zsets = ks.extension("zsets", Zsets)
    return z


# =========================================================================================
# Lookups
# =========================================================================================

class Zset(NamedTuple):
    """A live zset as a command finds it: its keys and its live head."""

    p: Prefixes
    head: bytes


def lookup(z: Zsets, key: bytes, now: int) -> Zset | None:
    """The zset at ``key`` if it exists (``Keyspace.existing``), None if absent;
    WrongType if another type holds it."""
    found = z.ks.existing(key, ZSET, now)
    if found is None:
        return None
    return Zset(prefixes_of_head(key, found[0]), found[1])


def read_lookup(z: Zsets, key: bytes, now: int) -> Zset | None:
    """``lookup`` for a read command, counted as a keyspace hit or miss (a key of
    another type is a hit: Redis found it)."""
    found = z.ks.read_existing(key, ZSET, now)
    if found is None:
        return None
    return Zset(prefixes_of_head(key, found[0]), found[1])


def lookup_setlike(z: Zsets, key: bytes, now: int) -> tuple[int, Zset] | None:
    """(ctype, zset) of a zset or a set at ``key`` (ZUNION & co. read both); None if
    absent; WrongType for any other type. A counted read (the STORE forms too, as
    Redis 7.0 counts them)."""
    ks = z.ks
    try:
        found = lookup(z, key, now)
    except WrongType:
        r = ks.read(key, SET, now)
        if r is None:
            return None
        ks.found(key, r, False, now)  # (an emptied set: no key; it reads as an empty set)
        return SET, Zset(prefixes_of_head(key, r.hk), r.head)
    ks.counted(key, found is not None)
    return None if found is None else (ZSET, found)


def order_of(z: Zsets, zs: Zset, now: int) -> Order:
    return z.order(zs.p, zs.head, now)


def score(z: Zsets, zs: Zset, member: bytes, now: int) -> float | None:
    """A member's score (the mirror's if held, else a point read of its record), None if
    it is not a live member."""
    o = z.orders.get(zs.p.key)
    if o is not None and (o.head is zs.head or o.head == zs.head):
        if o.heap:
            o.expire(now)
        return o.scores.get(member)
    rec = z.ks.get(zs.p.member_key(member))
    if rec is None or not head.element_live(zs.head, rec, now):
        return None
    return _score_of(rec)


def card(z: Zsets, key: bytes, now: int) -> int:
    zs = read_lookup(z, key, now)
    return 0 if zs is None else len(order_of(z, zs, now))


def members_of(z: Zsets, ctype: int, zs: Zset, now: int) -> dict[bytes, float]:
    """Every live member of a zset (its scores) or a set (score 1.0), for ZUNION & co."""
    if ctype == ZSET:
        return dict(order_of(z, zs, now).scores)
    return {m: 1.0 for m, _ in z.ks.elements(K.TAG_SET, zs.p.key, zs.head, now)}


# =========================================================================================
# Writes
# =========================================================================================

class AddFlags(NamedTuple):
    nx: bool = False
    xx: bool = False
    gt: bool = False
    lt: bool = False
    incr: bool = False


_NO_FLAGS = AddFlags()


class AddResult(NamedTuple):
    added: int
    updated: int
    processed: int
    score: float | None  # the last element's resulting score (ZADD INCR's reply)


def _member_records(z: Zsets, p: Prefixes, member: bytes, rec: bytes | None, new: float | None,
                    stamp: int, now: int) -> list[tuple[bytes, bytes]]:
    """The records that take ``member`` (whose record is ``rec``) to score ``new`` (None:
    removed): its member record (as a delta the apply path merges) and, for a score, the
    index record of that score, all stamped ``stamp``. An old score's index record is
    left as it is: readers confirm every index record against the member, and the
    sweeper removes it once no live dot holds its score."""
    node = z.ks.node_id
    mk = p.members + member
    if new is None:
        if rec is not None:
            d = zset.remove_delta(rec, stamp, node)
            if d is not None:
                return [(mk, d)]
        return []
    return [(mk, zset.add_delta(rec, stamp, node, new)),
            (p.by_score + _encode_score(new) + member, zset.index_live(stamp, node))]


def add(z: Zsets, key: bytes, items: list[tuple[float, bytes]], flags: AddFlags, now: int) -> AddResult:
    """ZADD (and ZINCRBY, GEOADD): Redis's zsetAdd on each pair in order, then one apply
    of the members it named: a new dot for each, also for a member whose score stays
    (a re-add, as SADD's: a removal on another node that did not see it leaves the
    member). NotAScore if an increment makes a NaN."""
    ks = z.ks
    if flags.xx:  # (only an existing zset: one read of its head either way)
        hk, h, raw = ks.typed_head(key, ZSET, now)
        if h is None or not ks.present(hk, h, now):
            return AddResult(0, 0, 0, None)
        hk, head_rec, created = ks.head_to_write(hk, h, raw, ZSET, now)
        dc = head.delete_clock(head_rec, now)
    else:
        r, created = ks.write_home(key, ZSET, now)
        hk, head_rec, dc = r.hk, r.head, r.dc
    p = prefixes_of_head(key, hk)
    if len(items) == 1 and flags == _NO_FLAGS:  # the common case: one pair, no option
        sc, member = items[0]
        rec = ks.get(p.members + member)
        s = _score_of(rec) if rec is not None and _is_live(rec, now) and orswot.gate_clock(rec) > dc else None
        one = _member_records(z, p, member, rec, sc, ks.stamp(), now)
        if created:
            one.insert(0, (hk, head_rec))
        z.apply(one)
        return AddResult(int(s is None), int(s is not None and s != sc), 1, sc)
    first: dict[bytes, tuple[bytes | None, float | None]] = {}  # member -> (record, score) before
    cur: dict[bytes, float | None] = {}
    named: set[bytes] = set()  # members an element of the command added or updated
    added = updated = processed = 0
    last: float | None = None
    get = ks.get
    members = p.members
    for sc, member in items:
        if member not in cur:
            rec = get(members + member)
            s = _score_of(rec) if rec is not None and _is_live(rec, now) and orswot.gate_clock(rec) > dc else None
            first[member] = (rec, s)
            cur[member] = s
        s = cur[member]
        if s is not None:
            if flags.nx:
                continue
            if flags.incr:
                sc = sc + s
                if sc != sc:
                    raise NotAScore()
            if (flags.lt and sc >= s) or (flags.gt and sc <= s):
                continue
            last = sc
            processed += 1
            named.add(member)
            if sc != s:
                cur[member] = sc
                updated += 1
        elif not flags.xx:
            cur[member] = sc
            last = sc
            processed += 1
            added += 1
            named.add(member)
    records: list[tuple[bytes, bytes]] = []
    stamp = 0
    for member, (rec, _) in first.items():
        s1 = cur[member]
        if s1 is None or member not in named:
            continue
        stamp = stamp or ks.stamp()
        records += _member_records(z, p, member, rec, s1, stamp, now)
    if records:
        if created:
            records.insert(0, (hk, head_rec))
        z.apply(records)
    return AddResult(added, updated, processed, last)


def remove(z: Zsets, key: bytes, members: Iterable[bytes], now: int) -> int:
    """ZREM: a removal of the dots each member had here. The head gates the members
    (no ``lookup``: whether the zset exists would read a member to tell, and a zset
    that does not exist has no live member to remove)."""
    ks = z.ks
    hk, h = ks.collection(key, ZSET, now)
    if h is None:
        return 0
    zs = Zset(prefixes_of_head(key, hk), h)
    gone: dict[bytes, tuple[bytes, float]] = {}
    for m in dict.fromkeys(members):
        rec = ks.get(zs.p.member_key(m))
        if rec is not None and head.element_live(zs.head, rec, now):
            s = _score_of(rec)
            if s is not None:
                gone[m] = (rec, s)
    if gone:
        _remove_members(z, zs, gone, now)
    return len(gone)


def _remove_members(z: Zsets, zs: Zset, gone: dict[bytes, tuple[bytes, float]], now: int) -> None:
    """One apply: the removal of ``gone`` (member -> (record, score)). The last member
    leaving writes nothing more: the zset then does not exist (``Keyspace.present``)."""
    stamp = z.ks.stamp()
    records: list[tuple[bytes, bytes]] = []
    for m, (rec, _) in gone.items():
        records += _member_records(z, zs.p, m, rec, None, stamp, now)
    z.apply(records)


def remove_entries(z: Zsets, zs: Zset, entries: list[Entry], now: int) -> None:
    """Remove members the mirror listed (pops, range removals)."""
    if not entries:
        return
    get = z.ks.get
    gone: dict[bytes, tuple[bytes, float]] = {}
    for s, m in entries:
        rec = get(zs.p.member_key(m))
        if rec is not None:
            gone[m] = (rec, s)
    _remove_members(z, zs, gone, now)


def pop(z: Zsets, zs: Zset, count: int, highest: bool, now: int) -> list[Entry]:
    """ZPOPMIN / ZPOPMAX of ``count`` members (lowest first, or highest first)."""
    o = order_of(z, zs, now)
    n = min(count, len(o))
    if n <= 0:
        return []
    sl = o.sl
    taken = list(sl.islice(len(sl) - n, len(sl), reverse=True)) if highest else list(sl.islice(0, n))
    remove_entries(z, zs, taken, now)
    return taken


def store(z: Zsets, dest: bytes, entries: Iterable[Entry], now: int) -> int:
    """Replace whatever ``dest`` holds by a zset of ``entries`` (ZUNIONSTORE & co.); an
    empty result deletes ``dest``. One apply: the old key's tombstone (a string's, or the
    head's delete clock, which gates every old member at once), the new head, the members
    and their index keys. Returns the new zset's size."""
    ks = z.ks
    items = list(entries)
    old = ks.delete_records(dest, now)
    if not items:
        if old:
            z.apply(old)
        return 0
    records: list[tuple[bytes, bytes]] = []
    p = prefixes(dest)
    prior = ks.get(p.head)
    for ik, rec in old:
        if ik == p.head:
            prior = rec  # the head's tombstone: the new head folds in its clock
        else:
            records.append((ik, rec))
    h = head.new(ZSET, ks.stamp(), ks.node_id, prior=prior, now_ms=now)
    records.insert(0, (p.head, h))
    stamp = ks.stamp()
    get = ks.get
    for s, m in items:
        records += _member_records(z, p, m, get(p.member_key(m)), s, stamp, now)
    z.apply(records)
    return len(items)


# =========================================================================================
# Reads of the order
# =========================================================================================

def rank_range(o: Order, start: int, end: int, reverse: bool) -> list[Entry]:
    """Entries with rank ``start..end`` (Redis's index arithmetic done by the caller:
    0 <= start <= end < len)."""
    sl = o.sl
    if reverse:
        n = len(sl)
        return list(sl.islice(n - 1 - end, n - start, reverse=True))
    return list(sl.islice(start, end + 1))


def sanitize_ranks(start: int, end: int, n: int) -> tuple[int, int] | None:
    """ZRANGE's index arithmetic: None when the range is empty."""
    if start < 0:
        start += n
    if end < 0:
        end += n
    if start < 0:
        start = 0
    if start > end or start >= n:
        return None
    if end >= n:
        end = n - 1
    return start, end


def score_range(o: Order, r: ScoreRange, reverse: bool, offset: int = 0, limit: int = -1) -> list[Entry]:
    """ZRANGEBYSCORE's entries, Redis's LIMIT rules: a negative offset skips everything,
    a negative limit takes everything left."""
    if r.empty() or (offset > 0 and offset >= len(o)):
        return []
    lo, hi = o.first_index(r), o.end_index(r)
    if lo >= hi or offset < 0:
        return []
    sl = o.sl
    if reverse:
        top = hi - offset
        bottom = lo if limit < 0 else max(lo, top - limit)
        return list(sl.islice(bottom, top, reverse=True)) if top > bottom else []
    first = lo + offset
    stop = hi if limit < 0 else min(hi, first + limit)
    return list(sl.islice(first, stop)) if stop > first else []


def score_count(o: Order, r: ScoreRange) -> int:
    if r.empty():
        return 0
    return max(0, o.end_index(r) - o.first_index(r))


def _lex_bounds(o: Order, r: LexRange) -> tuple[int, int]:
    """[lo, hi) of the entries a lex range covers, as Redis walks a listpack zset: the
    first entry (in score order) at or above min, then entries while at or below max.
    With one score for every member (the case lex ranges are for) that is a bisection;
    otherwise a linear walk."""
    sl = o.sl
    n = len(sl)
    if r.empty() or not n:
        return 0, 0
    if not r.gte_min(sl[-1][1]) or not r.lte_max(sl[0][1]):
        return 0, 0
    if o.single_score():
        s = sl[0][0]
        if r.min is LEX_MIN:
            lo = 0
        else:
            lo = sl.bisect_left((s, r.min)) if not r.minex else sl.bisect_right((s, r.min))
        if r.max is LEX_MAX:
            hi = n
        else:
            hi = sl.bisect_left((s, r.max)) if r.maxex else sl.bisect_right((s, r.max))
        return lo, max(lo, hi)
    lo = 0
    while lo < n and not r.gte_min(sl[lo][1]):
        lo += 1
    hi = lo
    while hi < n and r.lte_max(sl[hi][1]):
        hi += 1
    return lo, hi


def _lex_bounds_reverse(o: Order, r: LexRange) -> tuple[int, int]:
    """As ``_lex_bounds`` for a reverse walk: the last entry at or below max, then
    entries downwards while at or above min; returned as [lo, hi)."""
    sl = o.sl
    n = len(sl)
    if r.empty() or not n:
        return 0, 0
    if not r.gte_min(sl[-1][1]) or not r.lte_max(sl[0][1]):
        return 0, 0
    if o.single_score():
        return _lex_bounds(o, r)
    hi = n
    while hi > 0 and not r.lte_max(sl[hi - 1][1]):
        hi -= 1
    lo = hi
    while lo > 0 and r.gte_min(sl[lo - 1][1]):
        lo -= 1
    return lo, hi


def lex_range(o: Order, r: LexRange, reverse: bool, offset: int = 0, limit: int = -1) -> list[Entry]:
    """ZRANGEBYLEX's entries, LIMIT as ``score_range``."""
    if offset < 0:
        return []
    sl = o.sl
    if o.single_score():
        lo, hi = _lex_bounds(o, r)
        if lo >= hi:
            return []
        if reverse:
            top = hi - offset
            bottom = lo if limit < 0 else max(lo, top - limit)
            return list(sl.islice(bottom, top, reverse=True)) if top > bottom else []
        first = lo + offset
        stop = hi if limit < 0 else min(hi, first + limit)
        return list(sl.islice(first, stop)) if stop > first else []
    # members in several scores: Redis's listpack walk, literally (the offset is skipped
    # without range checks, then entries are taken while in range)
    lo, hi = _lex_bounds_reverse(o, r) if reverse else _lex_bounds(o, r)
    if lo >= hi:
        return []
    out: list[Entry] = []
    n = len(sl)
    if reverse:
        i = hi - 1 - offset
        while i >= 0 and limit != 0 and r.gte_min(sl[i][1]):
            out.append(sl[i])
            i -= 1
            limit -= 1
    else:
        i = lo + offset
        while i < n and limit != 0 and r.lte_max(sl[i][1]):
            out.append(sl[i])
            i += 1
            limit -= 1
    return out


def lex_count(o: Order, r: LexRange) -> int:
    lo, hi = _lex_bounds(o, r)
    return max(0, hi - lo)


def random_entries(o: Order, count: int, unique: bool, rng: random.Random | None = None) -> list[Entry]:
    """ZRANDMEMBER with a count: ``count`` distinct entries (all of them when count is
    the size or more, in order), or ``count`` draws with repetition."""
    rnd = rng or random
    sl = o.sl
    n = len(sl)
    if not n or count <= 0:
        return []
    if not unique:
        return [sl[rnd.randrange(n)] for _ in range(count)]
    if count >= n:
        return list(sl)
    return [sl[i] for i in rnd.sample(range(n), count)]


def scan(o: Order, cursor: int, count: int) -> tuple[int, list[Entry]]:
    """ZSCAN: a small zset (as Redis's listpack: up to 128 members of up to 64 bytes)
    in one reply, in order, cursor 0; a larger one by member hash (``hash64``) from
    ``cursor`` on, about ``count`` members a call. A member present for the whole scan
    is returned at least once, whatever else changes."""
    n = len(o)
    if n <= SMALL_SCAN and all(len(m) <= 64 for m in o.scores):
        return 0, list(o.sl)
    if o.by_hash is None:
        o.by_hash = SortedList((_hash(m), m) for m in o.scores)
    bh = o.by_hash
    i = bh.bisect_left((cursor, b""))
    batch = list(bh.islice(i, i + count))
    # whole hashes only: a cursor is a hash value
    j = i + len(batch)
    while j < len(bh) and batch and bh[j][0] == batch[-1][0]:
        batch.append(bh[j])
        j += 1
    nxt = bh[j][0] if j < len(bh) else 0  # (never 0 before the end: the batch took hash 0)
    scores = o.scores
    return nxt, [(scores[m], m) for _, m in batch]


def iter_members(o: Order) -> Iterator[Entry]:
    return iter(o.sl)

