"""The Kafka gateway on a node of two shard workers (docs/kafka.md, "On a node of shard
workers"): worker 0 serves the Kafka port, and each request's commands run where their keys
are, in rounds that lock both workers (``marekvs/gateway/kafka/rounds.py``).

- Topics whose partitions' streams (and commit keys) land on both workers: records produced
  with confluent-kafka are read by a kafka-python consumer group, each at the offset its
  producer was given; the group's commits (on both workers) resume a second member where
  the first stopped; RESP clients on either worker see every record in the streams.
- SIGKILL of each worker in turn under acks=all produce load with ``durability always``:
  every record the producer had acknowledged is at its offset afterwards.
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from tests.integration.test_shards import (
    DEADLINE,
    SHARDS,
    _cmdline,
    alive,
    children,
    client_on,
    wait_until,
    worker_of,
)
from tests.kafka_helpers import boot, create, kafka_node, produce

ck = pytest.importorskip("confluent_kafka")
kafka = pytest.importorskip("kafka")

pytestmark = pytest.mark.timeout(600)

PARTITIONS = 8


def start(tmp_path, durability: str = "no"):
    n = kafka_node(tmp_path / "data", "--shards", str(SHARDS), durability=durability)
    n.start()
    wait_until(lambda: len(children(n.pid)) == SHARDS, "the workers")
    return n


def streams_on_both(topic: str) -> None:
    owners = {worker_of(f"korvet:stream:{topic}:{p}") for p in range(PARTITIONS)}
    assert owners == {0, 1}, f"{topic}'s partitions are all on worker {owners}: pick another name"


def stored(port: int, topic: str, worker: int) -> dict[tuple[int, int], bytes]:
    """(partition, offset) -> value of every record of ``topic``, read with XRANGE by a RESP
    client on ``worker`` (an offset is ``ms << 20 | counter`` of the entry id)."""
    c = client_on(port, worker)
    try:
        out = {}
        for p in range(PARTITIONS):
            for sid, fields in c.xrange(f"korvet:stream:{topic}:{p}"):
                ms, seq = (int(x) for x in sid.split(b"-"))
                out[(p, ms << 20 | (seq & 0xFFFFF))] = fields.get(b"value")
        return out
    finally:
        c.close()


def test_produce_and_a_group_across_workers(tmp_path):
    from kafka import KafkaConsumer

    n = start(tmp_path)
    try:
        topic = "spread"
        streams_on_both(topic)
        create(n, topic, PARTITIONS)
        msgs = [{"key": b"k%d" % i, "value": b"v%d" % i, "partition": i % PARTITIONS} for i in range(400)]
        placed = produce(n, topic, msgs, acks="all")
        want = {where: m["value"] for where, m in zip(placed, msgs)}
        assert len(want) == len(msgs)  # (no offset given twice)
        for worker in range(SHARDS):  # the Redis view, through a connection on either worker
            assert stored(n.port, topic, worker) == want

        def member(count: int) -> tuple[KafkaConsumer, dict[tuple[int, int], bytes]]:
            cons = KafkaConsumer(topic, bootstrap_servers=boot(n), group_id="spread-group",
                                 auto_offset_reset="earliest", enable_auto_commit=False,
                                 session_timeout_ms=10000, heartbeat_interval_ms=300)
            got: dict[tuple[int, int], bytes] = {}
            deadline = time.monotonic() + DEADLINE
            while len(got) < count and time.monotonic() < deadline:
                for tp, records in cons.poll(timeout_ms=200).items():
                    for r in records:
                        assert (tp.partition, r.offset) not in got, "a record read twice"
                        got[(tp.partition, r.offset)] = r.value
            return cons, got

        first, got = member(len(msgs))
        assert got == want  # every record once, at the offset its producer was given
        first.commit()
        tps = sorted(first.assignment())
        assert len(tps) == PARTITIONS
        committed = {tp.partition: first.committed(tp) for tp in tps}
        last = {p: max(o for q, o in want if q == p) for p in range(PARTITIONS)}
        assert committed == {p: last[p] + 1 for p in range(PARTITIONS)}
        c = client_on(n.port, 1)  # the commit keys, on both workers
        keys = [f"korvet:commit:korvet:stream:{topic}:{p}:spread-group" for p in range(PARTITIONS)]
        assert {worker_of(k) for k in keys} == {0, 1}
        assert [int(v) for v in c.mget(keys)] == [committed[p] for p in range(PARTITIONS)]
        c.close()
        first.close()
        # a new member resumes at the commits: only what is produced after them
        more = [{"value": b"more%d" % i, "partition": i % PARTITIONS} for i in range(40)]
        placed_more = produce(n, topic, more)
        second, got = member(len(more))
        assert got == {where: m["value"] for where, m in zip(placed_more, more)}
        second.close()
    finally:
        n.stop()


class Producing(threading.Thread):
    """Produces with acks=all (not idempotent: a retry may store a record twice) and
    remembers where each acknowledged record went."""

    def __init__(self, n, topic: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.n, self.topic, self.stop = n, topic, stop
        self.acked: dict[bytes, tuple[int, int]] = {}
        self.errors: list[str] = []
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            p = ck.Producer({"bootstrap.servers": boot(self.n), "acks": "all", "enable.idempotence": False,
                             "linger.ms": 2, "retries": 1000000, "retry.backoff.ms": 50,
                             "message.timeout.ms": 120000, "reconnect.backoff.max.ms": 200})

            def report(err, m):
                if err is None:
                    self.acked[m.value()] = (m.partition(), m.offset())
                else:
                    self.errors.append(str(err))

            i = 0
            while not self.stop.is_set():
                p.produce(self.topic, value=b"v%d" % i, partition=i % PARTITIONS, on_delivery=report)
                i += 1
                p.poll(0.002)
            assert p.flush(DEADLINE) == 0
        except BaseException as e:  # (reported by the test)
            self.failure = e


class Consuming(threading.Thread):
    """Reads every partition from the beginning with confluent-kafka, through the kills."""

    def __init__(self, n, topic: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.n, self.topic, self.stop = n, topic, stop
        self.read: dict[tuple[int, int], bytes] = {}
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            c = ck.Consumer({"bootstrap.servers": boot(self.n), "group.id": "reader", "enable.auto.commit": False,
                             "reconnect.backoff.max.ms": 200})
            c.assign([ck.TopicPartition(self.topic, p, ck.OFFSET_BEGINNING) for p in range(PARTITIONS)])
            while not self.stop.is_set():
                m = c.poll(0.2)
                if m is not None and m.error() is None:
                    self.read[(m.partition(), m.offset())] = m.value()
            c.close()
        except BaseException as e:  # (reported by the test)
            self.failure = e


def worker_pid(n, index: int) -> int:
    return next(p for p in children(n.pid) if _cmdline(p)[_cmdline(p).index(b"--index") + 1] == b"%d" % index)


def kill(n, index: int) -> None:
    victim = worker_pid(n, index)
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: not alive(victim), f"worker {index} to die")
    wait_until(lambda: len(children(n.pid)) == SHARDS and victim not in children(n.pid),
               f"the supervisor to start worker {index} again")


def test_sigkill_of_a_worker_under_acks_all_produce_loses_no_acknowledged_record(tmp_path):
    n = start(tmp_path, durability="always")
    stop = threading.Event()
    producing = consuming = None
    try:
        topic = "acked"
        streams_on_both(topic)
        create(n, topic, PARTITIONS)
        producing = Producing(n, topic, stop)
        producing.start()
        reading = threading.Event()
        consuming = Consuming(n, topic, reading)
        consuming.start()
        wait_until(lambda: len(producing.acked) >= 100, "records acknowledged")
        for index in (1, 0):  # worker 0 serves the Kafka port: its clients connect again
            kill(n, index)
            before = len(producing.acked)
            wait_until(lambda b=before: len(producing.acked) >= b + 100, f"records acknowledged after worker {index}")
        stop.set()
        producing.join(DEADLINE)
        assert not producing.is_alive() and producing.failure is None, producing.failure
        assert not producing.errors, producing.errors[:5]
        found = stored(n.port, topic, 0)
        lost = [(v, where) for v, where in producing.acked.items() if found.get(where) != v]
        assert not lost, f"{len(lost)} acknowledged records not at their offsets, e.g. {lost[:5]}"
        # a consumer that fetched through the kills reads each of them at its offset too
        wait_until(lambda: all(where in consuming.read for where in producing.acked.values()),
                   "the consumer to read every acknowledged record")
        reading.set()
        consuming.join(DEADLINE)
        assert consuming.failure is None, consuming.failure
        assert all(consuming.read[where] == v for v, where in producing.acked.items())
        print(f"{len(producing.acked)} records acknowledged, {len(found)} stored, {len(consuming.read)} read")
        assert n.proc.poll() is None and len(children(n.pid)) == SHARDS
    finally:
        stop.set()
        for t in (producing, consuming):
            if t is not None:
                if t is consuming:
                    reading.set()
                t.join(DEADLINE)
        n.stop(timeout=DEADLINE)



def test_a_round_holds_only_the_workers_it_reaches(tmp_path):
    """A round locks worker 0, and a sibling only once a command reaches it (rounds.py): with
    worker 1 stopped (SIGSTOP: alive, its socket open, answering nothing), Metadata and
    produce for a partition whose records (and the topic's, the leaders' and the brokers'
    records: a prefix and a topic named for that) are on worker 0 are answered; a round that
    locked every worker waited for worker 1 (until the socket timeout here)."""
    from kafka.protocol.metadata import MetadataRequest
    from kafka.protocol.producer import ProduceRequest

    from tests.kafka_helpers import batch, request

    prefix = next(f"p{i}" for i in range(10_000) if {worker_of(f"p{i}:{k}") for k in ("brokers", "topics",
                                                                                    "topic-ids")} == {0})
    topic = next(f"t{i}" for i in range(10_000) if [worker_of(f"{prefix}:{k}:t{i}{s}") for k, s in (
        ("topic", ""), ("leaders", ""), ("stream", ":0"), ("stream", ":1"))] == [0, 0, 0, 1])
    n = kafka_node(tmp_path / "data", "--shards", str(SHARDS), "--kafka-prefix", prefix)
    n.start()
    stopped = 0
    try:
        wait_until(lambda: len(children(n.pid)) == SHARDS, "the workers")
        create(n, topic, 2)

        def produce_to(p: int, acks: int) -> tuple[int, int]:
            r = request(n.kport, ProduceRequest, 7, {"transactional_id": None, "acks": acks, "timeout_ms": 30000,
                                                     "topic_data": [{"name": topic, "partition_data": [
                                                         {"index": p, "records": batch([b"r%d" % p])}]}]})
            pr = r.responses[0].partition_responses[0]
            return pr.error_code, pr.base_offset

        assert produce_to(1, 1)[0] == 0  # (worker 1's partition, before)
        stopped = worker_pid(n, 1)
        os.kill(stopped, signal.SIGSTOP)
        md = request(n.kport, MetadataRequest, 9, {"topics": [(topic,)], "allow_auto_topic_creation": False,
                                                    "include_cluster_authorized_operations": False,
                                                    "include_topic_authorized_operations": False})
        assert md.topics[0][0] == 0 and len(md.topics[0][3]) == 2, md
        for acks in (1, -1):
            code, offset = produce_to(0, acks)
            assert code == 0 and offset > 0, (acks, code)
        os.kill(stopped, signal.SIGCONT)
        stopped = 0
        assert produce_to(1, -1)[0] == 0
        c = client_on(n.port, 1)
        assert c.xlen(f"{prefix}:stream:{topic}:0") == 2 and c.xlen(f"{prefix}:stream:{topic}:1") == 2
        c.close()
    finally:
        if stopped:
            os.kill(stopped, signal.SIGCONT)
        n.stop(timeout=DEADLINE)
