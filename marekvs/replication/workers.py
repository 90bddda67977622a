"""The shard map a node of several shard workers tells its peers (docs/shards.md §5).

Every worker of such a node serves the node's gRPC port (``SO_REUSEPORT``, which gRPC
sets on Linux: the kernel spreads the calls over the workers, and any of them answers
Hello) and a port of its own (an ephemeral one, on the same bind address). A peer reaches
a given worker at the host it dialled for the node's port and that worker's own port, so
``--peers id@host:grpc_port`` stays one address per node, and a proxy or a DNS name in
front of the node port works the same for the workers' ports as long as it forwards them.

How the workers learn each other's ports: each writes its port and incarnation in a file
beside its data directory (``data_dir/shards/<first>-<last>.grpc``, JSON, written whole and
renamed), and the worker answering Hello reads its siblings' files. Files rather than the
mesh: a file outlives a worker that dies, so the map a peer gets always names every worker
(a restarting worker's stale port fails the peer's link to it, and the peer asks the map
again until the new port is written); and nothing waits on a sibling's event loop.
"""

from __future__ import annotations

import json
import logging
import os

from marekvs.config import Config
from marekvs.core.partition import PartitionRange, ShardMap
from marekvs.replication.gen import replication_v1_pb2 as pb
from marekvs.shards.reshard import port_file

log = logging.getLogger("marekvs.replication")


class WorkerMap:
    """Worker ``index`` of a node of ``config.shards`` workers, whose data directory is
    ``config.data_dir`` (``data_dir/shards/<first>-<last>``: the supervisor's layout)."""

    def __init__(self, config: Config, index: int):
        self.index = index
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
            out.append(pb.Shard(first=r.first, last=r.last, grpc_port=port, incarnation=incarnation))
        return out
