"""Scripts and transactions whose keys are on several shard workers (docs/shards.md §3,
§9 slice 4): EVAL/EVALSHA/FCALL with declared keys on both workers lock both and run on
the connection's worker, each ``redis.call`` for a key of the other worker carried there
synchronously; keys a script did not declare are locked on its way (and the script is
remembered: its later runs lock every worker up front); MULTI/EXEC queueing node-wide
commands, units of several phases or scripts runs with every worker locked.

Replies are compared byte for byte with a single process (``--shards 1``) and a stock
redis-server side by side, RESP2 and RESP3, from a connection on each worker; atomicity is
checked by concurrent observers on other connections; a killed script releases its locks;
scripts racing for undeclared keys of each other's workers all finish (never a hang).
"""

from __future__ import annotations

import hashlib
import threading
import time

import hiredis
import pytest

from tests.integration.test_differential import Conn, normalise
from tests.integration.test_shards import keys_on, writers_then_readers
from tests.integration.test_shards_multikey import NAMES, three_way
from tests.integration.test_shards_multikey import conn_on as _conn_on

DEADLINE = 120.0

LIB = ("#!lua name=shardlib\n"
       "redis.register_function('move', function(keys, args) "
       "redis.call('DECRBY', keys[1], args[1]) return redis.call('INCRBY', keys[2], args[1]) end)\n"
       "redis.register_function{function_name='both', callback=function(keys) "
       "return redis.call('MGET', keys[1], keys[2]) end, flags={'no-writes'}}")


INCRBY = "return redis.call('INCRBY', KEYS[2], redis.call('GET', KEYS[1]))"


def E(body: str, *args: str) -> list[str]:
    return ["EVAL", body, *args] if args else ["EVAL", body, "0"]


# each case: commands run on a flushed server (scripts and functions flushed too)
CASES = {
    "declared_keys": [
        ["SET", "A0", "10"], ["SET", "B0", "20"], ["HSET", "B1", "f", "v", "g", "w"], ["ZADD", "A1", "1.5", "m"],
        E("return {redis.call('GET', KEYS[1]), redis.call('GET', KEYS[2])}", "2", "A0", "B0"),
        E("redis.call('DECRBY', KEYS[1], 3) return redis.call('INCRBY', KEYS[2], 3)", "2", "A0", "B0"),
        E("return redis.call('MGET', KEYS[1], KEYS[2], 'nokey')", "2", "A0", "B0"),
        E("return redis.call('MSET', KEYS[1], 'a', KEYS[2], 'b')", "2", "A2", "B2"),
        E("return redis.call('HGETALL', KEYS[2])", "2", "A0", "B1"),
        E("redis.setresp(3) return redis.call('HGETALL', KEYS[2])", "2", "A0", "B1"),
        E("redis.setresp(3) return redis.call('ZRANGE', KEYS[1], 0, -1, 'WITHSCORES')", "2", "A1", "B1"),
        E("return redis.call('ZSCORE', KEYS[1], 'm')", "2", "A1", "B0"),
        E("return redis.call('EXISTS', KEYS[1], KEYS[2], 'nokey')", "2", "A0", "B0"),
        E("redis.call('RENAME', KEYS[1], KEYS[2]) return redis.call('GET', KEYS[2])", "2", "A2", "D1"),
        ["EXISTS", "A2", "D1"],
        E("return redis.call('DBSIZE')"),
        # the script's time is frozen on every worker: a key set to expire in 1 ms is still there
        E("redis.call('SET', KEYS[2], 'v', 'PX', 1) for i = 1, 2000000 do end return redis.call('GET', KEYS[2])",
          "2", "A0", "X1"),
        ["GET", "X1"],
    ],
    "errors": [
        ["SET", "S1", "str"], ["RPUSH", "A1", "x"], ["SET", "A0", "1"],
        E("return redis.call('INCR', KEYS[2])", "2", "A0", "S1"),
        E("return redis.pcall('INCR', KEYS[2])", "2", "A0", "S1"),
        E("local r = redis.pcall('LPUSH', KEYS[2], 'x') return {r['err'], 7}", "2", "A0", "S1"),
        E("return redis.call('GET', KEYS[1])", "2", "A1", "S1"),
        E("redis.call('SET', KEYS[1], 'changed') return redis.call('INCR', KEYS[2])", "2", "A0", "S1"),
        ["GET", "A0"],
        E("return redis.call('NOSUCH', KEYS[2])", "2", "A0", "S1"),
        E("return redis.call('GET', KEYS[2], 'x')", "2", "A0", "S1"),
        E("return {err='My Error'}", "2", "A0", "S1"),
        ["EVAL_RO", "return redis.call('SET', KEYS[2], 1)", "2", "A0", "B0"],
        ["EVAL_RO", "return redis.call('GET', KEYS[2])", "2", "A0", "S1"],
        ["EVAL", "return redis.call('GET', KEYS[2])", "3", "A0", "S1"],
        ["EVALSHA", "ffffffffffffffffffffffffffffffffffffffff", "2", "A0", "S1"],
        E("return redis.call('WATCH', KEYS[2])", "2", "A0", "S1"),
        ["XADD", "X1", "1-1", "f", "v"],
        E("return redis.pcall('XREAD', 'BLOCK', 0, 'STREAMS', KEYS[2], '$')", "2", "A0", "X1"),
        E("return redis.call('BLPOP', KEYS[2], 0)", "2", "A0", "B1"),
        E("return redis.pcall('XREAD', 'COUNT', 1, 'STREAMS', KEYS[2], '0')", "2", "A0", "X1"),
    ],
    "evalsha_and_functions": [
        ["SET", "A0", "10"], ["SET", "B0", "20"],
        ["SCRIPT", "LOAD", INCRBY], ["EVALSHA", hashlib.sha1(INCRBY.encode()).hexdigest(), "2", "A0", "B0"],
        ["EVALSHA", hashlib.sha1(INCRBY.encode()).hexdigest().upper(), "2", "B0", "A0"],
        ["FUNCTION", "LOAD", LIB],
        ["FCALL", "move", "2", "A0", "B0", "4"], ["FCALL_RO", "both", "2", "A0", "B0"],
        ["FCALL_RO", "move", "2", "A0", "B0", "4"], ["FCALL", "move", "2", "A0", "S1", "4"],
        ["MGET", "A0", "B0"],
    ],
    # keys the script did not declare (standalone Redis allows them): locked on the way
    "undeclared_keys": [
        ["SET", "A0", "1"], ["SET", "B0", "2"],
        E("return redis.call('GET', ARGV[1])", "0", "B0"),
        E("return redis.call('GET', ARGV[1])", "0", "A0"),
        E("redis.call('SET', ARGV[1], 'x') redis.call('SET', ARGV[2], 'y') return redis.call('MGET', ARGV[1], ARGV[2])",
          "0", "A3", "B3"),
        E("return redis.call('GET', ARGV[1])", "1", "A0", "B0"),
        E("return redis.call('GET', ARGV[1])", "1", "A0", "B0"),
        E("return redis.call('INCR', ARGV[1])", "1", "B0", "A3"),
    ],
    "multi": [
        ["SET", "A0", "1"], ["SET", "B0", "2"], ["ZADD", "A1", "1", "a", "2", "b"], ["ZADD", "B1", "3", "b"],
        ["MULTI"], ["SET", "A2", "x"], ["DBSIZE"], ["MSETNX", "A3", "1", "B3", "2"], ["RENAME", "A2", "B2"],
        ["GET", "B2"], ["ZUNIONSTORE", "D1", "2", "A1", "B1"], ["ZRANGE", "D1", "0", "-1", "WITHSCORES"],
        ["INCR", "B2"], ["EXEC"],
        ["MULTI"], ["EVAL", "return redis.call('INCRBY', KEYS[2], redis.call('GET', KEYS[1]))", "2", "A0", "B0"],
        ["LMOVE", "A1", "B1", "LEFT", "RIGHT"], ["SMOVE", "A0", "B0", "x"], ["DBSIZE"], ["EXEC"],
        ["MULTI"], ["FLUSHALL"], ["DBSIZE"], ["SET", "B0", "after"], ["MGET", "A0", "B0"], ["EXEC"],
        ["MULTI"], ["DBSIZE"], ["NOSUCH"], ["EXEC"],
        ["SET", "A0", "1"], ["WATCH", "A0", "B0"], ["SET", "B0", "changed"], ["MULTI"], ["DBSIZE"], ["EXEC"],
        ["WATCH", "A0", "B0"], ["MULTI"], ["DBSIZE"], ["COPY", "A0", "B3"], ["EXEC"],
    ],
}


def _argv(cmd: list[str]) -> list[bytes]:
    return [NAMES.get(w, w).encode("latin-1") for w in cmd]


def _flush(c) -> None:
    for cmd in ([b"FLUSHALL"], [b"SCRIPT", b"FLUSH"], [b"FUNCTION", b"FLUSH"]):
        assert c.call(cmd) == b"+OK\r\n"


@pytest.mark.parametrize("proto,worker", [(2, 0), (3, 1), (3, 0), (2, 1)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_scripts_and_transactions_across_workers_answer_as_one_process_and_redis(shard_nodes, real_redis, case, proto,
                                                                                  worker):
    mine, conns = three_way(shard_nodes, real_redis, proto, worker)
    try:
        for c in (mine, *conns):
            _flush(c)
        for cmd in CASES[case]:
            argv = _argv(cmd)
            got = normalise(argv, mine.call(argv))
            one = normalise(argv, conns[0].call(argv))
            assert got == one, f"{cmd}: shards 2 {got!r}, one process {one!r}"
            want = normalise(argv, conns[1].call(argv))
            assert got == want, f"{cmd}: marekvs {got!r}, redis-server {want!r}"
    finally:
        for c in (mine, *conns):
            c.close()


def _int(reply: bytes) -> int:
    assert reply[:1] == b":", reply
    return int(reply[1:-2])


def _bulks(reply: bytes) -> list[bytes]:
    lines = reply.split(b"\r\n")
    assert lines[0][:1] in (b"*", b"~", b">"), reply
    return [lines[i] for i in range(2, len(lines) - 1, 2)]


@pytest.mark.parametrize("declared", [True, False])
def test_a_reader_never_sees_half_of_a_script(shard_nodes, declared):
    """Scripts on both workers move units between a key of each worker, declared or not
    (undeclared: the first run locks the other worker on its way, and the node remembers
    the script, whose later runs lock both workers up front); readers on other
    connections of both workers (MGET across the workers, and a script reading both)
    always see the sum unchanged, and every script answers."""
    sharded, _ = shard_nodes
    a, b = keys_on(0, 1, "sum:")[0].encode(), keys_on(1, 1, "sum:")[0].encode()
    setup = conn_on(sharded.port, 0)
    setup.call([b"MSET", a, b"500", b, b"500"])
    setup.call([b"SCRIPT", b"FLUSH"])
    move = (b"local n = redis.call('DECRBY', %s, 1) redis.call('INCRBY', %s, 1) return n")
    if not declared:  # its first run (alone: no other unit to wait for) has the node remember it
        undeclared = move % (b"ARGV[1]", b"ARGV[2]")
        assert setup.call([b"EVAL", undeclared, b"0", a, b]) == b":499\r\n"
        assert setup.call([b"EVAL", undeclared, b"0", b, a]) == b":500\r\n"
    stop = threading.Event()
    errors: list[str] = []
    moves = [0, 0]
    reads = [0]

    def mover(w: int, c: Conn) -> None:
        src, dst = (a, b) if w == 0 else (b, a)
        while not stop.is_set():
            if declared:
                got = c.call([b"EVAL", move % (b"KEYS[1]", b"KEYS[2]"), b"2", src, dst])
            else:
                got = c.call([b"EVAL", move % (b"ARGV[1]", b"ARGV[2]"), b"0", src, dst])
            if got[:1] != b":":
                errors.append(f"script: {got!r}")
                return
            moves[w] += 1

    def reader(w: int, c: Conn) -> None:
        while not stop.is_set():
            x, y = _bulks(c.call([b"MGET", a, b]))
            total = _int(c.call([b"EVAL", b"return redis.call('GET', KEYS[1]) + redis.call('GET', KEYS[2])",
                                 b"2", a, b]))
            if int(x) + int(y) != 1000 or total != 1000:
                errors.append(f"half a script seen: {x!r} + {y!r}, {total}")
                return
            reads[0] += 1

    threads = [_thread(sharded.port, w, errors, mover) for w in (0, 1)]
    threads += [_thread(sharded.port, w, errors, reader) for w in (0, 1)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + DEADLINE
    while not errors and (min(moves) < 100 or reads[0] < 100) and time.monotonic() < deadline:
        time.sleep(0.05)
    stop.set()
    for t in threads:
        t.join(DEADLINE)
    assert not any(t.is_alive() for t in threads), "a script or a reader never answered"
    assert not errors, errors[:3]
    assert min(moves) >= 100 and reads[0] >= 100
    x, y = _bulks(setup.call([b"MGET", a, b]))
    assert int(x) + int(y) == 1000 and int(x) == 500 - moves[0] + moves[1]
    setup.close()


def test_transactions_with_node_wide_commands_are_atomic(shard_nodes):
    """EXECs of `INCR a; INCR b; DBSIZE` (every worker locked) from both workers beside
    readers' `MULTI; GET a; GET b; EXEC`: the readers never see one INCR without the other,
    and every DBSIZE counts both keys."""
    sharded, _ = shard_nodes
    a, b = keys_on(0, 1, "tx:")[0].encode(), keys_on(1, 1, "tx:")[0].encode()
    setup = conn_on(sharded.port, 0)
    setup.call([b"FLUSHALL"])
    setup.call([b"MSET", a, b"0", b, b"0"])
    stop = threading.Event()
    errors: list[str] = []
    done = [0, 0]

    def writer(w: int, c: Conn) -> None:
        for _ in range(60):
            for cmd in ([b"MULTI"], [b"INCR", a], [b"INCR", b], [b"DBSIZE"]):
                c.call(cmd)
            got = c.call([b"EXEC"])
            parts = got.split(b"\r\n")
            if parts[0] != b"*3" or parts[1] != parts[2] or parts[3] != b":2":
                errors.append(f"EXEC: {got!r}")
                return
            done[w] += 1

    def reader(w: int, c: Conn) -> None:
        while not stop.is_set():
            for cmd in ([b"MULTI"], [b"GET", a], [b"GET", b]):
                c.call(cmd)
            x, y = _bulks(c.call([b"EXEC"]))
            if x != y:
                errors.append(f"half a transaction seen: {x!r} {y!r}")
                return

    writers = [_thread(sharded.port, w, errors, writer) for w in (0, 1)]
    readers = [_thread(sharded.port, w, errors, reader) for w in (0, 1)]
    writers_then_readers(writers, readers, stop)
    assert not any(t.is_alive() for t in writers + readers), "a transaction never answered"
    assert not errors, errors[:3]
    assert done == [60, 60]
    assert _bulks(setup.call([b"MGET", a, b])) == [b"120", b"120"]
    setup.close()


def test_a_killed_script_releases_the_workers_it_held(shard_nodes):
    """A script with keys on both workers spinning (busy): a client of the other worker
    waits (that worker is locked for the script) until SCRIPT KILL, from a client of the
    script's worker, ends it with Redis's error; then both workers serve at once."""
    sharded, _ = shard_nodes
    a, b = keys_on(0, 1, "kill:")[0].encode(), keys_on(1, 1, "kill:")[0].encode()
    runner, killer, other = conn_on(sharded.port, 0), conn_on(sharded.port, 0), conn_on(sharded.port, 1)
    try:
        assert killer.call([b"CONFIG", b"SET", b"busy-reply-threshold", b"50"]) == b"+OK\r\n"
        killer.call([b"MSET", a, b"1", b, b"2"])
        runner.sock.sendall(_resp(b"EVAL", b"redis.call('GET', KEYS[2]) while true do end", b"2", a, b))
        deadline = time.monotonic() + DEADLINE
        while killer.call([b"PING"]) != b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or "\
                b"SHUTDOWN NOSAVE.\r\n":
            assert time.monotonic() < deadline, "the script never became busy"
        other.sock.sendall(_resp(b"GET", b))  # held: worker 1 is locked for the script
        assert killer.call([b"SCRIPT", b"KILL"]) == b"+OK\r\n"
        got = _read(runner)
        assert got.startswith(b"-ERR Script killed by user with SCRIPT KILL..."), got
        assert _read(other) == b"$1\r\n2\r\n"
        assert runner.call([b"SET", b, b"3"]) == b"+OK\r\n" and other.call([b"GET", a]) == b"$1\r\n1\r\n"
    finally:
        killer.call([b"CONFIG", b"SET", b"busy-reply-threshold", b"5000"])
        for c in (runner, killer, other):
            c.close()


def test_scripts_racing_for_undeclared_keys_all_finish(shard_nodes):
    """Scripts on both workers, each declaring a key of its own worker and reaching a key
    of the other it did not declare, while transactions lock both: each answers, with
    its value or the error that the other worker was held (never a hang); after the
    first runs the node remembers the scripts and they lock both workers up front."""
    sharded, _ = shard_nodes
    a, b = keys_on(0, 1, "race:")[0].encode(), keys_on(1, 1, "race:")[0].encode()
    setup = conn_on(sharded.port, 0)
    setup.call([b"MSET", a, b"0", b, b"0"])
    setup.call([b"SCRIPT", b"FLUSH"])
    body = b"redis.call('INCR', KEYS[1]) for i = 1, 20000 do end return redis.call('INCR', ARGV[1])"
    answers: list[bytes] = []
    errors: list[str] = []

    def racer(w: int, c: Conn) -> None:
        mine, theirs = (a, b) if w == 0 else (b, a)
        for i in range(30):
            if i % 3 == 2:
                for cmd in ([b"MULTI"], [b"INCR", a], [b"INCR", b], [b"DBSIZE"]):
                    c.call(cmd)
                got = c.call([b"EXEC"])
                if got[:2] != b"*3":
                    errors.append(f"EXEC: {got!r}")
            else:
                answers.append(c.call([b"EVAL", body, b"1", mine, theirs]))

    threads = [_thread(sharded.port, w, errors, racer) for w in (0, 1, 0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(DEADLINE)
    assert not any(t.is_alive() for t in threads), "a script never answered"
    assert not errors, errors[:3]
    held = b"-ERR script touched a key outside its declared KEYS on another shard worker while a transaction held it"
    assert all(r[:1] == b":" or r.startswith(held) for r in answers), answers
    assert sum(r[:1] == b":" for r in answers) >= len(answers) // 2
    setup.close()


def _thread(port: int, worker: int, errors: list[str], body) -> threading.Thread:
    """A thread running ``body(worker, connection)`` on a connection of ``worker``; what it
    raises goes to ``errors``."""
    def run() -> None:
        c = conn_on(port, worker)
        try:
            body(worker, c)
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(repr(e))
        finally:
            c.close()
    return threading.Thread(target=run)


def conn_on(port: int, worker: int) -> Conn:
    c = _conn_on(port, worker)
    c.sock.settimeout(DEADLINE)
    return c


def _read(c) -> bytes:
    """One reply of a request sent raw."""
    reader, buf = hiredis.Reader(), b""
    while True:
        data = c.sock.recv(65536)
        assert data, "connection closed"
        buf += data
        reader.feed(data)
        if reader.gets() is not False:
            return buf


def _resp(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in args)


def test_client_list_flags_a_watch_dirtied_on_another_worker(shard_nodes):
    """A client of worker 0 WATCHing a key of worker 1: a change of the key shows in
    CLIENT LIST's flags (``xd``, as one process shows it), its EXEC aborts, and its next
    transaction runs (the mark does not outlive the EXEC)."""
    sharded, _ = shard_nodes
    key = keys_on(1, 1, "wd:")[0].encode()
    c, other = conn_on(sharded.port, 0), conn_on(sharded.port, 1)
    try:
        cid = c.call([b"CLIENT", b"ID"])[1:-2]
        for cmd in ([b"WATCH", key], [b"MULTI"], [b"SET", key, b"mine"]):
            c.call(cmd)

        def flags() -> bytes:
            line = next(x for x in other.call([b"CLIENT", b"LIST"]).split(b"\n") if b"id=" + cid + b" " in x)
            return line.split(b" flags=")[1].split(b" ")[0]
        assert flags() == b"x"
        assert other.call([b"SET", key, b"theirs"]) == b"+OK\r\n"
        deadline = time.monotonic() + DEADLINE
        while flags() != b"xd":
            assert time.monotonic() < deadline, flags()
        assert c.call([b"EXEC"]) == b"*-1\r\n"
        for cmd in ([b"WATCH", key], [b"MULTI"], [b"SET", key, b"mine"]):
            c.call(cmd)
        assert c.call([b"EXEC"]) == b"*1\r\n+OK\r\n" and other.call([b"GET", key]) == b"$4\r\nmine\r\n"
    finally:
        c.close()
        other.close()


def test_a_busy_script_is_busy_for_every_worker(shard_nodes):
    """A busy script without keys on worker 0: a client of worker 1 gets BUSY (its own
    keys too), and its SCRIPT KILL is carried to worker 0 and ends the script; then both
    serve again."""
    sharded, _ = shard_nodes
    k1 = keys_on(1, 1, "bz:")[0].encode()
    runner, other = conn_on(sharded.port, 0), conn_on(sharded.port, 1)
    busy = b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n"
    try:
        assert other.call([b"CONFIG", b"SET", b"busy-reply-threshold", b"50"]) == b"+OK\r\n"
        runner.sock.sendall(_resp(b"EVAL", b"while true do end", b"0"))
        deadline = time.monotonic() + DEADLINE
        while other.call([b"PING"]) != busy:
            assert time.monotonic() < deadline, "worker 1 never answered BUSY"
        assert other.call([b"GET", k1]) == busy
        assert other.call([b"FUNCTION", b"KILL"]).startswith(b"-BUSY")  # (an EVAL runs: SCRIPT KILL it)
        assert other.call([b"SCRIPT", b"KILL"]) == b"+OK\r\n"
        assert _read(runner).startswith(b"-ERR Script killed by user with SCRIPT KILL...")
        assert other.call([b"SET", k1, b"v"]) == b"+OK\r\n" and runner.call([b"GET", k1]) == b"$1\r\nv\r\n"
        assert other.call([b"SCRIPT", b"KILL"]).startswith(b"-NOTBUSY")
    finally:
        other.call([b"CONFIG", b"SET", b"busy-reply-threshold", b"5000"])
        runner.close()
        other.close()
