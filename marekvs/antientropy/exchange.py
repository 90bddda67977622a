"""One exchange: compare the digests of any set of replicas over a range of partitions,
drill down to the records that differ, and send each replica what it lacks.

The procedure, for ``count`` partitions from ``first`` (in chunks of ``Options.chunk``):

1. ``roots``     every replica's root of every partition; the partitions whose roots do
                 not all agree are *mismatched* (with ``verify`` each replica first
                 recomputes the digests of the range from its data and corrects them,
                 or, in a dry run, only reports them: those partitions are drilled into
                 whole, as their kept segments are not to be trusted);
2. ``segments``  for a batch of mismatched partitions, every replica's 16 kept segments:
                 the segments that differ;
3. ``fine``      the 16 fine segments under each of those (computed from the data);
4. ``fetch``     every replica's records of the fine segments that differ;
5. ``merge``     ``plan.plan_records``: per key the join of the replicas' records, and the
                 replicas whose record is not the join;
6. ``push``      each replica its missing joins in repair batches of at most
                 ``push_records`` records / ``push_bytes`` bytes (none with ``dry_run``).

Only digests cross the wire for partitions that match; only the records of differing fine
segments for those that do not. The replicas are anything with the ``replica.Replica``
interface (the transport is not this module's business): the node's background exchange
runs it with itself and one peer, ``marekvs repair`` with every named node, each task of
the PySpark job with every node over its range of partitions. Every stage is timed into
the ``Report``.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from marekvs.antientropy import plan as P
from marekvs.antientropy.replica import Replica, Roots
from marekvs.antientropy.report import Report
from marekvs.core import digest as D
from marekvs.core.partition import PARTITIONS


class IncompatibleReplicas(RuntimeError):
    """Replicas that keep different digests, or two addresses of one node."""


@dataclass
class Options:
    dry_run: bool = False
    settle_ms: int = 2000  # differences younger than this are left to log shipping
    verify: int = 0  # replica.VERIFY_*: recompute the range's digests from the data first
    chunk: int = 512  # partitions per Roots call
    batch: int = 64  # mismatched partitions drilled into per round trip
    push_records: int = 2000  # one repair batch at most ...
    push_bytes: int = 1 << 20  # ... and about this many bytes
    max_partitions: int = PARTITIONS  # mismatched partitions to drill into at most (throttle)
    start: int = 0  # drill into mismatched partitions from this one on, then wrap


Progress = Callable[[int, int], None]  # (partitions done, partitions in all)


async def _gather(report: Report, stage: str, calls: Sequence) -> list:
    t = time.perf_counter()
    try:
        return list(await asyncio.gather(*calls))
    finally:
        report.timed(stage, time.perf_counter() - t)


def _check(replicas: Sequence[Replica], roots: list[Roots], report: Report) -> list[str]:
    ids = [str(r.info.node_id) for r in roots]
    if len(set(ids)) != len(ids):
        pairs = ", ".join(f"{x.address} is node {i}" for i, x in zip(ids, replicas))
        raise IncompatibleReplicas(f"two addresses answer as the same node: {pairs}")
    for x, r in zip(replicas, roots):
        i = r.info
        if (i.digest_format, i.partitions, i.segments, i.fine_segments) != (
                D.FORMAT, PARTITIONS, D.SEGMENTS, D.FINE_SEGMENTS):
            raise IncompatibleReplicas(
                f"node {i.node_id} at {x.address} keeps digest format {i.digest_format} over {i.partitions} "
                f"partitions x {i.segments}/{i.fine_segments} segments; this one {D.FORMAT} over "
                f"{PARTITIONS} x {D.SEGMENTS}/{D.FINE_SEGMENTS}")
        report.nodes[str(i.node_id)] = x.address
    return ids


async def exchange(replicas: Sequence[Replica], first: int = 0, count: int = PARTITIONS,
                   opts: Options | None = None, report: Report | None = None,
                   progress: Progress | None = None) -> Report:
    """Compare and repair partitions ``first .. first + count - 1`` of ``replicas``."""
    opts = opts or Options()
    report = report if report is not None else Report(dry_run=opts.dry_run)
    report.dry_run = opts.dry_run
    t0 = time.perf_counter()
    done = 0
    budget = opts.max_partitions
    for lo in range(first, first + count, opts.chunk):
        n = min(opts.chunk, first + count - lo)
        ids, now, mism, doubted = await _compare_roots(replicas, lo, n, opts.verify, report)
        report.partitions_compared += n
        report.partitions_mismatched += len(mism)
        report.partitions_matching += n - len(mism)
        done += n - len(mism)
        if progress:
            progress(done, count)
        mism.sort(key=lambda p: (p < opts.start, p))  # from ``start`` on, then wrap
        todo, rest = mism[:budget], mism[budget:]
        budget -= len(todo)
        for b in range(0, len(todo), opts.batch):
            batch = todo[b:b + opts.batch]
            await _drill(replicas, ids, batch, now, opts, report, doubted)
            done += len(batch)
            if progress:
                progress(done, count)
        done += len(rest)
    report.tasks += 1
    report.wall_seconds += time.perf_counter() - t0
    return report


async def _compare_roots(replicas: Sequence[Replica], lo: int, n: int, verify: int,
                         report: Report) -> tuple[list[str], int, list[int], set[int]]:
    """Stage 1 over partitions ``lo .. lo + n - 1``: (replica ids, the replicas' latest
    clock, the partitions whose roots differ, those whose kept digest a replica found
    wrong)."""
    if verify:
        t = time.perf_counter()
        roots = list(await asyncio.gather(*(r.roots(lo, n, verify) for r in replicas)))
        report.timed("verify", time.perf_counter() - t)
        report.digests_verified += n * len(replicas)
    else:
        roots = await _gather(report, "roots", [r.roots(lo, n) for r in replicas])
    ids = _check(replicas, roots, report)
    doubted: set[int] = set()
    for i, r in zip(ids, roots):
        if r.wrong:
            report.digests_wrong[i] = report.digests_wrong.get(i, 0) + len(r.wrong)
            doubted.update(r.wrong)
    report.bytes_digests += 8 * n * len(replicas)
    now = max(r.info.now_ms for r in roots)
    mism = [lo + i for i in P.mismatched({i: r.roots for i, r in zip(ids, roots)})]
    return ids, now, mism, doubted


async def mismatched_partitions(replicas: Sequence[Replica], first: int = 0, count: int = PARTITIONS,
                                report: Report | None = None) -> list[int]:
    """Stage 1 alone, from the kept digests: the partitions of ``first .. first + count -
    1`` whose roots differ (8 bytes per partition and replica). The PySpark driver runs it
    before it plans its tasks: a consistent cluster is confirmed without a Spark job, and
    ranges of partitions that all match get no task."""
    report = report if report is not None else Report()
    out: list[int] = []
    for lo in range(first, first + count, PARTITIONS):
        n = min(PARTITIONS, first + count - lo)
        out += (await _compare_roots(replicas, lo, n, 0, report))[2]
    return out


async def _drill(replicas: Sequence[Replica], ids: list[str], batch: list[int], now: int, opts: Options,
                 report: Report, doubted: set[int] = frozenset()) -> None:  # type: ignore[assignment]
    segs = await _gather(report, "segments", [r.segments(batch) for r in replicas])
    report.bytes_digests += 8 * D.SEGMENTS * len(batch) * len(replicas)
    sets = {}
    for pid in batch:
        if pid in doubted:  # a kept digest found wrong and left so (dry run): every segment
            diff = list(range(D.SEGMENTS))
        else:
            diff = P.mismatched({i: s[pid] for i, s in zip(ids, segs)})
        if diff:
            sets[pid] = diff
            report.segments_mismatched += len(diff)
    if not sets:
        return  # the roots differed a moment ago only (a write arriving meanwhile)
    fine = await _gather(report, "fine", [r.fine(sets, opts.dry_run) for r in replicas])
    report.bytes_digests += 8 * D.FINE_PER_SEGMENT * sum(map(len, sets.values())) * len(replicas)
    fsets: dict[int, list[int]] = {}
    per = D.FINE_PER_SEGMENT
    for pid, kept in sets.items():
        for s in kept:
            for j in P.mismatched({i: f[pid][s] for i, f in zip(ids, fine)}):
                fsets.setdefault(pid, []).append(s * per + j)
    report.fine_segments_mismatched += sum(map(len, fsets.values()))
    if not fsets:
        return  # only records past gc_grace differed: reading them removed them
    fetched = await _gather(report, "fetch", [r.fetch(fsets, opts.dry_run) for r in replicas])
    t = time.perf_counter()
    by_node = {}
    for i, recs in zip(ids, fetched):
        report.records_fetched[i] = report.records_fetched.get(i, 0) + len(recs)
        report.bytes_fetched += sum(len(k) + len(v) for k, v in recs)
        by_node[i] = dict(recs)
    plan = P.plan_records(by_node, now, opts.settle_ms)
    report.keys_compared += plan.keys
    report.keys_differing += plan.differing
    report.keys_in_flight += plan.in_flight
    for i, n in plan.only_on.items():
        if n:
            report.keys_only_on[i] = report.keys_only_on.get(i, 0) + n
    report.timed("merge", time.perf_counter() - t)
    repaired_pids: set[int] = set()
    for i, recs in plan.pushes.items():
        if recs:
            report.records_to_push[i] = report.records_to_push.get(i, 0) + len(recs)
            repaired_pids.update(D.partition_of_key(k) for k, _ in recs)
    report.partitions_repaired += len(repaired_pids)
    if opts.dry_run:
        return

    async def push_all(r: Replica, i: str, recs: list[P.Record]) -> None:
        for b in P.batches(recs, opts.push_records, opts.push_bytes):
            res = await r.push(b)
            report.push_batches += 1
            report.bytes_pushed += sum(len(k) + len(v) for k, v in b)
            report.records_repaired[i] = report.records_repaired.get(i, 0) + res.applied
            report.records_unchanged[i] = report.records_unchanged.get(i, 0) + res.unchanged
            report.records_past_gc_grace[i] = report.records_past_gc_grace.get(i, 0) + res.past_gc_grace

    await _gather(report, "push", [push_all(r, i, plan.pushes[i]) for r, i in zip(replicas, ids) if plan.pushes[i]])
