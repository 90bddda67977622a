#!/usr/bin/env python3
"""CPU per command of the node itself: ``Node.dispatch`` in process, no sockets.

    .venv/bin/python bench/bench_dispatch.py                      # every row
    .venv/bin/python bench/bench_dispatch.py --rows xadd,zadd --calls 50000
    .venv/bin/python bench/bench_dispatch.py --rows zadd_hot --profile /tmp/zadd.txt

What ``bench_single.py`` measures as server CPU per request, less the RESP parsing, the
reply encoding and the socket I/O: the command's own path (table lookup, keyspace, the
one apply path, the change feed and its followers) and the per-tick commit, one
``Node.end_tick`` per 16 commands as a client pipelining 16 deep gives the server.
Robust on a loaded machine (process CPU time, best of ``--runs``), so it is the
before/after figure for a change to one row; the ratios to Redis come from
``bench_single.py``. ``--profile FILE`` runs the rows under py-spy (raw format; read it
with ``bench/profile_summary.py FILE``).

Rows: SET/GET/INCR over 100k keys; MSET of 10 of them; EVALSHA of bench_single.py's rate
limiter; HSET/SADD/ZADD of new members into one collection
(then overwrites: every run names the same members); LPUSH and XADD onto one key; and
the *hot* rows, 100 members updated over and over (a leaderboard, a hash of counters):
their records carry what an ORSWOT element keeps of its past (up to 255 covered dots).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Callable

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from marekvs.config import Config  # noqa: E402
from marekvs.node import Node  # noqa: E402
from bench_single import RATE_LIMITER, RATE_LIMITER_SHA  # noqa: E402  (bench/: this script's directory)

TICK = 16  # commands per commit, as a client pipelining 16 deep
# bench_single.py's EVALSHA row: its rate limiter (INCR, EXPIRE on the first call)
SCRIPT, SHA = RATE_LIMITER, RATE_LIMITER_SHA.encode()

ROWS: dict[str, Callable[[int], list[bytes]]] = {
    "set": lambda i: [b"SET", b"key:%d" % (i % 100_000), b"v" * 64],
    "get": lambda i: [b"GET", b"key:%d" % (i % 100_000)],
    "incr": lambda i: [b"INCR", b"counter:%d" % (i % 1000)],
    "hset": lambda i: [b"HSET", b"myhash", b"field:%d" % (i % 100_000), b"v"],
    "sadd": lambda i: [b"SADD", b"myset", b"member:%d" % (i % 100_000)],
    "zadd": lambda i: [b"ZADD", b"myzset", b"%d" % (i * 7919 % 1000), b"element:%d" % (i % 100_000)],
    "lpush": lambda i: [b"LPUSH", b"mylist", b"v"],
    "xadd": lambda i: [b"XADD", b"mystream", b"*", b"field", b"value"],
    "mset": lambda i: [b"MSET", *(x for j in range(10) for x in (b"key:%d" % ((i * 10 + j) % 100_000), b"v" * 64))],
    "evalsha": lambda i: [b"EVALSHA", SHA, b"1", b"rl:%d" % (i % 100_000), b"100", b"60"],
    "hset_hot": lambda i: [b"HSET", b"hothash", b"field:%d" % (i % 100), b"v%d" % i],
    "zadd_hot": lambda i: [b"ZADD", b"hotzset", b"%d" % i, b"element:%d" % (i % 100)],
}


def run_row(node: Node, mk: Callable[[int], list[bytes]], calls: int, runs: int) -> float:
    """Best of ``runs`` runs of ``calls`` commands: process CPU µs per command."""
    ctx = node.new_context()
    node.dispatch(ctx, [b"SCRIPT", b"LOAD", SCRIPT])
    for i in range(min(calls, 2000)):  # warm: the key exists, the caches hold it
        node.dispatch(ctx, mk(i))
        if i % TICK == TICK - 1:
            node.end_tick()
    node.end_tick()
    best = float("inf")
    for _ in range(runs):
        argvs = [mk(i) for i in range(calls)]
        t = time.process_time()
        for i, argv in enumerate(argvs):
            node.dispatch(ctx, argv)
            if i % TICK == TICK - 1:
                node.end_tick()
        node.end_tick()
        best = min(best, (time.process_time() - t) / calls * 1e6)
    return best


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", default=",".join(ROWS), help="comma-separated subset of " + ",".join(ROWS))
    ap.add_argument("--calls", type=int, default=20_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--profile", metavar="FILE", help="run under py-spy, raw samples to FILE")
    a = ap.parse_args()
    rows = [r for r in a.rows.split(",") if r]
    unknown = set(rows) - set(ROWS)
    if unknown:
        ap.error(f"unknown rows: {sorted(unknown)}")
    if a.profile:
        spy = shutil.which("py-spy") or os.path.join(os.path.dirname(sys.executable), "py-spy")
        same = ["--rows", ",".join(rows), "--calls", str(a.calls), "--runs", str(a.runs)]
        sys.exit(subprocess.call([spy, "record", "-r", "500", "--format", "raw", "-o", a.profile, "--",
                                  sys.executable, os.path.abspath(__file__), *same]))
    tmp = tempfile.mkdtemp(prefix="bench-dispatch-")
    node = Node(Config(data_dir=os.path.join(tmp, "db"), node_id=1, durability="no"))
    try:
        print("| row | us per command (CPU, in process) |")
        print("|---|---|")
        for r in rows:
            print(f"| {r} | {run_row(node, ROWS[r], a.calls, a.runs):.1f} |", flush=True)
    finally:
        node.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
