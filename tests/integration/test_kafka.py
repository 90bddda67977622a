"""The Kafka gateway on one real node, with real clients: confluent-kafka (librdkafka) and
kcat. Round trips (keys, headers, timestamps, null values), the Redis view of the same
topic (XRANGE of what was produced; an entry XADDed in Korvet's layout read by Kafka
consumers), offsets unique and increasing, ListOffsets, long-poll fetch, a consumer group
whose members join and leave while records flow (every record once), commit and resume,
bad input (the node keeps serving), and a full disk (produce gets KAFKA_STORAGE_ERROR)."""

from __future__ import annotations

import os
import shutil
import socket
import struct
import subprocess
import threading
import time

import pytest

from tests.cluster import wait_for

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402

from kafka.protocol.producer import ProduceRequest  # noqa: E402

from tests.kafka_helpers import batch, boot, consume, create, kafka_node, module_node, produce, request  # noqa: E402

pytestmark = pytest.mark.timeout(300)


node = module_node()


def test_round_trip_with_keys_headers_timestamps_and_null_values(node):
    create(node, "rt", 2)
    msgs = [{"key": b"k%d" % i, "value": b"v%d" % i, "partition": i % 2, "headers": [("h", b"x%d" % i), ("h", b"y")],
             "timestamp": 1_700_000_000_000 + i} for i in range(20)]
    msgs.append({"key": None, "value": None, "partition": 0})  # a tombstone with no key
    placed = produce(node, "rt", msgs)
    got = consume(node, "rt", [0, 1], len(msgs))
    assert len(got) == len(msgs)
    by_off = {(m.partition(), m.offset()): m for m in got}
    assert set(by_off) == set(placed)  # the producer's offsets are the consumer's
    for msg, where in zip(msgs, placed):
        m = by_off[where]
        assert (m.key(), m.value()) == (msg["key"], msg["value"])
        if msg["value"] is not None:
            assert m.headers() == msg["headers"]
            assert m.timestamp() == (ck.TIMESTAMP_CREATE_TIME, msg["timestamp"])
    for p in (0, 1):  # offsets strictly increase in the order a consumer reads them
        offs = [m.offset() for m in got if m.partition() == p]
        assert offs == sorted(set(offs))


def test_redis_view_and_records_added_by_redis(node):
    create(node, "view", 1)
    placed = produce(node, "view", [{"key": b"a", "value": b"1", "headers": [("src", b"web")]},
                                    {"value": b"2"}])
    r = node.client()
    entries = r.xrange("korvet:stream:view:0")
    assert [f for _, f in entries][0][b"key"] == b"a"
    assert entries[0][1][b"value"] == b"1" and entries[0][1][b"header.src"] == b"web"
    assert b"timestamp" in entries[1][1] and b"key" not in entries[1][1]
    # the id maps to the offset the producer was given: ms << 20 | counter
    ms, seq = (int(x) for x in entries[0][0].split(b"-"))
    assert placed[0][1] == ms << 20 | (seq & 0xFFFFF)
    assert r.hget("korvet:topic:view", "partitions") == b"1"
    assert r.sismember("korvet:topics", "view")
    tid = r.hget("korvet:topic:view", "id")
    assert r.hget("korvet:topic-ids", tid) == b"view"
    # an entry a Redis client adds in the layout is a record to Kafka consumers
    r.xadd("korvet:stream:view:0", {"key": "from-redis", "value": "3", "timestamp": "1700000000000"})
    got = consume(node, "view", [0], 3)
    assert [(m.key(), m.value()) for m in got] == [(b"a", b"1"), (None, b"2"), (b"from-redis", b"3")]
    assert got[2].timestamp()[1] == 1_700_000_000_000


def test_kcat_reads_and_list_offsets(node):
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed (apt-get install kcat)")
    create(node, "cat", 1)
    t0 = int(time.time() * 1000)
    placed = produce(node, "cat", [{"key": b"k%d" % i, "value": b"v%d" % i, "timestamp": t0 + i * 10}
                                   for i in range(5)])
    out = subprocess.run(["kcat", "-b", boot(node), "-C", "-t", "cat", "-o", "beginning", "-e", "-f", "%o %k %s\n"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")[:5]
    assert lines == [f"{off} k{i} v{i}" for i, (_, off) in enumerate(placed)]
    c = Consumer({"bootstrap.servers": boot(node), "group.id": "lo"})
    lo, hi = c.get_watermark_offsets(TopicPartition("cat", 0), timeout=30)
    assert (lo, hi) == (0, placed[-1][1] + 1)  # nothing deleted yet: the log starts at 0
    found = c.offsets_for_times([TopicPartition("cat", 0, t0 + 25)], timeout=30)
    assert found[0].offset == placed[3][1]  # the first record with timestamp >= t0 + 25
    c.close()
    # kcat produces too: a record read back by XRANGE
    subprocess.run(["kcat", "-b", boot(node), "-P", "-t", "cat", "-k", "kk"], input="from-kcat\n", text=True,
                   check=True, timeout=60)
    assert node.client().xrevrange("korvet:stream:cat:0", count=1)[0][1][b"value"] == b"from-kcat"


def test_long_poll_fetch_is_woken_by_a_produce(node):
    create(node, "poll", 1)
    c = Consumer({"bootstrap.servers": boot(node), "group.id": "poller", "fetch.wait.max.ms": 10000,
                  "enable.auto.commit": False})
    c.assign([TopicPartition("poll", 0, ck.OFFSET_END)])
    c.poll(1)  # the consumer is now parked in a long-poll fetch
    threading.Timer(1.0, lambda: produce(node, "poll", [{"value": b"wake"}])).start()
    t0 = time.monotonic()
    m = None
    while m is None and time.monotonic() - t0 < 30:
        m = c.poll(0.2)
    c.close()
    assert m is not None and m.value() == b"wake"
    assert time.monotonic() - t0 < 9  # woken by the append, not by fetch.wait.max.ms


def test_group_members_join_and_leave_while_records_flow(node):
    create(node, "grp", 4)
    total = 200
    seen: dict[str, list[tuple[int, int]]] = {}
    assigned: dict[str, set[int]] = {}  # member -> the partitions it holds now
    stop = threading.Event()

    def member(name: str, until: threading.Event):
        c = Consumer({"bootstrap.servers": boot(node), "group.id": "workers", "auto.offset.reset": "earliest",
                      "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 200,
                      "partition.assignment.strategy": "cooperative-sticky"})
        mine = seen.setdefault(name, [])
        owned = assigned.setdefault(name, set())

        def revoked(cons, parts):  # hand over what was processed before the partitions move
            owned.difference_update(p.partition for p in parts)
            try:
                cons.commit(asynchronous=False)
            except ck.KafkaException:
                pass

        def assign(cons, parts):  # (cooperative-sticky: the partitions added)
            owned.update(p.partition for p in parts)

        c.subscribe(["grp"], on_assign=assign, on_revoke=revoked)
        while not until.is_set() and not stop.is_set():
            m = c.poll(0.2)
            if m is None or m.error():
                continue
            mine.append((m.partition(), m.offset()))
            try:
                c.commit(m, asynchronous=False)
            except ck.KafkaException:  # REBALANCE_IN_PROGRESS / ILLEGAL_GENERATION, as from Kafka
                pass
        c.close()  # leaves the group: its partitions move to the others

    leave = threading.Event()
    threads = [threading.Thread(target=member, args=("a", stop), daemon=True),
               threading.Thread(target=member, args=("b", leave), daemon=True)]
    for t in threads:
        t.start()
    produce(node, "grp", [{"value": b"%d" % i, "partition": i % 4} for i in range(total // 2)])
    wait_for(lambda: len(seen.get("a", [])) + len(seen.get("b", [])) >= total // 4, 60, "first records consumed")
    late = threading.Thread(target=member, args=("c", stop), daemon=True)
    late.start()  # 2 -> 3 members
    # (the rest is produced once c holds partitions: else a and b could consume it all
    # before c's join completes, and c would have nothing to show)
    wait_for(lambda: assigned.get("c"), 60, "partitions assigned to the member that joined late")
    leave.set()  # then b leaves: 3 -> 2
    produce(node, "grp", [{"value": b"%d" % i, "partition": i % 4} for i in range(total // 2, total)])
    try:
        wait_for(lambda: len({x for v in seen.values() for x in v}) >= total, 90,
                 lambda: f"all records consumed ({len({x for v in seen.values() for x in v})} of {total})")
    finally:
        stop.set()
        leave.set()
    for t in threads + [late]:
        t.join(30)
    everything = [x for v in seen.values() for x in v]
    assert len(set(everything)) == total
    # every commit is made before a partition moves (on revoke): no record is processed twice
    assert len(everything) == total, f"{len(everything) - total} records processed twice"
    assert seen["c"], "the member that joined late got partitions"
    r = node.client()
    committed = {p: int(r.get(f"korvet:commit:korvet:stream:grp:{p}:workers")) for p in range(4)}
    for p in range(4):
        assert committed[p] == max(o for q, o in everything if q == p) + 1


def test_commit_stop_and_resume_from_the_committed_offset(node):
    create(node, "resume", 1)
    produce(node, "resume", [{"value": b"%d" % i} for i in range(10)])
    conf = {"bootstrap.servers": boot(node), "group.id": "resumers", "auto.offset.reset": "earliest",
            "enable.auto.commit": False}
    c = Consumer(conf)
    c.subscribe(["resume"])
    first = []
    deadline = time.monotonic() + 60
    while len(first) < 4 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            first.append(m)
    c.commit(first[-1], asynchronous=False)
    c.close()
    c = Consumer(conf)
    c.subscribe(["resume"])
    rest = []
    deadline = time.monotonic() + 60
    while len(rest) < 6 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            rest.append(m)
    assert c.committed([TopicPartition("resume", 0)], timeout=30)[0].offset == first[-1].offset() + 1
    c.close()
    assert [m.value() for m in first + rest] == [b"%d" % i for i in range(10)]


def _frame(api_key: int, version: int, body: bytes = b"") -> bytes:
    head = struct.pack(">hhih", api_key, version, 1, -1) + body
    return struct.pack(">i", len(head)) + head


def _closed(port: int, data: bytes) -> bool:
    with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
        s.sendall(data)
        try:
            return s.recv(1 << 16) == b""
        except ConnectionResetError:
            return True


def test_bad_input_closes_the_connection_and_the_node_keeps_serving(node):
    assert _closed(node.kport, _frame(9999, 0))  # unknown API key
    assert _closed(node.kport, _frame(3, 99))  # unknown version of a known API
    assert _closed(node.kport, struct.pack(">i", 200 * 1024 * 1024))  # larger than the request limit
    assert _closed(node.kport, _frame(19, 4, b"\x00\x00\x00\x05garbage"))  # a body that does not parse
    # ApiVersions of a version this node does not know: the v0 answer with UNSUPPORTED_VERSION
    with socket.create_connection(("127.0.0.1", node.kport), timeout=30) as s:
        s.sendall(_frame(18, 99))
        size = struct.unpack(">i", s.recv(4))[0]
        body = b""
        while len(body) < size:
            body += s.recv(size - len(body))
    assert struct.unpack(">ih", body[:6]) == (1, 35)
    assert _closed(node.kport, struct.pack(">i", -1))  # a negative size
    with socket.create_connection(("127.0.0.1", node.kport), timeout=30) as s:  # a frame cut short, then gone
        s.sendall(_frame(3, 12)[:9])
    # a record batch whose CRC does not match: CORRUPT_MESSAGE, nothing stored; a partition
    # the topic does not have: UNKNOWN_TOPIC_OR_PARTITION
    create(node, "crc", 1)
    good = bytearray(batch([b"payload"]))
    good[-1] ^= 0xFF
    r = request(node.kport, ProduceRequest, 9, {"acks": -1, "timeout_ms": 30000, "topic_data": [
        {"name": "crc", "partition_data": [{"index": 0, "records": bytes(good)},
                                           {"index": 7, "records": batch([b"x"])}]}]})
    assert [p.error_code for p in r.responses[0].partition_responses] == [2, 3]
    assert node.client().exists("korvet:stream:crc:0") == 0
    create(node, "still", 1)
    assert produce(node, "still", [{"value": b"ok"}])
    assert node.client().ping()


def test_a_full_disk_answers_produce_with_kafka_storage_error_and_recovers(tmp_path):
    from tests.integration.test_full_disk import _fill, _mount_tmpfs

    mnt = tmp_path / "data"
    if not _mount_tmpfs(mnt, "48m"):
        pytest.skip("needs root and mount(8) for a small tmpfs")
    n = kafka_node(mnt, durability="always")
    try:
        n.start()
        create(n, "disk", 1)
        before = produce(n, "disk", [{"value": b"before"}])
        _fill(mnt)

        def misconf() -> int:  # a RESP write makes the node find its disk full: how many are refused
            refused = 0
            # (on a node of shard workers each finds it on its own write: the worker of
            # "probe", and that of the partition's stream, which a hash tag names)
            for key in ("probe", "{korvet:stream:disk:0}probe"):
                try:
                    with n.client(socket_timeout=10) as r:
                        r.set(key, "x")
                except Exception as e:  # the first write's connection closes unanswered, later ones get MISCONF
                    refused += str(e).startswith("MISCONF")
            return refused
        wait_for(lambda: misconf() == 2, 60, "writes refused with MISCONF")
        p = Producer({"bootstrap.servers": boot(n), "retries": 0, "acks": 1, "message.timeout.ms": 30000})
        errs = []
        p.produce("disk", value=b"refused", on_delivery=lambda err, m: errs.append(err))
        p.flush(60)
        assert [e.code() for e in errs] == [ck.KafkaError.KAFKA_STORAGE_ERROR], errs
        os.unlink(mnt / "filler")
        wait_for(lambda: misconf() == 0, 60, "the node takes writes again")
        after = produce(n, "disk", [{"value": b"after"}])
        got = consume(n, "disk", [0], 2)
        assert [(m.offset(), m.value()) for m in got] == [(before[0][1], b"before"), (after[0][1], b"after")]
    finally:
        n.stop()
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
