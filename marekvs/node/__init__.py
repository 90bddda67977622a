"""The node: the composition root of one marekvs process's data services.

A ``Node`` owns the configuration, the HLC, the storage engine, the keyspace, the command
table, the expiry sweeper, the client registry, the statistics and the per-tick commit
barrier, and answers ``dispatch(ctx, argv) -> value``: the one way to run a command, used
by the RESP listener and by anything else that runs commands (MULTI/EXEC, scripts, a
gateway). It knows nothing of sockets or gRPC: the RESP listener (``server/``) and
replication (``replication/``) are built on top of it by ``marekvs.process``, and
replication reaches back only through ``engine``, ``hlc``, ``config`` and
``replica_acked()``; the commands reach replication's figures through ``replication``,
which the process attaches.

The commit barrier ("apply, commit the batch, then release the replies"): commands write
into the engine's pending batch; a transport that has replies to send asks
``after_commit(fn)``; once per event-loop tick the node commits ONE WriteBatch with every
write of the tick and then calls those functions, so no reply leaves for a write that is
not in a committed batch, and a tick of pipelined commands costs one commit.
"""

from __future__ import annotations

import asyncio
import logging
import os
import resource
import time
from typing import Any, Callable

from marekvs import __version__
from marekvs.commands import errors, tunables
from marekvs.commands.context import LUA, Context
from marekvs.commands.errors import CommandError
from marekvs.commands.reply import QUEUED, Err
from marekvs.commands.table import Command, CommandTable, build_table
from marekvs.config import Config, Limits
from marekvs.core.hlc import HLC, wall_ms
from marekvs.core.partition import ALL, PartitionRange
from marekvs.keyspace import Keyspace
from marekvs.keyspace.status import KeyspaceError
from marekvs.node.acl import Acl
from marekvs.node.blocking import BlockingRegistry
from marekvs.node.events import Events
from marekvs.node import openfiles
from marekvs.node.monitor import PROXY_ADDR, LatencyMonitor, MonitorLine, OpsMeter, SlowLog
from marekvs.node.pause import SCRIPT_RUNNERS, ClientPause
from marekvs.node.pubsub import PubSub, push_limited
from marekvs.node.records import NodeRecords
from marekvs.node.scripting import Scripting
from marekvs.node.tracking import Tracking
from marekvs.node.watch import Watches
from marekvs.storage.engine import Engine, OutsideRange, StorageWriteError
from marekvs.storage.sweeper import Sweeper

log = logging.getLogger("marekvs.node")
_clock = time.perf_counter_ns
# what a RESP2 client in subscribed mode may run (Redis 7.0)
_PUBSUB_MODE = frozenset(("ping", "subscribe", "ssubscribe", "unsubscribe", "sunsubscribe", "psubscribe",
                          "punsubscribe", "quit", "reset"))

DEFAULT_MAXCLIENTS = 10000


class Stats:
    """INFO stats counters (CONFIG RESETSTAT clears them)."""

    __slots__ = ("total_commands", "total_connections", "rejected_connections", "unexpected_errors",
                 "error_replies", "query_buffer_closes", "tls_handshake_failures")

    def __init__(self) -> None:
        self.reset(0)

    def reset(self, connections: int) -> None:
        self.total_commands = self.error_replies = self.rejected_connections = 0
        self.unexpected_errors = self.query_buffer_closes = self.tls_handshake_failures = 0
        self.total_connections = connections


class Node:
    def __init__(self, config: Config, config_file: str | None = None, partitions: PartitionRange = ALL,
                 worker: int = 0):
        """``partitions``: those this node's engine holds (a shard worker's range; default
        all). ``worker``: a shard worker's index among ``config.shards`` workers (client ids
        are then ``worker + k * shards``, unique in the node: ``id % shards`` names the
        worker)."""
        self.config = config
        self.config_file = config_file
        self.version = __version__
        self.run_id = os.urandom(20).hex()
        self.started = time.time()
        self.started_mono = time.monotonic()
        offset = config.clock_offset_ms
        self.hlc = HLC(clock=(lambda: wall_ms() + offset) if offset else wall_ms,
                       max_drift_ms=config.max_clock_drift)
        self.engine = Engine(config.data_dir, config.node_id, config.durability, config.cache_entries,
                             hlc=self.hlc, partitions=partitions)
        self.hlc.observe(self.engine.max_hlc())
        self.ks = Keyspace(self.engine, self.hlc, config.node_id)
        self.changes = self.ks.changes  # which records changed, whoever wrote them (keyspace/changes.py)
        self.blocking = BlockingRegistry(self.changes, self.engine)
        self.pubsub = PubSub()
        self.blocking.current_setter = self._set_current
        self.current: Context | None = None  # the client whose command is running (None: a peer's records)
        self.events = Events(self)  # keyspace notifications
        self.tracking = Tracking(self)  # client-side caching
        self.watches = Watches(self)  # WATCH for MULTI/EXEC
        self.table: CommandTable = build_table()
        self._lookup = self.table.dispatch
        self.sweeper = Sweeper(self.engine, config)
        self.tunables: dict[str, str] = {}  # Redis parameters changed by CONFIG SET (tunables.py)
        # ACL users (node/acl.py) and function libraries: node-level records (outside the
        # keyspace) the engine reports apart from the change feed, read and written through
        # ``records`` (node/records.py; a shard worker's mesh replaces it: server/mesh.py)
        self.records = NodeRecords(self.ks)
        self.acl = Acl(self)
        self.changes.on_node_records(self.acl.records_changed)
        self.pubsub.limits = class_limits(self.tunable("client-output-buffer-limit"), "pubsub")
        # MONITOR (node/monitor.py): the monitors, and their limits (the "normal" class's)
        self.monitors: list[Context] = []
        # a shard worker's (server/mesh.py): whether any worker of the node has monitors
        # (every command is shown then), what is not shown here (a unit's parts; the
        # commands of another worker's clients, which their own worker shows), and how a
        # line reaches the monitors of the other workers
        self.monitor_on = False
        self.feed_muted = 0
        self._remote_monitors = False
        self.monitors_changed: Callable[[], None] | None = None
        self.monitor_siblings: Callable[[bytes], None] | None = None
        self.monitor_limits = class_limits(self.tunable("client-output-buffer-limit"), "normal")
        self.limits = Limits()  # request limits the RESP parsers read
        self.scripting = Scripting(self)  # EVAL and function libraries (node/scripting/)
        self.stats = Stats()
        self.error_codes: dict[str, int] = {}  # INFO errorstats
        self.slowlog = SlowLog()
        self.latency = LatencyMonitor()
        self.ops = OpsMeter()
        self.memory_peak = 0
        self.client_pause = ClientPause(self)  # CLIENT PAUSE (node/pause.py)
        self._cron_task: asyncio.Task | None = None
        self.slow_ns = 0
        self.monitor_thresholds()
        self.clients: dict[int, Context] = {}
        # a shard worker's: the client ids and counts every worker shares (shards/clients.py)
        self.shared_clients: Any = None
        step = self._client_step = config.shards if config.shards > 1 else 1
        self._client_seq = worker if step > 1 else 0  # (the first id is worker + shards)
        self.last_save = int(time.time())
        self.replication: Any = None  # attached by the process (replication/manager.py)
        self.antientropy: Any = None  # attached by the process (antientropy/background.py)
        # CONFIG SET of the tls-* names: the RESP server's (server/tls.py) check of the
        # proposed configuration; it returns what puts it in use, or raises ValueError
        self.tls_prepare: Callable[[Config], Callable[[], None]] | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.stopping: asyncio.Event | None = None
        self.shutdown_hook: Callable[[], None] | None = None  # a shard worker's: ask the supervisor
        self.pid = os.getpid()  # the node's (INFO process_id): a shard worker's is its supervisor's
        self._after_commit: list[Callable[[bool], None]] = []
        self._tick_scheduled = False
        # a shard worker's mesh: holds a tick's replies until its siblings have what the tick
        # told them (server/mesh.py, ``Mesh.gate``); True when it took them
        self.reply_gate: Callable[[list[Callable[[bool], None]], bool], bool] | None = None
        self._ack_event: asyncio.Event | None = None
        openfiles.raise_soft()
        self.maxclients = openfiles.fit(DEFAULT_MAXCLIENTS)
        # the users of the records, and the aclfile and requirepass (a shard worker's once it
        # holds every worker's users: process.Process.run_worker)
        self.acl.load(settings=partitions is ALL)

    # -- clients ---------------------------------------------------------------------
    def new_context(self, **kw: Any) -> Context:
        """A context for a new client (registered: CLIENT LIST sees it)."""
        shared = self.shared_clients
        if shared is None:
            self._client_seq += self._client_step
            cid = self._client_seq
        else:
            cid = shared.next_id()
        self.stats.total_connections += 1
        ctx = Context(self, cid, authed=self.acl.default_authed(), **kw)
        self.clients[cid] = ctx
        if shared is not None:
            shared.set_count(len(self.clients))
        return ctx

    def connected(self) -> int:
        """The clients connected to the node (what ``maxclients`` limits): a shard
        worker counts every worker's."""
        return len(self.clients) if self.shared_clients is None else self.shared_clients.total()  # type: ignore[no-any-return]

    def drop_context(self, ctx: Context) -> None:
        if self.clients.pop(ctx.id, None) is not None and self.shared_clients is not None:
            self.shared_clients.set_count(len(self.clients))
        self.blocking.drop_client(ctx)
        if ctx.in_pubsub:
            self.pubsub.drop_client(ctx)
        if ctx.tracking is not None:
            self.tracking.disable(ctx)
        if ctx.watched is not None:
            self.watches.unwatch_all(ctx)
        if ctx.monitor:
            self.drop_monitor(ctx)
        ctx.closing = True

    def add_monitor(self, ctx: Context) -> None:
        ctx.monitor = True
        self.monitors.append(ctx)
        self.monitor_on = True
        if len(self.monitors) == 1 and self.monitors_changed is not None:
            self.monitors_changed()

    def drop_monitor(self, ctx: Context) -> None:
        ctx.monitor = False
        self.monitors.remove(ctx)
        self.monitor_on = bool(self.monitors) or self._remote_monitors
        if not self.monitors and self.monitors_changed is not None:
            self.monitors_changed()

    def remote_monitors(self, on: bool) -> None:
        """A shard worker: whether another worker of the node has monitors now."""
        self._remote_monitors = on
        self.monitor_on = bool(self.monitors) or on

    def feed_monitors(self, ctx: Context, args: list[bytes]) -> None:
        """MONITOR: ``ctx`` ran ``args`` (node/monitor.py). A shard worker shows the
        commands of its own clients only, wherever they ran (a proxy's are shown by the
        client's worker), and the calls of scripts that run here."""
        if self.feed_muted or (ctx.addr == PROXY_ADDR and ctx.acl_context != LUA):
            return
        line = MonitorLine(ctx, args)
        for m in list(self.monitors):
            if m is ctx:  # a monitor's own command: its line comes after its reply
                if ctx.deferred is None:
                    ctx.deferred = []
                ctx.deferred.append(line.status)
            else:
                push_limited(m, line, self.monitor_limits)
        if self.monitor_siblings is not None:
            self.monitor_siblings(line.status)

    def deliver_monitor_line(self, status: bytes) -> None:
        """A MONITOR line of another shard worker, to this worker's monitors."""
        line = MonitorLine.of(status)
        for m in list(self.monitors):
            push_limited(m, line, self.monitor_limits)

    def _set_current(self, ctx: Context | None) -> None:
        self.current = ctx

    def tunable(self, name: str) -> str:
        """A Redis parameter's current value (CONFIG SET, else its default)."""
        return tunables.value(self.tunables, name)

    # -- dispatch --------------------------------------------------------------------
    def dispatch(self, ctx: Context, args: list[bytes], run: bool = True, cmd: Command | None = None) -> Any:
        """Run one command for ``ctx``: admit it, then execute it. Returns the reply value
        (an ``Err`` for an error).

        Admission is what is decided before a command runs, from the connection and the
        command table alone: the table lookup, arity, subcommand, auth and ACL checks
        (``node/acl.py``), a monitor's and a subscriber's limits, MISCONF, MULTI
        queueing; a refused or queued command's reply is returned at once. Execution runs
        the handler, measured (INFO commandstats, SLOWLOG, LATENCY), with what follows it
        (keyspace notifications, client tracking, WAIT's position, MONITOR).

        The two halves are where a node of several shard workers splits a command
        (docs/shards.md §2): ``admit`` (``run`` false: the admitted ``Command`` is
        returned) on the worker holding the connection, ``execute`` (``cmd`` given:
        admission is skipped) on the worker owning the command's keys. They are one
        body rather than two methods so that a command costs no extra Python call on
        this, every command's path (~40 ns: 3% of a GET, bench/bench_dispatch.py)."""
        if cmd is None:
            self.stats.total_commands += 1
            cmd = self._lookup.get(args[0])
            if cmd is None:
                cmd = self._lookup.get(args[0].lower())
                if cmd is None:
                    return self.rejected(ctx, None, errors.unknown_command(args))
            n = len(args)
            a = cmd.arity
            if (a > 0 and n != a) or n < -a:
                return self.rejected(ctx, cmd, errors.wrong_arity(cmd.fullname))
            if cmd.subcommands and (n > 1 or cmd.handler is None):
                sub = cmd.subcommands.get(args[1].lower().decode("latin-1"))
                if sub is None:
                    return self.rejected(ctx, None, errors.unknown_subcommand(cmd.name, args[1]))
                cmd = sub
                a = cmd.arity
                if (a > 0 and n != a) or n < -a:
                    return self.rejected(ctx, cmd, errors.wrong_arity(cmd.fullname))
            if not ctx.authed and not cmd.no_auth and self.acl.auth_required():
                return self.rejected(ctx, cmd, errors.NOAUTH)
            if ctx.user.restricted:  # (the default user with every permission skips the check)
                denied = self.acl.check(ctx, cmd, args)
                if denied is not None:
                    return self.rejected(ctx, cmd, denied)
            if ctx.monitor and cmd.keyspace:  # (a monitor is in ``monitors``)
                return self.rejected(ctx, cmd, errors.REPLICA_KEYSPACE)
            if ctx.in_pubsub and ctx.proto == 2 and (cmd.parent is not None or cmd.name not in _PUBSUB_MODE):
                return self.rejected(ctx, cmd, errors.pubsub_context(cmd.fullname))
            if self.engine.write_error is not None and self._denied_by_disk_error(ctx, cmd, args):
                return self.rejected(ctx, cmd, errors.misconf(self.engine.write_error))
            if ctx.multi is not None and cmd.queued_in_multi:
                if cmd.no_multi:
                    return self.rejected(ctx, cmd, errors.NOT_IN_MULTI)
                ctx.multi.append((cmd, args))
                return QUEUED
            if not run:
                return cmd
        ctx.last_cmd = cmd
        self.current = ctx
        events = self.events
        if cmd.write and events.new_on:
            events.mark_absent(cmd.keys_named(args))
        monitors = self.monitor_on
        if monitors and cmd.skip_monitor:
            self.feed_monitors(ctx, args)  # (a script: shown before the commands it calls)
        t0 = _clock()
        try:
            r = cmd.handler(ctx, args)  # type: ignore[misc]
        except CommandError as e:
            r = Err(e.message)
        except KeyspaceError as e:
            r = Err(errors.status_text(e))
        except OutsideRange:  # a shard worker's command reached a key of another (a script's undeclared key)
            r = Err(errors.OTHER_SHARD_WORKER)
        except Exception:
            self.stats.unexpected_errors += 1
            log.exception("command %s failed", cmd.fullname)
            r = Err(errors.internal_error(cmd.fullname))
        dt = _clock() - t0
        self.current = None
        if events.on and events.pending_new:
            events.flush_new()
        cmd.calls += 1
        cmd.nsec += dt
        if type(r) is Err:
            cmd.failed_calls += 1
            self.count_error(r)
        elif cmd.write:
            ctx.last_write_seq = self.engine.next_seq
        elif ctx.tracking is not None and cmd.readonly:
            self.tracking.after_read(ctx, cmd, args)
        if dt > self.slow_ns:
            self._slow(ctx, cmd, args, dt)
        if monitors and not cmd.admin and not cmd.skip_monitor:
            self.feed_monitors(ctx, args)
        return r

    def admit(self, ctx: Context, args: list[bytes]) -> Any:
        """Admit one command for ``ctx`` (``dispatch``'s first half): the ``Command`` to
        ``execute``, or the reply when it is refused (an ``Err``) or queued (``QUEUED``)."""
        return self.dispatch(ctx, args, False)

    def execute(self, ctx: Context, cmd: Command, args: list[bytes]) -> Any:
        """Execute an admitted command (``dispatch``'s second half); returns the reply."""
        return self.dispatch(ctx, args, True, cmd)

    def _denied_by_disk_error(self, ctx: Context, cmd: Any, args: list[bytes]) -> bool:
        """While the storage cannot write (``Engine.write_error``), Redis's rule for a
        disk error: write commands, an EXEC whose transaction writes, a script that may
        write, and PING are refused with MISCONF (reads are served)."""
        if cmd.name == "ping" and cmd.parent is None:
            return True
        return self.may_write(ctx, cmd, args, cmd.write)

    def may_write(self, ctx: Context, cmd: Any, args: list[bytes], flagged: bool) -> bool:
        """Whether ``cmd`` may write, as Redis decides before running it (MISCONF, CLIENT
        PAUSE WRITE): an EXEC whose queue holds a command that may replicate, a script
        runner whose script is not flagged no-writes, else ``flagged`` (its own flag)."""
        if cmd.parent is None:
            if cmd.name == "exec" and ctx.multi:
                return any(c.may_replicate for c, _ in ctx.multi)
            if cmd.name in SCRIPT_RUNNERS:
                return self.scripting.may_write(args)
        return flagged

    def rejected(self, ctx: Context, cmd: Any, text: str) -> Err:
        """A command refused before it ran (unknown, arity, auth, ...): counted for INFO;
        inside MULTI it makes EXEC fail (EXECABORT)."""
        if cmd is not None:
            cmd.rejected_calls += 1
        if ctx.multi is not None:
            ctx.multi_error = True
        err = Err(text)
        self.count_error(err)
        return err

    def count_error(self, err: str) -> None:
        """INFO errorstats / total_error_replies: every error reply, by its code."""
        self.stats.error_replies += 1
        code = err.split(" ", 1)[0]
        self.error_codes[code] = self.error_codes.get(code, 0) + 1

    def _slow(self, ctx: Context, cmd: Any, args: list[bytes], dt_ns: int) -> None:
        us = dt_ns // 1000
        if self.slowlog.threshold_us >= 0 and us > self.slowlog.threshold_us:
            self.slowlog.add(args, us, ctx.addr, ctx.name)
        threshold_ms = self.latency.threshold_ms
        if threshold_ms and us >= threshold_ms * 1000:
            self.latency.add("fast-command" if cmd.fast else "command", us // 1000)

    def monitor_thresholds(self) -> None:
        """Recompute the one comparison every command makes (after CONFIG SET)."""
        self.slowlog.threshold_us = int(self.tunable("slowlog-log-slower-than"))
        self.slowlog.resize(int(self.tunable("slowlog-max-len")))
        self.latency.threshold_ms = int(self.tunable("latency-monitor-threshold"))
        candidates = []
        if self.slowlog.threshold_us >= 0:
            candidates.append(self.slowlog.threshold_us * 1000)
        if self.latency.threshold_ms > 0:
            candidates.append(self.latency.threshold_ms * 1_000_000 - 1)
        self.slow_ns = min(candidates) if candidates else 1 << 62

    def reset_stats(self) -> None:
        """CONFIG RESETSTAT."""
        self.stats.reset(len(self.clients))
        self.error_codes.clear()
        self.ks.hits = self.ks.misses = 0
        for cmd in self.table.all_commands():
            cmd.calls = cmd.nsec = cmd.rejected_calls = cmd.failed_calls = 0

    # -- the commit barrier ------------------------------------------------------------
    def after_commit(self, fn: Callable[[bool], None]) -> None:
        """Call ``fn(committed)`` once this tick's writes are committed (``False`` if
        the commit failed: nothing of the tick may be acknowledged)."""
        self._after_commit.append(fn)
        if not self._tick_scheduled:
            self._tick_scheduled = True
            self.loop.call_soon(self.end_tick)  # type: ignore[union-attr]

    def request_tick(self) -> None:
        """Make sure this tick ends with ``end_tick`` (work waits for it, no reply does)."""
        if not self._tick_scheduled and self.loop is not None:
            self._tick_scheduled = True
            self.loop.call_soon(self.end_tick)

    def end_tick(self) -> None:
        """Commit the tick's writes, then release its replies. When the commit fails
        (``Engine.write_error``: a full disk, an I/O error) the replies of a tick that
        wrote are never sent (their connections close: nothing of it is acknowledged),
        its writes stay pending for the next commit, and until one succeeds writes are
        refused with MISCONF (``dispatch``); the replies of a tick that wrote nothing go
        out as usual."""
        if self.tracking.pending:
            self.tracking.flush_bcast()
        self._tick_scheduled = False
        waiting = self._after_commit
        self._after_commit = []
        engine = self.engine
        wrote = engine.dirty
        try:
            engine.commit()
            ok = True
        except StorageWriteError:
            ok = not wrote
        except Exception:
            log.critical("storage commit failed; nothing of this tick is acknowledged", exc_info=True)
            ok = False
        gate = self.reply_gate
        if gate is not None and gate(waiting, ok):
            return
        for fn in waiting:
            fn(ok)

    # -- replication-facing ------------------------------------------------------------
    def replica_acked(self) -> None:
        """A peer acknowledged more of our log: wake WAIT."""
        ev = self._ack_event
        if ev is not None:
            self._ack_event = None
            ev.set()

    def deliver_published(self, channel: bytes, payload: bytes, shard: bool) -> None:
        """A message PUBLISHed on a peer: to this node's subscribers (not relayed again),
        on every shard worker of the node (the peer relays it to one of them)."""
        self.pubsub.deliver(channel, payload, shard)
        if self.pubsub.siblings is not None:
            self.pubsub.siblings(channel, payload, shard)

    def ack_waiter(self) -> asyncio.Event:
        if self._ack_event is None:
            self._ack_event = asyncio.Event()
        return self._ack_event

    # -- settings CONFIG SET changes ------------------------------------------------------
    def set_durability(self, mode: str) -> None:
        self.engine.set_durability(mode)
        self.config.durability = mode

    def set_maxclients(self, n: int) -> None:
        """As Redis: the open-files limit is raised if it must be; if it cannot be raised
        enough the old value stays and ValueError says what would fit."""
        fits = openfiles.fit(n)
        if fits != n:
            raise ValueError(
                f"The operating system is not able to handle the specified number of clients, try with {fits}")
        self.maxclients = n

    def set_tunable(self, name: str, value: str, given: str | None = None) -> None:
        """A Redis parameter's new ``value`` (as CONFIG GET prints it; ``given`` as set)."""
        self.tunables[name] = value
        if name in ("slowlog-log-slower-than", "slowlog-max-len", "latency-monitor-threshold"):
            self.monitor_thresholds()
        elif name == "client-output-buffer-limit":
            self.pubsub.limits = class_limits(value, "pubsub")
            self.monitor_limits = class_limits(value, "normal")
        elif name == "notify-keyspace-events":
            # (the flags as given: Redis prints "AKEm" for "KEAnm" but keeps 'n' on)
            self.events.configure(value if given is None else given)
        elif name == "proto-max-bulk-len":
            self.limits.max_bulk = int(value)
        elif name == "client-query-buffer-limit":
            self.limits.max_query = int(value)

    def save(self) -> None:
        self.engine.sync()
        self.last_save = int(time.time())

    # -- life cycle --------------------------------------------------------------------
    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = self.blocking.loop = loop
        self.stopping = asyncio.Event()
        self.sweeper.start(loop)
        self._cron_task = loop.create_task(self._cron())

    async def _cron(self) -> None:
        """Every 100 ms: the ops-per-second sample and the memory peak (INFO); after a
        failed write, the retry that lifts MISCONF once the disk takes writes again
        (``Engine.commit`` tries once a second)."""
        while True:
            await asyncio.sleep(0.1)
            self.ops.sample(self.stats.total_commands)
            self.memory_peak = max(self.memory_peak, self.memory_rss())
            if self.engine.write_error is not None:
                try:
                    self.engine.commit()
                except StorageWriteError:
                    pass

    @staticmethod
    def memory_rss() -> int:
        """Resident set size of this process, in bytes."""
        try:
            with open("/proc/self/statm") as f:
                return int(f.read().split()[1]) * resource.getpagesize()
        except (OSError, ValueError, IndexError):
            return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def request_shutdown(self) -> None:
        """SHUTDOWN: stop the node. A shard worker asks its supervisor (``shutdown_hook``),
        which stops every worker of the node, this one too."""
        if self.shutdown_hook is not None:
            self.shutdown_hook()
        else:
            self.stop_here()

    def stop_here(self) -> None:
        """Stop this process (SIGTERM, SIGINT)."""
        if self.stopping is not None:
            self.stopping.set()

    def close(self) -> None:
        """Stop the sweeper, commit what is pending, save the clock, close the engine."""
        self.sweeper.stop()
        if self._cron_task is not None:
            self._cron_task.cancel()
        if self._after_commit:
            self.end_tick()
        for ctx in list(self.clients.values()):
            ctx.kill()
        self.engine.save_hlc(self.hlc.last)
        self.engine.close()


def class_limits(value: str, cls: str) -> tuple[int, int, int]:
    """(hard, soft, seconds) of one class of a client-output-buffer-limit value."""
    parts = value.split()
    for i in range(0, len(parts) - 3, 4):
        if parts[i] == cls:
            return int(parts[i + 1]), int(parts[i + 2]), int(parts[i + 3])
    return 0, 0, 0
