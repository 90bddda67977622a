"""The Kafka listener: connections, their requests in order, and the gateway's shared state.

One asyncio server on ``kafka_port``; with ``kafka_tls yes`` the port serves TLS only (Kafka's
SSL and SASL_SSL security protocols) through the ``tls`` listener process.py hands over (the
RESP server's ``TlsListener`` with the node's one ``ServerTls``, so the client tls-* settings
apply and a CONFIG SET rotation reaches the connections accepted after it; a gateway may not
import the RESP server). A connection reads one request frame at a time and
answers it before reading the next, as a Kafka broker processes a connection's requests in
order (a long-poll fetch holds the connection's later requests, as on Kafka). Every
connection is a client of the node: it has a ``Context`` (CLIENT LIST shows it with
lib-name ``kafka``, CLIENT KILL closes it, maxclients counts it) and runs its commands
through ``node.dispatch`` as the ACL user it authenticated as (SASL PLAIN), the default user
until then. A response is written after the node's commit barrier (``Node.after_commit``),
so nothing is acknowledged before the writes it reports are committed.

The gateway's own writes (a partition claimed by this node, its broker record) run as an
internal user with every permission, in a context no client list shows.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from typing import Any

from marekvs.commands.aclrules import User
from marekvs.commands.context import Context
from marekvs.core.hlc import wall_ms
from marekvs.gateway.kafka import handlers, producers, protocol
from marekvs.gateway.kafka.groups import Coordinator
from marekvs.gateway.kafka.partitions import Logs
from marekvs.gateway.kafka.replicas import Replicas
from marekvs.gateway.kafka.rounds import Rounds
from marekvs.gateway.kafka.topics import Layout, StoreError, rendezvous
from marekvs.keyspace.changes import user_keys

log = logging.getLogger("marekvs.kafka")
_SIZE = struct.Struct(">i")
_LIMIT = 1 << 20  # (the streams' buffer limit)
# what a SASL listener serves before authentication
_PRE_AUTH = frozenset((protocol.API_VERSIONS, protocol.SASL_HANDSHAKE, protocol.SASL_AUTHENTICATE))


class KafkaGateway:
    def __init__(self, node: Any, tls: Any = None, mesh: Any = None):
        self.node = node
        # on a node of shard workers (worker 0's gateway): the mesh its rounds lock and
        # carry commands over (``rounds.py``); None on a node of one process
        self.mesh = mesh
        self.rounds = Rounds(mesh) if mesh is not None else None
        # with kafka_tls yes: a listener with start(host, port, protocol_factory) and stop()
        # that serves each connection over TLS (server/listener.TlsListener)
        self.tls = tls
        cfg = node.config
        self.node_id = cfg.node_id
        self.layout = Layout(node, cfg.kafka_prefix)
        self.logs = Logs(self)
        self.host = cfg.kafka_advertise_host or cfg.advertise_host or cfg.bind
        self.port = cfg.kafka_advertise_port or cfg.kafka_port  # (the listener's own: cfg.kafka_port)
        self.max_request = cfg.kafka_max_request_bytes
        self.auto_create = cfg.kafka_auto_create_topics == "yes"
        self.default_partitions = cfg.kafka_num_partitions
        self.server: asyncio.AbstractServer | None = None
        self.sys = Context(node, 0)
        root = User(b"kafka-gateway")
        for rule in (b"on", b"nopass", b"allkeys", b"allchannels", b"allcommands"):
            root.set(rule, node.acl.view)
        self.sys.user = root
        self.layout.mesh, self.layout.carrier, self.layout.rounds = mesh, self.sys, self.rounds
        self.connections: set[Connection] = set()
        # long-poll fetches: stream key -> events to set when it changes
        self.waiters: dict[bytes, set[asyncio.Event]] = {}
        self._ack_task: asyncio.Task | None = None
        self._retention_task: asyncio.Task | None = None
        self.retention_interval = cfg.kafka_retention_check_interval_ms / 1000
        self.groups = Coordinator(self)
        self.lag_time = cfg.kafka_replica_lag_time_max_ms / 1000
        self.started = time.monotonic()
        self._later: set[asyncio.Task] = set()  # writes waiting for a round (``record``)
        # what the peers acknowledged of each worker's log (one on a node of one process)
        self.replicas = Replicas(self)

    # -- life cycle ---------------------------------------------------------------------------
    async def start(self) -> None:
        cfg = self.node.config
        if self.tls is not None:
            self.tls.start(cfg.bind, cfg.kafka_port, self._protocol)
        else:
            self.server = await asyncio.start_server(self._accept, cfg.bind, cfg.kafka_port, limit=_LIMIT)
        await self.round()
        try:
            self.brokers()  # (records this node's address if the record lacks or differs from it)
        except StoreError as e:  # (its shard worker restarting: recorded by the next request's)
            log.warning("Kafka gateway: reading the brokers' record failed: %s", e.text)
        self.node.request_tick()
        loop = asyncio.get_running_loop()
        self.replicas.start()
        self._ack_task = loop.create_task(self._acks())
        self._retention_task = loop.create_task(self._retention())
        self.groups.start()
        log.info("Kafka gateway listening on %s:%d%s (advertised as %s:%d, prefix %s)", cfg.bind, cfg.kafka_port,
                 " over TLS" if self.tls is not None else "", self.host, self.port, cfg.kafka_prefix)

    def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        if self.tls is not None:
            self.tls.stop()
        for task in (self._ack_task, self._retention_task):
            if task is not None:
                task.cancel()
        self.groups.stop()
        self.replicas.stop()
        if self.rounds is not None:
            self.rounds.stop()
        for c in list(self.connections):
            c.close()

    def _protocol(self) -> asyncio.StreamReaderProtocol:
        """A TLS connection's protocol: the streams ``start_server`` would make, served by
        ``_accept`` once the handshake is done."""
        return asyncio.StreamReaderProtocol(asyncio.StreamReader(limit=_LIMIT), self._accept)

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conn = Connection(self, reader, writer)
        self.connections.add(conn)
        try:
            await conn.run()
        finally:
            self.connections.discard(conn)

    async def round(self) -> None:
        """On a node of shard workers: wait for a round (``rounds.py``), in which the
        caller's step up to its next suspension may run commands on keys of any worker."""
        if self.rounds is not None:
            await self.rounds.enter()

    def in_round(self) -> bool:
        return self.rounds is None or self.rounds.active

    def position_of(self, key: bytes) -> dict[int, int]:
        """The replication-log position now of the worker holding ``key`` (acks=all of a
        batch stored before: it is at or below it; ``replicas.py``)."""
        j = self.replicas.worker_of(key)
        v = self.replicas.fresh(j)
        if v is None:
            raise StoreError(f"LOADING the shard worker of {key.decode(errors='replace')} is restarting")
        return {j: v.log_seq}

    def written_at(self, key: bytes) -> dict[int, int]:
        """The position after the gateway's own last write of ``key`` (``record``): its
        context's last write here, else its worker's log end now."""
        j = self.replicas.worker_of(key)
        return {j: self.sys.last_write_seq} if j == self.replicas.index else self.position_of(key)

    def written(self, ctx: Any) -> dict[int, int]:
        """The position acks=all waits for after ``ctx``'s writes of this step (CreateTopics'
        records, on any worker): on a node of shard workers every worker's log end."""
        here = {self.replicas.index: ctx.last_write_seq}
        repl = self.node.replication
        if self.mesh is None or repl is None or not repl.peers:
            return here
        for j in range(len(self.mesh.shards)):
            if j != self.replicas.index:
                v = self.replicas.fresh(j)
                here[j] = v.log_seq if v is not None else 1 << 62  # (restarting: not acknowledged)
        return here

    def storage_error(self) -> str | None:
        """Why this node's storage refuses writes now (a full disk: RESP clients get MISCONF,
        produce gets KAFKA_STORAGE_ERROR), None while it takes them."""
        return self.node.engine.write_error

    def record(self, what: str, *argv: bytes) -> bool:
        """One of the gateway's own writes (a broker address, a partition claimed, a group's
        generation): False, logged, when the node refuses it (a full disk); what it records
        is written again the next time it is needed. On a node of shard workers, outside
        a round (a group's rebalance completing on a timer), it is written in the next one."""
        if not self.in_round():
            task = asyncio.get_running_loop().create_task(self._record_later(what, argv))
            self._later.add(task)
            task.add_done_callback(self._later.discard)
            return True
        try:
            self.layout.call(self.sys, *argv)
            return True
        except StoreError as e:
            log.warning("Kafka gateway: recording %s failed: %s", what, e.text)
            return False

    async def _record_later(self, what: str, argv: tuple[bytes, ...]) -> None:
        await self.round()
        self.record(what, *argv)
        self.node.request_tick()

    # -- cluster view ---------------------------------------------------------------------------
    def set_broker(self) -> None:
        self.record("this broker's address", *self.layout.set_broker(self.node_id, self.host, self.port))

    def _peers(self) -> list[Any]:
        repl = self.node.replication
        return [] if repl is None else list(repl.peers.values())

    def live_nodes(self) -> list[int]:
        """This node and the peers its replication links stream to (on a node of shard
        workers: the links of every worker, ``Replicas.live_peers``)."""
        return sorted([self.node_id, *self.replicas.live_peers()])

    def can_lead(self) -> bool:
        """May this node lead partitions now? While it sees a majority of the nodes it knows
        (itself included) and has applied what each live peer had when their link last came
        up (so it knows the partitions' latest leaders: a node that restarts or comes back from
        a partition does not act on what it recorded before)."""
        peers = self._peers()
        up = set(self.replicas.live_peers())
        live = [p for p in peers if p.node_id in up]
        if 2 * (1 + len(live)) <= 1 + len(peers):
            return False
        return all(self.replicas.caught_up(p.node_id) for p in live)

    def brokers(self) -> dict[int, tuple[str, int]]:
        """The live nodes that serve Kafka, with their listener addresses."""
        known = self.layout.brokers(self.sys)
        if known.get(self.node_id) != (self.host, self.port):  # deleted or rewritten by a client
            self.set_broker()
            known[self.node_id] = (self.host, self.port)
        live = set(self.live_nodes())
        return {n: a for n, a in known.items() if n in live}

    def leaders(self, topic: bytes, partitions: int, brokers: dict[int, tuple[str, int]],
                only: int | None = None) -> dict[int, tuple[int, int]]:
        """partition -> (leader node, leader epoch) for every partition of ``topic``; a
        partition whose recorded leader is not live goes to its successor, which this node
        claims at once when it is the successor (topics.py). While this node may not lead
        (``can_lead``) the partitions it would lead have no leader (-1)."""
        recorded = self.layout.leaders(self.sys, topic)
        candidates = sorted(brokers)
        able = self.can_lead()
        out = {}
        for p in (range(partitions) if only is None else (only,)):
            rec = recorded.get(p)
            if rec is not None and rec[1] in brokers:
                out[p] = (rec[1] if able or rec[1] != self.node_id else -1, rec[0])
                continue
            # The epoch shown is one a node recorded, never the successor's next one before it
            # claims it: a client keeps the highest leader epoch it saw and ignores metadata
            # with a lower one (librdkafka: "outdated metadata"), so an epoch shown ahead of
            # its claim, and then not claimed (the recorded leader is live again), would leave
            # the partition leaderless for that client. A client that sees the claim later
            # takes it: a higher epoch (a fetch with the lower one is answered
            # FENCED_LEADER_EPOCH, and the client asks again).
            shown = rec[0] if rec is not None else 0
            succ = rendezvous(topic, p, candidates)
            if succ != self.node_id:
                out[p] = (succ, shown)
            elif not able:
                out[p] = (-1, shown)
            else:
                epoch = rec[0] + 1 if rec is not None else 0
                if self.record("a partition's leader", *self.layout.set_leader(topic, p, epoch, self.node_id)):
                    log.info("leading %s-%d from epoch %d (recorded leader %s not live)",
                             topic.decode(errors="replace"), p, epoch, rec[1] if rec else "none")
                out[p] = (succ, epoch)
        return out

    # -- retention --------------------------------------------------------------------------------
    async def _retention(self) -> None:
        """Every ``kafka_retention_check_interval_ms``: the partitions this node leads are
        trimmed to their topic's retention (``Logs.trim``) and their idempotent producers'
        state unused for ``producers.EXPIRATION_MS`` is removed."""
        while True:
            await asyncio.sleep(self.retention_interval)
            if self.storage_error() is not None:
                continue
            await self.round()
            try:
                self.enforce_retention(wall_ms())
            except StoreError as e:
                log.warning("Kafka retention pass stopped: %s", e.text)
            except Exception:
                self.node.stats.unexpected_errors += 1
                log.exception("Kafka retention pass failed")
            self.node.request_tick()

    def enforce_retention(self, now_ms: int) -> None:
        lay, sys = self.layout, self.sys
        brokers = self.brokers()
        for name in lay.topic_names(sys):
            t = lay.topic(sys, name)
            if t is None:
                continue
            for p, (leader, _) in self.leaders(t.name, t.partitions, brokers).items():
                if leader != self.node_id:
                    continue
                if t.retention_ms >= 0 or t.retention_bytes >= 0:
                    n = self.logs.trim(sys, lay.stream_key(t.name, p), t.retention_ms, t.retention_bytes, now_ms)
                    if n:
                        log.info("retention trimmed %d records from %s-%d", n, name.decode(errors="replace"), p)
                pkey = lay.producers_key(t.name, p)
                flat = lay.call(sys, b"HGETALL", pkey)
                stale = [pid for pid, v in zip(flat[::2], flat[1::2])
                         if (st := producers.decode(v)) is None or now_ms - st.ms > producers.EXPIRATION_MS]
                if stale:
                    lay.call(sys, b"HDEL", pkey, *stale)

    # -- waiting for data ------------------------------------------------------------------------
    def watch(self, keys: list[bytes], ev: asyncio.Event) -> None:
        if not self.waiters:
            self.node.changes.subscribe(self._changed)
        for k in keys:
            self.waiters.setdefault(k, set()).add(ev)

    def unwatch(self, keys: list[bytes], ev: asyncio.Event) -> None:
        for k in keys:
            s = self.waiters.get(k)
            if s is not None:
                s.discard(ev)
                if not s:
                    del self.waiters[k]
        if not self.waiters:
            self.node.changes.unsubscribe(self._changed)

    def _changed(self, changes: list) -> None:
        w = self.waiters
        for key in user_keys(changes):
            for ev in w.get(key, ()):
                ev.set()

    def wake(self, key: bytes) -> None:
        """The fetches waiting on ``key`` (a stream of another shard worker this gateway
        appended to: this worker's change feed does not tell it)."""
        for ev in self.waiters.get(key, ()):
            ev.set()

    async def _acks(self) -> None:
        """Peers' acknowledgements move high watermarks: wake the fetches waiting on the
        partitions with appends not yet acknowledged (a sibling's: ``Replicas._poll``)."""
        while True:
            await self.node.ack_waiter().wait()
            self.acks_moved()

    def acks_moved(self) -> None:
        for key in list(self.logs.unacked):
            for ev in self.waiters.get(key, ()):
                ev.set()


class Connection:
    def __init__(self, gw: KafkaGateway, reader: asyncio.StreamReader, writer: asyncio.StreamWriter):
        self.gw = gw
        self.node = gw.node
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername") or ("?", 0)
        sock = writer.get_extra_info("sockname") or ("?", 0)
        self.ctx = self.node.new_context(addr=f"{peer[0]}:{peer[1]}", laddr=f"{sock[0]}:{sock[1]}")
        self.ctx.lib_name = b"kafka"
        self.ctx.on_kill = self.close
        self.sasl_mechanism: str | None = None  # after a SaslHandshake
        self.raw_sasl = False  # after a SaslHandshake v0: the next frame is the bare token
        self.sasl_done = False
        self.close_after_response = False  # a failed authentication: answered, then closed
        self.client_id = "kafka"  # the last request header's client id

    def close(self) -> None:
        self.writer.close()

    def authenticate(self, token: bytes) -> str | None:
        """SASL PLAIN (RFC 4616: ``authzid NUL authcid NUL passwd``) as the marekvs ACL user
        ``authcid`` (AUTH through the node: ACL LOG counts a failure); None when it
        succeeded, else the error message."""
        parts = token.split(b"\0")
        if len(parts) != 3 or not parts[1] or parts[0] not in (b"", parts[1]):
            return "Authentication failed: malformed PLAIN token"
        try:
            self.gw.layout.call(self.ctx, b"AUTH", parts[1], parts[2])
        except StoreError:
            log.warning("Kafka client %s: SASL PLAIN authentication of %r failed", self.ctx.addr,
                        parts[1].decode(errors="replace"))
            return "Authentication failed: Invalid username or password"
        self.sasl_done = True
        return None

    async def run(self) -> None:
        node = self.node
        try:
            while not self.ctx.closing:
                head = await self.reader.readexactly(4)
                size = _SIZE.unpack(head)[0]
                if size < 0 or size > self.gw.max_request:
                    log.warning("Kafka client %s: request of %d bytes (limit %d): closing", self.ctx.addr, size,
                                self.gw.max_request)
                    return
                frame = await self.reader.readexactly(size)
                if self.raw_sasl:  # SaslHandshake v0: a bare token, a bare (empty) answer
                    self.raw_sasl = False
                    if self.authenticate(frame) is not None:
                        return
                    self.writer.write(_SIZE.pack(0))
                    continue
                try:
                    req = protocol.decode(frame)
                except protocol.ProtocolError as e:
                    log.warning("Kafka client %s: %s: closing", self.ctx.addr, e)
                    return
                if (req.api.key not in _PRE_AUTH and not self.ctx.authed and node.acl.auth_required()):
                    log.warning("Kafka client %s: %s before SASL authentication: closing", self.ctx.addr,
                                req.api.name)
                    return
                self.ctx.last_active = asyncio.get_running_loop().time()
                if req.client_id:
                    self.client_id = req.client_id
                if self.gw.rounds is not None and req.api.key != protocol.API_VERSIONS:
                    await self.gw.rounds.enter()
                out = handlers.handle(self, req)
                if asyncio.iscoroutine(out):
                    out = await out
                if out is None:  # acks=0: no response
                    continue
                if not await self._committed():
                    return  # nothing of this tick may be acknowledged
                self.writer.write(out)
                if self.close_after_response:
                    await self.writer.drain()
                    return
                if self.writer.transport.get_write_buffer_size() > 1 << 20:
                    await self.writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        except StoreError as e:  # (a shard worker restarting holds a record every request reads)
            log.warning("Kafka client %s: %s: closing", self.ctx.addr, e.text)
        except asyncio.CancelledError:
            raise
        except Exception:
            node.stats.unexpected_errors += 1
            log.exception("Kafka connection %s failed", self.ctx.addr)
        finally:
            node.drop_context(self.ctx)
            self.writer.close()

    def _committed(self) -> asyncio.Future:
        """Resolved once this tick's writes are committed (the node's commit barrier)."""
        fut = asyncio.get_running_loop().create_future()

        def done(ok: bool) -> None:
            if not fut.done():
                fut.set_result(ok)

        self.node.after_commit(done)
        return fut
