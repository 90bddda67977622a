"""The PySpark diff-and-repair job with real Spark, against one real three-node cluster
(anti-entropy off in the nodes, so only the job repairs): ``local[*]`` through
``marekvs repair --spark`` (spark-submit), a dry run, a repair under write load on every
node, and once on a standalone Spark cluster (a master and a worker process started from
the pyspark installation, on loopback) through the spark-submit command the CLI prints.

The tests share the cluster and run in order; each makes its own divergence and checks
the cluster healed."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pyspark
import pytest

from marekvs.core.partition import partition_of
from tests.antientropy_helpers import (
    AE_OFF,
    LINKS,
    SECRET,
    Expected,
    check_healed,
    digests_differ,
    drop_partition_records,
    grpc_nodes,
    make_divergences,
    marekvs,
    marekvs_popen,
    with_rocksdb,
)
from tests.cluster import Cluster, Writer, missing_writes, wait_for
from tests.helpers import free_port

pytestmark = pytest.mark.timeout(1800)  # Spark start-up alone took 17-33 s at load 10; a run at load 30 passed 600 s


@pytest.fixture(scope="module", autouse=True)
def java():
    """Spark runs on a JVM: a test machine without one fails here, saying so (``.ci/run``
    installs a headless JRE; pyspark itself is a test dependency)."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        pytest.fail("no Java runtime: Spark needs one (apt-get install default-jre-headless; .ci/run does)")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    with Cluster.with_proxies(tmp_path_factory.mktemp("spark"), LINKS, n=3, extra=AE_OFF) as c:
        yield c


def drop_partition(cluster: Cluster, i: int, key: bytes) -> int:
    """Delete every record of ``key``'s partition from node ``i``'s RocksDB while it is stopped."""
    cluster[i].stop()
    n = with_rocksdb(cluster[i].data_dir, lambda db: drop_partition_records(db, partition_of(key)))
    cluster.start_node(i)
    return n


def repair(cluster: Cluster, tmp: Path, *extra: str) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp / f"report-{time.monotonic_ns()}.json"
    r = marekvs("repair", "--spark", "--nodes", grpc_nodes(cluster), "--tasks", "8", "--json", str(out), *extra)
    report = json.loads(out.read_text()) if out.exists() else {}
    return r, report


def test_spark_job_heals_what_log_shipping_cannot(cluster, tmp_path):
    exp = make_divergences(cluster)
    # from the kept digests: the restored node's and the lost log's differences
    r, rep = repair(cluster, tmp_path, "--settle", "0")
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    assert rep["status"] == "repaired" and rep["spark"]["master"] == "local[*]"
    assert 0 < rep["spark"]["tasks"] <= 8  # ranges whose roots all matched get no task
    assert rep["partitions_compared"] == 4096 and rep["partitions_mismatched"] > 0
    assert rep["records_repaired"].get("3", 0) > 0 and rep["records_repaired"].get("2", 0) > 0
    assert rep["digests_wrong"] == {} and rep["digests_verified"] == 0
    assert rep["bytes_fetched"] > 0 and rep["bytes_pushed"] > 0 and rep["push_batches"] > 0
    assert "status: repaired" in r.stdout and "keys only here" in r.stdout  # the table
    assert "Stage 0:" in r.stderr  # Spark's own progress
    # --verify: every node recomputes its digests from its data, which finds the partition
    # lost behind node 3's back (its kept digest still counts those records)
    r, rep = repair(cluster, tmp_path, "--verify", "--settle", "0")
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    assert rep["spark"]["tasks"] == 8 and rep["digests_verified"] == 3 * 4096
    assert rep["digests_wrong"] == {"3": 1} and list(rep["records_repaired"]) == ["3"]
    assert set(rep["stage_seconds"]) >= {"verify", "segments", "fine", "fetch", "merge", "push"}
    check_healed(cluster, exp)
    r, rep = repair(cluster, tmp_path)
    assert r.returncode == 0 and rep["status"] == "consistent", r.stdout + r.stderr[-3000:]
    assert rep["spark"]["tasks"] == 0 and rep["partitions_matching"] == 4096  # confirmed by the driver alone


def test_spark_dry_run_reports_and_writes_nothing(cluster, tmp_path):
    c2 = cluster.client(2)
    for k in range(300):
        c2.set(b"dry-%d" % k, b"d%d" % k)
    cluster.wait_converged()
    lost = drop_partition(cluster, 2, b"dry-7")
    before = cluster.digests()
    r, rep = repair(cluster, tmp_path, "--verify", "--dry-run", "--settle", "0")
    assert r.returncode == 1, r.stdout + r.stderr[-3000:]
    assert rep["status"] == "differences found (dry run)" and rep["dry_run"] is True
    assert rep["records_to_push"] == {"2": lost} and rep["records_repaired"] == {}
    assert cluster.digests() == before and cluster.client(2).get(b"dry-7") is None
    r, rep = repair(cluster, tmp_path, "--verify", "--settle", "0")
    assert r.returncode == 1 and rep["records_repaired"] == {"2": lost}, r.stdout + r.stderr[-3000:]
    cluster.wait_converged()
    assert cluster.client(2).get(b"dry-7") == b"d7"


def test_spark_repair_under_write_load_loses_nothing(cluster, tmp_path):
    c1 = cluster.client(1)
    exp = Expected()
    for k in range(300):
        exp.set(c1, b"load-%d" % k, b"l%d" % k)
    cluster.wait_converged()
    drop_partition(cluster, 3, b"load-3")
    assert digests_differ(cluster)
    writers = [Writer(cluster, i, f"w{i}") for i in (1, 2, 3)]
    for w in writers:
        w.start()
    for w in writers:
        w.wait_acked(50, what="before the job")
    out = tmp_path / "load.json"
    job = marekvs_popen("repair", "--spark", "--nodes", grpc_nodes(cluster), "--tasks", "8", "--verify",
                        "--json", str(out))
    acked_at_start = [w.n_acked for w in writers]
    stdout, stderr = job.communicate(timeout=1500)
    for w, n in zip(writers, acked_at_start):
        w.wait_more(50, what="after the job")
        assert w.n_acked > n + 50  # writes went on during the job
    for w in writers:
        w.halt()
    assert job.returncode == 1, stdout + stderr[-3000:]
    rep = json.loads(out.read_text())
    assert rep["records_repaired"].get("3", 0) > 0
    check_healed(cluster, exp)
    for w in writers:
        for i in (1, 2, 3):
            assert not missing_writes(cluster, i, w.acked), f"node {i} lost writes of {w.prefix}"


class SparkStandalone:
    """A standalone Spark cluster on loopback: one master and one worker process, started
    from the pyspark installation (``bin/spark-class``) and stopped by their pids."""

    def __init__(self, workdir: Path):
        self.home = Path(pyspark.__file__).resolve().parent
        self.workdir = workdir
        self.port = free_port()
        self.url = f"spark://127.0.0.1:{self.port}"
        self.procs: list[subprocess.Popen] = []
        self.env = {**os.environ, "SPARK_HOME": str(self.home), "SPARK_LOCAL_IP": "127.0.0.1",
                    "SPARK_LOCAL_DIRS": str(workdir / "local")}
        props = workdir / "spark.properties"
        props.write_text("spark.master.rest.enabled false\n")
        self.props = str(props)

    def _start(self, name: str, args: list[str], ready: str) -> None:
        log = self.workdir / f"{name}.log"
        p = subprocess.Popen([str(self.home / "bin" / "spark-class"), *args], env=self.env,
                             stdout=open(log, "wb"), stderr=subprocess.STDOUT)
        self.procs.append(p)
        wait_for(lambda: ready in log.read_text(errors="replace") or p.poll() is not None, 120,
                 lambda: f"spark {name}: {log.read_text(errors='replace')[-2000:]}")
        assert p.poll() is None, log.read_text(errors="replace")[-3000:]

    def start(self) -> SparkStandalone:
        self._start("master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                               str(self.port), "--webui-port", str(free_port()), "--properties-file", self.props],
                    "I have been elected leader")
        self._start("worker", ["org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1", "--cores", "2",
                               "--memory", "1g", "--webui-port", str(free_port()), "--work-dir",
                               str(self.workdir / "work"), "--properties-file", self.props, self.url],
                    "Successfully registered with master")
        return self

    def stop(self) -> None:
        for p in reversed(self.procs):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGTERM)
                try:
                    p.wait(30)
                except subprocess.TimeoutExpired:
                    os.kill(p.pid, signal.SIGKILL)
                    p.wait(10)


def test_spark_job_on_a_standalone_spark_cluster(cluster, tmp_path):
    c1 = cluster.client(1)
    for k in range(300):
        c1.set(b"standalone-%d" % k, b"s%d" % k)
    cluster.wait_converged()
    lost = drop_partition(cluster, 1, b"standalone-9")
    spark = SparkStandalone(tmp_path).start()
    try:
        out = tmp_path / "standalone.json"
        # the command `marekvs repair --spark --print-command` gives, run as it is
        r = marekvs("repair", "--spark", "--master", spark.url, "--nodes", grpc_nodes(cluster), "--tasks", "4",
                    "--verify", "--settle", "0", "--json", str(out), "--print-command")
        assert r.returncode == 0, r.stderr
        cmd = shlex.split(r.stdout.strip().splitlines()[0])
        assert cmd[0].endswith("spark-submit") and cmd[cmd.index("--master") + 1] == spark.url
        job = subprocess.run(cmd, env={**spark.env, "MAREKVS_CLUSTER_SECRET": SECRET}, capture_output=True,
                             text=True, timeout=1500)
        assert job.returncode == 1, job.stdout + job.stderr[-4000:]
        rep = json.loads(out.read_text())
        assert rep["spark"]["master"] == spark.url and rep["records_repaired"] == {"1": lost}
        assert "app-" in (tmp_path / "master.log").read_text()  # the master ran the application
    finally:
        spark.stop()
    cluster.wait_converged()
    assert cluster.client(1).get(b"standalone-9") == b"s9"
