"""The gRPC service of ``proto/antientropy_v1.proto``: this node's ``LocalReplica`` for
peers (the background exchange) and tools (``marekvs repair``, the PySpark job).

It runs on replication's gRPC server (same port, same TLS, the same cluster secret check:
``replication.peers.ClusterSecret`` refuses a call without it, UNAUTHENTICATED). Every call
must carry the caller's cluster name (else FAILED_PRECONDITION); arguments out of range,
and records that break the data model's rules, are refused with INVALID_ARGUMENT and a
message saying what is wrong, before anything is written. Each refusal is logged and
counted (INFO antientropy; the secret check counts its own, ``SERVICE`` names them).

On a shard worker it answers from a ``routed.RoutedReplica`` (the node's partitions, each
part from the worker owning it: docs/shards.md §6); a part whose worker cannot be reached
fails the call with UNAVAILABLE, naming the worker's address.
"""

from __future__ import annotations

import logging
from typing import Any

import grpc

from marekvs.antientropy.remote import ReplicaError
from marekvs.antientropy.replica import MAX_PUSH_RECORDS, BadRequest, Replica, ReplicaInfo
from marekvs.core import digest as D
from marekvs.replication.gen import antientropy_v1_pb2 as pb
from marekvs.replication.gen import antientropy_v1_pb2_grpc as pbg

log = logging.getLogger("marekvs.antientropy")

FETCH_CHUNK = 2000  # records per streamed chunk
SERVICE = pb.DESCRIPTOR.services_by_name["AntiEntropy"].full_name


def replica_message(info: ReplicaInfo) -> pb.Replica:
    return pb.Replica(node_id=info.node_id, digest_format=info.digest_format, partitions=info.partitions,
                      segments=info.segments, fine_segments=info.fine_segments, resp_addr=info.resp_addr,
                      now_ms=info.now_ms, gc_grace_s=info.gc_grace_s)


def sets_of(sets: Any) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for s in sets:
        out.setdefault(s.partition, []).extend(s.segments)
    return out


class AntiEntropyService(pbg.AntiEntropyServicer):
    def __init__(self, local: Replica, config: Any):
        self.local = local  # this node's replica (a ``LocalReplica``, or a shard worker's ``RoutedReplica``)
        self.config = config
        self.refused = 0
        self.calls = 0

    async def _admit(self, request: Any, context: grpc.aio.ServicerContext) -> None:
        name = request.caller.cluster_name
        if name != self.config.cluster_name:
            self.refused += 1
            log.error("refused an anti-entropy call from %s: cluster %r, not %r", context.peer(), name,
                      self.config.cluster_name)
            await context.abort(grpc.StatusCode.FAILED_PRECONDITION,
                                f"caller belongs to cluster {name!r}, not {self.config.cluster_name!r}")
        self.calls += 1

    async def _bad(self, e: Exception, what: str, context: grpc.aio.ServicerContext) -> None:
        self.refused += 1
        log.error("refused %s from %s: %s; nothing written", what, context.peer(), e)
        await context.abort(grpc.StatusCode.INVALID_ARGUMENT, str(e))

    async def _unreachable(self, e: ReplicaError, what: str, context: grpc.aio.ServicerContext) -> None:
        log.warning("%s from %s failed: a shard worker of this node: %s", what, context.peer(), e)
        await context.abort(grpc.StatusCode.UNAVAILABLE, f"a shard worker of this node: {e}")

    async def Roots(self, request: pb.RootsRequest, context: grpc.aio.ServicerContext) -> pb.RootsReply:
        await self._admit(request, context)
        try:
            r = await self.local.roots(request.first, request.count, int(request.verify))
        except BadRequest as e:
            await self._bad(e, "Roots", context)
        except ReplicaError as e:
            await self._unreachable(e, "Roots", context)
        if r.wrong:
            log.warning("kept digest of %d partitions differed from their data (records changed behind the "
                        "engine's back?)%s: %s", len(r.wrong),
                        ", corrected" if request.verify == pb.VERIFY_CORRECT else "", r.wrong[:20])
        return pb.RootsReply(replica=replica_message(r.info), first=request.first, roots=D.pack_u64s(r.roots),
                             wrong=r.wrong, records_read=r.records_read)

    async def Segments(self, request: pb.SegmentsRequest, context: grpc.aio.ServicerContext) -> pb.SegmentsReply:
        await self._admit(request, context)
        try:
            if len(request.partitions) > 4096:
                raise BadRequest(f"{len(request.partitions)} partitions in one call (at most 4096)")
            segs = await self.local.segments(list(request.partitions))
        except BadRequest as e:
            await self._bad(e, "Segments", context)
        except ReplicaError as e:
            await self._unreachable(e, "Segments", context)
        return pb.SegmentsReply(partitions=[pb.PartitionSegments(partition=p, segments=D.pack_u64s(s))
                                            for p, s in segs.items()])

    async def FineSegments(self, request: pb.FineRequest, context: grpc.aio.ServicerContext) -> pb.FineReply:
        await self._admit(request, context)
        try:
            sets = sets_of(request.sets)
            fine = await self.local.fine(sets, request.dry_run)
        except BadRequest as e:
            await self._bad(e, "FineSegments", context)
        except ReplicaError as e:
            await self._unreachable(e, "FineSegments", context)
        return pb.FineReply(partitions=[
            pb.PartitionFine(partition=p, segments=sets[p], fine=b"".join(D.pack_u64s(f[s]) for s in sets[p]))
            for p, f in fine.items()])

    async def Fetch(self, request: pb.FetchRequest, context: grpc.aio.ServicerContext):
        await self._admit(request, context)
        try:
            records = await self.local.fetch(sets_of(request.sets), request.dry_run)
        except BadRequest as e:
            await self._bad(e, "Fetch", context)
        except ReplicaError as e:
            await self._unreachable(e, "Fetch", context)
        for i in range(0, len(records), FETCH_CHUNK):
            yield pb.FetchChunk(records=[pb.Record(key=k, value=v) for k, v in records[i:i + FETCH_CHUNK]])

    async def Push(self, request: pb.PushRequest, context: grpc.aio.ServicerContext) -> pb.PushReply:
        await self._admit(request, context)
        try:
            if len(request.records) > MAX_PUSH_RECORDS:
                raise BadRequest(f"{len(request.records)} records in one push (at most {MAX_PUSH_RECORDS})")
            r = await self.local.push([(x.key, x.value) for x in request.records])
        except BadRequest as e:
            await self._bad(e, "a push", context)
        except ReplicaError as e:
            await self._unreachable(e, "a push", context)
        return pb.PushReply(applied=r.applied, unchanged=r.unchanged, past_gc_grace=r.past_gc_grace)
