"""Anti-entropy on real clusters: the background exchange and ``marekvs repair`` heal what
log shipping cannot; records past gc_grace neither travel back nor resurrect anything;
bad input on the new RPCs is refused and writes nothing. (The PySpark job has its own
file: test_antientropy_spark.py.)"""

from __future__ import annotations

import json
import time
import urllib.request

import grpc
import pytest

from marekvs.core import digest as D
from marekvs.core import envelope as env
from marekvs.core import head, orswot
from marekvs.core import keys as K
from marekvs.replication.gen import antientropy_v1_pb2 as pb
from tests.antientropy_helpers import (
    AE_OFF,
    LINKS,
    caller,
    check_healed,
    digests_differ,
    grpc_nodes,
    info_antientropy,
    kept_roots,
    make_divergences,
    marekvs,
    md,
    set_antientropy,
    stub,
    with_rocksdb,
)
from tests.cluster import Cluster, wait_for
from tests.helpers import free_port

pytestmark = pytest.mark.timeout(420)


def test_background_exchange_heals_what_log_shipping_cannot(tmp_path):
    metrics = {i: free_port() for i in (1, 2, 3)}
    with Cluster.with_proxies(tmp_path, LINKS, n=3, extra=AE_OFF,
                              per_node_extra={i: ["--metrics-port", str(p)] for i, p in metrics.items()}) as cluster:
        exp = make_divergences(cluster)
        assert digests_differ(cluster)
        # the same nodes, restarted with anti-entropy on (a short interval, so the test is quick)
        set_antientropy(cluster, True, ["--antientropy-interval", "0.5", "--antientropy-settle", "1"])
        for i in (1, 2, 3):
            cluster[i].stop()
        for i in (1, 2, 3):
            cluster.start_node(i)
        check_healed(cluster, exp)
        info = {i: info_antientropy(cluster, i) for i in (1, 2, 3)}
        assert sum(int(x["records_repaired"]) for x in info.values()) > 0, info
        assert sum(int(x["exchanges"]) for x in info.values()) > 0
        assert int(info[3]["digest_corrected_partitions"]) >= 1, info[3]  # the partition lost behind its back
        for port in metrics.values():
            body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
            assert "marekvs_antientropy_exchanges_total" in body
            assert 'marekvs_antientropy_records_repaired_total{direction="pulled"}' in body


def test_repair_cli_reports_repairs_and_confirms(tmp_path):
    with Cluster(tmp_path, n=3, extra=AE_OFF) as cluster:
        cluster.wait_streaming()
        c1 = cluster.client(1)
        for k in range(2000):
            c1.set(b"k%d" % k, b"v%d" % k)
        cluster.wait_converged()
        pid = D.partition_of_key(K.encode_string_key(b"k7"))
        cluster[2].stop()

        def drop(db):
            data = db.get_column_family("data")
            keys = [k for k in data.keys() if k[:2] == K.pid_prefix(pid)]
            for k in keys:
                data.delete(k)
            del data
            return len(keys)

        lost = with_rocksdb(cluster[2].data_dir, drop)
        cluster.start_node(2)
        nodes = grpc_nodes(cluster)
        # the kept digests cannot know: a plain comparison finds nothing
        r = marekvs("repair", "--nodes", nodes, "--settle", "0")
        assert r.returncode == 0, r.stdout + r.stderr
        assert "status: consistent" in r.stdout
        # the digest check of the running node does
        r = marekvs("digest", "--nodes", grpc_nodes(cluster, [2]), "--check")
        assert r.returncode == 1 and f": {pid}" in r.stdout, r.stdout + r.stderr
        # a dry run with --verify finds the lost records and writes nothing
        out = tmp_path / "dry.json"
        r = marekvs("repair", "--nodes", nodes, "--verify", "--dry-run", "--settle", "0", "--json", str(out))
        assert r.returncode == 1, r.stdout + r.stderr
        rep = json.loads(out.read_text())
        assert rep["status"] == "differences found (dry run)" and rep["records_to_push"] == {"2": lost}
        assert rep["records_repaired"] == {} and rep["digests_wrong"] == {"2": 1}
        assert "repair (dry run): [" in r.stderr  # the progress bar
        assert cluster.client(2).get(b"k7") is None
        # the repair
        r = marekvs("repair", "--nodes", nodes, "--verify", "--settle", "0", "--json", str(out))
        assert r.returncode == 1, r.stdout + r.stderr
        rep = json.loads(out.read_text())
        assert rep["status"] == "repaired" and rep["records_repaired"] == {"2": lost}
        assert rep["partitions_mismatched"] == 1 and rep["partitions_compared"] == 4096
        assert "status: repaired" in r.stdout and "records pushed" in r.stdout
        cluster.wait_converged()
        assert cluster.client(2).get(b"k7") == b"v7"
        r = marekvs("repair", "--nodes", nodes, "--verify", "--settle", "0")
        assert r.returncode == 0 and "status: consistent" in r.stdout, r.stdout + r.stderr
        # offline: a stopped node's directory checks, and rebuilds after a change behind its back
        cluster[3].stop()
        r = marekvs("digest", "--data-dir", str(cluster[3].data_dir), "--check")
        assert r.returncode == 0 and "equals the data" in r.stdout, r.stdout + r.stderr
        with_rocksdb(cluster[3].data_dir, drop)
        r = marekvs("digest", "--data-dir", str(cluster[3].data_dir), "--rebuild")
        assert r.returncode == 1 and "rebuilt" in r.stdout, r.stdout + r.stderr
        r = marekvs("digest", "--data-dir", str(cluster[3].data_dir), "--check")
        assert r.returncode == 0, r.stdout + r.stderr
        cluster.start_node(3)
        r = marekvs("repair", "--nodes", nodes, "--settle", "0")
        assert r.returncode == 1 and "repaired" in r.stdout, r.stdout + r.stderr
        cluster.wait_converged()


def _set_member(userkey: bytes, member: bytes, hlc: int) -> tuple[bytes, bytes]:
    return K.encode_set_member_key(userkey, member), orswot.new(env.RecordType.SET_MEMBER, hlc, 1)


def _fetch_all(cluster: Cluster, i: int, keys: list[bytes]) -> dict[bytes, bytes]:
    sets: dict[int, set[int]] = {}
    for k in keys:
        sets.setdefault(D.partition_of_key(k), set()).add(D.fine_segment_of(k))
    ch, s = stub(cluster, i)
    with ch:
        req = pb.FetchRequest(caller=caller(), sets=[pb.SegmentSet(partition=p, segments=sorted(v))
                                                     for p, v in sets.items()])
        got = {r.key: r.value for chunk in s.Fetch(req, metadata=md()) for r in chunk.records}
    return {k: v for k, v in got.items() if k in keys}


def test_past_gc_grace_nothing_travels_back_and_nothing_resurrects(tmp_path):
    """gc_grace 3 s. Node 1 sweeps every 0.1 s; node 2's sweeper does its first pass at
    start and then sleeps for an hour, so it still holds a tombstone, an expired record and
    a deleted set (head tombstone + a member it gates) when node 1 has swept them. A repair
    must push none of them back to node 1 (node 2 removes them as it reads them instead),
    and node 1 must refuse them if they are pushed to it directly: the member alone would
    read as live there, its head being gone."""
    grace = 3
    with Cluster(tmp_path, n=2, extra=[*AE_OFF, "--gc-grace", str(grace)],
                 per_node_extra={2: ["--sweep-interval", "3600"]}) as cluster:
        cluster.wait_streaming()
        c1 = cluster.client(1)
        for k in range(200):
            c1.set(b"keep%d" % k, b"x")
        c1.set(b"deleted", b"old value")
        c1.delete(b"deleted")
        c1.set(b"expiring", b"x", px=50)
        now = time.time_ns() // 1_000_000
        hd = head.new(head.CollectionType.SET, now << 16, 1)
        dead_head = (K.encode_head_key(b"s"), head.tombstone(hd, (now + 1) << 16, 1))
        member = _set_member(b"s", b"m", now << 16)
        for i in (1, 2):  # written on both nodes, through the push RPC (no set commands yet)
            ch, s = stub(cluster, i)
            with ch:
                r = s.Push(pb.PushRequest(caller=caller(), records=[pb.Record(key=k, value=v)
                                                                    for k, v in (dead_head, member)]), metadata=md())
            assert r.applied == 2
        cluster.wait_converged()
        gone = [K.encode_string_key(b"deleted"), K.encode_string_key(b"expiring"), dead_head[0], member[0]]
        held = wait_for(lambda: len(r := _fetch_all(cluster, 2, gone)) == 4 and r, 10, "node 2 holding them")
        # node 1's sweeper removes them once gc_grace has passed; node 2's does not come by
        wait_for(lambda: kept_roots(cluster, 1) != kept_roots(cluster, 2), 60, "node 1 sweeping past gc_grace")
        assert c1.get(b"keep0") == b"x"
        # a repair pushes nothing back: node 2 removes them as it reads them for the exchange
        out = tmp_path / "rep.json"
        r = marekvs("repair", "--nodes", grpc_nodes(cluster), "--settle", "0", "--json", str(out))
        assert r.returncode in (0, 1), r.stdout + r.stderr
        rep = json.loads(out.read_text())
        assert sum(rep["records_repaired"].values()) == 0, rep
        assert rep["partitions_mismatched"] >= 1, rep
        assert int(info_antientropy(cluster, 2)["records_removed_past_gc_grace"]) >= 4
        assert kept_roots(cluster, 1) == kept_roots(cluster, 2)
        assert not _fetch_all(cluster, 1, gone) and not _fetch_all(cluster, 2, gone)
        # pushed straight to node 1: refused, each of them, the member too
        ch, s = stub(cluster, 1)
        with ch:
            r = s.Push(pb.PushRequest(caller=caller(), records=[pb.Record(key=k, value=v) for k, v in held.items()]),
                       metadata=md())
            assert (r.applied, r.past_gc_grace) == (0, 4)
            r = s.Push(pb.PushRequest(caller=caller(), records=[pb.Record(key=member[0], value=member[1])]),
                       metadata=md())
            assert (r.applied, r.past_gc_grace) == (0, 1)
        assert not _fetch_all(cluster, 1, gone)
        assert c1.get(b"deleted") is None and c1.exists(b"expiring") == 0
        r = marekvs("repair", "--nodes", grpc_nodes(cluster), "--settle", "0")
        assert r.returncode == 0 and "status: consistent" in r.stdout, r.stdout + r.stderr


def test_bad_input_on_the_antientropy_rpcs_is_refused_and_writes_nothing(tmp_path):
    with Cluster(tmp_path, n=1, extra=AE_OFF) as cluster:
        c = cluster.client(1)
        c.set(b"a", b"1")
        before = kept_roots(cluster, 1)
        digest = c.execute_command("DEBUG", "DIGEST")
        good = pb.Record(key=K.encode_string_key(b"new"), value=env.pack(0, 5 << 32, 9, 0, b"x"))
        ch, s = stub(cluster, 1)
        with ch:
            def refused(call, request, code, text, secret=None):
                with pytest.raises(grpc.RpcError) as e:
                    r = call(request, metadata=md(secret) if secret is not None else md())
                    if not hasattr(r, "applied"):
                        list(r)  # a stream: the error comes with the first read
                assert e.value.code() == code, e.value
                assert text in e.value.details(), e.value.details()

            inv = grpc.StatusCode.INVALID_ARGUMENT
            refused(s.Roots, pb.RootsRequest(caller=caller(), first=0, count=1), grpc.StatusCode.UNAUTHENTICATED,
                    "wrong cluster secret", secret="nope")
            refused(s.Push, pb.PushRequest(caller=pb.Caller(cluster_name="other"), records=[good]),
                    grpc.StatusCode.FAILED_PRECONDITION, "caller belongs to cluster 'other'")
            refused(s.Roots, pb.RootsRequest(caller=caller(), first=4000, count=200), inv, "not within 0..4095")
            refused(s.Segments, pb.SegmentsRequest(caller=caller(), partitions=[4096]), inv, "partition 4096")
            refused(s.FineSegments, pb.FineRequest(caller=caller(), sets=[pb.SegmentSet(partition=1, segments=[16])]),
                    inv, "segment 16 of partition 1")
            refused(s.Fetch, pb.FetchRequest(caller=caller(), sets=[pb.SegmentSet(partition=2, segments=[256])]),
                    inv, "fine segment 256")
            bad_records = {
                "retired key tag": pb.Record(key=b"\x00\x01lk", value=env.pack(0, 1 << 32, 2)),
                "shorter than the 19-byte envelope": pb.Record(key=K.encode_string_key(b"s"), value=b"\x00\x01"),
                "partition id does not match": pb.Record(key=b"\x0f\xffsk", value=env.pack(0, 1 << 32, 2)),
                "reserved envelope flag bits": pb.Record(key=K.encode_string_key(b"f"),
                                                         value=b"\xe0" + env.pack(0, 1 << 32, 2)[1:]),
                "bad set-member payload": pb.Record(key=K.encode_set_member_key(b"s", b"m"),
                                                    value=env.pack(env.RecordType.SET_MEMBER << 2, 1 << 32, 2, 0,
                                                                   b"\x09")),
            }
            for text, bad in bad_records.items():
                refused(s.Push, pb.PushRequest(caller=caller(), records=[good, bad]), inv, text)
        assert kept_roots(cluster, 1) == before
        assert c.execute_command("DEBUG", "DIGEST") == digest
        assert c.get(b"new") is None
        assert int(info_antientropy(cluster, 1)["calls_refused"]) >= 11
