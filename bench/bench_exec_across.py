#!/usr/bin/env python3
"""What a MULTI/EXEC costs on a node of two shard workers (docs/shards.md §3, §8a).

    .venv/bin/python bench/bench_exec_across.py                 # ~20 s
    .venv/bin/python bench/bench_exec_across.py --n 3000 --repeat 5
    .venv/bin/python bench/bench_exec_across.py --compare /path/to/checkout/before   # before/after

Starts ``marekvs serve --shards 2 --durability no`` in a temporary directory and times,
from one redis-py client on worker 0, ``--n`` transactions one after the other
(``MULTI; SET a v; SET b v; EXEC`` as one pipeline, so one round trip per EXEC from the
client): both keys on worker 0 (a MULTI on one worker: the coordinator runs it alone) or
one key on each worker (a transaction unit: both workers locked, a part carried to
worker 1). Each case runs with keyspace notifications off and on (``KEA``, with a
pattern subscriber on worker 1 reading everything: a transaction's notifications are
delivered by its coordinator in queue order, ``Mesh.deliver_held``). Prints the median
over ``--repeat`` runs of the wall time per EXEC and the CPU time per EXEC of the node's
processes (supervisor and workers, user + system from /proc). With ``--compare ROOT`` a
second node runs the code of another checkout (its ``marekvs/``, built) beside this one,
the runs alternating between the two, so that a loaded machine weighs on both alike.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import redis

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from marekvs.core.partition import ShardMap  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def keys_on(worker: int, n: int) -> list[bytes]:
    shards = ShardMap.even(2)
    out, i = [], 0
    while len(out) < n:
        k = b"bx%d" % i
        if shards.shard_of_key(k) == worker:
            out.append(k)
        i += 1
    return out


def cpu_of(pids: list[int]) -> float:
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total / tick


def node_pids(pid: int) -> list[int]:
    out = [pid]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except OSError:
                pass
    return out


def client_on(port: int, worker: int) -> redis.Redis:
    for _ in range(200):
        c = redis.Redis(port=port, single_connection_client=True)
        if c.client_id() % 2 == worker:
            return c
        c.close()
    raise RuntimeError(f"no connection landed on worker {worker}")


def run(c: redis.Redis, a: bytes, b: bytes, n: int, pids: list[int]) -> tuple[float, float]:
    cpu0, t0 = cpu_of(pids), time.perf_counter()
    for _ in range(n):
        p = c.pipeline(transaction=True)
        p.set(a, b"v")
        p.set(b, b"v")
        p.execute()
    return (time.perf_counter() - t0) / n * 1e6, (cpu_of(pids) - cpu0) / n * 1e6


class Subject:
    """A ``--shards 2`` node started from the checkout at ``root``, a client on worker 0
    and a pattern subscriber on worker 1 (reading everything once notifications are on)."""

    def __init__(self, root: str):
        self.root = root
        self.tmp = tempfile.mkdtemp(prefix="bench-exec-")
        port = self.port = free_port()
        self.proc = subprocess.Popen([sys.executable, "-m", "marekvs", "serve", "--port", str(port), "--grpc-port",
                                      str(free_port()), "--data-dir", os.path.join(self.tmp, "data"), "--shards",
                                      "2", "--durability", "no"], cwd=root, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 60
        while True:
            try:
                redis.Redis(port=port).ping()
                break
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    raise RuntimeError(f"the node of {root} did not start") from None
                time.sleep(0.1)
        time.sleep(0.5)
        self.pids = node_pids(self.proc.pid)
        self.c = client_on(port, 0)
        self.ps = client_on(port, 1).pubsub()
        self.stop_reading = threading.Event()

    def notify(self) -> None:
        self.c.config_set("notify-keyspace-events", "KEA")
        self.ps.psubscribe("__key*__:*")

        def drain() -> None:
            while not self.stop_reading.is_set():
                self.ps.get_message(timeout=0.1)
        threading.Thread(target=drain, daemon=True).start()

    def close(self) -> None:
        self.stop_reading.set()
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        shutil.rmtree(self.tmp, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--compare", metavar="ROOT", help="another checkout (the code before a change): its node "
                    "runs beside this one's, the runs alternating, and its figures are printed beside")
    args = ap.parse_args()
    roots = [ROOT] + ([os.path.abspath(args.compare)] if args.compare else [])
    subjects: list[Subject] = []
    try:
        for root in roots:
            subjects.append(Subject(root))
        a0, a1 = keys_on(0, 2)
        b0 = keys_on(1, 1)[0]
        head = "".join(f" {'wall ' + str(k):>10} {'CPU ' + str(k):>9}" for k in range(len(roots)))
        print("us per EXEC, median of runs; " + ", ".join(f"{k}: {r}" for k, r in enumerate(roots)))
        print(f"{'case':<42}{head}")
        for notify in (False, True):
            if notify:
                for sub in subjects:
                    sub.notify()
            for name, (a, b) in (("one worker (SET a0 a1)", (a0, a1)), ("two workers (SET a0 b0)", (a0, b0))):
                for sub in subjects:
                    run(sub.c, a, b, 200, sub.pids)  # (warm)
                got: list[list[tuple[float, float]]] = [[] for _ in subjects]
                for _ in range(args.repeat):
                    for k, sub in enumerate(subjects):
                        got[k].append(run(sub.c, a, b, args.n, sub.pids))
                cells = "".join(f" {statistics.median(g[0] for g in gs):>10.0f}"
                                f" {statistics.median(g[1] for g in gs):>9.0f}"
                                for gs in got)
                print(f"{name + (', notifications' if notify else ''):<42}{cells}")
    finally:
        for sub in subjects:
            sub.close()


if __name__ == "__main__":
    main()
