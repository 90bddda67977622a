"""Receiving: the gRPC service peers call (Hello, Ship, Snapshot).

Every call has passed the cluster secret check (``peers.ClusterSecret``, the server's
interceptor) before it gets here; Hello and Snapshot carry the caller's NodeInfo, refused
if it is not a member of this cluster (``_admit``). A Ship batch is validated record by
record (``validate.check_flat``): one bad record refuses the whole batch, logged, nothing
written. Entries at or below the high-water mark are skipped (counted: at-least-once
re-delivery); the rest go through the SAME ``Engine.apply`` as local commands (read
current, merge, write if changed), and the new high-water mark (with the epoch of the
batch's last entry) is written into the same WriteBatch as the records; only then is the
ack sent. The HLC takes the receive rule once per batch with the batch's highest stamp
(clamped and logged if more than max_clock_drift ahead). A Snapshot streams every record
in chunks, with the log positions it covers (``bootstrap.py`` pulls it).

On a shard worker (docs/shards.md §5) Hello also names the node's workers (its shard map,
``workers.py``); a peer then ships each worker its part of every entry on the worker's own
port, and a batch holding a record of another worker's partitions is refused. A peer of
several workers calls with one incarnation per worker (each worker's log is a stream of
its own): every one of its map is the peer, none a rival. A Snapshot may ask for a range
of partitions (what a worker bootstraps), and streams only those records.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any

import grpc

from marekvs.core import envelope as env
from marekvs.core.partition import PARTITIONS, PartitionRange
from marekvs.replication.codec import unpack_entries
from marekvs.replication.gen import replication_v1_pb2 as pb
from marekvs.replication.gen import replication_v1_pb2_grpc as pbg
from marekvs.replication.peers import PeerRefused
from marekvs.replication.validate import BadRecord
from marekvs.storage.engine import StorageWriteError

if TYPE_CHECKING:
    from marekvs.replication.manager import ReplicationManager

log = logging.getLogger("marekvs.replication")

SNAPSHOT_CHUNK = 2000
_HLC = env.HLC


class Receiver(pbg.ReplicationServicer):
    def __init__(self, m: ReplicationManager):
        self.m = m
        self.engine = m.engine
        self.hlc = m.hlc
        self.config = m.config
        self.refused_batches = 0

    async def _admit(self, node: pb.NodeInfo, what: str, context: grpc.aio.ServicerContext) -> None:
        """Refuse (FAILED_PRECONDITION, logged) a caller that is not a member of this
        cluster, or that claims the id of another live member."""
        try:
            self.m.check_peer_info(node)
            known = self.m.peers.get(node.node_id)
            if (known is not None and known.state == "streaming" and known.incarnation
                    and node.incarnation != known.incarnation and node.incarnation not in known.incarnations
                    and node.grpc_addr != known.grpc_addr):
                # Another data directory, at another address, claims the id of a peer
                # that is alive and streaming: two nodes share one id. (A node that lost
                # its data comes back at its own address, and its old self is gone.) Or
                # the peer itself, restored from an older copy, took a new incarnation
                # after our sender's handshake, and calls from its own address while we
                # reach it through another (a proxy, NAT, a DNS name): our sender shakes
                # hands again to learn which, and the caller's next try passes if it is.
                self.m.recheck_peer(known)
                raise PeerRefused(f"node id {node.node_id} is already in use by the live node at "
                                  f"{known.grpc_addr}; refusing {node.grpc_addr}")
        except PeerRefused as e:
            log.error("refused %s from %s: %s", what, context.peer(), e)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION, str(e))

    async def Hello(self, request: pb.HelloRequest, context: grpc.aio.ServicerContext) -> pb.HelloReply:
        node = request.node
        await self._admit(node, "Hello", context)
        known = self.m.peers.get(node.node_id)
        if known is None:
            # A node we never heard of joins: reach it at the address it advertises.
            # A known peer keeps the address it was configured (or first seen) with,
            # so proxies, NAT and DNS names stay in the path and a Hello cannot
            # re-point an existing peer.
            if not node.grpc_addr:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, "Hello without a grpc_addr")
            log.info("peer %d at %s joined", node.node_id, node.grpc_addr)
            p = self.m.add_peer(node.node_id, node.grpc_addr)
            self.engine.commit()
            self.m.start_sender(p)
        known = self.m.peers[node.node_id]  # (the Kafka gateway's catch-up)
        known.hellos[node.incarnation] = request.log_last
        hwm, epoch = self.m.hwm_of(node.node_id, node.incarnation)
        mine = self.engine.partitions
        if (hwm + 1 < request.log_first and request.ranged
                and (request.last < mine.first or request.first > mine.last)):
            # The caller is a shard worker whose partitions are none of ours: the entries
            # it trimmed held nothing for us but their positions (docs/shards.md §5), so
            # there is nothing to bootstrap: take the mark past them. (Bootstrapping
            # would pull our range from the workers that hold it, which never give a
            # position of this caller's log: the link would stay behind for good.)
            hwm, epoch = request.log_first - 1, 0
            self.m.put_hwm(node.node_id, node.incarnation, hwm, epoch)
            self.engine.commit()
            log.info("peer %d's log (incarnation %d, partitions %d-%d, none of ours) was trimmed past our "
                     "mark: nothing of ours was in it, taking the mark to %d", node.node_id, node.incarnation,
                     request.first, request.last, hwm)
        if hwm > request.log_last:
            log.warning("peer %d's log ends at %d but this node applied %d of it: the peer will take a new "
                        "incarnation", node.node_id, request.log_last, hwm)
        elif hwm + 1 < request.log_first and node.node_id not in self.m.bootstraps:
            log.warning("peer %d trimmed log entries %d..%d this node never applied: bootstrapping from it",
                        node.node_id, hwm + 1, request.log_first - 1)
            self.m.bootstraps[node.node_id] = asyncio.get_running_loop().create_task(
                self.m.bootstrap.task(node.node_id, node.grpc_addr))
        return pb.HelloReply(node=self.m.info(), applied_seq=hwm, applied_epoch=epoch, shards=self.m.shard_map())

    def _check_range(self, entries: list) -> None:
        """A shard worker takes records of its own partitions only."""
        r = self.engine.partitions
        lo, hi = r.start_key, r.end_key
        for seq, recs in entries:
            for k, _ in recs:
                if not lo <= k < hi:
                    raise BadRecord(f"entry {seq} holds a record of partition {int.from_bytes(k[:2], 'big')}, "
                                    f"not of this shard worker's partitions {r}")

    async def Ship(self, request_iterator: Any, context: grpc.aio.ServicerContext):
        whole = self.engine.partitions.whole
        async for batch in request_iterator:
            if self.engine.write_error is not None:  # nothing applied could be acknowledged
                await context.abort(grpc.StatusCode.UNAVAILABLE,
                                    f"this node cannot write its storage: {self.engine.write_error}")
            origin = batch.origin
            if origin == self.m.node_id or origin not in self.m.peers:
                log.error("refused a batch from unknown origin %d (%s)", origin, context.peer())
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"origin {origin} is not a known peer")
            try:
                entries = unpack_entries(batch.entries)
                if not whole:
                    self._check_range(entries)
                hwm = self.m.hwm(origin, batch.incarnation)
                if entries and entries[0][0] > hwm + 1:
                    raise BadRecord(f"batch starts at {entries[0][0]} but {hwm} is applied: a gap")
            except BadRecord as e:
                self.refused_batches += 1
                log.error("refused a batch from node %d: %s; nothing written", origin, e)
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"bad record: {e}")
            yield pb.Ack(applied_seq=self._apply_batch(origin, batch.incarnation, entries, len(batch.entries),
                                                       batch.last_epoch))

    def _apply_batch(self, origin: int, incarnation: int, entries: list, nbytes: int, last_epoch: int) -> int:
        e = self.engine
        hwm, epoch = self.m.hwm_of(origin, incarnation)
        top = b""  # the highest HLC of the batch, as 8 big-endian bytes (they order alike)
        p = self.m.peers[origin]
        share = self.m.on_node_records is not None
        for seq, recs in entries:
            if seq <= hwm:
                p.skipped_entries += 1  # at-least-once: already applied
                continue
            for _, v in recs:
                h = v[_HLC]
                if h > top:
                    top = h
            e.apply(recs, log_entry=False)
            if share:
                self.m.node_records_of(recs)
            hwm = seq
            p.applied_entries += 1
        if top:
            self.hlc.update(int.from_bytes(top, "big"))
        if entries and entries[-1][0] == hwm:
            epoch = last_epoch  # (otherwise the whole batch was at or below the mark)
        self.m.put_hwm(origin, incarnation, hwm, epoch)
        e.commit()
        p.applied_seq = hwm
        p.applied_bytes += nbytes
        return hwm

    async def Snapshot(self, request: pb.SnapshotRequest, context: grpc.aio.ServicerContext):
        await self._admit(request.node, "Snapshot", context)
        e = self.engine
        try:
            e.commit()
        except StorageWriteError:
            pass  # (the snapshot is of the committed records anyway)
        own = f"{self.m.node_id}:{self.m.incarnation}"
        positions = {own: e.log_seq}
        epochs = {own: e.log.epoch_of(e.log_seq) or 0}
        for k, v in e.meta_items(b"hwm:"):
            seq, _, epoch = v.partition(b":")
            positions[k[4:].decode()] = int(seq)
            epochs[k[4:].decode()] = int(epoch or 0)
        start, end = b"", None
        if request.ranged:
            if not request.first <= request.last < PARTITIONS:
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT,
                                    f"no partitions {request.first}-{request.last}")
            r = PartitionRange(request.first, request.last)
            start, end = r.start_key, r.end_key
        log.info("streaming a snapshot%s to node %d", f" of partitions {request.first}-{request.last}"
                 if request.ranged else "", request.node.node_id)
        first = True
        while True:
            chunk = []
            for k, v in e.scan_committed(start, end):
                chunk.append(pb.Record(key=k, value=v))
                if len(chunk) >= SNAPSHOT_CHUNK:
                    break
            done = len(chunk) < SNAPSHOT_CHUNK
            yield pb.SnapshotChunk(records=chunk, positions=positions if first else {},
                                   position_epochs=epochs if first else {}, last=done)
            first = False
            if done:
                return
            start = chunk[-1].key + b"\x00"
            await asyncio.sleep(0)
