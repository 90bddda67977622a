"""HyperLogLog commands (Redis 7.0 ``hyperloglog.c``): PFADD, PFCOUNT, PFMERGE.

The sketch is not one string here: an HLL is a collection head plus one record per touched
register (``keyspace/hll.py``), merged as a max-lattice, so PFADD on different nodes is a
union and a PFADD that raises no register writes (and replicates) nothing. The element
mapping is the data model's frozen P = 14 / xxh3_64 (Redis uses MurmurHash64A), so an
estimate differs from Redis's for the same elements by the sketch's own error (~0.81%),
not more. PFCOUNT is Redis's estimator (core/hll.py).

What differs from Redis (docs/divergences.md): TYPE says ``string`` but the string commands
(GET, APPEND, SETRANGE, GETBIT ...) answer WRONGTYPE on an HLL, there being no sketch blob;
a string key is never an HLL (Redis accepts a string holding its sketch bytes), so the HLL
commands answer ``WRONGTYPE Key is not a valid HyperLogLog string value.`` for any string.
PFDEBUG and PFSELFTEST, which inspect Redis's own sparse/dense encodings, do not exist.

PFCOUNT reads the ranks through the keyspace's register cache, which follows the node's
change feed (``ctx.node.changes``): see ``keyspace/hll.py`` for what a PFCOUNT costs.

Keyspace events and hit/miss counts as Redis 7.0: ``pfadd`` when PFADD created the key or
raised a register, and on PFMERGE's destination always; PFCOUNT counts a hit or miss for
every key, PFMERGE for its destination and every source, PFADD none.
"""

from __future__ import annotations

from marekvs.commands import reply
from marekvs.commands.table import command
from marekvs.keyspace import hll as khll

_GROUP = "hyperloglog"


def _cache(ctx) -> khll.RegisterCache:
    return khll.cache_for(ctx.ks)


@command("pfadd", -2, "write denyoom fast", specs="RW INSERT index 1 range 0", group=_GROUP,
         acl="write hyperloglog fast", summary="Adds the specified elements to the specified HyperLogLog.",
         since="2.8.9", complexity="O(1) to add every element.", syntax="key [element [element ...]]")
def pfadd(ctx, args: list[bytes]):
    updated = khll.pfadd(ctx.ks, _cache(ctx), args[1], args[2:], ctx.ks.now())
    if updated:
        ctx.fire("$", b"pfadd", args[1])
    return updated


@command("pfcount", -2, "readonly may_replicate",
         specs="RW ACCESS index 1 range -1 (RW because it may change the internal representation of the key, "
               "and propagate to replicas)",
         group=_GROUP, acl="read hyperloglog slow",
         summary="Return the approximated cardinality of the set(s) observed by the HyperLogLog at key(s).",
         since="2.8.9",
         complexity="O(1) with a very small average constant time when called with a single key. O(N) with "
                    "N being the number of keys, and much bigger constant times, when called with multiple keys.",
         syntax="key [key ...]")
def pfcount(ctx, args: list[bytes]):
    return khll.pfcount(ctx.ks, _cache(ctx), args[1:], ctx.ks.now())


@command("pfmerge", -2, "write denyoom", specs=("RW ACCESS INSERT index 1 range 0", "RO ACCESS index 2 range -1"),
         group=_GROUP, acl="write hyperloglog slow", summary="Merge N different HyperLogLogs into a single one.",
         since="2.8.9", complexity="O(N) to merge N HyperLogLogs, but with high constant times.",
         syntax="destkey sourcekey [sourcekey ...]")
def pfmerge(ctx, args: list[bytes]):
    khll.pfmerge(ctx.ks, _cache(ctx), args[1], args[2:], ctx.ks.now())
    ctx.fire("$", b"pfadd", args[1])  # (Redis: even when no register rose)
    return reply.OK
