"""A replica reached over gRPC (``proto/antientropy_v1.proto``): a peer of the background
exchange, or every node of ``marekvs repair`` and of the PySpark job's tasks.

The channel is replication's (``replication.peers.channel``: TLS when a certificate or a
CA is configured, the same message size limits); every call carries the cluster secret in
its metadata and the caller's cluster name. Calls that fail raise ``ReplicaError`` naming
the replica and the status.
"""

from __future__ import annotations

from typing import Any

import grpc

from marekvs.antientropy.plan import Record
from marekvs.antientropy.replica import Pushed, ReplicaInfo, Roots
from marekvs.config import Config
from marekvs.core import digest as D
from marekvs.replication import peers
from marekvs.replication.gen import antientropy_v1_pb2 as pb
from marekvs.replication.gen import antientropy_v1_pb2_grpc as pbg

TIMEOUT = 120.0  # seconds for one call (a verifying Roots reads whole partitions)


class ReplicaError(RuntimeError):
    """A call to a replica failed (unreachable, refused, timed out)."""


def tls_config(secret: str = "", cluster_name: str = "marekvs", tls_cert: str = "", tls_key: str = "",
               tls_ca: str = "", tls_server_name: str = "") -> Config:
    """The part of a node's configuration a client needs (``peers.channel`` reads it)."""
    return Config(cluster_secret=secret, cluster_name=cluster_name, tls_cert=tls_cert, tls_key=tls_key,
                  tls_ca=tls_ca, tls_server_name=tls_server_name)


def info_of(m: pb.Replica) -> ReplicaInfo:
    return ReplicaInfo(m.node_id, m.digest_format, m.partitions, m.segments, m.fine_segments, m.resp_addr,
                       m.now_ms, m.gc_grace_s)


class GrpcReplica:
    def __init__(self, address: str, config: Config, caller_id: int = 0, channel: grpc.aio.Channel | None = None):
        self.address = address
        self.config = config
        self._own_channel = channel is None
        self.channel = channel if channel is not None else peers.channel(config, address)
        self.stub = pbg.AntiEntropyStub(self.channel)
        self.md = ((peers.SECRET_HEADER, config.cluster_secret),)
        self.caller = pb.Caller(cluster_name=config.cluster_name, node_id=caller_id)
        self.node_id = 0  # learnt from the first Roots reply

    async def close(self) -> None:
        if self._own_channel:
            await self.channel.close(grace=None)

    async def _call(self, what: str, fn: Any, request: Any) -> Any:
        try:
            return await fn(request, metadata=self.md, timeout=TIMEOUT)
        except grpc.aio.AioRpcError as e:
            raise ReplicaError(f"{what} at {self.address}: {e.code().name}: {e.details()}") from None

    async def roots(self, first: int, count: int, verify: int = 0) -> Roots:
        r = await self._call("Roots", self.stub.Roots,
                             pb.RootsRequest(caller=self.caller, first=first, count=count, verify=verify))
        info = info_of(r.replica)
        self.node_id = info.node_id
        return Roots(info, D.unpack_u64s(r.roots, count), list(r.wrong), r.records_read)

    async def segments(self, pids: list[int]) -> dict[int, list[int]]:
        r = await self._call("Segments", self.stub.Segments, pb.SegmentsRequest(caller=self.caller, partitions=pids))
        return {p.partition: D.unpack_u64s(p.segments, D.SEGMENTS) for p in r.partitions}

    async def fine(self, sets: dict[int, list[int]], dry_run: bool = False) -> dict[int, dict[int, list[int]]]:
        req = pb.FineRequest(caller=self.caller, dry_run=dry_run,
                             sets=[pb.SegmentSet(partition=p, segments=s) for p, s in sets.items()])
        r = await self._call("FineSegments", self.stub.FineSegments, req)
        out: dict[int, dict[int, list[int]]] = {}
        per = D.FINE_PER_SEGMENT
        for p in r.partitions:
            fine = D.unpack_u64s(p.fine, per * len(p.segments))
            out[p.partition] = {s: fine[i * per:(i + 1) * per] for i, s in enumerate(p.segments)}
        return out

    async def fetch(self, sets: dict[int, list[int]], dry_run: bool = False) -> list[Record]:
        req = pb.FetchRequest(caller=self.caller, dry_run=dry_run,
                              sets=[pb.SegmentSet(partition=p, segments=s) for p, s in sets.items()])
        out: list[Record] = []
        try:
            async for chunk in self.stub.Fetch(req, metadata=self.md, timeout=TIMEOUT):
                out += [(r.key, r.value) for r in chunk.records]
        except grpc.aio.AioRpcError as e:
            raise ReplicaError(f"Fetch at {self.address}: {e.code().name}: {e.details()}") from None
        return out

    async def push(self, records: list[Record]) -> Pushed:
        req = pb.PushRequest(caller=self.caller, records=[pb.Record(key=k, value=v) for k, v in records])
        r = await self._call("Push", self.stub.Push, req)
        return Pushed(r.applied, r.unchanged, r.past_gc_grace)
