#!/usr/bin/env python3
"""Single-node benchmark: marekvs against a stock redis-server, with redis-benchmark.

Run it with ``make bench`` (or ``.venv/bin/python bench/bench_single.py``). In one run it

1. starts a stock ``redis-server`` (``--appendonly yes --appendfsync everysec --save ""``,
   temp dir, free 127.0.0.1 port), prefills a 100k-key space, runs redis-benchmark for
   every (pipeline depth, test), and stops it;
2. does the same with a marekvs node (``--durability everysec``, temp data dir);
3. prints a table (requests/s, ratio, p50/p99 latency, server CPU) with the geometric
   mean ratio per pipeline depth and the targets marked PASS/FAIL, and writes
   everything as JSON to ``bench/results/single-<timestamp>.json``.

The servers run one at a time so they never compete for the machine's 2 cores. Each
measured run is sized to take about ``--seconds`` seconds (a short probe run measures
the rate first and doubles as a warm-up) unless ``--requests N`` fixes N.

Targets (issue 2): pipeline 1: geomean >= 0.6x of Redis and no row < 0.4x;
pipeline 16: geomean >= 0.4x and no row < 0.25x.

TLS: ``--tls`` gives both servers a TLS port beside their plaintext one (a throwaway CA and
certificates from ``marekvs certs``'s code; client certificates required, as both default to)
and benchmarks every row on both ports of both servers, redis-benchmark with ``--tls --cacert
--cert --key`` on the TLS ports; the TLS table puts each server's TLS rate beside its
plaintext rate, and marekvs's beside Redis's over TLS. Its rows default to SET and GET.

Profiling: ``--profile`` runs the marekvs node under ``py-spy record`` for the whole run
(flamegraph at bench/results/profile.svg); ``--profile-during set:16,get:1`` attaches
``py-spy record --pid`` to the node during those measured runs only and prints a
summary of where the time goes (see bench/profile_summary.py). Numbers measured while
py-spy samples the node are slower than normal: compare unprofiled runs.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import io
import json
import math
import os
import platform
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from typing import Any

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RESULTS = os.path.join(HERE, "results")

PIPELINES = (1, 16)


@dataclass(frozen=True)
class Workload:
    """One benchmarked row. ``command`` is None for a redis-benchmark built-in test (``-t
    name``); otherwise the command redis-benchmark sends (``__rand_int__`` is replaced by a
    random number below --keyspace, as with -r). ``probe`` must answer without an error on a
    server that supports the row; ``setup`` runs once after the prefill (e.g. fill a
    collection that the row reads); ``cleanup`` names keys the probe wrote."""

    command: tuple[str, ...] | None = None
    probe: tuple[bytes, ...] = ()
    setup: tuple[tuple[bytes, ...], ...] = ()
    cleanup: tuple[bytes, ...] = ()
    weight: int = 1  # probe runs are 1/weight as long (MSET: 10 keys a request)
    # a client of its own instead of redis-benchmark (a script in bench/ taking
    # redis-benchmark's -p -c -n -P -d --csv and printing its CSV): for a row that must
    # use what one reply says in the next command
    driver: str | None = None


def _fill(cmd: bytes, key: bytes, prefix: bytes, value: bytes | None = None, n: int = 100_000,
          per_command: int = 1000) -> tuple[tuple[bytes, ...], ...]:
    """Setup commands that give ``key`` the members ``<prefix>%012d`` for 0 <= i < n (the
    names redis-benchmark's __rand_int__ makes with -r n), ``per_command`` at a time."""
    out = []
    for first in range(0, n, per_command):
        args: list[bytes] = [cmd, key]
        for i in range(first, min(n, first + per_command)):
            args.append(b"%s%012d" % (prefix, i))
            if value is not None:
                args.append(value)
        out.append(tuple(args))
    return tuple(out)

ZSET_MEMBERS = 100_000
ZSET_SETUP = tuple(
    (b"ZADD", b"myzset", *[x for i in range(start, start + 10_000) for x in (b"%d" % i, b"element:%012d" % i)])
    for start in range(0, ZSET_MEMBERS, 10_000))

# -- scripting and transactions -------------------------------------------------------------
# A rate limiter: INCR a counter, give it a TTL when it is new, refuse past the limit.
RATE_LIMITER = (b"local n = redis.call('INCR', KEYS[1]) "
                b"if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end "
                b"if n > tonumber(ARGV[1]) then return 0 end return 1")
RATE_LIMITER_SHA = hashlib.sha1(RATE_LIMITER).hexdigest()
# A transfer between two counters (a script with two declared keys): on a node of two shard
# workers (--marekvs-arg=--shards=2) evalsha2 names two keys of one worker (a hash tag), and
# evalsha2x a key of each (docs/shards.md §3: both workers locked, one call carried)
TRANSFER = b"redis.call('INCRBY', KEYS[1], 1) return redis.call('DECRBY', KEYS[2], 1)"
TRANSFER_SHA = hashlib.sha1(TRANSFER).hexdigest()


def _key_of_worker(worker: int, prefix: str) -> str:
    """The first ``prefix<n>`` on ``worker`` of a node of two shard workers."""
    from marekvs.core.partition import ShardMap, partition_of

    owner = ShardMap.even(2).owner
    return next(f"{prefix}{i}" for i in range(1000) if owner[partition_of(f"{prefix}{i}".encode())] == worker)

# The rows of `make bench`, in order. A data-type family adds its rows here; the default
# run measures every row (`--tests` picks some).
WORKLOADS: dict[str, Workload] = {
    "set": Workload(probe=(b"SET", b"bench:probe", b"v"), cleanup=(b"bench:probe",)),
    "get": Workload(probe=(b"GET", b"bench:probe")),
    "incr": Workload(probe=(b"INCR", b"bench:probe:ctr"), cleanup=(b"bench:probe:ctr",)),
    "mset": Workload(probe=(b"MSET", b"bench:probe:a", b"1", b"bench:probe:b", b"2"),
                     cleanup=(b"bench:probe:a", b"bench:probe:b"), weight=4),
    # -- hashes and sets (hashes-sets): one collection of the --keyspace default's 100k
    # members (the names __rand_int__ makes), read by HGET/SISMEMBER; HSET and SADD write
    # another one, new members first, then overwrites and re-adds
    "hset": Workload(command=("HSET", "myhash", "field:__rand_int__", "v"),
                     probe=(b"HSET", b"bench:probe:h", b"f", b"v"), cleanup=(b"bench:probe:h",)),
    "hget": Workload(command=("HGET", "bench:hash", "field:__rand_int__"),
                     probe=(b"HGET", b"bench:probe:h", b"f"), setup=_fill(b"HSET", b"bench:hash", b"field:", b"v")),
    "sadd": Workload(command=("SADD", "myset", "member:__rand_int__"),
                     probe=(b"SADD", b"bench:probe:s", b"m"), cleanup=(b"bench:probe:s",)),
    "sismember": Workload(command=("SISMEMBER", "bench:set", "member:__rand_int__"),
                          probe=(b"SISMEMBER", b"bench:probe:s", b"m"),
                          setup=_fill(b"SADD", b"bench:set", b"member:")),
    # -- lists: redis-benchmark's LPUSH mylist / RPOP mylist, and LRANGE mylist 0 99 (its
    # lrange_100 without the LPUSH run it makes first). LRANGE runs between LPUSH and RPOP
    # (which may empty mylist) and its setup puts 1000 elements there for a run of its own.
    "lpush": Workload(probe=(b"LPUSH", b"bench:probe:list", b"v"), cleanup=(b"bench:probe:list",)),
    "lrange": Workload(command=("LRANGE", "mylist", "0", "99"), probe=(b"LRANGE", b"mylist", b"0", b"99"),
                       setup=tuple((b"RPUSH", b"mylist", *[b"%064d" % (i * 100 + j) for j in range(100)])
                                   for i in range(10))),
    "rpop": Workload(probe=(b"RPOP", b"bench:probe:list")),
    # -- sorted sets: one zset "myzset" of 100k members element:%012d (redis-benchmark's zadd test
    # names them so), prefilled by the setup; the zadd row changes their scores at random
    "zadd": Workload(probe=(b"ZADD", b"bench:probe:z", b"1", b"m"), cleanup=(b"bench:probe:z",)),
    "zrange": Workload(command=("ZRANGE", "myzset", "0", "99"), probe=(b"ZRANGE", b"bench:probe:z", b"0", b"99"),
                       setup=ZSET_SETUP),
    "zrank": Workload(command=("ZRANK", "myzset", "element:__rand_int__"),
                      probe=(b"ZRANK", b"bench:probe:z", b"m"), setup=ZSET_SETUP),
    # -- DUMP and SORT (dumpsort): DUMP of the prefilled string keys (64-byte values); SORT of
    # a 100-number list. (redis-benchmark cannot send RESTORE: every payload holds NUL bytes,
    # and it takes its arguments from argv.)
    "dump": Workload(command=("DUMP", "key:__rand_int__"), probe=(b"DUMP", b"bench:probe")),
    "sort": Workload(command=("SORT", "bench:sort"), probe=(b"SORT", b"bench:sort"),
                     setup=((b"RPUSH", b"bench:sort", *[b"%d" % ((i * 7919) % 1000) for i in range(100)]),)),
    # scripting: EVALSHA of the rate limiter (SCRIPT LOAD first; the probe's EVAL caches it too)
    "evalsha": Workload(command=("EVALSHA", RATE_LIMITER_SHA, "1", "rl:__rand_int__", "100", "60"),
                        probe=(b"EVAL", RATE_LIMITER, b"1", b"bench:probe:rl", b"100", b"60"),
                        setup=((b"SCRIPT", b"LOAD", RATE_LIMITER),), cleanup=(b"bench:probe:rl",)),
    "evalsha2": Workload(command=("EVALSHA", TRANSFER_SHA, "2", "bench:tr:{t}a", "bench:tr:{t}b"),
                         probe=(b"EVAL", TRANSFER, b"2", b"bench:probe:{t}a", b"bench:probe:{t}b"),
                         setup=((b"SCRIPT", b"LOAD", TRANSFER),),
                         cleanup=(b"bench:probe:{t}a", b"bench:probe:{t}b")),
    "evalsha2x": Workload(command=("EVALSHA", TRANSFER_SHA, "2", _key_of_worker(0, "bench:tr:"),
                                   _key_of_worker(1, "bench:tr:")),
                          probe=(b"EVAL", TRANSFER, b"2", _key_of_worker(0, "bench:probe:tr").encode(),
                                 _key_of_worker(1, "bench:probe:tr").encode()),
                          setup=((b"SCRIPT", b"LOAD", TRANSFER),),
                          cleanup=(_key_of_worker(0, "bench:probe:tr").encode(),
                                   _key_of_worker(1, "bench:probe:tr").encode())),
    # transactions: MULTI, three SETs, EXEC, pipelined (its own client, bench/multi_exec.py)
    "multi": Workload(probe=(b"MULTI",), driver="multi_exec.py", weight=4),
    # HyperLogLog: PFADD of one random element (of --keyspace) to one HLL; PFCOUNT of an HLL
    # of 10k elements (+ what the PFADD rows added), which a PFADD row may have changed
    "pfadd": Workload(command=("PFADD", "bench:hll", "ele:__rand_int__"),
                      probe=(b"PFADD", b"bench:probe:hll", b"x"), cleanup=(b"bench:probe:hll",)),
    "pfcount": Workload(command=("PFCOUNT", "bench:hll"), probe=(b"PFCOUNT", b"bench:probe:hll"),
                        setup=tuple((b"PFADD", b"bench:hll", *(b"seed:%d" % i for i in range(j, j + 1000)))
                                    for j in range(0, 10_000, 1000))),
    # Bitmaps. SETBIT sets bit 1000 of a random bitmap of --keyspace (a 126-byte string
    # each, created by the first SETBIT; a repeat changes nothing and writes nothing, on both
    # servers): redis-benchmark writes __rand_int__ zero padded to 12 digits, which no bit
    # offset parser accepts, so the random part is the key. BITCOUNT counts a whole bitmap of
    # 100,000 bits (12.5 KB, written by the setup). A bitmap is a string register: a SETBIT
    # that changes a bit writes (and logs) the whole value
    "setbit": Workload(command=("SETBIT", "bench:bitmap:__rand_int__", "1000", "1"),
                       probe=(b"SETBIT", b"bench:probe:bitmap", b"7", b"1"), cleanup=(b"bench:probe:bitmap",)),
    "bitcount": Workload(command=("BITCOUNT", "bench:bitmap"), probe=(b"BITCOUNT", b"bench:probe:bitmap"),
                         setup=((b"SETBIT", b"bench:bitmap", b"99999", b"1"),
                                (b"BITFIELD", b"bench:bitmap", *(x for i in range(0, 99_000, 997)
                                                                 for x in (b"SET", b"u8", b"%d" % i, b"165"))))),
    # -- streams: XADD to one growing stream; XRANGE of the first 10 entries of a stream of
    # 1000; XREADGROUP+XACK: consumers reading one entry and acknowledging it (its own
    # client, bench/xreadgroup_ack.py: redis-benchmark cannot ack the id it read)
    "xadd": Workload(command=("XADD", "mystream", "*", "field", "__rand_int__"),
                     probe=(b"XADD", b"bench:probe:x", b"*", b"f", b"v"), cleanup=(b"bench:probe:x",)),
    "xrange": Workload(command=("XRANGE", "bench:xrange", "-", "+", "COUNT", "10"),
                       probe=(b"XRANGE", b"bench:xrange", b"-", b"+", b"COUNT", b"10"),
                       setup=tuple((b"XADD", b"bench:xrange", b"*", b"field", b"%064d" % i) for i in range(1000))),
    "xreadgroup+xack": Workload(driver="xreadgroup_ack.py",
                                probe=(b"XGROUP", b"CREATE", b"bench:probe:xg", b"g", b"$", b"MKSTREAM"),
                                cleanup=(b"bench:probe:xg",)),
}
TESTS = tuple(WORKLOADS)
TARGETS = {  # pipeline -> (min geomean ratio, min row ratio)
    1: (0.6, 0.4),
    16: (0.4, 0.25),
}
CLK_TCK = os.sysconf("SC_CLK_TCK")


# -- small helpers -------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port_pair(offset: int = 10000) -> int:
    """A free port P with P + offset free too (marekvs's gRPC port defaults to RESP + 10000)."""
    for _ in range(200):
        p = free_port()
        if p + offset < 65536 and port_free(p + offset):
            return p
        p = 20000 + (p % 30000)
        if port_free(p) and port_free(p + offset):
            return p
    raise RuntimeError("no free port pair found")


def proc_cpu_seconds(pid: int) -> float | None:
    """utime + stime of a process (all its threads), in seconds."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields_ = stat[stat.rindex(")") + 2:].split()
    return (int(fields_[11]) + int(fields_[12])) / CLK_TCK


def tree_cpu_seconds(pid: int) -> float | None:
    """``proc_cpu_seconds`` of ``pid`` and of every process under it: a node of several
    shard workers (``--shards N``) is a supervisor and its workers, all counted."""
    own = proc_cpu_seconds(pid)
    if own is None:
        return None
    return own + sum(tree_cpu_seconds(c) or 0.0 for c in child_pids(pid))


def children_cpu_seconds() -> float:
    ru = resource.getrusage(resource.RUSAGE_CHILDREN)
    return ru.ru_utime + ru.ru_stime


def child_pids(pid: int) -> list[int]:
    out: list[int] = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{tid}/children") as f:
                    out.extend(int(x) for x in f.read().split())
            except OSError:
                pass
    except OSError:
        pass
    return out


def which_or_die(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        sys.exit(f"bench: {name} not found on PATH (apt-get install redis-tools redis-server)")
    return path


def py_spy_path(install: bool = True) -> str | None:
    """py-spy from the venv (installed with pip if missing) or PATH."""
    cand = os.path.join(os.path.dirname(sys.executable), "py-spy")
    if os.path.exists(cand):
        return cand
    if shutil.which("py-spy"):
        return shutil.which("py-spy")
    if install:
        print("bench: py-spy missing; installing it with pip ...", flush=True)
        r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "py-spy"], check=False)
        if r.returncode == 0 and os.path.exists(cand):
            return cand
    return None


def ping(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
            s.sendall(b"*1\r\n$4\r\nPING\r\n")
            return s.recv(64).startswith(b"+PONG")
    except OSError:
        return False


def resp_cmd(port: int, *args: bytes, timeout: float = 5.0) -> bytes:
    """Send one command, return the raw first reply chunk (enough for small replies)."""
    req = b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        s.sendall(req)
        return s.recv(65536)


# -- servers -------------------------------------------------------------------------------

class ServerProc:
    """One server process we started; stopped by its own pid."""

    def __init__(self, name: str, argv: list[str], port: int, workdir: str, cwd: str | None = None,
                 wrapped: bool = False):
        self.name = name
        self.argv = argv
        self.port = port
        self.workdir = workdir
        self.cwd = cwd
        self.wrapped = wrapped  # argv[0] is py-spy; the server is its child
        self.proc: subprocess.Popen | None = None
        self.log_path = os.path.join(workdir, f"{name}.log")
        self._log = None
        self.tls: list[str] = []  # redis-benchmark's TLS flags (a TlsEndpoint's; none in the clear)

    @property
    def pid(self) -> int | None:
        """pid of the server itself (the python child when wrapped by py-spy)."""
        if self.proc is None:
            return None
        if self.wrapped:
            kids = child_pids(self.proc.pid)
            return kids[0] if kids else None
        return self.proc.pid

    def start(self, ready_timeout: float = 60.0) -> None:
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - lives as long as the server
        # own session: a Ctrl-C in the terminal reaches only us; we stop the server.
        self.proc = subprocess.Popen(self.argv, cwd=self.cwd, stdout=self._log, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True)
        deadline = time.monotonic() + ready_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode} during start-up; "
                                   f"log:\n{self.tail_log()}")
            if ping(self.port):
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name} not answering PING on port {self.port} after {ready_timeout}s; "
                           f"log:\n{self.tail_log()}")

    def tail_log(self, n: int = 30) -> str:
        try:
            with open(self.log_path, "rb") as f:
                return b"\n".join(f.read().splitlines()[-n:]).decode("utf-8", "replace")
        except OSError:
            return "(no log)"

    def stop(self, timeout: float = 20.0) -> None:
        p = self.proc
        if p is None:
            return
        if p.poll() is None:
            target = self.pid if self.wrapped else p.pid
            if target is None:  # wrapper without child: stop the wrapper itself
                target = p.pid
            try:
                os.kill(target, signal.SIGTERM)
            except ProcessLookupError:
                pass
            try:
                p.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                print(f"bench: {self.name} (pid {p.pid}) did not stop in {timeout}s; SIGKILL",
                      file=sys.stderr)
                for pid in ([target, p.pid] if target != p.pid else [p.pid]):
                    try:
                        os.kill(pid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                p.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        self.proc = None


class TlsEndpoint:
    """The TLS port of a server we started (``--tls``), benchmarked as a server of its own
    named ``<server>+tls``: the same process (pid, CPU), redis-benchmark with TLS flags."""

    def __init__(self, srv: ServerProc, port: int, flags: list[str]):
        self.srv, self.name, self.port, self.tls = srv, srv.name + "+tls", port, flags

    @property
    def pid(self) -> int | None:
        return self.srv.pid


def tls_files(workdir: str) -> tuple[list[str], list[str]]:
    """A throwaway CA, a server and a client certificate (``launcher/certs.py``): the
    servers' TLS flags (the same names for redis-server and marekvs) and redis-benchmark's."""
    sys.path.insert(0, ROOT)
    from marekvs.launcher.certs import make_pki

    d = make_pki(__import__("pathlib").Path(workdir) / "tls", ["server"], ["client"])
    server = ["--tls-cert-file", str(d / "server.pem"), "--tls-key-file", str(d / "server.key"),
              "--tls-ca-cert-file", str(d / "ca.pem")]
    client = ["--tls", "--cacert", str(d / "ca.pem"), "--cert", str(d / "client.pem"), "--key", str(d / "client.key")]
    return server, client


def redis_server_proc(port: int, workdir: str, extra: list[str] | None = None) -> ServerProc:
    d = os.path.join(workdir, "redis")
    os.makedirs(d, exist_ok=True)
    argv = [which_or_die("redis-server"), "--port", str(port), "--bind", "127.0.0.1",
            "--dir", d, "--appendonly", "yes", "--appendfsync", "everysec", "--save", "",
            "--daemonize", "no", "--protected-mode", "no", "--logfile", "", *(extra or [])]
    return ServerProc("redis", argv, port, workdir)


def marekvs_proc(port: int, workdir: str, profile_out: str | None, profile_format: str,
                 profile_rate: int, extra: list[str]) -> ServerProc:
    d = os.path.join(workdir, "marekvs-data")
    argv = [sys.executable, "-m", "marekvs", "serve", "--port", str(port), "--data-dir", d,
            "--durability", "everysec", "--log-level", "warning", *extra]
    # one process, as the figures in bench/README.md, unless asked (a node's default is auto)
    if not any(a.split("=")[0] == "--shards" for a in extra):
        argv += ["--shards", "1"]
    wrapped = False
    if profile_out:
        spy = py_spy_path()
        if spy is None:
            sys.exit("bench: --profile needs py-spy (pip install py-spy)")
        argv = [spy, "record", "-o", profile_out, "--format", profile_format, "--rate", str(profile_rate),
                "--", *argv]
        wrapped = True
    return ServerProc("marekvs", argv, port, workdir, cwd=ROOT, wrapped=wrapped)


def floor_proc(port: int, workdir: str, model: str) -> ServerProc:
    """``bench/floor_server.py`` in marekvs's place (its column in the table): what the
    stack itself allows, with (``data``) or without (``bare``) the data model's work."""
    argv = [sys.executable, os.path.join(ROOT, "bench", "floor_server.py"), "--port", str(port),
            "--data-dir", os.path.join(workdir, "floor-data"), "--model", model]
    return ServerProc("marekvs", argv, port, workdir, cwd=ROOT)


# -- workload ------------------------------------------------------------------------------

def prefill(port: int, keyspace: int, size: int) -> dict[str, Any]:
    """SET key:%012d (the names redis-benchmark's -r generates) for the whole key space."""
    t0 = time.monotonic()
    value = b"x" * size
    chunks = []
    for i in range(keyspace):
        k = b"key:%012d" % i
        chunks.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, size, value))
    payload = b"".join(chunks)
    r = subprocess.run([which_or_die("redis-cli"), "-h", "127.0.0.1", "-p", str(port), "--pipe"],
                       input=payload, capture_output=True, timeout=600, check=False)
    out = (r.stdout + r.stderr).decode("utf-8", "replace")
    errors = None
    for line in out.splitlines():
        if line.startswith("errors:"):
            try:
                errors = int(line.split(",")[0].split(":")[1])
            except (IndexError, ValueError):
                pass
    ok = r.returncode == 0 and errors == 0
    if not ok:
        # fall back on redis-benchmark (covers ~86% of the key space with -n 2x)
        print(f"bench: redis-cli --pipe prefill failed (rc {r.returncode}): {out.strip()[-300:]}; "
              "falling back on redis-benchmark", file=sys.stderr)
        subprocess.run([which_or_die("redis-benchmark"), "-h", "127.0.0.1", "-p", str(port), "-c", "50",
                        "-n", str(2 * keyspace), "-r", str(keyspace), "-d", str(size), "-P", "16",
                        "-t", "set", "-q"], capture_output=True, timeout=600, check=False)
    return {"seconds": round(time.monotonic() - t0, 2), "method": "redis-cli --pipe" if ok else
            "redis-benchmark", "keys": keyspace}


def supports(port: int, tests: list[str]) -> dict[str, str | None]:
    """Which benchmarked rows the server answers without an error (None = fine)."""
    out: dict[str, str | None] = {}
    cleanup: list[bytes] = []
    for t in tests:
        w = WORKLOADS[t]
        cleanup += w.cleanup
        try:
            r = resp_cmd(port, *w.probe)
            out[t] = r.decode("utf-8", "replace").strip() if r.startswith(b"-") or not r else None
        except OSError as e:
            out[t] = f"{type(e).__name__}: {e}"
    if cleanup:
        try:
            resp_cmd(port, b"DEL", *cleanup)
        except OSError:
            pass
    return out


def run_setup(port: int, tests: list[str]) -> None:
    """Each row's setup commands (after the prefill), sent as one pipeline through redis-cli."""
    cmds = [c for t in tests for c in WORKLOADS[t].setup]
    if not cmds:
        return
    payload = b"".join(b"*%d\r\n" % len(c) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in c) for c in cmds)
    subprocess.run([which_or_die("redis-cli"), "-h", "127.0.0.1", "-p", str(port), "--pipe"],
                   input=payload, capture_output=True, timeout=600, check=False)


@dataclass
class Run:
    server: str
    test: str
    pipeline: int
    requests: int
    rps: float = 0.0
    avg_ms: float = 0.0
    p50_ms: float = 0.0
    p95_ms: float = 0.0
    p99_ms: float = 0.0
    max_ms: float = 0.0
    seconds: float = 0.0
    server_cpu: float | None = None  # server CPU seconds / wall seconds (1.0 = one core busy)
    server_us_per_op: float | None = None  # server CPU microseconds per request (contention-robust)
    client_cpu: float | None = None
    errors: int = 0
    error: str | None = None
    command: str = ""
    profile: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


def parse_csv(text: str) -> dict[str, dict[str, float]]:
    """redis-benchmark 7.0 --csv -> {"SET": {"rps": .., "p50_latency_ms": .., ...}}."""
    rows: dict[str, dict[str, float]] = {}
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    for rec in csv.DictReader(io.StringIO("\n".join(lines))):
        name = rec.get("test", "").split(" (")[0].strip().upper()  # "MSET (10 keys)" -> MSET
        try:
            rows[name] = {k: float(v) for k, v in rec.items() if k != "test"}
        except (TypeError, ValueError):
            continue
    return rows


def bench_cmd(port: int, test: str, pipeline: int, n: int, clients: int, keyspace: int,
              size: int, tls: list[str] | None = None) -> list[str]:
    base = [which_or_die("redis-benchmark"), "-h", "127.0.0.1", "-p", str(port), *(tls or []), "-c", str(clients),
            "-n", str(n), "-r", str(keyspace), "-d", str(size), "-P", str(pipeline), "--csv"]
    w = WORKLOADS[test]
    if w.driver is not None:
        return [sys.executable, os.path.join(HERE, w.driver), "-p", str(port), "-c", str(clients), "-n", str(n),
                "-P", str(pipeline), "-d", str(size), "-r", str(keyspace), "--csv"]
    return base + (["-t", test] if w.command is None else list(w.command))


def csv_name(test: str) -> str:
    """The row name redis-benchmark's CSV gives ``test`` (its command line for a command)."""
    w = WORKLOADS[test]
    return test.upper() if w.command is None else " ".join(w.command).upper()  # (a driver's: its own)


def run_one(srv: ServerProc, server_name: str, test: str, pipeline: int, n: int, args: argparse.Namespace,
            timeout: float, profile_out: str | None = None) -> Run:
    cmd = bench_cmd(srv.port, test, pipeline, n, args.clients, args.keyspace, args.size, srv.tls)
    w = WORKLOADS[test]
    shown = ["redis-benchmark"] + cmd[1:] if w.driver is None else [f"bench/{w.driver}"] + cmd[2:]
    run = Run(server_name, test, pipeline, n, command=" ".join(shown))
    pid = srv.pid
    spy = None
    if profile_out and pid is not None:
        spy_bin = py_spy_path()
        if spy_bin is not None:
            fmt = "raw" if profile_out.endswith(".txt") else "flamegraph"
            spy = subprocess.Popen([spy_bin, "record", "--pid", str(pid), "-o", profile_out, "--format", fmt,
                                    "--rate", str(args.profile_rate), "--nonblocking"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True)
            time.sleep(0.5)  # let it attach
            run.profile = profile_out
    cpu0 = tree_cpu_seconds(pid) if pid else None
    ccpu0 = children_cpu_seconds()
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, timeout=timeout, start_new_session=True, check=False)
    except subprocess.TimeoutExpired:
        run.error = f"redis-benchmark timed out after {timeout:.0f}s"
        return run
    finally:
        if spy is not None:
            try:
                os.kill(spy.pid, signal.SIGINT)  # py-spy writes its output on SIGINT
                _, err = spy.communicate(timeout=30)
                if spy.returncode not in (0, None) and err:
                    print(f"bench: py-spy: {err.decode('utf-8', 'replace').strip()[-300:]}", file=sys.stderr)
            except (ProcessLookupError, subprocess.TimeoutExpired):
                os.kill(spy.pid, signal.SIGKILL)
                spy.wait()
    wall = time.monotonic() - t0
    cpu1 = tree_cpu_seconds(pid) if pid else None
    run.seconds = round(wall, 2)
    if cpu0 is not None and cpu1 is not None and wall > 0:
        run.server_cpu = round((cpu1 - cpu0) / wall, 2)
        run.server_us_per_op = round((cpu1 - cpu0) * 1e6 / n, 2) if n else None
    run.client_cpu = round((children_cpu_seconds() - ccpu0) / wall, 2) if wall > 0 else None
    stderr = r.stderr.decode("utf-8", "replace")
    stdout = r.stdout.decode("utf-8", "replace")
    run.errors = stderr.count("Error from server") + stdout.count("Error from server")
    rows = parse_csv(stdout)
    row = rows.get(csv_name(test)) or (next(iter(rows.values())) if len(rows) == 1 else None)
    if r.returncode != 0 or row is None:
        run.error = f"redis-benchmark rc {r.returncode}: {(stderr or stdout).strip()[-300:]}"
        return run
    if run.errors:
        first = next((ln for ln in (stderr + stdout).splitlines() if "Error from server" in ln), "")
        run.error = f"{run.errors} error replies, e.g. {first.strip()[:200]}"
    run.rps = row["rps"]
    run.avg_ms = row.get("avg_latency_ms", 0.0)
    run.p50_ms = row.get("p50_latency_ms", 0.0)
    run.p95_ms = row.get("p95_latency_ms", 0.0)
    run.p99_ms = row.get("p99_latency_ms", 0.0)
    run.max_ms = row.get("max_latency_ms", 0.0)
    return run


def size_run(srv: ServerProc, test: str, pipeline: int, args: argparse.Namespace) -> tuple[int, float | None]:
    """N for a measured run: fixed by --requests, else probe the rate and aim at --seconds."""
    if args.requests:
        return args.requests, None
    probe_n = (2_000 if args.quick else 5_000) * (4 if pipeline > 1 else 1)
    probe_n //= WORKLOADS[test].weight
    probe = run_one(srv, srv.name, test, pipeline, probe_n, args, timeout=120)
    if probe.error or probe.rps <= 0:
        return probe_n, None
    n = int(probe.rps * args.seconds)
    n = max(probe_n, min(n, 20_000_000))
    # round to 2 significant digits so the commands read well
    mag = 10 ** max(0, int(math.log10(n)) - 1)
    return int(round(n / mag) * mag), probe.rps


def setup_server(srv: ServerProc, args: argparse.Namespace) -> dict[str, Any]:
    """Start the server, check which benchmarked commands work, prefill the key space."""
    info: dict[str, Any] = {"port": srv.port, "argv": srv.argv}
    print(f"\n== {srv.name}: starting on 127.0.0.1:{srv.port}", flush=True)
    srv.start()
    info["pid"] = srv.pid
    unsupported = supports(srv.port, args.test_list)
    info["unsupported"] = {k: v for k, v in unsupported.items() if v}
    for k, v in info["unsupported"].items():
        print(f"   {k.upper()} not usable on {srv.name}: {v}", flush=True)
    pf = prefill(srv.port, args.keyspace, args.size)
    info["prefill"] = pf
    print(f"   {srv.name}: prefilled {pf['keys']} keys ({args.size} B values) in {pf['seconds']}s "
          f"via {pf['method']}", flush=True)
    run_setup(srv.port, args.test_list)
    return info


def bench_row(srv: ServerProc, info: dict[str, Any], t: str, p: int, args: argparse.Namespace,
              profile_during: set[tuple[str, int]], stamp: str) -> Run:
    """One table cell: size the run, run it (--repeat times, keep the median), print it."""
    if info.get("unsupported", {}).get(t):
        run = Run(srv.name, t, p, 0, error=f"unsupported: {info['unsupported'][t]}")
        print(f"   {srv.name:8s} {t.upper():5s} -P {p:<2d} skipped: {run.error}", flush=True)
        return run
    n, probe_rps = size_run(srv, t, p, args)
    prof = None
    if srv.name == "marekvs" and (t, p) in profile_during:
        prof = os.path.join(RESULTS, f"profile-{stamp}-{t}-P{p}.txt")
    timeout = max(120.0, 20 * args.seconds) if not args.requests else 1800.0
    tries = []
    for i in range(max(1, args.repeat)):
        r = run_one(srv, srv.name, t, p, n, args, timeout=timeout, profile_out=prof if i == 0 else None)
        if (not args.requests and not r.error and r.rps > 0 and r.seconds < 0.5 * args.seconds
                and i == 0 and prof is None):
            # the probe under-estimated the rate (a load spike): size again from this run
            mag = 10 ** max(0, int(math.log10(r.rps * args.seconds)) - 1)
            n = int(round(r.rps * args.seconds / mag) * mag)
            r = run_one(srv, srv.name, t, p, n, args, timeout=timeout)
        tries.append(r)
    ok = sorted((x for x in tries if not x.error), key=lambda x: x.rps)
    run = ok[len(ok) // 2] if ok else tries[0]  # the median run (by rps)
    if len(tries) > 1:
        run.extra["all_rps"] = [x.rps for x in tries]
        run.profile = tries[0].profile
    if probe_rps:
        run.extra["probe_rps"] = probe_rps
    run.extra["loadavg_1m"] = round(os.getloadavg()[0], 2)
    cpu = (f" cpu {run.server_cpu:.2f} {run.server_us_per_op:5.1f}us/op"
           if run.server_cpu is not None and run.server_us_per_op is not None else "")
    msg = (f"   {srv.name:8s} {t.upper():5s} -P {p:<2d} n={n:<8d} {run.rps:>10,.0f} rps  "
           f"p50 {run.p50_ms:6.3f} p99 {run.p99_ms:7.3f} ms {run.seconds:5.1f}s{cpu}")
    if len(tries) > 1:
        msg += "  [" + " ".join(f"{x:,.0f}" for x in run.extra["all_rps"]) + "]"
    if run.error:
        msg += f"  ERROR: {run.error}"
    if run.profile:
        msg += f"  profile: {os.path.relpath(run.profile, ROOT)}"
    print(msg, flush=True)
    return run


def failed_runs(srv: ServerProc, args: argparse.Namespace, e: BaseException) -> list[Run]:
    first = str(e).splitlines()[0] if str(e) else type(e).__name__
    return [Run(srv.name, t, p, 0, error=f"server failed: {first}")
            for p in args.pipelines for t in args.tests]


# -- report --------------------------------------------------------------------------------

def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x > 0]
    if not xs:
        return None
    return math.exp(sum(math.log(x) for x in xs) / len(xs))


def summarize(runs: list[Run], tests: list[str], pipelines: list[int]) -> dict[str, Any]:
    by = {(r.server, r.test, r.pipeline): r for r in runs}
    rows = []
    verdicts: dict[str, Any] = {}
    for p in pipelines:
        ratios = []
        for t in tests:
            rr = by.get(("redis", t, p))
            mr = by.get(("marekvs", t, p))
            ratio = None
            if rr and mr and rr.rps > 0 and not mr.error:
                ratio = mr.rps / rr.rps
                ratios.append(ratio)
            elif rr and mr and rr.rps > 0:
                ratios.append(0.0)  # a failing/unsupported command counts as a failed row
            rows.append({"test": t.upper(), "pipeline": p, "redis": asdict(rr) if rr else None,
                         "marekvs": asdict(mr) if mr else None, "ratio": ratio})
        gm_target, row_target = TARGETS.get(p, (None, None))
        gm = geomean(ratios) if ratios and all(x > 0 for x in ratios) else (0.0 if ratios else None)
        worst = min(ratios) if ratios else None
        v: dict[str, Any] = {"geomean": gm, "worst": worst, "target_geomean": gm_target,
                             "target_worst": row_target}
        if gm is not None and gm_target is not None:
            v["geomean_pass"] = gm >= gm_target
            v["worst_pass"] = worst is not None and worst >= row_target
            v["pass"] = v["geomean_pass"] and v["worst_pass"]
        verdicts[str(p)] = v
    return {"rows": rows, "verdicts": verdicts}


def fmt_rps(r: dict | None) -> str:
    if r is None:
        return "-"
    if r.get("error") and not r.get("rps"):
        return "ERR"
    return f"{r['rps']:,.0f}" + ("!" if r.get("error") else "")


def fmt_lat(r: dict | None) -> str:
    if r is None or not r.get("rps"):
        return "-"
    return f"{r['p50_ms']:.3f}/{r['p99_ms']:.3f}"


def fmt_cpu(r: dict | None) -> str:
    if r is None or r.get("server_cpu") is None or not r.get("rps"):
        return "-"
    return f"{r['server_cpu']:.2f}"


def fmt_us(r: dict | None) -> str:
    if r is None or r.get("server_us_per_op") is None or not r.get("rps"):
        return "-"
    return f"{r['server_us_per_op']:.1f}"


def print_report(summary: dict[str, Any], marekvs_only: bool) -> None:
    hdr = ["test", "P", "redis rps", "marekvs rps", "ratio", "redis p50/p99 ms", "marekvs p50/p99 ms",
           "cpu r/m", "us/op r/m"]
    table = [hdr]
    for row in summary["rows"]:
        ratio = f"{row['ratio']:.2f}x" if row["ratio"] is not None else "-"
        table.append([row["test"], str(row["pipeline"]), fmt_rps(row["redis"]), fmt_rps(row["marekvs"]),
                      ratio,
                      fmt_lat(row["redis"]), fmt_lat(row["marekvs"]),
                      f"{fmt_cpu(row['redis'])}/{fmt_cpu(row['marekvs'])}",
                      f"{fmt_us(row['redis'])}/{fmt_us(row['marekvs'])}"])
    widths = [max(len(r[i]) for r in table) for i in range(len(hdr))]
    print()
    for i, r in enumerate(table):
        print("  ".join(c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print("(p50/p99: latency percentiles in ms from redis-benchmark; cpu: server CPU seconds per wall "
          "second, 1.00 = one core;\n us/op: server CPU microseconds per request, robust to other load on "
          "the machine; '!' = some error replies)")
    if marekvs_only:
        print("\n--marekvs-only: no Redis baseline, targets not evaluated")
        return
    print()
    for p, v in summary["verdicts"].items():
        if v.get("geomean") is None or v.get("target_geomean") is None:
            continue
        gm_ok = "PASS" if v["geomean_pass"] else "FAIL"
        w_ok = "PASS" if v["worst_pass"] else "FAIL"
        print(f"pipeline {p:>2}: geomean {v['geomean']:.2f}x (target >= {v['target_geomean']}x) {gm_ok};  "
              f"worst row {v['worst']:.2f}x (target >= {v['target_worst']}x) {w_ok}  => "
              f"{'PASS' if v['pass'] else 'FAIL'}")


def tls_summary(runs: list[Run]) -> list[dict[str, Any]]:
    """Per row: each server's rate in the clear and over TLS, and their ratios."""
    by = {(r.server, r.test, r.pipeline): r for r in runs}
    out = []
    for server, test, p in list(by):
        if server != "redis":
            continue
        row: dict[str, Any] = {"test": test.upper(), "pipeline": p}
        for name in ("redis", "redis+tls", "marekvs", "marekvs+tls"):
            x = by.get((name, test, p))
            row[name] = {"rps": x.rps, "p50_ms": x.p50_ms, "p99_ms": x.p99_ms, "us_per_op": x.server_us_per_op,
                         "error": x.error, "command": x.command} if x else None
        row["redis_tls_vs_plain"] = _ratio(row["redis+tls"], row["redis"])
        row["marekvs_tls_vs_plain"] = _ratio(row["marekvs+tls"], row["marekvs"])
        row["marekvs_vs_redis_over_tls"] = _ratio(row["marekvs+tls"], row["redis+tls"])
        out.append(row)
    return out


def _ratio(a: dict | None, b: dict | None) -> float | None:
    return a["rps"] / b["rps"] if a and b and b["rps"] > 0 and not a["error"] else None


def print_tls_report(rows: list[dict[str, Any]]) -> None:
    def rps(x: dict | None) -> str:
        return "-" if not x or not x["rps"] else f"{x['rps']:,.0f}"

    def us(x: dict | None) -> str:
        return "-" if not x or x["us_per_op"] is None or not x["rps"] else f"{x['us_per_op']:.1f}"

    def rat(v: float | None) -> str:
        return "-" if v is None else f"{v:.2f}x"

    hdr = ["test", "P", "redis", "redis+tls", "tls/plain", "marekvs", "marekvs+tls", "tls/plain",
           "marekvs/redis (tls)", "us/op tls r/m"]
    table = [hdr] + [[r["test"], str(r["pipeline"]), rps(r["redis"]), rps(r["redis+tls"]), rat(r["redis_tls_vs_plain"]),
                      rps(r["marekvs"]), rps(r["marekvs+tls"]), rat(r["marekvs_tls_vs_plain"]),
                      rat(r["marekvs_vs_redis_over_tls"]), f"{us(r['redis+tls'])}/{us(r['marekvs+tls'])}"]
                     for r in rows]
    widths = [max(len(r[i]) for r in table) for i in range(len(hdr))]
    print("\nTLS (requests/s; tls/plain: the TLS port's rate over the plaintext port's, same server)")
    for i, r in enumerate(table):
        print("  ".join(c.ljust(w) if j < 2 else c.rjust(w) for j, (c, w) in enumerate(zip(r, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


# -- main ----------------------------------------------------------------------------------

def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description="marekvs vs redis-server single-node benchmark (redis-benchmark)",
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short runs (about 1 s each) for a smoke test")
    p.add_argument("--requests", "-n", type=int, default=0,
                   help="fixed request count per run (default: sized to take --seconds)")
    p.add_argument("--seconds", type=float, default=None,
                   help="target duration of each measured run (default 4, --quick 1)")
    p.add_argument("--marekvs-only", action="store_true", help="skip the redis-server baseline")
    p.add_argument("--redis-only", action="store_true", help="skip marekvs (the baseline alone)")
    p.add_argument("--profile", action="store_true",
                   help="run marekvs under py-spy record for the whole run (bench/results/profile.svg)")
    p.add_argument("--profile-format", default="flamegraph", choices=["flamegraph", "speedscope", "raw"],
                   help="py-spy output format for --profile")
    p.add_argument("--profile-during", default="", metavar="TEST:P,...",
                   help="attach py-spy to the node during these measured runs, e.g. set:16,get:1; "
                        "writes bench/results/profile-<ts>-<test>-P<p>.txt (raw) and prints a summary")
    p.add_argument("--profile-rate", type=int, default=250, help="py-spy samples per second")
    p.add_argument("--tests", default=None, help="comma-separated rows of WORKLOADS (default: all; with --tls: "
                                                 "set,get)")
    p.add_argument("--tls", action="store_true",
                   help="both servers also on a TLS port; every row on both ports (redis-benchmark --tls)")
    p.add_argument("--pipelines", default=",".join(map(str, PIPELINES)), help="comma-separated -P depths")
    p.add_argument("--clients", "-c", type=int, default=50)
    p.add_argument("--keyspace", "-r", type=int, default=100_000)
    p.add_argument("--size", "-d", type=int, default=64, help="value size in bytes")
    p.add_argument("--sequential", action="store_true",
                   help="run everything on one server, stop it, then the other (default: rows interleaved)")
    p.add_argument("--repeat", type=int, default=1, help="measured runs per row; the median (by rps) is kept")
    p.add_argument("--keep", action="store_true", help="keep the temp dirs (server logs, data)")
    p.add_argument("--strict", action="store_true", help="exit 1 when a target fails")
    p.add_argument("--floor", choices=("bare", "data"), default=None,
                   help="benchmark bench/floor_server.py --model FLOOR in marekvs's column: the "
                        "leanest server on this stack, to read marekvs's ratios against")
    p.add_argument("--json", default=None, metavar="PATH",
                   help="write the results here (default: bench/results/single-<timestamp>.json)")
    p.add_argument("--marekvs-arg", action="append", default=[], metavar="ARG",
                   help="extra argument for 'marekvs serve' (repeatable, e.g. --marekvs-arg=--shards=2; "
                        "without --shards the node is one process)")
    a = p.parse_args(argv)
    if a.tests is None:
        a.tests = "set,get" if a.tls else ",".join(TESTS)
    a.tests = [t.strip().lower() for t in a.tests.split(",") if t.strip()]
    unknown = [t for t in a.tests if t not in WORKLOADS]
    if unknown:
        p.error(f"unknown tests {unknown}; the rows are {', '.join(WORKLOADS)}")
    if a.tls and any(WORKLOADS[t].driver for t in a.tests):
        p.error("--tls: rows with a driver of their own do not speak TLS: "
                + ", ".join(t for t in a.tests if WORKLOADS[t].driver))
    a.test_list = a.tests
    a.pipelines = [int(x) for x in a.pipelines.split(",") if x.strip()]
    if a.seconds is None:
        a.seconds = 1.0 if a.quick else 4.0
    return a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for tool in ("redis-server", "redis-cli", "redis-benchmark"):
        which_or_die(tool)
    os.makedirs(RESULTS, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    profile_during: set[tuple[str, int]] = set()
    for item in filter(None, (x.strip() for x in args.profile_during.split(","))):
        t, _, p = item.partition(":")
        profile_during.add((t.lower(), int(p or 1)))
    if profile_during and py_spy_path() is None:
        sys.exit("bench: --profile-during needs py-spy")
    profile_out = None
    if args.profile:
        ext = {"flamegraph": "svg", "speedscope": "speedscope.json", "raw": "txt"}[args.profile_format]
        profile_out = os.path.join(RESULTS, f"profile.{ext}")

    workdir = tempfile.mkdtemp(prefix="marekvs-bench-")
    servers: list[ServerProc] = []

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with SIGINT ignored
    runs: list[Run] = []
    infos: dict[str, Any] = {}
    failed: list[str] = []
    t_start = time.time()
    load = os.getloadavg()[0]
    if load > 0.5:
        print(f"bench: WARNING: load average {load:.2f} before the run: other work on this "
              f"{os.cpu_count()}-core machine skews the numbers (use --repeat 3)", file=sys.stderr)
    try:
        plan = []
        tls_ports: dict[str, int] = {}
        server_tls: list[str] = []
        client_tls: list[str] = []
        if args.tls:
            if args.floor:
                sys.exit("bench: --tls and --floor do not go together")
            server_tls, client_tls = tls_files(workdir)
            tls_ports = {"redis": free_port(), "marekvs": free_port()}
        if not args.marekvs_only:
            plan.append(redis_server_proc(free_port(), workdir,
                                          ["--tls-port", str(tls_ports["redis"]), *server_tls] if args.tls else []))
        if not args.redis_only and args.floor:
            print(f"bench: the marekvs column is bench/floor_server.py --model {args.floor}", flush=True)
            plan.append(floor_proc(free_port(), workdir, args.floor))
        elif not args.redis_only:
            extra = args.marekvs_arg + (["--tls-port", str(tls_ports["marekvs"]), *server_tls] if args.tls else [])
            plan.append(marekvs_proc(free_port_pair(), workdir, profile_out, args.profile_format,
                                     args.profile_rate, extra))
        rows = [(p, t) for p in args.pipelines for t in args.tests]

        def endpoints(srv: ServerProc) -> list[Any]:
            """Where each row runs on ``srv``: its plaintext port, and with --tls its TLS port."""
            return [srv] + ([TlsEndpoint(srv, tls_ports[srv.name], client_tls)] if args.tls else [])
        if args.sequential or len(plan) == 1:
            # one server at a time: start, prefill, every row, stop
            for srv in plan:
                servers.append(srv)
                try:
                    infos[srv.name] = setup_server(srv, args)
                    for p, t in rows:
                        for ep in endpoints(srv):
                            runs.append(bench_row(ep, infos[srv.name], t, p, args, profile_during, stamp))
                except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                    print(f"bench: {srv.name} failed: {e}", file=sys.stderr)
                    failed.append(srv.name)
                    done = {(r.test, r.pipeline) for r in runs if r.server == srv.name}
                    runs.extend(r for r in failed_runs(srv, args, e) if (r.test, r.pipeline) not in done)
                    infos[srv.name] = {"error": str(e)}
                finally:
                    srv.stop()
        else:
            # interleaved (default): both up, prefilled; each row runs against one server, then
            # the other, so drifting background load hits both sides of a ratio alike. Only one
            # server has load at a time; the idle one costs next to nothing.
            live = []
            for srv in plan:
                servers.append(srv)
                try:
                    infos[srv.name] = setup_server(srv, args)
                    live.append(srv)
                except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                    print(f"bench: {srv.name} failed: {e}", file=sys.stderr)
                    failed.append(srv.name)
                    runs.extend(failed_runs(srv, args, e))
                    infos[srv.name] = {"error": str(e)}
                    srv.stop()
            print(flush=True)
            for p, t in rows:
                for srv in list(live):
                    try:
                        for ep in endpoints(srv):
                            runs.append(bench_row(ep, infos[srv.name], t, p, args, profile_during, stamp))
                    except (RuntimeError, OSError, subprocess.SubprocessError) as e:
                        print(f"bench: {srv.name} failed: {e}", file=sys.stderr)
                        failed.append(srv.name)
                        live.remove(srv)
                        done = {(r.test, r.pipeline) for r in runs if r.server == srv.name}
                        runs.extend(r for r in failed_runs(srv, args, e) if (r.test, r.pipeline) not in done)
                        srv.stop()
            for srv in plan:
                srv.stop()
    except KeyboardInterrupt:
        print("\nbench: interrupted; stopping servers", file=sys.stderr)
        for s in servers:
            s.stop()
        return 130
    except Exception:
        for s in servers:
            print(f"--- {s.name} log (tail) ---\n{s.tail_log()}", file=sys.stderr)
        raise
    finally:
        for s in servers:
            s.stop()
        if args.keep:
            print(f"bench: temp dir kept: {workdir}")
        else:
            shutil.rmtree(workdir, ignore_errors=True)

    if profile_out and os.path.exists(profile_out):
        print(f"\nwhole-run profile of marekvs: {os.path.relpath(profile_out, ROOT)}")
    summary = summarize(runs, args.tests, args.pipelines)
    print_report(summary, args.marekvs_only)
    if args.tls:
        summary["tls"] = tls_summary(runs)
        print_tls_report(summary["tls"])

    try:
        redis_ver = subprocess.run(["redis-server", "--version"], capture_output=True, text=True,
                                   check=False).stdout.strip()
    except OSError:
        redis_ver = "?"
    doc = {
        "timestamp": stamp,
        "duration_s": round(time.time() - t_start, 1),
        "argv": sys.argv,
        "options": {k: v for k, v in vars(args).items()},
        "host": {"cpus": os.cpu_count(), "loadavg_before": load, "platform": platform.platform(),
                 "python": sys.version.split()[0],
                 "redis_server": redis_ver},
        "targets": {str(k): {"geomean": v[0], "worst_row": v[1]} for k, v in TARGETS.items()},
        "servers": infos,
        "runs": [asdict(r) for r in runs],
        **summary,
    }
    out = args.json or os.path.join(RESULTS, f"single-{stamp}.json")
    with open(out, "w") as f:
        json.dump(doc, f, indent=2)
    print(f"\nresults: {os.path.relpath(out, ROOT)}")

    for r in runs:
        if r.profile and os.path.exists(r.profile):
            rel = os.path.relpath(r.profile, ROOT)
            print(f"\n== profile of marekvs during {r.test.upper()} -P {r.pipeline} ({rel})")
            summarizer = os.path.join(HERE, "profile_summary.py")
            subprocess.run([sys.executable, summarizer, r.profile, "--top", "15"], check=False)

    if failed:
        return 2
    if args.strict and any(v.get("pass") is False for v in summary["verdicts"].values()):
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
