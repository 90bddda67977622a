"""What differs between replicas and what each one lacks (pure: no I/O, no RocksDB).

The drill-down: partitions whose roots differ, then their kept segments that differ, then
the fine segments under those, then the records of the differing fine segments. For every
internal key seen there, ``plan_records`` joins the replicas' records with the data model's
merge (``core.merge``, the same lattices as the apply path) and sends the joined record to
each replica whose record differs from it. A replica then merges it through its own apply
path, so a repair can only move a record up its lattice: never a blind overwrite, never a
lost write, whatever else is being written meanwhile.

Records younger than ``settle_ms`` are left alone (counted ``in_flight``): a write that
log shipping is still carrying shows up as a difference for a moment, and repairing it
would only duplicate the shipping.

gc_grace. A record past gc_grace (a tombstone older than the horizon, an expired record
whose deadline + gc_grace passed, an element its head's delete clock gated before the
horizon: ``core.sweep``'s rules) may be gone from one replica, swept, and still be held by
another whose sweeper has not come by yet. Repair must neither push it back (the receiver
would sweep it again: a tombstone going back and forth) nor push a record it gates
without the record that gates it (that would revive a deleted element). So:

- a replica never sends such a record: reading a partition for the exchange, it removes
  them there and then, as its sweeper would (``removable``);
- a replica never stores one it is sent: it joins the records it is sent with its own,
  runs the sweep rules over the result, and drops what they would remove
  (``past_gc_grace``); it also drops a collection element older than the horizon whose
  collection has no head there or in the push (its head was swept: a head never goes
  while its collection lives, and a live head younger than the horizon cannot be missing
  from both). Repair batches never split a partition unless it alone exceeds a batch, so
  a head travels with its elements (``batches``).

Both sides use their own clock; a record that is removable on the receiver's clock is
dropped there even if the sender's clock had it a moment short of the horizon. What no
exchange can tell apart is a record one replica never had from one whose tombstone it
swept: a replica that missed a DEL for longer than gc_grace and still holds the old value
would have it pushed back to the others. That is gc_grace's contract, as in Cassandra:
repair (the background exchange does it continuously) must run within gc_grace.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from marekvs.core import keys as K
from marekvs.core import merge as _merge
from marekvs.core.registry import BY_CODE
from marekvs.core.sweep import PartitionSweep, horizon

NodeId = int
Record = tuple[bytes, bytes]


def mismatched(hashes: Mapping[NodeId, list[int]]) -> list[int]:
    """Positions (partitions, segments, fine segments) where the replicas' hashes differ."""
    lists = list(hashes.values())
    if len(lists) < 2:
        return []
    return [i for i, vals in enumerate(zip(*lists)) if len(set(vals)) > 1]


def hlc_ms(record: bytes) -> int:
    return int.from_bytes(record[1:9], "big") >> 16


@dataclass
class Plan:
    """The outcome of joining the records of the differing segments of several replicas."""

    pushes: dict[NodeId, list[Record]] = field(default_factory=dict)  # what each replica lacks
    keys: int = 0  # internal keys seen in the differing segments
    differing: int = 0  # ... whose records were not equal on every replica
    only_on: dict[NodeId, int] = field(default_factory=dict)  # ... held by that replica alone
    in_flight: int = 0  # ... left to log shipping (younger than settle)


def plan_records(records: Mapping[NodeId, Mapping[bytes, bytes]], now_ms: int, settle_ms: int = 0) -> Plan:
    """Join the records each replica holds in the compared segments; say what each lacks.

    ``records[node]`` maps internal key -> stored record for one replica (every record it
    holds in the compared segments). The join of a key's records is its merge; a replica
    whose record is not the join (or that has none) is sent the join."""
    nodes = list(records)
    plan = Plan(pushes={n: [] for n in nodes}, only_on={n: 0 for n in nodes})
    merge = _merge.merge
    keys: set[bytes] = set()
    for recs in records.values():
        keys.update(recs)
    plan.keys = len(keys)
    horizon = now_ms - settle_ms
    for k in sorted(keys):
        have = [records[n].get(k) for n in nodes]
        present = [v for v in have if v is not None]
        first = present[0]
        if len(present) == len(nodes) and all(v == first for v in present):
            continue
        plan.differing += 1
        if len(present) == 1:
            plan.only_on[nodes[have.index(first)]] += 1
        joined = first
        for v in present[1:]:
            joined = merge(k, joined, v)
        if settle_ms and hlc_ms(joined) > horizon:
            plan.in_flight += 1
            continue
        for n, v in zip(nodes, have):
            if v != joined:
                plan.pushes[n].append((k, joined))
    return plan


def removable(records: Iterable[Record], now_ms: int, grace_ms: int) -> set[bytes]:
    """The internal keys of one partition's records (any order) that the sweep rules would
    remove now: what a replica must neither send nor store."""
    sweep = PartitionSweep(now_ms, grace_ms)
    for k, v in sorted(records):
        sweep.feed(k, v)
    return set(sweep.finish())


def refused(local: Mapping[bytes, bytes], incoming: list[Record], now_ms: int, grace_ms: int) -> set[bytes]:
    """The internal keys among ``incoming`` (records sent to a replica, all of one
    partition) that the replica must not store: those the sweep rules would remove from
    the partition joined with them, and elements older than the horizon whose collection
    has no head (see the module docstring)."""
    view = joined_view(local, incoming)
    out = removable(view.items(), now_ms, grace_ms) & {k for k, _ in incoming}
    h = horizon(now_ms, grace_ms)
    for k, v in incoming:
        kind = BY_CODE[k[2]]
        if kind is None or kind.is_key or kind.is_node or k in out or int.from_bytes(v[1:9], "big") >= h:
            continue
        try:
            head_key = K.encode_head_key(kind.user_key(k))
        except ValueError:
            continue
        if head_key not in view:
            out.add(k)
    return out


def joined_view(local: Mapping[bytes, bytes], incoming: Iterable[Record]) -> dict[bytes, bytes]:
    """One partition as it would be after merging ``incoming`` into ``local``."""
    view = dict(local)
    merge = _merge.merge
    for k, v in incoming:
        cur = view.get(k)
        view[k] = v if cur is None else merge(k, cur, v)
    return view


def batches(records: list[Record], max_records: int, max_bytes: int) -> list[list[Record]]:
    """``records`` (in key order) cut into repair batches of at most ``max_records``
    records and ``max_bytes`` bytes, between partitions: a partition larger than that
    alone is cut into pieces of that size (keeping a collection's head with its elements
    is then up to the receiver's rule on headless elements)."""
    out: list[list[Record]] = []
    cur: list[Record] = []
    size = 0
    for part in _by_partition(records):
        n = sum(len(k) + len(v) for k, v in part)
        if cur and (len(cur) + len(part) > max_records or size + n > max_bytes):
            out.append(cur)
            cur, size = [], 0
        if len(part) > max_records or n > max_bytes:
            for r in part:
                rn = len(r[0]) + len(r[1])
                if cur and (len(cur) >= max_records or size + rn > max_bytes):
                    out.append(cur)
                    cur, size = [], 0
                cur.append(r)
                size += rn
            continue
        cur += part
        size += n
    if cur:
        out.append(cur)
    return out


def _by_partition(records: list[Record]) -> list[list[Record]]:
    parts: list[list[Record]] = []
    pid = None
    for r in records:
        p = r[0][:2]
        if p != pid:
            parts.append([])
            pid = p
        parts[-1].append(r)
    return parts
