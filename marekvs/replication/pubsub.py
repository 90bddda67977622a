"""Cluster-wide Pub/Sub: PUBLISH on one node reaches the subscribers of every node.

One relay task per peer keeps a client stream (``PubSub.Relay``, proto/pubsub_v1.proto)
open to it while the link is up and writes every message published on this node to it, in
publish order. The peer's service hands each message to its node (``deliver_published``),
which delivers it to its own subscribers and relays it no further. Nothing is stored:
while a peer is down or cut off the messages meant for it are dropped (at most once, like
Redis Cluster's PUBLISH), and a queue that fills (a peer that does not keep up) drops
what does not fit, counted in ``dropped`` (INFO replication).
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, AsyncIterator

import grpc

from marekvs.replication.gen import pubsub_v1_pb2 as ps
from marekvs.replication.gen import pubsub_v1_pb2_grpc as psg
from marekvs.replication.peers import PeerState

if TYPE_CHECKING:
    from marekvs.replication.manager import ReplicationManager

log = logging.getLogger("marekvs.pubsub")

QUEUE_MESSAGES = 100_000  # per peer: past this, messages for that peer are dropped


def _end(q: asyncio.Queue[tuple[bytes, bytes, bool] | None]) -> None:
    """End the message generator of a stream that is over. grpc consumes a request
    iterator in a task of its own and, once the call has failed, neither cancels that task
    nor closes the iterator: left waiting on its queue, each ended stream would leak a task
    (logged as "Task was destroyed but it is pending!" when it is collected)."""
    while not q.empty():
        q.get_nowait()
    q.put_nowait(None)


class Relay(psg.PubSubServicer):
    def __init__(self, m: ReplicationManager):
        self.m = m
        self.queues: dict[int, asyncio.Queue[tuple[bytes, bytes, bool] | None]] = {}
        self.tasks: dict[int, asyncio.Task[None]] = {}
        self.relayed = 0
        self.received = 0
        self.dropped = 0

    # -- sending ---------------------------------------------------------------------------
    def publish(self, channel: bytes, payload: bytes, shard: bool) -> None:
        """A message published on this node: queue it for every peer whose stream is open."""
        for q in self.queues.values():
            try:
                q.put_nowait((channel, payload, shard))
            except asyncio.QueueFull:
                self.dropped += 1

    def start(self, p: PeerState) -> None:
        if p.node_id not in self.tasks and not self.m.stopping:
            self.tasks[p.node_id] = asyncio.get_running_loop().create_task(self._run(p))

    async def stop(self) -> None:
        for t in self.tasks.values():
            t.cancel()

    async def _run(self, p: PeerState) -> None:
        delay = 0.1
        while not self.m.stopping:
            channel = self.m.channel(p.grpc_addr)
            q: asyncio.Queue[tuple[bytes, bytes, bool] | None] = asyncio.Queue(QUEUE_MESSAGES)
            try:
                await asyncio.wait_for(channel.channel_ready(), 5)
                self.queues[p.node_id] = q  # from now on messages for this peer are kept
                stub = psg.PubSubStub(channel)
                await stub.Relay(self._messages(q), metadata=self.m.md)
            except (grpc.aio.AioRpcError, asyncio.TimeoutError) as e:
                log.debug("pub/sub stream to peer %d: %s", p.node_id, e)
            finally:
                self.queues.pop(p.node_id, None)  # down: what is published meanwhile is lost
                _end(q)
                await channel.close(grace=None)
            await asyncio.sleep(delay)
            delay = min(delay * 2, 2.0)

    async def _messages(self, q: asyncio.Queue[tuple[bytes, bytes, bool] | None]) -> AsyncIterator[ps.Message]:
        origin = self.m.node_id
        while True:
            item = await q.get()
            if item is None:  # the stream ended (``_end``)
                return
            channel, payload, shard = item
            self.relayed += 1
            yield ps.Message(origin=origin, channel=channel, payload=payload, shard=shard)

    # -- receiving (gRPC service) ------------------------------------------------------------
    async def Relay(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> ps.Relayed:
        n = 0
        async for msg in request_iterator:
            if msg.origin == self.m.node_id or msg.origin not in self.m.peers:
                await context.abort(grpc.StatusCode.FAILED_PRECONDITION, f"origin {msg.origin} is not a known peer")
            self.m.node.deliver_published(msg.channel, msg.payload, msg.shard)
            n += 1
            self.received += 1
        return ps.Relayed(delivered=n)
