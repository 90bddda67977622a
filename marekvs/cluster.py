"""``marekvs cluster up|status|add|stop|start|restart|down``: a local multi-node cluster for development.

Every node is a real ``marekvs serve`` process on 127.0.0.1, started detached (its own
session, so it outlives this command), with its own data directory ``DIR/nodeI`` and log
file ``DIR/nodeI.log``. ``DIR/cluster.json`` records every node (id, pid, RESP and gRPC
ports, data directory, log) and is what ``status``, ``add`` and ``down`` work from.

- ``up --nodes N`` starts nodes 1..N (RESP ``--base-port``+i-1, gRPC ``--grpc-base-port``+i-1,
  with ``--metrics`` a Prometheus port ``--metrics-base-port``+i-1) in a full mesh and waits
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
directory (``/proc/locks``), else the ``process_id`` the node reports on its port (``INFO
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

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

HOST = "127.0.0.1"
STATE_FILE = "cluster.json"
PKG_ROOT = str(Path(__file__).resolve().parent.parent)  # the directory holding the marekvs package


# -- a tiny RESP2 client --------------------------------------------------------------------


class RespError(Exception):
    """An error reply (``-ERR ...``)."""


class Resp:
    """Blocking RESP2 client: ``Resp(port).call("PING")`` -> "PONG"."""

    def __init__(self, port: int, host: str = HOST, timeout: float = 2.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.rf = self.sock.makefile("rb")

    @staticmethod
    def encode(*args: Any) -> bytes:
        out = [b"*%d\r\n" % len(args)]
        for a in args:
            b = a if isinstance(a, bytes) else str(a).encode()
            out.append(b"$%d\r\n%s\r\n" % (len(b), b))
        return b"".join(out)

    def _read(self) -> Any:
        line = self.rf.readline()
        if not line.endswith(b"\r\n"):
            raise ConnectionError("connection closed by the server")
        t, rest = line[:1], line[1:-2]
        if t == b"+":
            return rest.decode()
        if t == b"-":
            return RespError(rest.decode(errors="replace"))
        if t == b":":
            return int(rest)
        if t == b"$":
            n = int(rest)
            if n < 0:
                return None
            data = self.rf.read(n + 2)
            if len(data) != n + 2:
                raise ConnectionError("connection closed by the server")
            return data[:-2]
        if t == b"*":
            n = int(rest)
            return None if n < 0 else [self._read() for _ in range(n)]
        raise ConnectionError(f"unexpected RESP reply {line[:40]!r}")

    def call(self, *args: Any) -> Any:
        self.sock.sendall(self.encode(*args))
        r = self._read()
        if isinstance(r, RespError):
            raise r
        return r

    def pipeline(self, cmds: list[tuple[Any, ...]]) -> list[Any]:
        """Send every command, then read every reply (errors are returned, not raised)."""
        self.sock.sendall(b"".join(self.encode(*c) for c in cmds))
        return [self._read() for _ in cmds]

    def close(self) -> None:
        try:
            self.rf.close()
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> Resp:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def ping(port: int, timeout: float = 1.0) -> bool:
    try:
        with Resp(port, timeout=timeout) as c:
            return c.call("PING") == "PONG"
    except (OSError, RespError, ValueError):
        return False


def parse_info(text: str | bytes) -> dict[str, Any]:
    """INFO text -> {field: value}; ``peerN`` values become dicts (id=..,state=..,...)."""
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    out: dict[str, Any] = {}
    for line in text.splitlines():
        if not line or line.startswith("#") or ":" not in line:
            continue
        k, v = line.split(":", 1)
        if k.startswith("peer") and k[4:].isdigit():
            d = {}
            for part in v.split(","):
                if "=" in part:
                    pk, pv = part.split("=", 1)
                    d[pk] = pv
            out[k] = d
        else:
            out[k] = v
    return out


def peer_links(info: dict[str, Any]) -> list[dict[str, Any]]:
    """The ``peerN`` entries of a parsed INFO replication, in order."""
    keys = sorted((k for k in info if k.startswith("peer") and k[4:].isdigit()), key=lambda k: int(k[4:]))
    return [info[k] for k in keys]


# -- processes ------------------------------------------------------------------------------


@dataclass
class NodeSpec:
    id: int
    port: int
    grpc_port: int
    data_dir: str
    log: str
    pid: int = 0
    metrics_port: int = 0  # 0: no metrics exporter


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
    return os.fsencode(node.data_dir) in argv or pid in lock_holders(os.path.join(node.data_dir, "LOCK"))


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


def reported_pid(port: int, host: str = HOST, timeout: float = 1.0) -> int:
    """The ``process_id`` of INFO server of whatever answers on ``port`` (0 when nothing does)."""
    try:
        with Resp(port, host=host, timeout=timeout) as c:
            info = parse_info(c.call("INFO", "server"))
        return int(info.get("process_id", 0))
    except (OSError, RespError, ValueError):
        return 0


def find_pid(node: NodeSpec) -> int:
    """The pid of the process that is node ``node`` now, or 0: the holder of its data
    directory's RocksDB lock, else the pid it reports on its port, else the recorded pid,
    each only while it is that node's process."""
    for pid in sorted(lock_holders(os.path.join(node.data_dir, "LOCK"))):
        if pid_alive(pid):
            return pid
    pid = reported_pid(node.port)
    if pid and pid_alive(pid) and is_node_process(pid, node):
        return pid
    if pid_alive(node.pid) and is_node_process(node.pid, node):
        return node.pid
    return 0


def refresh_pids(d: str | Path, st: dict[str, Any]) -> dict[int, int]:
    """Set every node's pid to the one ``find_pid`` finds (a node not running keeps its
    recorded pid) and save the state when one changed. Returns {node id: pid found or 0}."""
    found = {}
    changed = False
    for n in st["nodes"]:
        pid = found[n.id] = find_pid(n)
        if pid and pid != n.pid:
            n.pid = pid
            changed = True
    if changed:
        save_state(d, st)
    return found


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
        "--port",
        str(node.port),
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
            elif ping(n.port, timeout=0.5):
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


def state_path(d: str | Path) -> Path:
    return Path(d) / STATE_FILE


def load_state(d: str | Path) -> dict[str, Any]:
    with open(state_path(d)) as f:
        st = json.load(f)
    st["nodes"] = [NodeSpec(**n) for n in st["nodes"]]
    return st


def save_state(d: str | Path, st: dict[str, Any]) -> None:
    p = state_path(d)
    tmp = p.with_suffix(".json.tmp")
    data = dict(st)
    data["nodes"] = [asdict(n) for n in st["nodes"]]
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, p)


def plan_nodes(
    d: str | Path, n: int, base_port: int, grpc_base_port: int, metrics_base_port: int = 0
) -> list[NodeSpec]:
    d = Path(d).resolve()
    return [
        NodeSpec(
            id=i,
            port=base_port + i - 1,
            grpc_port=grpc_base_port + i - 1,
            data_dir=str(d / f"node{i}"),
            log=str(d / f"node{i}.log"),
            metrics_port=metrics_base_port + i - 1 if metrics_base_port else 0,
        )
        for i in range(1, n + 1)
    ]


def node_ports(n: NodeSpec) -> list[int]:
    return [n.port, n.grpc_port] + ([n.metrics_port] if n.metrics_port else [])


def start_cluster(
    d: str | Path,
    nodes: int,
    base_port: int = 7000,
    grpc_base_port: int = 17000,
    durability: str = "everysec",
    secret: str = "",
    name: str = "marekvs",
    timeout: float = 60.0,
    extra: list[str] | None = None,
    metrics_base_port: int = 0,
) -> tuple[dict[str, Any], dict[int, str]]:
    """Start a fresh full-mesh cluster in ``d``; returns (state, {node id: problem}).
    ``metrics_base_port`` > 0 gives node i the Prometheus port ``metrics_base_port``+i-1."""
    d = Path(d).resolve()
    d.mkdir(parents=True, exist_ok=True)
    specs = plan_nodes(d, nodes, base_port, grpc_base_port, metrics_base_port)
    st = {
        "name": name,
        "secret": secret,
        "durability": durability,
        "host": HOST,
        "base_port": base_port,
        "grpc_base_port": grpc_base_port,
        "metrics_base_port": metrics_base_port,
        "extra": list(extra or []),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "nodes": specs,
    }
    for s in specs:
        start_node(s, specs, durability, name, secret, extra)
    save_state(d, st)
    return st, wait_ready(specs, timeout)


def add_node(d: str | Path, timeout: float = 60.0) -> tuple[dict[str, Any], NodeSpec, dict[int, str]]:
    """Start one more node joining the cluster recorded in ``d``."""
    d = Path(d).resolve()
    st = load_state(d)
    nodes: list[NodeSpec] = st["nodes"]
    nid = max(n.id for n in nodes) + 1
    used = {p for n in nodes for p in node_ports(n)}

    def next_free(after: int) -> int:
        p = after + 1
        while p in used or not port_free(p):
            p += 1
        used.add(p)
        return p

    port = next_free(max(n.port for n in nodes))
    gport = next_free(max(n.grpc_port for n in nodes))
    mport = next_free(max(n.metrics_port for n in nodes)) if any(n.metrics_port for n in nodes) else 0
    spec = NodeSpec(
        id=nid,
        port=port,
        grpc_port=gport,
        data_dir=str(d / f"node{nid}"),
        log=str(d / f"node{nid}.log"),
        metrics_port=mport,
    )
    start_node(spec, nodes, st["durability"], st["name"], st.get("secret", ""), st.get("extra"))
    st["nodes"] = nodes + [spec]
    save_state(d, st)
    return st, spec, wait_ready([spec], timeout)


def node_status(n: NodeSpec, timeout: float = 2.0, host: str = HOST) -> dict[str, Any]:
    """PING, DBSIZE, DEBUG DIGEST, INFO server's process_id and INFO replication of one node."""
    r: dict[str, Any] = {
        "id": n.id,
        "pid": n.pid,
        "port": n.port,
        "grpc_port": n.grpc_port,
        "metrics_port": n.metrics_port,
        "process": pid_alive(n.pid),
        "up": False,
        "links": [],
    }
    try:
        with Resp(n.port, host=host, timeout=timeout) as c:
            r["up"] = c.call("PING") == "PONG"
            r["dbsize"] = c.call("DBSIZE")
            dig = c.call("DEBUG", "DIGEST")
            r["digest"] = dig.decode() if isinstance(dig, bytes) else str(dig)
            server = parse_info(c.call("INFO", "server"))
            info = parse_info(c.call("INFO", "replication"))
    except (OSError, RespError, ValueError) as e:
        r["error"] = str(e) or type(e).__name__
        return r
    if str(server.get("process_id", "")).isdigit():
        r["reported_pid"] = int(server["process_id"])
    for k in ("node_id", "connected_peers", "known_peers", "log_first_seq", "log_last_seq"):
        if k in info:
            r[k] = int(info[k]) if str(info[k]).lstrip("-").isdigit() else info[k]
    for p in peer_links(info):
        r["links"].append(
            {
                "peer": int(p.get("id", 0)),
                "state": p.get("state", "?"),
                "lag_entries": int(p.get("lag_entries", 0) or 0),
                "lag_ms": int(p.get("lag_ms", 0) or 0),
                "addr": p.get("addr", ""),
            }
        )
    return r


# -- output ---------------------------------------------------------------------------------


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def print_nodes(nodes: list[NodeSpec], problems: dict[int, str]) -> None:
    metrics = any(n.metrics_port for n in nodes)
    rows = [["NODE", "STATUS", "PID", "RESP", "GRPC", *(["METRICS"] if metrics else []), "DATA", "LOG"]]
    for n in nodes:
        rows.append(
            [
                str(n.id),
                "FAILED" if n.id in problems else "up",
                str(n.pid),
                f"{HOST}:{n.port}",
                str(n.grpc_port),
                *([str(n.metrics_port or "-")] if metrics else []),
                n.data_dir,
                n.log,
            ]
        )
    print(_table(rows))
    for nid, why in problems.items():
        n = next(x for x in nodes if x.id == nid)
        print(f"\nnode {nid} failed: {why}; last lines of {n.log}:\n{log_tail(n.log)}", file=sys.stderr)


# -- commands -------------------------------------------------------------------------------

DEFAULT_METRICS_BASE_PORT = 9400


def cmd_up(args: argparse.Namespace) -> int:
    d = Path(args.dir).resolve()
    metrics_base = 0
    if args.metrics or args.metrics_base_port is not None:
        metrics_base = args.metrics_base_port or DEFAULT_METRICS_BASE_PORT
    if state_path(d).exists():
        st = load_state(d)
        nodes = st["nodes"]
        found = refresh_pids(d, st)
        running = [n for n in nodes if found[n.id]]
        if running:
            stopped = [str(n.id) for n in nodes if not found[n.id]]
            print(
                f"marekvs cluster: {state_path(d)} has running nodes "
                f"({', '.join(str(n.id) for n in running)}); run `marekvs cluster down --dir {args.dir}` first"
                + (f", or `marekvs cluster start --dir {args.dir} {' '.join(stopped)}` to start the stopped ones"
                   if stopped else ""),
                file=sys.stderr,
            )
            return 1
        print(
            f"restarting the {len(nodes)} recorded nodes of {state_path(d)} on their data directories"
            + (f" (--nodes {args.nodes} ignored)" if args.nodes not in (None, len(nodes)) else "")
            + (" (--metrics ignored: the recorded nodes keep their ports)" if metrics_base else "")
        )
        busy = [p for n in nodes for p in node_ports(n) if not port_free(p)]
        if busy:
            print(f"marekvs cluster: ports in use: {busy}", file=sys.stderr)
            return 1
        for n in nodes:
            start_node(n, nodes, st["durability"], st["name"], st.get("secret", ""), st.get("extra"))
        save_state(d, st)
        problems = wait_ready(nodes, args.timeout)
        print_nodes(nodes, problems)
        return 1 if problems else 0
    if args.nodes is None:
        args.nodes = 3
    if args.nodes < 1:
        print("marekvs cluster: --nodes must be >= 1", file=sys.stderr)
        return 1
    specs = plan_nodes(d, args.nodes, args.base_port, args.grpc_base_port, metrics_base)
    busy = [p for s in specs for p in node_ports(s) if not port_free(p)]
    if busy:
        print(
            f"marekvs cluster: ports in use: {busy} (choose --base-port / --grpc-base-port"
            + (" / --metrics-base-port" if metrics_base else "") + ")",
            file=sys.stderr,
        )
        return 1
    st, problems = start_cluster(
        d,
        args.nodes,
        args.base_port,
        args.grpc_base_port,
        args.durability,
        args.secret or "",
        args.name,
        args.timeout,
        metrics_base_port=metrics_base,
    )
    print(f"cluster {args.name!r}: {args.nodes} node(s), state in {state_path(d)}")
    print_nodes(st["nodes"], problems)
    return 1 if problems else 0


def _cluster_dir(args: argparse.Namespace) -> Path | None:
    """The cluster directory of ``args``, or None (reported) if no cluster was started there."""
    d = Path(args.dir).resolve()
    if not state_path(d).exists():
        print(f"marekvs cluster: no {state_path(d)}; start a cluster with `marekvs cluster up`",
              file=sys.stderr)
        return None
    return d


def cmd_add(args: argparse.Namespace) -> int:
    d = _cluster_dir(args)
    if d is None:
        return 1
    st, spec, problems = add_node(d, args.timeout)
    print(
        f"node {spec.id} joins cluster {st['name']!r} (peers: "
        f"{', '.join(str(n.id) for n in st['nodes'] if n.id != spec.id)})"
    )
    print_nodes([spec], problems)
    return 1 if problems else 0


def _port_nodes(ports: str) -> list[NodeSpec]:
    out = []
    for i, p in enumerate(x for x in ports.split(",") if x.strip()):
        out.append(NodeSpec(id=i + 1, port=int(p), grpc_port=0, data_dir="", log=""))
    return out


def cmd_status(args: argparse.Namespace) -> int:
    if args.ports:
        # nodes we did not start (e.g. containers): what they report about themselves
        try:
            nodes = _port_nodes(args.ports)
        except ValueError:
            print(f"marekvs cluster: --ports wants comma-separated port numbers, not {args.ports!r}",
                  file=sys.stderr)
            return 2
        statuses = [node_status(n, host=args.host) for n in nodes]
        for s in statuses:
            s["id"] = s.get("node_id", s["id"])
            s["pid"] = s.get("reported_pid", 0)
            s["process"] = s["up"]
        name, where = "(ports)", f"{args.host}:{args.ports}"
    else:
        d = _cluster_dir(args)
        if d is None:
            return 1
        st = load_state(d)
        refresh_pids(d, st)
        statuses = [node_status(n) for n in st["nodes"]]
        name, where = st["name"], str(state_path(d))
    bad = [s for s in statuses if not s["up"]]
    if args.json:
        print(json.dumps({"name": name, "dir": where if not args.ports else "", "nodes": statuses}, indent=2))
        return 1 if bad else 0
    metrics = any(s.get("metrics_port") for s in statuses)
    rows = [["NODE", "STATUS", "PID", "RESP", "GRPC", "KEYS", "DIGEST", "LOG", "PEERS",
             *(["METRICS"] if metrics else [])]]
    for s in statuses:
        status = "up" if s["up"] else ("down" if not s["process"] else "unresponsive")
        rows.append(
            [
                str(s["id"]),
                status,
                str(s["pid"]) if s["process"] else f"({s['pid']})",
                str(s["port"]),
                str(s["grpc_port"] or "-"),
                str(s.get("dbsize", "-")),
                s.get("digest", "-")[:12],
                str(s.get("log_last_seq", "-")),
                f"{s.get('connected_peers', '-')}/{s.get('known_peers', '-')}" if s["up"] else "-",
                *([str(s.get("metrics_port") or "-")] if metrics else []),
            ]
        )
    print(f"cluster {name!r} ({where})")
    print(_table(rows))
    link_rows = [["NODE", "-> PEER", "STATE", "LAG_ENTRIES", "LAG_MS"]]
    for s in statuses:
        for ln in s["links"]:
            link_rows.append(
                [str(s["id"]), str(ln["peer"]), ln["state"], str(ln["lag_entries"]), str(ln["lag_ms"])]
            )
    if len(link_rows) > 1:
        print("\nlinks (from INFO replication of each node)")
        print(_table(link_rows))
    digests = {s["digest"] for s in statuses if s.get("digest")}
    if len(digests) == 1 and not bad:
        print("\nall nodes have the same DEBUG DIGEST (converged)")
    elif len(digests) > 1:
        print(f"\n{len(digests)} different DEBUG DIGESTs (not converged yet, or writes in flight)")
    for s in bad:
        print(f"node {s['id']}: {s.get('error', 'down')}", file=sys.stderr)
    return 1 if bad else 0


def cmd_down(args: argparse.Namespace) -> int:
    d = _cluster_dir(args)
    if d is None:
        return 1
    st = load_state(d)
    refresh_pids(d, st)
    res = stop_nodes(st["nodes"], args.timeout)
    for n in st["nodes"]:
        print(f"node {n.id} (pid {n.pid}): {res[n.id]}")
    return 1 if any(v == "failed" for v in res.values()) else 0


def _selected(st: dict[str, Any], ids: list[int]) -> list[NodeSpec] | None:
    by_id = {n.id: n for n in st["nodes"]}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        print(
            f"marekvs cluster: no node {', '.join(map(str, unknown))} in this cluster "
            f"(nodes: {', '.join(str(i) for i in by_id)})",
            file=sys.stderr,
        )
        return None
    return [by_id[i] for i in dict.fromkeys(ids)]


def _stop(d: Path, st: dict[str, Any], nodes: list[NodeSpec], timeout: float) -> bool:
    res = stop_nodes(nodes, timeout)
    for n in nodes:
        print(f"node {n.id} (pid {n.pid}): {res[n.id]}")
    # "not ours": the recorded pid belongs to another process now, and no process is this node
    return not any(res[n.id] == "failed" for n in nodes)


def _start(d: Path, st: dict[str, Any], nodes: list[NodeSpec], found: dict[int, int], timeout: float) -> bool:
    todo = []
    for n in nodes:
        if found.get(n.id):
            print(f"node {n.id}: already running (pid {found[n.id]})")
        else:
            todo.append(n)
    busy = {n.id: [p for p in node_ports(n) if not port_free(p)] for n in todo}
    busy = {i: ports for i, ports in busy.items() if ports}
    if busy:
        for i, ports in busy.items():
            print(f"marekvs cluster: node {i}: ports in use: {ports}", file=sys.stderr)
        return False
    for n in todo:
        start_node(n, st["nodes"], st["durability"], st["name"], st.get("secret", ""), st.get("extra"))
    save_state(d, st)
    problems = wait_ready(todo, timeout)
    if todo:
        print_nodes(todo, problems)
    return not problems


def cmd_stop(args: argparse.Namespace) -> int:
    d = _cluster_dir(args)
    if d is None:
        return 1
    st = load_state(d)
    nodes = _selected(st, args.node)
    if nodes is None:
        return 1
    refresh_pids(d, st)
    return 0 if _stop(d, st, nodes, args.timeout) else 1


def cmd_start(args: argparse.Namespace) -> int:
    d = _cluster_dir(args)
    if d is None:
        return 1
    st = load_state(d)
    nodes = _selected(st, args.node)
    if nodes is None:
        return 1
    found = refresh_pids(d, st)
    return 0 if _start(d, st, nodes, found, args.timeout) else 1


def cmd_restart(args: argparse.Namespace) -> int:
    d = _cluster_dir(args)
    if d is None:
        return 1
    st = load_state(d)
    nodes = _selected(st, args.node)
    if nodes is None:
        return 1
    refresh_pids(d, st)
    if not _stop(d, st, nodes, args.stop_timeout):
        return 1
    return 0 if _start(d, st, nodes, {}, args.timeout) else 1


class _Fmt(argparse.ArgumentDefaultsHelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, "", False):
            return action.help
        return super()._get_help_string(action)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cluster",
        help="run a local multi-node cluster (up, status, add, stop, start, restart, down)",
        description="Run a local multi-node marekvs cluster on 127.0.0.1: every node is a "
        "detached `marekvs serve` process recorded in DIR/cluster.json.",
    )
    csub = p.add_subparsers(dest="cluster_cmd", required=True)
    fmt = _Fmt

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--dir", default="./cluster", help="cluster directory (node data dirs, logs, cluster.json)"
        )

    def node_ids(q: argparse.ArgumentParser) -> None:
        q.add_argument("node", type=int, nargs="+", metavar="N", help="node id(s), as in `marekvs cluster status`")

    up = csub.add_parser("up", help="start N nodes in a full mesh", formatter_class=fmt)
    up.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="number of nodes (default 3; a stopped cluster in --dir restarts with its recorded nodes)",
    )
    up.add_argument("--base-port", type=int, default=7000, help="RESP port of node 1 (node i: base+i-1)")
    up.add_argument(
        "--grpc-base-port", type=int, default=17000, help="gRPC port of node 1 (node i: base+i-1)"
    )
    up.add_argument(
        "--metrics",
        action="store_true",
        help=f"turn on every node's Prometheus exporter (GET /metrics), node i on "
        f"--metrics-base-port+i-1 (default base {DEFAULT_METRICS_BASE_PORT})",
    )
    up.add_argument(
        "--metrics-base-port", type=int, default=None, help="metrics port of node 1 (implies --metrics)"
    )
    common(up)
    up.add_argument("--durability", default="everysec", choices=["always", "everysec", "no"])
    up.add_argument("--secret", default="", help="cluster secret (passed to nodes through the environment)")
    up.add_argument("--name", default="marekvs", help="cluster name")
    up.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for every node to answer PING"
    )
    up.set_defaults(func=cmd_up)

    st = csub.add_parser(
        "status", help="every node: up/down, pid, DBSIZE, DEBUG DIGEST, links and lag", formatter_class=fmt
    )
    common(st)
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument(
        "--ports",
        default="",
        metavar="P1,P2,..",
        help="show the nodes answering on these RESP ports of --host instead of a cluster directory "
        "(e.g. the ports a docker compose cluster publishes); PID is what each node reports",
    )
    st.add_argument("--host", default=HOST, help="host of --ports")
    st.set_defaults(func=cmd_status)

    ad = csub.add_parser("add", help="start one more node that joins the live cluster", formatter_class=fmt)
    common(ad)
    ad.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the node to answer PING")
    ad.set_defaults(func=cmd_add)

    sp = csub.add_parser("stop", help="stop node N (the others keep running)", formatter_class=fmt)
    node_ids(sp)
    common(sp)
    sp.add_argument("--timeout", type=float, default=15.0, help="seconds after SIGTERM before SIGKILL")
    sp.set_defaults(func=cmd_stop)

    sa = csub.add_parser(
        "start", help="start stopped node N again (its recorded ports, data directory and peers)",
        formatter_class=fmt,
    )
    node_ids(sa)
    common(sa)
    sa.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the node to answer PING")
    sa.set_defaults(func=cmd_start)

    rs = csub.add_parser("restart", help="stop node N, then start it again", formatter_class=fmt)
    node_ids(rs)
    common(rs)
    rs.add_argument("--stop-timeout", type=float, default=15.0, help="seconds after SIGTERM before SIGKILL")
    rs.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the node to answer PING")
    rs.set_defaults(func=cmd_restart)

    dn = csub.add_parser("down", help="stop every node by its pid", formatter_class=fmt)
    common(dn)
    dn.add_argument("--timeout", type=float, default=15.0, help="seconds after SIGTERM before SIGKILL")
    dn.set_defaults(func=cmd_down)
