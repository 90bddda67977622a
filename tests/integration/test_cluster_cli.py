"""``marekvs cluster up|status|add|down`` end to end: real detached processes on free ports."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

import pytest

from marekvs.cluster import Resp, load_state, pid_alive, port_free, stop_nodes
from tests.helpers import ROOT

pytestmark = pytest.mark.timeout(90)


def free_base(span: int) -> int:
    """A base port with ``span`` consecutive free ports (probed) in 20000-31999, below the
    kernel's ephemeral range (32768+) that other tests' free ports come from."""
    for _ in range(200):
        base = random.randrange(20000, 32000 - span)
        if all(port_free(base + i) for i in range(span)):
            return base
    raise RuntimeError("no free port range")


def cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "marekvs", "cluster", *args],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def wait_until(pred, timeout: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def call(port: int, *args):
    with Resp(port) as c:
        return c.call(*args)


def test_cluster_up_status_add_down(tmp_path):
    d = tmp_path / "cluster"
    base = free_base(5)
    gbase = free_base(5)
    while abs(gbase - base) < 5:
        gbase = free_base(5)
    try:
        r = cli(
            "up", "--nodes", "3", "--dir", str(d), "--base-port", str(base), "--grpc-base-port", str(gbase)
        )
        assert r.returncode == 0, r.stdout + r.stderr
        st = load_state(d)
        nodes = st["nodes"]
        assert [n.id for n in nodes] == [1, 2, 3]
        assert [n.port for n in nodes] == [base, base + 1, base + 2]
        assert [n.grpc_port for n in nodes] == [gbase, gbase + 1, gbase + 2]
        assert all(pid_alive(n.pid) for n in nodes)
        assert all(os.path.isdir(n.data_dir) and os.path.exists(n.log) for n in nodes)
        for n in nodes:
            assert str(n.pid) in r.stdout

        # write on node 1, read on nodes 2 and 3
        assert call(base, "SET", "greeting", "hello") == "OK"
        assert call(base, "INCRBY", "visits", 5) == 5
        for port in (base + 1, base + 2):
            wait_until(lambda p=port: call(p, "GET", "greeting") == b"hello", what=f"greeting on {port}")
            wait_until(lambda p=port: call(p, "GET", "visits") == b"5", what=f"visits on {port}")

        # every link streaming: status shows all three nodes and 'streaming'
        def all_streaming():
            r = cli("status", "--dir", str(d), "--json")
            js = json.loads(r.stdout)
            links = [ln["state"] for s in js["nodes"] for ln in s["links"]]
            return r.returncode == 0 and len(links) == 6 and set(links) == {"streaming"}

        wait_until(all_streaming, what="all links streaming")
        r = cli("status", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "streaming" in r.stdout
        for n in nodes:
            assert str(n.pid) in r.stdout and str(n.port) in r.stdout
        table = [ln.split() for ln in r.stdout.splitlines()]
        assert {row[0] for row in table if len(row) > 2 and row[1] == "up"} >= {"1", "2", "3"}

        # a 4th node joins the live cluster and converges
        for i in range(50):
            call(base + 1, "SET", f"k{i}", f"v{i}")
        r = cli("add", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        nodes = load_state(d)["nodes"]
        assert [n.id for n in nodes] == [1, 2, 3, 4]
        n4 = nodes[3]
        assert pid_alive(n4.pid)
        assert call(base + 2, "SET", "after-join", "x") == "OK"  # written after the join, on node 3

        def converged():
            digests = {call(n.port, "DEBUG", "DIGEST") for n in nodes}
            return len(digests) == 1 and call(n4.port, "DBSIZE") == 53

        wait_until(converged, timeout=20, what="4 nodes converged")
        assert call(n4.port, "GET", "after-join") == b"x"
        # the existing nodes learned node 4 from its Hello
        r = cli("status", "--dir", str(d), "--json")
        js = json.loads(r.stdout)
        assert r.returncode == 0
        for s in js["nodes"]:
            assert s["known_peers"] == 3, s

        # down stops every pid
        pids = [n.pid for n in nodes]
        r = cli("down", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        for pid in pids:
            assert not pid_alive(pid), f"pid {pid} still running"
        r = cli("status", "--dir", str(d))
        assert r.returncode == 1
        assert "down" in r.stdout
    finally:
        if (d / "cluster.json").exists():
            stop_nodes(load_state(d)["nodes"], timeout=5)


def test_cluster_up_refuses_busy_ports(tmp_path):
    import socket

    base = free_base(2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", base))
        s.listen()
        r = cli(
            "up",
            "--nodes",
            "1",
            "--dir",
            str(tmp_path / "c"),
            "--base-port",
            str(base),
            "--grpc-base-port",
            str(free_base(2)),
        )
    assert r.returncode == 1
    assert "in use" in r.stderr
    assert not (tmp_path / "c" / "cluster.json").exists()
