#!/usr/bin/env python3
"""Cost per call of collection commands as a collection grows: 1k, 100k and 1M elements (issue 19).

    .venv/bin/python bench/bench_collections.py                      # all groups, all sizes
    .venv/bin/python bench/bench_collections.py --sizes 1000,100000 --calls 2000
    .venv/bin/python bench/bench_collections.py --groups zset         # = bench/bench_zsets.py

For each size n it builds, on an in-process node (real RocksDB in a temporary directory,
``node.dispatch`` and the RESP2 encoding of the reply, no sockets), one collection per
group with n elements, written in batches of 10k per command (``ZADD z`` scores 0..n-1 to
members ``element:%012d``; ``HSET h`` fields ``field:%012d``; ``SADD s`` members
``member:%012d``; ``PFADD p`` elements ``element:%012d``), then times, per call:

- zset: ``ZRANGE z <s> +inf BYSCORE LIMIT 0 10`` at a random score; ``ZRANGE z <r> <r+9>``
  at a random rank; ``ZRANK z <random member>``; ``ZADD z <random score> <random existing
  member>`` (a score change); and, once, the first read after a restart of the node (the
  mirror built from the score index);
- hash: ``HSCAN h <cursor> COUNT 100`` walking the hash from a random starting cursor
  (each call continues from the cursor the previous one returned; per call and per
  returned field); ``HGET h <random field>``;
- set: ``SADD s <new member>``; ``SISMEMBER s <random member>``;
- hll: ``PFADD p <new element>`` into the HLL that has seen n elements; ``PFCOUNT p``.

Writes are committed every 100 calls, as the server's per-tick group commit would. The
machine is shared, so every figure is the median of ``--runs`` runs of ``--calls`` calls.
The point is the slope: whether the per-call cost stays flat as n grows (Redis: O(1) for
HGET, SADD, SISMEMBER, PFADD, PFCOUNT of one key and each HSCAN call; O(log n) for ZADD,
ZRANK, ZRANGE).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from marekvs.commands.reply import Blocking  # noqa: E402
from marekvs.config import Config  # noqa: E402
from marekvs.node import Node  # noqa: E402
from marekvs.server import resp  # noqa: E402

BATCH = 10_000
GROUPS = ("zset", "hash", "set", "hll")


def _batches(n: int, head: list[bytes], items: Callable[[int], list[bytes]]) -> Iterator[list[bytes]]:
    for start in range(0, n, BATCH):
        args = list(head)
        for i in range(start, min(n, start + BATCH)):
            args += items(i)
        yield args


# group -> the batched commands that build its collection of n elements
FILLS: dict[str, Callable[[int], Iterator[list[bytes]]]] = {
    "zset": lambda n: _batches(n, [b"ZADD", b"z"], lambda i: [b"%d" % i, b"element:%012d" % i]),
    "hash": lambda n: _batches(n, [b"HSET", b"h"], lambda i: [b"field:%012d" % i, b"value:%012d" % i]),
    "set": lambda n: _batches(n, [b"SADD", b"s"], lambda i: [b"member:%012d" % i]),
    "hll": lambda n: _batches(n, [b"PFADD", b"p"], lambda i: [b"element:%012d" % i]),
}


def build(path: str, n: int, groups: list[str]) -> tuple[Node, dict[str, float]]:
    node = Node(Config(data_dir=path, node_id=1, durability="no"))
    ctx = node.new_context()
    fill = {}
    for g in groups:
        t0 = time.perf_counter()
        for args in FILLS[g](n):
            node.dispatch(ctx, args)
            node.engine.commit()
        fill[f"{g} fill s"] = time.perf_counter() - t0
    return node, fill


def per_call(node: Node, ctx, cmds: list[list[bytes]], commit_every: int = 0) -> float:
    d, enc = node.dispatch, resp.encode
    t0 = time.perf_counter()
    for i, c in enumerate(cmds):
        enc(d(ctx, c), 2)
        if commit_every and i % commit_every == 0:
            node.engine.commit()
    node.engine.commit()
    return (time.perf_counter() - t0) / len(cmds) * 1e6


def hscan_walk(node: Node, ctx, calls: int, cursor: bytes) -> tuple[float, float, bytes]:
    """``calls`` HSCAN calls, each from the cursor the previous returned: (us/call, us/field, cursor)."""
    d, enc = node.dispatch, resp.encode
    fields = 0
    t0 = time.perf_counter()
    for _ in range(calls):
        reply = d(ctx, [b"HSCAN", b"h", cursor, b"COUNT", b"100"])
        enc(reply, 2)
        cursor, fields = reply[0], fields + len(reply[1]) // 2
    dt = time.perf_counter() - t0
    return dt / calls * 1e6, dt / max(fields, 1) * 1e6, cursor


def rows(n: int, rnd: random.Random) -> dict[str, tuple[str, Callable[[], list[bytes]], bool]]:
    """name -> (group, command maker, is a write)."""
    fresh = iter(range(10**12))
    return {
        "ZRANGE BYSCORE": ("zset", lambda: [b"ZRANGE", b"z", b"%d" % rnd.randrange(n), b"+inf", b"BYSCORE",
                                            b"LIMIT", b"0", b"10"], False),
        "ZRANGE rank": ("zset", lambda: (lambda r: [b"ZRANGE", b"z", b"%d" % r, b"%d" % (r + 9)])(rnd.randrange(n)),
                        False),
        "ZRANK": ("zset", lambda: [b"ZRANK", b"z", b"element:%012d" % rnd.randrange(n)], False),
        "ZADD": ("zset", lambda: [b"ZADD", b"z", b"%d" % rnd.randrange(n), b"element:%012d" % rnd.randrange(n)],
                 True),
        "HGET": ("hash", lambda: [b"HGET", b"h", b"field:%012d" % rnd.randrange(n)], False),
        "SADD new": ("set", lambda: [b"SADD", b"s", b"new:%012d" % next(fresh)], True),
        "SISMEMBER": ("set", lambda: [b"SISMEMBER", b"s", b"member:%012d" % rnd.randrange(n)], False),
        "PFADD new": ("hll", lambda: [b"PFADD", b"p", b"new:%012d" % next(fresh)], True),
        "PFCOUNT": ("hll", lambda: [b"PFCOUNT", b"p"], False),
    }


def settled(value: object) -> object:
    """A reply, awaited if the command waits (``reply.Blocking``: a big zset's first read)."""
    if isinstance(value, Blocking):
        return asyncio.run(value.awaitable)  # type: ignore[arg-type]
    return value


def measure(n: int, calls: int, runs: int, groups: list[str]) -> dict[str, float]:
    tmp = tempfile.mkdtemp(prefix="bench-collections-")
    db = os.path.join(tmp, "db")
    try:
        node, out = build(db, n, groups)
        node.close()
        node = Node(Config(data_dir=db, node_id=1, durability="no"))  # a restart
        ctx = node.new_context()
        if "zset" in groups:
            t0 = time.perf_counter()
            assert settled(node.dispatch(ctx, [b"ZCARD", b"z"])) == n  # (the mirror built in steps)
            out["zset first read s"] = time.perf_counter() - t0
        rnd = random.Random(n)
        for name, (g, mk, write) in rows(n, rnd).items():
            if g not in groups:
                continue
            times = [per_call(node, ctx, [mk() for _ in range(calls)], 100 if write else 0) for _ in range(runs)]
            out[name] = statistics.median(times)
            if name == "HGET":
                walks = []
                cursor = node.dispatch(ctx, [b"HSCAN", b"h", b"0", b"COUNT", b"%d" % rnd.randrange(1, n + 1)])[0]
                for _ in range(runs):
                    call_us, field_us, cursor = hscan_walk(node, ctx, max(1, calls // 10), cursor)
                    walks.append((call_us, field_us))
                out["HSCAN COUNT 100"] = statistics.median(w[0] for w in walks)
                out["HSCAN per field"] = statistics.median(w[1] for w in walks)
        if "zset" in groups:
            assert node.dispatch(ctx, [b"ZCARD", b"z"]) == n
        if "hash" in groups:
            assert node.dispatch(ctx, [b"HLEN", b"h"]) == n
        node.close()
        return out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


ORDER = ["ZRANGE BYSCORE", "ZRANGE rank", "ZRANK", "ZADD", "HSCAN COUNT 100", "HSCAN per field", "HGET",
         "SADD new", "SISMEMBER", "PFADD new", "PFCOUNT"]


def main(argv: list[str] | None = None, default_groups: str = ",".join(GROUPS), doc: str = __doc__) -> None:
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="1000,100000,1000000")
    ap.add_argument("--calls", type=int, default=10_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--groups", default=default_groups, help="comma-separated subset of " + ",".join(GROUPS))
    a = ap.parse_args(argv)
    sizes = [int(x) for x in a.sizes.split(",")]
    groups = [g for g in a.groups.split(",") if g]
    unknown = set(groups) - set(GROUPS)
    if unknown:
        ap.error(f"unknown groups: {sorted(unknown)}")
    results = {}
    for n in sizes:
        t0 = time.perf_counter()
        results[n] = measure(n, a.calls, a.runs, groups)
        print(f"# n={n:,} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    names = [r for r in ORDER if r in results[sizes[0]]] + sorted(k for k in results[sizes[0]] if k.endswith(" s"))
    print("| command | " + " | ".join(f"{n:,}" for n in sizes) + " |")
    print("|---" * (len(sizes) + 1) + "|")
    for name in names:
        unit = "" if name.endswith(" s") else " (us)"
        fmt = "{:.2f}" if name.endswith(" s") or name == "HSCAN per field" else "{:.1f}"
        print(f"| {name}{unit} | " + " | ".join(fmt.format(results[n][name]) for n in sizes) + " |", flush=True)


if __name__ == "__main__":
    main()
