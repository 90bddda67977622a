#!/usr/bin/env python3
"""What the compiled hot modules (setup.py: ``NATIVE``, mypyc) gain: CPU per request of the
same commands with the compiled build and with the pure-Python fallback, side by side.

    make native && .venv/bin/python bench/bench_native.py                 # 5 rounds, in process
    .venv/bin/python bench/bench_native.py --rounds 3 --requests 40000 --tests set,incr
    .venv/bin/python bench/bench_native.py --server --rounds 3           # bench_single.py rounds

In process (the default): each round runs one child per build (``MAREKVS_PURE=1`` and ``=0``,
the order flipping every round), each with a real node in a temporary directory (RocksDB,
``durability no``), prefilled with ``make bench``'s 100k string keys. Per row it feeds
``--requests`` requests, as RESP in pipelines of 16 (redis-benchmark's commands with
``__rand_int__`` drawn from 100k), through ``server.resp.RequestParser``, ``node.dispatch`` and
``resp.encode``, committing once per pipeline as the server does once per tick, and reports
the process CPU time per request. No sockets, event loop or client share the CPU, so the
figure moves little with the machine's other load; the rounds' minimum is reported.

``--server``: each round runs ``bench/bench_single.py --marekvs-only`` once per build instead,
and reports the median server CPU per request (us/op) of every row at -P 1 and -P 16.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
KEYSPACE = 100_000
PIPELINE = 16
VALUE = b"x" * 64
# redis-benchmark's commands for these rows (bench_single.py's WORKLOADS and its built-in
# tests): __rand_int__ is a random number below KEYSPACE, zero padded to 12 digits
RAND = b"__rand_int__"
ROWS: dict[str, tuple[bytes, ...]] = {
    "set": (b"SET", b"key:" + RAND, VALUE),
    "get": (b"GET", b"key:" + RAND),
    "incr": (b"INCR", b"counter:" + RAND),
    "hset": (b"HSET", b"myhash", b"field:" + RAND, b"v"),
    "sadd": (b"SADD", b"myset", b"member:" + RAND),
    "zadd": (b"ZADD", b"myzset", RAND, b"element:" + RAND),
    "lpush": (b"LPUSH", b"mylist", VALUE),
    "xadd": (b"XADD", b"mystream", b"*", b"field", RAND),
}


def command(row: tuple[bytes, ...], rnd: random.Random) -> list[bytes]:
    return [a.replace(RAND, b"%012d" % rnd.randrange(KEYSPACE)) if RAND in a else a for a in row]


def child(tests: list[str], requests: int) -> dict[str, object]:
    """One build's figures: {"state": ..., "us": {test: CPU us per request}}."""
    sys.path.insert(0, ROOT)
    import marekvs
    from marekvs.config import Config
    from marekvs.node import Node
    from marekvs.server import resp

    tmp = tempfile.mkdtemp(prefix="bench-native-")
    try:
        node = Node(Config(data_dir=os.path.join(tmp, "db"), node_id=1, durability="no"))
        ctx = node.new_context()
        for start in range(0, KEYSPACE, 1000):  # make bench's prefill: 100k keys of 64 bytes
            args = [b"MSET"]
            for i in range(start, start + 1000):
                args += [b"key:%012d" % i, VALUE]
            node.dispatch(ctx, args)
            node.engine.commit()
        rnd = random.Random(7)
        us = {}
        for test in tests:
            chunks = []
            for _ in range(requests // PIPELINE):
                chunks.append(b"".join(resp.encode(command(ROWS[test], rnd)) for _ in range(PIPELINE)))
            parser = resp.RequestParser()
            t0 = time.process_time()
            for chunk in chunks:
                cmds, err = parser.feed(chunk)
                assert err is None and len(cmds) == PIPELINE
                for args in cmds:
                    reply = node.dispatch(ctx, args)
                    if type(reply) is resp.Err:
                        raise SystemExit(f"{test}: {reply}")
                    resp.encode(reply, ctx.proto)
                node.engine.commit()
            us[test] = (time.process_time() - t0) / (len(chunks) * PIPELINE) * 1e6
        node.close()
        return {"state": marekvs._native.STATE, "us": us}
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def run_child(pure: bool, args: argparse.Namespace) -> dict[str, float]:
    env = {**os.environ, "MAREKVS_PURE": "1" if pure else "0"}
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", "--tests", args.tests,
                        "--requests", str(args.requests)], env=env, capture_output=True, text=True, check=True)
    out = json.loads(r.stdout.splitlines()[-1])
    want = "pure" if pure else "compiled"
    if not out["state"].startswith(want):
        raise SystemExit(f"asked for the {want} build, got {out['state']!r} (make native)")
    return out["us"]


def run_server(pure: bool, args: argparse.Namespace) -> dict[str, float]:
    """One bench_single.py run: {"test P": server us/op}."""
    results = os.path.join(HERE, "results")
    before = set(glob.glob(os.path.join(results, "single-*.json")))
    env = {**os.environ, "MAREKVS_PURE": "1" if pure else "0"}
    subprocess.run([sys.executable, os.path.join(HERE, "bench_single.py"), "--marekvs-only", "--tests", args.tests,
                    "--seconds", str(args.seconds)], env=env, check=True, stdout=subprocess.DEVNULL)
    new = sorted(set(glob.glob(os.path.join(results, "single-*.json"))) - before)
    with open(new[-1]) as f:
        runs = json.load(f)["runs"]
    return {f"{r['test']} {r['pipeline']}": r["server_us_per_op"] for r in runs if r["server"] == "marekvs"}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tests", default=",".join(ROWS), help=f"comma-separated rows of {', '.join(ROWS)}")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--requests", type=int, default=20_000, help="requests per row and build (in process)")
    p.add_argument("--server", action="store_true", help="bench_single.py rounds instead (server us/op)")
    p.add_argument("--seconds", type=float, default=3, help="with --server: seconds per measured run")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    tests = args.tests.split(",")
    unknown = [t for t in tests if t not in ROWS]
    if unknown:
        p.error(f"unknown rows {unknown}")
    if args.child:
        print(json.dumps(child(tests, args.requests)))
        return
    measure = run_server if args.server else run_child
    figures: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for i in range(args.rounds):
        for pure in ((True, False) if i % 2 == 0 else (False, True)):
            figures[pure].append(measure(pure, args))
        print(f"round {i + 1}/{args.rounds} done (load average {os.getloadavg()[0]:.1f})", flush=True)
    pick = statistics.median if args.server else min
    what = "server CPU us/op, median" if args.server else "process CPU us per request, minimum"
    print(f"\n{what} of {args.rounds} rounds per build")
    print(f"{'row':10} {'pure':>8} {'compiled':>9} {'compiled/pure':>14}")
    ratios = []
    for row in figures[True][0]:
        pure_us = pick(f[row] for f in figures[True])
        comp_us = pick(f[row] for f in figures[False])
        ratios.append(comp_us / pure_us)
        print(f"{row:10} {pure_us:8.1f} {comp_us:9.1f} {comp_us / pure_us:14.2f}")
    print(f"{'geo-mean':10} {'':8} {'':9} {statistics.geometric_mean(ratios):14.2f}")


if __name__ == "__main__":
    main()
