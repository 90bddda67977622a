#!/usr/bin/env python3
"""Pub/Sub benchmark: fan-out throughput on one node, and cross-node delivery latency.

Run it with ``make bench-pubsub`` (or ``.venv/bin/python bench/bench_pubsub.py [--quick]``).

(a) fan-out, one node, marekvs and a stock redis-server one after the other (never at the
    same time: the machine has 2 cores): S subscribers (1, 10, 100) on one channel, one
    publisher sending M messages of --size bytes, pipelined --window deep. Measured from
    the first PUBLISH to the moment every subscriber has read every message:
    messages/s published and deliveries/s (messages x subscribers).
(b) latency, three marekvs nodes started as ``marekvs cluster up`` starts them: a
    subscriber on node 3 and one on node 1, a publisher on node 1 sending --latency-messages
    messages at --rate per second, each stamped with its send time; latency = receive time
    - send time (one clock: everything runs in this process). p50/p99/max for node 1 ->
    node 3 (the gRPC relay) and node 1 -> node 1 (local delivery), and the same local
    figure for redis-server.

The subscribers and the publisher are raw sockets in one asyncio loop in this process; a
subscriber counts bytes (every message of a run has the same length), so the client side
costs little next to the servers. Table on stdout, JSON in
``bench/results/pubsub-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import shutil
import statistics
import struct
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

import bench_single as bs  # noqa: E402

from marekvs import launcher as mc  # noqa: E402

CHANNEL = b"bench"
clock = time.perf_counter


def encode(*args: bytes) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def message_len(payload_len: int) -> int:
    """Bytes of one RESP2 ``message`` push carrying a payload of that length."""
    return len(encode(b"message", CHANNEL, b"x" * payload_len))


async def subscribe(port: int) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(encode(b"SUBSCRIBE", CHANNEL))
    await w.drain()
    confirm = b"*3\r\n" + encode(b"subscribe", CHANNEL)[4:] + b":1\r\n"
    got = b""
    while len(got) < len(confirm):
        got += await r.read(len(confirm) - len(got))
    assert got == confirm, got
    return r, w


async def numsub(port: int) -> int:
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(encode(b"PUBSUB", b"NUMSUB", CHANNEL))
    await w.drain()
    data = b""
    while not data.endswith(b"\r\n") or data.count(b"\r\n") < 4:
        data += await r.read(4096)
    w.close()
    return int(data.split(b"\r\n")[3][1:])


async def publisher(port: int, messages: int, payload: bytes, window: int) -> None:
    """PUBLISH ``messages`` times, at most ``window`` unanswered at once."""
    r, w = await asyncio.open_connection("127.0.0.1", port)
    cmd = encode(b"PUBLISH", CHANNEL, payload)
    sent = answered = 0
    buf = b""
    while answered < messages:
        n = min(window - (sent - answered), messages - sent)
        if n > 0:
            w.write(cmd * n)
            sent += n
        data = await r.read(65536)
        assert data, "publisher: connection closed"
        buf += data
        k = buf.count(b"\r\n")  # every reply is one :N line
        answered += k
        buf = buf[buf.rfind(b"\r\n") + 2:]
    w.close()


async def fanout(port: int, subscribers: int, messages: int, size: int, window: int) -> dict[str, Any]:
    subs = [await subscribe(port) for _ in range(subscribers)]
    while await numsub(port) < subscribers:
        await asyncio.sleep(0.01)
    want = messages * message_len(size)

    async def drain(r: asyncio.StreamReader) -> float:
        got = 0
        while got < want:
            data = await r.read(1 << 20)
            assert data, "subscriber: connection closed"
            got += len(data)
        return clock()

    readers = [asyncio.ensure_future(drain(r)) for r, _ in subs]
    t0 = clock()
    await publisher(port, messages, b"x" * size, window)
    t_pub = clock()
    done = await asyncio.wait_for(asyncio.gather(*readers), timeout=600)
    t1 = max(done)
    for _, w in subs:
        w.close()
    secs = t1 - t0
    return {
        "subscribers": subscribers,
        "messages": messages,
        "seconds": round(secs, 3),
        "publish_seconds": round(t_pub - t0, 3),
        "messages_per_s": round(messages / secs),
        "deliveries_per_s": round(messages * subscribers / secs),
    }


async def latency(pub_port: int, sub_ports: list[int], messages: int, rate: float) -> dict[int, dict[str, Any]]:
    """Publish stamped messages on ``pub_port`` at ``rate``/s; per subscriber port, the
    latency distribution in ms. Waits first until a probe reaches every subscriber (the
    relay streams to peers open with the links)."""
    subs = {p: await subscribe(p) for p in sub_ports}
    pr, pw = await asyncio.open_connection("127.0.0.1", pub_port)

    async def publish(payload: bytes) -> None:
        pw.write(encode(b"PUBLISH", CHANNEL, payload))
        await pw.drain()
        line = await pr.readline()
        assert line.startswith(b":"), line

    # the probe: keep publishing until every subscriber saw one
    pending = set(sub_ports)
    deadline = time.monotonic() + 60
    while pending:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no probe reached the subscribers on ports {sorted(pending)}")
        await publish(b"probe")
        for p in list(pending):
            try:
                data = await asyncio.wait_for(subs[p][0].read(65536), 0.2)
            except asyncio.TimeoutError:
                continue
            if b"probe" in data:
                pending.discard(p)
    await asyncio.sleep(0.5)
    for r, _ in subs.values():  # late probes
        while True:
            try:
                await asyncio.wait_for(r.read(65536), 0.2)
            except asyncio.TimeoutError:
                break

    mlen = message_len(8 + 8)
    samples: dict[int, list[float]] = {p: [] for p in sub_ports}

    async def receive(p: int) -> None:
        r = subs[p][0]
        buf = b""
        while len(samples[p]) < messages:
            data = await r.read(65536)
            now = clock()
            assert data, "subscriber: connection closed"
            buf += data
            while len(buf) >= mlen:
                msg, buf = buf[:mlen], buf[mlen:]
                sent, _seq = struct.unpack(">dQ", msg[-18:-2])
                samples[p].append((now - sent) * 1000)

    readers = [asyncio.ensure_future(receive(p)) for p in sub_ports]
    gap = 1.0 / rate
    t_next = clock()
    for i in range(messages):
        delay = t_next - clock()
        if delay > 0:
            await asyncio.sleep(delay)
        await publish(struct.pack(">dQ", clock(), i))
        t_next += gap
    await asyncio.wait_for(asyncio.gather(*readers), timeout=120)
    pw.close()
    for _, w in subs.values():
        w.close()
    out = {}
    for p, xs in samples.items():
        xs.sort()
        out[p] = {
            "messages": len(xs),
            "p50_ms": round(statistics.median(xs), 3),
            "p99_ms": round(xs[min(len(xs) - 1, int(len(xs) * 0.99))], 3),
            "max_ms": round(xs[-1], 3),
        }
    return out


def run_fanout(srv: bs.ServerProc, args: argparse.Namespace) -> list[dict[str, Any]]:
    rows = []
    for s in args.subscribers:
        m = max(1000, args.messages // max(1, s // 10))  # fewer messages to many subscribers
        rows.append(asyncio.run(fanout(srv.port, s, m, args.size, args.window)))
        print(f"  {srv.name:8} {s:4} subscribers: {rows[-1]['messages_per_s']:>9,} msg/s  "
              f"{rows[-1]['deliveries_per_s']:>10,} deliveries/s", flush=True)
    return rows


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subscribers", type=lambda s: [int(x) for x in s.split(",")], default=[1, 10, 100])
    ap.add_argument("--messages", type=int, default=200_000,
                    help="messages per fan-out run (fewer with many subscribers)")
    ap.add_argument("--size", type=int, default=64, help="payload bytes")
    ap.add_argument("--window", type=int, default=64, help="PUBLISH commands in flight")
    ap.add_argument("--latency-messages", type=int, default=5000)
    ap.add_argument("--rate", type=float, default=1000.0, help="latency run: messages per second")
    ap.add_argument("--quick", action="store_true", help="small runs (a smoke test of the script)")
    ap.add_argument("--marekvs-only", action="store_true")
    args = ap.parse_args(argv)
    if args.quick:
        args.messages, args.latency_messages = 20_000, 500
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.makedirs(bs.RESULTS, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    work = tempfile.mkdtemp(prefix="marekvs-bench-pubsub-")
    result: dict[str, Any] = {
        "started": stamp,
        "args": vars(args),
        "host": {"cpus": os.cpu_count(), "platform": platform.platform(),
                 "python": platform.python_version(), "loadavg_before": os.getloadavg()},
        "fanout": {}, "latency": {},
    }
    started: list[mc.NodeSpec] = []
    try:
        servers = [("marekvs", lambda p: bs.marekvs_proc(p, work, None, "speedscope", 100, []))]
        if not args.marekvs_only:
            servers.append(("redis", lambda p: bs.redis_server_proc(p, work)))
        print("(a) fan-out on one node")
        for name, make in servers:
            srv = make(bs.free_port_pair())
            srv.start()
            try:
                result["fanout"][name] = run_fanout(srv, args)
                if name == "redis":
                    local = asyncio.run(latency(srv.port, [srv.port], args.latency_messages, args.rate))
                    result["latency"]["redis local"] = local[srv.port]
            finally:
                srv.stop()
        print("(b) latency, 3-node cluster")
        base = gbase = 0
        while not base or not all(mc.port_free(p) for p in range(gbase, gbase + 3)):
            base = bs.free_port_pair()
            gbase = base + 10000
            if not all(mc.port_free(p) for p in range(base, base + 3)):
                base = 0
        st, problems = mc.start_cluster(Path(work) / "cluster", 3, base, gbase, "everysec", "", "bench", timeout=60)
        started.extend(st["nodes"])
        if problems:
            raise RuntimeError(f"nodes failed to start: {problems}")
        n1, n3 = st["nodes"][0].port, st["nodes"][2].port
        lat = asyncio.run(latency(n1, [n1, n3], args.latency_messages, args.rate))
        result["latency"]["marekvs node1 -> node1"] = lat[n1]
        result["latency"]["marekvs node1 -> node3"] = lat[n3]
    finally:
        if started:
            mc.stop_nodes(started, timeout=15)
        shutil.rmtree(work, ignore_errors=True)
    result["host"]["loadavg_after"] = os.getloadavg()
    print_report(result)
    out = Path(bs.RESULTS) / f"pubsub-{stamp}.json"
    out.write_text(json.dumps(result, indent=2))
    print(f"\nresults: {out.relative_to(ROOT)}")
    return 0


def print_report(res: dict[str, Any]) -> None:
    print("\nfan-out (one publisher, one channel, %d-byte payloads)" % res["args"]["size"])
    print(f"{'subscribers':>11} | {'marekvs msg/s':>13} | {'redis msg/s':>11} | {'ratio':>5} | "
          f"{'marekvs deliveries/s':>20}")
    mk = res["fanout"].get("marekvs", [])
    rd = {r["subscribers"]: r for r in res["fanout"].get("redis", [])}
    for r in mk:
        o = rd.get(r["subscribers"])
        ratio = f"{r['messages_per_s'] / o['messages_per_s']:.2f}" if o else "-"
        theirs = f"{o['messages_per_s']:,}" if o else "-"
        print(f"{r['subscribers']:>11} | {r['messages_per_s']:>13,} | {theirs:>11} | "
              f"{ratio:>5} | {r['deliveries_per_s']:>20,}")
    print(f"\npublish-to-receive latency at {res['args']['rate']:.0f} msg/s")
    for name, r in res["latency"].items():
        print(f"  {name:24} p50 {r['p50_ms']:7.3f} ms  p99 {r['p99_ms']:7.3f} ms  max {r['max_ms']:7.3f} ms")


if __name__ == "__main__":
    sys.exit(main())
