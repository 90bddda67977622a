"""List elements (tag b'q'): per-position LWW registers.

A list is a collection head plus one record per position. The position is a u64 whose
big-endian key suffix makes memcmp order list order. The first element lands at
``keys.LIST_CENTER = 1 << 63``; LPUSH allocates ``head - 1`` and RPUSH ``tail + 1``,
leaving ~2**63 positions of headroom on each side, so pushes and pops at the ends are
O(1) point writes.

Each element record is a plain LWW register (Shapiro et al., "A comprehensive study of
Convergent and Commutative Replicated Data Types", INRIA RR-7506, 2011): envelope
record type LIST, payload = the raw value bytes (no format byte: the spec fixes it),
merge = ``lww.merge``. LPOP/RPOP write an LWW tombstone at the popped position, LSET
overwrites one position. TTL and DEL ride the head, like every collection.

Interior ops (LINSERT / LREM / LTRIM) cannot open room between adjacent integer
positions, so they *rebuild*: ``rebuild`` lays the new sequence out compacted from
``LIST_CENTER`` and returns the writes and tombstones that turn the old positions into
it (O(n), and rare).

Concurrency (documented, bounded loss): two nodes pushing at the same end concurrently
can allocate the same position; the records merge LWW and one of those pushed elements
is lost, only that colliding element. Single-node order is exact (shard serialization);
cross-node order of concurrent writers is best effort.
"""

from __future__ import annotations

from collections.abc import Sequence

from marekvs.core import lww
from marekvs.core.envelope import RecordType
from marekvs.core.keys import LIST_CENTER

POS_MAX = (1 << 64) - 1

merge = lww.merge
value = lww.value
to_bytes = lww.to_bytes
from_bytes = lww.from_bytes


def new(value_: bytes, hlc: int, origin: int) -> bytes:
    return lww.new(RecordType.LIST, hlc, origin, value_)


def tombstone(hlc: int, origin: int) -> bytes:
    return lww.tombstone(RecordType.LIST, hlc, origin)


def lpush_pos(head_pos: int | None) -> int:
    """Position for LPUSH given the current first position (None: empty list)."""
    if head_pos is None:
        return LIST_CENTER
    if head_pos == 0:
        raise OverflowError("list position space exhausted at the head")
    return head_pos - 1


def rpush_pos(tail_pos: int | None) -> int:
    """Position for RPUSH given the current last position (None: empty list)."""
    if tail_pos is None:
        return LIST_CENTER
    if tail_pos == POS_MAX:
        raise OverflowError("list position space exhausted at the tail")
    return tail_pos + 1


def compact_positions(n: int) -> range:
    """Positions of an n-element list laid out from LIST_CENTER."""
    return range(LIST_CENTER, LIST_CENTER + n)


def rebuild(old: Sequence[tuple[int, bytes]], values: Sequence[bytes]
            ) -> tuple[list[tuple[int, bytes]], list[int]]:
    """Rewrite a list as ``values`` compacted from LIST_CENTER.

    ``old`` is the live (position, value) sequence. Returns ``(writes, deletes)``:
    positions to (re)write with a value, skipping those that already hold it, and old
    positions the new layout does not use, to tombstone."""
    current = dict(old)
    writes = [(p, v) for p, v in zip(compact_positions(len(values)), values, strict=True)
              if current.get(p) != v]
    used = compact_positions(len(values))
    deletes = [p for p, _ in old if p not in used]
    return writes, deletes
