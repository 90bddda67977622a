"""Bitmaps: SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP and BITFIELD over string records.

A bitmap is a string (``keyspace/strings.py``): bit 0 is the most significant bit of the
first byte, and a string is read as padded with zero bytes on the right. There is no
bitmap record type in the data model, so a write of bits is an LWW write of the **whole
string value** (the key's TTL kept), and replicates as such.

Concurrent bit writes on two nodes therefore do not merge bit by bit: each node writes
the whole value it computed from the value it held, and the string register keeps the
write with the higher ``(hlc, origin)``, everywhere. One of the two writes' whole values
wins, and the other write's bits are lost unless the winner had seen them. A per-bit (or
per-word) merge would need its own record kind in the frozen format (e.g. one OR-set
element per set bit, or a max-lattice per word), which the data model does not have;
Redis's own replication has no concurrent writers, so it never faces this.

A write that changes nothing (SETBIT of a bit that already has that value, BITFIELD that
computes the same bytes) writes nothing and replicates nothing. Creating the key or
growing the string is a change, as in Redis, which creates or zero-pads the string even
when a BITFIELD ``OVERFLOW FAIL`` then leaves it alone.

The first half of this module is the bit arithmetic on values (pure); the second, the
operations on keys. A collection (HyperLogLog included) is WrongType, as for every string
read here (``strings.read``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from marekvs.core import envelope as env
from marekvs.keyspace import strings as kstr
from marekvs.keyspace.keyspace import Keyspace

U64 = (1 << 64) - 1
I64_MIN = -(1 << 63)

WRAP, SAT, FAIL = 0, 1, 2
GET, SET, INCRBY = 0, 1, 2
AND, OR, XOR, NOT = 0, 1, 2, 3


def _i64(x: int) -> int:
    """``x`` as C's int64_t after unsigned arithmetic (two's complement wrap)."""
    x &= U64
    return x - (1 << 64) if x >> 63 else x


# =========================================================================================
# Bit arithmetic on values
# =========================================================================================

def get_bit(value: bytes, offset: int) -> int:
    byte = offset >> 3
    if byte >= len(value):
        return 0
    return (value[byte] >> (7 - (offset & 7))) & 1


def count_bits(value: bytes, first: int, last: int) -> int:
    """Set bits of ``value`` from bit ``first`` to bit ``last`` inclusive (both inside)."""
    if first > last:
        return 0
    lo, hi = first >> 3, last >> 3
    # the whole bytes' count (little-endian: CPython's native, twice as fast for a popcount,
    # which does not care about the order), less the bits of the first byte before
    # ``first`` and of the last byte after ``last``
    n = int.from_bytes(value[lo:hi + 1], "little").bit_count()
    before, after = first & 7, 7 - (last & 7)
    if before:
        n -= (value[lo] >> (8 - before)).bit_count()
    if after:
        n -= (value[hi] & ((1 << after) - 1)).bit_count()
    return n


def find_bit(value: bytes, bit: int, first: int, last: int) -> int:
    """Position of the first bit equal to ``bit`` from bit ``first`` to bit ``last``
    inclusive (both inside ``value``), -1 if there is none."""
    if first > last:
        return -1
    lo, hi = first >> 3, last >> 3
    x = int.from_bytes(value[lo:hi + 1], "big")
    # keep only the range: shift out the bits after ``last``, mask the bits before ``first``
    x >>= 7 - (last & 7)
    n = last - first + 1
    x &= (1 << n) - 1
    if not bit:
        x ^= (1 << n) - 1
    if not x:
        return -1
    return first + n - x.bit_length()


def get_field(value: bytes | bytearray, offset: int, bits: int, signed: bool) -> int:
    """The ``bits``-wide integer at bit ``offset`` (zero padded past the end), as
    Redis's getUnsignedBitfield / getSignedBitfield read it."""
    lo = offset >> 3
    hi = (offset + bits - 1) >> 3
    chunk = bytes(value[lo:hi + 1]).ljust(hi - lo + 1, b"\0")
    x = int.from_bytes(chunk, "big")
    x >>= (hi - lo + 1) * 8 - (offset & 7) - bits
    x &= (1 << bits) - 1
    if signed and x >> (bits - 1):
        x -= 1 << bits
    return x


def set_field(buf: bytearray, offset: int, bits: int, v: int) -> None:
    """Store the low ``bits`` bits of ``v`` at bit ``offset`` of ``buf`` (long enough)."""
    lo = offset >> 3
    hi = (offset + bits - 1) >> 3
    n = hi - lo + 1
    shift = n * 8 - (offset & 7) - bits
    mask = ((1 << bits) - 1) << shift
    x = int.from_bytes(buf[lo:hi + 1], "big")
    x = (x & ~mask) | ((v << shift) & mask)
    buf[lo:hi + 1] = x.to_bytes(n, "big")


def unsigned_overflow(value: int, incr: int, bits: int, owtype: int) -> tuple[int, int]:
    """Redis's checkUnsignedBitfieldOverflow: (1 overflow / -1 underflow / 0, the value
    to store on overflow for WRAP and SAT). ``value`` is a uint64, ``incr`` an int64."""
    mx = U64 if bits == 64 else (1 << bits) - 1
    maxincr = _i64(mx - value)
    minincr = _i64(-value)
    if value > mx or (incr > 0 and incr > maxincr):
        if owtype == WRAP:
            return 1, ((value + incr) & U64) & mx
        return 1, mx
    if incr < 0 and incr < minincr:
        if owtype == WRAP:
            return -1, ((value + incr) & U64) & mx
        return -1, 0
    return 0, 0


def signed_overflow(value: int, incr: int, bits: int, owtype: int) -> tuple[int, int]:
    """Redis's checkSignedBitfieldOverflow, its int64 wrap-arounds included (a SET of a
    value below the type's minimum saturates at its maximum, as in Redis)."""
    mx = (1 << 63) - 1 if bits == 64 else (1 << (bits - 1)) - 1
    mn = -mx - 1
    maxincr = _i64(mx - value)
    minincr = _i64(mn - value)
    if value > mx or (bits != 64 and incr > maxincr) or (value >= 0 and incr > 0 and incr > maxincr):
        return 1, (_wrap_signed(value, incr, bits) if owtype == WRAP else mx)
    if value < mn or (bits != 64 and incr < minincr) or (value < 0 and incr < 0 and incr < minincr):
        return -1, (_wrap_signed(value, incr, bits) if owtype == WRAP else mn)
    return 0, 0


def _wrap_signed(value: int, incr: int, bits: int) -> int:
    c = (value + incr) & U64
    if bits < 64:
        mask = (U64 << bits) & U64
        c = c | mask if c & (1 << (bits - 1)) else c & ~mask
    return _i64(c)


class FieldOp(NamedTuple):
    """One BITFIELD operation: GET, SET or INCRBY of a ``bits``-wide (signed) integer at
    bit ``offset``; ``value`` is SET's value or INCRBY's increment."""

    opcode: int
    signed: bool
    bits: int
    offset: int
    value: int = 0
    owtype: int = WRAP


def run_fields(buf: bytearray, ops: Sequence[FieldOp], grew: bool = False) -> tuple[list[int | None], int]:
    """Run BITFIELD's operations in order on ``buf`` (already grown to every written
    bit): the replies (None where OVERFLOW FAIL skipped a write) and Redis's count of
    changes, which decides its keyspace event: the writes that ran and either changed
    their field or, the string having ``grew``, any."""
    out: list[int | None] = []
    changes = 0
    for op in ops:
        old = get_field(buf, op.offset, op.bits, op.signed)
        if op.opcode == GET:
            out.append(old)
            continue
        check = signed_overflow if op.signed else unsigned_overflow
        if op.opcode == INCRBY:
            over, limit = check(old, op.value, op.bits, op.owtype)
            new = limit if over else old + op.value
            ret = new
        else:
            new = op.value if op.signed else op.value & U64
            over, limit = check(new, 0, op.bits, op.owtype)
            if over:
                new = limit
            ret = old
        if over and op.owtype == FAIL:
            out.append(None)
            continue
        out.append(ret)
        set_field(buf, op.offset, op.bits, new)
        if grew or new != old:  # both within the field's range here
            changes += 1
    return out, changes


def bitop(op: int, values: Sequence[bytes | None]) -> bytes:
    """BITOP of the source strings (None: an absent key, an empty string), each zero
    padded to the longest; empty if every source is."""
    maxlen = max((len(v) for v in values if v), default=0)
    if not maxlen:
        return b""
    ints = [int.from_bytes((v or b"").ljust(maxlen, b"\0"), "big") for v in values]
    acc = ints[0]
    if op == NOT:
        acc ^= (1 << (8 * maxlen)) - 1
    for x in ints[1:]:
        if op == AND:
            acc &= x
        elif op == OR:
            acc |= x
        else:
            acc ^= x
    return acc.to_bytes(maxlen, "big")


# =========================================================================================
# Operations on keys
# =========================================================================================

def read(ks: Keyspace, key: bytes, now: int) -> bytes | None:
    """The string at ``key`` (None if absent); WrongType for a collection."""
    return kstr.read(ks, key, now)


def _write_grown(ks: Keyspace, key: bytes, rec: bytes | None, old: bytes, new: bytes, now: int) -> None:
    """Store ``new`` at ``key`` (TTL kept) if it differs from ``old`` or the key is
    created."""
    if rec is None:
        kstr.write(ks, key, new, 0, now)
    elif new != old:
        kstr.write_plain(ks, key, new, env.ttl_of(rec))


def setbit(ks: Keyspace, key: bytes, offset: int, on: int, now: int) -> tuple[int, bool]:
    """SETBIT: (the bit's old value, whether the string changed: created, zero padded
    to hold the bit, or the bit flipped)."""
    rec = kstr.record(ks, key, now)
    old = b"" if rec is None else kstr.string_value(rec)
    byte = offset >> 3
    shift = 7 - (offset & 7)
    buf = bytearray(old)
    if len(buf) <= byte:
        buf.extend(bytes(byte + 1 - len(buf)))
    was = (buf[byte] >> shift) & 1
    if on:
        buf[byte] |= 1 << shift
    else:
        buf[byte] &= ~(1 << shift) & 0xFF
    new = bytes(buf)
    _write_grown(ks, key, rec, old, new, now)
    return was, rec is None or new != old


def bitfield(ks: Keyspace, key: bytes, ops: Sequence[FieldOp], now: int) -> tuple[list[int | None], int]:
    """BITFIELD with at least one SET or INCRBY: the string is created or zero padded up
    to the highest bit written, then the operations run in order; (the replies, the
    changes: ``run_fields``)."""
    rec = kstr.record(ks, key, now)
    old = b"" if rec is None else kstr.string_value(rec)
    highest = max(op.offset + op.bits - 1 for op in ops if op.opcode != GET)
    buf = bytearray(old)
    need = (highest >> 3) + 1
    grew = len(buf) < need
    if grew:
        buf.extend(bytes(need - len(buf)))
    out = run_fields(buf, ops, grew)
    _write_grown(ks, key, rec, old, bytes(buf), now)
    return out


def bitop_store(ks: Keyspace, op: int, dest: bytes, sources: Sequence[bytes], now: int) -> tuple[int, bool]:
    """BITOP: ``dest`` becomes the result (any old value or type replaced, no TTL), or is
    deleted when the result is empty; (the result's length, whether a key was deleted)."""
    return store_result(ks, dest, bitop(op, [kstr.read(ks, k, now) for k in sources]), now)


def store_result(ks: Keyspace, dest: bytes, result: bytes, now: int) -> tuple[int, bool]:
    """BITOP's write of its ``result`` (``bitop_store``'s second half)."""
    if result:
        kstr.write(ks, dest, result, 0, now)
        return len(result), False
    return 0, ks.delete(dest, now)
