"""PN counters for INCR / DECR / INCRBY / DECRBY on string keys (record type 6).

State (Shapiro et al., "A comprehensive study of CRDTs", 2011, PN-Counter, with an LWW
base register so an explicit SET can reset it):

- a base register ``(base_hlc, base_origin, base_value)``: the version and integer
  value of the write the counter was started from (an explicit SET, a DEL tombstone,
  an expired record, or ``(0, 0, 0)`` for a fresh key);
- per-node slots ``(pos, neg)``; each node only grows its own slot, so slots join by
  pointwise max. ``value = base + sum(pos) - sum(neg)``.

Payload layout (version byte first so the format can evolve)::

    [fmt u8 = 1] [base_hlc u64] [base_origin u16] [base_value i64]
    [nslots u16] nslots x ([node u16] [pos u64] [neg u64])   # sorted by node

Merge against another record at the same string key (``merge``):

- every string-key record has a *base version*: a plain string or tombstone's own
  (hlc, origin), a counter's (base_hlc, base_origin);
- the higher base version wins wholesale (SET resets the counter; concurrent
  increments made on the older base are dropped, as the spec says);
- equal base versions: two counters join their slots (pointwise max; base value max)
  and keep the envelope with the higher (hlc, origin) (so EXPIRE/PERSIST on a counter
  is LWW on the envelope); a counter beats the plain string it was started from (it
  extends it); two non-counters merge as LWW registers.

Why this is a lattice: records at one string key are ordered lexicographically by
(base version, kind, rest): base versions form a chain; within one base version every
plain record is below every counter, plain records among themselves are LWW (a chain,
``lww.merge``), and counters are a product of an LWW envelope (ties broken on the
header bytes), a max base value and pointwise-max slots. A lexicographic sum of
join-semilattices over a chain is a join-semilattice, so ``merge`` is commutative,
associative and idempotent byte for byte (canonical payloads: slots sorted by node).

INCR on a dead key (absent, tombstoned or expired) starts a counter whose base is the
dead record's version and value 0 (``(0, 0, 0)`` if absent), so concurrent INCRs after
the same DEL all count, and the counter beats the record it replaced; INCR on a live
integer string starts from that string's version and value and keeps its TTL.
"""

from __future__ import annotations

import re
import struct

from marekvs.core import envelope as env
from marekvs.core import lww

FMT = 1
_HEAD = struct.Struct(">BQHqH")
_SLOT = struct.Struct(">HQQ")
FLAGS = env.make_flags(env.RecordType.COUNTER)
_SIZE = env.ENVELOPE_SIZE
_pack = env.pack_envelope
_PAYLOAD_SLOTS = _SIZE + _HEAD.size  # record offset of the first slot
SLOT_LIMIT = 1 << 63  # a slot that would reach this rebases the counter
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1


# Parsed payloads, by their bytes. Counters are values (every operation returns a new
# one and none mutates its receiver), so a parse can be shared: an INCR otherwise
# parses the same payload three times (read, then both sides of the merge).
_PARSED: dict[bytes, "PNCounter"] = {}
_PARSED_MAX = 4096


def _remember(b: bytes, c: "PNCounter") -> None:
    if len(_PARSED) >= _PARSED_MAX:
        _PARSED.clear()
    _PARSED[b] = c


class CounterFormatError(ValueError):
    pass


class PNCounter:
    __slots__ = ("base_hlc", "base_origin", "base_value", "slots")

    def __init__(self, base_hlc: int = 0, base_origin: int = 0, base_value: int = 0,
                 slots: dict[int, tuple[int, int]] | None = None):
        self.base_hlc = base_hlc
        self.base_origin = base_origin
        self.base_value = base_value
        self.slots: dict[int, tuple[int, int]] = dict(slots or {})

    # -- interface ---------------------------------------------------------------
    @classmethod
    def new(cls, base_hlc: int = 0, base_origin: int = 0, base_value: int = 0) -> PNCounter:
        return cls(base_hlc, base_origin, base_value)

    def apply(self, node: int, delta: int) -> PNCounter:
        """Local increment by ``delta`` on ``node``'s slot (returns a new state)."""
        pos, neg = self.slots.get(node, (0, 0))
        if delta >= 0:
            pos += delta
        else:
            neg -= delta
        out = PNCounter(self.base_hlc, self.base_origin, self.base_value, self.slots)
        out.slots[node] = (pos, neg)
        return out

    def base_version(self) -> tuple[int, int]:
        return (self.base_hlc, self.base_origin)

    def merge(self, other: PNCounter) -> PNCounter:
        a, b = self.base_version(), other.base_version()
        if a > b:
            return self
        if b > a:
            return other
        slots = dict(self.slots)
        for node, (p, n) in other.slots.items():
            q = slots.get(node)
            slots[node] = (p, n) if q is None else (max(p, q[0]), max(n, q[1]))
        return PNCounter(self.base_hlc, self.base_origin, max(self.base_value, other.base_value), slots)

    def value(self) -> int:
        return self.base_value + sum(p - n for p, n in self.slots.values())

    def to_bytes(self) -> bytes:
        parts = [_HEAD.pack(FMT, self.base_hlc, self.base_origin, self.base_value, len(self.slots))]
        for node in sorted(self.slots):
            p, n = self.slots[node]
            parts.append(_SLOT.pack(node, p, n))
        out = b"".join(parts)
        _remember(out, self)
        return out

    @classmethod
    def from_bytes(cls, b: bytes) -> PNCounter:
        hit = _PARSED.get(b)
        if hit is not None:
            return hit
        if len(b) < _HEAD.size:
            raise CounterFormatError("counter payload too short")
        fmt, bh, bo, bv, n = _HEAD.unpack_from(b, 0)
        if fmt != FMT:
            raise CounterFormatError(f"unknown counter format {fmt}")
        if len(b) != _HEAD.size + n * _SLOT.size:
            raise CounterFormatError("counter payload length does not match its slot count")
        slots = {node: (p, q) for node, p, q in _SLOT.iter_unpack(b[_HEAD.size:])}
        c = cls(bh, bo, bv, slots)
        _remember(b, c)
        return c

    def __eq__(self, other: object) -> bool:
        return isinstance(other, PNCounter) and (
            self.base_hlc, self.base_origin, self.base_value, self.slots
        ) == (other.base_hlc, other.base_origin, other.base_value, other.slots)

    def __repr__(self) -> str:
        return (f"PNCounter(base=({self.base_hlc},{self.base_origin},{self.base_value}), "
                f"slots={self.slots})")


# -- records at a string key ---------------------------------------------------------

def fresh(base_hlc: int, base_origin: int, base_value: int, node: int, delta: int) -> bytes | None:
    """The payload of ``PNCounter.new(base...).apply(node, delta)`` built on the bytes
    (INCR of a new or dead key), or None if ``delta`` does not fit one slot."""
    pos, neg = (delta, 0) if delta >= 0 else (0, -delta)
    if pos >= SLOT_LIMIT or neg >= SLOT_LIMIT:
        return None
    return _HEAD.pack(FMT, base_hlc, base_origin, base_value, 1) + _SLOT.pack(node, pos, neg)


def bump(record_: bytes, node: int, delta: int) -> tuple[bytes, int] | None:
    """INCRBY ``delta`` on ``node``'s existing slot of the live counter ``record_``,
    on the bytes: (new payload, new value), the payload ``apply(node, delta)`` would
    give. None when the fast path does not apply (``node`` has no slot yet, or the
    slot would pass 2**63): the caller takes the general path. OverflowError if the
    value leaves the signed 64-bit range."""
    fmt, _, _, value, n = _HEAD.unpack_from(record_, _SIZE)
    if fmt != FMT or len(record_) != _PAYLOAD_SLOTS + n * 18:
        return None
    mine = -1
    off = _PAYLOAD_SLOTS
    for node_, p, q in _SLOT.iter_unpack(record_[off:]):
        value += p - q
        if node_ == node:
            mine = off
            pos, neg = p, q
        off += 18
    if mine < 0:
        return None
    value += delta
    if not INT64_MIN <= value <= INT64_MAX:
        raise OverflowError("increment or decrement would overflow")
    if delta >= 0:
        pos += delta
        if pos >= SLOT_LIMIT:
            return None
    else:
        neg -= delta
        if neg >= SLOT_LIMIT:
            return None
    return record_[_SIZE:mine] + _SLOT.pack(node, pos, neg) + record_[mine + 18:], value


def record(counter: PNCounter, hlc: int, origin: int, ttl_deadline_ms: int = 0) -> bytes:
    return env.pack(FLAGS, hlc, origin, ttl_deadline_ms, counter.to_bytes())


def is_counter(record_: bytes) -> bool:
    return (record_[0] >> 2) & 0x7 == env.RecordType.COUNTER and not record_[0] & env.FLAG_TOMBSTONE


def base_version_of(record_: bytes) -> bytes:
    """10-byte comparable base version of any record stored at a string key."""
    if is_counter(record_):
        return record_[20:30]  # payload offset 1: base_hlc u64, base_origin u16
    return record_[1:11]


def merge(a: bytes, b: bytes) -> bytes:
    """Join two records at one string key (any kind: counter, string, tombstone)."""
    if a[0] == FLAGS and b[0] == FLAGS:
        # Two live counters: with one base and the same nodes (the steady state, and
        # every local INCR against the record it read) the higher envelope usually
        # already is the join. Equal flag bytes, so the envelope tails order the
        # records as (version, envelope) does below.
        top = a if a[1:_SIZE] >= b[1:_SIZE] else b
        if _dominates_bytes(top, b if top is a else a):
            return top
    va, vb = base_version_of(a), base_version_of(b)
    if va != vb:
        return a if va > vb else b
    ca, cb = is_counter(a), is_counter(b)
    if not cb:
        return a if ca else lww.merge(a, b)
    if not ca:
        return b
    top = a if (a[1:11], a[:_SIZE]) >= (b[1:11], b[:_SIZE]) else b
    pa, pb = PNCounter.from_bytes(a[_SIZE:]), PNCounter.from_bytes(b[_SIZE:])
    hi, lo = (pa, pb) if top is a else (pb, pa)
    if _dominates(hi, lo):
        return top
    joined = pa.merge(pb)
    merged = top[:_SIZE] + joined.to_bytes()
    if merged == a:
        return a
    if merged == b:
        return b
    return merged


def _dominates_bytes(hi: bytes, lo: bytes) -> bool:
    """The byte-level form of ``_dominates`` for two counter records whose payloads
    list the same nodes with the same base (the steady state of a counter): slot by
    slot, the same node with pos and neg >=. False means "not shown"."""
    if len(hi) != len(lo) or hi[_SIZE:_PAYLOAD_SLOTS] != lo[_SIZE:_PAYLOAD_SLOTS]:
        return False
    unpack = _SLOT.unpack_from
    for off in range(_PAYLOAD_SLOTS, len(hi), 18):
        hn, hp, hq = unpack(hi, off)
        ln, lp, lq = unpack(lo, off)
        if hn != ln or hp < lp or hq < lq:
            return False
    return True


def _dominates(hi: PNCounter, lo: PNCounter) -> bool:
    """``hi`` already is the join of ``hi`` and ``lo`` (same base, slots pointwise >=)."""
    if hi.base_value != lo.base_value:
        return False
    hs = hi.slots
    for node, (p, n) in lo.slots.items():
        q = hs.get(node)
        if q is None or q[0] < p or q[1] < n:
            return False
    return True


def to_bytes(counter: PNCounter) -> bytes:
    return counter.to_bytes()


def from_bytes(payload: bytes) -> PNCounter:
    return PNCounter.from_bytes(payload)


def value(record_: bytes, now_ms: int) -> bytes | None:
    """What GET reads at a string key: a counter materialises as a decimal string;
    None if the record is not live (``envelope.is_live``)."""
    if not env.is_live(record_, now_ms):
        return None
    if is_counter(record_):
        return b"%d" % PNCounter.from_bytes(record_[_SIZE:]).value()
    return record_[_SIZE:]


_INT = re.compile(rb"0|-?[1-9][0-9]{0,19}")  # Redis string2ll: no '+', spaces, '-0'


def incr(current: bytes | None, delta: int, hlc: int, origin: int, now_ms: int) -> bytes:
    """INCRBY ``delta`` (negative for DECRBY) at ``origin``: the new counter record
    (``incr_value`` without the value)."""
    return incr_value(current, delta, hlc, origin, now_ms)[0]


def incr_value(current: bytes | None, delta: int, hlc: int, origin: int, now_ms: int) -> tuple[bytes, int]:
    """INCRBY ``delta`` at ``origin`` stamped ``hlc``: (the new counter record, its value).

    ``current`` is whatever the string key holds (None if nothing). The count starts from
    (its *base*): a live counter (kept, this node's slot grows); a live plain integer
    string (its version and value; ValueError if it is not an int64); for a dead record,
    the version at which it died and value 0: a tombstone's (hlc, origin), an expired
    record's (deadline << 16, origin), so every node that increments after the same DEL or
    expiry shares the base and their slots join. If that expired clock is not above the
    dead record's own base version (a record stored already expired) the merge would drop
    the counter, so it is based on this operation's version instead; so is a slot that
    would pass 2**63 (rebased at the current value). A live record's deadline is kept.
    OverflowError if the value leaves the signed 64-bit range.

    This is the INCR the node runs; the merge-law tests drive it too."""
    ttl = 0
    if current is not None and current[0] == FLAGS:  # the steady state: a live counter, our slot grows
        d = current[11:19]
        if d == env.NO_TTL or int.from_bytes(d, "big") > now_ms:  # (envelope.is_live, inlined)
            bumped = bump(current, origin, delta)
            if bumped is not None:
                return _pack(FLAGS, hlc, origin, int.from_bytes(d, "big")) + bumped[0], bumped[1]
    if current is not None and env.is_live(current, now_ms):
        ttl = env.ttl_of(current)
        if current[0] == FLAGS:
            base: PNCounter | None = PNCounter.from_bytes(current[_SIZE:])
        else:
            s = current[_SIZE:]
            n = int(s) if _INT.fullmatch(s) else None
            if n is None or not INT64_MIN <= n <= INT64_MAX:
                raise ValueError("value is not an integer or out of range")
            base = PNCounter(env.hlc_of(current), env.origin_of(current), n)
    elif current is None:
        base = PNCounter()
    else:  # dead: based at the clock it died at (a tombstone's hlc, an expired deadline)
        clock = env.effective_clock(current, now_ms)
        dead_origin = env.origin_of(current)
        if (current[0] & env.FLAG_TOMBSTONE
                or clock.to_bytes(8, "big") + dead_origin.to_bytes(2, "big") > base_version_of(current)):
            base = PNCounter(clock, dead_origin, 0)
        else:
            base = None  # stored already expired: based on this operation's version
    value = (base.value() if base is not None else 0) + delta
    if not INT64_MIN <= value <= INT64_MAX:
        raise OverflowError("increment or decrement would overflow")
    if base is not None and not base.slots:  # a new, dead or plain-integer key
        payload = fresh(base.base_hlc, base.base_origin, base.base_value, origin, delta)
        if payload is not None:
            return env.pack(FLAGS, hlc, origin, ttl, payload), value
    pos, neg = base.slots.get(origin, (0, 0)) if base is not None else (0, 0)
    if base is None or (pos + delta if delta >= 0 else neg - delta) >= SLOT_LIMIT:
        base = PNCounter(hlc, origin, value)  # a fresh base at this op's version
    else:
        base = base.apply(origin, delta)
    return record(base, hlc, origin, ttl), value
