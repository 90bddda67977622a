"""Shard workers under failure (docs/shards.md, slice 9): SIGKILL of one worker of a
``--shards 2`` node while clients write to both, with ``durability always``.

A checker of acknowledged writes: writer threads, each the only writer of its keys, run
SET, INCR, RPUSH, HSET and MSET (its two keys on different workers: a unit) over and over
on connections of either worker, and remember every write the node acknowledged. Worker 1
is SIGKILLed amid the load; while it is down, commands for its partitions get an error at
once (LOADING, or a closed connection for one in flight), never a hang, and the other
worker keeps serving; the supervisor restarts it on its data. Once it is back and the
writers have gone on (then the same with worker 0), every acknowledged write is there: each SET's value, each RPUSHed
element in order, each HSET field, both keys of each MSET, and each counter at least at
its last acknowledged INCR (writes that got an error may or may not have been applied).
"""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import redis

from tests.integration.test_shards import (
    DEADLINE,
    SHARDS,
    _cmdline,
    alive,
    children,
    client_on,
    keys_on,
    start,
    wait_until,
)

WRITERS = 4
SLOW = 10.0  # seconds: an error reply slower than this is a hang, not "at once"


class Writer(threading.Thread):
    """Writes to its own keys on both workers and remembers what was acknowledged."""

    def __init__(self, port: int, n: int, stop: threading.Event):
        super().__init__(daemon=True)
        self.port, self.n, self.stop = port, n, stop
        self.sets: dict[str, int] = {}  # key -> the value acknowledged
        self.pushed: list[int] = []  # elements whose RPUSH was acknowledged, in order
        self.fields: dict[str, int] = {}
        self.msets: list[tuple[str, str, int]] = []
        self.incr_acked = 0  # the last value an INCR answered
        self.acked = 0  # acknowledged writes
        self.errors = 0
        self.slowest_error = 0.0
        # an MSET's keys: one on each worker (the unit locks both)
        self.pairs = list(zip(keys_on(0, 10_000, f"m{n}a:"), keys_on(1, 10_000, f"m{n}b:")))
        self.failure: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as e:  # (reported by the test, not lost in a thread)
            self.failure = e

    def _run(self) -> None:
        c: redis.Redis | None = None
        i = 0
        while not self.stop.is_set():
            i += 1
            if c is None:
                try:
                    c = client_on(self.port, i % SHARDS)
                except AssertionError:  # no connection landed there while a worker was down
                    continue
            t0 = time.monotonic()
            try:
                self._write(c, i)
            except (redis.ConnectionError, redis.ResponseError, redis.TimeoutError):
                # LOADING (a ConnectionError in redis-py), or a connection closed with the
                # worker: not acknowledged
                self.errors += 1
                self.slowest_error = max(self.slowest_error, time.monotonic() - t0)
                c.close()
                c = None

    def _write(self, c: redis.Redis, i: int) -> None:
        n, op = self.n, i % 5
        if op == 0:
            assert c.set(f"s{n}:{i}", i)
            self.sets[f"s{n}:{i}"] = i
        elif op == 1:
            self.incr_acked = c.incr(f"cnt{n}")
        elif op == 2:
            c.rpush(f"list{n}", i)
            self.pushed.append(i)
        elif op == 3:
            c.hset(f"h{n}", f"f{i}", i)
            self.fields[f"f{i}"] = i
        else:
            a, b = self.pairs[i // 5 % len(self.pairs)]
            assert c.mset({a: i, b: i})
            self.msets.append((a, b, i))
        self.acked += 1

    def check(self, c: redis.Redis) -> None:
        n = self.n
        keys = list(self.sets)
        for k, v in zip(keys, c.mget(keys) if keys else []):
            assert v == str(self.sets[k]).encode(), f"acknowledged SET {k} {self.sets[k]} reads {v!r}"
        counter = int(c.get(f"cnt{n}") or 0)
        assert counter >= self.incr_acked, f"cnt{n} reads {counter}, an INCR answered {self.incr_acked}"
        stored = [int(x) for x in c.lrange(f"list{n}", 0, -1)]
        it = iter(stored)
        missing = [x for x in self.pushed if x not in it]  # (a subsequence, in order)
        assert not missing, f"acknowledged RPUSHes missing from list{n}: {missing[:10]}"
        h = c.hgetall(f"h{n}")
        for f, v in self.fields.items():
            assert h.get(f.encode()) == str(v).encode(), f"acknowledged HSET h{n} {f} reads {h.get(f.encode())!r}"
        latest: dict[tuple[str, str], int] = {}
        for a, b, v in self.msets:
            latest[(a, b)] = v
        for (a, b), v in latest.items():
            got = c.mget(a, b)
            # (a later MSET of the same pair that got an error may have been applied: the
            # two keys still agree, and hold this value or a later one)
            assert got[0] == got[1] and int(got[0]) >= v, f"acknowledged MSET {a} {b} {v} reads {got}"


def kill_and_wait(n, index: int, writers: list[Writer]) -> None:
    """SIGKILL worker ``index``; wait until it is back and every writer acknowledged 50
    more writes."""
    victim = next(p for p in children(n.pid) if _cmdline(p)[_cmdline(p).index(b"--index") + 1] == b"%d" % index)
    os.kill(victim, signal.SIGKILL)
    wait_until(lambda: not alive(victim), f"worker {index} to die")
    wait_until(lambda: len(children(n.pid)) == SHARDS and victim not in children(n.pid),
               f"the supervisor to start worker {index} again")
    acked = [w.acked for w in writers]
    wait_until(lambda: all(w.acked >= a + 50 for w, a in zip(writers, acked)),
               "every writer acknowledged again, on both workers")


def test_sigkill_of_a_worker_under_write_load_loses_no_acknowledged_write(tmp_path):
    n = start(tmp_path, durability="always")
    stop = threading.Event()
    writers = [Writer(n.port, i, stop) for i in range(WRITERS)]
    try:
        for w in writers:
            w.start()
        wait_until(lambda: all(w.acked >= 50 for w in writers), "every writer acknowledged")
        for index in (1, 0):  # each worker in turn: each one coordinates some of the MSETs
            kill_and_wait(n, index, writers)
    finally:
        stop.set()
        for w in writers:
            w.join(DEADLINE)
    try:
        for w in writers:
            assert w.failure is None, w.failure
            assert not w.is_alive(), "a writer hung"
        slowest = max(w.slowest_error for w in writers)
        assert slowest < SLOW, f"an error reply took {slowest:.1f} s: commands must fail at once, not hang"
        print("acknowledged", [w.acked for w in writers], "errors", [w.errors for w in writers],
              f"slowest error {slowest:.2f} s")
        c = client_on(n.port, 0)
        for w in writers:
            w.check(c)
        bogus = Writer(n.port, 99, stop)  # (the checker itself fails on a lost write)
        bogus.pushed = [1]
        with pytest.raises(AssertionError, match="acknowledged RPUSHes missing"):
            bogus.check(c)
        assert n.proc.poll() is None and len(children(n.pid)) == SHARDS
    finally:
        n.stop(timeout=DEADLINE)
