"""Hashes, sets and per-member TTL through redis-py against a real node, in RESP2 and RESP3.

Every command of the families, with its edge cases and error texts (those Redis 7.0 has
are also compared with redis-server by tests/integration/test_differential_hashes_sets.py);
Redis 7.4's HEXPIRE family and KeyDB's EXPIREMEMBER family, which redis-server 7.0 lacks,
are checked against their documented replies here. Waits for an expiry poll for it
under a generous deadline, never sleep a fixed time against it.
"""

from __future__ import annotations

import time

import pytest
import redis

from tests.integration.test_differential import Conn

WRONGTYPE = "WRONGTYPE Operation against a key holding the wrong kind of value"


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def r(request, shared_node):
    c = shared_node.client(protocol=request.param, socket_timeout=10)
    c.proto = request.param
    c.flushall()
    yield c
    c.close()


def raw(c, *args):
    """A command's reply as the protocol carries it (no redis-py reply callback): RESP3
    maps and sets arrive as dicts and sets, RESP2 as lists."""
    pool = c.connection_pool
    try:
        conn = pool.get_connection()
    except TypeError:  # redis-py < 5.3 wants the command name
        conn = pool.get_connection(args[0])
    try:
        conn.send_command(*args)
        return conn.read_response()
    finally:
        pool.release(conn)


def error_of(c, *args) -> str:
    with pytest.raises(redis.ResponseError) as e:
        c.execute_command(*args)
    return str(e.value)


def wait_for(cond, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.01)


# -- hashes ---------------------------------------------------------------------------------

def test_hset_hget_hmget_hlen_hexists_hstrlen(r):
    assert r.hset("h", mapping={"a": "1", "b": "22"}) == 2
    assert raw(r, "HSET", "h", "a", "x", "c", "3", "a", "y") == 1  # a named twice: last wins
    assert r.hget("h", "a") == b"y" and r.hget("h", "nosuch") is None and r.hget("nokey", "a") is None
    assert r.hmget("h", ["a", "nosuch", "c"]) == [b"y", None, b"3"]
    assert r.hmget("nokey", ["a", "b"]) == [None, None]
    assert r.hlen("h") == 3 and r.hlen("nokey") == 0
    assert r.hexists("h", "b") is True and r.hexists("h", "zz") is False
    assert r.hstrlen("h", "b") == 2 and r.hstrlen("h", "zz") == 0
    assert raw(r, "HMSET", "h", "d", "4") == b"OK"
    assert r.hsetnx("h", "d", "nope") == 0 and r.hsetnx("h", "e", "5") == 1 and r.hget("h", "d") == b"4"
    assert error_of(r, "HSET", "h", "a") == "wrong number of arguments for 'hset' command"
    assert error_of(r, "HSET", "h", "a", "1", "b") == "wrong number of arguments for 'hset' command"
    assert error_of(r, "HMSET", "h", "a", "1", "b") == "wrong number of arguments for 'hmset' command"
    assert error_of(r, "HGET", "h") == "wrong number of arguments for 'hget' command"


def test_binary_and_empty_fields_and_values(r):
    assert r.hset("h", b"\x00\xff", b"") == 1
    assert r.hset("h", b"", b"\r\n") == 1
    assert r.hget("h", b"\x00\xff") == b"" and r.hget("h", b"") == b"\r\n"
    assert r.hgetall("h") == {b"": b"\r\n", b"\x00\xff": b""}


def test_hkeys_hvals_hgetall_shapes(r):
    assert r.hgetall("h") == {} and r.hkeys("h") == [] and r.hvals("h") == []
    r.hset("h", mapping={"b": "2", "a": "1"})
    assert sorted(r.hkeys("h")) == [b"a", b"b"] and sorted(r.hvals("h")) == [b"1", b"2"]
    assert r.hgetall("h") == {b"a": b"1", b"b": b"2"}
    flat = raw(r, "HGETALL", "h")
    if r.proto == 3:
        assert flat == {b"a": b"1", b"b": b"2"}  # a RESP3 map
    else:
        assert flat == [b"a", b"1", b"b", b"2"]


def test_hdel_and_an_emptied_hash_vanishes(r):
    r.hset("h", mapping={"a": "1", "b": "2"})
    assert r.hdel("h", "a", "a", "zz") == 1
    assert r.exists("h") == 1 and r.type("h") == b"hash"
    assert r.hdel("h", "b") == 1
    assert r.exists("h") == 0 and r.type("h") == b"none" and r.keys("*") == [] and r.dbsize() == 0
    assert r.delete("h") == 0
    assert r.set("h", "now a string") is True and r.get("h") == b"now a string"
    r.delete("h")
    assert r.sadd("h", "m") == 1 and r.type("h") == b"set"  # no WRONGTYPE from the emptied hash


def test_an_emptied_hash_with_a_key_ttl_comes_back_without_it(r):
    r.hset("h", "a", "1")
    assert r.expire("h", 1000) is True
    r.hdel("h", "a")
    r.hset("h", "b", "2")
    assert r.ttl("h") == -1


def test_hincrby(r):
    assert r.hincrby("h", "n", 5) == 5 and r.hincrby("h", "n", -7) == -2
    r.hset("h", mapping={"s": "abc", "max": "9223372036854775807", "plus": "+1", "sp": " 1"})
    assert error_of(r, "HINCRBY", "h", "s", 1) == "hash value is not an integer"
    assert error_of(r, "HINCRBY", "h", "plus", 1) == "hash value is not an integer"
    assert error_of(r, "HINCRBY", "h", "sp", 1) == "hash value is not an integer"
    assert error_of(r, "HINCRBY", "h", "max", 1) == "increment or decrement would overflow"
    assert error_of(r, "HINCRBY", "h", "n", "x") == "value is not an integer or out of range"
    assert error_of(r, "HINCRBY", "h", "n", "1.5") == "value is not an integer or out of range"
    assert r.hget("h", "max") == b"9223372036854775807"


def test_hincrbyfloat(r):
    assert r.hincrbyfloat("h", "f", 1.5) == 1.5
    assert raw(r, "HINCRBYFLOAT", "h", "f", "0.1") == b"1.6"
    assert raw(r, "HINCRBYFLOAT", "h", "i", "3") == b"3" and r.hget("h", "i") == b"3"
    r.hset("h", mapping={"s": "x", "inf": "inf"})
    assert error_of(r, "HINCRBYFLOAT", "h", "s", 1) == "hash value is not a float"
    assert error_of(r, "HINCRBYFLOAT", "h", "f", "x") == "value is not a valid float"
    assert error_of(r, "HINCRBYFLOAT", "h", "f", "inf") == "value is NaN or Infinity"
    assert error_of(r, "HINCRBYFLOAT", "h", "inf", "1") == "increment would produce NaN or Infinity"
    big = raw(r, "HINCRBYFLOAT", "h", "big", "1e308")  # the long double nearest 1e308, %.17Lf
    assert big.startswith(b"99999999999999999996685879655845645660560099847415567207797047") and len(big) == 308


def test_hrandfield(r):
    assert r.hrandfield("nokey") is None and raw(r, "HRANDFIELD", "nokey", 3) == []
    fields = {b"f%d" % i: b"v%d" % i for i in range(20)}
    r.hset("h", mapping=fields)
    assert r.hrandfield("h") in fields
    got = r.hrandfield("h", 5)
    assert len(got) == len(set(got)) == 5 and set(got) <= set(fields)
    assert sorted(r.hrandfield("h", 100)) == sorted(fields)
    rep = r.hrandfield("h", -30)
    assert len(rep) == 30 and set(rep) <= set(fields)  # repetitions allowed
    pairs = raw(r, "HRANDFIELD", "h", -3, "WITHVALUES")
    if r.proto == 3:
        assert len(pairs) == 3 and all(fields[f] == v for f, v in pairs)
    else:
        assert len(pairs) == 6 and all(fields[f] == v for f, v in zip(pairs[::2], pairs[1::2]))
    assert raw(r, "HRANDFIELD", "h", 0) == []
    assert error_of(r, "HRANDFIELD", "h", 1, "WITHVALUE") == "syntax error"
    assert error_of(r, "HRANDFIELD", "h", "x") == "value is not an integer or out of range"
    assert error_of(r, "HRANDFIELD", "h", 4611686018427387904, "WITHVALUES") == "value is out of range"
    assert error_of(r, "HRANDFIELD", "h", -9223372036854775808) == (
        "value is out of range, value must between -9223372036854775807 and 9223372036854775807")
    # a count whose reply Redis would build until memory runs out (docs/divergences.md)
    assert error_of(r, "HRANDFIELD", "h", -(1 << 40)).startswith("count exceeds")


def test_hscan_iterates_everything_in_pages(r):
    fields = {b"field:%04d" % i: b"%d" % i for i in range(500)}
    r.hset("h", mapping=fields)
    cursor, seen, calls = 0, {}, 0
    while True:
        cursor, page = r.hscan("h", cursor, count=37)
        seen.update(page)
        calls += 1
        if cursor == 0:
            break
    assert seen == fields and calls > 10
    assert dict(r.hscan_iter("h", match="field:00*")) == {f: v for f, v in fields.items() if f.startswith(b"field:00")}
    cursor, page = raw(r, "HSCAN", "h", 0, "COUNT", 3, "NOVALUES")
    # (a page may be short: a call also reads at most 10 x COUNT dead records, e.g. the
    # fields of hashes this shared node held before)
    assert 1 <= len(page) <= 3 and all(f in fields for f in page)
    assert raw(r, "HSCAN", "nokey", 0, "BADOPTION") == [b"0", []]  # no key: options unread, as Redis
    assert error_of(r, "HSCAN", "h", "x") == "invalid cursor"
    assert error_of(r, "HSCAN", "h", 0, "COUNT", 0) == "syntax error"
    assert error_of(r, "HSCAN", "h", 0, "FOO") == "syntax error"


def test_hscan_returns_every_field_present_for_the_whole_iteration(r):
    stay = {b"s:%03d" % i: b"1" for i in range(200)}
    r.hset("h", mapping=stay)
    cursor, seen, i = 0, set(), 0
    while True:
        cursor, page = r.hscan("h", cursor, count=10)
        seen.update(page)
        # fields come and go between the calls: removed ones before the cursor, new ones
        r.hset("h", b"new:%03d" % i, b"x")
        r.hset("h", b"a:%03d" % i, b"x")
        r.hdel("h", b"a:%03d" % (i - 1))
        i += 1
        if cursor == 0:
            break
    assert set(stay) <= seen


# -- sets ------------------------------------------------------------------------------------

def test_sadd_srem_sismember_smismember_scard_smembers(r):
    assert r.sadd("s", "a", "b", "a") == 2 and r.sadd("s", "b", "c") == 1
    assert r.sismember("s", "a") == 1 and r.sismember("s", "z") == 0
    assert r.sismember("nokey", "a") == 0
    assert [int(x) for x in r.smismember("s", ["a", "z", "c"])] == [1, 0, 1]
    assert r.scard("s") == 3 and r.scard("nokey") == 0
    assert r.smembers("s") == {b"a", b"b", b"c"} and r.smembers("nokey") == set()
    assert r.srem("s", "a", "z", "a") == 1 and r.srem("nokey", "a") == 0
    assert r.srem("s", "b", "c") == 2
    assert r.exists("s") == 0 and r.type("s") == b"none" and r.scard("s") == 0


def test_reply_types_in_resp3(shared_node):
    """Sets, maps and arrays as Redis 7.0 types them (the bytes: redis-py's hiredis parser
    reads a RESP3 set as a list)."""
    c = Conn(shared_node.port)
    try:
        assert c.call([b"HELLO", b"3"])[:1] == b"%"
        c.call([b"FLUSHALL"])
        c.call([b"SADD", b"s", b"x"])
        c.call([b"HSET", b"h", b"f", b"v"])
        c.call([b"HSET", b"types:h", b"f", b"v"])  # (a key no other test used: no dead fields)
        assert c.call([b"SMEMBERS", b"s"]) == b"~1\r\n$1\r\nx\r\n"
        assert c.call([b"SINTER", b"s"]) == b"~1\r\n$1\r\nx\r\n"
        assert c.call([b"SPOP", b"nokey", b"2"]) == b"~0\r\n"
        assert c.call([b"SRANDMEMBER", b"s", b"5"]) == b"*1\r\n$1\r\nx\r\n"
        assert c.call([b"HGETALL", b"h"]) == b"%1\r\n$1\r\nf\r\n$1\r\nv\r\n"
        assert c.call([b"HRANDFIELD", b"h", b"1", b"WITHVALUES"]) == b"*1\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
        assert c.call([b"HSCAN", b"types:h", b"0"]) == b"*2\r\n$1\r\n0\r\n*2\r\n$1\r\nf\r\n$1\r\nv\r\n"
        assert c.call([b"HGET", b"h", b"nosuch"]) == b"_\r\n"
        assert c.call([b"HTTL", b"h", b"FIELDS", b"1", b"f"]) == b"*1\r\n:-1\r\n"
    finally:
        c.close()


def test_spop(r):
    members = {b"m%d" % i for i in range(10)}
    r.sadd("s", *members)
    one = r.spop("s")
    assert one in members and r.sismember("s", one) == 0 and r.scard("s") == 9
    three = r.spop("s", 3)
    assert len(set(three)) == 3 and set(three) <= members - {one} and r.scard("s") == 6
    rest = r.spop("s", 100)
    assert len(rest) == 6 and r.exists("s") == 0
    assert r.spop("s") is None and raw(r, "SPOP", "s", 2) in ([], set())
    r.sadd("s", "a")
    assert error_of(r, "SPOP", "s", -1) == "value is out of range, must be positive"
    assert error_of(r, "SPOP", "s", "x") == "value is out of range, must be positive"
    assert error_of(r, "SPOP", "s", 1, 2) == "syntax error"


def test_srandmember(r):
    assert r.srandmember("nokey") is None and r.srandmember("nokey", 5) == []
    members = {b"%d" % i for i in range(30)}
    r.sadd("s", *members)
    assert r.srandmember("s") in members
    got = r.srandmember("s", 10)
    assert len(set(got)) == 10 and set(got) <= members
    assert sorted(r.srandmember("s", 100)) == sorted(members)
    assert len(r.srandmember("s", -100)) == 100
    assert r.srandmember("s", 0) == []
    assert r.scard("s") == 30  # read only
    assert error_of(r, "SRANDMEMBER", "s", "x") == "value is not an integer or out of range"
    assert error_of(r, "SRANDMEMBER", "s", 1, 2) == "syntax error"


def test_random_picks_are_spread_over_the_members(r):
    members = [b"%03d" % i for i in range(50)]
    r.sadd("s", *members)
    picks = r.srandmember("s", -5000)
    counts = {m: picks.count(m) for m in members}
    assert min(counts.values()) > 40 and max(counts.values()) < 200  # ~100 each when uniform


def test_smove(r):
    r.sadd("src", "a", "b")
    assert r.smove("src", "dst", "a") is True and r.smembers("dst") == {b"a"} and r.smembers("src") == {b"b"}
    assert r.smove("src", "dst", "zz") is False
    assert r.smove("nokey", "dst", "a") is False
    r.set("str", "v")
    assert r.smove("nokey", "str", "a") is False  # no source: 0, whatever the destination
    assert error_of(r, "SMOVE", "src", "str", "b") == WRONGTYPE
    assert error_of(r, "SMOVE", "str", "src", "b") == WRONGTYPE
    assert r.smove("src", "src", "b") is True and r.smove("src", "src", "zz") is False
    assert r.smove("src", "dst", "b") is True and r.exists("src") == 0 and r.scard("dst") == 2


def test_sinter_sunion_sdiff_and_store(r):
    r.sadd("a", "1", "2", "3", "4")
    r.sadd("b", "3", "4", "5")
    r.sadd("c", "4", "6")
    assert r.sinter("a", "b") == {b"3", b"4"} and r.sinter("a", "b", "c") == {b"4"}
    assert r.sinter("a", "nokey") == set() and r.sunion("a", "nokey") == {b"1", b"2", b"3", b"4"}
    assert r.sunion("a", "b", "c") == {b"1", b"2", b"3", b"4", b"5", b"6"}
    assert r.sdiff("a", "b") == {b"1", b"2"} and r.sdiff("a", "b", "c") == {b"1", b"2"}
    assert r.sdiff("nokey", "a") == set()
    assert r.sintercard(2, ["a", "b"]) == 2 and r.sintercard(2, ["a", "b"], limit=1) == 1
    assert r.sintercard(3, ["a", "b", "c"], limit=0) == 1
    assert r.sinterstore("d", ["a", "b"]) == 2 and r.smembers("d") == {b"3", b"4"}
    assert r.sunionstore("d", ["b", "c"]) == 4 and r.smembers("d") == {b"3", b"4", b"5", b"6"}
    assert r.sdiffstore("d", ["a", "d"]) == 2 and r.smembers("d") == {b"1", b"2"}
    assert r.sinterstore("d", ["a", "nokey"]) == 0 and r.exists("d") == 0
    r.set("str", "v")
    assert r.sunionstore("str", ["a"]) == 4 and r.type("str") == b"set"  # any type is replaced
    r.hset("h", "f", "v")
    assert error_of(r, "SINTER", "a", "nokey", "h") == WRONGTYPE
    assert error_of(r, "SINTER", "nokey", "h") == WRONGTYPE  # every key is checked (Redis 7.0)
    assert error_of(r, "SINTERCARD", 0, "a") == "numkeys should be greater than 0"
    assert error_of(r, "SINTERCARD", 3, "a", "b") == "Number of keys can't be greater than number of args"
    assert error_of(r, "SINTERCARD", 1, "a", "LIMIT", -1) == "LIMIT can't be negative"
    assert error_of(r, "SINTERCARD", 1, "a", "FOO") == "syntax error"


def test_sscan(r):
    members = {b"m%04d" % i for i in range(300)}
    r.sadd("s", *members)
    assert set(r.sscan_iter("s", count=7)) == members
    assert set(r.sscan_iter("s", match="m000*")) == {m for m in members if m.startswith(b"m000")}
    assert raw(r, "SSCAN", "nokey", 0) == [b"0", []]
    assert error_of(r, "SSCAN", "s", 0, "NOVALUES") == "syntax error"  # a hash-only option


def test_wrongtype_both_ways(r):
    r.set("str", "v")
    r.sadd("s", "a")
    r.hset("h", "f", "v")
    for args in (("HSET", "str", "f", "v"), ("HGET", "s", "f"), ("HLEN", "s"), ("HGETALL", "str"),
                 ("SADD", "h", "a"), ("SCARD", "str"), ("SMEMBERS", "h"), ("SPOP", "h"), ("HSCAN", "s", 0),
                 ("SSCAN", "h", 0), ("HINCRBY", "s", "f", 1), ("HRANDFIELD", "s"), ("GET", "h"), ("INCR", "s")):
        assert error_of(r, *args) == WRONGTYPE, args


# -- field TTLs (Redis 7.4) ------------------------------------------------------------------

def test_hexpire_httl_hpersist(r):
    r.hset("h", mapping={"a": "1", "b": "2"})
    assert raw(r, "HEXPIRE", "h", 100, "FIELDS", 3, "a", "b", "zz") == [1, 1, -2]
    assert raw(r, "HTTL", "h", "FIELDS", 2, "a", "zz") == [100, -2]
    assert 99_000 < raw(r, "HPTTL", "h", "FIELDS", 1, "a")[0] <= 100_000
    now = int(time.time())
    assert abs(raw(r, "HEXPIRETIME", "h", "FIELDS", 1, "a")[0] - (now + 100)) <= 2
    assert abs(raw(r, "HPEXPIRETIME", "h", "FIELDS", 1, "a")[0] - (now + 100) * 1000) <= 2000
    assert raw(r, "HEXPIRE", "h", 50, "NX", "FIELDS", 1, "a") == [0]
    assert raw(r, "HEXPIRE", "h", 50, "GT", "FIELDS", 1, "a") == [0]
    assert raw(r, "HEXPIRE", "h", 50, "LT", "FIELDS", 1, "a") == [1]
    assert raw(r, "HEXPIRE", "h", 500, "XX", "FIELDS", 1, "a") == [1]
    assert raw(r, "HPERSIST", "h", "FIELDS", 3, "a", "b", "zz") == [1, 1, -2]
    assert raw(r, "HPERSIST", "h", "FIELDS", 1, "a") == [-1]
    assert raw(r, "HTTL", "h", "FIELDS", 1, "a") == [-1]
    # no TTL counts as infinite: GT never passes, LT always does; XX needs one
    assert raw(r, "HEXPIRE", "h", 50, "GT", "FIELDS", 1, "a") == [0]
    assert raw(r, "HEXPIRE", "h", 50, "XX", "FIELDS", 1, "a") == [0]
    assert raw(r, "HEXPIRE", "h", 50, "LT", "FIELDS", 1, "a") == [1]
    # a time in the past (or 0 seconds from now) deletes the field
    assert raw(r, "HEXPIRE", "h", 0, "FIELDS", 1, "a") == [2]
    assert raw(r, "HPEXPIREAT", "h", 1, "FIELDS", 1, "b") == [2]
    assert r.exists("h") == 0
    assert raw(r, "HEXPIRE", "nokey", 10, "FIELDS", 2, "a", "b") == [-2, -2]
    assert raw(r, "HTTL", "nokey", "FIELDS", 1, "a") == [-2]


def test_hset_drops_a_field_ttl_and_hincrby_keeps_it(r):
    r.hset("h", mapping={"a": "1", "n": "1"})
    raw(r, "HEXPIRE", "h", 100, "FIELDS", 2, "a", "n")
    r.hset("h", "a", "2")
    r.hincrby("h", "n", 1)
    assert raw(r, "HTTL", "h", "FIELDS", 2, "a", "n") == [-1, 100]


def test_hexpire_errors(r):
    r.hset("h", "a", "1")
    assert error_of(r, "HEXPIRE", "h", -1, "FIELDS", 1, "a") == "invalid expire time, must be >= 0"
    assert error_of(r, "HEXPIRE", "h", "x", "FIELDS", 1, "a") == "value is not an integer or out of range"
    assert error_of(r, "HEXPIRE", "h", 1 << 50, "FIELDS", 1, "a") == "invalid expire time in 'hexpire' command"
    assert error_of(r, "HPEXPIREAT", "h", 1 << 47, "FIELDS", 1, "a") == "invalid expire time in 'hpexpireat' command"
    assert error_of(r, "HEXPIRE", "h", 10, "BAD", "FIELDS", 1, "a") == (
        "Mandatory argument FIELDS is missing or not at the right position")
    assert error_of(r, "HEXPIRE", "h", 10, "FIELDS", 0, "a") == "Parameter `numFields` should be greater than 0"
    assert error_of(r, "HEXPIRE", "h", 10, "FIELDS", 2, "a") == (
        "The `numfields` parameter must match the number of arguments")
    assert error_of(r, "HTTL", "h", "FIELDS", "x", "a") == "Number of fields must be a positive integer"
    assert error_of(r, "HPERSIST", "h", "NOTFIELDS", 1, "a") == (
        "Mandatory argument FIELDS is missing or not at the right position")
    assert error_of(r, "HEXPIRE", "h", 10, "FIELDS", 1) == "wrong number of arguments for 'hexpire' command"
    r.set("str", "v")
    assert error_of(r, "HEXPIRE", "str", "x", "FIELDS", 1, "a") == WRONGTYPE  # the type first


def test_an_expired_field_is_absent_everywhere_and_the_last_one_takes_the_hash(r):
    r.hset("h", mapping={"a": "1", "b": "2"})
    assert r.hlen("h") == 2  # (counted now: the count must drop by itself)
    assert raw(r, "HPEXPIRE", "h", 30, "FIELDS", 1, "a") == [1]
    wait_for(lambda: r.hget("h", "a") is None)
    assert r.hlen("h") == 1 and r.hgetall("h") == {b"b": b"2"} and r.hkeys("h") == [b"b"]
    assert r.hexists("h", "a") is False and r.hmget("h", ["a", "b"]) == [None, b"2"]
    assert dict(r.hscan_iter("h")) == {b"b": b"2"}
    raw(r, "HPEXPIRE", "h", 30, "FIELDS", 1, "b")
    wait_for(lambda: r.exists("h") == 0)
    assert r.hlen("h") == 0 and r.type("h") == b"none" and r.keys("*") == []


# -- per-member TTL (KeyDB) ---------------------------------------------------------------------

def test_expiremember_on_sets_hashes_and_the_ttl_of_a_member(r):
    r.sadd("s", "a", "b")
    r.hset("h", "f", "v")
    assert raw(r, "EXPIREMEMBER", "s", "a", 100) == 1
    assert raw(r, "EXPIREMEMBER", "h", "f", 100000, "ms") == 1
    assert raw(r, "TTL", "s", "a") == 100 and 99_000 < raw(r, "PTTL", "s", "a") <= 100_000
    assert raw(r, "TTL", "h", "f") == 100
    assert raw(r, "TTL", "s", "b") == -1  # no TTL
    assert raw(r, "TTL", "s", "nosuch") == -1  # KeyDB: no such member reads as no TTL
    assert raw(r, "TTL", "nokey", "a") == -2
    assert raw(r, "TTL", "s") == -1  # the key's own TTL
    at = int(time.time()) + 500
    assert raw(r, "EXPIREMEMBERAT", "s", "b", at) == 1 and abs(raw(r, "TTL", "s", "b") - 500) <= 2
    assert raw(r, "PEXPIREMEMBERAT", "s", "b", at * 1000) == 1
    assert raw(r, "EXPIREMEMBER", "s", "nosuch", 10) == 0 and raw(r, "EXPIREMEMBER", "nokey", "a", 10) == 0
    r.sadd("s", "a")  # a re-add keeps the member's TTL (KeyDB: SADD of a member changes nothing)
    assert raw(r, "TTL", "s", "a") == 100
    r.set("str", "v")
    assert error_of(r, "EXPIREMEMBER", "str", "a", 10) == "object type is unsupported"
    assert raw(r, "TTL", "str", "a") == -1
    assert error_of(r, "EXPIREMEMBER", "s", "a", 10, "h") == "Invalid unit arg"
    assert error_of(r, "EXPIREMEMBER", "s", "a", 10, "s", "x") == "Invalid number of arguments"
    assert error_of(r, "EXPIREMEMBER", "s", "a", "x") == "value is not an integer or out of range"
    assert error_of(r, "TTL", "s", "a", "b") == "Invalid arguments"


def test_an_expired_member_is_absent_and_the_last_one_takes_the_set(r):
    r.sadd("s", "a", "b")
    assert r.scard("s") == 2
    assert raw(r, "EXPIREMEMBER", "s", "a", 30, "ms") == 1
    wait_for(lambda: r.sismember("s", "a") == 0)
    assert r.scard("s") == 1 and r.smembers("s") == {b"b"} and r.sinter("s", "s") == {b"b"}
    assert raw(r, "EXPIREMEMBER", "s", "b", 0) == 1  # a deadline now removes at once
    assert r.exists("s") == 0 and r.scard("s") == 0


def test_expiremember_works_on_a_zset_member_record(r, shared_node):
    """Zset commands are another family's; the member record under tag b'z' is an ORSWOT
    element, so EXPIREMEMBER reaches it through the registry (written here in-process
    style over the wire: ZADD if the family exists, else the test is skipped)."""
    try:
        r.zadd("z", {"m": 1.0})
    except redis.ResponseError:
        pytest.skip("ZADD is not implemented on this branch")
    assert raw(r, "EXPIREMEMBER", "z", "m", 100) == 1 and raw(r, "TTL", "z", "m") == 100
