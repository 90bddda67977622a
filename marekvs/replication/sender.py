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
"""

from __future__ import annotations

import asyncio
import collections
import logging
import time
from typing import TYPE_CHECKING, Any

import grpc

from marekvs.replication.codec import pack_entries
from marekvs.replication.gen import replication_v1_pb2 as pb
from marekvs.replication.gen import replication_v1_pb2_grpc as pbg
from marekvs.replication.peers import PeerRefused, PeerState

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
                reply = await stub.Hello(pb.HelloRequest(node=self.m.info(), log_first=self.engine.log_first,
                                                         log_last=self.engine.log_seq),
                                         metadata=self.m.md, timeout=5)
                self.m.check_peer_info(reply.node, p.node_id)
                p.resp_addr = reply.node.resp_addr
                p.incarnation = reply.node.incarnation
                if reply.node.incarnation and self._lost_entries(reply.applied_seq, reply.applied_epoch):
                    p.state = "behind"
                    self.m.take_new_incarnation(p, reply.applied_seq)
                    continue  # Hello again under the new incarnation
                p.acked_seq = reply.applied_seq
                if p.acked_seq + 1 < self.engine.log_first:
                    if not p.needs_resync:
                        log.error("peer %d has applied up to %d but this log starts at %d: it needs a resync",
                                  p.node_id, p.acked_seq, self.engine.log_first)
                    p.needs_resync = True
                    p.state = "needs_resync"
                    # the peer bootstraps from us on its own; ask again soon, so the flag
                    # clears (and shipping resumes) right after it has caught up
                    await asyncio.sleep(0.25)
                    continue
                p.needs_resync = False
                p.state = "streaming"
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
            while True:
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
                    batch = self._next_batch(sent)
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
                p.batches_shipped += 1
                p.entries_shipped += n
                p.bytes_shipped += len(payload)
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

    async def _read_acks(self, call: Any, p: PeerState) -> None:
        try:
            async for ack in call:
                if ack.applied_seq > p.acked_seq:
                    p.acked_seq = ack.applied_seq
                p.last_ack = time.monotonic()
                p.acked.set()
                self.m.node.replica_acked()
        finally:
            p.acked.set()  # wake a sender waiting for acks: it finds the stream ended
