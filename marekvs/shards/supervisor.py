"""The supervisor of a node of several shard workers (docs/shards.md §2, §8;
issue 33, slice 2): ``marekvs serve --shards N`` with N > 1.

The supervisor serves no client and holds no data; its pid is the node's pid (stop it with
SIGTERM as any node). It:

- starts every configuration a single process starts (worker 0 serves the Kafka port, and
  acks=all waits for every worker's log it wrote on, docs/kafka.md; each worker replicates
  its own partitions, docs/shards.md §5; every worker listens on the TLS port too, and
  answers the metrics port for the whole node, ``server/metrics.py``);
- lays out the data directory (``marekvs/shards/reshard.py``, called by ``marekvs serve``
  for every shard count before anything serves): ``data_dir/shards/map`` (the shard count,
  ranges and directories) and one directory per worker, ``data_dir/shards/<first>-<last>/``
  (its own RocksDB); a directory laid out for another count (a single process's, the RocksDB
  files in ``data_dir`` itself, included) is resharded first: its partitions are copied to
  the new workers' directories and the map switched (docs/shards.md §7). ``shards 1`` opens
  a single process's directory unchanged, as before, and reshards a map back into it;
- starts worker i as ``python -m marekvs worker`` (``marekvs/process.py``, ``serve`` with a
  ``Worker``), each with ``PR_SET_PDEATHSIG`` = SIGTERM set before it runs (and it checks that
  its parent is still this supervisor once set), so no worker outlives the supervisor, even
  after a SIGKILL of it;
- with ``grpc_worker_ports contiguous``, refuses to start when a worker's own gRPC port is
  taken (``replication/workers.py``), before any worker starts;
- logs ``listening on <bind>:<port>`` once every worker serves (each writes a byte on a pipe
  when its mesh is linked and its listener open); a worker that exits before that stops the
  node (exit 1);
- restarts a worker that dies afterwards, on its own directory (RocksDB recovery), after a
  delay that doubles while it keeps dying within a few seconds (0.1 s to 5 s); meanwhile its
  siblings answer its partitions with LOADING (``server/mesh.py``);
- on SIGTERM or SIGINT sends SIGTERM to every worker and waits for each (SIGKILL after
  ``_STOP_S``), then exits.

It is a synchronous loop on ``signal.sigtimedwait`` (SIGCHLD, SIGTERM, SIGINT blocked, so
none is lost between two waits), with no event loop and none of the node's modules loaded
(a reshard, before the workers start, loads the storage engine and closes every database
it opened before the first worker starts).
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import logging
import os
import select
import signal
import subprocess
import sys
import time

from marekvs import __version__
from marekvs.config import Config
from marekvs.shards import clients
from marekvs.shards.reshard import Refused, prepare

__all__ = ["Refused", "prepare", "serve", "watch_parent", "worker_config"]

log = logging.getLogger("marekvs.supervisor")

_PR_SET_PDEATHSIG = 1
_STOP_S = 30.0  # a worker that has not stopped this long after SIGTERM is killed
_RESTART_MIN_S, _RESTART_MAX_S, _STABLE_S = 0.1, 5.0, 5.0
_SIGNALS = (signal.SIGCHLD, signal.SIGTERM, signal.SIGINT)


def _child_setup() -> None:
    """In the worker, before it runs: the signals this supervisor blocks are unblocked, and
    the worker gets SIGTERM when the supervisor dies (whatever kills it)."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, _SIGNALS)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0) != 0:
        os._exit(70)


class Supervisor:
    def __init__(self, config: Config, config_file: str | None, dirs: list[str]):
        self.config = config
        self.config_file = config_file
        self.n = config.shards
        self.mesh = f"marekvs-{os.getpid()}-{os.urandom(4).hex()}"
        self.dirs = dirs  # the workers' data directories (``prepare``)
        self.procs: list[subprocess.Popen[bytes] | None] = [None] * self.n
        self.ready_fds: dict[int, int] = {}  # worker -> the read end of its ready pipe
        self.started = [0.0] * self.n
        self.delay = [_RESTART_MIN_S] * self.n
        self.restart_at: dict[int, float] = {}
        self.serving = False

    def spawn(self, i: int) -> None:
        r, w = os.pipe()
        # cache_entries is the node's: each worker keeps its share
        cfg = dataclasses.replace(self.config, data_dir=self.dirs[i],
                                  cache_entries=-(-self.config.cache_entries // self.n))
        argv = [sys.executable, "-m", "marekvs", "worker", "--index", str(i), "--mesh", self.mesh,
                "--ready-fd", str(w), "--parent", str(os.getpid()), "--config-json",
                json.dumps(dataclasses.asdict(cfg))]
        if self.config_file:
            argv += ["--config-file", self.config_file]
        self.procs[i] = subprocess.Popen(argv, pass_fds=(w,), preexec_fn=_child_setup)
        os.close(w)
        self.ready_fds[i] = r
        self.started[i] = time.monotonic()

    def run(self) -> int:
        signal.pthread_sigmask(signal.SIG_BLOCK, _SIGNALS)
        for i in range(self.n):
            self.spawn(i)
        waiting = set(range(self.n))
        while True:
            timeout = 0.2
            if self.restart_at:
                timeout = max(0.0, min(timeout, min(self.restart_at.values()) - time.monotonic()))
            got = signal.sigtimedwait(_SIGNALS, timeout)
            if got is not None and got.si_signo in (signal.SIGTERM, signal.SIGINT):
                log.info("signal %d: stopping the shard workers", got.si_signo)
                self.stop_all()
                return 0
            self._read_ready(waiting)
            if waiting == set() and not self.serving:
                self.serving = True
                c = self.config
                log.info("marekvs %s node %d listening on %s with %d shard workers "
                         "(data %s, durability %s)", __version__, c.node_id, c.listening(), self.n,
                         os.path.abspath(c.data_dir), c.durability)
            for i, p in enumerate(self.procs):
                if p is None or p.poll() is None:
                    continue
                self.procs[i] = None
                fd = self.ready_fds.pop(i, None)
                if fd is not None:
                    os.close(fd)
                if not self.serving:
                    log.critical("shard worker %d exited (%s) before the node served: stopping", i, p.returncode)
                    self.stop_all()
                    return 1
                lived = time.monotonic() - self.started[i]
                self.delay[i] = _RESTART_MIN_S if lived > _STABLE_S else min(self.delay[i] * 2, _RESTART_MAX_S)
                log.warning("shard worker %d (pid %d) exited (%s) after %.1f s; restarting it in %.1f s", i, p.pid,
                            p.returncode, lived, self.delay[i])
                self.restart_at[i] = time.monotonic() + self.delay[i]
            now = time.monotonic()
            for i, at in list(self.restart_at.items()):
                if at <= now:
                    del self.restart_at[i]
                    self.spawn(i)

    def _read_ready(self, waiting: set[int]) -> None:
        fds = list(self.ready_fds.values())
        if not fds:
            return
        readable, _, _ = select.select(fds, [], [], 0)
        for i, fd in list(self.ready_fds.items()):
            if fd in readable:
                os.read(fd, 1)
                os.close(fd)
                del self.ready_fds[i]
                waiting.discard(i)
                if self.serving:
                    log.info("shard worker %d serves again", i)

    def stop_all(self) -> None:
        for p in self.procs:
            if p is not None and p.poll() is None:
                p.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + _STOP_S
        for p in self.procs:
            if p is None:
                continue
            try:
                p.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                log.error("shard worker pid %d did not stop in %.0f s: killing it", p.pid, _STOP_S)
                p.kill()
                p.wait()
        for fd in self.ready_fds.values():
            os.close(fd)
        self.ready_fds.clear()
        log.info("marekvs node %d stopped cleanly (%d shard workers)", self.config.node_id, self.n)


def serve(config: Config, config_file: str | None, dirs: list[str]) -> int:
    """Run a node of ``config.shards`` > 1 workers on ``dirs`` (``prepare``'s) until SIGTERM;
    the exit status."""
    if config.grpc_worker_ports == "contiguous":
        from marekvs.replication.workers import taken_worker_ports  # (loads protobuf: only then)

        taken = taken_worker_ports(config)
        if taken:
            log.critical("grpc_worker_ports contiguous: the gRPC port of shard worker %s (grpc_port + 1 + worker) "
                         "is in use or out of range: not starting", ", ".join(f"{i}: {p}" for i, p in taken))
            return 1
    clients.create(os.path.join(config.data_dir, "shards", clients.CLIENTS_FILE), config.shards)  # (ids, counts: anew)
    return Supervisor(config, config_file, dirs).run()


ORPHAN_GRACE_S = 5.0


def watch_parent(parent: int, grace: float = ORPHAN_GRACE_S) -> None:
    """In a worker: once its supervisor is gone, the SIGTERM of PR_SET_PDEATHSIG gets
    ``grace`` seconds to stop it cleanly; then SIGKILL. A worker whose event loop cannot run
    its signal handler (a script in an endless loop, say) is still never left behind. A
    thread: it runs while the main thread is busy (the Lua hook lets Python threads in)."""
    import threading
    import time

    def run() -> None:
        while os.getppid() == parent:
            time.sleep(0.5)
        time.sleep(grace)
        os.kill(os.getpid(), signal.SIGKILL)

    threading.Thread(target=run, name="orphan-watchdog", daemon=True).start()


def worker_config(text: str) -> Config:
    """The configuration a worker gets from its supervisor (``--config-json``)."""
    cfg = Config(**json.loads(text))
    cfg.validate()
    return cfg
