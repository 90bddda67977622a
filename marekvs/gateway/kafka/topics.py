"""Topics in Korvet's storage layout, and which node leads each partition.

Keys (``{p}`` is the prefix, ``korvet`` unless ``kafka_prefix`` says otherwise):

- ``{p}:stream:{topic}:{partition}``: the partition's records, one stream entry each, fields
  ``key``, ``value``, ``timestamp`` (ms) and ``header.<name>`` (a null key or value has no
  field; a null header value is stored empty);
- ``{p}:topic:{topic}``: hash ``id`` (a UUID), ``name``, ``partitions``, ``retentionTime``,
  ``retentionBytes``, ``compression``, ``valueType``, ``offsetSequenceBits`` (20: the offset
  is ``ms << 20 | counter``, ``offsets.py``), ``messageBytes`` (max.message.bytes);
- ``{p}:topics`` (set of names), ``{p}:topic-ids`` (hash id -> name);
- ``{p}:commit:{streamKey}:{group}``: a group's committed offset (a string, last writer wins);

and, beyond Korvet's, ``{p}:leaders:{topic}`` (hash partition -> ``epoch:node``, the
partition's leader), ``{p}:brokers`` (hash node id -> ``host:port`` of its Kafka
listener), ``{p}:producers:{topic}:{partition}`` (hash producer id -> its sequence state,
``producers.py``) and ``{p}:producer-ids:{node}`` (the counter of the producer ids a node
gave). All are ordinary replicated keys: a topic created on one node exists on every
node, and Redis clients see the same data.

Leadership. A partition has one leader at a time among the live nodes (this node and the
peers its replication links stream to). The leader is the one its record names while that
node is live; the record is written when the topic is created (rendezvous hashing of
``topic:partition`` over the live brokers spreads the partitions) and is sticky: a node
that comes back does not take its partitions back. When the recorded leader is not live,
the successor is the rendezvous choice among the live brokers; the successor claims the
partition by writing ``epoch+1:itself`` (every other node reports it as the leader at
once, so clients move there). A node leads and claims only while it sees a majority of the
nodes it knows and has applied what its live peers had when their links came up
(``KafkaGateway.can_lead``): a node that restarts or returns from a network partition
learns the latest claims before it acts on its own old record. Nodes whose views of who is
live differ can still both claim; the record's last writer wins and the other stops leading
when the record reaches it. Offsets stay unique meanwhile (``offsets.py``: each node mints
in a lane of its own).
"""

from __future__ import annotations

import re
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import xxhash

from marekvs.commands.reply import Err
from marekvs.commands.table import Command

LEGAL_NAME = re.compile(rb"^[a-zA-Z0-9._-]{1,249}$")
TOPIC_FIELDS = (b"id", b"name", b"partitions", b"retentionTime", b"retentionBytes", b"compression",
                b"valueType", b"offsetSequenceBits", b"messageBytes")
DEFAULT_MESSAGE_BYTES = 1048588  # Kafka's message.max.bytes
COMPRESSIONS = ("producer", "uncompressed", "none", "gzip", "snappy", "lz4", "zstd")
# on a node of shard workers: how long a record every request reads (a topic's hash, its
# leaders, the brokers) read on another worker is taken again without reading it there
# (``Layout.read``: so a round need not lock that worker for it)
KEEP_S = 0.1


class StoreError(Exception):
    """A command the gateway ran was refused (its error text)."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text

    @property
    def denied(self) -> bool:
        return self.text.startswith(("NOPERM", "NOAUTH"))


@dataclass
class Topic:
    name: bytes
    id: uuid.UUID
    partitions: int
    retention_ms: int = -1
    retention_bytes: int = -1
    compression: str = "producer"
    message_bytes: int = DEFAULT_MESSAGE_BYTES
    extra: dict[bytes, bytes] = field(default_factory=dict)


class Layout:
    """The key names (one place) and the commands the gateway runs on them."""

    def __init__(self, node: Any, prefix: str):
        self.node = node
        # on a node of shard workers (``rounds.py``): the mesh, and the context commands
        # carried to other workers run as
        self.mesh: Any = None
        self.carrier: Any = None
        self.rounds: Any = None
        self.known: dict[tuple[bytes, ...], Any] = {}  # (``read``)
        # (``read``) key -> (argv, reply, when read: monotonic) of another worker's records
        self.kept: dict[bytes, tuple[tuple[bytes, ...], Any, float]] = {}
        self.p = prefix.encode()
        self.topics_key = self.p + b":topics"
        self.topic_ids_key = self.p + b":topic-ids"
        self.brokers_key = self.p + b":brokers"
        self.groups_key = self.p + b":groups"

    # -- keys ---------------------------------------------------------------------------------
    def topic_key(self, topic: bytes) -> bytes:
        return self.p + b":topic:" + topic

    def stream_key(self, topic: bytes, partition: int) -> bytes:
        return b"%s:stream:%s:%d" % (self.p, topic, partition)

    def leaders_key(self, topic: bytes) -> bytes:
        return self.p + b":leaders:" + topic

    def producers_key(self, topic: bytes, partition: int) -> bytes:
        return b"%s:producers:%s:%d" % (self.p, topic, partition)

    def producer_ids_key(self, node_id: int) -> bytes:
        return b"%s:producer-ids:%d" % (self.p, node_id)

    def group_key(self, group: bytes) -> bytes:
        return self.p + b":group:" + group

    def commit_key(self, topic: bytes, partition: int, group: bytes) -> bytes:
        return b"%s:commit:%s:%s" % (self.p, self.stream_key(topic, partition), group)

    # -- commands -------------------------------------------------------------------------------
    def call(self, ctx: Any, *argv: bytes) -> Any:
        r = self.node.dispatch(ctx, list(argv)) if self.mesh is None else self._routed(ctx, list(argv))
        if type(r) is Err:
            raise StoreError(str(r))
        return r

    def _routed(self, ctx: Any, args: list[bytes], cached: int = 0) -> Any:
        """On a node of shard workers: admitted for ``ctx`` here, run where its keys are,
        in the round running (``rounds.py``): here for ``ctx``, else carried there for the
        gateway (``carrier``: one proxy on the sibling for every connection). A ``cached``
        read of another worker (``read``, ``cached``) is carried once per round: the round
        holds that worker from its first call there, so only the gateway's own writes change
        it meanwhile, and they drop it. A layout record (``read``: ``cached`` 2) read there
        is taken again for ``KEEP_S`` after, in later rounds too (``read`` says why), and
        so is not carried: its worker is not locked for it."""
        node, mesh = self.node, self.mesh
        cmd = node.admit(ctx, args)
        if not isinstance(cmd, Command):
            return cmd
        cache = self.rounds.cache
        if cmd.write:
            if cache:
                for a in args[1:]:
                    cache.pop(a, None)
            if self.kept:
                for a in args[1:]:
                    self.kept.pop(a, None)
        elif cached == 2:  # (``read``: a record kept from an earlier round, if still fresh)
            got = self.kept.get(args[-1])
            if got is not None and got[0] == tuple(args) and time.monotonic() - got[2] < KEEP_S:
                return got[1]
        if mesh.plan.where(ctx, cmd, args) is None:
            return node.execute(ctx, cmd, args)
        if mesh.session is None or cache is None:
            return Err("ERR internal error: the Kafka gateway ran a command of another shard worker outside a round")
        if not cached:
            return mesh.route(self.carrier, cmd, args)
        of_key = cache.setdefault(args[-1], {})  # (by the key it reads, its last argument)
        key = tuple(args)
        r = of_key.get(key)
        if r is None:
            r = mesh.route(self.carrier, cmd, args)
            if type(r) is not Err:
                of_key[key] = r
                if cached == 2 and r:  # (a record that is not there is read again: it may come)
                    self.kept[args[-1]] = (key, r, time.monotonic())
        return r

    def cached(self, ctx: Any, *argv: bytes) -> Any:
        """A read whose last argument is its key, carried once per round on a node of shard
        workers (``_routed``)."""
        if self.mesh is None:
            return self.call(ctx, *argv)
        r = self._routed(ctx, list(argv), cached=True)
        if type(r) is Err:
            raise StoreError(str(r))
        return r

    def read(self, ctx: Any, *argv: bytes) -> Any:
        """A read of the layout's records that every request makes (a topic's hash, its
        leaders, the brokers): on a node of shard workers, while the worker holding the key
        restarts (LOADING), what it read last, so the partitions of the other workers are
        served meanwhile (only this gateway writes these keys on a node without peers).

        One that is on another worker is taken again for ``KEEP_S`` after it was read there,
        in later rounds too, so that a round locks that worker only for what it writes or
        reads there otherwise (the stream of a partition there): the request's ACL check
        still runs here. It may then miss, for at most ``KEEP_S``, a change that a peer's
        replicated write or a Redis client made there (this gateway's own writes drop it):
        the peers' writes reach the node asynchronously anyway (a claim, a topic created on
        a peer: as if it came ``KEEP_S`` later), and a record that is not there (no topic
        yet) is never kept, so a topic created on a peer is not created again here."""
        if self.mesh is None:
            return self.call(ctx, *argv)
        r = self._routed(ctx, list(argv), cached=2)
        if type(r) is Err:
            if not r.startswith("LOADING") or argv not in self.known:
                raise StoreError(str(r))
            return self.known[argv]
        self.known[argv] = r
        return r

    def call_many(self, ctx: Any, key: bytes, commands: list[list[bytes]], tail: Command | None = None) -> Any:
        """Run ``commands`` on ``key`` (a produced batch's XADDs), stopping at the first
        refused (StoreError); on a node of shard workers carried to its worker in one frame,
        with the part command ``tail`` after them there (its reply returned: None here)."""
        mesh = self.mesh
        j = -1 if mesh is None else mesh.shards.shard_of_key(key)
        if j < 0 or j == mesh.index:
            for argv in commands:
                self.call(ctx, *argv)
            return None
        self._in_round()
        self.rounds.cache.pop(key, None)
        self.kept.pop(key, None)
        calls = []
        for argv in commands:
            cmd = self.node.admit(ctx, argv)
            if not isinstance(cmd, Command):
                raise StoreError(str(cmd))
            calls.append((cmd, argv))
        if tail is not None:
            calls.append((tail, [tail.name.encode()]))
        replies = mesh.carry(self.carrier, j, calls)
        for r in replies:
            if type(r) is Err:
                raise StoreError(str(r))
        return replies[-1] if tail is not None else None

    def carry_part(self, j: int, part: Command, args: list[bytes]) -> Any:
        """The part command ``part`` run on worker ``j`` for the gateway (in a round); None
        while that worker restarts."""
        self._in_round()
        r = self.mesh.carry(self.carrier, j, [(part, args)])[0]
        return None if type(r) is Err else r

    def _in_round(self) -> None:
        if self.mesh.session is None or self.rounds.cache is None:
            raise StoreError("ERR internal error: the Kafka gateway ran a command of another shard worker outside "
                             "a round")

    def topic(self, ctx: Any, name: bytes) -> Topic | None:
        flat = self.read(ctx, b"HGETALL", self.topic_key(name))
        if not flat:
            return None
        h = dict(zip(flat[::2], flat[1::2]))
        try:
            return Topic(name=h.get(b"name", name), id=uuid.UUID(h[b"id"].decode()),
                         partitions=int(h[b"partitions"]),
                         retention_ms=int(h.get(b"retentionTime", b"-1")),
                         retention_bytes=int(h.get(b"retentionBytes", b"-1")),
                         compression=h.get(b"compression", b"producer").decode(),
                         message_bytes=int(h.get(b"messageBytes", b"%d" % DEFAULT_MESSAGE_BYTES)),
                         extra={k: v for k, v in h.items() if k not in TOPIC_FIELDS})
        except (KeyError, ValueError):  # a hash that is not a topic's (written by hand)
            return None

    def topic_names(self, ctx: Any) -> list[bytes]:
        return sorted(self.call(ctx, b"SMEMBERS", self.topics_key))

    def topic_by_id(self, ctx: Any, tid: uuid.UUID) -> bytes | None:
        return self.call(ctx, b"HGET", self.topic_ids_key, str(tid).encode())

    def create_topic(self, ctx: Any, t: Topic, leaders: dict[int, int]) -> None:
        fields = [b"id", str(t.id).encode(), b"name", t.name, b"partitions", b"%d" % t.partitions,
                  b"retentionTime", b"%d" % t.retention_ms, b"retentionBytes", b"%d" % t.retention_bytes,
                  b"compression", t.compression.encode(), b"valueType", b"BYTES",
                  b"offsetSequenceBits", b"20", b"messageBytes", b"%d" % t.message_bytes]
        for k, v in t.extra.items():
            fields += [k, v]
        self.call(ctx, b"HSET", self.topic_key(t.name), *fields)
        self.call(ctx, b"HSET", self.topic_ids_key, str(t.id).encode(), t.name)
        self.call(ctx, b"HSET", self.leaders_key(t.name),
                  *[x for p, n in sorted(leaders.items()) for x in (b"%d" % p, b"0:%d" % n)])
        self.call(ctx, b"SADD", self.topics_key, t.name)

    def delete_topic(self, ctx: Any, t: Topic) -> None:
        self.call(ctx, b"DEL", self.topic_key(t.name), self.leaders_key(t.name),
                  *[self.stream_key(t.name, p) for p in range(t.partitions)],
                  *[self.producers_key(t.name, p) for p in range(t.partitions)])
        self.call(ctx, b"HDEL", self.topic_ids_key, str(t.id).encode())
        self.call(ctx, b"SREM", self.topics_key, t.name)

    def leaders(self, ctx: Any, topic: bytes) -> dict[int, tuple[int, int]]:
        """partition -> (epoch, node) as recorded."""
        flat = self.read(ctx, b"HGETALL", self.leaders_key(topic))
        out = {}
        for k, v in zip(flat[::2], flat[1::2]):
            try:
                epoch, node = v.split(b":")
                out[int(k)] = (int(epoch), int(node))
            except ValueError:
                continue
        return out

    def set_leader(self, topic: bytes, partition: int, epoch: int, node_id: int) -> tuple[bytes, ...]:
        """The command that records ``node_id`` as the leader of ``partition`` from ``epoch``."""
        return b"HSET", self.leaders_key(topic), b"%d" % partition, b"%d:%d" % (epoch, node_id)

    def brokers(self, ctx: Any) -> dict[int, tuple[str, int]]:
        flat = self.read(ctx, b"HGETALL", self.brokers_key)
        out = {}
        for k, v in zip(flat[::2], flat[1::2]):
            host, _, port = v.decode().rpartition(":")
            out[int(k)] = (host, int(port))
        return out

    def set_broker(self, node_id: int, host: str, port: int) -> tuple[bytes, ...]:
        """The command that records node ``node_id``'s Kafka listener address."""
        return b"HSET", self.brokers_key, b"%d" % node_id, f"{host}:{port}".encode()


def rendezvous(topic: bytes, partition: int, nodes: list[int]) -> int:
    """The node of ``nodes`` that ``topic:partition`` hashes highest with (rendezvous
    hashing: removing a node moves only its own partitions)."""
    return max(nodes, key=lambda n: (xxhash.xxh3_64_intdigest(b"%s:%d:%d" % (topic, partition, n)), n))
