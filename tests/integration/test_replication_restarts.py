"""Restarts of real nodes, the way operators restart them, with writes on every node after.

The defect these pin: a restarted node whose replication log had been trimmed empty
numbered its log from 1 again, and its peers skipped its new writes for good as already
applied (while INFO showed the links streaming with no lag). The matrix: clean stop
(SIGTERM), SIGKILL, one node or all of them; the log trimmed empty (every peer acked
everything), partly trimmed, or untrimmed because a peer was down. After the restart every
node writes; then all digests agree and every acknowledged write is on every node.

And a node restarted from an older copy of its data directory (taken while it was
stopped): peers have applied log positions the copy does not hold. It must find out at
the handshake, say so, take a new incarnation, get back what it lost, and no write any node
acknowledged after the copy may be lost (only writes that nothing but the restored node
held before the restore are lost: docs/operations.md).
"""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import time

import pytest
import redis

from marekvs.launcher import load_state, port_free, stop_nodes
from tests.cluster import Cluster, info_section, peer_fields
from tests.helpers import ROOT

pytestmark = pytest.mark.timeout(180)


def write(cluster: Cluster, i: int, prefix: str, n: int, acked: dict[bytes, bytes]) -> None:
    """``n`` single-key writes on node ``i`` (each its own log entry), remembered once acked."""
    c = cluster.client(i)
    for k in range(n):
        key, val = b"%s-%d-%d" % (prefix.encode(), i, k), b"v%d-%d" % (i, k)
        assert c.set(key, val)
        acked[key] = val
    c.close()


def wait_until(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = pred()
        if got:
            return got
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def log_bounds(cluster: Cluster, i: int) -> tuple[int, int]:
    info = info_section(cluster.client(i), "replication")
    return int(info["log_first_seq"]), int(info["log_last_seq"])


def trimmed_empty(cluster: Cluster, i: int) -> bool:
    first, last = log_bounds(cluster, i)
    return last > 0 and first == last + 1


def assert_everywhere(cluster: Cluster, acked: dict[bytes, bytes]) -> None:
    keys = list(acked)
    for i in cluster.running():
        c = cluster.client(i)
        got = dict(zip(keys, c.mget(keys)))
        c.close()
        missing = {k: v for k, v in acked.items() if got[k] != v}
        assert not missing, f"node {i} lacks {len(missing)} acknowledged writes, e.g. {list(missing)[:5]}"


def assert_links_truthful(cluster: Cluster) -> None:
    """No link reports streaming with nothing to send while its peer skips what it sends."""
    for i in cluster.running():
        for nid, p in peer_fields(cluster.client(i)).items():
            assert int(p["skipped_entries"]) == 0, (i, nid, p)


def restart(cluster: Cluster, ids: list[int], how: str) -> None:
    for i in ids:
        if how == "sigkill":
            cluster.kill9(i)
        else:
            cluster[i].stop()
    for i in ids:
        cluster.start_node(i)


@pytest.mark.parametrize("how", ["clean", "sigkill"])
@pytest.mark.parametrize("which", ["one", "all"])
@pytest.mark.parametrize("log_state", ["trimmed-empty", "partly-trimmed", "untrimmed"])
def test_restart_matrix_writes_after_restart_reach_every_node(tmp_path, how, which, log_state):
    acked: dict[bytes, bytes] = {}
    with Cluster(tmp_path, n=3) as cluster:
        cluster.wait_streaming()
        if log_state == "untrimmed":
            cluster[3].stop()  # node 3 never acks: nodes 1 and 2 keep every entry
        for i in cluster.running():
            write(cluster, i, "before", 40, acked)
        if log_state == "trimmed-empty":
            cluster.wait_converged()
            wait_until(lambda: all(trimmed_empty(cluster, i) for i in (1, 2, 3)), 30, "every log trimmed empty")
        elif log_state == "partly-trimmed":
            cluster.wait_converged()
            wait_until(lambda: trimmed_empty(cluster, 1), 30, "node 1's log trimmed empty")
            cluster[3].stop()
            write(cluster, 1, "unacked", 15, acked)  # entries node 3 has not acked
            first, last = log_bounds(cluster, 1)
            assert 1 < first <= last, (first, last)
        else:
            first, _ = log_bounds(cluster, 1)
            assert first == 1
        ids = [1] if which == "one" else list(cluster.running())
        restart(cluster, ids, how)
        if 3 not in cluster.running():
            cluster.start_node(3)
        # fewer writes than the peers' high-water marks: reused positions would be skipped
        for i in (1, 2, 3):
            write(cluster, i, "after", 10, acked)
        cluster.wait_converged(timeout=60)
        assert_everywhere(cluster, acked)
        assert_links_truthful(cluster)
        for i in (1, 2, 3):
            first, last = log_bounds(cluster, i)
            assert last >= 10, (i, first, last)


def _cli(*args: str) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, "-m", "marekvs", "cluster", *args], cwd=str(ROOT), env=env,
                          capture_output=True, text=True, timeout=90)


def _free_base(span: int) -> int:
    """``span`` consecutive free ports below the ephemeral range (the launcher counts up)."""
    for _ in range(200):
        b = random.randrange(20000, 32000 - span)
        if all(port_free(b + k) for k in range(span)):
            return b
    raise RuntimeError("no free port range")


def test_cli_cluster_down_up_keeps_replicating(tmp_path):
    """The reproduction of the report, through ``marekvs cluster up/down``."""
    d = tmp_path / "C"
    base = _free_base(8)
    acked: dict[bytes, bytes] = {}
    try:
        r = _cli("up", "--nodes", "3", "--dir", str(d), "--base-port", str(base), "--grpc-base-port", str(base + 4))
        assert r.returncode == 0, r.stdout + r.stderr
        clients = [redis.Redis(port=n.port) for n in load_state(d)["nodes"]]

        def converged() -> bool:
            return len({c.execute_command("DEBUG", "DIGEST") for c in clients}) == 1

        def logs_trimmed_empty() -> bool:
            infos = [info_section(c, "replication") for c in clients]
            return all(int(i["log_first_seq"]) == int(i["log_last_seq"]) + 1 > 1 for i in infos)

        for n, c in enumerate(clients):
            for k in range(30):
                c.set(b"before-%d-%d" % (n, k), b"x")
                acked[b"before-%d-%d" % (n, k)] = b"x"
        wait_until(converged, 30, "digests equal")
        wait_until(logs_trimmed_empty, 30, "every log trimmed empty")
        r = _cli("down", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        r = _cli("up", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        for n, c in enumerate(clients):
            c.set(b"after-%d" % n, b"y")
            acked[b"after-%d" % n] = b"y"
        wait_until(converged, 60, "digests equal after the restart")
        keys = list(acked)
        for c in clients:
            assert c.mget(keys) == [acked[k] for k in keys]
        r = _cli("status", "--dir", str(d), "--json")
        states = {ln["state"] for s in json.loads(r.stdout)["nodes"] for ln in s["links"]}
        assert states == {"streaming"}, r.stdout
    finally:
        if (d / "cluster.json").exists():
            stop_nodes(load_state(d)["nodes"], timeout=5)


def _restore(cluster: Cluster, i: int, backup) -> None:
    cluster[i].stop()
    shutil.rmtree(cluster[i].data_dir)
    shutil.copytree(backup, cluster[i].data_dir)


@pytest.mark.parametrize("peers_up", [True, False], ids=["peers-up", "peers-down-while-it-writes"])
def test_node_restored_from_an_older_copy_takes_a_new_incarnation_and_loses_nothing(tmp_path, peers_up):
    acked: dict[bytes, bytes] = {}
    backup = tmp_path / "backup1"
    with Cluster(tmp_path, n=3) as cluster:
        cluster.wait_streaming()
        for i in (1, 2, 3):
            write(cluster, i, "before", 20, acked)
        cluster.wait_converged()
        cluster[1].stop()
        shutil.copytree(cluster[1].data_dir, backup)  # the copy, taken while node 1 is stopped
        cluster.start_node(1)
        for i in (1, 2, 3):
            write(cluster, i, "mid", 60, acked)  # node 1's mid writes: only peers keep them
        cluster.wait_converged()
        inc_before = int(info_section(cluster.client(1), "replication")["incarnation"])
        _restore(cluster, 1, backup)
        if not peers_up:
            # node 1 comes back alone and writes past the positions its peers applied:
            # a comparison of positions alone would not see anything wrong
            cluster[2].stop()
            cluster[3].stop()
            cluster.start_node(1)
            write(cluster, 1, "alone", 120, acked)
            cluster.start_node(2)
            cluster.start_node(3)
        else:
            cluster.start_node(1)
        for i in (1, 2, 3):
            write(cluster, i, "after", 10, acked)
        cluster.wait_converged(timeout=90)
        assert_everywhere(cluster, acked)
        info = info_section(cluster.client(1), "replication")
        assert int(info["incarnation_changes"]) >= 1
        assert int(info["incarnation"]) != inc_before
        assert "DATA DIRECTORY BEHIND ITS PEERS" in cluster[1].log_text()
        # and it stays converged under more writes after the new incarnation
        for i in (1, 2, 3):
            write(cluster, i, "later", 10, acked)
        cluster.wait_converged(timeout=60)
        assert_everywhere(cluster, acked)
