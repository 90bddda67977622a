"""The list commands through redis-py, in RESP2 and RESP3, against a marekvs node: every
command with its edge cases and error texts, and the blocking commands with several
clients (wake-up by another client's push, first blocked first served, several keys, a
key created after the block, timeouts, CLIENT UNBLOCK, INFO blocked_clients).

Where a reply can be checked against Redis 7.0 itself, the same calls go to a stock
redis-server too (``both``): the test then asserts equality, not a transcription.
Blocking tests wait for the event they need (a client shown blocked in INFO, a reply),
never for a fixed time.
"""

from __future__ import annotations

import socket
import threading
import time

import pytest
import redis

from tests.cluster import info_section, wait_for
from tests.helpers import mb

PROTOS = [2, 3]


@pytest.fixture(params=PROTOS, ids=["resp2", "resp3"])
def proto(request):
    return request.param


@pytest.fixture
def both(shared_node, real_redis, proto):
    """A marekvs client and a redis-server client, flushed, in the same protocol."""
    m = shared_node.client(protocol=proto, socket_timeout=10)
    r = real_redis.client(protocol=proto, socket_timeout=10)
    for c in (m, r):
        c.flushall()
    yield m, r
    m.close()
    r.close()


def same(both, *args):
    """Run one command on both servers; the replies (or the errors) must be equal."""
    m, r = both
    out = []
    for c in (m, r):
        try:
            out.append(("ok", c.execute_command(*args)))
        except redis.ResponseError as e:
            out.append(("err", str(e)))
    assert out[0] == out[1], (args, out)
    return out[0][1]


# -- every command, both servers ------------------------------------------------------------

def test_push_pop_len_range_answer_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    assert s("RPUSH", "l", "a", "b", "c") == 3
    assert s("LPUSH", "l", "z") == 4
    assert s("LPUSHX", "nokey", "a") == 0 and s("RPUSHX", "l", "d", "e") == 6
    assert s("LRANGE", "l", 0, -1) == [b"z", b"a", b"b", b"c", b"d", b"e"]
    for a, b in [(0, 0), (-2, -1), (-100, 100), (3, 1), (5, 10), (6, 6), (-1, -2), (-7, -6)]:
        s("LRANGE", "l", a, b)
    assert s("LLEN", "l") == 6 and s("LLEN", "nokey") == 0
    s("LPOP", "l"), s("RPOP", "l"), s("LPOP", "l", 2), s("RPOP", "l", 0), s("RPOP", "l", 10)
    assert s("EXISTS", "l") == 0
    s("LPOP", "l"), s("LPOP", "l", 3), s("LPOP", "l", 0)
    for bad in ("-1", "x", "1.5", "9223372036854775808"):
        s("LPOP", "l", bad)
    s("LPOP", "l", 1, 2)
    s("LRANGE", "l", "x", 1), s("LRANGE", "l", 0, "9223372036854775808")


def test_index_set_insert_rem_trim_answer_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    s("RPUSH", "l", *"abcabc")
    for i in (0, 3, -1, -6, 6, -7, "9223372036854775807", "x"):
        s("LINDEX", "l", i)
    s("LSET", "l", 1, "B"), s("LSET", "l", -1, "C"), s("LSET", "l", 6, "x"), s("LSET", "l", -7, "x")
    s("LSET", "nokey", 0, "x"), s("LSET", "l", "x", "v"), s("LSET", "nokey", "x", "v")
    s("LINSERT", "l", "BEFORE", "a", "0"), s("LINSERT", "l", "after", "C", "9")
    s("LINSERT", "l", "AFTER", "c", "mid"), s("LINSERT", "l", "before", "zz", "x")
    s("LINSERT", "l", "middle", "a", "x"), s("LINSERT", "nokey", "BEFORE", "a", "x")
    s("LINSERT", "nokey", "middle", "a", "x")
    s("LREM", "l", 1, "a"), s("LREM", "l", -1, "b"), s("LREM", "l", 0, "zz"), s("LREM", "l", "x", "a")
    s("LREM", "l", "-9223372036854775808", "c"), s("LREM", "nokey", 0, "a")
    s("LTRIM", "l", 1, -2), s("LTRIM", "l", "x", 0), s("LTRIM", "nokey", 0, 1)
    assert s("LRANGE", "l", 0, -1) == same(both, "LRANGE", "l", 0, -1)
    s("LTRIM", "l", 5, 1)
    assert s("EXISTS", "l") == 0
    s("RPUSH", "r", *"xyz"), s("LREM", "r", 0, "x"), s("LREM", "r", 0, "z"), s("LREM", "r", 0, "y")
    assert s("EXISTS", "r") == 0


def test_lpos_answers_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    s("RPUSH", "l", *"abcabcab")
    for opts in ([], ["RANK", 2], ["RANK", -1], ["RANK", -3], ["RANK", 9], ["COUNT", 0], ["COUNT", 2],
                 ["COUNT", 0, "RANK", -1], ["RANK", 2, "COUNT", 0, "MAXLEN", 5], ["MAXLEN", 1],
                 ["RANK", 0], ["COUNT", -1], ["MAXLEN", -1], ["RANK", "x"], ["FOO"], ["RANK"],
                 ["RANK", "-9223372036854775808"], ["RANK", "-9223372036854775808", "COUNT", 2],
                 ["RANK", "9223372036854775807"]):
        s("LPOS", "l", "a", *opts)
    s("LPOS", "nokey", "a"), s("LPOS", "nokey", "a", "COUNT", 1), s("LPOS", "l", "zz", "COUNT", 0)


def test_lmove_rpoplpush_lmpop_answer_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    s("RPUSH", "src", *"abcd")
    s("LMOVE", "src", "dst", "LEFT", "RIGHT"), s("LMOVE", "src", "dst", "right", "left")
    s("LMOVE", "src", "src", "LEFT", "RIGHT"), s("RPOPLPUSH", "src", "src"), s("RPOPLPUSH", "src", "dst")
    s("LMOVE", "src", "dst", "UP", "LEFT"), s("LMOVE", "nokey", "dst", "LEFT", "LEFT")
    s("SET", "str", "x")
    s("LMOVE", "src", "str", "LEFT", "LEFT"), s("LMOVE", "str", "dst", "LEFT", "LEFT")
    s("LMOVE", "nokey", "str", "LEFT", "LEFT"), s("RPOPLPUSH", "src", "dst")
    assert s("EXISTS", "src") == 0
    s("LRANGE", "dst", 0, -1)
    s("RPUSH", "k2", *"123")
    for args in (["1", "k2", "LEFT"], ["2", "nokey", "k2", "RIGHT", "COUNT", 2], ["1", "k2", "left", "count", 9],
                 ["0", "k2", "LEFT"], ["-1", "k2", "LEFT"], ["x", "k2", "LEFT"], ["2", "k2", "LEFT"],
                 ["1", "k2", "MIDDLE"], ["1", "k2", "LEFT", "COUNT", 0], ["1", "k2", "LEFT", "COUNT"],
                 ["1", "k2", "LEFT", "COUNT", 1, "COUNT", 1], ["1", "k2", "LEFT", "FOO"], ["1", "nokey", "LEFT"],
                 ["2", "str", "k2", "LEFT"], ["9223372036854775807", "k2", "LEFT"]):
        s("LMPOP", *args)


def test_blocking_commands_that_need_not_wait_answer_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    s("RPUSH", "a", *"123"), s("RPUSH", "b", "x"), s("SET", "str", "v")
    s("BLPOP", "nokey", "a", 0), s("BRPOP", "a", "b", 0), s("BLPOP", "b", "a", "0.5")
    s("BLMOVE", "a", "b", "LEFT", "LEFT", 0), s("BRPOPLPUSH", "b", "a", 0)
    s("BLMPOP", 0, 2, "nokey", "a", "RIGHT", "COUNT", 5)
    s("BLPOP", "str", "a", 0), s("BLPOP", "nokey", "str", 0)
    for t in ("-1", "x", "nan", "inf", "-inf", "1e100", " 1", "1x"):
        s("BLPOP", "nokey", t), s("BLMOVE", "nokey", "a", "LEFT", "LEFT", t), s("BLMPOP", t, 1, "nokey", "LEFT")
    s("BLMOVE", "nokey", "a", "UP", "LEFT", 0), s("BLMPOP", 0, 0, "nokey", "LEFT"), s("BLMPOP", "x", 0, "a", "LEFT")
    for t in ("0.01", "0.0001", "1e-3"):
        s("BLPOP", "nokey", t), s("BRPOPLPUSH", "nokey", "a", t), s("BLMPOP", t, 1, "nokey", "LEFT")


def test_arity_errors_answer_like_redis(both):
    for args in (["LPUSH", "l"], ["LPOP"], ["LLEN"], ["LRANGE", "l", 0], ["LINDEX", "l"], ["LSET", "l", 0],
                 ["LINSERT", "l", "BEFORE", "a"], ["LREM", "l", 0], ["LTRIM", "l", 0], ["LPOS", "l"],
                 ["LMOVE", "a", "b", "LEFT"], ["RPOPLPUSH", "a"], ["LMPOP", 1, "a"], ["BLPOP", "a"],
                 ["BLMOVE", "a", "b", "LEFT", "LEFT"], ["BRPOPLPUSH", "a", "b"], ["BLMPOP", 0, 1, "a"]):
        same(both, *args)


def test_list_keys_in_the_keyspace_commands(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    s("RPUSH", "l", "a", "b")
    s("TYPE", "l"), s("EXISTS", "l"), s("OBJECT", "ENCODING", "l"), s("EXPIRE", "l", 100), s("PERSIST", "l")
    s("GET", "l"), s("APPEND", "l", "x"), s("INCR", "l"), s("KEYS", "*"), s("DBSIZE")
    s("DEL", "l"), s("TYPE", "l"), s("DEL", "l")


# -- blocking: several clients (marekvs; the same steps on Redis where it says so) ---------

def blocked_count(client) -> int:
    return int(info_section(client, "clients")["blocked_clients"])


class Blocked(threading.Thread):
    """One client running one blocking command on its own connection."""

    def __init__(self, node, proto: int, *args):
        super().__init__(daemon=True)
        self.client = node.client(protocol=proto, socket_timeout=30)
        self.args = args
        self.reply = self.error = None
        self.id = self.client.client_id()

    def run(self):
        try:
            self.reply = self.client.execute_command(*self.args)
        except redis.ResponseError as e:
            self.error = str(e)

    def result(self, timeout: float = 20.0):
        self.join(timeout)
        assert not self.is_alive(), f"{self.args} still blocked"
        self.client.close()
        if self.error is not None:
            return self.error
        return list(self.reply) if isinstance(self.reply, tuple) else self.reply  # (redis-py: BLPOP a tuple)


def block(node, proto, admin, *args) -> Blocked:
    """Start a blocked client and wait until the server shows it blocked."""
    before = blocked_count(admin)
    b = Blocked(node, proto, *args)
    b.start()
    wait_for(lambda: blocked_count(admin) > before, 20, f"{args} blocked")
    return b


@pytest.fixture
def node_and_admin(shared_node, proto):
    admin = shared_node.client(protocol=proto, socket_timeout=10)
    admin.flushall()
    yield shared_node, admin
    admin.close()


@pytest.fixture(params=["marekvs", "redis"])
def server(request, shared_node, real_redis, proto):
    """The blocking scenarios run on both servers: the same assertions hold for each."""
    node = shared_node if request.param == "marekvs" else real_redis
    admin = node.client(protocol=proto, socket_timeout=10)
    admin.flushall()
    yield node, admin, proto
    admin.close()


def test_a_push_from_another_client_wakes_blpop(server):
    node, admin, proto = server
    b = block(node, proto, admin, "BLPOP", "q", 0)
    assert admin.rpush("q", "hello") == 1
    assert b.result() == [b"q", b"hello"]
    assert admin.exists("q") == 0 and blocked_count(admin) == 0


def test_waiters_are_served_first_blocked_first_served(server):
    node, admin, proto = server
    waiters = [block(node, proto, admin, "BLPOP", "q", 0) for _ in range(3)]
    assert admin.rpush("q", "1", "2") == 2
    assert waiters[0].result() == [b"q", b"1"] and waiters[1].result() == [b"q", b"2"]
    assert waiters[2].is_alive()
    admin.rpush("q", "3")
    assert waiters[2].result() == [b"q", b"3"]


def test_several_keys_and_a_key_created_after_the_block(server):
    node, admin, proto = server
    b = block(node, proto, admin, "BRPOP", "k1", "k2", "k3", 0)
    admin.set("k1", "a string")  # another type keeps it waiting
    admin.rpush("k3", "x", "y")
    assert b.result() == [b"k3", b"y"]
    b = block(node, proto, admin, "BLMPOP", 0, 2, "m1", "m2", "LEFT", "COUNT", 3)
    admin.rpush("m2", "a", "b", "c", "d")
    assert b.result() == [b"m2", [b"a", b"b", b"c"]]
    assert admin.lrange("m2", 0, -1) == [b"d"]


def test_blmove_and_brpoplpush_wait_then_move(server):
    node, admin, proto = server
    b = block(node, proto, admin, "BLMOVE", "src", "dst", "RIGHT", "LEFT", 0)
    admin.rpush("src", "a", "b")
    assert b.result() == b"b"
    assert admin.lrange("dst", 0, -1) == [b"b"] and admin.lrange("src", 0, -1) == [b"a"]
    admin.delete("src")
    b = block(node, proto, admin, "BRPOPLPUSH", "src", "src", 0)
    admin.rpush("src", "1", "2")
    assert b.result() == b"2"
    assert admin.lrange("src", 0, -1) == [b"2", b"1"]


def test_blmove_to_a_destination_of_another_type_gets_wrongtype(server):
    node, admin, proto = server
    admin.set("dst", "x")
    b = block(node, proto, admin, "BLMOVE", "src", "dst", "LEFT", "LEFT", 0)
    admin.rpush("src", "v1", "v2")
    assert b.result() == "WRONGTYPE Operation against a key holding the wrong kind of value"
    assert admin.lrange("src", 0, -1) == [b"v1", b"v2"]  # nothing was moved


def test_timeouts_and_fractions(server):
    node, admin, proto = server
    c = node.client(protocol=proto, socket_timeout=20)
    t0 = time.monotonic()
    assert c.execute_command("BLPOP", "nokey", "0.2") is None
    assert time.monotonic() - t0 >= 0.2
    assert c.execute_command("BLMPOP", "0.05", 1, "nokey", "LEFT") is None
    assert c.execute_command("BLMOVE", "nokey", "d", "LEFT", "LEFT", "0.05") is None
    with pytest.raises(redis.ResponseError, match="timeout is negative"):
        c.execute_command("BLPOP", "nokey", "-0.5")
    with pytest.raises(redis.ResponseError, match="timeout is not a float or out of range"):
        c.execute_command("BRPOP", "nokey", "soon")
    c.close()


def test_client_unblock_timeout_and_error(server):
    node, admin, proto = server
    b = block(node, proto, admin, "BLPOP", "q", 0)
    assert admin.execute_command("CLIENT", "UNBLOCK", b.id, "TIMEOUT") == 1
    assert b.result() is None
    b = block(node, proto, admin, "BLMOVE", "q", "d", "LEFT", "LEFT", 0)
    assert admin.execute_command("CLIENT", "UNBLOCK", b.id, "ERROR") == 1
    assert b.result() == "UNBLOCKED client unblocked via CLIENT UNBLOCK"
    assert admin.execute_command("CLIENT", "UNBLOCK", b.id) == 0
    assert blocked_count(admin) == 0


def test_info_counts_blocked_clients(server):
    node, admin, proto = server
    waiters = [block(node, proto, admin, "BLPOP", "q%d" % i, 0) for i in range(3)]
    assert blocked_count(admin) == 3
    for i in range(3):
        admin.rpush("q%d" % i, "x")
    for w in waiters:
        assert w.result()[1] == b"x"
    wait_for(lambda: blocked_count(admin) == 0, 20, "no client blocked")


def test_a_disconnected_waiter_takes_nothing(node_and_admin, proto):
    node, admin = node_and_admin
    sock = socket.create_connection(("127.0.0.1", node.port), timeout=10)  # (redis-py would redial)
    sock.sendall(mb(b"BLPOP", b"q", b"0"))
    wait_for(lambda: blocked_count(admin) == 1, 20, "the waiter blocked")
    sock.close()
    wait_for(lambda: blocked_count(admin) == 0, 20, "the waiter gone")
    admin.rpush("q", "kept")
    assert admin.lrange("q", 0, -1) == [b"kept"]
