"""Active-active replication: every node ships its own log to every peer over gRPC.

The manager owns the peers and the links' shared state and composes the jobs, each in
its own module: ``sender.py`` (one task per peer ships this node's log), ``receiver.py``
(the gRPC service peers call: Hello, Ship, Snapshot), ``bootstrap.py`` (pull a snapshot
from a peer), ``peers.py`` (peer state, addresses, TLS). It talks to the node through a
narrow interface (``NodeServices``): the engine, the clock, the configuration and a
callback for WAIT.

Log retention
    The log is trimmed up to the lowest ack of all known peers. A size cap protects
    the disk: past it the log is trimmed anyway and the peers that fell behind are
    marked ``needs_resync`` (INFO, logged): never silently skipped.

A data directory behind its peers
    A peer keeps, with its high-water mark of our log, the epoch of the entry there
    (``storage/replog.py``: each opening of a data directory writes its entries under a
    new random epoch). At every Hello the sender compares it with its own entry at that
    position. A high-water mark past this log's end, or another epoch there, means this
    directory lost entries peers applied (it was restored from an older copy, or a disk
    lost its newest files) and that this process now writes positions peers would skip
    as already applied. The node then says so (ERROR in its log, ``incarnation_changes``
    and ``last_incarnation_change`` in INFO replication), takes a new incarnation, so
    peers take every entry again from position 1 or bootstrap from it, and pulls a
    snapshot from every peer to get back what it lost (``take_new_incarnation``).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import Any, Callable, Protocol

import grpc

from marekvs.config import Config
from marekvs.core.hlc import HLC
from marekvs.core.partition import PARTITIONS
from marekvs.core.registry import NODE_TAGS
from marekvs.replication import peers
from marekvs.replication.bootstrap import Bootstrap
from marekvs.replication.gen import replication_v1_pb2 as pb
from marekvs.replication.gen import replication_v1_pb2_grpc as pbg
from marekvs.replication.peers import (  # noqa: F401 - re-exported for the launcher and tests
    SECRET_HEADER,
    PeerRefused,
    PeerState,
    default_grpc_port,
    new_incarnation,
    parse_peer,
)
from marekvs.replication.gen import pubsub_v1_pb2_grpc as psg
from marekvs.replication.pubsub import Relay
from marekvs.replication.receiver import Receiver
from marekvs.replication.sender import MAX_INFLIGHT_BATCHES, Sender  # noqa: F401 - tests read it
from marekvs.replication.workers import WorkerMap, bindable, own_port
from marekvs.storage.engine import FORMAT_VERSION, Engine

log = logging.getLogger("marekvs.replication")

LOG_KEEP_ALONE = 100_000
RECHECK_SECONDS = 1.0  # a peer's handshake is redone on a rival claim at most this often


class NodeServices(Protocol):
    """What replication needs of the node it serves (``marekvs.node.Node``)."""

    engine: Engine
    hlc: HLC
    config: Config

    def replica_acked(self) -> None: ...

    def deliver_published(self, channel: bytes, payload: bytes, shard: bool) -> None: ...


class ReplicationManager:
    def __init__(self, node: NodeServices, worker: int | None = None):
        """``worker``: this process is that shard worker of a node of ``config.shards``
        workers (docs/shards.md §5): its log is a stream of its own, its gRPC server
        serves the node's port and one of its own, its Hello replies name every worker."""
        self.node = node
        self.engine = node.engine
        self.hlc = node.hlc
        self.config = node.config
        self.node_id = self.config.node_id
        self.incarnation = self.engine.incarnation
        self.grpc_port = self.config.grpc_port or default_grpc_port(self.config.client_port)
        self.advertise_host = self.config.advertise_host or self.config.bind
        self.grpc_addr = f"{self.advertise_host}:{self.grpc_port}"  # what peers are told
        self.peers: dict[int, PeerState] = {}
        self.workers = None if worker is None else WorkerMap(self.config, worker)
        self.own_port = 0  # a shard worker's own gRPC port (``workers``)
        # A shard worker's: node-level records (ACL users, function libraries) a peer's
        # batch or snapshot brought here, for the siblings, which hold every one in memory
        # (server/noderecords.py ``SharedRecords.share``)
        self.on_node_records: Callable[[list[tuple[bytes, bytes]]], None] | None = None
        self.tasks: dict[int, asyncio.Task] = {}
        self.bootstraps: dict[int, asyncio.Task] = {}
        self.grpc_server: grpc.aio.Server | None = None
        self.commit_times: collections.deque[tuple[int, float]] = collections.deque()
        self.stopping = False
        self.bootstrapped_from: list[int] = []
        self.incarnation_changes = 0
        self.last_incarnation_change = ""
        self.md = ((SECRET_HEADER, self.config.cluster_secret),)  # what our calls carry
        self.secret_check = peers.ClusterSecret(self.config)  # what every call to us must carry
        # More services on this gRPC server (same port, TLS and secret), each a function
        # that adds its servicer, and companions started once the server is up and stopped
        # before it: the anti-entropy service and its background exchange
        # (marekvs/antientropy/background.py) register here.
        self.services: list[Callable[[grpc.aio.Server], None]] = []
        self.companions: list[Any] = []  # objects with start() and stop()
        for spec in self.config.peers:
            nid, addr = parse_peer(spec)
            self.add_peer(nid, addr, persist=False)
        for k, v in self.engine.meta_items(b"peer:"):
            nid = int(k[5:])
            if nid not in self.peers:
                self.add_peer(nid, v.decode(), persist=False)
        self.engine.commit_listeners.append(self._on_commit)
        self.sender = Sender(self)
        self.receiver = Receiver(self)
        self.bootstrap = Bootstrap(self)
        self.relay = Relay(self)  # cluster-wide Pub/Sub

    def channel(self, addr: str) -> grpc.aio.Channel:
        return peers.channel(self.config, addr)

    # -- identity --------------------------------------------------------------------
    def info(self) -> pb.NodeInfo:
        return pb.NodeInfo(node_id=self.node_id, cluster_name=self.config.cluster_name,
                           format_version=FORMAT_VERSION, partitions=PARTITIONS,
                           resp_addr=f"{self.advertise_host}:{self.config.client_port}", grpc_addr=self.grpc_addr,
                           incarnation=self.incarnation)

    def hello_request(self) -> pb.HelloRequest:
        """This node's (or shard worker's) Hello: who it is, its log's bounds and its range."""
        e = self.engine
        r = e.partitions
        return pb.HelloRequest(node=self.info(), log_first=e.log_first, log_last=e.log_seq, ranged=not r.whole,
                               first=r.first, last=r.last)

    def check_peer_info(self, node: pb.NodeInfo, expect_id: int | None = None) -> None:
        if node.cluster_name != self.config.cluster_name:
            raise PeerRefused(f"peer belongs to cluster {node.cluster_name!r}, not {self.config.cluster_name!r}")
        if node.format_version != FORMAT_VERSION:
            raise PeerRefused(f"peer speaks format version {node.format_version}, this node {FORMAT_VERSION}")
        if node.partitions != PARTITIONS:
            raise PeerRefused(f"peer has {node.partitions} partitions, this node {PARTITIONS}")
        if node.node_id == self.node_id:
            raise PeerRefused(f"peer uses this node's own id {self.node_id}")
        if expect_id is not None and node.node_id != expect_id:
            raise PeerRefused(f"expected node {expect_id} at this address, found node {node.node_id}")

    # -- life cycle --------------------------------------------------------------------
    async def start(self) -> None:
        self.grpc_server = peers.server(self.config, self.secret_check)
        pbg.add_ReplicationServicer_to_server(self.receiver, self.grpc_server)
        for add_service in self.services:
            add_service(self.grpc_server)
        psg.add_PubSubServicer_to_server(self.relay, self.grpc_server)
        creds = peers.server_credentials(self.config)
        addr = f"{self.config.bind}:{self.grpc_port}"
        if creds is None:
            self.grpc_server.add_insecure_port(addr)
        else:
            self.grpc_server.add_secure_port(addr, creds)
        if self.workers is not None:
            # a shard worker's own port (workers.py: an ephemeral one, or grpc_port + 1 + index)
            port = own_port(self.config, self.workers.index)
            own = f"{self.config.bind}:{port}"
            if port and not bindable(self.config.bind, port):  # (gRPC would share it with its holder)
                raise RuntimeError(f"shard worker {self.workers.index}: its gRPC port {port} "
                                   "(grpc_worker_ports contiguous: grpc_port + 1 + worker) is in use")
            try:
                self.own_port = (self.grpc_server.add_insecure_port(own) if creds is None
                                 else self.grpc_server.add_secure_port(own, creds))
            except RuntimeError as e:  # (gRPC's "Failed to bind")
                raise RuntimeError(f"shard worker {self.workers.index}: cannot listen on its own gRPC port "
                                   f"{own}: {e}") from None
        await self.grpc_server.start()
        if self.workers is not None:
            self.workers.publish(self.own_port, self.incarnation)
            log.info("shard worker %d: replication of partitions %s on its own port %d", self.workers.index,
                     self.workers.mine, self.own_port)
        log.info("replication listening on %s (%d peers configured)", addr, len(self.peers))
        if self.engine.fresh and self.peers:
            await self.bootstrap.all()
        for p in list(self.peers.values()):
            self.start_sender(p)
        self.tasks[-1] = asyncio.get_running_loop().create_task(self._trim_loop())
        for c in self.companions:
            c.start()

    async def stop(self) -> None:
        self.stopping = True
        for c in self.companions:
            c.stop()
        for t in list(self.tasks.values()) + list(self.bootstraps.values()):
            t.cancel()
        await self.relay.stop()
        if self.grpc_server is not None:
            await self.grpc_server.stop(0.5)

    def add_peer(self, nid: int, addr: str, persist: bool = True) -> PeerState:
        p = self.peers.get(nid)
        if p is None:
            p = self.peers[nid] = PeerState(nid, addr)
        p.grpc_addr = addr
        self.engine.keep_recent = True  # a sender will ship from the ring of recent entries
        if persist:
            self.engine.put_meta(b"peer:%d" % nid, addr.encode())
        return p

    def start_sender(self, p: PeerState) -> None:
        if p.node_id not in self.tasks and not self.stopping:
            self.tasks[p.node_id] = asyncio.get_running_loop().create_task(self.sender.run(p))
            self.relay.start(p)

    def recheck_peer(self, p: PeerState) -> None:
        """Shake hands with peer ``p`` again now (restart its sender), at most once a
        second: a call claimed its id under another incarnation (``Receiver._admit``).
        The handshake learns the incarnation of the node at ``p``'s address: a peer
        restored from a copy has taken a new one, and its claim then holds."""
        now = time.monotonic()
        if now - p.rechecked < RECHECK_SECONDS or self.stopping:
            return
        p.rechecked = now
        t = self.tasks.pop(p.node_id, None)
        if t is not None:
            t.cancel()
        self.tasks[p.node_id] = asyncio.get_running_loop().create_task(self.sender.run(p))

    # -- shipping ------------------------------------------------------------------------
    def _on_commit(self, log_seq: int) -> None:
        self.commit_times.append((log_seq, time.monotonic()))
        for p in self.peers.values():
            p.wake.set()
            for q in p.parts:
                q.wake.set()

    def node_records_of(self, recs: list[tuple[bytes, bytes]]) -> None:
        """Pass the node-level records among ``recs`` (received from a peer) on to the
        sibling workers (a shard worker only)."""
        share = self.on_node_records
        if share is not None:
            mine = [(k, v) for k, v in recs if k[2] in NODE_TAGS]
            if mine:
                share(mine)

    def shard_map(self) -> list[pb.Shard]:
        """What Hello tells a peer of this node's workers (none for a node of one)."""
        return [] if self.workers is None else self.workers.read()

    async def _trim_loop(self) -> None:
        while True:
            await asyncio.sleep(0.5)
            try:
                self.trim()
            except Exception:
                log.exception("replication log trim failed")

    def trim(self) -> None:
        """Trim the log up to the lowest ack of all known peers (with no peers, keep
        the newest ``LOG_KEEP_ALONE`` entries for a node that joins later)."""
        e = self.engine
        if self.peers:
            floor = min(min(p.acked_seq for p in self.peers.values()), e.log_seq)
        else:
            floor = e.log_seq - LOG_KEEP_ALONE
        cap = self.config.replog_max_entries
        if e.log_seq - floor > cap:
            floor = e.log_seq - cap
            for p in self.peers.values():
                if p.acked_seq < floor and not p.needs_resync:
                    p.needs_resync = True
                    log.error("peer %d is %d log entries behind (cap %d): log trimmed past it; it needs a "
                              "resync (bootstrap from this node)", p.node_id, e.log_seq - p.acked_seq, cap)
        if floor >= e.log_first:
            try:
                e.trim_log(floor)
            except Exception as ex:  # (a full disk: the log stays longer; a later ack trims it)
                log.warning("trimming the replication log failed: %s", ex)
        lowest = min((p.acked_seq for p in self.peers.values()), default=e.log_seq)
        ct = self.commit_times
        while len(ct) > 1 and ct[1][0] <= lowest:
            ct.popleft()

    def lag_ms(self, p: PeerState) -> int:
        if p.acked_seq >= self.engine.log_seq:
            return 0
        for seq, t in self.commit_times:
            if seq > p.acked_seq:
                return int((time.monotonic() - t) * 1000)
        return 0

    def take_new_incarnation(self, p: PeerState, acked: int) -> None:
        old = self.incarnation
        inc = new_incarnation()
        self.last_incarnation_change = (f"peer {p.node_id} had applied this node's log up to {acked} of "
                                        f"incarnation {old}; this log ends at {self.engine.log_seq}")
        log.error("DATA DIRECTORY BEHIND ITS PEERS: %s, or holds other entries there: the data directory "
                  "was restored from an older copy or lost its newest files. Taking incarnation %d (was %d) "
                  "so peers do not skip this node's writes, and pulling what was lost from every peer.",
                  self.last_incarnation_change, inc, old)
        self.engine.new_incarnation(inc)
        self.incarnation = inc
        if self.workers is not None and self.own_port:
            self.workers.publish(self.own_port, inc)
        self.incarnation_changes += 1
        loop = asyncio.get_running_loop()
        for q in self.peers.values():
            q.acked_seq = q.sent_seq = 0
            for part in q.parts:
                part.acked_seq = part.sent_seq = 0
            if q.node_id != p.node_id:  # the other senders Hello again too
                t = self.tasks.pop(q.node_id, None)
                if t is not None:
                    t.cancel()
                self.start_sender(q)
            if q.node_id not in self.bootstraps:
                self.bootstraps[q.node_id] = loop.create_task(self.bootstrap.task(q.node_id, q.grpc_addr))

    def acked_count(self, seq: int) -> int:
        return sum(1 for p in self.peers.values() if p.acked_seq >= seq)

    # -- high-water marks of peers' logs ---------------------------------------------------
    def hwm_of(self, origin: int, incarnation: int) -> tuple[int, int]:
        """(high-water mark, epoch of the entry there; 0 if unknown) of ``origin``'s log."""
        v = self.engine.get_meta(b"hwm:%d:%d" % (origin, incarnation))
        if not v:
            return 0, 0
        seq, _, epoch = v.partition(b":")
        return int(seq), int(epoch or 0)

    def hwm(self, origin: int, incarnation: int) -> int:
        return self.hwm_of(origin, incarnation)[0]

    def put_hwm(self, origin: int, incarnation: int, seq: int, epoch: int) -> None:
        self.engine.put_meta(b"hwm:%d:%d" % (origin, incarnation), b"%d:%d" % (seq, epoch))


    # -- INFO ------------------------------------------------------------------------------
    def info_fields(self) -> list[tuple[str, object]]:
        e = self.engine
        out: list[tuple[str, object]] = [
            ("node_id", self.node_id), ("incarnation", self.incarnation),
            ("grpc_addr", self.grpc_addr),
            ("connected_peers", sum(p.state == "streaming" for p in self.peers.values())),
            ("known_peers", len(self.peers)), ("log_first_seq", e.log_first), ("log_last_seq", e.log_seq),
            ("refused_batches", self.receiver.refused_batches),
            ("pubsub_relayed", self.relay.relayed), ("pubsub_received", self.relay.received),
            ("pubsub_dropped", self.relay.dropped),
            ("bootstrapping", 1 if self.bootstraps else 0),
            ("log_epoch", e.log.epoch), ("incarnation_changes", self.incarnation_changes),
            ("last_incarnation_change", self.last_incarnation_change.replace(" ", "_")),
        ]
        w = self.workers
        if w is not None:  # a shard worker: its own log, which INFO merges by (shards/fanout.py)
            out.append((f"shard{w.index}", f"partitions={w.mine},incarnation={self.incarnation},"
                                           f"log_epoch={e.log.epoch},log_first_seq={e.log_first},"
                                           f"log_last_seq={e.log_seq}"))
        for i, p in enumerate(sorted(self.peers.values(), key=lambda x: x.node_id)):
            ack_age = int((time.monotonic() - p.last_ack) * 1000) if p.last_ack else -1
            out.append((f"peer{i}", f"id={p.node_id},addr={p.grpc_addr},resp={p.resp_addr},state={p.state},"
                                    f"acked_seq={p.acked_seq},sent_seq={p.sent_seq},"
                                    f"lag_entries={max(0, e.log_seq - p.acked_seq)},lag_ms={self.lag_ms(p)},"
                                    f"last_ack_ms={ack_age},bytes_shipped={p.bytes_shipped},"
                                    f"entries_shipped={p.entries_shipped},batches_shipped={p.batches_shipped},"
                                    f"needs_resync={int(p.needs_resync)},applied_seq={p.applied_seq},"
                                    f"applied_entries={p.applied_entries},applied_bytes={p.applied_bytes},"
                                    f"skipped_entries={p.skipped_entries},workers={len(p.parts) or 1}"))
        return out

    def metrics(self) -> list[tuple[str, dict[str, str], float]]:
        e = self.engine
        out: list[tuple[str, dict[str, str], float]] = [
            ("marekvs_replog_last_seq", {}, e.log_seq), ("marekvs_replog_first_seq", {}, e.log_first)]
        for p in self.peers.values():
            lab = {"peer": str(p.node_id)}
            out += [("marekvs_peer_up", lab, 1.0 if p.state == "streaming" else 0.0),
                    ("marekvs_peer_lag_entries", lab, max(0, e.log_seq - p.acked_seq)),
                    ("marekvs_peer_lag_ms", lab, self.lag_ms(p)),
                    ("marekvs_peer_bytes_shipped_total", lab, p.bytes_shipped),
                    ("marekvs_peer_entries_shipped_total", lab, p.entries_shipped),
                    ("marekvs_peer_needs_resync", lab, 1.0 if p.needs_resync else 0.0),
                    ("marekvs_peer_applied_entries_total", lab, p.applied_entries)]
        return out
