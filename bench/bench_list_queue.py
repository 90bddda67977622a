#!/usr/bin/env python3
"""A list used as a queue: N RPUSH, then N LPOP, timing the pops at the start, the middle
and the end of the drain. Each pop leaves a tombstone at its position (reclaimed by the
sweeper after gc_grace); the point of this bench is that the time per pop stays flat,
i.e. pops never rescan the tombstones of earlier pops (keyspace/lists.py, "Positions, not
ranks").

    .venv/bin/python bench/bench_list_queue.py                 # 1M elements, marekvs and redis-server
    .venv/bin/python bench/bench_list_queue.py -n 200000 --marekvs-only

Both servers run one after the other (never at once: 2 cores), each started on a free
127.0.0.1 port in a temp dir (marekvs ``--durability everysec``, Redis with AOF
everysec, as ``make bench``) and stopped by its own pid. One client connection sends
pipelined batches of ``--batch`` commands; the pushes are timed as a whole, the pops per
window of ``--window`` pops at the start, the middle and the end, and the whole drain.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import tempfile
import time

import hiredis

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from bench_single import (free_port, free_port_pair, marekvs_proc,  # noqa: E402
                          redis_server_proc)


def mb(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class Conn:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=120)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader()

    def pipeline(self, payload: bytes, n: int) -> list:
        self.sock.sendall(payload)
        out = []
        while len(out) < n:
            r = self.reader.gets()
            if r is False:
                data = self.sock.recv(1 << 20)
                if not data:
                    raise ConnectionError("server closed the connection")
                self.reader.feed(data)
                continue
            out.append(r)
        return out


def run(port: int, n: int, batch: int, window: int, size: int) -> dict:
    c = Conn(port)
    c.pipeline(mb(b"DEL", b"queue"), 1)
    value = b"v" * size
    t0 = time.perf_counter()
    for start in range(0, n, batch):
        k = min(batch, n - start)
        c.pipeline(mb(b"RPUSH", b"queue", value) * k, k)
    push_s = time.perf_counter() - t0
    assert c.pipeline(mb(b"LLEN", b"queue"), 1) == [n]
    pop = mb(b"LPOP", b"queue")
    marks = {"start": 0, "middle": n // 2 - window // 2, "end": n - window}
    windows: dict[str, float] = {}
    done = 0
    t_all = time.perf_counter()
    while done < n:
        name = next((m for m, at in marks.items() if at == done), None)
        k = window if name else min(batch, n - done, min((at - done for at in marks.values() if at > done),
                                                         default=n - done))
        t = time.perf_counter()
        for off in range(0, k, batch):
            kk = min(batch, k - off)
            got = c.pipeline(pop * kk, kk)
            assert got[-1] == value, got[-1]
        if name:
            windows[name] = (time.perf_counter() - t) / k * 1e6
        done += k
    drain_s = time.perf_counter() - t_all
    assert c.pipeline(mb(b"EXISTS", b"queue"), 1) == [0]
    return {"push_us": push_s / n * 1e6, "pop_us": windows, "drain_us": drain_s / n * 1e6}


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("-n", type=int, default=1_000_000, help="elements pushed, then popped")
    p.add_argument("--batch", type=int, default=1000, help="commands per pipelined batch")
    p.add_argument("--window", type=int, default=20_000, help="pops timed at the start, middle and end")
    p.add_argument("--size", type=int, default=64, help="value size in bytes")
    p.add_argument("--marekvs-only", action="store_true")
    p.add_argument("--marekvs-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for 'marekvs serve' (repeatable, e.g. --marekvs-arg=--sweep-interval=60)")
    a = p.parse_args()
    workdir = tempfile.mkdtemp(prefix="marekvs-queue-")
    results = {}
    try:
        plan = [] if a.marekvs_only else [("redis", redis_server_proc(free_port(), workdir))]
        plan.append(("marekvs", marekvs_proc(free_port_pair(), workdir, None, "flamegraph", 100, a.marekvs_arg)))
        for name, srv in plan:
            srv.start()
            try:
                print(f"{name}: {a.n} RPUSH then {a.n} LPOP (batches of {a.batch}) ...", flush=True)
                results[name] = run(srv.port, a.n, a.batch, a.window, a.size)
            finally:
                srv.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"\nqueue of {a.n} elements of {a.size} B, pipelined batches of {a.batch}, one client "
          f"(us per command, wall clock)")
    print(f"{'server':8s} {'RPUSH':>8s} {'LPOP start':>11s} {'middle':>8s} {'end':>8s} {'whole drain':>12s}")
    for name, r in results.items():
        w = r["pop_us"]
        print(f"{name:8s} {r['push_us']:8.2f} {w['start']:11.2f} {w['middle']:8.2f} {w['end']:8.2f} "
              f"{r['drain_us']:12.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
