"""DUMP and RESTORE side by side with a stock redis-server 7.0.15, every type both ways.

The same commands build the same value on a marekvs node and on redis-server; then the
payload marekvs DUMPs is RESTOREd into redis-server and the payload redis-server DUMPs
into marekvs, and both copies must read back as the original (every element, every
score). Values straddle Redis's encoding thresholds (listpack vs plain hashes and zsets,
intset vs plain sets, one quicklist node vs many, int-encoded, plain and LZF-compressed
strings). Where Redis's own payload is deterministic (strings, lists, zsets, intsets,
listpack hashes filled in field order) marekvs's must equal it byte for byte, with
``rdbcompression no`` on the Redis side (marekvs does not compress).

TTLs (relative, ABSTTL, already past, with and without REPLACE), every option error and
every malformed payload (a bad CRC, a newer RDB version, truncations, corrupted bytes,
impossible lengths) get redis-server's exact reply and write nothing. On a real
three-node cluster a RESTORE is an ordinary write: it reaches every node.
"""

from __future__ import annotations

import random
import struct
import time

import pytest
import redis

from marekvs.core import rdb
from marekvs.core.crc64 import crc64
from tests.cluster import Cluster
from tests.unit.test_rdb import canon

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def pair(shared_node, real_redis):
    mv, rs = shared_node.client(), real_redis.client()
    rs.config_set("sanitize-dump-payload", "yes")  # marekvs validates every payload deeply
    yield mv, rs
    rs.config_set("sanitize-dump-payload", "no")
    rs.config_set("rdbcompression", "yes")
    mv.close()
    rs.close()


@pytest.fixture(autouse=True)
def clean(pair):
    for c in pair:
        c.flushall()


def call(c: redis.Redis, *args):
    """A reply, or the error text."""
    try:
        return c.execute_command(*args)
    except redis.ResponseError as e:
        return ("error", str(e))


def both(pair, *args):
    mv, rs = pair
    got, want = call(mv, *args), call(rs, *args)
    assert got == want, (args, got, want)
    return got


def content(c: redis.Redis, key: str):
    """The whole value at ``key``, comparable across servers."""
    t = c.type(key).decode()
    if t == "string":
        return t, c.get(key)
    if t == "list":
        return t, c.lrange(key, 0, -1)
    if t == "set":
        return t, sorted(c.smembers(key))
    if t == "zset":
        return t, c.zrange(key, 0, -1, withscores=True)
    if t == "hash":
        return t, sorted(c.hgetall(key).items())
    return t, None


# -- values on both sides -----------------------------------------------------------------------
# name -> (commands that build it at key "k", whether Redis's payload is deterministic)

def _big(i: int, n: int = 100) -> str:
    return (f"{i:05d}-" * n)[:n]


VALUES = {
    "string short": ([("SET", "k", "hello")], True),
    "string int8": ([("SET", "k", "-5")], True),
    "string int16": ([("SET", "k", "12345")], True),
    "string int32": ([("SET", "k", "2147483647")], True),
    "string int64": ([("SET", "k", "-9223372036854775808")], True),
    "string not canonical": ([("SET", "k", "007")], True),
    "string empty": ([("SET", "k", "")], True),
    "string binary": ([("SET", "k", b"a\x00b\xff\r\n")], True),
    "string lzf": ([("SET", "k", "abc" * 200)], True),
    "string counter": ([("INCRBY", "k", "123456789")], True),
    "string 100k": ([("SET", "k", bytes(random.Random(1).randrange(256) for _ in range(100_000)))], True),
    "list small": ([("RPUSH", "k", "a", "b", "1", "2", "300", "-5", "70000", "x", "-4097", "8388608",
                     "9223372036854775807", "")], True),
    "list many nodes": ([("RPUSH", "k", *[_big(i) for i in range(2000)])], True),
    "list big elements": ([("RPUSH", "k", *[_big(i, 9000) for i in range(5)], "tail")], True),
    "list lpushed": ([("LPUSH", "k", *[str(i) for i in range(300)])], False),
    "set intset": ([("SADD", "k", "1", "2", "3", "-70000", "9223372036854775807")], True),
    "set intset 512": ([("SADD", "k", *[str(i * 7) for i in range(512)])], True),
    "set plain ints 513": ([("SADD", "k", *[str(i) for i in range(513)])], False),
    "set strings": ([("SADD", "k", "a", "b", "c", "1")], False),
    "zset small": ([("ZADD", "k", "1", "a", "2.5", "b", "-3", "c", "inf", "d", "-inf", "e", "0.1", "f",
                     "1e300", "g", "4503599627370496", "h")], True),
    "zset 200": ([("ZADD", "k", *[x for i in range(200) for x in (str(i % 17 / 3), f"m{i}")])], True),
    "zset long member": ([("ZADD", "k", "1", "x" * 65, "2", "y")], True),
    "hash small": ([("HSET", "k", "a", "1", "b", "hello", "c", "-70000")], True),
    "hash 600": ([("HSET", "k", *[x for i in range(600) for x in (f"f{i:04d}", str(i))])], False),
    "hash long value": ([("HSET", "k", "f", "v" * 65, "g", "1")], False),
}


def build(pair, cmds) -> None:
    for c in pair:
        for cmd in cmds:
            c.execute_command(*cmd)


@pytest.mark.parametrize("name", sorted(VALUES))
def test_payloads_restore_both_ways(pair, name):
    mv, rs = pair
    cmds, _ = VALUES[name]
    build(pair, cmds)
    want = content(rs, "k")
    assert content(mv, "k") == want
    from_mv, from_rs = mv.dump("k"), rs.dump("k")
    assert rs.restore("from-marekvs", 0, from_mv) and mv.restore("from-redis", 0, from_rs)
    assert content(rs, "from-marekvs") == want, "redis-server reads marekvs's payload"
    assert content(mv, "from-redis") == want, "marekvs reads redis-server's payload"
    # and each reads its own
    assert mv.restore("own", 0, from_mv) and content(mv, "own") == want


@pytest.mark.parametrize("name", sorted(n for n, (_, exact) in VALUES.items() if exact))
def test_deterministic_payloads_are_redis_s_byte_for_byte(pair, name):
    mv, rs = pair
    rs.config_set("rdbcompression", "no")
    try:
        build(pair, VALUES[name][0])
        assert mv.dump("k") == rs.dump("k")
    finally:
        rs.config_set("rdbcompression", "yes")


def test_encoding_parameters_choose_the_encoding_as_in_redis(pair):
    mv, rs = pair
    rs.config_set("rdbcompression", "no")
    try:
        for c in pair:
            c.config_set("zset-max-listpack-entries", "4")
            c.config_set("set-max-intset-entries", "2")
            c.config_set("list-max-listpack-size", "3")
        build(pair, [("ZADD", "z", "1", "a", "2", "b", "3", "c", "4", "d", "5", "e"), ("SADD", "s", "1", "2", "3"),
                     ("RPUSH", "l", *[str(i) for i in range(10)])])
        for key in ("z", "l"):
            assert mv.dump(key) == rs.dump(key), key
        assert mv.dump("s")[0] == rs.dump("s")[0] == rdb.TYPE_SET
    finally:
        for c in pair:
            c.config_set("zset-max-listpack-entries", "128")
            c.config_set("set-max-intset-entries", "512")
            c.config_set("list-max-listpack-size", "-2")
        rs.config_set("rdbcompression", "yes")


def test_dump_of_a_missing_key_is_nil_and_a_ttl_is_not_in_the_payload(pair):
    mv, rs = pair
    assert both(pair, "DUMP", "nosuch") is None
    build(pair, [("SET", "k", "v"), ("SET", "t", "v", "EX", "100")])
    assert mv.dump("k") == mv.dump("t") == rs.dump("t")


# -- TTLs -------------------------------------------------------------------------------------------

def test_ttls_as_redis(pair):
    mv, rs = pair
    payload = rs.dump("nosuch") or rdb.dump(rdb.List([b"a", b"b"]))
    both(pair, "RESTORE", "rel", "5000", payload)
    for c in pair:
        assert 0 < c.pttl("rel") <= 5000
    at = int(time.time() * 1000) + 60_000
    both(pair, "RESTORE", "abs", str(at), payload, "ABSTTL")
    assert both(pair, "PEXPIRETIME", "abs") == at
    # already past: OK, and nothing is created
    assert both(pair, "RESTORE", "past", "1", payload, "ABSTTL") == b"OK"
    assert both(pair, "EXISTS", "past") == 0
    # already past with REPLACE: the old key is deleted
    build(pair, [("SET", "old", "v")])
    assert both(pair, "RESTORE", "old", "1", payload, "ABSTTL", "REPLACE") == b"OK"
    assert both(pair, "EXISTS", "old") == 0
    # a relative TTL that overflows is already past too
    assert both(pair, "RESTORE", "huge", "9223372036854775807", payload) == b"OK"
    assert both(pair, "EXISTS", "huge") == 0
    # REPLACE of another type, and of a key with a TTL (the new key has the new TTL, here none)
    build(pair, [("HSET", "h", "f", "v"), ("EXPIRE", "h", "100")])
    both(pair, "RESTORE", "h", "0", payload, "REPLACE")
    assert both(pair, "TTL", "h") == -1
    assert content(mv, "h") == content(rs, "h") == ("list", [b"a", b"b"])


def test_options_and_their_errors_as_redis(pair):
    payload = rdb.dump(rdb.String(b"v"))
    build(pair, [("SET", "busy", "x")])
    cases = [
        ("RESTORE", "busy", "0", payload),  # BUSYKEY
        ("RESTORE", "busy", "x", payload),  # BUSYKEY is checked before the TTL
        ("RESTORE", "new", "x", payload),
        ("RESTORE", "new", "-1", payload),
        ("RESTORE", "new", "0", payload, "IDLETIME", "-1"),
        ("RESTORE", "new", "0", payload, "IDLETIME", "x"),
        ("RESTORE", "new", "0", payload, "FREQ", "256"),
        ("RESTORE", "new", "0", payload, "FREQ", "-1"),
        ("RESTORE", "new", "0", payload, "FREQ", "1", "IDLETIME", "1"),
        ("RESTORE", "new", "0", payload, "IDLETIME", "1", "FREQ", "1"),
        ("RESTORE", "new", "0", payload, "IDLETIME"),
        ("RESTORE", "new", "0", payload, "NOSUCH"),
        ("RESTORE", "new", "0", b"bad payload", "NOSUCH"),  # options first
        ("RESTORE", "new", "0"),
        ("DUMP",),
        ("DUMP", "a", "b"),
        ("RESTORE", "busy", "0", payload, "REPLACE", "ABSTTL", "IDLETIME", "10"),
        ("RESTORE", "freq", "0", payload, "FREQ", "200"),
        ("RESTORE-ASKING", "asking", "0", payload),
    ]
    for args in cases:
        both(pair, *args)
    for key in ("new", "busy", "freq", "asking"):
        assert both(pair, "GET", key) == (None if key == "new" else b"v")


# -- malformed payloads ----------------------------------------------------------------------------

def _refooter(body: bytes, version: int = rdb.RDB_VERSION) -> bytes:
    body += struct.pack("<H", version)
    return body + struct.pack("<Q", crc64(0, body))


def _bad_payloads(pair) -> list[bytes]:
    mv, rs = pair
    build(pair, [("RPUSH", "l", *[str(i) for i in range(50)]), ("HSET", "h", "a", "1", "b", "2"),
                 ("ZADD", "z", "1", "a", "2", "b"), ("SADD", "s", "1", "2"), ("SADD", "ss", "a", "b"),
                 ("SET", "str", "abc" * 30)])
    good = [rs.dump(k) for k in ("l", "h", "z", "s", "ss", "str")]
    out = [b"", b"short", b"\x00" * 9, b"\x00\x01x" + b"\n\x00" + bytes(8)]
    for p in good:
        out.append(p[:-1] + bytes([p[-1] ^ 0xFF]))  # CRC
        out.append(_refooter(p[:-10], 11))  # a newer RDB version
        out += [p[:cut] for cut in (1, 5, len(p) // 2, len(p) - 1)]  # truncated
        body = p[:-10]
        out += [_refooter(body[:cut]) for cut in (1, 2, len(body) // 2, len(body) - 1)]  # cut, re-footed
    out += [
        _refooter(b"\x08\x00"), _refooter(b"\x14\x00"), _refooter(b"\x06\x00"),  # types 8, 20, a module
        _refooter(b"\x00\x82"), _refooter(b"\x00\xc4"),  # length and string encodings
        _refooter(b"\x00\x81" + (1 << 62).to_bytes(8, "big")),  # a string of 2^62 bytes
        _refooter(b"\x02\x81" + (1 << 62).to_bytes(8, "big") + b"\x01a"),  # a set of 2^62 members
        _refooter(b"\x00\xc3\x05\x80\x00\x00\x10\x00abcde"),  # LZF announcing 1 MB from 5 bytes
        _refooter(b"\x02\x00"), _refooter(b"\x04\x00"), _refooter(b"\x05\x00"),  # empty set, hash, zset
        _refooter(b"\x02\x02\x01a\x01a"),  # a duplicate member
        _refooter(b"\x04\x02\x01f\x01v\x01f\x01w"),  # a duplicate field
        _refooter(b"\x05\x01\x01m" + struct.pack("<d", float("nan"))),  # a NaN score
        _refooter(b"\x12\x01\x03\x01x"),  # a quicklist container of 3
        _refooter(b"\x0b" + rdb._string(struct.pack("<II", 2, 2) + struct.pack("<hh", 2, 1))),  # intset order
        _refooter(b"\x10" + rdb._string(rdb.listpack([b"f"]))),  # odd hash listpack
    ]
    rng = random.Random(7)
    for _ in range(60):  # corrupted bytes under a good footer
        p = bytearray(rng.choice(good)[:-10])
        for _ in range(rng.randint(1, 3)):
            p[rng.randrange(1, len(p))] = rng.randrange(256)
        out.append(_refooter(bytes(p)))
    return out


def test_bad_payloads_get_redis_s_error_and_write_nothing(pair):
    mv, rs = pair
    payloads = _bad_payloads(pair)
    build(pair, [("SET", "keep", "v")])
    accepted = 0
    for i, p in enumerate(payloads):
        got = both(pair, "RESTORE", f"bad{i}", "0", p)
        if got == b"OK":  # a corruption that still parses (as in Redis): same value on both
            accepted += 1
            assert content(mv, f"bad{i}") == content(rs, f"bad{i}")
        else:
            assert both(pair, "EXISTS", f"bad{i}") == 0
        both(pair, "RESTORE", "keep", "0", p, "REPLACE")
    assert accepted < len(payloads) // 4
    errors = {call(mv, "RESTORE", "x", "0", p) for p in payloads} - {b"OK"}
    assert ("error", "DUMP payload version or checksum are wrong") in errors
    assert ("error", "Bad data format") in errors


def test_impossible_counts_cost_nothing(pair):
    # (not side by side: redis-server 7.0 sizes a hash table for the 2^40 members first and
    # takes minutes to free it)
    mv, _ = pair
    for body in (b"\x02\x81" + (1 << 40).to_bytes(8, "big") + b"\x01a",
                 b"\x12\x81" + (1 << 40).to_bytes(8, "big") + b"\x02\x00"):
        t = time.monotonic()
        assert call(mv, "RESTORE", "x", "0", _refooter(body)) == ("error", "Bad data format")
        assert time.monotonic() - t < 5


# -- replication ------------------------------------------------------------------------------------

def test_restore_replicates_as_an_ordinary_write(tmp_path):
    c = Cluster(tmp_path, n=3)
    try:
        n1, n3 = c.client(1), c.client(3)
        payloads = {
            "s": rdb.dump(rdb.String(b"hello")), "l": rdb.dump(rdb.List([b"a", b"b", b"c"])),
            "h": rdb.dump(rdb.Hash([(b"f%d" % i, b"v") for i in range(700)])),
            "z": rdb.dump(rdb.Zset([(b"m%d" % i, i / 7) for i in range(300)])),
            "t": rdb.dump(rdb.Set([b"%d" % i for i in range(10)])),
            "x": rdb.dump(rdb.Stream([((i, 1), [b"f", b"%d" % i]) for i in range(1, 300)], (300, 0), (1, 1), (0, 0),
                                     299, [rdb.StreamGroup(b"g", (5, 1), 5, [((3, 1), 7, 2), ((5, 1), 9, 1)],
                                                           [rdb.StreamConsumer(b"c", 9, [(3, 1), (5, 1)])])])),
        }
        n3.rpush("l", "old")  # replaced on node 1 once it arrives there
        c.wait_converged(timeout=60)
        for k, p in payloads.items():
            assert n1.restore(k, 100_000 if k == "z" else 0, p, replace=True)
        c.wait_converged(timeout=60)
        for k, p in payloads.items():
            assert n3.dump(k) == n1.dump(k)  # the same records: the same payload
            assert canon(rdb.load(n3.dump(k))) == canon(rdb.load(p))
        assert 0 < n3.pttl("z") <= 100_000
        assert n3.lrange("l", 0, -1) == [b"a", b"b", b"c"]
        # a restored stream's group goes on from any node
        assert n3.xpending("x", "g")["pending"] == 2
        assert n3.xreadgroup("g", "d", {"x": ">"}, count=1) == [[b"x", [(b"6-1", {b"f": b"6"})]]]
    finally:
        c.stop()


# -- keyspace notifications ----------------------------------------------------------------------------

def test_keyspace_events_as_redis(shared_node, real_redis):
    from tests.helpers import mb
    from tests.integration.test_pubsub import notifications

    p = rdb.dump(rdb.List([b"3", b"1", b"2"]))
    cmds = (mb(b"RESTORE", b"k", b"0", p) + mb(b"RESTORE", b"k", b"0", p, b"REPLACE")
            + mb(b"SET", b"s", b"v") + mb(b"RESTORE", b"s", b"0", p, b"REPLACE")  # another type replaced
            + mb(b"RESTORE", b"k", b"1", p, b"ABSTTL", b"REPLACE") + mb(b"RESTORE", b"k2", b"0", p)
            + mb(b"RESTORE", b"k2", b"0", p) + mb(b"SORT", b"k2", b"STORE", b"d") + mb(b"SORT", b"k2", b"STORE", b"d")
            + mb(b"SORT", b"nosuch", b"STORE", b"d") + mb(b"DUMP", b"nosuch") + mb(b"DUMP", b"k2")
            + mb(b"SORT", b"k2", b"BY", b"w_*", b"GET", b"o_*") + mb(b"RESTORE", b"k3", b"100", p))
    for flags in (b"KEAnm", b"Eg", b"Kl"):
        assert notifications(shared_node.port, cmds, flags) == notifications(real_redis.port, cmds, flags)


def test_keyspace_hits_and_misses_as_redis(pair):
    build(pair, [("SET", "s", "v"), ("RPUSH", "l", "a"), ("SADD", "t", "m"), ("ZADD", "z", "1", "m"),
                 ("HSET", "h", "f", "v")])
    stats = []
    for c in pair:
        c.config_resetstat()
        for k in ("s", "l", "t", "z", "h", "nosuch"):
            c.dump(k)
        c.restore("new", 0, c.dump("s"))
        c.restore("l", 0, c.dump("s"), replace=True)
        c.memory_usage("h")
        c.memory_usage("nosuch")
        info = c.info("stats")
        stats.append((info["keyspace_hits"], info["keyspace_misses"]))
    assert stats[0] == stats[1]


# -- HyperLogLogs: Redis keeps them as sketch strings, marekvs as registers ---------------------------

@pytest.mark.parametrize("n", [1, 50, 5000])  # a sparse sketch in Redis, then a dense one
def test_hyperloglogs_move_both_ways_with_the_same_registers(pair, n):
    # (key names of their own per case: an HLL re-created under a deleted HLL's name can
    # undercount until the sweeper has removed the dead registers, the data model's caveat)
    mv, rs = pair
    k = f"hll{n}"
    for c in pair:
        c.pfadd(k, *[f"e{i}" for i in range(n)])
    # Redis's sketch restored here becomes registers: the same count as Redis's
    assert mv.restore(f"{k}:from-redis", 0, rs.dump(k))
    assert mv.type(f"{k}:from-redis") == b"string" and mv.pfcount(f"{k}:from-redis") == rs.pfcount(k)
    assert mv.execute_command("OBJECT", "ENCODING", f"{k}:from-redis") == b"raw"
    # marekvs's registers restored in Redis: Redis counts them as marekvs does
    assert rs.restore(f"{k}:from-marekvs", 0, mv.dump(k))
    assert rs.pfcount(f"{k}:from-marekvs") == mv.pfcount(k)
    # and marekvs's payload comes back as the same HLL
    assert mv.restore(f"{k}:own", 0, mv.dump(k))
    assert mv.pfcount(f"{k}:own") == mv.pfcount(k) and mv.dump(f"{k}:own") == mv.dump(k)
    mv.pfadd(f"{k}:own", "one more")
    assert mv.pfcount(f"{k}:own") >= mv.pfcount(k)


def test_a_string_that_only_looks_like_a_sketch_stays_a_string(pair):
    mv, rs = pair
    for value in (b"HYLL", b"HYLL\x00" + bytes(20), b"HYLL\x01" + bytes(11) + b"\x3f"):
        for c in pair:
            c.set("s", value)
        assert mv.restore("copy", 0, rs.dump("s"), replace=True)
        assert mv.get("copy") == value


# -- streams ---------------------------------------------------------------------------------------
# Explicit ids only (marekvs's '*' mints ids of its own). A stream read back whole: XINFO
# STREAM FULL (entries, counters, groups with their PELs, delivery times and counts, and
# consumers) but the radix tree's node counts, which marekvs estimates.

def _entries(n: int, start: int = 1000, big: int = 0) -> list[tuple]:
    rng = random.Random(n)
    out = []
    for i in range(n):
        sid = f"{start + i // 3}-{i % 3 * 5}"
        if i % 7 == 3:
            fields = ("x", str(i), "y", "z" * rng.randrange(0, 200))
        else:
            fields = ("a", str(i), "b", "v" * big if big else f"val{i}")
        out.append(("XADD", "k", sid, *fields))
    return out


STREAMS = {
    "stream small": ([("XADD", "k", "1-1", "f", "v"), ("XADD", "k", "1-2", "f", "w"),
                      ("XADD", "k", "2-0", "a", "1", "b", "2")], True),
    "stream many nodes": (_entries(350), True),
    "stream big entries": (_entries(12, big=5000), True),
    "stream huge sequences": ([("XADD", "k", "5-18446744073709551614", "f", "1"),
                               ("XADD", "k", "5-18446744073709551615", "f", "2"), ("XADD", "k", "6-0", "f", "3"),
                               ("XADD", "k", "18446744073709551615-0", "f", "4")], True),
    "stream empty with groups": ([("XGROUP", "CREATE", "k", "g1", "$", "MKSTREAM"),
                                  ("XGROUP", "CREATE", "k", "g0", "0", "ENTRIESREAD", "7")], True),
    "stream xsetid": ([*_entries(10), ("XSETID", "k", "2000-5", "ENTRIESADDED", "40", "MAXDELETEDID", "999-1")],
                      True),
    "stream groups without reads": ([*_entries(30), ("XGROUP", "CREATE", "k", "g", "0"),
                                     ("XGROUP", "CREATE", "k", "late", "$"),
                                     ("XGROUP", "CREATE", "k", "mid", "1005-5", "ENTRIESREAD", "16")], True),
    "stream groups and consumers": ([*_entries(30), ("XGROUP", "CREATE", "k", "g", "0"),
                                     ("XGROUP", "CREATE", "k", "h", "1003-0"),
                                     ("XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "k", ">"),
                                     ("XREADGROUP", "GROUP", "g", "bob", "COUNT", "4", "STREAMS", "k", ">"),
                                     ("XREADGROUP", "GROUP", "h", "alice", "COUNT", "2", "STREAMS", "k", ">"),
                                     ("XACK", "k", "g", "1000-5"),
                                     ("XCLAIM", "k", "g", "carol", "0", "1001-0", "RETRYCOUNT", "9"),
                                     ("XGROUP", "CREATECONSUMER", "k", "g", "dave")], False),
    "stream deleted and trimmed": ([*_entries(250), ("XDEL", "k", "1000-5", "1050-0", "1082-10", "1010-5"),
                                    ("XTRIM", "k", "MAXLEN", "200"), ("XGROUP", "CREATE", "k", "g", "0"),
                                    ("XREADGROUP", "GROUP", "g", "c", "COUNT", "5", "STREAMS", "k", ">"),
                                    ("XDEL", "k", "1017-10")], False),
}


def stream_content(c: redis.Redis, key: str):
    info = c.xinfo_stream(key, full=True)
    for k in ("radix-tree-keys", "radix-tree-nodes"):
        info.pop(k)
    return info


@pytest.mark.parametrize("name", sorted(STREAMS))
def test_streams_restore_both_ways(pair, name):
    mv, rs = pair
    build(pair, STREAMS[name][0])
    assert mv.xrange("k") == rs.xrange("k")
    from_mv, from_rs = mv.dump("k"), rs.dump("k")
    assert rs.restore("from-marekvs", 0, from_mv) and mv.restore("from-redis", 0, from_rs)
    # each copy reads back as its source, delivery and seen times included
    assert stream_content(rs, "from-marekvs") == stream_content(mv, "k"), "redis-server reads marekvs's payload"
    assert stream_content(mv, "from-redis") == stream_content(rs, "k"), "marekvs reads redis-server's payload"
    assert mv.restore("own", 0, from_mv) and stream_content(mv, "own") == stream_content(mv, "k")
    assert mv.type("from-redis") == b"stream" and mv.xlen("from-redis") == rs.xlen("k")


@pytest.mark.parametrize("name", sorted(n for n, (_, exact) in STREAMS.items() if exact))
def test_stream_payloads_are_redis_s_byte_for_byte(pair, name):
    mv, rs = pair
    rs.config_set("rdbcompression", "no")
    try:
        build(pair, STREAMS[name][0])
        assert mv.dump("k") == rs.dump("k")
    finally:
        rs.config_set("rdbcompression", "yes")


def test_stream_node_parameters_choose_the_nodes_as_in_redis(pair):
    mv, rs = pair
    rs.config_set("rdbcompression", "no")
    try:
        for bytes_, entries in (("300", "100"), ("4096", "7"), ("0", "0"), ("1", "1")):
            for c in pair:
                c.delete("k")
                c.config_set("stream-node-max-bytes", bytes_)
                c.config_set("stream-node-max-entries", entries)
            build(pair, _entries(60))
            assert mv.dump("k") == rs.dump("k"), (bytes_, entries)
    finally:
        for c in pair:
            c.config_set("stream-node-max-bytes", "4096")
            c.config_set("stream-node-max-entries", "100")
        rs.config_set("rdbcompression", "yes")


def test_a_restored_stream_goes_on_as_redis_s(pair):
    mv, rs = pair
    rs.execute_command(*STREAMS["stream groups and consumers"][0][0][:1], "k", "1-1", "seed", "x")
    for cmd in STREAMS["stream groups and consumers"][0]:
        rs.execute_command(*cmd)
    payload = rs.dump("k")
    rs.delete("k")
    for c in pair:
        assert c.restore("k", 0, payload)
    both(pair, "XPENDING", "k", "g")
    both(pair, "XPENDING", "k", "h")
    both(pair, "XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "k", ">")
    both(pair, "XREADGROUP", "GROUP", "g", "bob", "COUNT", "10", "STREAMS", "k", "0")
    both(pair, "XACK", "k", "g", "1000-0", "1001-5", "1000-5")
    both(pair, "XADD", "k", "3000-0", "new", "1")
    both(pair, "XADD", "k", "1500-0", "old", "1")
    both(pair, "XREADGROUP", "GROUP", "h", "erin", "STREAMS", "k", ">")
    both(pair, "XPENDING", "k", "g")
    both(pair, "XINFO", "GROUPS", "k")
    both(pair, "XLEN", "k")
    both(pair, "XGROUP", "DELCONSUMER", "k", "g", "alice")
    both(pair, "XPENDING", "k", "g")


def _v1(value: rdb.Stream) -> bytes:
    """The payload Redis 5/6 wrote for ``value`` (RDB_TYPE_STREAM_LISTPACKS, version 9):
    no first id, max deleted id, entries added or entries read."""
    out = [b"\x0f", rdb.encode_length(len(rdb._stream_nodes(value.entries, rdb.DEFAULT_LIMITS)))]
    out += [rdb._string(struct.pack(">QQ", *m)) + rdb._string(lp)
            for m, lp in rdb._stream_nodes(value.entries, rdb.DEFAULT_LIMITS)]
    out += [rdb.encode_length(x) for x in (len(value.entries), *value.last_id)]
    out.append(rdb.encode_length(len(value.groups)))
    for g in value.groups:
        out.append(rdb._string(g.name) + rdb.encode_length(g.last_id[0]) + rdb.encode_length(g.last_id[1]))
        out.append(rdb.encode_length(len(g.pending)))
        out += [struct.pack(">QQ", *sid) + struct.pack("<q", ms) + rdb.encode_length(n) for sid, ms, n in g.pending]
        out.append(rdb.encode_length(len(g.consumers)))
        for c in g.consumers:
            out.append(rdb._string(c.name) + struct.pack("<q", c.seen_ms) + rdb.encode_length(len(c.pending)))
            out += [struct.pack(">QQ", *sid) for sid in c.pending]
    return _refooter(b"".join(out), 9)


def test_redis_6_stream_payloads_read_as_redis_7_reads_them(pair):
    mv, rs = pair
    build(pair, [*_entries(20), ("XGROUP", "CREATE", "k", "before", "0"), ("XGROUP", "CREATE", "k", "first", "1000-0"),
                 ("XGROUP", "CREATE", "k", "mid", "1003-5"), ("XGROUP", "CREATE", "k", "last", "$"),
                 ("XGROUP", "CREATE", "k", "after", "5000-0"),
                 ("XREADGROUP", "GROUP", "before", "c", "COUNT", "2", "STREAMS", "k", ">")])
    old = _v1(rdb.load(rs.dump("k")))
    assert both(pair, "RESTORE", "old", "0", old) == b"OK"
    assert stream_content(mv, "old") == stream_content(rs, "old")
    for trimmed in (True, False):  # entries-read estimated from the entries (and a trim)
        for c in pair:
            c.delete("t")
            c.restore("t", 0, old)
            if trimmed:
                c.execute_command("XTRIM", "t", "MAXLEN", "5")
        assert both(pair, "XINFO", "GROUPS", "t")


def _stream_payload(nodes: list[tuple[bytes, bytes]], meta: list[int], groups: bytes = b"\x00") -> bytes:
    out = [b"\x13", rdb.encode_length(len(nodes))]
    out += [rdb._string(m) + rdb._string(lp) for m, lp in nodes]
    out += [rdb.encode_length(x) for x in meta]
    return _refooter(b"".join(out) + groups)


def _group(name: bytes, pel: list[tuple], consumers: list[tuple]) -> bytes:
    n = rdb.encode_length
    out = [rdb._string(name), n(1), n(2), n(2), n(len(pel))]
    out += [struct.pack(">QQ", *sid) + struct.pack("<q", 5) + rdb.encode_length(1) for sid in pel]
    out.append(rdb.encode_length(len(consumers)))
    for cname, ids in consumers:
        out.append(rdb._string(cname) + struct.pack("<q", 7) + rdb.encode_length(len(ids)))
        out += [struct.pack(">QQ", *sid) for sid in ids]
    return b"".join(out)


def test_bad_stream_payloads_get_redis_s_error_and_write_nothing(pair):
    mv, rs = pair
    build(pair, STREAMS["stream groups and consumers"][0])
    good = rs.dump("k")
    (master, lp), = rdb._stream_nodes([((1, 1), [b"f", b"v"]), ((1, 2), [b"f", b"w"])], rdb.DEFAULT_LIMITS)
    m16 = struct.pack(">QQ", *master)
    meta = [2, 1, 2, 1, 1, 0, 0, 2]  # length, last, first, max deleted, entries added
    els = rdb.listpack_elements(lp)
    assert _stream_payload([(m16, lp)], meta) and both(pair, "RESTORE", "ok", "0", _stream_payload([(m16, lp)], meta))
    bad = [good[:-1] + bytes([good[-1] ^ 1])]
    body = good[:-10]
    bad += [_refooter(body[:cut]) for cut in (1, 2, 20, len(body) // 2)]
    bad += [
        _stream_payload([(m16[:15], lp)], meta),  # a node key not 16 bytes
        _stream_payload([(m16, lp), (m16, lp)], meta),  # a node twice
        _stream_payload([(m16, rdb.listpack([]))], meta),  # an empty node
        _stream_payload([(m16, rdb.listpack(els[:-1] + [b"9"]))], meta),  # a wrong lp-count
        _stream_payload([(m16, rdb.listpack(els[:-1]))], meta),  # an entry cut short
        _stream_payload([(m16, rdb.listpack([b"x"] + els[1:]))], meta),  # a count not an integer
        _stream_payload([(m16, rdb.listpack(els + [b"1"]))], meta),  # an element after the last entry
        _stream_payload([(m16, lp)], meta, b"\x02" + _group(b"g", [], []) * 2),  # a group twice
        _stream_payload([(m16, lp)], meta, b"\x01" + _group(b"g", [(1, 1), (1, 1)], [])),  # a PEL entry twice
        _stream_payload([(m16, lp)], meta, b"\x01" + _group(b"g", [(1, 1)], [(b"c", [(1, 2)])])),  # not in PEL
        _stream_payload([(m16, lp)], meta, b"\x01" + _group(b"g", [(1, 1)], [(b"c", [(1, 1), (1, 1)])])),
        _stream_payload([(m16, lp)], meta, b"\x01" + _group(b"g", [(1, 1)], [(b"c", [(1, 1)])] * 2)),
        _stream_payload([(m16, lp)], meta, b"\x01" + _group(b"g", [(1, 1)], [(b"c", [])])),  # no owner
    ]
    for i, p in enumerate(bad):
        assert both(pair, "RESTORE", f"bad{i}", "0", p) in (
            ("error", "Bad data format"), ("error", "DUMP payload version or checksum are wrong")), i
        assert both(pair, "EXISTS", f"bad{i}") == 0


def test_stream_payloads_redis_takes_unchecked_are_refused(pair):
    # Redis's deep sanitization does not compare a stream's length or a node's counts
    # with its entries; marekvs keeps no length of its own (it counts the entries), so
    # it refuses such a payload rather than answer XLEN differently (docs/divergences.md)
    mv, _ = pair
    (master, lp), = rdb._stream_nodes([((1, 1), [b"f", b"v"]), ((1, 2), [b"f", b"w"])], rdb.DEFAULT_LIMITS)
    m16 = struct.pack(">QQ", *master)
    els = rdb.listpack_elements(lp)
    for nodes, meta in (([(m16, lp)], [3, 1, 2, 1, 1, 0, 0, 2]),  # length 3 for 2 entries
                        ([(m16, rdb.listpack([b"1", b"1"] + els[2:]))], [2, 1, 2, 1, 1, 0, 0, 2]),  # counts
                        ([(m16, lp)], [2, 1, 1, 1, 1, 0, 0, 2]),  # an entry above the last id
                        ([(m16, lp), (struct.pack(">QQ", 1, 2), rdb.listpack([b"1", b"0"] + els[2:8]))],
                         [3, 1, 2, 1, 1, 0, 0, 3])):  # an id twice
        assert call(mv, "RESTORE", "x", "0", _stream_payload(nodes, meta)) == ("error", "Bad data format")
        assert mv.exists("x") == 0


def test_stream_dump_and_restore_inside_multi(pair):
    build(pair, STREAMS["stream groups and consumers"][0])
    replies = []
    for c in pair:
        p = c.pipeline(transaction=True)
        payload, n = p.dump("k").xlen("k").execute()
        p = c.pipeline(transaction=True)
        p.restore("k2", 0, payload).xrange("k2").delete("k").restore("k", 0, payload).xlen("k").xinfo_groups("k")
        p.restore("k", 0, payload)
        res = p.execute(raise_on_error=False)
        assert res[4] == n and res[1] == c.xrange("k2")
        res[-1] = str(res[-1])  # BUSYKEY, inside EXEC
        replies.append(res)
    assert replies[0] == replies[1]
