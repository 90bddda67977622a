#!/usr/bin/env python3
"""The MULTI row of bench_single.py: transactions of MULTI, three SETs of random keys (of
the --keyspace default's 100k, ``key:%012d`` as redis-benchmark writes them) and EXEC.
redis-benchmark cannot pipeline such blocks, so this client sends them and prints its
result as redis-benchmark's ``--csv`` does, so bench_single.py treats both alike.

    multi_exec.py -p PORT -c CLIENTS -n TRANSACTIONS -P PIPELINE [-d SIZE] [-r KEYSPACE] [--csv]

With ``-P N`` each client sends N transactions at once. Every reply is known in advance
(``+OK``, three ``+QUEUED``, ``*3`` and three ``+OK``), so a batch is done when its bytes
have arrived; each connection's first batch is checked byte for byte. A transaction's
latency is its batch's round trip.
"""

from __future__ import annotations

import argparse
import random
import selectors
import socket
import sys
import time

REPLY = b"+OK\r\n" + b"+QUEUED\r\n" * 3 + b"*3\r\n" + b"+OK\r\n" * 3


def transaction(keyspace: int, size: int, rng: random.Random) -> bytes:
    value = b"x" * size
    out = [b"*1\r\n$5\r\nMULTI\r\n"]
    for _ in range(3):
        k = b"key:%012d" % rng.randrange(keyspace)
        out.append(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, size, value))
    out.append(b"*1\r\n$4\r\nEXEC\r\n")
    return b"".join(out)


def run(port: int, clients: int, n: int, pipeline: int, keyspace: int, size: int) -> tuple[int, float, list[float]]:
    rng = random.Random(1)
    batches = [b"".join(transaction(keyspace, size, rng) for _ in range(pipeline)) for _ in range(64)]
    want = REPLY * pipeline
    sel = selectors.DefaultSelector()
    conns = []
    for _ in range(min(clients, max(1, n // pipeline))):
        s = socket.create_connection(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        s.setblocking(False)
        conns.append(s)
    state: dict[socket.socket, list] = {}  # socket -> [received bytes, sent at, checked]
    sent = 0
    lat: list[float] = []
    t0 = time.perf_counter()

    def send(s: socket.socket) -> bool:
        nonlocal sent
        if sent >= n:
            return False
        s.sendall(batches[(sent // pipeline) % len(batches)])
        sent += pipeline
        state[s][0] = bytearray()
        state[s][1] = time.perf_counter()
        return True

    for s in conns:
        state[s] = [bytearray(), 0.0, False]
        sel.register(s, selectors.EVENT_READ)
        send(s)
    active = len(conns)
    while active:
        for key, _ in sel.select():
            s = key.fileobj  # type: ignore[assignment]
            data = s.recv(1 << 16)
            if not data:
                sys.exit("multi_exec: the server closed a connection")
            st = state[s]
            st[0] += data
            if len(st[0]) < len(want):
                continue
            if not st[2]:
                if bytes(st[0]) != want:
                    sys.exit(f"multi_exec: unexpected reply {bytes(st[0])[:200]!r}")
                st[2] = True
            lat.extend([time.perf_counter() - st[1]] * pipeline)
            if not send(s):
                sel.unregister(s)
                s.close()
                active -= 1
    return sent, time.perf_counter() - t0, lat


def pct(xs: list[float], p: float) -> float:
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] * 1000 if xs else 0.0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-p", "--port", type=int, required=True)
    ap.add_argument("-c", "--clients", type=int, default=50)
    ap.add_argument("-n", "--requests", type=int, default=100_000)
    ap.add_argument("-P", "--pipeline", type=int, default=1)
    ap.add_argument("-d", "--size", type=int, default=64)
    ap.add_argument("-r", "--keyspace", type=int, default=100_000)
    ap.add_argument("--csv", action="store_true")
    args, _ = ap.parse_known_args(argv)
    sent, wall, lat = run(args.port, args.clients, args.requests, args.pipeline, args.keyspace, args.size)
    lat.sort()
    rps = sent / wall
    avg = sum(lat) / len(lat) * 1000 if lat else 0.0
    cols = [rps, avg, pct(lat, 0), pct(lat, 50), pct(lat, 95), pct(lat, 99), pct(lat, 100)]
    if args.csv:
        print('"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",'
              '"p99_latency_ms","max_latency_ms"')
        print('"MULTI",' + ",".join(f'"{x:.3f}"' for x in cols))
    else:
        print(f"MULTI: {rps:,.0f} transactions/s, p50 {cols[3]:.3f} ms, p99 {cols[5]:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
