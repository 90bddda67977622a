"""What operators and their tools read: INFO commandstats / errorstats / stats / memory,
SLOWLOG, LATENCY, CLIENT PAUSE / UNPAUSE / REPLY, side by side with a stock redis-server."""

from __future__ import annotations

import socket
import time

import pytest

from tests.helpers import Node, RedisServer, mb


@pytest.fixture
def pair(tmp_path):
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    n = Node(tmp_path / "mvs").start()
    r = RedisServer(tmp_path / "redis").start()
    yield n, r
    n.stop()
    r.stop()


def info(client, section: str) -> dict:
    return client.info(section)


def raw(port: int, data: bytes, want: int, timeout: float = 10) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(data)
        out = b""
        while len(out) < want:
            d = s.recv(65536)
            if not d:
                break
            out += d
        return out


SEQUENCE = [
    ("SET", "a", "1"), ("GET", "a"), ("GET", "missing"), ("INCR", "n"), ("EXISTS", "a", "nope"),
    ("TYPE", "a"), ("TTL", "a"), ("GET",), ("INCR", "a", "x"), ("NOSUCH",), ("CONFIG", "NOSUCH"),
    ("SET", "s", "text"), ("INCR", "s"), ("GETRANGE", "a", "x", "1"), ("MSET", "k1", "v", "k2", "v"),
]


def run_sequence(client) -> None:
    for cmd in SEQUENCE:
        try:
            client.execute_command(*cmd)
        except Exception:  # error replies are part of the point
            pass


def cmdstats(client) -> dict[str, tuple[int, int, int]]:
    out = {}
    for name, v in info(client, "commandstats").items():
        if name.startswith("cmdstat_") and not name.startswith("cmdstat_config|resetstat") \
                and not name.startswith("cmdstat_info"):
            out[name] = (v["calls"], v["rejected_calls"], v["failed_calls"])
    return out


def test_commandstats_errorstats_and_keyspace_hits_as_redis(pair):
    node, redis_ = pair
    clients = [node.client(), redis_.client()]
    for c in clients:
        c.config_resetstat()
        run_sequence(c)
    mine, theirs = (cmdstats(c) for c in clients)
    assert mine == theirs
    assert info(clients[0], "errorstats") == info(clients[1], "errorstats")
    for field in ("keyspace_hits", "keyspace_misses", "total_error_replies"):
        assert info(clients[0], "stats")[field] == info(clients[1], "stats")[field], field
    usec = info(clients[0], "commandstats")["cmdstat_get"]
    assert usec["usec"] >= 0 and usec["usec_per_call"] >= 0
    clients[0].config_resetstat()
    assert cmdstats(clients[0]) == {}
    assert info(clients[0], "errorstats") == {}


def test_info_sections_and_titles_as_redis(pair):
    node, redis_ = pair

    def titles(port: int, *args: bytes) -> list[bytes]:
        body = node.client().execute_command("INFO", *args) if port == node.port else \
            redis_.client().execute_command("INFO", *args)
        text = body if isinstance(body, bytes) else body.encode() if isinstance(body, str) else b""
        return [ln for ln in text.splitlines() if ln.startswith(b"#")]

    for args in ((), (b"default",), (b"all",), (b"everything",), (b"commandstats", b"cpu"), (b"cpu",)):
        mine = titles(node.port, *args)
        theirs = [t for t in titles(redis_.port, *args) if t != b"# Latencystats"]  # not kept here
        assert [t for t in mine if t != b"# Marekvs"] == theirs, args
    mem = info(node.client(), "memory")
    assert mem["used_memory_peak"] >= mem["used_memory"] > 0


def test_instantaneous_ops_per_sec_follows_the_load(pair):
    node, _ = pair
    c = node.client()
    deadline = time.monotonic() + 60
    seen = 0
    while time.monotonic() < deadline and not seen:
        p = c.pipeline(transaction=False)
        for i in range(2000):
            p.set(f"ops{i}", i)
        p.execute()
        seen = info(c, "stats")["instantaneous_ops_per_sec"]
    assert seen > 0


def test_slowlog_as_redis(pair):
    node, redis_ = pair
    for port in (node.port, redis_.port):
        c = node.client() if port == node.port else redis_.client()
        c.config_set("slowlog-log-slower-than", 0)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
            def call(*args: bytes) -> bytes:
                s.sendall(mb(*args))
                time.sleep(0.05)
                return s.recv(65536)
            call(b"SLOWLOG", b"RESET")
            call(b"CLIENT", b"SETNAME", b"watcher")
            call(b"SET", b"k", b"v" * 200)
            call(b"MSET", *([b"x"] * 40))
            call(b"AUTH", b"someone", b"secret")
        entries = c.execute_command("SLOWLOG", "GET", "3")
        assert [e[3] for e in entries] == [
            [b"AUTH", b"(redacted)", b"(redacted)"],
            [b"MSET"] + [b"x"] * 30 + [b"... (10 more arguments)"],
            [b"SET", b"k", b"v" * 128 + b"... (72 more bytes)"],
        ], port
        e = entries[0]
        assert e[0] > entries[1][0] and abs(e[1] - time.time()) < 60 and e[2] >= 0 and e[5] == b"watcher"
        assert c.execute_command("SLOWLOG", "LEN") >= 3
        assert c.execute_command("SLOWLOG", "RESET") == b"OK"
        assert c.execute_command("SLOWLOG", "LEN") <= 1  # (the RESET itself may be logged)
        for bad in ("-2", "abc"):
            with pytest.raises(Exception, match="count should be greater than or equal to -1"):
                c.execute_command("SLOWLOG", "GET", bad)
        c.config_set("slowlog-log-slower-than", 10000)


def test_latency_monitor_records_slow_commands(pair):
    node, _ = pair
    c = node.client()
    assert c.execute_command("LATENCY", "LATEST") == []
    c.config_set("latency-monitor-threshold", 1)
    deadline = time.monotonic() + 60
    latest = []
    while time.monotonic() < deadline and not latest:
        c.execute_command("MSET", *[x for i in range(20000) for x in (f"lat{i}", "v")])  # well over 1 ms
        latest = c.execute_command("LATENCY", "LATEST")
    (event, ts, last_ms, max_ms), = latest
    assert event == b"command" and last_ms >= 1 and max_ms >= last_ms and abs(ts - time.time()) < 60
    hist = c.execute_command("LATENCY", "HISTORY", "command")
    assert hist and all(ms >= 1 for _, ms in hist)
    assert c.execute_command("LATENCY", "RESET") == 1
    assert c.execute_command("LATENCY", "LATEST") == []


def test_client_pause_and_reply_as_redis(pair):
    node, redis_ = pair
    for port in (node.port, redis_.port):
        a = socket.create_connection(("127.0.0.1", port), timeout=10)
        b = socket.create_connection(("127.0.0.1", port), timeout=10)
        try:
            a.sendall(mb(b"CLIENT", b"PAUSE", b"1000", b"WRITE"))
            assert a.recv(100) == b"+OK\r\n"
            b.sendall(mb(b"GET", b"paused-key"))
            assert b.recv(100) == b"$-1\r\n"  # reads pass a WRITE pause
            t0 = time.monotonic()
            b.sendall(mb(b"SET", b"paused-key", b"1"))
            assert b.recv(100) == b"+OK\r\n"
            assert time.monotonic() - t0 >= 0.5, port  # the write waited for the pause to end
            a.sendall(mb(b"CLIENT", b"PAUSE", b"20000", b"WRITE"))
            assert a.recv(100) == b"+OK\r\n"
            b.sendall(mb(b"SET", b"paused-key", b"2") + mb(b"GET", b"paused-key"))
            a.sendall(mb(b"CLIENT", b"UNPAUSE"))
            assert a.recv(100) == b"+OK\r\n"
            got = b""
            while len(got) < len(b"+OK\r\n$1\r\n2\r\n"):
                got += b.recv(100)
            assert got == b"+OK\r\n$1\r\n2\r\n"  # held in order, released by UNPAUSE
            a.sendall(b"CLIENT REPLY SKIP\r\nPING\r\nECHO hi\r\nCLIENT REPLY OFF\r\nPING\r\n"
                      b"CLIENT REPLY ON\r\nPING\r\n")
            want = b"$2\r\nhi\r\n+OK\r\n+PONG\r\n"
            got = b""
            while len(got) < len(want):
                got += a.recv(100)
            assert got == want, port
        finally:
            a.close()
            b.close()
    for port in (node.port, redis_.port):
        assert raw(port, mb(b"CLIENT", b"PAUSE", b"10", b"FOO"), 10) == \
            b"-ERR CLIENT PAUSE mode must be WRITE or ALL\r\n"
        assert raw(port, mb(b"CLIENT", b"PAUSE", b"-1"), 10) == b"-ERR timeout is negative\r\n"
        assert raw(port, mb(b"CLIENT", b"REPLY", b"foo"), 10) == b"-ERR syntax error\r\n"
