"""Kafka offsets of stream entries: ``offset = ms << 20 | counter``.

A marekvs stream id is ``(ms, origin << 20 | counter)`` (docs/streams.md): the node that
minted it in its upper bits, a 20-bit counter below. A Kafka offset is a signed 64-bit
number, too small for the whole id; this gateway drops the origin and keeps

    offset = ms << 20 | (seq & 0xFFFFF)        (20 bits: the topic hash's offsetSequenceBits)

which leaves 43 bits of milliseconds (until the year 2248). Dropping the origin is exact
because of how the gateway mints ids (``mint``): a produced batch of n records gets n
consecutive counters in a *lane* of the node's own, ``LANE_BASE + (node % LANES) * LANE``
and up, in a millisecond where this node has nothing else, so

- the offsets of one batch are consecutive (producers compute each record's offset as the
  batch's base offset plus its index, as Kafka assigns them);
- two nodes never mint the same offset (their lanes differ, for up to ``LANES`` nodes with
  distinct ids modulo ``LANES``), not after a failover nor while two nodes both believe they
  lead a partition; and entries added with ``XADD *`` by Redis clients, whose counters
  start at 0 in each millisecond, stay below every lane (``LANE_BASE``);
- within one millisecond the Kafka order is the counter order (``sort_ms``), which is the
  id order except for entries of different origins in the same millisecond.

An offset maps back to its entry exactly: the entries of millisecond ``offset >> 20`` whose
counter is ``offset & 0xFFFFF``. Should two entries ever share one (two Redis writers on two
nodes in the same millisecond; nodes whose ids are equal modulo ``LANES``), the Kafka view
keeps the one with the smaller id and skips the other (``sort_ms``).
"""

from __future__ import annotations

from typing import Iterable, TypeVar

SEQ_BITS = 20
COUNTER_MAX = (1 << SEQ_BITS) - 1
LANES = 8
LANE = 1 << 16  # records one produce request may add to one partition (the lane's width)
LANE_BASE = 1 << 19
MAX_MS = (1 << (63 - SEQ_BITS)) - 1

StreamId = tuple[int, int]
T = TypeVar("T")


def of_id(sid: StreamId) -> int:
    """The offset of the entry ``sid``."""
    return sid[0] << SEQ_BITS | (sid[1] & COUNTER_MAX)


def first_id(offset: int) -> StreamId:
    """Where a read from ``offset`` starts: the first id of its millisecond (every origin's
    entries of that millisecond sort by counter, ``sort_ms``)."""
    return (offset >> SEQ_BITS, 0)


def lane(node_id: int) -> tuple[int, int]:
    """The first and last counter of node ``node_id``'s lane."""
    lo = LANE_BASE + (node_id % LANES) * LANE
    return lo, lo + LANE - 1


def mint(top: StreamId, now_ms: int, node_id: int, n: int) -> StreamId:
    """The id of the first of ``n`` records this node adds to a stream whose last id is
    ``top`` (``Stream.last_id``; the others follow with consecutive counters): the next counters of
    the node's own run in ``top``'s millisecond when ``top`` is its own lane's and it has
    room, else the lane's start in a millisecond above ``top`` (the clock's, if later).
    The id is above ``top``, so XADD accepts it."""
    lo, hi = lane(node_id)
    if n > LANE:
        raise ValueError(f"at most {LANE} records per partition in one request")
    ms, seq = top
    counter = seq & COUNTER_MAX
    if ms >= now_ms and seq >> SEQ_BITS == node_id and lo <= counter and counter + n <= hi:
        return ms, (node_id << SEQ_BITS) | (counter + 1)
    ms = max(now_ms, ms + 1)
    if ms > MAX_MS:
        raise ValueError("stream ids beyond the year 2248 have no Kafka offset")
    return ms, (node_id << SEQ_BITS) | lo


def sort_ms(entries: Iterable[tuple[StreamId, T]]) -> list[tuple[int, StreamId, T]]:
    """Entries in id order -> (offset, id, value) in offset order, one per offset: within a
    millisecond entries of several origins are ordered by counter, and of two with one
    counter the smaller id stays."""
    out: list[tuple[int, StreamId, T]] = []
    group_ms = -1
    mixed = False
    start = 0
    for sid, v in entries:
        if sid[0] != group_ms:
            if mixed:
                out[start:] = _dedupe(sorted(out[start:], key=lambda e: (e[0], e[1])))
            group_ms, start, mixed = sid[0], len(out), False
        elif out and (out[-1][1][1] >> SEQ_BITS) != (sid[1] >> SEQ_BITS):
            mixed = True
        out.append((of_id(sid), sid, v))
    if mixed:
        out[start:] = _dedupe(sorted(out[start:], key=lambda e: (e[0], e[1])))
    return out


def _dedupe(group: list[tuple[int, StreamId, T]]) -> list[tuple[int, StreamId, T]]:
    kept: list[tuple[int, StreamId, T]] = []
    for e in group:
        if not kept or kept[-1][0] != e[0]:
            kept.append(e)
    return kept
