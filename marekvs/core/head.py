"""Collection heads (tag b'M'): type, whole-collection delete clock, stream state.

A hash, set, zset, list, stream or HyperLogLog is one head record plus one record per
element. The head gates the collection: its TTL and its delete clock apply to every
element, so DEL and EXPIRE of a whole collection are one write (no per-element fan-out).

Payload layout (format byte first; the data model spec fixes the fields, not the
layout)::

    [fmt u8 = 1] [ctype u8] [delete_clock u64] [last_ms u64] [last_seq u64] [config...]

integers big-endian. ``ctype`` is the ``CollectionType`` (numbered like the envelope
record type of the collection's elements, which the head's envelope also carries in
its record-type bits, with the collection-head flag set). ``last_ms``/``last_seq`` is a
stream's last generated id (zero for other types); ``config`` is the rest of the
payload, opaque to the merge (a stream's configuration, empty otherwise).

Lattice (Shapiro et al., "A comprehensive study of Convergent and Commutative
Replicated Data Types", INRIA RR-7506, 2011: a product of join-semilattices):

- LWW part: envelope header (tombstone bit, version, TTL), ``ctype`` and ``config``
  are taken together from the higher version (ties: the larger bytes of that part);
- ``delete_clock``: max of both;
- ``(last_ms, last_seq)``: max of both, so a stream's last id never goes backwards,
  not even across DEL (old entries stay on disk until reclaimed, and new ids never
  meet them).

Each component is a join, so the product is commutative, associative and idempotent
byte for byte. DEL is an LWW tombstone of the head whose delete clock is the DEL's
hlc; a concurrent re-creation on another node (a head with a higher version) wins the
LWW part but inherits the delete clock, so the old elements stay dead and the new
ones live: DEL and re-creation converge in any order. A tombstoned head keeps its
``ctype``, so elements newer than its delete clock keep a typed home.

Gating: an element is live only if its version's hlc is strictly greater than the
head's ``delete_clock(head, now)`` = max(payload delete clock, the head's
``envelope.effective_clock``), i.e. also newer than the head's own tombstone or
expiry. ORSWOT elements are gated by their highest live dot (a remove or EXPIREMEMBER
made after the DEL must not revive an add made before it).

Existence, one rule for every collection type (``present``). Removing elements never
writes the head: a removal removes what it observed, and a head tombstone written when a
collection became empty would also gate an element added concurrently on another node
(newer than nothing the removal saw, older than its tombstone). So whether a collection
exists is read, not written: it exists if its head is live and either its type exists
while empty (streams and HyperLogLogs, as in Redis: ``KEEPS_EMPTY``) or it has a live
element; and if its head is dead (DEL, expiry) while it has a live element, one its
delete clock does not gate (an add made concurrently with the DEL on a node that had not
seen it: "DEL beats the older elements, not one written after it"). Only DEL, expiry and
the writes that replace a key (RENAME, a STORE, FLUSHALL) delete a collection.
"""

from __future__ import annotations

import struct
from typing import Final, NamedTuple

from marekvs.core import envelope as env
from marekvs.core import hll, joins, orswot
from marekvs.core.envelope import RecordType

FMT = 1
_FIXED = struct.Struct(">BBQQQ")
_IDS = struct.Struct(">QQ")
_SIZE = env.ENVELOPE_SIZE


class CollectionType:
    HASH: Final = RecordType.HASH_FIELD
    SET: Final = RecordType.SET_MEMBER
    ZSET: Final = RecordType.ZSET_MEMBER
    LIST: Final = RecordType.LIST
    STREAM: Final = RecordType.STREAM_ENTRY
    HLL: Final = RecordType.HLL_REGISTER


# TYPE names; HyperLogLogs report "string" as Redis does (tooling compatibility).
TYPE_NAMES = {
    CollectionType.HASH: "hash",
    CollectionType.SET: "set",
    CollectionType.ZSET: "zset",
    CollectionType.LIST: "list",
    CollectionType.STREAM: "stream",
    CollectionType.HLL: "string",
}

_ORSWOT_TYPES = frozenset((RecordType.HASH_FIELD, RecordType.SET_MEMBER, RecordType.ZSET_MEMBER))

# Collection types that exist while empty, as in Redis (XDEL of every entry leaves the
# stream; a PFADD of no element creates the HyperLogLog). The others exist while they
# have a live element (see "Existence" above).
KEEPS_EMPTY = frozenset((CollectionType.STREAM, CollectionType.HLL))


def present(head_record: bytes, now_ms: int, nonempty: bool) -> bool:
    """The one existence rule: does the collection whose head record (live or dead) is
    ``head_record`` exist, given whether it has a live element (``nonempty``)?"""
    if nonempty:
        return True
    return head_record[_SIZE + 1] in KEEPS_EMPTY and env.is_live(head_record, now_ms)


class HeadFormatError(ValueError):
    pass


class Head(NamedTuple):
    ctype: int
    delete_clock: int = 0
    last_ms: int = 0
    last_seq: int = 0
    config: bytes = b""


def to_bytes(h: Head) -> bytes:
    return _FIXED.pack(FMT, h.ctype, h.delete_clock, h.last_ms, h.last_seq) + h.config


def from_bytes(payload: bytes) -> Head:
    if len(payload) < _FIXED.size:
        raise HeadFormatError("head payload too short")
    fmt, ctype, clock, ms, seq = _FIXED.unpack_from(payload, 0)
    if fmt != FMT:
        raise HeadFormatError(f"unknown head format {fmt}")
    if ctype not in TYPE_NAMES:
        raise HeadFormatError(f"unknown collection type {ctype}")
    return Head(ctype, clock, ms, seq, bytes(payload[_FIXED.size:]))


def head_of(record: bytes) -> Head:
    return from_bytes(record[_SIZE:])


# -- lattice ---------------------------------------------------------------------------

def _lww_key(record: bytes) -> tuple[bytes, bytes, bytes]:
    # version, then the whole LWW part: header, ctype, config (skipping the max-joined
    # clock and last id)
    return record[1:11], record[:_SIZE] + record[_SIZE + 1:_SIZE + 2], record[_SIZE + 26:]


KNOWN = joins.Known()  # heads built over the stored one (``with_last_id``)


def merge(a: bytes, b: bytes) -> bytes:
    if a == b:
        return a
    known = KNOWN.join(a, b)
    if known is not None:
        return known
    ha, hb = head_of(a), head_of(b)
    top, ht = (a, ha) if _lww_key(a) >= _lww_key(b) else (b, hb)
    last = max((ha.last_ms, ha.last_seq), (hb.last_ms, hb.last_seq))
    out = top[:_SIZE] + to_bytes(
        Head(ht.ctype, max(ha.delete_clock, hb.delete_clock), last[0], last[1], ht.config))
    if out == a:
        return a
    if out == b:
        return b
    return out


# -- local ops -------------------------------------------------------------------------

def new(ctype: int, hlc: int, origin: int, prior: bytes | None = None, now_ms: int = 0,
        ttl_deadline_ms: int = 0, config: bytes = b"") -> bytes:
    """The head written when a collection is created (first write to an absent key).

    ``prior`` is the dead head still stored at the key (tombstoned or expired), if
    any: its effective clock is folded into the new delete clock, because the new
    head has no tombstone or deadline of its own left to gate the old elements."""
    h = Head(ctype, 0 if prior is None else delete_clock(prior, now_ms), config=config)
    rec = env.pack(env.make_flags(ctype, head=True), hlc, origin, ttl_deadline_ms, to_bytes(h))
    return rec if prior is None else merge(prior, rec)


def tombstone(head_record: bytes, hlc: int, origin: int) -> bytes:
    """DEL: an LWW tombstone of the head carrying the delete clock ``hlc``."""
    h = head_of(head_record)
    rec = env.pack(env.make_flags(h.ctype, tombstone=True, head=True), hlc, origin, 0,
                   to_bytes(h._replace(delete_clock=max(h.delete_clock, hlc))))
    return merge(head_record, rec)


def with_last_id(head_record: bytes, ms: int, seq: int, hlc: int, origin: int) -> bytes:
    """XADD: record a stream's new last id (an LWW write of the head, TTL kept).

    ``head_record`` must be live: a dead stream is re-created with ``new`` first,
    which is what carries its delete clock forward."""
    if (ms, seq) <= last_id_of(head_record) or (hlc, origin) <= (env.hlc_of(head_record),
                                                                   env.origin_of(head_record)):
        h = head_of(head_record)
        rec = env.pack(head_record[0], hlc, origin, env.ttl_of(head_record),
                       to_bytes(h._replace(last_ms=ms, last_seq=seq)))
        return merge(head_record, rec)
    # a newer version with a greater last id: what the merge would build, built directly
    return KNOWN.built(env.pack(head_record[0], hlc, origin, env.ttl_of(head_record),
                                head_record[_SIZE:_SIZE + 10] + _IDS.pack(ms, seq) + head_record[_SIZE + 26:]),
                       head_record)


# -- reads -------------------------------------------------------------------------------

def ctype_of(record: bytes) -> int:
    return record[_SIZE + 1]


def last_id_of(record: bytes) -> tuple[int, int]:
    """A stream head's last id ``(last_ms, last_seq)``, read in place."""
    ids: tuple[int, int] = _IDS.unpack_from(record, _SIZE + 10)
    return ids


def type_name(record: bytes) -> str:
    return TYPE_NAMES[record[_SIZE + 1]]


# A head is live under the one liveness rule of every record.
is_live = env.is_live


def value(record: bytes, now_ms: int) -> Head | None:
    """The head's payload if the head is live, else None."""
    return head_of(record) if env.is_live(record, now_ms) else None


def delete_clock(head_record: bytes | None, now_ms: int) -> int:
    """The clock at or below which this collection's elements are dead."""
    if head_record is None:
        return 0
    clock = int.from_bytes(head_record[_SIZE + 2:_SIZE + 10], "big")
    return max(clock, env.effective_clock(head_record, now_ms))


def gate_clock(element_record: bytes) -> int:
    """The clock of an element that the head's delete clock is compared with: the
    highest live dot's hlc for ORSWOT elements (``orswot.gate_clock``), an HLL
    register's generation + 1 (``hll.gate_clock``), else the record's own hlc. The zset
    score index shares the zset members' record type but is
    an LWW record with no payload (an ORSWOT record always has one), so it is gated by
    its hlc. Each registry row names the same function for its tag
    (``RecordKind.gate_clock``); tests/merge_laws/test_registry.py pins the two."""
    rtype = env.rtype_of(element_record)
    if rtype in _ORSWOT_TYPES and len(element_record) > _SIZE:
        return orswot.gate_clock(element_record)
    if rtype == RecordType.HLL_REGISTER:
        return hll.gate_clock(element_record)
    return env.hlc_of(element_record)


def element_live(head_record: bytes | None, element_record: bytes, now_ms: int) -> bool:
    """True if ``element_record`` is live in its collection: live itself
    (``envelope.is_live``) and not gated, i.e. newer than the head's delete clock."""
    return (env.is_live(element_record, now_ms)
            and gate_clock(element_record) > delete_clock(head_record, now_ms))
