"""Background expiry sweeper: physical removal of dead records.

On the way it counts the live keys of each partition, which INFO keyspace reports
(so INFO never scans the keyspace on the event loop; DBSIZE does, and is exact).

What may be removed is decided by the record-kind registry's sweep rules, applied to
one partition at a time by ``core.sweep.PartitionSweep`` (which also counts the live
keys): a record past its TTL deadline already *reads* as a tombstone (the TTL rule) and
is physically removed once ``deadline + gc_grace`` has passed, a tombstone once it is
older than ``gc_grace``; an element once its collection's delete clock gates it and is
older than ``gc_grace``; a dead head only once no element of its collection is left.
The grace period is what lets a lagging replica's stale write still meet the tombstone
and lose (after removal it would resurrect, as in any tombstone-GC design, e.g.
Cassandra's gc_grace_seconds), so it must exceed the longest partition you expect
between replicas.

The sweeper walks the partitions a few at a time from the event loop (one small step
every ``sweep_interval`` seconds), so it never blocks the server for long. A step reads
enough records for a whole cycle to take about ``CYCLE_SECONDS`` (at least
``MIN_STEP``, at most ``RECORDS_PER_STEP`` records), as measured by the last cycle: a
small keyspace is re-swept every step, a big one costs a steady trickle of CPU rather
than a continuous scan under load. The first cycle after start is the exception: it
reads ``RECORDS_PER_STEP`` records (~2 ms) every ``FIRST_CYCLE_INTERVAL`` (at most a
fifth of the event loop), so INFO keyspace has its counts about 5 s per million records
after start. A step reads whole partitions (a partition's records are decided together)
and removes what it decided within the same synchronous step, so it cannot race a write.
Removal is not a user write: it is not replicated and not logged. A sweeper walks its
engine's partition range (``Engine.partitions``: a shard worker's, or all 4096), or a
range within it.

A partition can hold far more records than a step's budget (one big collection lives in
one partition), so the pause before the next step grows with what a step read beyond
its budget (``pause``): the sweeper's rate stays the budget's, whatever the partitions'
sizes. (Without it a keyspace of one 100k-field hash was read whole every step, ten times
a second: two thirds of the node's CPU under an HSET load went to the sweeper.)
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any, Iterator

from marekvs.core.partition import PARTITIONS, PartitionRange
from marekvs.core.sweep import PartitionSweep
from marekvs.storage.engine import Engine

log = logging.getLogger("marekvs.sweeper")
_U16 = struct.Struct(">H")
_END = b"\xff\xff"  # ends _records_from: pid 65535 is no partition (there are 4096)
RECORDS_PER_STEP = 2000  # records read per step: bounds each step's pause
MIN_STEP = 400  # records read per step at least
CYCLE_SECONDS = 30.0  # aimed-for time of one whole cycle over a big keyspace
FIRST_CYCLE_INTERVAL = 0.01  # seconds between the steps of the first cycle after start


class Sweeper:
    def __init__(self, engine: Engine, config: Any, partitions: PartitionRange | None = None):
        self.engine = engine
        self.config = config
        # the partitions it sweeps (default: the engine's; a cycle is one pass over them)
        self.partitions = r = engine.partitions if partitions is None else partitions
        if not (engine.partitions.holds(r.first) and engine.partitions.holds(r.last)):
            raise ValueError(f"sweeper over partitions {r}, outside the engine's {engine.partitions}")
        self.next_pid = r.first
        self.removed = 0
        self.cycles = 0
        self._task: asyncio.Task | None = None
        # live keys (and those with a TTL) per partition as of the last visit: what
        # INFO keyspace reports without scanning on the event loop (indexed by pid: only
        # the range's are ever set)
        self.live_keys = [0] * PARTITIONS
        self.expiring = [0] * PARTITIONS
        self.cycle_records = 0  # records read in the cycle under way
        self.last_cycle_records = 0  # ... and in the last whole one
        self.read_last_step = 0  # records the last step read
        # a partition the last step stopped within: its sweep so far, the last key read
        self._part: PartitionSweep | None = None
        self._after: bytes | None = None

    def budget(self) -> int:
        """Records the next step reads (see the module docstring)."""
        if self.cycles == 0:  # the first cycle after start runs flat out (see _run)
            return RECORDS_PER_STEP
        want = int(self.last_cycle_records * self.config.sweep_interval / CYCLE_SECONDS)
        return max(MIN_STEP, min(RECORDS_PER_STEP, want))

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._task = loop.create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    def pause(self) -> float:
        """Seconds to wait before the next step: the interval. Until the first cycle ends
        INFO keyspace has no counts (a million keys at the paced rate: over 4 minutes), so
        its steps come more often."""
        interval = self.config.sweep_interval
        return min(interval, FIRST_CYCLE_INTERVAL) if not self.cycles else interval

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.pause())
            try:
                self.step(self.budget())
            except Exception:
                log.exception("expiry sweep step failed")

    def step(self, budget: int = RECORDS_PER_STEP) -> int:
        """Sweep from where the last step stopped until ``budget`` records were read (or
        the keyspace wraps): whole partitions, and the start of one more where the budget
        ends within it; return how many records were removed. Nothing while the storage
        cannot write (``Engine.write_error``)."""
        if self.engine.write_error is not None:
            return 0
        now = time.time_ns() // 1_000_000
        grace_ms = self.config.gc_grace * 1000
        first = pid = self.next_pid
        seen = 0
        stop = False
        resumed = self._part  # a sweep an earlier step began: its decisions are checked
        part = resumed if resumed is not None else PartitionSweep(now, grace_ms)
        after, self._part, self._after = self._after, None, None
        dead: list[bytes] = []
        last = b""
        for ikey, rec in self._records_from(first, after):
            rpid = (ikey[0] << 8) | ikey[1]
            # pid is complete (and any empty ones after it; the end marker closes every
            # partition left, up to the budget or back to ``first``)
            while pid != rpid and not stop:
                decided = part.finish()
                dead += decided if part is not resumed else self._unchanged(decided, part.horizon)
                pid = self._close(pid, part.live_keys, part.expiring, seen)
                part = PartitionSweep(now, grace_ms)
                stop = seen >= budget or pid == first
            if stop:
                break
            if seen >= budget:  # within partition pid: the next step goes on after ``last``
                self._part, self._after = part, last
                break
            seen += 1
            part.feed(ikey, rec)
            last = ikey
        self.next_pid = pid
        self.cycle_records += seen
        self.read_last_step = seen
        for ikey in dead:
            self.engine.purge(ikey)
        if dead:
            # Committed now, not with the next write: an idle node has no tick that would
            # commit them, and until then the kept digest (storage/digest.py) still counts
            # the removed records. A step runs between ticks, never inside a command.
            self.engine.commit()
        self.removed += len(dead)
        return len(dead)

    def _unchanged(self, decided: list[bytes], horizon: int) -> list[bytes]:
        """Of the records a sweep over several steps decided to remove, those not written
        since (the module docstring): present, with an hlc below the sweep's horizon."""
        get = self.engine.get
        out = []
        for ikey in decided:
            rec = get(ikey)
            if rec is not None and int.from_bytes(rec[1:9], "big") < horizon:
                out.append(ikey)
        return out

    def _records_from(self, pid: int, after: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Every record of the range from partition ``pid`` on (past its key ``after``,
        where the last step stopped within it), then from the range's first up to ``pid``.
        Partitions are contiguous in key order (the 2-byte pid prefix), so that is one
        iterator (two after a wrap), not one per partition: creating an iterator seeks
        every memtable and L0 file, which costs more than a small partition's records.
        Ends with ``_END``, a key of no partition."""
        r = self.partitions
        start = _U16.pack(pid) if after is None else after + b"\x00"
        yield from self.engine.scan(start, None if r.whole else r.end_key)
        if pid != r.first:
            yield from self.engine.scan(r.start_key, _U16.pack(pid))
        yield _END, b""

    def _close(self, pid: int, n_live: int, n_exp: int, seen: int) -> int:
        """Record partition ``pid``'s counts; return the next pid (a wrap ends a cycle)."""
        self.live_keys[pid], self.expiring[pid] = n_live, n_exp
        pid = self.partitions.after(pid)
        if pid == self.partitions.first:
            self.cycles += 1
            self.last_cycle_records = self.cycle_records + seen
            self.cycle_records = -seen  # the rest of this step counts for the next cycle
        return pid

    def sweep_all(self) -> int:
        """One whole cycle at once (tests, SAVE-like maintenance)."""
        self.next_pid = self.partitions.first
        self._part = self._after = None
        cycles = self.cycles
        total = 0
        while self.cycles == cycles:
            total += self.step(1 << 30)
        return total
