#!/usr/bin/env python3
"""What it costs to carry a command to another process and back (issue 33's hop).

    .venv/bin/python bench/bench_hop.py                       # the default run (~40 s)
    .venv/bin/python bench/bench_hop.py --seconds 1 --repeat 5 --batches 1,16,64,256
    .venv/bin/python bench/bench_hop.py --codecs msgpack      # one framing only

Shard workers (issue 33) make a command whose key another worker owns travel from the
process that read it from the client (the *front*) to the *owner* and its reply back.
This measures that hop against running the command where it arrives, with the real node:

- the owner is a separate process (``--worker``, started here) running a real
  ``marekvs.node.Node`` (RocksDB in a temporary directory, ``durability no``, its sweeper
  and cron on a uvloop event loop, as ``marekvs serve`` runs them) behind a unix domain
  socket. For each frame it receives it runs every command through ``node.dispatch``,
  encodes each reply in RESP2 (``resp.encode``: what the client will read), and sends
  the frame's replies once the node's per-tick commit barrier (``Node.after_commit``)
  has committed the tick's writes: the same order as ``server/listener.py``;
- the front (this process, uvloop) routes each command as a multi-worker node must
  (``route``: the command's key, ``partition_of`` of it), sends ``--batches`` commands
  per frame and waits for the frame's replies before it sends the next: batch 1 is one
  command per round trip, 16/64/256 what one event-loop tick of pipelining clients
  would gather for one owner;
- *local* is the same owner running the same commands in its own process, with no
  socket: ``dispatch`` + ``resp.encode``, one commit (``Node.end_tick``) per batch.

Two framings are compared (``--codecs``):

- ``msgpack``: a frame is ``msgpack([argv, ...])`` (one C call each way; the owner gets
  the argument lists ``dispatch`` takes), the reply frame ``msgpack([resp_bytes, ...])``:
  the owner encodes the replies in the client's protocol and the front splices the bytes
  into the client's output;
- ``resp``: commands as RESP arrays (``launcher.resp.Resp.encode``), parsed by the owner
  with the RESP server's own ``RequestParser`` (hiredis); replies as a plain RESP stream
  that the front splits with ``hiredis.Reader``. A proxy would have to encode the values
  it gets back again for its client, and hiredis returns ``+OK`` and ``$2 OK`` alike, so
  this framing cannot even carry the reply types faithfully: it is here as the baseline
  to beat, the cost of re-encoding not counted.

Figures, per command, median of ``--repeat`` runs of ``--seconds`` each: wall time (what
one client would wait per command at that batch size, both processes sharing the
machine), and the CPU time of each process's event-loop thread (``time.thread_time``:
user + system; RocksDB's background threads do the same work either way and are left
out), summed; "extra CPU" is hop CPU minus local CPU, the cost of the hop itself. SET and
GET of 64-byte values over ``--keys`` keys (all present for GET). The owner's idle work
(sweeper steps, the 100 ms cron: ~1% of a core here) runs between frames, so it lands in
the hop's owner CPU, not in local's: under 1 us per command at batch 1, nothing beyond.
Also printed: what routing a command costs the front, and the channel's floor (a
blocking round trip between two processes with no event loop, unix socket and pipes).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import hiredis  # noqa: E402
import msgpack  # noqa: E402
import uvloop  # noqa: E402

from marekvs.commands.table import build_table  # noqa: E402
from marekvs.core.partition import partition_of  # noqa: E402
from marekvs.launcher.resp import Resp  # noqa: E402
from marekvs.server import resp  # noqa: E402

OPS = ("SET", "GET")
VALUE = b"v" * 64
CODECS = ("msgpack", "resp")
# the first byte a connection sends says what it is: msgpack commands, RESP commands, control
_MSGPACK, _RESP, _CONTROL = b"M", b"R", b"C"
_encode_request = Resp.encode


def cpu_s() -> float:
    """CPU time (user + system) of the calling thread, seconds: the event-loop thread, where
    every command and every hop runs. RocksDB's own threads (flushes, compactions) are left
    out: they do the same work for the same writes, hop or no hop, and they would land in
    whichever run they happen to fall in."""
    return time.thread_time()


def commands(op: str, n: int, keys: int, seed: int) -> list[list[bytes]]:
    rnd = random.Random(seed)
    if op == "SET":
        return [[b"SET", b"key:%08d" % rnd.randrange(keys), VALUE] for _ in range(n)]
    return [[b"GET", b"key:%08d" % rnd.randrange(keys)] for _ in range(n)]


def channel_floor(kind: str, n: int = 20_000) -> tuple[float, float]:
    """(wall us, CPU us of one side) per round trip of a 100-byte message between two
    processes with blocking reads and writes, no event loop: what the kernel alone costs,
    over a unix socket pair or a pair of pipes."""
    if kind == "unix":
        a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        send, recv = a.fileno(), a.fileno()
        echo_in, echo_out = b.fileno(), b.fileno()
    else:
        r1, w1 = os.pipe()
        r2, w2 = os.pipe()
        send, echo_in, echo_out, recv = w1, r1, w2, r2
    msg = b"x" * 100
    pid = os.fork()
    if pid == 0:  # the echo
        try:
            for _ in range(n):
                os.write(echo_out, os.read(echo_in, 4096))
        finally:
            os._exit(0)
    c0, t0 = cpu_s(), time.perf_counter()
    for _ in range(n):
        os.write(send, msg)
        os.read(recv, 4096)
    wall, cpu = time.perf_counter() - t0, cpu_s() - c0
    os.waitpid(pid, 0)
    for fd in {send, recv, echo_in, echo_out}:
        os.close(fd)
    return wall / n * 1e6, cpu / n * 1e6


# -- the owner (a separate process) -----------------------------------------------------------

class Owner(asyncio.Protocol):
    """One connection into the owner: frames of commands in, frames of replies out."""

    def __init__(self, node: Any, server: OwnerServer):
        self.node, self.srv = node, server
        self.ctx = node.new_context()
        self.kind = b""
        self.unpacker = msgpack.Unpacker(raw=False)
        self.parser = resp.RequestParser(node.limits)
        self.out: list[bytes] = []
        self.scheduled = False
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        if not self.kind:
            self.kind, data = data[:1], data[1:]
        if self.kind == _RESP:
            cmds, err = self.parser.feed(data)
            if err is not None:
                raise RuntimeError(err)
            dispatch, ctx, enc, out = self.node.dispatch, self.ctx, resp.encode, self.out
            for argv in cmds:
                out.append(enc(dispatch(ctx, argv), 2))
        else:
            self.unpacker.feed(data)
            for frame in self.unpacker:
                if self.kind == _CONTROL:
                    self.out.append(msgpack.packb(self.srv.control(self.ctx, frame)))
                    continue
                dispatch, ctx, enc = self.node.dispatch, self.ctx, resp.encode
                self.out.append(msgpack.packb([enc(dispatch(ctx, argv), 2) for argv in frame]))
        if self.out and not self.scheduled:
            self.scheduled = True
            self.node.after_commit(self.flush)

    def flush(self, committed: bool) -> None:
        """The tick's writes are committed: the replies may go (listener.py's order)."""
        self.scheduled = False
        out, self.out = self.out, []
        if not committed:
            raise RuntimeError("commit failed")
        self.transport.write(out[0] if len(out) == 1 else b"".join(out))


class OwnerServer:
    def __init__(self, node: Any):
        self.node = node
        self.done = asyncio.Event()

    def control(self, ctx: Any, msg: list[Any]) -> Any:
        what = msg[0]
        if what == "cpu":
            return cpu_s()
        if what == "local":  # [local, op, batch, seconds, keys, seed]: the in-process baseline
            return self.local(ctx, *msg[1:])
        if what == "fill":  # [fill, keys]: every key present, for GET
            n = msg[1]
            for start in range(0, n, 1000):
                argv = [b"MSET"]
                for i in range(start, min(n, start + 1000)):
                    argv += (b"key:%08d" % i, VALUE)
                self.node.dispatch(ctx, argv)
                self.node.end_tick()
            return n
        if what == "stop":
            self.done.set()
            return "bye"
        raise ValueError(what)

    def local(self, ctx: Any, op: str, batch: int, seconds: float, keys: int, seed: int) -> list[float]:
        """[wall s, cpu s, commands]: ``dispatch`` + RESP2 encoding, one commit per batch."""
        cmds = commands(op, 20_000 - 20_000 % batch, keys, seed)
        batches = [cmds[i:i + batch] for i in range(0, len(cmds), batch)]
        node = self.node
        dispatch, enc, end_tick = node.dispatch, resp.encode, node.end_tick
        n = 0
        c0, t0 = cpu_s(), time.perf_counter()
        deadline = t0 + seconds
        clock = time.perf_counter
        while clock() < deadline:
            for b in batches:
                out = [enc(dispatch(ctx, argv), 2) for argv in b]
                end_tick()
                n += len(out)
                if clock() >= deadline:
                    break
        return [time.perf_counter() - t0, cpu_s() - c0, n]


async def owner_main(sock_path: str, data_dir: str) -> None:
    from marekvs.config import Config
    from marekvs.node import Node

    node = Node(Config(data_dir=data_dir, node_id=1, durability="no"))
    loop = asyncio.get_running_loop()
    node.start(loop)
    srv = OwnerServer(node)
    server = await loop.create_unix_server(lambda: Owner(node, srv), sock_path)
    try:
        await srv.done.wait()
        await asyncio.sleep(0.05)  # (the reply to "stop" leaves with the next tick)
    finally:
        server.close()
        node.close()


# -- the front (this process) -----------------------------------------------------------------

class Link(asyncio.Protocol):
    """The front's connection to the owner: one frame in flight, its replies awaited."""

    def __init__(self, kind: bytes):
        self.kind = kind
        self.unpacker = msgpack.Unpacker(raw=False)
        self.reader = hiredis.Reader()
        self.expect = 0
        self.got: list[Any] = []
        self.waiter: asyncio.Future | None = None
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        transport.write(self.kind)
        transport.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)

    def data_received(self, data: bytes) -> None:
        if self.kind == _RESP:
            r = self.reader
            r.feed(data)
            got = self.got
            while True:
                v = r.gets()
                if v is False:
                    break
                got.append(v)
            if len(got) >= self.expect:
                self.got = []
                self.waiter.set_result(got)  # type: ignore[union-attr]
        else:
            self.unpacker.feed(data)
            for frame in self.unpacker:
                self.waiter.set_result(frame)  # type: ignore[union-attr]

    async def call(self, payload: bytes, expect: int = 1) -> Any:
        self.expect = expect
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(payload)
        return await self.waiter

    async def control(self, *msg: Any) -> Any:
        return await self.call(msgpack.packb(list(msg)))


def route(table: dict[bytes, Any], argv: list[bytes]) -> int:
    """The partition a multi-worker node sends ``argv`` to: its key's. A command of one key
    at a fixed position (GET, SET, HSET, ...) takes it from the legacy (first, last) range;
    any other goes through the key specs (``Command.keys_of``), which costs ~10x more."""
    cmd = table[argv[0]]
    if cmd.first_key == cmd.last_key and not cmd.movablekeys:
        return partition_of(argv[cmd.first_key])
    return partition_of(cmd.keys_of(argv)[0])


def route_cost(table: dict[bytes, Any], argv: list[bytes], n: int = 20_000) -> tuple[float, float]:
    """CPU us per command of ``route`` and of routing through the key specs alone."""
    c0 = cpu_s()
    for _ in range(n):
        route(table, argv)
    c1 = cpu_s()
    cmd = table[argv[0]]
    for _ in range(n):
        partition_of(cmd.keys_of(argv)[0])
    return (c1 - c0) / n * 1e6, (cpu_s() - c1) / n * 1e6


async def hop(link: Link, control: Link, table: dict[bytes, Any], batches: list[list[list[bytes]]],
              seconds: float) -> tuple[float, float, float, int]:
    """(wall s, front cpu s, owner cpu s, commands) of frames sent one after the other."""
    packb, enc = msgpack.packb, _encode_request
    n = 0
    w0 = await control.control("cpu")
    c0, t0 = cpu_s(), time.perf_counter()
    deadline = t0 + seconds
    clock = time.perf_counter
    while clock() < deadline:
        for b in batches:
            for argv in b:
                route(table, argv)
            out: list[bytes] = []
            if link.kind == _RESP:
                got = await link.call(b"".join([enc(*argv) for argv in b]), len(b))
                out += got  # (a proxy would encode these again for its client: not counted)
            else:
                out += await link.call(packb(b))
            n += len(out)
            if clock() >= deadline:
                break
    wall, front = time.perf_counter() - t0, cpu_s() - c0
    owner = await control.control("cpu") - w0
    return wall, front, owner, n


async def front_main(args: argparse.Namespace, sock_path: str,
                     routes: dict[str, tuple[float, float]]) -> list[dict[str, Any]]:
    loop = asyncio.get_running_loop()
    deadline = time.monotonic() + 60
    while not os.path.exists(sock_path):
        if time.monotonic() > deadline:
            raise SystemExit("the owner process did not start")
        await asyncio.sleep(0.05)
    links = {}
    for kind in (_CONTROL, _MSGPACK, _RESP):
        _, links[kind] = await loop.create_unix_connection(lambda k=kind: Link(k), sock_path)
    control = links[_CONTROL]
    await control.control("fill", args.keys)
    table = build_table().dispatch
    batches_of = [int(b) for b in args.batches.split(",")]
    results: dict[tuple[str, int, str], list[tuple[float, float, float]]] = {}
    for rep in range(args.repeat):
        for op in OPS:
            for batch in batches_of:
                seed = rep * 1000 + batch
                wall, cpu, n = await control.control("local", op, batch, args.seconds, args.keys, seed)
                results.setdefault((op, batch, "local"), []).append((wall / n, cpu / n, 0.0))
                cmds = commands(op, 20_000 - 20_000 % batch, args.keys, seed)
                batches = [cmds[i:i + batch] for i in range(0, len(cmds), batch)]
                for codec in args.codecs.split(","):
                    link = links[_MSGPACK if codec == "msgpack" else _RESP]
                    wall, front, owner, n = await hop(link, control, table, batches, args.seconds)
                    results.setdefault((op, batch, codec), []).append((wall / n, front / n, owner / n))
    await control.control("stop")
    for op in OPS:
        fast, specs = zip(*(route_cost(table, commands(op, 1, args.keys, 0)[0]) for _ in range(args.repeat)))
        routes[op] = (statistics.median(fast), statistics.median(specs))
    rows = []
    for (op, batch, how), runs in results.items():
        med = [statistics.median(r[i] for r in runs) * 1e6 for i in range(3)]
        rows.append({"op": op, "batch": batch, "how": how, "wall_us": med[0], "front_cpu_us": med[1],
                     "owner_cpu_us": med[2]})
    return rows


def table(rows: list[dict[str, Any]], routes: dict[str, tuple[float, float]], seconds: float, repeat: int) -> str:
    local = {(r["op"], r["batch"]): r for r in rows if r["how"] == "local"}
    head = (f"{'op':<4} {'batch':>5}  {'how':<8} {'wall us':>8} {'front cpu':>9} {'owner cpu':>9} "
            f"{'cpu total':>9} {'extra cpu':>9}")
    lines = [head, "-" * len(head)]
    for r in sorted(rows, key=lambda r: (OPS.index(r["op"]), r["batch"], r["how"] != "local", r["how"])):
        if r["how"] == "local":
            total = r["front_cpu_us"]  # (local: one process, its CPU in the front column)
            lines.append(f"{r['op']:<4} {r['batch']:>5}  {'local':<8} {r['wall_us']:>8.1f} {total:>9.1f} "
                         f"{'-':>9} {total:>9.1f} {'-':>9}")
            continue
        total = r["front_cpu_us"] + r["owner_cpu_us"]
        extra = total - local[(r["op"], r["batch"])]["front_cpu_us"]
        lines.append(f"{r['op']:<4} {r['batch']:>5}  {r['how']:<8} {r['wall_us']:>8.1f} {r['front_cpu_us']:>9.1f} "
                     f"{r['owner_cpu_us']:>9.1f} {total:>9.1f} {extra:>+9.1f}")
    lines.append("")
    for op, (fast, specs) in routes.items():
        lines.append(f"routing one {op} (in the front's CPU above): {fast:.2f} us by its fixed key position, "
                     f"{specs:.2f} us through the key specs (Command.keys_of)")
    lines.append(f"(us per command; median of {repeat} runs of {seconds} s each; local = dispatch + RESP2 "
                 "encoding + one commit per batch in one process, CPU in 'front cpu')")
    lines.append(f"caveat: {os.cpu_count()} CPUs here, load average {os.getloadavg()[0]:.1f} at the end: the two "
                 "processes share the machine with other work, so wall figures vary from run to run; the CPU "
                 "columns are the steadier figures.")
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--seconds", type=float, default=0.4, help="length of one measured run")
    p.add_argument("--repeat", type=int, default=3, help="runs per figure (the median is kept)")
    p.add_argument("--batches", default="1,16,64,256", help="commands per frame")
    p.add_argument("--codecs", default=",".join(CODECS), help="framings to measure: msgpack,resp")
    p.add_argument("--keys", type=int, default=10_000, help="distinct keys")
    p.add_argument("--worker", nargs=2, metavar=("SOCKET", "DATA_DIR"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        uvloop.run(owner_main(*args.worker))
        return
    for c in args.codecs.split(","):
        if c not in CODECS:
            p.error(f"unknown codec {c!r} (one of {', '.join(CODECS)})")
    floors = {kind: [channel_floor(kind) for _ in range(args.repeat)] for kind in ("unix", "pipe")}
    tmp = tempfile.mkdtemp(prefix="bench_hop_")
    sock_path = os.path.join(tmp, "owner.sock")
    owner = subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker", sock_path,
                              os.path.join(tmp, "data")])
    try:
        routes: dict[str, tuple[float, float]] = {}
        rows = uvloop.run(front_main(args, sock_path, routes))
        owner.wait(timeout=30)
    finally:
        if owner.poll() is None:
            owner.send_signal(signal.SIGTERM)
            try:
                owner.wait(timeout=10)
            except subprocess.TimeoutExpired:
                owner.kill()
        shutil.rmtree(tmp, ignore_errors=True)
    print(table(rows, routes, args.seconds, args.repeat))
    for kind, runs in floors.items():
        print(f"channel floor, {kind + ':':<5} {statistics.median(r[0] for r in runs):.1f} us wall and "
              f"{statistics.median(r[1] for r in runs):.1f} us CPU of one side per blocking round trip, no event "
              "loop")


if __name__ == "__main__":
    main()
