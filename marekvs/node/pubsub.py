"""Pub/Sub: channels, patterns and shard channels of one node, and delivery to subscribers.

Redis 7.0's semantics on one node: a client subscribes to channels, glob patterns
(``stringmatch``, Redis's matcher) and shard channels; ``publish`` pushes ``message`` to
every subscriber of the channel and ``pmessage`` to every subscriber of a matching pattern,
and returns how many clients received it. A message is a push value (``reply.Push``: an
array in RESP2, a ``>`` push in RESP3) handed to the client's transport through its
context (``ctx.on_push``), in order with its replies.

Across the cluster a PUBLISH (or SPUBLISH) made here is also relayed to every peer
(``relay``, set by the process: replication's pub/sub stream), which delivers it to its
own subscribers (``deliver``): at most once, in publish order per origin node, never stored.
PUBLISH returns the number of receivers on this node, as Redis Cluster does. Keyspace
notifications are published with ``notify``: to this node's subscribers only (every node
fires its own for the records it changes or merges, so they are not relayed), on each of
its shard workers (``siblings``, set by the mesh: the worker that changed the key fires).

A subscriber that does not read is cut off by ``client-output-buffer-limit pubsub`` (hard
limit at once, soft limit after its seconds), checked at each push against what the
transport still holds: the node's memory stays bounded.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from marekvs.commands.args import stringmatch
from marekvs.commands.context import Context
from marekvs.commands.reply import Push

Relay = Callable[[bytes, bytes, bool], None]


class PubSub:
    def __init__(self) -> None:
        self.channels: dict[bytes, dict[int, Context]] = {}
        self.patterns: dict[bytes, dict[int, Context]] = {}
        self.shard_channels: dict[bytes, dict[int, Context]] = {}
        self.relay: Relay | None = None  # the cluster stream (process.py attaches it)
        self.siblings: Relay | None = None  # the other shard workers of this node (server/mesh.py)
        self.fanned = False  # running a PUBLISH another shard worker fanned out (it relays)
        # a shard worker's part of a unit, transaction or script across workers (server/mesh.py):
        # what it would deliver, (channel, message, shard) in order (and the mesh's tracking
        # invalidations), for its coordinator to deliver on every worker in the order of the
        # whole (a fanned-out PUBLISH's copy only counts its receivers here)
        self.held: list[Any] | None = None
        self.limits = (0, 0, 0)  # client-output-buffer-limit pubsub: hard, soft, seconds
        self.published = 0

    # -- subscriptions (a context's own sets mirror these maps) ------------------------
    def subscribe(self, ctx: Context, channel: bytes) -> None:
        self.channels.setdefault(channel, {})[ctx.id] = ctx
        ctx.channels[channel] = None

    def unsubscribe(self, ctx: Context, channel: bytes) -> bool:
        return _drop(self.channels, ctx, channel, ctx.channels)

    def psubscribe(self, ctx: Context, pattern: bytes) -> None:
        self.patterns.setdefault(pattern, {})[ctx.id] = ctx
        ctx.patterns[pattern] = None

    def punsubscribe(self, ctx: Context, pattern: bytes) -> bool:
        return _drop(self.patterns, ctx, pattern, ctx.patterns)

    def ssubscribe(self, ctx: Context, channel: bytes) -> None:
        self.shard_channels.setdefault(channel, {})[ctx.id] = ctx
        ctx.shard_channels[channel] = None

    def sunsubscribe(self, ctx: Context, channel: bytes) -> bool:
        return _drop(self.shard_channels, ctx, channel, ctx.shard_channels)

    def drop_client(self, ctx: Context) -> None:
        for ch in list(ctx.channels):
            self.unsubscribe(ctx, ch)
        for p in list(ctx.patterns):
            self.punsubscribe(ctx, p)
        for ch in list(ctx.shard_channels):
            self.sunsubscribe(ctx, ch)

    # -- publishing ------------------------------------------------------------------------
    def publish(self, channel: bytes, message: bytes, shard: bool = False) -> int:
        """PUBLISH / SPUBLISH made on this node: deliver here and relay to the peers."""
        held = self.held
        if held is None:
            n = self.deliver(channel, message, shard)
        else:  # (delivered by the coordinator, in its order: the receivers now are counted)
            n = self.deliver(channel, message, shard, count_only=True)
            if not self.fanned:
                held.append((channel, message, shard))
        if self.relay is not None and not self.fanned:
            self.relay(channel, message, shard)
        return n

    def notify(self, channel: bytes, message: bytes) -> None:
        """A keyspace notification fired here: to this node's subscribers, on every shard
        worker of the node (never to the peers, which fire their own)."""
        if self.held is not None:
            self.held.append((channel, message, False))
            return
        self.deliver(channel, message)
        if self.siblings is not None:
            self.siblings(channel, message, False)

    def deliver(self, channel: bytes, message: bytes, shard: bool = False, count_only: bool = False) -> int:
        """Deliver to this node's subscribers only; the number of clients reached (with
        ``count_only``: that would be reached, nothing is sent). One push value per message
        (and pattern): each protocol encodes it once."""
        push = _reachable if count_only else self._push
        if not count_only:
            self.published += 1
        n = 0
        if shard:
            subs = self.shard_channels.get(channel)
            if subs:
                msg = Push([b"smessage", channel, message])
                for ctx in list(subs.values()):
                    n += push(ctx, msg)
            return n
        subs = self.channels.get(channel)
        if subs:
            msg = Push([b"message", channel, message])
            for ctx in list(subs.values()):
                n += push(ctx, msg)
        if self.patterns:
            for pattern, psubs in list(self.patterns.items()):
                if stringmatch(pattern, channel):
                    msg = Push([b"pmessage", pattern, channel, message])
                    for ctx in list(psubs.values()):
                        n += push(ctx, msg)
        return n

    def _push(self, ctx: Context, value: Any) -> int:
        return push_limited(ctx, value, self.limits)

    # -- PUBSUB ------------------------------------------------------------------------------
    def numpat(self) -> int:
        return len(self.patterns)


def _reachable(ctx: Context, value: Any) -> int:
    """1 if ``push_limited`` would push ``value`` to ``ctx``."""
    return int(ctx.on_push is not None and not ctx.closing)


def push_limited(ctx: Context, value: Any, limits: tuple[int, int, int]) -> int:
    """Push ``value`` to ``ctx`` under its class's client-output-buffer-limit ``limits``
    (hard, soft, seconds): past the hard limit, or past the soft one for that long, the
    client is closed, as Redis's ``checkClientOutputBufferLimits``. 1 if pushed."""
    push = ctx.on_push
    if push is None or ctx.closing:
        return 0
    held = push(value)  # the bytes the client's transport still holds, after this one
    hard, soft, seconds = limits
    if hard and held > hard:
        ctx.kill()
    elif soft and held > soft:
        now = time.monotonic()
        if not ctx.soft_limit_since:
            ctx.soft_limit_since = now
        elif now - ctx.soft_limit_since >= seconds:
            ctx.kill()
    else:
        ctx.soft_limit_since = 0.0
    return 1


def _drop(index: dict[bytes, dict[int, Context]], ctx: Context, name: bytes, own: dict[bytes, None]) -> bool:
    subs = index.get(name)
    if subs is None or ctx.id not in subs:
        own.pop(name, None)
        return False
    del subs[ctx.id]
    if not subs:
        del index[name]
    own.pop(name, None)
    return True
