"""HyperLogLog keys: PFADD / PFCOUNT / PFMERGE over one record per touched register.

An HLL is a collection head of type HLL plus, for every bucket a PFADD or PFMERGE ever
raised, one register record ``[pid] b'H' [klen] [key] [bucket:u16]`` whose one-byte
payload is the bucket's rank (core/hll.py: the frozen P = 14 / xxh3_64 mapping, the
max-lattice merge, Redis's estimator). An absent register is rank 0.

Writes
    PFADD computes, per touched bucket, the highest rank of its elements and writes a
    register only where it exceeds the current one, all in one apply with the head if the
    key is created. A PFADD that raises nothing writes nothing: no record changes, no
    replication (the merge keeps the stored register). PFMERGE writes the pointwise max of
    its sources where it exceeds the destination.

Reads and the register cache
    A register map is 16384 ranks. Reading it from RocksDB on every PFCOUNT is a scan of
    up to 16384 records (~30 ms in Python), so ``RegisterCache`` keeps the ranks of
    recently counted HLLs in memory: a ``bytearray(16384)`` per HLL (LRU, ``CAPACITY``
    HLLs, 16 KB each) with the head record it was built under and the last estimate. It
    is kept current from the keyspace's change feed (``Keyspace.changes``: every record the apply
    path changed, local or replicated): a register record updates its bucket and drops the
    cached estimate, any change of the head drops the entry. A cached entry is used only
    while the live head still is the record it was built under (a DEL, an EXPIRE, a head
    that expired all fail that check), and an HLL whose registers carry a TTL (a peer
    could ship one) is never cached. The sweeper's physical removals are not in the feed,
    and need not be: it only removes registers that already read as absent (gated by the
    head's delete clock).

    PFCOUNT of one key therefore costs two point reads (string key, head) and, when the
    HLL changed since the last count, one histogram of the ranks and the estimator
    (~1 ms for a dense HLL); unchanged, it returns the cached estimate, as Redis returns
    the cardinality it caches in the sketch's header. PFADD reads the ranks it compares
    with from the cache when the HLL is cached, else by point reads of its buckets (it
    never builds an entry: a PFADD-only workload over many keys must not scan). The feed
    is subscribed while the cache holds an entry, so a node that never counts pays
    nothing per write.

DEL and generations (core/hll.py)
    DEL writes one head tombstone; the registers stay on disk until the sweeper removes
    them. Every register a PFADD or PFMERGE writes carries the delete clock of the head
    it was written under (its generation), and only the registers of the head's current
    generation are live (``hll.gate_clock``): a PFADD after DEL (or after the key
    expired) counts what it adds on every node, whatever ranks the dead registers of
    that bucket had. A PFADD made on a node that had not seen a DEL yet is removed by
    it (a register cannot tell the elements it counts before the DEL from those after).

Types
    TYPE reports an HLL as ``string`` (spec). A live string key is not an HLL here (Redis
    accepts a string holding its own sketch bytes): the HLL commands answer
    ``InvalidHll`` for one, as Redis does for a string that is not a sketch, and
    ``WrongType`` for a collection of another type.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Final, Protocol

from marekvs.core import envelope as env
from marekvs.core import head, hll
from marekvs.core import keys as K
from marekvs.keyspace.keyspace import Keyspace
from marekvs.keyspace.status import KeyspaceError

HLL = head.CollectionType.HLL
M = hll.M
CAPACITY = 256  # HLLs whose ranks the cache keeps (16 KB each)
KEYS_KEPT = 4096  # user keys whose internal keys the cache keeps

_TAG = K.TAG_HLL
_ORD_HLL = K.TAG_HLL[0]
_ORD_HEAD = K.ORD_HEAD
_HEADER: Final = env.HEADER
_TTL_AT: Final = env.TTL_AT  # record[_TTL_AT:_HEADER] is the deadline
_NO_TTL: Final = env.NO_TTL
_TOMB = env.FLAG_TOMBSTONE
_observe = hll.observe
_prefix = K.collection_prefix
_is_live = env.is_live
_HLL_FLAGS = hll.FLAGS
_pack = env.pack_envelope


class InvalidHll(KeyspaceError):
    """The key holds a string, which is not a HyperLogLog here (Redis: a string that is
    not a sketch)."""


Change = tuple[bytes, bytes | None, bytes]


class ChangeFeed(Protocol):
    """What the cache needs of the keyspace's change feed (``keyspace/changes.py``)."""

    def subscribe(self, fn: Callable[[list[Change]], None]) -> None: ...

    def unsubscribe(self, fn: Callable[[list[Change]], None]) -> None: ...


# -- the register cache ---------------------------------------------------------------------

class _Entry:
    __slots__ = ("head", "delete_clock", "ranks", "count")

    def __init__(self, head_rec: bytes, delete_clock: int, ranks: bytearray):
        self.head = head_rec
        self.delete_clock = delete_clock
        self.ranks = ranks
        self.count: int | None = None


class _Ranks(Mapping[int, int]):
    """A dense rank array as the bucket -> rank map core's estimator reads (``values``
    lists the ranks of the touched buckets, built from one C-level count per rank)."""

    def __init__(self, ranks: bytes | bytearray):
        self.ranks = ranks

    def __getitem__(self, bucket: int) -> int:
        r = self.ranks[bucket]
        if not r:
            raise KeyError(bucket)
        return r

    def __iter__(self) -> Iterator[int]:
        return (b for b, r in enumerate(self.ranks) if r)

    def __len__(self) -> int:
        return M - self.ranks.count(0)

    def values(self) -> list[int]:  # type: ignore[override]
        out: list[int] = []
        for rank in range(1, hll.MAX_RANK + 1):
            n = self.ranks.count(rank)
            if n:
                out += [rank] * n
        return out


def estimate(ranks: bytes | bytearray) -> int:
    """PFCOUNT of a dense rank array: core's estimator (Redis's ``hllCount``)."""
    return hll.count(_Ranks(ranks))


class RegisterCache:
    """The ranks of recently counted HLLs, kept current from the change feed (see the
    module docstring). One per keyspace: ``cache_for``."""

    def __init__(self, capacity: int = CAPACITY):
        self.capacity = capacity
        self.entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self.feed: ChangeFeed | None = None
        self._subscribed = False
        self.builds = 0  # entries built by a scan (tests, INFO-style counters)
        # user key -> (pid, string key, head key, register prefix): built once per key
        self.keys: dict[bytes, tuple[int, bytes, bytes, bytes]] = {}
        self._dclock: tuple[bytes | None, int] = (None, 0)

    def locate(self, key: bytes) -> tuple[int, bytes, bytes, bytes]:
        """(pid, string key, head key, register key prefix) of the user key ``key``."""
        loc = self.keys.get(key)
        if loc is None:
            pid, ik = K.locate_string(key)
            loc = (pid, ik, K.head_key_of_string_key(ik), _prefix(_TAG, key))
            if len(self.keys) >= KEYS_KEPT:
                self.keys.clear()
            self.keys[key] = loc
        return loc

    def attach(self, feed: ChangeFeed) -> None:
        """The change feed to follow while the cache holds entries."""
        if feed is not self.feed:
            if self._subscribed and self.feed is not None:
                self.feed.unsubscribe(self.on_changes)
                self._subscribed = False
            self.entries.clear()
            self.feed = feed

    def delete_clock(self, head_rec: bytes, now: int) -> int:
        """``head.delete_clock`` of a live head, remembered for the last head asked about
        (PFADD without a cached entry compares each register it reads with it)."""
        last = self._dclock
        if last[0] is not head_rec:
            last = self._dclock = (head_rec, head.delete_clock(head_rec, now))
        return last[1]

    def valid(self, key: bytes, head_rec: bytes) -> _Entry | None:
        """The entry of ``key`` if it was built under the live head ``head_rec``."""
        e = self.entries.get(key)
        if e is None:
            return None
        if e.head is not head_rec and e.head != head_rec:
            self.drop(key)
            return None
        self.entries.move_to_end(key)
        return e

    def get_or_build(self, ks: Keyspace, key: bytes, head_rec: bytes, now: int) -> _Entry:
        """The entry of ``key`` (live head ``head_rec``), built by one scan if needed.
        Without a feed (or for an HLL with expiring registers) the entry is built but
        not kept."""
        e = self.valid(key, head_rec)
        if e is not None:
            return e
        ranks = bytearray(M)
        cacheable = True
        for suffix, rec in ks.elements(_TAG, key, head_rec, now):
            ranks[int.from_bytes(suffix, "big")] = rec[_HEADER]
            if rec[_TTL_AT:_HEADER] != _NO_TTL:
                cacheable = False
        self.builds += 1
        e = _Entry(head_rec, head.delete_clock(head_rec, now), ranks)
        if cacheable and self.feed is not None:
            self.entries[key] = e
            if len(self.entries) > self.capacity:
                self.entries.popitem(last=False)
            if not self._subscribed:
                self.feed.subscribe(self.on_changes)
                self._subscribed = True
        return e

    def drop(self, key: bytes) -> None:
        self.entries.pop(key, None)
        if not self.entries and self._subscribed and self.feed is not None:
            self.feed.unsubscribe(self.on_changes)
            self._subscribed = False

    def on_changes(self, changes: list[Change]) -> None:
        """The change feed's callback: keep cached ranks equal to the stored registers."""
        entries = self.entries
        for ikey, _, new in changes:
            if not entries:
                return
            tag = ikey[K.TAG_AT]
            if tag == _ORD_HLL:
                try:
                    key, bucket = K.decode_hll_key(ikey)
                except K.KeyDecodeError:
                    continue
                e = entries.get(key)
                if e is None:
                    continue
                if new[_TTL_AT:_HEADER] != _NO_TTL:
                    self.drop(key)  # an expiring register: never cached
                    continue
                live = not new[0] & _TOMB and hll.gate_clock(new) > e.delete_clock
                rank = hll.value(new) if live else 0
                if e.ranks[bucket] != rank:
                    e.ranks[bucket] = rank
                    e.count = None
            elif tag == _ORD_HEAD:
                try:
                    key = K.decode_head_key(ikey)
                except K.KeyDecodeError:
                    continue
                if key in entries:
                    self.drop(key)


def cache_for(ks: Keyspace) -> RegisterCache:
    """The register cache of keyspace ``ks`` (one per keyspace: ``Keyspace.extension``),
    following the keyspace's change feed while it holds an entry."""
    cache: RegisterCache = ks.extension("hll", _new_cache)
    return cache


def _new_cache(ks: Keyspace) -> RegisterCache:
    cache = RegisterCache()
    cache.attach(ks.changes)
    return cache


# -- lookups ------------------------------------------------------------------------------
# The hot path of PFADD and PFCOUNT: the keys of a user key are built once and kept
# (``RegisterCache.locate``), the head is read with the engine's point reads, and a register
# key is the HLL's element prefix plus the bucket's u16 suffix, as ``keys.encode_hll_key``
# builds it (tests/unit/test_hll_keyspace.py pins the copies to core's functions).

_BUCKETS = [b.to_bytes(2, "big") for b in range(M)]  # the [bucket:u16] suffix of each register key
_ORD_STRING = K.ORD_STRING
_CTYPE_AT = _HEADER + 1  # a head payload's ctype byte (head.ctype_of)


def lookup(ks: Keyspace, key: bytes, now: int,
           cache: RegisterCache | None = None) -> tuple[bytes, bytes | None]:
    """(head key, live head or None) of the HLL ``key``: InvalidHll if a live string
    holds the key, WrongType if a collection of another type does."""
    pid, ik, hk, _ = (cache or cache_for(ks)).locate(key)
    get = ks.get
    if _is_live(get(ik), now):
        raise InvalidHll()
    h = get(hk) if ks.head_pids[pid] else None
    if h is None:
        return hk, None
    if h[_CTYPE_AT] == HLL and _is_live(h, now):
        return hk, h  # (a live HyperLogLog exists, empty or not)
    # a dead HLL head, or another type's: whether it stands for a key is the keyspace's rule
    found = ks.existing(key, HLL, now)
    return hk, (None if found is None else found[1])


def read_lookup(ks: Keyspace, key: bytes, now: int, cache: RegisterCache) -> tuple[bytes, bytes | None]:
    """``lookup`` for a read (Redis's lookupKeyRead): counted as a keyspace hit (the key
    exists, whatever its type) or a miss."""
    try:
        found = lookup(ks, key, now, cache)
    except KeyspaceError:
        ks.counted(key, True)
        raise
    ks.counted(key, found[1] is not None)
    return found


def register_map(ks: Keyspace, key: bytes, head_rec: bytes | None, now: int) -> dict[int, int]:
    """bucket -> rank of every live register of the HLL ``key`` (a scan, no cache)."""
    if head_rec is None:
        return {}
    return {int.from_bytes(s, "big"): r[_HEADER] for s, r in ks.elements(_TAG, key, head_rec, now)}


def ranks_of(ks: Keyspace, cache: RegisterCache, key: bytes, head_rec: bytes, now: int) -> bytes | bytearray:
    return cache.get_or_build(ks, key, head_rec, now).ranks


def register_record(rank: int, stamp: int, node: int, generation: int = 0) -> bytes:
    """``hll.new(rank, stamp, node, generation)``, inlined for generation 0."""
    if generation:
        return hll.new(rank, stamp, node, generation)
    return _pack(_HLL_FLAGS, stamp, node, 0) + _RANK_BYTES[rank]


_RANK_BYTES = [bytes((r,)) for r in range(256)]


# -- operations ---------------------------------------------------------------------------

def pfadd(ks: Keyspace, cache: RegisterCache, key: bytes, elements: Iterable[bytes], now: int) -> int:
    """PFADD: 1 if the HLL was created or a register rose, else 0 (nothing written)."""
    hk, h = lookup(ks, key, now, cache)
    prefix = cache.locate(key)[3]
    recs: list[tuple[bytes, bytes]] = []
    entry: _Entry | None = None
    if h is None:
        h = head.new(HLL, ks.hlc.now(), ks.node_id, prior=ks.get(hk), now_ms=now)
        recs.append((hk, h))
    else:
        entry = cache.valid(key, h)
    best: dict[int, int] = {}
    for e in elements:
        bucket, rank = _observe(e)
        if rank > best.get(bucket, 0):
            best[bucket] = rank
    if best:
        stamp = 0
        get = ks.get
        gen = cache.delete_clock(h, now)  # the registers' generation
        for bucket, rank in best.items():
            if entry is not None:
                cur = entry.ranks[bucket]
            elif recs:
                cur = 0  # a new head: every register already stored is of an older generation
            else:
                # the stored register, if live (head.element_live, the head's clock read once)
                rec = get(prefix + _BUCKETS[bucket])
                cur = rec[_HEADER] if (rec is not None and _is_live(rec, now)
                                       and hll.gate_clock(rec) > gen) else 0
            if rank > cur:
                if not stamp:
                    stamp = ks.hlc.now()
                recs.append((prefix + _BUCKETS[bucket], register_record(rank, stamp, ks.node_id, gen)))
    if not recs:
        return 0
    return 1 if ks.apply(recs) else 0


def pfcount(ks: Keyspace, cache: RegisterCache, keys: list[bytes], now: int) -> int:
    """PFCOUNT: the estimate of one HLL (cached while it does not change), or of the
    union of several (absent keys are empty HLLs)."""
    if len(keys) == 1:
        _, h = read_lookup(ks, keys[0], now, cache)
        if h is None:
            return 0
        e = cache.get_or_build(ks, keys[0], h, now)
        if e.count is None:
            e.count = estimate(e.ranks)
        return e.count
    union: bytes | None = None
    for key in keys:
        _, h = read_lookup(ks, key, now, cache)
        if h is None:
            continue
        ranks = ranks_of(ks, cache, key, h, now)
        union = bytes(ranks) if union is None else bytes(map(max, union, ranks))
    return 0 if union is None else estimate(union)


def pfmerge(ks: Keyspace, cache: RegisterCache, dest: bytes, sources: list[bytes], now: int) -> None:
    """PFMERGE: ``dest`` becomes the union of itself and ``sources`` (absent ones are
    empty); created if absent. Every key's type is checked before anything is written."""
    found: list[tuple[bytes, bytes | None]] = [read_lookup(ks, k, now, cache) for k in [dest, *sources]]
    union: bytes | bytearray = bytes(M)
    for key, (_, sh) in zip(sources, found[1:]):
        if sh is not None:
            ranks = ranks_of(ks, cache, key, sh, now)
            union = bytes(map(max, union, ranks))
    raise_registers(ks, cache, dest, found[0], union, now)


def ranks_or_none(ks: Keyspace, cache: RegisterCache, key: bytes, now: int) -> bytes | None:
    """The dense ranks of the HLL ``key`` (None if absent), read as PFCOUNT reads it
    (``read_lookup``: InvalidHll, WrongType)."""
    _, h = read_lookup(ks, key, now, cache)
    return None if h is None else bytes(ranks_of(ks, cache, key, h, now))


def raise_registers(ks: Keyspace, cache: RegisterCache, dest: bytes, found: tuple[bytes, bytes | None],
                    union: bytes | bytearray, now: int) -> None:
    """PFMERGE's write: the HLL ``dest`` (``found``: its ``lookup``) created if absent and
    each of its registers raised to ``union``'s where that is higher."""
    hk, h = found
    recs: list[tuple[bytes, bytes]] = []
    if h is None:
        h = head.new(HLL, ks.hlc.now(), ks.node_id, prior=ks.get(hk), now_ms=now)
        recs.append((hk, h))
        current: bytes | bytearray = bytes(M)
    else:
        current = ranks_of(ks, cache, dest, h, now)
    if any(union):
        stamp = ks.hlc.now()
        node = ks.node_id
        gen = head.delete_clock(h, now)
        prefix = cache.locate(dest)[3]
        for bucket, rank in enumerate(union):
            if rank > current[bucket]:
                recs.append((prefix + _BUCKETS[bucket], register_record(rank, stamp, node, gen)))
    if recs:
        ks.apply(recs)
