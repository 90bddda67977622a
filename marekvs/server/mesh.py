"""The mesh between the shard workers of one node (docs/shards.md §2; issue 33, slice 2).

EXPERIMENTAL (``--shards N`` with N > 1): a node of N worker processes, each a ``Node``
over one contiguous range of the 4096 partitions (its own RocksDB directory), each
accepting clients on the node's one port (``SO_REUSEPORT``: the kernel spreads the
connections). A client's command runs where its keys live:

- **local** (its keys on this worker, or a keyless command this worker answers alone):
  ``Node.execute`` here, exactly as a single process runs it;
- **remote** (its keys all on one other worker): carried there over the mesh and
  answered here. A ``ShardConnection`` gathers the run of consecutive commands of one
  connection for that worker; each ``Link`` (one unix socket to each sibling, abstract
  namespace, named by the supervisor) sends ONE msgpack frame per event-loop tick with
  every connection's commands for it — after this worker's own commit, so a write a
  connection made here earlier is committed before its later commands run elsewhere.
  A frame is ``[[client id, protocol, command index, argv], ...]`` (the index into the
  command table's ``all_commands()``, identical in every worker: admission, with the ACL
  check, ran here). The owner (``Owner``) runs each through ``Node.execute`` on a proxy
  context per (front worker, client id), encodes each reply in the client's protocol and
  sends the frame's replies ``[resp_bytes, ...]`` after its own commit; the front splices
  the bytes into the connection's output in order (bench/bench_hop.py measured this
  framing and its costs);
- **node-wide** (DBSIZE, KEYS, RANDOMKEY, INFO, CONFIG SET, FLUSHALL, PUBLISH, CLIENT
  LIST/KILL/PAUSE, SCRIPT LOAD, SLOWLOG, DEBUG DIGEST, ...: ``shards/fanout.py`` names
  them and how their replies merge): the entry goes to every sibling as ``_FAN`` plus the
  command's index, each runs it on its own partitions and state and answers the reply
  as a value (``fanout.pack``); the connection's worker runs it too and merges (a
  Blocking reply: the connection's later commands wait, as for WAIT). SCAN is routed by
  its cursor, a partition: the worker owning it scans on, and the cursor it returns at
  the end of its range is the next worker's first partition. SUBSCRIBE and PSUBSCRIBE
  run where the connection is (PUBLISH reaches every worker); a keyspace notification
  is fired by the worker that changed the key and posted to the others (``_NOTIFY``).
  SHUTDOWN asks the supervisor, which stops every worker;
- **refused**: what is not carried across workers yet answers
  ``ERR <command> is not supported with shards > 1 yet`` (``Plan``): node records (ACL
  SETUSER, FUNCTION LOAD), the node-wide commands ``fanout.MERGES`` does not name (ACL
  LOG, MEMORY STATS, LATENCY, FUNCTION STATS, ...), commands whose keys are on several
  workers (MSET, RENAME, SUNIONSTORE, ... — on one worker they run), scripts
  (EVAL/EVALSHA/FCALL), an EXEC whose queued commands touch another worker's keys (or
  are node-wide), WATCH of another worker's key, a blocking command (BLPOP, XREAD BLOCK,
  ...) on another worker's key, SORT with BY/GET, client tracking and MONITOR.

A proxy context runs what a handler would do in steps (DBSIZE, KEYS, the first read of a
cold zset) to its end at once (``deny_blocking``, as inside MULTI): the owner's other
clients wait meanwhile.

**Order.** A connection's commands take effect in the order it sent them: while a
connection's run waits for its replies (``ctx.blocked``, as for BLPOP) its later commands
wait in ``Connection.backlog``. So a pipeline ``SET data x`` (worker A) ``SET ready 1``
(worker B) is never seen as ``ready`` without ``data``; it costs one round trip per change
of worker within a pipeline, not per command.

**Failure.** When a sibling dies its link drops: connections with commands in flight to it
are closed (their outcome is unknown, as after a crashed server), and until the link is
back (``Link`` reconnects every 50 ms; the supervisor restarts the worker on its own
directory) its partitions answer ``-LOADING shard worker for partitions F-L is restarting``
at once.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import time
from collections import deque
from typing import Any, Callable

import msgpack

from marekvs.commands.context import Context
from marekvs.commands.reply import NO_REPLY, OK, Blocking, Err
from marekvs.commands.table import Command
from marekvs.core.partition import ShardMap, partition_of
from marekvs.node import Node
from marekvs.server import resp
from marekvs.server.listener import Connection, RespServer
from marekvs.shards.fanout import MERGES, Merge, pack, unpack
from marekvs.shards.router import ALL, FRONT, KEY, NODE_RECORD, Router

log = logging.getLogger("marekvs.mesh")

_enc = resp._enc
_R_OK = resp.R_OK
_packb = msgpack.packb
_DROP = -1  # a frame entry's command index: forget the proxy context of this client
_NOTIFY = -2  # ... a keyspace notification to deliver here: [channel, message] (no reply)
_FAN = 1 << 16  # ... plus a command's index: a node-wide command, its reply as a value (fanout.py)
_RECONNECT_S = 0.05

# keyless commands a worker cannot answer for the node yet: they need every worker's state
_FRONT_REFUSED = frozenset(("client|tracking", "monitor"))
# node-wide commands a worker answers alone: WAIT (a multi-worker node has no peers yet, so
# no replica acknowledges), SWAPDB (one database: its error), SHUTDOWN (the worker asks the
# supervisor, which stops every worker: Node.shutdown_hook)
_ALL_HERE = frozenset(("wait", "swapdb", "shutdown"))
# commands with keys whose run needs state only the connection's worker has, or runs code
# that may touch any key (scripts)
_SCRIPTS = frozenset(("eval", "eval_ro", "evalsha", "evalsha_ro", "fcall", "fcall_ro"))

# a plan's kinds
_LOCAL, _KEY, _KEYS, _REFUSE, _EXEC, _SORT, _FANOUT, _SCAN = range(8)


class Fan:
    """A node-wide command run on every worker: its number in the frames, and how its
    replies merge (``shards/fanout.py``)."""

    __slots__ = ("number", "merge")

    def __init__(self, number: int, merge: Merge):
        self.number = number
        self.merge = merge


def mesh_address(name: str, index: int) -> str:
    """The abstract unix socket worker ``index`` of the node ``name`` accepts siblings on
    (no file: nothing to clean up after a SIGKILL, no path length limit)."""
    return f"\0{name}-w{index}"


def unsupported(cmd: Command, why: str = "") -> str:
    name = cmd.fullname.replace("|", " ").upper()
    return f"ERR {name} is not supported with shards > 1 yet" + (f" ({why})" if why else "")


def loading(shards: ShardMap, j: int) -> bytes:
    return b"-LOADING shard worker for partitions %s is restarting\r\n" % str(shards.ranges[j]).encode()


class Plan:
    """Where each command of the table runs on a node of several workers (see the module
    docstring), decided once per command: ``where(ctx, cmd, args)`` is None (here), a
    worker's index (there), or an error text (refused)."""

    def __init__(self, node: Node, shards: ShardMap, index: int):
        self.router = router = Router(node.table, shards)
        self.index = index
        self.owner = shards.owner
        self.commands: list[Command] = list(node.table.all_commands())
        self.number = {id(c): i for i, c in enumerate(self.commands)}
        self.plan: dict[int, tuple[int, Any]] = {}
        for cmd in self.commands:
            cls = router.class_of(cmd)
            blocking = "blocking" in cmd.flags
            if cmd.fullname in _SCRIPTS:
                p: tuple[int, Any] = (_REFUSE, unsupported(cmd))
            elif cls == FRONT:
                p = (_REFUSE, unsupported(cmd)) if cmd.fullname in _FRONT_REFUSED else (_LOCAL, None)
            elif cls == ALL and cmd.fullname in MERGES:
                p = (_FANOUT, Fan(self.number[id(cmd)] + _FAN, MERGES[cmd.fullname]))
            elif cls == ALL and cmd.fullname == "scan":
                p = (_SCAN, None)
            elif cls == ALL and cmd.fullname in _ALL_HERE:
                p = (_LOCAL, None)
            elif cls in (ALL, NODE_RECORD):
                p = (_REFUSE, unsupported(cmd))
            elif cmd.fullname == "exec":
                p = (_EXEC, None)
            elif cmd.fullname in ("sort", "sort_ro"):
                p = (_SORT, None)
            elif cls == KEY and not blocking:
                p = (_KEY, router.route(cmd).pos)
            else:
                p = (_KEYS, blocking)
            self.plan[id(cmd)] = p

    def where(self, ctx: Context, cmd: Command, args: list[bytes]) -> int | str | Fan | None:
        kind, arg = self.plan[id(cmd)]
        if kind == _KEY:
            j = self.owner[partition_of(args[arg])]
            return None if j == self.index else j
        if kind == _LOCAL:
            return None
        if kind == _REFUSE or kind == _FANOUT:
            return arg  # type: ignore[no-any-return]
        if kind == _SCAN:  # the cursor is a partition: its worker scans on (commands/keys.py)
            c = args[1] if len(args) > 1 else b""
            if not c.isdigit() or len(c) > 4 or int(c) >= len(self.owner):
                return None  # (an invalid cursor's error, or "nothing is left", answered here)
            j = self.owner[int(c)]
            return None if j == self.index else j
        if kind == _EXEC:
            return self._exec(ctx, cmd)
        if kind == _SORT and any(a.lower() in (b"by", b"get") for a in args[2:]):
            return unsupported(cmd, "BY and GET read keys of every shard worker")
        shards = self.router.shards_of(cmd, args)
        if not shards or shards == {self.index}:
            return None
        if len(shards) > 1:
            return unsupported(cmd, "its keys are on several shard workers")
        if kind == _KEYS and arg:  # a blocking command waits where its keys are
            return unsupported(cmd, "a blocking command on another shard worker's key")
        if cmd.fullname == "watch":  # watches live with the key's owner (slice 4)
            return unsupported(cmd, "the key is on another shard worker")
        return shards.pop()

    def _exec(self, ctx: Context, cmd: Command) -> str | None:
        """An EXEC runs here when every queued command would (slice 4 carries the others)."""
        for c, a in ctx.multi or ():
            w = self.where(ctx, c, a)
            if w is not None:
                return unsupported(cmd, "a queued command runs on another shard worker")
        return None


class Link(asyncio.Protocol):
    """This worker's connection to sibling ``j``: frames of commands out, replies in."""

    def __init__(self, mesh: Mesh, j: int):
        self.mesh, self.j = mesh, j
        self.node = mesh.node
        self.transport: Any = None
        self.unpacker = msgpack.Unpacker(raw=False)
        self.out: list[list[Any]] = []  # this tick's entries
        self.queued: list[tuple[int, Callable[[list[bytes] | None], None]]] = []
        self.inflight: deque[tuple[int, Callable[[list[bytes] | None], None]]] = deque()
        self.got: list[bytes] = []
        self.scheduled = False
        self.flush_cb = self._flush

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def send(self, entries: list[list[Any]], done: Callable[[list[bytes] | None], None]) -> None:
        """Carry ``entries`` to the sibling; ``done(replies)`` gets their RESP replies in
        order, or None if they may not have run (the link dropped, or our commit failed)."""
        self.out += entries
        self.queued.append((len(entries), done))
        if not self.scheduled:
            self.scheduled = True
            self.node.after_commit(self.flush_cb)

    def post(self, entry: list[Any]) -> None:
        """Carry an entry that has no reply (``_DROP``, ``_NOTIFY``)."""
        self.out.append(entry)
        if not self.scheduled:
            self.scheduled = True
            self.node.after_commit(self.flush_cb)

    def _flush(self, committed: bool) -> None:
        self.scheduled = False
        out, queued = self.out, self.queued
        self.out, self.queued = [], []
        if not committed or self.transport is None or self.transport.is_closing():
            for _, done in queued:
                done(None)
            return
        self.inflight.extend(queued)
        self.transport.write(_packb(out))

    def data_received(self, data: bytes) -> None:
        self.unpacker.feed(data)
        got, inflight = self.got, self.inflight
        for frame in self.unpacker:
            got += frame
        while inflight and len(got) >= inflight[0][0]:
            n, done = inflight.popleft()
            if n == len(got):
                replies, got = got, []
            else:
                replies, got = got[:n], got[n:]
            done(replies)
        self.got = got

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        failed = list(self.inflight) + self.queued
        self.inflight.clear()
        self.queued = []
        self.mesh.link_lost(self)
        for _, done in failed:
            done(None)


class Owner(asyncio.Protocol):
    """A sibling's connection to this worker: its clients' commands for our partitions,
    run on proxy contexts, replies after our commit."""

    def __init__(self, mesh: Mesh):
        self.mesh = mesh
        self.node = mesh.node
        self.transport: Any = None
        self.unpacker = msgpack.Unpacker(raw=False)
        self.proxies: dict[int, Context] = {}
        self.out: list[bytes] = []
        self.scheduled = False
        self.flush_cb = self._flush

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.unpacker.feed(data)
        node = self.node
        execute, commands, proxies = node.execute, self.mesh.plan.commands, self.proxies
        for frame in self.unpacker:
            replies: list[bytes] = []
            for cid, proto, ci, args in frame:
                if ci < 0:
                    if ci == _DROP:
                        proxies.pop(cid, None)
                    else:  # _NOTIFY
                        node.pubsub.deliver(args[0], args[1])
                    continue
                ctx = proxies.get(cid)
                if ctx is None:
                    ctx = proxies[cid] = Context(node, cid, addr="shard-worker-proxy")
                    ctx.deny_blocking = True  # what runs in steps (a cold zset, DBSIZE) runs to its end here
                ctx.proto = proto
                if ci >= _FAN:
                    replies.append(self._value(execute(ctx, commands[ci - _FAN], args)))
                    ctx.deferred = None
                    continue
                r = execute(ctx, commands[ci], args)
                if type(r) is Blocking or r is NO_REPLY:  # (the plan sends no blocking command here)
                    replies.append(b"-ERR internal error: a blocking command on a shard worker proxy\r\n")
                else:
                    out: list[bytes] = []
                    _enc(r, proto, out)
                    replies.append(b"".join(out))
                ctx.deferred = None
            self.out.append(_packb(replies))
        if self.out and not self.scheduled:
            self.scheduled = True
            node.after_commit(self.flush_cb)

    @staticmethod
    def _value(r: Any) -> bytes:
        """A node-wide command's reply, as a value for the front's merge."""
        if type(r) is Blocking or r is NO_REPLY:
            r = Err("ERR internal error: a blocking node-wide command on a shard worker proxy")
        try:
            return pack(r)
        except TypeError as e:
            log.error("shard worker proxy: %s", e)
            return pack(Err("ERR internal error: a reply that cannot cross the mesh"))

    def _flush(self, committed: bool) -> None:
        self.scheduled = False
        out, self.out = self.out, []
        t = self.transport
        if t is None or t.is_closing():
            return
        if not committed:  # none of these writes may be acknowledged: the front closes its clients
            t.abort()
            return
        t.write(out[0] if len(out) == 1 else b"".join(out))

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        self.proxies.clear()


class Mesh:
    """Worker ``index`` of ``shards`` (named ``name`` by the supervisor): its server for
    the siblings, and a ``Link`` to each (None while that sibling is down)."""

    def __init__(self, node: Node, shards: ShardMap, index: int, name: str):
        self.node, self.shards, self.index, self.name = node, shards, index, name
        self.plan = Plan(node, shards, index)
        self.links: list[Link | None] = [None] * len(shards)
        node.pubsub.siblings = self.notify
        self.loading = [loading(shards, j) for j in range(len(shards))]
        self.server: Any = None
        self.tasks: set[asyncio.Task[None]] = set()
        self.stopping = False

    async def start(self) -> None:
        """Accept siblings, then connect to each (waiting until every one is up)."""
        loop = asyncio.get_running_loop()
        self.server = await loop.create_unix_server(lambda: Owner(self), mesh_address(self.name, self.index))
        await asyncio.gather(*(self._connect(j) for j in range(len(self.shards)) if j != self.index))

    async def _connect(self, j: int) -> None:
        loop = asyncio.get_running_loop()
        while not self.stopping:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            try:  # (uvloop connects to an abstract address only through a socket of ours)
                await loop.sock_connect(sock, mesh_address(self.name, j))
                _, link = await loop.create_unix_connection(lambda: Link(self, j), sock=sock)
            except OSError:
                sock.close()
                await asyncio.sleep(_RECONNECT_S)
                continue
            self.links[j] = link
            log.info("shard worker %d: linked to worker %d (partitions %s)", self.index, j, self.shards.ranges[j])
            return

    def notify(self, channel: bytes, message: bytes, shard: bool) -> None:
        """A keyspace notification fired here, to the subscribers of the other workers (a
        worker that is down misses it, as a disconnected subscriber would)."""
        entry = [0, 0, _NOTIFY, [channel, message]]
        for link in self.links:
            if link is not None:
                link.post(entry)

    def link_lost(self, link: Link) -> None:
        j = link.j
        if self.links[j] is link:
            self.links[j] = None
        if self.stopping:
            return
        log.warning("shard worker %d: lost worker %d; its partitions %s answer LOADING until it is back",
                    self.index, j, self.shards.ranges[j])
        task = asyncio.get_running_loop().create_task(self._connect(j))
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def stop(self) -> None:
        self.stopping = True
        for t in list(self.tasks):
            t.cancel()
        if self.server is not None:
            self.server.close()
        for link in self.links:
            if link is not None and link.transport is not None:
                link.transport.close()


class ShardConnection(Connection):
    """A client connection of a worker: ``Connection`` with each admitted command run
    where ``Plan.where`` says (the module docstring). Its ``_run`` is ``Connection._run``
    with that one branch; a single process keeps using ``Connection`` untouched."""

    __slots__ = ("mesh", "admitted", "remote")

    def __init__(self, server: RespServer, mesh: Mesh):
        super().__init__(server)
        self.mesh = mesh
        self.admitted: Any = None  # the next backlog command, admitted while gathering a run
        self.remote: set[int] = set()  # siblings holding a proxy context of this client

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if self.ctx is not None:
            for j in self.remote:
                link = self.mesh.links[j]
                if link is not None:
                    link.post([self.ctx.id, 0, _DROP, None])

    def _run(self, cmds: list[list[bytes]], err: str | None) -> None:  # noqa: C901 - Connection._run's shape
        ctx = self.ctx
        node = self.node
        admit, execute, where = node.admit, node.execute, self.mesh.plan.where
        while cmds:
            ctx.last_active = time.monotonic()
            out = self.out
            n = len(cmds)
            i = 0
            while i < n:
                args = cmds[i]
                if node.client_pause.on and node.client_pause.holds(ctx, args):  # (see Connection._run)
                    self.held = True
                    self.backlog = cmds[i:]
                    self.backlog_err = err
                    node.client_pause.hold(self._resume)
                    self._end_run(None)  # (the replies before it go now)
                    return
                if i and not ctx.authed and self.parser.auth_required and self.admitted is None:
                    bad = self.parser.unauthenticated_error(args)  # (see Connection._run)
                    if bad is not None:
                        err = bad
                        break
                muted = ctx.reply_mode
                r = self.admitted
                if r is not None:
                    self.admitted = None
                else:
                    r = admit(ctx, args)
                if isinstance(r, Command):
                    w = where(ctx, r, args)
                    if w is None:
                        r = execute(ctx, r, args)
                    elif type(w) is int:
                        i = self._hop(cmds, i, w, r, muted, err)
                        if i < 0:
                            return  # the run went to worker w: the rest waits for its replies
                        continue
                    elif type(w) is Fan:
                        r = self._fan(w, r, args)
                    else:
                        exec_ = r.fullname == "exec"
                        r = node.rejected(ctx, r, w)  # type: ignore[arg-type]
                        if exec_:
                            self._abort_multi()
                if muted and self._mute(muted):
                    if ctx.closing:
                        break
                    i += 1
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
                    node.loop.create_task(self._unblock(r))  # type: ignore[union-attr]
                    err = None
                    break
                elif r is not NO_REPLY:
                    _enc(r, ctx.proto, out)
                if ctx.deferred is not None:
                    for m in ctx.deferred:
                        _enc(m, ctx.proto, out)
                    ctx.deferred = None
                if ctx.closing:
                    break
                i += 1
            if ctx.blocked or ctx.closing or err is not None:
                break
            cmds, err = self.parser.more()
        self._end_run(err)

    def _end_run(self, err: str | None) -> None:
        if err is not None:
            self.out.append(b"-ERR %s\r\n" % err.encode())
            self.ctx.closing = True
        if self.out and not self.scheduled:
            self.scheduled = True
            self.node.after_commit(self.flush_cb)

    def _abort_multi(self) -> None:
        """A refused EXEC ends the transaction, as an EXEC that ran would."""
        ctx = self.ctx
        ctx.multi = None
        ctx.multi_error = False
        if ctx.watched is not None:
            self.node.watches.unwatch_all(ctx)

    def _hop(self, cmds: list[list[bytes]], i: int, j: int, cmd: Command, muted: int, err: str | None) -> int:
        """Send the run of commands from ``cmds[i]`` that go to worker ``j`` (admitting
        each next one; the first that goes elsewhere waits in ``admitted``). Returns -1
        when they went (the connection waits for their replies), or the index to go on
        from when ``j`` is down (each answered LOADING at once)."""
        ctx, node, plan = self.ctx, self.node, self.mesh.plan
        number = plan.number
        entries = []
        mutes = []
        n = len(cmds)
        k = i
        while True:
            entries.append([ctx.id, ctx.proto, number[id(cmd)], cmds[k]])
            mutes.append(bool(muted and self._mute(muted)))
            k += 1
            if k >= n:
                break
            muted = ctx.reply_mode
            nxt = node.admit(ctx, cmds[k])
            if isinstance(nxt, Command) and plan.where(ctx, nxt, cmds[k]) == j:
                cmd = nxt
                continue
            self.admitted = nxt
            break
        link = self.mesh.links[j]
        if link is None:
            refused = self.mesh.loading[j]
            for m in mutes:
                node.count_error(refused[1:].decode())
                if not m:
                    self.out.append(refused)
            return k
        ctx.blocked = True
        self.backlog = cmds[k:]
        self.backlog_err = err
        self.remote.add(j)
        link.send(entries, lambda replies: self._hopped(mutes, replies))
        return -1

    def _fan(self, fan: Fan, cmd: Command, args: list[bytes]) -> Any:
        """A node-wide command: sent to every sibling, run here, the replies merged (a
        Blocking reply: the connection's later commands wait for it, as for WAIT)."""
        mesh, ctx, node = self.mesh, self.ctx, self.node
        for j, link in enumerate(mesh.links):
            if link is None and j != mesh.index:
                return Err(mesh.loading[j][1:-2].decode())
        loop = node.loop
        assert loop is not None
        entry = [[ctx.id, ctx.proto, fan.number, args]]
        waits: list[asyncio.Future[list[bytes] | None]] = []
        for j, link in enumerate(mesh.links):
            if link is not None:
                fut: asyncio.Future[list[bytes] | None] = loop.create_future()
                link.send(entry, lambda replies, f=fut: f.done() or f.set_result(replies))
                waits.append(fut)
                self.remote.add(j)
        return Blocking(self._gather(fan, args, node.execute(ctx, cmd, args), waits))

    async def _gather(self, fan: Fan, args: list[bytes], here: Any,
                      waits: list[asyncio.Future[list[bytes] | None]]) -> Any:
        if type(here) is Blocking:
            here = await here.awaitable  # type: ignore[misc]
        replies = [here]
        for fut in waits:
            got = await fut
            if got is None:
                return Err("LOADING a shard worker stopped while running the command: it may have run on some "
                           "workers only")
            replies.append(unpack(got[0]))
        return fan.merge(replies, args)

    def _hopped(self, mutes: list[bool], replies: list[bytes] | None) -> None:
        """The replies of a run sent by ``_hop``: spliced in order, then the backlog runs."""
        ctx = self.ctx
        if replies is None:  # the owner died (or a commit failed): their outcome is unknown
            self.admitted = None
            self._close_now()
            return
        ctx.blocked = False
        if ctx.closing:
            return
        out = self.out
        for m, b in zip(mutes, replies):
            if not m:
                out.append(b)
        cmds, err = self.backlog, self.backlog_err
        self.backlog, self.backlog_err = [], None
        self._run(cmds, err)
