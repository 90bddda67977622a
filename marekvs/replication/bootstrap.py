"""Bootstrap: pull a snapshot of every record from a peer, through the apply path.

A new node (fresh data directory) pulls a snapshot from every reachable peer before it
serves: all records, merged through the apply path, then the snapshot's log positions
(per origin and incarnation) become its high-water marks, in one batch after the last
record. A node that learns at Hello that a peer already trimmed entries it never applied
pulls a snapshot from that peer the same way (``task``), and so does a node that found
its data directory behind its peers (``manager.take_new_incarnation``). The snapshot is
"fuzzy" (the data range is read in chunks while writes go on): that is safe because
positions are taken first and every later record dominates the one it replaced.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING

import grpc

from marekvs.core import envelope as env
from marekvs.replication.gen import replication_v1_pb2 as pb
from marekvs.replication.gen import replication_v1_pb2_grpc as pbg
from marekvs.replication.peers import PeerRefused
from marekvs.replication.validate import BadRecord, check_record

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
        n = 0
        positions: dict[str, int] = {}
        epochs: dict[str, int] = {}
        channel = self.m.channel(addr)
        try:
            stub = pbg.ReplicationStub(channel)
            if timeout is not None:
                await asyncio.wait_for(channel.channel_ready(), timeout)
            async for chunk in stub.Snapshot(pb.SnapshotRequest(node=self.m.info()), metadata=self.m.md):
                if chunk.positions:
                    positions = dict(chunk.positions)
                    epochs = dict(chunk.position_epochs)
                recs = [(r.key, r.value) for r in chunk.records]
                for k, v in recs:
                    check_record(k, v)
                top = max((int.from_bytes(v[env.HLC], "big") for _, v in recs), default=0)
                if top:
                    self.hlc.update(top)
                e.apply(recs, log_entry=False)
                e.commit()
                n += len(recs)
                if chunk.last:
                    break
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
