"""HyperLogLog, bitmaps and collection moves on a real 3-node cluster (processes on loopback,
real gRPC): PFADD on different nodes is a union, a RENAME (and a COPY) of a collection is
one replication-log entry (a RENAME on a node of shard workers: one on each worker it
writes) and converges, PFMERGE and DEL of an HLL converge, and concurrent
SETBITs on two nodes converge on one of the writes' whole values.
"""

from __future__ import annotations

import threading

import pytest

from marekvs.core.partition import ShardMap
from tests.cluster import Cluster, info_section
from tests.helpers import node_shards

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("hllcluster"), n=3)
    yield c
    c.stop()


def _all(cluster, fn):
    out = {}
    for i in cluster.ids:
        with cluster.client(i) as c:
            out[i] = fn(c)
    return out


def test_pfadd_on_different_nodes_is_a_union(cluster):
    elements = [f"e{i}" for i in range(3000)]
    parts = {1: elements[:1200], 2: elements[800:2200], 3: elements[1800:]}  # overlapping
    errors: list = []

    def adder(i: int) -> None:  # the three nodes add at the same time
        try:
            with cluster.client(i) as c:
                for j in range(0, len(parts[i]), 50):
                    c.pfadd("u", *parts[i][j:j + 50])
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=adder, args=(i,)) for i in parts]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors and not any(t.is_alive() for t in threads), errors
    with cluster.client(1) as c:
        c.pfadd("{ref}", *elements)  # every element, on one node
    cluster.wait_converged(timeout=60)
    counts = _all(cluster, lambda c: c.pfcount("u"))
    ref = _all(cluster, lambda c: c.pfcount("{ref}"))
    # the registers are the max over every node's adds: exactly those of one PFADD of all
    assert set(counts.values()) == set(ref.values()) and len(set(counts.values())) == 1
    assert abs(counts[1] - 3000) <= 3 * 0.0082 * 3000
    assert len(set(_all(cluster, lambda c: c.execute_command("DEBUG", "DIGEST-VALUE", "u")[0]).values())) == 1


def test_rename_of_a_collection_is_one_log_entry_and_converges(cluster):
    with cluster.client(2) as c:
        for j in range(0, 20_000, 1000):
            c.pfadd("before", *[f"x{i}" for i in range(j, j + 1000)])
        c.expire("before", 10_000)
    cluster.wait_converged(timeout=60)
    with cluster.client(2) as c:
        want = c.pfcount("before")
        seq = int(info_section(c, "persistence")["replog_last_seq"])
        # one log entry; on a node of shard workers, one on each worker RENAME writes (the
        # source's and the destination's: docs/shards.md §3, 3.); COPY writes the copy only
        workers = ShardMap.even(node_shards(cluster[2].extra))
        rename = len({workers.shard_of_key(k) for k in (b"before", b"after")})
        copy = 1
        assert c.rename("before", "after") is True
        assert int(info_section(c, "persistence")["replog_last_seq"]) == seq + rename
        assert c.copy("after", "copy") is True
        assert int(info_section(c, "persistence")["replog_last_seq"]) == seq + rename + copy
    cluster.wait_converged(timeout=60)
    assert _all(cluster, lambda c: (c.exists("before"), c.pfcount("after"), c.pfcount("copy"),
                                    c.ttl("after") > 9000)) == {i: (0, want, want, True) for i in cluster.ids}


def test_pfmerge_and_del_of_an_hll_converge(cluster):
    with cluster.client(1) as c:
        c.pfadd("m1", *[f"a{i}" for i in range(500)])
    with cluster.client(3) as c:
        c.pfadd("m2", *[f"b{i}" for i in range(500)])
    cluster.wait_converged(timeout=60)
    with cluster.client(2) as c:
        c.pfmerge("merged", "m1", "m2")
        merged = c.pfcount("merged")
    with cluster.client(3) as c:
        assert c.delete("m1") == 1
    cluster.wait_converged(timeout=60)
    assert _all(cluster, lambda c: (c.pfcount("merged"), c.exists("m1"))) == {i: (merged, 0) for i in cluster.ids}


def test_concurrent_setbits_on_two_nodes_converge_on_one_whole_value(cluster):
    """Each SETBIT writes its node's whole string (LWW): concurrent writers on two nodes
    may overwrite each other's bits, but every node ends with the same value, and every
    bit set in it was set by one of the writers."""
    bits = {1: list(range(0, 800, 2)), 2: list(range(1, 800, 2))}
    errors: list = []

    def writer(node: int) -> None:
        try:
            with cluster.client(node) as c:
                for b in bits[node]:
                    c.setbit("bm", b, 1)
        except Exception as e:  # reported below
            errors.append(repr(e))

    threads = [threading.Thread(target=writer, args=(i,)) for i in bits]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors
    cluster.wait_converged(timeout=60)
    values = _all(cluster, lambda c: c.get("bm"))
    assert len(set(values.values())) == 1
    value = values[1]
    set_bits = {i for i in range(len(value) * 8) if value[i // 8] >> (7 - i % 8) & 1}
    assert set_bits <= set(bits[1]) | set(bits[2])
    # the last write of the winning node is in the value (it saw its own earlier ones)
    assert bits[1][-1] in set_bits or bits[2][-1] in set_bits
    # a later SETBIT on any node, once converged, sees and keeps the others' bits
    with cluster.client(3) as c:
        c.setbit("bm", 1000, 1)
    cluster.wait_converged(timeout=60)
    assert _all(cluster, lambda c: c.bitcount("bm")) == {i: len(set_bits) + 1 for i in cluster.ids}


def test_rename_and_copy_of_hashes_sets_zsets_and_lists_replicate_as_one_entry_each(cluster):
    with cluster.client(1) as c:
        c.hset("hash", mapping={f"f{i}": f"v{i}" for i in range(200)})
        c.sadd("set", *[f"m{i}" for i in range(200)])
        c.rpush("list", *[f"x{i}" for i in range(200)])
        c.zadd("zset", {f"m{i}": i % 17 for i in range(200)})
    cluster.wait_converged(timeout=60)
    with cluster.client(3) as c:
        seq = int(info_section(c, "persistence")["replog_last_seq"])
        for key in ("hash", "set", "list", "zset"):
            assert c.rename(key, key + ":moved") is True
            assert c.copy(key + ":moved", key + ":copy") is True
        # (on a node of shard workers, RENAME is an entry on each worker it writes)
        workers = ShardMap.even(node_shards(cluster[3].extra))
        entries = sum(len({workers.shard_of_key(k.encode()) for k in (key, key + ":moved")}) + 1
                      for key in ("hash", "set", "list", "zset"))
        assert int(info_section(c, "persistence")["replog_last_seq"]) == seq + entries
    cluster.wait_converged(timeout=60)

    def read(c):
        zsets = [c.zrange(k, 0, -1, withscores=True) for k in ("zset:moved", "zset:copy")]
        return (c.exists("hash", "set", "list", "zset"), zsets[0] == zsets[1] and len(zsets[0]) == 200,
                c.zrank("zset:copy", "m16"), sorted(c.hgetall("hash:moved").items()) == sorted(
                    c.hgetall("hash:copy").items()), c.hlen("hash:copy"), c.scard("set:moved"),
                c.smembers("set:copy") == c.smembers("set:moved"), c.lrange("list:moved", 0, -1)
                == c.lrange("list:copy", 0, -1) == [f"x{i}".encode() for i in range(200)])
    rank = sorted((i % 17, f"m{i}") for i in range(200)).index((16, "m16"))
    assert _all(cluster, read) == {i: (0, True, rank, True, 200, 200, True, True) for i in cluster.ids}
