"""Last-writer-wins registers on (hlc, origin).

Shapiro et al., "A comprehensive study of Convergent and Commutative Replicated Data
Types" (INRIA RR-7506, 2011), LWW-Register. Used for strings, hash-field values, zset
scores, list elements, stream entries, the zset score index and (as the header part
of their lattice) collection heads. The state is the stored record itself, envelope +
payload, with no payload format of its own::

    [envelope 19 bytes] [payload: raw bytes, meaning fixed by the record's user]

The higher version ``(hlc, origin)`` wins; a tombstone is just a version with the
tombstone flag set, so deletes and writes race symmetrically. EXPIRE / PERSIST are
LWW writes of the envelope with the payload unchanged (``envelope.with_ttl``).

Equal versions are the same write: one HLC per process hands out strictly increasing
stamps, so two different records never share a version. ``merge`` still breaks that
impossible tie on the whole record bytes, which makes the join a total order on bytes
(commutative, associative and idempotent for *any* input, not only for well-formed
histories) at the cost of one comparison that never runs in practice.

TTL: ``merge`` is time-independent (a pure join), which is what makes it a lattice. A
record past its deadline *reads* as a tombstone whose clock is the deadline
(``envelope.effective_clock``): an older ("stale pre-expiry") value has a lower
version and loses the merge, so expiry converges with no message; a write made after
the deadline has a higher version and starts a new life.
"""

from __future__ import annotations

from marekvs.core import envelope as env


def wins(a: bytes, b: bytes) -> bool:
    """True if record ``a`` beats record ``b`` (strictly higher (hlc, origin))."""
    return a[1:11] > b[1:11]  # 10 big-endian bytes: memcmp order == (hlc, origin) order


def merge(a: bytes, b: bytes) -> bytes:
    """Join of two LWW records: the one with the higher version. Returns one of the
    arguments unchanged (identity tells the caller whether anything changed)."""
    va, vb = a[1:11], b[1:11]
    if vb > va or (vb == va and b > a):
        return b
    return a


def new(rtype: int, hlc: int, origin: int, payload: bytes, ttl_deadline_ms: int = 0,
        head: bool = False) -> bytes:
    return env.pack(env.make_flags(rtype, head=head), hlc, origin, ttl_deadline_ms, payload)


def tombstone(rtype: int, hlc: int, origin: int, head: bool = False) -> bytes:
    return env.pack(env.make_flags(rtype, tombstone=True, head=head), hlc, origin, 0)


def value(record: bytes, now_ms: int) -> bytes | None:
    """The payload, or None if the record is not live (``envelope.is_live``)."""
    return record[env.ENVELOPE_SIZE:] if env.is_live(record, now_ms) else None


def to_bytes(payload: bytes) -> bytes:
    """LWW payloads are raw bytes; kept for the common lattice interface."""
    return bytes(payload)


def from_bytes(payload: bytes) -> bytes:
    return bytes(payload)
