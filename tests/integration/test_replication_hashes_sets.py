"""Hashes, sets and per-member TTL on a real 3-node cluster (processes, real gRPC).

Random concurrent hash and set commands on all three nodes conflict on a small key space;
once they stop, every node's DEBUG DIGEST is equal, and so is everything each node reads
(members, values, cardinalities, the TTL of every member). Then the lattices, each with
two nodes made concurrent by cutting the link between them (node 3 sees both sides all
along and merges them as they come):

- a concurrent SADD survives an SREM that did not observe it (also the re-add of a member
  the remover saw);
- DEL of a hash beats its fields written before it, not a field written after it;
- HINCRBY is last writer wins on the result (the data model's rule);
- a member's TTL expires on every node, with no expiry message;
- an HDEL concurrent with an HSET of the same field keeps the HSET's value.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
import redis

from tests.cluster import Cluster, wait_for, wait_links

pytestmark = pytest.mark.timeout(180)

HASHES = [f"h{i}" for i in range(3)]
SETS = [f"s{i}" for i in range(3)]
FIELDS = [f"f{i}" for i in range(5)]
OPS = 600


def _writer(client: redis.Redis, seed: int, errors: list, deadline: float) -> None:
    rng = random.Random(seed)
    for n in range(OPS):
        if time.monotonic() > deadline:
            errors.append(f"writer {seed}: time bound hit after {n} ops")
            return
        h, s, f, m = rng.choice(HASHES), rng.choice(SETS), rng.choice(FIELDS), rng.choice(FIELDS)
        op = rng.randrange(16)
        try:
            if op < 3:
                client.hset(h, f, f"v{seed}-{n}")
            elif op < 4:
                client.hdel(h, f)
            elif op < 5:
                client.hincrby(h, f"n{m}", rng.randint(-3, 3))
            elif op < 6:
                client.execute_command("HPEXPIRE", h, rng.choice([50, 100000]), "FIELDS", 1, f)
            elif op < 8:
                client.sadd(s, m, rng.choice(FIELDS))
            elif op < 9:
                client.srem(s, m)
            elif op < 10:
                client.spop(s)
            elif op < 11:
                client.smove(s, rng.choice(SETS), m)
            elif op < 12:
                client.execute_command("EXPIREMEMBER", s, m, rng.choice([30, 100000]), "ms")
            elif op < 13:
                client.sinterstore(rng.choice(SETS), [s, rng.choice(SETS)])
            elif op < 14:
                client.delete(rng.choice(HASHES + SETS))
            elif op < 15:
                client.execute_command("HPERSIST", h, "FIELDS", 1, f)
            else:
                client.expire(rng.choice(HASHES + SETS), 1000)
        except redis.ResponseError as e:
            if "WRONGTYPE" not in str(e) and "not an integer" not in str(e):
                errors.append(f"writer {seed}: {e}")


def _view(client: redis.Redis) -> dict:
    """What a node reads for every key of the random space (TTLs of keys and members in
    seconds: the nodes read them a moment apart)."""
    out = {}
    for k in HASHES:
        fields = client.hgetall(k)
        out[k] = (client.type(k), fields, client.hlen(k), client.ttl(k),
                  {f: client.execute_command("TTL", k, f) for f in sorted(fields)})
    for k in SETS:
        members = client.smembers(k)
        out[k] = (client.type(k), members, client.scard(k), client.ttl(k),
                  {m: client.execute_command("TTL", k, m) for m in sorted(members)})
    return out


def test_random_hash_and_set_commands_on_three_nodes_converge(tmp_path):
    with Cluster(tmp_path, n=3) as c:
        errors: list[str] = []
        deadline = time.monotonic() + 120
        clients = [c.client(i) for i in (1, 2, 3)]
        threads = [threading.Thread(target=_writer, args=(clients[i], 100 + i, errors, deadline)) for i in range(3)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not errors, errors
        c.wait_converged(timeout=60)
        # the members whose TTL runs out during the load are gone on every node: read
        # until two consecutive views agree on all three (a TTL can tick between reads)
        views = wait_for(lambda: (lambda v: v if v[0] == v[1] == v[2] else None)([_view(x) for x in clients]),
                         60, "every node reading the same members, values, counts and TTLs")
        assert any(v[1] for v in views[0].values()), "the load left nothing to compare"
        for x in clients:
            x.close()


@pytest.fixture
def pair(tmp_path):
    """Three nodes; the link between nodes 1 and 2 can be cut both ways."""
    c = Cluster.with_proxies(tmp_path, [(1, 2), (2, 1)], n=3)
    clients = {i: c.client(i) for i in (1, 2, 3)}
    yield c, clients
    for x in clients.values():
        x.close()
    c.stop()


def _cut(c: Cluster) -> None:
    c.proxy(1, 2).cut()
    c.proxy(2, 1).cut()
    wait_links(c, [(1, 2), (2, 1)], up=False)


def _heal(c: Cluster) -> None:
    c.proxy(1, 2).heal()
    c.proxy(2, 1).heal()
    wait_links(c, [(1, 2), (2, 1)], up=True)
    c.wait_converged(timeout=60)


def _later(ms: int = 20) -> None:
    """Let the wall clock (and so the HLCs of both sides) move past what happened so far:
    'written after' in the data model is a later (hlc, origin)."""
    time.sleep(ms / 1000)


def test_concurrent_sadd_survives_an_srem_that_did_not_observe_it(pair):
    c, n = pair
    n[1].sadd("s", "seen", "kept")
    c.wait_converged(timeout=60)
    _cut(c)
    assert n[2].srem("s", "seen", "kept") == 2  # observed node 1's adds ...
    n[1].sadd("s", "seen")  # ... not this re-add of a member node 2 had
    n[1].sadd("s", "new")  # nor this new one
    _heal(c)
    for i in (1, 2, 3):
        assert n[i].smembers("s") == {b"seen", b"new"}, i
        assert n[i].scard("s") == 2


def test_del_of_a_hash_beats_older_fields_not_a_field_written_after_it(pair):
    c, n = pair
    n[1].hset("h", mapping={"old": "1", "old2": "2"})
    c.wait_converged(timeout=60)
    _cut(c)
    n[2].hset("h", "before", "x")  # concurrent with the DEL, but older than it
    _later()
    assert n[1].delete("h") == 1
    _later()
    n[2].hset("h", "after", "y")  # written after the DEL (never saw it)
    _heal(c)
    for i in (1, 2, 3):
        assert n[i].hgetall("h") == {b"after": b"y"}, i
        assert n[i].hlen("h") == 1


def test_hincrby_is_last_writer_wins_on_the_result(pair):
    c, n = pair
    n[1].hset("h", "n", 10)
    c.wait_converged(timeout=60)
    _cut(c)
    assert n[1].hincrby("h", "n", 5) == 15
    _later()
    assert n[2].hincrby("h", "n", 7) == 17  # the later write
    _heal(c)
    for i in (1, 2, 3):
        assert n[i].hget("h", "n") == b"17", i  # not 22: concurrent increments do not add up


def test_hdel_concurrent_with_hset_keeps_the_hset(pair):
    c, n = pair
    n[1].hset("h", "f", "v1")
    c.wait_converged(timeout=60)
    _cut(c)
    n[1].hset("h", "f", "v2")
    _later()
    assert n[2].hdel("h", "f") == 1  # later, but it saw only v1
    _heal(c)
    for i in (1, 2, 3):
        assert n[i].hget("h", "f") == b"v2", i


def test_a_member_ttl_expires_on_every_node(pair):
    c, n = pair
    n[1].sadd("s", "a", "b")
    n[1].hset("h", mapping={"f": "1", "g": "2"})
    assert n[1].execute_command("EXPIREMEMBER", "s", "a", 1500, "ms") == 1
    assert n[1].execute_command("HPEXPIRE", "h", 1500, "FIELDS", 1, "f") == [1]
    c.wait_converged(timeout=60)
    for i in (2, 3):
        assert 0 < n[i].execute_command("PTTL", "s", "a") <= 1500
    # the deadline passes with no message: every node reads the members as gone
    wait_for(lambda: all(n[i].sismember("s", "a") == 0 and n[i].hget("h", "f") is None for i in (1, 2, 3)),
             30, "the member and the field expiring on every node")
    for i in (1, 2, 3):
        assert n[i].smembers("s") == {b"b"} and n[i].scard("s") == 1 and n[i].hgetall("h") == {b"g": b"2"}
    c.wait_converged(timeout=60)
