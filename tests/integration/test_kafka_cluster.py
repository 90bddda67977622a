"""The Kafka gateway on three real nodes, with confluent-kafka (librdkafka): partition
leadership with NOT_LEADER_OR_FOLLOWER redirects, a producer on node 1 and a consumer group
on nodes 2 and 3, a SIGKILL of a partition leader under acks=all load (no acknowledged
record lost, no offset reused or going backwards), and what a failover does with the
entries the old leader had not replicated (docs/kafka.md, "On a cluster")."""

from __future__ import annotations

import threading
import time

import pytest

from tests.cluster import Cluster, wait_for
from tests.helpers import free_port

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from kafka.protocol.producer import ProduceRequest  # noqa: E402

from tests.kafka_helpers import batch, boot, consume, create, produce, request  # noqa: E402

pytestmark = pytest.mark.timeout(400)


def kafka_cluster(tmp_path, proxied: tuple[tuple[int, int], ...] = (), n: int = 3,
                  extra: tuple[str, ...] = ()) -> Cluster:
    """``n`` nodes (``extra``: more flags for each), each with a Kafka listener
    (``node.kport``), every node's listener in every node's Metadata; ``proxied``: directed
    links through a ``Proxy``."""
    ids = range(1, n + 1)
    kports = {i: free_port() for i in ids}
    kw = dict(n=n, extra=["--kafka-group-initial-rebalance-delay-ms", "0", *extra],
              per_node_extra={i: ["--kafka-port", str(p)] for i, p in kports.items()}, start=False)
    c = Cluster.with_proxies(tmp_path, proxied, **kw) if proxied else Cluster(tmp_path, **kw)
    for i, p in kports.items():
        c[i].kport = p
    c.start()
    for i in ids:
        admin = AdminClient({"bootstrap.servers": boot(c[i])})
        wait_for(lambda a=admin: len(a.list_topics(timeout=10).brokers) == n, 120,
                 f"node {i}'s Metadata names every node's Kafka listener")
    return c


def leaders(n, topic: str) -> dict[int, int]:
    md = AdminClient({"bootstrap.servers": boot(n)}).list_topics(topic, timeout=10).topics[topic]
    return {p: pm.leader for p, pm in md.partitions.items()}


def read_all(n, topic: str, partitions: list[int]) -> dict[int, list[tuple[int, bytes]]]:
    """Every record of ``partitions`` up to the high watermark, read through ``n``, in the
    order a consumer reads them."""
    c = Consumer({"bootstrap.servers": boot(n), "group.id": "audit", "enable.auto.commit": False})
    ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)[1] for p in partitions}
    c.assign([TopicPartition(topic, p, ck.OFFSET_BEGINNING) for p in partitions])
    out: dict[int, list[tuple[int, bytes]]] = {p: [] for p in partitions}
    deadline = time.monotonic() + 120
    while any(not out[p] or out[p][-1][0] < ends[p] - 1 for p in partitions if ends[p] > 0):
        assert time.monotonic() < deadline, f"read {({p: len(v) for p, v in out.items()})} up to {ends}"
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            out[m.partition()].append((m.offset(), m.value()))
    c.close()
    return out


def test_leaders_redirects_groups_and_a_leader_killed_under_acks_all_load(tmp_path):
    c = kafka_cluster(tmp_path)
    try:
        create(c[1], "t", 3, replicas=[[1, 2, 3], [2, 3, 1], [3, 1, 2]])
        for i in (1, 2, 3):  # every node names the same leaders
            wait_for(lambda n=c[i]: leaders(n, "t") == {0: 1, 1: 2, 2: 3}, 60, f"node {i} names the leaders")

        # a produce to a node that does not lead: NOT_LEADER_OR_FOLLOWER, with the leader
        r = request(c[1].kport, ProduceRequest, 10, {"acks": -1, "timeout_ms": 10000, "topic_data": [
            {"name": "t", "partition_data": [{"index": 1, "records": batch([b"misdirected"])}]}]})
        pr = r.responses[0].partition_responses[0]
        assert (pr.error_code, pr.current_leader.leader_id) == (6, 2)
        assert {(e.node_id, e.port) for e in r.node_endpoints} >= {(2, c[2].kport)}

        acked: list[tuple[int, int, bytes]] = []
        lock = threading.Lock()

        def report(err, m):
            if err is None:
                with lock:
                    acked.append((m.partition(), m.offset(), m.value()))

        # an idempotent producer bootstrapped on node 1 (acks=all, as the Java client's
        # default) and a group on nodes 2 and 3
        prod = Producer({"bootstrap.servers": boot(c[1]), "enable.idempotence": True, "linger.ms": 2,
                         "message.timeout.ms": 120000})
        seen: dict[int, list[tuple[int, int, bytes]]] = {2: [], 3: []}
        backwards: list[str] = []
        stop = threading.Event()

        def member(n: int) -> None:
            cons = Consumer({"bootstrap.servers": boot(c[n]), "group.id": "g", "auto.offset.reset": "earliest",
                             "auto.commit.interval.ms": 200, "session.timeout.ms": 6000,
                             "heartbeat.interval.ms": 300})
            last: dict[int, int] = {}
            cons.subscribe(["t"], on_assign=lambda cs, parts: last.clear())
            while not stop.is_set():
                m = cons.poll(0.2)
                if m is None or m.error() is not None:
                    continue
                p, o = m.partition(), m.offset()
                if o <= last.get(p, -1):
                    backwards.append(f"node {n} consumer read {p}/{o} after {p}/{last[p]}")
                last[p] = o
                seen[n].append((p, o, m.value()))
            cons.close()

        threads = [threading.Thread(target=member, args=(n,), daemon=True) for n in (2, 3)]
        for t in threads:
            t.start()
        sent = [0]
        load_stop = threading.Event()

        def load() -> None:
            while not load_stop.is_set():
                try:
                    prod.produce("t", value=b"%d" % sent[0], partition=sent[0] % 3, on_delivery=report)
                    sent[0] += 1
                except BufferError:
                    pass
                prod.poll(0.002)

        lt = threading.Thread(target=load, daemon=True)
        lt.start()
        try:
            wait_for(lambda: len(acked) >= 300, 120, "acks=all records acknowledged before the kill")
            c.kill9(2)  # the leader of partition 1 (and a group member's bootstrap node)
            at_kill = sent[0]
            wait_for(lambda: sum(1 for p, _, v in acked if p == 1 and int(v) > at_kill) >= 50, 180,
                     "partition 1's records acknowledged by its new leader")
            load_stop.set()
            lt.join(30)
            assert prod.flush(180) == 0
            want = {(p, o, v) for p, o, v in acked}
            wait_for(lambda: want <= {x for n in (2, 3) for x in seen[n]}, 180,
                     lambda: f"the group on nodes 2 and 3 read every acknowledged record "
                             f"({len(want - {x for n in (2, 3) for x in seen[n]})} missing)")
        finally:
            load_stop.set()
            stop.set()
            for t in threads + [lt]:
                t.join(30)
        assert not backwards, backwards[:5]
        # no offset reused: one offset per acknowledged record, and each holds its record
        assert len({(p, o) for p, o, _ in acked}) == len(acked)
        log = read_all(c[3], "t", [0, 1, 2])
        for p in range(3):
            offs = [o for o, _ in log[p]]
            assert offs == sorted(set(offs)), f"partition {p} read out of offset order"
        held = {(p, o): v for p, rows in log.items() for o, v in rows}
        lost = [(p, o, v) for p, o, v in acked if held.get((p, o)) != v]
        assert not lost, f"acknowledged records lost: {lost[:5]}"
        # offsets never go backwards across the failover: the new leader minted above every
        # offset of the old one (an entry id's origin is the node that minted it)
        entries = c.client(3).xrange("korvet:stream:t:1")
        minted: dict[int, list[int]] = {}
        for sid, _ in entries:
            ms, seq = (int(x) for x in sid.split(b"-"))
            minted.setdefault(seq >> 20, []).append(ms << 20 | (seq & 0xFFFFF))
        assert set(minted) - {2}, "the new leader minted nothing"
        assert max(minted[2]) < min(o for n, offs in minted.items() if n != 2 for o in offs)
    finally:
        c.stop()


def test_a_failover_keeps_the_entries_the_old_leader_had_not_replicated(tmp_path):
    c = kafka_cluster(tmp_path, proxied=((2, 1), (2, 3)))
    try:
        create(c[1], "f", 1, replicas=[[2, 1, 3]])
        wait_for(lambda: leaders(c[1], "f") == {0: 2}, 60, "node 2 leads f-0")
        first = produce(c[2], "f", [{"value": b"first-%d" % i} for i in range(5)], acks="all")
        # node 2's links hang: it still sees its peers, nothing it writes reaches them
        c.proxy(2, 1).stall()
        c.proxy(2, 3).stall()
        late = produce(c[2], "f", [{"value": b"late-%d" % i} for i in range(5)], acks=1)
        probe = Consumer({"bootstrap.servers": boot(c[2]), "group.id": "probe"})
        # above the high watermark: no consumer reads them
        assert first[-1][1] < probe.get_watermark_offsets(TopicPartition("f", 0), timeout=30)[1] <= late[0][1]
        probe.close()
        c.kill9(2)
        wait_for(lambda: leaders(c[1], "f")[0] in (1, 3), 60, "a new leader of f-0")
        new = produce(c[1], "f", [{"value": b"new-%d" % i} for i in range(5)], acks="all")
        group = {"group.id": "c", "auto.offset.reset": "earliest", "enable.auto.commit": False}
        got = consume(c[3], "f", [0], 10, **group)
        assert [m.value() for m in got] == [v for k in ("first", "new") for v in (b"%s-%d" % (k.encode(), i)
                                                                                 for i in range(5))]
        cons = Consumer({"bootstrap.servers": boot(c[3]), **group})
        cons.commit(offsets=[TopicPartition("f", 0, got[-1].offset() + 1)], asynchronous=False)
        cons.close()

        # node 2 comes back: its late entries arrive, with offsets of their own
        c.proxy(2, 1).heal()
        c.proxy(2, 3).heal()
        c.start_node(2)
        c.wait_converged(120)  # node 2's late entries are on every node, the new leader's claim on node 2
        assert c.client(1).xlen("korvet:stream:f:0") == 15
        late_offs = [o for _, o in late]
        new_offs = [o for _, o in new]
        assert not set(late_offs) & set(new_offs) & {o for _, o in first}
        view = {}
        for sid, fields in c.client(1).xrange("korvet:stream:f:0"):
            ms, seq = (int(x) for x in sid.split(b"-"))
            view[ms << 20 | (seq & 0xFFFFF)] = fields[b"value"]
        assert [view[o] for o in late_offs] == [b"late-%d" % i for i in range(5)]
        assert max(late_offs) < min(new_offs)  # minted before the failover, below the new leader's
        wait_for(lambda: leaders(c[2], "f") == leaders(c[1], "f"), 60, "node 2 names the new leader")
        # the group resumes past them; a reader from the start reads them in offset order
        produce(c[1], "f", [{"value": b"after"}], acks="all")
        assert [m.value() for m in consume(c[2], "f", [0], 1, offset=ck.OFFSET_STORED, **group)] == [b"after"]
        everything = read_all(c[2], "f", [0])[0]
        assert [o for o, _ in everything] == sorted(view) + [everything[-1][0]]
        assert len(everything) == 16
    finally:
        c.stop()


def _partition_meta(n, topic: str) -> tuple[int, int]:
    """(leader, leader epoch) of partition 0 of ``topic`` in ``n``'s Metadata (v9)."""
    from kafka.protocol.metadata import MetadataRequest
    r = request(n.kport, MetadataRequest, 9, {"topics": [(topic,)], "allow_auto_topic_creation": False,
                                              "include_cluster_authorized_operations": False,
                                              "include_topic_authorized_operations": False})
    part = r.topics[0][3][0] if r.topics[0][3] else None  # (error, name, internal, partitions, ...)
    assert part is not None, r
    return part[2], part[3]  # (error, index, leader, leader epoch, ...)


def test_a_producer_on_the_survivor_of_two_delivers_once_the_leader_is_back(tmp_path):
    """Two nodes; the partition's leader stops. The other node cannot lead alone (no
    majority) and says so: leader -1 with the epoch recorded, not the next one it would claim.
    A librdkafka producer that asks it meanwhile keeps the highest epoch it saw and ignores
    metadata with a lower one, so an epoch shown ahead and never claimed (the old leader comes
    back and leads on at its epoch) left the partition without a leader for that producer
    until its messages timed out (test_cluster_cli's restart test met it under load)."""
    kports = {i: free_port() for i in (1, 2)}
    c = Cluster(tmp_path, n=2, per_node_extra={i: ["--kafka-port", str(p)] for i, p in kports.items()},
                start=False)
    for i, p in kports.items():
        c[i].kport = p
    c.start()
    try:
        for i in (1, 2):
            admin = AdminClient({"bootstrap.servers": boot(c[i])})
            wait_for(lambda a=admin: len(a.list_topics(timeout=10).brokers) == 2, 120, f"node {i} names both")
        create(c[1], "back", 1)
        wait_for(lambda: _partition_meta(c[1], "back")[0] in (1, 2) and
                 _partition_meta(c[2], "back") == _partition_meta(c[1], "back"), 60, "a recorded leader on both")
        leader, epoch = _partition_meta(c[1], "back")
        other = 3 - leader
        c[leader].stop()
        wait_for(lambda: _partition_meta(c[other], "back")[0] == -1, 60, f"node {other} sees no leader")
        assert _partition_meta(c[other], "back") == (-1, epoch)  # (not epoch + 1: nobody claimed it)
        p = Producer({"bootstrap.servers": boot(c[other]), "message.timeout.ms": 90000})
        delivered: list[object] = []
        p.produce("back", value=b"after", on_delivery=lambda err, msg: delivered.append(err))
        p.poll(2)  # (it asks node `other`, which has no leader to name)
        c.start_node(leader)
        assert p.flush(120) == 0
        assert len(delivered) == 1 and delivered[0] is None, delivered
    finally:
        c.stop()
