"""``marekvs repair`` and ``marekvs digest``.

``marekvs repair --nodes A,B,C`` runs one full exchange (``exchange.py``) among the named
nodes (their gRPC addresses) from this process, with a progress bar on stderr and the
report as a table (``--json FILE`` also writes it as JSON); ``--dry-run`` only reports.
``--spark`` runs the same exchange as the PySpark job instead (``spark_job.py``) through
``spark-submit``: ``--master`` is passed on unchanged (``local[*]`` by default), the
package is shipped to the executors as a zip (``--py-files``), ``--print-command`` shows
the spark-submit command instead of running it. Exit code: 0 consistent, 1 differences
found (repaired; with --dry-run only reported), 2 failed.

``marekvs digest`` checks or rebuilds the kept digests against the data: of a stopped
node's data directory (``--data-dir``; a node of shard workers: each worker's directory
over its partitions), or of running nodes (``--nodes``, over gRPC, which recompute them
from their data on the event loop a few partitions at a time). Exit code: 0
the kept digests equal the data, 1 they did not (corrected with ``--rebuild``), 2 failed.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path
from typing import Any

from marekvs.antientropy import spark_job
from marekvs.antientropy.report import EXIT_CONSISTENT, EXIT_FAILED, EXIT_REPAIRED, Report


# -- progress --------------------------------------------------------------------------------
class ProgressBar:
    """``[#####.....] 2048/4096 partitions 3.1s`` on stderr: redrawn in place on a terminal,
    a line per tenth otherwise."""

    def __init__(self, label: str, stream: Any = sys.stderr, enabled: bool = True):
        self.label = label
        self.stream = stream
        self.enabled = enabled
        self.tty = stream.isatty()
        self.t0 = time.monotonic()
        self.shown = -1

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or total <= 0:
            return
        frac = min(1.0, done / total)
        tenth = int(frac * 10)
        if not self.tty and tenth == self.shown:
            return
        self.shown = tenth
        bar = "#" * int(frac * 30)
        line = f"{self.label}: [{bar:<30}] {done}/{total} partitions {time.monotonic() - self.t0:.1f}s"
        if self.tty:
            self.stream.write("\r" + line + ("\n" if done >= total else ""))
        else:
            self.stream.write(line + "\n")
        self.stream.flush()


# -- marekvs repair --------------------------------------------------------------------------
def add_parsers(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "repair", help="compare the digests of nodes and repair every difference (anti-entropy)",
        description=__doc__.split("\n\n")[1].replace("``", "'"),
        formatter_class=argparse.RawDescriptionHelpFormatter)
    spark_job.add_arguments(p)
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    g = p.add_argument_group("Spark")
    g.add_argument("--spark", action="store_true", help="run it as the PySpark job, through spark-submit")
    g.add_argument("--master", default="local[*]", help="Spark master, passed to spark-submit (default local[*])")
    g.add_argument("--tasks", type=int, default=64, help="Spark tasks: ranges of partitions (default 64)")
    g.add_argument("--spark-conf", action="append", default=[], metavar="KEY=VALUE",
                   help="more spark-submit --conf settings (repeatable)")
    g.add_argument("--print-command", action="store_true", help="print the spark-submit command; run nothing")
    p.set_defaults(func=run_repair)

    d = sub.add_parser(
        "digest", help="check or rebuild the kept digests against the data",
        description=__doc__.split("\n\n")[2].replace("``", "'"))
    where = d.add_mutually_exclusive_group(required=True)
    where.add_argument("--data-dir", help="a stopped node's data directory")
    where.add_argument("--nodes", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                       help="gRPC addresses of running nodes, comma-separated")
    what = d.add_mutually_exclusive_group(required=True)
    what.add_argument("--check", action="store_true", help="recompute from the data and compare")
    what.add_argument("--rebuild", action="store_true", help="recompute from the data and keep that")
    d.add_argument("--cluster-secret", default=os.environ.get("MAREKVS_CLUSTER_SECRET", ""))
    d.add_argument("--cluster-name", default=os.environ.get("MAREKVS_CLUSTER_NAME", "marekvs"))
    d.add_argument("--tls-cert", default="")
    d.add_argument("--tls-key", default="")
    d.add_argument("--tls-ca", default="")
    d.add_argument("--tls-server-name", default="")
    d.set_defaults(func=run_digest)


def run_repair(args: argparse.Namespace) -> int:
    try:
        first, count = spark_job.partition_range(args.partitions)
    except ValueError as e:
        print(f"marekvs repair: {e}", file=sys.stderr)
        return EXIT_FAILED
    if args.spark:
        return run_spark(args)
    report = asyncio.run(_repair(args, first, count))
    spark_job.write_report(report, args)
    return report.exit_code


async def _repair(args: argparse.Namespace, first: int, count: int) -> Report:
    from marekvs.antientropy import exchange as X
    from marekvs.antientropy.remote import GrpcReplica, tls_config

    conf = spark_job.task_conf(args)
    config = tls_config(**conf["tls"])
    replicas = [GrpcReplica(a, config) for a in args.nodes]
    report = Report(dry_run=args.dry_run)
    opts = X.Options(**conf["options"])
    if args.verify:
        opts.chunk = 64  # the progress bar moves while the nodes read everything
    bar = ProgressBar("repair" + (" (dry run)" if args.dry_run else ""), enabled=not args.no_progress)
    try:
        await X.exchange(replicas, first, count, opts, report, progress=bar)
    except Exception as e:
        report.error = str(e)
    finally:
        for r in replicas:
            await r.close()
    return report


# -- marekvs repair --spark ------------------------------------------------------------------
def package_zip(dest: str) -> str:
    """The marekvs package as a zip for ``--py-files`` (pure Python, its gRPC modules
    included; executors bring grpcio)."""
    import marekvs

    root = Path(marekvs.__file__).resolve().parent
    path = os.path.join(dest, "marekvs.zip")
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(root.rglob("*.py")):
            if "__pycache__" not in f.parts:
                z.write(f, Path("marekvs") / f.relative_to(root))
    return path


def spark_submit() -> str:
    import pyspark

    home = Path(pyspark.__file__).resolve().parent
    return str(home / "bin" / "spark-submit")


def spark_command(args: argparse.Namespace, zip_path: str) -> list[str]:
    job = spark_job.__file__
    cmd = [spark_submit(), "--master", args.master, "--name", "marekvs-repair",
           "--conf", f"spark.pyspark.python={sys.executable}",
           "--conf", f"spark.pyspark.driver.python={sys.executable}",
           "--conf", "spark.ui.showConsoleProgress=true",
           "--conf", f"spark.log.level={os.environ.get('MAREKVS_SPARK_LOG_LEVEL', 'WARN')}"]
    for kv in args.spark_conf:
        cmd += ["--conf", kv]
    cmd += ["--py-files", zip_path, job, "--nodes", ",".join(args.nodes), "--cluster-name", args.cluster_name,
            "--settle", str(args.settle), "--partitions", args.partitions, "--tasks", str(args.tasks),
            "--batch-records", str(args.batch_records)]
    for flag in ("tls_cert", "tls_key", "tls_ca", "tls_server_name"):
        if getattr(args, flag):
            cmd += ["--" + flag.replace("_", "-"), getattr(args, flag)]
    if args.dry_run:
        cmd.append("--dry-run")
    if args.verify:
        cmd.append("--verify")
    if args.json:
        cmd += ["--json", args.json]
    return cmd


def run_spark(args: argparse.Namespace) -> int:
    try:
        submit = spark_submit()
    except ImportError:
        print("marekvs repair --spark: pyspark is not installed (pip install 'marekvs[spark]')", file=sys.stderr)
        return EXIT_FAILED
    tmp = tempfile.mkdtemp(prefix="marekvs-spark-")
    try:
        cmd = spark_command(args, package_zip(tmp))
        if args.print_command:
            tmp = ""  # the zip stays for the command
            print(" ".join(_quote(c) for c in cmd))
            print("# run it with MAREKVS_CLUSTER_SECRET set in the environment (the secret is never on the "
                  "command line); the zip is marekvs's package for the executors", file=sys.stderr)
            return EXIT_CONSISTENT
        env = dict(os.environ)
        env["MAREKVS_CLUSTER_SECRET"] = args.cluster_secret  # not on the command line
        env.setdefault("SPARK_HOME", str(Path(submit).parent.parent))
        env.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        rc = subprocess.run(cmd, env=env).returncode
        return rc if rc in (EXIT_CONSISTENT, EXIT_REPAIRED, EXIT_FAILED) else EXIT_FAILED
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)


def _quote(s: str) -> str:
    return s if s and all(c.isalnum() or c in "-_./=:,@+" for c in s) else "'" + s.replace("'", "'\\''") + "'"


# -- marekvs digest ----------------------------------------------------------------------------
def stored_node_id(path: str) -> int:
    """The node id a (stopped node's) data directory is stamped with."""
    from rocksdict import AccessType, Options, Rdict

    if not os.path.isdir(path):
        raise OSError(f"no data directory at {path}")
    cfs = {name: Options(raw_mode=True) for name in Rdict.list_cf(path) if name != "default"}
    db = Rdict(path, Options(raw_mode=True), column_families=cfs, access_type=AccessType.read_only())
    try:
        v = db.get_column_family("meta").get(b"node_id")
    finally:
        db.close()
    if v is None:
        raise OSError(f"{path} is not a marekvs data directory")
    return int(v)


def run_digest(args: argparse.Namespace) -> int:
    if args.data_dir:
        return _digest_offline(args)
    return asyncio.run(_digest_online(args))


def _digest_offline(args: argparse.Namespace) -> int:
    """Every RocksDB directory of the data directory (one process's, or each shard
    worker's ``data_dir/shards/<dir>`` over its range, as the node's shard map names
    them: docs/shards.md §6), checked against its data, reported as one node's."""
    import hashlib

    from marekvs.core import digest as D
    from marekvs.shards import reshard
    from marekvs.storage import digest as SD
    from marekvs.storage.engine import Engine, StorageError

    try:
        layout = reshard.committed(args.data_dir)
        if layout is None:
            raise OSError(f"{args.data_dir} is not a marekvs data directory")
        node_id = stored_node_id(layout.dirs[0])
    except (reshard.Refused, OSError, Exception) as ex:  # RocksDB: locked (node running), missing, corrupt
        print(f"marekvs digest: cannot open {args.data_dir}: {ex}", file=sys.stderr)
        return EXIT_FAILED
    what = f"node {node_id}" + ("" if layout.single else f", {layout.shards} shard workers")
    t = time.perf_counter()
    roots: list[int] = []
    wrong: list[int] = []
    rebuilt = False
    per = D.SEGMENTS
    for r, path in zip(layout.ranges, layout.dirs):
        try:
            e = Engine(path, node_id, durability="always", partitions=r)
        except (StorageError, OSError, Exception) as ex:
            print(f"marekvs digest: cannot open {path}: {ex}", file=sys.stderr)
            return EXIT_FAILED
        try:
            if e.digest.rebuilt_at_open:
                print(f"{path}: kept no digest of its data; rebuilt it from the data")
                rebuilt = True
            actual = SD.computed(e.scan(b""))
            kept = e.digest.segs
            bad = [p for p in range(r.first, r.last + 1)
                   if actual[p * per:(p + 1) * per] != kept[p * per:(p + 1) * per]]
            if bad and args.rebuild:
                e.digest.rebuild(e.scan(b""))
            wrong += bad
            roots += e.digest.roots(r.first, r.count)
        finally:
            e.close()
    took = time.perf_counter() - t
    # what a single process holding the same data prints too: a hash of every partition's root
    summary = hashlib.sha256(D.pack_u64s(roots)).hexdigest()[:16]
    if not wrong:
        print(f"{args.data_dir} ({what}): the kept digest equals the data ({took:.1f}s; partition roots {summary})")
        return EXIT_REPAIRED if rebuilt else EXIT_CONSISTENT
    print(f"{args.data_dir} ({what}): the kept digest differs from the data in {len(wrong)} "
          f"partitions: {', '.join(map(str, wrong[:50]))}{' ...' if len(wrong) > 50 else ''}")
    if args.rebuild:
        print(f"rebuilt from the data (partition roots {summary})")
    return EXIT_REPAIRED


async def _digest_online(args: argparse.Namespace) -> int:
    from marekvs.antientropy import replica as R
    from marekvs.antientropy.remote import GrpcReplica, ReplicaError, tls_config

    config = tls_config(args.cluster_secret, args.cluster_name, args.tls_cert, args.tls_key, args.tls_ca,
                        args.tls_server_name)
    verify = R.VERIFY_CORRECT if args.rebuild else R.VERIFY_CHECK
    rc = EXIT_CONSISTENT
    for addr in args.nodes:
        r = GrpcReplica(addr, config)
        wrong: list[int] = []
        read = 0
        try:
            bar = ProgressBar(f"digest {addr}")
            for lo in range(0, 4096, 128):
                got = await r.roots(lo, 128, verify)
                wrong += got.wrong
                read += got.records_read
                bar(lo + 128, 4096)
        except ReplicaError as e:
            print(f"marekvs digest: {e}", file=sys.stderr)
            return EXIT_FAILED
        finally:
            await r.close()
        if wrong:
            rc = EXIT_REPAIRED
            print(f"node {r.node_id} ({addr}): the kept digest differed from the data in {len(wrong)} partitions"
                  f"{' (corrected)' if args.rebuild else ''}: {', '.join(map(str, wrong[:50]))}")
        else:
            print(f"node {r.node_id} ({addr}): the kept digest equals the data ({read} records read)")
    return rc
