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


# MAREKVS_TEST_SHARDS=N (N > 1): the nodes the tests start alone (no peers, which a
# multi-worker node with a Kafka port refuses yet) run N shard workers (docs/shards.md).
# `make test` runs the files listed in the Makefile's SHARDED_TESTS a second time with
# MAREKVS_TEST_SHARDS=2 (the others still meet what the slices left)
_NOT_WITH_SHARDS = ("--peers", "--shards", "--config")


def test_shards(extra: list[str]) -> list[str]:
    n = int(os.environ.get("MAREKVS_TEST_SHARDS", "1") or 1)
    if n <= 1 or any(a.split("=")[0] in _NOT_WITH_SHARDS for a in extra):
        return []
    return ["--shards", str(n)]


class Node:
    """One ``marekvs serve`` process."""

    def __init__(self, data_dir: Path, port: int | None = None, node_id: int = 1, durability: str = "everysec",
                 extra: list[str] | None = None, env: dict[str, str] | None = None,
                 grpc_port: int | None = None):
        self.data_dir = Path(data_dir)
        self.port = port or free_port()
        self.grpc_port = grpc_port or free_port()
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

    def kill9(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)

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
