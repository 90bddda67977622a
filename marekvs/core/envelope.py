"""The 19-byte envelope prefixed to every stored value.

    offset size field
    0      1    flags: bit0 tombstone, bit1 collection-head,
                bits 2..4 record type (see RecordType)
    1      8    hlc: u64 BE = [phys_ms:48 | logical:16]
    9      2    origin: node id, u16 BE
    11     8    ttl_deadline_ms: u64 BE absolute wall-clock ms; 0 = no TTL
    19     ...  payload

(hlc, origin) is the record's version (and, for element adds, its dot). The origin
writes the envelope once; replication ships it byte for byte. Hot paths slice the
fixed-size header instead of decoding it: ``version_key`` compares versions as one
int built from the 10 bytes at offset 1.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

ENVELOPE_SIZE: Final = 19
# Where the header's fields start, for hot paths that slice a field without a call:
# ``record[TTL_AT:HEADER]``. Modules compiled with mypyc must slice with these bounds, not
# index with the ``slice`` objects below: mypyc compiles ``b[s]`` for any non-literal ``s``
# as an integer index (it raises "'slice' object cannot be interpreted as an integer").
HLC_AT: Final = 1
ORIGIN_AT: Final = 9
TTL_AT: Final = 11
HEADER: Final = ENVELOPE_SIZE  # record[HEADER:] is the payload
# Named slices of the header (interpreted code):
VERSION: Final = slice(HLC_AT, TTL_AT)  # (hlc, origin) as 10 bytes whose memcmp order is the version order
HLC: Final = slice(HLC_AT, ORIGIN_AT)
ORIGIN: Final = slice(ORIGIN_AT, TTL_AT)
TTL: Final = slice(TTL_AT, HEADER)
NO_TTL: Final = bytes(8)  # record[TTL] of a record without a deadline
_ENV = struct.Struct(">BQHQ")
_VERSION = struct.Struct(">QH")
_TTL = struct.Struct(">Q")

FLAG_TOMBSTONE: Final = 0x01
FLAG_HEAD: Final = 0x02


class RecordType:
    STRING: Final = 0
    HASH_FIELD: Final = 1
    SET_MEMBER: Final = 2
    ZSET_MEMBER: Final = 3
    LIST: Final = 4
    STREAM_ENTRY: Final = 5
    COUNTER: Final = 6
    HLL_REGISTER: Final = 7

    NAMES: Final = ("string", "hash-field", "set-member", "zset-member", "list",
                    "stream-entry", "counter", "hll-register")


class EnvelopeError(ValueError):
    """A stored or shipped value shorter than its envelope, or with bad flags."""


class Envelope(NamedTuple):
    flags: int
    hlc: int
    origin: int
    ttl_deadline_ms: int

    @property
    def tombstone(self) -> bool:
        return bool(self.flags & FLAG_TOMBSTONE)

    @property
    def head(self) -> bool:
        return bool(self.flags & FLAG_HEAD)

    @property
    def rtype(self) -> int:
        return (self.flags >> 2) & 0x7

    @property
    def version(self) -> tuple[int, int]:
        return (self.hlc, self.origin)


def make_flags(rtype: int, tombstone: bool = False, head: bool = False) -> int:
    if not 0 <= rtype <= 7:
        raise EnvelopeError(f"record type {rtype} does not fit in 3 bits")
    return (rtype & 0x7) << 2 | (FLAG_TOMBSTONE if tombstone else 0) | (FLAG_HEAD if head else 0)


def pack(flags: int, hlc: int, origin: int, ttl_deadline_ms: int = 0, payload: bytes = b"") -> bytes:
    return _ENV.pack(flags, hlc, origin, ttl_deadline_ms) + payload


# The envelope alone, (flags, hlc, origin, ttl_deadline_ms) -> 19 bytes: for hot paths
# that append the payload themselves (one call fewer than ``pack``).
pack_envelope = _ENV.pack


def unpack(value: bytes) -> tuple[Envelope, bytes]:
    if len(value) < ENVELOPE_SIZE:
        raise EnvelopeError(f"value of {len(value)} bytes is shorter than the envelope")
    if value[0] & 0xE0:
        raise EnvelopeError(f"reserved flag bits set: {value[0]:#04x}")
    return Envelope(*_ENV.unpack_from(value, 0)), value[ENVELOPE_SIZE:]


def unpack_header(value: bytes) -> Envelope:
    if len(value) < ENVELOPE_SIZE:
        raise EnvelopeError(f"value of {len(value)} bytes is shorter than the envelope")
    return Envelope(*_ENV.unpack_from(value, 0))


# -- sliced accessors (no tuple building) for the hot path ---------------------------

def flags_of(value: bytes) -> int:
    return value[0]


def rtype_of(value: bytes) -> int:
    return (value[0] >> 2) & 0x7


def is_tombstone(value: bytes) -> bool:
    return bool(value[0] & FLAG_TOMBSTONE)


def version_key(value: bytes) -> int:
    """(hlc, origin) as one comparable int: hlc << 16 | origin."""
    return int.from_bytes(value[1:11], "big")


def hlc_of(value: bytes) -> int:
    return int.from_bytes(value[1:9], "big")


def origin_of(value: bytes) -> int:
    return int.from_bytes(value[9:11], "big")


def ttl_of(value: bytes) -> int:
    return int.from_bytes(value[11:19], "big")


def payload_of(value: bytes) -> bytes:
    return value[ENVELOPE_SIZE:]


def with_ttl(value: bytes, hlc: int, origin: int, ttl_deadline_ms: int) -> bytes:
    """Re-stamp ``value`` with a new version and TTL, payload and flags unchanged
    (EXPIRE / PERSIST are LWW writes of the envelope)."""
    return _ENV.pack(value[0], hlc, origin, ttl_deadline_ms) + value[ENVELOPE_SIZE:]


def is_live(value: bytes | None, now_ms: int) -> bool:
    """THE liveness rule (the TTL-as-tombstone rule): a record is live if it exists, is
    not a tombstone and its deadline (if any) is still ahead (``now_ms < deadline``).

    Every other liveness answer in core follows from this one function: ``effective_clock``
    below, ``head.is_live`` (an alias), ``head.element_live``, and the ``value`` reads of
    ``lww`` / ``listelem`` / ``stream`` / ``pncounter`` / ``orswot``. Hot paths outside core
    that inline it are pinned to it by tests."""
    if value is None or value[0] & FLAG_TOMBSTONE:
        return False
    d = value[11:19]
    return d == NO_TTL or int.from_bytes(d, "big") > now_ms


def effective_clock(value: bytes, now_ms: int) -> int:
    """The clock at which this record stopped being live under ``is_live``: 0 while it
    is live; its hlc if it is a tombstone; else (it expired) its deadline as an HLC value,
    ``deadline << 16`` (an expired record reads as a tombstone whose clock is the
    deadline). Collection heads use it to gate older elements."""
    if is_live(value, now_ms):
        return 0
    if value[0] & FLAG_TOMBSTONE:
        return int.from_bytes(value[1:9], "big")
    return int.from_bytes(value[11:19], "big") << 16
