"""MONITOR, side by side with a stock redis-server: the same lines for the same commands
(timestamps and client addresses aside), in RESP2 and RESP3, what a monitor may run itself,
MONITOR inside MULTI, CLIENT LIST's ``O`` flag, RESET; and over TLS (tests/integration/test_tls.py)."""

from __future__ import annotations

import re
import socket

import pytest

from tests.helpers import mb, sync

pytestmark = pytest.mark.timeout(120)

# what other clients run while the monitor watches: shown, refused before running (not
# shown), admin (not shown), a transaction, a script and its calls, a blocking command
SCRIPT = [mb(b"SET", b"mon:k", b"v\x00\n\"x\\\x7f\xff\t\r\a\b"), mb(b"GET"), mb(b"NOSUCH"),
          mb(b"LPUSH", b"mon:k", b"x"), mb(b"AUTH", b"secret"), mb(b"HELLO", b"2", b"AUTH", b"default", b"secret"),
          mb(b"CONFIG", b"GET", b"maxmemory-policy"), mb(b"MULTI") + mb(b"INCR", b"mon:n") + mb(b"EXEC"),
          mb(b"EVAL", b"return redis.call('set','mon:a','b')", b"0"),
          b"PING inline\r\n", mb(b"CONFIG", b"RESETSTAT"), mb(b"SELECT", b"0"), mb(b"BLPOP", b"mon:none", b"0.05"),
          mb(b"DEL", b"mon:k", b"mon:n", b"mon:a")]
_LINE_HEAD = re.compile(rb"\+\d+\.\d{6} \[0 (127\.0\.0\.1:\d+|lua)\]")
_HELLO_ID = re.compile(rb"\$2\r\nid\r\n:\d+\r\n")  # (HELLO's client id: each server its own)


def read_until(s: socket.socket, end: bytes, got: bytes = b"") -> bytes:
    while end not in got:
        data = s.recv(65536)
        assert data, f"closed before {end!r}; got {got!r}"
        got += data
    return got


def session(port: int, proto: int) -> list[bytes]:
    out = []
    with socket.create_connection(("127.0.0.1", port), timeout=30) as m, \
            socket.create_connection(("127.0.0.1", port), timeout=30) as c:
        if proto == 3:
            m.sendall(mb(b"HELLO", b"3"))
            sync(m)
        m.sendall(mb(b"MONITOR"))
        out.append(read_until(m, b"\r\n"))
        m.sendall(mb(b"MONITOR"))  # (a monitor already: no reply at all)
        for cmd in SCRIPT:
            c.sendall(cmd)
            out.append(_HELLO_ID.sub(b"", sync(c)))
        c.sendall(mb(b"ECHO", b"__stop__"))
        sync(c)
        seen = read_until(m, b'"ECHO" "__stop__"\r\n')
        out.append(_LINE_HEAD.sub(b"+T [0 WHO]", seen))
        with socket.create_connection(("127.0.0.1", port), timeout=30) as other:
            other.sendall(mb(b"CLIENT", b"LIST"))
            flags = re.findall(rb"flags=(\w+) .* cmd=monitor", sync(other))
            out.append(b"monitor flags: " + b",".join(flags))
        # what the monitor runs itself: its own line comes after its reply; keyspace commands refused
        m.sendall(mb(b"ECHO", b"x"))
        out.append(_LINE_HEAD.sub(b"+T [0 WHO]", read_until(m, b'"ECHO" "x"\r\n')))
        for cmd in (mb(b"GET", b"mon:k"), mb(b"PUBLISH", b"mon:c", b"x"), mb(b"EVAL", b"return 1", b"0")):
            m.sendall(cmd)
            out.append(read_until(m, b"\r\n"))
        m.sendall(mb(b"RESET"))
        out.append(read_until(m, b"RESET\r\n"))
        out.append(sync(m) + sync(m))  # a plain client again: nothing more arrives
        m.sendall(mb(b"MULTI") + mb(b"MONITOR") + mb(b"EXEC"))
        out.append(read_until(m, b"client\r\n"))
    return out


@pytest.mark.parametrize("proto", [2, 3])
def test_monitor_shows_what_redis_shows(shared_node, real_redis, proto):
    mine, theirs = session(shared_node.port, proto), session(real_redis.port, proto)
    assert mine == theirs
    stream = next(x for x in mine if b'"__stop__"' in x)
    assert b'"SET" "mon:k" "v\\x00\\n\\"x\\\\\\x7f\\xff\\t\\r\\a\\b"' in stream  # sdscatrepr's quoting
    assert b'"AUTH" "(redacted)"' in stream and b'+T [0 WHO] "set" "mon:a" "b"' in stream
    assert b"monitor flags: O" in mine
