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
envelope record type HLL_REGISTER, payload exactly one byte: the rank (no format byte:
the spec fixes it). The HLL's TTL and delete clock live on its collection head.

Merge: the higher rank wins with its own envelope; equal ranks resolve to the LOWER
envelope version, so a duplicate PFADD (same register, same rank, later version) is a
strict no-op: no write, no replication, no anti-entropy churn. Equal rank and version
(the same write) fall back to the smaller record bytes. The order (rank asc, version
desc, bytes desc) is total, so the join is commutative, associative and idempotent.

Known limitation (spec): a DEL gates registers by the head's delete clock, but a dead
register still wins merges by rank, so after DEL a re-added element whose rank in that
bucket is not higher than the dead register's is not recorded until the dead register
is physically reclaimed. A fix needs per-register epoch information (the one-byte
payload cannot carry it) or a gated apply path; see crates_ref/lattices/README.md.
"""

from __future__ import annotations

import math
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

def new(rank: int, hlc: int, origin: int) -> bytes:
    return env.pack(FLAGS, hlc, origin, 0, to_bytes(rank))


def to_bytes(rank: int) -> bytes:
    return bytes((rank,))


def from_bytes(payload: bytes) -> int:
    if len(payload) != 1:
        raise ValueError("an HLL register payload is exactly one byte")
    return payload[0]


def value(record: bytes) -> int:
    """The register's rank (0 for a record without a payload)."""
    return record[_SIZE] if len(record) > _SIZE else 0


def merge(a: bytes, b: bytes) -> bytes:
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
