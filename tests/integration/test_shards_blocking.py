"""Blocking commands whose keys are on both workers of a ``--shards 2`` node (docs/shards.md
§9, slice 5), against redis-py: BLPOP/BRPOP/BLMPOP, BZPOPMIN/BZPOPMAX/BZMPOP, BLMOVE and
BRPOPLPUSH from one worker to the other, XREAD BLOCK and XREADGROUP over streams of both.

A blocked client is woken by a write from a connection on either worker; two blocked
clients are served first blocked, first served; a timeout answers nil; CLIENT UNBLOCK
ends the wait, a killed client's wait is dropped and the element stays; concurrent
poppers and pushers neither lose an element nor get one twice. (The replies of data at
hand, timeouts and argument errors are compared with redis-server byte for byte in
test_shards_multikey.py's ``blocking`` and ``xreadgroup`` cases.)

Each wait is observed through INFO's ``blocked_clients`` (summed over the workers), never
with a sleep: a client counts once its first try found nothing and its watches are set.
"""

from __future__ import annotations

import threading

import pytest
import redis

from tests.integration.test_shards import DEADLINE, client_on, keys_on, start, wait_until

K0, K1 = keys_on(0, 1, "bq:")[0], keys_on(1, 1, "bq:")[0]


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = start(tmp_path_factory.mktemp("shards-blocking"))
    yield n
    n.stop()


def blocked(c: redis.Redis) -> int:
    return int(c.info("clients")["blocked_clients"])


def in_thread(fn) -> tuple[threading.Thread, list]:
    got: list = []

    def run() -> None:
        try:
            got.append(fn())
        except redis.RedisError as e:
            got.append(e)
    t = threading.Thread(target=run)
    t.start()
    return t, got


@pytest.mark.parametrize("protocol", [2, 3])
def test_blocked_client_woken_by_a_write_on_either_worker(node, protocol):
    a = client_on(node.port, 0, protocol=protocol)
    w0, w1 = client_on(node.port, 0), client_on(node.port, 1)
    z0, z1 = K0 + "z", K1 + "z"
    s0, s1 = K0 + "s", K1 + "s"
    a.delete(K0, K1, z0, z1, s0, s1)
    for writer, key in ((w1, K1), (w0, K0)):
        t, got = in_thread(lambda: a.blpop([K0, K1], timeout=60))
        wait_until(lambda: blocked(w0) == 1, "the client to block on both workers")
        writer.rpush(key, "v")
        t.join(DEADLINE)
        assert [tuple(g) for g in got] == [(key.encode(), b"v")]
    t, got = in_thread(lambda: a.bzpopmax([z0, z1], timeout=60))
    wait_until(lambda: blocked(w0) == 1, "BZPOPMAX to block")
    w0.zadd(z1, {"m": 2})  # (from worker 0, the key of worker 1)
    t.join(DEADLINE)
    assert [tuple(g) for g in got] == [(z1.encode(), b"m", 2.0)]
    t, got = in_thread(lambda: a.blmove(K1, K0, 60, "RIGHT", "LEFT"))
    wait_until(lambda: blocked(w0) == 1, "BLMOVE to block")
    w0.rpush(K1, "moved")
    t.join(DEADLINE)
    assert got == [b"moved"] and w1.lrange(K0, 0, -1) == [b"moved"] and w1.exists(K1) == 0
    # XREAD BLOCK with $: only what comes after it blocked
    w0.xadd(s0, {"old": "1"}, id="1-1")
    t, got = in_thread(lambda: a.xread({s0: "$", s1: "$"}, block=60000))
    wait_until(lambda: blocked(w0) == 1, "XREAD to block")
    w0.xadd(s1, {"f": "v"}, id="2-1")
    t.join(DEADLINE)
    assert "2-1" in repr(got) and "1-1" not in repr(got) and s1 in repr(got) and s0 not in repr(got)
    # XREADGROUP BLOCK over both streams
    w0.xgroup_create(s0, "g", "$")
    w0.xgroup_create(s1, "g", "$")
    t, got = in_thread(lambda: a.xreadgroup("g", "c", {s0: ">", s1: ">"}, block=60000))
    wait_until(lambda: blocked(w0) == 1, "XREADGROUP to block")
    w1.xadd(s0, {"n": "1"}, id="3-1")
    t.join(DEADLINE)
    assert b"3-1" in repr(got[0]).encode() and w0.xpending(s0, "g")["pending"] == 1
    assert a.blpop([K0 + "none", K1 + "none"], timeout=0.05) is None  # a timeout: nil
    assert a.bzmpop(0.05, 2, [z0, z1], min=True) is None


def test_fifo_and_no_element_served_twice(node):
    """Two clients blocked on the same keys (through different workers) are served in the
    order they blocked; then concurrent poppers and pushers on both workers: every element
    pushed is popped once."""
    a, b = client_on(node.port, 1), client_on(node.port, 0)
    w = client_on(node.port, 1)
    w.delete(K0, K1)
    ta, ga = in_thread(lambda: a.brpop([K0, K1], timeout=60))
    wait_until(lambda: blocked(w) == 1, "the first client to block")
    tb, gb = in_thread(lambda: b.brpop([K1, K0], timeout=60))
    wait_until(lambda: blocked(w) == 2, "the second client to block")
    w.rpush(K1, "first")
    ta.join(DEADLINE)
    assert [tuple(g) for g in ga] == [(K1.encode(), b"first")] and tb.is_alive()
    w.rpush(K0, "second")
    tb.join(DEADLINE)
    assert [tuple(g) for g in gb] == [(K0.encode(), b"second")]

    popped: list[bytes] = []
    lock = threading.Lock()

    def popper(c: redis.Redis) -> None:
        while True:
            r = c.blpop([K0, K1], timeout=2)
            if r is None:
                return
            with lock:
                popped.append(r[1])

    def pusher(c: redis.Redis, tag: str) -> None:
        for i in range(60):
            c.rpush(K0 if i % 2 else K1, f"{tag}{i}")

    threads = [threading.Thread(target=popper, args=(client_on(node.port, i % 2),)) for i in range(3)]
    threads += [threading.Thread(target=pusher, args=(client_on(node.port, i), f"p{i}-")) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    want = sorted(f"p{j}-{i}".encode() for j in range(2) for i in range(60))
    assert sorted(popped) == want and w.exists(K0, K1) == 0


def test_unblock_and_disconnect_end_the_wait_on_every_worker(node):
    a, b = client_on(node.port, 0), client_on(node.port, 1)
    b.delete(K0, K1)
    aid = a.client_id()
    for error, want in ((False, None), (True, "UNBLOCKED")):
        t, got = in_thread(lambda: a.blpop([K0, K1], timeout=60))
        wait_until(lambda: blocked(b) == 1, "the client to block")
        assert b.client_unblock(aid, error=error) == 1
        t.join(DEADLINE)
        assert (got[0] is None) if want is None else str(got[0]).startswith(want)
        wait_until(lambda: blocked(b) == 0, "its waits to end on both workers")
    d = client_on(node.port, 1)
    did = d.client_id()
    t, got = in_thread(lambda: d.brpoplpush(K0, K1, timeout=60))
    wait_until(lambda: blocked(b) == 1, "BRPOPLPUSH to block")
    assert b.client_kill_filter(_id=did) == 1
    wait_until(lambda: blocked(b) == 0, "the killed client's wait to be dropped")
    b.rpush(K0, "kept")
    assert b.lrange(K0, 0, -1) == [b"kept"] and b.exists(K1) == 0
    t.join(DEADLINE)
    b.delete(K0)

