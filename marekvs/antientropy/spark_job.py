"""The PySpark diff-and-repair job: one whole-cluster exchange as a Spark job.

Run it with ``spark-submit`` (``marekvs repair --spark`` builds the command, and prints it
with ``--print-command``)::

    spark-submit --master 'local[*]' --py-files marekvs.zip .../marekvs/antientropy/spark_job.py \\
        --nodes 10.0.0.1:16379,10.0.0.2:16379,10.0.0.3:16379 --json report.json

``--master`` is spark-submit's own: ``local[*]`` by default, any Spark master unchanged
(``spark://host:7077``, YARN, Kubernetes). The executors need Python with grpcio and
marekvs's pure code: ``--py-files`` ships the package as a zip (``marekvs repair --spark``
builds it), or install marekvs in the executors' Python.

The job: the driver first compares every node's partition roots from their kept digests
(8 bytes per partition and node, well under a second): when all agree the cluster is
consistent and no SparkContext is even started. Otherwise the 4096 partitions are cut into
``--tasks`` contiguous ranges, and each range holding a partition whose roots differ is one
Spark task (with ``--verify`` every range is, as each node first recomputes its digests
from its data in the tasks). A task connects to every node (gRPC, the cluster secret, TLS like the replication
links) and runs ``exchange.exchange`` over its range: roots of every node, kept segments
and fine segments of the partitions that differ, the records of the fine segments that
differ, their join with the core lattices (``plan.plan_records``: the same merge code as
the nodes' apply path, shipped to the executors), and for each node the joined records it
lacks, pushed in bounded repair batches (none with ``--dry-run``). Each task returns its
``Report``; the driver adds them up, prints the table, writes the JSON (``--json``) and
exits 0 (the cluster was consistent), 1 (differences found: repaired, or only reported
with ``--dry-run``) or 2 (failed).
"""

from __future__ import annotations

import argparse
import asyncio
import bisect
import json
import os
import sys
import time
from typing import Any

# What a task needs to reach the nodes: a plain dict, pickled to the executors.
TaskConf = dict[str, Any]


def ranges(first: int, count: int, tasks: int) -> list[tuple[int, int]]:
    """``count`` partitions from ``first`` cut into ``tasks`` contiguous ranges."""
    tasks = max(1, min(tasks, count))
    out = []
    for t in range(tasks):
        lo = first + count * t // tasks
        hi = first + count * (t + 1) // tasks
        if hi > lo:
            out.append((lo, hi - lo))
    return out


def run_range(rng: tuple[int, int], conf: TaskConf) -> dict[str, Any]:
    """One Spark task: the exchange over one range of partitions, on every node."""
    return asyncio.run(_run_range(rng, conf))


def precheck(conf: TaskConf, first: int, count: int) -> tuple[list[int], Any]:
    """The driver's look before the job: the partitions whose roots differ on the nodes,
    and the report of that comparison (its stage time, bytes, nodes; an error)."""
    return asyncio.run(_precheck(conf, first, count))


async def _precheck(conf: TaskConf, first: int, count: int) -> tuple[list[int], Any]:
    from marekvs.antientropy import exchange as X
    from marekvs.antientropy.remote import GrpcReplica, tls_config
    from marekvs.antientropy.report import Report

    config = tls_config(**conf["tls"])
    replicas = [GrpcReplica(addr, config) for addr in conf["nodes"]]
    report = Report(dry_run=conf["options"]["dry_run"])
    mism: list[int] = []
    try:
        mism = await X.mismatched_partitions(replicas, first, count, report)
    except Exception as e:
        report.error = f"comparing the roots: {e}"
    finally:
        for r in replicas:
            await r.close()
    return mism, report


def planned(parts: list[tuple[int, int]], mism: list[int]) -> list[tuple[int, int]]:
    """The ranges holding a mismatched partition (the others all matched)."""
    have = sorted(mism)
    out = []
    for lo, n in parts:
        i = bisect.bisect_left(have, lo)
        if i < len(have) and have[i] < lo + n:
            out.append((lo, n))
    return out


async def _run_range(rng: tuple[int, int], conf: TaskConf) -> dict[str, Any]:
    from marekvs.antientropy import exchange as X
    from marekvs.antientropy.remote import GrpcReplica, tls_config
    from marekvs.antientropy.report import Report

    config = tls_config(**conf["tls"])
    replicas = [GrpcReplica(addr, config) for addr in conf["nodes"]]
    report = Report(dry_run=conf["options"]["dry_run"])
    try:
        await X.exchange(replicas, rng[0], rng[1], X.Options(**conf["options"]), report)
    except Exception as e:  # reported, not raised: the driver decides the exit code
        report.error = f"partitions {rng[0]}..{rng[0] + rng[1] - 1}: {e}"
        report.tasks += 1
    finally:
        for r in replicas:
            await r.close()
    return report.to_dict()


def task_conf(args: argparse.Namespace) -> TaskConf:
    from marekvs.antientropy import replica as R

    return {
        "nodes": args.nodes,
        "tls": {"secret": args.cluster_secret, "cluster_name": args.cluster_name, "tls_cert": args.tls_cert,
                "tls_key": args.tls_key, "tls_ca": args.tls_ca, "tls_server_name": args.tls_server_name},
        "options": {"dry_run": args.dry_run, "settle_ms": int(args.settle * 1000),
                    "verify": (R.VERIFY_CHECK if args.dry_run else R.VERIFY_CORRECT) if args.verify else R.VERIFY_NONE,
                    "push_records": args.batch_records, "chunk": 512},
    }


def add_arguments(p: argparse.ArgumentParser) -> None:
    """The job's options (``marekvs repair`` shares them)."""
    p.add_argument("--nodes", required=True, type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                   help="gRPC addresses (host:port) of the nodes to compare, comma-separated (INFO replication "
                        "shows each node's grpc_addr)")
    p.add_argument("--cluster-secret", default=os.environ.get("MAREKVS_CLUSTER_SECRET", ""),
                   help="the cluster secret (default: $MAREKVS_CLUSTER_SECRET)")
    p.add_argument("--cluster-name", default=os.environ.get("MAREKVS_CLUSTER_NAME", "marekvs"))
    p.add_argument("--tls-cert", default="", help="client certificate (mutual TLS)")
    p.add_argument("--tls-key", default="")
    p.add_argument("--tls-ca", default="", help="CA bundle to verify the nodes (enables TLS)")
    p.add_argument("--tls-server-name", default="", help="name expected in the nodes' certificates")
    p.add_argument("--dry-run", action="store_true", help="compare and report; write nothing")
    p.add_argument("--settle", type=float, default=2.0,
                   help="seconds: differences younger than this are left to log shipping (default 2)")
    p.add_argument("--verify", action="store_true",
                   help="first recompute every node's digests from its data (finds records deleted behind the "
                        "engine's back; reads everything)")
    p.add_argument("--partitions", default="0-4095", help="partition range LO-HI (default all: 0-4095)")
    p.add_argument("--batch-records", type=int, default=2000, help="records per repair batch (default 2000)")
    p.add_argument("--json", metavar="FILE", help="write the report as JSON to FILE ('-': stdout)")


def partition_range(spec: str) -> tuple[int, int]:
    lo, _, hi = spec.partition("-")
    first, last = int(lo), int(hi or lo)
    if not 0 <= first <= last <= 4095:
        raise ValueError(f"partition range {spec!r} is not within 0-4095")
    return first, last - first + 1


def write_report(report: Any, args: argparse.Namespace) -> None:
    if args.json == "-":
        print(report.to_json())
        return
    print(report.table())
    if args.json:
        with open(args.json, "w") as f:
            f.write(report.to_json() + "\n")
        print(f"report: {args.json}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="spark_job.py", description="marekvs whole-cluster diff and repair (PySpark)")
    add_arguments(p)
    p.add_argument("--tasks", type=int, default=64, help="Spark tasks (ranges of partitions; default 64)")
    args = p.parse_args(argv)
    from pyspark.sql import SparkSession

    from marekvs.antientropy.report import Report, total

    first, count = partition_range(args.partitions)
    t0 = time.perf_counter()
    conf = task_conf(args)
    all_parts = ranges(first, count, args.tasks)
    parts = all_parts
    pre = None
    if not args.verify:  # (with --verify every node recomputes its digests in the tasks)
        mism, pre = precheck(conf, first, count)
        if not pre.error:
            parts = planned(all_parts, mism)
            print(f"marekvs repair: {len(mism)} of {count} partitions differ on {', '.join(args.nodes)}",
                  file=sys.stderr, flush=True)
    precheck_s = time.perf_counter() - t0
    spark = None
    if parts and not (pre is not None and pre.error):
        spark = (SparkSession.builder.appName("marekvs-repair")
                 .config("spark.ui.showConsoleProgress", "true").getOrCreate())
        sc = spark.sparkContext
        sc.setLogLevel(os.environ.get("MAREKVS_SPARK_LOG_LEVEL", "WARN"))
        master = sc.master
    else:  # every root matched (or a node failed): no SparkContext to start, no job to run
        from pyspark import SparkConf

        master = SparkConf().get("spark.master", "local[*]")
    setup = time.perf_counter() - t0 - precheck_s
    t1 = time.perf_counter()
    if pre is not None and pre.error:
        report = pre
    else:
        if spark is not None:
            print(f"marekvs repair on Spark ({master}, {sc.defaultParallelism} cores): {len(parts)} tasks over "
                  f"partitions {first}-{first + count - 1}" + (" (dry run)" if args.dry_run else ""),
                  file=sys.stderr, flush=True)
        try:
            results = []
            if spark is not None:
                sc.setJobDescription("marekvs diff and repair")
                results = sc.parallelize(parts, len(parts)).map(lambda r: run_range(r, conf)).collect()
            report = total([Report.from_dict(d) for d in results])
        except Exception as e:
            report = Report(dry_run=args.dry_run, error=f"Spark job failed: {e}")
        if pre is not None:  # the ranges the driver found matching had no task
            skipped = sum(n for lo, n in all_parts) - sum(n for lo, n in parts)
            report.partitions_compared += skipped
            report.partitions_matching += skipped
            report.bytes_digests += pre.bytes_digests
            report.timed("roots", pre.stage_seconds.get("roots", 0.0))
            report.nodes.update(pre.nodes)
    report.dry_run = args.dry_run
    report.wall_seconds = time.perf_counter() - t1 + precheck_s
    if spark is not None:
        spark.stop()
    out = report.to_dict()
    out["spark"] = {"master": master, "tasks": len(parts), "setup_seconds": round(setup, 3),
                    "precheck_seconds": round(precheck_s, 3), "job_seconds": round(time.perf_counter() - t1, 3),
                    "total_seconds": round(time.perf_counter() - t0, 3)}
    if args.json == "-":
        print(json.dumps(out, indent=2))
    else:
        print(report.table())
        print(f"spark: {master}, {len(parts)} tasks; roots compared first {precheck_s:.2f}s, session {setup:.2f}s, "
              f"job {out['spark']['job_seconds']:.2f}s")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(out, f, indent=2)
                f.write("\n")
            print(f"report: {args.json}")
    return report.exit_code


if __name__ == "__main__":
    sys.exit(main())
