"""A RESP fuzzer for a real node: random and mutated request frames over many connections.

Frames come from five generators: well-formed requests of a safe command corpus (multibulk
and inline), those requests mutated (a byte flipped, inserted, deleted or duplicated,
control bytes and NULs injected, a count or length rewritten to something huge, negative
or not a number, the frame cut short), random garbage, deep nesting (``*1`` headers one
inside another, RESP3 aggregates) and huge declared sizes. Each connection sends a batch
of frames, half-closes (so the node answers what is complete and closes), and reads until
the node closes: no fixed sleeps.

After every round of batches a separate client must get PONG within a second and the
sentinel keys written before the run must still hold their values; a dead process counts
as a crash, a missed PONG or a wrong sentinel as a hang. The corpus never names a
command that changes the sentinels or the server (no FLUSHALL, CONFIG, SHUTDOWN, DEBUG,
CLIENT KILL/PAUSE, WAIT), and a single mutation cannot turn one of its names into one of
those. Keys of the corpus start with ``fz:``; sentinels with ``sentinel:``.

Used with a bounded frame count by tests/integration/test_fuzz.py, and standalone for a
long run (it starts its own node)::

    .venv/bin/python -m tests.fuzz_resp --frames 10000000
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import sys
import time
from dataclasses import dataclass, field

SENTINELS = {b"sentinel:%d" % i: b"value-%d-\x00\r\n\xff" % i for i in range(16)}

_KEYS = [b"fz:%d" % i for i in range(32)] + [b"fz:{t}:a", b"fz:{t}:b", b"fz:\x00\xff", b"fz: sp"]
_VALS = [b"", b"v", b"12", b"-7", b"3.5", b"x" * 100, b"\x00\r\n\xff", b"9223372036854775807"]


def _corpus(rng: random.Random) -> list[bytes]:
    k = rng.choice(_KEYS)
    v = rng.choice(_VALS)
    return rng.choice([
        [b"PING"], [b"PING", v], [b"ECHO", v], [b"SET", k, v], [b"GET", k], [b"INCR", k],
        [b"INCRBY", k, b"5"], [b"DECR", k], [b"MGET", k, rng.choice(_KEYS)], [b"MSET", k, v, rng.choice(_KEYS), v],
        [b"DEL", k], [b"EXISTS", k, k], [b"TYPE", k], [b"TTL", k], [b"PEXPIRE", k, b"100000"], [b"PERSIST", k],
        [b"STRLEN", k], [b"APPEND", k, v], [b"GETRANGE", k, b"0", b"5"], [b"SETNX", k, v], [b"GETSET", k, v],
        [b"SET", k, v, b"EX", b"100"], [b"SET", k, v, b"NX", b"GET"], [b"INCRBYFLOAT", k, b"1.5"],
        [b"COMMAND", b"COUNT"], [b"COMMAND", b"INFO", b"get"], [b"HELLO", b"3"], [b"HELLO", b"2"],
        [b"CLIENT", b"SETNAME", b"fuzz"], [b"CLIENT", b"GETNAME"], [b"CLIENT", b"ID"], [b"SELECT", b"0"],
        [b"DBSIZE"], [b"TIME"], [b"SCAN", b"0", b"COUNT", b"5"], [b"RANDOMKEY"], [b"OBJECT", b"ENCODING", k],
        [b"NOSUCHCOMMAND", k], [b"GET"], [b"SET", k], [b"RESET"], [b"QUIT"],
    ])


def multibulk(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def inline(args: list[bytes]) -> bytes:
    return b" ".join(b'"%s"' % a.replace(b'"', b"") if b" " in a or not a else a for a in args) + b"\r\n"


_INJECT = [b"\x00", b"\r", b"\n", b"\r\n", b'"', b"'", b"\\", b"*", b"$", b" ", b"\x0b", b"\x7f", b"\xff", b"-"]
_NUMBERS = [b"-1", b"-0", b"0", b"01", b"+1", b"abc", b"", b"2147483647", b"2147483648", b"536870912",
            b"536870913", b"99999999999999999999", b"9223372036854775808", b"1\x00", b" 1", b"1e3"]


def mutate(frame: bytes, rng: random.Random) -> bytes:
    b = bytearray(frame)
    for _ in range(rng.randint(1, 3)):
        op = rng.randrange(7)
        i = rng.randrange(len(b) + 1)
        if op == 0 and b:  # flip
            b[min(i, len(b) - 1)] = rng.randrange(256)
        elif op == 1:  # inject a control byte or RESP marker
            b[i:i] = rng.choice(_INJECT)
        elif op == 2 and b:  # delete a run
            del b[i:i + rng.randint(1, 4)]
        elif op == 3:  # duplicate a chunk
            j = rng.randrange(len(b) + 1)
            b[i:i] = b[min(i, j):max(i, j)][:64]
        elif op == 4:  # rewrite a count or a length
            marks = [m for m in range(len(b)) if b[m] in (42, 36)]  # '*' '$'
            if marks:
                m = rng.choice(marks) + 1
                end = m
                while end < len(b) and b[end] not in (13, 10):
                    end += 1
                b[m:end] = rng.choice(_NUMBERS)
        elif op == 5:  # cut short
            del b[i:]
        else:  # swap the case of the command name
            b = bytearray(bytes(b).swapcase())
    return bytes(b)


def garbage(rng: random.Random) -> bytes:
    n = rng.choice((1, 2, 8, 64, 512))
    if rng.random() < 0.5:
        return bytes(rng.randrange(256) for _ in range(n))
    return b"".join(rng.choice(_INJECT + [b"PING", b"1", b"a", b"\r\n"]) for _ in range(n))


def nested(rng: random.Random) -> bytes:
    depth = rng.choice((2, 8, 64, 1000))
    head = rng.choice([b"*1\r\n", b"%1\r\n", b"~1\r\n", b">1\r\n"])
    return b"*1\r\n" + head * depth + b"$4\r\nPING\r\n"


def huge(rng: random.Random) -> bytes:
    return rng.choice([
        b"*2147483647\r\n", b"*2147483648\r\n", b"*1\r\n$536870912\r\n", b"*1\r\n$536870913\r\n",
        b"*3\r\n$3\r\nSET\r\n$4\r\nfz:h\r\n$100000000\r\nabc", b"*1000000\r\n$1\r\na\r\n",
        b"*1\r\n$" + b"9" * 30 + b"\r\n", b"*" + b"1" * 100, b"x" * rng.choice((100, 70000)),
    ])


def frame(rng: random.Random) -> bytes:
    r = rng.random()
    if r < 0.35:
        args = _corpus(rng)
        return multibulk(args) if rng.random() < 0.7 else inline(args)
    if r < 0.8:
        args = _corpus(rng)
        return mutate(multibulk(args) if rng.random() < 0.7 else inline(args), rng)
    if r < 0.9:
        return garbage(rng)
    if r < 0.95:
        return nested(rng)
    return huge(rng)


# -- the run -----------------------------------------------------------------------------------

@dataclass
class Report:
    frames: int = 0
    batches: int = 0
    rounds: int = 0
    bytes_sent: int = 0
    closed_by_node: int = 0
    conn_errors: int = 0
    crashes: int = 0
    hangs: int = 0
    slowest_pong_ms: float = 0.0
    problems: list[str] = field(default_factory=list)

    def ok(self) -> bool:
        return not self.crashes and not self.hangs


async def _batch(port: int, data: bytes, deadline: float, report: Report) -> None:
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), deadline)
    except (OSError, asyncio.TimeoutError):
        report.conn_errors += 1
        return
    try:
        writer.write(data)
        try:
            await asyncio.wait_for(writer.drain(), deadline)
            if writer.can_write_eof():
                writer.write_eof()  # half-close: the node answers what is complete, then closes
        except (OSError, asyncio.TimeoutError):
            pass
        try:
            while await asyncio.wait_for(reader.read(1 << 16), deadline):
                pass
            report.closed_by_node += 1
        except (OSError, asyncio.TimeoutError):
            pass  # a request still waiting for bytes (a declared size, a NUL line): ours to drop
    finally:
        writer.close()


def check_health(port: int, report: Report, alive) -> None:
    """PING within a second and every sentinel intact, from a fresh connection."""
    if not alive():
        report.crashes += 1
        report.problems.append(f"round {report.rounds}: the node process is gone")
        return
    t0 = time.monotonic()
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            buf = b""
            while not buf.endswith(b"\r\n"):
                d = s.recv(100)
                if not d:
                    break
                buf += d
            if buf != b"+PONG\r\n":
                raise OSError(f"PING answered {buf!r}")
            report.slowest_pong_ms = max(report.slowest_pong_ms, (time.monotonic() - t0) * 1000)
            req = multibulk([b"MGET", *SENTINELS])
            s.settimeout(5.0)
            s.sendall(req)
            want = b"*%d\r\n" % len(SENTINELS) + b"".join(b"$%d\r\n%s\r\n" % (len(v), v) for v in SENTINELS.values())
            buf = b""
            while len(buf) < len(want):
                d = s.recv(65536)
                if not d:
                    break
                buf += d
            if buf != want:
                raise OSError(f"sentinels changed: {buf[:200]!r}")
    except OSError as e:
        report.hangs += 1
        report.problems.append(f"round {report.rounds}: {e}")


def write_sentinels(port: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        s.sendall(multibulk([b"MSET", *[x for kv in SENTINELS.items() for x in kv]]))
        assert s.recv(100) == b"+OK\r\n"


async def _run(port: int, frames: int, seed: int, connections: int, per_batch: int, alive,
               progress: bool) -> Report:
    rng = random.Random(seed)
    report = Report()
    started = time.monotonic()
    while report.frames < frames:
        jobs = []
        for _ in range(connections):
            n = min(rng.randint(1, per_batch), frames - report.frames)
            if n <= 0:
                break
            data = b"".join(frame(rng) for _ in range(n))
            report.frames += n
            report.batches += 1
            report.bytes_sent += len(data)
            jobs.append(_batch(port, data, 5.0, report))
        await asyncio.gather(*jobs)
        report.rounds += 1
        check_health(port, report, alive)
        if report.crashes or report.hangs:
            break  # a dead or stuck node does not recover: report it now
        if progress and report.rounds % 200 == 0:
            rate = report.frames / (time.monotonic() - started)
            print(f"{report.frames:,} frames, {report.rounds:,} rounds, {rate:,.0f} frames/s, "
                  f"crashes {report.crashes}, hangs {report.hangs}, slowest PONG {report.slowest_pong_ms:.1f} ms",
                  file=sys.stderr, flush=True)
    return report


def run(port: int, frames: int, seed: int = 1, connections: int = 32, per_batch: int = 40,
        alive=lambda: True, progress: bool = False) -> Report:
    """Fuzz the node on ``port`` with ``frames`` frames; the sentinels must already be
    written (``write_sentinels``)."""
    return asyncio.run(_run(port, frames, seed, connections, per_batch, alive, progress))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=1_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--port", type=int, default=0, help="fuzz a running node (default: start one)")
    args = ap.parse_args()
    node = None
    if args.port:
        port = args.port
        alive = lambda: True  # noqa: E731
    else:
        import tempfile
        from pathlib import Path

        from tests.helpers import Node

        tmp = Path(tempfile.mkdtemp(prefix="marekvs-fuzz-"))
        node = Node(tmp / "data").start()
        port = node.port
        alive = lambda: node.proc.poll() is None  # noqa: E731
        print(f"node pid {node.pid} on port {port}, log {node.log_path}", file=sys.stderr)
    write_sentinels(port)
    t0 = time.monotonic()
    try:
        report = run(port, args.frames, args.seed, args.connections, alive=alive, progress=True)
    finally:
        if node is not None:
            node.stop()
    took = time.monotonic() - t0
    print(f"frames {report.frames:,} in {report.batches:,} connections over {report.rounds:,} rounds, "
          f"{report.bytes_sent / 1e6:.1f} MB, {took:.0f} s ({report.frames / took:,.0f} frames/s)")
    print(f"crashes {report.crashes}, hangs {report.hangs}, slowest health PONG {report.slowest_pong_ms:.1f} ms, "
          f"connections closed by the node {report.closed_by_node:,}, connect errors {report.conn_errors}")
    for p in report.problems[:20]:
        print("  " + p)
    return 0 if report.ok() else 1


if __name__ == "__main__":
    sys.exit(main())
