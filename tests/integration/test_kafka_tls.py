"""The Kafka listener over TLS (``kafka_tls yes``) on a real node with real clients:
confluent-kafka (librdkafka) with ``security.protocol`` SSL and SASL_SSL, and ``kcat -X
security.protocol=ssl``. The client tls-* settings apply (a client without a certificate
signed by the CA is refused at the handshake under ``tls-auth-clients yes``), a plaintext
Kafka client on the TLS port and a handshake that stalls are closed with a log line while
the node keeps serving, a CONFIG SET of the certificate files serves the Kafka connections
accepted after it, and a node without a certificate or a Kafka port for ``kafka_tls`` does
not start."""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import time
from pathlib import Path

import pytest

from tests.cluster import wait_for

ck = pytest.importorskip("confluent_kafka")
from confluent_kafka import KafkaException  # noqa: E402
from confluent_kafka.admin import AdminClient  # noqa: E402
from kafka.protocol.metadata import MetadataRequest  # noqa: E402

from marekvs.launcher import certs  # noqa: E402
from tests.helpers import CLIENT_TIMEOUT, Node, free_port  # noqa: E402
from tests.kafka_helpers import boot, consume, kafka_node, produce, request  # noqa: E402

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")]


HANDSHAKE_TIMEOUT = 2  # the node's tls_handshake_timeout (s)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = certs.make_pki(tmp_path_factory.mktemp("pki"), ["node1"], clients=["client"])
    certs.make_cert(d, "rotated", hosts=certs.LOCAL_HOSTS)  # what a rotation puts in place
    return d


@pytest.fixture(scope="module")
def node(tmp_path_factory, pki):
    """A plaintext RESP port and a TLS-only Kafka port (tls-auth-clients yes, the default);
    the ACL user alice for SASL."""
    n = kafka_node(tmp_path_factory.mktemp("kafka-tls") / "data", "--kafka-tls", "yes", *certs.node_args(pki, "node1"),
                   "--tls-handshake-timeout", str(HANDSHAKE_TIMEOUT))
    n.start()
    n.client().execute_command("ACL", "SETUSER", "alice", "on", ">alice-pw", "~*", "+@all")
    yield n
    n.stop()


def ssl_conf(pki: Path, cert: str | None = "client") -> dict[str, str]:
    conf = {"security.protocol": "SSL", "ssl.ca.location": str(pki / "ca.pem")}
    if cert is not None:
        conf.update({"ssl.certificate.location": str(pki / f"{cert}.pem"),
                     "ssl.key.location": str(pki / f"{cert}.key")})
    return conf


def sasl_ssl_conf(pki: Path, password: str) -> dict[str, str]:
    return {**ssl_conf(pki), "security.protocol": "SASL_SSL", "sasl.mechanism": "PLAIN",
            "sasl.username": "alice", "sasl.password": password}


def refused(n, conf: dict[str, str]) -> bool:
    """Does a client with ``conf`` fail to get the cluster's metadata?"""
    admin = AdminClient({"bootstrap.servers": boot(n), **conf})
    try:
        admin.list_topics(timeout=5)
    except KafkaException:
        return True
    return False


def server_cn(n, pki: Path) -> str:
    """The CN of the certificate the Kafka port presents to a new connection."""
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    with ctx.wrap_socket(socket.create_connection(("127.0.0.1", n.kport), timeout=CLIENT_TIMEOUT),
                         server_hostname="127.0.0.1") as s:
        return dict(x[0] for x in s.getpeercert()["subject"])["commonName"]


def test_ssl_and_sasl_ssl_round_trips(node, pki):
    msgs = [{"key": b"k%d" % i, "value": b"v%d" % i, "headers": [("h", b"%d" % i)]} for i in range(20)]
    placed = produce(node, "tls-topic", msgs, **ssl_conf(pki))
    got = consume(node, "tls-topic", [0], 20, **ssl_conf(pki))
    assert [(m.offset(), m.key(), m.value(), m.headers()) for m in got] == [
        (o, m["key"], m["value"], m["headers"]) for (_, o), m in zip(placed, msgs)]
    assert node.client().xlen("korvet:stream:tls-topic:0") == 20  # the Redis view of the same topic
    # SASL PLAIN inside TLS: alice's password is checked, a wrong one refused and logged
    placed = produce(node, "sasl-tls", [{"value": b"for alice"}], **sasl_ssl_conf(pki, "alice-pw"))
    got = consume(node, "sasl-tls", [0], 1, **sasl_ssl_conf(pki, "alice-pw"))
    assert [(m.offset(), m.value()) for m in got] == [(placed[0][1], b"for alice")]
    assert refused(node, sasl_ssl_conf(pki, "wrong"))
    assert any(e["username"] == "alice" for e in node.client().acl_log())


def test_a_client_without_a_ca_signed_certificate_is_refused_at_the_handshake(node, pki, tmp_path):
    rogue = certs.make_pki(tmp_path / "rogue", [], clients=["client"])  # another CA's client certificate
    assert refused(node, ssl_conf(pki, None))
    assert refused(node, {**ssl_conf(rogue), "ssl.ca.location": str(pki / "ca.pem")})
    log = node.log_text()
    for why in ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "CERTIFICATE_VERIFY_FAILED"):
        assert f"Error accepting a Kafka client connection: {why}" in log, why
    assert not refused(node, ssl_conf(pki))


def test_a_plaintext_kafka_client_on_the_tls_port_is_closed_and_the_node_keeps_serving(node, pki):
    before = node.log_text().count("Error accepting a Kafka client connection")
    assert refused(node, {})  # librdkafka, PLAINTEXT
    with pytest.raises((ConnectionError, socket.timeout, OSError)):  # a raw Metadata request, no TLS
        request(node.kport, MetadataRequest, 1, {"topics": None})
    # a handshake that stalls is closed after tls_handshake_timeout
    with socket.create_connection(("127.0.0.1", node.kport), timeout=60) as s:
        t0 = time.monotonic()
        assert s.recv(1) == b""
        assert time.monotonic() - t0 >= HANDSHAKE_TIMEOUT - 0.5
    wait_for(lambda: node.log_text().count("Error accepting a Kafka client connection") >= before + 3, 30,
             "the handshake failures' log lines")
    assert node.client().ping()
    [(_, offset)] = produce(node, "after-plain", [{"value": b"x"}], **ssl_conf(pki))
    assert [(m.offset(), m.value()) for m in consume(node, "after-plain", [0], 1, **ssl_conf(pki))] == [(offset, b"x")]


def test_kcat_over_ssl(node, pki):
    if shutil.which("kcat") is None:
        pytest.skip("kcat is not installed")
    flags = ["-b", boot(node), "-X", "security.protocol=ssl", "-X", f"ssl.ca.location={pki / 'ca.pem'}",
             "-X", f"ssl.certificate.location={pki / 'client.pem'}", "-X", f"ssl.key.location={pki / 'client.key'}"]
    r = subprocess.run(["kcat", *flags, "-P", "-t", "kcat-tls"], input=b"one\ntwo\nthree\n", capture_output=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(["kcat", *flags, "-C", "-t", "kcat-tls", "-o", "beginning", "-e", "-q"], capture_output=True,
                       timeout=120)
    assert (r.returncode, r.stdout) == (0, b"one\ntwo\nthree\n"), r.stderr


def test_a_certificate_rotated_by_config_set_serves_new_kafka_connections(node, pki):
    plain = node.client()
    assert server_cn(node, pki) == "node1"
    try:
        plain.config_set("tls-cert-file", str(pki / "rotated.pem"), "tls-key-file", str(pki / "rotated.key"))
        assert server_cn(node, pki) == "rotated"
        assert [p for p, _ in produce(node, "rotated", [{"value": b"r"}], **ssl_conf(pki))] == [0]
    finally:
        plain.config_set("tls-cert-file", str(pki / "node1.pem"), "tls-key-file", str(pki / "node1.key"))
    assert server_cn(node, pki) == "node1"


def test_kafka_tls_without_a_certificate_or_a_kafka_port_does_not_start(tmp_path):
    for i, extra in enumerate((["--kafka-port", str(free_port())], [])):
        n = Node(tmp_path / f"data{i}", extra=["--kafka-tls", "yes", *extra])
        with pytest.raises(RuntimeError, match="exited with"):
            n.start(timeout=60)
        n.stop()
        assert ("No tls-cert-file configured!" if extra else "kafka_tls yes needs a kafka_port") in n.log_text()
