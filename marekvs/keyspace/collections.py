"""What every collection type shares, over the record-kind registry: moving a collection to
another key (RENAME, RENAMENX, COPY) and the encoding OBJECT ENCODING reports.

Nothing here names a collection type's records: the element kinds of a collection come
from ``registry.element_kinds(ctype)`` (a zset: its members and its score index), and what
a record of a kind becomes at the new key follows from the kind's lattice, so a type built
later (or a kind added to a type) is covered by its registry row.

Moving a collection (``move``)
    Every live element record of the source (live itself and newer than the head's delete
    clock; ``Keyspace.elements``) is re-keyed under the destination with a fresh version
    stamped by this node, and the destination gets a new head; all in ONE apply, so RENAME
    is one replication-log entry and a peer applies it at once. Per kind:

    - observed-remove elements (hash fields, set and zset members: ``orswot.merge``): a
      fresh add dot carrying the element's value (its top live dot's), with the element's
      own TTL (per-member TTL is carried over);
    - HLL registers (``hll.merge``): a fresh register of the same rank, of the new head's
      generation;
    - last-writer-wins records (list elements, stream entries): the same payload and TTL
      under a fresh version;
    - a stream's per-origin counters: the same counts in the new head's generation;
    - the zset score index (derived from the members): one entry per live member, at the
      score of the member it copies.

    The new head is the source head's type, TTL, stream state (last id, configuration)
    with a fresh version, and its delete clock is that version's own hlc: everything the
    destination held (a live or dead collection of any type, older than this stamp) reads
    as dead, as after a DEL, and only the moved elements (stamped after it) are live. A
    live string at the destination gets its tombstone; a head there is merged into the new
    one. RENAME also writes the source head's tombstone, so the source's records are
    reclaimed by the sweeper like after any DEL. (A HyperLogLog destination that held
    registers is subject to the HLL DEL caveat, ``keyspace/hll.py``.)

    The cost is O(N) records read and written for N elements (Redis's RENAME is O(1), its
    COPY O(N)); the whole collection is one apply and one log entry.

Encodings (``encoding``)
    Redis 7.0's rules from the collection's current contents and the ``*-max-*``
    parameters: a hash is ``listpack`` while it has at most ``hash-max-listpack-entries``
    fields and no field or value longer than ``hash-max-listpack-value`` bytes, else
    ``hashtable``; a set is ``intset`` while its members are all integers (Redis's
    string2ll) and at most ``set-max-intset-entries``, else ``hashtable``; a zset is
    ``listpack`` within ``zset-max-listpack-entries`` / ``zset-max-listpack-value``, else
    ``skiplist``; a list is ``quicklist`` (Redis 7.0 has no other list encoding); a stream
    ``stream``; a HyperLogLog ``raw`` (a string in Redis). Redis never converts back to the
    compact encoding when a collection shrinks; marekvs keeps no encoding, so a collection
    that shrinks below the limits reports the compact one again (docs/divergences.md). Each
    check stops reading at the first element past a limit: O(min(N, limit)).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

from marekvs.core import envelope as env
from marekvs.core import head, hll, orswot, registry, stream, zset
from marekvs.core import keys as K
from marekvs.core.registry import RecordKind
from marekvs.keyspace.keyspace import Keyspace

CT = head.CollectionType
Record = tuple[bytes, bytes]

_ORD_STRING = K.ORD_STRING


# =========================================================================================
# Moving a collection
# =========================================================================================

def _orswot_copy(rec: bytes, stamp: int, node: int, now: int, dc: int) -> bytes:
    """A fresh add of the element's value, its TTL kept."""
    return orswot.new(env.rtype_of(rec), stamp, node, orswot.value(rec, now) or b"", env.ttl_of(rec))


def _register_copy(rec: bytes, stamp: int, node: int, now: int, dc: int) -> bytes:
    """The same rank in the generation of the new head (delete clock ``dc``)."""
    return env.pack(rec[0], stamp, node, env.ttl_of(rec), hll.to_bytes(hll.value(rec), dc))


def _lww_copy(rec: bytes, stamp: int, node: int, now: int, dc: int) -> bytes:
    """The same payload and TTL under a fresh version."""
    return env.with_ttl(rec, stamp, node, env.ttl_of(rec))


def _counters_copy(rec: bytes, stamp: int, node: int, now: int, dc: int) -> bytes:
    """A stream's per-origin counters, counted in the new head's generation."""
    return stream.counters_record(stream.counters_of(rec)._replace(gen=dc), stamp, node)


Copier = Callable[[bytes, int, int, int, int], bytes]


def copier(kind: RecordKind) -> Copier:
    """What a live record of ``kind`` becomes at the new key, by the kind's lattice."""
    if kind.merge is orswot.merge:
        return _orswot_copy
    if kind.merge is hll.merge:
        return _register_copy
    if kind is registry.STREAM_COUNTERS:
        return _counters_copy
    return _lww_copy


Elements = list[tuple[bytes, list[tuple[bytes, bytes]]]]


def live_elements(ks: Keyspace, src: bytes, src_head: bytes, now: int) -> Elements:
    """The live element records of the collection ``src`` (head record ``src_head``) by
    kind tag, each (suffix, record): what ``adopt_records`` re-keys, also from another
    shard worker (a RENAME or COPY across workers carries them: shards/units.py)."""
    out: Elements = []
    for kind in registry.element_kinds(head.ctype_of(src_head)):
        if kind is registry.ZSET_SCORE:  # derived: one entry per member copied (adopt_records)
            continue
        out.append((kind.tag, list(ks.elements(kind.tag, src, src_head, now))))
    return out


def move_records(ks: Keyspace, src: bytes, src_head: bytes, dst: bytes, dst_found: tuple[bytes, bytes] | None,
                 now: int, delete_source: bool) -> list[Record]:
    """The records that make ``dst`` a copy of the live collection ``src`` (head record
    ``src_head``), replacing whatever ``dst`` holds (its live record: ``dst_found``,
    ``ks.live_record``'s answer), and with ``delete_source`` the source's head tombstone:
    one apply's worth (see the module docstring)."""
    out = adopt_records(ks, src_head, live_elements(ks, src, src_head, now), dst, dst_found, now)
    if delete_source:
        out.append(ks.head_tombstone(K.encode_head_key(src), src_head))
    return out


def adopt_records(ks: Keyspace, src_head: bytes, elements: Elements, dst: bytes,
                  dst_found: tuple[bytes, bytes] | None, now: int) -> list[Record]:
    """The records that make ``dst`` (its live record ``dst_found``) a copy of a collection
    whose head record is ``src_head`` and live elements ``elements`` (``live_elements``),
    each element re-keyed under ``dst`` at its own suffix (a list element at its position,
    a stream entry at its id), as the module docstring says."""
    ctype = head.ctype_of(src_head)
    kinds = {kind.tag: kind for kind in registry.element_kinds(ctype)}
    found = [(kinds[tag], live) for tag, live in elements]
    out: list[Record] = []
    # The destination: a live string dies (its tombstone); the new head's delete clock is
    # its own stamp, so every record the destination held (a live or dead collection of
    # any type: all older than this stamp) reads as dead and only the moved ones are live.
    if dst_found is not None and dst_found[0][K.TAG_AT] == _ORD_STRING:
        out.extend(ks.tombstones(dst_found))
    hk = K.encode_head_key(dst)
    prior = ks.get(hk)
    stamp = ks.hlc.now()
    dc = max(stamp, head.delete_clock(prior, now))
    payload = head.head_of(src_head)._replace(delete_clock=dc)
    new_head = env.pack(env.make_flags(ctype, head=True), stamp, ks.node_id, env.ttl_of(src_head),
                        head.to_bytes(payload))
    if prior is not None:
        new_head = head.merge(prior, new_head)
    out.append((hk, new_head))

    n = sum(len(live) for _, live in found)
    stamp = ks.hlc.reserve(n) if n else 0  # all above the new head's delete clock
    node = ks.node_id
    for kind, live in found:
        make = copier(kind)
        prefix = kind.prefix(dst)
        for suffix, rec in live:
            out.append((prefix + suffix, make(rec, stamp, node, now, dc)))
            if kind is registry.ZSET_MEMBER:  # its score index entry
                score = zset.score_of(rec)
                if score is not None:  # (a live member always has one)
                    out.append((K.encode_zset_score_key(dst, score, suffix), zset.index_live(stamp, node)))
            stamp += 1
    return out


def move(ks: Keyspace, src: bytes, src_head: bytes, dst: bytes, dst_found: tuple[bytes, bytes] | None, now: int,
         delete_source: bool) -> int:
    """RENAME (``delete_source``) or COPY of the collection ``src`` to ``dst`` (its live
    record ``dst_found``) as one apply; the number of element records written."""
    recs = move_records(ks, src, src_head, dst, dst_found, now, delete_source)
    ks.apply(recs)
    return len(recs)


# =========================================================================================
# Encodings (OBJECT ENCODING)
# =========================================================================================

class Limits(NamedTuple):
    """The ``*-max-*`` parameters the encodings depend on (CONFIG's values)."""

    hash_entries: int = 128
    hash_value: int = 64
    set_intset_entries: int = 512
    zset_entries: int = 128
    zset_value: int = 64


def _live(ks: Keyspace, tag: bytes, key: bytes, head_rec: bytes, now: int) -> Iterator[tuple[bytes, bytes]]:
    return ks.elements(tag, key, head_rec, now)


def _is_ll(b: bytes) -> bool:
    """Redis's string2ll: the canonical decimal spelling of an int64."""
    n = len(b)
    if n == 0 or n >= 21:
        return False
    if b.isdigit():
        return (b[0] != 48 or n == 1) and int(b) < 1 << 63
    return n > 1 and b[0] == 45 and b[1] != 48 and b[1:].isdigit() and int(b) >= -(1 << 63)


def hash_encoding(ks: Keyspace, key: bytes, head_rec: bytes, now: int, limits: Limits) -> bytes:
    n = 0
    for field, rec in _live(ks, K.TAG_HASH, key, head_rec, now):
        n += 1
        value = orswot.value(rec, now) or b""
        if n > limits.hash_entries or len(field) > limits.hash_value or len(value) > limits.hash_value:
            return b"hashtable"
    return b"listpack"


def set_encoding(ks: Keyspace, key: bytes, head_rec: bytes, now: int, limits: Limits) -> bytes:
    n = 0
    for member, _ in _live(ks, K.TAG_SET, key, head_rec, now):
        n += 1
        if n > limits.set_intset_entries or not _is_ll(member):
            return b"hashtable"
    return b"intset"


def zset_encoding(ks: Keyspace, key: bytes, head_rec: bytes, now: int, limits: Limits) -> bytes:
    n = 0
    for member, _ in _live(ks, K.TAG_ZSET, key, head_rec, now):
        n += 1
        if n > limits.zset_entries or len(member) > limits.zset_value:
            return b"skiplist"
    return b"listpack"


def list_encoding(ks: Keyspace, key: bytes, head_rec: bytes, now: int, limits: Limits) -> bytes:
    return b"quicklist"


def stream_encoding(ks: Keyspace, key: bytes, head_rec: bytes, now: int, limits: Limits) -> bytes:
    return b"stream"


def hll_encoding(ks: Keyspace, key: bytes, head_rec: bytes, now: int, limits: Limits) -> bytes:
    return b"raw"


ENCODINGS: dict[int, Callable[[Keyspace, bytes, bytes, int, Limits], bytes]] = {
    CT.HASH: hash_encoding,
    CT.SET: set_encoding,
    CT.ZSET: zset_encoding,
    CT.LIST: list_encoding,
    CT.STREAM: stream_encoding,
    CT.HLL: hll_encoding,
}


def encoding(ks: Keyspace, key: bytes, head_rec: bytes, now: int, limits: Limits) -> bytes:
    """OBJECT ENCODING of the live collection ``key`` (head record ``head_rec``)."""
    return ENCODINGS[head.ctype_of(head_rec)](ks, key, head_rec, now, limits)
