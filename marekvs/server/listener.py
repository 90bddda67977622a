"""The RESP listener: the asyncio connection loop over a node.

One event loop (uvloop when available) serves every connection. Each readable
connection's bytes are parsed (``resp.RequestParser``, sans-I/O) and its commands run at
once through ``node.dispatch``; the reply values are encoded and buffered per connection.
The first reply of a tick asks the node's commit barrier (``Node.after_commit``) to call
``_flush``: after every I/O callback of the tick the node commits ONE WriteBatch for all
the tick's writes (synced under ``durability always``), then each connection's replies go
out with one ``transport.write``. So a reply is never sent for a write that is not in a
committed batch, and a pipeline costs one syscall per batch of replies.

Back-pressure: when a client's transport buffer passes its high-water mark the loop stops
reading from that client until it drains. A protocol error replies to the commands before
it, then sends the error and closes the connection, as Redis does. A connection that
holds more than client-query-buffer-limit of requests not yet complete is closed.

TLS (``tls-port``; the Kafka listener with ``kafka_tls yes`` the same way): a ``TlsListener``
accepts on the TLS port itself (its own listening sockets, on the loop's reader) and hands
each socket to ``loop.connect_accepted_socket`` with the context in use (``server/tls.py``;
CONFIG SET replaces it for the connections that come after), which does the handshake,
then serves the same ``Connection`` as a plaintext client's on uvloop's TLS transport
(``asyncio.start_server(ssl=...)`` would fix the context at start). (Accepting
through a protocol of its own and calling ``loop.start_tls`` lost the ClientHello when it
arrived before start_tls took the transport over: both loops read a new connection
whatever its protocol did in connection_made.) A handshake that fails (plaintext on the
TLS port, an untrusted, expired or missing client certificate, a garbage record) or takes
longer than ``tls_handshake_timeout`` closes the connection with a log line (``Error
accepting a client connection``, as Redis's), at most ``_LOG_BURST`` a second, the rest
counted in the next line; once a storm of them stops, the memory they took goes back to
the OS (``_after_storm``). Connections still in their handshake count against maxclients.
A TLS ClientHello on the plaintext port is a protocol error (``resp.TLS_ON_PLAINTEXT``):
logged, and the connection closed (Redis would keep waiting for a newline). With
``tls-auth-clients-user CN`` the client certificate's CN names the ACL user the connection
starts as (``Acl.authenticate_certificate``).
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from typing import Any, Callable

from marekvs.commands.context import Context
from marekvs.commands import errors
from marekvs.commands.errors import CommandError
from marekvs.commands.reply import NO_REPLY, OK, Blocking, Err
from marekvs.node import Node
from marekvs.server import resp
from marekvs.server.busy import BusyServer
from marekvs.server.tls import ServerTls, peer_common_name, release_freed_memory

log = logging.getLogger("marekvs.server")

_enc = resp._enc
_R_OK = resp.R_OK
_MAXCLIENTS_REACHED = b"-ERR max number of clients reached\r\n"
_BACKLOG = 511  # (the listen backlog, as Redis's tcp-backlog; and connections accepted per wake-up)
_LOG_BURST = 10  # TLS handshake failures logged one by one per second; the rest are counted
_STORM = 256  # failed handshakes after which, once they stop, freed memory goes back to the OS
_DENIED = b"-%s\r\n" % errors.DENIED_PROTECTED.encode()


class Connection(asyncio.Protocol):
    """One client connection: its transport, parser and output; its state is ``ctx``."""

    __slots__ = ("node", "server", "ctx", "transport", "parser", "out", "scheduled", "paused", "backlog",
                 "backlog_err", "dispatch", "flush_cb", "held", "pushed", "adopt", "tls")

    def __init__(self, server: RespServer, adopt: Any = None):
        self.server = server
        self.node = server.node
        self.dispatch = self.node.dispatch
        self.transport: Any = None
        self.ctx: Context = None  # type: ignore[assignment]  # made in connection_made
        # a client accepted while a script was busy (server/busy.py) brings its state along
        self.parser = resp.RequestParser(self.node.limits) if adopt is None else adopt.parser
        self.adopt = adopt
        self.out: list[bytes] = []
        self.scheduled = False
        self.paused = False
        self.backlog: list[list[bytes]] = []
        self.backlog_err: str | None = None
        self.flush_cb = self._flush  # (one bound method for every tick)
        self.held = False  # commands wait for a CLIENT PAUSE to end
        self.pushed = 0  # bytes of pushes queued since the last flush
        self.tls = False  # on the TLS port (server/busy.py cannot read such a socket itself)

    # -- asyncio.Protocol ----------------------------------------------------------
    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        node = self.node
        if self.adopt is not None:
            self._adopted(transport)
            return
        if node.connected() >= node.maxclients:
            # as Redis: the error is written at once and the connection closed
            node.stats.rejected_connections += 1
            transport.write(_MAXCLIENTS_REACHED)
            transport.close()
            return
        peer = transport.get_extra_info("peername")
        if isinstance(peer, tuple) and node.acl.protected_from(peer[0]):
            # protected mode: as Redis, the error is written at once and the connection closed
            node.stats.rejected_connections += 1
            transport.write(_DENIED)
            transport.close()
            return
        sock = transport.get_extra_info("sockname")
        s = transport.get_extra_info("socket")
        ctx = self.ctx = node.new_context(
            addr=f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else str(peer),
            laddr=f"{sock[0]}:{sock[1]}" if isinstance(sock, tuple) else str(sock),
            fd=s.fileno() if s is not None else -1)
        self._hooks(ctx)
        if self.tls and node.config.tls_auth_clients_user == "CN":
            name = peer_common_name(transport.get_extra_info("ssl_object"))
            if name is not None:
                node.acl.authenticate_certificate(ctx, name.encode("utf-8", "surrogateescape"))
        self.parser.gated = node.acl.auth_required()  # (AUTH/RESET may change the limits)
        self.parser.auth_required = not ctx.authed and self.parser.gated
        self.server.connections.add(self)
        if s is not None and s.family in (socket.AF_INET, socket.AF_INET6):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            keepalive = int(node.tunable("tcp-keepalive"))
            if keepalive:
                keep_alive(s, keepalive)

    def _hooks(self, ctx: Context) -> None:
        ctx.on_kill = self._close_now
        ctx.on_auth = self._auth_changed
        ctx.on_push = self._push
        ctx.query_buffer = self.parser.pending_bytes

    def _adopted(self, transport: Any) -> None:
        """The loop takes over a client accepted while a script was busy."""
        raw, self.adopt = self.adopt, None
        ctx = self.ctx = raw.ctx
        self._hooks(ctx)
        self.server.connections.add(self)
        s = transport.get_extra_info("socket")
        if s is not None:
            ctx.fd = s.fileno()
            keepalive = int(self.node.tunable("tcp-keepalive"))
            if keepalive and s.family in (socket.AF_INET, socket.AF_INET6):
                keep_alive(s, keepalive)
        if raw.out:
            transport.write(bytes(raw.out))

    def connection_lost(self, exc: Exception | None) -> None:
        self.server.connections.discard(self)
        if self.ctx is not None:
            self.node.drop_context(self.ctx)

    def pause_writing(self) -> None:
        self.paused = True
        self.transport.pause_reading()

    def resume_writing(self) -> None:
        self.paused = False
        if not self.ctx.closing:
            self.transport.resume_reading()

    def data_received(self, data: bytes) -> None:
        ctx = self.ctx
        if ctx is None or ctx.closing:
            return
        parser = self.parser
        cmds, err = parser.feed(data)
        if not parser.fast and parser.pending_bytes() > self.node.limits.max_query:
            # as Redis: the client is closed without a reply, its requests dropped
            log.warning("closing client %s that reached max query buffer length (%d bytes)",
                        ctx.addr, parser.pending_bytes())
            self.node.stats.query_buffer_closes += 1
            ctx.kill()
            return
        if ctx.blocked or self.held:
            self.backlog += cmds
            if err is not None:
                self.backlog_err = err
            return
        self._run(cmds, err)

    def _run(self, cmds: list[list[bytes]], err: str | None) -> None:
        ctx = self.ctx
        dispatch = self.dispatch
        node = self.node
        while cmds:
            ctx.last_active = time.monotonic()
            out = self.out
            for i, args in enumerate(cmds):
                if node.client_pause.on and node.client_pause.holds(ctx, args):
                    self.held = True
                    self.backlog = cmds[i:]
                    self.backlog_err = err
                    node.client_pause.hold(self._resume)
                    err = None
                    break
                if i and not ctx.authed and self.parser.auth_required:
                    # a RESET earlier in this batch restored the unauthenticated
                    # limits: a request framed before it meets them now, as it would
                    # have if parsed after it
                    bad = self.parser.unauthenticated_error(args)
                    if bad is not None:
                        err = bad
                        break
                muted = ctx.reply_mode
                r = dispatch(ctx, args)
                if muted and self._mute(muted):
                    if ctx.closing:
                        break
                    continue
                t = type(r)
                if t is bytes:
                    out.append(b"$%d\r\n%s\r\n" % (len(r), r))
                elif r is OK:
                    out.append(_R_OK)
                elif t is int:
                    out.append(b":%d\r\n" % r)
                elif t is Blocking:
                    ctx.blocked = True
                    self.backlog = cmds[i + 1:]
                    self.backlog_err = err
                    self.node.loop.create_task(self._unblock(r))  # type: ignore[union-attr]
                    err = None
                    break
                elif r is not NO_REPLY:
                    _enc(r, ctx.proto, out)  # (HELLO's own reply is in the protocol it chose)
                if ctx.deferred is not None:  # invalidations of its own writes, a monitor's own line
                    for m in ctx.deferred:
                        _enc(m, ctx.proto, out)
                    ctx.deferred = None
                if ctx.closing:
                    break
            if ctx.blocked or self.held or ctx.closing or err is not None:
                break
            # Before AUTH the parser hands over one command at a time, so a request
            # pipelined behind a successful AUTH is judged by the limits that now apply.
            cmds, err = self.parser.more()
        if err is not None:
            self.protocol_error(err)
        if self.out and not self.scheduled:
            self.scheduled = True
            self.node.after_commit(self.flush_cb)

    def protocol_error(self, err: str) -> None:
        """The parser's error: its reply, then the connection closes (with a log line)."""
        ctx = self.ctx
        self.out.append(b"-ERR %s\r\n" % err.encode())
        ctx.closing = True
        if err == resp.TLS_ON_PLAINTEXT:
            log.warning("closing client %s: a TLS handshake on the plaintext port %s", ctx.addr, ctx.laddr)
        else:
            log.debug("protocol error from %s: %s", ctx.addr, err)

    async def _unblock(self, b: Blocking) -> None:
        ctx = self.ctx
        try:
            r = await b.awaitable  # type: ignore[misc]
        except CommandError as e:
            r = Err(e.message)
        except Exception:
            log.exception("blocking command failed")
            r = Err(errors.INTERNAL)
        ctx.blocked = False
        ctx.last_active = time.monotonic()  # (an idle timeout counts from here)
        if ctx.closing:
            return
        if type(r) is Err:
            self.node.stats.error_replies += 1
        _enc(r, ctx.proto, self.out)
        self.emit_deferred()
        cmds, err = self.backlog, self.backlog_err
        self.backlog, self.backlog_err = [], None
        self._run(cmds, err)

    def emit_deferred(self) -> None:
        """What waited for the reply just written: invalidations of the client's own
        writes, a monitor's own line."""
        ctx = self.ctx
        if ctx.deferred is not None:
            for m in ctx.deferred:
                _enc(m, ctx.proto, self.out)
            ctx.deferred = None

    def _push(self, value: object) -> int:
        """An unsolicited message (Pub/Sub, invalidation): queued in order with the
        replies; returns the bytes this connection holds now (output-buffer limits)."""
        proto = self.ctx.proto
        wire = value.wire.get(proto)  # type: ignore[attr-defined]
        if wire is None:
            wire = value.wire[proto] = resp.encode(value, proto)  # type: ignore[attr-defined]
        self.out.append(wire)
        self.pushed += len(wire)
        if not self.scheduled:
            self.scheduled = True
            self.node.after_commit(self.flush_cb)
        t = self.transport
        return self.pushed + (t.get_write_buffer_size() if t is not None else 0)

    def push_now(self) -> None:
        """Write the pushes queued since the last flush now, if nothing else waits (no
        reply, which waits for the tick's commit): a shard worker's MONITOR line from a
        sibling reaches the monitor before that sibling's client has its reply."""
        t = self.transport
        out = self.out
        if not out or t is None or t.is_closing() or sum(map(len, out)) != self.pushed:
            return
        t.write(out[0] if len(out) == 1 else b"".join(out))
        self.out = []
        self.pushed = 0

    def _mute(self, mode: int) -> bool:
        """CLIENT REPLY OFF / SKIP was in force when the command ran: drop its reply?"""
        ctx = self.ctx
        if mode == 2:  # SKIP: this one reply
            if ctx.reply_mode == 2:
                ctx.reply_mode = 0
            return True
        return ctx.reply_mode == 1  # still OFF (CLIENT REPLY ON turned it back on: reply)

    def busy_unhold(self) -> bool:
        """Whether a held connection is served while a script is busy (``server/busy.py``):
        not one held by CLIENT PAUSE (a shard worker's, held by the busy script's unit lock,
        is)."""
        return False

    def _resume(self) -> None:
        """The pause ended: run what was held, in order."""
        self.held = False
        if self.ctx.closing:
            return
        cmds, err = self.backlog, self.backlog_err
        self.backlog, self.backlog_err = [], None
        self._run(cmds, err)

    def _flush(self, committed: bool) -> None:
        """The node committed the tick's writes: send the replies (or, if the commit
        failed, close: none of them may be acknowledged)."""
        self.scheduled = False
        out = self.out
        self.out = []
        self.pushed = 0
        t = self.transport
        if not committed:
            self._close_now()
            return
        if not out or t is None or t.is_closing():
            return
        t.write(out[0] if len(out) == 1 else b"".join(out))
        if self.ctx.closing:
            t.close()

    # -- context hooks -----------------------------------------------------------------
    def _close_now(self) -> None:
        """CLIENT KILL, an output-buffer limit, an idle timeout, a deleted user: the client
        goes at once and what it was still owed is discarded, as Redis's freeClient (a
        close would first wait for that output to drain: from a client that reads nothing,
        for ever, and it would stay subscribed meanwhile)."""
        self.ctx.closing = True
        if self.transport is not None:
            self.transport.abort()

    def _auth_changed(self, authed: bool) -> None:
        self.parser.auth_required = not authed and self.node.acl.auth_required()


def listening_sockets(host: str, port: int, reuse_port: bool = False) -> list[socket.socket]:
    """Non-blocking sockets listening on ``port`` of every address ``host`` resolves to (as
    ``loop.create_server`` binds them: SO_REUSEADDR, IPv6 sockets IPv6 only; SO_REUSEPORT
    too with ``reuse_port``: the shard workers of a node share the port)."""
    out: list[socket.socket] = []
    seen = set()
    try:
        for family, kind, proto, _, addr in socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                               flags=socket.AI_PASSIVE):
            if (family, addr) in seen:
                continue
            seen.add((family, addr))
            s = socket.socket(family, kind, proto)
            out.append(s)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            s.bind(addr)
            s.listen(_BACKLOG)
            s.setblocking(False)
    except OSError:
        for s in out:
            s.close()
        raise
    return out


def keep_alive(s: socket.socket, interval: int) -> None:
    """tcp-keepalive, as Redis's anetKeepAlive: probes after ``interval`` idle seconds,
    then every third of it, three times, so a dead peer is dropped (and stops counting
    against maxclients) within about twice ``interval``."""
    s.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if hasattr(socket, "TCP_KEEPIDLE"):
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPIDLE, interval)
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPINTVL, max(1, interval // 3))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_KEEPCNT, 3)


class _Throttled:
    """At most ``_LOG_BURST`` warnings a second; the next one says how many were left out."""

    __slots__ = ("second", "logged", "skipped")

    def __init__(self) -> None:
        self.second = 0
        self.logged = self.skipped = 0

    def warning(self, msg: str, *args: object) -> None:
        now = int(time.monotonic())
        if now != self.second:
            self.second, self.logged = now, 0
        if self.logged >= _LOG_BURST:
            self.skipped += 1
            return
        self.logged += 1
        if self.skipped:
            msg += " (%d more like it not logged)"
            args += (self.skipped,)
            self.skipped = 0
        log.warning(msg, *args)


class TlsListener:
    """Listening sockets whose connections are served over TLS with the context in use when
    each is accepted (``tls.context``: CONFIG SET of the certificate files replaces it for the
    connections that come after). The TLS port's, and the Kafka listener's with ``kafka_tls
    yes`` (process.py hands it to the gateway, which may not import this module).

    It accepts on its own sockets (``accept``, on the loop's reader) and hands each socket to
    ``loop.connect_accepted_socket`` with the context, which does the handshake, then serves
    ``protocol_factory``'s protocol on the loop's TLS transport (see the module docstring for
    why not ``loop.start_tls``). Connections still in their handshake count against
    maxclients; a handshake that fails or takes longer than ``tls_handshake_timeout`` closes
    the connection with a throttled log line and counts in ``tls_handshake_failures``."""

    def __init__(self, node: Node, tls: ServerTls, what: str = "client"):
        self.node = node
        self.tls = tls
        self.what = what  # in the log line: "Error accepting a <what> connection"
        self.sockets: list[socket.socket] = []
        self.handshakes: set[asyncio.Task] = set()  # connections not past their handshake yet
        self.protocol_factory: Callable[[], asyncio.BaseProtocol] | None = None
        self._refused = _Throttled()

    def start(self, host: str, port: int, protocol_factory: Callable[[], asyncio.BaseProtocol],
              reuse_port: bool = False) -> None:
        self.protocol_factory = protocol_factory
        self.sockets = listening_sockets(host, port, reuse_port)
        for ls in self.sockets:
            self.node.loop.add_reader(ls.fileno(), self.accept, ls)  # type: ignore[union-attr]

    def accept(self, listener: socket.socket) -> None:
        """New connections (the loop found the listening socket readable): each gets its
        handshake (``handshake``), as many as are waiting, up to the backlog."""
        node = self.node
        for _ in range(_BACKLOG):
            try:
                sock, _addr = listener.accept()
            except (BlockingIOError, InterruptedError):
                return
            except OSError as e:  # out of descriptors or memory: as asyncio, wait a second
                log.warning("accepting on a TLS port failed: %s; retrying in a second", e)
                node.loop.remove_reader(listener.fileno())  # type: ignore[union-attr]
                node.loop.call_later(1.0, self._resume_accepting, listener)  # type: ignore[union-attr]
                return
            if node.connected() + len(self.handshakes) >= node.maxclients:
                node.stats.rejected_connections += 1
                sock.close()
                continue
            sock.setblocking(False)
            task = node.loop.create_task(self.handshake(sock))  # type: ignore[union-attr]
            self.handshakes.add(task)
            task.add_done_callback(self.handshakes.discard)

    def _resume_accepting(self, listener: socket.socket) -> None:
        if listener.fileno() >= 0:
            self.node.loop.add_reader(listener.fileno(), self.accept, listener)  # type: ignore[union-attr]

    async def handshake(self, sock: socket.socket) -> None:
        """The TLS handshake of an accepted client; the loop's TLS transport then serves its
        protocol (connection_made comes once the handshake is done)."""
        node = self.node
        assert self.protocol_factory is not None
        protocol = self.protocol_factory()
        try:
            peer = sock.getpeername()
        except OSError:
            peer = "?"
        try:
            await node.loop.connect_accepted_socket(  # type: ignore[union-attr]
                lambda: protocol, sock, ssl=self.tls.context,
                ssl_handshake_timeout=node.config.tls_handshake_timeout)
        except asyncio.CancelledError:
            sock.close()
            raise
        except Exception as e:  # an SSL error, a timeout, a reset: the client goes, the node stays
            sock.close()
            node.stats.tls_handshake_failures += 1
            why = getattr(e, "reason", None) or str(e) or type(e).__name__
            self._refused.warning("Error accepting a %s connection: %s (addr=%s)", self.what, why,
                                  f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else peer)

    def stop(self) -> None:
        for ls in self.sockets:
            self.node.loop.remove_reader(ls.fileno())  # type: ignore[union-attr]
            ls.close()
        self.sockets = []
        for task in list(self.handshakes):
            task.cancel()


class RespServer:
    """The RESP TCP listeners of a node (plaintext and TLS), and the idle-client timer."""

    def __init__(self, node: Node):
        self.node = node
        self.tcp_server: asyncio.AbstractServer | None = None
        # a shard worker (process.py) serves ShardConnections (server/mesh.py) on ports its
        # siblings share (SO_REUSEPORT: the plaintext port and the TLS port); a single
        # process, Connections on ports of its own
        self.connection_factory: Callable[..., Connection] = lambda adopt=None: Connection(self, adopt)
        self.reuse_port = False
        self.idle_task: asyncio.Task | None = None
        self.connections: set[Connection] = set()
        self.tls = ServerTls(node.config)  # (a bad certificate stops the start here: TlsConfigError)
        node.tls_prepare = self.tls.prepare
        self.tls_listener = TlsListener(node, self.tls)  # the TLS port's
        self._trimmed_at = 0  # tls_handshake_failures when freed memory was last given back
        # clients are served by server/busy.py while a script is busy (SCRIPT KILL, BUSY)
        self.busy = BusyServer(self)
        node.scripting.busy_poll = self.busy.poll
        node.scripting.hard_exit = self.busy.hard_exit

    async def start(self) -> None:
        node = self.node
        cfg = node.config
        loop = asyncio.get_running_loop()
        if cfg.port:
            self.tcp_server = await loop.create_server(
                self.connection_factory, cfg.bind, cfg.port, reuse_address=True, backlog=_BACKLOG,
                reuse_port=self.reuse_port or None)
        if cfg.tls_port:
            self.tls_listener.start(cfg.bind, cfg.tls_port, self._tls_connection, self.reuse_port)
        self.idle_task = loop.create_task(self._close_idle_clients())

    def _tls_connection(self) -> Connection:
        conn = self.connection_factory()  # (a shard worker's: a ShardConnection)
        conn.tls = True
        return conn

    async def _close_idle_clients(self) -> None:
        """CONFIG SET timeout N: as Redis, a client idle for more than N seconds is closed
        without a reply, unless it waits in a blocking command (checked every second; so is
        the end of a storm of failed TLS handshakes, ``_after_storm``)."""
        while True:
            await asyncio.sleep(1.0)
            self._after_storm()
            limit = int(self.node.tunable("timeout"))
            if not limit:
                continue
            now = time.monotonic()
            for ctx in list(self.node.clients.values()):
                if not ctx.blocked and now - ctx.last_active > limit:
                    log.debug("closing idle client %s", ctx.addr)
                    ctx.kill()

    def _after_storm(self) -> None:
        """After a storm of failed TLS handshakes (thousands of half-open connections, say),
        once few are left in flight: the memory their buffers took goes back to the OS
        (``tls.release_freed_memory``); without this the process keeps the high-water mark."""
        failed = self.node.stats.tls_handshake_failures
        self._trimmed_at = min(self._trimmed_at, failed)  # (CONFIG RESETSTAT)
        storm = failed - self._trimmed_at
        if storm >= _STORM and len(self.tls_listener.handshakes) < 16:
            self._trimmed_at = failed
            if release_freed_memory():
                log.info("gave the memory of %d failed TLS handshakes back to the OS", storm)

    def stop(self) -> None:
        if self.idle_task is not None:
            self.idle_task.cancel()
        if self.tcp_server is not None:
            self.tcp_server.close()
        self.tls_listener.stop()
