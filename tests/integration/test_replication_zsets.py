"""Sorted sets and geo on a real 3-node cluster (processes on loopback, real gRPC).

Concurrent random zset and geo commands on all three nodes conflict on a few keys (adds,
increments, removals, pops, range removals, stores, DEL, GEOADD). Once the writers stop:

- every node's DEBUG DIGEST is equal (the member records converged), and the nodes
  answer every range, rank and score query alike;
- every node's score index covers its members: each live member record has an index
  record at its current score (the index is a hint its readers confirm against the
  members, so its own envelope, live or dead, says nothing); every node holds the same
  index records, byte for byte, and none of them was written by a node's own repair (no
  node writes while it merges: checked on the RocksDB files of the stopped nodes).

And a BZPOPMIN blocked on node 1 is woken by a ZADD made on node 2, once it replicates.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
import redis

from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core import zset
from marekvs.shards import reshard
from marekvs.storage.engine import Engine
from tests.cluster import Cluster, info_section, wait_for

pytestmark = pytest.mark.timeout(240)

OPS_PER_WRITER = 800
KEYS = ["zs:a", "zs:b", "{zs}c", "{zs}d", "geo"]
MEMBERS = [f"m{i}" for i in range(10)]


@pytest.fixture
def cluster(tmp_path):
    c = Cluster(tmp_path, n=3)
    yield c
    c.stop()


def _writer(client: redis.Redis, seed: int, errors: list) -> None:
    rng = random.Random(seed)
    for n in range(OPS_PER_WRITER):
        k = rng.choice(KEYS[:4])
        m = rng.choice(MEMBERS)
        op = rng.randrange(24)
        try:
            if op < 7:
                client.zadd(k, {m: rng.choice([rng.randint(-3, 3), rng.random() * 10])})
            elif op < 9:
                client.zincrby(k, rng.choice([1, -2, 0.5]), m)
            elif op < 12:
                client.zrem(k, m, rng.choice(MEMBERS))
            elif op < 13:
                client.zpopmin(k, rng.randint(1, 2))
            elif op < 14:
                client.zpopmax(k)
            elif op < 15:
                client.zremrangebyscore(k, rng.randint(-3, 0), rng.randint(0, 3))
            elif op < 16:
                client.zremrangebyrank(k, 0, rng.randint(0, 2))
            elif op < 17:
                client.zunionstore(rng.choice(["{zs}c", "{zs}d"]), ["{zs}c", "{zs}d"], aggregate="MAX")
            elif op < 18:
                client.zrangestore(rng.choice(["{zs}c", "{zs}d"]), rng.choice(["{zs}c", "{zs}d"]), 0, 4)
            elif op < 19:
                if rng.random() < 0.2:
                    client.delete(k)
                else:
                    client.zadd(k, {m: 1, rng.choice(MEMBERS): 2}, xx=rng.random() < 0.5, ch=True)
            elif op < 21:
                lon, lat = rng.uniform(12, 14), rng.uniform(37, 39)
                client.geoadd("geo", (lon, lat, m))
            elif op < 22:
                client.zrem("geo", m)
            elif op < 23:
                client.zadd(k, {m: rng.randint(0, 5)}, gt=True)
            else:
                client.zadd(k, {m: rng.randint(0, 5)}, nx=True, incr=True)
        except redis.ResponseError as e:
            errors.append(f"writer {seed} op {n}: {e}")


def _queries(client: redis.Redis) -> list:
    out = []
    for k in KEYS:
        out.append(client.zrange(k, 0, -1, withscores=True))
        out.append(client.zcard(k))
        out.append(client.zrangebyscore(k, 0, 3, withscores=True))
        out.append([client.zrank(k, m) for m in MEMBERS])
        out.append(client.zmscore(k, MEMBERS))
    out.append(client.geosearch("geo", longitude=13, latitude=38, radius=200, unit="km", withdist=True, sort="ASC"))
    out.append(client.zunion(KEYS[:4], withscores=True))
    return out


def _read_zsets(path, node_id: int) -> tuple[dict, dict, dict]:
    """(members, index, heads) of a stopped node's data directory, raw (every shard
    worker's directory of a node of several: ``reshard.committed``)."""
    layout = reshard.committed(str(path))
    assert layout is not None, f"{path} is no data directory"
    members, index, heads = {}, {}, {}
    for r, d in zip(layout.ranges, layout.dirs):
        e = Engine(d, node_id, durability="no", partitions=r)
        try:
            for ik, rec in e.scan(b""):
                t = ik[2:3]
                if t == K.TAG_ZSET:
                    members[ik] = rec
                elif t == K.TAG_ZSCORE:
                    index[ik] = rec
                elif t == K.TAG_HEAD:
                    heads[ik] = rec
        finally:
            e.close()
    return members, index, heads


def _index_disagreements(members: dict, index: dict, now: int) -> list:
    """The live members without an index record at their score."""
    bad = []
    for ik, rec in members.items():
        if not env.is_live(rec, now) or zset.score_of(rec) is None:
            continue
        key, member = K.decode_zset_member_key(ik)
        if K.encode_zset_score_key(key, zset.score_of(rec), member) not in index:
            bad.append((key, member, zset.score_of(rec)))
    return bad


def test_concurrent_zset_and_geo_commands_converge_with_an_agreeing_index(cluster):
    errors: list = []
    clients = {i: cluster.client(i) for i in cluster.ids}
    threads = [threading.Thread(target=_writer, args=(clients[i], 7000 + i, errors)) for i in cluster.ids]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:5]
    cluster.wait_converged(timeout=60)
    # every node answers every query alike
    answers = {i: _queries(clients[i]) for i in cluster.ids}
    assert answers[1] == answers[2] == answers[3]
    assert any(answers[1][j] for j in range(0, len(answers[1]) - 2, 5)), "the load left every zset empty"
    # everything every node wrote reached every node: a write after it on each node,
    # acknowledged by both peers, orders it before
    for i in cluster.ids:
        clients[i].set(f"marker:{i}", "x")
        assert clients[i].execute_command("WAIT", 2, 30000) == 2
    cluster.wait_converged(timeout=60)
    for c in clients.values():
        c.close()
    cluster.stop()
    now = int(time.time() * 1000)
    state = {i: _read_zsets(cluster[i].data_dir, i) for i in cluster.ids}
    for i in cluster.ids:
        members, index, _ = state[i]
        assert members, f"node {i} holds no zset member"
        assert not _index_disagreements(members, index, now), (i, _index_disagreements(members, index, now)[:5])
    assert state[1][0] == state[2][0] == state[3][0]  # member records
    assert state[1][1] == state[2][1] == state[3][1]  # index records, byte for byte
    assert state[1][2] == state[2][2] == state[3][2]  # heads


def test_bzpopmin_blocked_on_one_node_is_woken_by_a_zadd_on_another(cluster):
    got: list = []
    waiter = cluster.client(1, socket_timeout=120)

    def block():
        got.append(waiter.bzpopmin(["q:{1}", "q:{2}"], timeout=0))

    t = threading.Thread(target=block)
    t.start()
    with cluster.client(1) as c:
        wait_for(lambda: info_section(c, "clients").get("blocked_clients") == "1", 30, "the client blocked on node 1")
    with cluster.client(2) as c:
        assert c.zadd("q:{2}", {"x": 2.5, "y": 7}) == 2
    t.join(60)
    assert not t.is_alive(), "BZPOPMIN on node 1 was not woken by the ZADD on node 2"
    assert got == [(b"q:{2}", b"x", 2.5)]
    waiter.close()
    # the pop replicates back: node 2 sees y only
    with cluster.client(2) as c:
        wait_for(lambda: c.zrange("q:{2}", 0, -1) == [b"y"], 30, "the pop replicated to node 2")
