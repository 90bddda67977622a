"""Background expiry sweeper: physical removal of dead records.

A record past its TTL deadline already *reads* as a tombstone (the TTL rule); it is
physically removed once ``deadline + gc_grace`` has passed, and a tombstone once it
is older than ``gc_grace``. The grace period is what lets a lagging replica's stale
write still meet the tombstone and lose (after removal it would resurrect, as in any
tombstone-GC design, e.g. Cassandra's gc_grace_seconds), so it must exceed the
longest partition you expect between replicas.

The sweeper walks the partitions a few at a time from the event loop (one small step
every ``sweep_interval`` seconds), so it never blocks the server for long; each step
re-reads every record it removes within the same synchronous step, so it cannot race
a write. Removal is not a user write: it is not replicated and not logged.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any

from marekvs.core.partition import PARTITIONS
from marekvs.storage.engine import Engine

log = logging.getLogger("marekvs.sweeper")
_U16 = struct.Struct(">H")
PIDS_PER_STEP = 16


class Sweeper:
    def __init__(self, engine: Engine, config: Any):
        self.engine = engine
        self.config = config
        self.next_pid = 0
        self.removed = 0
        self.cycles = 0
        self._task: asyncio.Task | None = None

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self._task = loop.create_task(self._run())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.config.sweep_interval)
            try:
                self.step()
            except Exception:
                log.exception("expiry sweep step failed")

    def step(self, pids: int = PIDS_PER_STEP) -> int:
        """Sweep the next ``pids`` partitions; return how many records were removed."""
        now = time.time_ns() // 1_000_000
        grace_ms = self.config.gc_grace * 1000
        tomb_before = (now - grace_ms) << 16
        removed = 0
        end_pid = min(self.next_pid + pids, PARTITIONS)
        start = _U16.pack(self.next_pid)
        end = _U16.pack(end_pid) if end_pid < PARTITIONS else None
        dead = []
        for ikey, rec in self.engine.scan(start, end):
            if rec[0] & 1:
                if int.from_bytes(rec[1:9], "big") < tomb_before:
                    dead.append(ikey)
                continue
            d = int.from_bytes(rec[11:19], "big")
            if d and d + grace_ms <= now:
                dead.append(ikey)
        for ikey in dead:
            self.engine.purge(ikey)
            removed += 1
        self.next_pid = end_pid % PARTITIONS
        if self.next_pid == 0:
            self.cycles += 1
        self.removed += removed
        return removed

    def sweep_all(self) -> int:
        total = 0
        self.next_pid = 0
        while True:
            total += self.step(256)
            if self.next_pid == 0:
                return total
