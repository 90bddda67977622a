"""Node processes of a local cluster: what each node is, finding its true pid, starting
and stopping it."""

from __future__ import annotations

import glob
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from marekvs.launcher import certs
from marekvs.launcher.resp import (
    HOST,
    Resp,
    RespError,
    parse_info,
    ping,
)


PKG_ROOT = str(Path(__file__).resolve().parents[2])  # the directory holding the marekvs package


@dataclass
class NodeSpec:
    id: int
    port: int
    grpc_port: int
    data_dir: str
    log: str
    pid: int = 0
    metrics_port: int = 0  # 0: no metrics exporter
    kafka_port: int = 0  # 0: no Kafka listener (docs/kafka.md)
    tls_dir: str = ""  # a TLS node (cluster up --tls): RESP over TLS only, on port; certificates here


def port_free(port: int, host: str = HOST) -> bool:
    """Can a server listen on ``port``? (SO_REUSEADDR like the nodes: TIME_WAIT is no obstacle)"""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pid_alive(pid: int) -> bool:
    """True when ``pid`` runs (a zombie child of ours is reaped and counts as gone)."""
    if not pid or pid <= 0:
        return False
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
        if done == pid:
            return False
    except ChildProcessError:
        pass  # not our child
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
        if state in ("Z", "X"):
            return False
    except (OSError, IndexError):
        pass
    return True


def is_node_process(pid: int, node: NodeSpec) -> bool:
    """Guard against pid reuse: is ``pid`` still ``marekvs serve`` on this node's data dir?
    (the data dir on its command line, or its RocksDB lock held by ``pid``: a node started by
    hand may name its data dir by another path)"""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
    except FileNotFoundError:
        return pid_alive(pid) and not os.path.isdir("/proc")  # no procfs: trust the pid
    except OSError:
        return False
    if b"serve" not in argv:
        return False
    return os.fsencode(node.data_dir) in argv or pid in data_owners(node.data_dir)


def lock_holders(path: str) -> set[int]:
    """Pids holding a lock on ``path`` (Linux ``/proc/locks``; empty where there is none).

    RocksDB holds a POSIX lock on ``DATA_DIR/LOCK`` for as long as the database is open, so
    this is the process that owns a node's data, however it was started."""
    try:
        st = os.stat(path)
        with open("/proc/locks") as f:
            lines = f.read().splitlines()
    except OSError:
        return set()
    dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}"
    out = set()
    for line in lines:
        # "1: POSIX  ADVISORY  WRITE 5017 fe:00:2190450 0 EOF" (waiters: "1: -> POSIX ...")
        f = line.split()
        if len(f) >= 6 and f[1] != "->" and f[5] == dev and f[4].isdigit():
            out.add(int(f[4]))
    return out


def data_owners(data_dir: str) -> set[int]:
    """The node processes owning ``data_dir``: the holder of its RocksDB lock (one process),
    or the parent of the holders of its shard workers' locks (``data_dir/shards/<range>/LOCK``:
    the supervisor, whose pid is the node's)."""
    owners = lock_holders(os.path.join(data_dir, "LOCK"))
    for lock in glob.glob(os.path.join(glob.escape(data_dir), "shards", "*", "LOCK")):
        for pid in lock_holders(lock):
            try:
                with open(f"/proc/{pid}/stat") as f:
                    owners.add(int(f.read().rsplit(")", 1)[1].split()[1]))
            except (OSError, IndexError, ValueError):
                pass
    return owners


def reported_pid(port: int, host: str = HOST, timeout: float = 1.0, tls_dir: str = "") -> int:
    """The ``process_id`` of INFO server of whatever answers on ``port`` (0 when nothing does)."""
    try:
        with Resp(port, host=host, timeout=timeout, tls_dir=tls_dir) as c:
            info = parse_info(c.call("INFO", "server"))
        return int(info.get("process_id", 0))
    except (OSError, RespError, ValueError):
        return 0


def find_pid(node: NodeSpec) -> int:
    """The pid of the process that is node ``node`` now, or 0: the holder of its data
    directory's RocksDB lock, else the pid it reports on its port, else the recorded pid,
    each only while it is that node's process."""
    for pid in sorted(data_owners(node.data_dir)):
        if pid_alive(pid):
            return pid
    pid = reported_pid(node.port, tls_dir=node.tls_dir)
    if pid and pid_alive(pid) and is_node_process(pid, node):
        return pid
    if pid_alive(node.pid) and is_node_process(node.pid, node):
        return node.pid
    return 0


def node_argv(
    node: NodeSpec, peers: list[NodeSpec], durability: str, name: str, extra: list[str] | None = None
) -> list[str]:
    argv = [
        sys.executable,
        "-m",
        "marekvs",
        "serve",
        "--node-id",
        str(node.id),
        "--bind",
        HOST,
        *(["--port", "0", "--tls-port", str(node.port)] if node.tls_dir else ["--port", str(node.port)]),
        "--grpc-port",
        str(node.grpc_port),
        "--data-dir",
        node.data_dir,
        "--durability",
        durability,
        "--cluster-name",
        name,
    ]
    spec = ",".join(f"{p.id}@{HOST}:{p.grpc_port}" for p in peers if p.id != node.id)
    if spec:
        argv += ["--peers", spec]
    if node.metrics_port:
        argv += ["--metrics-port", str(node.metrics_port)]
    if node.kafka_port:
        argv += ["--kafka-port", str(node.kafka_port)]
    if node.tls_dir:
        argv += certs.node_args(Path(node.tls_dir), f"node{node.id}")
        if node.kafka_port:  # (the Kafka port over TLS too, with the same certificates: SSL, SASL_SSL)
            argv += ["--kafka-tls", "yes"]
    return argv + list(extra or [])


def node_env(secret: str) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = PKG_ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    if secret:
        env["MAREKVS_CLUSTER_SECRET"] = secret
    else:
        env.pop("MAREKVS_CLUSTER_SECRET", None)
    return env


def start_node(
    node: NodeSpec,
    peers: list[NodeSpec],
    durability: str = "everysec",
    name: str = "marekvs",
    secret: str = "",
    extra: list[str] | None = None,
) -> int:
    """Start one detached ``marekvs serve``; sets and returns ``node.pid`` (does not wait)."""
    Path(node.log).parent.mkdir(parents=True, exist_ok=True)
    with open(node.log, "ab") as logf:
        logf.write(b"--- marekvs cluster: starting node %d at %s\n" % (node.id, time.ctime().encode()))
        logf.flush()
        proc = subprocess.Popen(
            node_argv(node, peers, durability, name, extra),
            stdin=subprocess.DEVNULL,
            stdout=logf,
            stderr=subprocess.STDOUT,
            env=node_env(secret),
            cwd=str(Path(node.data_dir).parent),
            start_new_session=True,
        )
    node.pid = proc.pid
    return proc.pid


def log_tail(path: str, n: int = 15) -> str:
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - 8192))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def wait_ready(nodes: list[NodeSpec], timeout: float = 60.0) -> dict[int, str]:
    """Wait until every node answers PING. Returns {node id: problem} for those that did not."""
    pending = {n.id: n for n in nodes}
    problems: dict[int, str] = {}
    deadline = time.monotonic() + timeout
    while pending and time.monotonic() < deadline:
        for nid, n in list(pending.items()):
            if not pid_alive(n.pid):
                problems[nid] = "process exited"
                del pending[nid]
            elif ping(n.port, timeout=0.5, tls_dir=n.tls_dir):
                del pending[nid]
        if pending:
            time.sleep(0.1)
    for nid in pending:
        problems[nid] = f"no PONG within {timeout:g}s"
    return problems


def stop_nodes(nodes: list[NodeSpec], timeout: float = 15.0) -> dict[int, str]:
    """SIGTERM every live node by its pid, SIGKILL those left after ``timeout``.

    Returns {node id: outcome} with outcome one of "stopped", "killed", "not running",
    "not ours" (the pid now belongs to another process: left alone), "failed"."""
    out: dict[int, str] = {}
    live: list[NodeSpec] = []
    for n in nodes:
        if not pid_alive(n.pid):
            out[n.id] = "not running"
        elif not is_node_process(n.pid, n):
            out[n.id] = "not ours"
        else:
            try:
                os.kill(n.pid, signal.SIGTERM)
                live.append(n)
            except ProcessLookupError:
                out[n.id] = "not running"
    deadline = time.monotonic() + timeout
    while live and time.monotonic() < deadline:
        live2 = []
        for n in live:
            if pid_alive(n.pid):
                live2.append(n)
            else:
                out[n.id] = "stopped"
        live = live2
        if live:
            time.sleep(0.05)
    for n in live:
        try:
            os.kill(n.pid, signal.SIGKILL)
        except ProcessLookupError:
            out[n.id] = "stopped"
            continue
        end = time.monotonic() + 5.0
        while pid_alive(n.pid) and time.monotonic() < end:
            time.sleep(0.05)
        out[n.id] = "failed" if pid_alive(n.pid) else "killed"
    return out


# -- cluster state --------------------------------------------------------------------------
