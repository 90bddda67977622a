"""The stream and consumer-group commands through redis-py, in RESP2 and RESP3, against a
marekvs node and a stock redis-server side by side: every command with its options, edge
cases and error texts; XREAD BLOCK and XREADGROUP BLOCK with several clients; keyspace
notifications, keyspace hits and misses, MULTI/EXEC.

Where a reply is deterministic the same calls go to both servers (``same``) and the test
asserts equality, not a transcription. Ids the servers mint (XADD ``*``, ``ms-*``) differ by
design (marekvs's sequence is ``origin << 20 | counter``, docs/streams.md): those are
checked by their order and shape on each server. Times (idle, seen, delivery) are compared
as "a time". Blocking tests wait for the event they need (a client shown blocked in INFO, a
reply), never for a fixed time. The random differential test is
test_differential_streams.py; the cluster behaviour is test_streams_cluster.py.
"""

from __future__ import annotations

import re
import threading
import time

import pytest
import redis

from tests.cluster import info_section, wait_for

PROTOS = [2, 3]
_TIME_KEYS = {b"idle", b"seen-time", b"active-time", b"inactive"}
_RADIX_KEYS = {b"radix-tree-keys", b"radix-tree-nodes"}
ID = re.compile(rb"^(\d+)-(\d+)$")


@pytest.fixture(params=PROTOS, ids=["resp2", "resp3"])
def proto(request):
    return request.param


def _raw(c: redis.Redis) -> redis.Redis:
    """redis-py without its reply callbacks for the stream commands: the RESP trees."""
    for name in list(c.response_callbacks):
        if name.upper().startswith("X"):
            del c.response_callbacks[name]
    return c


@pytest.fixture
def both(shared_node, real_redis, proto):
    """A marekvs client and a redis-server client, flushed, in the same protocol."""
    m = _raw(shared_node.client(protocol=proto, socket_timeout=10))
    r = _raw(real_redis.client(protocol=proto, socket_timeout=10))
    for c in (m, r):
        c.flushall()
    yield m, r
    m.close()
    r.close()


def norm(v, times: bool = True):
    """A reply with its times ("T") and Redis's radix-tree figures ("R") blanked: ints that
    are unix milliseconds, and the values of the time and radix fields."""
    if isinstance(v, dict):
        return {k: ("R" if k in _RADIX_KEYS else "T" if k in _TIME_KEYS else norm(x, times))
                for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        out = []
        blank = None
        for x in v:
            if blank is not None:
                out.append(blank)
                blank = None
                continue
            if isinstance(x, bytes) and x in _RADIX_KEYS:
                blank = "R"
            elif isinstance(x, bytes) and x in _TIME_KEYS:
                blank = "T"
            out.append(norm(x, times))
        return out
    if times and isinstance(v, int) and not isinstance(v, bool) and v > 1_000_000_000_000:
        return "T"
    return v


def run(c, args):
    try:
        return ("ok", c.execute_command(*args))
    except redis.ResponseError as e:
        return ("err", str(e))


def same(both, *args, normalize=norm):
    """Run one command on both servers; the replies (or errors) must be equal."""
    got = [run(c, args) for c in both]
    assert normalize(got[0]) == normalize(got[1]), (args, got)
    return got[0][1]


def idle_blind(reply):
    """XPENDING's extended form with its idle times (a few ms apart) blanked."""
    if reply[0] == "ok" and isinstance(reply[1], list):
        return ("ok", [[e[0], e[1], "T", e[3]] if isinstance(e, list) and len(e) == 4 else e
                       for e in reply[1]])
    return reply


def parse_id(b: bytes) -> tuple[int, int]:
    m = ID.match(b)
    assert m, b
    return int(m.group(1)), int(m.group(2))


# -- entries: XADD XLEN XRANGE XREVRANGE XDEL XTRIM --------------------------------------------

def test_xadd_explicit_ids_and_their_errors_answer_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    s("XADD", "s", "1-1", "f", "v")
    s("XADD", "s", "1-2", "f", "v", "g", "w")
    s("XADD", "s", "5", "a", "b")  # ms alone: ms-0
    s("XADD", "s", "5", "a", "b")  # equal: an error
    s("XADD", "s", "4-9", "a", "b")
    s("XADD", "s", "0-0", "a", "b")
    s("XADD", "t", "0-0", "a", "b")
    s("XADD", "s", "x-1", "a", "b")
    s("XADD", "s", "1-x", "a", "b")
    s("XADD", "s", "-1", "a", "b")
    s("XADD", "s", "18446744073709551616-0", "a", "b")
    s("XADD", "s", "6-1", "odd")
    s("XADD", "s", "6-1")
    s("XADD", "s", "NOMKSTREAM", "7-0", "a", "b")
    s("XADD", "nokey", "NOMKSTREAM", "*", "a", "b")
    s("EXISTS", "nokey")
    s("XADD", "s", "8-0", "dup", "1", "dup", "2")  # repeated fields are kept, in order
    s("XRANGE", "s", "-", "+")
    s("XLEN", "s"), s("XLEN", "nokey")
    s("TYPE", "s")
    s("SET", "str", "x")
    s("XADD", "str", "*", "a", "b")
    s("XLEN", "str")


def test_xadd_trimming_options_answer_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    for i in range(1, 21):
        s("XADD", "s", f"{i}-0", "n", str(i))
    s("XADD", "s", "MAXLEN", "15", "21-0", "n", "21")
    s("XADD", "s", "MAXLEN", "=", "10", "22-0", "n", "22")
    s("XADD", "s", "MAXLEN", "~", "5", "23-0", "n", "23")  # less than a node: nothing trimmed
    s("XADD", "s", "MINID", "15", "24-0", "n", "24")
    s("XADD", "s", "MINID", "~", "20", "LIMIT", "3", "25-0", "n", "25")
    s("XRANGE", "s", "-", "+")
    s("XADD", "s", "MAXLEN", "0", "26-0", "n", "26")  # the new entry itself is trimmed
    s("XLEN", "s"), s("XRANGE", "s", "-", "+")
    s("XADD", "s", "MAXLEN", "1", "MINID", "1", "27-0", "a", "b")
    s("XADD", "s", "MAXLEN", "-1", "27-0", "a", "b")
    s("XADD", "s", "MAXLEN", "1", "LIMIT", "10", "27-0", "a", "b")
    s("XADD", "s", "LIMIT", "10", "27-0", "a", "b")
    s("XADD", "s", "MAXLEN", "~", "1", "LIMIT", "-1", "27-0", "a", "b")
    s("XADD", "s", "MAXLEN", "x", "27-0", "a", "b")
    s("XADD", "s", "MINID", "x", "27-0", "a", "b")
    s("XINFO", "STREAM", "s")


def test_xrange_and_xrevrange_answer_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    for sid in ("1-0", "1-5", "2-0", "3-3", "3-4", "10-0"):
        s("XADD", "s", sid, "id", sid)
    for a, b in [("-", "+"), ("1", "3"), ("1-5", "3-3"), ("(1-0", "(3-4"), ("(1-5", "+"), ("-", "(10"),
                 ("3", "1"), ("(3-3", "3-3"), ("0", "0"), ("18446744073709551615", "+"),
                 ("(18446744073709551615-18446744073709551615", "+"), ("-", "(0-0"), ("(-", "+"),
                 ("1-x", "+"), ("-", "x"), ("+", "-")]:
        s("XRANGE", "s", a, b)
        s("XREVRANGE", "s", b, a)
    for n in ("0", "1", "2", "-1", "100"):
        s("XRANGE", "s", "-", "+", "COUNT", n)
        s("XREVRANGE", "s", "+", "-", "COUNT", n)
    s("XRANGE", "s", "-", "+", "COUNT", "x")
    s("XRANGE", "s", "-", "+", "COUNT")
    s("XRANGE", "s", "-", "+", "FOO", "1")
    s("XRANGE", "nokey", "-", "+")
    s("XREVRANGE", "nokey", "+", "-", "COUNT", "0")
    s("XRANGE", "s", "-")


def test_xdel_and_xtrim_answer_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    for i in range(1, 11):
        s("XADD", "s", f"{i}-1", "n", str(i))
    s("XDEL", "s", "2-1", "3-1", "3-1", "99-0")
    s("XDEL", "s", "2-1")
    s("XDEL", "s", "x")
    s("XDEL", "nokey", "1-1")
    s("XINFO", "STREAM", "s")
    s("XTRIM", "s", "MAXLEN", "6")
    s("XTRIM", "s", "MINID", "7")
    s("XTRIM", "s", "MAXLEN", "~", "1")  # less than a node
    s("XTRIM", "s", "MAXLEN", "~", "1", "LIMIT", "0")
    s("XTRIM", "s", "MINID", "=", "9-0")
    s("XTRIM", "s", "LIMIT", "1")
    s("XTRIM", "s", "FOO", "1")
    s("XTRIM", "s", "MAXLEN", "1", "LIMIT", "1")
    s("XTRIM", "nokey", "MAXLEN", "0")
    s("XRANGE", "s", "-", "+")
    s("XINFO", "STREAM", "s")
    s("XTRIM", "s", "MAXLEN", "0"), s("XLEN", "s"), s("EXISTS", "s")  # an empty stream exists
    s("XINFO", "STREAM", "s")


def test_xsetid_answers_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    s("XADD", "s", "5-0", "a", "b"), s("XADD", "s", "6-0", "a", "b"), s("XDEL", "s", "6-0")
    s("XSETID", "s", "4-0")
    s("XSETID", "s", "5-0")
    s("XINFO", "STREAM", "s")
    s("XSETID", "s", "10-0", "ENTRIESADDED", "7", "MAXDELETEDID", "9-0")
    s("XINFO", "STREAM", "s")
    s("XADD", "s", "10-0", "a", "b"), s("XADD", "s", "10-1", "a", "b")
    s("XSETID", "s", "20-0", "ENTRIESADDED", "1")
    s("XSETID", "s", "20-0", "MAXDELETEDID", "30-0")
    s("XSETID", "s", "20-0", "ENTRIESADDED", "-1")
    s("XSETID", "s", "20-0", "FOO", "1")
    s("XSETID", "nokey", "1-0")
    s("XSETID", "s", "x")
    s("XINFO", "STREAM", "s")


def test_minted_ids_keep_redis_order_and_carry_the_node_in_the_sequence(both):
    m, r = both
    for c in both:
        ids = [parse_id(c.execute_command("XADD", "s", "*", "n", str(i))) for i in range(50)]
        assert ids == sorted(ids) and len(set(ids)) == 50
        explicit = c.execute_command("XADD", "s", "%d-*" % (ids[-1][0] + 1000), "a", "b")
        star = [parse_id(c.execute_command("XADD", "s", "%d-*" % (ids[-1][0] + 1000), "a", "b"))
                for _ in range(3)]
        assert star == sorted(star) and parse_id(explicit) < star[0]
        with pytest.raises(redis.ResponseError, match="equal or smaller"):
            c.execute_command("XADD", "s", "%d-*" % ids[0][0], "a", "b")
    # marekvs: seq = node id << 20 | counter (node 1), so every sequence is at least 2^20
    got = [parse_id(i) for i, _ in m.execute_command("XRANGE", "s", "-", "+")]
    assert all(seq >> 20 == 1 for _, seq in got)
    assert all(seq < 1 << 20 for _, seq in (parse_id(i) for i, _ in r.execute_command("XRANGE", "s", "-", "+")))


# -- XREAD ------------------------------------------------------------------------------------

def test_xread_answers_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    for sid in ("1-0", "2-0", "3-0"):
        s("XADD", "a", sid, "k", sid)
    s("XADD", "b", "7-0", "k", "v")
    s("XREAD", "STREAMS", "a", "0")
    s("XREAD", "COUNT", "2", "STREAMS", "a", "b", "1", "0")
    s("XREAD", "STREAMS", "a", "b", "nokey", "3", "7", "0")  # nothing new: a null reply
    s("XREAD", "STREAMS", "a", "$")
    s("XREAD", "COUNT", "0", "STREAMS", "a", "0")
    s("XREAD", "COUNT", "-3", "STREAMS", "a", "0")
    s("XREAD", "STREAMS", "a", "b", "0")
    s("XREAD", "STREAMS", "a", ">")
    s("XREAD", "GROUP", "g", "c", "STREAMS", "a", "0")
    s("XREAD", "NOACK", "STREAMS", "a", "0")
    s("XREAD", "BLOCK", "-1", "STREAMS", "a", "0")
    s("XREAD", "BLOCK", "x", "STREAMS", "a", "0")
    s("XREAD", "STREAMS", "a", "x")
    s("XREAD", "COUNT", "1", "a", "0")
    s("SET", "str", "x")
    s("XREAD", "STREAMS", "a", "str", "0", "0")
    s("XREAD", "BLOCK", "10", "STREAMS", "a", "$")  # times out: a null reply


def test_xread_reply_is_a_map_in_resp3(shared_node, proto):
    c = shared_node.client(protocol=proto, socket_timeout=10)
    c.flushall()
    c.execute_command("XADD", "a", "1-0", "k", "v")
    raw = _raw(c).execute_command("XREAD", "STREAMS", "a", "0")
    want = [[b"1-0", [b"k", b"v"]]]
    assert raw == ({b"a": want} if proto == 3 else [[b"a", want]])
    c.close()


# -- consumer groups ----------------------------------------------------------------------------

def test_xgroup_answers_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    s("XGROUP", "CREATE", "s", "g", "$")
    s("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    s("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    s("XADD", "s", "1-0", "a", "b"), s("XADD", "s", "2-0", "a", "b")
    s("XGROUP", "CREATE", "s", "g2", "0", "ENTRIESREAD", "1")
    s("XGROUP", "CREATE", "s", "g3", "$", "ENTRIESREAD", "-1")
    s("XGROUP", "CREATE", "s", "g4", "$", "ENTRIESREAD", "-2")
    s("XGROUP", "CREATE", "s", "g4", "x")
    s("XGROUP", "CREATE", "s", "g4", "0", "FOO")
    s("XINFO", "GROUPS", "s")
    s("XGROUP", "SETID", "s", "g", "1-0")
    s("XGROUP", "SETID", "s", "g", "$", "ENTRIESREAD", "2")
    s("XGROUP", "SETID", "s", "nog", "0")
    s("XGROUP", "SETID", "nokey", "g", "0")
    s("XGROUP", "SETID", "s", "g", "0", "FOO", "1")
    s("XINFO", "GROUPS", "s")
    s("XGROUP", "CREATECONSUMER", "s", "g", "alice")
    s("XGROUP", "CREATECONSUMER", "s", "g", "alice")
    s("XGROUP", "CREATECONSUMER", "s", "nog", "alice")
    s("XINFO", "CONSUMERS", "s", "g")
    s("XGROUP", "DELCONSUMER", "s", "g", "bob")
    s("XGROUP", "DELCONSUMER", "s", "g", "alice")
    s("XGROUP", "DESTROY", "s", "g2")
    s("XGROUP", "DESTROY", "s", "g2")
    s("XGROUP", "DESTROY", "nokey", "g2")
    s("XINFO", "GROUPS", "s")
    s("XGROUP", "HELP"), s("XGROUP", "FOO"), s("XGROUP")
    s("SET", "str", "x"), s("XGROUP", "CREATE", "str", "g", "0")


def test_xreadgroup_xack_xpending_answer_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    for i in range(1, 7):
        s("XADD", "s", f"{i}-0", "n", str(i))
    s("XGROUP", "CREATE", "s", "g", "0")
    s("XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">")
    s("XREADGROUP", "GROUP", "g", "bob", "COUNT", "1", "STREAMS", "s", ">")
    s("XREADGROUP", "GROUP", "g", "bob", "NOACK", "COUNT", "1", "STREAMS", "s", ">")  # 4-0, not pending
    s("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0")  # alice's history
    s("XREADGROUP", "GROUP", "g", "alice", "COUNT", "1", "STREAMS", "s", "1-0")
    s("XREADGROUP", "GROUP", "g", "carol", "STREAMS", "s", "0")  # no history: created, empty
    s("XPENDING", "s", "g")
    same(both, "XPENDING", "s", "g", "-", "+", "10", normalize=idle_blind)
    same(both, "XPENDING", "s", "g", "-", "+", "10", "alice", normalize=idle_blind)
    same(both, "XPENDING", "s", "g", "(1-0", "+", "1", normalize=idle_blind)
    same(both, "XPENDING", "s", "g", "IDLE", "86400000", "-", "+", "10", normalize=idle_blind)
    same(both, "XPENDING", "s", "g", "IDLE", "0", "-", "+", "10", "bob", normalize=idle_blind)
    s("XPENDING", "s", "g", "-", "+", "10", "nobody")
    s("XPENDING", "s", "g", "-", "+")
    s("XPENDING", "s", "g", "IDLE", "x", "-", "+", "1")
    s("XPENDING", "s", "nog")
    s("XPENDING", "nokey", "g")
    s("XACK", "s", "g", "1-0", "2-0", "2-0", "9-0")
    s("XACK", "s", "g", "1-0")
    s("XACK", "s", "nog", "3-0")
    s("XACK", "nokey", "g", "3-0")
    s("XACK", "s", "g", "x")
    s("XPENDING", "s", "g")
    s("XDEL", "s", "3-0")  # bob's pending entry is gone from the stream
    s("XREADGROUP", "GROUP", "g", "bob", "STREAMS", "s", "0")
    s("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">")
    s("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">")  # nothing new
    s("XINFO", "GROUPS", "s")
    s("XINFO", "CONSUMERS", "s", "g")
    s("XINFO", "STREAM", "s", "FULL")
    s("XINFO", "STREAM", "s", "FULL", "COUNT", "1")
    # errors
    s("XREADGROUP", "GROUP", "nog", "c", "STREAMS", "s", ">")
    s("XREADGROUP", "GROUP", "g", "c", "STREAMS", "nokey", ">")
    s("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "$")
    s("XREADGROUP", "STREAMS", "s", ">")
    s("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s")
    s("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "x")
    s("SET", "str", "x")
    s("XREADGROUP", "GROUP", "g", "c", "STREAMS", "str", ">")


def test_xclaim_and_xautoclaim_answer_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    for i in range(1, 8):
        s("XADD", "s", f"{i}-0", "n", str(i))
    s("XGROUP", "CREATE", "s", "g", "0")
    s("XREADGROUP", "GROUP", "g", "alice", "COUNT", "5", "STREAMS", "s", ">")
    s("XCLAIM", "s", "g", "bob", "86400000", "1-0")  # not idle that long
    s("XCLAIM", "s", "g", "bob", "0", "1-0", "2-0", "9-0")
    s("XCLAIM", "s", "g", "bob", "0", "3-0", "JUSTID")
    s("XCLAIM", "s", "g", "bob", "0", "4-0", "RETRYCOUNT", "7", "JUSTID")
    s("XCLAIM", "s", "g", "bob", "0", "6-0", "FORCE", "JUSTID")  # not pending: FORCE makes it so
    s("XCLAIM", "s", "g", "bob", "0", "7-0", "JUSTID")  # not pending, no FORCE: nothing
    s("XCLAIM", "s", "g", "bob", "0", "5-0", "IDLE", "1000", "JUSTID")
    s("XCLAIM", "s", "g", "bob", "0", "5-0", "TIME", "1000", "JUSTID")
    s("XCLAIM", "s", "g", "bob", "0", "5-0", "LASTID", "7-0", "JUSTID")
    s("XINFO", "GROUPS", "s")
    same(both, "XPENDING", "s", "g", "-", "+", "10", normalize=idle_blind)
    s("XCLAIM", "s", "g", "bob", "0", "5-0", "FOO")
    s("XCLAIM", "s", "g", "bob", "x", "5-0")
    s("XCLAIM", "s", "g", "bob", "0", "5-0", "IDLE", "x")
    s("XCLAIM", "s", "g", "bob", "0", "5-0", "TIME", "x")
    s("XCLAIM", "s", "g", "bob", "0", "5-0", "RETRYCOUNT", "x")
    s("XCLAIM", "s", "nog", "bob", "0", "5-0")
    s("XCLAIM", "nokey", "g", "bob", "0", "5-0")
    s("XDEL", "s", "2-0")
    s("XCLAIM", "s", "g", "carol", "0", "2-0")  # deleted: it leaves the PEL
    s("XAUTOCLAIM", "s", "g", "carol", "0", "0", "COUNT", "2")
    s("XAUTOCLAIM", "s", "g", "carol", "0", "0", "JUSTID")
    s("XDEL", "s", "4-0")
    s("XAUTOCLAIM", "s", "g", "dave", "0", "(1-0")
    s("XAUTOCLAIM", "s", "g", "dave", "86400000", "0")
    s("XAUTOCLAIM", "s", "g", "dave", "0", "0", "COUNT", "0")
    s("XAUTOCLAIM", "s", "g", "dave", "x", "0")
    s("XAUTOCLAIM", "s", "g", "dave", "0", "x")
    s("XAUTOCLAIM", "s", "g", "dave", "0", "0", "FOO")
    s("XAUTOCLAIM", "s", "nog", "dave", "0", "0")
    s("XAUTOCLAIM", "nokey", "g", "dave", "0", "0")
    s("XINFO", "CONSUMERS", "s", "g")
    s("XPENDING", "s", "g")


def test_xinfo_answers_like_redis(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    s("XINFO", "STREAM", "nokey"), s("XINFO", "GROUPS", "nokey"), s("XINFO", "CONSUMERS", "nokey", "g")
    s("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    s("XINFO", "STREAM", "s"), s("XINFO", "STREAM", "s", "FULL")
    for i in range(1, 5):
        s("XADD", "s", f"{i}-0", "n", str(i))
    s("XREADGROUP", "GROUP", "g", "c", "COUNT", "1", "STREAMS", "s", ">")
    s("XDEL", "s", "2-0")  # a deleted entry: lag can no longer be computed
    s("XINFO", "GROUPS", "s")
    s("XINFO", "STREAM", "s")
    s("XINFO", "STREAM", "s", "FULL", "COUNT", "0")
    s("XINFO", "STREAM", "s", "FULL", "COUNT", "-1")
    s("XINFO", "STREAM", "s", "FULL", "COUNT")
    s("XINFO", "STREAM", "s", "FOO")
    s("XINFO", "CONSUMERS", "s", "nog")
    s("XINFO", "HELP"), s("XINFO", "FOO")
    s("SET", "str", "x"), s("XINFO", "STREAM", "str")


def test_stream_keys_in_the_keyspace_commands(both):
    s = lambda *a: same(both, *a)  # noqa: E731
    s("XADD", "s", "1-0", "a", "b"), s("XGROUP", "CREATE", "s", "g", "0")
    s("TYPE", "s"), s("EXISTS", "s"), s("EXPIRE", "s", "100"), s("PERSIST", "s"), s("KEYS", "*")
    s("GET", "s"), s("LPUSH", "s", "x"), s("DBSIZE")
    s("DEL", "s"), s("TYPE", "s"), s("XINFO", "GROUPS", "s")
    s("XADD", "s", "1-0", "a", "b")  # after DEL the stream starts over (ids may go back)
    s("XINFO", "GROUPS", "s")  # the old groups are gone


# -- blocking: several clients, the same steps on both servers --------------------------------

def blocked_count(client) -> int:
    return int(info_section(client, "clients")["blocked_clients"])


class Blocked(threading.Thread):
    """One client running one blocking command on its own connection."""

    def __init__(self, node, proto: int, *args):
        super().__init__(daemon=True)
        self.client = _raw(node.client(protocol=proto, socket_timeout=30))
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
        return self.error if self.error is not None else self.reply


def block(node, proto, admin, *args) -> Blocked:
    """Start a blocked client and wait until the server shows it blocked."""
    before = blocked_count(admin)
    b = Blocked(node, proto, *args)
    b.start()
    wait_for(lambda: blocked_count(admin) > before, 20, f"{args} blocked")
    return b


@pytest.fixture(params=["marekvs", "redis"])
def server(request, shared_node, real_redis, proto):
    node = shared_node if request.param == "marekvs" else real_redis
    admin = _raw(node.client(protocol=proto, socket_timeout=10))
    admin.flushall()
    yield node, admin, proto
    admin.close()


def streams_of(reply, proto) -> dict:
    """XREAD's reply as {key: entries} in either protocol."""
    return dict(reply) if proto == 3 else {k: v for k, v in reply}


def test_xread_block_is_woken_by_an_xadd_from_another_client(server):
    node, admin, proto = server
    admin.execute_command("XADD", "s", "1-0", "old", "x")
    b = block(node, proto, admin, "XREAD", "BLOCK", "0", "STREAMS", "s", "other", "$", "$")
    admin.execute_command("XADD", "other", "5-0", "new", "y")
    assert streams_of(b.result(), proto) == {b"other": [[b"5-0", [b"new", b"y"]]]}
    # a key that does not exist yet, COUNT, an explicit id
    b = block(node, proto, admin, "XREAD", "COUNT", "1", "BLOCK", "0", "STREAMS", "later", "0-0")
    admin.execute_command("XADD", "later", "7-0", "a", "b")
    assert streams_of(b.result(), proto) == {b"later": [[b"7-0", [b"a", b"b"]]]}


def test_xread_block_waits_through_changes_that_add_nothing(server):
    node, admin, proto = server
    admin.execute_command("XADD", "s", "1-0", "a", "b")
    admin.execute_command("XADD", "s", "2-0", "a", "b")
    b = block(node, proto, admin, "XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    admin.execute_command("XDEL", "s", "1-0")
    admin.execute_command("XGROUP", "CREATE", "s", "g", "0")
    assert b.is_alive() and blocked_count(admin) == 1
    admin.execute_command("XADD", "s", "3-0", "c", "d")
    assert streams_of(b.result(), proto) == {b"s": [[b"3-0", [b"c", b"d"]]]}


def test_xread_block_times_out_with_a_null_reply(server):
    node, admin, proto = server
    c = _raw(node.client(protocol=proto, socket_timeout=20))
    t0 = time.monotonic()
    assert c.execute_command("XREAD", "BLOCK", "200", "STREAMS", "nokey", "$") is None
    assert time.monotonic() - t0 >= 0.2
    c.close()


def test_xreadgroup_block_is_woken_first_blocked_first_served(server):
    node, admin, proto = server
    admin.execute_command("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    waiters = [block(node, proto, admin, "XREADGROUP", "GROUP", "g", f"c{i}", "BLOCK", "0",
                     "STREAMS", "s", ">") for i in range(2)]
    admin.execute_command("XADD", "s", "1-0", "n", "1")
    assert streams_of(waiters[0].result(), proto) == {b"s": [[b"1-0", [b"n", b"1"]]]}
    assert waiters[1].is_alive()
    admin.execute_command("XADD", "s", "2-0", "n", "2")
    assert streams_of(waiters[1].result(), proto) == {b"s": [[b"2-0", [b"n", b"2"]]]}
    pend = admin.execute_command("XPENDING", "s", "g", "-", "+", "10")
    assert [(e[0], e[1], e[3]) for e in pend] == [(b"1-0", b"c0", 1), (b"2-0", b"c1", 1)]


def test_xreadgroup_block_on_a_destroyed_group_gets_nogroup(server):
    node, admin, proto = server
    admin.execute_command("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
    b = block(node, proto, admin, "XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">")
    admin.execute_command("XGROUP", "DESTROY", "s", "g")
    admin.execute_command("XADD", "s", "1-0", "a", "b")
    assert b.result() == "NOGROUP the consumer group this client was blocked on no longer exists"


def test_client_unblock_ends_a_blocked_xread(server):
    node, admin, proto = server
    b = block(node, proto, admin, "XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    assert admin.execute_command("CLIENT", "UNBLOCK", b.id, "TIMEOUT") == 1
    assert b.result() is None
    b = block(node, proto, admin, "XREAD", "BLOCK", "0", "STREAMS", "s", "$")
    assert admin.execute_command("CLIENT", "UNBLOCK", b.id, "ERROR") == 1
    assert b.result() == "UNBLOCKED client unblocked via CLIENT UNBLOCK"


# -- MULTI/EXEC ------------------------------------------------------------------------------

def test_stream_commands_in_multi_exec_answer_like_redis(both):
    out = []
    for c in both:
        c.execute_command("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM")
        p = c.pipeline(transaction=True)
        p.execute_command("XADD", "s", "1-0", "a", "b")
        p.execute_command("XADD", "s", "2-0", "c", "d")
        p.execute_command("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
        p.execute_command("XACK", "s", "g", "1-0")
        p.execute_command("XPENDING", "s", "g")
        p.execute_command("XREAD", "BLOCK", "0", "STREAMS", "s", "$")  # answers at once: null
        p.execute_command("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", "s", ">")
        p.execute_command("XLEN", "s")
        out.append(p.execute())
    assert out[0] == out[1]
    assert out[0][5] is None and out[0][6] is None and out[0][7] == 2


WATCH_CASES = [(("XADD", "s", "5-0", "a", "b"), True), (("XDEL", "s", "1-0"), True),
               (("XTRIM", "s", "MAXLEN", "0"), True), (("DEL", "s"), True),
               (("XREADGROUP", "GROUP", "g", "x", "STREAMS", "s", ">"), False),
               (("XREADGROUP", "GROUP", "g", "x", "STREAMS", "s", "0"), False),
               (("XACK", "s", "g", "1-0"), False), (("XCLAIM", "s", "g", "y", "0", "1-0"), False),
               (("XAUTOCLAIM", "s", "g", "w", "0", "0"), False), (("XGROUP", "CREATE", "s", "g2", "0"), False),
               (("XGROUP", "SETID", "s", "g", "0"), False), (("XGROUP", "DESTROY", "s", "g"), False),
               (("XGROUP", "CREATECONSUMER", "s", "g", "z"), False),
               (("XGROUP", "DELCONSUMER", "s", "g", "x"), False), (("XSETID", "s", "9-0"), False)]


@pytest.mark.parametrize("change,aborts", WATCH_CASES, ids=[" ".join(c[:2]) for c, _ in WATCH_CASES])
def test_watch_on_a_stream_aborts_on_its_entries_not_on_its_groups(both, change, aborts):
    """As in Redis: entries changed (XADD, XDEL, XTRIM, DEL) abort a transaction that
    WATCHes the stream; consumer-group bookkeeping (reads, acks, claims, XGROUP) and XSETID
    do not."""
    for c in both:
        c.execute_command("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM")
        c.execute_command("XADD", "s", "1-0", "a", "b")
        c.execute_command("XREADGROUP", "GROUP", "g", "x", "STREAMS", "s", ">")
        conn = c.connection_pool.get_connection()
        conn.send_command("WATCH", "s")
        assert conn.read_response() in (b"OK", "OK")
        c.execute_command(*change)
        for cmd in (("MULTI",), ("PING",)):
            conn.send_command(*cmd)
            conn.read_response()
        conn.send_command("EXEC")
        assert (conn.read_response() is None) == aborts, c
        c.connection_pool.release(conn)


# -- notifications, hits and misses ----------------------------------------------------------

SCRIPT = [
    ("XGROUP", "CREATE", "s", "g", "$", "MKSTREAM"),
    ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"),  # nothing: no consumer created
    ("XADD", "s", "1-1", "a", "b"),
    ("XREADGROUP", "GROUP", "g", "c2", "STREAMS", "s", "0"),  # history: the consumer is created
    ("XADD", "s", "MAXLEN", "1", "2-1", "a", "b"),
    ("XREADGROUP", "GROUP", "g", "c3", "STREAMS", "s", ">"),
    ("XCLAIM", "s", "g", "c4", "0", "2-1"),
    ("XCLAIM", "s", "g", "c5", "0", "9-1"),  # nothing claimed: not created
    ("XAUTOCLAIM", "s", "g", "c6", "0", "0"),
    ("XACK", "s", "g", "2-1"),
    ("XGROUP", "SETID", "s", "g", "0"),
    ("XGROUP", "CREATECONSUMER", "s", "g", "c9"),
    ("XGROUP", "CREATECONSUMER", "s", "g", "c9"),
    ("XGROUP", "DELCONSUMER", "s", "g", "c9"),
    ("XGROUP", "DELCONSUMER", "s", "g", "zz"),
    ("XSETID", "s", "5-0"),
    ("XDEL", "s", "2-1"),
    ("XDEL", "s", "2-1"),
    ("XTRIM", "s", "MAXLEN", "0"),
    ("XADD", "s", "6-0", "a", "b"),
    ("XTRIM", "s", "MAXLEN", "0"),
    ("XGROUP", "DESTROY", "s", "g"),
    ("XADD", "nokey", "NOMKSTREAM", "*", "a", "b"),
    ("DEL", "s"),
]


def _events(node, proto, script) -> list:
    sub = node.client(protocol=proto, socket_timeout=10)
    c = node.client(protocol=proto, socket_timeout=10)
    c.flushall()
    c.config_set("notify-keyspace-events", "KEA")
    ps = sub.pubsub()
    ps.psubscribe("__key*__:*")
    assert ps.get_message(timeout=10)["type"] == "psubscribe"
    for cmd in script:
        run(c, cmd)
    c.execute_command("PUBLISH", "end", "x")  # the last message: everything before it arrived
    ps.psubscribe("end")
    got = []
    while True:
        m = ps.get_message(timeout=10)
        assert m is not None, got
        if m["type"] == "psubscribe":
            break
        got.append((m["channel"], m["data"]))
    c.config_set("notify-keyspace-events", "")
    ps.close()
    sub.close()
    c.close()
    return got


def test_keyspace_notifications_are_redis_s(shared_node, real_redis, proto):
    got = _events(shared_node, proto, SCRIPT)
    assert got == _events(real_redis, proto, SCRIPT)
    assert (b"__keyevent@0__:xgroup-createconsumer", b"s") in got


HM_SETUP = [("XADD", "s", "1-1", "a", "b"), ("XGROUP", "CREATE", "s", "g", "0"),
            ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")]
HM_CASES = [
    ("XADD", "s", "*", "a", "b"), ("XLEN", "s"), ("XLEN", "nokey"), ("XRANGE", "s", "-", "+"),
    ("XREVRANGE", "nokey", "+", "-"), ("XREAD", "STREAMS", "s", "nokey", "0", "0"),
    ("XREAD", "STREAMS", "s", "$"), ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">"),
    ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", "0"), ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "nokey", ">"),
    ("XDEL", "s", "1-1"), ("XTRIM", "s", "MAXLEN", "0"), ("XSETID", "s", "9-9"), ("XACK", "s", "g", "1-1"),
    ("XACK", "nokey", "g", "1-1"), ("XPENDING", "s", "g"), ("XPENDING", "s", "g", "-", "+", "5"),
    ("XCLAIM", "s", "g", "d", "0", "1-1"), ("XAUTOCLAIM", "nokey", "g", "d", "0", "0"),
    ("XGROUP", "CREATE", "s", "g2", "0"), ("XGROUP", "DESTROY", "s", "g"), ("XINFO", "STREAM", "s"),
    ("XINFO", "STREAM", "s", "FULL"), ("XINFO", "GROUPS", "nokey"), ("XINFO", "CONSUMERS", "s", "g"),
    ("SET", "str", "x"), ("XLEN", "str"), ("XREAD", "STREAMS", "str", "0"),
]


def _hits_misses(node, proto) -> list:
    c = _raw(node.client(protocol=proto, socket_timeout=10))
    out = []
    for cmd in HM_CASES:
        c.flushall()
        for setup in HM_SETUP:
            c.execute_command(*setup)
        before = c.info("stats")
        run(c, cmd)
        after = c.info("stats")
        out.append((cmd, after["keyspace_hits"] - before["keyspace_hits"],
                    after["keyspace_misses"] - before["keyspace_misses"]))
    c.close()
    return out


def test_keyspace_hits_and_misses_are_counted_as_redis_counts_them(shared_node, real_redis, proto):
    assert _hits_misses(shared_node, proto) == _hits_misses(real_redis, proto)
