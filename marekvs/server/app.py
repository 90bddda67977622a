"""The asyncio connection loop, the dispatcher and group commit.

One event loop (uvloop when available) serves every connection. Each readable
connection's bytes are parsed (``resp.RequestParser``) and its commands executed at
once; replies are buffered per connection. The first reply of a tick schedules
``_flush`` with ``call_soon``, which runs after every I/O callback of the tick: it
commits ONE WriteBatch for all the writes of the tick (group commit; synced under
``durability always``) and only then writes each connection's replies with one
``transport.write`` per connection. So a reply is never sent for a write that is not
in a committed batch, and a pipeline costs one syscall per batch of replies.

Back-pressure: when a client's transport buffer passes its high-water mark the loop
stops reading from that client until it drains. A protocol error replies to the
commands before it, then sends the error and closes the connection, as Redis does.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import time
from typing import Any

from marekvs import __version__
from marekvs.commands import errors, tunables
from marekvs.commands.db import Keyspace
from marekvs.commands.errors import CommandError
from marekvs.commands.server import fit_open_files, raise_soft_open_files
from marekvs.commands.table import CommandTable, build_table
from marekvs.config import Config
from marekvs.core.hlc import HLC, wall_ms
from marekvs.server import resp
from marekvs.storage.engine import Engine
from marekvs.storage.sweeper import Sweeper

log = logging.getLogger("marekvs.server")

_enc = resp._enc
_Err = resp.Err
_Simple = resp.Simple
_R_OK = resp.R_OK
_MAXCLIENTS_REACHED = b"-ERR max number of clients reached\r\n"
DEFAULT_MAXCLIENTS = 10000
Blocking = resp.Blocking
NO_REPLY = resp.NO_REPLY


class Client(asyncio.Protocol):
    """One client connection and its state (what CLIENT LIST shows)."""

    __slots__ = ("server", "ks", "transport", "parser", "out", "proto", "authed", "id", "name",
                 "addr", "laddr", "created", "last_active", "lib_name", "lib_ver", "closing",
                 "scheduled", "last_cmd", "paused", "no_evict", "db", "fd", "blocked", "backlog",
                 "backlog_err", "last_write_seq")

    def __init__(self, server: "Server"):
        self.server = server
        self.ks = server.ks
        self.transport: Any = None
        self.parser = resp.RequestParser(server.limits)
        self.parser.auth_required = self.parser.gated = bool(server.config.requirepass)
        self.out: list[bytes] = []
        self.proto = 2
        self.authed = not server.config.requirepass
        self.id = server.next_client_id()
        self.name = b""
        self.addr = self.laddr = "?"
        self.created = self.last_active = time.monotonic()
        self.lib_name = self.lib_ver = b""
        self.closing = False
        self.scheduled = False
        self.last_cmd: Any = None  # the Command last run (CLIENT LIST shows its name)
        self.paused = False
        self.no_evict = False
        self.db = 0
        self.fd = -1
        self.blocked = False  # a blocking command (WAIT) is pending: later commands wait
        self.backlog: list[list[bytes]] = []
        self.backlog_err: str | None = None
        self.last_write_seq = 0  # log seq of this client's last write (WAIT)

    # -- asyncio.Protocol ----------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        server = self.server
        if len(server.clients) >= server.maxclients:
            # as Redis: the error is written at once and the connection closed
            server.rejected_connections += 1
            self.closing = True
            transport.write(_MAXCLIENTS_REACHED)
            transport.close()
            return
        peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("sockname")
        s = transport.get_extra_info("socket")
        self.fd = s.fileno() if s is not None else -1
        self.addr = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer)
        self.laddr = f"{sock[0]}:{sock[1]}" if isinstance(sock, tuple) else str(sock)
        if s is not None and s.family in (socket.AF_INET, socket.AF_INET6):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            keepalive = int(tunables.value(server.config_extra, "tcp-keepalive"))
            if keepalive:
                keep_alive(s, keepalive)
        self.server.clients[self.id] = self

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.clients.pop(self.id, None)
        self.closing = True

    def pause_writing(self) -> None:
        self.paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if not self.closing:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        cmds, err = self.parser.feed(data)
        if self.parser.pending_bytes() > self.server.limits.max_query:
            # as Redis: the client is closed without a reply, its requests dropped
            log.warning("closing client %s that reached max query buffer length (%d bytes)",
                        self.addr, self.parser.pending_bytes())
            self.server.query_buffer_closes += 1
            self.kill()
            return
        if self.blocked:
            self.backlog += cmds
            if err is not None:
                self.backlog_err = err
            return
        self._run(cmds, err)

    def _run(self, cmds: list[list[bytes]], err: str | None) -> None:
        server = self.server
        while cmds:
            self.last_active = time.monotonic()
            execute = server.execute
            out = self.out
            for i, args in enumerate(cmds):
                if i and not self.authed and self.parser.auth_required:
                    # a RESET earlier in this batch restored the unauthenticated
                    # limits: a request framed before it meets them now, as it would
                    # have if parsed after it
                    bad = self.parser.unauthenticated_error(args)
                    if bad is not None:
                        err = bad
                        break
                r = execute(self, args)
                if type(r) is Blocking:
                    self.blocked = True
                    self.backlog = cmds[i + 1:]
                    self.backlog_err = err
                    server.loop.create_task(self._unblock(r))
                    err = None
                    break
                out.append(r)
                if self.closing:
                    break
            if self.blocked or self.closing or err is not None:
                break
            # Before AUTH the parser hands over one command at a time, so a request
            # pipelined behind a successful AUTH is judged by the limits that now apply.
            cmds, err = self.parser.more()
        if err is not None:
            self.out.append(b"-ERR %s\r\n" % err.encode())
            self.closing = True
            log.debug("protocol error from %s: %s", self.addr, err)
        if self.out and not self.scheduled:
            self.scheduled = True
            server.dirty.append(self)
            if not server.flush_scheduled:
                server.flush_scheduled = True
                server.loop.call_soon(server.flush)

    async def _unblock(self, b: "Blocking") -> None:
        try:
            r = await b.awaitable
            reply = self.server.encode_reply(self, r)
        except CommandError as e:
            reply = b"-%s\r\n" % _clean(e.message)
        except Exception:
            log.exception("blocking command failed")
            reply = b"-ERR internal error\r\n"
        self.blocked = False
        self.last_active = time.monotonic()  # (an idle timeout counts from here)
        if self.closing:
            return
        self.out.append(reply)
        cmds, err = self.backlog, self.backlog_err
        self.backlog, self.backlog_err = [], None
        self._run(cmds, err)

    # -- helpers for handlers --------------------------------------------------------
    def close_after_reply(self) -> None:
        self.closing = True

    def kill(self) -> None:
        self.closing = True
        if self.transport is not None:
            self.transport.close()


def keep_alive(s: socket.socket, interval: int) -> None:
    """tcp-keepalive, as Redis's anetKeepAlive: probes after ``interval`` idle seconds,
    then every third of it, three times, so a dead peer is dropped (and stops counting
    against maxclients) within about twice ``interval``."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, interval)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, interval // 3))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


class Server:
    def __init__(self, config: Config, config_file: str | None = None):
        self.config = config
        self.config_file = config_file
        self.run_id = os.urandom(20).hex()
        self.started = time.time()
        self.started_mono = time.monotonic()
        offset = config.clock_offset_ms
        self.hlc = HLC(clock=(lambda: wall_ms() + offset) if offset else wall_ms,
                       max_drift_ms=config.max_clock_drift)
        self.engine = Engine(config.data_dir, config.node_id, config.durability, config.cache_entries,
                             hlc=self.hlc)
        self.hlc.observe(self.engine.max_hlc())
        self.ks = Keyspace(self.engine, self.hlc, config.node_id)
        self.table: CommandTable = build_table()
        self.dispatch = self.table.dispatch
        self.clients: dict[int, Client] = {}
        self._client_seq = 0
        self.dirty: list[Client] = []
        self.flush_scheduled = False
        self.loop: asyncio.AbstractEventLoop = None  # type: ignore[assignment]
        self.stopping: asyncio.Event | None = None
        self.tcp_server: asyncio.AbstractServer | None = None
        self.sweeper = Sweeper(self.engine, config)
        from marekvs.replication.manager import ReplicationManager

        self.repl = ReplicationManager(self)
        self.ack_event: asyncio.Event | None = None
        self.metrics_server: asyncio.AbstractServer | None = None
        self.idle_task: asyncio.Task | None = None
        # stats (INFO stats / CONFIG RESETSTAT)
        self.total_commands = 0
        self.total_connections = 0
        self.rejected_connections = 0
        self.unexpected_errors = 0
        self.error_replies = 0
        self.last_save = int(time.time())
        self.config_extra: dict[str, str] = {}  # accepted Redis no-op tunables
        self.limits = resp.Limits()  # request limits (CONFIG SET proto-max-bulk-len, ...)
        self.query_buffer_closes = 0
        raise_soft_open_files()
        self.maxclients = fit_open_files(DEFAULT_MAXCLIENTS)
        self.version = __version__

    def set_durability(self, mode: str) -> None:
        self.engine.set_durability(mode)
        self.config.durability = mode

    def next_client_id(self) -> int:
        self._client_seq += 1
        self.total_connections += 1
        return self._client_seq

    # -- dispatch --------------------------------------------------------------------
    def execute(self, c: Client, args: list[bytes]) -> bytes:
        """Run one command; return its encoded reply."""
        self.total_commands += 1
        cmd = self.dispatch.get(args[0])
        if cmd is None:
            cmd = self.dispatch.get(args[0].lower())
            if cmd is None:
                self.error_replies += 1
                return b"-%s\r\n" % _clean(errors.unknown_command(args))
        n = len(args)
        a = cmd.arity
        if (a > 0 and n != a) or n < -a:
            self.error_replies += 1
            return b"-%s\r\n" % _clean(errors.wrong_arity(cmd.fullname))
        if cmd.subcommands and (n > 1 or cmd.handler is None):
            sub = cmd.subcommands.get(args[1].lower().decode("latin-1"))
            if sub is None:
                self.error_replies += 1
                return b"-%s\r\n" % _clean(errors.unknown_subcommand(cmd.name, args[1]))
            cmd = sub
            a = cmd.arity
            if (a > 0 and n != a) or n < -a:
                self.error_replies += 1
                return b"-%s\r\n" % _clean(errors.wrong_arity(cmd.fullname))
        if not c.authed and "no_auth" not in cmd.flags:
            self.error_replies += 1
            return b"-%s\r\n" % errors.NOAUTH.encode()
        c.last_cmd = cmd
        try:
            r = cmd.handler(c, args)  # type: ignore[misc]
        except CommandError as e:
            self.error_replies += 1
            return b"-%s\r\n" % _clean(e.message)
        except Exception:
            self.unexpected_errors += 1
            log.exception("command %s failed", cmd.fullname)
            return b"-ERR internal error executing '%s'\r\n" % cmd.fullname.encode()
        if cmd.write:
            c.last_write_seq = self.engine.next_seq
        t = type(r)
        if t is bytes:
            return b"$%d\r\n%s\r\n" % (len(r), r)
        if r is resp.OK:
            return _R_OK
        if t is int:
            return b":%d\r\n" % r
        if t is Blocking:
            return r  # type: ignore[return-value]
        if r is NO_REPLY:
            return b""
        return self.encode_reply(c, r)

    def encode_reply(self, c: Client, r: Any) -> bytes:
        if r is None:
            return b"_\r\n" if c.proto == 3 else b"$-1\r\n"
        out: list[bytes] = []
        _enc(r, c.proto, out)
        if type(r) is _Err:
            self.error_replies += 1
        return b"".join(out)

    def replica_acked(self) -> None:
        """A peer acknowledged more of our log: wake WAIT."""
        ev = self.ack_event
        if ev is not None:
            self.ack_event = None
            ev.set()

    def ack_waiter(self) -> asyncio.Event:
        if self.ack_event is None:
            self.ack_event = asyncio.Event()
        return self.ack_event

    # -- group commit ------------------------------------------------------------------
    def flush(self) -> None:
        self.flush_scheduled = False
        dirty = self.dirty
        self.dirty = []
        try:
            self.engine.commit()
        except Exception:
            # Nothing of this tick is acknowledged: the writes are not durable.
            log.critical("storage commit failed; closing the tick's connections", exc_info=True)
            for c in dirty:
                c.out = []
                c.scheduled = False
                c.kill()
            return
        for c in dirty:
            c.scheduled = False
            out = c.out
            if not out:
                continue
            c.out = []
            if c.transport is None or c.transport.is_closing():
                continue
            c.transport.write(out[0] if len(out) == 1 else b"".join(out))
            if c.closing:
                c.transport.close()

    # -- life cycle --------------------------------------------------------------------
    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.stopping = asyncio.Event()
        await self.repl.start()  # a fresh node bootstraps from its peers before it serves
        if self.config.metrics_port:
            from marekvs.server.metrics import start_metrics

            self.metrics_server = await start_metrics(self)
        self.tcp_server = await self.loop.create_server(
            lambda: Client(self), self.config.bind, self.config.port, reuse_address=True, backlog=511)
        self.sweeper.start(self.loop)
        self.idle_task = self.loop.create_task(self._close_idle_clients())
        log.info("marekvs %s node %d listening on %s:%d (data %s, durability %s)", __version__,
                 self.config.node_id, self.config.bind, self.config.port,
                 os.path.abspath(self.config.data_dir), self.config.durability)

    async def run(self) -> None:
        await self.start()
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                self.loop.add_signal_handler(sig, self.request_shutdown)
            except (NotImplementedError, RuntimeError):
                pass
        assert self.stopping is not None
        await self.stopping.wait()
        await self.stop()

    async def _close_idle_clients(self) -> None:
        """CONFIG SET timeout N: as Redis, a client idle for more than N seconds is closed
        without a reply, unless it waits in a blocking command (checked every second)."""
        while True:
            await asyncio.sleep(1.0)
            limit = int(tunables.value(self.config_extra, "timeout"))
            if not limit:
                continue
            now = time.monotonic()
            for c in list(self.clients.values()):
                if not c.blocked and now - c.last_active > limit:
                    log.debug("closing idle client %s", c.addr)
                    c.kill()

    def request_shutdown(self) -> None:
        if self.stopping is not None:
            self.stopping.set()

    async def stop(self) -> None:
        self.sweeper.stop()
        if self.idle_task is not None:
            self.idle_task.cancel()
        if self.tcp_server is not None:
            self.tcp_server.close()
        if self.metrics_server is not None:
            self.metrics_server.close()
        await self.repl.stop()
        if self.dirty:
            self.flush()
        for c in list(self.clients.values()):
            c.kill()
        self.engine.save_hlc(self.hlc.last)
        self.engine.close()
        log.info("marekvs node %d stopped cleanly", self.config.node_id)


def _clean(msg: str | bytes) -> bytes:
    """Error text as Redis sends it: CR/LF in echoed input replaced by spaces (echoed
    user bytes are kept as they are)."""
    if type(msg) is str:
        msg = msg.encode("utf-8", "surrogateescape")
    return msg.replace(b"\r", b" ").replace(b"\n", b" ")  # type: ignore[union-attr]


def serve(config: Config, config_file: str | None = None) -> None:
    server = Server(config, config_file)
    try:
        import uvloop
    except ImportError:  # pragma: no cover - uvloop is a dependency
        log.warning("uvloop not available; using the default asyncio loop")
        asyncio.run(server.run())
    else:
        uvloop.run(server.run())
