"""Test helpers: start real marekvs / redis-server processes on free loopback ports.

Every process is started by the test that needs it and stopped by its own pid.
"""

from __future__ import annotations

import itertools
import re
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_setup_py():
    """The project's setup.py as a module (its build hooks: generate(), NATIVE, native_plan(),
    write_manifest()); setup() itself runs only when it is run as a script."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("marekvs_setup_hook", ROOT / "setup.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    return hook


def _port_candidates() -> list[int]:
    """Loopback ports below (or above) the kernel's ephemeral range, walked from an offset
    that depends on the pid so that two test runs on one machine start far apart."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            low, high = (int(x) for x in f.read().split())
    except (OSError, ValueError):
        low, high = 32768, 60999
    ports = [p for p in range(10000, 65536) if not low <= p <= high]
    if not ports:
        return []
    start = (os.getpid() * 7919) % len(ports)
    return ports[start:] + ports[:start]


def _ephemeral_ports():
    """Ports the kernel picks (``bind(0)``): only when the ephemeral range covers them all."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            yield s.getsockname()[1]


_CANDIDATES = itertools.chain(_port_candidates(), _ephemeral_ports())
_GIVEN: set[int] = set()


# redis-py 8 gives every client a 5 s socket timeout by default: on a loaded machine a big
# pipeline's first reply (a whole group commit away) can take longer. A test's client waits
# for its reply as long as the test's own deadlines allow; a test that needs a short timeout
# (a node it expects to hang) passes socket_timeout itself.
CLIENT_TIMEOUT = 120.0
# How long a node may take to start listening (a crash is seen at once, by its exit): on a
# loaded machine importing grpc, rocksdict and lupa and bootstrapping from peers can take
# tens of seconds.
START_TIMEOUT = 120.0


def client_of(port: int, **kw):
    """A redis-py client of a server on 127.0.0.1 with the suite's generous socket timeout."""
    import redis

    kw.setdefault("socket_timeout", CLIENT_TIMEOUT)
    kw.setdefault("socket_connect_timeout", CLIENT_TIMEOUT)
    return redis.Redis(host="127.0.0.1", port=port, **kw)


def free_port() -> int:
    """A loopback port nothing listens on that this test run has not handed out before.

    A node binds its ports some time after the test picked them. Picking with ``bind(0)``
    let two picks of one run return the same port, and let a node's outgoing connection
    (which takes an ephemeral port) occupy a port picked for a node not yet started; the
    node then exited at once while another process answered its port. So ports come from
    outside the ephemeral range and are never handed out twice (``bind(0)`` only when that
    range covers every port)."""
    port = next(p for p in _CANDIDATES if p not in _GIVEN and _bindable(p))
    _GIVEN.add(port)
    return port


def free_ports(n: int) -> int:
    """The first of ``n`` contiguous loopback ports as free_port() hands them out (a node of
    N shard workers with ``grpc_worker_ports contiguous`` listens on its gRPC port and the
    N after it; a proxy fronting them takes as many)."""
    if n == 1:
        return free_port()
    for first in _port_candidates():
        span = range(first, first + n)
        if first + n <= 65536 and all(p not in _GIVEN and _bindable(p) for p in span):
            _GIVEN.update(span)
            return first
    raise RuntimeError(f"no {n} contiguous free ports")


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def children(pid: int) -> list[int]:
    """The pids whose parent is ``pid`` (from /proc)."""
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        if int(fields[1]) == pid:
            out.append(int(name))
    return out


def mb(*args: bytes) -> bytes:
    """One command as a RESP multibulk request."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def wait_port(port: int, proc: subprocess.Popen | None = None, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode} before listening on {port}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout}s")


# MAREKVS_TEST_SHARDS=N (N > 1): the nodes the tests start run N shard workers
# (docs/shards.md; a node's own default is `auto`, one worker per core).
# `make test` runs the files listed in the Makefile's SHARDED_TESTS a second time with
# MAREKVS_TEST_SHARDS=2 (the others still meet what the slices left). Every node a test
# starts through Node gets `--shards` from here unless it gives `--shards` or `--config`
# itself: `--shards 1` when MAREKVS_TEST_SHARDS is unset or 1 (so the first stage stays
# single-process whatever the default count), N otherwise, peers or not. A node with
# `--peers` also gets `--grpc-worker-ports contiguous` (its workers on the N ports after
# its gRPC port, which Node reserves: grpc_port_range), so the fault proxies of
# tests/cluster.py front every link to it.
_NOT_WITH_SHARDS = ("--shards", "--config")


def env_shard_count() -> int:
    """MAREKVS_TEST_SHARDS (1 when unset)."""
    return int(os.environ.get("MAREKVS_TEST_SHARDS", "1") or 1)


def test_shards(extra: list[str]) -> list[str]:
    flags = {a.split("=")[0] for a in extra}
    if flags & set(_NOT_WITH_SHARDS):
        return []
    n = env_shard_count()
    if n <= 1:
        return ["--shards", "1"]
    out = ["--shards", str(n)]
    if "--peers" in flags and "--grpc-worker-ports" not in flags:
        out += ["--grpc-worker-ports", "contiguous"]
    return out


def node_shards(extra: list[str]) -> int:
    """How many shard workers a Node started with ``extra`` runs: its ``--shards``, else its
    config file's ``shards``, else the default, ``auto`` (the machine's cores)."""
    args = [*extra, *test_shards(extra)]
    value = "auto"
    for k, a in enumerate(args):
        name, _, v = a.partition("=")
        if name == "--config":
            with open(v or args[k + 1], "rb") as fh:
                value = str(tomllib.load(fh).get("shards", value))
    for k, a in enumerate(args):
        name, _, v = a.partition("=")
        if name == "--shards":
            value = v or args[k + 1]
    if value.strip().lower() == "auto":
        from marekvs.config import available_cores

        return available_cores()
    return int(value)


def grpc_port_range() -> int:
    """A gRPC port for a test node, with the MAREKVS_TEST_SHARDS ports after it free too
    (its workers' with `grpc_worker_ports contiguous`)."""
    n = env_shard_count()
    return free_ports(n + 1) if n > 1 else free_port()


class Node:
    """One ``marekvs serve`` process."""

    def __init__(self, data_dir: Path, port: int | None = None, node_id: int = 1, durability: str = "everysec",
                 extra: list[str] | None = None, env: dict[str, str] | None = None,
                 grpc_port: int | None = None):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.grpc_port = grpc_port or grpc_port_range()
        self.node_id = node_id
        self.durability = durability
        self.extra = list(extra or [])
        self.env = env
        self.proc: subprocess.Popen | None = None
        self.log_path = self.data_dir.parent / f"node{node_id}-{self.port}.log"

    def args(self) -> list[str]:
        return [sys.executable, "-m", "marekvs", "serve", "--port", str(self.port),
                "--data-dir", str(self.data_dir), "--node-id", str(self.node_id),
                "--durability", self.durability, "--grpc-port", str(self.grpc_port), *self.extra,
                *test_shards(self.extra)]

    def start(self, timeout: float = START_TIMEOUT) -> "Node":
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        if self.env:
            env.update(self.env)
        self._log = open(self.log_path, "ab")
        logged = self._log.tell()
        self.proc = subprocess.Popen(self.args(), cwd=str(ROOT), env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        deadline = time.monotonic() + timeout
        wait_port(self.port, self.proc, timeout)
        # the port answering is not proof: make sure it is this process that listens there
        line = f"listening on 127.0.0.1:{self.port} ".encode()
        while line not in self.log_bytes(logged):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"node {self.node_id} (pid {self.proc.pid}, exit {self.proc.poll()}) did "
                                   f"not log that it listens on {self.port}, though the port answers")
            time.sleep(0.02)
        return self

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def workers(self) -> list[int]:
        """The pids of the node's shard workers (none for a node of one process)."""
        return children(self.pid)

    def kill9(self) -> None:
        """SIGKILL the node: a node of shard workers as a whole, as a crash of its machine
        would (its supervisor stopped first so that it restarts none; the workers killed
        before they see the supervisor gone, which would stop them cleanly), and waits until
        every process of it is gone (a restart may follow at once: ports, RocksDB locks)."""
        if self.proc is None or self.proc.poll() is not None:
            return
        os.kill(self.proc.pid, signal.SIGSTOP)
        workers = self.workers()
        for w in workers:
            os.kill(w, signal.SIGKILL)
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(10)
        deadline = time.monotonic() + 30
        while any(os.path.exists(f"/proc/{w}") for w in workers) and time.monotonic() < deadline:
            time.sleep(0.02)

    def pause(self) -> None:
        """SIGSTOP every process of the node (a hung node: its shard workers too)."""
        os.kill(self.pid, signal.SIGSTOP)  # (first: it must not see a worker stop)
        for w in self.workers():
            os.kill(w, signal.SIGSTOP)

    def resume(self) -> None:
        for w in self.workers():
            os.kill(w, signal.SIGCONT)
        os.kill(self.pid, signal.SIGCONT)

    def stop(self, timeout: float = 15.0) -> int | None:
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        self._log.close()
        return self.proc.returncode

    def log_text(self) -> str:
        return self.log_bytes().decode(errors="replace")

    def log_bytes(self, offset: int = 0) -> bytes:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(offset)
                return f.read()
        except OSError:
            return b""

    def client(self, **kw):
        return client_of(self.port, **kw)


class RedisServer:
    """A stock redis-server for side-by-side checks (no persistence unless asked)."""

    def __init__(self, workdir: Path, port: int | None = None, extra: list[str] | None = None):
        self.port = port or free_port()
        self.workdir = Path(workdir)
        self.extra = extra or ["--save", "", "--appendonly", "no"]
        self.proc: subprocess.Popen | None = None

    @staticmethod
    def available() -> bool:
        return shutil.which("redis-server") is not None

    def start(self) -> "RedisServer":
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen(
            ["redis-server", "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.workdir),
             *self.extra], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        wait_port(self.port, self.proc)
        return self

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)

    def client(self, **kw):
        return client_of(self.port, **kw)


# -- raw conversations (side-by-side tests) -------------------------------------------------

_END_REPLY = re.compile(rb"(?:\*2\r\n\$4\r\npong\r\n)?\$7\r\n__end__\r\n")  # PING's, subscribed or not


def sync(s: socket.socket) -> bytes:
    """Everything the server sends on ``s`` before its reply to a ``PING __end__`` sent now
    (its own packet, so a tick of its own: what the commands before it pushed at the end of
    their tick comes first). A closed connection ends it too. (Not inside MULTI: the
    PING would be queued.)"""
    try:
        s.sendall(b"PING __end__\r\n")
    except OSError:
        pass  # closed by QUIT: read what came before
    out = b""
    s.settimeout(30)
    while True:
        m = _END_REPLY.search(out)
        if m:  # (what came in the same read after it, e.g. BCAST invalidations, stays)
            return out[:m.start()] + out[m.end():]
        try:
            d = s.recv(65536)
        except ConnectionResetError:
            d = b""
        if not d:
            return out
        out += d


_NOTIFICATION = re.compile(rb"\$\d+\r\n(__key[a-z]+@0__:[^\r]*)\r\n\$\d+\r\n([^\r]*)")


def notifications_seen(c: socket.socket, lst: socket.socket, setup: bytes, commands: bytes,
                       flags: bytes) -> list[tuple[bytes, bytes]]:
    """(channel, message) of every keyspace notification ``commands`` (sent on ``c``) fired
    with notify-keyspace-events ``flags``, as a pattern subscriber on ``lst`` saw them, after
    ``setup`` ran unobserved; the setting is off again at the end."""
    c.sendall(setup + b"CONFIG SET notify-keyspace-events " + flags + b"\r\n")
    sync(c)
    lst.sendall(b"PSUBSCRIBE __key*__:*\r\n")
    sync(lst)
    c.sendall(commands)
    sync(c)
    out = sync(lst)
    c.sendall(b"CONFIG SET notify-keyspace-events \"\"\r\n")
    sync(c)
    return _NOTIFICATION.findall(out)


def conversation(port: int, data: bytes) -> bytes:
    """Send ``data``; everything the server sent back, including what it pushed at the end
    of the tick that ran the last command (two sentinels: see ``sync``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(data)
        return sync(s) + sync(s)
