"""The HyperLogLog, bitmap and keyspace commands through redis-py against a real node, in
RESP2 and RESP3: replies and their shapes, error texts, what is written (and replicated)
and what is not, TTLs kept, the keyspace commands over collections, INFO's sections and its
keyspace counts, and the sweeper reclaiming an HLL's records after DEL.

Exact agreement with Redis on random command streams is test_differential_hll_bitmaps.py's;
RENAME/COPY/OBJECT ENCODING of every collection type is tests/unit/test_collections_move.py's.
"""

from __future__ import annotations

import time

import pytest
import redis

from tests.cluster import info_section, wait_for

SIGMA = 1.04 / 16384 ** 0.5


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def c(node, request):
    """A client of a node of its own: an HLL name is never reused after a FLUSHALL here,
    because the deleted HLL's registers would still win merges by rank until swept (the
    data model's DEL caveat, pinned in tests/unit/test_hll_keyspace.py)."""
    client = node.client(protocol=request.param)
    yield client
    client.close()


def log_seq(c) -> int:
    return int(info_section(c, "persistence")["replog_last_seq"])


# -- HyperLogLog ----------------------------------------------------------------------------

def test_pfadd_pfcount_pfmerge(c):
    assert c.pfadd("h", "a", "b", "c") == 1
    assert c.pfadd("h", "a", "b") == 0
    assert c.pfcount("h") == 3
    assert c.pfadd("h2", "c", "d") == 1
    assert c.pfcount("h", "h2") == 4  # a union, not a sum
    assert c.pfcount("h", "nokey") == 3 and c.pfcount("nokey") == 0
    assert c.pfmerge("m", "h", "h2") is True
    assert c.pfcount("m") == 4
    assert c.pfadd("created") == 1 and c.exists("created") == 1 and c.pfcount("created") == 0
    assert c.execute_command("PFMERGE", "onlydest") in (b"OK", "OK", True)
    assert c.exists("onlydest") == 1


def test_pfcount_is_accurate_through_the_node(c):
    for start in range(0, 100_000, 5000):
        c.pfadd("big", *[f"e{i}" for i in range(start, start + 5000)])
    assert abs(c.pfcount("big") - 100_000) <= 3 * SIGMA * 100_000
    c.pfadd("other", *[f"e{i}" for i in range(50_000, 150_000)])
    assert abs(c.pfcount("big", "other") - 150_000) <= 3 * SIGMA * 150_000


def test_a_duplicate_pfadd_writes_and_replicates_nothing(c):
    c.pfadd("h", *[f"x{i}" for i in range(500)])
    seq = log_seq(c)
    for _ in range(5):
        assert c.pfadd("h", *[f"x{i}" for i in range(500)]) == 0
    assert log_seq(c) == seq
    assert c.pfadd("h", "something new") == 1
    assert log_seq(c) == seq + 1


def test_hll_types_and_errors(c):
    c.set("s", "string")
    c.pfadd("h", "a")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE Key is not a valid HyperLogLog string value.$"):
        c.pfadd("s", "x")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE Key is not a valid HyperLogLog string value.$"):
        c.pfcount("h", "s")
    with pytest.raises(redis.ResponseError, match="^WRONGTYPE Operation against a key holding the wrong kind"):
        c.get("h")  # no sketch bytes here (docs/divergences.md)
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'pfadd'"):
        c.execute_command("PFADD")
    assert c.type("h") in (b"string", "string")
    assert c.object("encoding", "h") in (b"raw", "raw")


# -- bitmaps --------------------------------------------------------------------------------

def test_setbit_getbit_bitcount_bitpos(c):
    assert c.setbit("b", 7, 1) == 0
    assert c.setbit("b", 7, 1) == 1
    assert c.get("b") == b"\x01"
    assert c.getbit("b", 7) == 1 and c.getbit("b", 100) == 0 and c.getbit("nokey", 1) == 0
    c.set("b", b"\xff\xf0\x00")
    assert c.bitcount("b") == 12
    assert c.bitcount("b", 1, 1) == 4
    assert c.bitcount("b", 5, 30, "bit") == 7
    assert c.bitpos("b", 0) == 12
    assert c.bitpos("b", 1, 2) == -1
    assert c.bitpos("b", 0, 0, 0) == -1
    assert c.bitpos("b", 0, 0, 7, "bit") == -1
    assert c.bitpos("nokey", 0) == 0 and c.bitpos("nokey", 1) == -1
    with pytest.raises(redis.ResponseError, match="^bit offset is not an integer or out of range$"):
        c.setbit("b", -1, 1)
    with pytest.raises(redis.ResponseError, match="^bit is not an integer or out of range$"):
        c.execute_command("SETBIT", "b", 1, 2)
    with pytest.raises(redis.ResponseError, match="^The bit argument must be 1 or 0.$"):
        c.execute_command("BITPOS", "b", 2)


def test_bitop_and_bitfield(c):
    c.set("x", b"\x0f\xff")
    c.set("y", b"\xf0")
    assert c.bitop("AND", "d", "x", "y") == 2 and c.get("d") == b"\x00\x00"
    assert c.bitop("OR", "d", "x", "y") == 2 and c.get("d") == b"\xff\xff"
    assert c.bitop("XOR", "d", "x", "y") == 2 and c.get("d") == b"\xff\xff"
    assert c.bitop("NOT", "d", "y") == 1 and c.get("d") == b"\x0f"
    assert c.bitop("AND", "d", "nokey") == 0 and c.exists("d") == 0  # an empty result deletes
    with pytest.raises(redis.ResponseError, match="^BITOP NOT must be called with a single source key.$"):
        c.bitop("NOT", "d", "x", "y")
    bf = c.bitfield("f")
    assert bf.set("i8", 0, -100).incrby("i8", 0, -100).get("u4", "#1").execute() == [0, 56, 8]
    assert c.bitfield("f", default_overflow="SAT").incrby("i8", 0, -200).execute() == [-128]
    assert c.bitfield("f", default_overflow="FAIL").incrby("u2", 100, 7).execute() == [None]
    assert c.bitfield_ro("f", "u8", 0, items=[("i8", 0)]) == [128, -128]
    with pytest.raises(redis.ResponseError, match="^BITFIELD_RO only supports the GET subcommand$"):
        c.execute_command("BITFIELD_RO", "f", "SET", "u8", "0", "1")
    with pytest.raises(redis.ResponseError, match="^Invalid bitfield type"):
        c.execute_command("BITFIELD", "f", "GET", "u64", "0")


def test_bit_writes_keep_the_ttl_and_an_unchanged_bit_writes_nothing(c):
    c.set("b", "a", ex=1000)
    c.setbit("b", 100, 1)
    c.bitfield("b").set("u8", 0, 7).execute()
    assert 990 < c.ttl("b") <= 1000
    seq = log_seq(c)
    assert c.setbit("b", 100, 1) == 1  # already set
    assert c.bitfield("b").set("u8", 0, 7).execute() == [7]
    assert log_seq(c) == seq
    c.bitop("OR", "b", "b")  # BITOP's destination is a new value: no TTL
    assert c.ttl("b") == -1


def test_bit_commands_on_collections_are_wrongtype(c):
    c.pfadd("h", "a")
    for call in (lambda: c.setbit("h", 1, 1), lambda: c.getbit("h", 1), lambda: c.bitcount("h"),
                 lambda: c.bitpos("h", 1), lambda: c.bitop("AND", "d", "h"),
                 lambda: c.bitfield("h").get("u8", 0).execute()):
        with pytest.raises(redis.ResponseError, match="^WRONGTYPE"):
            call()
    assert c.bitop("OR", "h", "nokey2", "nokey3") == 0  # a destination is replaced, whatever it held
    assert c.exists("h") == 0


# -- keyspace commands over collections -----------------------------------------------------------

def test_keyspace_commands_over_collections(c):
    c.pfadd("hll", "a", "b")
    c.set("str", "v")
    assert c.type("hll") in (b"string", "string")
    assert c.exists("hll", "str", "nokey") == 2
    assert c.expire("hll", 100) is True and 95 < c.ttl("hll") <= 100
    assert c.persist("hll") is True and c.ttl("hll") == -1
    assert c.pexpire("hll", 100_000) is True and c.pttl("hll") > 99_000
    assert sorted(c.keys("*")) == [b"hll", b"str"]
    assert c.dbsize() == 2
    assert c.randomkey() in (b"hll", b"str")
    cursor, found = c.scan(0, _type="string", count=1000)
    assert sorted(found) == [b"hll", b"str"]  # an HLL is a string to TYPE and SCAN TYPE
    assert c.scan(0, _type="hash", count=1000)[1] == []
    assert c.rename("hll", "hll2") is True
    assert c.pfcount("hll2") == 2 and c.exists("hll") == 0 and c.pttl("hll2") > 99_000
    assert c.copy("hll2", "hll3") is True and c.pfcount("hll3") == 2
    assert c.renamenx("hll3", "hll2") is False
    digest = c.execute_command("DEBUG", "DIGEST-VALUE", "hll2")
    assert c.pfadd("hll2", "a", "b") == 0 and c.execute_command("DEBUG", "DIGEST-VALUE", "hll2") == digest
    assert c.pfadd("hll2", "c") == 1 and c.execute_command("DEBUG", "DIGEST-VALUE", "hll2") != digest
    assert c.unlink("hll2") == 1 and c.delete("hll3") == 1
    assert c.pfcount("hll2") == 0 and c.exists("hll2", "hll3") == 0
    with pytest.raises(redis.ResponseError, match="^no such key$"):
        c.rename("hll2", "x")


def test_type_scan_keys_and_dbsize_see_every_collection_type(c):
    c.pfadd("hll", "a")
    c.set("str", "v")
    c.hset("hash", "f", "v")
    c.sadd("set", "m")
    c.rpush("list", "x")
    c.zadd("zset", {"m": 1})
    c.hset("emptied", "f", "v")
    c.hdel("emptied", "f")  # a hash emptied by HDEL is no key, as in Redis
    want = {"hll": "string", "str": "string", "hash": "hash", "set": "set", "list": "list", "zset": "zset"}
    assert {k: c.type(k) for k in want} == {k: t.encode() for k, t in want.items()}
    assert sorted(c.keys("*")) == sorted(k.encode() for k in want) and c.dbsize() == 6
    for t in ("string", "hash", "set", "list", "zset", "stream"):
        found = c.scan(0, _type=t, count=1000)[1]
        assert sorted(found) == sorted(k.encode() for k, kt in want.items() if kt == t), t
    assert c.exists(*want, "emptied") == 6
    assert [c.expire(k, 100) for k in want] == [True] * 6 and c.expire("emptied", 100) is False
    assert all(90 < c.ttl(k) <= 100 for k in want)
    assert c.delete(*want, "emptied") == 6 and c.dbsize() == 0


def test_expired_hll_reads_as_absent(c):
    c.pfadd("h", "a")
    assert c.pfcount("h") == 1
    c.pexpire("h", 30)
    wait_for(lambda: c.exists("h") == 0, 10, "the HLL to expire")
    assert c.pfcount("h") == 0 and c.type("h") in (b"none", "none")
    assert c.pfadd("h", "b") == 1 and c.pfcount("h") >= 1


# -- INFO ----------------------------------------------------------------------------------------

def raw_info(client, *args) -> str:
    """INFO's text as sent (redis-py would parse it into a dict)."""
    pool = client.connection_pool
    conn = pool.get_connection()
    try:
        conn.send_command("INFO", *args)
        raw = conn.read_response()
    finally:
        pool.release(conn)
    return raw.decode() if isinstance(raw, bytes) else str(raw)


def _headers(text: str) -> list[str]:
    return [ln[2:] for ln in text.split("\r\n") if ln.startswith("# ")]


def test_info_sections_are_selected_as_redis_7_selects_them(shared_node, real_redis):
    m = shared_node.client()
    r = real_redis.client()
    untracked = {"Latencystats"}  # not kept by marekvs
    try:
        for args in ([], ["default"], ["all"], ["everything"], ["server"], ["keyspace", "server"],
                     ["CPU", "clients"], ["default", "commandstats"], ["all", "nosuch"], ["nosuch"],
                     ["modules"], ["SERVER", "server"]):
            got = _headers(raw_info(m, *args))
            want = [h for h in _headers(raw_info(r, *args)) if h not in untracked]
            if not args or {"default", "all", "everything"} & set(args):
                assert got == want + ["Marekvs", "Antientropy"], (args, got, want)  # marekvs's own, last
            else:
                assert got == want, args
        assert raw_info(m, "nosuch") == raw_info(r, "nosuch") == ""
    finally:
        m.close()
        r.close()


def test_info_keyspace_counts_collections_and_expiring_keys(node):
    c = node.client()
    c.pfadd("h1", "a")
    c.pfadd("h2", "a")
    c.set("s", "v", ex=1000)
    c.expire("h1", 1000)

    def counted():
        db0 = info_section(c, "keyspace").get("db0", "")
        return db0.startswith("keys=3,expires=2") and db0
    wait_for(counted, 30, lambda: f"INFO keyspace to count 3 keys, 2 expiring: {info_section(c, 'keyspace')}")
    c.close()


# -- the sweeper ----------------------------------------------------------------------------------

def test_the_sweeper_reclaims_an_hll_s_registers_after_del(node):
    c = node.client()
    c.pfadd("h", *[f"e{i}" for i in range(300)])  # ~297 registers (a few buckets shared) + the head
    c.set("keep", "v")
    stats = lambda: int(info_section(c, "stats")["expired_records_removed"])  # noqa: E731
    before = stats()
    assert c.config_set("gc-grace", 0)
    assert c.delete("h") == 1
    time.sleep(0.002)  # the DEL's clock must be in the past of the horizon (1 ms resolution)
    wait_for(lambda: stats() - before >= 290, 60, lambda: f"290 records removed (so far {stats() - before})")
    assert c.get("keep") == b"v" and c.pfcount("h") == 0
    assert c.pfadd("h", *[f"e{i}" for i in range(300)]) == 1
    assert abs(c.pfcount("h") - 300) <= 6  # nothing left to win over the new registers
    c.close()
