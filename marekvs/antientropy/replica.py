"""One replica as an exchange sees it, and this node's own (``LocalReplica``).

An exchange (``exchange.py``) asks each replica, in turn, for the roots of a range of
partitions, the kept segments of the partitions whose roots differ, the fine segments
under the segments that differ, the records of the fine segments that differ, and at last
pushes each replica the records it lacks. ``Replica`` is that interface; it is async so
that a remote replica (``remote.GrpcReplica``) and this node's own are driven alike.

``LocalReplica`` answers from the engine, on the node's event loop:

- roots and segments from the kept digest (``storage/digest.py``); with ``verify`` the
  partitions' digests are first recomputed from their records and, if they were wrong
  (records changed behind the engine's back), reported and corrected (``VERIFY_CORRECT``)
  or only reported, with the recomputed roots (``VERIFY_CHECK``, for dry runs);
- fine segments and records from a read of the whole partition (a partition is one key
  range; the fine segment of a record is a hash of its key). The read applies the sweep
  rules and removes what they allow before answering (``plan.removable``; a dry run only
  skips them): a record past gc_grace is never sent;
- pushed records are validated like replicated ones (``core.registry.check_record``: one
  bad record refuses the whole push, nothing written), joined with the partition's own
  records, and those the sweep rules would remove are dropped (``past_gc_grace``); the
  rest go through ``Engine.apply`` (merge, never overwrite; not logged: every replica is
  sent what it lacks, nothing needs shipping on) and are committed before the reply.
"""

from __future__ import annotations

import asyncio
import struct
import time
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, Protocol

from marekvs.antientropy import plan as P
from marekvs.core import digest as D
from marekvs.core import registry
from marekvs.core.partition import PARTITIONS, PartitionRange

VERIFY_NONE, VERIFY_CHECK, VERIFY_CORRECT = 0, 1, 2
MAX_PUSH_RECORDS = 100_000
_U16 = struct.Struct(">H")


class BadRequest(ValueError):
    """A request a replica refuses (out-of-range partitions or segments, a bad record)."""


@dataclass
class ReplicaInfo:
    node_id: int
    digest_format: int
    partitions: int
    segments: int
    fine_segments: int
    resp_addr: str = ""
    now_ms: int = 0
    gc_grace_s: int = 0


@dataclass
class Roots:
    info: ReplicaInfo
    roots: list[int]
    wrong: list[int] = field(default_factory=list)  # (verify) partitions whose kept digest was wrong
    records_read: int = 0


@dataclass
class Pushed:
    applied: int = 0
    unchanged: int = 0
    past_gc_grace: int = 0


class Replica(Protocol):
    address: str

    async def roots(self, first: int, count: int, verify: int = VERIFY_NONE) -> Roots: ...

    async def segments(self, pids: list[int]) -> dict[int, list[int]]: ...

    async def fine(self, sets: dict[int, list[int]], dry_run: bool = False) -> dict[int, dict[int, list[int]]]: ...

    async def fetch(self, sets: dict[int, list[int]], dry_run: bool = False) -> list[P.Record]: ...

    async def push(self, records: list[P.Record]) -> Pushed: ...


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def check_range(first: int, count: int) -> None:
    if not (0 <= first < PARTITIONS and 1 <= count <= PARTITIONS - first):
        raise BadRequest(f"partitions {first}..{first + count - 1} are not within 0..{PARTITIONS - 1}")


def check_sets(sets: dict[int, list[int]], limit: int, what: str) -> None:
    for pid, segs in sets.items():
        if not 0 <= pid < PARTITIONS:
            raise BadRequest(f"partition {pid} is not within 0..{PARTITIONS - 1}")
        bad = [s for s in segs if not 0 <= s < limit]
        if bad:
            raise BadRequest(f"{what} {bad[0]} of partition {pid} is not within 0..{limit - 1}")


def check_records(records: list[P.Record]) -> None:
    if len(records) > MAX_PUSH_RECORDS:
        raise BadRequest(f"{len(records)} records in one push (at most {MAX_PUSH_RECORDS})")
    for k, v in records:
        try:
            registry.check_record(k, v)
        except registry.InvalidRecord as e:
            raise BadRequest(f"bad record {k[:40]!r}: {e}") from None


def partition_range(pid: int) -> tuple[bytes, bytes | None]:
    return _U16.pack(pid), (_U16.pack(pid + 1) if pid + 1 < PARTITIONS else b"\x10\x00")


class LocalReplica:
    """This node, answering from its engine (see the module docstring)."""

    def __init__(self, engine: Any, hlc: Any, config: Any, resp_addr: str = "", address: str = "local"):
        self.engine = engine
        self.partitions: PartitionRange = engine.partitions  # what it holds (all 4096, or a shard's)
        self.hlc = hlc
        self.config = config
        self.resp_addr = resp_addr
        self.address = address
        # what this replica did for exchanges (INFO antientropy)
        self.removed_past_gc_grace = 0  # records removed early because an exchange read them
        self.pushes = 0
        self.pushed_applied = 0
        self.pushed_past_gc_grace = 0
        self.verified = 0
        self.corrected = 0

    def info(self) -> ReplicaInfo:
        return ReplicaInfo(self.config.node_id, D.FORMAT, PARTITIONS, D.SEGMENTS, D.FINE_SEGMENTS,
                           self.resp_addr, now_ms(), int(self.config.gc_grace))

    # -- reading a partition --------------------------------------------------------------
    def records(self, pid: int, dry_run: bool = False) -> list[P.Record]:
        """The records of partition ``pid`` an exchange may see: those the sweep rules do not
        allow to remove. The others are removed (committed before this returns), unless
        ``dry_run``."""
        start, end = partition_range(pid)
        recs = list(self.engine.scan_committed(start, end))  # (only committed records leave the node)
        dead = P.removable(recs, now_ms(), int(self.config.gc_grace * 1000)) if recs else set()
        if dead:
            dead -= self.engine.pending.keys()  # (a pending write replaces what was committed)
            if not dry_run and dead:
                for k in dead:
                    self.engine.purge(k)
                self.engine.commit()
                self.removed_past_gc_grace += len(dead)
            recs = [r for r in recs if r[0] not in dead]
        return recs

    def verify(self, pid: int, correct: bool) -> tuple[bool, int, list[int]]:
        """Recompute partition ``pid``'s segments from its records and compare them with the
        kept ones (correcting them if asked): (kept digest was wrong, records read, the
        recomputed segments)."""
        actual, last, n = self.read_segments(pid, None, None)
        return self.check(pid, actual, correct), n, actual

    def read_segments(self, pid: int, after: bytes | None, limit: int | None) -> tuple[list[int], bytes | None, int]:
        """The segment hashes of partition ``pid``'s committed records past key ``after``
        (from its start when None), at most ``limit`` of them (all when None): (segments,
        the last key read if the partition goes on after it, else None; records read)."""
        if not self.partitions.holds(pid):
            raise BadRequest(f"partition {pid} is not within this replica's partitions {self.partitions}")
        start, end = partition_range(pid)
        # Committed first: the kept segments count committed records only (a scan would
        # merge in pending writes whose deltas the digest has not folded in yet).
        self.engine.commit()
        it = self.engine.scan_committed(start if after is None else after + b"\x00", end)
        recs = list(it if limit is None else islice(it, limit + 1))
        more = limit is not None and len(recs) > limit
        if more:
            del recs[limit:]
        return D.segments_of(recs), recs[-1][0] if more else None, len(recs)

    def kept_root(self, pid: int) -> int:
        """Partition ``pid``'s kept root, pending writes committed first (so that it
        stands for the records ``read_segments`` reads next)."""
        self.engine.commit()
        return self.engine.digest.roots(pid, 1)[0]

    def check(self, pid: int, actual: list[int], correct: bool) -> bool:
        """Compare recomputed segments with the kept ones (correcting them if asked):
        whether the kept digest was wrong."""
        digest = self.engine.digest
        self.verified += 1
        if actual == digest.segments(pid):
            return False
        if correct:
            digest.correct(pid, actual)
            self.engine.commit()
            self.corrected += 1
        return True

    # -- the Replica interface --------------------------------------------------------------
    async def roots(self, first: int, count: int, verify: int = VERIFY_NONE) -> Roots:
        check_range(first, count)
        wrong: dict[int, int] = {}  # pid -> its root recomputed from the data
        read = 0
        if verify:
            for i, pid in enumerate(range(first, first + count)):
                bad, n, actual = self.verify(pid, verify == VERIFY_CORRECT)
                read += n
                if bad:
                    wrong[pid] = D.root_of(actual)
                if i % 16 == 15:
                    await asyncio.sleep(0)  # let clients in between
        roots = self.engine.digest.roots(first, count)
        for pid, root in wrong.items():
            roots[pid - first] = root  # (the same as kept, unless only checked)
        return Roots(self.info(), roots, list(wrong), read)

    async def segments(self, pids: list[int]) -> dict[int, list[int]]:
        check_sets({p: [] for p in pids}, 0, "segment")
        digest = self.engine.digest
        return {p: digest.segments(p) for p in pids}

    async def fine(self, sets: dict[int, list[int]], dry_run: bool = False) -> dict[int, dict[int, list[int]]]:
        check_sets(sets, D.SEGMENTS, "segment")
        out: dict[int, dict[int, list[int]]] = {}
        per = D.FINE_PER_SEGMENT
        for i, (pid, segs) in enumerate(sets.items()):
            fine = D.fine_segments_of(self.records(pid, dry_run))
            out[pid] = {s: fine[s * per:(s + 1) * per] for s in segs}
            if i % 8 == 7:
                await asyncio.sleep(0)
        return out

    async def fetch(self, sets: dict[int, list[int]], dry_run: bool = False) -> list[P.Record]:
        check_sets(sets, D.FINE_SEGMENTS, "fine segment")
        out: list[P.Record] = []
        for i, (pid, segs) in enumerate(sets.items()):
            wanted = set(segs)
            out += [(k, v) for k, v in self.records(pid, dry_run) if D.fine_segment_of(k) in wanted]
            if i % 8 == 7:
                await asyncio.sleep(0)
        return out

    async def push(self, records: list[P.Record]) -> Pushed:
        return self.push_now(records)

    def push_now(self, records: list[P.Record]) -> Pushed:
        """Merge ``records`` into this replica (validated first: BadRequest, nothing written)."""
        check_records(records)
        by_pid: dict[int, list[P.Record]] = {}
        for k, v in records:
            by_pid.setdefault(D.partition_of_key(k), []).append((k, v))
        out = Pushed()
        now, grace = now_ms(), int(self.config.gc_grace * 1000)
        keep: list[P.Record] = []
        for pid, recs in by_pid.items():
            start, end = partition_range(pid)
            dead = P.refused(dict(self.engine.scan(start, end)), recs, now, grace)
            for r in recs:
                if r[0] in dead:
                    out.past_gc_grace += 1
                else:
                    keep.append(r)
        if keep:
            top = max(int.from_bytes(v[1:9], "big") for _, v in keep)
            self.hlc.update(top)  # the receive rule, as for replicated records
            changed = self.engine.apply(keep, log_entry=False)
            self.engine.commit()
            out.applied = len(changed)
        out.unchanged = len(keep) - out.applied
        self.pushes += 1
        self.pushed_applied += out.applied
        self.pushed_past_gc_grace += out.past_gc_grace
        return out
