"""Resharding on restart (docs/shards.md §7, slice 8): real nodes (a supervisor and its
workers, or one process) restarted on one data directory with another ``--shards``.

1 -> 3 -> 2 -> 1 keeps every key of every type with its value and its deadline (read back
through every connection's worker, and DEBUG DIGEST equal), ACL users and function
libraries; back at ``--shards 1`` the directory is a single process's again (no
``shards/``). A SIGKILL during the copy, or right after the map's switch, followed by a
start ends in the new layout with all the data: at both points deterministically (the
test-only ``MAREKVS_TEST_RESHARD_KILL``), and once from outside during a real copy.

(Peers after a reshard: the new workers' logs and high-water marks are checked at the
storage level, tests/unit/test_reshard.py; a cluster test needs replication between shard
workers, slice 6.)
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import redis

from marekvs.shards import reshard
from marekvs.shards.clients import CLIENTS_FILE
from tests.helpers import ROOT, Node, client_of

DEADLINE = 120.0
LIB = "#!lua name=keep\nredis.register_function('twice', function(keys, args) return args[1] * 2 end)"


def load(c: redis.Redis) -> None:
    """Keys of every type, some with a deadline, and bulk strings."""
    p = c.pipeline(transaction=False)
    for i in range(40):
        p.set(f"s{i}", f"v{i}")
        p.hset(f"h{i}", mapping={"a": i, "b": "x" * i})
        p.rpush(f"l{i}", *range(i % 7 + 1))
        p.sadd(f"S{i}", *(f"m{j}" for j in range(i % 5 + 1)))
        p.zadd(f"z{i}", {f"m{j}": j * 1.5 for j in range(i % 6 + 1)})
        p.xadd(f"x{i}", {"f": i}, id=f"{i + 1}-1")
        p.pfadd(f"p{i}", *(f"e{j}" for j in range(i)))
        p.setbit(f"b{i}", i * 3, 1)
        p.geoadd(f"g{i}", (13.36 + i / 100, 38.11, "palermo"))
        if i % 4 == 0:
            p.pexpire(f"s{i}", 10_000_000)
            p.pexpire(f"h{i}", 20_000_000)
    p.xgroup_create("x3", "grp", id="0")
    p.incrbyfloat("counter", 2.5)
    p.execute()
    c.xreadgroup("grp", "alice", {"x3": ">"})
    for start in range(0, 4000, 1000):
        c.mset({f"bulk{i}": "y" * 40 for i in range(start, start + 1000)})
    c.execute_command("ACL", "SETUSER", "reader", "on", ">secret", "~s*", "+get")
    c.execute_command("FUNCTION", "LOAD", LIB)


READ = {b"string": "get", b"hash": "hgetall", b"list": "lrange", b"set": "smembers", b"zset": "zrange",
        b"stream": "xrange"}


def snapshot(c: redis.Redis) -> dict:
    """Every key's type, value and absolute deadline (pipelined); the digest, users and
    libraries."""
    keys = sorted(c.scan_iter(count=1000))
    p = c.pipeline(transaction=False)
    for k in keys:
        p.type(k)
    types = p.execute()
    p = c.pipeline(transaction=False)
    for k, t in zip(keys, types):
        args = {"lrange": (0, -1), "zrange": (0, -1)}.get(READ[t], ())
        getattr(p, READ[t])(k, *args, **({"withscores": True} if t == b"zset" else {}))
        p.pexpiretime(k)
        if t == b"stream":
            p.execute_command("XINFO", "GROUPS", k)
    got = iter(p.execute(raise_on_error=False))
    out: dict = {}
    for k, t in zip(keys, types):
        v = next(got)
        if isinstance(v, redis.ResponseError):  # (a HyperLogLog: its own records here, docs/divergences.md)
            v = c.pfcount(k)
        elif t == b"set":
            v = sorted(v)
        out[k] = (t, v, next(got), next(got) if t == b"stream" else None)
    out["digest"] = c.execute_command("DEBUG", "DIGEST")
    out["users"] = c.execute_command("ACL", "LIST")
    out["functions"] = c.execute_command("FUNCTION", "LIST")
    return out


def loaded(data) -> dict:
    """``load`` into a new directory through one process; its ``snapshot``."""
    n = serve(data, 1)
    try:
        load(n.client())
        want = snapshot(n.client())
        assert len(want) > 4000 and {v[0] for k, v in want.items() if isinstance(k, bytes)} == set(READ)
        assert sum(1 for v in want.values() if isinstance(v, tuple) and v[2] > 0) == 20  # (the deadlines)
        return want
    finally:
        n.stop()


def serve(data, shards: int) -> Node:
    return Node(data, durability="always", extra=["--shards", str(shards)]).start(timeout=DEADLINE)


def check(n: Node, want: dict) -> None:
    for _ in range(3):  # (connections land on different workers)
        c = client_of(n.port)
        assert snapshot(c) == want
        assert c.fcall("twice", 0, 21) == 42
        r = client_of(n.port, username="reader", password="secret")
        assert r.get("s1") == b"v1"
        c.close()
        r.close()


def layout(data) -> tuple[int, bool, list[str]]:
    got = reshard.committed(str(data))
    assert got is not None
    names = (sorted(n for n in os.listdir(data / "shards") if n != CLIENTS_FILE and not n.endswith(".grpc"))
             if (data / "shards").exists() else [])
    return got.shards, got.single, names


def test_restarts_1_3_2_1_keep_every_key_users_and_functions(tmp_path):
    data = tmp_path / "d"
    want = loaded(data)
    for shards, names in ((3, ["0-1365", "1366-2730", "2731-4095", "map"]), (2, ["0-2047", "2048-4095", "map"]),
                          (1, [])):
        n = serve(data, shards)
        try:
            check(n, want)
            assert layout(data) == (shards, shards == 1, names)
            text = n.log_text()
            assert f"to {shards} shard workers" in text or shards == 1
            assert "resharded" in text
        finally:
            n.stop()
    assert (data / "CURRENT").exists() and not (data / "shards").exists()


def run_until_killed(data, shards: int, env: dict[str, str]) -> int:
    """``marekvs serve --shards N`` with ``env``; its exit status once it killed itself."""
    node = Node(data, durability="always", extra=["--shards", str(shards)], env=env)
    e = dict(os.environ, PYTHONPATH=str(ROOT), **env)
    with open(node.log_path, "ab") as logf:
        p = subprocess.run(node.args(), cwd=str(ROOT), env=e, stdout=logf, stderr=subprocess.STDOUT,
                           timeout=DEADLINE)
    return p.returncode


def test_sigkill_during_the_copy_or_after_the_switch_then_a_start_ends_with_all_data(tmp_path):
    data = tmp_path / "d"
    want = loaded(data)
    # killed during the copy: the old layout stays, beside what the copy made
    assert run_until_killed(data, 2, {reshard.KILL_ENV: "copy"}) == -signal.SIGKILL
    assert layout(data) == (1, True, ["0-2047", reshard.SCRATCH])
    n = serve(data, 2)
    try:
        check(n, want)
        assert layout(data) == (2, False, ["0-2047", "2048-4095", "map"])
    finally:
        n.stop()
    # killed right after the switch: the new layout, beside the old directories
    assert run_until_killed(data, 3, {reshard.KILL_ENV: "switch"}) == -signal.SIGKILL
    assert layout(data) == (3, False, ["0-1365", "0-2047", "1366-2730", "2048-4095", "2731-4095", "map"])
    n = serve(data, 3)
    try:
        check(n, want)
        assert layout(data) == (3, False, ["0-1365", "1366-2730", "2731-4095", "map"])
    finally:
        n.stop()
    # killed from outside while it copies: whichever side of the switch it reached, the next
    # start (to one process) ends with all the data
    node = Node(data, durability="always", extra=["--shards", "1"])
    e = dict(os.environ, PYTHONPATH=str(ROOT))
    with open(node.log_path, "ab") as logf:
        offset = logf.tell()
        p = subprocess.Popen(node.args(), cwd=str(ROOT), env=e, stdout=logf, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + DEADLINE
        while b"resharding" not in node.log_bytes(offset):
            assert p.poll() is None and time.monotonic() < deadline, "no reshard began"
            time.sleep(0.01)
        p.send_signal(signal.SIGKILL)
    finally:
        p.wait(DEADLINE)
    n = serve(data, 1)
    try:
        check(n, want)
        assert layout(data) == (1, True, [])
    finally:
        n.stop()
