"""Stream entries (tag b'x'): cluster-unique ids and immutable entries.

Ids are generated at the origin with no coordination. ``ms`` comes from the HLC's
physical clock and the sequence embeds the origin node id::

    seq = (origin << 20) | counter        # counter in 0 .. 2**20 - 1

so two nodes never mint the same id. Ids are strictly increasing per stream: the new
id is greater than the stream's last id (kept, max-joined, on the collection head).
``next_id`` picks ``ms = max(hlc physical ms, last ms)``; within ``last_ms`` it
continues after the last id if that leaves room in this origin's sequence range
(the counter restarts at 0 in every new ms); when it does not (this origin's 2**20
counters in that ms are used up, or a higher origin already used that ms) it borrows
the next millisecond, as Redis does when a sequence overflows. Borrowed ms run ahead of
the wall clock only for as long as the burst lasts.

Entries: the stream is a union of entry records keyed by id (Shapiro et al., "A
comprehensive study of Convergent and Commutative Replicated Data Types", INRIA
RR-7506, 2011: a grow-only set whose elements are LWW registers). Entries are immutable
and an equal id is the same entry, so the record merge is the LWW register merge
(``lww.merge``); XDEL / XTRIM write per-entry LWW tombstones (higher version), and the
head's delete clock gates a deleted stream's entries.

Entry payload (format byte first)::

    [fmt u8 = 1] [npairs varint] npairs x ([flen varint][field][vlen varint][value])

varint = unsigned LEB128. Field order is the XADD argument order.
"""

from __future__ import annotations

from marekvs.core import envelope as env
from marekvs.core import lww
from marekvs.core.envelope import RecordType
from marekvs.core.hlc import physical_ms
from marekvs.core.keys import decode_varint, encode_varint

FMT = 1
COUNTER_BITS = 20
COUNTER_MAX = (1 << COUNTER_BITS) - 1
_SIZE = env.ENVELOPE_SIZE

merge = lww.merge

StreamId = tuple[int, int]  # (ms, seq)


class StreamFormatError(ValueError):
    pass


# -- ids ---------------------------------------------------------------------------------

def make_seq(origin: int, counter: int) -> int:
    if not 0 <= counter <= COUNTER_MAX:
        raise ValueError("stream id counter out of range")
    return (origin << COUNTER_BITS) | counter


def split_seq(seq: int) -> tuple[int, int]:
    """(origin, counter) of a generated sequence number."""
    return seq >> COUNTER_BITS, seq & COUNTER_MAX


def next_id(last: StreamId, hlc: int, origin: int) -> StreamId:
    """The id XADD '*' mints at ``origin``: strictly greater than ``last``."""
    last_ms, last_seq = last
    ms = physical_ms(hlc)
    base = origin << COUNTER_BITS
    if ms > last_ms:
        return ms, base
    if last_seq < base:
        return last_ms, base
    if last_seq < base | COUNTER_MAX:
        return last_ms, last_seq + 1
    return last_ms + 1, base


def format_id(sid: StreamId) -> bytes:
    return b"%d-%d" % sid


def parse_id(text: bytes) -> StreamId:
    """A full ``ms-seq`` id (``ms`` alone means ``ms-0``)."""
    ms, sep, seq = text.partition(b"-")
    if not ms.isdigit() or (sep and not seq.isdigit()):
        raise ValueError("Invalid stream ID specified as stream command argument")
    sid = (int(ms), int(seq) if sep else 0)
    if sid[0] >= 1 << 64 or sid[1] >= 1 << 64:
        raise ValueError("Invalid stream ID specified as stream command argument")
    return sid


# -- entries -------------------------------------------------------------------------------

def to_bytes(fields: list[tuple[bytes, bytes]]) -> bytes:
    out = bytearray((FMT,))
    out += encode_varint(len(fields))
    for f, v in fields:
        out += encode_varint(len(f))
        out += f
        out += encode_varint(len(v))
        out += v
    return bytes(out)


def from_bytes(payload: bytes) -> list[tuple[bytes, bytes]]:
    if not payload or payload[0] != FMT:
        raise StreamFormatError("unknown stream entry format")
    try:
        n, pos = decode_varint(payload, 1)
        fields = []
        for _ in range(n):
            parts = []
            for _ in range(2):
                ln, pos = decode_varint(payload, pos)
                if pos + ln > len(payload):
                    raise StreamFormatError("stream entry runs past its payload")
                parts.append(bytes(payload[pos:pos + ln]))
                pos += ln
            fields.append((parts[0], parts[1]))
    except ValueError as e:
        raise StreamFormatError(str(e)) from None
    if pos != len(payload):
        raise StreamFormatError("trailing bytes after stream entry")
    return fields


def new(fields: list[tuple[bytes, bytes]], hlc: int, origin: int) -> bytes:
    return lww.new(RecordType.STREAM_ENTRY, hlc, origin, to_bytes(fields))


def tombstone(hlc: int, origin: int) -> bytes:
    """XDEL / XTRIM of one entry."""
    return lww.tombstone(RecordType.STREAM_ENTRY, hlc, origin)


def value(record: bytes, now_ms: int) -> list[tuple[bytes, bytes]] | None:
    """The entry's field/value pairs, None if deleted."""
    payload = lww.value(record, now_ms)
    return None if payload is None else from_bytes(payload)
