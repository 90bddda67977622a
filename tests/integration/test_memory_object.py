"""MEMORY, OBJECT, TYPE, COMMAND LIST/COUNT, and the one-database answers (SELECT, SWAPDB,
MOVE, COPY ... DB, INFO's cluster_enabled, redis_mode, role), side by side with
redis-server 7.0.15 where Redis's answer is defined, and against this engine's own
definitions where the figures are marekvs's (MEMORY USAGE is the bytes of the key's
records: docs/compatibility.md).

The one-database answers are compared with a standalone redis-server started with
``--databases 1``, which is what marekvs says it is in INFO; redis-py and redis-cli keep
working against it (``--bigkeys``, ``--memkeys`` and ``--scan`` included).
"""

from __future__ import annotations

import shutil
import subprocess
import time

import pytest
import redis

from marekvs.core import keys as K
from tests.helpers import RedisServer

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def pair(shared_node, real_redis):
    mv, rs = shared_node.client(), real_redis.client()
    yield mv, rs
    mv.close()
    rs.close()


@pytest.fixture(autouse=True)
def clean(pair):
    for c in pair:
        c.flushall()


def call(c: redis.Redis, *args):
    try:
        return c.execute_command(*args)
    except redis.ResponseError as e:
        return ("error", str(e))


def raw(c: redis.Redis, *args):
    """A reply without redis-py's callbacks (its COMMAND callback parses COMMAND INFO)."""
    conn = c.connection_pool.get_connection()
    try:
        conn.send_command(*args)
        try:
            return conn.read_response()
        except redis.ResponseError as e:
            return ("error", str(e))
    finally:
        c.connection_pool.release(conn)


def both(pair, *args):
    got, want = call(pair[0], *args), call(pair[1], *args)
    assert got == want, (args, got, want)
    return got


# -- MEMORY -----------------------------------------------------------------------------------------

def test_memory_usage_is_the_bytes_of_the_key_s_records(pair):
    mv, _ = pair
    mv.set("k", "v")
    # [pid u16] 's' "k"  +  19-byte envelope "v"
    assert mv.memory_usage("k") == (2 + 1 + 1) + (19 + 1)
    assert mv.memory_usage("nosuch") is None
    mv.rpush("l", *[b"x" * 100] * 1000)
    full = mv.memory_usage("l", samples=0)
    head = len(K.encode_head_key(b"l")) + 19 + 26
    element = len(K.collection_prefix(K.TAG_LIST, b"l")) + 8 + 19 + 100
    assert full == head + 1000 * element
    assert mv.memory_usage("l") == full  # five samples of equal elements extrapolate exactly
    mv.sadd("s", *[f"m{i:03d}" for i in range(100)])
    mv.zadd("z", {f"m{i:03d}": i for i in range(100)})
    assert mv.memory_usage("z", samples=0) > mv.memory_usage("s", samples=0)  # members + score index
    mv.hset("h", mapping={f"f{i}": "v" * (i % 50) for i in range(200)})
    exact, sampled = mv.memory_usage("h", samples=0), mv.memory_usage("h", samples=5)
    assert exact > 200 * 20 and sampled > 0


def test_memory_errors_and_help_as_redis(pair):
    mv, rs = pair
    for c in pair:
        c.set("k", "v")
    for args in [("MEMORY", "USAGE", "k", "SAMPLES", "-1"), ("MEMORY", "USAGE", "k", "SAMPLES", "x"),
                 ("MEMORY", "USAGE", "k", "foo"), ("MEMORY", "USAGE", "k", "SAMPLES"), ("MEMORY", "USAGE"),
                 ("MEMORY",), ("MEMORY", "NOSUCH"), ("MEMORY", "STATS", "x"), ("MEMORY", "DOCTOR", "x"),
                 ("MEMORY", "HELP"), ("MEMORY", "PURGE"), ("MEMORY", "USAGE", "nosuch"),
                 ("MEMORY", "USAGE", "nosuch", "SAMPLES", "0")]:
        both(pair, *args)


def test_memory_stats_has_redis_s_fields_in_redis_s_order(shared_node, real_redis):
    mv, rs = shared_node.client(protocol=3), real_redis.client(protocol=3)
    try:
        for c in (mv, rs):
            c.flushall()
            c.set("k", "v")
        # keys.count is the expiry sweeper's count (as INFO keyspace's): wait for its next visit
        deadline = time.monotonic() + 60
        while not mv.info("keyspace"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        got, want = mv.execute_command("MEMORY", "STATS"), rs.execute_command("MEMORY", "STATS")
        names = [k for k in got if not k.startswith(b"marekvs.")]
        assert names == list(want)
        for name in names:
            assert type(got[name]) is type(want[name]), name  # integers, doubles, the db.0 map
        assert got[b"keys.count"] >= 0 and got[b"total.allocated"] > 0
    finally:
        mv.close()
        rs.close()


def test_memory_doctor_malloc_stats_and_purge(pair):
    mv, rs = pair
    assert mv.execute_command("MEMORY", "DOCTOR") == rs.execute_command("MEMORY", "DOCTOR")  # both nearly empty
    assert mv.execute_command("MEMORY", "MALLOC-STATS") == b"Stats not supported for the current allocator"
    assert mv.execute_command("MEMORY", "PURGE") == b"OK"


# -- OBJECT and TYPE ------------------------------------------------------------------------------------

def test_object_help_and_lru_lfu_errors_as_redis(pair):
    mv, rs = pair
    for c in pair:
        c.set("k", "v")
    both(pair, "OBJECT", "HELP")
    both(pair, "OBJECT", "FREQ", "k")
    both(pair, "OBJECT", "FREQ", "nosuch")
    both(pair, "OBJECT", "IDLETIME", "nosuch")
    assert mv.object("idletime", "k") == 0  # no access clock: docs/divergences.md
    try:
        for c in pair:
            c.config_set("maxmemory-policy", "allkeys-lfu")
        both(pair, "OBJECT", "IDLETIME", "k")
    finally:
        for c in pair:
            c.config_set("maxmemory-policy", "noeviction")


def test_type_of_every_type_as_redis(pair):
    for c in pair:
        c.set("s", "v")
        c.incr("n")
        c.rpush("l", "a")
        c.sadd("set", "a")
        c.zadd("z", {"a": 1})
        c.hset("h", "f", "v")
    for key in ("s", "n", "l", "set", "z", "h", "nosuch"):
        both(pair, "TYPE", key)


# -- COMMAND COUNT / LIST ------------------------------------------------------------------------------

def test_command_list_filters_as_redis(pair):
    mv, rs = pair
    ours = set(raw(mv, "COMMAND", "LIST"))
    theirs = set(raw(rs, "COMMAND", "LIST"))
    assert len([n for n in ours if b"|" not in n]) == raw(mv, "COMMAND", "COUNT")
    assert {b"dump", b"restore", b"sort", b"sort_ro", b"memory|usage", b"memory|stats"} <= ours
    common = ours & theirs
    assert len(common) > 200
    for cat in ("keyspace", "read", "write", "list", "set", "sortedset", "hash", "string", "fast", "slow",
                "dangerous", "admin", "connection", "pubsub", "nosuch", "@read"):
        got = set(raw(mv, "COMMAND", "LIST", "FILTERBY", "ACLCAT", cat)) & common
        want = set(raw(rs, "COMMAND", "LIST", "FILTERBY", "ACLCAT", cat)) & common
        assert got == want, (cat, got ^ want)
    for pattern in ("s*", "*|*", "CONFIG|G*", "memory*", "?et", "[dr]*"):
        got = set(raw(mv, "COMMAND", "LIST", "FILTERBY", "PATTERN", pattern)) & common
        want = set(raw(rs, "COMMAND", "LIST", "FILTERBY", "PATTERN", pattern)) & common
        assert got == want, pattern
    for args in [("COMMAND", "LIST", "FILTERBY", "MODULE", "x"), ("COMMAND", "LIST", "FILTERBY", "NOSUCH", "x"),
                 ("COMMAND", "LIST", "FILTERBY", "PATTERN"), ("COMMAND", "LIST", "x")]:
        assert raw(mv, *args) == raw(rs, *args), args


# -- one database, as a standalone Redis with `databases 1` -------------------------------------------

@pytest.fixture(scope="module")
def one_db_redis(tmp_path_factory):
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    r = RedisServer(tmp_path_factory.mktemp("redis-one-db"),
                    extra=["--databases", "1", "--save", "", "--appendonly", "no"]).start()
    c = r.client()
    yield c
    c.close()
    r.stop()


def test_select_swapdb_move_copy_answer_as_a_redis_with_one_database(shared_node, one_db_redis):
    mv = shared_node.client()
    try:
        for c in (mv, one_db_redis):
            c.flushall()
            c.set("k", "v")
            c.set("{k}", "v")
        for args in [("SELECT", "0"), ("SELECT", "1"), ("SELECT", "-1"), ("SELECT", "x"), ("SELECT", "99999999999"),
                     ("SWAPDB", "0", "1"), ("SWAPDB", "0", "0"), ("SWAPDB", "1", "0"), ("SWAPDB", "x", "y"),
                     ("SWAPDB", "0", "y"), ("SWAPDB", "-1", "0"), ("SWAPDB", "0", "99999999999"),
                     ("SWAPDB", "0"),
                     ("MOVE", "k", "1"), ("MOVE", "k", "0"), ("MOVE", "k", "x"), ("MOVE", "nosuch", "0"),
                     ("MOVE", "k", "-1"), ("COPY", "{k}", "{k}2", "DB", "0"), ("COPY", "{k}", "{k}3", "DB", "1"),
                     ("COPY", "{k}", "{k}4", "DB", "x"), ("CONFIG", "GET", "databases")]:
            got, want = call(mv, *args), call(one_db_redis, *args)
            assert got == want, (args, got, want)
        mi, ri = mv.info("everything"), one_db_redis.info("everything")
        for field in ("cluster_enabled", "redis_mode", "role", "connected_slaves"):
            assert mi[field] == ri[field], field
        assert mi["cluster_enabled"] == 0 and mi["redis_mode"] == "standalone" and mi["role"] == "master"
        assert call(mv, "CLUSTER", "INFO")[0] == "error"  # no CLUSTER command: nothing to probe
    finally:
        mv.close()


def test_clients_keep_working_with_one_database(shared_node, pair):
    mv, _ = pair
    mv.set("a", "1")
    mv.rpush("l", "x", "y")
    mv.sadd("s", "m")
    r3 = shared_node.client(protocol=3)
    try:
        assert r3.get("a") == b"1" and r3.ping()
        with r3.pipeline() as p:
            p.set("b", "2").get("b").llen("l")
            assert p.execute() == [True, b"2", 2]
    finally:
        r3.close()
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli is not installed")
    port = str(shared_node.port)

    def run(*args: str) -> str:
        return subprocess.run([cli, "-p", port, *args], capture_output=True, text=True, timeout=60).stdout

    assert run("GET", "a").strip() == "1"
    assert sorted(run("--scan").split()) == ["a", "b", "l", "s"]
    big = run("--bigkeys")
    assert "1 lists with 2 items" in big and "1 sets with 1 members" in big
    mem = run("--memkeys")
    assert "1 lists with" in mem and "bytes" in mem
