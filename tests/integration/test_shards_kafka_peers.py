"""The Kafka gateway on nodes of two shard workers with peers (docs/kafka.md, "On a node of
shard workers"): acks=all waits for the peers' acknowledgements of every worker's log the
produce wrote on (``marekvs/gateway/kafka/replicas.py``), not only worker 0's.

- Two nodes of two workers, a topic whose partitions' streams are on both workers: every
  record an idempotent confluent-kafka producer had acknowledged with acks=all (the
  producer's state records on either worker too) is on the other node at its offset
  the moment the producer has its acknowledgement (RESP reads there, through each of its
  workers), and a consumer bootstrapped on the other node reads them all.
- The peer stopped (SIGSTOP of its every process): a produce with acks=all to partitions of
  both workers answers REQUEST_TIMED_OUT after its timeout, exactly as a node of one process
  does (the same test on nodes of one process), a produce after SIGCONT is acknowledged,
  and with the peer killed the produce answers NOT_LEADER_OR_FOLLOWER (no majority).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from tests.cluster import Cluster, wait_for
from tests.integration.test_shards import children, worker_of
from tests.integration.test_shards_kafka import stored

ck = pytest.importorskip("confluent_kafka")
from kafka.protocol.producer import ProduceRequest  # noqa: E402

from tests.integration.test_kafka_cluster import kafka_cluster, leaders  # noqa: E402
from tests.kafka_helpers import batch, consume, create, produce, request  # noqa: E402

pytestmark = pytest.mark.timeout(300)

PARTITIONS = 8
REQUEST_TIMED_OUT = 7
NOT_LEADER = 6  # NOT_LEADER_OR_FOLLOWER


def two_nodes(tmp_path, shards: int) -> Cluster:
    """Two nodes of ``shards`` workers each (explicit ``--shards``), each with a Kafka port."""
    return kafka_cluster(tmp_path, n=2, extra=("--shards", str(shards)))


def led(c: Cluster, topic: str) -> dict[int, int]:
    """partition -> its leader, once both nodes name the same leader for every partition."""
    return wait_for(lambda: (lambda a, b: a if a == b and all(x in (1, 2) for x in a.values()) else None)(
        leaders(c[1], topic), leaders(c[2], topic)), 60, f"{topic}'s leaders on both nodes")


def test_acks_all_records_are_on_the_peer_from_both_workers(tmp_path):
    c = two_nodes(tmp_path, 2)
    try:
        topic = "spread"
        assert {worker_of(f"korvet:stream:{topic}:{p}") for p in range(PARTITIONS)} == {0, 1}
        create(c[1], topic, PARTITIONS)
        by = led(c, topic)
        assert set(by.values()) == {1, 2}  # (both nodes lead partitions: each waits for the other)
        msgs = [{"value": b"v%d" % i, "partition": i % PARTITIONS} for i in range(200)]
        got = produce(c[1], topic, msgs, acks="all", **{"enable.idempotence": True})  # (its state: any worker)
        acked = {(p, off): m["value"] for (p, off), m in zip(got, msgs)}
        # acks=all: acknowledged once the peer has it, whichever worker's log holds it
        for node in (c[1], c[2]):
            for w in (0, 1):
                on = stored(node.port, topic, w)
                missing = {k for k in acked if on.get(k) != acked[k]}
                assert not missing, f"node {node.node_id} (through worker {w}) lacks {sorted(missing)[:5]}"
        r2 = c.client(2)
        assert all(r2.hlen(f"korvet:producers:{topic}:{p}") == 1 for p in range(PARTITIONS))
        assert {worker_of(f"korvet:producers:{topic}:{p}") for p in range(PARTITIONS)} == {0, 1}
        read = consume(c[2], topic, list(range(PARTITIONS)), len(msgs))
        assert {(m.partition(), m.offset()): m.value() for m in read} == acked
    finally:
        c.stop()


def _produce_raw(port: int, topic: str, parts: list[int], timeout_ms: int) -> dict[int, int]:
    r = request(port, ProduceRequest, 7, {"transactional_id": None, "acks": -1, "timeout_ms": timeout_ms,
                                          "topic_data": [{"name": topic, "partition_data": [
                                              {"index": p, "records": batch([b"p%d" % p])} for p in parts]}]})
    return {pr.index: pr.error_code for pr in r.responses[0].partition_responses}


def _signal_node(node, sig: int) -> None:
    for pid in [node.pid, *children(node.pid)]:
        os.kill(pid, sig)


@pytest.mark.parametrize("shards", [1, 2])
def test_acks_all_with_the_peer_stopped_times_out_as_on_one_process(tmp_path, shards):
    c = two_nodes(tmp_path, shards)
    stopped = False
    try:
        topic = "held"
        create(c[1], topic, PARTITIONS)
        by = led(c, topic)
        mine = [p for p, n in by.items() if n == 1]
        assert {worker_of(f"korvet:stream:{topic}:{p}") for p in mine} == {0, 1}  # (node 1 leads on both)
        assert _produce_raw(c[1].kport, topic, mine, 30000) == {p: 0 for p in mine}
        _signal_node(c[2], signal.SIGSTOP)
        stopped = True
        for w in (0, 1):  # (a request per worker: one for worker 1 alone writes nothing on worker 0)
            on = [p for p in mine if worker_of(f"korvet:stream:{topic}:{p}") == w]
            t0 = time.monotonic()
            assert _produce_raw(c[1].kport, topic, on, 1500) == {p: REQUEST_TIMED_OUT for p in on}, w
            assert time.monotonic() - t0 >= 1.4
        _signal_node(c[2], signal.SIGCONT)
        stopped = False
        assert _produce_raw(c[1].kport, topic, mine, 30000) == {p: 0 for p in mine}
        c.kill9(2)  # down: node 1 alone is no majority of two, so it leads nothing
        for w in (0, 1):
            on = [p for p in mine if worker_of(f"korvet:stream:{topic}:{p}") == w]
            wait_for(lambda on=on: _produce_raw(c[1].kport, topic, on, 1500) == {p: NOT_LEADER for p in on}, 60,
                     f"NOT_LEADER_OR_FOLLOWER for worker {w}'s partitions")
    finally:
        if stopped:
            _signal_node(c[2], signal.SIGCONT)
        c.stop()
