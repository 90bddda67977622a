#!/usr/bin/env python3
"""DUMP and RESTORE of big values: CPU seconds per command, in-process (a real node, its
engine in a temporary directory, commands through ``Node.dispatch`` as a connection runs
them). The time is the node's: a DUMP or RESTORE this long holds the event loop.

    .venv/bin/python bench/bench_dump.py [--scale 1.0]

Rows: a 10 MB string, a list of 100k 64-byte elements, a hash of 100k fields, a zset of
100k members, a stream of 100k entries (two fields) with a group that has 10k of them
pending (each payload RESTOREd under a new key). CPU time (``getrusage``), not wall
time, so other load on the machine does not count.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from marekvs.config import Config  # noqa: E402
from marekvs.node import Node  # noqa: E402


def cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="multiply every size by this")
    args = ap.parse_args()
    n = int(100_000 * args.scale)
    d = tempfile.mkdtemp(prefix="bench-dump-")
    node = Node(Config(data_dir=d, node_id=1, durability="no"))
    ctx = node.new_context()
    try:
        rows = {
            b"string": [[b"SET", b"string", b"x" * (100 * n)]],
            b"list": [[b"RPUSH", b"list", *[b"%064d" % i for i in range(j, min(n, j + 10_000))]]
                      for j in range(0, n, 10_000)],
            b"hash": [[b"HSET", b"hash", *[x for i in range(j, min(n, j + 10_000)) for x in (b"f%d" % i, b"v" * 20)]]
                      for j in range(0, n, 10_000)],
            b"zset": [[b"ZADD", b"zset", *[x for i in range(j, min(n, j + 10_000)) for x in (b"%d" % i, b"m%d" % i)]]
                      for j in range(0, n, 10_000)],
            b"stream": [*[[b"XADD", b"stream", b"%d-1" % (i + 1), b"field", b"v" * 20, b"n", b"%d" % i]
                          for i in range(n)],
                        [b"XGROUP", b"CREATE", b"stream", b"g", b"0"],
                        [b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", b"%d" % (n // 10), b"STREAMS", b"stream",
                         b">"]],
        }
        print(f"{'value':<8} {'payload':>12} {'DUMP cpu s':>11} {'RESTORE cpu s':>14} {'MB/s (dump)':>12}")
        for key, cmds in rows.items():
            for cmd in cmds:
                node.dispatch(ctx, cmd)
            node.engine.commit()
            t = cpu()
            payload = node.dispatch(ctx, [b"DUMP", key])
            t_dump = cpu() - t
            t = cpu()
            ok = node.dispatch(ctx, [b"RESTORE", key + b":copy", b"0", payload])
            t_restore = cpu() - t
            node.engine.commit()
            assert ok == b"OK", ok
            print(f"{key.decode():<8} {len(payload):>12,} {t_dump:>11.2f} {t_restore:>14.2f} "
                  f"{len(payload) / t_dump / 1e6:>12.1f}")
    finally:
        node.drop_context(ctx)
        node.close()
        shutil.rmtree(d, ignore_errors=True)


if __name__ == "__main__":
    main()
