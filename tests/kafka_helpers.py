"""Kafka test helpers: real clients (confluent-kafka) against nodes started with
``--kafka-port``, and raw requests for what a client library does not let a test send
(a produce to a node that does not lead, a batch with a chosen producer sequence).

A node here is a ``tests.helpers.Node`` with a ``kport`` attribute (its Kafka port).
"""

from __future__ import annotations

import socket
import struct
import threading
import time
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka import OFFSET_BEGINNING
from confluent_kafka.admin import AdminClient, NewTopic
from kafka.record.default_records import DefaultRecordBatchBuilder

from marekvs.gateway.kafka.protocol import message
from tests.helpers import CLIENT_TIMEOUT, Node, free_port


def kafka_node(data_dir, *extra: str, **kw) -> Node:
    """A node (not started) with a Kafka listener and no initial rebalance delay."""
    kport = free_port()
    n = Node(data_dir, extra=["--kafka-port", str(kport), "--kafka-group-initial-rebalance-delay-ms", "0", *extra],
             **kw)
    n.kport = kport
    return n


def module_node(*extra: str):
    """A module-scoped fixture: one started ``kafka_node`` (``extra``: more flags)."""

    @pytest.fixture(scope="module")
    def node(tmp_path_factory):
        n = kafka_node(tmp_path_factory.mktemp("kafka") / "data", *extra)
        n.start()
        yield n
        n.stop()

    return node


def boot(*nodes) -> str:
    return ",".join(f"127.0.0.1:{n.kport}" for n in nodes)


def create(n, topic: str, partitions: int, replicas: list[list[int]] | None = None, **configs) -> None:
    """Create ``topic`` through ``n`` (``replicas``: a replica assignment per partition,
    its first node the partition's leader)."""
    admin = AdminClient({"bootstrap.servers": boot(n)})
    cfg = {k.replace("_", "."): str(v) for k, v in configs.items()}
    nt = (NewTopic(topic, len(replicas), replica_assignment=replicas, config=cfg) if replicas
          else NewTopic(topic, partitions, 1, config=cfg))
    admin.create_topics([nt], operation_timeout=30)[topic].result(60)


def produce(n, topic: str, msgs: list[dict], **conf) -> list[tuple[int, int]]:
    """Produce ``msgs`` (produce() keyword arguments); returns (partition, offset) of each."""
    p = Producer({"bootstrap.servers": boot(n), "linger.ms": 5, **conf})
    got: list = [None] * len(msgs)

    def report(i):
        def cb(err, m):
            got[i] = err or (m.partition(), m.offset())
        return cb

    for i, m in enumerate(msgs):
        p.produce(topic, on_delivery=report(i), **m)
    assert p.flush(60) == 0
    assert all(isinstance(x, tuple) for x in got), got
    return got


def consume(n, topic: str, partitions: list[int], count: int, offset: int = OFFSET_BEGINNING, **conf) -> list:
    """``count`` records of ``partitions`` read from ``offset`` (fewer if they do not come
    within a minute)."""
    c = Consumer({"bootstrap.servers": boot(n), "group.id": "reader", "enable.auto.commit": False, **conf})
    c.assign([TopicPartition(topic, p, offset) for p in partitions])
    out = []
    deadline = time.monotonic() + 60
    while len(out) < count and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is None:
            continue
        assert m.error() is None, m.error()
        out.append(m)
    c.close()
    return out


# -- raw requests ---------------------------------------------------------------------------

def request(port: int, req_cls: Any, version: int, fields: dict[str, Any], resp_cls: Any = None,
            sock: socket.socket | None = None) -> Any:
    """Send one request (kafka-python's struct ``req_cls`` with ``fields``) and decode the
    response (``resp_cls``: by default the request class's ``...Response`` sibling)."""
    if resp_cls is None:
        import importlib

        mod = importlib.import_module(req_cls.__module__)
        resp_cls = getattr(mod, req_cls.__name__[:-len("Request")] + "Response")
    r = message(req_cls, fields, version)
    r.with_header(correlation_id=1, client_id="raw")
    data = bytes(r.encode(header=True, framed=True))
    own = sock is None
    s = sock or socket.create_connection(("127.0.0.1", port), timeout=CLIENT_TIMEOUT)
    try:
        s.sendall(data)
        size = struct.unpack(">i", _read(s, 4))[0]
        return resp_cls.decode(_read(s, size), version=version, header=True)
    finally:
        if own:
            s.close()


def _read(s: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        d = s.recv(n - len(out))
        if not d:
            raise ConnectionError("closed by the server")
        out += d
    return out


def batch(values: list[bytes], producer_id: int = -1, epoch: int = -1, base_sequence: int = -1, codec: int = 0,
          transactional: bool = False) -> bytes:
    """One record batch (message format 2) of ``values``."""
    b = DefaultRecordBatchBuilder(2, codec, transactional, producer_id, epoch, base_sequence, 1 << 30)
    now = int(time.time() * 1000)
    for i, v in enumerate(values):
        b.append(i, now, None, v, [])
    return bytes(b.build())


class ResponseDropper:
    """A TCP proxy in front of a Kafka listener (the node advertises the proxy's port with
    ``--kafka-advertise-port``, so every client connection goes through it). It forwards
    both ways; after ``drop(n)``, the next ``n`` Produce responses are not forwarded: the
    client's connection is closed instead, so the batch is stored and the producer never
    hears of it, and retries it."""

    def __init__(self, target_port: int):
        self.target = target_port
        self.port = free_port()
        self.to_drop = 0
        self.dropped = 0
        self._lock = threading.Lock()
        self._sock = socket.create_server(("127.0.0.1", self.port))
        self._sock.settimeout(0.2)
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def drop(self, n: int) -> None:
        with self._lock:
            self.to_drop = n

    def close(self) -> None:
        self._closed = True
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target), timeout=CLIENT_TIMEOUT)
            except OSError:
                client.close()
                continue
            produces: set[int] = set()  # correlation ids of the Produce requests sent
            for args in ((client, upstream, produces, True), (upstream, client, produces, False)):
                threading.Thread(target=self._pump, args=args, daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, produces: set[int], requests: bool) -> None:
        try:
            while True:
                size = _read(src, 4)
                frame = _read(src, struct.unpack(">i", size)[0])
                if requests:
                    key, _, corr = struct.unpack_from(">hhi", frame)
                    if key == 0:
                        produces.add(corr)
                else:
                    corr = struct.unpack_from(">i", frame)[0]
                    with self._lock:
                        drop = corr in produces and self.to_drop > 0
                        if drop:
                            self.to_drop -= 1
                            self.dropped += 1
                    if drop:
                        break
                dst.sendall(size + frame)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                s.close()
