"""``marekvs cluster up|status|add|stop|start|restart|down``: a local multi-node cluster for development.

Every node is a real ``marekvs serve`` process on 127.0.0.1, started detached (its own
session, so it outlives this command), with its own data directory ``DIR/nodeI`` and log
file ``DIR/nodeI.log``. ``DIR/cluster.json`` records every node (id, pid, RESP and gRPC
ports, data directory, log) and is what ``status``, ``add`` and ``down`` work from.

- ``up --nodes N`` starts nodes 1..N (RESP ``--base-port``+i-1, gRPC ``--grpc-base-port``+i-1,
  with ``--metrics`` a Prometheus port ``--metrics-base-port``+i-1, with ``--kafka`` a Kafka
  listener ``--kafka-base-port``+i-1) in a full mesh and waits
  until every node answers PING. Run again on a stopped cluster directory it restarts the
  recorded nodes on their data directories.
- ``status`` PINGs every node and shows its pid, DBSIZE, DEBUG DIGEST and, from
  ``INFO replication``, every link: peer id, state, lag in entries and in ms. With
  ``--ports P1,P2,..`` it shows the nodes answering on those ports instead (no cluster
  directory: e.g. the published ports of the docker compose cluster).
- ``add`` starts one more node whose ``--peers`` lists the existing nodes; it bootstraps
  from them (snapshot) before it serves, and they learn it from its handshake (Hello).
- ``stop N``, ``start N``, ``restart N`` stop (SIGTERM, then SIGKILL after ``--timeout``),
  start or restart node N of the cluster (one or more ids) with its recorded ports, data
  directory and peers; the other nodes keep running.
- ``down`` sends SIGTERM to every node's process (after checking the pid is still that
  node's process), then SIGKILL to any left after ``--timeout`` seconds.

The pid of a node is found, not trusted: the process holding the RocksDB lock of its data
directory (``/proc/locks``; on a node of shard workers, the parent of its workers' lock
holders: the supervisor), else the ``process_id`` the node reports on its port (``INFO
server``), else the recorded pid if it is still that node's process. So a node restarted by
hand (on its data directory) shows its true pid in ``status``, ``down`` and ``stop`` stop it,
and ``cluster.json`` is updated with the pid found.

Exit codes: 0 ok, 1 when any node failed (did not start, is down, could not be stopped).

The cluster secret, when given, reaches the nodes through ``MAREKVS_CLUSTER_SECRET`` (not
on their command lines, which every local user can read) and is kept in cluster.json
(mode 0600) so that ``add`` and a restart can pass it on.

The functions here (``start_cluster``, ``start_node``, ``stop_nodes``, ``node_status``,
``Resp``) are also used by ``bench/bench_cluster.py``. PING/INFO use ``Resp``, a tiny raw
RESP2 client, so this module needs nothing beyond the standard library.
"""

from marekvs.launcher.procs import (  # noqa: F401 - the launcher's API (bench/, tests/, deploy/)
    HOST,
    NodeSpec,
    find_pid,
    is_node_process,
    log_tail,
    node_argv,
    pid_alive,
    port_free,
    start_node,
    stop_nodes,
    wait_ready,
)
from marekvs.launcher.resp import Resp, RespError, parse_info, peer_links, ping  # noqa: F401
from marekvs.launcher.state import (  # noqa: F401
    STATE_FILE,
    add_node,
    load_state,
    save_state,
    start_cluster,
    state_path,
)
from marekvs.launcher.status import node_status  # noqa: F401
