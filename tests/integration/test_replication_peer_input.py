"""Bad peer input, driven straight at a node's gRPC service with the generated stub.

Every call must carry the cluster secret; Hello must come from the same cluster, format
version and partition count and not use the node's own id; a Ship batch is validated
record by record and ONE bad record refuses the whole batch (logged, nothing written,
not even the good records before it); a batch must come from a known peer.
"""

from __future__ import annotations

import json
import os
import time

import grpc
import msgpack
import pytest

from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core.envelope import RecordType
from marekvs.core.partition import PARTITIONS
from marekvs.core.pncounter import PNCounter
from marekvs.core.pncounter import record as counter_record
from marekvs.replication.codec import pack_entries
from marekvs.replication.gen import pubsub_v1_pb2 as ps
from marekvs.replication.gen import pubsub_v1_pb2_grpc as psg
from marekvs.replication.gen import replication_v1_pb2 as pb
from marekvs.replication.gen import replication_v1_pb2_grpc as pbg
from marekvs.storage.engine import FORMAT_VERSION
from tests.cluster import SECRET, Cluster

pytestmark = pytest.mark.timeout(120)

GOOD_MD = (("x-marekvs-secret", SECRET),)
PEER = 2  # a known peer of node 1: batches claim to come from it, under a made-up incarnation


def now_hlc(offset_ms: int = 0) -> int:
    return (int(time.time() * 1000) + offset_ms) << 16


def string_rec(key: bytes, value: bytes, hlc: int | None = None, origin: int = PEER, ttl: int = 0):
    return pb.Record(key=K.encode_string_key(key),
                     value=env.pack(env.make_flags(RecordType.STRING), hlc or now_hlc(), origin, ttl, value))


def batch(*records: pb.Record, origin: int = PEER, seq: int = 1, one_entry: bool = False) -> pb.Batch:
    inc = int.from_bytes(os.urandom(7), "big")
    if one_entry:
        entries = [(seq, [(r.key, r.value) for r in records])]
    else:
        entries = [(seq + i, [(r.key, r.value)]) for i, r in enumerate(records)]
    return pb.Batch(origin=origin, incarnation=inc, entries=pack_entries(entries))


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("peer_input"), n=2)
    c.wait_streaming(20)
    r = c.client(1)
    r.mset({"existing:a": "1", "existing:b": "2"})
    assert r.wait(1, 5000) == 1
    yield c
    c.stop()


@pytest.fixture(scope="module")
def stub(cluster):
    ch = grpc.insecure_channel(f"127.0.0.1:{cluster[1].grpc_port}")
    # node 1 of shard workers (MAREKVS_TEST_SHARDS): each worker's own port, which a peer
    # ships that worker's partitions to (docs/shards.md §5), from the files they publish
    workers = []
    for f in sorted((cluster[1].data_dir / "shards").glob("*.grpc"), key=lambda f: int(f.stem.split("-")[0])):
        first, last = (int(x) for x in f.stem.split("-"))
        wch = grpc.insecure_channel(f"127.0.0.1:{json.loads(f.read_text())['port']}")
        workers.append((first, last, pbg.ReplicationStub(wch), wch))
    _WORKERS[:] = workers
    yield pbg.ReplicationStub(ch)
    ch.close()
    for *_, wch in workers:
        wch.close()
    _WORKERS.clear()


_WORKERS: list = []  # (first partition, last partition, stub, channel) per shard worker of node 1


def node_info(**over) -> pb.NodeInfo:
    d = {"node_id": 9, "cluster_name": "marekvs", "format_version": FORMAT_VERSION, "partitions": PARTITIONS,
         "resp_addr": "127.0.0.1:1", "grpc_addr": "127.0.0.1:2", "incarnation": 12345}
    d.update(over)
    return pb.NodeInfo(**d)


def state(c: Cluster) -> tuple[str, int]:
    with c.client(1) as r:
        return r.execute_command("DEBUG", "DIGEST").decode(), r.dbsize()


def ship(stub, b: pb.Batch, md=GOOD_MD) -> list[pb.Ack]:
    """``b`` shipped as a peer of one process ships it; to a node of shard workers, to the
    worker owning its first record's partition, as a peer's sender ships that worker its
    part (the good batches here hold keys of one worker; a worker refuses a record of
    another's partitions as a bad record)."""
    entries = msgpack.unpackb(b.entries)  # [[seq, [ikey, value, ...]], ...]
    if _WORKERS and entries and entries[0][1] and len(entries[0][1][0]) >= 2:
        pid = int.from_bytes(entries[0][1][0][:2], "big")
        stub = next(w for first, last, w, _ in _WORKERS if first <= pid <= last)
    return list(stub.Ship(iter([b]), metadata=md, timeout=5))


# -- authentication and Hello ------------------------------------------------------------------
@pytest.mark.parametrize("md", [(("x-marekvs-secret", "wrong"),), ()], ids=["wrong-secret", "no-secret"])
def test_wrong_secret_is_unauthenticated_and_logged(cluster, stub, md):
    # one check (the server's interceptor) answers for every service on the port
    before_peers = cluster.info(1)["known_peers"]
    calls = [lambda: stub.Hello(pb.HelloRequest(node=node_info()), metadata=md, timeout=5),
             lambda: ship(stub, batch(string_rec(b"auth:k", b"v")), md=md),
             lambda: list(stub.Snapshot(pb.SnapshotRequest(node=node_info()), metadata=md, timeout=5)),
             lambda: psg.PubSubStub(ch).Relay(
                 iter([ps.Message(origin=PEER, channel=b"auth:ch", payload=b"x")]), metadata=md, timeout=5)]
    with grpc.insecure_channel(f"127.0.0.1:{cluster[1].grpc_port}") as ch, cluster.client(1).pubsub() as sub:
        sub.subscribe("auth:ch")
        assert sub.get_message(timeout=5)["type"] == "subscribe"
        for call in calls:
            with pytest.raises(grpc.RpcError) as ei:
                call()
            assert (ei.value.code(), ei.value.details()) == (grpc.StatusCode.UNAUTHENTICATED, "wrong cluster secret")
        assert sub.get_message(timeout=0.5) is None, "a refused relay delivered a message"
    assert "wrong cluster secret" in cluster[1].log_text()
    assert cluster.client(1).get("auth:k") is None
    assert cluster.info(1)["known_peers"] == before_peers


@pytest.mark.parametrize("over, words", [
    ({"cluster_name": "other"}, "cluster"),
    ({"format_version": FORMAT_VERSION + 1}, "format"),
    ({"partitions": 1024}, "partitions"),
    ({"node_id": 1}, "own id"),
    ({"node_id": 2}, "already in use"),  # node 2 is alive and streaming elsewhere
], ids=["cluster-name", "format-version", "partitions", "own-id", "duplicate-id"])
def test_hello_from_a_foreign_node_is_a_failed_precondition(cluster, stub, over, words):
    before_peers = cluster.info(1)["known_peers"]
    with pytest.raises(grpc.RpcError) as ei:
        stub.Hello(pb.HelloRequest(node=node_info(**over)), metadata=GOOD_MD, timeout=5)
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
    assert words in ei.value.details(), ei.value.details()
    assert "refused Hello" in cluster[1].log_text()
    assert cluster.info(1)["known_peers"] == before_peers, "a refused node must not become a peer"
    with pytest.raises(grpc.RpcError) as ei:  # nor get a snapshot of the data
        list(stub.Snapshot(pb.SnapshotRequest(node=node_info(**over)), metadata=GOOD_MD, timeout=5))
    assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION


# -- Ship validation --------------------------------------------------------------------------
def _bad_records() -> dict[str, pb.Record]:
    k = K.encode_string_key(b"bad:k")
    flags = env.make_flags(RecordType.STRING)
    other_pid = ((K.pid_of_ikey(k) + 1) % PARTITIONS).to_bytes(2, "big")
    return {
        "truncated-value": pb.Record(key=k, value=env.pack(flags, now_hlc(), PEER)[:18]),
        "pid-mismatch": pb.Record(key=other_pid + k[2:], value=env.pack(flags, now_hlc(), PEER, 0, b"v")),
        "reserved-flag-bits": pb.Record(key=k, value=env.pack(flags | 0x20, now_hlc(), PEER, 0, b"v")),
        "bad-counter-payload": pb.Record(key=k, value=env.pack(env.make_flags(RecordType.COUNTER), now_hlc(),
                                                               PEER, 0, b"\x01\x02garbage")),
        "type-not-of-tag": pb.Record(key=k, value=env.pack(env.make_flags(RecordType.SET_MEMBER), now_hlc(),
                                                           PEER, 0, b"v")),
        "head-flag-on-string": pb.Record(key=k, value=env.pack(flags | env.FLAG_HEAD, now_hlc(), PEER, 0, b"v")),
        "unknown-tag": pb.Record(key=k[:2] + b"!" + k[3:], value=env.pack(flags, now_hlc(), PEER, 0, b"v")),
        "truncated-key": pb.Record(key=k[:2], value=env.pack(flags, now_hlc(), PEER, 0, b"v")),
    }


BAD = list(_bad_records())


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("layout", ["own-entry", "same-entry"])
def test_one_bad_record_refuses_the_whole_batch(cluster, stub, kind, layout):
    before = state(cluster)
    refused = int(cluster.info(1)["refused_batches"])
    good = string_rec(f"good-before-{kind}-{layout}".encode(), b"must-not-be-written")
    bad = _bad_records()[kind]
    with pytest.raises(grpc.RpcError) as ei:
        ship(stub, batch(good, bad, one_entry=layout == "same-entry"))
    assert ei.value.code() == grpc.StatusCode.INVALID_ARGUMENT, ei.value
    assert "bad record" in ei.value.details()
    assert state(cluster) == before, "a refused batch wrote something"
    assert cluster.client(1).get(f"good-before-{kind}-{layout}") is None
    assert int(cluster.info(1)["refused_batches"]) == refused + 1
    assert "refused a batch from node 2" in cluster[1].log_text()


def test_batch_from_an_unknown_origin_is_refused(cluster, stub):
    before = state(cluster)
    for origin in (99, 1):  # a stranger, and node 1's own id
        with pytest.raises(grpc.RpcError) as ei:
            ship(stub, batch(string_rec(b"stranger:k", b"v", origin=origin), origin=origin))
        assert ei.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "not a known peer" in ei.value.details()
    assert state(cluster) == before
    assert "refused a batch from unknown origin 99" in cluster[1].log_text()


def test_good_batch_is_applied_and_acked(cluster, stub):
    """Control for the refusals above: the same path accepts a well-formed batch."""
    before = state(cluster)
    acks = ship(stub, batch(string_rec(b"ctl:a", b"A"), pb.Record(
        key=K.encode_string_key(b"ctl:n"), value=counter_record(PNCounter.new().apply(PEER, 5), now_hlc(), PEER))))
    assert acks and acks[-1].applied_seq == 2
    with cluster.client(1) as r:
        assert r.mget("ctl:a", "ctl:n") == [b"A", b"5"]
    assert state(cluster) != before


def test_stale_record_older_than_an_expiry_does_not_resurrect(cluster, stub):
    """A replicated record whose version is older than a PEXPIRE that already passed its
    deadline loses the merge (the key stays expired, nothing changes); a record stamped
    after the deadline is a new write and lives."""
    r = cluster.client(1)
    stale_hlc = now_hlc(-1)  # before the SET and the PEXPIRE
    r.set("exp:k", "v0")
    assert r.pexpire("exp:k", 300)
    time.sleep(0.4)
    assert r.get("exp:k") is None
    before = state(cluster)
    ship(stub, batch(string_rec(b"exp:k", b"stale", hlc=stale_hlc)))
    assert r.get("exp:k") is None, "a stale pre-expiry record resurrected the key"
    assert state(cluster) == before
    ship(stub, batch(string_rec(b"exp:k", b"reborn", hlc=now_hlc())))
    assert r.get("exp:k") == b"reborn"
