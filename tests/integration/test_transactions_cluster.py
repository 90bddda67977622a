"""MULTI/EXEC and WATCH across three real nodes: a reader polling a peer never sees half a
transaction (its keys live in different partitions, and a KEYS inside it scans the
keyspace mid-transaction); a WATCH on node 2 is aborted by a write made on node 1 once it
has replicated; concurrent transactions on two nodes converge."""

from __future__ import annotations

import threading

import pytest
import redis

from marekvs.core.partition import partition_of
from tests.cluster import Cluster, wait_for

pytestmark = pytest.mark.timeout(300)

KEYS = ["tx:a", "tx:b", "tx:c", "tx:d"]


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("txcluster"), n=3)
    c.wait_streaming()
    yield c
    c.stop()


def test_a_peer_sees_a_transaction_whole_or_not_at_all(cluster):
    assert len({partition_of(k.encode()) for k in KEYS}) == len(KEYS)  # four partitions
    rounds = 200
    seen: list[tuple] = []
    torn: list[tuple] = []
    stop = threading.Event()

    def read():
        r = cluster.client(2)
        while not stop.is_set():
            values = tuple(r.mget(KEYS))
            if len(set(values)) != 1:
                torn.append(values)
            if not seen or seen[-1] != values:
                seen.append(values)
            if values[0] == str(rounds - 1).encode():
                return

    reader = threading.Thread(target=read)
    reader.start()
    w = cluster.client(1)
    try:
        for i in range(rounds):
            p = w.pipeline(transaction=True)
            p.set(KEYS[0], i).set(KEYS[1], i).keys("tx:*").set(KEYS[2], i).dbsize().set(KEYS[3], i)
            p.execute()
        reader.join(120)
        assert not reader.is_alive(), f"node 2 never saw the last transaction; last read {seen[-1:]}"
    finally:
        stop.set()
        reader.join(10)
    assert not torn, f"half-applied transactions seen on node 2: {torn[:5]}"
    assert len(seen) > 2  # the reader did watch the values change


def test_watch_is_aborted_by_a_write_on_another_node(cluster):
    c1, c2 = cluster.client(1), cluster.client(2)
    c1.set("balance", 100)
    wait_for(lambda: c2.get("balance") == b"100", 60, "the first write reaches node 2")
    with c2.pipeline() as pipe:
        pipe.watch("balance")
        assert int(pipe.get("balance")) == 100
        c1.set("balance", 50)  # on node 1
        wait_for(lambda: c2.get("balance") == b"50", 60, "node 1's write reaches node 2")
        pipe.multi()
        pipe.set("balance", 100 - 30)
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert c2.get("balance") == b"50"
    # a peer's record that changes nothing (the same record again) does not abort
    with c2.pipeline() as pipe:
        pipe.watch("balance")
        pipe.multi()
        pipe.set("balance", 20)
        assert pipe.execute() == [True]


def test_concurrent_transactions_on_two_nodes_converge(cluster):
    c1, c3 = cluster.client(1), cluster.client(3)

    def run(c, tag):
        for i in range(100):
            p = c.pipeline(transaction=True)
            p.set("cx:a", f"{tag}{i}").incr("cx:n").set("cx:b", f"{tag}{i}")
            p.execute()

    ts = [threading.Thread(target=run, args=(c, t)) for c, t in ((c1, "one-"), (c3, "three-"))]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    cluster.wait_converged(timeout=60)
    # counters add up across nodes (PN counter); the LWW strings agree everywhere
    assert int(c1.get("cx:n")) == 200
    values = {tuple(cluster.client(i).mget("cx:a", "cx:b")) for i in (1, 2, 3)}
    assert len(values) == 1
