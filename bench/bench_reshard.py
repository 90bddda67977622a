"""Resharding on restart (docs/shards.md §7): how fast ``marekvs/shards/reshard.py`` moves a
data directory between shard counts.

A directory written by one process (``--keys`` strings of ``--value-size`` bytes, a hash of
ten fields per ``--hash-every`` keys, through a ``Node`` in this process; its log trimmed as
a node without peers keeps it, or whole with ``--keep-log``) is resharded 1 -> 4 -> 2 -> 1
with ``reshard.prepare``, as ``marekvs serve`` does before anything serves. Each step prints
its records, MB (keys + values), seconds and MB/s, the CPU time of this process (its
RocksDB threads included: on a loaded machine the steadier figure); and what rebuilding the kept digest from
the records (what a directory without one does at open) would cost instead of copying its
slots.

    .venv/bin/python bench/bench_reshard.py --keys 200000
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import tempfile
import time
from dataclasses import replace

from marekvs.config import Config
from marekvs.node import Node
from marekvs.shards import reshard
from marekvs.storage.digest import computed
from marekvs.storage.engine import Engine


def build(path: str, keys: int, value_size: int, hash_every: int, keep_log: bool) -> Config:
    cfg = Config(data_dir=path, node_id=1, durability="no")
    node = Node(cfg)
    ctx = node.new_context()
    value = b"v" * value_size
    for i in range(keys):
        node.dispatch(ctx, [b"SET", b"key:%d" % i, value])
        if hash_every and i % hash_every == 0:
            node.dispatch(ctx, [b"HSET", b"hash:%d" % i, *(x for f in range(10) for x in (b"f%d" % f, b"x" * 20))])
        if i % 1000 == 999:
            node.end_tick()
    node.end_tick()
    if not keep_log:
        node.engine.trim_log(node.engine.log_seq)
    node.close()
    return cfg


def rebuild_cost(cfg: Config) -> float:
    """Seconds to compute every worker's digest from its records (the alternative to copying)."""
    layout = reshard.committed(cfg.data_dir)
    assert layout is not None
    took = 0.0
    for d, r in zip(layout.dirs, layout.ranges):
        e = Engine(d, node_id=1, durability="no", partitions=r)
        t = time.perf_counter()
        computed(e.scan(b""))
        took += time.perf_counter() - t
        e.close()
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--value-size", type=int, default=100)
    ap.add_argument("--hash-every", type=int, default=10)
    ap.add_argument("--keep-log", action="store_true",
                    help="keep the log (one entry per 1000 keys: what peers that have not acknowledged it leave), "
                         "which each step re-logs")
    ap.add_argument("--steps", default="4,2,1", help="the shard counts to go through, from one process")
    args = ap.parse_args()
    logging.basicConfig(level=logging.WARNING)
    root = tempfile.mkdtemp(prefix="bench-reshard-")
    try:
        t = time.perf_counter()
        cfg = build(os.path.join(root, "d"), args.keys, args.value_size, args.hash_every, args.keep_log)
        print(f"wrote {args.keys} keys through one process in {time.perf_counter() - t:.1f} s")
        e = Engine(cfg.data_dir, node_id=1, durability="no")
        records = size = 0
        for k, v in e.scan(b""):
            records += 1
            size += len(k) + len(v)
        e.close()
        mb = size / 1e6
        frm = 1
        for n in (int(x) for x in args.steps.split(",")):
            t, cpu = time.perf_counter(), time.process_time()
            reshard.prepare(replace(cfg, shards=n))
            took, cpu = time.perf_counter() - t, time.process_time() - cpu
            print(f"{frm} -> {n} workers: {records} records, {mb:.1f} MB in {took:.2f} s: {mb / took:.1f} MB/s, "
                  f"{records / took / 1e3:.0f}k records/s; CPU {cpu:.2f} s ({mb / cpu:.1f} MB per CPU second); "
                  "rebuilding the digests instead would add "
                  f"{rebuild_cost(replace(cfg, shards=n)):.2f} s")
            frm = n
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
