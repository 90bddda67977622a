"""The real ``redis-cli`` binary (7.0) against a marekvs node, its output compared with
the same redis-cli against a stock redis-server where possible.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import signal
import struct
import subprocess
import termios
import time

import pytest

from tests.helpers import Node

pytestmark = pytest.mark.needs_redis_cli


@pytest.fixture(scope="module")
def cli():
    import shutil

    path = shutil.which("redis-cli")
    if path is None:
        pytest.skip("redis-cli is not installed")
    return path


@pytest.fixture(scope="module")
def mvs(tmp_path_factory):
    n = Node(tmp_path_factory.mktemp("cli") / "data").start()
    yield n
    n.stop()


def run(cli: str, port: int, *args: str, stdin: bytes | None = None,
        timeout: float = 30) -> subprocess.CompletedProcess:
    return subprocess.run([cli, "-p", str(port), *args], input=stdin, capture_output=True, timeout=timeout,
                          check=False)


def out(cli: str, port: int, *args: str, stdin: bytes | None = None) -> bytes:
    p = run(cli, port, *args, stdin=stdin)
    assert p.returncode == 0, p.stderr
    return p.stdout


def flush_both(cli, mvs, real_redis):
    assert out(cli, mvs.port, "FLUSHALL") == b"OK\n"
    assert out(cli, real_redis.port, "FLUSHALL") == b"OK\n"


# -- one-shot commands -------------------------------------------------------------------

def test_one_shot_commands(cli, mvs):
    assert out(cli, mvs.port, "PING") == b"PONG\n"
    assert out(cli, mvs.port, "SET", "k1", "hello world") == b"OK\n"
    assert out(cli, mvs.port, "GET", "k1") == b"hello world\n"
    assert out(cli, mvs.port, "INCR", "n1") == b"1\n"
    assert out(cli, mvs.port, "INCRBY", "n1", "41") == b"42\n"
    assert out(cli, mvs.port, "GET", "nosuch") == b"\n"
    assert out(cli, mvs.port, "DEL", "k1", "n1") == b"2\n"


ONE_SHOT = [
    ["SET", "a", "1"], ["GET", "a"], ["INCR", "a"], ["INCRBYFLOAT", "a", "1.5"], ["GET", "nosuch"],
    ["MSET", "b", "x y", "c", "\x01\xff"], ["MGET", "a", "b", "c", "nosuch"], ["EXISTS", "a", "b", "zz"],
    ["EXPIRE", "a", "100"], ["TTL", "b"], ["TYPE", "a"], ["TYPE", "nosuch"], ["STRLEN", "b"],
    ["APPEND", "b", "!"], ["GETRANGE", "b", "0", "1"], ["ECHO", "a\nb"], ["DBSIZE"], ["SELECT", "0"],
    ["FOO", "bar"], ["GET"], ["INCR", "b"], ["CONFIG", "GET", "appendfsync"],
    ["SET", "e", ""], ["GET", "e"], ["DEL", "a", "b", "c", "e"], ["PING", "x"], ["CLIENT", "GETNAME"],
    ["KEYS", "nomatch*"],
]


@pytest.mark.parametrize("raw_mode", ["--no-raw", "--raw"])
def test_one_shot_output_matches_redis(cli, mvs, real_redis, raw_mode):
    flush_both(cli, mvs, real_redis)
    for args in ONE_SHOT:
        got = run(cli, mvs.port, raw_mode, *args)
        want = run(cli, real_redis.port, raw_mode, *args)
        assert (got.returncode, got.stdout) == (want.returncode, want.stdout), args


def test_resp3_output_matches_redis(cli, mvs, real_redis):
    flush_both(cli, mvs, real_redis)
    for args in (["SET", "a", "1"], ["GET", "nosuch"], ["MGET", "a", "nosuch"], ["CONFIG", "GET", "appendfsync"],
                 ["INCRBYFLOAT", "f", "2.5"], ["EXISTS", "a"]):
        got = run(cli, mvs.port, "-3", "--no-raw", *args)
        want = run(cli, real_redis.port, "-3", "--no-raw", *args)
        assert got.stdout == want.stdout, args


# -- commands on stdin -------------------------------------------------------------------------

def test_stdin_commands(cli, mvs):
    res = out(cli, mvs.port, stdin=b"SET a 1\nGET a\nINCR a\nSET q \"x y\"\nGET q\nDEL a q\n")
    assert res == b"OK\n1\n2\nOK\nx y\n2\n"


def test_stdin_commands_match_redis(cli, mvs, real_redis):
    flush_both(cli, mvs, real_redis)
    script = (b"SET a 1\nGET a\nINCR a\nINCR nope\nMGET a nope\nFOO\nSET 'k k' \"v\\x41\"\nGET 'k k'\n"
              b"EXPIRE a 10\nPING\nDBSIZE\n")
    for mode in ([], ["--no-raw"]):
        assert out(cli, mvs.port, *mode, stdin=script) == out(cli, real_redis.port, *mode, stdin=script)


def test_cli_eval_style_x_argument(cli, mvs):
    # -x reads the last argument from stdin
    assert out(cli, mvs.port, "-x", "SET", "fromstdin", stdin=b"payload\n") == b"OK\n"
    assert out(cli, mvs.port, "GET", "fromstdin") == b"payload\n\n"


# -- mass insertion -----------------------------------------------------------------------------

def _resp(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def test_pipe_mass_insertion(cli, mvs, tmp_path):
    assert out(cli, mvs.port, "FLUSHALL") == b"OK\n"
    n = 20000
    f = tmp_path / "mass.resp"
    f.write_bytes(b"".join(_resp(b"SET", b"mass:%d" % i, b"value-%d" % i) for i in range(n)))
    t0 = time.monotonic()
    with open(f, "rb") as fh:
        p = subprocess.run([cli, "-p", str(mvs.port), "--pipe"], stdin=fh, capture_output=True, timeout=60,
                           check=False)
    elapsed = time.monotonic() - t0
    text = p.stdout.decode()
    assert p.returncode == 0, (text, p.stderr)
    assert "errors: 0, replies: 20000" in text, text
    assert out(cli, mvs.port, "DBSIZE") == b"20000\n"
    assert out(cli, mvs.port, "GET", "mass:19999") == b"value-19999\n"
    assert elapsed < 30


def test_pipe_counts_errors(cli, mvs):
    data = _resp(b"SET", b"pe", b"1") + _resp(b"INCR", b"pe") + _resp(b"FOO") + b"SET pe2 x\r\n" + _resp(b"GET")
    p = run(cli, mvs.port, "--pipe", stdin=data)
    text = p.stdout.decode()
    assert "errors: 2, replies: 5" in text, text


# -- COMMAND DOCS and the interactive mode ----------------------------------------------------

def test_command_docs_set_is_a_well_formed_map(cli, mvs):
    text = out(cli, mvs.port, "--no-raw", "COMMAND", "DOCS", "set").decode()
    lines = text.splitlines()
    assert lines[0] == '1) "set"'
    assert '"summary"' in text and '"since"' in text and '"group"' in text and '"arguments"' in text
    assert '"string"' in text and '"key"' in text and '"value"' in text
    m = re.findall(r'"name"\n\s+\d+\) "(\w+)"', text)
    assert m[:2] == ["key", "value"], m


def test_command_docs_resp3_map(cli, mvs):
    text = out(cli, mvs.port, "-3", "--no-raw", "COMMAND", "DOCS", "get").decode()
    assert re.match(r'1# "get" => \s*1# "summary" => "', text), text
    assert '"arguments" =>' in text and '"name" => "key"' in text


class Interactive:
    """redis-cli in interactive mode on a pseudo-terminal (it loads COMMAND DOCS at start
    for its hints)."""

    def __init__(self, cli: str, port: int):
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # pragma: no cover - child
            os.environ["TERM"] = "xterm"
            os.execvp(cli, [cli, "-p", str(port)])
        fcntl.ioctl(self.fd, termios.TIOCSWINSZ, struct.pack("HHHH", 50, 250, 0, 0))
        self.buf = b""

    def read_until(self, pattern: bytes, timeout: float = 5.0, after: bytes = b"") -> bytes:
        """Read until ``pattern`` appears (after the last ``after`` if given)."""
        end = time.monotonic() + timeout

        def found() -> bool:
            if after:
                i = self.buf.rfind(after)
                return i >= 0 and pattern in self.buf[i + len(after):]
            return pattern in self.buf

        while not found() and time.monotonic() < end:
            r, _, _ = select.select([self.fd], [], [], 0.05)
            if r:
                try:
                    d = os.read(self.fd, 65536)
                except OSError:
                    break
                if not d:
                    break
                if b"\x1b[6n" in d:  # cursor position query
                    os.write(self.fd, b"\x1b[1;20R")
                self.buf += d
        got, self.buf = self.buf, b""
        return got

    def type(self, text: bytes) -> None:
        os.write(self.fd, text)

    def close(self) -> None:
        try:
            os.kill(self.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        os.waitpid(self.pid, 0)
        os.close(self.fd)


HINT = re.compile(rb"\x1b\[0;90;49m([^\x1b]*)\x1b\[0m")
HINTED = ["SET ", "GET ", "EXPIRE ", "HELLO ", "SCAN ", "COPY ", "LCS ", "ECHO ", "GETEX ", "MSET ", "DEL "]


def _hints(cli: str, port: int) -> dict[str, str]:
    s = Interactive(cli, port)
    try:
        prompt = f"127.0.0.1:{port}> ".encode()
        assert prompt in s.read_until(prompt), "no prompt"
        hints = {}
        for cmd in HINTED:
            s.type(cmd.encode())
            # the refresh of the full line: prompt, the typed text, then the hint in grey
            line = prompt + cmd.rstrip().encode()
            seen = s.read_until(b"\x1b[0m", timeout=2.0, after=line)
            m = HINT.search(seen, seen.rfind(line))
            hints[cmd] = m.group(1).decode().strip() if m else ""
            s.type(b"\x15")  # ctrl-u: clear the line
            s.read_until(b"\x1b[0K" + prompt + b"\r", timeout=2.0)
        s.type(b"ECHO interactive-mode\r")
        seen = s.read_until(b'\r\n"interactive-mode"\r\n')
        assert b'\r\n"interactive-mode"\r\n' in seen, seen
        return hints
    finally:
        s.close()


def test_interactive_hints_match_redis(cli, mvs, real_redis):
    got = _hints(cli, mvs.port)
    want = _hints(cli, real_redis.port)
    assert want["SET "].startswith("key value [NX|XX]")
    assert got == want
