"""Replication-facing commands: WAIT, ROLE, DEBUG DIGEST / DIGEST-VALUE.

DEBUG DIGEST is one hash of the whole live dataset, as in Redis: the XOR of a SHA-1
per live key over (key, type, value, TTL deadline), so it does not depend on key
order, physical layout, tombstones or when the sweeper ran; converged replicas return
the same digest (40 zeros when empty). For a collection the value is its live element
records (key suffix and payload, which replicas hold byte for byte once converged).
"""

from __future__ import annotations

import asyncio
import hashlib

from marekvs.commands import errors
from marekvs.commands.db import is_live, now_ms, string_value
from marekvs.commands.errors import CommandError
from marekvs.commands.stepwise import in_steps
from marekvs.commands.table import command, container, help_subcommand
from marekvs.core import keys as K
from marekvs.server import resp
from marekvs.storage.engine import prefix_end

CONTAINERS = (container("debug", -2, "admin noscript loading stale", group="server",
                        summary="A container for debugging commands.", since="1.0.0"),)

_ELEMENT_TAGS = (K.TAG_HASH, K.TAG_SET, K.TAG_ZSET, K.TAG_LIST, K.TAG_HLL, K.TAG_STREAM)


def _int(b: bytes, err: str = errors.NOT_INTEGER) -> int:
    try:
        return int(b)
    except ValueError:
        raise CommandError(err) from None


@command("wait", 3, "noscript", group="generic", since="3.0.0", complexity="O(1)",
         summary="Blocks until the asynchronous replication of all preceding write commands sent by the "
                 "connection is completed.", syntax="numreplicas timeout")
def wait(c, args):
    need = _int(args[1])
    timeout = _int(args[2], errors.TIMEOUT_NOT_INT)
    if timeout < 0:
        raise CommandError(errors.TIMEOUT_NEGATIVE)
    server = c.server
    seq = c.last_write_seq
    have = server.repl.acked_count(seq)
    if have >= need or seq == 0:
        return have

    async def waiting():
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout / 1000 if timeout else None
        while True:
            n = server.repl.acked_count(seq)
            if n >= need:
                return n
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return n
            try:
                await asyncio.wait_for(server.ack_waiter().wait(), left)
            except asyncio.TimeoutError:
                return server.repl.acked_count(seq)

    return resp.Blocking(waiting())


@command("role", 1, "noscript loading stale fast", group="server", since="2.8.12",
         summary="Returns the replication role.")
def role(c, args):
    return [b"master", c.server.engine.log_seq, [
        [p.resp_addr.rsplit(":", 1)[0].encode() if p.resp_addr else b"",
         (p.resp_addr.rsplit(":", 1)[1] if p.resp_addr else "0").encode(), b"%d" % p.acked_seq]
        for p in c.server.repl.peers.values()]]


def key_digest(ks, key: bytes, ikey: bytes, rec: bytes, now: int) -> bytes:
    h = hashlib.sha1()
    h.update(key)
    h.update(b"\x00")
    h.update(rec[11:19])  # TTL deadline
    if ikey[2:3] == K.TAG_STRING:
        h.update(b"string\x00")
        h.update(string_value(rec))
        return h.digest()
    from marekvs.core import head

    h.update(head.type_name(rec).encode() + b"\x00")
    for tag in _ELEMENT_TAGS:
        prefix = K.collection_prefix(tag, key)
        for ek, ev in ks.engine.scan(prefix, prefix_end(prefix)):
            if is_live(ev, now) and head.element_live(rec, ev, now):
                h.update(ek[len(prefix) - len(key) - 1:])
                h.update(ev[19:])
    return h.digest()


def dataset_digest(ks):
    """DEBUG DIGEST's reply, in steps (``stepwise``)."""
    now = now_ms()
    acc = 0
    n = 0
    for step in ks.all_keys_in_steps(now):
        for key, ikey, rec in step:
            acc ^= int.from_bytes(key_digest(ks, key, ikey, rec, now), "big")
        n += len(step)
        yield
    return resp.Simple(b"0" * 40 if n == 0 else b"%040x" % acc)


@command("digest", 2, "admin noscript loading stale", parent="debug", group="server",
         summary="Outputs a hash of the whole dataset.")
def debug_digest(c, args):
    return in_steps(dataset_digest(c.ks))


@command("digest-value", -2, "admin noscript loading stale", parent="debug", group="server",
         summary="Outputs a hash of the values of the given keys.", syntax="[key [key ...]]")
def debug_digest_value(c, args):
    now = now_ms()
    out = []
    for key in args[2:]:
        found = c.ks.live_record(key, now)
        if found is None:
            out.append(resp.Simple(b"0" * 40))
        else:
            out.append(resp.Simple(key_digest(c.ks, key, found[0], found[1], now).hex().encode()))
    return out


@command("sleep", 3, "admin noscript loading stale", parent="debug", group="server",
         summary="Blocks the server for the given number of seconds (0 = forever is not allowed).",
         syntax="seconds")
def debug_sleep(c, args):
    try:
        secs = float(args[2])
    except ValueError:
        raise CommandError(errors.NOT_FLOAT) from None

    async def sleeping():
        await asyncio.sleep(max(0.0, secs))
        return resp.OK

    return resp.Blocking(sleeping())


debug_help = help_subcommand("debug", (
    "DEBUG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DIGEST", "    Output a hex signature representing the current DB content.",
    "DIGEST-VALUE <key> [<key> ...]", "    Output a hex signature of the values of all the specified keys.",
    "SLEEP <seconds>", "    Stop the client for <seconds> (the server keeps serving others).",
    "HELP", "    Print this help."), group="server", since="1.0.0")
