"""Partition function: pid = top 12 bits of xxh3_64 of the user key (4096 partitions).

Redis hash tags are honoured exactly as Redis Cluster does (``keyHashSlot``): find the
first ``{``; if a ``}`` follows it with at least one byte in between, only those bytes
are hashed; otherwise (no ``{``, no closing ``}``, or an empty ``{}``) the whole key is
hashed. Redis does not look past an empty first pair: ``{}{a}`` hashes whole.
"""

from __future__ import annotations

import xxhash

PARTITIONS = 4096
# The hash of the partition function: pid = hash64(hashed bytes) >> 52 (for callers
# that have already applied the hash-tag rule, e.g. to a key holding no "{").
hash64 = xxhash.xxh3_64_intdigest


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
