"""The Kafka gateway's producer, security and topic features on real nodes with real
clients (confluent-kafka, librdkafka): the idempotent producer (InitProducerId, a retried
batch stored once, sequence and epoch errors), transactions refused with Kafka's error,
SASL PLAIN over marekvs ACL users, DescribeConfigs, retention by time and by bytes, every
compression codec both ways, records near max.message.bytes, and auto-creation off."""

from __future__ import annotations

import socket
import time

import pytest

from tests.cluster import wait_for

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic  # noqa: E402
from kafka.protocol.consumer import FetchRequest  # noqa: E402
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest  # noqa: E402
from kafka.protocol.sasl import SaslAuthenticateRequest, SaslHandshakeRequest  # noqa: E402
from kafka.record.memory_records import MemoryRecords  # noqa: E402

from tests.helpers import free_port  # noqa: E402
from tests.kafka_helpers import (ResponseDropper, batch, boot, consume, create, kafka_node, produce,  # noqa: E402
                                 request)

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """One node whose Kafka clients all go through a ResponseDropper; retention checked
    every 200 ms."""
    kport = free_port()
    proxy = ResponseDropper(kport)
    n = kafka_node(tmp_path_factory.mktemp("kafka") / "data", "--kafka-advertise-port", str(proxy.port),
                   "--kafka-retention-check-interval-ms", "200")
    n.extra[n.extra.index("--kafka-port") + 1] = str(kport)
    n.start()
    n.kport = proxy.port
    n.proxy = proxy
    yield n
    n.stop()
    proxy.close()


def _produce_raw(port: int, topic: str, records: bytes, version: int = 9, sock=None):
    r = request(port, ProduceRequest, version, {"acks": -1, "timeout_ms": 30000, "topic_data": [
        {"name": topic, "partition_data": [{"index": 0, "records": records}]}]}, sock=sock)
    return r.responses[0].partition_responses[0]


def test_an_idempotent_producer_retrying_stores_each_batch_once(node):
    create(node, "idem", 1)
    p = Producer({"bootstrap.servers": boot(node), "enable.idempotence": True, "linger.ms": 5})
    acked = []
    p.produce("idem", value=b"warm-up", on_delivery=lambda e, m: acked.append((e, m.offset())))
    assert p.flush(60) == 0
    node.proxy.drop(2)  # the next two produce responses are lost: the producer retries those batches
    for i in range(20):
        p.produce("idem", value=b"%d" % i, on_delivery=lambda e, m: acked.append((e, m.offset())))
        p.poll(0.01)
    assert p.flush(120) == 0
    assert node.proxy.dropped == 2
    assert all(e is None for e, _ in acked), acked
    assert node.client().xlen("korvet:stream:idem:0") == 21  # each retried batch stored once
    got = consume(node, "idem", [0], 21)
    assert [m.value() for m in got] == [b"warm-up"] + [b"%d" % i for i in range(20)]
    assert [m.offset() for m in got] == [o for _, o in acked]


def test_producer_sequences_and_epochs_are_checked(node):
    create(node, "seq", 1)
    pids = [request(node.kport, InitProducerIdRequest, 4, {"transactional_id": None, "transaction_timeout_ms": 0,
                                                           "producer_id": -1, "producer_epoch": -1})
            for _ in range(2)]
    assert [r.error_code for r in pids] == [0, 0] and pids[0].producer_id != pids[1].producer_id
    pid = pids[0].producer_id
    first = _produce_raw(node.kport, "seq", batch([b"a", b"b"], pid, 0, 0))
    again = _produce_raw(node.kport, "seq", batch([b"a", b"b"], pid, 0, 0))  # a retry of the same batch
    assert (first.error_code, again.error_code) == (0, 0) and again.base_offset == first.base_offset
    assert _produce_raw(node.kport, "seq", batch([b"c"], pid, 0, 5)).error_code == 45  # OUT_OF_ORDER_SEQUENCE
    assert _produce_raw(node.kport, "seq", batch([b"c"], pid, 0, 2)).error_code == 0
    # InitProducerId v3+ with its id and epoch: the same id, the next epoch; the old epoch is fenced
    bumped = request(node.kport, InitProducerIdRequest, 4, {"transactional_id": None, "transaction_timeout_ms": 0,
                                                            "producer_id": pid, "producer_epoch": 0})
    assert (bumped.producer_id, bumped.producer_epoch) == (pid, 1)
    assert _produce_raw(node.kport, "seq", batch([b"d"], pid, 1, 3)).error_code == 45  # a new epoch starts at 0
    assert _produce_raw(node.kport, "seq", batch([b"d"], pid, 1, 0)).error_code == 0
    assert _produce_raw(node.kport, "seq", batch([b"e"], pid, 0, 3)).error_code == 47  # INVALID_PRODUCER_EPOCH
    assert [f[b"value"] for _, f in node.client().xrange("korvet:stream:seq:0")] == [b"a", b"b", b"c", b"d"]


def test_transactions_are_refused_with_kafkas_error(node):
    p = Producer({"bootstrap.servers": boot(node), "transactional.id": "tx-1"})
    t0 = time.monotonic()
    with pytest.raises(KafkaException) as e:
        p.init_transactions(60)
    assert e.value.args[0].code() == ck.KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    assert time.monotonic() - t0 < 30  # an answer, not a hang
    r = request(node.kport, InitProducerIdRequest, 4, {"transactional_id": "tx-1", "transaction_timeout_ms": 1000,
                                                       "producer_id": -1, "producer_epoch": -1})
    assert r.error_code == 53
    tx = _produce_raw(node.kport, "seq", batch([b"t"], 1 << 16 | 1, 0, 0, transactional=True))
    assert tx.error_code == 87  # INVALID_RECORD: a transactional batch is not stored


def test_describe_configs_of_a_topic_and_of_the_broker(node):
    create(node, "configured", 1, retention_ms=3600000, compression_type="zstd")
    admin = AdminClient({"bootstrap.servers": boot(node)})
    got = admin.describe_configs([ConfigResource("topic", "configured"), ConfigResource("broker", "1")])
    topic, broker = (f.result(30) for f in got.values())
    assert (topic["retention.ms"].value, topic["retention.ms"].source) == ("3600000", 1)  # DYNAMIC_TOPIC_CONFIG
    assert (topic["retention.bytes"].value, topic["retention.bytes"].source) == ("-1", 5)  # DEFAULT_CONFIG
    assert topic["compression.type"].value == "zstd"
    assert broker["log.retention.check.interval.ms"].value == "200" and broker["broker.id"].value == "1"
    missing = admin.describe_configs([ConfigResource("topic", "no-such-topic")])
    with pytest.raises(KafkaException):
        list(missing.values())[0].result(30)


def test_retention_by_bytes_and_by_time_trims_in_the_background(node):
    create(node, "by-bytes", 1, retention_bytes=5000)
    create(node, "by-time", 1, retention_ms=1000)
    placed = produce(node, "by-bytes", [{"value": b"v" * 100} for _ in range(200)])
    produce(node, "by-time", [{"value": b"old"}])
    r = node.client()
    # fields ~124 bytes an entry (value, timestamp and their names): about 40 entries stay
    wait_for(lambda: r.xlen("korvet:stream:by-bytes:0") <= 5000 // 100, 60, "by-bytes trimmed to 5000 bytes")
    assert r.xlen("korvet:stream:by-bytes:0") >= 5000 // 130
    wait_for(lambda: r.xlen("korvet:stream:by-time:0") == 0, 60, "by-time emptied after 1 s")
    c = Consumer({"bootstrap.servers": boot(node), "group.id": "retention"})
    lo, hi = c.get_watermark_offsets(TopicPartition("by-bytes", 0), timeout=30)
    c.close()
    kept = r.xlen("korvet:stream:by-bytes:0")
    assert (lo, hi) == (placed[-kept][1], placed[-1][1] + 1)  # the log starts at the first record kept
    got = consume(node, "by-bytes", [0], kept, **{"auto.offset.reset": "earliest"})
    assert [m.offset() for m in got] == [o for _, o in placed[-kept:]]
    # a consumer whose position was trimmed away resets, as on Kafka
    early = consume(node, "by-bytes", [0], 1, offset=placed[0][1], **{"auto.offset.reset": "earliest"})
    assert early[0].offset() == lo


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_every_codec_round_trips_both_ways(node, codec):
    topic = f"codec-{codec}"
    create(node, topic, 1, compression_type=codec)
    msgs = [{"key": b"k%d" % i, "value": b"%s record %d " % (codec.encode(), i) * 20} for i in range(50)]
    placed = produce(node, topic, msgs, **{"compression.type": codec})
    got = consume(node, topic, [0], 50)
    assert [(m.key(), m.value()) for m in got] == [(m["key"], m["value"]) for m in msgs]
    # what a fetch returns is compressed with the topic's codec
    r = request(node.kport, FetchRequest, 11, {
        "replica_id": -1, "max_wait_ms": 0, "min_bytes": 1, "max_bytes": 1 << 20, "isolation_level": 0,
        "session_id": 0, "session_epoch": -1, "rack_id": "", "forgotten_topics_data": [],
        "topics": [{"topic": topic, "partitions": [{"partition": 0, "fetch_offset": placed[0][1],
                                                    "partition_max_bytes": 1 << 20, "log_start_offset": -1,
                                                    "current_leader_epoch": -1}]}]})
    batch0 = MemoryRecords(bytes(r.responses[0].partitions[0].records)).next_batch()
    assert batch0.compression_type == {"gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}[codec]


def test_records_near_max_message_bytes(node):
    create(node, "big", 1)
    conf = {"message.max.bytes": 3_000_000, "compression.type": "none"}
    placed = produce(node, "big", [{"value": b"x" * 1_000_000}], **conf)
    got = consume(node, "big", [0], 1, **{"fetch.max.bytes": 3_000_000})
    assert got[0].offset() == placed[0][1] and len(got[0].value()) == 1_000_000
    p = Producer({"bootstrap.servers": boot(node), **conf, "retries": 0})
    errs = []
    p.produce("big", value=b"x" * 1_100_000, on_delivery=lambda e, m: errs.append(e))
    p.flush(60)
    assert [e.code() for e in errs] == [ck.KafkaError.MSG_SIZE_TOO_LARGE]


def test_sasl_plain_over_acl_users_and_auto_creation_off(tmp_path):
    n = kafka_node(tmp_path / "data", "--kafka-auto-create-topics", "no")
    n.start()
    try:
        r = n.client()
        r.execute_command("ACL", "SETUSER", "alice", "on", ">alice-pw", "~korvet:*", "+@all")
        r.execute_command("ACL", "SETUSER", "bob", "on", ">bob-pw", "~other:*", "+@all")
        r.execute_command("ACL", "SETUSER", "default", "on", ">admin-pw")
        sasl = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN"}
        alice = {**sasl, "sasl.username": "alice", "sasl.password": "alice-pw"}
        admin = AdminClient({"bootstrap.servers": boot(n), **alice})
        admin.create_topics([NewTopic("secure", 1, 1)])["secure"].result(60)
        placed = produce(n, "secure", [{"value": b"for alice"}], **alice)
        got = consume(n, "secure", [0], 1, **alice)
        assert [(m.offset(), m.value()) for m in got] == [(placed[0][1], b"for alice")]
        # bob's keys are other:*: the topic is not his
        p = Producer({"bootstrap.servers": boot(n), **sasl, "sasl.username": "bob", "sasl.password": "bob-pw",
                      "retries": 0})
        errs = []
        p.produce("secure", value=b"from bob", on_delivery=lambda e, m: errs.append(e))
        p.flush(60)
        assert [e.code() for e in errs] == [ck.KafkaError.TOPIC_AUTHORIZATION_FAILED]
        # a wrong password: SASL_AUTHENTICATION_FAILED, and the node logs it in ACL LOG
        bad = AdminClient({"bootstrap.servers": boot(n), **sasl, "sasl.username": "alice",
                           "sasl.password": "wrong"})
        with pytest.raises(KafkaException) as e:
            bad.list_topics(timeout=10)
        assert e.value.args[0].code() in (ck.KafkaError._AUTHENTICATION, ck.KafkaError._TRANSPORT,
                                          ck.KafkaError._TIMED_OUT)
        assert any(entry["username"] == "alice" for entry in n.client(password="admin-pw").acl_log())
        # raw: SaslHandshake v1, SaslAuthenticate, then a produce to a topic that does not
        # exist (auto-creation off): UNKNOWN_TOPIC_OR_PARTITION
        with socket.create_connection(("127.0.0.1", n.kport), timeout=30) as s:
            hs = request(n.kport, SaslHandshakeRequest, 1, {"mechanism": "PLAIN"}, sock=s)
            assert (hs.error_code, hs.mechanisms) == (0, ["PLAIN"])
            au = request(n.kport, SaslAuthenticateRequest, 2, {"auth_bytes": b"\0alice\0alice-pw"}, sock=s)
            assert au.error_code == 0
            assert _produce_raw(n.kport, "nowhere", batch([b"x"]), sock=s).error_code == 3
        with socket.create_connection(("127.0.0.1", n.kport), timeout=30) as s:
            hs = request(n.kport, SaslHandshakeRequest, 1, {"mechanism": "SCRAM-SHA-256"}, sock=s)
            assert hs.error_code == 33  # UNSUPPORTED_SASL_MECHANISM
    finally:
        n.stop()
