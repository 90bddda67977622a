#!/usr/bin/env python3
"""What the kept digest costs the write path: ``make bench``'s write rows on this tree
against a baseline revision (default ``main``), in the same run, alternating.

    .venv/bin/python bench/bench_digest_cost.py                    # 3 rounds, set/incr/mset, -P 1 and 16
    .venv/bin/python bench/bench_digest_cost.py --baseline <rev> --rounds 5 --seconds 4

The baseline is exported with ``git archive`` into a temp directory (its gRPC modules
generated there); each round runs ``bench/bench_single.py --marekvs-only`` once on the
baseline and once on this tree (the order flips every round, so drifting background load
hits both alike), with the same interpreter and options. Reported per row: the median
requests/s of each side, their ratio, and the median server CPU per request (us/op, which
other load on the machine skews less than the rate). The issue-21 bar: the write rows
drop by no more than 5% (ratio >= 0.95).
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def export(rev: str, dest: str) -> None:
    archive = subprocess.run(["git", "-C", ROOT, "archive", rev], check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", dest], input=archive, check=True)
    gen = os.path.join(dest, "marekvs", "replication", "gen")
    os.makedirs(gen, exist_ok=True)
    protos = sorted(glob.glob(os.path.join(dest, "proto", "*.proto")))
    subprocess.run([sys.executable, "-m", "grpc_tools.protoc", "-Iproto", f"--python_out={gen}",
                    f"--grpc_python_out={gen}", *[os.path.relpath(p, dest) for p in protos]], cwd=dest, check=True)
    for f in glob.glob(os.path.join(gen, "*_grpc.py")):
        subprocess.run(["sed", "-i", "-E", r"s/^import (\w+_pb2)/from . import \1/", f], check=True)
    open(os.path.join(gen, "__init__.py"), "a").close()


def run_tree(tree: str, args: argparse.Namespace) -> dict[tuple[str, int], tuple[float, float]]:
    """One bench_single run in ``tree``: {(test, pipeline): (rps, us/op)}."""
    results = os.path.join(tree, "bench", "results")
    before = set(glob.glob(os.path.join(results, "single-*.json")))
    cmd = [sys.executable, os.path.join(tree, "bench", "bench_single.py"), "--marekvs-only", "--tests", args.tests,
           "--pipelines", args.pipelines, "--seconds", str(args.seconds)]
    if args.requests:
        cmd += ["--requests", str(args.requests)]
    print("  $", " ".join(cmd), flush=True)
    subprocess.run(cmd, cwd=tree, check=True, stdout=subprocess.DEVNULL if not args.verbose else None)
    new = sorted(set(glob.glob(os.path.join(results, "single-*.json"))) - before)
    with open(new[-1]) as f:
        data = json.load(f)
    out = {}
    for row in data["summary"]["rows"] if "summary" in data else data["rows"]:
        m = row["marekvs"]
        if m and m.get("rps"):
            out[(row["test"].lower(), row["pipeline"])] = (m["rps"], m.get("server_us_per_op") or 0.0)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default="main", help="git revision to compare against")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--tests", default="set,incr,mset")
    p.add_argument("--pipelines", default="1,16")
    p.add_argument("--seconds", type=float, default=4.0)
    p.add_argument("--requests", type=int, default=0)
    p.add_argument("--verbose", action="store_true")
    args = p.parse_args()
    base = tempfile.mkdtemp(prefix="marekvs-baseline-")
    try:
        export(args.baseline, base)
        rev = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", args.baseline], capture_output=True,
                             text=True).stdout.strip()
        here = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], capture_output=True,
                              text=True).stdout.strip()
        runs: dict[str, list[dict]] = {"baseline": [], "this": []}
        for r in range(args.rounds):
            order = [("baseline", base), ("this", ROOT)]
            if r % 2:
                order.reverse()
            for name, tree in order:
                print(f"round {r + 1}/{args.rounds}: {name}", flush=True)
                runs[name].append(run_tree(tree, args))
        rows = sorted(set().union(*[set(x) for x in runs["this"] + runs["baseline"]]),
                      key=lambda tp: (tp[1], args.tests.split(",").index(tp[0])))
        print(f"\nbaseline {args.baseline} ({rev}) vs this tree (HEAD {here}, with local changes), "
              f"{args.rounds} rounds, medians")
        print(f"{'test':5} {'P':>3} {'baseline rps':>13} {'this rps':>11} {'ratio':>6} "
              f"{'us/op base':>10} {'us/op this':>10} {'+us/op':>7}")
        report = []
        for t, pl in rows:
            b = [x[(t, pl)] for x in runs["baseline"] if (t, pl) in x]
            h = [x[(t, pl)] for x in runs["this"] if (t, pl) in x]
            brps, hrps = statistics.median(x[0] for x in b), statistics.median(x[0] for x in h)
            bus, hus = statistics.median(x[1] for x in b), statistics.median(x[1] for x in h)
            print(f"{t.upper():5} {pl:>3} {brps:>13,.0f} {hrps:>11,.0f} {hrps / brps:>6.3f} {bus:>10.2f} "
                  f"{hus:>10.2f} {hus - bus:>7.2f}")
            report.append({"test": t, "pipeline": pl, "baseline_rps": [x[0] for x in b],
                           "this_rps": [x[0] for x in h], "baseline_us_per_op": [x[1] for x in b],
                           "this_us_per_op": [x[1] for x in h], "ratio": hrps / brps})
        os.makedirs(os.path.join(HERE, "results"), exist_ok=True)
        out = os.path.join(HERE, "results", "digest-cost.json")
        with open(out, "w") as f:
            json.dump({"baseline": args.baseline, "baseline_rev": rev, "head": here, "rounds": args.rounds,
                       "rows": report}, f, indent=1)
        print(f"\nresults: {os.path.relpath(out, ROOT)}")
    finally:
        shutil.rmtree(base, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
