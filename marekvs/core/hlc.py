"""Hybrid logical clock (Kulkarni et al., "Logical Physical Clocks", 2014).

Packed into a u64: 48 bits of physical ms since the epoch, 16 bits of logical counter.

- local event: ``hlc = max(prev + 1, wall_ms << 16)``
- receive:     ``hlc = max(local, remote) + 1``
- a remote HLC more than ``max_drift_ms`` ahead of the local wall clock is clamped to
  ``(wall + max_drift) << 16`` and logged loudly; the shipped envelope itself is never
  re-stamped, only this node's clock refuses to jump that far.

One HLC per process, shared by every shard and by replication. All of them run on the
node's one event-loop thread (shards are logical; gRPC is ``grpc.aio`` on the same
loop), and a stamp is taken without yielding, so the clock needs no lock: that was
measured at 60% of a stamp's cost, and every write takes one. A design that stamps
from several threads must serialise these calls (the spec's CAS loop). The wall clock
is injectable for tests; this module performs no I/O beyond reading the time and
logging.
"""

from __future__ import annotations

import logging
import time
from typing import Callable

log = logging.getLogger("marekvs.hlc")

LOGICAL_BITS = 16
LOGICAL_MASK = (1 << LOGICAL_BITS) - 1
DEFAULT_MAX_DRIFT_MS = 5000


def wall_ms() -> int:
    return time.time_ns() // 1_000_000


def physical_ms(hlc: int) -> int:
    return hlc >> LOGICAL_BITS


def logical(hlc: int) -> int:
    return hlc & LOGICAL_MASK


def pack(ms: int, logical_: int = 0) -> int:
    return (ms << LOGICAL_BITS) | (logical_ & LOGICAL_MASK)


class HLC:
    def __init__(self, clock: Callable[[], int] = wall_ms, max_drift_ms: int = DEFAULT_MAX_DRIFT_MS):
        self._clock = clock
        self._wall = clock is wall_ms  # now() reads time.time_ns itself: one call fewer
        self.max_drift_ms = max_drift_ms
        self._last = 0
        self.clamped = 0  # how many remote clocks were clamped (INFO)

    @property
    def last(self) -> int:
        return self._last

    def wall(self) -> int:
        """The wall clock this HLC reads, in ms."""
        return time.time_ns() // 1_000_000 if self._wall else self._clock()

    def now(self) -> int:
        """Stamp a local event: ``reserve(1)``, inlined (one stamp per write)."""
        w = (time.time_ns() // 1_000_000 if self._wall else self._clock()) << LOGICAL_BITS
        last = self._last + 1
        self._last = w if w > last else last
        return self._last

    def reserve(self, n: int) -> int:
        """Stamp ``n`` local events at once (one multi-key command): returns the first
        stamp; the others are the ``n - 1`` that follow it, all handed out."""
        w = self._clock() << LOGICAL_BITS
        first = self._last + 1
        if w > first:
            first = w
        self._last = first + n - 1
        return first

    def update(self, remote: int) -> int:
        """Take the receive rule for a remote HLC; return the new local HLC."""
        wall = self._clock()
        limit = (wall + self.max_drift_ms + 1) << LOGICAL_BITS
        if remote >= limit:  # physical part more than max_drift ahead
            self.clamped += 1
            log.error(
                "HLC DRIFT: remote clock %d ms is %d ms ahead of local wall clock "
                "(max_clock_drift %d ms); clamping. Check NTP on the cluster's nodes.",
                physical_ms(remote), physical_ms(remote) - wall, self.max_drift_ms,
            )
            remote = (wall + self.max_drift_ms) << LOGICAL_BITS
        n = max(self._last, remote) + 1
        self._last = n
        return n

    def observe(self, hlc: int) -> None:
        """Never hand out a stamp at or below ``hlc`` (used at start-up with the
        highest HLC found on disk, so a restarted node never goes back in time)."""
        if hlc > self._last:
            self._last = hlc
