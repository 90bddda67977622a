"""Observed-remove elements: set members, hash fields and zset members.

Algorithm: the optimized observed-remove set of Bieniusa et al., "An optimized
conflict-free replicated set" (arXiv:1210.3368, 2012), kept per element and with
explicit covered dots instead of a version vector; the lattice framework is Shapiro et
al., "A comprehensive study of Convergent and Commutative Replicated Data Types" (INRIA
RR-7506, 2011). A *dot* is the ``(hlc, origin)`` version of the add that created it.

Each element record carries two capped dot sets:

- ``live``: the dots of adds not known to be removed, each with its value (a hash
  field's value, a zset member's score bytes, empty for a set member);
- ``covered``: dots known to be removed. A remove covers the live dots it observed; an
  add (re-add, HSET overwrite, ZADD) first covers the live dots it observed, so it
  replaces them.

Join: ``covered' = cov_a | cov_b``, ``live' = (live_a | live_b) - covered'``; the element
is dead when ``live'`` is empty. A lagging replica pushing an old add carries its old
dot, which ``covered`` still holds, so a remove never resurrects an add it observed; a
concurrent add the remove never observed keeps its live dot and survives. Read value =
the value of the highest live dot.

Payload layout (fixed by the data model spec, no format byte)::

    [nlive u8] nlive x ([origin u16][hlc u64][vlen varint][value])   # live adds
    [ncov u8]  ncov  x ([origin u16][hlc u64])                        # covered dots

Integers big-endian, varint = unsigned LEB128. Canonical form (all this module writes):
both lists sorted by (hlc, origin) *descending*, no duplicates, live and covered
disjoint. Equal dots are one add, so they carry one value; if two inputs ever disagree
the larger value bytes win, which keeps the join a function of its inputs.

Caps, and why they keep the laws. The spec keeps the top-4 live dots and the top-255
covered dots. Truncating ``covered`` to its top-N is harmless on its own (top-N of a
union equals top-N of the union of top-Ns), but truncating ``live`` after subtracting
``covered`` is not associative: with live {d1..d4} on A, live {d0} on B (d0 lowest) and
a remove on C covering d1..d4 but not d0, ``(A+B)+C`` drops d0 at the cap and ends
dead, while ``A+(B+C)`` never reaches the cap and keeps d0. No capped join can tell
those apart from the bytes, so the rule has to be monotone in everything ever seen:

    a live dot survives only if fewer than 4 add dots (live *or* covered) exceed it,
    i.e.  live' = (live_a | live_b) & top4(live_a | live_b | covered') - covered'

The abstract state is (A = every add dot seen, C = every covered dot), joined by plain
union; the stored form is R(A, C) = (top4(A) & (A - C), top255(C)). The four highest
adds are always stored (live, or covered and then among the top-255 covered), so the
rule above computes R(A1|A2, C1|C2) from R(A1, C1) and R(A2, C2) exactly: the join of
stored forms is a homomorphic image of set union, hence commutative, associative and
idempotent, and a covered dot dropped by the cap can never resurrect (it stays below
four stored dots). The price is a bounded loss: an add is dropped once four newer adds
of the *same element* exist, even if they were all removed concurrently. Covered dots
below the fourth-highest add are redundant under this rule; they are kept only because
the spec fixes the cap at 255. tests/merge_laws checks the homomorphism directly.

Envelope of an element record: ``(hlc, origin)`` of the latest op folded in, its TTL
(per-member TTL, EXPIREMEMBER) and the record type HASH_FIELD / SET_MEMBER /
ZSET_MEMBER. The merged header is the LWW winner by version (ties: the header bytes
without the tombstone bit), and its tombstone bit is recomputed as "live' is empty", so
the whole record is a product of an LWW header and the dot lattice and the laws hold
byte for byte. An element expires with its record (EXPIREMEMBER) and is gated by its
collection head through the highest live dot (see ``head.element_live``).
"""

from __future__ import annotations

import heapq
import struct
from typing import NamedTuple

from marekvs.core import envelope as env
from marekvs.core import joins
from marekvs.core.keys import decode_varint, encode_varint

LIVE_CAP = 4
COVERED_CAP = 255

Dot = tuple[int, int]  # (hlc, origin): ordered exactly like the record version
_DOT = struct.Struct(">HQ")  # wire order: origin then hlc
_TOMB = env.FLAG_TOMBSTONE
_SIZE = env.ENVELOPE_SIZE


class ElementFormatError(ValueError):
    pass


class Element(NamedTuple):
    live: tuple[tuple[Dot, bytes], ...] = ()  # highest dot first
    covered: tuple[Dot, ...] = ()  # highest dot first


EMPTY = Element()


# -- payload codec -------------------------------------------------------------------

def to_bytes(e: Element) -> bytes:
    out = bytearray((len(e.live),))
    for (hlc, origin), v in e.live:
        out += _DOT.pack(origin, hlc)
        out += encode_varint(len(v))
        out += v
    out.append(len(e.covered))
    for hlc, origin in e.covered:
        out += _DOT.pack(origin, hlc)
    return bytes(out)


def from_bytes(payload: bytes) -> Element:
    try:
        pos = 1
        live = []
        for _ in range(payload[0]):
            origin, hlc = _DOT.unpack_from(payload, pos)
            n, pos = decode_varint(payload, pos + 10)
            if pos + n > len(payload):
                raise ElementFormatError("element value runs past the payload")
            live.append(((hlc, origin), bytes(payload[pos:pos + n])))
            pos += n
        ncov = payload[pos]
        pos += 1
        if pos + 10 * ncov != len(payload):
            raise ElementFormatError("element payload length does not match its counts")
        covered = tuple((hlc, origin) for origin, hlc in _DOT.iter_unpack(payload[pos:]))
    except (IndexError, struct.error) as e:
        raise ElementFormatError(f"truncated element payload: {e}") from None
    return Element(tuple(live), covered)


def element_of(record: bytes) -> Element:
    return from_bytes(record[_SIZE:])


# -- lattice ---------------------------------------------------------------------------

def join(x: Element, y: Element, live_cap: int = LIVE_CAP,
         covered_cap: int = COVERED_CAP) -> Element:
    """Join of two canonical payloads (see the module docstring for the caps)."""
    assert live_cap <= covered_cap, "the four highest adds must fit in covered"
    cov = set(x.covered)
    cov.update(y.covered)
    covered = tuple(sorted(cov, reverse=True)[:covered_cap])
    if len(covered) < len(cov):
        cov = set(covered)
    values: dict[Dot, bytes] = {}
    for d, v in x.live + y.live:
        if d not in values or v > values[d]:
            values[d] = v
    top = heapq.nlargest(live_cap, set(values).union(covered[:live_cap]))
    live = tuple((d, values[d]) for d in top if d in values and d not in cov)
    return Element(live, covered)


def _header_key(r: bytes) -> tuple[bytes, bytes]:
    return r[1:11], bytes((r[0] & ~_TOMB,)) + r[11:_SIZE]


KNOWN = joins.Known()  # records built as their join with the stored one (``zset.add_delta``)


def merge(a: bytes, b: bytes) -> bytes:
    """Join of two element records at one key; returns ``a`` or ``b`` itself when it
    already is the join."""
    if a == b:
        return a
    known = KNOWN.join(a, b)
    if known is not None:
        return known
    top = a if _header_key(a) >= _header_key(b) else b
    e = join(element_of(a), element_of(b))
    flags = (top[0] & ~_TOMB) | (0 if e.live else _TOMB)
    out = bytes((flags,)) + top[1:_SIZE] + to_bytes(e)
    if out == a:
        return a
    if out == b:
        return b
    return out


# -- local ops ---------------------------------------------------------------------------

def new(rtype: int, hlc: int, origin: int, value: bytes = b"", ttl_deadline_ms: int = 0) -> bytes:
    """The record of a first add of an element nobody has seen."""
    return env.pack(env.make_flags(rtype), hlc, origin, ttl_deadline_ms,
                    to_bytes(Element((((hlc, origin), value),))))


def live_section(record: bytes) -> tuple[list[Dot], list[int]]:
    """The live dots of an element record, highest first, and where each live entry ends
    in the record (the last end is where the covered section starts): a walk of the live
    section only, the covered dots (up to 255) not parsed."""
    dots: list[Dot] = []
    ends: list[int] = []
    pos = _SIZE + 1
    for _ in range(record[_SIZE]):
        o, h = _DOT.unpack_from(record, pos)
        dots.append((h, o))
        vlen, pos = decode_varint(record, pos + 10)
        pos += vlen
        ends.append(pos)
    return dots, ends


def new_over(current: bytes | None, rtype: int, hlc: int, origin: int, value: bytes = b"",
             ttl_deadline_ms: int = 0) -> bytes:
    """``new``'s record (a new dot covering nothing) as its join with ``current``, built
    from the bytes and handed over as known (``KNOWN``) when every dot of ``current`` is
    below the new one (always so for a local write): the new dot first, then the live
    dots of ``current`` that stay among the four highest adds, then its covered section as
    it is. The apply path then parses neither record. Otherwise ``new``'s record, which
    the apply path joins."""
    rec = new(rtype, hlc, origin, value, ttl_deadline_ms)
    if current is None or len(current) <= _SIZE:
        return rec
    dots, ends = live_section(current)
    pos = ends[-1] if ends else _SIZE + 1
    if pos >= len(current):
        return rec
    ncov = current[pos]
    if len(current) != pos + 1 + 10 * ncov or (dots and dots[0] >= (hlc, origin)):
        return rec
    top_cov: list[Dot] = [(h, o) for o, h in _DOT.iter_unpack(current[pos + 1:pos + 1 + 10 * min(ncov, LIVE_CAP)])]
    if top_cov and top_cov[0] >= (hlc, origin):
        return rec
    if current[1:11] >= rec[1:11]:  # (its version is not below the new dot: its header may win)
        return rec
    # the live dots that stay: those among the three highest adds below the new dot (the
    # highest live dots, a prefix of the live section)
    third = sorted(dots + top_cov, reverse=True)[:LIVE_CAP - 1]
    kept = sum(1 for d in dots if d in third)
    live_end = ends[kept - 1] if kept else _SIZE + 1
    new_entry = rec[_SIZE + 1:-1]  # (the new dot and its value, without the counts)
    out = rec[:_SIZE] + bytes((1 + kept,)) + new_entry + current[_SIZE + 1:live_end] + current[pos:]
    return KNOWN.built(out, current)


def add(current: bytes | None, rtype: int, hlc: int, origin: int, value: bytes = b"",
        ttl_deadline_ms: int = 0) -> bytes:
    """SADD / HSET / ZADD: a new dot (hlc, origin) with ``value`` that covers every live
    dot of ``current`` (observed, so replaced). Returns the merged record."""
    if current is None:
        return new(rtype, hlc, origin, value, ttl_deadline_ms)
    observed = tuple(d for d, _ in element_of(current).live)
    delta = env.pack(env.make_flags(rtype), hlc, origin, ttl_deadline_ms,
                     to_bytes(Element((((hlc, origin), value),), observed)))
    return merge(current, delta)


def remove(current: bytes, hlc: int, origin: int) -> bytes:
    """SREM / HDEL / ZREM: cover every live dot of ``current``. Returns ``current``
    itself if it has no live dot (nothing to write)."""
    observed = tuple(d for d, _ in element_of(current).live)
    if not observed:
        return current
    delta = env.pack(env.make_flags(env.rtype_of(current), tombstone=True), hlc, origin, 0,
                     to_bytes(Element((), observed)))
    return merge(current, delta)


# -- reads ---------------------------------------------------------------------------------

def top_dot(record: bytes) -> Dot | None:
    """The highest live dot, None if the element is dead (payload only: no TTL)."""
    if len(record) <= _SIZE or not record[_SIZE]:
        return None
    origin, hlc = _DOT.unpack_from(record, _SIZE + 1)
    return (hlc, origin)


def gate_clock(record: bytes) -> int:
    """The clock a collection's delete clock gates this element by: the hlc of its
    highest live dot (a remove or EXPIREMEMBER made after a DEL must not revive an add
    made before it), -1 if it has none."""
    if len(record) <= _SIZE or not record[_SIZE]:
        return -1
    hlc: int = _DOT.unpack_from(record, _SIZE + 1)[1]
    return hlc


def value(record: bytes, now_ms: int, delete_clock: int = 0) -> bytes | None:
    """Value of the highest live dot; None if the record is not live
    (``envelope.is_live``) or is gated: its highest live dot is not newer than the
    collection's ``delete_clock`` (``head.element_live`` with that clock)."""
    if not env.is_live(record, now_ms) or gate_clock(record) <= delete_clock:
        return None
    n, pos = decode_varint(record, _SIZE + 11)
    return bytes(record[pos:pos + n])
