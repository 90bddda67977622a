"""The seeds' application (Korvet, a Kafka-wire broker whose topics are Redis streams:
/work/shared/seeds 000, 001 and 003) runs unmodified on marekvs.

- On one node, the Redis command sequences Korvet sends (topic metadata hash and set,
  ``korvet:topic-ids``, XADD with ``key``/``value``/``timestamp``/``header.*`` fields, XREAD
  COUNT from an entry id, XINFO STREAM's first-entry/last-entry/length, XGROUP CREATE at an
  id, XREADGROUP ``>``, XACK, the ``korvet:commit:{stream}:{group}`` SET) give the same
  results as on a stock redis-server, ids aside: each server's ids are named by the XADD
  that minted them, and replies are compared with those names.
- Korvet's stateless offset encoding ``(ms << N) | seq`` cannot carry marekvs ids (their
  sequence is at least 2^20): the round trip is pinned here, as docs/streams.md explains.
- On three nodes, producers on two nodes and consumers of one group on two other nodes:
  every produced record is consumed at least once, and none is delivered after its ack
  has replicated (a consumer checks, before each read, which acks its node already holds).
"""

from __future__ import annotations

import json
import random
import threading
import uuid

import pytest
import redis

from tests.cluster import Cluster, wait_for

pytestmark = pytest.mark.timeout(300)

KS = "korvet"
TOPIC = "orders"
PARTITIONS = 3
GROUP = "my-group"


def stream_key(p: int) -> str:
    return f"{KS}:stream:{TOPIC}:{p}"


def commit_key(p: int) -> str:
    return f"{KS}:commit:{stream_key(p)}:{GROUP}"


def _raw(c: redis.Redis) -> redis.Redis:
    for name in list(c.response_callbacks):
        if name.upper().startswith("X"):
            del c.response_callbacks[name]
    return c


class Names:
    """Each id a server minted, named after the XADD that minted it (G0, G1, ...). Ids are
    unique per stream (two streams may hold the same id, on either server), so a name is
    looked up in the stream a reply is about: the command's key, or, in XREAD's reply,
    each stream's own."""

    def __init__(self):
        self.names: dict[tuple[bytes, bytes], str] = {}

    def add(self, key: bytes, sid: bytes) -> None:
        self.names[(key, sid)] = f"G{len(self.names)}"

    def __call__(self, v, key: bytes, read_reply: bool = False):
        if read_reply and v:  # XREAD / XREADGROUP: [[key, entries], ...] or {key: entries}
            pairs = v.items() if isinstance(v, dict) else v
            return [[k, self(es, k)] for k, es in pairs]
        if isinstance(v, dict):
            return {self(k, key): self(x, key) for k, x in v.items()}
        if isinstance(v, (list, tuple)):
            out = []
            blank = False
            for x in v:
                out.append("R" if blank else self(x, key))
                blank = isinstance(x, bytes) and x in (b"radix-tree-keys", b"radix-tree-nodes")
            return out
        if isinstance(v, bytes):
            return self.names.get((key, v), v)
        return v


def record(i: int) -> list[str]:
    """One Kafka record as Korvet stores it (seed 003): key, value, timestamp, headers."""
    fields = ["key", f"order-{i}", "value", json.dumps({"product": "widget", "quantity": i}),
              "timestamp", str(1234567890000 + i)]
    if i % 2 == 0:
        fields += ["header.source", "web", "header.version", "1.0"]
    return fields


def korvet_session(c: redis.Redis) -> list:
    """What Korvet sends for: create a topic, produce, fetch standalone, then fetch and
    commit as a consumer group. Returns every reply with the server's ids named."""
    names = Names()
    out = []

    def call(*args):
        try:
            reply = c.execute_command(*args)
        except redis.ResponseError as e:
            reply = ("error", str(e))
        streams = [str(a).encode() for a in args if str(a).startswith(f"{KS}:stream:")]
        out.append((args, names(reply, streams[0] if streams else b"", args[0] in ("XREAD", "XREADGROUP"))))
        return reply

    topic_id = "5f0c6d3c-6d5f-4f4e-9d6e-0a4c4a6c3b11"
    # topic metadata (seed 000): the hash, the set of topics, the id -> name hash
    call("HSET", f"{KS}:topic:{TOPIC}", "id", topic_id, "name", TOPIC, "partitions", PARTITIONS,
         "retentionTime", 604800000, "retentionBytes", -1, "compression", "none", "valueType", "JSON",
         "offsetSequenceBits", 10, "messageBytes", 512)
    call("SADD", f"{KS}:topics", TOPIC)
    call("HSET", f"{KS}:topic-ids", topic_id, TOPIC)
    call("SISMEMBER", f"{KS}:topics", TOPIC)
    call("HGET", f"{KS}:topic-ids", topic_id)
    call("HGETALL", f"{KS}:topic:{TOPIC}")
    # produce (seed 003): one XADD per record, '*' ids
    ids: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    for i in range(12):
        p = i % PARTITIONS
        sid = c.execute_command("XADD", stream_key(p), "*", *record(i))
        names.add(stream_key(p).encode(), sid)
        ids[p].append(sid)
        out.append((("XADD", p), names(sid, stream_key(p).encode())))
    # fetch, standalone (seed 001): partition metadata, then XREAD COUNT from an entry id
    for p in range(PARTITIONS):
        call("XINFO", "STREAM", stream_key(p))
    call("XREAD", "COUNT", 100, "STREAMS", stream_key(0), ids[0][0])
    call("XREAD", "COUNT", 2, "STREAMS", stream_key(1), "0-0")
    call("XREAD", "COUNT", 100, "STREAMS", stream_key(0), stream_key(1), ids[0][-1], ids[1][1])
    # fetch as a group: the group is created at the fetch offset's entry, then '>'
    call("XGROUP", "CREATE", stream_key(0), GROUP, ids[0][1])
    call("XGROUP", "CREATE", stream_key(1), GROUP, "0")
    for p in (0, 1):
        got = call("XREADGROUP", "GROUP", GROUP, "consumer-1", "COUNT", 100, "STREAMS", stream_key(p), ">")
        delivered = [sid for _, es in (got.items() if isinstance(got, dict) else got) for sid, _ in es]
        call("XACK", stream_key(p), GROUP, *delivered)
        # the explicit committed offset (seed 000): Korvet's own SET
        call("SET", commit_key(p), 44 + p)
    call("XREADGROUP", "GROUP", GROUP, "consumer-1", "COUNT", 100, "STREAMS", stream_key(0), ">")
    call("XPENDING", stream_key(0), GROUP)
    call("XINFO", "GROUPS", stream_key(0))
    call("GET", commit_key(0))
    call("MGET", commit_key(0), commit_key(1))
    call("XGROUP", "CREATE", stream_key(0), GROUP, "0")  # a second create: BUSYGROUP
    return out


@pytest.mark.parametrize("proto", [2, 3])
def test_korvet_s_commands_give_redis_s_results_ids_aside(shared_node, real_redis, proto):
    got = []
    for server in (shared_node, real_redis):
        c = _raw(server.client(protocol=proto, socket_timeout=10))
        c.flushall()
        got.append(korvet_session(c))
        c.close()
    assert len(got[0]) == len(got[1])
    for (cmd, mine), (_, theirs) in zip(*got):
        assert mine == theirs, cmd


def encode_offset(sid: bytes, bits: int) -> int:
    ms, seq = map(int, sid.split(b"-"))
    return (ms << bits) | seq


def decode_offset(offset: int, bits: int) -> bytes:
    return b"%d-%d" % (offset >> bits, offset & ((1 << bits) - 1))


def test_korvet_s_offset_encoding_cannot_carry_marekvs_ids(shared_node, real_redis):
    """docs/streams.md: with N of 10-16 bits, a Redis id (sequence < 2^N) survives
    ``(ms << N) | seq``; a marekvs id (sequence = origin << 20 | counter >= 2^20) does not:
    it decodes to another millisecond, so a fetch from that offset reads the wrong place."""
    for server, fits in ((real_redis, True), (shared_node, False)):
        c = server.client(socket_timeout=10)
        c.flushall()
        ids = [c.xadd("s", {"k": "v"}) for _ in range(5)]
        for bits in (10, 16):
            assert all((decode_offset(encode_offset(sid, bits), bits) == sid) is fits for sid in ids)
        c.close()


# -- three nodes: producers and consumers on different nodes ---------------------------------

class Producer(threading.Thread):
    def __init__(self, cluster: Cluster, node: int, n: int, seed: int):
        super().__init__(daemon=True)
        self.c = _raw(cluster.client(node, protocol=2))
        self.n, self.rng, self.node = n, random.Random(seed), node
        self.produced: set[tuple[bytes, bytes]] = set()  # (stream key, id): ids are unique per stream
        self.error: BaseException | None = None

    def run(self):
        try:
            for i in range(self.n):
                p = self.rng.randrange(PARTITIONS)
                fields = record(i) + ["header.producer", str(self.node)]
                sid = self.c.execute_command("XADD", stream_key(p), "*", *fields)
                self.produced.add((stream_key(p).encode(), sid))
        except BaseException as e:  # reported by the test
            self.error = e


class Consumer(threading.Thread):
    """A group member on one node: XREADGROUP '>' over every partition, XACK what it got,
    then (after the acks, on the same node, so it replicates after them) SADD the acked
    ids to a set. Before each read it takes that set as its node holds it: an entry
    delivered that was already in it was delivered after its ack had replicated."""

    def __init__(self, cluster: Cluster, node: int, name: str, stop: threading.Event):
        super().__init__(daemon=True)
        self.c = _raw(cluster.client(node, protocol=2))
        self.node, self.name, self.stop = node, name, stop
        self.delivered: list[tuple[bytes, bytes]] = []  # (stream key, id)
        self.after_ack: list[tuple[bytes, bytes]] = []
        self.error: BaseException | None = None

    def run(self):
        try:
            keys = [stream_key(p) for p in range(PARTITIONS)]
            idle = 0
            while idle < 3 or not self.stop.is_set():
                acked_here = set(self.c.smembers(f"{KS}:acked"))  # "<key> <id>" members
                got = self.c.execute_command("XREADGROUP", "GROUP", GROUP, self.name, "COUNT", 20,
                                             "BLOCK", 50, "STREAMS", *keys, *[">"] * len(keys))
                if not got:
                    idle += 1
                    continue
                idle = 0
                for key, entries in got:
                    ids = [sid for sid, _ in entries]
                    self.delivered += [(key, sid) for sid in ids]
                    self.after_ack += [(key, sid) for sid in ids if key + b" " + sid in acked_here]
                    self.c.execute_command("XACK", key, GROUP, *ids)
                    self.c.execute_command("SET", f"{KS}:commit:{key.decode()}:{GROUP}", ids[-1])
                    self.c.sadd(f"{KS}:acked", *[key + b" " + sid for sid in ids])
        except BaseException as e:  # reported by the test
            self.error = e


def test_korvet_on_three_nodes_consumes_every_record_once_acked_never_again(tmp_path):
    c = Cluster(tmp_path, n=3)
    try:
        c.wait_streaming(30)
        setup = c.client(1)
        for p in range(PARTITIONS):
            setup.execute_command("XGROUP", "CREATE", stream_key(p), GROUP, "$", "MKSTREAM")
        setup.hset(f"{KS}:topic:{TOPIC}", mapping={"id": str(uuid.uuid4()), "partitions": PARTITIONS})
        c.wait_converged(60)
        stop = threading.Event()
        consumers = [Consumer(c, 2, "consumer-a", stop), Consumer(c, 3, "consumer-b", stop)]
        producers = [Producer(c, 1, 150, 1), Producer(c, 2, 150, 2)]
        for t in consumers + producers:
            t.start()
        for t in producers:
            t.join(120)
            assert not t.is_alive() and t.error is None, t.error
        produced = producers[0].produced | producers[1].produced
        assert len(produced) == 300  # two nodes never mint the same id in a stream

        def all_consumed():
            seen = set(consumers[0].delivered) | set(consumers[1].delivered)
            return set(produced) <= seen

        wait_for(all_consumed, 120, "every produced record consumed")
        stop.set()
        for t in consumers:
            t.join(120)
            assert not t.is_alive() and t.error is None, t.error
        c.wait_converged(90)
        delivered = consumers[0].delivered + consumers[1].delivered
        assert set(delivered) == set(produced)
        assert consumers[0].after_ack == [] and consumers[1].after_ack == [], "delivered after its ack"
        dups = len(delivered) - len(set(delivered))
        print(f"300 records, {len(delivered)} deliveries on 2 nodes, {dups} at-least-once duplicates")
        for i in (1, 2, 3):
            cl = _raw(c.client(i, protocol=2))
            for p in range(PARTITIONS):
                assert cl.execute_command("XPENDING", stream_key(p), GROUP)[0] == 0
                assert cl.execute_command("XREADGROUP", "GROUP", GROUP, "late", "STREAMS", stream_key(p), ">") \
                    is None
            assert sum(cl.xlen(stream_key(p)) for p in range(PARTITIONS)) == 300
            cl.close()
        setup.close()
    finally:
        c.stop()


def test_korvet_s_committed_offset_and_fetch_from_it_work_across_nodes(tmp_path):
    """A consumer commits on node 1 (the korvet:commit SET of an entry id) and resumes,
    after a failover, on node 2 with XREAD from the committed id: it sees exactly the
    records after it, including those produced on node 3 meanwhile."""
    c = Cluster(tmp_path, n=3)
    try:
        c.wait_streaming(30)
        n1, n2, n3 = (_raw(c.client(i, protocol=2)) for i in (1, 2, 3))
        first = [n1.execute_command("XADD", stream_key(0), "*", *record(i)) for i in range(5)]
        got = n1.execute_command("XREAD", "COUNT", 3, "STREAMS", stream_key(0), "0-0")
        assert [sid for sid, _ in got[0][1]] == first[:3]
        n1.set(commit_key(0), first[2])
        c.wait_converged(60)
        more = [n3.execute_command("XADD", stream_key(0), "*", *record(i)) for i in range(5, 8)]
        c.wait_converged(60)
        committed = n2.get(commit_key(0))
        assert committed == first[2]
        resumed = n2.execute_command("XREAD", "COUNT", 100, "STREAMS", stream_key(0), committed)
        assert [sid for sid, _ in resumed[0][1]] == first[3:] + more
        info = n2.execute_command("XINFO", "STREAM", stream_key(0))
        info = dict(zip(info[::2], info[1::2]))
        assert info[b"length"] == 8 and info[b"first-entry"][0] == first[0] and info[b"last-entry"][0] == more[-1]
        for cl in (n1, n2, n3):
            cl.close()
    finally:
        c.stop()
