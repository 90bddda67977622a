"""Pub/Sub commands (Redis 7.0 ``pubsub.c``) over the node's registry (``node/pubsub.py``).

(UN)SUBSCRIBE, P(UN)SUBSCRIBE and S(UN)SUBSCRIBE answer one reply per channel
(``reply.Replies`` of pushes: arrays in RESP2, ``>`` pushes in RESP3), each with the count
of the client's subscriptions after it: channels and patterns together, shard channels on
their own, as Redis counts them. A RESP2 client with subscriptions is in subscribed mode:
only (P|S)SUBSCRIBE, (P|S)UNSUBSCRIBE, PING, QUIT and RESET run (``Node.dispatch`` refuses
the rest with Redis's text) and PING answers ``["pong", message]``.

On a cluster PUBLISH reaches the subscribers of every node (relayed over the peer links);
its reply counts this node's receivers, as Redis Cluster's does. SPUBLISH does the same for
shard channels (every node holds every partition, so a shard channel is cluster-wide too).
"""

from __future__ import annotations

from marekvs.commands import reply
from marekvs.commands.args import stringmatch
from marekvs.commands.table import command, container, help_subcommand

CONTAINERS = (
    container("pubsub", -2, group="pubsub", summary="A container for Pub/Sub commands", since="2.8.0",
              acl="slow"),
)

_SUB = "pubsub noscript loading stale"


def _count(ctx) -> int:
    return len(ctx.channels) + len(ctx.patterns)


def _mode(ctx) -> None:
    ctx.in_pubsub = bool(ctx.channels or ctx.patterns or ctx.shard_channels)


@command("subscribe", -2, _SUB, group="pubsub", acl="pubsub slow",
         summary="Listen for messages published to the given channels", since="2.0.0",
         complexity="O(N) where N is the number of channels to subscribe to.", syntax="channel [channel ...]")
def subscribe(ctx, args):
    ps = ctx.node.pubsub
    out = reply.Replies()
    for ch in args[1:]:
        ps.subscribe(ctx, ch)
        out.append(reply.Push([b"subscribe", ch, _count(ctx)]))
    _mode(ctx)
    return out


@command("unsubscribe", -1, _SUB, group="pubsub", acl="pubsub slow",
         summary="Stop listening for messages posted to the given channels", since="2.0.0",
         complexity="O(N) where N is the number of clients already subscribed to a channel.",
         syntax="[channel [channel ...]]")
def unsubscribe(ctx, args):
    return _unsub(ctx, args[1:] or list(ctx.channels), ctx.node.pubsub.unsubscribe, b"unsubscribe", _count)


@command("psubscribe", -2, _SUB, group="pubsub", acl="pubsub slow",
         summary="Listen for messages published to channels matching the given patterns", since="2.0.0",
         complexity="O(N) where N is the number of patterns the client is already subscribed to.",
         syntax="pattern [pattern ...]")
def psubscribe(ctx, args):
    ps = ctx.node.pubsub
    out = reply.Replies()
    for p in args[1:]:
        ps.psubscribe(ctx, p)
        out.append(reply.Push([b"psubscribe", p, _count(ctx)]))
    _mode(ctx)
    return out


@command("punsubscribe", -1, _SUB, group="pubsub", acl="pubsub slow",
         summary="Stop listening for messages posted to channels matching the given patterns", since="2.0.0",
         complexity="O(N+M) where N is the number of patterns the client is already subscribed and M is the "
                    "number of total patterns subscribed in the system (by any client).",
         syntax="[pattern [pattern ...]]")
def punsubscribe(ctx, args):
    return _unsub(ctx, args[1:] or list(ctx.patterns), ctx.node.pubsub.punsubscribe, b"punsubscribe", _count)


@command("ssubscribe", -2, _SUB, specs=("NOT_KEY index 1 range -1 1 0",), group="pubsub", acl="pubsub slow",
         summary="Listen for messages published to the given shard channels", since="7.0.0",
         complexity="O(N) where N is the number of shard channels to subscribe to.",
         syntax="shardchannel [shardchannel ...]")
def ssubscribe(ctx, args):
    ps = ctx.node.pubsub
    out = reply.Replies()
    for ch in args[1:]:
        ps.ssubscribe(ctx, ch)
        out.append(reply.Push([b"ssubscribe", ch, len(ctx.shard_channels)]))
    _mode(ctx)
    return out


@command("sunsubscribe", -1, _SUB, specs=("NOT_KEY index 1 range -1 1 0",), group="pubsub", acl="pubsub slow",
         summary="Stop listening for messages posted to the given shard channels", since="7.0.0",
         complexity="O(N) where N is the number of clients already subscribed to a shard channel.",
         syntax="[shardchannel [shardchannel ...]]")
def sunsubscribe(ctx, args):
    return _unsub(ctx, args[1:] or list(ctx.shard_channels), ctx.node.pubsub.sunsubscribe, b"sunsubscribe",
                  lambda c: len(c.shard_channels))


def _unsub(ctx, names, drop, kind: bytes, count):
    out = reply.Replies()
    for name in names:
        drop(ctx, name)
        out.append(reply.Push([kind, name, count(ctx)]))
    if not out:
        out.append(reply.Push([kind, None, count(ctx)]))
    _mode(ctx)
    return out


@command("publish", 3, "pubsub loading stale fast may_replicate", group="pubsub", acl="pubsub fast",
         summary="Post a message to a channel", since="2.0.0",
         complexity="O(N+M) where N is the number of clients subscribed to the receiving channel and M is the "
                    "total number of subscribed patterns (by any client).", syntax="channel message")
def publish(ctx, args):
    return ctx.node.pubsub.publish(args[1], args[2])


@command("spublish", 3, "pubsub loading stale fast may_replicate", specs=("NOT_KEY index 1 range 0",), group="pubsub",
         acl="pubsub fast", summary="Post a message to a shard channel", since="7.0.0",
         complexity="O(N) where N is the number of clients subscribed to the receiving shard channel.",
         syntax="shardchannel message")
def spublish(ctx, args):
    return ctx.node.pubsub.publish(args[1], args[2], shard=True)


def _channels(index, args):
    pattern = args[2] if len(args) > 2 else None
    return [ch for ch in index if pattern is None or stringmatch(pattern, ch)]


@command("channels", -2, "pubsub loading stale", parent="pubsub", group="pubsub", acl="pubsub slow",
         summary="List active channels", since="2.8.0",
         complexity="O(N) where N is the number of active channels, and assuming constant time pattern "
                    "matching (relatively short channels and patterns)", syntax="[pattern]")
def pubsub_channels(ctx, args):
    return _channels(ctx.node.pubsub.channels, args)


@command("numsub", -2, "pubsub loading stale", parent="pubsub", group="pubsub", acl="pubsub slow",
         summary="Get the count of subscribers for channels", since="2.8.0",
         complexity="O(N) for the NUMSUB subcommand, where N is the number of requested channels",
         syntax="[channel [channel ...]]")
def pubsub_numsub(ctx, args):
    index = ctx.node.pubsub.channels
    return [x for ch in args[2:] for x in (ch, len(index.get(ch, ())))]


@command("numpat", 2, "pubsub loading stale", parent="pubsub", group="pubsub", acl="pubsub slow",
         summary="Get the count of unique patterns pattern subscriptions", since="2.8.0", complexity="O(1)")
def pubsub_numpat(ctx, args):
    return ctx.node.pubsub.numpat()


@command("shardchannels", -2, "pubsub loading stale", parent="pubsub", group="pubsub", acl="pubsub slow",
         summary="List active shard channels", since="7.0.0",
         complexity="O(N) where N is the number of active shard channels, and assuming constant time pattern "
                    "matching (relatively short shard channels).", syntax="[pattern]")
def pubsub_shardchannels(ctx, args):
    return _channels(ctx.node.pubsub.shard_channels, args)


@command("shardnumsub", -2, "pubsub loading stale", parent="pubsub", group="pubsub", acl="pubsub slow",
         summary="Get the count of subscribers for shard channels", since="7.0.0",
         complexity="O(N) for the SHARDNUMSUB subcommand, where N is the number of requested shard channels",
         syntax="[shardchannel [shardchannel ...]]")
def pubsub_shardnumsub(ctx, args):
    index = ctx.node.pubsub.shard_channels
    return [x for ch in args[2:] for x in (ch, len(index.get(ch, ())))]


pubsub_help = help_subcommand("pubsub", (
    "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CHANNELS [<pattern>]",
    "    Return the currently active channels matching a <pattern> (default: '*').",
    "NUMPAT",
    "    Return number of subscriptions to patterns.",
    "NUMSUB [<channel> ...]",
    "    Return the number of subscribers for the specified channels, excluding",
    "    pattern subscriptions(default: no channels).",
    "SHARDCHANNELS [<pattern>]",
    "    Return the currently active shard level channels matching a <pattern> (default: '*').",
    "SHARDNUMSUB [<shardchannel> ...]",
    "    Return the number of subscribers for the specified shard level channel(s)",
    "HELP",
    "    Prints this help."), group="pubsub", since="6.2.0", acl="slow")
