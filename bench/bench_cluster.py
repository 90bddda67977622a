#!/usr/bin/env python3
"""Cluster benchmark: what replication costs a node, and how far behind its peers are.

Run it with ``make bench-cluster`` (or ``.venv/bin/python bench/bench_cluster.py [--quick]``).
Everything runs on this machine; nodes are started like ``marekvs cluster up`` does (the
functions of ``marekvs.launcher``), on free 127.0.0.1 ports and temp data dirs, and stopped
by their pids at the end.

(a) baseline: a lone node (no peers) under
    ``redis-benchmark -t set -c 50 -n N -r 100000 -d 64 -P 16 --csv``  -> rps_a
(b) the same load against node 1 of a 3-node full-mesh cluster    -> rps_b
    replication cost = 1 - rps_b / rps_a (target <= 25%). Runs of (a) and (b) alternate
    (--repeat) and the medians are compared; after every (b) run the time the peers need
    to apply the backlog ("drain") is measured too.
(c) lag probe: an open-loop load generator writes on node 1 at a fixed total rate R (a
    fraction of rps_a; redis-benchmark has no rate limit, so the background load is
    pre-encoded pipelined SETs paced from Python over 10 connections), while a probe writes
    unique keys on node 1 (``--probe-rate`` per second, part of R) and polls nodes 2 and 3
    (pipelined MGET every ``--poll-ms``) until each probe key is visible there. Lag = time
    from the probe SET's reply on node 1 to the poll reply that first shows the key (an upper
    bound: it includes up to one poll interval and one read round trip). p50/p99 lag per
    rate; the highest rate with p99 < ``--bound-ms`` (50 ms) is the bounded-lag rate.
    Target: p99 < 50 ms at 50% of rps_a.

Table on stdout, everything as JSON in ``bench/results/cluster-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import io
import json
import os
import platform
import random
import resource
import shutil
import signal
import statistics
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

CLK_TCK = os.sysconf("SC_CLK_TCK")
clock = time.perf_counter  # not loop.time(): uvloop's clock has 1 ms resolution
HOST = mc.HOST


# -- helpers -------------------------------------------------------------------------------


def which_or_die(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        sys.exit(f"bench: {name} not found on PATH (apt-get install redis-tools)")
    return path


def free_range(span: int, avoid: set[int]) -> int:
    """A base port with ``span`` consecutive free ports, none in ``avoid``."""
    for _ in range(500):
        base = random.randrange(20000, 32000)  # below the ephemeral range (32768+)
        ports = range(base, base + span)
        if not avoid.intersection(ports) and all(mc.port_free(p) for p in ports):
            avoid.update(ports)
            return base
    raise RuntimeError("no free port range")


def cpu_seconds(pid: int) -> float | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            st = f.read()
    except OSError:
        return None
    fs = st[st.rindex(")") + 2 :].split()
    return (int(fs[11]) + int(fs[12])) / CLK_TCK


def machine_cpu() -> tuple[float, float, float]:
    """(busy seconds of the whole machine, CPU seconds of this process, of its waited-for children)."""
    try:
        with open("/proc/stat") as f:
            v = [int(x) for x in f.readline().split()[1:]]
        busy = (sum(v[:8]) - v[3] - v[4]) / CLK_TCK  # all but idle and iowait
    except (OSError, ValueError, IndexError):
        busy = float("nan")
    me = resource.getrusage(resource.RUSAGE_SELF)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return busy, me.ru_utime + me.ru_stime, ch.ru_utime + ch.ru_stime


def cpu_pressure_us() -> float | None:
    """/proc/pressure/cpu "some" total: microseconds during which some task waited for a CPU."""
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some"):
                    return float(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


class CpuWatch:
    """CPU of our node pids over an interval, plus how busy the machine was with OTHER work
    (everything but our nodes, this script and the redis-benchmark it ran)."""

    def __init__(self, pids: dict[str, int]):
        self.pids = pids
        self.n0 = {k: cpu_seconds(p) for k, p in pids.items()}
        self.m0 = machine_cpu()
        self.p0 = cpu_pressure_us()
        self.t0 = time.monotonic()

    def done(self, extra_child: float = 0.0) -> dict[str, Any]:
        wall = time.monotonic() - self.t0
        m1 = machine_cpu()
        nodes = {}
        for k, p in self.pids.items():
            c1 = cpu_seconds(p)
            if self.n0.get(k) is not None and c1 is not None:
                nodes[k] = round((c1 - self.n0[k]) / wall, 2)
        busy = (m1[0] - self.m0[0]) / wall
        me = (m1[1] - self.m0[1]) / wall
        kids = (m1[2] - self.m0[2]) / wall + extra_child
        p1 = cpu_pressure_us()
        psi = round((p1 - self.p0) / 1e6 / wall, 2) if p1 is not None and self.p0 is not None else None
        return {
            "nodes": nodes,
            "cpu_pressure_some": psi,
            "machine_busy_cores": round(busy, 2),
            "bench_client_cores": round(me + kids, 2),
            "foreign_cores": round(max(0.0, busy - sum(nodes.values()) - me - kids), 2),
            "loadavg_1m": round(os.getloadavg()[0], 2),
        }


def pct(xs: list[float], p: float) -> float | None:
    """Nearest-rank percentile."""
    if not xs:
        return None
    s = sorted(xs)
    k = max(0, min(len(s) - 1, int(round(p / 100.0 * len(s) + 0.5)) - 1))
    return s[k]


def parse_csv(text: str) -> dict[str, dict[str, float]]:
    rows: dict[str, dict[str, float]] = {}
    lines = [ln for ln in text.splitlines() if ln.startswith('"')]
    for rec in csv.DictReader(io.StringIO("\n".join(lines))):
        name = rec.get("test", "").split(" (")[0].strip().upper()
        try:
            rows[name] = {k: float(v) for k, v in rec.items() if k != "test"}
        except (TypeError, ValueError):
            continue
    return rows


def repl_info(port: int) -> dict[str, Any]:
    try:
        with mc.Resp(port, timeout=5) as c:
            return mc.parse_info(c.call("INFO", "replication"))
    except (OSError, mc.RespError):
        return {}


def max_lag(port: int) -> tuple[int, int] | None:
    """(max lag_entries, max lag_ms) over the node's links, from INFO replication."""
    info = repl_info(port)
    links = mc.peer_links(info)
    if not links:
        return None
    return (max(int(ln.get("lag_entries", 0)) for ln in links), max(int(ln.get("lag_ms", 0)) for ln in links))


def wait_drained(nodes: list[mc.NodeSpec], timeout: float = 120.0) -> float:
    """Seconds until every node's every link has lag_entries 0 (-1 on timeout)."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        lags = [max_lag(n.port) for n in nodes]
        if all(x is not None and x[0] == 0 for x in lags):
            return time.monotonic() - t0
        time.sleep(0.05)
    return -1.0


def wait_streaming(nodes: list[mc.NodeSpec], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ok = True
        for n in nodes:
            links = mc.peer_links(repl_info(n.port))
            if len(links) != len(nodes) - 1 or any(ln.get("state") != "streaming" for ln in links):
                ok = False
                break
        if ok:
            return True
        time.sleep(0.1)
    return False


# -- (a)/(b) throughput ---------------------------------------------------------------------


def bench_cmd(port: int, n: int, args: argparse.Namespace) -> list[str]:
    return [
        which_or_die("redis-benchmark"),
        "-h",
        HOST,
        "-p",
        str(port),
        "-c",
        str(args.clients),
        "-n",
        str(n),
        "-r",
        str(args.keyspace),
        "-d",
        str(args.size),
        "-P",
        str(args.pipeline),
        "-t",
        "set",
        "--csv",
    ]


def run_benchmark(
    port: int, n: int, args: argparse.Namespace, pids: dict[str, int], watch: list[mc.NodeSpec] | None = None
) -> dict[str, Any]:
    """One redis-benchmark run; CPU of every pid in ``pids``; peak replication lag of ``watch``."""
    cmd = bench_cmd(port, n, args)
    cw = CpuWatch(pids)
    peak = {"lag_entries": 0, "lag_ms": 0}
    stop = False

    def sampler() -> None:
        while not stop:
            for nd in watch or []:
                x = max_lag(nd.port)
                if x:
                    peak["lag_entries"] = max(peak["lag_entries"], x[0])
                    peak["lag_ms"] = max(peak["lag_ms"], x[1])
            time.sleep(0.25)

    import threading

    th = threading.Thread(target=sampler, daemon=True) if watch else None
    if th:
        th.start()
    t0 = time.monotonic()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=600, start_new_session=True)
    finally:
        stop = True
        if th:
            th.join()
    wall = time.monotonic() - t0
    out: dict[str, Any] = {
        "command": " ".join(["redis-benchmark"] + cmd[1:]),
        "requests": n,
        "seconds": round(wall, 2),
    }
    c = cw.done()
    out["cpu"] = c.pop("nodes")
    out.update(c)
    if watch:
        out["peak_lag_entries"] = peak["lag_entries"]
        out["peak_lag_ms"] = peak["lag_ms"]
    row = parse_csv(r.stdout).get("SET")
    errors = (r.stdout + r.stderr).count("Error from server")
    if r.returncode != 0 or row is None:
        out["error"] = f"redis-benchmark rc {r.returncode}: {(r.stderr or r.stdout).strip()[-300:]}"
        out["rps"] = 0.0
        return out
    out.update(
        rps=row["rps"], p50_ms=row.get("p50_latency_ms"), p99_ms=row.get("p99_latency_ms"), errors=errors
    )
    return out


# -- (c) lag probe --------------------------------------------------------------------------


def _enc(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


class Loader:
    """Open-loop paced SET load over ``conns`` pipelined connections at ``rate`` commands/s."""

    def __init__(self, port: int, rate: float, conns: int, keyspace: int, size: int):
        self.port, self.rate, self.nconns = port, rate, conns
        rnd = random.Random(7)
        val = b"x" * size
        self.pool = [_enc(b"SET", b"load:%012d" % rnd.randrange(keyspace), val) for _ in range(8192)]
        self.sent = 0
        self.acked = 0
        self.errors = 0
        self.throttled = 0.0  # seconds spent holding back because the server fell behind
        self.t_start = 0.0
        self.t_end = 0.0
        self.acked_at_end = 0

    async def _reader(self, r: asyncio.StreamReader) -> None:
        while True:
            data = await r.read(1 << 16)
            if not data:
                return
            self.acked += data.count(b"\n")
            self.errors += data.count(b"-ERR") + data.count(b"-OOM")

    async def run(self, stop: asyncio.Event) -> None:
        if self.rate <= 0:
            await stop.wait()
            return
        conns = [await asyncio.open_connection(HOST, self.port) for _ in range(self.nconns)]
        readers = [asyncio.create_task(self._reader(r)) for r, _ in conns]
        self.t_start = t0 = clock()
        i = 0
        npool = len(self.pool)
        max_backlog = max(1000, self.rate * 0.5)  # > 0.5 s of requests unanswered: stop adding
        try:
            while not stop.is_set():
                now = clock()
                due = int((now - t0) * self.rate) - self.sent
                if due > 0 and self.sent - self.acked > max_backlog:
                    self.throttled += 0.002
                    due = 0
                if due > 0:
                    per = [
                        due // self.nconns + (1 if k < due % self.nconns else 0) for k in range(self.nconns)
                    ]
                    for (_, w), m in zip(conns, per):
                        if m:
                            if i + m <= npool:
                                w.write(b"".join(self.pool[i : i + m]))
                            else:
                                w.write(b"".join(self.pool[(i + j) % npool] for j in range(m)))
                            i = (i + m) % npool
                    self.sent += due
                await asyncio.sleep(0.002)
            self.t_end = clock()
            self.acked_at_end = self.acked
            # let the outstanding replies arrive
            end = clock() + 10
            while self.acked < self.sent and clock() < end:
                await asyncio.sleep(0.01)
        finally:
            for t in readers:
                t.cancel()
            for _, w in conns:
                w.close()

    def achieved(self) -> float:
        """Replies received per second while the load ran (not counting the tail after it)."""
        d = (self.t_end or self.t_start) - self.t_start
        return self.acked_at_end / d if d > 0 else 0.0


async def _resp_read(r: asyncio.StreamReader) -> Any:
    line = await r.readline()
    t, rest = line[:1], line[1:-2]
    if t == b"$":
        n = int(rest)
        if n < 0:
            return None
        return (await r.readexactly(n + 2))[:-2]
    if t == b"*":
        n = int(rest)
        return None if n < 0 else [await _resp_read(r) for _ in range(n)]
    if t == b":":
        return int(rest)
    if t == b"-":
        raise RuntimeError(rest.decode())
    return rest.decode()


async def lag_probe(
    nodes: list[mc.NodeSpec], total_rate: float, args: argparse.Namespace, tag: str
) -> dict[str, Any]:
    """Background load + probe writes on node 1; probe visibility on the other nodes."""
    n1, others = nodes[0], nodes[1:]
    probe_rate = min(args.probe_rate, total_rate)
    loader = Loader(n1.port, max(0.0, total_rate - probe_rate), args.load_conns, args.keyspace, args.size)
    stop = asyncio.Event()
    # probe key -> ack time; per other node: pending set; samples
    acked_at: dict[bytes, float] = {}
    sent_at: dict[bytes, float] = {}
    pending = {o.id: set() for o in others}
    samples: dict[int, list[float]] = {o.id: [] for o in others}
    events: list[tuple[float, int, float]] = []  # (ack time, node, lag s): for the worst-cases list
    set_rtt: list[float] = []
    warm_until = clock() + args.warmup
    measure_end = warm_until + args.lag_seconds
    server_lag_ms: list[int] = []
    probes_measured = 0

    async def prober() -> None:
        nonlocal probes_measured
        r, w = await asyncio.open_connection(HOST, n1.port)
        t0 = clock()
        i = 0
        try:
            while clock() < measure_end:
                target = t0 + i / probe_rate
                delay = target - clock()
                if delay > 0:
                    await asyncio.sleep(delay)
                key = b"probe:%s:%08d" % (tag.encode(), i)
                ts = clock()
                w.write(_enc(b"SET", key, b"%.6f" % ts))
                await w.drain()
                await _resp_read(r)
                ta = clock()
                if ts >= warm_until:
                    sent_at[key] = ts
                    acked_at[key] = ta
                    set_rtt.append(ta - ts)
                    probes_measured += 1
                    for o in others:
                        pending[o.id].add(key)
                i += 1
        finally:
            w.close()

    async def poller(node: mc.NodeSpec) -> None:
        r, w = await asyncio.open_connection(HOST, node.port)
        pend = pending[node.id]
        try:
            while True:
                if not pend:
                    if stop.is_set():
                        return
                    await asyncio.sleep(args.poll_ms / 1000)
                    continue
                keys = list(pend)[:500]
                w.write(_enc(b"MGET", *keys))
                await w.drain()
                vals = await _resp_read(r)
                now = clock()
                for k, v in zip(keys, vals):
                    if v is not None:
                        samples[node.id].append(now - acked_at[k])
                        events.append((acked_at[k], node.id, now - acked_at[k]))
                        pend.discard(k)
                    elif now - acked_at[k] > args.probe_timeout:
                        samples[node.id].append(float("inf"))
                        pend.discard(k)
                await asyncio.sleep(args.poll_ms / 1000)
        finally:
            w.close()

    async def info_sampler() -> None:
        while not stop.is_set():
            try:
                r, w = await asyncio.open_connection(HOST, n1.port)
                w.write(_enc(b"INFO", b"replication"))
                await w.drain()
                txt = await _resp_read(r)
                w.close()
                links = mc.peer_links(mc.parse_info(txt))
                if links and clock() >= warm_until:
                    server_lag_ms.append(max(int(x.get("lag_ms", 0)) for x in links))
            except (OSError, RuntimeError):
                pass
            await asyncio.sleep(0.25)

    cw = CpuWatch({f"node{n.id}": n.pid for n in nodes})
    lt = asyncio.create_task(loader.run(stop))
    polls = [asyncio.create_task(poller(o)) for o in others]
    it = asyncio.create_task(info_sampler())
    await prober()
    cpu = cw.done()
    stop.set()
    await lt
    try:
        await asyncio.wait_for(asyncio.gather(*polls), args.probe_timeout + 5)
    except TimeoutError:
        for p in polls:
            p.cancel()
    it.cancel()
    allv = [x for o in others for x in samples[o.id]]
    ms = [x * 1000 for x in allv]
    lost = sum(1 for x in allv if x == float("inf"))
    load_rate = loader.achieved()
    res = {
        "target_rate": round(total_rate),
        "load_rate_target": round(loader.rate),
        "load_rate_achieved": round(load_rate),
        "probe_rate": probe_rate,
        "write_rate_achieved": round(load_rate + probes_measured / max(1e-9, args.lag_seconds)),
        "load_backlog_at_end": loader.sent - loader.acked,
        "load_throttled_s": round(loader.throttled, 2),
        "load_errors": loader.errors,
        "probes": probes_measured,
        "samples": len(allv),
        "not_visible": lost,
        "p50_ms": _r(pct(ms, 50)),
        "p90_ms": _r(pct(ms, 90)),
        "p99_ms": _r(pct(ms, 99)),
        "max_ms": _r(max(ms, default=None)),
        "per_node": {
            str(nid): {
                "p50_ms": _r(pct([x * 1000 for x in v], 50)),
                "p99_ms": _r(pct([x * 1000 for x in v], 99)),
            }
            for nid, v in samples.items()
        },
        "probe_set_rtt_p50_ms": _r(pct([x * 1000 for x in set_rtt], 50)),
        "probe_set_rtt_p99_ms": _r(pct([x * 1000 for x in set_rtt], 99)),
        "server_lag_ms_max": max(server_lag_ms, default=None),
        "cpu": cpu.pop("nodes"),
    }
    res.update(cpu)
    worst = sorted(events, key=lambda e: -e[2])[:10]
    res["worst"] = [
        {"at_s": round(t - warm_until, 3), "node": nid, "lag_ms": round(lag * 1000, 1)}
        for t, nid, lag in sorted(worst)
    ]
    # sustained: 95% of the rate answered within the run, and never held back (> 0.5 s of
    # requests unanswered) for more than 5% of it
    dur = max(1e-9, loader.t_end - loader.t_start) if loader.rate > 0 else 1.0
    res["sustained"] = loader.rate <= 0 or (
        load_rate >= 0.95 * loader.rate and loader.throttled <= 0.05 * dur
    )
    return res


def _med(xs: Any) -> float | None:
    xs = list(xs)
    return statistics.median(xs) if xs else None


def _r(x: float | None) -> float | None:
    if x is None:
        return None
    if x == float("inf"):
        return float("inf")
    return round(x, 2)


def run_lag(nodes: list[mc.NodeSpec], rate: float, args: argparse.Namespace, tag: str) -> dict[str, Any]:
    try:
        import uvloop

        return uvloop.run(lag_probe(nodes, rate, args, tag))
    except ImportError:
        return asyncio.run(lag_probe(nodes, rate, args, tag))


# -- main ----------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="short runs (about a minute in all)")
    p.add_argument(
        "--seconds", type=float, default=None, help="target length of a throughput run (default 5, quick 2)"
    )
    p.add_argument(
        "--repeat", type=int, default=None, help="alternating (a)/(b) runs; medians (default 5, quick 3)"
    )
    p.add_argument("--requests", "-n", type=int, default=0, help="fixed N for the throughput runs")
    p.add_argument("--clients", "-c", type=int, default=50)
    p.add_argument("--pipeline", "-P", type=int, default=16)
    p.add_argument("--keyspace", "-r", type=int, default=100_000)
    p.add_argument("--size", "-d", type=int, default=64)
    p.add_argument("--durability", default="everysec", choices=["always", "everysec", "no"])
    p.add_argument(
        "--rates",
        default=None,
        help="fractions of the single-node rate for the lag probe (default 0.1,0.25,0.5,0.75,1.0; "
        "quick 0.1,0.25,0.5,0.75)",
    )
    p.add_argument(
        "--lag-seconds", type=float, default=None, help="measured seconds per rate (default 10, quick 5)"
    )
    p.add_argument("--warmup", type=float, default=1.0, help="seconds of load before probes count")
    p.add_argument("--probe-rate", type=float, default=100.0, help="probe writes per second")
    p.add_argument("--poll-ms", type=float, default=1.0, help="pause between visibility polls")
    p.add_argument(
        "--probe-timeout", type=float, default=5.0, help="a probe not visible after this counts as lost"
    )
    p.add_argument("--load-conns", type=int, default=10, help="connections of the paced background load")
    p.add_argument("--bound-ms", type=float, default=50.0, help="p99 lag bound")
    p.add_argument(
        "--no-bisect", action="store_true", help="do not refine the bounded-lag rate between fractions"
    )
    p.add_argument(
        "--baseline-rps",
        type=float,
        default=0.0,
        help="skip (a)/(b) and use this as the single-node write rate for (c)",
    )
    p.add_argument("--keep", action="store_true", help="keep the temp dir (node logs, data)")
    a = p.parse_args(argv)
    if a.seconds is None:
        a.seconds = 2.0 if a.quick else 5.0
    if a.repeat is None:
        a.repeat = 3 if a.quick else 5
    if a.lag_seconds is None:
        a.lag_seconds = 5.0 if a.quick else 10.0
    if a.rates is None:
        a.rates = "0.1,0.25,0.5,0.75" if a.quick else "0.1,0.25,0.5,0.75,1.0"
    a.rates = sorted(float(x) for x in a.rates.split(",") if x.strip())
    return a


def size_n(port: int, args: argparse.Namespace) -> tuple[int, float]:
    if args.requests:
        return args.requests, 0.0
    probe = run_benchmark(port, 40_000, args, {})
    rps = probe.get("rps") or 20_000.0
    n = int(rps * args.seconds)
    return max(40_000, int(round(n, -4))), rps


def throughput(
    lone: mc.NodeSpec, nodes: list[mc.NodeSpec], args: argparse.Namespace, result: dict[str, Any]
) -> float:
    """(a)/(b): alternating redis-benchmark runs on the lone node and on node 1; returns rps_a."""
    n, probe_rps = size_n(lone.port, args)
    _ = run_benchmark(nodes[0].port, n // 4, args, {})  # warm the cluster the same way
    wait_drained(nodes)
    print(
        f"\n(a)/(b) SET -P {args.pipeline} -c {args.clients}, n={n} per run, {args.repeat} run(s) each",
        flush=True,
    )
    runs_a: list[dict[str, Any]] = []
    runs_b: list[dict[str, Any]] = []
    cl_pids = {f"node{x.id}": x.pid for x in nodes}
    for i in range(args.repeat):
        ra = run_benchmark(lone.port, n, args, {"lone": lone.pid})
        runs_a.append(ra)
        print(
            f"  a{i + 1} lone node   : {ra['rps']:>10,.0f} rps  p50 {ra.get('p50_ms')} ms  cpu {ra['cpu']}  "
            f"other load {ra.get('foreign_cores')} cores, cpu pressure {ra.get('cpu_pressure_some')}"
            + (f"  ERROR {ra['error']}" if ra.get("error") else ""),
            flush=True,
        )
        rb = run_benchmark(nodes[0].port, n, args, cl_pids, watch=[nodes[0]])
        rb["drain_s"] = round(wait_drained(nodes), 2)
        rb["sustained_rps"] = round(n / (rb["seconds"] + max(0.0, rb["drain_s"]))) if rb["rps"] else 0
        runs_b.append(rb)
        print(
            f"  b{i + 1} cluster node1: {rb['rps']:>10,.0f} rps  p50 {rb.get('p50_ms')} ms  cpu {rb['cpu']}  "
            f"other load {rb.get('foreign_cores')} cores, cpu pressure {rb.get('cpu_pressure_some')}  "
            f"peak lag {rb.get('peak_lag_entries')} entries / {rb.get('peak_lag_ms')} ms, "
            f"drain {rb['drain_s']} s" + (f"  ERROR {rb['error']}" if rb.get("error") else ""),
            flush=True,
        )
    rps_a = statistics.median(r["rps"] for r in runs_a)
    rps_b = statistics.median(r["rps"] for r in runs_b)
    sust_b = statistics.median(r["sustained_rps"] for r in runs_b)
    cost = 1 - rps_b / rps_a if rps_a else None
    # CPU per write: what each write costs the lone node, node 1 (serving + shipping to 2 peers)
    # and each peer (applying). On this shared 2-core box the cluster is CPU-bound as a whole;
    # with a core per node, node 1's rate would be bounded by its own CPU per write.
    us_a = _med(
        r["cpu"]["lone"] / r["rps"] * 1e6 for r in runs_a if r["rps"] and r["cpu"].get("lone")
    )
    us_b = _med(
        r["cpu"]["node1"] / r["rps"] * 1e6 for r in runs_b if r["rps"] and r["cpu"].get("node1")
    )
    us_peer = _med(
        (r["cpu"].get("node2", 0) + r["cpu"].get("node3", 0)) / 2 / r["rps"] * 1e6 for r in runs_b if r["rps"]
    )
    cpu_cost = 1 - us_a / us_b if us_a and us_b else None
    cost_sust = 1 - sust_b / rps_a if rps_a else None
    result["throughput"] = {
        "requests": n,
        "probe_rps": probe_rps,
        "runs_a": runs_a,
        "runs_b": runs_b,
        "rps_a": rps_a,
        "rps_b": rps_b,
        "replication_cost": cost,
        "sustained_rps_b": sust_b,
        "replication_cost_sustained": cost_sust,
        "lone_cpu_us_per_write": _r(us_a),
        "node1_cpu_us_per_write": _r(us_b),
        "peer_apply_cpu_us_per_write": _r(us_peer),
        "cpu_normalised_cost": cpu_cost,
        "target_cost": 0.25,
        "pass": cost is not None and cost <= 0.25,
    }
    return rps_a


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    which_or_die("redis-benchmark")
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = Path(tempfile.mkdtemp(prefix="marekvs-bench-cluster-"))
    started: list[mc.NodeSpec] = []

    def on_term(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    load0 = os.getloadavg()[0]
    if load0 > 0.5:
        print(
            f"bench: WARNING: load average {load0:.2f} before the run: other work on this "
            f"{os.cpu_count()}-core machine skews the numbers",
            file=sys.stderr,
        )
    result: dict[str, Any] = {
        "started": stamp,
        "args": {k: v for k, v in vars(args).items()},
        "host": {
            "cpus": os.cpu_count(),
            "platform": platform.platform(),
            "python": platform.python_version(),
            "loadavg_before": os.getloadavg(),
        },
    }
    t_begin = time.monotonic()
    rc = 0
    try:
        used: set[int] = set()
        # the lone node and the 3-node cluster
        lone = mc.NodeSpec(
            id=1,
            port=free_range(1, used),
            grpc_port=free_range(1, used),
            data_dir=str(work / "lone"),
            log=str(work / "lone.log"),
        )
        mc.start_node(lone, [], args.durability, "bench-lone")
        started.append(lone)
        base, gbase = free_range(3, used), free_range(3, used)
        st, problems = mc.start_cluster(
            work / "cluster", 3, base, gbase, args.durability, "", "bench", timeout=60
        )
        nodes: list[mc.NodeSpec] = st["nodes"]
        started.extend(nodes)
        for why in mc.wait_ready([lone], 60).values():
            problems[-1] = f"lone node: {why}"
        if problems:
            for s in started:
                print(f"--- {s.log}\n{mc.log_tail(s.log)}", file=sys.stderr)
            raise RuntimeError(f"nodes failed to start: {problems}")
        if not wait_streaming(nodes):
            raise RuntimeError("cluster links not all streaming after 30 s")
        print(
            f"lone node pid {lone.pid} on {lone.port}; cluster pids "
            f"{', '.join(str(n.pid) for n in nodes)} on {base}-{base + 2} (gRPC {gbase}-{gbase + 2})",
            flush=True,
        )

        # (a)/(b): alternate, medians
        if args.baseline_rps:
            rps_a = args.baseline_rps
            result["throughput"] = None
        else:
            rps_a = throughput(lone, nodes, args, result)
        mc.stop_nodes([lone], timeout=15)
        started.remove(lone)

        # (c): lag at fractions of rps_a
        print(
            f"\n(c) lag probe: probes {args.probe_rate:g}/s on node 1, visibility polled on nodes 2, 3 "
            f"every {args.poll_ms:g} ms; {args.lag_seconds:g} s per rate",
            flush=True,
        )
        lag_rows: list[dict[str, Any]] = []

        def measure(frac: float) -> dict[str, Any]:
            wait_drained(nodes, 60)
            row = run_lag(nodes, frac * rps_a, args, f"{int(frac * 1000)}")
            row["fraction"] = frac
            row["bounded"] = (
                row["p99_ms"] is not None
                and row["p99_ms"] < args.bound_ms
                and row["not_visible"] == 0
                and row["sustained"]
            )
            lag_rows.append(row)
            print(
                f"  {frac:5.0%} of single-node rate = {row['target_rate']:>7,} w/s (achieved "
                f"{row['write_rate_achieved']:,}): lag p50 {row['p50_ms']} ms  p99 {row['p99_ms']} ms  "
                f"max {row['max_ms']} ms  ({row['samples']} samples, {row['not_visible']} not visible; "
                f"server lag_ms max {row['server_lag_ms_max']}; cpu {row['cpu']}; "
                f"other load {row.get('foreign_cores')} cores, cpu pressure {row.get('cpu_pressure_some')})"
                + ("" if row["sustained"] else "  NOT SUSTAINED"),
                flush=True,
            )
            return row

        first_fail = None
        last_pass = None
        for frac in args.rates:
            row = measure(frac)
            if row["bounded"]:
                last_pass = frac
            elif first_fail is None:
                first_fail = frac
        if not args.no_bisect and first_fail is not None:
            lo = max(
                (
                    f
                    for f in args.rates
                    if f < first_fail and any(r["fraction"] == f and r["bounded"] for r in lag_rows)
                ),
                default=0.0,
            )
            hi = first_fail
            for _ in range(1 if args.quick else 2):
                mid = round((lo + hi) / 2, 3)
                if mid <= 0.01 or hi - lo < 0.05:
                    break
                if measure(mid)["bounded"]:
                    lo = mid
                else:
                    hi = mid
        bounded = [r for r in lag_rows if r["bounded"]]
        # the highest rate below which every measured rate was bounded
        best = None
        for r in sorted(lag_rows, key=lambda r: r["fraction"]):
            if not r["bounded"]:
                break
            best = r
        half = next((r for r in lag_rows if abs(r["fraction"] - 0.5) < 1e-9), None)
        result["lag"] = {
            "rows": sorted(lag_rows, key=lambda r: r["fraction"]),
            "bound_ms": args.bound_ms,
            "max_bounded_fraction": best["fraction"] if best else None,
            "max_bounded_rate": best["write_rate_achieved"] if best else None,
            "any_bounded_fractions": [r["fraction"] for r in bounded],
            "target": "p99 < 50 ms at 50% of the single-node write rate",
            "pass": bool(half and half["bounded"]),
        }
        _ = last_pass
    except KeyboardInterrupt:
        print("\nbench: interrupted; stopping the nodes", file=sys.stderr)
        rc = 130
    except Exception as e:
        print(f"bench: failed: {e}", file=sys.stderr)
        for s in started:
            print(f"--- {s.log} (tail)\n{mc.log_tail(s.log)}", file=sys.stderr)
        rc = 2
    finally:
        res = mc.stop_nodes(started, timeout=15)
        if any(v == "failed" for v in res.values()):
            print(f"bench: could not stop some nodes: {res}", file=sys.stderr)
        if args.keep:
            print(f"bench: temp dir kept: {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)
    if rc:
        return rc

    runs = (
        (result["throughput"] or {}).get("runs_a", [])
        + (result["throughput"] or {}).get("runs_b", [])
        + result["lag"]["rows"]
    )
    foreign = [r["foreign_cores"] for r in runs if r.get("foreign_cores") is not None]
    psi = [r["cpu_pressure_some"] for r in runs if r.get("cpu_pressure_some") is not None]
    result["contention"] = {
        "foreign_cores_median": statistics.median(foreign) if foreign else None,
        "foreign_cores_max": max(foreign, default=None),
        "cpu_pressure_median": statistics.median(psi) if psi else None,
    }
    result["elapsed_s"] = round(time.monotonic() - t_begin, 1)
    result["host"]["loadavg_after"] = os.getloadavg()
    print_report(result)
    out = RESULTS / f"cluster-{stamp}.json"
    with open(out, "w") as f:
        json.dump(_clean(result), f, indent=2)
    print(f"\nresults: {out.relative_to(ROOT)}  ({result['elapsed_s']} s)")
    return 0


def print_report(res: dict[str, Any]) -> None:
    t = res["throughput"]
    if t is None:
        print(f"\n== replication cost: skipped (--baseline-rps {res['args']['baseline_rps']:g})")
    else:
        print_cost(res, t)
    print_lag(res)
    c = res.get("contention") or {}
    fm = c.get("foreign_cores_median")
    if fm is not None and fm > 0.25:
        print(
            f"\nWARNING: other work used a median {fm:.2f} of this machine's {os.cpu_count()} cores during the "
            f"runs (CPU pressure {c.get('cpu_pressure_median')}): these figures are depressed and noisy; "
            "re-run on a quiet machine before trusting them."
        )


def print_cost(res: dict[str, Any], t: dict[str, Any]) -> None:
    print(
        "\n== replication cost (SET -P {P} -c {c}, medians)".format(
            P=res["args"]["pipeline"], c=res["args"]["clients"]
        )
    )
    print(f"  (a) lone node          {t['rps_a']:>10,.0f} rps")
    print(
        f"  (b) node 1 of 3        {t['rps_b']:>10,.0f} rps   (incl. peer catch-up: {t['sustained_rps_b']:,.0f} rps)"
    )
    print(
        f"  replication cost 1-b/a {t['replication_cost']:>10.1%}   target <= 25%  "
        f"{'PASS' if t['pass'] else 'FAIL'}   (incl. catch-up: {t['replication_cost_sustained']:.1%})"
    )
    if t.get("cpu_normalised_cost") is not None:
        print(
            f"  CPU per write: lone {t['lone_cpu_us_per_write']:.1f} us, node 1 {t['node1_cpu_us_per_write']:.1f} us"
            f" (+ {t['peer_apply_cpu_us_per_write']:.1f} us on each peer) -> cost with a core per node "
            f"~{t['cpu_normalised_cost']:.1%}"
        )


def print_lag(res: dict[str, Any]) -> None:
    lag = res["lag"]
    print(
        f"\n== replication lag (write on node 1 -> visible on nodes 2 and 3), bound p99 < {lag['bound_ms']:g} ms"
    )
    print(
        f"  {'rate':>6}  {'target w/s':>10}  {'achieved':>9}  {'p50 ms':>7}  {'p99 ms':>7}  {'max ms':>7}  "
        f"{'samples':>7}  {'lost':>4}  bounded"
    )
    for r in lag["rows"]:
        print(
            f"  {r['fraction']:>6.1%}  {r['target_rate']:>10,}  {r['write_rate_achieved']:>9,}  "
            f"{_f(r['p50_ms'])}  {_f(r['p99_ms'])}  {_f(r['max_ms'])}  {r['samples']:>7}  {r['not_visible']:>4}  "
            f"{'yes' if r['bounded'] else 'NO'}{'' if r['sustained'] else ' (rate not sustained)'}"
        )
    if lag["max_bounded_fraction"] is not None:
        print(
            f"  max bounded-lag rate: {lag['max_bounded_rate']:,} writes/s "
            f"({lag['max_bounded_fraction']:.0%} of the single-node rate)"
        )
    else:
        print("  max bounded-lag rate: none of the measured rates")
    print(f"  target p99 < 50 ms at 50% of the single-node rate: {'PASS' if lag['pass'] else 'FAIL'}")


def _clean(o: Any) -> Any:
    """JSON-safe: inf -> "inf" (strict JSON has no Infinity), tuples -> lists."""
    if isinstance(o, float) and o in (float("inf"), float("-inf")):
        return "inf" if o > 0 else "-inf"
    if isinstance(o, dict):
        return {str(k): _clean(v) for k, v in o.items()}
    if isinstance(o, (list, tuple)):
        return [_clean(v) for v in o]
    return o


def _f(x: float | None) -> str:
    return f"{'-' if x is None else ('inf' if x == float('inf') else f'{x:.1f}'):>7}"


if __name__ == "__main__":
    sys.exit(main())
