"""A node of several shard workers as one replica (docs/shards.md §6; issue 33, slice 7).

Every worker of such a node serves the anti-entropy service on the node's gRPC port (the
kernel hands a call to any of them: ``SO_REUSEPORT``), and each holds the records and
the kept digest of its own partitions only. ``RoutedReplica`` is what the service of a
worker answers from: each call's partitions are split by the node's shard map, the
worker's own are answered by its ``LocalReplica``, the others by the sibling owning them,
and the parts are put back together in the caller's order (roots in partition order, the
records of every part, the push counts summed). A peer's background exchange, ``marekvs
repair``, the PySpark job and ``marekvs digest --nodes`` therefore see a multi-worker
node as they see one process: the same calls, the same replies.

How a part reaches its owner: over the sibling's own gRPC port (``replication/workers.py``:
each worker serves one beside the node's port and publishes it in
``data_dir/shards/<first>-<last>.grpc``), with the same service and messages, rather than
over the worker mesh (``server/mesh.py``). That is the simpler correct one: the calls,
their limits (message sizes, repair batches, the record checks), TLS, the cluster secret
and their refusals exist once, in ``service.py`` and ``remote.GrpcReplica``; the mesh would
need five new message kinds and their codecs, and would carry a Fetch's records through the
RESP workers' frames. The cost is the same one hop either way for a part on a sibling.
A call never loops: the part sent to a sibling holds only partitions that sibling owns,
which it answers from its own replica. A sibling that is down (its published port
refuses) fails the call with UNAVAILABLE naming it; nothing waits for its restart.

A push is checked whole (``replica.check_records``) before any part is sent: one bad record
refuses it everywhere, nothing written. Parts on different workers are not one atomic
write (a merge is idempotent: an exchange that fails half-way is finished by the next).
"""

from __future__ import annotations

import asyncio
from typing import Any, Callable

from marekvs.antientropy import plan as P
from marekvs.antientropy.remote import GrpcReplica, ReplicaError
from marekvs.antientropy.replica import (
    VERIFY_NONE,
    LocalReplica,
    Pushed,
    Roots,
    check_range,
    check_records,
    check_sets,
)
from marekvs.core import digest as D
from marekvs.core.partition import ShardMap

Ports = Callable[[], list[int]]  # every worker's own gRPC port, in worker order (0: none published yet)

_WILDCARDS = ("", "0.0.0.0", "::", "[::]")


class RoutedReplica:
    """Worker ``index`` of a node of ``shards`` workers, answering for the whole node (see
    the module docstring). ``ports()`` gives every worker's own gRPC port, in worker order."""

    def __init__(self, local: LocalReplica, shards: ShardMap, index: int, ports: Ports, config: Any):
        self.local = local
        self.shards = shards
        self.index = index
        self.ports = ports
        self.config = config
        self.address = local.address
        bind = config.bind
        self.host = "127.0.0.1" if bind in _WILDCARDS else bind
        self._siblings: dict[int, GrpcReplica] = {}  # worker -> a client of its own port

    async def close(self) -> None:
        for r in self._siblings.values():
            await r.close()
        self._siblings.clear()

    def _replica(self, j: int, ports: list[int]) -> Any:
        if j == self.index:
            return self.local
        addr = f"{self.host}:{ports[j]}"
        r = self._siblings.get(j)
        if r is None or r.address != addr:
            if r is not None:  # the sibling restarted on another port
                asyncio.get_running_loop().create_task(r.close())
            r = self._siblings[j] = GrpcReplica(addr, self.config, caller_id=self.config.node_id)
        return r

    def _split(self, pids: list[int]) -> dict[int, list[int]]:
        owner = self.shards.owner
        out: dict[int, list[int]] = {}
        for p in pids:
            out.setdefault(owner[p], []).append(p)
        return out

    # -- the Replica interface ------------------------------------------------------------
    async def roots(self, first: int, count: int, verify: int = VERIFY_NONE) -> Roots:
        check_range(first, count)
        ports = self.ports()
        parts = []
        for j, r in enumerate(self.shards.ranges):
            lo, hi = max(first, r.first), min(first + count - 1, r.last)
            if lo <= hi:
                parts.append((lo, self._replica(j, ports).roots(lo, hi - lo + 1, verify)))
        got = await asyncio.gather(*(c for _, c in parts))
        info = self.local.info()
        roots: list[int] = []
        out = Roots(info, roots)
        for r in got:  # (in partition order: the ranges are)
            if r.info.node_id != info.node_id:  # (a port a sibling left, taken since by another node)
                raise ReplicaError(f"a shard worker's port answered as node {r.info.node_id}")
            roots += r.roots
            out.wrong += r.wrong
            out.records_read += r.records_read
            info.now_ms = max(info.now_ms, r.info.now_ms)
        return out

    async def segments(self, pids: list[int]) -> dict[int, list[int]]:
        check_sets({p: [] for p in pids}, 0, "segment")
        ports = self.ports()
        by = self._split(pids)
        got = await asyncio.gather(*(self._replica(j, ports).segments(ps) for j, ps in by.items()))
        out: dict[int, list[int]] = {}
        for g in got:
            out.update(g)
        return {p: out[p] for p in pids}

    async def fine(self, sets: dict[int, list[int]], dry_run: bool = False) -> dict[int, dict[int, list[int]]]:
        check_sets(sets, D.SEGMENTS, "segment")
        ports = self.ports()
        by = self._split(list(sets))
        got = await asyncio.gather(*(self._replica(j, ports).fine({p: sets[p] for p in ps}, dry_run)
                                     for j, ps in by.items()))
        out: dict[int, dict[int, list[int]]] = {}
        for g in got:
            out.update(g)
        return {p: out[p] for p in sets}

    async def fetch(self, sets: dict[int, list[int]], dry_run: bool = False) -> list[P.Record]:
        check_sets(sets, D.FINE_SEGMENTS, "fine segment")
        ports = self.ports()
        by = self._split(list(sets))
        got = await asyncio.gather(*(self._replica(j, ports).fetch({p: sets[p] for p in ps}, dry_run)
                                     for j, ps in by.items()))
        return [r for g in got for r in g]

    async def push(self, records: list[P.Record]) -> Pushed:
        check_records(records)  # the whole push, before any part is written
        ports = self.ports()
        owner = self.shards.owner
        by: dict[int, list[P.Record]] = {}
        for k, v in records:
            by.setdefault(owner[D.partition_of_key(k)], []).append((k, v))
        got = await asyncio.gather(*(self._replica(j, ports).push(recs) for j, recs in by.items()))
        out = Pushed()
        for g in got:
            out.applied += g.applied
            out.unchanged += g.unchanged
            out.past_gc_grace += g.past_gc_grace
        return out
