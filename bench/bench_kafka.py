#!/usr/bin/env python3
"""Kafka gateway benchmark: produce and consume throughput with librdkafka (confluent-kafka),
one node and three, next to the floor of the same data written with pipelined XADD over RESP.

    .venv/bin/python bench/bench_kafka.py            # 100 B and 1 KB records, 1 node and 3
    .venv/bin/python bench/bench_kafka.py --quick    # a smoke run (a few seconds per row)
    .venv/bin/python bench/bench_kafka.py --nodes 1 --shards 1,2 --partitions 8   # shard workers

Nodes are started as ``marekvs cluster up --kafka`` starts them (``marekvs.launcher``), on free
127.0.0.1 ports and temp data dirs, durability everysec, and stopped by their pids at the end.
For each cluster size (1, 3) and record size (100 B, 1 KB):

- produce: one confluent-kafka Producer (``acks=all``, ``linger.ms=5``, ``batch.size`` 1 MB,
  idempotence off, no compression) sends N records of that size (null keys) to a topic with
  one partition per node (on three nodes, one partition led by each node), as fast as it
  can, until every delivery report is in: records/s and MB/s of values;
- consume: one Consumer (``assign`` every partition from the beginning, no group) reads the
  N records back: records/s and MB/s;
- floor: ``redis-benchmark -c 50 -P 16 -n N/nodes XADD <stream> * value <the same bytes>
  timestamp <ms>`` against every node at once (one stream each): the same records written as
  fast as RESP pipelining writes them (records/s summed over the nodes);
- server CPU: the nodes' user+system CPU seconds over each phase (/proc), per record.

``--shards 1,2`` runs each one-node row on a node of one process and of two shard workers
(``--shards 2``: worker 0 serves Kafka and carries the commands of the other's partitions,
docs/kafka.md); ``--partitions 8`` gives the topics 8 partitions, named so that they split
evenly over the workers. The server CPU then counts every worker (and the supervisor).

Table on stdout, everything as JSON in ``bench/results/kafka-<timestamp>.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
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

from confluent_kafka import Consumer, Producer, TopicPartition  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from marekvs import launcher as mc  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pids: list[int]) -> float:
    """User+system CPU of ``pids`` and their children (a node's shard workers)."""
    total = 0.0
    for pid in pids + [c for p in pids for c in children(p)]:
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def topic_name(size: int, partitions: int, shards: int) -> tuple[str, list[int]]:
    """``bench-<size>``, with a suffix if need be so that the partitions' streams split
    evenly over ``shards`` workers; and how many land on each."""
    from marekvs.core.partition import ShardMap

    m = ShardMap.even(shards)
    for k in range(1000):
        name = f"bench-{size}" + (f"-{k}" if k else "")
        per = [0] * shards
        for p in range(partitions):
            per[m.shard_of_key(f"korvet:stream:{name}:{p}".encode())] += 1
        if max(per) - min(per) <= 1:
            return name, per
    raise RuntimeError("no topic name splits evenly")


def free_base(span: int) -> int:
    for _ in range(500):
        base = random.randrange(20000, 32000 - span)
        if all(mc.port_free(p) for p in range(base, base + span)):
            return base
    raise RuntimeError("no free port range")


def boot(nodes: list[mc.NodeSpec]) -> str:
    return ",".join(f"{mc.HOST}:{n.kafka_port}" for n in nodes)


def produce(nodes: list[mc.NodeSpec], topic: str, n: int, size: int, parts: int) -> dict[str, Any]:
    p = Producer({"bootstrap.servers": boot(nodes), "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
                  "enable.idempotence": False, "compression.type": "none", "queue.buffering.max.messages": 500000,
                  "message.timeout.ms": 300000})
    value = b"v" * size
    failed = []

    def report(err: Any, _msg: Any) -> None:
        if err is not None:
            failed.append(err)

    pids = [x.pid for x in nodes]
    c0, t0 = cpu_seconds(pids), time.perf_counter()
    for i in range(n):
        while True:
            try:
                p.produce(topic, value=value, partition=i % parts, on_delivery=report)
                break
            except BufferError:
                p.poll(0.01)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(300)
    dt, cpu = time.perf_counter() - t0, cpu_seconds(pids) - c0
    if left or failed:
        raise RuntimeError(f"produce: {left} not delivered, {len(failed)} failed ({failed[:3]})")
    return {"records": n, "seconds": round(dt, 3), "records_s": round(n / dt), "mb_s": round(n * size / dt / 1e6, 2),
            "server_cpu_us_per_record": round(cpu / n * 1e6, 1)}


def produce_one_by_one(nodes: list[mc.NodeSpec], topic: str, n: int, size: int, parts: int) -> dict[str, Any]:
    """One record per request, each waited for (``flush``) before the next: a request's
    round trip through the gateway (on shard workers: a round), as records/s and server
    CPU per request."""
    p = Producer({"bootstrap.servers": boot(nodes), "acks": "all", "linger.ms": 0, "enable.idempotence": False})
    value = b"v" * size
    p.produce(topic, value=value, partition=0)
    p.flush(60)  # (connected, metadata known)
    pids = [x.pid for x in nodes]
    c0, t0 = cpu_seconds(pids), time.perf_counter()
    for i in range(n):
        p.produce(topic, value=value, partition=i % parts)
        if p.flush(60):
            raise RuntimeError("produce one by one: not delivered")
    dt, cpu = time.perf_counter() - t0, cpu_seconds(pids) - c0
    return {"records": n, "seconds": round(dt, 3), "records_s": round(n / dt), "latency_ms": round(dt / n * 1e3, 3),
            "server_cpu_us_per_record": round(cpu / n * 1e6, 1)}


def resp_beside(nodes: list[mc.NodeSpec], topic: str, size: int, parts: int, seconds: float) -> dict[str, Any]:
    """GET/s of RESP clients (``redis-benchmark -c 50 -P 16 -t get``, INFO's
    cmdstat_get calls over ``seconds``) alone, then beside a producer sending one
    record per request: what the Kafka requests' rounds cost the RESP clients."""
    import redis

    node = nodes[0]
    r = redis.Redis(host=mc.HOST, port=node.port)

    def gets() -> int:
        return int(r.info("commandstats")["cmdstat_get"]["calls"])

    def measure(during: Any) -> float:
        cmd = ["redis-benchmark", "-h", mc.HOST, "-p", str(node.port), "-c", "50", "-P", "16", "-t", "get",
               "-n", "100000000", "-r", "100000"]
        p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            time.sleep(1.0)  # (connected, warm)
            c0, t0 = gets(), time.perf_counter()
            during(seconds)
            c1, t1 = gets(), time.perf_counter()
        finally:
            p.terminate()
            p.wait(60)
        return (c1 - c0) / (t1 - t0)

    alone = measure(time.sleep)
    sent = [0]

    def producing(secs: float) -> None:
        p = Producer({"bootstrap.servers": boot(nodes), "acks": "all", "linger.ms": 0, "enable.idempotence": False})
        end = time.monotonic() + secs
        while time.monotonic() < end:
            p.produce(topic, value=b"v" * size, partition=sent[0] % parts)
            p.flush(60)
            sent[0] += 1

    beside = measure(producing)
    return {"get_s_alone": round(alone), "get_s_beside_producer": round(beside), "seconds": seconds,
            "producer_requests_s": round(sent[0] / seconds),
            "command": "redis-benchmark -c 50 -P 16 -t get -r 100000 (rate from INFO commandstats)"}


def consume(nodes: list[mc.NodeSpec], topic: str, n: int, size: int, parts: int) -> dict[str, Any]:
    c = Consumer({"bootstrap.servers": boot(nodes), "group.id": "bench", "enable.auto.commit": False,
                  "fetch.max.bytes": 50 << 20, "max.partition.fetch.bytes": 10 << 20})
    c.assign([TopicPartition(topic, p, 0) for p in range(parts)])
    pids = [x.pid for x in nodes]
    got = 0
    c0, t0 = cpu_seconds(pids), time.perf_counter()
    deadline = time.monotonic() + 600
    while got < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"consume: {got} of {n} records after 600 s")
        for m in c.consume(10000, 1.0):
            if m.error() is None:
                got += 1
    dt, cpu = time.perf_counter() - t0, cpu_seconds(pids) - c0
    c.close()
    return {"records": got, "seconds": round(dt, 3), "records_s": round(got / dt),
            "mb_s": round(got * size / dt / 1e6, 2), "server_cpu_us_per_record": round(cpu / got * 1e6, 1)}


def floor(nodes: list[mc.NodeSpec], n: int, size: int, tag: str) -> dict[str, Any]:
    """Pipelined XADD over RESP, every node at once (redis-benchmark, one stream each)."""
    value = "v" * size
    per = n // len(nodes)
    pids = [x.pid for x in nodes]
    cmds = [["redis-benchmark", "-h", mc.HOST, "-p", str(x.port), "-c", "50", "-P", "16", "-n", str(per), "--csv",
             "XADD", f"floor:{tag}:{x.id}", "*", "value", value, "timestamp", str(int(time.time() * 1000))]
            for x in nodes]
    c0, t0 = cpu_seconds(pids), time.perf_counter()
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for cmd in cmds]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    dt, cpu = time.perf_counter() - t0, cpu_seconds(pids) - c0
    if any(p.returncode for p in procs):
        raise RuntimeError(f"redis-benchmark failed: {outs}")
    total = per * len(nodes)
    return {"records": total, "seconds": round(dt, 3), "records_s": round(total / dt),
            "mb_s": round(total * size / dt / 1e6, 2), "server_cpu_us_per_record": round(cpu / total * 1e6, 1),
            "command": " ".join(cmds[0][:15]) + " value <%d B> timestamp <ms>" % size}


def table(header: list[str], rows: list[list[Any]]) -> None:
    """A markdown table on stdout (nothing when there are no rows)."""
    if not rows:
        return
    print("\n| " + " | ".join(header) + " |")
    print("|" + " ---: |" * len(header))
    for row in rows:
        print("| " + " | ".join(str(x) for x in row) + " |")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="few records: a smoke run")
    ap.add_argument("--records-100", type=int, default=200_000, help="records of 100 B per row")
    ap.add_argument("--records-1k", type=int, default=60_000, help="records of 1 KB per row")
    ap.add_argument("--nodes", default="1,3", help="cluster sizes")
    ap.add_argument("--shards", default="1", help="shard workers per node, for one-node rows (e.g. 1,2)")
    ap.add_argument("--partitions", type=int, default=0, help="partitions per topic (default: one per node)")
    ap.add_argument("--one-by-one", type=int, default=2000, help="records produced one request at a time (100 B rows)")
    ap.add_argument("--resp-beside", type=float, default=0, help="seconds of RESP GETs alone, then beside a "
                    "one-record-per-request producer (100 B rows of one node; 0: not run)")
    args = ap.parse_args(argv)
    if shutil.which("redis-benchmark") is None:
        sys.exit("bench: redis-benchmark not found on PATH (apt-get install redis-tools)")
    sizes = {100: args.records_100, 1000: args.records_1k}
    if args.quick:
        sizes = {100: 20_000, 1000: 6_000}
    RESULTS.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    result: dict[str, Any] = {"started": stamp, "argv": sys.argv, "rows": [],
                              "host": {"cpus": os.cpu_count(), "platform": platform.platform(),
                                       "python": platform.python_version(), "loadavg_before": os.getloadavg()}}
    if os.getloadavg()[0] > 0.5:
        print(f"bench: WARNING: load average {os.getloadavg()[0]:.2f} before the run: other work on this "
              f"{os.cpu_count()}-core machine skews the numbers", file=sys.stderr)
    runs = [(count, shards) for count in (int(x) for x in args.nodes.split(","))
            for shards in (int(x) for x in args.shards.split(",")) if count == 1 or shards == 1]
    for count, shards in runs:  # (a node of several workers with peers does not serve Kafka yet)
        work = Path(tempfile.mkdtemp(prefix="marekvs-bench-kafka-"))
        base = free_base(3 * count)
        extra = ["--kafka-group-initial-rebalance-delay-ms", "0", "--shards", str(shards)]
        st, problems = mc.start_cluster(work, count, base, base + count, "everysec", "", "bench", timeout=90,
                                        kafka_base_port=base + 2 * count, extra=extra)
        nodes: list[mc.NodeSpec] = st["nodes"]
        try:
            if problems:
                raise RuntimeError(f"nodes failed to start: {problems}")
            admin = AdminClient({"bootstrap.servers": boot(nodes)})
            deadline = time.monotonic() + 60
            while len(admin.list_topics(timeout=10).brokers) < count:
                if time.monotonic() > deadline:
                    raise RuntimeError("not every Kafka listener in Metadata after 60 s")
                time.sleep(0.2)
            for size, n in sizes.items():
                parts = args.partitions or count
                topic, per_worker = topic_name(size, parts, shards)
                admin.create_topics([NewTopic(topic, parts, 1)], operation_timeout=60)[topic].result(90)
                row = {"nodes": count, "shards": shards, "partitions": parts, "partitions_per_worker": per_worker,
                       "size": size, "produce": produce(nodes, topic, n, size, parts),
                       "consume": consume(nodes, topic, n, size, parts),
                       "floor_xadd": floor(nodes, n, size, topic)}
                if size == 100 and args.one_by_one:
                    row["produce_one_by_one"] = produce_one_by_one(nodes, topic, args.one_by_one, size, parts)
                if size == 100 and args.resp_beside and count == 1:
                    row["resp_beside"] = resp_beside(nodes, topic, size, parts, args.resp_beside)
                result["rows"].append(row)
                print(f"{count} node(s) of {shards} worker(s), {parts} partitions, {size} B: "
                      f"produce {row['produce']['records_s']:,} rec/s "
                      f"({row['produce']['mb_s']} MB/s), consume {row['consume']['records_s']:,} rec/s "
                      f"({row['consume']['mb_s']} MB/s), floor XADD -P 16 {row['floor_xadd']['records_s']:,} rec/s "
                      f"({row['floor_xadd']['mb_s']} MB/s)", flush=True)
        finally:
            mc.stop_nodes(nodes, timeout=15)
            shutil.rmtree(work, ignore_errors=True)
    result["loadavg_after"] = os.getloadavg()
    table(["nodes", "shards", "partitions", "record", "produce rec/s", "MB/s", "consume rec/s", "MB/s",
           "XADD floor rec/s", "MB/s", "produce/floor", "server CPU us/rec (produce / consume / XADD)"],
          [[r["nodes"], r["shards"], r["partitions"], f"{r['size']} B", f"{p['records_s']:,}", p["mb_s"],
            f"{c['records_s']:,}", c["mb_s"], f"{f['records_s']:,}", f["mb_s"],
            f"{p['records_s'] / f['records_s']:.2f}x",
            f"{p['server_cpu_us_per_record']} / {c['server_cpu_us_per_record']} / {f['server_cpu_us_per_record']}"]
           for r in result["rows"] for p, c, f in [(r["produce"], r["consume"], r["floor_xadd"])]])
    table(["nodes", "shards", "partitions", "one record per request: rec/s", "latency ms", "server CPU us/request"],
          [[r["nodes"], r["shards"], r["partitions"], f"{o['records_s']:,}", o["latency_ms"],
            o["server_cpu_us_per_record"]]
           for r in result["rows"] if "produce_one_by_one" in r for o in [r["produce_one_by_one"]]])
    table(["shards", "RESP GET/s alone", "beside a one-record-per-request producer", "its requests/s"],
          [[r["shards"], f"{b['get_s_alone']:,}", f"{b['get_s_beside_producer']:,}", f"{b['producer_requests_s']:,}"]
           for r in result["rows"] if "resp_beside" in r for b in [r["resp_beside"]]])
    out = RESULTS / f"kafka-{stamp}.json"
    with open(out, "w") as f:
        json.dump(result, f, indent=2)
    print(f"\nresults: {out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
