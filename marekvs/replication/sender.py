"""Shipping: one task per peer sends this node's replication log to it.

Hello exchanges node ids, cluster name, format version, partition count and the data
directory's incarnation, and returns the peer's durable high-water mark of our log (and
the epoch of the entry there: ``_lost_entries`` checks that this data directory still
holds it, see ``manager.py``). Shipping resumes right after it: batches of consecutive
log entries go out on a bidirectional ``Ship`` stream (at most ``BATCH_BYTES`` per batch,
``MAX_INFLIGHT_BATCHES`` and ``WINDOW`` entries unacknowledged); acks come back on the
same stream. Coalescing: while a batch is unacknowledged, the commits made meanwhile wait
for its ack, up to ``HOLD_SECONDS``, and then go out together, so under load a message
(and the peer's apply, commit and ack) carries many commits rather than one; an idle link
sends a commit at once. Measured on 3 nodes of one 2-core box: the writer's CPU per write
~18 -> ~12.5 us, each peer's ~10 -> ~7 us. Delivery is at-least-once; merges are
idempotent.

A peer of several shard workers (docs/shards.md §5) names them in its Hello reply (its
shard map: each worker's partitions, own port and incarnation). This log then ships to
each of its workers on a link of its own (``_run_parts``: a ``PeerState`` per worker, the
parts of the peer's), each link with its own Hello (that worker's high-water mark of this
log), window and acks. A part carries of each entry only the records of its worker's
partitions; an entry with none for it goes as its position alone (``[seq, []]``), so the
worker's mark advances and its gap check holds. The peer's ack is its parts' lowest (the
log is trimmed there, WAIT counts it there). A part that fails, or a map that changed (a
worker restarted on another port, took another incarnation), restarts the peer's links
from a new Hello at the node's address. A part whose worker holds every partition this
log can hold (a peer of one worker, or ranges that contain this worker's) ships the
entries as they are, the same bytes as to a peer of one worker.
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import TYPE_CHECKING, Any

import grpc
import msgpack

from marekvs.core.partition import PartitionRange
from marekvs.replication.codec import pack_entries
from marekvs.replication.gen import replication_v1_pb2 as pb
from marekvs.replication.gen import replication_v1_pb2_grpc as pbg
from marekvs.replication.peers import PeerRefused, PeerState
from marekvs.replication.workers import dial

if TYPE_CHECKING:
    from marekvs.replication.manager import ReplicationManager

log = logging.getLogger("marekvs.replication")

WINDOW = 8192  # unacknowledged entries in flight per peer
MAX_INFLIGHT_BATCHES = 4  # unacknowledged batches in flight per peer (see _ship)
HOLD_SECONDS = 0.005  # how long new entries wait behind an unacknowledged batch
BATCH_ENTRIES = 512
# A batch stops growing at this size (but holds at least one entry): a peer applies
# a batch in one go on its event loop, so its size bounds the pause its own clients
# see (1 MB is ~10k small records, some tens of milliseconds).
BATCH_BYTES = 1 << 20


class _Gap(Exception):
    """Log entries a peer still needs were trimmed."""

    def __init__(self, first: int, last: int):
        super().__init__(f"entries {first}..{last} were trimmed")
        self.first, self.last = first, last


def _array_header(n: int) -> bytes:
    """msgpack array header for ``n`` items (the entries follow, already packed)."""
    if n < 16:
        return bytes((0x90 | n,))
    if n < 1 << 16:
        return b"\xdc" + n.to_bytes(2, "big")
    return b"\xdd" + n.to_bytes(4, "big")


_STABLE_S = 5.0  # links to a peer's workers that ran this long are retried after the shortest delay


class _Remap(Exception):
    """The peer's shard map changed (or a part's link failed): ask it again."""


class Sender:
    def __init__(self, m: ReplicationManager):
        self.m = m
        self.engine = m.engine
        self._batch_cache: dict[int, tuple] = {}  # after-seq -> (log_seq, (last, n, payload))

    async def run(self, p: PeerState) -> None:
        delay = 0.1
        warned = False
        while not self.m.stopping:
            channel = self.m.channel(p.grpc_addr)
            try:
                stub = pbg.ReplicationStub(channel)
                reply = await self._hello(stub, p)
                if reply.shards:
                    p.incarnations = frozenset(sh.incarnation for sh in reply.shards)
                    if warned:
                        log.info("link to peer %d (%s) is up again", p.node_id, p.grpc_addr)
                    warned = False
                    began = time.monotonic()
                    try:
                        await self._run_parts(p, list(reply.shards))  # (ends with an exception)
                    finally:
                        if time.monotonic() - began > _STABLE_S:  # (links that ran a while: retry soon)
                            delay = 0.1
                p.incarnations = frozenset((p.incarnation,))
                p.parts = []
                if not await self._linked(p, reply):
                    continue
                if warned:
                    log.info("link to peer %d (%s) is up again", p.node_id, p.grpc_addr)
                warned = False
                delay = 0.1
                await self._ship(stub, p)
            except PeerRefused as e:
                p.state = "refused"
                p.last_error = str(e)
                log.error("peer %d at %s refused: %s", p.node_id, p.grpc_addr, e)
                delay = 5.0
            except grpc.aio.AioRpcError as e:
                p.state = "down"
                p.last_error = f"{e.code().name}: {e.details()}"
                if not warned:
                    log.warning("link to peer %d (%s) down: %s", p.node_id, p.grpc_addr, p.last_error)
                    warned = True
            except _Remap as e:
                p.state = "connecting"
                p.last_error = str(e)
                log.info("peer %d: %s; asking for its shard map again", p.node_id, e)
            except asyncio.CancelledError:
                raise
            except Exception as e:  # never let one peer's sender die silently
                p.state = "down"
                p.last_error = repr(e)
                log.exception("sender to peer %d failed", p.node_id)
            finally:
                await channel.close(grace=None)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _hello(self, stub: pbg.ReplicationStub, p: PeerState) -> pb.HelloReply:
        reply = await stub.Hello(self.m.hello_request(), metadata=self.m.md, timeout=5)
        self.m.check_peer_info(reply.node, p.node_id)
        p.resp_addr = reply.node.resp_addr
        p.incarnation = reply.node.incarnation
        return reply

    async def _linked(self, p: PeerState, reply: pb.HelloReply) -> bool:
        """After a Hello on ``p``'s link: True if shipping starts (from the peer's mark);
        False if the link shakes hands again first (this directory lost entries the peer
        applied: a new incarnation; or the peer needs a resync: it bootstraps from us)."""
        if reply.node.incarnation and self._lost_entries(reply.applied_seq, reply.applied_epoch):
            p.state = "behind"
            if p.parent is not None:
                p.parent.sync_parts()
                self.m.take_new_incarnation(p.parent, reply.applied_seq)
                raise _Remap("this log took a new incarnation")
            self.m.take_new_incarnation(p, reply.applied_seq)
            return False  # Hello again under the new incarnation
        p.acked_seq = reply.applied_seq
        if p.acked_seq + 1 < self.engine.log_first:
            if not p.needs_resync:
                log.error("peer %d has applied up to %d but this log starts at %d: it needs a resync",
                          p.node_id, p.acked_seq, self.engine.log_first)
            p.needs_resync = True
            p.state = "needs_resync"
            if p.parent is not None:
                p.parent.sync_parts()
            # the peer bootstraps from us on its own; ask again soon, so the flag
            # clears (and shipping resumes) right after it has caught up
            await asyncio.sleep(0.25)
            return False
        p.needs_resync = False
        p.state = "streaming"
        if p.parent is not None:
            p.parent.sync_parts()
        return True

    async def _run_parts(self, p: PeerState, shards: list[pb.Shard]) -> None:
        """Ship to each worker of peer ``p`` (its map ``shards``) on a link of its own;
        returns (``_Remap``) or raises (a link down) when one ends: ``run`` asks the map
        again and starts over."""
        prev = {(q.first, q.last, q.incarnation): q for q in p.parts}
        parts = []
        for sh in shards:
            addr = dial(p.grpc_addr, sh)
            if addr is None:
                raise _Remap(f"the worker of partitions {sh.first}-{sh.last} has no port yet")
            q = PeerState(p.node_id, addr, parent=p, first=sh.first, last=sh.last,
                          incarnation=sh.incarnation)
            old = prev.get((sh.first, sh.last, sh.incarnation))
            if old is not None:  # (the figures of the same worker's link carry on)
                q.acked_seq, q.sent_seq = old.acked_seq, old.sent_seq
                if old.state == "streaming":  # (restarted by ``recheck_peer``: until its Hello tells)
                    q.state = "streaming"
            parts.append(q)
        p.parts = parts
        p.sync_parts()
        tasks = [asyncio.ensure_future(self._part(q)) for q in parts]
        cancelled = False
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
            for t in done:
                t.result()  # raises the part's error
            raise _Remap("a link to one of its workers ended")
        except asyncio.CancelledError:
            # ``recheck_peer`` shakes hands again (or the node stops): the links were up,
            # and stay "streaming" until the new handshake says otherwise, as a peer of one
            # process's link does. (Marked down, a peer claiming this node's id from
            # another address would pass ``Receiver._admit`` in the meantime.)
            cancelled = True
            raise
        finally:
            # Each part also stops on its own (``retired``): Python 3.11's wait_for, which
            # _ship waits with, can swallow a cancellation that comes as its wait ends, and
            # a part that went on would hold this gather, and the peer's links, for good.
            for q in parts:
                q.retired = True
                q.acked.set()
                q.wake.set()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            for q in parts:
                if q.state == "streaming" and not cancelled:
                    q.state = "down"
            p.sync_parts()

    async def _part(self, q: PeerState) -> None:
        """One worker's link of a peer of several: Hello at the worker's own port, then
        its part of every entry."""
        channel = self.m.channel(q.grpc_addr)
        try:
            stub = pbg.ReplicationStub(channel)
            while not self.m.stopping and not q.retired:
                reply = await self._hello(stub, q)
                if reply.node.incarnation != q.incarnation:
                    raise _Remap(f"the worker of partitions {q.first}-{q.last} is another incarnation now")
                if await self._linked(q, reply):
                    await self._ship(stub, q)
                    return
        finally:
            await channel.close(grace=None)

    def _lost_entries(self, acked: int, acked_epoch: int) -> bool:
        """A peer has applied our log up to ``acked`` (its entry there of epoch
        ``acked_epoch``): True if this data directory does not hold that entry (see
        the module docstring)."""
        log_ = self.engine.log
        if not acked:
            return False
        if acked > log_.last:
            return True
        mine = log_.epoch_of(acked)
        return bool(acked_epoch and mine and mine != acked_epoch)

    async def _ship(self, stub: pbg.ReplicationStub, p: PeerState) -> None:
        call = stub.Ship(metadata=self.m.md)
        reader = asyncio.get_running_loop().create_task(self._read_acks(call, p))
        # Batches sent and not yet acknowledged (their last seq). With one in flight the
        # next batch waits for its ack up to HOLD_SECONDS (``held`` once it has), so the
        # commits made meanwhile go out as one message; past the hold a batch goes out
        # anyway, which bounds the delay this adds when acks are slow.
        inflight: collections.deque[int] = collections.deque()
        held = False
        try:
            sent = p.acked_seq
            e = self.engine
            while not p.retired:
                if reader.done():
                    reader.result()  # raises the stream's error: the link is down
                    raise grpc.aio.AioRpcError(grpc.StatusCode.UNAVAILABLE, grpc.aio.Metadata(),
                                               grpc.aio.Metadata(), details="ack stream ended")
                while inflight and inflight[0] <= p.acked_seq:
                    inflight.popleft()
                if sent - p.acked_seq >= WINDOW or len(inflight) >= MAX_INFLIGHT_BATCHES:
                    p.acked.clear()
                    await p.acked.wait()  # an ack, or the ack reader ended (it sets it)
                    continue
                if inflight and not held and e.log_seq > sent:  # new entries wait for the ack
                    p.acked.clear()
                    try:
                        await asyncio.wait_for(p.acked.wait(), HOLD_SECONDS)
                    except asyncio.TimeoutError:
                        held = True
                    continue
                held = False
                p.wake.clear()
                try:
                    batch = self._next_batch(sent) if self._whole(p) else self._next_part(sent, p)
                except _Gap as gap:
                    p.needs_resync = True
                    log.error("log entries %d..%d for peer %d were trimmed; it needs a resync",
                              gap.first, gap.last, p.node_id)
                    return
                if batch is None:
                    if sent + 1 < e.log_first:
                        p.needs_resync = True
                        return
                    # idle: wake on new entries, or at once if the stream breaks (the
                    # ack reader ends), so a cut link shows as down without delay
                    waiter = asyncio.ensure_future(p.wake.wait())
                    await asyncio.wait((waiter, reader), timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
                    waiter.cancel()
                    continue
                last, n, payload = batch
                try:
                    await call.write(pb.Batch(origin=self.m.node_id, incarnation=self.m.incarnation,
                                              entries=payload, last_epoch=e.log.epoch_of(last) or 0))
                except asyncio.InvalidStateError:  # the stream ended under the write: link down
                    raise grpc.aio.AioRpcError(await call.code(), grpc.aio.Metadata(), grpc.aio.Metadata(),
                                               details=await call.details()) from None
                sent = last
                inflight.append(last)
                p.sent_seq = sent
                for x in (p,) if p.parent is None else (p, p.parent):
                    x.batches_shipped += 1
                    x.entries_shipped += n
                    x.bytes_shipped += len(payload)
                if p.parent is not None:
                    p.parent.sent_seq = min(q.sent_seq for q in p.parent.parts)
        finally:
            reader.cancel()
            call.cancel()

    def _next_batch(self, after: int) -> tuple[int, int, bytes] | None:
        """(last seq, entry count, wire payload) of the entries after ``after``, or
        None if there are none. Recent entries come packed from the commit (spliced
        into one msgpack array, no re-read, no re-encode); older ones are read from
        the log on disk and encoded once for every peer at that position."""
        e = self.engine
        packed = e.recent_packed(after, BATCH_ENTRIES, BATCH_BYTES)
        if packed:
            n = len(packed)
            return after + n, n, _array_header(n) + b"".join(packed)
        hit = self._batch_cache.get(after)
        if hit is not None and hit[0] == e.log_seq:
            return hit[1]
        entries = e.read_log(after, BATCH_ENTRIES, BATCH_BYTES)
        if not entries:
            return None
        if entries[0][0] != after + 1:
            raise _Gap(after + 1, entries[0][0] - 1)
        item = (entries[-1][0], len(entries), pack_entries(entries))
        cache = self._batch_cache
        cache[after] = (e.log_seq, item)
        while len(cache) > 8:
            del cache[next(iter(cache))]
        return item

    def _whole(self, p: PeerState) -> bool:
        """Every record of this log is for ``p``'s receiver (it holds this worker's
        partitions): entries ship whole."""
        mine = self.engine.partitions
        return p.first <= mine.first and mine.last <= p.last

    def _next_part(self, after: int, p: PeerState) -> tuple[int, int, bytes] | None:
        """``_next_batch`` for a receiver holding partitions ``p.first``..``p.last`` only:
        each entry with its records of those partitions (none: its position alone)."""
        e = self.engine
        r = PartitionRange(p.first, p.last)
        lo, hi = r.start_key, r.end_key
        packed = e.recent_packed(after, BATCH_ENTRIES, BATCH_BYTES)
        if packed:
            unpackb = msgpack.unpackb
            raw = [unpackb(b, raw=True) for b in packed]
        else:
            entries = e.read_log(after, BATCH_ENTRIES, BATCH_BYTES)
            if not entries:
                return None
            if entries[0][0] != after + 1:
                raise _Gap(after + 1, entries[0][0] - 1)
            raw = [[seq, [x for kv in recs for x in kv]] for seq, recs in entries]
        out = []
        for seq, flat in raw:
            mine = []
            for i in range(0, len(flat), 2):
                k = flat[i]
                if lo <= k < hi:
                    mine.append(k)
                    mine.append(flat[i + 1])
            out.append([seq, mine])
        return out[-1][0], len(out), msgpack.packb(out)

    async def _read_acks(self, call: Any, p: PeerState) -> None:
        try:
            async for ack in call:
                if ack.applied_seq > p.acked_seq:
                    p.acked_seq = ack.applied_seq
                    if p.parent is not None:
                        p.parent.acked_seq = min(q.acked_seq for q in p.parent.parts)
                p.last_ack = time.monotonic()
                if p.parent is not None:
                    p.parent.last_ack = p.last_ack
                p.acked.set()
                self.m.node.replica_acked()
        finally:
            p.acked.set()  # wake a sender waiting for acks: it finds the stream ended
