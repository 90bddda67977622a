#!/usr/bin/env python3
"""What the PySpark repair job costs at scale: three nodes on this machine, N keys each,
a fraction of them diverged in ways log shipping cannot heal.

    .venv/bin/python bench/bench_repair.py                         # 100k and 1M keys, 1% diverged
    .venv/bin/python bench/bench_repair.py --keys 100000 --diverge 0.001,0.01,0.1
    .venv/bin/python bench/bench_repair.py --keys 10000000 --tasks 64
    .venv/bin/python bench/bench_repair.py --keys 100000 --shards 1,2,3   # nodes of shard workers

For each size:

1. **build**: three data directories are written offline, through the engine's one apply
   path (``Engine.apply``, so each directory keeps its digest exactly as a node does), with
   the same N records (``key:<i>`` = 64 bytes, origin node 1). ``--diverge`` of the keys
   (chosen at random) differ on one node chosen at random, a third each way: the node
   lacks the record, holds a newer version (its own write), or holds a tombstone (its own
   DEL). None of it is in a replication log, so only anti-entropy can repair it: exactly
   "records written on one node with their log entry lost".
2. the nodes are started with their peers (anti-entropy off: only the job repairs), and
   wait until every link streams. ``--shards A,B,C`` starts node i with that many shard
   workers (docs/shards.md; each directory is resharded as the node starts, before it serves).
3. **repair**: ``marekvs repair --spark --master local[*] --tasks T --settle 0`` (the
   PySpark job through spark-submit). Its JSON report gives the stage times (summed over
   tasks: two run at a time on two cores), the bytes moved and the records repaired per
   node; the wall time is measured around the whole command (JVM and SparkSession start
   included).
4. **check**: DEBUG DIGEST equal on the three nodes, and every diverged key reads its
   expected value (the join: the newer version, the tombstone, the value a node lacked) on
   every node.
5. **confirm**: the job again on the now consistent cluster (exit code 0), and
   ``marekvs repair`` (no Spark: one process, one exchange) for comparison.

Table on stdout, everything as JSON in ``bench/results/repair-<timestamp>.json``. The nodes
run on free 127.0.0.1 ports and temp data directories, and are stopped by their pids.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
RESULTS = HERE / "results"
sys.path.insert(0, str(ROOT))

from marekvs import launcher as mc  # noqa: E402
from marekvs.launcher.procs import node_env  # noqa: E402
from marekvs.core import envelope as env  # noqa: E402
from marekvs.core import keys as K  # noqa: E402
from marekvs.storage.engine import Engine  # noqa: E402

SECRET = "bench-repair"
NAME = "marekvs"
BATCH = 20_000
VALUE = b"v" * 56


def free_base(span: int) -> int:
    for _ in range(500):
        base = random.randrange(20000, 32000)
        if all(mc.port_free(p) for p in range(base, base + span)):
            return base
    raise RuntimeError("no free port range")


def build(dirs: list[str], n: int, fraction: float, rnd: random.Random) -> dict[str, Any]:
    """Write the three data directories; return what diverged and the expected joins."""
    t0 = time.perf_counter()
    base_ms = time.time_ns() // 1_000_000 - 600_000  # settled, well within gc_grace (1 h)
    diverged = rnd.sample(range(n), int(n * fraction))
    # key index -> (node index 0..2, kind): 0 lacks it, 1 newer version there, 2 tombstone there
    div = {k: (rnd.randrange(3), i % 3) for i, k in enumerate(diverged)}
    engines = [Engine(d, i + 1, durability="no") for i, d in enumerate(dirs)]
    try:
        for lo in range(0, n, BATCH):
            recs = []
            for k in range(lo, min(n, lo + BATCH)):
                recs.append((K.encode_string_key(b"key:%d" % k),
                             env.pack(0, (base_ms + k % 1000) << 16, 1, 0, VALUE + b"%08d" % k)))
            for j, e in enumerate(engines):
                mine = [r for k, r in zip(range(lo, lo + len(recs)), recs) if div.get(k, (-1, -1)) != (j, 0)]
                e.apply(mine, log_entry=False)
                e.commit()
        later = (base_ms + 10_000) << 16
        for k, (j, kind) in div.items():
            if kind == 0:
                continue
            ikey = K.encode_string_key(b"key:%d" % k)
            rec = (env.pack(env.FLAG_TOMBSTONE, later, j + 1, 0, b"") if kind == 2
                   else env.pack(0, later, j + 1, 0, b"newer-%d" % k))
            engines[j].apply([(ikey, rec)], log_entry=False)
        for e in engines:
            e.commit()
    finally:
        for e in engines:
            e.close()
    kinds = [0, 0, 0]
    for _, kind in div.values():
        kinds[kind] += 1
    return {"seconds": round(time.perf_counter() - t0, 1), "diverged": len(div),
            "lacking": kinds[0], "newer": kinds[1], "tombstone": kinds[2], "div": div}


def expected(k: int, div: dict[int, tuple[int, int]]) -> bytes | None:
    kind = div[k][1]
    return None if kind == 2 else b"newer-%d" % k if kind == 1 else VALUE + b"%08d" % k


def digests(nodes: list[mc.NodeSpec]) -> list[str]:
    out = []
    for n in nodes:
        with mc.Resp(n.port, timeout=120) as c:
            out.append(str(c.call("DEBUG", "DIGEST")))
    return out


def check(nodes: list[mc.NodeSpec], div: dict[int, tuple[int, int]]) -> int:
    """Diverged keys that do not read their expected value, on any node."""
    keys = sorted(div)
    bad = 0
    for n in nodes:
        with mc.Resp(n.port, timeout=60) as c:
            for lo in range(0, len(keys), 1000):
                chunk = keys[lo:lo + 1000]
                got = c.call("MGET", *[b"key:%d" % k for k in chunk])
                bad += sum(1 for k, v in zip(chunk, got) if v != expected(k, div))
    return bad


def wait_streaming(nodes: list[mc.NodeSpec], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ok = True
        for n in nodes:
            with mc.Resp(n.port, timeout=5) as c:
                links = mc.peer_links(mc.parse_info(c.call("INFO", "replication")))
            ok = ok and len(links) == len(nodes) - 1 and all(ln.get("state") == "streaming" for ln in links)
        if ok:
            return
        time.sleep(0.2)
    raise RuntimeError("links did not come up")


def repair(nodes: list[mc.NodeSpec], out: Path, *extra: str, spark: bool = True) -> tuple[int, float, dict]:
    cmd = [sys.executable, "-m", "marekvs", "repair", "--nodes", ",".join(f"{mc.HOST}:{n.grpc_port}" for n in nodes),
           "--settle", "0", "--json", str(out), "--no-progress", *extra]
    if spark:
        cmd.insert(4, "--spark")
    envv = node_env(SECRET)
    t = time.perf_counter()
    r = subprocess.run(cmd, env=envv, capture_output=True, text=True, cwd=str(ROOT))
    wall = time.perf_counter() - t
    if r.returncode not in (0, 1):
        sys.stderr.write(r.stdout[-3000:] + r.stderr[-5000:])
    rep = json.loads(out.read_text()) if out.exists() else {}
    return r.returncode, wall, rep


def one_size(n: int, fraction: float, args: argparse.Namespace, rnd: random.Random) -> dict[str, Any]:
    work = Path(tempfile.mkdtemp(prefix=f"marekvs-bench-repair-{n}-"))
    base = free_base(6)
    nodes = [mc.NodeSpec(i, base + i - 1, base + 2 + i, str(work / f"node{i}"), str(work / f"node{i}.log"))
             for i in (1, 2, 3)]
    row: dict[str, Any] = {"keys": n, "diverge": fraction, "shards": args.shards}
    try:
        print(f"\n== {n:,} keys, {fraction:.2%} diverged, shard workers {args.shards}: building three data "
              "directories ...", flush=True)
        b = build([x.data_dir for x in nodes], n, fraction, rnd)
        div = b.pop("div")
        row["build"] = b
        print(f"   built in {b['seconds']}s: {b['diverged']} keys diverged ({b['lacking']} lacking on one node, "
              f"{b['newer']} newer on one node, {b['tombstone']} deleted on one node)", flush=True)
        for x in nodes:
            mc.start_node(x, nodes, durability="everysec", name=NAME, secret=SECRET,
                          extra=["--antientropy-interval", "0", "--digest-verify-interval", "0",
                                 "--shards", str(args.shards[x.id - 1])])
        problems = mc.wait_ready(nodes, timeout=180)
        if problems:
            raise RuntimeError(f"nodes did not start: {problems}")
        wait_streaming(nodes)
        row["digests_differ_before"] = len(set(digests(nodes))) > 1
        spark_extra = ["--tasks", str(args.tasks), "--master", args.master]
        print("   repair (Spark) ...", flush=True)
        rc, wall, rep = repair(nodes, work / "repair.json", *spark_extra)
        row["repair"] = {"exit_code": rc, "wall_seconds": round(wall, 2), "report": rep}
        same = len(set(digests(nodes))) == 1
        bad = check(nodes, div)
        row["healed"] = same and bad == 0
        row["wrong_after"] = bad
        print(f"   exit {rc} in {wall:.1f}s; digests equal: {same}; diverged keys wrong after: {bad}", flush=True)
        print("   confirm (Spark) ...", flush=True)
        rc2, wall2, rep2 = repair(nodes, work / "confirm.json", *spark_extra)
        row["confirm_spark"] = {"exit_code": rc2, "wall_seconds": round(wall2, 2), "report": rep2}
        rc3, wall3, rep3 = repair(nodes, work / "confirm-cli.json", spark=False)
        row["confirm_cli"] = {"exit_code": rc3, "wall_seconds": round(wall3, 2), "report": rep3}
        print(f"   confirmed: Spark exit {rc2} in {wall2:.1f}s, marekvs repair exit {rc3} in {wall3:.2f}s",
              flush=True)
    finally:
        mc.stop_nodes(nodes)
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return row


def summary(rows: list[dict[str, Any]]) -> str:
    stages = ("roots", "segments", "fine", "fetch", "merge", "push")
    hdr = ["keys", "diverged", "repair wall", "spark session", "job", *stages, "repaired", "fetched MB",
           "pushed MB", "confirm spark", "(session)", "confirm cli", "healed"]
    lines = [" | ".join(hdr), " | ".join("---" for _ in hdr)]
    for r in rows:
        rep = r["repair"]["report"]
        sp = rep.get("spark", {})
        st = rep.get("stage_seconds", {})
        c = r["confirm_spark"]
        cs = c["report"].get("spark", {})
        lines.append(" | ".join([
            f"{r['keys']:,}", f"{r['build']['diverged']:,}", f"{r['repair']['wall_seconds']:.1f}s",
            f"{sp.get('setup_seconds', 0):.1f}s", f"{sp.get('job_seconds', 0):.1f}s",
            *[f"{st.get(s, 0):.1f}" for s in stages],
            f"{rep.get('records_repaired_total', 0):,}", f"{rep.get('bytes_fetched', 0) / 1e6:.1f}",
            f"{rep.get('bytes_pushed', 0) / 1e6:.1f}", f"{c['wall_seconds']:.1f}s (exit {c['exit_code']})",
            f"{cs.get('setup_seconds', 0):.1f}s", f"{r['confirm_cli']['wall_seconds']:.2f}s",
            "yes" if r["healed"] else "NO"]))
    return "\n".join(lines)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--keys", default="100000,1000000", help="comma-separated key counts")
    p.add_argument("--diverge", default="0.01", help="comma-separated fractions of keys diverged")
    p.add_argument("--tasks", type=int, default=16, help="Spark tasks (ranges of partitions)")
    p.add_argument("--master", default="local[*]")
    p.add_argument("--seed", type=int, default=21)
    p.add_argument("--keep", action="store_true", help="keep the data directories and logs")
    p.add_argument("--shards", default="1,1,1", type=lambda s: [int(x) for x in s.split(",")],
                   help="shard workers of nodes 1, 2 and 3 (default 1,1,1)")
    args = p.parse_args()
    if len(args.shards) != 3 or min(args.shards) < 1:
        p.error("--shards takes three counts, e.g. 1,2,3")
    rnd = random.Random(args.seed)
    rows = []
    for n in [int(x) for x in args.keys.split(",")]:
        for f in [float(x) for x in args.diverge.split(",")]:
            rows.append(one_size(n, f, args, rnd))
    print("\nstage times are summed over the tasks (two run at once on local[*] here); seconds\n")
    print(summary(rows))
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / f"repair-{time.strftime('%Y%m%d-%H%M%S')}.json"
    out.write_text(json.dumps({"args": vars(args), "cpus": os.cpu_count(), "loadavg": os.getloadavg(),
                               "rows": rows}, indent=1))
    print(f"\nresults: {out.relative_to(ROOT)}")
    return 0 if all(r["healed"] and r["confirm_spark"]["exit_code"] == 0 for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
