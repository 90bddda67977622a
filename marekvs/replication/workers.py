"""The shard map a node of several shard workers tells its peers (docs/shards.md §5).

Every worker of such a node serves the node's gRPC port (``SO_REUSEPORT``, which gRPC
sets on Linux: the kernel spreads the calls over the workers, and any of them answers
Hello) and a port of its own, on the same bind address, which ``grpc_worker_ports`` picks:

- ``ephemeral`` (the default): one the kernel picks at each start. The Hello reply names it
  (``Shard.grpc_port``) and a peer dials it on the host it dialled for the node's port, so
  a proxy or port mapping in front of the node must forward ports it cannot know ahead.
- ``contiguous``: worker i listens on ``grpc_port + 1 + i``, and the reply also says so
  relative to the node's port (``Shard.port_offset`` = 1 + i): a peer dials the port it
  dialled for the node plus the offset (``dial``). A proxy, NAT, docker ``-p`` or a
  Kubernetes Service that maps the node's N+1 contiguous ports to any N+1 contiguous ports
  then reaches every worker, as Redis Cluster's ``cluster-announce-bus-port`` or Kafka's
  ``advertised.listeners`` let a mapped node be reached. The test harness's fault proxies
  use it (``tests/cluster.py``: a cut link must cut the workers' links too).

Why ephemeral stays the default: nodes side by side on one host with adjacent gRPC ports
(the ``marekvs cluster`` launcher's layout, Redis Cluster's 7000..7005 habit: gRPC ports
17000..17005) would take each other's worker ports, and ``shards auto`` makes every node a
multi-worker one. Contiguous ports are what an operator asks for who maps ports, knowing
the range. A contiguous worker port that is taken stops the node before any worker starts
(``taken_worker_ports``, checked by the supervisor), with the port named; a worker that
restarts and finds its port taken exits (gRPC cannot bind it: the supervisor retries).
Peers of a node that sends no offset (an older one, or an ephemeral node) dial
``grpc_port`` as before; a node that sends one always sends the real port too, for its
siblings (``antientropy/routed.py`` dials them directly, on the bind address).

How the workers learn each other's ports: each writes its port and incarnation in a file
beside its data directory (``data_dir/shards/<first>-<last>.grpc``, JSON, written whole and
renamed), and the worker answering Hello reads its siblings' files. Files rather than the
mesh: a file outlives a worker that dies, so the map a peer gets always names every worker
(a restarting worker's stale port fails the peer's link to it, and the peer asks the map
again until the new port is written); and nothing waits on a sibling's event loop.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import socket

from marekvs.config import Config
from marekvs.core.partition import PartitionRange, ShardMap
from marekvs.replication.gen import replication_v1_pb2 as pb
from marekvs.replication.peers import default_grpc_port
from marekvs.shards.reshard import port_file

log = logging.getLogger("marekvs.replication")


class WorkerMap:
    """Worker ``index`` of a node of ``config.shards`` workers, whose data directory is
    ``config.data_dir`` (``data_dir/shards/<first>-<last>``: the supervisor's layout)."""

    def __init__(self, config: Config, index: int):
        self.index = index
        self.contiguous = config.grpc_worker_ports == "contiguous"
        self.shards = ShardMap.even(config.shards)
        base = os.path.dirname(os.path.abspath(config.data_dir))
        self.files = [os.path.join(base, port_file(r)) for r in self.shards.ranges]

    @property
    def mine(self) -> PartitionRange:
        return self.shards.ranges[self.index]

    def publish(self, port: int, incarnation: int) -> None:
        """Write this worker's own port and incarnation for its siblings' Hello replies."""
        path = self.files[self.index]
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w") as f:
            json.dump({"port": port, "incarnation": incarnation}, f)
        os.replace(tmp, path)

    def read(self) -> list[pb.Shard]:
        """The node's map: every worker's range, own port and incarnation (port 0 and
        incarnation 0 for one that has not written its file yet)."""
        out = []
        for r, path in zip(self.shards.ranges, self.files):
            port = incarnation = 0
            try:
                with open(path) as f:
                    d = json.load(f)
                port, incarnation = int(d["port"]), int(d["incarnation"])
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.debug("shard map: no port for partitions %s yet (%s)", r, e)
            offset = 1 + len(out) if self.contiguous and port else 0
            out.append(pb.Shard(first=r.first, last=r.last, grpc_port=port, incarnation=incarnation,
                                port_offset=offset))
        return out


def own_port(config: Config, index: int) -> int:
    """The port worker ``index`` of a node of ``config.shards`` binds of its own: 0 (the
    kernel picks one) unless ``grpc_worker_ports`` is contiguous."""
    if config.grpc_worker_ports != "contiguous":
        return 0
    return node_grpc_port(config) + 1 + index


def node_grpc_port(config: Config) -> int:
    """The node's gRPC port (``grpc_port``, or the RESP port's default)."""
    return config.grpc_port or default_grpc_port(config.client_port)


def taken_worker_ports(config: Config) -> list[tuple[int, int]]:
    """(worker, port) for each contiguous worker port something already listens on (or
    out of range). gRPC binds with ``SO_REUSEPORT``, so its bind on a port another gRPC
    server of this user listens on would succeed, and share that port's calls: a plain
    bind, without it, fails there."""
    return [(i, port) for i in range(config.shards)
            if (port := own_port(config, i)) and not bindable(config.bind, port)]


def bindable(bind: str, port: int) -> bool:
    if port > 65535:
        return False
    family = socket.AF_INET6 if ":" in bind else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (a TIME_WAIT of an earlier link)
        try:
            s.bind((bind.strip("[]"), port))
        except OSError as e:
            if e.errno not in (errno.EADDRINUSE, errno.EACCES, errno.EADDRNOTAVAIL):
                raise
            return False
    return True


def dial(node_addr: str, sh: pb.Shard) -> str | None:
    """The address a peer dials for the worker ``sh`` of the node it reached at
    ``node_addr`` (``host:port``); None while that worker has published no port."""
    if not sh.grpc_port:
        return None
    host, port = node_addr.rsplit(":", 1)
    return f"{host}:{int(port) + sh.port_offset}" if sh.port_offset else f"{host}:{sh.grpc_port}"
