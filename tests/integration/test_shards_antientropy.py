"""Anti-entropy and repair against nodes of several shard workers (docs/shards.md §6;
issue 33, slice 7), and INFO replication merged over the workers.

Real processes and real gRPC. The divergence is what log shipping cannot heal, made as
``tests/antientropy_helpers.py`` makes it: writes whose log entries are dropped from the
node's directories while it is stopped (after its logs were trimmed empty, so peers resume
past them), and a partition's records deleted behind a node's back (its kept digest does
not know).

- background: a node of one process and one of 3 workers, diverged both ways, restarted
  with anti-entropy on: every worker's exchange over its partitions and the service
  routing each call's partitions to their workers bring both to what the writes define,
  every partition's kept root equal (``Roots`` through the node port);
- ``marekvs repair`` between a node of 2 workers and one of one: a plain comparison finds
  nothing, ``digest --nodes --check`` names the partitions lost behind the 2-worker node's
  back (one on each worker), ``repair --verify`` repairs exactly those records, and after
  it ``digest --nodes`` and a plain repair confirm; a push with a bad record among records
  of both workers is refused whole (nothing written), as is a partition out of range; with
  one worker SIGKILLed (and not restarted yet) a call needing its partitions fails at once
  with UNAVAILABLE, and the node answers again once it is back;
  stopped, ``digest --data-dir`` of the 2-worker directory prints the partition roots of
  the 1-worker one, and finds, rebuilds and then confirms a partition lost behind a
  worker's back;
- the PySpark job (``marekvs repair --spark``) repairs a 2-worker node too;
- INFO replication through each worker of the 3-worker node is the same merged text; INFO
  antientropy sums the workers' counts.
"""

from __future__ import annotations

import json
import os
import re
import signal
import time
from pathlib import Path

import grpc
import pytest

from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core.partition import ShardMap, partition_of
from marekvs.replication.gen import antientropy_v1_pb2 as pb
from marekvs.shards import reshard
from tests.antientropy_helpers import (
    AE_OFF,
    Expected,
    _drop_log_entries,
    caller,
    check_healed,
    digests_differ,
    drop_partition_records,
    grpc_nodes,
    info_antientropy,
    kept_roots,
    marekvs,
    md,
    set_antientropy,
    stub,
    with_rocksdb,
)
from tests.cluster import Cluster, info_section, shard_fields, wait_for
from tests.integration.test_shards import _cmdline, children, gone
from tests.integration.test_shards_replication import conn_on_worker

pytestmark = pytest.mark.timeout(600)


def mixed(tmp_path: Path, workers: dict[int, int], extra: list[str]) -> Cluster:
    c = Cluster(tmp_path, n=len(workers), start=False, extra=extra,
                per_node_extra={i: ["--shards", str(n)] for i, n in workers.items() if n > 1})
    try:
        return c.start()
    except BaseException:
        c.stop()
        raise


def worker_dirs(cluster: Cluster, i: int) -> list[tuple[object, str]]:
    """(partition range, RocksDB directory) of each worker of stopped node ``i``."""
    layout = reshard.committed(str(cluster[i].data_dir))
    assert layout is not None
    return list(zip(layout.ranges, layout.dirs))


def dir_of(cluster: Cluster, i: int, key: bytes) -> str:
    pid = partition_of(key)
    return next(d for r, d in worker_dirs(cluster, i) if r.holds(pid))


def logs_trimmed(cluster: Cluster, i: int) -> bool:
    """Every log of node ``i`` trimmed empty (every entry acknowledged by the peers)."""
    with cluster.client(i) as c:
        return all(int(s["log_first_seq"]) == int(s["log_last_seq"]) + 1 for s in shard_fields(c))


def test_background_exchange_converges_nodes_of_1_and_3_workers(tmp_path):
    workers = {1: 1, 2: 3}
    with mixed(tmp_path, workers, AE_OFF) as cluster:
        cluster.wait_streaming(timeout=60)
        exp = Expected()
        c = {i: cluster.client(i) for i in cluster.ids}
        n = 60
        for i in (1, 2):
            for k in range(n):
                exp.set(c[i], b"base-%d-%d" % (i, k), b"b%d-%d" % (i, k))
            exp.hset(c[i], b"hash-%d" % i, {b"f%d" % k: b"v%d" % k for k in range(8)})
            exp.sadd(c[i], b"set-%d" % i, *[b"m%d" % k for k in range(8)])
        cluster.wait_converged(timeout=60)
        wait_for(lambda: logs_trimmed(cluster, 2), 60, "node 2's logs trimmed empty")
        # node 2 (3 workers) writes while node 1 is down; its log entries are then lost
        cluster[1].stop()
        for k in range(n):
            exp.set(c[2], b"lost-%d" % k, b"l%d" % k)
        for k in range(0, n, 6):
            exp.delete(c[2], b"base-1-%d" % k)  # node 1 keeps the live value: the delete must win
        exp.hset(c[2], b"hash-1", {b"f0": b"new", b"extra": b"x"})
        exp.srem(c[2], b"set-1", b"m0", b"m1")  # node 1 keeps the members: the removes must win
        exp.sadd(c[2], b"lost-set", b"x", b"y", b"z")
        exp.rpush(c[2], b"lost-list", b"p", b"q", b"r")
        c[2].close()
        cluster[2].stop()
        gone = sum(with_rocksdb(Path(d), _drop_log_entries) for _, d in worker_dirs(cluster, 2))
        assert gone >= 3  # (every worker wrote some of them)
        # behind the back: node 2's worker 2 loses a partition, node 1 another
        victims = {2: b"base-2-5", 1: b"base-1-7"}
        assert with_rocksdb(Path(dir_of(cluster, 2, victims[2])),
                            lambda db: drop_partition_records(db, partition_of(victims[2]))) >= 1
        assert with_rocksdb(cluster[1].data_dir, lambda db: drop_partition_records(db, partition_of(victims[1]))) >= 1
        cluster.start()
        c = {i: cluster.client(i) for i in cluster.ids}
        cluster.wait_streaming(timeout=60)
        assert c[1].get(b"lost-0") is None and c[1].get(b"base-1-0") is not None
        assert c[2].get(victims[2]) is None and c[1].get(victims[1]) is None
        assert digests_differ(cluster)
        # the same nodes, restarted with anti-entropy on
        set_antientropy(cluster, True, ["--antientropy-interval", "0.5", "--antientropy-settle", "1"])
        for i in (1, 2):
            cluster[i].stop()
        cluster.start()
        check_healed(cluster, exp)
        # node 1's own exchanges with the 3-worker peer succeed too (its node port routes
        # them: the errors before were node 2 not listening yet), and node 1 got node 2's
        # lost writes, pulled by its exchanges or pushed by node 2's workers'
        info = wait_for(lambda: int((x := info_antientropy(cluster, 1))["exchanges"]) > 0 and x, 60,
                        "an exchange of node 1 with node 2")
        assert int(info["records_pulled"]) + int(info["pushed_records_applied"]) > 0, info
        # INFO antientropy of node 2 is the node's, summed over its workers: each verifier's
        # first pass over its range, the partition lost behind worker's back corrected
        info = wait_for(lambda: int((x := info_antientropy(cluster, 2))["digest_verify_cycles"]) >= 1 and x, 60,
                        "every worker of node 2 verifying its partitions once")
        assert int(info["digest_verified_partitions"]) >= 4096 and int(info["exchanges"]) > 0, info
        assert int(info["digest_corrected_partitions"]) >= 1, info


def test_repair_cli_and_digests_between_a_2_worker_node_and_one_process(tmp_path):
    with mixed(tmp_path, {1: 2, 2: 1}, AE_OFF) as cluster:
        cluster.wait_streaming(timeout=60)
        c1 = cluster.client(1)
        for b in range(0, 2000, 200):
            c1.mset({b"k%d" % k: b"v%d" % k for k in range(b, b + 200)})
        cluster.wait_converged(timeout=60)
        c1.close()
        cluster[1].stop()
        # a partition of each worker of node 1 lost behind its back
        two = ShardMap.even(2)
        keys = [next(b"k%d" % k for k in range(2000) if two.owner[partition_of(b"k%d" % k)] == w) for w in (0, 1)]
        pids = sorted(partition_of(k) for k in keys)
        lost = sum(with_rocksdb(Path(dir_of(cluster, 1, k)),
                                lambda db, k=k: drop_partition_records(db, partition_of(k))) for k in keys)
        assert lost >= 2
        cluster.start_node(1)
        cluster.wait_streaming(timeout=60)
        nodes = grpc_nodes(cluster)
        r = marekvs("repair", "--nodes", nodes, "--settle", "0")
        assert r.returncode == 0 and "status: consistent" in r.stdout, r.stdout + r.stderr  # the kept digests
        r = marekvs("digest", "--nodes", grpc_nodes(cluster, [1]), "--check")
        assert r.returncode == 1 and f"in 2 partitions: {pids[0]}, {pids[1]}" in r.stdout, r.stdout + r.stderr
        out = tmp_path / "rep.json"
        r = marekvs("repair", "--nodes", nodes, "--verify", "--settle", "0", "--json", str(out))
        assert r.returncode == 1, r.stdout + r.stderr
        rep = json.loads(out.read_text())
        assert rep["status"] == "repaired" and rep["records_repaired"] == {"1": lost}, rep
        assert rep["digests_wrong"] == {"1": 2} and rep["partitions_mismatched"] == 2, rep
        assert rep["nodes"] == {"1": f"127.0.0.1:{cluster[1].grpc_port}", "2": f"127.0.0.1:{cluster[2].grpc_port}"}
        cluster.wait_converged(timeout=60)
        with cluster.client(1) as c:
            assert c.mget(keys) == [b"v" + k[1:] for k in keys]
        r = marekvs("digest", "--nodes", nodes, "--check")
        assert r.returncode == 0 and r.stdout.count("equals the data") == 2, r.stdout + r.stderr
        r = marekvs("repair", "--nodes", nodes, "--verify", "--settle", "0")
        assert r.returncode == 0 and "status: consistent" in r.stdout, r.stdout + r.stderr
        # bad input through the node port: refused whole, whichever worker answers, nothing written
        digest = cluster.digests()[1]
        good = [pb.Record(key=K.encode_string_key(k), value=env.pack(0, 5 << 32, 9, 0, b"x"))
                for k in (b"new-%d" % n for n in range(200))]  # (on both workers)
        assert {two.shard_of_key(g.key) for g in good} == {0, 1}
        bad = pb.Record(key=b"\x0f\xffsk", value=env.pack(0, 1 << 32, 2))  # its partition id does not match
        for _ in range(4):  # (each a new connection: the kernel hands it to either worker)
            ch, s = stub(cluster, 1)
            with ch:
                with pytest.raises(grpc.RpcError) as e:
                    s.Push(pb.PushRequest(caller=caller(), records=good + [bad]), metadata=md())
                assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "partition id" in e.value.details()
                with pytest.raises(grpc.RpcError) as e:
                    s.Segments(pb.SegmentsRequest(caller=caller(), partitions=[5, 4096]), metadata=md())
                assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "partition 4096" in e.value.details()
        assert cluster.digests()[1] == digest
        # a worker down (SIGKILLed, its supervisor stopped so it is not restarted yet): a call
        # needing its partitions fails at once, naming it; once it is back, the node answers
        sup = cluster[1].pid
        w1 = next(p for p in children(sup) if _cmdline(p)[_cmdline(p).index(b"--index") + 1] == b"1")
        os.kill(sup, signal.SIGSTOP)
        try:
            os.kill(w1, signal.SIGKILL)
            wait_for(lambda: gone(w1), 30, "worker 1 to die")  # (its listening sockets closed)
            for _ in range(4):  # (new connections: all on worker 0 now)
                ch, s = stub(cluster, 1)
                with ch:
                    t0 = time.monotonic()
                    with pytest.raises(grpc.RpcError) as e:
                        s.Roots(pb.RootsRequest(caller=caller(), first=0, count=4096), metadata=md(), timeout=60)
                    assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value
                    assert "a shard worker of this node" in e.value.details(), e.value.details()
                    assert time.monotonic() - t0 < 10
        finally:
            os.kill(sup, signal.SIGCONT)
        wait_for(lambda: _roots_or_none(cluster, 1) == kept_roots(cluster, 2), 60,
                 "node 1 answering for worker 1 again")
        # offline: the 2-worker directory reads as one process's holding the same data
        for i in (1, 2):
            cluster[i].stop()
        summary = {}
        for i in (1, 2):
            r = marekvs("digest", "--data-dir", str(cluster[i].data_dir), "--check")
            assert r.returncode == 0 and "equals the data" in r.stdout, r.stdout + r.stderr
            summary[i] = re.search(r"partition roots ([0-9a-f]{16})", r.stdout).group(1)
        assert "2 shard workers" in marekvs("digest", "--data-dir", str(cluster[1].data_dir), "--check").stdout
        assert summary[1] == summary[2]
        # behind the back of worker 1 of the stopped node: found, rebuilt, then equal
        with_rocksdb(Path(dir_of(cluster, 1, keys[1])), lambda db: drop_partition_records(db, pids[1]))
        r = marekvs("digest", "--data-dir", str(cluster[1].data_dir), "--rebuild")
        assert r.returncode == 1 and f"in 1 partitions: {partition_of(keys[1])}" in r.stdout, r.stdout + r.stderr
        r = marekvs("digest", "--data-dir", str(cluster[1].data_dir), "--check")
        assert r.returncode == 0 and "equals the data" in r.stdout, r.stdout + r.stderr


def _roots_or_none(cluster: Cluster, i: int) -> bytes | None:
    try:
        return kept_roots(cluster, i)
    except grpc.RpcError:
        return None


def _replication_text(port: int, workers: int, worker: int) -> str:
    """INFO replication through ``worker``, the lines that move by themselves (ages, lags)
    left out."""
    with conn_on_worker(port, workers, worker) as c:
        info = info_section(c, "replication")
    return re.sub(r"(lag_ms|last_ack_ms)=-?\d+", r"\1=_", "\n".join(f"{k}:{v}" for k, v in info.items()))


def test_info_replication_is_merged_over_the_workers(tmp_path):
    with mixed(tmp_path, {1: 1, 2: 3}, AE_OFF) as cluster:
        cluster.wait_streaming(timeout=60)
        with cluster.client(2) as c:
            for k in range(300):
                c.set(b"i%d" % k, b"x")
        cluster.wait_converged(timeout=60)
        port = cluster[2].port
        texts = wait_for(lambda: len(set(t := [_replication_text(port, 3, w) for w in range(3)])) == 1 and t, 60,
                         "the same INFO replication through every worker")
        with cluster.client(2) as c:
            info = info_section(c, "replication")
        shards = {k: dict(x.split("=", 1) for x in v.split(",")) for k, v in info.items() if k.startswith("shard")}
        assert sorted(shards) == ["shard0", "shard1", "shard2"], texts[0]
        assert [s["partitions"] for s in shards.values()] == [str(r) for r in ShardMap.even(3).ranges]
        assert int(info["log_last_seq"]) == sum(int(s["log_last_seq"]) for s in shards.values())
        assert int(info["master_repl_offset"]) == int(info["log_last_seq"])
        assert all(int(s["log_last_seq"]) > 0 for s in shards.values())  # the writes landed on every worker
        assert info["incarnation"] == shards["shard0"]["incarnation"]
        assert info["connected_peers"] == "1" and info["known_peers"] == "1"
        peer = dict(x.split("=", 1) for x in info["peer0"].split(","))
        assert peer["id"] == "1" and peer["state"] == "streaming" and peer["workers"] == "1", peer
        assert "peer1" not in info
        # every worker shipped its part of the 300 writes to node 1: the entries summed
        assert int(peer["entries_shipped"]) >= 3, peer
        # node 1 (one process) is unchanged: no shard lines, its peer line names 3 workers
        one = cluster.info(1, "replication")
        assert not any(k.startswith("shard") for k in one)
        assert dict(x.split("=", 1) for x in one["peer0"].split(","))["workers"] == "3"


def test_spark_job_repairs_a_node_of_2_workers(tmp_path):
    import shutil

    if shutil.which("java") is None:
        pytest.fail("no Java runtime: Spark needs one (apt-get install default-jre-headless; .ci/run does)")
    with mixed(tmp_path, {1: 2, 2: 1}, AE_OFF) as cluster:
        cluster.wait_streaming(timeout=60)
        with cluster.client(2) as c:
            for k in range(500):
                c.set(b"s%d" % k, b"v%d" % k)
        cluster.wait_converged(timeout=60)
        victim = b"s7"
        cluster[1].stop()
        lost = with_rocksdb(Path(dir_of(cluster, 1, victim)),
                            lambda db: drop_partition_records(db, partition_of(victim)))
        cluster.start_node(1)
        cluster.wait_streaming(timeout=60)
        out = tmp_path / f"report-{time.monotonic_ns()}.json"
        r = marekvs("repair", "--spark", "--nodes", grpc_nodes(cluster), "--tasks", "4", "--verify", "--settle", "0",
                    "--json", str(out))
        assert r.returncode == 1, r.stdout + r.stderr[-3000:]
        rep = json.loads(out.read_text())
        assert rep["status"] == "repaired" and rep["records_repaired"] == {"1": lost}, rep
        assert rep["digests_wrong"] == {"1": 1} and rep["digests_verified"] == 2 * 4096, rep
        cluster.wait_converged(timeout=60)
        with cluster.client(1) as c:
            assert c.get(victim) == b"v7"
