"""Serving clients while a script is busy (Redis's ``processEventsWhileBlocked``).

A script runs inside one command on the event-loop thread, so while it runs the loop
serves nobody. Past ``busy-reply-threshold`` the scripting engine's count hook calls
``BusyServer.poll`` every 100,000 Lua instructions, and this module does the event loop's
job itself, without the loop, for as long as the script runs:

- it reads, with non-blocking ``read``s of the sockets' file descriptors, the clients that
  had nothing in flight when the script became busy (not the client running the script,
  not one whose replies still wait for the tick's commit, not one blocked or held by
  CLIENT PAUSE), runs their commands through the connection's own parser and answers
  them at once: BUSY, or the command itself for those Redis allows while a script is busy
  (SCRIPT KILL, FUNCTION KILL, FUNCTION STATS, AUTH, HELLO, MULTI, WATCH, ...; the
  scripting engine's ``busy_dispatch``);
- TLS clients are not served while the script runs: their bytes are records of a TLS
  session that only the event loop's TLS transport can read. They wait, and the TLS port
  accepts no one meanwhile, until the script ends (SCRIPT KILL goes through the plaintext
  port; docs/divergences.md);
- it accepts new connections on the plaintext listening socket (``redis-cli SCRIPT KILL``
  from a new terminal works) and serves them the same way; once the script ends, each is handed
  to the event loop as an ordinary connection (``loop.connect_accepted_socket``), with
  its client state and any partial request it sent;
- SHUTDOWN NOSAVE ends the process at once, without committing the tick the script is in
  (its writes were never acknowledged, so nothing half done is kept or replicated): Redis's
  "kill the server in a hard way".

The normal path of a command is untouched: none of this runs unless a script is busy.
Writes go straight to the transports (both asyncio's and uvloop's try the socket at once;
what does not fit waits for the loop). Nothing written here acknowledges a write: the
commands allowed while busy do not write.
"""

from __future__ import annotations

import logging
import os
import select
import socket
from typing import TYPE_CHECKING, Any

from marekvs.commands import errors
from marekvs.commands.reply import NO_REPLY
from marekvs.server import resp

if TYPE_CHECKING:
    from marekvs.server.listener import Connection, RespServer

log = logging.getLogger("marekvs.server")
_DENIED = b"-%s\r\n" % errors.DENIED_PROTECTED.encode()


class RawClient:
    """A client that connected while a script was busy: served here until the loop
    takes it over."""

    __slots__ = ("sock", "ctx", "parser", "out", "closed")

    def __init__(self, sock: socket.socket, ctx: Any, parser: resp.RequestParser):
        self.sock = sock
        self.ctx = ctx
        self.parser = parser
        self.out = bytearray()
        self.closed = False


class BusyServer:
    def __init__(self, server: "RespServer"):
        self.server = server
        self.node = server.node
        self.run: Any = None  # the busy run being served
        self.serving: list["Connection"] = []  # connections read while it lasts
        self.raw: list[RawClient] = []

    # -- one poll ------------------------------------------------------------------------
    def poll(self) -> None:
        sc = self.node.scripting
        run = sc.running
        if run is not self.run:
            self._begin(run)
        conns = {c.ctx.fd: c for c in self.serving if c.ctx is not None and not c.ctx.closing and c.ctx.fd >= 0}
        raws = {r.sock.fileno(): r for r in self.raw if not r.closed}
        listeners = self._listening_fds()
        siblings = sc.busy_fds() if sc.busy_fds is not None else {}  # (a shard worker's mesh)
        fds = list(conns) + list(raws) + listeners + list(siblings)
        if not fds:
            return
        try:
            readable, _, _ = select.select(fds, [], [], 0)
        except (OSError, ValueError):
            return
        for fd in readable:
            if fd in conns:
                self._serve_connection(conns[fd], fd)
            elif fd in raws:
                self._serve_raw(raws[fd])
            elif fd in siblings:
                siblings[fd]()
            else:
                self._accept(fd)
        for r in self.raw:
            self._flush_raw(r)

    def _begin(self, run: Any) -> None:
        """The first poll of a busy run: pick the connections that may be served."""
        self.run = run
        caller = run.caller
        self.serving = [c for c in self.server.connections
                        if c.ctx is not None and c.ctx is not caller and not c.scheduled and not c.paused
                        and not c.ctx.blocked and not c.ctx.closing and not c.tls
                        and (not c.held or self._unheld(c))]
        self.node.loop.call_soon(self._end)  # runs once the script's command returns

    def _unheld(self, conn: "Connection") -> bool:
        """A connection of a shard worker held by the busy script's unit lock: its waiting
        commands are answered now, as its next ones will be (BUSY, or run if allowed)."""
        if not conn.busy_unhold():
            return False
        cmds, err = conn.backlog, conn.backlog_err
        conn.backlog, conn.backlog_err = [], None
        self._serve(conn, lambda: conn._run(cmds, err))
        return not conn.ctx.closing

    def _end(self) -> None:
        """The script ended: the loop serves everyone again; hand it the new clients."""
        self.run = None
        self.serving = []
        raws, self.raw = self.raw, []
        loop = self.node.loop
        for r in raws:
            if r.closed:
                continue
            self._flush_raw(r)
            loop.create_task(self._adopt(r))

    async def _adopt(self, r: RawClient) -> None:
        try:  # (a shard worker's connection factory makes ShardConnections)
            await self.node.loop.connect_accepted_socket(lambda: self.server.connection_factory(r), r.sock)
        except Exception:
            log.exception("handing a client accepted during a busy script to the loop failed")
            self.node.drop_context(r.ctx)
            r.sock.close()

    def hard_exit(self) -> None:
        """SHUTDOWN NOSAVE while a script is busy: end the process now. The tick the script
        runs in is not committed: none of its writes was acknowledged, and a crash-like end
        keeps the store as its last commit left it (a script is all or nothing)."""
        log.warning("SHUTDOWN NOSAVE while a script is busy: exiting without committing the "
                    "running script's writes")
        if self.node.shutdown_hook is not None:  # a shard worker: its supervisor stops the others
            self.node.shutdown_hook()
        logging.shutdown()
        os._exit(0)

    # -- connections the loop already knows -------------------------------------------------
    def _serve_connection(self, conn: "Connection", fd: int) -> None:
        try:
            data = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self.serving.remove(conn)  # the loop will see the end of the stream too
            return
        self._serve(conn, lambda: conn.data_received(data))
        if conn.ctx.closing and conn in self.serving:
            self.serving.remove(conn)

    def _serve(self, conn: "Connection", run: Any) -> None:
        """``run()`` the connection's commands with the busy dispatcher; write the replies."""
        dispatch = conn.dispatch
        conn.dispatch = self.node.scripting.busy_dispatch
        try:
            run()
        finally:
            conn.dispatch = dispatch
        if conn.out and conn.transport is not None and not conn.transport.is_closing():
            out, conn.out = conn.out, []
            conn.transport.write(b"".join(out))
        if conn.ctx.closing and conn.transport is not None:
            conn.transport.close()

    # -- clients that connect while the script is busy -------------------------------------
    def _listening_fds(self) -> list[int]:
        tcp = self.server.tcp_server
        if tcp is None:
            return []
        return [s.fileno() for s in tcp.sockets]

    def _accept(self, fd: int) -> None:
        listener = socket.socket(fileno=os.dup(fd))
        try:
            listener.setblocking(False)
            while True:
                try:
                    sock, addr = listener.accept()
                except (BlockingIOError, InterruptedError):
                    return
                except OSError:
                    return
                node = self.node
                if node.connected() >= node.maxclients:
                    sock.close()
                    continue
                if isinstance(addr, tuple) and node.acl.protected_from(addr[0]):
                    node.stats.rejected_connections += 1  # protected mode, as the listener
                    try:
                        sock.send(_DENIED)
                    except OSError:
                        pass
                    sock.close()
                    continue
                sock.setblocking(False)
                if sock.family in (socket.AF_INET, socket.AF_INET6):
                    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                local = sock.getsockname()
                ctx = node.new_context(
                    addr=f"{addr[0]}:{addr[1]}" if isinstance(addr, tuple) else str(addr),
                    laddr=f"{local[0]}:{local[1]}" if isinstance(local, tuple) else str(local),
                    fd=sock.fileno())
                parser = resp.RequestParser(node.limits)
                parser.gated = node.acl.auth_required()
                parser.auth_required = not ctx.authed and parser.gated
                ctx.query_buffer = parser.pending_bytes
                self.raw.append(RawClient(sock, ctx, parser))
        finally:
            _close_quietly(listener)  # (a duplicate of the listening descriptor)

    def _serve_raw(self, r: RawClient) -> None:
        try:
            data = r.sock.recv(1 << 16)
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            self._close_raw(r)
            return
        cmds, err = r.parser.feed(data)
        ctx = r.ctx
        dispatch = self.node.scripting.busy_dispatch
        while True:
            for args in cmds:
                reply = dispatch(ctx, args)
                if reply is not NO_REPLY:
                    r.out += resp.encode(reply, ctx.proto)
                if ctx.closing:
                    break
            if ctx.closing or err is not None:
                break
            cmds, err = r.parser.more()
            if not cmds:
                break
        if err is not None:
            r.out += b"-ERR %s\r\n" % err.encode()
            ctx.closing = True
        self._flush_raw(r)
        if ctx.closing:
            self._close_raw(r)

    def _flush_raw(self, r: RawClient) -> None:
        while r.out and not r.closed:
            try:
                n = r.sock.send(r.out)
            except BlockingIOError:
                return
            except OSError:
                self._close_raw(r)
                return
            del r.out[:n]

    def _close_raw(self, r: RawClient) -> None:
        if r.closed:
            return
        r.closed = True
        self.node.drop_context(r.ctx)
        try:
            r.sock.close()
        except OSError:
            pass


def _close_quietly(s: socket.socket) -> None:
    try:
        s.close()
    except OSError:
        pass
