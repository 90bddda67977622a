"""Bootstrap: pull a snapshot of every record from a peer, through the apply path.

A new node (fresh data directory) pulls a snapshot from every reachable peer before it
serves: all records, merged through the apply path, then the snapshot's log positions
(per origin and incarnation) become its high-water marks, in one batch after the last
record. A node that learns at Hello that a peer already trimmed entries it never applied
pulls a snapshot from that peer the same way (``task``), and so does a node that found
its data directory behind its peers (``manager.take_new_incarnation``). The snapshot is
"fuzzy" (the data range is read in chunks while writes go on): that is safe because
positions are taken first and every later record dominates the one it replaced.

Nodes of several shard workers (docs/shards.md §5): the puller asks the peer's map first
(Hello), then pulls from each of the peer's workers whose partitions meet its own (a shard
worker of this node pulls its own range only; a node of one worker pulls every worker of
the peer), each with the range they share, at that worker's own port. The positions: a
worker's own log (``<peer>:<its incarnation>``) holds its partitions only, so its position
is taken as sent; a third node's stream is covered by each worker for that worker's
partitions only, so its mark is the lowest any of them sent (none if one sent none: that
stream then ships again from our mark, or bootstraps again from its origin).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import grpc

from marekvs.core import envelope as env
from marekvs.core.partition import PartitionRange
from marekvs.replication.gen import replication_v1_pb2 as pb
from marekvs.replication.gen import replication_v1_pb2_grpc as pbg
from marekvs.replication.peers import PeerRefused
from marekvs.replication.validate import BadRecord, check_record
from marekvs.replication.workers import dial

if TYPE_CHECKING:
    from marekvs.replication.manager import ReplicationManager

log = logging.getLogger("marekvs.replication")


class Bootstrap:
    def __init__(self, m: ReplicationManager):
        self.m = m
        self.engine = m.engine
        self.hlc = m.hlc

    async def all(self) -> None:
        for p in list(self.m.peers.values()):
            try:
                n = await self.pull(p.node_id, p.grpc_addr, timeout=3.0)
                log.info("bootstrapped %d records from peer %d", n, p.node_id)
            except (grpc.aio.AioRpcError, PeerRefused, BadRecord) as e:
                log.warning("could not bootstrap from peer %d (%s): %s", p.node_id, p.grpc_addr, e)

    async def task(self, nid: int, addr: str) -> None:
        try:
            for attempt in range(30):
                try:
                    await self.pull(nid, addr)
                    return
                except (grpc.aio.AioRpcError, PeerRefused, BadRecord) as e:
                    log.warning("bootstrap from peer %d failed (%s); retrying", nid, e)
                    await asyncio.sleep(min(0.5 * (attempt + 1), 5))
        finally:
            self.m.bootstraps.pop(nid, None)

    async def pull(self, nid: int, addr: str, timeout: float | None = None) -> int:
        e = self.engine
        mine = e.partitions
        n = 0
        positions: dict[str, int] = {}
        epochs: dict[str, int] = {}
        channel = self.m.channel(addr)
        try:
            stub = pbg.ReplicationStub(channel)
            if timeout is not None:
                await asyncio.wait_for(channel.channel_ready(), timeout)
            reply = await stub.Hello(self.m.hello_request(), metadata=self.m.md, timeout=5)
            self.m.check_peer_info(reply.node, nid)
            shards = list(reply.shards)  # (none: a peer of one worker)
            if not shards:
                n, positions, epochs = await self._pull_one(stub, nid, mine)
            else:
                n, positions, epochs = await self._pull_workers(nid, addr, shards, mine)
        except asyncio.TimeoutError:
            raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                       details=f"peer {nid} at {addr} not reachable") from None
        finally:
            await channel.close(grace=None)
        for key, seq in positions.items():
            origin, inc = (int(x) for x in key.split(":"))
            if origin == self.m.node_id:
                continue  # our own log: peers keep their marks of it
            if self.m.hwm(origin, inc) < seq:
                self.m.put_hwm(origin, inc, seq, epochs.get(key, 0))
        e.commit()
        self.m.bootstrapped_from.append(nid)
        return n

    async def _pull_workers(self, nid: int, addr: str, shards: list[pb.Shard],
                            mine: PartitionRange) -> tuple[int, dict[str, int], dict[str, int]]:
        """Pull ``mine`` from the workers of peer ``nid`` (its map ``shards``): the records,
        and the positions merged (the module docstring)."""
        n = 0
        positions: dict[str, int] = {}
        epochs: dict[str, int] = {}
        seen: dict[str, int] = {}
        pulled = 0
        for sh in shards:
            first, last = max(sh.first, mine.first), min(sh.last, mine.last)
            if first > last:
                continue
            worker = dial(addr, sh)
            if worker is None:
                raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(), grpc.aio.Metadata(),
                                           details=f"peer {nid}'s worker of partitions {sh.first}-{sh.last} "
                                                   "has no port yet")
            channel = self.m.channel(worker)
            try:
                got, pos, eps = await self._pull_one(pbg.ReplicationStub(channel), nid, PartitionRange(first, last))
            finally:
                await channel.close(grace=None)
            n += got
            pulled += 1
            own = f"{nid}:{sh.incarnation}"
            for key, seq in pos.items():
                if key == own:
                    positions[key], epochs[key] = seq, eps.get(key, 0)
                    continue
                seen[key] = seen.get(key, 0) + 1
                if key not in positions or seq < positions[key]:
                    positions[key], epochs[key] = seq, eps.get(key, 0)
        for key, count in seen.items():
            if count < pulled:  # a worker sent no mark of it: what it holds of it is unknown
                del positions[key]
        return n, positions, epochs

    async def _pull_one(self, stub: pbg.ReplicationStub, nid: int,
                        r: PartitionRange) -> tuple[int, dict[str, int], dict[str, int]]:
        """Pull the records of partitions ``r`` (all: an unranged request) from one
        process; (records, positions, their epochs)."""
        e = self.engine
        n = 0
        positions: dict[str, int] = {}
        epochs: dict[str, int] = {}
        lo, hi = r.start_key, r.end_key
        req = pb.SnapshotRequest(node=self.m.info())
        if not r.whole:
            req = pb.SnapshotRequest(node=self.m.info(), ranged=True, first=r.first, last=r.last)
        async for chunk in stub.Snapshot(req, metadata=self.m.md):
            if chunk.positions:
                positions = dict(chunk.positions)
                epochs = dict(chunk.position_epochs)
            recs = [(x.key, x.value) for x in chunk.records]
            if not r.whole:  # (a peer that predates ranges sends every record)
                recs = [(k, v) for k, v in recs if lo <= k < hi]
            for k, v in recs:
                check_record(k, v)
            top = max((int.from_bytes(v[env.HLC], "big") for _, v in recs), default=0)
            if top:
                self.hlc.update(top)
            e.apply(recs, log_entry=False)
            e.commit()
            self.m.node_records_of(recs)
            n += len(recs)
            if chunk.last:
                break
        return n, positions, epochs
