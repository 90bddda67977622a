"""DUMP and RESTORE in Redis 7.0's serialization format (``cluster.c``'s dumpCommand and
restoreCommand).

DUMP reads the key's whole value (``keyspace/values.py``) and serializes it as Redis 7.0
would (``core/rdb.py``: the RDB value encoding chosen by the ``*-max-*`` parameters, RDB
version 10, the CRC-64 footer), so redis-server 7.0 RESTOREs it; RESTORE reads a payload
of any RDB version up to 10 (what Redis 7.0, 6.x and older DUMP) and writes the value it
holds. A payload is checked whole before anything is written: a bad footer is "DUMP
payload version or checksum are wrong", a value that does not parse "Bad data format",
and neither writes anything.

RESTORE is an ordinary write of the records the value becomes (a head and one record per
element, or a string record), stamped by this node and merged by the apply path, so it
replicates like any write; REPLACE replaces the key as a DEL would (its head's delete
clock gates every old element everywhere). IDLETIME and FREQ are checked as Redis checks
them and not kept (marekvs keeps no LRU/LFU clock per key: OBJECT IDLETIME and FREQ say
so). A TTL already past writes nothing (with REPLACE: deletes the key), as in Redis.
"""

from __future__ import annotations

from marekvs.commands import args as A
from marekvs.commands import errors, reply
from marekvs.commands.errors import CommandError
from marekvs.commands.lists import lists
from marekvs.commands.table import command
from marekvs.core import rdb
from marekvs.keyspace import hll as khll
from marekvs.keyspace import values as kv
from marekvs.keyspace import zsets as Z

_DUMP_COMPLEXITY = ("O(1) to access the key and additional O(N*M) to serialize it, where N is the number of "
                    "Redis objects composing the value and M their average size. For small string values the "
                    "time complexity is thus O(1)+O(1*M) where M is small, so simply O(1).")
_RESTORE_COMPLEXITY = ("O(1) to create the new key and additional O(N*M) to reconstruct the serialized value, "
                       "where N is the number of Redis objects composing the value and M their average size. "
                       "For small string values the time complexity is thus O(1)+O(1*M) where M is small, so "
                       "simply O(1). However for sorted set values the complexity is O(N*M*log(N)) because "
                       "inserting values into sorted sets is O(log(N)).")


def values(ctx) -> kv.Values:
    """Whole values of the node's keyspace (with the list and zset states)."""
    return kv.Values(ctx.ks, lists(ctx), Z.state(ctx.ks), khll.cache_for(ctx.ks))


def limits(ctx) -> rdb.Limits:
    """The encoding parameters (CONFIG SET ``*-max-*``) DUMP chooses encodings by."""
    t = ctx.node.tunable
    return rdb.Limits(int(t("hash-max-listpack-entries")), int(t("hash-max-listpack-value")),
                      int(t("set-max-intset-entries")), int(t("zset-max-listpack-entries")),
                      int(t("zset-max-listpack-value")), int(t("list-max-listpack-size")),
                      int(t("stream-node-max-bytes")), int(t("stream-node-max-entries")))


@command("dump", 2, "readonly", specs="RO ACCESS index 1 range 0", group="generic", acl="keyspace read slow",
         summary="Return a serialized version of the value stored at the specified key.", since="2.6.0",
         complexity=_DUMP_COMPLEXITY, syntax="key")
def dump(ctx, args: list[bytes]):
    try:
        found = values(ctx).read(args[1], ctx.ks.now())
    except kv.Unsupported as e:
        raise CommandError(errors.dump_unsupported(str(e.detail))) from None
    if found is None:
        return None
    value = found[0]
    return rdb.dump(value, rdb.DEFAULT_LIMITS if isinstance(value, rdb.String) else limits(ctx))


def _wrap64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def _restore(ctx, args: list[bytes]):
    replace = absttl = False
    idle = freq = -1
    p = A.Options(args, 4)
    while p.more():
        if p.accept(b"replace"):
            replace = True
        elif p.accept(b"absttl"):
            absttl = True
        elif freq == -1 and p.accept(b"idletime", 1):
            idle = p.integer()
            if idle < 0:
                p.fail(errors.INVALID_IDLETIME)
        elif idle == -1 and p.accept(b"freq", 1):
            freq = p.integer()
            if not 0 <= freq <= 255:
                p.fail(errors.INVALID_FREQ)
        else:
            p.fail(errors.SYNTAX)
    p.check()
    ks, key = ctx.ks, args[1]
    now = ks.now()
    existed = ks.exists(key, now)
    if not replace and existed:
        raise CommandError(errors.BUSYKEY)
    ttl = A.int_arg(args[2])
    if ttl < 0:
        raise CommandError(errors.INVALID_TTL)
    try:
        value = rdb.load(args[3])
    except rdb.PayloadError:
        raise CommandError(errors.DUMP_PAYLOAD) from None
    except rdb.RdbError:
        raise CommandError(errors.BAD_DATA_FORMAT) from None
    if ttl and not absttl:
        ttl = _wrap64(ttl + now)  # (a sum past LLONG_MAX wraps negative in Redis: expired)
    if ttl and ttl <= now:  # already expired: nothing to create
        if replace and ks.delete(key, now):
            ctx.fire("g", b"del", key)
        return reply.OK
    values(ctx).write(key, value, ttl, now)
    events = ctx.node.events
    if existed and events.on:
        events.pending_new[key] = None  # Redis deletes the old key and adds the new one: "new"
    ctx.fire("g", b"restore", key)
    return reply.OK


@command("restore", -4, "write denyoom", specs="OW UPDATE index 1 range 0", group="generic",
         acl="keyspace write slow dangerous",
         summary="Create a key using the provided serialized value, previously obtained using DUMP.",
         since="2.6.0", complexity=_RESTORE_COMPLEXITY,
         syntax="key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]")
def restore(ctx, args: list[bytes]):
    return _restore(ctx, args)


@command("restore-asking", -4, "write denyoom asking", specs="OW UPDATE index 1 range 0", group="server",
         acl="keyspace write slow dangerous",
         summary="An internal command for migrating keys in a cluster", since="3.0.0",
         complexity=_RESTORE_COMPLEXITY,
         syntax="key ttl serialized-value [REPLACE] [ABSTTL] [IDLETIME seconds] [FREQ frequency]")
def restore_asking(ctx, args: list[bytes]):
    """RESTORE as a Redis Cluster node takes it during a migration (every node serves
    every key here: the same as RESTORE)."""
    return _restore(ctx, args)
