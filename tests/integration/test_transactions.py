"""MULTI/EXEC/DISCARD/WATCH/UNWATCH on one node, side by side with a stock redis-server:
the same byte sequences give the same replies in RESP2 and RESP3 (queue-time errors and
EXECABORT, run-time errors inside EXEC, WATCH aborts by another client, by FLUSHALL and by
expiry); redis-py's transactional pipelines and ``transaction()`` retry loop; a
transaction is one WriteBatch and one replication-log entry even when a command in it
scans the keyspace."""

from __future__ import annotations

import re
import socket
import threading
import time

import pytest
import redis

from tests.cluster import shard_fields
from tests.helpers import Node, RedisServer, conversation, mb, sync


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    n = Node(tmp_path_factory.mktemp("tx") / "data").start()
    r = RedisServer(tmp_path_factory.mktemp("tx-redis")).start()
    yield n, r
    n.stop()
    r.stop()


def same(out: bytes) -> bytes:
    return re.sub(rb":\d+\r\n(\$4\r\nmode|\+mode)", rb":ID\r\n\1", out)  # HELLO's client id


SEQUENCES = [
    b"MULTI\r\nSET a 1\r\nINCR a\r\nGET a\r\nEXEC\r\n",
    b"MULTI\r\nEXEC\r\n",
    b"MULTI\r\nMULTI\r\nWATCH a\r\nSET a 1\r\nEXEC\r\nGET a\r\n",
    b"MULTI\r\nSET a 1\r\nFOO bar\r\nEXEC\r\nGET a\r\n",
    b"MULTI\r\nSET a 1\r\nGET\r\nEXEC\r\nGET a\r\n",
    b"MULTI\r\nSAVE\r\nSET a 1\r\nEXEC\r\nMULTI\r\nSHUTDOWN NOSAVE\r\nEXEC\r\n",
    b"SET s notanumber\r\nMULTI\r\nINCR s\r\nSET t 1\r\nINCRBYFLOAT s 1\r\nGET t\r\nEXEC\r\n",
    b"EXEC\r\nDISCARD\r\nMULTI\r\nSET a 1\r\nDISCARD\r\nGET a\r\nEXEC\r\n",
    b"WATCH a b\r\nSET a 1\r\nMULTI\r\nSET b 2\r\nEXEC\r\nGET b\r\n",
    b"WATCH a\r\nUNWATCH\r\nSET a 1\r\nMULTI\r\nGET a\r\nEXEC\r\n",
    b"WATCH a\r\nGET a\r\nEXISTS a\r\nMULTI\r\nSET a 9\r\nEXEC\r\nGET a\r\n",  # reads do not abort
    b"WATCH a\r\nMULTI\r\nUNWATCH\r\nPING\r\nEXEC\r\n",
    b"WATCH a\r\nDEL a\r\nMULTI\r\nPING\r\nEXEC\r\n",  # a DEL of a missing key changes nothing
    b"SET a 1\r\nWATCH a\r\nDEL a\r\nMULTI\r\nPING\r\nEXEC\r\n",
    b"SET a 1\r\nWATCH a\r\nSET a 1\r\nMULTI\r\nPING\r\nEXEC\r\n",  # same value: still a write
    b"SET a 1\r\nWATCH a\r\nEXPIRE a 100\r\nMULTI\r\nPING\r\nEXEC\r\n",
    b"WATCH a\r\nMULTI\r\nRESET\r\nEXEC\r\nSET a 1\r\nMULTI\r\nEXEC\r\n",
    b"MULTI\r\nSET a 1\r\nQUIT\r\n",
    b"HELLO 3\r\nMULTI\r\nSET a 1\r\nGET a\r\nINCR a\r\nGET nokey\r\nEXEC\r\n",
    b"HELLO 3\r\nSET a 1\r\nWATCH a\r\nSET a 2\r\nMULTI\r\nGET a\r\nEXEC\r\nMULTI\r\nCONFIG GET maxclients\r\nEXEC\r\n",
    b"HELLO 3\r\nMULTI\r\nSET a 1\r\nFOO\r\nEXEC\r\n",
    b"MULTI\r\nHELLO 3\r\nPING\r\nEXEC\r\nMULTI\r\nHELLO 2\r\nEXEC\r\n",
    b"MULTI\r\nMSET a 1 b 2\r\nMGET a b c\r\nDEL a b\r\nEXISTS a b\r\nEXEC\r\n",
    b"SET a 1\r\nMULTI\r\nKEYS *\r\nSET b 2\r\nDBSIZE\r\nEXEC\r\n",
    b"MULTI\r\nWAIT 1 10\r\nPING\r\nEXEC\r\n",
    b"MULTI\r\nSUBSCRIBE c\r\nEXEC\r\nRESET\r\n",
]


@pytest.mark.parametrize("data", SEQUENCES, ids=lambda d: repr(d)[:48])
def test_transactions_answer_like_redis(pair, data):
    node, r = pair
    outs = []
    for port in (node.port, r.port):
        conversation(port, b"FLUSHALL\r\n")
        outs.append(same(conversation(port, data)))
    assert outs[0] == outs[1]


def two(port):
    return (socket.create_connection(("127.0.0.1", port), timeout=10),
            socket.create_connection(("127.0.0.1", port), timeout=10))


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("change", [b"SET k other", b"DEL k", b"INCR n", b"FLUSHALL", b"APPEND k x",
                                    b"RENAME k k2", b"PEXPIRE k 100000", b"PERSIST k", b"GETDEL k",
                                    b"SET unrelated 1"])
def test_watch_aborts_on_a_change_by_another_client(pair, proto, change):
    node, r = pair
    outs = []
    for port in (node.port, r.port):
        a, b = two(port)
        with a, b:
            a.sendall(b"HELLO %d\r\nFLUSHALL\r\nSET k v EX 1000\r\nSET n 1\r\nWATCH k n\r\n" % proto)
            sync(a)
            b.sendall(change + b"\r\n")
            sync(b)
            a.sendall(b"MULTI\r\nSET k mine\r\nGET k\r\nEXEC\r\nGET k\r\n")
            outs.append(sync(a))
    assert outs[0] == outs[1]


def test_watch_aborts_when_a_watched_key_expires(pair):
    node, r = pair
    outs = []
    for port in (node.port, r.port):
        a, b = two(port)
        with a, b:
            a.sendall(b"FLUSHALL\r\nSET gone v PX 200\r\nSET stays v\r\nSET dead v PX 1\r\n")
            sync(a)
            deadline = time.monotonic() + 30
            while b"dead" in conversation(port, b"KEYS dead\r\n"):  # already expired when watched
                assert time.monotonic() < deadline
            a.sendall(b"WATCH dead stays\r\nMULTI\r\nPING\r\nEXEC\r\n")  # not an expiry after WATCH
            first = sync(a)
            a.sendall(b"WATCH gone\r\n")
            sync(a)
            while b"gone" in conversation(port, b"KEYS gone\r\n"):  # (KEYS does not touch it)
                assert time.monotonic() < deadline
            a.sendall(b"MULTI\r\nPING\r\nEXEC\r\n")
            outs.append(first + sync(a))
    assert outs[0] == outs[1]
    assert outs[0].endswith(b"*-1\r\n")


def test_client_list_shows_the_transaction(pair):
    node, _ = pair
    with socket.create_connection(("127.0.0.1", node.port), timeout=10) as s:
        s.sendall(b"WATCH w\r\nMULTI\r\nSET a 1\r\nGET a\r\nCLIENT INFO\r\n")
        out = b""
        while out.count(b"QUEUED") < 3:
            out += s.recv(1000)
        c = node.client()
        line = [x for x in c.client_list() if x["multi"] != "-1"]
        assert len(line) == 1 and line[0]["flags"] == "x" and line[0]["multi"] == "3"
        c.set("w", 1)
        line = [x for x in c.client_list() if x["multi"] != "-1"]
        assert line[0]["flags"] == "xd"  # dirty: EXEC will abort
        s.sendall(b"EXEC\r\n")
        assert sync(s) == b"*-1\r\n"


def test_redis_py_transactional_pipeline_and_retry_loop(pair):
    node, _ = pair
    c = node.client()
    c.flushall()
    p = c.pipeline(transaction=True)
    p.set("p1", 1).incr("p1").get("p1")
    assert p.execute() == [True, 2, b"2"]
    # a run-time error inside: raised by redis-py, and the other commands ran
    p = c.pipeline(transaction=True)
    p.set("s", "x").incr("s").set("after", 1)
    with pytest.raises(redis.ResponseError):
        p.execute()
    assert c.get("after") == b"1"

    # optimistic locking: another client increments between WATCH and EXEC, once
    c.set("counter", 0)
    other = node.client()
    attempts = []

    def add_one(pipe):
        value = int(pipe.get("counter"))
        attempts.append(value)
        if len(attempts) == 1:
            other.incr("counter")  # the watched key changes under us: EXEC aborts, retried
        pipe.multi()
        pipe.set("counter", value + 1)

    c.transaction(add_one, "counter")
    assert attempts == [0, 1] and c.get("counter") == b"2"

    with c.pipeline() as pipe:
        pipe.watch("counter")
        other.set("counter", 10)
        pipe.multi()
        pipe.set("counter", 99)
        with pytest.raises(redis.WatchError):
            pipe.execute()
    assert c.get("counter") == b"10"


def test_concurrent_transactions_are_serialized(pair):
    """Many clients increment with WATCH/GET/MULTI/SET/EXEC retry loops: no update is lost."""
    node, _ = pair
    c = node.client()
    c.set("shared", 0)
    per_client, clients = 50, 4

    def worker():
        cl = node.client()
        for _ in range(per_client):
            def incr(pipe):
                v = int(pipe.get("shared"))
                pipe.multi()
                pipe.set("shared", v + 1)
            cl.transaction(incr, "shared")

    ts = [threading.Thread(target=worker) for _ in range(clients)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert int(c.get("shared")) == per_client * clients


def test_a_transaction_is_one_log_entry_even_when_it_scans(tmp_path):
    """KEYS/DBSIZE inside MULTI read the pending writes instead of committing them, so the
    transaction's writes ship to peers in one replication-log entry."""
    node = Node(tmp_path / "data").start()
    try:
        c = node.client()
        c.set("before", 1)
        seqs = [int(x["log_last_seq"]) for x in shard_fields(c)]  # (a node of shard workers: a log each)
        with socket.create_connection(("127.0.0.1", node.port), timeout=10) as s:
            s.sendall(mb(b"MULTI") + mb(b"SET", b"x1", b"1") + mb(b"KEYS", b"*") + mb(b"SET", b"x2", b"2")
                      + mb(b"DBSIZE") + mb(b"DEL", b"before") + mb(b"KEYS", b"*") + mb(b"EXEC"))
            out = sync(s)
        assert out.count(b"QUEUED") == 6
        replies = out[out.index(b"*6\r\n"):]
        assert replies.startswith(b"*6\r\n+OK\r\n*2\r\n")  # KEYS saw x1 (pending) and before
        assert b"+OK\r\n:3\r\n:1\r\n*2\r\n" in replies  # DBSIZE 3, DEL 1, then KEYS: x1 x2
        grew = [int(x["log_last_seq"]) - seq for x, seq in zip(shard_fields(c), seqs)]
        assert max(grew) == 1 and min(grew) >= 0, grew  # one entry for all three writes (in each log)
    finally:
        node.stop()
