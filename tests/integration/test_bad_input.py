"""Bad input against a real ``marekvs serve`` process over raw sockets, side by side
with a stock redis-server 7.0 fed the very same bytes.

For every malformed request the reply bytes AND whether the server closed the
connection must be what Redis does; after each bad client another client still gets
PONG and data acknowledged before is intact.
"""

from __future__ import annotations

import random
import re
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.helpers import Node, RedisServer, mb

SENTINEL_KEY = b"bad-input:sentinel:\x00\xff"
SENTINEL_VAL = b"acknowledged \r\n value"


# -- fixtures ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def mvs(tmp_path_factory):
    n = Node(tmp_path_factory.mktemp("badinput") / "data").start()
    c = n.client()
    assert c.set(SENTINEL_KEY, SENTINEL_VAL)
    c.close()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def mvs_auth(tmp_path_factory):
    n = Node(tmp_path_factory.mktemp("badinput-auth") / "data", extra=["--requirepass", "secret"]).start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def redis_auth(tmp_path_factory):
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    r = RedisServer(tmp_path_factory.mktemp("redis-auth"),
                    extra=["--save", "", "--appendonly", "no", "--requirepass", "secret"]).start()
    yield r
    r.stop()


# -- raw socket helpers -------------------------------------------------------------------

def talk(port: int, data: bytes, want: int | None = None, idle: float = 0.1,
         timeout: float = 5.0) -> tuple[bytes, bool]:
    """Send ``data``; return (reply bytes, closed by the server).

    Reads until the server closes; or, once ``want`` bytes (if given) have arrived,
    until nothing more comes for ``idle`` seconds.
    """
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        if data:
            s.sendall(data)
        out = b""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return out, False
            s.settimeout(idle if (want is None or len(out) >= want) else min(left, timeout))
            try:
                d = s.recv(65536)
            except TimeoutError:
                if want is None or len(out) >= want:
                    return out, False
                continue
            except ConnectionResetError:
                return out, True
            if not d:
                return out, True
            out += d
    finally:
        s.close()


MARK = b"__MARK__\r\n"
MARK_REPLY = b"-ERR unknown command '__MARK__', with args beginning with: \r\n"


def exchange(port: int, data: bytes, timeout: float = 3.0) -> tuple[bytes, bool]:
    """Send ``data`` followed by an unknown-command marker (answered before any auth
    check, in any protocol) and read up to the marker's reply, or until the server
    closes. ``data`` must be complete requests. Returns (replies to ``data``, closed)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data + MARK)
        out = b""
        while not out.endswith(MARK_REPLY):
            try:
                d = s.recv(65536)
            except ConnectionResetError:
                return out, True
            if not d:
                return out, True
            out += d
        return out[: -len(MARK_REPLY)], False
    finally:
        s.close()


def talk_until_closed(port: int, data: bytes, timeout: float = 60.0) -> tuple[bytes, bool]:
    """``talk`` for input the server must answer by closing the connection: wait for the
    close itself (a loaded machine may take seconds to get there), not for a quiet spell."""
    return talk(port, data, idle=timeout, timeout=timeout)


def side_by_side(mvs_port: int, redis_port: int, data: bytes,
                 complete: bool = True) -> tuple[tuple[bytes, bool], tuple[bytes, bool]]:
    """The same bytes to Redis and to marekvs. ``complete=False`` for input that leaves
    the server waiting for more (read until the peer is idle)."""
    if complete:
        return exchange(mvs_port, data), exchange(redis_port, data)
    want = talk(redis_port, data)
    got = talk(mvs_port, data, want=len(want[0]))
    return got, want


def assert_healthy(node: Node) -> None:
    s = socket.create_connection(("127.0.0.1", node.port), timeout=5)
    try:
        get = b"*2\r\n$3\r\nGET\r\n$%d\r\n%s\r\n" % (len(SENTINEL_KEY), SENTINEL_KEY)
        s.sendall(b"*1\r\n$4\r\nPING\r\n" + get)
        expect = b"+PONG\r\n$%d\r\n%s\r\n" % (len(SENTINEL_VAL), SENTINEL_VAL)
        buf = b""
        while len(buf) < len(expect):
            d = s.recv(65536)
            assert d, "server closed a healthy connection"
            buf += d
        assert buf == expect
    finally:
        s.close()
    assert node.proc is not None and node.proc.poll() is None, "node died"


# -- protocol errors: exact text and the connection closed ---------------------------------

E = b"-ERR Protocol error: "
PROTOCOL_CASES = [
    # (raw bytes, expected reply, closed)
    (b"*abc\r\n", E + b"invalid multibulk length\r\n", True),
    (b"*-\r\n", E + b"invalid multibulk length\r\n", True),
    (b"*1x\r\n", E + b"invalid multibulk length\r\n", True),
    (b"*01\r\n$4\r\nPING\r\n", E + b"invalid multibulk length\r\n", True),
    (b"*+1\r\n$4\r\nPING\r\n", E + b"invalid multibulk length\r\n", True),
    (b"*-0\r\n", E + b"invalid multibulk length\r\n", True),
    (b"*\r\n", E + b"invalid multibulk length\r\n", True),
    (b"*99999999999\r\n", E + b"invalid multibulk length\r\n", True),
    (b"*1\r\nX4\r\nPING\r\n", E + b"expected '$', got 'X'\r\n", True),
    (b"PING\r\n*1\r\n:4\r\nPING\r\n", b"+PONG\r\n" + E + b"expected '$', got ':'\r\n", True),
    (b"PING\r\nPING\r\n*1\r\n+4\r\n", b"+PONG\r\n+PONG\r\n" + E + b"expected '$', got '+'\r\n", True),
    (b"*1\r\n$-1\r\n", E + b"invalid bulk length\r\n", True),
    (b"*1\r\n$-0\r\n", E + b"invalid bulk length\r\n", True),
    (b"*1\r\n$abc\r\n", E + b"invalid bulk length\r\n", True),
    (b"*1\r\n$04\r\nPING\r\n", E + b"invalid bulk length\r\n", True),
    (b"*1\r\n$\r\n", E + b"invalid bulk length\r\n", True),
    (b"*1\r\n$536870913\r\n", E + b"invalid bulk length\r\n", True),
    (b"*1\r\n$999999999999\r\n", E + b"invalid bulk length\r\n", True),
    (b'"unbalanced\r\n', E + b"unbalanced quotes in request\r\n", True),
    (b"ECHO 'a'b\r\n", E + b"unbalanced quotes in request\r\n", True),
    (b"SET k v\r\nECHO \"x\r\nGET k\r\n", b"+OK\r\n" + E + b"unbalanced quotes in request\r\n", True),
    # RESP3 types are not request elements
    (b"*2\r\n$1\r\na\r\n%1\r\n" + mb(b"PING"), E + b"expected '$', got '%'\r\n", True),
    (b"*1\r\n(123\r\n", E + b"expected '$', got '('\r\n", True),
    (b"*1\r\n*1\r\n$1\r\na\r\n", E + b"expected '$', got '*'\r\n", True),
    (b"*2\r\n$4\r\nECHO\r\n=5\r\ntxt:a\r\n", E + b"expected '$', got '='\r\n", True),
    (b"*1\r\n#t\r\n", E + b"expected '$', got '#'\r\n", True),
    # not errors: skipped / ignored / waited for
    (b"*-1\r\nPING\r\n", b"+PONG\r\n", False),
    (b"*0\r\nPING\r\n", b"+PONG\r\n", False),
    (b"*-5\r\n" + mb(b"PING"), b"+PONG\r\n", False),
    (b"PING\r\n\r\n\nPING\r\n", b"+PONG\r\n+PONG\r\n", False),
    (b"*1\r\n$4\r\nPINGxx*1\r\n$4\r\nPING\r\n", b"+PONG\r\n+PONG\r\n", False),
    (b"*1\rX$4\r\nPING\r\n", b"+PONG\r\n", False),
    (b"*1\r\n$536870912\r\n", b"", False),
    # garbage "types" are inline commands
    (b":1\r\n", b"-ERR unknown command ':1', with args beginning with: \r\n", False),
    (b"+PING\r\n", b"-ERR unknown command '+PING', with args beginning with: \r\n", False),
    (b"$4\r\nPING\r\n", b"-ERR unknown command '$4', with args beginning with: \r\n+PONG\r\n", False),
    (b"_\r\n", b"-ERR unknown command '_', with args beginning with: \r\n", False),
]


@pytest.mark.parametrize("data,reply,closed", [
    pytest.param(*c, id=repr(c[0])[:40]) for c in PROTOCOL_CASES])
def test_protocol_errors_exact_and_close(mvs, real_redis, data, reply, closed):
    got, want = side_by_side(mvs.port, real_redis.port, data, complete=reply != b"")
    assert want == (reply, closed), "redis-server disagrees with the expectation"
    assert got == want
    assert_healthy(mvs)


# -- NUL and other control bytes (checked against redis-server 7.0.15) -----------------------
# Redis finds line ends with strchr, which stops at a NUL: a line with a NUL before its end
# is never complete (no reply, the connection waits) until more than 64 KB are buffered.
CONTROL_CASES = [
    (b"GET a\x00b\r\n", b"", False),
    (b"PING\r\nGET a\x00b\r\nPING\r\n", b"+PONG\r\n", False),
    (b"\x00\r\nPING\r\n", b"", False),
    (b"*1\x00\r\n$4\r\nPING\r\n", b"", False),
    (b"*1\r\n$4\x00\r\nPING\r\n", b"", False),
    (b'ECHO "a\x00b"\r\n', b"", False),
    (b"*1\r\n$4\r\nPI\x00G\r\n", b"-ERR unknown command 'PI', with args beginning with: \r\n", False),
    (b"*2\r\n$3\r\nFOO\r\n$3\r\na\x00b\r\n", b"-ERR unknown command 'FOO', with args beginning with: 'a' \r\n",
     False),
    (b"ECHO a\x0bb\r\n", b"$3\r\na\x0bb\r\n", False),
    (b"ECHO \x0b a\r\n", b"$1\r\na\r\n", False),
    (b"ECHO a\x01b\x7f\xff\r\n", b"$5\r\na\x01b\x7f\xff\r\n", False),
    (b"ECHO a\tb\r\n", b"-ERR wrong number of arguments for 'echo' command\r\n", False),
    (b"ECHO a\rb\r\n", b"-ERR wrong number of arguments for 'echo' command\r\n", False),
    (b"GET a\x00" + b"x" * 70_000 + b"\r\n", E + b"too big inline request\r\n", True),
    (b"*1\x00" + b"1" * 70_000, E + b"too big mbulk count string\r\n", True),
]


@pytest.mark.parametrize("data,reply,closed", [
    pytest.param(*c, id=repr(c[0])[:40]) for c in CONTROL_CASES])
def test_nul_and_control_bytes_as_redis(mvs, real_redis, data, reply, closed):
    got, want = side_by_side(mvs.port, real_redis.port, data, complete=False)
    assert want == (reply, closed), "redis-server disagrees with the expectation"
    assert got == want
    assert_healthy(mvs)


def test_inline_nul_request_leaves_every_other_client_served(mvs):
    # printf 'GET a\x00b\r\n' | nc 127.0.0.1 PORT used to spin the event loop forever,
    # appending empty arguments until the kernel killed the node (24 GB)
    stuck = [socket.create_connection(("127.0.0.1", mvs.port), timeout=5) for _ in range(8)]
    try:
        for s in stuck:
            s.sendall(b"GET a\x00b\r\n")
        for _ in range(3):
            t0 = time.monotonic()
            s2 = socket.create_connection(("127.0.0.1", mvs.port), timeout=30)
            try:
                s2.sendall(b"PING\r\n")
                assert s2.recv(100) == b"+PONG\r\n"
            finally:
                s2.close()
            assert time.monotonic() - t0 < 5.0  # (room for a loaded machine; a rescan stalls longer)
        assert_healthy(mvs)
    finally:
        for s in stuck:
            s.close()


def test_query_buffer_limit_closes_the_client_and_keeps_serving(node_factory, real_redis):
    # client-query-buffer-limit (1 MB here): past it Redis closes the client without a
    # reply; a multibulk of many small arguments counts too (marekvs also charges the
    # arguments of a request still arriving: Redis 7.0 counts only its query buffer)
    node = node_factory()
    c = node.client()
    assert c.config_set("client-query-buffer-limit", "1mb")
    assert c.config_get("client-query-buffer-limit") == {"client-query-buffer-limit": "1048576"}
    big = b"*2\r\n$3\r\nSET\r\n$2000000\r\n" + b"x" * 1_500_000
    assert talk_until_closed(node.port, big) == (b"", True)
    many = b"*1000000\r\n" + b"$1\r\na\r\n" * 30_000
    assert talk_until_closed(node.port, many) == (b"", True)
    assert c.ping()
    rc = real_redis.client()
    rc.config_set("client-query-buffer-limit", "1mb")
    try:
        assert talk_until_closed(real_redis.port, big) == (b"", True)
    finally:
        rc.config_set("client-query-buffer-limit", "1gb")
    c.config_set("proto-max-bulk-len", "1mb")
    for port in (node.port, real_redis.port):
        if port == real_redis.port:
            rc.config_set("proto-max-bulk-len", "1mb")
        assert talk_until_closed(port, b"*2\r\n$4\r\nECHO\r\n$1048577\r\n") == (E + b"invalid bulk length\r\n", True)
    rc.config_set("proto-max-bulk-len", "512mb")
    # a whole request in one piece, over the lowered limit, is refused too (the fast path)
    assert talk_until_closed(node.port, mb(b"ECHO", b"y" * 1_100_000)) == (E + b"invalid bulk length\r\n", True)
    assert c.ping()
    c.close()


def test_huge_multibulk_count_does_not_stall_the_server(node_factory):
    # 13 bytes declaring 2**31-1 arguments: Redis reserves min(count, 1024) slots and
    # waits; the event loop must stay responsive for everybody else.
    node = node_factory()
    bad = socket.create_connection(("127.0.0.1", node.port), timeout=30)
    try:
        bad.sendall(b"*2147483647\r\n")
        time.sleep(0.05)
        t0 = time.monotonic()
        s = socket.create_connection(("127.0.0.1", node.port), timeout=30)
        try:
            s.sendall(b"PING\r\n")
            assert s.recv(100) == b"+PONG\r\n"
        except TimeoutError:
            pytest.fail("the node stopped answering after a *2147483647 header")
        finally:
            s.close()
        # (reserving 2**31 slots would take many seconds and gigabytes; the bound leaves a
        # loaded machine room, a slow scheduler is not a stall)
        assert time.monotonic() - t0 < 5.0
        t0 = time.monotonic()
        assert talk_until_closed(node.port, b"*2147483648\r\n") == (E + b"invalid multibulk length\r\n", True)
        assert time.monotonic() - t0 < 5.0
    finally:
        bad.close()
        node.kill9()  # a stalled node would make the graceful stop wait


def test_too_big_inline_request(mvs, real_redis):
    data = b"x" * (70 * 1024)  # no newline
    for port in (real_redis.port, mvs.port):
        assert talk_until_closed(port, data) == (E + b"too big inline request\r\n", True)
    assert_healthy(mvs)


def test_too_big_mbulk_count_string(mvs, real_redis):
    data = b"*" + b"1" * (70 * 1024)
    for port in (real_redis.port, mvs.port):
        assert talk_until_closed(port, data) == (E + b"too big mbulk count string\r\n", True)
    assert_healthy(mvs)


def test_too_big_bulk_count_string(mvs, real_redis):
    data = b"*1\r\n$" + b"1" * (70 * 1024)
    for port in (real_redis.port, mvs.port):
        assert talk_until_closed(port, data) == (E + b"too big bulk count string\r\n", True)
    assert_healthy(mvs)


def test_huge_declared_bulk_then_close_does_not_allocate(mvs):
    # 512 MB declared, 10 bytes sent, then the client goes away: nothing reserved
    for _ in range(5):
        assert talk(mvs.port, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$536870912\r\n0123456789", idle=0.05) == (b"", False)
    assert_healthy(mvs)


def test_unterminated_command_followed_by_close_is_not_applied(mvs):
    c = mvs.client()
    c.delete(b"unterminated")
    for data in (b"*3\r\n$3\r\nSET\r\n$12\r\nunterminated\r\n$5\r\nval",
                 b"*3\r\n$3\r\nSET\r\n$12\r\nunterminated\r\n$5\r\nvalue",  # no CRLF after the bulk
                 b"SET unterminated value"):  # inline without newline
        s = socket.create_connection(("127.0.0.1", mvs.port))
        s.sendall(data)
        s.close()
    time.sleep(0.2)
    assert c.get(b"unterminated") is None
    c.close()
    assert_healthy(mvs)


def test_half_close_still_gets_replies(mvs, real_redis):
    # printf 'PING\r\n' | nc -N host port: the client shuts its write side after sending
    for port in (real_redis.port, mvs.port):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(b"SET halfclose 1\r\nPING\r\nGET halfclose\r\n")
        s.shutdown(socket.SHUT_WR)
        out = b""
        while d := s.recv(65536):
            out += d
        s.close()
        assert out == b"+OK\r\n+PONG\r\n$1\r\n1\r\n", port
    assert_healthy(mvs)


def test_error_then_pipeline_rest_is_dropped(mvs):
    # commands after the protocol error in the same packet are never executed
    c = mvs.client()
    c.delete(b"after-error")
    out = talk(mvs.port, b"*1\r\n$4\r\nPING\r\n*1\r\nX\r\n" + mb(b"SET", b"after-error", b"1"))
    assert out == (b"+PONG\r\n" + E + b"expected '$', got 'X'\r\n", True)
    assert c.get(b"after-error") is None
    c.close()


# -- binary keys and values ----------------------------------------------------------------

BINARY = [b"\x00", b"\r\n", b"a\x00b\r\nc\xff", b"\xff\xfe\xfd", bytes(range(256)), b" ", b"", b"*1\r\n$4\r\nPING\r\n"]


def test_binary_keys_round_trip_raw(mvs):
    s = socket.create_connection(("127.0.0.1", mvs.port), timeout=5)
    req = b"".join(mb(b"SET", b"bin:" + k, k[::-1] + b"\x00v") for k in BINARY)
    req += b"".join(mb(b"GET", b"bin:" + k) for k in BINARY)
    s.sendall(req)
    expect = b"+OK\r\n" * len(BINARY) + b"".join(
        b"$%d\r\n%s\r\n" % (len(k) + 2, k[::-1] + b"\x00v") for k in BINARY)
    buf = b""
    while len(buf) < len(expect):
        d = s.recv(65536)
        assert d
        buf += d
    s.close()
    assert buf == expect


def test_binary_keys_round_trip_redis_py(mvs):
    c = mvs.client()
    for k in BINARY:
        assert c.set(b"binpy:" + k, k + b"\xff")
    assert c.mget([b"binpy:" + k for k in BINARY]) == [k + b"\xff" for k in BINARY]
    assert c.get(b"binpy:\x00") == b"\x00\xff"
    assert c.exists(*[b"binpy:" + k for k in BINARY]) == len(BINARY)
    c.close()


def test_inline_quoted_binary(mvs, real_redis):
    data = b'SET "ik\\x00\\r\\n\\xff" "v\\x01\\t"\r\n' + mb(b"GET", b"ik\x00\r\n\xff")
    got, want = side_by_side(mvs.port, real_redis.port, data)
    assert want == (b"+OK\r\n$3\r\nv\x01\t\r\n", False)
    assert got == want


# -- command errors: exact text, connection kept --------------------------------------------

COMMAND_ERROR_CASES = [
    b"FOO a b\r\n",
    b"foo\r\n",
    b"FOO " + b"x" * 200 + b" b\r\n",
    b"FOO " + b" ".join([b"a"] * 100) + b"\r\n",
    mb(b"FOO", b"x" * 130, b"y"),
    mb(b"F" * 130, b"y"),
    b'FOO "a\\r\\nb"\r\n',
    b"GET\r\n", b"GET a b\r\n", b"SET a\r\n", b"ECHO\r\n", b"ECHO a b\r\n", b"PING a b\r\n",
    b"MSET a\r\n", b"MSET a 1 b\r\n", b"INCR\r\n", b"EXPIRE k\r\n", b"DEL\r\n",
    b"CLIENT\r\n", b"CLIENT FOO\r\n", b"CLIENT foo bar\r\n", b"CONFIG\r\n", b"CONFIG FOO\r\n",
    b"COMMAND FOO\r\n", b"CLIENT SETNAME\r\n", b"CLIENT GETNAME x\r\n", b"CONFIG GET\r\n",
    b"CLIENT SETNAME \"a b\"\r\n", b"CLIENT SETNAME \xff\r\n",
    b"SET k 1\r\nINCRBY k abc\r\n", b"SET k v EX abc\r\n", b"EXPIRE k abc\r\n",
    b"SET k 1\r\nINCRBY k 99999999999999999999\r\n", b"SET k 1\r\nINCRBY k \" 1\"\r\n",
    b"SET k 1\r\nINCRBY k +1\r\n", b"SET k 1\r\nINCRBY k 01\r\n", b"SET k v EX 0\r\n", b"SET k v EX -1\r\n",
    b"SET k v PX 99999999999999999\r\n", b"SET k v FOO\r\n", b"SET k v NX XX\r\n",
    b"SET k 1\r\nINCRBYFLOAT k abc\r\n", b"SET k abc\r\nINCR k\r\n",
    b"SET k 9223372036854775807\r\nINCR k\r\n", b"SET k 1\r\nEXPIRE k 10 FOO\r\n",
    b"SELECT x\r\n", b"SELECT 0\r\n", b"HELLO 4\r\n", b"HELLO 1\r\n", b"HELLO x\r\n", b"HELLO 3_\r\n",
    b"AUTH x\r\n", b"AUTH default x\r\n", b"AUTH a b c\r\n", b"TIME x\r\n", b"DBSIZE x\r\n",
    b"QUIT\r\nPING\r\n", b"RESET\r\nPING\r\n", b"COMMAND INFO nosuch\r\n", b"COMMAND DOCS nosuch\r\n",
    b"SHUTDOWN FOO\r\n", b"SHUTDOWN ABORT\r\n", b"FLUSHALL FOO\r\n", b"CLIENT NO-EVICT maybe\r\n",
    b"CLIENT KILL 1.2.3.4:5\r\n", b"CLIENT LIST TYPE foo\r\n", b"CLIENT LIST ID x\r\n",
    b"CLIENT LIST FOO\r\n", b"CONFIG SET nosuch 1\r\n", b"CONFIG SET a\r\n", b"CONFIG GET nosuch\r\n",
]


@pytest.mark.parametrize("data", COMMAND_ERROR_CASES, ids=[repr(c)[:50] for c in COMMAND_ERROR_CASES])
def test_command_errors_match_redis(mvs, real_redis, data):
    got, want = side_by_side(mvs.port, real_redis.port, data)
    assert got == want


def test_unknown_command_exact_text(mvs):
    assert exchange(mvs.port, b"foo a b\r\n") == (
        b"-ERR unknown command 'foo', with args beginning with: 'a' 'b' \r\n", False)


# Redis echoes the raw bytes of the command name / arguments (C %s); only CR/LF become
# spaces. The text is cut at 128 BYTES of arguments, not 128 characters.
RAW_ECHO_CASES = [
    b"\xff\xfe a\r\n",
    b"FOO \xff\r\n",
    mb(b"FOO", b"\xc3\xa9\xff\xfe"),
    mb(b"CLIENT", b"\xff\xfe"),
    mb(b"FOO", "\u00e9".encode() * 100),
]


@pytest.mark.parametrize("data", RAW_ECHO_CASES, ids=[repr(c)[:40] for c in RAW_ECHO_CASES])
def test_error_text_echoes_raw_bytes(mvs, real_redis, data):
    got, want = side_by_side(mvs.port, real_redis.port, data)
    assert got == want


NUMBER_CASES = [
    b"SELECT +0\r\n", b"SELECT 00\r\n", b"SELECT \" 0\"\r\n", b"SELECT 0_0\r\n",
    b"HELLO +3\r\n", b"HELLO 03\r\n", b"HELLO \" 3\"\r\n",
    b"HELLO 99999999999999999999\r\n", b"CLIENT KILL ID 0\r\n", b"CLIENT KILL ID -1\r\n",
    b"CLIENT LIST ID \" 1\"\r\n", b"CLIENT LIST ID 1_0\r\n",
]


@pytest.mark.parametrize("data", NUMBER_CASES, ids=[repr(c)[:40] for c in NUMBER_CASES])
def test_integer_arguments_are_strict_like_string2ll(mvs, real_redis, data):
    # Python int() accepts "+3", " 3", "03", "0_0"; Redis's string2ll does not.
    got, want = side_by_side(mvs.port, real_redis.port, data)
    assert got == want


def test_select(mvs):
    assert exchange(mvs.port, b"SELECT 0\r\nSELECT 1\r\nSELECT x\r\n") == (
        b"+OK\r\n-ERR DB index is out of range\r\n-ERR value is not an integer or out of range\r\n",
        False)


def test_config_set_odd_arguments_is_a_syntax_error(mvs, real_redis):
    for data in (b"CONFIG SET a b c\r\n", b"CONFIG SET a b c d e\r\n"):
        got, want = side_by_side(mvs.port, real_redis.port, data)
        assert want == (b"-ERR syntax error\r\n", False)
        assert got == want


def test_config_set_bad_enum_text(mvs, real_redis):
    got, want = side_by_side(mvs.port, real_redis.port, b"CONFIG SET appendfsync maybe\r\n")
    assert got == want


# -- authentication -----------------------------------------------------------------------

AUTH_CASES = [
    b"PING\r\n", b"*1\r\n$4\r\nPING\r\n", b"GET k\r\n", b"GET\r\n", b"FOO\r\n", b"FOO a b\r\n",
    b"CLIENT ID\r\n", b"SELECT 0\r\n", b"COMMAND COUNT\r\n", b"SHUTDOWN\r\n", b"QUIT\r\n", b"RESET\r\n",
    b"AUTH\r\n", b"AUTH wrong\r\n", b"AUTH default wrong\r\n", b"AUTH nouser secret\r\n", b"AUTH a b c\r\n",
    b"AUTH default \"\"\r\n",
    b"HELLO 3 AUTH default bad\r\n", b"HELLO 4\r\n", b"HELLO 4 AUTH default secret\r\n", b"HELLO abc\r\n",
    b"HELLO 3 FOO\r\n", b"HELLO 3 AUTH default\r\n",
    b"*11\r\n", b"*10\r\n", b"*-1\r\n", b"*1\r\n$16385\r\n", b"*1\r\n$16384\r\n",
    b"*2\r\n$4\r\nECHO\r\n$16385\r\n",
    b"AUTH secret\r\nPING\r\n", b"AUTH default secret\r\nPING\r\n",
    b"AUTH secret\r\nRESET\r\nPING\r\n", b"AUTH secret\r\nRESET\r\n*11\r\n",
    b"AUTH secret\r\nSELECT 0\r\nSELECT x\r\n",
]


INCOMPLETE = {b"*10\r\n", b"*1\r\n$16384\r\n"}


@pytest.mark.parametrize("data", AUTH_CASES, ids=[repr(c)[:40] for c in AUTH_CASES])
def test_auth_matches_redis(mvs_auth, redis_auth, data):
    got, want = side_by_side(mvs_auth.port, redis_auth.port, data, complete=data not in INCOMPLETE)
    assert got == want


def test_noauth_and_wrongpass_text(mvs_auth):
    assert exchange(mvs_auth.port, b"PING\r\nAUTH nope\r\nAUTH secret\r\nPING\r\n") == (
        (b"-NOAUTH Authentication required.\r\n"
         b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
         b"+OK\r\n+PONG\r\n"), False)


def test_hello_noauth_text(mvs_auth, redis_auth):
    # redis-server 7.0.15: "... otherwise the HELLO AUTH <user> <pass> option can be used ..."
    for data in (b"HELLO 3\r\n", b"HELLO\r\n", b"HELLO 3 SETNAME x\r\n"):
        got, want = side_by_side(mvs_auth.port, redis_auth.port, data)
        assert got == want


def test_hello_3_auth(mvs_auth):
    import redis

    c = redis.Redis(port=mvs_auth.port, protocol=3, password="secret")
    assert c.ping() is True
    c.close()
    out, closed = exchange(mvs_auth.port, b"HELLO 3 AUTH default secret SETNAME x\r\nCLIENT GETNAME\r\n")
    assert not closed
    assert out.startswith(b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$6\r\n7.0.")
    assert b"$5\r\nproto\r\n:3\r\n" in out and out.endswith(b"$1\r\nx\r\n")
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    c = redis.Redis(port=mvs_auth.port, password="wrong", retry=Retry(NoBackoff(), 0))
    with pytest.raises(redis.AuthenticationError):
        c.ping()
    c.close()


def test_hello_4_noproto(mvs):
    assert exchange(mvs.port, b"HELLO 4\r\nPING\r\n") == (
        b"-NOPROTO unsupported protocol version\r\n+PONG\r\n", False)


@pytest.mark.parametrize("data", [
    b"AUTH secret\r\n" + mb(b"ECHO", *[b"a"] * 10),  # 11 arguments right after AUTH
    b"AUTH secret\r\n" + mb(b"ECHO", b"x" * 16385),  # a 16 KB+ bulk right after AUTH
    b"HELLO 2 AUTH default secret\r\n" + mb(b"ECHO", b"x" * 20000),
    b"PING\r\nAUTH secret\r\n" + mb(b"CONFIG", b"GET", *[b"x%d" % i for i in range(9)]),
], ids=["11-args", "big-bulk", "hello-auth-big-bulk", "noauth-auth-then-count"])
def test_pipelined_auth_lifts_the_unauthenticated_limits(mvs_auth, redis_auth, data):
    # Redis parses and runs one command at a time: a command pipelined right behind a
    # successful AUTH is parsed as authenticated.
    got, want = side_by_side(mvs_auth.port, redis_auth.port, data)
    assert not want[1]
    client_id = re.compile(rb"\$2\r\nid\r\n:\d+\r\n")  # HELLO's connection id differs
    assert (client_id.sub(b"", got[0]), got[1]) == (client_id.sub(b"", want[0]), want[1])


def test_authenticated_client_has_no_size_limits(mvs_auth):
    import redis

    c = redis.Redis(port=mvs_auth.port, password="secret")
    assert c.mset({b"a%d" % i: b"x" * 20000 for i in range(12)})
    assert c.get(b"a11") == b"x" * 20000
    c.close()


# -- fuzz: the node keeps serving ------------------------------------------------------------

def _garbage(rng: random.Random) -> bytes:
    kind = rng.randrange(6)
    if kind == 0:  # random bytes
        return bytes(rng.randrange(256) for _ in range(rng.randrange(1, 200)))
    if kind == 1:  # random printable with protocol characters
        alphabet = b"*$+-:_%~>#,=!(\r\n 0123456789abcXYZ\"'\\"
        return bytes(rng.choice(alphabet) for _ in range(rng.randrange(1, 120)))
    if kind == 2:  # a valid command with bytes flipped
        req = bytearray(mb(b"SET", b"fuzz:%d" % rng.randrange(50), b"v" * rng.randrange(40)))
        for _ in range(rng.randrange(1, 4)):
            req[rng.randrange(len(req))] = rng.randrange(256)
        return bytes(req)
    if kind == 3:  # a valid command truncated
        req = mb(b"SET", b"fuzz:%d" % rng.randrange(50), b"v" * rng.randrange(100))
        return req[: rng.randrange(1, len(req))]
    if kind == 4:  # headers with odd numbers
        n = rng.choice([b"-1", b"0", b"-2", b"1", b"3", b"99999999999", b"x", b"", b"01", b"4294967297"])
        m = rng.choice([b"-1", b"0", b"3", b"999999999999", b"y", b"", b"1"])
        return b"*" + n + b"\r\n$" + m + b"\r\nabc\r\n"
    # inline with quotes
    parts = [rng.choice([b"GET", b"SET", b"ECHO", b"PING", b"\"a", b"'b'", b"\"\\x4", b"k", b"\"\""])
             for _ in range(rng.randrange(1, 5))]
    return b" ".join(parts) + rng.choice([b"\r\n", b"\n", b"", b"\r"])


def test_random_garbage_keeps_the_node_serving(mvs):
    rng = random.Random(20240601)
    inputs = [_garbage(rng) for _ in range(200)]
    log_start = len(mvs.log_text())

    def one(data: bytes) -> None:
        s = socket.create_connection(("127.0.0.1", mvs.port), timeout=5)
        try:
            s.sendall(data)
            s.settimeout(0.05)
            try:
                while s.recv(65536):
                    pass
            except (TimeoutError, ConnectionResetError):
                pass
        finally:
            s.close()

    t0 = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        for i in range(0, len(inputs), 40):
            list(pool.map(one, inputs[i:i + 40]))
            assert_healthy(mvs)
    assert time.monotonic() - t0 < 30
    # one long-lived connection receiving all the garbage in sequence
    s = socket.create_connection(("127.0.0.1", mvs.port), timeout=5)
    try:
        for data in inputs:
            try:
                s.sendall(data)
            except (BrokenPipeError, ConnectionResetError):
                break
    finally:
        s.close()
    assert_healthy(mvs)
    new_log = mvs.log_text()[log_start:]
    assert "Traceback" not in new_log, new_log[-3000:]


def test_wrongtype(mvs, real_redis):
    names = exchange(mvs.port, b"COMMAND LIST FILTERBY PATTERN lpush\r\n")[0]
    if b"lpush" not in names:
        pytest.skip("no collection commands yet")
    data = b"DEL wt\r\nLPUSH wt a\r\nGET wt\r\nINCR wt\r\nAPPEND wt x\r\nSET wt v\r\nGET wt\r\nDEL wt\r\n"
    got, want = side_by_side(mvs.port, real_redis.port, data)
    assert b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n" in want[0]
    assert got == want


def test_long_numeric_arguments_do_not_stall_the_event_loop(mvs):
    # INCRBYFLOAT's number grammar was a backtracking regex: 5,000 digits and an 'x' took
    # 0.4 s of the event loop each, so one pipelined burst stalled every client
    c = mvs.client()
    bad = b"1" * 5000 + b"x"
    burst = mb(b"INCRBYFLOAT", b"ld-stall", bad) * 50
    s = socket.create_connection(("127.0.0.1", mvs.port), timeout=30)
    try:
        s.sendall(burst)
        time.sleep(0.05)
        s2 = socket.create_connection(("127.0.0.1", mvs.port), timeout=1.0)
        try:
            s2.sendall(b"PING\r\n")
            assert s2.recv(100) == b"+PONG\r\n"
        finally:
            s2.close()
        want = b"-ERR value is not a valid float\r\n" * 50
        got = b""
        while len(got) < len(want):
            got += s.recv(65536)
        assert got == want
    finally:
        s.close()
    assert c.get(b"ld-stall") is None
    c.close()
