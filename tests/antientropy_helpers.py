"""Divergence that log shipping cannot heal, made for real on a running cluster, and the
checks that it was healed: the anti-entropy tests (background exchange, ``marekvs repair``,
the PySpark job) share them.

``make_divergences(cluster)`` needs a ``Cluster.with_proxies(..., pairs=LINKS)`` started with
``AE_OFF`` and makes, in this order:

- **restored**: node 1 restored from an older copy of its data directory. Node 3 cannot
  reach node 1 (nor node 1 node 3) from the start, so node 1's log is never trimmed. A copy
  of node 1's directory is taken; node 1 then writes ``restored-*`` (node 2 gets them) and
  deletes some keys; node 1 is cut from node 2, stopped, restored from the copy, started.
  When the link to node 2 heals, node 1 finds its directory behind (node 2 applied more of
  its log than it holds), takes a new incarnation and pulls node 2's snapshot: it has the
  writes again, but not in its log. When node 3's links heal, node 3 takes node 1's log of
  the new incarnation from position 1 (nothing was trimmed, so no snapshot is needed) and
  never sees those writes: only anti-entropy can bring them to node 3.
- **log lost**: with nodes 2 and 3 down (and node 1's log trimmed: every entry
  acknowledged), node 1 writes ``lost-*`` (strings, a hash, a set, a list), deletes some
  base keys, removes set members, deletes a whole hash; its replication-log
  entries are then deleted from its data directory while it is stopped (a batch a bug
  dropped). Peers resume at node 1's log end and never receive them.
- **behind the back**: every record of one partition is deleted from node 3's data column
  family while node 3 is stopped (a disk that lost files); its kept digest does not know.

The returned ``Expected`` holds every acknowledged write's final value and every key whose
delete was acknowledged; ``check_healed`` asserts every node serves exactly that and that
all digests agree.
"""

from __future__ import annotations

import gc
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import grpc
import redis

from marekvs.core import keys as K
from marekvs.core.partition import partition_of
from marekvs.replication.gen import antientropy_v1_pb2 as pb
from marekvs.replication.gen import antientropy_v1_pb2_grpc as pbg
from tests.cluster import SECRET, Cluster, info_section, wait_for, wait_links
from tests.helpers import ROOT

AE_OFF = ["--antientropy-interval", "0", "--digest-verify-interval", "0"]
LINKS = [(1, 2), (2, 1), (1, 3), (3, 1)]


@dataclass
class Expected:
    values: dict[bytes, bytes] = field(default_factory=dict)  # key -> last acknowledged value
    deleted: set[bytes] = field(default_factory=set)  # keys whose DEL was acknowledged last

    def set(self, c: redis.Redis, key: bytes, value: bytes) -> None:
        assert c.set(key, value)
        self.values[key] = value
        self.deleted.discard(key)

    def delete(self, c: redis.Redis, key: bytes) -> None:
        c.delete(key)
        self.values.pop(key, None)
        self.hashes.pop(key, None)
        self.sets.pop(key, None)
        self.lists.pop(key, None)
        self.deleted.add(key)

    # collections: every record kind is bytes under a key to the digest and the exchange
    hashes: dict[bytes, dict[bytes, bytes]] = field(default_factory=dict)
    sets: dict[bytes, set[bytes]] = field(default_factory=dict)
    lists: dict[bytes, list[bytes]] = field(default_factory=dict)

    def hset(self, c: redis.Redis, key: bytes, mapping: dict[bytes, bytes]) -> None:
        c.hset(key, mapping=mapping)
        self.hashes.setdefault(key, {}).update(mapping)
        self.deleted.discard(key)

    def sadd(self, c: redis.Redis, key: bytes, *members: bytes) -> None:
        c.sadd(key, *members)
        self.sets.setdefault(key, set()).update(members)
        self.deleted.discard(key)

    def srem(self, c: redis.Redis, key: bytes, *members: bytes) -> None:
        c.srem(key, *members)
        self.sets[key].difference_update(members)

    def rpush(self, c: redis.Redis, key: bytes, *values: bytes) -> None:
        c.rpush(key, *values)
        self.lists.setdefault(key, []).extend(values)
        self.deleted.discard(key)


def set_antientropy(cluster: Cluster, on: bool, extra: list[str] | None = None) -> None:
    """The flags nodes start with from now on: anti-entropy off (``AE_OFF``) or on with
    ``extra`` (e.g. a short interval)."""
    for i in cluster.ids:
        args = [a for a in cluster.nodes[i].extra]
        for flag in ("--antientropy-interval", "--digest-verify-interval", "--antientropy-settle"):
            while flag in args:
                j = args.index(flag)
                del args[j:j + 2]
        cluster.nodes[i].extra = args + (list(extra or []) if on else AE_OFF)


def log_bounds(cluster: Cluster, i: int) -> tuple[int, int]:
    info = cluster.info(i, "replication")
    return int(info["log_first_seq"]), int(info["log_last_seq"])


def open_rocksdb(path: Path):
    from rocksdict import Options, Rdict

    cfs = {n: Options(raw_mode=True) for n in Rdict.list_cf(str(path)) if n != "default"}
    return Rdict(str(path), Options(raw_mode=True), column_families=cfs)


def with_rocksdb(path: Path, fn) -> object:
    """Run ``fn(db)`` on a stopped node's RocksDB directly, behind the engine's back; on a
    node of shard workers, on each worker's (``reshard.committed``), the results summed."""
    from marekvs.shards import reshard

    layout = reshard.committed(str(path))
    assert layout is not None, f"{path} is no data directory"
    got = []
    for d in layout.dirs:
        db = open_rocksdb(Path(d))
        try:
            got.append(fn(db))
        finally:
            db.close()
            del db
            gc.collect()
    return got[0] if len(got) == 1 else sum(got)


def digests_differ(cluster: Cluster) -> bool:
    return len(set(cluster.digests().values())) > 1


def make_divergences(cluster: Cluster, n: int = 60) -> Expected:
    exp = Expected()
    c = {i: cluster.client(i) for i in cluster.ids}
    cluster.proxy(1, 3).cut()
    cluster.proxy(3, 1).cut()
    wait_links(cluster, [(1, 2), (2, 1), (2, 3), (3, 2)], up=True)
    for i in (1, 2, 3):
        for k in range(n):
            exp.set(c[i], b"base-%d-%d" % (i, k), b"b%d-%d" % (i, k))
    for k in range(0, n, 6):
        exp.delete(c[2], b"base-1-%d" % k)  # tombstones everywhere, in time
    for i in (1, 2, 3):
        exp.hset(c[i], b"hash-%d" % i, {b"f%d" % k: b"v%d" % k for k in range(8)})
        exp.sadd(c[i], b"set-%d" % i, *[b"m%d" % k for k in range(8)])

    # -- restored: node 1 from an older copy of its data directory ----------------------------
    wait_for(lambda: c[2].get(b"base-1-%d" % (n - 1)) is not None, 30, "node 1's writes on node 2")
    backup = cluster.tmp_path / "backup1"
    cluster[1].stop()
    shutil.copytree(cluster[1].data_dir, backup)
    cluster.start_node(1)
    c[1] = cluster.client(1)
    for k in range(n):
        exp.set(c[1], b"restored-%d" % k, b"r%d" % k)
    for k in range(1, n, 6):
        exp.delete(c[1], b"base-1-%d" % k)
    last_del = b"base-1-%d" % max(range(1, n, 6))
    wait_for(lambda: c[2].get(b"restored-%d" % (n - 1)) == b"r%d" % (n - 1) and c[2].get(last_del) is None, 30,
             "node 1's new writes and deletes on node 2")  # (what only node 1 held, the restore loses)
    cluster.proxy(1, 2).cut()
    cluster.proxy(2, 1).cut()
    cluster[1].stop()
    shutil.rmtree(cluster[1].data_dir)
    shutil.copytree(backup, cluster[1].data_dir)
    cluster.start_node(1)
    c[1] = cluster.client(1)
    assert c[1].get(b"restored-0") is None  # the copy is older
    # Node 2 first reaches the restored node 1 (still under its old incarnation: it takes a
    # new one only when its own handshake with node 2 shows its log behind), then node 1
    # reaches node 2 under the new incarnation, at another address than node 2 reaches it
    # by (the proxy): node 2 must not take it for a second node with node 1's id.
    cluster.proxy(2, 1).heal()
    wait_links(cluster, [(2, 1)], up=True)
    cluster.proxy(1, 2).heal()
    wait_for(lambda: c[1].get(b"restored-%d" % (n - 1)) == b"r%d" % (n - 1), 60,
             "node 1 pulling back what its old copy lacked from node 2")
    assert int(info_section(c[1], "replication")["incarnation_changes"]) >= 1
    cluster.proxy(1, 3).heal()
    cluster.proxy(3, 1).heal()
    cluster.wait_streaming()
    for i in (1, 2, 3):  # shipping works on every link again ...
        exp.set(c[i], b"marker-restored-%d" % i, b"m")
    wait_for(lambda: all(c[j].get(b"marker-restored-%d" % i) == b"m" for i in (1, 2, 3) for j in (1, 2, 3)), 60,
             "markers everywhere")
    assert c[3].get(b"restored-0") is None  # ... and node 3 still lacks node 1's lost writes

    # -- log lost: node 1's writes whose log entries are gone ----------------------------------
    wait_for(lambda: log_bounds(cluster, 1)[0] == log_bounds(cluster, 1)[1] + 1, 60, "node 1's log trimmed empty")
    cluster[2].stop()
    cluster[3].stop()
    for k in range(n):
        exp.set(c[1], b"lost-%d" % k, b"l%d" % k)
    for k in range(2, n, 6):
        exp.delete(c[1], b"base-2-%d" % k)  # peers keep the live value: the delete must win
    exp.hset(c[1], b"lost-hash", {b"a": b"1", b"b": b"2"})
    exp.hset(c[1], b"hash-2", {b"f0": b"new", b"extra": b"x"})
    exp.sadd(c[1], b"lost-set", b"x", b"y", b"z")
    exp.srem(c[1], b"set-2", b"m0", b"m1")  # peers keep the members: the removes must win
    exp.delete(c[1], b"hash-3")  # ... and the whole-collection delete
    exp.rpush(c[1], b"lost-list", b"p", b"q", b"r")
    cluster[1].stop()
    gone = with_rocksdb(cluster[1].data_dir, _drop_log_entries)
    assert gone >= 1
    for i in (1, 2, 3):
        cluster.start_node(i)
    c = {i: cluster.client(i) for i in cluster.ids}
    cluster.wait_streaming()
    for i in (1, 2, 3):
        exp.set(c[i], b"marker-lost-%d" % i, b"m")
    wait_for(lambda: all(c[j].get(b"marker-lost-%d" % i) == b"m" for i in (1, 2, 3) for j in (1, 2, 3)), 60,
             "markers everywhere")
    assert c[2].get(b"lost-0") is None and c[2].get(b"base-2-2") is not None
    assert not c[2].exists(b"lost-hash", b"lost-set", b"lost-list") and c[2].sismember(b"set-2", b"m0")
    assert c[2].hget(b"hash-3", b"f0") == b"v0" and c[2].hget(b"hash-2", b"f0") == b"v0"

    # -- behind the back: node 3 loses a partition's records ------------------------------------
    victim = b"base-3-5"
    pid = partition_of(victim)
    cluster[3].stop()
    dropped = with_rocksdb(cluster[3].data_dir, lambda db: drop_partition_records(db, pid))
    assert dropped >= 1
    cluster.start_node(3)
    c[3] = cluster.client(3)
    assert c[3].get(victim) is None
    assert digests_differ(cluster)
    for x in c.values():
        x.close()
    return exp


def _drop_log_entries(db) -> int:
    log = db.get_column_family("replog")
    keys = list(log.keys())
    for k in keys:
        log.delete(k)
    del log
    return len(keys)


def drop_partition_records(db, pid: int) -> int:
    data = db.get_column_family("data")
    lo, hi = K.pid_prefix(pid), K.pid_prefix(pid + 1)
    keys = []
    for k in data.keys(from_key=lo):
        if k >= hi:
            break
        keys.append(k)
    for k in keys:
        data.delete(k)
    del data
    return len(keys)


def check_healed(cluster: Cluster, exp: Expected) -> None:
    """Every node serves every acknowledged write, no deleted key came back, and all
    digests (DEBUG DIGEST and every partition's kept root) agree."""
    cluster.wait_converged(timeout=90)
    keys = list(exp.values)
    for i in cluster.running():
        with cluster.client(i) as c:
            got = {}
            for b in range(0, len(keys), 500):
                chunk = keys[b:b + 500]
                got.update(zip(chunk, c.mget(chunk)))
            back = [k for k in exp.deleted if c.exists(k)]
            hashes = {k: c.hgetall(k) for k in exp.hashes}
            sets = {k: c.smembers(k) for k in exp.sets}
            lists = {k: c.lrange(k, 0, -1) for k in exp.lists}
        lost = {k: v for k, v in exp.values.items() if got[k] != v}
        assert not lost, f"node {i} lacks {len(lost)} acknowledged writes, e.g. {list(lost.items())[:3]}"
        assert not back, f"node {i}: deleted keys came back: {back[:5]}"
        assert hashes == exp.hashes and sets == exp.sets and lists == exp.lists, f"node {i}'s collections"
    roots = {i: kept_roots(cluster, i) for i in cluster.running()}
    assert len(set(roots.values())) == 1, "kept digests differ between nodes"


def caller() -> pb.Caller:
    return pb.Caller(cluster_name="marekvs", node_id=0)


def stub(cluster: Cluster, i: int) -> tuple[grpc.Channel, pbg.AntiEntropyStub]:
    ch = grpc.insecure_channel(f"127.0.0.1:{cluster[i].grpc_port}")
    return ch, pbg.AntiEntropyStub(ch)


def kept_roots(cluster: Cluster, i: int) -> bytes:
    ch, s = stub(cluster, i)
    with ch:
        return s.Roots(pb.RootsRequest(caller=caller(), first=0, count=4096), metadata=md()).roots


def md(secret: str = SECRET) -> tuple[tuple[str, str], ...]:
    return (("x-marekvs-secret", secret),)


def grpc_nodes(cluster: Cluster, ids=None) -> str:
    return ",".join(f"127.0.0.1:{cluster[i].grpc_port}" for i in (ids or cluster.ids))


def marekvs_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["MAREKVS_CLUSTER_SECRET"] = SECRET
    return env


def marekvs(*args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """``python -m marekvs ARGS`` with the test cluster's secret in the environment."""
    return subprocess.run([sys.executable, "-m", "marekvs", *args], cwd=str(ROOT), env=marekvs_env(),
                          capture_output=True, text=True, timeout=timeout)


def marekvs_popen(*args: str) -> subprocess.Popen:
    """``python -m marekvs ARGS`` started in the background (output piped)."""
    return subprocess.Popen([sys.executable, "-m", "marekvs", *args], cwd=str(ROOT), env=marekvs_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def info_antientropy(cluster: Cluster, i: int) -> dict[str, str]:
    return cluster.info(i, "antientropy")


def wait_seconds_pass(seconds: float) -> None:
    """Let wall-clock time pass (gc_grace is defined in wall-clock seconds)."""
    end = time.time() + seconds
    while time.time() < end:
        time.sleep(0.05)
