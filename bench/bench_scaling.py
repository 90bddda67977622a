#!/usr/bin/env python3
"""Scaling table of the shard workers (issue 33): one marekvs node with ``--shards N`` for
N = 1, 2, 4, 8, 16 (as many as the machine has cores), next to one redis-server in the same
run, for SET, GET, INCR, HSET, ZADD, XADD, MSET (10 keys) and EVALSHA at -P 1 and -P 16.

Each column is a run of ``bench_single.py`` (redis-benchmark, 50 clients, 100k random keys,
64-byte values; one server at a time, so none competes with another): redis-server first,
then a node per shard count. For every row and server it reports requests per second, the
cores the server used (its process tree's CPU seconds per wall second: a supervisor and its
workers for N > 1) and the server CPU per request; then each node's rate as a multiple of
redis-server's, and of the one-worker node's (the scaling).

    .venv/bin/python bench/bench_scaling.py                 # make bench runs it after bench_single
    .venv/bin/python bench/bench_scaling.py --shards 1,2 --tests set,get --seconds 2

A random workload's keys are on every worker, so (N-1)/N of a node's commands are carried
to another worker over the mesh (docs/shards.md §1-§2), and MSET's ten keys make a unit
across workers (§3). The redis-benchmark client runs on the same machine and takes cores of
its own: on a machine of C cores, columns with N close to C measure contention as well.
Results: bench/results/scaling-<timestamp>.json; the figures and how to read them are in
bench/README.md ("Scaling table").
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")
TESTS = "set,get,incr,hset,zadd,xadd,mset,evalsha"


def run_single(extra: list[str], args: argparse.Namespace, out: str) -> dict:
    cmd = [sys.executable, os.path.join(HERE, "bench_single.py"), "--tests", args.tests, "--pipelines",
           args.pipelines, "--seconds", str(args.seconds), "--repeat", str(args.repeat), "--json", out, *extra]
    print("bench:", " ".join(cmd[1:]), flush=True)
    subprocess.run(cmd, check=False, cwd=ROOT, stdout=subprocess.DEVNULL if args.quiet else None)
    with open(out) as f:
        return json.load(f)


def table(columns: list[tuple[str, dict]], tests: list[str], pipelines: list[int]) -> list[str]:
    """One line per (row, pipeline): each column's rps, cores and µs per request, then each
    node's rate against redis-server's and against the first node's."""
    cells: dict[tuple[str, str, int], dict] = {}
    for name, doc in columns:
        for r in doc["runs"]:
            cells[(name, r["test"], r["pipeline"])] = r
    head = "| row | " + " | ".join(f"{n} rps (cores, µs/req)" for n, _ in columns)
    nodes = [n for n, _ in columns[1:]]
    head += " | " + " | ".join(f"{n} / redis" for n in nodes) + " | " + " | ".join(
        f"{n} / {nodes[0]}" for n in nodes[1:]) + " |"
    lines = [head, "|" + "---|" * (1 + len(columns) + len(nodes) + len(nodes) - 1)]
    for p in pipelines:
        for t in tests:
            row = [f"{t.upper()} -P {p}"]
            rates = []
            for name, _ in columns:
                r = cells.get((name, t, p))
                ok = r is not None and not r.get("error") and r.get("rps")
                rates.append(r["rps"] if ok else None)
                if not ok:
                    row.append("failed" if r is not None else "-")
                    continue
                cpu, us = r.get("server_cpu"), r.get("server_us_per_op")
                row.append(f"{r['rps']:,.0f} ({cpu:.2f}, {us:.1f})" if cpu and us else f"{r['rps']:,.0f}")
            redis = rates[0]
            for x in rates[1:]:
                row.append(f"{x / redis:.2f}x" if x and redis else "-")
            for x in rates[2:]:
                row.append(f"{x / rates[1]:.2f}x" if x and rates[1] else "-")
            lines.append("| " + " | ".join(row) + " |")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="marekvs shard workers scaling table, beside redis-server")
    cores = os.cpu_count() or 1
    p.add_argument("--shards", default=",".join(str(n) for n in (1, 2, 4, 8, 16) if n <= max(cores, 2)),
                   help="comma-separated shard counts (default: 1, 2, 4, 8, 16 up to the machine's cores)")
    p.add_argument("--tests", default=TESTS)
    p.add_argument("--pipelines", default="1,16")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--repeat", type=int, default=1)
    p.add_argument("--quiet", action="store_true", help="only the table (not each run's own)")
    a = p.parse_args(argv)
    os.makedirs(RESULTS, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    shards = [int(x) for x in a.shards.split(",") if x.strip()]
    load = os.getloadavg()[0]
    columns: list[tuple[str, dict]] = []
    with tempfile.TemporaryDirectory(prefix="marekvs-scaling-") as tmp:
        columns.append(("redis", run_single(["--redis-only"], a, os.path.join(tmp, "redis.json"))))
        for n in shards:
            columns.append((f"shards {n}", run_single(["--marekvs-only", f"--marekvs-arg=--shards={n}"], a,
                                                      os.path.join(tmp, f"shards{n}.json"))))
    tests = [t.strip() for t in a.tests.split(",") if t.strip()]
    pipelines = [int(x) for x in a.pipelines.split(",") if x.strip()]
    lines = table(columns, tests, pipelines)
    print(f"\nscaling table: {cores} cores, load average {load:.2f} before the run\n")
    print("\n".join(lines))
    out = os.path.join(RESULTS, f"scaling-{stamp}.json")
    with open(out, "w") as f:
        json.dump({"argv": sys.argv, "cores": cores, "loadavg_before": load, "shards": shards,
                   "columns": {n: d for n, d in columns}, "table": lines}, f, indent=2)
    print(f"\nresults: {os.path.relpath(out, ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
