"""One marekvs process: a node with its RESP listener, replication and metrics.

``serve(config)`` builds the node (``node.py``), attaches replication to it, starts the
gRPC service (a fresh node bootstraps from its peers before it serves), the metrics
exporter if asked, then the RESP listener, and runs until SIGTERM/SIGINT or SHUTDOWN;
stopping closes the listener, replication and then the node (RocksDB closed, the clock
saved), in that order.

``serve_worker(config, worker)`` runs one shard worker of a node of
``config.shards`` > 1 workers (started by ``marekvs/shards/supervisor.py``; docs/shards.md
slice 2): a node over the worker's partition range in its own data directory, its mesh
with its siblings (``server/mesh.py``), replication (the worker's log is a stream of its
own: ``replication/workers.py``, docs/shards.md §5), anti-entropy in every worker over its
own partitions, its service answering for the node's (``antientropy/routed.py``, slice 7),
the metrics exporter if asked (the node's metrics port, shared with the siblings: it
answers for the whole node, ``server/metrics.py``), then the RESP listeners on the node's
ports shared with the siblings (SO_REUSEPORT: the plaintext port and the TLS port), and on
worker 0 the Kafka gateway (``gateway/kafka/rounds.py``).
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from dataclasses import dataclass
from typing import Any

from marekvs import __version__
from marekvs.antientropy.background import AntiEntropy
from marekvs.config import Config
from marekvs.core.partition import ShardMap
from marekvs.node import Node
from marekvs.node.acl import StartupError
from marekvs.replication.manager import ReplicationManager
from marekvs.server.listener import RespServer, TlsListener
from marekvs.server.mesh import Mesh, ShardConnection
from marekvs.server.tls import TlsConfigError

log = logging.getLogger("marekvs.server")


@dataclass
class Worker:
    """Who a shard worker is: its index, the node's mesh name (supervisor), and the fd
    it writes one byte to once it serves (-1: none)."""

    index: int
    mesh: str
    ready_fd: int = -1


class Process:
    def __init__(self, config: Config, config_file: str | None = None, worker: Worker | None = None):
        self.worker = worker
        self.mesh: Mesh | None = None
        if worker is None:
            self.node = Node(config, config_file)
        else:
            shards = ShardMap.even(config.shards)
            self.node = Node(config, config_file, partitions=shards.ranges[worker.index], worker=worker.index)
        self.replication = ReplicationManager(self.node, None if worker is None else worker.index)
        self.node.replication = self.replication
        # its service and tasks ride replication (a shard worker: over its partitions, the
        # service routing the others to their workers: antientropy/routed.py)
        self.antientropy = AntiEntropy(self.node, self.replication)
        self.node.antientropy = self.antientropy  # INFO antientropy, metrics
        self.node.pubsub.relay = self.replication.relay.publish  # PUBLISH reaches every node
        self.resp = RespServer(self.node)
        self.metrics_server: asyncio.AbstractServer | None = None
        if worker is not None:
            mesh = self.mesh = Mesh(self.node, ShardMap.even(config.shards), worker.index, worker.mesh)
            self.resp.connection_factory = lambda adopt=None: ShardConnection(self.resp, mesh, adopt)
            self.resp.reuse_port = True
            self.node.shutdown_hook = lambda: os.kill(os.getppid(), signal.SIGTERM)  # the supervisor stops them all
            self.node.pid = os.getppid()
            self.replication.on_node_records = mesh.records.share  # a peer's users and libraries
        self.kafka: Any = None
        # the Kafka gateway (marekvs/gateway/kafka/): on a node of shard workers, worker 0
        # alone serves the Kafka port (gateway/kafka/rounds.py)
        if config.kafka_port and (worker is None or worker.index == 0):
            from marekvs.gateway.kafka import KafkaGateway

            tls = TlsListener(self.node, self.resp.tls, "Kafka client") if config.kafka_tls == "yes" else None
            self.kafka = KafkaGateway(self.node, tls, self.mesh)

    async def run(self) -> None:
        node, config = self.node, self.node.config
        loop = asyncio.get_running_loop()
        node.start(loop)
        if self.worker is not None:
            await self.run_worker(self.worker)
            return
        await self.replication.start()  # a fresh node bootstraps from its peers before it serves
        if config.metrics_port:
            from marekvs.server.metrics import start_metrics

            self.metrics_server = await start_metrics(node, self.resp.tls if config.metrics_tls == "yes" else None)
        await self.resp.start()
        if self.kafka is not None:
            await self.kafka.start()
        log.info("marekvs %s node %d listening on %s (data %s, durability %s)", __version__,
                 config.node_id, config.listening(), os.path.abspath(config.data_dir), config.durability)
        await self.until_stopped()

    async def until_stopped(self) -> None:
        node = self.node
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, node.stop_here)
            except (NotImplementedError, RuntimeError):  # no signal handlers on this loop
                pass
        assert node.stopping is not None
        await node.stopping.wait()
        await self.stop()

    async def run_worker(self, worker: Worker) -> None:
        """A shard worker: the mesh (every sibling linked), replication (its gRPC ports; a
        fresh worker bootstraps its partitions from the peers), the node records of every
        worker and the ACL settings, then clients on the shared port; then one byte to the
        supervisor."""
        assert self.mesh is not None
        node, config = self.node, self.node.config
        await self.mesh.start()
        await self.replication.start()
        # every worker's ACL users and function libraries, then the aclfile and requirepass
        # (server/noderecords.py), before any client is served
        await self.mesh.records.gather()
        try:
            node.acl.load_settings()
        except StartupError as e:  # a bad aclfile: as Redis, the node does not start
            log.critical("%s", e)
            raise SystemExit(1) from None
        self.mesh.records.acks.clear()  # (each worker applies its settings itself: nobody waits)
        if config.metrics_port:  # every worker answers the node's metrics port for the whole node
            from marekvs.server.metrics import start_metrics

            self.metrics_server = await start_metrics(node, self.resp.tls if config.metrics_tls == "yes" else None,
                                                      self.mesh.gather_metrics)
        await self.resp.start()
        if self.kafka is not None:
            await self.kafka.start()
        log.info("marekvs %s node %d shard worker %d (partitions %s) serving %s (data %s)", __version__,
                 config.node_id, worker.index, node.engine.partitions, config.listening(),
                 os.path.abspath(config.data_dir))
        if worker.ready_fd >= 0:
            os.write(worker.ready_fd, b"R")
            os.close(worker.ready_fd)
        await self.until_stopped()

    async def stop(self) -> None:
        self.resp.stop()
        if self.mesh is not None:
            self.mesh.stop()
        if self.kafka is not None:
            self.kafka.stop()
        if self.metrics_server is not None:
            self.metrics_server.close()
        await self.replication.stop()
        self.node.close()
        log.info("marekvs node %d stopped cleanly", self.node.config.node_id)


def serve(config: Config, config_file: str | None = None, worker: Worker | None = None) -> None:
    try:
        process = Process(config, config_file, worker)
    except StartupError as e:  # a bad aclfile: as Redis, the node does not start
        log.critical("%s", e)
        raise SystemExit(1) from None
    except TlsConfigError as e:  # a certificate that does not load: as Redis, neither
        log.critical("%s", e)
        log.critical("Failed to configure TLS. Check logs for more info.")
        raise SystemExit(1) from None
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        log.warning("uvloop not available; using the default asyncio loop")
        asyncio.run(process.run())
    else:
        uvloop.run(process.run())
