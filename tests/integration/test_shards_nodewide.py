"""MEMORY STATS/DOCTOR/MALLOC-STATS, LATENCY, SCAN and INFO persistence of a node of two
shard workers, beside one process holding the same data (docs/shards.md §8a; issue 33):
the same replies, fields and shapes, with the node's figures summed over its workers
(``shards/fanout.py``).
"""

from __future__ import annotations

import select

import redis

from tests.helpers import Node, mb
from tests.integration.test_keyspace_passes import read_replies
from tests.integration.test_shards import client_on, keys_on, sock_on, wait_until

VALUE = b"v" * 2048


def _pair(shard_nodes, worker: int = 0, **kw) -> tuple[redis.Redis, redis.Redis]:
    sharded, single = shard_nodes
    s = client_on(sharded.port, worker, **kw)
    o = redis.Redis(port=single.port, single_connection_client=True, **kw)
    for c in (s, o):
        assert c.flushall() is True
    return s, o


def _load(clients, keys: list[str], value: bytes = b"x") -> None:
    for c in clients:
        pipe = c.pipeline(transaction=False)
        for k in keys:
            pipe.set(k, value)
        pipe.execute()
    for c in clients:  # (MEMORY STATS's keys.count is the sweepers' count, as INFO keyspace's)
        wait_until(lambda c=c: c.memory_stats().get("keys.count") == len(keys), "the keys counted")


def _named(stats) -> dict:
    return {(k.decode() if isinstance(k, bytes) else k): v for k, v in dict(stats).items()}


def _slow(c, seconds: float) -> None:
    """A command that runs ``seconds`` (DEBUG SLEEP in a transaction sleeps right there)."""
    pipe = c.pipeline(transaction=True)
    pipe.execute_command("DEBUG", "SLEEP", str(seconds))
    pipe.execute()


def test_memory_stats_doctor_and_malloc_stats_answer_for_the_node(shard_nodes):
    s, o = _pair(shard_nodes)
    b = client_on(shard_nodes[0].port, 1)
    try:
        keys = keys_on(0, 1500, "mem:") + keys_on(1, 1500, "mem:")  # 6 MB: each worker's half is below
        # the 5 MB under which MEMORY DOCTOR calls an instance empty, the node is not
        _load((s, o), keys, VALUE)
        for c in (s, b):
            stats = c.memory_stats()
            one = o.memory_stats()
            assert list(stats) == list(one)  # the same fields, in Redis's order
            assert all(type(stats[k]) is type(one[k]) for k in one)
            assert stats["keys.count"] == one["keys.count"] == 3000  # summed: 1500 on each worker
            assert stats["db.0"] == one["db.0"]
            data, total, peak = stats["dataset.bytes"], stats["total.allocated"], stats["peak.allocated"]
            assert data > 3000 * 2048 and stats["keys.bytes-per-key"] == data // 3000  # of the sums
            assert abs(stats["dataset.percentage"] - 100 * data / total) < 1e-6
            assert abs(stats["peak.percentage"] - 100 * total / peak) < 1e-6
            assert stats["overhead.total"] == max(total - data, 0)
            rss = c.info("memory")["used_memory_rss"]  # (INFO sums the workers' too)
            assert 0.7 * rss < total < 1.3 * rss
            assert stats["marekvs.record-cache.entries"] >= 3000
            doctor, one_doctor = c.execute_command("MEMORY", "DOCTOR"), o.execute_command("MEMORY", "DOCTOR")
            assert doctor == one_doctor and b"can't find any memory issue" in doctor
            assert c.execute_command("MEMORY", "MALLOC-STATS") == o.execute_command("MEMORY", "MALLOC-STATS")
        assert s.flushall() is True and o.flushall() is True
        assert s.execute_command("MEMORY", "DOCTOR") == o.execute_command("MEMORY", "DOCTOR")
    finally:
        for c in (s, o, b):
            c.close()


def test_memory_commands_in_a_transaction_and_inside_redis_protocol_3(shard_nodes):
    s, o = _pair(shard_nodes, 1, protocol=3)
    try:
        _load((s, o), keys_on(0, 3, "t:") + keys_on(1, 3, "t:"))
        replies = []
        for c in (s, o):
            wait_until(lambda c=c: _named(c.memory_stats())["keys.count"] == 6, "the keys counted")
        for c in (s, o):
            pipe = c.pipeline(transaction=True)
            pipe.set(keys_on(0, 1, "t:")[0], "y").execute_command("MEMORY", "STATS").set(keys_on(1, 1, "t:")[0], "y")
            replies.append(pipe.execute())
        assert replies[0][0] is True and replies[0][2] is True
        mine, one = _named(replies[0][1]), _named(replies[1][1])
        assert list(mine) == list(one) and mine["keys.count"] == 6
    finally:
        s.close()
        o.close()


def test_latency_answers_for_the_node(shard_nodes):
    s, o = _pair(shard_nodes)
    b = client_on(shard_nodes[0].port, 1)
    o2 = redis.Redis(port=shard_nodes[1].port, single_connection_client=True)
    try:
        for c in (s, o):
            assert c.config_set("latency-monitor-threshold", 5) is True
            assert c.execute_command("LATENCY", "RESET") >= 0
        assert b.config_get("latency-monitor-threshold") == {"latency-monitor-threshold": "5"}
        # a slow command on each worker (on each of two connections of the single process)
        for c in (s, b, o, o2):
            _slow(c, 0.03)
        _slow(b, 0.06)
        _slow(o2, 0.06)
        latest, one = s.execute_command("LATENCY", "LATEST"), o.execute_command("LATENCY", "LATEST")
        assert [e[0] for e in latest] == [e[0] for e in one] == [b"command"]  # one event, not one per worker
        assert latest[0][3] >= 60 and latest[0][2] >= 30  # the highest maximum: worker 1's
        history = b.execute_command("LATENCY", "HISTORY", "command")
        assert history and all(len(x) == 2 for x in history) and max(ms for _, ms in history) >= 60
        assert [t for t, _ in history] == sorted({t for t, _ in history})  # one sample per second, in order
        assert s.execute_command("LATENCY", "HISTORY", "nothing") == o.execute_command("LATENCY", "HISTORY", "nothing")
        assert s.execute_command("LATENCY", "RESET", "command", "nothing", "command") \
            == o.execute_command("LATENCY", "RESET", "command", "nothing", "command") == 1  # reset once, not per worker
        assert s.execute_command("LATENCY", "LATEST") == o.execute_command("LATENCY", "LATEST") == []
        _slow(b, 0.03)
        assert s.execute_command("LATENCY", "RESET") == 1
    finally:
        for c in (s, o):
            c.config_set("latency-monitor-threshold", 0)
        for c in (s, o, b, o2):
            c.close()


def test_one_scan_call_goes_over_every_worker_while_it_wants_more(shard_nodes):
    s, o = _pair(shard_nodes)
    b = client_on(shard_nodes[0].port, 1)
    try:
        strings, hashes = keys_on(0, 5, "sc:") + keys_on(1, 5, "sc:"), keys_on(0, 2, "sch:") + keys_on(1, 2, "sch:")
        for c in (s, o):
            _load((c,), strings)
            for h in hashes:
                c.hset(h, "f", "v")
        everything = sorted(k.encode() for k in strings + hashes)
        for c in (s, b, o):  # (a call from worker 1 starts at cursor 0: worker 0's partitions)
            assert c.scan(0, count=1000) == (0, everything) or sorted(c.scan(0, count=1000)[1]) == everything
            cursor, found = c.scan(0, count=1000, _type="hash")
            assert cursor == 0 and sorted(found) == sorted(k.encode() for k in hashes)
            cursor, found = c.scan(0, count=1000, match="sch:*", _type="string")
            assert (cursor, found) == (0, [])
        # a small COUNT still stops within a worker, and the walk sees every key once
        seen, cursor = [], 0
        while True:
            cursor, page = s.scan(cursor, count=3)
            seen += page
            if cursor == 0:
                break
        assert sorted(seen) == everything
        # in a transaction and in a script too
        pipe = b.pipeline(transaction=True)
        pipe.scan(0, count=1000)
        cursor, found = pipe.execute()[0]
        assert cursor == 0 and sorted(found) == everything
        got = b.eval("return redis.call('SCAN', '0', 'COUNT', '1000')", 0)
        assert got[0] == b"0" and sorted(got[1]) == everything
        stats = wait_until(lambda: s.info("commandstats").get("cmdstat_scan"), "SCAN in commandstats")
        assert stats["calls"] >= 1
    finally:
        for c in (s, o, b):
            c.close()


def test_info_persistence_counts_the_log_of_every_worker(shard_nodes):
    s, o = _pair(shard_nodes)
    b = client_on(shard_nodes[0].port, 1)
    try:
        def seq(c) -> int:
            return int(c.info("persistence")["replog_last_seq"])

        k0, k1 = keys_on(0, 1, "seq:")[0], keys_on(1, 1, "seq:")[0]
        for c in (s, b):
            before = seq(c)
            assert c.set(k0, "a") and seq(s) == seq(b) == before + 1
            assert c.set(k1, "a") and seq(s) == seq(b) == before + 2  # a write on either worker: one entry
            info = c.info("persistence")
            assert info["replog_first_seq"] <= info["replog_last_seq"] + 1
            assert list(info) == list(o.info("persistence"))
            repl = c.info("replication")  # (the same log's bounds: log_first_seq was summed)
            assert (repl["log_first_seq"], repl["log_last_seq"]) == (info["replog_first_seq"], info["replog_last_seq"])
    finally:
        for c in (s, o, b):
            c.close()


def test_what_was_refused_runs_now(shard_nodes):
    """Node-wide diagnostics in a transaction, and blocking commands over keys of both
    workers inside a transaction or a script (their non-blocking form, as Redis runs them
    there) were refused with ``ERR ... is not supported with shards > 1 yet``; they run."""
    c = client_on(shard_nodes[0].port, 0)
    k0, k1 = keys_on(0, 1, "m")[0], keys_on(1, 1, "m")[0]
    assert c.mset({"{t}a": "1", "{t}b": "2"}) and c.mget("{t}a", "{t}b") == [b"1", b"2"]  # one worker: it runs
    # (on c's own connection: a redis-py pipeline takes another one, maybe on the other worker)
    c.execute_command("MULTI")
    c.execute_command("SET", k1, "x")
    c.execute_command("MEMORY", "STATS")
    c.execute_command("LATENCY", "LATEST")
    got = c.execute_command("EXEC")
    assert got[0] == b"OK" and b"keys.count" in got[1] and got[2] == []
    assert c.get(k1) == b"x"
    assert c.delete(k1) == 1 and c.rpush(k1, "a", "b") == 2
    c.execute_command("MULTI")
    c.execute_command("BLPOP", k0, k1, "0")
    c.execute_command("BRPOP", k0, k1, "0")
    c.execute_command("BLPOP", k0, k1, "0")
    assert c.execute_command("EXEC") == [[k1.encode(), b"a"], [k1.encode(), b"b"], None]
    pop = "return redis.call('BLMPOP', 0, 2, KEYS[1], KEYS[2], 'LEFT')"
    assert c.eval(pop, 2, k0, k1) is None
    assert c.rpush(k1, "c") == 1
    assert c.eval(pop, 2, k0, k1) == [k1.encode(), [b"c"]]
    c.close()


def test_a_hopped_read_that_runs_in_steps_leaves_both_workers_serving(tmp_path):
    """The first read of a big zset after a restart builds its order mirror in steps
    (test_keyspace_passes.py): carried from a client of worker 0 to the zset's worker 1,
    it runs in steps there too (``Owner._steps``), so both workers serve other clients
    meanwhile, and the client's later commands of the same pipeline run after it."""
    n = Node(tmp_path / "data", extra=["--shards", "2"]).start()
    try:
        big = keys_on(1, 1, "big")[0].encode()
        r = client_on(n.port, 1)
        pipe = r.pipeline(transaction=False)
        for start in range(0, 100_000, 5000):
            pipe.zadd(big, {b"m%07d" % i: i for i in range(start, start + 5000)})
        pipe.execute()
        r.close()
        n.stop()
        n.start()  # no mirror held
        a, b0, b1 = sock_on(n.port, 0), client_on(n.port, 0), client_on(n.port, 1)
        try:
            a.sendall(mb(b"ZCARD", big) + mb(b"ZADD", big, b"100001", b"new") + mb(b"ZRANGE", big, b"-2", b"-1")
                      + mb(b"PING"))
            for c in (b0, b1, b0, b1, b0):
                assert c.ping()
            assert b1.zrem(big, b"m0000000") == 1  # (on worker 1, while the build runs there)
            assert select.select([a], [], [], 0)[0] == [], "the build blocked the other clients"
            card, added, top, pong = read_replies(a, 4)
            # (ZCARD ends after the build, which took the ZREM made meanwhile, as one process's)
            assert (card, added, top, pong) == (99_999, 1, [b"m0099999", b"new"], b"PONG")
            assert b0.zcard(big) == 100_000 and b0.zrange(big, 0, 0) == [b"m0000001"]
        finally:
            a.close()
            b0.close()
            b1.close()
    finally:
        n.stop()
