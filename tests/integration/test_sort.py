"""SORT and SORT_RO side by side with a stock redis-server 7.0.15.

The same lists, sets and sorted sets (numbers, words, duplicates), weight strings, hashes
and GET targets are written to a marekvs node and to redis-server; then random SORT and
SORT_RO commands (BY patterns, ``->`` hash fields, BY a constant, LIMIT, GET ``#`` and
patterns, ASC/DESC, ALPHA, STORE) go to both and the replies must be equal, and after a
STORE so must the stored lists. Where Redis's order is its hash table's (a set not sorted,
BY a constant) or undefined (an ALPHA sort by BY values that tie) the replies are compared
as multisets. Errors (WRONGTYPE, syntax, LIMIT, scores that are not doubles) and the
keyspace hits and misses the pattern lookups count are compared too.
"""

from __future__ import annotations

import random

import pytest
import redis

pytestmark = pytest.mark.timeout(300)

NUMS = ["1", "2", "10", "-3", "2.5", "1e2", "0", "-0", "1.0", "007", "3", " 4", "0x10", "inf", "-inf", "99"]
WORDS = ["apple", "banana", "cherry", "date", "elder", "fig", "grape", "a1", "b22", "zeta", "alpha", "beta9"]


@pytest.fixture(scope="module")
def pair(shared_node, real_redis):
    mv, rs = shared_node.client(), real_redis.client()
    yield mv, rs
    mv.close()
    rs.close()


def call(c: redis.Redis, *args):
    try:
        return c.execute_command(*args)
    except redis.ResponseError as e:
        return ("error", str(e))


def fill(c: redis.Redis, rng: random.Random) -> None:
    c.flushall()
    c.rpush("L:n", *[rng.choice(NUMS) for _ in range(25)])
    c.rpush("L:a", *[rng.choice(WORDS) for _ in range(20)])
    c.sadd("S:n", *NUMS)
    c.sadd("S:a", *WORDS)
    c.sadd("S:i", *[str(i) for i in range(-5, 40, 3)])  # an intset in Redis
    c.zadd("Z:n", {m: i * 0.5 for i, m in enumerate(NUMS)})
    c.zadd("Z:a", {m: (i * 7) % 5 for i, m in enumerate(WORDS)})
    for i, e in enumerate(NUMS + WORDS + [str(i) for i in range(-5, 40, 3)]):
        if i % 4:
            c.set(f"w_{e}", str((i * 13) % 11 - 3))  # numeric weights, some missing, ties
        c.set(f"v_{e}", f"v{(i * 37) % 101:03d}-{e}")  # unique words for every element
        c.hset(f"h_{e}", mapping={"f": str((i * 5) % 7), "g": f"g{i:03d}"})
        if i % 3:
            c.set(f"o_{e}", f"obj-{e}")
    c.set("str", "x")
    c.hset("hash", "f", "v")


BY_NUMERIC = ["w_*", "h_*->f", "missing_*", "nosort", "w_*->", "*"]
BY_ALPHA = ["v_*", "h_*->g", "nosort"]
GETS = ["#", "o_*", "h_*->g", "w_*", "missing_*", "h_*->nofield", "v_*"]
KEYS = ["L:n", "L:a", "S:n", "S:a", "S:i", "Z:n", "Z:a", "nosuch"]


def random_sort(rng: random.Random) -> tuple[list[str], dict]:
    key = rng.choice(KEYS)
    ro = rng.random() < 0.25
    args = ["SORT_RO" if ro else "SORT", key]
    alpha = rng.random() < 0.5
    by = None
    if rng.random() < 0.5:
        by = rng.choice(BY_ALPHA if alpha else BY_NUMERIC)
        args += ["BY", by]
    limited = False
    if rng.random() < 0.4:
        limited = True
        args += ["LIMIT", str(rng.choice([0, 1, 2, 5, -1, 30, 100])), str(rng.choice([0, 1, 3, 10, -1, 50]))]
    gets = rng.sample(GETS, rng.choice([0, 0, 1, 2, 3]))
    for g in gets:
        args += ["GET", g]
    if rng.random() < 0.5:
        args.append(rng.choice(["ASC", "DESC"]))
    if alpha:
        args.append("ALPHA")
    store = not ro and rng.random() < 0.3
    if store:
        args += ["STORE", "dst"]
    return args, {"key": key, "by": by, "alpha": alpha, "limited": limited, "store": store, "ngets": len(gets)}


def _groups(reply, n: int):
    if not isinstance(reply, list) or n <= 1:
        return reply
    return [tuple(reply[i:i + n]) for i in range(0, len(reply), n)]


def _order_is_redis_s_hash_table(meta) -> bool:
    """Redis returns a set that it does not sort (BY a constant, no STORE) in its hash
    table's order; marekvs in member order. (The BY values of ALPHA sorts are unique, so
    no other order here is undefined.)"""
    return meta["key"].startswith("S:") and meta["by"] is not None and "*" not in meta["by"] \
        and not meta["store"]


def test_random_sorts_answer_as_redis(pair):
    mv, rs = pair
    rng = random.Random(2024)
    for c in pair:
        fill(c, random.Random(5))
    mismatches = []
    for _ in range(1500):
        args, meta = random_sort(rng)
        got, want = call(mv, *args), call(rs, *args)
        if _order_is_redis_s_hash_table(meta) and isinstance(want, list):
            if meta["limited"]:
                ok = isinstance(got, list) and len(got) == len(want)
            else:
                n = max(meta["ngets"], 1)
                ok = sorted(map(repr, _groups(got, n))) == sorted(map(repr, _groups(want, n)))
        else:
            ok = got == want
        if ok and meta["store"] and not isinstance(want, tuple):
            ok = mv.lrange("dst", 0, -1) == rs.lrange("dst", 0, -1) and mv.type("dst") == rs.type("dst") \
                and mv.ttl("dst") == rs.ttl("dst")
        if not ok:
            mismatches.append((args, got, want))
    assert not mismatches, mismatches[:5]


def test_errors_as_redis(pair):
    mv, rs = pair
    for c in pair:
        fill(c, random.Random(5))
    cases = [
        ("SORT", "str"), ("SORT", "hash"), ("SORT_RO", "str"), ("SORT", "str", "NOSUCH"),  # options first
        ("SORT", "L:n", "LIMIT", "0"), ("SORT", "L:n", "LIMIT", "x", "1"), ("SORT", "L:n", "LIMIT", "0", "1.5"),
        ("SORT", "L:n", "BY"), ("SORT", "L:n", "GET"), ("SORT", "L:n", "STORE"), ("SORT_RO", "L:n", "STORE", "d"),
        ("SORT", "L:a"), ("SORT", "L:n", "BY", "v_*"), ("SORT", "S:a", "DESC"), ("SORT", "L:n", "BLAH"),
        ("SORT",), ("SORT_RO",), ("SORT", "nosuch", "BY", "x", "GET", "#"), ("SORT", "L:n", "ALPHA", "ALPHA", "ASC"),
        ("SORT", "L:n", "LIMIT", "1", "2", "LIMIT", "3", "4"), ("SORT", "L:n", "BY", "w_*", "BY", "nosort", "DESC"),
        ("SORT", "L:n", "STORE", "d1", "STORE", "d2"),
    ]
    for args in cases:
        got, want = call(mv, *args), call(rs, *args)
        assert got == want, (args, got, want)
    assert mv.exists("d", "d1") == rs.exists("d", "d1") and mv.lrange("d2", 0, -1) == rs.lrange("d2", 0, -1)


def test_store_replaces_any_type_and_an_empty_result_deletes(pair):
    mv, rs = pair
    for c in pair:
        c.flushall()
        c.rpush("l", "3", "1", "2")
        c.hset("dst", "f", "v")
        c.expire("dst", 100)
        c.set("dst2", "x")
    for args in (("SORT", "l", "STORE", "dst"), ("SORT", "nosuch", "STORE", "dst2"), ("SORT", "l", "LIMIT", "5", "5",
                                                                                       "STORE", "l")):
        assert call(mv, *args) == call(rs, *args)
    for key in ("dst", "dst2", "l"):
        assert (mv.type(key), mv.ttl(key), mv.lrange(key, 0, -1) if mv.type(key) == b"list" else None) == \
            (rs.type(key), rs.ttl(key), rs.lrange(key, 0, -1) if rs.type(key) == b"list" else None)


def test_pattern_lookups_count_as_keyspace_hits_and_misses(pair):
    mv, rs = pair
    for c in pair:
        fill(c, random.Random(5))
    stats = []
    for c in pair:
        c.config_resetstat()
        c.execute_command("SORT", "L:n", "BY", "w_*", "GET", "#", "GET", "o_*", "GET", "h_*->g", "LIMIT", "0", "5")
        c.execute_command("SORT", "nosuch", "BY", "w_*")
        c.execute_command("SORT_RO", "S:i", "BY", "nosort", "GET", "missing_*")
        info = c.info("stats")
        stats.append((info["keyspace_hits"], info["keyspace_misses"]))
    assert stats[0] == stats[1]


def test_resp3_replies(shared_node, real_redis):
    mv, rs = shared_node.client(protocol=3), real_redis.client(protocol=3)
    try:
        for c in (mv, rs):
            c.flushall()
            c.rpush("l", "b", "a", "c")
            c.set("o_a", "A")
        args = ("SORT", "l", "ALPHA", "GET", "#", "GET", "o_*")
        assert mv.execute_command(*args) == rs.execute_command(*args)
    finally:
        mv.close()
        rs.close()


def test_sort_inside_multi_as_redis(pair):
    # SORT ... STORE and SORT_RO queued in a transaction, with writes between them that
    # the later commands see; a wrong type fails its own command only (EXEC goes on)
    replies = []
    for c in pair:
        fill(c, random.Random(9))
        p = c.pipeline(transaction=True)
        p.execute_command("SORT", "L:n", "BY", "w_*", "GET", "#", "GET", "v_*", "STORE", "dst")
        p.lrange("dst", 0, -1).rpush("L:a", "Aardvark")
        p.execute_command("SORT_RO", "L:a", "ALPHA", "LIMIT", "0", "1")
        p.execute_command("SORT", "str")
        p.execute_command("SORT", "dst", "ALPHA", "STORE", "dst")
        p.lrange("dst", 0, 4)
        replies.append([str(r) if isinstance(r, Exception) else r for r in p.execute(raise_on_error=False)])
    assert replies[0] == replies[1]
    assert replies[0][3] == [b"Aardvark"] and "WRONGTYPE" in replies[0][4]
