#!/usr/bin/env python3
"""The XREADGROUP+XACK row of bench_single.py: consumers of one group, each reading one
entry with ``XREADGROUP GROUP g c<i> COUNT 1 STREAMS <key> >`` and acknowledging it with
``XACK <key> g <id>``, the id taken from the reply. redis-benchmark sends one fixed
command, so it cannot ack what it read; this client does exactly that loop and prints its
result as redis-benchmark's ``--csv`` does, so bench_single.py treats both alike.

    xreadgroup_ack.py -p PORT -c CLIENTS -n PAIRS -P PIPELINE [--csv]

Before the clock starts it makes a fresh stream of PAIRS entries (64-byte values, like
redis-benchmark's -d 64) and its group, pipelined; afterwards it deletes the stream. With
``-P N`` each client sends N XREADGROUPs at once, then the N XACKs of their ids at once;
a pair's latency is the time from sending its XREADGROUP to the reply to its XACK.

One Python process with non-blocking sockets and hiredis for parsing: on the 2-core
machine it uses about as much CPU per request as redis-benchmark (``client_cpu`` in the
results shows it), so it can hold Redis back less than a slower client would but more
than redis-benchmark; the XREADGROUP+XACK ratio is therefore, if anything, flattering to
marekvs (bench/README.md).
"""

from __future__ import annotations

import argparse
import os
import selectors
import socket
import sys
import time

import hiredis


def encode(*args: bytes) -> bytes:
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


class Conn:
    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port))
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = hiredis.Reader(replyError=lambda e: Exception(e.decode() if isinstance(e, bytes) else e))
        self.want = 0
        self.got: list = []

    def call(self, *cmds: bytes) -> list:
        """Send the encoded commands, wait for all their replies (blocking)."""
        self.sock.sendall(b"".join(cmds))
        out = []
        while len(out) < len(cmds):
            r = self.reader.gets()
            if r is False:
                data = self.sock.recv(1 << 16)
                if not data:
                    raise ConnectionError("server closed the connection")
                self.reader.feed(data)
                continue
            if isinstance(r, Exception):
                raise r
            out.append(r)
        return out


def prepare(port: int, key: bytes, n: int, size: int) -> None:
    c = Conn(port)
    value = b"x" * size
    batch = 1000
    for first in range(0, n, batch):
        c.call(*[encode(b"XADD", key, b"*", b"field", value) for _ in range(min(batch, n - first))])
    c.call(encode(b"XGROUP", b"CREATE", key, b"g", b"0"))
    c.sock.close()


def run(port: int, clients: int, n: int, pipeline: int, key: bytes) -> tuple[float, list[float]]:
    sel = selectors.DefaultSelector()
    conns = [Conn(port) for _ in range(clients)]
    reads = [encode(b"XREADGROUP", b"GROUP", b"g", b"c%d" % i, b"COUNT", b"1", b"STREAMS", key, b">")
             for i in range(clients)]
    state: dict[int, list] = {}  # fd -> [conn, index, phase, replies due, batch start, ids, pairs]
    lat: list[float] = []
    left = n  # pairs not started yet
    done = 0

    def start(c: Conn, i: int) -> bool:
        nonlocal left
        k = min(pipeline, left)
        if k <= 0:
            return False
        left -= k
        c.sock.sendall(reads[i] * k)
        state[c.sock.fileno()] = [c, i, "read", k, time.perf_counter(), [], k]
        return True

    t0 = time.perf_counter()
    for i, c in enumerate(conns):
        c.sock.setblocking(False)
        sel.register(c.sock, selectors.EVENT_READ)
        start(c, i)
    while done < n:
        for skey, _ in sel.select():
            st = state[skey.fd]
            c = st[0]
            try:
                data = c.sock.recv(1 << 16)
            except BlockingIOError:
                continue
            if not data:
                raise ConnectionError("server closed the connection")
            c.reader.feed(data)
            while st[3]:
                r = c.reader.gets()
                if r is False:
                    break
                if isinstance(r, Exception):
                    raise r
                st[3] -= 1
                if st[2] == "read":
                    if not r:
                        raise RuntimeError("XREADGROUP found nothing to read: the stream ran dry")
                    entries = r[0][1] if isinstance(r, list) else next(iter(r.values()))
                    st[5].append(entries[0][0])
            if st[3]:
                continue
            if st[2] == "read":
                ids = st[5]
                c.sock.sendall(b"".join(encode(b"XACK", key, b"g", sid) for sid in ids))
                st[2], st[3], st[5] = "ack", len(ids), []
            else:
                k = st[6]
                lat.extend([time.perf_counter() - st[4]] * k)
                done += k
                if not start(c, st[1]):
                    sel.unregister(c.sock)
    wall = time.perf_counter() - t0
    for c in conns:
        c.sock.close()
    return wall, lat


def pct(xs: list[float], p: float) -> float:
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] * 1000 if xs else 0.0


def main(argv: list[str]) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-p", "--port", type=int, required=True)
    ap.add_argument("-c", "--clients", type=int, default=50)
    ap.add_argument("-n", "--pairs", type=int, default=100_000)
    ap.add_argument("-P", "--pipeline", type=int, default=1)
    ap.add_argument("-d", "--size", type=int, default=64)
    ap.add_argument("--csv", action="store_true")
    args, _ = ap.parse_known_args(argv)
    key = b"bench:xreadgroup-ack:%d:%d" % (os.getpid(), time.time_ns())
    prepare(args.port, key, args.pairs, args.size)
    try:
        wall, lat = run(args.port, args.clients, args.pairs, args.pipeline, key)
    finally:
        Conn(args.port).call(encode(b"DEL", key))
    lat.sort()
    rps = args.pairs / wall
    avg = sum(lat) / len(lat) * 1000 if lat else 0.0
    cols = [rps, avg, pct(lat, 0), pct(lat, 50), pct(lat, 95), pct(lat, 99), pct(lat, 100)]
    if args.csv:
        print('"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",'
              '"p99_latency_ms","max_latency_ms"')
        print('"XREADGROUP+XACK",' + ",".join(f'"{x:.3f}"' for x in cols))
    else:
        print(f"XREADGROUP+XACK: {rps:,.0f} pairs/s, p50 {cols[3]:.3f} ms, p99 {cols[5]:.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
