#!/usr/bin/env python3
"""Cost per call of sorted-set commands as a zset grows: 1k, 100k and 1M members.

    .venv/bin/python bench/bench_zsets.py                 # all sizes
    .venv/bin/python bench/bench_zsets.py --sizes 1000,100000 --calls 20000

For each size it builds one zset (``ZADD`` in batches of 10k members with scores 0..n-1,
members ``element:%012d``) on an in-process node (real RocksDB in a temporary directory,
``node.dispatch`` and the RESP2 encoding of the reply, no sockets), then times, per call:

- ``ZRANGE BYSCORE``: ``ZRANGE z <s> +inf BYSCORE LIMIT 0 10`` at a random score;
- ``ZRANGE rank``: ``ZRANGE z <r> <r+9>`` at a random rank;
- ``ZRANK``: ``ZRANK z <random member>``;
- ``ZADD``: ``ZADD z <random score> <random existing member>`` (a score change: member
  record, two index records, the mirror updated), committed every 100 calls as the
  server's per-tick group commit would;

and, once, the first read of the zset after a restart of the node (the mirror built from
the score index: a scan of the index and the member records). The point is the slope: a
per-call cost that does not grow with the set (O(log n) ranks and ranges), and what the
one-time build costs. The machine is shared, so every figure is the median of five runs
of ``--calls`` calls.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import statistics
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from marekvs.config import Config  # noqa: E402
from marekvs.node import Node  # noqa: E402
from marekvs.server import resp  # noqa: E402


def build(path: str, n: int) -> tuple[Node, object, float]:
    node = Node(Config(data_dir=path, node_id=1, durability="no"))
    ctx = node.new_context()
    t0 = time.perf_counter()
    for start in range(0, n, 10_000):
        args = [b"ZADD", b"z"]
        for i in range(start, min(n, start + 10_000)):
            args += [b"%d" % i, b"element:%012d" % i]
        node.dispatch(ctx, args)
        node.engine.commit()
    return node, ctx, time.perf_counter() - t0


def per_call(node: Node, ctx, cmds: list[list[bytes]], commit_every: int = 0) -> float:
    d, enc = node.dispatch, resp.encode
    t0 = time.perf_counter()
    for i, c in enumerate(cmds):
        enc(d(ctx, c), 2)
        if commit_every and i % commit_every == 0:
            node.engine.commit()
    node.engine.commit()
    return (time.perf_counter() - t0) / len(cmds) * 1e6


def measure(n: int, calls: int, runs: int) -> dict[str, float]:
    tmp = tempfile.mkdtemp(prefix="bench-zsets-")
    try:
        node, ctx, fill_s = build(os.path.join(tmp, "db"), n)
        node.close()
        node = Node(Config(data_dir=os.path.join(tmp, "db"), node_id=1, durability="no"))  # a restart
        ctx = node.new_context()
        t0 = time.perf_counter()
        assert node.dispatch(ctx, [b"ZCARD", b"z"]) == n
        first_read = time.perf_counter() - t0
        rnd = random.Random(n)
        rows = {
            "ZRANGE BYSCORE": lambda: [b"ZRANGE", b"z", b"%d" % rnd.randrange(n), b"+inf", b"BYSCORE",
                                       b"LIMIT", b"0", b"10"],
            "ZRANGE rank": lambda: (lambda r: [b"ZRANGE", b"z", b"%d" % r, b"%d" % (r + 9)])(rnd.randrange(n)),
            "ZRANK": lambda: [b"ZRANK", b"z", b"element:%012d" % rnd.randrange(n)],
            "ZADD": lambda: [b"ZADD", b"z", b"%d" % rnd.randrange(n), b"element:%012d" % rnd.randrange(n)],
        }
        out = {"fill s": fill_s, "first read s": first_read}
        for name, mk in rows.items():
            times = []
            for _ in range(runs):
                cmds = [mk() for _ in range(calls)]
                times.append(per_call(node, ctx, cmds, 100 if name == "ZADD" else 0))
            out[name] = statistics.median(times)
        assert node.dispatch(ctx, [b"ZCARD", b"z"]) == n
        node.close()
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    a = ap.parse_args()
    sizes = [int(x) for x in a.sizes.split(",")]
    cols = ["ZRANGE BYSCORE", "ZRANGE rank", "ZRANK", "ZADD", "first read s", "fill s"]
    print("| members | " + " | ".join(c if c.endswith(" s") else c + " (us/call)" for c in cols) + " |")
    print("|---" * (len(cols) + 1) + "|")
    for n in sizes:
        r = measure(n, a.calls, a.runs)
        cells = [f"{r[c]:.2f}" if c.endswith(" s") else f"{r[c]:.1f}" for c in cols]
        print(f"| {n:,} | " + " | ".join(cells) + " |", flush=True)


if __name__ == "__main__":
    main()
