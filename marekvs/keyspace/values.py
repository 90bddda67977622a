"""A key's whole value, read and written at once: DUMP and RESTORE, SORT ... STORE and
MEMORY USAGE.

``Values`` reads the value a key holds as one of ``core/rdb.py``'s typed values (a
string, a list, a set, a zset, a hash, a stream; a HyperLogLog as Redis's sketch string)
with its TTL deadline, and writes such a value at a key, replacing whatever the key
holds, as an ordinary write of the records the type keeps (``write``): the key's
tombstone (a string's, or its head's, whose delete clock gates every element it had), a
new head carrying that clock and the deadline, and one element record per member, field
or item, all stamped by this node and merged by the ONE apply path, so the write
replicates like any other. Each type is one row of ``TYPES`` (how its value is read, how
it is written, how many elements it has); a type built later is one more row.

Writes per type (one apply, hence one replication-log entry, except the zset's TTL):

- string: the string record (with its deadline), and the head's tombstone if a
  collection held the key (``strings.records``);
- hash, set: a head and one observed-remove add per field or member (blind adds, as HSET
  and SADD write them: a new dot covering nothing);
- list: a head and one LWW element per item at ``LIST_CENTER + i``;
- zset: ``zsets.store`` (member records and their score index, through the sorted-set
  module, which keeps its mirrors and index repair right), then the deadline as EXPIRE
  writes it, in the same batch and log entry;
- HyperLogLog: a string holding a valid Redis sketch (``rdb.hll_ranks``) is written as a
  head and one register record per non-empty register (a sketch is what Redis holds for
  an HLL), of the new head's generation (keyspace/hll.py);
- stream: a head (the last id), one entry record per entry, this node's counters record
  as a new epoch (as XSETID writes it), and per consumer group its record, one pending
  record per PEL entry and one record per consumer (``_write_stream``).

Per-member TTLs (HEXPIRE, EXPIREMEMBER) are not part of a value: Redis 7.0 has none, so
``read`` leaves them out and ``write`` writes none.

Sizes (``size``): the bytes (internal key and stored record) of the key's live records in
RocksDB before compression: its string record, or its head and its live element records
of every kind the type keeps (a zset: members and score index). Like Redis's MEMORY USAGE,
a collection's elements are sampled: the first ``samples`` live records of each kind (all
of them with 0), their mean size times the element count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from marekvs.core import envelope as env
from marekvs.core import head, rdb, registry, stream
from marekvs.core import keys as K
from marekvs.core import streamgroup as G
from marekvs.core.envelope import RecordType
from marekvs.core.head import CollectionType
from marekvs.keyspace import hashes as kh
from marekvs.keyspace import hll as khll
from marekvs.keyspace import lists as kl
from marekvs.keyspace import members as M
from marekvs.keyspace import sets as ksets
from marekvs.keyspace import streams as S
from marekvs.keyspace import strings as kstr
from marekvs.keyspace import zsets as Z
from marekvs.keyspace.keyspace import Keyspace
from marekvs.keyspace.status import KeyspaceError

Record = tuple[bytes, bytes]
_ORD_STRING = K.ORD_STRING
_TAG_AT = K.TAG_AT


T = TypeVar("T")


def quiet(ks: Keyspace, fn: Callable[..., T], *args: object) -> T:
    """``fn(*args)``, a type module's read of a key its command has already looked up and
    counted (Redis counts one keyspace hit or miss per key a command looks up; the type
    modules count their own reads, so a second read of the key must not count again)."""
    hits, misses, on_miss = ks.hits, ks.misses, ks.on_miss
    ks.on_miss = None
    try:
        return fn(*args)
    finally:
        ks.hits, ks.misses, ks.on_miss = hits, misses, on_miss


class Unsupported(KeyspaceError):
    """A type whose value cannot be read or written as a whole (yet): ``detail`` names it."""


@dataclass(frozen=True, slots=True)
class TypeIO:
    """How one collection type's whole value is read and written, and counted."""

    value: type | None  # its rdb value class (None: a HyperLogLog, written from a String)
    read: Callable[["Values", bytes, int], rdb.Value]
    write: Callable[["Values", bytes, rdb.Value, int, int], None]  # key, value, deadline, now
    count: Callable[["Values", bytes, int], int]


class Values:
    """Whole values of one keyspace, with the type states the lists and zsets keep."""

    def __init__(self, ks: Keyspace, lists: kl.Lists, zsets: Z.Zsets, hlls: khll.RegisterCache):
        self.ks = ks
        self.lists = lists
        self.zsets = zsets
        self.hlls = hlls

    # -- reading ------------------------------------------------------------------------
    def read(self, key: bytes, now: int) -> tuple[rdb.Value, int] | None:
        """(value, TTL deadline or 0) of the live key ``key``, None if absent; the lookup
        counts as a keyspace hit or miss. ``Unsupported`` for a type with no row."""
        found = self.ks.read_record(key, now)
        if found is None:
            return None
        ikey, rec = found
        if ikey[_TAG_AT] == _ORD_STRING:
            return rdb.String(kstr.string_value(rec)), env.ttl_of(rec)
        return quiet(self.ks, self.type_of(rec).read, self, key, now), env.ttl_of(rec)

    @staticmethod
    def type_of(head_rec: bytes) -> TypeIO:
        ctype = head.ctype_of(head_rec)
        io = TYPES.get(ctype)
        if io is None:
            raise Unsupported(head.TYPE_NAMES.get(ctype, str(ctype)))
        return io

    # -- writing ------------------------------------------------------------------------
    def write(self, key: bytes, value: rdb.Value, deadline: int, now: int) -> None:
        """Make ``key`` hold ``value`` (with TTL ``deadline``, 0 for none), whatever it
        held: an ordinary write through the apply path."""
        if isinstance(value, rdb.String):
            if value.value[:4] == b"HYLL" and rdb.hll_ranks(value.value) is not None:
                _write_hll(self, key, value, deadline, now)  # Redis's HyperLogLog sketch
            else:
                self.ks.apply(kstr.records(self.ks, key, value.value, deadline, now))
            return
        _BY_VALUE[type(value)].write(self, key, value, deadline, now)

    def _replace(self, key: bytes, ctype: int, deadline: int, now: int) -> tuple[bytes, list[Record]]:
        """(head key, records) that replace whatever ``key`` holds by an empty
        collection of ``ctype``: the old key's tombstone (a string's) and the new head,
        which folds in the dead head's delete clock (so every old element stays dead)."""
        ks = self.ks
        recs = ks.delete_records(key, now)
        hk = K.encode_head_key(key)
        prior = ks.get(hk)
        out: list[Record] = []
        for ik, r in recs:
            if ik == hk:
                prior = r
            else:
                out.append((ik, r))
        out.insert(0, (hk, head.new(ctype, ks.stamp(), ks.node_id, prior=prior, now_ms=now,
                                    ttl_deadline_ms=deadline)))
        return hk, out

    # -- sizes (MEMORY USAGE) ---------------------------------------------------------------
    def size(self, key: bytes, samples: int, now: int) -> int | None:
        """Bytes of the key's live records (see the module docstring), None if absent.
        ``samples`` 0: every element is read."""
        found = self.ks.live_record(key, now)
        if found is None:
            return None
        ikey, rec = found
        total = len(ikey) + len(rec)
        if ikey[_TAG_AT] == _ORD_STRING:
            return total
        ctype = head.ctype_of(rec)
        io = TYPES.get(ctype)
        if io is None:  # a type without a count here: every element is read
            n, samples = -1, 0
        else:
            n = quiet(self.ks, io.count, self, key, now)
        for kind in registry.element_kinds(ctype):
            prefix = kind.prefix(key)
            seen = read = 0
            for ek, ev in self.ks.elements(kind.tag, key, rec, now):
                seen += 1
                read += len(prefix) + len(ek) + len(ev)
                if samples and seen >= samples:
                    break
            if seen:
                total += read if not samples or seen >= n else read * n // seen
        return total


# =========================================================================================
# One row per type
# =========================================================================================

def _read_hash(v: Values, key: bytes, now: int) -> rdb.Value:
    return rdb.Hash(kh.items(v.ks, key, now))


def _read_set(v: Values, key: bytes, now: int) -> rdb.Value:
    return rdb.Set(ksets.all_members(v.ks, key, now))


def _read_zset(v: Values, key: bytes, now: int) -> rdb.Value:
    zs = Z.lookup(v.zsets, key, now)
    if zs is None:
        return rdb.Zset([])
    return rdb.Zset([(m, s) for s, m in Z.iter_members(Z.order_of(v.zsets, zs, now))])


def _read_list(v: Values, key: bytes, now: int) -> rdb.Value:
    return rdb.List(kl.values(v.lists, key, now))


def _write_members(v: Values, key: bytes, ctype: int, rtype: int, pairs: list[tuple[bytes, bytes]],
                   deadline: int, now: int) -> None:
    hk, recs = v._replace(key, ctype, deadline, now)
    prefix = M.element_prefix(hk, M.MEMBER_KINDS[ctype].tag)
    hlc, node = v.ks.stamp(), v.ks.node_id
    recs += [(prefix + m, M.add(None, rtype, hlc, node, val)) for m, val in pairs]
    v.ks.apply(recs)


def _write_hash(v: Values, key: bytes, value: rdb.Value, deadline: int, now: int) -> None:
    assert isinstance(value, rdb.Hash)
    _write_members(v, key, CollectionType.HASH, RecordType.HASH_FIELD, list(value.pairs), deadline, now)


def _write_set(v: Values, key: bytes, value: rdb.Value, deadline: int, now: int) -> None:
    assert isinstance(value, rdb.Set)
    _write_members(v, key, CollectionType.SET, RecordType.SET_MEMBER, [(m, b"") for m in value.members],
                   deadline, now)


def _write_zset(v: Values, key: bytes, value: rdb.Value, deadline: int, now: int) -> None:
    assert isinstance(value, rdb.Zset)
    Z.store(v.zsets, key, [(s, m) for m, s in value.entries], now)
    if deadline:
        v.ks.set_ttl(key, deadline, now)


def _write_list(v: Values, key: bytes, value: rdb.Value, deadline: int, now: int) -> None:
    assert isinstance(value, rdb.List)
    items = value.items
    hk, recs = v._replace(key, CollectionType.LIST, deadline, now)
    prefix = K.TAG_LIST.join((hk[:2], hk[3:]))
    stamp, node = v.ks.hlc.reserve(len(items)), v.ks.node_id
    flags = env.make_flags(RecordType.LIST)
    pack = env.pack_envelope
    pos = K.LIST_CENTER
    for i, item in enumerate(items):
        recs.append((prefix + (pos + i).to_bytes(8, "big"), pack(flags, stamp + i, node, 0) + item))
    v.ks.apply(recs)


def write_list(v: Values, key: bytes, items: list[bytes], now: int) -> None:
    """Replace ``key`` by the list ``items`` (SORT ... STORE), no TTL; an empty list
    deletes the key."""
    if items:
        _write_list(v, key, rdb.List(items), 0, now)
    elif (recs := v.ks.delete_records(key, now)):
        v.ks.apply(recs)


def _read_hll(v: Values, key: bytes, now: int) -> rdb.Value:
    """Redis's dense sketch of the registers (a string, as Redis holds an HLL)."""
    _, h = khll.lookup(v.ks, key, now, v.hlls)
    ranks = bytes(khll.M) if h is None else khll.ranks_of(v.ks, v.hlls, key, h, now)
    return rdb.String(rdb.hll_dense(ranks))


def _write_hll(v: Values, key: bytes, value: rdb.Value, deadline: int, now: int) -> None:
    """A head and one register record per non-empty register of the sketch."""
    assert isinstance(value, rdb.String)
    ranks = rdb.hll_ranks(value.value)
    assert ranks is not None
    _, recs = v._replace(key, CollectionType.HLL, deadline, now)
    gen = head.delete_clock(recs[0][1], now)  # the new head's: the registers' generation
    prefix = K.collection_prefix(K.TAG_HLL, key)
    stamp, node = v.ks.stamp(), v.ks.node_id
    recs += [(prefix + b.to_bytes(2, "big"), khll.register_record(r, stamp, node, gen))
             for b, r in enumerate(ranks) if r]
    v.ks.apply(recs)


def _count_hll(v: Values, key: bytes, now: int) -> int:
    _, h = khll.lookup(v.ks, key, now, v.hlls)
    return 0 if h is None else sum(1 for r in khll.ranks_of(v.ks, v.hlls, key, h, now) if r)


def _read_stream(v: Values, key: bytes, now: int) -> rdb.Value:
    """Entries, counters and every group with its PEL and consumers (a consumer that owns
    a pending entry but was removed on another node meanwhile is written with the entry's
    delivery time as its seen time: Redis needs an owner for every PEL entry)."""
    ks = v.ks
    st = S.lookup(ks, key, now)
    if st is None:
        return rdb.Stream([])
    tot = st.totals()
    entries = S.range_entries(ks, st, S.MIN_ID, S.MAX_ID)
    groups: list[rdb.StreamGroup] = []
    for g in S.groups(ks, st):
        pos = g.position()
        pel = list(S.pending(ks, g))
        seen = {c.name: c.seen_ms for c in S.consumers(ks, g)}
        owned: dict[bytes, list[rdb.StreamId]] = {}
        for p in pel:
            owned.setdefault(p.consumer, []).append(p.id)
            seen.setdefault(p.consumer, p.delivery_ms)
        groups.append(rdb.StreamGroup(
            g.name, pos.id, -1 if pos.entries_read is None else pos.entries_read,
            [(p.id, p.delivery_ms, p.deliveries) for p in pel],
            [rdb.StreamConsumer(n, seen[n], owned.get(n, [])) for n in sorted(seen)]))
    last = max(st.last_id, entries[-1][0]) if entries else st.last_id
    return rdb.Stream(entries, last, S.first_id(ks, st), tot.max_deleted, tot.added, groups)


def _write_stream(v: Values, key: bytes, value: rdb.Value, deadline: int, now: int) -> None:
    """A head, one entry record per entry, this node's counters record as a new epoch
    holding the stream's (its last id, as XSETID writes one), and per
    group its record, one pending record per PEL entry (delivered if at or below the
    group's last id, its delivery count a new count base as XCLAIM RETRYCOUNT sets one) and
    one record per consumer."""
    assert isinstance(value, rdb.Stream)
    ks = v.ks
    hk, recs = v._replace(key, CollectionType.STREAM, deadline, now)
    h = recs[0][1]
    dc = head.delete_clock(h, now)
    hlc, node = ks.hlc.now(), ks.node_id
    xp = K.collection_prefix(K.TAG_STREAM, key)
    for sid, flat in value.entries:
        recs.append((xp + K.id_suffix(*sid), stream.new(list(zip(flat[0::2], flat[1::2])), hlc, node)))
    counters = stream.Counters(dc, (hlc, node), value.entries_added, value.last_id, value.max_deleted)
    recs.append((K.encode_stream_counter_key(key, node), stream.counters_record(counters, hlc, node)))
    for g in value.groups:
        gk = K.retag(xp, K.TAG_GROUP) + g.name
        base = G.Position(*g.last_id, g.entries_read + 1 if g.entries_read >= 0 else G.UNKNOWN_READ)
        grec = G.new_group(hlc, node, base, ks.get(gk), dc)
        recs.append((gk, grec))
        epoch = G.epoch_of(grec)
        owner = {sid: c.name for c in g.consumers for sid in c.pending}
        pp = K.retag(xp, K.TAG_PENDING) + K.group_suffix(g.name)
        for sid, ms, n in g.pending:
            recs.append((pp + K.id_suffix(*sid), G.force_pending(epoch, hlc, node, owner[sid], ms, retrycount=n,
                                                                 delivered=sid <= g.last_id)))
        cp = K.retag(xp, K.TAG_CONSUMER) + K.group_suffix(g.name)
        for c in g.consumers:
            recs.append((cp + c.name, G.touch_consumer(ks.get(cp + c.name), hlc, node, c.seen_ms)))
    ks.apply(recs)


def _count_stream(v: Values, key: bytes, now: int) -> int:
    st = S.lookup(v.ks, key, now)
    return 0 if st is None else st.length


TYPES: dict[int, TypeIO] = {
    CollectionType.HASH: TypeIO(rdb.Hash, _read_hash, _write_hash, lambda v, k, now: kh.length(v.ks, k, now)),
    CollectionType.SET: TypeIO(rdb.Set, _read_set, _write_set, lambda v, k, now: ksets.cardinality(v.ks, k, now)),
    CollectionType.ZSET: TypeIO(rdb.Zset, _read_zset, _write_zset, lambda v, k, now: Z.card(v.zsets, k, now)),
    CollectionType.LIST: TypeIO(rdb.List, _read_list, _write_list, lambda v, k, now: kl.op_len(v.lists, k, now)),
    CollectionType.HLL: TypeIO(None, _read_hll, _write_hll, _count_hll),
    CollectionType.STREAM: TypeIO(rdb.Stream, _read_stream, _write_stream, _count_stream),
}
_BY_VALUE: dict[type, TypeIO] = {io.value: io for io in TYPES.values() if io.value is not None}
