"""A full disk under write load, with a peer attached: nothing is acknowledged or shipped
before it is committed, writes get MISCONF while the disk is full, and the node recovers by
itself once it is not (storage/engine.py ``commit``/``recover``, node/__init__.py
``end_tick``; docs/operations.md, "A full disk").

Node 1's data directory is a small tmpfs of its own (the test mounts it: root only); a
file filling it makes RocksDB's next write fail, as a real full disk does.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.cluster import Cluster, info_section, wait_for

pytestmark = pytest.mark.timeout(300)


def _mount_tmpfs(path, size: str) -> bool:
    if os.geteuid() != 0 or shutil.which("mount") is None:
        return False
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                       capture_output=True)
    return r.returncode == 0


def _fill(path) -> None:
    """Fill the filesystem of ``path`` until it has no byte left (again: the filler grows)."""
    with open(path / "filler", "ab", buffering=0) as f:
        for size in (1 << 20, 4096, 1):
            try:
                while True:
                    f.write(b"\0" * size)
            except OSError as e:
                assert e.errno == errno.ENOSPC, e


class Writer(threading.Thread):
    """SETs w:<i> one after another on node 1, sorting each into acknowledged, refused
    (MISCONF: refused before it ran) or unknown (the connection closed: a write whose
    commit failed is never answered)."""

    def __init__(self, client: redis.Redis):
        super().__init__(daemon=True)
        self.c = client
        self.lock = threading.Lock()
        self.acked: set[int] = set()
        self.refused = 0
        self.unknown: set[int] = set()
        self.inflight = -1
        self.stop = threading.Event()

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            with self.lock:
                self.inflight = i
            try:
                self.c.set(f"w:{i}", "v" * 200)
                with self.lock:
                    self.acked.add(i)
            except redis.ResponseError as e:
                assert str(e).startswith("MISCONF"), e
                with self.lock:
                    self.refused += 1
                time.sleep(0.01)
            except redis.ConnectionError:
                with self.lock:
                    self.unknown.add(i)
                time.sleep(0.01)
            i += 1


def write_status(c) -> str | None:
    """INFO persistence's aof_last_write_status; None when the connection was closed (an
    INFO whose reply waited in the tick whose commit failed: docs/operations.md)."""
    try:
        return info_section(c, "persistence")["aof_last_write_status"]
    except redis.ConnectionError:
        return None


def test_a_full_disk_acknowledges_nothing_ships_nothing_and_recovers(tmp_path):
    c = Cluster(tmp_path, n=2, durability="always", start=False)
    mnt = c[1].data_dir
    if not _mount_tmpfs(mnt, "48m"):
        pytest.skip("needs root and mount(8) for a small tmpfs")
    w = None
    try:
        c.start()
        c.wait_streaming(60)
        n1, n2 = c.client(1), c.client(2)
        # (no client-side retry: a write whose commit failed must go unanswered, not re-sent)
        w = Writer(c.client(1, retry=Retry(NoBackoff(), 0)))
        w.start()
        wait_for(lambda: len(w.acked) >= 200, 60, "writes acknowledged before the disk fills")

        _fill(mnt)
        wait_for(lambda: write_status(n1) == "err", 60,
                 "node 1 saw its storage fail")
        wait_for(lambda: w.refused >= 5, 60, "writes refused with MISCONF")
        assert w.unknown, "the write whose commit failed was answered"
        # a write refused with MISCONF is not made. (On a node of shard workers the probe's
        # worker may not have failed a commit yet, whatever the writer met on the others: then
        # its commit fails, its connection closes, and its outcome is unknown, as the writer's
        # first was; the next probe, a key of its own, meets MISCONF there. A worker's retry
        # reopens its RocksDB, which may delete files and free a few blocks of the shared
        # filesystem: a probe that fits is written and acknowledged, and the filler grows.)
        probe = c.client(1, retry=Retry(NoBackoff(), 0))
        refused = None
        for i in range(20):
            try:
                probe.set(f"probe{i}", "x")
                _fill(mnt)
                continue
            except redis.ConnectionError:
                continue
            except redis.ResponseError as e:
                assert str(e).startswith("MISCONF Errors writing to the AOF file: "), e
                refused = f"probe{i}"
                break
        assert refused is not None and n1.exists(refused) == 0
        with w.lock:
            acked_then = set(w.acked)
            inflight = w.inflight
        assert n1.get(f"w:{min(acked_then)}") == b"v" * 200  # reads are served meanwhile

        # nothing that was not committed reached node 2: every acknowledged write arrives,
        # and nothing else (the writes of the failed commit are still pending on node 1)
        wait_for(lambda: all(v is not None for v in n2.mget([f"w:{i}" for i in sorted(acked_then)])), 60,
                 "node 2 has every write node 1 acknowledged")
        on_node2 = {int(k.split(b":")[1]) for k in n2.scan_iter(match="w:*", count=1000)}
        extra = on_node2 - acked_then - {inflight}
        assert not extra, f"node 2 holds writes node 1 never acknowledged: {sorted(extra)[:10]}"
        assert info_section(n1, "persistence")["aof_last_write_status"] == "err"  # (still failing)

        os.unlink(mnt / "filler")
        wait_for(lambda: write_status(n1) == "ok", 60,
                 "node 1 recovered by itself")
        after = len(w.acked)
        wait_for(lambda: len(w.acked) >= after + 100, 60, "writes acknowledged after the recovery")
        w.stop.set()
        w.join(30)
        assert n1.set("probe", "y") and n1.get("probe") == b"y"
        c.wait_converged(60)
        for cl in (n1, n2):
            got = cl.mget([f"w:{i}" for i in sorted(w.acked)])
            lost = [i for i, v in zip(sorted(w.acked), got) if v is None]
            assert not lost, f"acknowledged writes lost: {lost[:10]}"
        print(f"acknowledged {len(w.acked)}, refused with MISCONF {w.refused}, unanswered {len(w.unknown)}")
    finally:
        if w is not None:
            w.stop.set()
        c.stop()
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
