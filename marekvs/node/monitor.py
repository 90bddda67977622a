"""What an operator reads about the commands a node runs: SLOWLOG, LATENCY, ops per second,
MONITOR.

- The slow log (Redis's ``slowlog.c``): a command that ran for more than
  ``slowlog-log-slower-than`` microseconds (0: every command, -1: none) is kept, newest
  first, up to ``slowlog-max-len`` entries: id, unix time, duration in us, its arguments (at
  most 32, the last one saying how many more; each at most 128 bytes, saying how many more
  bytes), the client's address and name. AUTH/HELLO credentials and ACL
  SETUSER's arguments are ``(redacted)``.
- The latency monitor (``latency.c``): with ``latency-monitor-threshold`` N ms > 0, a
  command that took at least N ms is a sample of the event ``command`` (or ``fast-command``
  for commands flagged fast); per event the latest 160 samples (one per second: the max of
  that second) and the all-time max. LATENCY LATEST / HISTORY / RESET read them.
- ``instantaneous_ops_per_sec`` (INFO stats): the mean rate over the last 16 samples of the
  command count, taken every 100 ms, as Redis's ``trackInstantaneousMetric``.
- MONITOR (``replicationFeedMonitors``): every command a client or a script runs is pushed to
  each monitor as a status line, ``+<unix time with microseconds> [0 <client address, or
  lua>] "arg" ...``, each argument quoted as Redis's ``sdscatrepr`` quotes it and the same
  secrets redacted as in the slow log. As in Redis 7.0: admin commands (CONFIG, CLIENT LIST,
  DEBUG, ...) are not shown, nor commands refused before they ran (unknown, wrong arity,
  NOAUTH, NOPERM); a script command (EVAL, FCALL, ...) is shown before the commands it calls,
  every other one after it ran (EXEC after its queued commands); a monitor may run commands
  that touch no keyspace (PING, ECHO, SUBSCRIBE, ...), the others get ``Replica can't
  interact with the keyspace``; RESET ends monitoring. Monitors are "normal" clients for
  ``client-output-buffer-limit``, as in Redis.

The dispatcher measures every command (``Node.dispatch``); this module only keeps what
crosses a threshold, so a command under the thresholds costs a comparison.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any, Callable

from marekvs.commands.context import LUA
from marekvs.commands.monitoring import LATENCY_SAMPLES
from marekvs.commands.reply import Simple

SLOWLOG_MAX_ARGC = 32
SLOWLOG_MAX_STRING = 128
OPS_SAMPLES = 16
PROXY_ADDR = "shard-worker-proxy"  # the address of a shard worker's proxy of another worker's client
REDACTED = {b"auth": (1, 2), b"hello": None}  # argument positions whose values are secrets


class SlowLog:
    def __init__(self, threshold_us: int = 10_000, max_len: int = 128):
        self.threshold_us = threshold_us
        self.entries: deque[list[Any]] = deque(maxlen=max_len)
        self.next_id = 0
        # a shard worker's: the node-wide entry ids (shards/clients.py), else this log's count
        self.take_id: Callable[[], int] | None = None
        self.muted = False  # (a shard worker running its part of a node-wide command: logged once, by the front)

    def resize(self, max_len: int) -> None:
        self.entries = deque(self.entries, maxlen=max_len)

    def add(self, args: list[bytes], duration_us: int, addr: str, name: bytes) -> None:
        if self.muted:
            return
        shown = _redact(args)
        argc = len(shown)
        if argc > SLOWLOG_MAX_ARGC:
            shown = shown[:SLOWLOG_MAX_ARGC - 1] + [b"... (%d more arguments)" % (argc - SLOWLOG_MAX_ARGC + 1)]
        shown = [a if len(a) <= SLOWLOG_MAX_STRING
                 else a[:SLOWLOG_MAX_STRING] + b"... (%d more bytes)" % (len(a) - SLOWLOG_MAX_STRING)
                 for a in shown]
        if self.take_id is not None:
            entry_id = self.take_id()
        else:
            entry_id, self.next_id = self.next_id, self.next_id + 1
        self.entries.appendleft([entry_id, int(time.time()), duration_us, shown, addr.encode(), name])

    def get(self, count: int) -> list[list[Any]]:
        return list(self.entries) if count < 0 else list(self.entries)[:count]


def _redact(args: list[bytes]) -> list[bytes]:
    name = args[0].lower()
    if name == b"auth":
        return [args[0]] + [b"(redacted)"] * (len(args) - 1)
    if name == b"acl" and len(args) > 2 and args[1].lower() == b"setuser":
        return args[:2] + [b"(redacted)"] * (len(args) - 2)  # (the user and its passwords)
    if name == b"hello":
        out = list(args)
        for i in range(len(out) - 2):
            if out[i].lower() == b"auth":
                out[i + 1] = out[i + 2] = b"(redacted)"
        return out
    return list(args)


class MonitorLine:
    """One MONITOR line for ``ctx`` running ``args`` (a push: the same bytes in RESP2 and RESP3,
    a status reply, as Redis sends it)."""

    __slots__ = ("wire", "status")

    def __init__(self, ctx: Any, args: list[bytes]):
        us = time.time_ns() // 1000
        who = b"lua" if ctx.acl_context == LUA else ctx.addr.encode()
        self.status = Simple(b"%d.%06d [0 %s] %s" % (us // 1_000_000, us % 1_000_000, who,
                                                    b" ".join(_quote(a) for a in _redact(args))))
        line = b"+%s\r\n" % self.status
        self.wire = {2: line, 3: line}

    @classmethod
    def of(cls, status: bytes) -> MonitorLine:
        """The line another shard worker made (its status text)."""
        line = cls.__new__(cls)
        line.status = Simple(status)
        wire = b"+%s\r\n" % status
        line.wire = {2: wire, 3: wire}
        return line


# sdscatrepr: \\ and \" escaped, \n \r \t \a \b by name, other bytes outside 0x20-0x7e as \xHH
_QUOTE = [b"\\x%02x" % i if not 32 <= i < 127 else bytes([i]) for i in range(256)]
_QUOTE[ord("\\")], _QUOTE[ord('"')] = b"\\\\", b'\\"'
for _ch, _esc in ((10, b"\\n"), (13, b"\\r"), (9, b"\\t"), (7, b"\\a"), (8, b"\\b")):
    _QUOTE[_ch] = _esc


def _quote(a: bytes) -> bytes:
    return b'"' + b"".join([_QUOTE[c] for c in a]) + b'"'


class LatencyMonitor:
    def __init__(self, threshold_ms: int = 0):
        self.threshold_ms = threshold_ms
        # event -> (samples [(unix second, ms)], max ms)
        self.events: dict[str, tuple[deque[tuple[int, int]], int]] = {}

    def add(self, event: str, ms: int) -> None:
        now = int(time.time())
        samples, top = self.events.get(event, (deque(maxlen=LATENCY_SAMPLES), 0))
        if samples and samples[-1][0] == now:
            if ms > samples[-1][1]:
                samples[-1] = (now, ms)
        else:
            samples.append((now, ms))
        self.events[event] = (samples, max(top, ms))

    def latest(self) -> list[list[Any]]:
        return [[e.encode(), s[-1][0], s[-1][1], top] for e, (s, top) in self.events.items() if s]

    def history(self, event: str) -> list[list[int]]:
        found = self.events.get(event)
        return [] if found is None else [[t, ms] for t, ms in found[0]]

    def reset(self, events: list[str]) -> int:
        return len(self.reset_events(events))

    def reset_events(self, events: list[str]) -> list[str]:
        """LATENCY RESET: the events whose data it dropped (all of them, if none named)."""
        if not events:
            gone = list(self.events)
            self.events.clear()
            return gone
        return [e for e in dict.fromkeys(events) if self.events.pop(e, None) is not None]


class OpsMeter:
    """instantaneous_ops_per_sec: sampled every 100 ms by the node's timer."""

    def __init__(self) -> None:
        self.samples: deque[float] = deque(maxlen=OPS_SAMPLES)
        self.last_count = 0
        self.last_time = time.monotonic()

    def sample(self, count: int) -> None:
        now = time.monotonic()
        dt = now - self.last_time
        if dt > 0:
            self.samples.append((count - self.last_count) / dt)
        self.last_count, self.last_time = count, now

    def rate(self) -> int:
        return int(sum(self.samples) / len(self.samples)) if self.samples else 0
