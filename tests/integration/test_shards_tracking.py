"""Client tracking and MONITOR on a node of two shard workers (docs/shards.md §4, §9 slices 3
and 5), against a single process (``--shards 1``) and a stock redis-server side by side.

Tracking: each scenario is a few named connections (their protocol, and the worker each is
on in the two-worker node: the tracking client on one, the writers and REDIRECT targets on
either) and a list of steps, a command (or a pipeline of them) on one connection each. On redis-server every step
is followed by a PING on every connection, so what each connection received because of
that step (its reply, invalidation pushes, ``__redis__:invalidate`` messages) is known
exactly; on the two marekvs nodes each connection then reads as many messages after the
step (waiting for them, no sleep), and every message must be the same bytes. A message
too many shows as a difference in a later step or in the PING each connection ends with.
Client ids differ between servers: ``{id:r}`` in a step is connection r's id, and an
integer reply equal to a connection's id reads as its name. Keys: ``K0``/``A0``/``C0`` on
worker 0, ``K1``/``A1``/``B1`` on worker 1, so every read, write and invalidation crosses
the workers one way or the other.

MONITOR: a client on worker 0 runs commands kept on its worker, carried to worker 1, across
both (a unit, a transaction, SORT with patterns) and a script; monitors on both workers
see the same lines as a single process's and redis-server's monitor (time and address
aside), and a command of a client of the other worker too.
"""

from __future__ import annotations

import re
import socket
import time

import pytest

from tests.integration.test_differential import Conn
from tests.integration.test_shards import keys_on
from tests.integration.test_shards_multikey import conn_on

DEADLINE = 30.0
NAMES = {"K0": keys_on(0, 1, "tk")[0], "K1": keys_on(1, 1, "tk")[0], "A0": keys_on(0, 1, "a:")[0],
         "A1": keys_on(1, 1, "a:")[0], "B1": keys_on(1, 1, "b:")[0], "C0": keys_on(0, 1, "c:")[0]}

# scenario: ({connection: (protocol, worker)}, [(connection, command), ...])
SCENARIOS = {
    "default": ({"t": (3, 0), "w": (2, 1)}, [
        ("t", "CLIENT TRACKING on"), ("t", "GET K0"), ("t", "GET K1"), ("w", "SET K1 x"), ("w", "SET K0 y"),
        ("w", "SET K1 z"), ("t", "GET K1"), ("t", "SET K1 own"), ("t", "GET K1 ; SET K1 v ; GET K1 ; SET K0 w"),
        ("t", "MGET K0 K1"), ("w", "DEL K0 K1"),
        ("t", "CLIENT TRACKINGINFO"), ("t", "CLIENT GETREDIR"), ("t", "CLIENT TRACKING off"), ("t", "GET K1"),
        ("w", "SET K1 q"), ("t", "CLIENT TRACKING on NOLOOP"), ("t", "GET K1"), ("t", "SET K1 a"), ("w", "SET K1 b"),
        ("t", "GET K1"), ("w", "SET K1 c"), ("t", "CLIENT TRACKINGINFO"),
    ]),
    "optin_optout": ({"t": (3, 0), "w": (2, 1)}, [
        ("t", "CLIENT TRACKING on OPTIN"), ("t", "GET K1"), ("w", "SET K1 1"),
        ("t", "CLIENT CACHING yes ; CLIENT TRACKINGINFO ; GET K1"), ("t", "GET K0"), ("w", "SET K0 1"),
        ("w", "SET K1 2"), ("t", "CLIENT CACHING yes ; GET K0"), ("w", "SET K0 2"),
        ("t", "CLIENT CACHING yes ; MGET K0 K1"), ("w", "SET K0 3"), ("w", "SET K1 3"), ("t", "MGET K0 K1"),
        ("w", "SET K0 4"), ("w", "SET K1 4"), ("t", "CLIENT TRACKING off"),
        ("t", "CLIENT TRACKING on OPTOUT"), ("t", "CLIENT CACHING no ; GET K1"), ("w", "SET K1 3"),
        ("t", "GET K1"), ("w", "SET K1 4"), ("t", "CLIENT TRACKINGINFO"),
    ]),
    "bcast": ({"t": (3, 0), "w": (2, 1)}, [
        ("t", "CLIENT TRACKING on BCAST PREFIX a: PREFIX b:"), ("t", "CLIENT TRACKINGINFO"), ("w", "SET A1 x"),
        ("w", "SET A0 x"), ("w", "SET C0 x"), ("t", "SET B1 y"), ("t", "SET A0 z"), ("w", "DEL A1"),
        ("t", "CLIENT TRACKING off"), ("w", "SET A1 x"), ("t", "CLIENT TRACKING on BCAST NOLOOP PREFIX a:"),
        ("t", "SET A1 y"), ("w", "SET A1 w"), ("w", "SET A0 w"), ("t", "SET A0 v"),
    ]),
    "redirect_resp2": ({"r": (2, 1), "t": (2, 0), "w": (2, 0)}, [
        ("r", "SUBSCRIBE __redis__:invalidate"), ("t", "CLIENT TRACKING on REDIRECT {id:r}"),
        ("t", "CLIENT GETREDIR"), ("t", "CLIENT TRACKINGINFO"), ("t", "GET K0"), ("t", "GET K1"),
        ("w", "SET K0 1"), ("w", "SET K1 1"), ("t", "GET K1"), ("t", "SET K1 2"), ("t", "GET K0"),
        ("w", "FLUSHALL"), ("t", "CLIENT TRACKING on REDIRECT 999999"),
    ]),
    "redirect_resp3_bcast": ({"r": (3, 1), "t": (2, 0), "w": (2, 1)}, [
        ("t", "CLIENT TRACKING on BCAST PREFIX a: REDIRECT {id:r}"), ("w", "SET A0 1"), ("w", "SET A1 1"),
        ("t", "SET A1 2"), ("w", "SET C0 1"),
    ]),
    "flushall": ({"t": (3, 0), "w": (3, 1)}, [
        ("t", "CLIENT TRACKING on"), ("t", "GET K1"), ("w", "FLUSHALL"), ("t", "GET K0"), ("t", "FLUSHALL"),
        ("t", "GET K1"), ("w", "FLUSHDB"),
    ]),
}
PONGS = (b"+PONG\r\n", b"*2\r\n$4\r\npong\r\n$0\r\n\r\n")


def _end(b: bytes, i: int) -> int:
    """The end of the RESP2/RESP3 message at ``b[i:]`` (-1: not all of it is here)."""
    j = b.find(b"\r\n", i)
    if j < 0:
        return -1
    t = b[i:i + 1]
    if t in (b"$", b"=", b"!"):
        n = int(b[i + 1:j])
        e = j + 2 + n + 2
        return j + 2 if n < 0 else (e if len(b) >= e else -1)
    if t in (b"*", b"~", b">", b"%"):
        n = int(b[i + 1:j])
        k = j + 2
        for _ in range(max(n, 0) * (2 if t == b"%" else 1)):
            k = _end(b, k)
            if k < 0:
                return -1
        return k
    return j + 2


class Wire:
    """A raw connection read one RESP message at a time."""

    def __init__(self, conn: Conn):
        self.conn, self.buf = conn, b""
        conn.sock.settimeout(DEADLINE)

    def send(self, args: list[bytes]) -> None:
        self.conn.sock.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))

    def message(self) -> bytes:
        while True:
            e = _end(self.buf, 0) if self.buf else -1
            if e > 0:
                m, self.buf = self.buf[:e], self.buf[e:]
                return m
            got = self.conn.sock.recv(65536)
            assert got, "connection closed"
            self.buf += got

    def until_pong(self) -> list[bytes]:
        self.send([b"PING"])
        out = []
        while (m := self.message()) not in PONGS:
            out.append(m)
        return out


def _connect(port: int, spec: dict[str, tuple[int, int]], sharded: bool) -> tuple[dict[str, Wire], dict[str, int]]:
    wires, ids = {}, {}
    for name, (proto, worker) in spec.items():
        c = conn_on(port, worker) if sharded else Conn(port)
        w = wires[name] = Wire(c)
        w.send([b"CLIENT", b"ID"])
        ids[name] = int(w.message()[1:-2])
        if proto == 3:
            w.send([b"HELLO", b"3"])
            assert w.message()[:1] == b"%"
    return wires, ids


def _argv(step: str, ids: dict[str, int]) -> list[bytes]:
    return [(str(ids[w[4:-1]]) if w.startswith("{id:") else NAMES.get(w, w)).encode() for w in step.split()]


def _send(w: Wire, step: str, ids: dict[str, int]) -> None:
    """A step's commands (``a ; b``: pipelined, nothing between them: a PING would end
    CLIENT CACHING's hold on Redis)."""
    for part in step.split(" ; "):
        w.send(_argv(part, ids))


def _named(m: bytes, ids: dict[str, int], step: str) -> bytes:
    """``m`` with the client ids it names as ``<name>``: in the replies of the steps that
    name clients (a DEL's count may equal a client id)."""
    if "GETREDIR" not in step and "TRACKINGINFO" not in step:
        return m
    for name, cid in ids.items():
        m = m.replace(b":%d\r\n" % cid, b":<%s>\r\n" % name.encode())
    return m


def _reference(port: int, spec, steps) -> list[dict[str, list[bytes]]]:
    wires, ids = _connect(port, spec, False)
    wires[next(iter(wires))].send([b"FLUSHALL"])
    wires[next(iter(wires))].message()
    out = []
    for who, step in steps:
        _send(wires[who], step, ids)
        out.append({name: [_named(m, ids, step) for m in w.until_pong()] for name, w in wires.items()})
    for w in wires.values():
        w.conn.close()
    return out


def _replay(port: int, spec, steps, want: list[dict[str, list[bytes]]], sharded: bool) -> list[str]:
    wires, ids = _connect(port, spec, sharded)
    first = wires[next(iter(wires))]
    first.send([b"FLUSHALL"])
    first.message()
    wrong: list[str] = []
    at, got = "the end", []
    try:
        for (who, step), expected in zip(steps, want):
            _send(wires[who], step, ids)
            for name, w in wires.items():
                at, got = f"{who}: {step} -> {name} (want {expected[name]!r})", []
                for _ in expected[name]:
                    got.append(_named(w.message(), ids, step))
                if got != expected[name]:
                    wrong.append(f"{who}: {step} -> {name} got {got!r}, want {expected[name]!r}")
        for name, w in wires.items():
            at, got = f"the end -> {name}", []
            rest = w.until_pong()
            if rest:
                wrong.append(f"{name} got more: {rest!r}")
    except socket.timeout:
        wrong.append(f"timed out waiting for a message at {at}, after {got!r}")
    finally:
        for w in wires.values():
            w.conn.close()
    return wrong


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
def test_tracking_across_workers_answers_as_one_process_and_redis(shard_nodes, real_redis, scenario):
    sharded, single = shard_nodes
    spec, steps = SCENARIOS[scenario]
    want = _reference(real_redis.port, spec, steps)
    assert not _replay(single.port, spec, steps, want, False), "one process differs from redis-server"
    wrong = _replay(sharded.port, spec, steps, want, True)
    assert not wrong, "\n".join(wrong)


_LINE = re.compile(rb"^\+\d+\.\d{6} \[0 (lua|[^\]]+)\] ")


def _line(m: bytes) -> bytes:
    """A MONITOR line without its time and client address (``lua`` stays)."""
    found = _LINE.match(m)
    assert found, m
    who = b"lua" if found.group(1) == b"lua" else b"client"
    return b"+[%s] %s" % (who, m[found.end():])


MONITORED = ["SET K0 1", "SET K1 2", "MSET K0 3 K1 4", "MGET K0 K1", "GET K1", "MULTI", "SET K0 5", "INCR K1",
             "EXEC", "EVAL return(redis.call('get',KEYS[1])) 1 K0", "RPUSH A0 2 1", "SET c:1 x",
             "SORT A0 BY c:* GET c:*", "DEL K0 K1 A0", "ECHO done"]


def _monitor_lines(port: int, sharded: bool, monitor_worker: int) -> list[bytes]:
    m = Wire(conn_on(port, monitor_worker) if sharded else Conn(port))
    c = Wire(conn_on(port, 0) if sharded else Conn(port))
    try:
        m.send([b"MONITOR"])
        assert m.message() == b"+OK\r\n"
        for line in MONITORED:
            c.send(_argv(line, {}))
            c.message()
        lines = []
        while not lines or lines[-1] != b'+[client] "ECHO" "done"\r\n':
            lines.append(_line(m.message()))
        return lines
    finally:
        m.conn.close()
        c.conn.close()


def test_monitor_on_either_worker_sees_every_command(shard_nodes, real_redis):
    sharded, single = shard_nodes
    want = _monitor_lines(real_redis.port, False, 0)
    assert _monitor_lines(single.port, False, 0) == want
    for worker in (0, 1):
        assert _monitor_lines(sharded.port, True, worker) == want, f"a monitor on worker {worker}"
    # a command of a client of worker 1 carried to worker 0, seen by a monitor on worker 0
    m, c = Wire(conn_on(sharded.port, 0)), Wire(conn_on(sharded.port, 1))
    try:
        m.send([b"MONITOR"])
        assert m.message() == b"+OK\r\n"
        c.send(_argv("SET K0 from-worker-1", {}))
        assert c.message() == b"+OK\r\n"
        deadline = time.monotonic() + DEADLINE
        while (line := _line(m.message())) != b'+[client] "SET" "%s" "from-worker-1"\r\n' % NAMES["K0"].encode():
            assert time.monotonic() < deadline, line
    finally:
        m.conn.close()
        c.conn.close()
