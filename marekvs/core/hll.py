"""HyperLogLog registers: PFADD / PFCOUNT / PFMERGE as a per-register max-lattice.

Flajolet, Fusy, Gandouet, Meunier, "HyperLogLog: the analysis of a near-optimal
cardinality estimation algorithm" (AofA 2007), with the estimator of Ertl, "New
cardinality estimation algorithms for HyperLogLog sketches" (arXiv:1702.01284, 2017),
which Redis's PFCOUNT uses; register max is a join-semilattice in the sense of Shapiro
et al., "A comprehensive study of Convergent and Commutative Replicated Data Types"
(INRIA RR-7506, 2011).

Frozen element mapping (P = 14, m = 16384; changing it corrupts every estimate), the
same bit conventions as Redis's ``hllPatLen`` with xxh3_64 instead of MurmurHash64A::

    h      = xxh3_64(element)                 # unseeded, as an unsigned 64-bit int
    bucket = h & 0x3FFF                       # the LOW 14 bits
    w      = (h >> 14) | (1 << 50)            # the remaining 50 bits + a sentinel
    rank   = trailing_zeros(w) + 1            # 1..51 (51 = 50 zero bits)

Storage: one record per touched register at ``keys.encode_hll_key(userkey, bucket)``,
envelope record type HLL_REGISTER. The payload is the rank, one byte (no format byte: the
spec fixes it), followed by the register's *generation* when that is not 0: the delete
clock of its HLL's head that the writing node saw, u64 big-endian::

    [rank u8]                     generation 0 (an HLL never deleted): the spec's form
    [rank u8] [generation u64]    generation > 0 (written after a DEL or an expiry)

The HLL's TTL and delete clock live on its collection head.

Merge: the higher generation wins whole; within one generation the higher rank wins
with its own envelope, and equal ranks resolve to the LOWER envelope version, so a
duplicate PFADD (same register, same rank, later version) is a strict no-op: no write,
no replication, no anti-entropy churn. Equal rank and version (the same write) fall back
to the smaller record bytes. The order (generation asc, rank asc, version desc, bytes
desc) is total, so the join is commutative, associative and idempotent.

Why a generation (this project's extension of the spec, DATA_MODEL 10): a register is a
maximum, so it cannot say which of the elements it counts were added before a DEL and
which after. Gated by its hlc alone (as other elements are), a register raised before a
DEL kept winning merges by rank over the same bucket re-added after it, so a PFADD after
DEL counted nothing where it met a dead register of equal or higher rank. With the
generation a register written after the DEL beats every register of an older
generation whatever their ranks, and a register is live only in the generation of its
head (``gate_clock``): a DEL removes what every PFADD that did not see it added, and a
PFADD that saw it always counts, on every node.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Iterable, Mapping

import xxhash

from marekvs.core import envelope as env
from marekvs.core.envelope import RecordType

P = 14
M = 1 << P  # registers
Q = 64 - P  # hash bits left for the rank
MAX_RANK = Q + 1
_P_MASK = M - 1
_SENTINEL = 1 << Q
_ALPHA_INF = 0.721347520444481703680  # 1 / (2 ln 2)
_SIZE = env.ENVELOPE_SIZE
FLAGS = env.make_flags(RecordType.HLL_REGISTER)
_xxh3 = xxhash.xxh3_64_intdigest


def observe(element: bytes) -> tuple[int, int]:
    """The frozen (bucket, rank) of an element."""
    h = _xxh3(element)
    w = (h >> P) | _SENTINEL
    return h & _P_MASK, (w & -w).bit_length()


# -- register records ----------------------------------------------------------------

_GEN = struct.Struct(">Q")


def new(rank: int, hlc: int, origin: int, generation: int = 0) -> bytes:
    return env.pack(FLAGS, hlc, origin, 0, to_bytes(rank, generation))


def to_bytes(rank: int, generation: int = 0) -> bytes:
    """A register's payload (the one-byte form for generation 0)."""
    return bytes((rank,)) + _GEN.pack(generation) if generation else bytes((rank,))


def from_bytes(payload: bytes) -> tuple[int, int]:
    """(rank, generation) of a register payload; ValueError unless canonical (one byte,
    or nine with a generation above 0) with a rank of at most ``MAX_RANK``."""
    if len(payload) == 1:
        gen = 0
    elif len(payload) == 1 + _GEN.size:
        gen = _GEN.unpack_from(payload, 1)[0]
        if not gen:
            raise ValueError("an HLL register of generation 0 is one byte")
    else:
        raise ValueError("an HLL register payload is one byte, or nine with its generation")
    if payload[0] > MAX_RANK:
        raise ValueError(f"HLL rank {payload[0]} is above {MAX_RANK}")
    return payload[0], gen


def value(record: bytes) -> int:
    """The register's rank (0 for a record without a payload)."""
    return record[_SIZE] if len(record) > _SIZE else 0


def generation(record: bytes) -> int:
    """The register's generation: the delete clock its writer saw (0: none)."""
    return _GEN.unpack_from(record, _SIZE + 1)[0] if len(record) > _SIZE + 1 else 0


def gate_clock(record: bytes) -> int:
    """What the head's delete clock ``D`` gates a register by: live iff its generation is
    at least ``D`` (``generation + 1 > D``), whatever its hlc."""
    return generation(record) + 1


def merge(a: bytes, b: bytes) -> bytes:
    ga, gb = generation(a), generation(b)
    if ga != gb:
        return a if ga > gb else b
    ra, rb = value(a), value(b)
    if ra != rb:
        return a if ra > rb else b
    va, vb = a[1:11], b[1:11]
    if va != vb:
        return a if va < vb else b
    return min(a, b)


# -- PFADD / PFMERGE / PFCOUNT helpers (pure, on bucket -> rank maps) -------------------

def pfadd(registers: Mapping[int, int], elements: Iterable[bytes]) -> dict[int, int]:
    """The registers PFADD must write: bucket -> rank for every bucket whose rank
    rises. Empty means the HLL did not change (PFADD replies 0)."""
    out: dict[int, int] = {}
    for e in elements:
        bucket, rank = observe(e)
        if rank > out.get(bucket, registers.get(bucket, 0)):
            out[bucket] = rank
    return out


def pfmerge(dest: Mapping[int, int], *sources: Mapping[int, int]) -> dict[int, int]:
    """The registers PFMERGE must write into ``dest``: the pointwise max of the sources
    where it exceeds ``dest``."""
    out: dict[int, int] = {}
    for src in sources:
        for bucket, rank in src.items():
            if rank > out.get(bucket, dest.get(bucket, 0)):
                out[bucket] = rank
    return out


def _sigma(x: float) -> float:
    if x == 1.0:
        return math.inf
    y, z = 1.0, x
    while True:
        x *= x
        z_prev = z
        z += x * y
        y += y
        if z == z_prev:
            return z


def _tau(x: float) -> float:
    if x == 0.0 or x == 1.0:
        return 0.0
    y, z = 1.0, 1.0 - x
    while True:
        x = math.sqrt(x)
        z_prev = z
        y *= 0.5
        z -= (1.0 - x) ** 2 * y
        if z == z_prev:
            return z / 3.0


def count(registers: Mapping[int, int]) -> int:
    """PFCOUNT of one HLL (or of the pointwise max of several): Ertl's improved
    estimator over the register histogram, exactly as Redis's ``hllCount``."""
    m = float(M)
    histo = [0] * 64
    for rank in registers.values():
        histo[rank] += 1
    histo[0] = M - sum(histo[1:])
    z = m * _tau((m - histo[Q + 1]) / m)
    for j in range(Q, 0, -1):
        z += histo[j]
        z *= 0.5
    z += m * _sigma(histo[0] / m)
    return math.floor(_ALPHA_INF * m * m / z + 0.5)  # llroundl: half away from zero
