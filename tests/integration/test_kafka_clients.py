"""The Kafka gateway with the pure-Python clients: kafka-python and aiokafka negotiate their
API versions with a node, round-trip records (keys, headers, null values, an idempotent
producer), and consume as a group of two members that share the partitions and commit."""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time

import pytest

from tests.cluster import wait_for
from tests.kafka_helpers import boot, create, module_node, produce

kafka = pytest.importorskip("kafka")
aiokafka = pytest.importorskip("aiokafka")

pytestmark = pytest.mark.timeout(300)


node = module_node()


MSGS = [(b"k%d" % i, b"v%d" % i if i % 5 else None, [("h", b"%d" % i)]) for i in range(20)]


def _check(got: list[tuple[bytes | None, bytes | None, list]]) -> None:
    assert [(k, v) for k, v, _ in got] == [(k, v) for k, v, _ in MSGS]
    assert [list(h) for _, _, h in got] == [h for _, _, h in MSGS]


def test_kafka_python_round_trip_and_a_group(node):
    """Round trip, then a group of two members.

    Each member fetches the topic's metadata after it subscribes and before its first poll,
    and a commit that a rebalance refuses is left to the partition's next owner. The first
    avoids a bug of kafka-python 3.0.12's async join. It failed this test about once in 25
    runs under load, while the gateway answered as Kafka's GroupCoordinator does:
    - A member that joins before it has the topic's metadata leads a first generation with
      no partitions. Its consumer then sees that its assignment snapshot differs from the
      metadata, and joins again while its own ``rejoin_needed`` flag stays False.
    - If its ``poll`` times out while that join is in flight, the join still completes, and
      its assignment snapshot then matches the metadata. ``need_rejoin()`` answers False, so
      the finished join is never awaited: heartbeats stay disabled and the assignment is
      never applied.
    - The node expires it after the session timeout. The other member takes every
      partition, and the stuck member never learns it left the group.
    (kafka-python fixed the same race in its threaded join in PR #2617, for issue #2610.)"""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    create(node, "kp", 2)
    p = KafkaProducer(bootstrap_servers=boot(node), acks="all", enable_idempotence=True)
    futs = [p.send("kp", key=k, value=v, headers=h, partition=0) for k, v, h in MSGS]
    offsets = [f.get(timeout=60).offset for f in futs]
    c = KafkaConsumer(bootstrap_servers=boot(node), enable_auto_commit=False, consumer_timeout_ms=10000)
    c.assign([TopicPartition("kp", 0)])
    c.seek_to_beginning()
    got = [m for _, m in zip(range(len(MSGS)), c)]
    c.close()
    _check([(m.key, m.value, m.headers) for m in got])
    assert [m.offset for m in got] == offsets
    # two members of one group share the partitions; every record once, offsets committed.
    # The group's own records are produced once both members hold a partition: produced
    # before, the first member to join could read them all before the second one joined.
    seen: dict[str, list[tuple[int, int]]] = {"a": [], "b": []}
    assigned: dict[str, set[int]] = {"a": set(), "b": set()}
    stop = threading.Event()

    def member_loop(name: str) -> None:
        cons = KafkaConsumer(bootstrap_servers=boot(node), group_id="kp-group", auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=10000, heartbeat_interval_ms=300)
        # the consumer's snapshot of the topic taken before it joins (docstring: a kafka-python bug)
        cons.subscribe(["kp"])
        assert "kp" in cons.topics()
        while not stop.is_set():
            for tp, msgs in cons.poll(timeout_ms=200).items():
                seen[name] += [(tp.partition, m.offset) for m in msgs]
                try:
                    cons.commit()
                except (kafka.errors.CommitFailedError, kafka.errors.RebalanceInProgressError):
                    pass  # a rebalance began: the partition's next owner reads these again, and commits
            assigned[name] = {tp.partition for tp in cons.assignment()}
        cons.close()

    # kafka-python's group coordination log and the node's group generations, for a failure
    # (it failed twice in full-suite runs on a loaded machine: one member never got a partition)
    trace: collections.deque[str] = collections.deque(maxlen=300)
    failed: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            trace.append(f"{record.threadName} {record.name}: {record.getMessage()}")

    coord = logging.getLogger("kafka.coordinator")
    keep, level, propagate = Keep(), coord.level, coord.propagate
    coord.addHandler(keep)
    coord.setLevel(logging.DEBUG)
    coord.propagate = False  # (kept here, not in pytest's captured log)

    def member(name: str) -> None:  # (what ends a member's thread is reported)
        try:
            member_loop(name)
        except Exception as e:  # noqa: BLE001 - reported by the test
            failed.append(f"{name}: {e!r}")
            raise

    threads = [threading.Thread(target=member, args=(n,), name=n, daemon=True) for n in ("a", "b")]
    for t in threads:
        t.start()

    def state() -> str:
        groups = [ln for ln in node.log_text().splitlines() if "group kp-group" in ln][-6:]
        return (f"assigned {assigned}; member threads ended with {failed}; node: {groups}; "
                "kafka-python:\n" + "\n".join(list(trace)[-120:]))
    try:
        wait_for(lambda: assigned["a"] and assigned["b"] and not assigned["a"] & assigned["b"], 120,
                 lambda: f"both members hold a partition ({state()})")
        for i in range(40):
            p.send("kp", value=b"g%d" % i, partition=i % 2)
        p.flush(60)
        p.close()
        wait_for(lambda: len({x for v in seen.values() for x in v}) >= 60, 120, "the group read every record")
        wait_for(lambda: all(seen.values()), 60, lambda: f"both members read records (assigned {assigned})")
    finally:
        stop.set()
        for t in threads:
            t.join(30)
        coord.removeHandler(keep)
        coord.setLevel(level)
        coord.propagate = propagate
    assert len({x for v in seen.values() for x in v}) == 60
    r = node.client()
    assert int(r.get("korvet:commit:korvet:stream:kp:1:kp-group")) == max(o for p_, o in seen["a"] + seen["b"]
                                                                           if p_ == 1) + 1


def test_aiokafka_round_trip_and_a_group(node):
    create(node, "aio", 2)

    async def run() -> None:
        from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

        p = AIOKafkaProducer(bootstrap_servers=boot(node), enable_idempotence=True)
        await p.start()
        try:
            sent = [await p.send_and_wait("aio", key=k, value=v, headers=h, partition=0) for k, v, h in MSGS]
            c = AIOKafkaConsumer(bootstrap_servers=boot(node), enable_auto_commit=False)
            await c.start()
            try:
                tp = TopicPartition("aio", 0)
                c.assign([tp])
                await c.seek_to_beginning(tp)
                got = []
                while len(got) < len(MSGS):
                    got.append(await asyncio.wait_for(c.getone(), 30))
            finally:
                await c.stop()
            _check([(m.key, m.value, m.headers) for m in got])
            assert [m.offset for m in got] == [md.offset for md in sent]

            # the group's own records are produced once both members hold a partition (as above)
            members = [AIOKafkaConsumer("aio", bootstrap_servers=boot(node), group_id="aio-group",
                                        auto_offset_reset="earliest", enable_auto_commit=False,
                                        session_timeout_ms=10000, heartbeat_interval_ms=300) for _ in range(2)]
            for m in members:
                await m.start()
            seen: list[set[tuple[int, int]]] = [set(), set()]
            produced = False
            try:
                deadline = time.monotonic() + 120
                while len(seen[0] | seen[1]) < 60 or not all(seen):
                    assert time.monotonic() < deadline, (
                        f"read {len(seen[0] | seen[1])} of 60, assigned {[m.assignment() for m in members]}")
                    for i, m in enumerate(members):
                        for tp_, msgs in (await m.getmany(timeout_ms=200)).items():
                            seen[i] |= {(tp_.partition, x.offset) for x in msgs}
                            await m.commit()
                    held = [{t.partition for t in m.assignment()} for m in members]
                    if not produced and all(held) and not held[0] & held[1]:
                        for i in range(40):
                            await p.send_and_wait("aio", value=b"g%d" % i, partition=i % 2)
                        produced = True
            finally:
                for m in members:
                    await m.stop()
        finally:
            await p.stop()
        assert not seen[0] & seen[1] and len(seen[0] | seen[1]) == 60

    asyncio.run(run())
    assert produce(node, "aio", [{"value": b"still"}])  # and the node keeps serving librdkafka
