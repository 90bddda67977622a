"""DEBUG: DIGEST / DIGEST-VALUE (what replication tests compare), SLEEP.

DEBUG DIGEST is one hash of the whole live dataset, as in Redis: the XOR of a SHA-1
per live key over (key, type, value, TTL deadline), so it does not depend on key
order, physical layout, tombstones or when the sweeper ran; converged replicas return
the same digest (40 zeros when empty). For a collection the value is its live element
records (key suffix and payload, which replicas hold byte for byte once converged).
"""

from __future__ import annotations

import asyncio
import hashlib
import time

from marekvs.commands import errors, reply
from marekvs.commands.errors import CommandError
from marekvs.commands.stepwise import in_steps
from marekvs.commands.table import command, container, help_subcommand
from marekvs.core import envelope as env
from marekvs.core import head
from marekvs.core import keys as K
from marekvs.core.partition import partition_of
from marekvs.keyspace.strings import string_value

CONTAINERS = (container("debug", -2, "admin noscript loading stale", group="server",
                        summary="A container for debugging commands.", since="1.0.0"),)

_ELEMENT_TAGS = (K.TAG_HASH, K.TAG_SET, K.TAG_ZSET, K.TAG_LIST, K.TAG_HLL, K.TAG_STREAM)


def key_digest(ks, key: bytes, ikey: bytes, rec: bytes, now: int) -> bytes:
    h = hashlib.sha1()
    h.update(key)
    h.update(b"\x00")
    h.update(rec[env.TTL])  # TTL deadline
    if ikey[K.TAG_AT] == K.ORD_STRING:
        h.update(b"string\x00")
        h.update(string_value(rec))
        return h.digest()
    h.update(head.type_name(rec).encode() + b"\x00")
    for tag in _ELEMENT_TAGS:
        for suffix, ev in ks.elements(tag, key, rec, now):
            h.update(tag)
            h.update(suffix)
            h.update(ev[env.HEADER:])
    return h.digest()


def dataset_digest(ks):
    """DEBUG DIGEST's reply, in steps (``stepwise``)."""
    now = ks.now()
    acc = 0
    n = 0
    for step in ks.all_keys_in_steps(now):
        for key, ikey, rec in step:
            acc ^= int.from_bytes(key_digest(ks, key, ikey, rec, now), "big")
        n += len(step)
        yield
    return reply.Simple(b"0" * 40 if n == 0 else b"%040x" % acc)


@command("digest", 2, "admin noscript loading stale", parent="debug", group="server",
         summary="Outputs a hash of the whole dataset.")
def debug_digest(ctx, args):
    return in_steps(ctx, dataset_digest(ctx.ks))


@command("digest-value", -2, "admin noscript loading stale", parent="debug", group="server",
         summary="Outputs a hash of the values of the given keys.", syntax="[key [key ...]]")
def debug_digest_value(ctx, args):
    now = ctx.ks.now()
    held = ctx.ks.engine.partitions.holds  # (a shard worker's: another worker's key is not here)
    out = []
    for key in args[2:]:
        found = ctx.ks.live_record(key, now) if held(partition_of(key)) else None
        if found is None:
            out.append(reply.Simple(b"0" * 40))
        else:
            out.append(reply.Simple(key_digest(ctx.ks, key, found[0], found[1], now).hex().encode()))
    return out


@command("sleep", 3, "admin noscript loading stale", parent="debug", group="server",
         summary="Blocks the server for the given number of seconds (0 = forever is not allowed).",
         syntax="seconds")
def debug_sleep(ctx, args):
    try:
        secs = float(args[2])
    except ValueError:
        raise CommandError(errors.NOT_FLOAT) from None
    if ctx.deny_blocking:  # inside MULTI or a script: Redis sleeps right there
        time.sleep(max(0.0, secs))
        return reply.OK

    async def sleeping():
        await asyncio.sleep(max(0.0, secs))
        return reply.OK

    return reply.Blocking(sleeping())


debug_help = help_subcommand("debug", (
    "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DIGEST", "    Output a hex signature representing the current DB content.",
    "DIGEST-VALUE <key> [<key> ...]", "    Output a hex signature of the values of all the specified keys.",
    "SLEEP <seconds>", "    Stop the client for <seconds> (the server keeps serving others).",
    "HELP", "    Print this help."), group="server", since="1.0.0")
