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

Counters (tag b'X', one record per stream and origin, ``[pid]'X'[klen][key][origin u16]``)
keep what Redis keeps beside the entries: ``entries-added``, ``max-deleted-entry-id`` and
the stream's last id as Redis sees it (which starts over when a deleted stream is made
again and which XSETID may move back; the head's last id, max-joined, never goes back and
is what ``next_id`` mints after). Record type STREAM_ENTRY, never a tombstone; payload::

    [fmt u8 = 0x21] [gen u64] [epoch_hlc u64] [epoch_origin u16]
    [added u64] [last_ms u64] [last_seq u64] [maxdel_ms u64] [maxdel_seq u64]

Each node writes only its own record (a grow-only counter of the entries it added, the
greatest id it added and the greatest id it deleted). ``gen`` is the stream head's delete clock the node saw and
``epoch`` the version of the last XSETID that set the counters (``(0, 0)``: none): the
counts of a record start over when either changes. A reader with head delete clock ``D``
takes the records with ``gen == D``, the greatest epoch ``E`` among them, and sums
``added`` (maxes ``last`` and ``maxdel``) over those in epoch ``E`` (``totals``). An XSETID
is a new epoch whose record holds the values it set. Merge: the greater
``(gen, epoch)`` wins whole; equal ones take each count's max and the envelope of the
higher version. A lexicographic product of a total order and a product of joins: a join.
"""

from __future__ import annotations

import struct
from typing import Iterable, NamedTuple

from marekvs.core import envelope as env
from marekvs.core import joins, lww
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


def flat_from_bytes(payload: bytes) -> list[bytes]:
    """The entry's fields and values, flat (``[f1, v1, f2, v2, ...]``, a reply's shape).
    Lengths below 128 (one varint byte) are read inline: the common case."""
    if not payload or payload[0] != FMT:
        raise StreamFormatError("unknown stream entry format")
    end = len(payload)
    try:
        n = payload[1]
        pos = 2
        if n >= 0x80:
            n, pos = decode_varint(payload, 1)
        out = []
        for _ in range(2 * n):
            ln = payload[pos]
            if ln < 0x80:
                pos += 1
            else:
                ln, pos = decode_varint(payload, pos)
            nxt = pos + ln
            if nxt > end:
                raise StreamFormatError("stream entry runs past its payload")
            out.append(payload[pos:nxt])
            pos = nxt
    except IndexError:
        raise StreamFormatError("truncated stream entry") from None
    except ValueError as e:
        raise StreamFormatError(str(e)) from None
    if pos != end:
        raise StreamFormatError("trailing bytes after stream entry")
    return out


def from_bytes(payload: bytes) -> list[tuple[bytes, bytes]]:
    flat = flat_from_bytes(payload)
    return list(zip(flat[::2], flat[1::2]))


def new(fields: list[tuple[bytes, bytes]], hlc: int, origin: int) -> bytes:
    return lww.new(RecordType.STREAM_ENTRY, hlc, origin, to_bytes(fields))


def tombstone(hlc: int, origin: int) -> bytes:
    """XDEL / XTRIM of one entry."""
    return lww.tombstone(RecordType.STREAM_ENTRY, hlc, origin)


def value(record: bytes, now_ms: int) -> list[tuple[bytes, bytes]] | None:
    """The entry's field/value pairs, None if deleted."""
    payload = lww.value(record, now_ms)
    return None if payload is None else from_bytes(payload)


# -- per-origin counters (tag b'X') ----------------------------------------------------------

COUNTER_FMT = 0x21
_COUNTERS = struct.Struct(">BQQHQQQQQ")  # fmt, gen, epoch hlc/origin, added, last, maxdel
NO_EPOCH = (0, 0)


class Counters(NamedTuple):
    gen: int  # the head delete clock the writer saw
    epoch: tuple[int, int]  # the XSETID version the counts start from, NO_EPOCH: none
    added: int = 0
    last: StreamId = (0, 0)
    max_deleted: StreamId = (0, 0)


def counters_to_bytes(c: Counters) -> bytes:
    return _COUNTERS.pack(COUNTER_FMT, c.gen, c.epoch[0], c.epoch[1], c.added, *c.last, *c.max_deleted)


def counters_from_bytes(payload: bytes) -> Counters:
    if len(payload) != _COUNTERS.size or payload[0] != COUNTER_FMT:
        raise StreamFormatError("not a stream counters payload")
    _, gen, eh, eo, added, lms, lseq, ms, seq = _COUNTERS.unpack(payload)
    return Counters(gen, (eh, eo), added, (lms, lseq), (ms, seq))


# The last counters record built and what it holds: the stream summary that follows the
# change feed (keyspace/streams.py) reads an XADD's record back as it is applied, and gets
# the counters without parsing them again. The same object only (``is``): a pure memo.
_last_built: tuple[bytes, Counters] = (b"", Counters(0, (0, 0), 0, (0, 0), (0, 0)))


def counters_of(record: bytes) -> Counters:
    last = _last_built
    if record is last[0]:  # the record ``counters_record`` built last (an XADD's)
        return last[1]
    return counters_from_bytes(record[_SIZE:])


def counters_record(c: Counters, hlc: int, origin: int) -> bytes:
    global _last_built
    rec = env.pack(env.make_flags(RecordType.STREAM_ENTRY), hlc, origin, 0, counters_to_bytes(c))
    _last_built = (rec, c)
    return rec


KNOWN = joins.Known()  # counter records built over the stored one (``bumped``)


def merge_counters(a: bytes, b: bytes) -> bytes:
    if a == b:
        return a
    known = KNOWN.join(a, b)
    if known is not None:
        return known
    ca, cb = counters_of(a), counters_of(b)
    ka, kb = (ca.gen, ca.epoch), (cb.gen, cb.epoch)
    if ka != kb:
        return a if ka > kb else b
    top = a if (a[1:11], a[:_SIZE]) >= (b[1:11], b[:_SIZE]) else b
    out = top[:_SIZE] + counters_to_bytes(
        Counters(ca.gen, ca.epoch, max(ca.added, cb.added), max(ca.last, cb.last),
                 max(ca.max_deleted, cb.max_deleted)))
    if out == a:
        return a
    if out == b:
        return b
    return out


def bumped(current: bytes | None, own: Counters | None, c: Counters, hlc: int, origin: int) -> bytes:
    """This node's counters record ``c`` written over its stored record ``current``:
    their join. When ``c`` is ``bump(own)`` and ``own`` is what ``current`` holds, that is
    the new record itself (its ``(gen, epoch)`` is not older, its counts not lower, its
    version newer), known without a merge."""
    rec = counters_record(c, hlc, origin)
    if current is None:
        return rec
    if own is not None and current[_SIZE:] == counters_to_bytes(own) and (hlc, origin) > (
            env.hlc_of(current), env.origin_of(current)):
        return KNOWN.built(rec, current)
    return merge_counters(current, rec)


def check_counters(record: bytes) -> None:
    if record[0] & env.FLAG_TOMBSTONE:
        raise StreamFormatError("stream counters are never a tombstone")
    counters_of(record)


class Totals(NamedTuple):
    epoch: tuple[int, int]
    added: int
    last: StreamId
    max_deleted: StreamId


def totals(records: Iterable[Counters], gen: int) -> Totals:
    """The counters of a stream whose head delete clock is ``gen``, from its live counter
    records (one per origin; live: newer than the delete clock). The records of
    generation ``gen`` in its greatest epoch give the counts; the last id is also at
    least every other live record's (a node that added entries concurrently with the DEL
    that started this generation, which it had not seen: its entries outlive the DEL, and
    the ids minted after must stay above them)."""
    records = list(records)
    cur = [c for c in records if c.gen == gen]
    others = max((c.last for c in records if c.gen != gen), default=(0, 0))
    if not cur:
        return Totals(NO_EPOCH, 0, others, (0, 0))
    epoch = max(c.epoch for c in cur)
    cur = [c for c in cur if c.epoch == epoch]
    return Totals(epoch, sum(c.added for c in cur), max(max(c.last for c in cur), others),
                  max(c.max_deleted for c in cur))


def bump(own: Counters | None, gen: int, epoch: tuple[int, int], added: int = 0,
         last: StreamId = (0, 0), deleted: StreamId = (0, 0)) -> Counters:
    """This node's counters after adding ``added`` entries up to ``last`` / deleting up to
    ``deleted``, under the stream's current ``gen`` and ``epoch`` (its record starts
    over if either is newer than the ones it counted under)."""
    if own is None or (own.gen, own.epoch) != (gen, epoch):
        own = Counters(gen, epoch)
    return own._replace(added=own.added + added, last=max(own.last, last),
                        max_deleted=max(own.max_deleted, deleted))
