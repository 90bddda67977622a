"""Partition function: pid = top 12 bits of xxh3_64 of the user key (4096 partitions).

Redis hash tags are honoured exactly as Redis Cluster does (``keyHashSlot``): find the
first ``{``; if a ``}`` follows it with at least one byte in between, only those bytes
are hashed; otherwise (no ``{``, no closing ``}``, or an empty ``{}``) the whole key is
hashed. Redis does not look past an empty first pair: ``{}{a}`` hashes whole.

Shards own contiguous ranges of partitions (``PartitionRange``; ``ShardMap`` says which
shard owns each partition): see docs/shards.md.
"""

from __future__ import annotations

import struct
from array import array
from dataclasses import dataclass
from typing import Sequence

import xxhash

PARTITIONS = 4096
# The hash of the partition function: pid = hash64(hashed bytes) >> 52 (for callers
# that have already applied the hash-tag rule, e.g. to a key holding no "{").
hash64 = xxhash.xxh3_64_intdigest
_U16 = struct.Struct(">H")


def hash_tag(key: bytes) -> bytes:
    """The bytes that are hashed for ``key`` under the Redis hash-tag rule."""
    s = key.find(b"{")
    if s < 0:
        return key
    e = key.find(b"}", s + 1)
    if e < 0 or e == s + 1:
        return key
    return key[s + 1 : e]


def partition_of(key: bytes) -> int:
    """Partition id (0..4095) of a user key."""
    s = key.find(b"{")
    if s >= 0:
        e = key.find(b"}", s + 1)
        if e > s + 1:
            key = key[s + 1 : e]
    return hash64(key) >> 52


@dataclass(frozen=True, slots=True)
class PartitionRange:
    """Partitions ``first`` to ``last`` (both included): the contiguous range one shard owns
    (docs/shards.md). A partition is one contiguous range of internal keys (the 2-byte pid
    prefix), so a range of partitions is one too: ``start_key`` to ``end_key``."""

    first: int
    last: int

    def __post_init__(self) -> None:
        if not 0 <= self.first <= self.last < PARTITIONS:
            raise ValueError(f"partition range {self.first}-{self.last} is not within 0-{PARTITIONS - 1}")

    @property
    def count(self) -> int:
        return self.last - self.first + 1

    @property
    def whole(self) -> bool:
        """Every partition (what a node of one shard holds)."""
        return self.first == 0 and self.last == PARTITIONS - 1

    def holds(self, pid: int) -> bool:
        return self.first <= pid <= self.last

    def after(self, pid: int) -> int:
        """The partition after ``pid`` within the range, from ``last`` back to ``first``."""
        return pid + 1 if pid < self.last else self.first

    @property
    def start_key(self) -> bytes:
        """The first internal key of the range (every key of it is at least this)."""
        return _U16.pack(self.first)

    @property
    def end_key(self) -> bytes:
        """The first internal key past the range (every key of it is below this)."""
        return _U16.pack(self.last + 1)

    def __str__(self) -> str:
        return f"{self.first}-{self.last}"


ALL = PartitionRange(0, PARTITIONS - 1)


def shard_of(pid: int, shards: int) -> int:
    """The shard owning ``pid`` when the partitions are split evenly into ``shards``."""
    return pid * shards // PARTITIONS


def shard_range(shard: int, shards: int) -> PartitionRange:
    """The partitions of ``shard`` when they are split evenly into ``shards``."""
    lo = -(-shard * PARTITIONS // shards)
    hi = -(-(shard + 1) * PARTITIONS // shards) - 1
    return PartitionRange(lo, hi)


class ShardMap:
    """Which shard owns each partition: contiguous ranges covering all 4096, in order.
    ``owner[pid]`` is one index into a table of 4096 entries (no search per key)."""

    __slots__ = ("ranges", "owner")

    def __init__(self, ranges: Sequence[PartitionRange]):
        if not ranges or ranges[0].first != 0 or ranges[-1].last != PARTITIONS - 1 or any(
                a.last + 1 != b.first for a, b in zip(ranges, ranges[1:])):
            raise ValueError("a shard map's ranges must cover partitions 0-4095 in order, without gaps")
        self.ranges = tuple(ranges)
        self.owner = array("H", (i for i, r in enumerate(ranges) for _ in range(r.count)))

    @classmethod
    def even(cls, shards: int) -> "ShardMap":
        """``shards`` ranges of (nearly) equal size: what the ``shards`` option makes."""
        return cls([shard_range(i, shards) for i in range(shards)])

    def __len__(self) -> int:
        return len(self.ranges)

    def shard_of_key(self, key: bytes) -> int:
        return self.owner[partition_of(key)]
