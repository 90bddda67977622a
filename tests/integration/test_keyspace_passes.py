"""DBSIZE, KEYS and DEBUG DIGEST over a big keyspace leave the node serving others.

They read every record (O(N); commands/stepwise.py). On 200,000 keys each takes a few
hundred ms; run in one go that stalled every other client. Now a pass runs a few ms per
event-loop turn: another connection's commands are answered while it runs, and the
commands pipelined behind it on its own connection still come back in order.
"""

from __future__ import annotations

import select
import socket
import time

import hiredis
import pytest

from tests.helpers import mb

KEYS = 200_000


@pytest.fixture(scope="module")
def big(tmp_path_factory):
    from tests.helpers import Node

    n = Node(tmp_path_factory.mktemp("big") / "data").start()
    r = n.client()
    pipe = r.pipeline(transaction=False)
    for start in range(0, KEYS, 2000):
        pipe.mset({b"key:%07d" % i: b"v%d" % i for i in range(start, start + 2000)})
    pipe.execute()
    yield n
    n.stop()


def read_replies(sock: socket.socket, n: int, timeout: float = 60.0, reader: hiredis.Reader | None = None) -> list:
    reader = reader or hiredis.Reader()
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        data = sock.recv(1 << 20)
        assert data, "connection closed"
        reader.feed(data)
        while (r := reader.gets()) is not False:
            out.append(r)
    return out


@pytest.mark.parametrize("command", [[b"DBSIZE"], [b"KEYS", b"*"], [b"DEBUG", b"DIGEST"]],
                         ids=["dbsize", "keys", "digest"])
def test_other_clients_are_served_while_a_whole_keyspace_pass_runs(big, command):
    """PASSES passes pipelined on one connection, and another client's round trips are
    answered before the last of them ends. (Passes back to back, so that the other client's
    ten round trips on a loaded machine do not outlast them: on a node of shard workers a
    pass runs on each worker at once, and ends sooner.)"""
    passes = 10
    a = socket.create_connection(("127.0.0.1", big.port))
    b = big.client()
    try:
        a.sendall(mb(*command) * passes)
        for i in range(5):
            assert b.ping()
            assert b.set(b"other:%d" % i, b"x")
        # ten round trips of another client, and the passes are still running
        reader, got = hiredis.Reader(), 0
        a.setblocking(False)
        try:
            while data := a.recv(1 << 20):
                reader.feed(data)
        except BlockingIOError:
            pass
        a.setblocking(True)
        while reader.gets() is not False:
            got += 1
        assert got < passes, "the passes blocked the other client"
        replies = read_replies(a, passes - got, reader=reader)
        if command[0] == b"DBSIZE":  # (the other client's keys: those made before each pass)
            assert all(KEYS <= r <= KEYS + 5 for r in replies), replies
    finally:
        b.delete(*[b"other:%d" % i for i in range(5)])
        a.close()


def test_commands_pipelined_behind_a_pass_keep_their_order(big):
    a = socket.create_connection(("127.0.0.1", big.port))
    try:
        a.sendall(mb(b"DBSIZE") + mb(b"PING") + mb(b"KEYS", b"key:000012?")
                  + mb(b"DEBUG", b"DIGEST") + mb(b"DEBUG", b"DIGEST") + mb(b"GET", b"key:0000007"))
        size, pong, found, d1, d2, value = read_replies(a, 6)
        assert (size, pong, value) == (KEYS, b"PONG", b"v7")
        assert sorted(found) == [b"key:%07d" % i for i in range(120, 130)]
        assert d1 == d2 and d1 != b"0" * 40
    finally:
        a.close()


ZSET_MEMBERS = 100_000


def test_the_first_read_of_a_big_zset_after_a_restart_leaves_the_node_serving(tmp_path):
    """Its order mirror is built in steps (keyspace/zsets.py ``Zsets.warming``): ZCARD
    waits for it, other clients are answered meanwhile, and their writes to the zset are
    in the order it ends with."""
    from tests.helpers import Node

    n = Node(tmp_path / "data").start()
    try:
        r = n.client()
        pipe = r.pipeline(transaction=False)
        for start in range(0, ZSET_MEMBERS, 5000):
            pipe.zadd(b"big", {b"m%07d" % i: i for i in range(start, start + 5000)})
        pipe.execute()
        n.stop()
        n.start()  # no mirror held
        a = socket.create_connection(("127.0.0.1", n.port))
        b = n.client()
        try:
            a.sendall(mb(b"ZCARD", b"big") + mb(b"ZRANGE", b"big", b"-2", b"-1"))
            assert b.ping()  # (the ZCARD is read before this client's command)
            for _ in range(5):
                assert b.ping()
            assert b.zadd(b"big", {b"new": ZSET_MEMBERS + 1}) == 1
            assert b.zrem(b"big", b"m0000000") == 1
            assert select.select([a], [], [], 0)[0] == [], "the build blocked the other client"
            card, top = read_replies(a, 2)
            assert card == ZSET_MEMBERS and top == [b"m%07d" % (ZSET_MEMBERS - 1), b"new"]
            assert r.zcard(b"big") == ZSET_MEMBERS and r.zrange(b"big", 0, 0) == [b"m0000001"]
        finally:
            a.close()
    finally:
        n.stop()
