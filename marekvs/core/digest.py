"""Segment digests: what two replicas compare to find where they differ (pure).

Riak's tictac trees and Cassandra's Merkle leaves, per partition. Every record (internal
key + stored value) has a 64-bit *record hash*; the records of a partition fall into
segments by a hash of their internal key; a *segment hash* is the XOR of the record
hashes of its records; a partition's *root* is the XOR of its segment hashes. XOR is
commutative and its own inverse, so a write keeps a digest exact in O(1): the old record's
hash is combined out and the new one in (``delta``), in any order, and two replicas
holding the same records have equal segments and roots, whatever order their writes
arrived in.

    key hash       kh   = xxh3_64(ikey)
    fine segment   fine = kh >> 56                     (0 .. 255)
    segment        seg  = kh >> 60 = fine >> 4         (0 .. 15)
    record hash    rh   = xxh3_64(value, seed=kh) ^ xxh3_64(b"", seed=kh)
    (fine) segment hash = XOR of rh over the partition's records in the (fine) segment
    root                = XOR of the partition's segment hashes (of its fine ones too)

The tree has three levels: the root, ``SEGMENTS`` segments, and ``FINE_PER_SEGMENT``
fine segments under each segment. The node keeps the root and the segments of every
partition up to date with every write (``storage/digest.py``: 4096 x 16 u64s, 512 KB, small
enough to stay in a core's cache, which is what makes a write's update cheap); fine
segments are computed from the data when an exchange drills into a segment that differs
(the records of a partition have to be read to be sent anyway).

The record hash covers the whole stored value: the envelope (flags, version, TTL
deadline) and the payload, so ORSWOT dot sets, counter slots and head delete clocks are
in it, and so is anything a bug or a bad disk changed. Merges are deterministic byte for
byte, so converged replicas hold equal bytes and equal digests. The key hash seeds the
value's hash, so the same value under two keys hashes differently. The ``b""`` term makes
an absent record hash to 0 and lets the apply path treat "no record" as the empty value:
``delta(old, new) = H(new or b"") ^ H(old or b"")`` for a write, an insert (old absent)
and a removal (new absent) alike.

Time never enters a digest: an expired record keeps its bytes, so replicas agree on it
without agreeing on the clock. A record leaves the digest only when it is physically
removed (the sweeper, past gc_grace), which replicas do at different moments; what the
exchange does with such records is in ``marekvs/antientropy/``.

Segments are packed for storage and the wire as big-endian u64s.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable

import xxhash

from marekvs.core.partition import PARTITIONS

FORMAT = 1  # the digest definition above; peers with another one are not compared
SEGMENT_BITS = 4
SEGMENTS = 1 << SEGMENT_BITS  # kept per partition
SEGMENT_SHIFT = 64 - SEGMENT_BITS
FINE_BITS = 8
FINE_SEGMENTS = 1 << FINE_BITS  # per partition, computed on demand
FINE_SHIFT = 64 - FINE_BITS
FINE_PER_SEGMENT = FINE_SEGMENTS // SEGMENTS
SLOTS = PARTITIONS * SEGMENTS  # one slot per (partition, segment): pid << SEGMENT_BITS | seg
PACKED_SEGMENTS = 8 * SEGMENTS

_h = xxhash.xxh3_64_intdigest
EMPTY = b""

key_hash = _h  # kh = key_hash(ikey)


def segment_of(ikey: bytes) -> int:
    """The segment (0 .. SEGMENTS-1) of an internal key within its partition."""
    return _h(ikey) >> SEGMENT_SHIFT


def fine_segment_of(ikey: bytes) -> int:
    """The fine segment (0 .. FINE_SEGMENTS-1) of an internal key within its partition."""
    return _h(ikey) >> FINE_SHIFT


def partition_of_key(ikey: bytes) -> int:
    """The partition id an internal key starts with."""
    return (ikey[0] << 8) | ikey[1]


def slot_of(ikey: bytes, kh: int) -> int:
    """The (partition, segment) slot of an internal key with key hash ``kh``."""
    return (((ikey[0] << 8) | ikey[1]) << SEGMENT_BITS) | (kh >> SEGMENT_SHIFT)


def record_hash(ikey: bytes, value: bytes) -> int:
    """The record's contribution to its segment (0 for an absent record, ``b""``)."""
    kh = _h(ikey)
    return _h(value, kh) ^ _h(EMPTY, kh)


def delta(ikey: bytes, old: bytes | None, new: bytes | None) -> int:
    """What replacing ``old`` by ``new`` at ``ikey`` XORs into its segment (None: absent)."""
    kh = _h(ikey)
    return _h(new or EMPTY, kh) ^ _h(old or EMPTY, kh)


def fine_segments_of(records: Iterable[tuple[bytes, bytes]]) -> list[int]:
    """The fine segment hashes of one partition's records (``(ikey, value)`` pairs)."""
    fine = [0] * FINE_SEGMENTS
    for ikey, value in records:
        kh = _h(ikey)
        fine[kh >> FINE_SHIFT] ^= _h(value, kh) ^ _h(EMPTY, kh)
    return fine


def segments_from_fine(fine: list[int]) -> list[int]:
    """The segment hashes of a partition from its fine segment hashes."""
    return [root_of(fine[s * FINE_PER_SEGMENT:(s + 1) * FINE_PER_SEGMENT]) for s in range(SEGMENTS)]


def segments_of(records: Iterable[tuple[bytes, bytes]]) -> list[int]:
    """The segment hashes of one partition's records (``(ikey, value)`` pairs)."""
    segs = [0] * SEGMENTS
    for ikey, value in records:
        kh = _h(ikey)
        segs[kh >> SEGMENT_SHIFT] ^= _h(value, kh) ^ _h(EMPTY, kh)
    return segs


def root_of(segments: Iterable[int]) -> int:
    r = 0
    for s in segments:
        r ^= s
    return r


def pack_u64s(values: Iterable[int]) -> bytes:
    """Hashes for the wire and the disk: big-endian u64s."""
    v = list(values)
    return struct.pack(">%dQ" % len(v), *v)


def unpack_u64s(data: bytes, count: int | None = None) -> list[int]:
    if len(data) % 8 or (count is not None and len(data) != 8 * count):
        raise ValueError(f"{len(data)} bytes are not {count if count is not None else 'whole'} u64s")
    return list(struct.unpack(">%dQ" % (len(data) // 8), data))


def differing(*digests: list[int]) -> list[int]:
    """The positions where the given lists of hashes (roots, segments, fine segments of
    several replicas) do not all agree."""
    return [i for i, vals in enumerate(zip(*digests)) if len(set(vals)) > 1]
