"""Streams and consumer groups: the records of a stream key, as values.

A stream is a collection head (type STREAM: its delete clock and TTL) plus, under its
user key:

- entries ``x`` (core/stream.py): immutable, unioned by id, XDEL/XTRIM tombstones;
- per-origin counters ``X`` (core/stream.py): entries added, the last id as Redis sees it
  (it starts over after DEL, XSETID may move it back), the greatest deleted id. ``*``
  mints after that last id (``stream.totals``): ids only grow within a stream, and a
  stream deleted and made again starts from the clock, as in Redis;
- consumer groups ``g``, their consumers ``c`` and pending entries ``p``
  (core/streamgroup.py).

Every write is one ``ks.apply`` (one replication-log entry); every read filters by the
data model's liveness: an element is live if its record is and it is newer than the head's
delete clock; a group's consumers and pending entries must also be newer than the group's
destroy clock. Operations return values or raise typed statuses (below), never replies.

Costs. Entries are a prefix scan in id order; a reverse range scans forward over windows
of whole milliseconds that double back from the upper bound, so the last entries cost one
or a few short scans.
XLEN, the counters and XINFO's length are O(1) from ``StreamCache``: per stream key, the
live entry count and the live counter records, loaded by one scan the first time a stream
is used and then kept current from the keyspace's change feed (every record the apply path
changed, local or replicated; followed from the first fill). A group's pending entries are
one prefix scan per group (XPENDING, XINFO, XAUTOCLAIM, a consumer's history); one pending
entry is a point read.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

from sortedcontainers import SortedDict  # type: ignore[import-untyped]

from marekvs.core import envelope as env
from marekvs.core import head
from marekvs.core import keys as K
from marekvs.core import stream
from marekvs.core import streamgroup as G
from marekvs.core.head import CollectionType
from marekvs.core.stream import Counters, StreamId, Totals
from marekvs.keyspace.keyspace import Keyspace
from marekvs.keyspace.status import KeyspaceError
from marekvs.storage.engine import prefix_end

STREAM = CollectionType.STREAM
U64_MAX = (1 << 64) - 1
MAX_ID: StreamId = (U64_MAX, U64_MAX)
MIN_ID: StreamId = (0, 0)
_ID = struct.Struct(">QQ")
_U64 = struct.Struct(">Q")
_U16 = struct.Struct(">H")
_TOMB = env.FLAG_TOMBSTONE
_SIZE = env.ENVELOPE_SIZE
_ORD_ENTRY = K.TAG_STREAM[0]
_ORD_COUNTER = K.TAG_STREAM_COUNTER[0]
_ORD_HEAD = K.ORD_HEAD
_ORD_GROUP = K.TAG_GROUP[0]
_ORD_PENDING = K.TAG_PENDING[0]
NODE_ENTRIES = 100  # Redis's stream-node-max-entries: '~' trims whole nodes of this size

Entry = tuple[StreamId, list[bytes]]  # (id, [f1, v1, f2, v2, ...])


# -- statuses --------------------------------------------------------------------------------

class IdNotGreater(KeyspaceError):
    """XADD: the id is equal or smaller than the stream's top item."""


class IdExhausted(KeyspaceError):
    """XADD: the stream's last id is the greatest possible."""


class SeqExhausted(KeyspaceError):
    """XADD ``ms-*`` when ``ms`` is the last id's and its sequence is the greatest."""


class NoGroup(KeyspaceError):
    """No such consumer group (or no such stream key)."""


class BusyGroup(KeyspaceError):
    """XGROUP CREATE of a group that exists."""


class NoStream(KeyspaceError):
    """The command needs the stream key to exist."""


class SetIdTooSmall(KeyspaceError):
    """XSETID below the top item (detail "top"), the max deleted id (detail "maxdel") or
    a length above ENTRIESADDED (detail "added")."""


# -- ids ---------------------------------------------------------------------------------------

def incr_id(sid: StreamId) -> StreamId | None:
    ms, seq = sid
    if seq < U64_MAX:
        return ms, seq + 1
    return (ms + 1, 0) if ms < U64_MAX else None


def decr_id(sid: StreamId) -> StreamId | None:
    ms, seq = sid
    if seq:
        return ms, seq - 1
    return (ms - 1, U64_MAX) if ms else None


# =========================================================================================
# the stream state cache (XLEN in O(1), the counters without a scan)
# =========================================================================================

class Meta:
    """What a stream key holds beside its entries, for one head delete clock ``dc``."""

    __slots__ = ("dc", "length", "counters", "_totals", "low")

    def __init__(self, dc: int, length: int, counters: dict[int, Counters]):
        self.dc = dc
        self.length = length  # live entries
        self.counters = counters  # origin -> live counter record
        self._totals: Totals | None = None  # cached until a counter record changes
        # no live entry has a smaller id: scans start here, not at the tombstones of
        # trimmed or deleted entries, which stay on disk until swept (gc_grace). Raised by
        # a scan that finds the first live entry; lowered by an entry arriving below it
        self.low: StreamId = MIN_ID

    def totals(self) -> Totals:
        t = self._totals
        if t is None:
            t = self._totals = stream.totals(self.counters.values(), self.dc)
        return t

    def set_counters(self, origin: int, c: Counters | None) -> None:
        """The counter record of ``origin`` is now ``c`` (None: dead). The totals follow
        at once when the record only counted on in the generation and epoch they count
        (every XADD's own bump), else they are recomputed on next use."""
        counters = self.counters
        old = counters.get(origin)
        t = self._totals
        if c is None:
            counters.pop(origin, None)
            self._totals = None
            return
        counters[origin] = c
        if (t is not None and old is not None and c.gen == old.gen == self.dc and c.epoch == old.epoch == t.epoch
                and c.added >= old.added and c.last >= old.last and c.max_deleted >= old.max_deleted):
            # ``stream.totals``: ``old`` was one of the records counted, ``c`` replaces it
            self._totals = Totals(t.epoch, t.added + c.added - old.added, max(t.last, c.last),
                                  max(t.max_deleted, c.max_deleted))
        else:
            self._totals = None


class Pel:
    """A group's pending entries list, in memory: the live pending ids (in order) and
    their owners, for the stream delete clock ``dc`` and group destroy clock ``gdc`` it
    was built under. Acknowledged records stay on disk until swept (gc_grace), so the PEL
    read from disk is a scan of every ack of the last hour; this is the live part only,
    as Redis holds it."""

    __slots__ = ("dc", "gdc", "ids", "per_consumer")

    def __init__(self, dc: int, gdc: int):
        self.dc, self.gdc = dc, gdc
        self.ids: SortedDict = SortedDict()  # StreamId -> consumer
        self.per_consumer: dict[bytes, int] = {}

    def put(self, sid: StreamId, rec: bytes) -> None:
        """The pending record of ``sid`` changed to ``rec``."""
        live = env.hlc_of(rec) > self.dc and G.pending_live(rec, self.gdc)
        old = self.ids.get(sid)
        new = G.pending_of(rec).consumer if live else None
        if old == new:
            return
        pc = self.per_consumer
        if old is not None:
            n = pc[old] - 1
            if n:
                pc[old] = n
            else:
                del pc[old]
        if new is None:
            del self.ids[sid]
        else:
            self.ids[sid] = new
            pc[new] = pc.get(new, 0) + 1


class StreamCache:
    """Per stream key: its live entry count and counter records, for the delete clock they
    were counted under; per consumer group, its live PEL (``Pel``). Filled on first use by
    scans, then kept current by ``on_change`` (the change feed); trusted only while
    ``subscribed``. At most ``limit`` keys (and groups)."""

    def __init__(self, ks: Keyspace | None = None, limit: int = 10_000):
        self.metas: dict[bytes, Meta] = {}
        self.pels: dict[tuple[bytes, bytes], Pel] = {}
        self.limit = limit
        self.feed = None if ks is None else ks.changes  # the keyspace's, followed from the first fill
        self.subscribed = False

    def _follow(self) -> None:
        if not self.subscribed and self.feed is not None:
            self.feed.subscribe(self.on_change)
            self.subscribed = True

    def on_change(self, changes: list[tuple[bytes, bytes | None, bytes]]) -> None:
        metas = self.metas
        if not metas and not self.pels:
            return
        for ik, old, new in changes:
            t = ik[2]
            if t == _ORD_PENDING or t == _ORD_GROUP:
                if self.pels:
                    self._group_change(ik, new)
                continue
            if t != _ORD_ENTRY and t != _ORD_COUNTER and t != _ORD_HEAD:
                continue
            key = K.user_key_of(ik)
            if t == _ORD_HEAD and self.pels:
                for gk in [gk for gk in self.pels if gk[0] == key]:
                    if self.pels[gk].dc != head.delete_clock(new, 0):
                        del self.pels[gk]
            m = metas.get(key)
            if m is None:
                continue
            if t == _ORD_ENTRY:
                live = _entry_live(new, m.dc)
                m.length += live - (old is not None and _entry_live(old, m.dc))
                if live:
                    sid = _ID.unpack_from(ik, len(ik) - 16)
                    if sid < m.low:
                        m.low = sid
            elif t == _ORD_COUNTER:
                origin = _U16.unpack_from(ik, len(ik) - 2)[0]
                m.set_counters(origin, stream.counters_of(new) if env.hlc_of(new) > m.dc else None)
            elif new[0] & _TOMB or head.delete_clock(new, 0) != m.dc or head.ctype_of(new) != STREAM:
                del metas[key]

    def _group_change(self, ik: bytes, new: bytes) -> None:
        if ik[2] == _ORD_PENDING:
            key, group, ms, seq = K.decode_pending_key(ik)
            pel = self.pels.get((key, group))
            if pel is not None:
                pel.put((ms, seq), new)
        else:
            key, group = K.decode_group_key(ik)
            pel = self.pels.get((key, group))
            if pel is not None and G.group_of(new).destroy_clock != pel.gdc:
                del self.pels[(key, group)]

    def pel(self, ks: Keyspace, g: GroupRef) -> Pel:
        """The live PEL of ``g`` (a scan of its pending records the first time)."""
        ident = (g.st.key, g.name)
        p = self.pels.get(ident) if self.subscribed else None
        if p is not None and p.dc == g.st.dc and p.gdc == g.destroy_clock:
            return p
        self._follow()
        p = Pel(g.st.dc, g.destroy_clock)
        prefix = g.pp
        n = len(prefix)
        for ik, rec in ks.engine.scan(prefix, prefix_end(prefix)):
            p.put(_ID.unpack_from(ik, n), rec)
        if self.subscribed:
            self.pels.pop(ident, None)
            if len(self.pels) >= self.limit:
                del self.pels[next(iter(self.pels))]
            self.pels[ident] = p
        return p

    def meta(self, ks: Keyspace, key: bytes, dc: int) -> Meta:
        m = self.metas.get(key) if self.subscribed else None
        if m is not None and m.dc == dc:
            return m
        self._follow()
        n = 0
        prefix = K.collection_prefix(K.TAG_STREAM, key)
        for _, rec in ks.engine.scan(prefix, prefix_end(prefix)):
            n += _entry_live(rec, dc)
        counters = {}
        prefix = K.collection_prefix(K.TAG_STREAM_COUNTER, key)
        for ik, rec in ks.engine.scan(prefix, prefix_end(prefix)):
            if env.hlc_of(rec) > dc:
                counters[K.decode_stream_counter_key(ik)[1]] = stream.counters_of(rec)
        m = Meta(dc, n, counters)
        if self.subscribed:
            self.metas.pop(key, None)
            if len(self.metas) >= self.limit:
                del self.metas[next(iter(self.metas))]
            self.metas[key] = m
        return m


def _entry_live(rec: bytes, dc: int) -> bool:
    return not rec[0] & _TOMB and env.hlc_of(rec) > dc


def cache_of(ks: Keyspace) -> StreamCache:
    """The stream cache of a keyspace (created on first use)."""
    return ks.extension("streams", StreamCache)


# =========================================================================================
# streams
# =========================================================================================

class Stream(NamedTuple):
    """A live stream as the commands see it."""

    key: bytes
    hk: bytes
    head: bytes  # the live head record
    dc: int  # its delete clock: older elements are dead
    meta: Meta
    xp: bytes  # the collection prefix of its entries (other tags: ``K.retag``)

    def entry_key(self, sid: StreamId) -> bytes:
        return self.xp + K.id_suffix(*sid)

    @property
    def length(self) -> int:
        return self.meta.length

    def totals(self) -> Totals:
        return self.meta.totals()

    @property
    def last_id(self) -> StreamId:
        """The last id as Redis shows it (last-generated-id; ``$``), what ``*`` mints
        after: at least every live entry's id (``stream.totals``)."""
        return self.meta.totals().last


def lookup(ks: Keyspace, key: bytes, now: int) -> Stream | None:
    """The stream at ``key`` if it exists (``Keyspace.existing``: its head live, or dead
    with entries newer than its death), None if absent; WrongType for another type."""
    found = ks.existing(key, STREAM, now)
    if found is None:
        return None
    hk, h = found
    dc = head.delete_clock(h, now)
    return Stream(key, hk, h, dc, cache_of(ks).meta(ks, key, dc), K.collection_prefix(K.TAG_STREAM, key))


def _for_write(ks: Keyspace, key: bytes, now: int) -> tuple[Stream, bool]:
    """(the stream at ``key`` for a write, whether its head is new: to be written in the
    same apply)."""
    r, created = ks.write_home(key, STREAM, now)
    return Stream(key, r.hk, r.head, r.dc, cache_of(ks).meta(ks, key, r.dc), r.prefix), created


def create_empty(ks: Keyspace, key: bytes, now: int) -> Stream:
    """An empty stream at ``key`` (XGROUP CREATE ... MKSTREAM)."""
    st, _ = _for_write(ks, key, now)
    ks.apply([(st.hk, st.head)])
    return lookup(ks, key, now)  # type: ignore[return-value]


# -- entries ------------------------------------------------------------------------------------

def _entry_prefix(key: bytes) -> bytes:
    return K.collection_prefix(K.TAG_STREAM, key)


def _scan(ks: Keyspace, st: Stream, lo: StreamId, hi: StreamId) -> Iterator[tuple[StreamId, bytes]]:
    """Live entry records with ``lo <= id <= hi``, in id order (from the stream's
    ``Meta.low`` at the least, which a scan from there raises to the first live id)."""
    prefix = st.xp
    n = len(prefix)
    end = prefix_end(prefix) if hi == MAX_ID else prefix + _ID.pack(*hi) + b"\x00"
    dc = st.dc
    unpack = _ID.unpack_from
    meta = st.meta
    from_low = lo <= meta.low
    if from_low:
        lo = meta.low
    for ik, rec in ks.engine.scan(prefix + _ID.pack(*lo), end):
        if not rec[0] & _TOMB and env.hlc_of(rec) > dc:
            sid = unpack(ik, n)
            if from_low:
                from_low = False
                if meta.low < sid:
                    meta.low = sid
            yield sid, rec


def _scan_rev(ks: Keyspace, st: Stream, lo: StreamId, hi: StreamId) -> Iterator[tuple[StreamId, bytes]]:
    """Live entry records with ``lo <= id <= hi``, greatest first: forward scans over
    windows of whole milliseconds, each twice the last, going back from ``hi``."""
    hi = min(hi, st.last_id)
    if hi < lo:
        return
    top: StreamId | None = hi
    width = 0
    while top is not None and top >= lo:
        bottom = max(lo, (max(top[0] - width, 0), 0))
        batch = list(_scan(ks, st, bottom, top))
        yield from reversed(batch)
        top = decr_id(bottom)
        width = width * 2 if width else 1


def _fields(rec: bytes) -> list[bytes]:
    """An entry record's fields and values, flat: ``[f1, v1, f2, v2, ...]``."""
    return stream.flat_from_bytes(rec[_SIZE:])


def range_entries(ks: Keyspace, st: Stream, lo: StreamId, hi: StreamId, count: int = 0,
                  rev: bool = False) -> list[Entry]:
    """XRANGE / XREVRANGE: entries with ``lo <= id <= hi`` (``count`` 0: all)."""
    out: list[Entry] = []
    if lo > hi:
        return out
    for sid, rec in (_scan_rev if rev else _scan)(ks, st, lo, hi):
        out.append((sid, _fields(rec)))
        if len(out) == count:
            break
    return out


def entry(ks: Keyspace, st: Stream, sid: StreamId) -> list[bytes] | None:
    """One live entry's fields, None if there is none at ``sid``."""
    rec = ks.get(st.entry_key(sid))
    if rec is None or not _entry_live(rec, st.dc):
        return None
    return _fields(rec)


def _entry_origin(ks: Keyspace, st: Stream, sid: StreamId) -> int:
    """The node that added the entry ``sid`` (its record's origin; this node's if none)."""
    rec = ks.get(st.entry_key(sid))
    return ks.node_id if rec is None else env.origin_of(rec)


def entry_state(ks: Keyspace, st: Stream, sid: StreamId) -> tuple[list[bytes] | None, bool]:
    """(fields of the live entry at ``sid`` or None, whether it is known to be gone).
    Gone means deleted here: an XDEL/XTRIM tombstone, or gated by a DEL of the stream.
    An entry with no record at all may simply not have reached this node yet (a pending
    entry arrives with its delivery, the entry with its XADD, from different nodes), so
    the group commands leave such a pending entry alone instead of dropping it."""
    rec = ks.get(st.entry_key(sid))
    if rec is None:
        return None, False
    if not _entry_live(rec, st.dc):
        return None, True
    return _fields(rec), False


def first_entry(ks: Keyspace, st: Stream) -> Entry | None:
    got = range_entries(ks, st, MIN_ID, MAX_ID, 1)
    return got[0] if got else None


def last_entry(ks: Keyspace, st: Stream) -> Entry | None:
    got = range_entries(ks, st, MIN_ID, MAX_ID, 1, rev=True)
    return got[0] if got else None


def first_id(ks: Keyspace, st: Stream) -> StreamId:
    """Redis's recorded first entry id: the first live entry's, 0-0 when empty."""
    if not st.length:
        return MIN_ID
    for sid, _ in _scan(ks, st, MIN_ID, MAX_ID):
        return sid
    return MIN_ID


def last_valid_id(ks: Keyspace, st: Stream) -> StreamId:
    """The greatest live entry id (0-0 when empty: Redis's streamLastValidID)."""
    if not st.length:
        return MIN_ID
    for sid, _ in _scan_rev(ks, st, MIN_ID, MAX_ID):
        return sid
    return MIN_ID


# -- XADD / XDEL / XTRIM / XSETID ------------------------------------------------------------

class Trim(NamedTuple):
    """MAXLEN (``threshold`` an int) or MINID (``threshold`` an id) trimming; ``approx``
    for ``~`` (whole nodes of ``NODE_ENTRIES`` only, at most ``limit`` entries, 0: no
    limit)."""

    maxlen: int | None
    minid: StreamId | None
    approx: bool = False
    limit: int = 0


def _ids_and(ks: Keyspace, st: Stream, extra: StreamId | None) -> Iterator[StreamId]:
    """The ids of the stream's live entries, oldest first, then ``extra`` if given. (A
    module-level generator: mypyc loses a nested generator's closure when it is resumed
    from a comprehension, tests/integration/test_differential_streams.py found it.)"""
    for sid, _ in _scan(ks, st, MIN_ID, MAX_ID):
        yield sid
    if extra is not None:
        yield extra


def _trim_victims(ks: Keyspace, st: Stream, trim: Trim, length: int,
                  extra: StreamId | None = None) -> list[StreamId]:
    """The ids ``trim`` removes from a stream of ``length`` live entries, oldest first
    (``extra``: an id about to be added, the newest, counted in ``length``).

    Exact trimming removes entries until MAXLEN remain or none is below MINID. ``~``
    models Redis's listpack nodes as runs of ``NODE_ENTRIES`` live entries from the
    oldest (the last run may be shorter): whole runs go while the stream keeps at least
    MAXLEN entries (MINID: while a run's last entry is below it), stopping before a run
    that would take more than ``limit`` entries in all. Redis's nodes also hold deleted
    entries and close at 4 KB, so on streams of 100 entries or more, or with big entries,
    ``~`` may trim other amounts than Redis's (never fewer than it should keep)."""

    victims: list[StreamId] = []
    if not trim.approx:
        for sid in _ids_and(ks, st, extra):
            if trim.maxlen is not None and length - len(victims) <= trim.maxlen:
                break
            if trim.minid is not None and sid >= trim.minid:
                break
            victims.append(sid)
        return victims
    # the last node also holds the deleted entries up to the last id added
    newest = extra if extra is not None else st.totals().last
    runs = _ids_and(ks, st, extra)
    while True:
        run = [sid for _, sid in zip(range(NODE_ENTRIES), runs)]
        if not run:
            return victims
        if trim.limit and len(victims) + len(run) > trim.limit:
            return victims
        if trim.maxlen is not None:
            if length - len(victims) - len(run) < trim.maxlen:
                return victims
        elif trim.minid is not None:
            last = run[-1] if len(run) == NODE_ENTRIES else max(run[-1], newest)
            if last >= trim.minid:
                return victims
        victims += run


def add(ks: Keyspace, key: bytes, fields: list[tuple[bytes, bytes]], ms: int | None,
        seq: int | None, nomkstream: bool, trim: Trim | None, now: int) -> tuple[StreamId | None, int]:
    """XADD. ``ms`` None: ``*``; ``seq`` None: ``ms-*``. Returns the new id (None when
    NOMKSTREAM found no stream) and how many entries the trimming removed."""
    if nomkstream and lookup(ks, key, now) is None:
        return None, 0
    st, created = _for_write(ks, key, now)
    tot = st.totals()
    last = tot.last
    if last == MAX_ID:
        raise IdExhausted()
    origin = ks.node_id
    hlc = ks.hlc.now()
    if ms is None:
        sid = stream.next_id(last, hlc, origin)
        if sid[0] > U64_MAX:
            raise IdExhausted()
    elif seq is None:
        base = origin << stream.COUNTER_BITS
        if ms > last[0]:
            sid = (ms, base)
        elif ms < last[0]:
            raise IdNotGreater()
        elif last[1] == U64_MAX:
            raise SeqExhausted()
        else:
            sid = (ms, max(last[1] + 1, base) if last[1] < base | stream.COUNTER_MAX else last[1] + 1)
    else:
        sid = (ms, seq)
        if sid <= last:
            raise IdNotGreater()
    ek = st.entry_key(sid)
    length = st.length + 1
    victims = _trim_victims(ks, st, trim, length, sid) if trim is not None else []
    recs: list[tuple[bytes, bytes]] = [(st.hk, st.head)] if created else []
    if sid in victims:
        recs.append((ek, stream.tombstone(hlc, origin)))
    else:
        recs.append((ek, stream.new(fields, hlc, origin)))
    for v in victims:
        if v != sid:
            recs.append((st.entry_key(v), stream.tombstone(hlc, origin)))
    recs.append(_counters_write(ks, st, tot, added=1, last=sid))
    ks.apply(recs)
    return sid, len(victims)


def _counters_write(ks: Keyspace, st: Stream, tot: Totals, added: int = 0, last: StreamId = MIN_ID,
                    deleted: StreamId = MIN_ID) -> tuple[bytes, bytes]:
    origin = ks.node_id
    own = st.meta.counters.get(origin)
    c = stream.bump(own, st.dc, tot.epoch, added, last, deleted)
    ck = K.retag(st.xp, K.TAG_STREAM_COUNTER) + K.origin_suffix(origin)
    return ck, stream.bumped(ks.get(ck), own, c, ks.hlc.now(), origin)


def delete(ks: Keyspace, st: Stream, ids: list[StreamId]) -> int:
    """XDEL on the stream ``st`` (``lookup``'s): how many of ``ids`` were live entries
    (now tombstones)."""
    recs: list[tuple[bytes, bytes]] = []
    seen: set[StreamId] = set()
    top = MIN_ID
    for sid in ids:
        if sid in seen or entry(ks, st, sid) is None:
            continue
        seen.add(sid)
        top = max(top, sid)
        recs.append((st.entry_key(sid), stream.tombstone(ks.hlc.now(), ks.node_id)))
    if recs:
        tot = st.totals()
        if top > tot.max_deleted:
            recs.append(_counters_write(ks, st, tot, deleted=top))
        ks.apply(recs)
    return len(seen)


def trim(ks: Keyspace, st: Stream, how: Trim) -> int:
    """XTRIM of the stream ``st`` (``lookup``'s): the number of entries removed."""
    victims = _trim_victims(ks, st, how, st.length)
    if victims:
        ks.apply([(st.entry_key(v), stream.tombstone(ks.hlc.now(), ks.node_id)) for v in victims])
    return len(victims)


def set_id(ks: Keyspace, key: bytes, sid: StreamId, added: int | None, maxdel: StreamId,
           now: int) -> None:
    """XSETID: a new counters epoch holding the last id ``sid``, ``added`` (None: keep)
    and ``maxdel`` (0-0: keep). NoStream, SetIdTooSmall."""
    st = lookup(ks, key, now)
    if st is None:
        raise NoStream()
    tot = st.totals()
    if st.length:
        if sid < last_valid_id(ks, st):
            raise SetIdTooSmall("top")
        if added is not None and st.length > added:
            raise SetIdTooSmall("added")
    hlc = ks.hlc.now()
    origin = ks.node_id
    c = Counters(st.dc, (hlc, origin), tot.added if added is None else added, sid,
                 maxdel if maxdel != MIN_ID else tot.max_deleted)
    ks.apply([(K.encode_stream_counter_key(key, origin), stream.counters_record(c, hlc, origin))])


# -- Redis's logical read counters (entries-read, lag) ----------------------------------------

def range_has_tombstones(ks: Keyspace, st: Stream, start: StreamId | None) -> bool:
    """Redis's streamRangeHasTombstones(s, start, NULL)."""
    maxdel = st.totals().max_deleted
    if not st.length or maxdel == MIN_ID:
        return False
    if first_id(ks, st) > maxdel:
        return False
    return (start or MIN_ID) <= maxdel


def estimate_read(ks: Keyspace, st: Stream, sid: StreamId) -> int | None:
    """Redis's streamEstimateDistanceFromFirstEverEntry: ``sid``'s logical read
    counter, None when it cannot be known."""
    tot = st.totals()
    if not tot.added:
        return 0
    if not st.length and sid <= tot.last:
        return tot.added
    if sid == tot.last:
        return tot.added
    if sid > tot.last:
        return None
    first = first_id(ks, st)
    if tot.max_deleted == MIN_ID or tot.max_deleted < first:
        if sid < first:
            return tot.added - st.length
        if sid == first:
            return tot.added - st.length + 1
    return None


def lag(ks: Keyspace, st: Stream, pos: G.Position) -> int | None:
    """Redis's streamReplyWithCGLag: entries not delivered to the group yet, None when
    it cannot be known."""
    tot = st.totals()
    if not tot.added:
        return 0
    if pos.entries_read is not None and not range_has_tombstones(ks, st, pos.id):
        return tot.added - pos.entries_read
    read = estimate_read(ks, st, pos.id)
    return None if read is None else tot.added - read


# =========================================================================================
# consumer groups
# =========================================================================================

class GroupRef(NamedTuple):
    """A live consumer group of a live stream."""

    st: Stream
    name: bytes
    gk: bytes
    record: bytes
    group: G.Group

    @property
    def destroy_clock(self) -> int:
        return self.group.destroy_clock

    @property
    def epoch(self) -> G.Version:
        return G.epoch_of(self.record)

    def position(self) -> G.Position:
        return self.group.position()

    @property
    def pp(self) -> bytes:
        """The prefix of the group's pending entries."""
        return K.retag(self.st.xp, K.TAG_PENDING) + K.group_suffix(self.name)

    @property
    def cp(self) -> bytes:
        """The prefix of the group's consumers."""
        return K.retag(self.st.xp, K.TAG_CONSUMER) + K.group_suffix(self.name)


def _group_live(rec: bytes | None, st: Stream) -> bool:
    return rec is not None and not rec[0] & _TOMB and env.hlc_of(rec) > st.dc and G.group_live(rec)


def group(ks: Keyspace, st: Stream, name: bytes) -> GroupRef | None:
    gk = K.retag(st.xp, K.TAG_GROUP) + name
    rec = ks.get(gk)
    if rec is None or not _group_live(rec, st):
        return None
    return GroupRef(st, name, gk, rec, G.group_of(rec))


def groups(ks: Keyspace, st: Stream) -> list[GroupRef]:
    """Every live group of the stream, by name."""
    prefix = K.retag(st.xp, K.TAG_GROUP)
    n = len(prefix)
    return [GroupRef(st, ik[n:], ik, rec, G.group_of(rec))
            for ik, rec in ks.engine.scan(prefix, prefix_end(prefix)) if _group_live(rec, st)]


def require_group(ks: Keyspace, key: bytes, name: bytes, now: int) -> GroupRef:
    """The live group ``name`` of the stream ``key``; NoGroup if either is missing."""
    st = lookup(ks, key, now)
    g = None if st is None else group(ks, st, name)
    if g is None:
        raise NoGroup()
    return g


def group_create(ks: Keyspace, st: Stream, name: bytes, sid: StreamId, entries_read: int | None) -> None:
    """XGROUP CREATE: BusyGroup if the group exists."""
    gk = K.retag(st.xp, K.TAG_GROUP) + name
    prior = ks.get(gk)
    if _group_live(prior, st):
        raise BusyGroup()
    base = G.Position(sid[0], sid[1], 0 if entries_read is None else entries_read + 1)
    ks.apply([(gk, G.new_group(ks.hlc.now(), ks.node_id, base, prior, st.dc))])


def group_setid(ks: Keyspace, g: GroupRef, sid: StreamId, entries_read: int | None) -> None:
    base = G.Position(sid[0], sid[1], 0 if entries_read is None else entries_read + 1)
    ks.apply([(g.gk, G.set_position(g.record, ks.hlc.now(), ks.node_id, base))])


def group_destroy(ks: Keyspace, g: GroupRef) -> None:
    """XGROUP DESTROY: the group record destroyed, and (so the sweeper can reclaim them)
    its consumers and pending entries removed."""
    hlc = ks.hlc.now()
    recs = [(g.gk, G.destroy(g.record, hlc, ks.node_id))]
    for ck, rec in _consumer_records(ks, g):
        recs.append((ck, G.remove_consumer(rec, ks.hlc.now(), ks.node_id)))
    for pk, rec in _pending_records(ks, g):
        recs.append((pk, G.ack_pending(rec, ks.hlc.now(), ks.node_id)))
    ks.apply(recs)


# -- consumers -------------------------------------------------------------------------------

class Consumer(NamedTuple):
    name: bytes
    seen_ms: int


def _consumer_records(ks: Keyspace, g: GroupRef) -> list[tuple[bytes, bytes]]:
    prefix = g.cp
    return [(ik, rec) for ik, rec in ks.engine.scan(prefix, prefix_end(prefix))
            if env.hlc_of(rec) > g.st.dc and G.consumer_seen(rec, g.destroy_clock) is not None]


def consumers(ks: Keyspace, g: GroupRef) -> list[Consumer]:
    """The group's live consumers, by name."""
    n = len(g.cp)
    return [Consumer(ik[n:], G.consumer_seen(rec, g.destroy_clock) or 0)
            for ik, rec in _consumer_records(ks, g)]


def _consumer_record(ks: Keyspace, g: GroupRef, name: bytes) -> tuple[bytes, bytes | None, bool]:
    """(key, record, live) of a consumer."""
    ck = g.cp + name
    rec = ks.get(ck)
    live = (rec is not None and env.hlc_of(rec) > g.st.dc
            and G.consumer_seen(rec, g.destroy_clock) is not None)
    return ck, rec, live


def consumer_exists(ks: Keyspace, g: GroupRef, name: bytes) -> bool:
    return _consumer_record(ks, g, name)[2]


def touch_consumer(ks: Keyspace, g: GroupRef, name: bytes, now: int) -> tuple[tuple[bytes, bytes], bool]:
    """The record that marks ``name`` seen now (created if it is not live) and whether it
    was created."""
    ck = g.cp + name
    rec = ks.get(ck)
    new, was_live = G.touch_consumer_seen(rec, ks.hlc.now(), ks.node_id, now, g.destroy_clock)
    if was_live and rec is not None and env.hlc_of(rec) <= g.st.dc:
        was_live = False  # gated by a DEL of the stream
    return (ck, new), not was_live


def create_consumer(ks: Keyspace, g: GroupRef, name: bytes, now: int) -> bool:
    """XGROUP CREATECONSUMER: True if it was created."""
    ck, rec, live = _consumer_record(ks, g, name)
    if live:
        return False
    ks.apply([(ck, G.touch_consumer(rec, ks.hlc.now(), ks.node_id, now))])
    return True


def delete_consumer(ks: Keyspace, g: GroupRef, name: bytes) -> int:
    """XGROUP DELCONSUMER: the consumer and its pending entries go; returns how many
    entries it had pending."""
    ck, rec, live = _consumer_record(ks, g, name)
    if not live or rec is None:
        return 0
    recs = [(ck, G.remove_consumer(rec, ks.hlc.now(), ks.node_id))]
    dropped = []
    for pk, prec in _pending_records(ks, g):
        if G.pending_of(prec).consumer == name:
            recs.append((pk, G.ack_pending(prec, ks.hlc.now(), ks.node_id)))
            dropped.append(_ID.unpack_from(pk, len(pk) - 16))
    ks.apply(recs)
    return len(dropped)


# -- pending entries -------------------------------------------------------------------------

class PendingEntry(NamedTuple):
    id: StreamId
    consumer: bytes
    delivery_ms: int
    deliveries: int


def _pending_records(ks: Keyspace, g: GroupRef, lo: StreamId = MIN_ID, hi: StreamId = MAX_ID,
                     consumer: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
    """(key, record) of the group's live pending entries with ``lo <= id <= hi`` (only
    ``consumer``'s if given), in id order: the ids from the in-memory PEL, each record a
    point read. No writes to the group while iterating (callers apply after)."""
    ids = cache_of(ks).pel(ks, g).ids
    prefix = g.pp
    dc, gdc = g.st.dc, g.destroy_clock
    get = ks.get
    for sid in ids.irange(lo, hi):
        if consumer is not None and ids[sid] != consumer:
            continue
        ik = prefix + K.id_suffix(*sid)
        rec = get(ik)
        if rec is not None and env.hlc_of(rec) > dc and G.pending_live(rec, gdc):
            yield ik, rec


class PelSummary(NamedTuple):
    size: int
    first: StreamId | None
    last: StreamId | None
    per_consumer: dict[bytes, int]


def pending_summary(ks: Keyspace, g: GroupRef) -> PelSummary:
    """XPENDING's summary: how many entries are pending, the first and last id, and how
    many each consumer has; from the in-memory PEL, without reading the records."""
    pel = cache_of(ks).pel(ks, g)
    ids = pel.ids
    if not ids:
        return PelSummary(0, None, None, {})
    return PelSummary(len(ids), ids.keys()[0], ids.keys()[-1], dict(pel.per_consumer))


def _pending_entry(ik: bytes, rec: bytes) -> PendingEntry:
    p = G.pending_of(rec)
    return PendingEntry(_ID.unpack_from(ik, len(ik) - 16), p.consumer, p.delivery_ms, p.deliveries)


def pending(ks: Keyspace, g: GroupRef, lo: StreamId = MIN_ID, hi: StreamId = MAX_ID,
            consumer: bytes | None = None) -> Iterator[PendingEntry]:
    """The group's pending entries in id order (only ``consumer``'s if given)."""
    for ik, rec in _pending_records(ks, g, lo, hi, consumer):
        if consumer is None or G.pending_of(rec).consumer == consumer:
            yield _pending_entry(ik, rec)


def pending_one(ks: Keyspace, g: GroupRef, sid: StreamId) -> tuple[bytes, bytes | None, bool]:
    """(key, stored record, pending) of the entry ``sid`` in the group's PEL."""
    pk = g.pp + K.id_suffix(*sid)
    rec = ks.get(pk)
    live = rec is not None and env.hlc_of(rec) > g.st.dc and G.pending_live(rec, g.destroy_clock)
    return pk, rec, live


def ack(ks: Keyspace, g: GroupRef, ids: list[StreamId]) -> int:
    """XACK: how many of ``ids`` were pending (now acknowledged)."""
    recs = []
    seen: set[StreamId] = set()
    for sid in ids:
        if sid in seen:
            continue
        pk, rec, live = pending_one(ks, g, sid)
        if live and rec is not None:
            seen.add(sid)
            recs.append((pk, G.ack_pending(rec, ks.hlc.now(), ks.node_id)))
    if recs:
        ks.apply(recs)
    return len(seen)


# -- XREADGROUP ------------------------------------------------------------------------------

def _floors(g: GroupRef) -> tuple[StreamId, dict[int, StreamId]]:
    """The group's base id and, per entry origin, the id up to which that origin's entries
    are delivered (its slot, at least the base)."""
    base = g.group.base.id
    return base, {o: max(base, p.id) for o, p in g.group.slots}


def _undelivered_from(g: GroupRef) -> StreamId | None:
    """Where a read with ``>`` starts scanning: the lowest floor of an origin whose last
    added entry (the stream's per-origin counters) is above it; None when every origin's
    entries are delivered."""
    st = g.st
    base, floors = _floors(g)
    start: StreamId | None = None
    for o, c in st.meta.counters.items():
        if c.gen != st.dc:
            continue
        floor = floors.get(o, base)
        if c.last > floor and (start is None or floor < start):
            start = floor
    return start


def read_new(ks: Keyspace, g: GroupRef, consumer: bytes, count: int, noack: bool,
             now: int) -> tuple[list[Entry] | None, bool]:
    """XREADGROUP ``>``: deliver the entries the group has not delivered (at most
    ``count``, 0: all; in id order) to ``consumer``, marked seen (created if needed); and
    whether the consumer was created. None, and no write at all, when there is none (as
    Redis, which creates the consumer only when it serves it).

    An entry is delivered if its id is at or below the base or its origin's slot
    (``core/streamgroup.py``), or if its pending record says it was handed out in this
    epoch (the ack of a delivery made elsewhere, arrived before the delivery): such
    entries are skipped, and the slots rise past them with the entries delivered."""
    st = g.st
    start = _undelivered_from(g) if st.length else None
    if start is None:
        return None, False
    base, floors = _floors(g)
    epoch = g.epoch
    pp = g.pp
    out: list[Entry] = []
    pendings: list[bytes | None] = []
    raised: dict[int, StreamId] = {}
    first = incr_id(start)
    if first is not None:
        for sid, rec in _scan(ks, st, first, MAX_ID):
            o = env.origin_of(rec)
            if sid <= floors.get(o, base):
                continue
            prec = ks.get(pp + K.id_suffix(*sid))
            if prec is not None and G.handed_out(prec, epoch):
                raised[o] = sid
                continue
            out.append((sid, _fields(rec)))
            pendings.append(prec)
            raised[o] = sid
            if len(out) == count:
                break
    if not out:
        return None, False
    touch, created = touch_consumer(ks, g, consumer, now)
    recs = [touch]
    pos = g.position()
    read = pos.entries_read
    origin = ks.node_id
    slots: dict[int, G.Position] = {}
    last_read: dict[StreamId, int | None] = {}
    for (sid, _), prec in zip(out, pendings):
        if read is not None and not range_has_tombstones(ks, st, sid):
            read += 1
        elif st.totals().added:
            read = estimate_read(ks, st, sid)
        last_read[sid] = read
        if not noack:
            pk = pp + K.id_suffix(*sid)
            recs.append((pk, G.deliver_pending(prec, epoch, ks.hlc.now(), origin, consumer, now)))
    for o, sid in raised.items():
        r = last_read.get(sid)
        slots[o] = G.Position(sid[0], sid[1], 0 if r is None else r + 1)
    recs.append((g.gk, G.deliver_slots(g.record, slots)))
    ks.apply(recs)
    return out, created


def read_history(ks: Keyspace, g: GroupRef, consumer: bytes, after: StreamId, count: int,
                 now: int) -> tuple[list[tuple[StreamId, list[bytes] | None]], bool]:
    """XREADGROUP with an id: ``consumer``'s pending entries after ``after`` (at most
    ``count``, 0: all), each delivered once more (time now, count + 1); an entry no
    longer in the stream comes back as None. And whether the consumer was created (it
    is, as in Redis, even when it has nothing pending)."""
    touch, created = touch_consumer(ks, g, consumer, now)
    recs = [touch]
    out: list[tuple[StreamId, list[bytes] | None]] = []
    start = incr_id(after)
    if start is not None:
        for ik, rec in _pending_records(ks, g, start, MAX_ID, consumer):
            p = G.pending_of(rec)
            if p.consumer != consumer:
                continue
            sid = _ID.unpack_from(ik, len(ik) - 16)
            fields = entry(ks, g.st, sid)
            out.append((sid, fields))
            if fields is not None:
                recs.append((ik, G.claim_pending(rec, ks.hlc.now(), ks.node_id, consumer, now)))
            if len(out) == count:
                break
    ks.apply(recs)
    return out, created


# -- XCLAIM / XAUTOCLAIM -----------------------------------------------------------------------

class Claim(NamedTuple):
    min_idle: int
    delivery_ms: int  # the new delivery time
    retrycount: int | None
    force: bool
    justid: bool


def claim(ks: Keyspace, g: GroupRef, consumer: bytes, ids: list[StreamId], how: Claim,
          lastid: StreamId, now: int) -> tuple[list[tuple[StreamId, list[bytes] | None]], bool]:
    """XCLAIM: the entries of ``ids`` claimed for ``consumer`` (fields None with JUSTID),
    and whether the consumer was created (only when it claims something, as Redis).
    Pending entries whose stream entry is gone leave the PEL."""
    recs: list[tuple[bytes, bytes]] = []
    out: list[tuple[StreamId, list[bytes] | None]] = []
    origin = ks.node_id
    pos = g.position()
    if lastid > pos.id:
        # everything up to LASTID counts as delivered: the slots of this node's entries and
        # of every origin the stream has entries from rise to it
        last = G.Position(lastid[0], lastid[1], pos.read)
        origins = {origin} | {o for o, c in g.st.meta.counters.items() if c.gen == g.st.dc}
        recs.append((g.gk, G.deliver_slots(g.record, {o: last for o in origins})))
    base, floors = _floors(g)
    touched = created = False
    claimed: dict[bytes, bytes] = {}  # this command's own writes, for repeated ids
    for sid in ids:
        pk, rec, live = pending_one(ks, g, sid)
        if pk in claimed:
            rec, live = claimed[pk], True
        fields, gone = entry_state(ks, g.st, sid)
        if fields is None:
            if gone and live and rec is not None:  # deleted: it leaves the PEL (as Redis 7.0)
                recs.append((pk, G.ack_pending(rec, ks.hlc.now(), origin)))
                claimed.pop(pk, None)
            continue
        add = 0 if how.justid else 1
        below = sid <= max(lastid, floors.get(_entry_origin(ks, g.st, sid), base))
        if live and rec is not None:
            p = G.pending_of(rec)
            if how.min_idle and now - p.delivery_ms < how.min_idle:
                continue
            new = G.claim_pending(rec, ks.hlc.now(), origin, consumer, how.delivery_ms, add, how.retrycount)
        elif how.force:
            if rec is not None and G.pending_of(rec).epoch >= g.epoch:
                new = G.claim_pending(rec, ks.hlc.now(), origin, consumer, how.delivery_ms, add, how.retrycount,
                                      delivered=below)
            else:
                fresh = G.force_pending(g.epoch, ks.hlc.now(), origin, consumer, how.delivery_ms, add,
                                        how.retrycount, delivered=below)
                new = fresh if rec is None else G.merge_pending(rec, fresh)
        else:
            continue
        if not touched:
            touch, created = touch_consumer(ks, g, consumer, now)
            recs.append(touch)
            touched = True
        claimed[pk] = new
        recs.append((pk, new))
        out.append((sid, None if how.justid else fields))
    if recs:
        ks.apply(recs)
    return out, created


def autoclaim(ks: Keyspace, g: GroupRef, consumer: bytes, min_idle: int, start: StreamId, count: int,
              justid: bool, now: int) -> tuple[StreamId, list[tuple[StreamId, list[bytes] | None]],
                                               list[StreamId], bool]:
    """XAUTOCLAIM: (next cursor, claimed entries, ids deleted from the PEL because their
    entry is gone, whether the consumer was created), examining at most ``count * 10``
    pending entries from ``start``."""
    recs: list[tuple[bytes, bytes]] = []
    out: list[tuple[StreamId, list[bytes] | None]] = []
    deleted: list[StreamId] = []
    origin = ks.node_id
    attempts = count * 10
    cursor = MIN_ID
    touched = created = False
    it = _pending_records(ks, g, start)
    for ik, rec in it:
        sid = _ID.unpack_from(ik, len(ik) - 16)
        if not attempts or not count:
            cursor = sid
            break
        attempts -= 1
        fields, gone = entry_state(ks, g.st, sid)
        if fields is None:
            if gone:
                recs.append((ik, G.ack_pending(rec, ks.hlc.now(), origin)))
                deleted.append(sid)
                count -= 1
            continue
        p = G.pending_of(rec)
        if min_idle and now - p.delivery_ms < min_idle:
            continue
        if not touched:
            touch, created = touch_consumer(ks, g, consumer, now)
            recs.append(touch)
            touched = True
        recs.append((ik, G.claim_pending(rec, ks.hlc.now(), origin, consumer, now, 0 if justid else 1)))
        out.append((sid, None if justid else fields))
        count -= 1
    if recs:
        ks.apply(recs)
    return cursor, out, deleted, created
