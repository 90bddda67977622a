"""Set commands (Redis 7.0 ``t_set.c``) over per-member records.

A set is a collection head plus one observed-remove element per member
(``keyspace/sets.py``). Each handler parses its arguments in Redis's order, calls the
keyspace and returns the reply value; members come back in byte order (Redis's order is
unspecified). Replicated semantics: docs/compatibility.md, "Sets".

Keyspace notifications: each command fires Redis 7.0's events after its write, in Redis's
order, and ``del`` when it emptied its key (``commands/members.py``: ``fire``,
``fire_removal``); its reads count INFO's keyspace hits and misses as Redis's
``lookupKeyRead`` does (the keyspace's ``read_lookup`` and counted reads).
"""

from __future__ import annotations

from marekvs.commands import args as A
from marekvs.commands import errors, reply
from marekvs.commands.errors import CommandError
from marekvs.commands.hashes import MAX_REPLY
from marekvs.commands.members import fire, fire_removal
from marekvs.commands.table import command
from marekvs.keyspace import sets as kset

_ACL_W_FAST = "write set fast"
_ACL_W_SLOW = "write set slow"
_ACL_R_FAST = "read set fast"
_ACL_R_SLOW = "read set slow"
_RO = "RO index 1 range 0"
_RO_ACCESS = "RO ACCESS index 1 range 0"
_INTER_COMPLEXITY = ("O(N*M) worst case where N is the cardinality of the smallest set and M is the "
                     "number of sets.")
_UNION_COMPLEXITY = "O(N) where N is the total number of elements in all given sets."
_SCAN_COMPLEXITY = ("O(1) for every call. O(N) for a complete iteration, including enough command "
                    "calls for the cursor to return back to 0. N is the number of elements inside "
                    "the collection..")
LONG_MAX = (1 << 63) - 1


@command("sadd", -3, "write denyoom fast", specs="RW INSERT index 1 range 0", group="set", acl=_ACL_W_FAST,
         summary="Add one or more members to a set", since="1.0.0",
         complexity="O(1) for each element added, so O(N) to add N elements when the command is called "
                    "with multiple arguments.", syntax="key member [member ...]")
def sadd(ctx, args: list[bytes]):
    on = ctx.node.events.on
    added = kset.add(ctx.ks, args[1], args[2:], ctx.ks.now())
    if on and added:
        fire(ctx, "s", b"sadd", args[1])
    return added


@command("srem", -3, "write fast", specs="RW DELETE index 1 range 0", group="set", acl=_ACL_W_FAST,
         summary="Remove one or more members from a set", since="1.0.0",
         complexity="O(N) where N is the number of members to be removed.", syntax="key member [member ...]")
def srem(ctx, args: list[bytes]):
    n = kset.remove(ctx.ks, args[1], args[2:], ctx.ks.now())
    if n:
        fire_removal(ctx, "s", b"srem", args[1])
    return n


@command("sismember", 3, "readonly fast", specs=_RO, group="set", acl=_ACL_R_FAST,
         summary="Determine if a given value is a member of a set", since="1.0.0", complexity="O(1)",
         syntax="key member")
def sismember(ctx, args: list[bytes]):
    return int(kset.is_member(ctx.ks, args[1], args[2], ctx.ks.now()))


@command("smismember", -3, "readonly fast", specs=_RO_ACCESS, group="set", acl=_ACL_R_FAST,
         summary="Returns the membership associated with the given elements for a set", since="6.2.0",
         complexity="O(N) where N is the number of elements being checked for membership",
         syntax="key member [member ...]")
def smismember(ctx, args: list[bytes]):
    return [int(x) for x in kset.are_members(ctx.ks, args[1], args[2:], ctx.ks.now())]


@command("smembers", 2, "readonly", specs=_RO_ACCESS, group="set", acl=_ACL_R_SLOW,
         summary="Get all the members in a set", since="1.0.0",
         complexity="O(N) where N is the set cardinality.", syntax="key")
def smembers(ctx, args: list[bytes]):
    return reply.SetReply(kset.all_members(ctx.ks, args[1], ctx.ks.now()))


@command("scard", 2, "readonly fast", specs=_RO, group="set", acl=_ACL_R_FAST,
         summary="Get the number of members in a set", since="1.0.0", complexity="O(1)", syntax="key")
def scard(ctx, args: list[bytes]):
    return kset.cardinality(ctx.ks, args[1], ctx.ks.now())


@command("spop", -2, "write fast", specs="RW ACCESS DELETE index 1 range 0", group="set", acl=_ACL_W_FAST,
         summary="Remove and return one or multiple random members from a set", since="1.0.0",
         complexity="Without the count argument O(1), otherwise O(N) where N is the value of the passed count.",
         syntax="key [count]")
def spop(ctx, args: list[bytes]):
    if len(args) > 3:
        raise CommandError(errors.SYNTAX)
    ks, now = ctx.ks, ctx.ks.now()
    if len(args) == 2:
        popped = kset.pop(ks, args[1], 1, now)
        if popped:
            fire_removal(ctx, "s", b"spop", args[1])
        return popped[0] if popped else None
    n = A.parse_ll(args[2])
    if n is None or n < 0:
        raise CommandError(errors.OUT_OF_RANGE_POSITIVE)
    kset.lookup(ks, args[1], now)
    if n == 0:
        return reply.SetReply()
    popped = kset.pop(ks, args[1], n, now)
    if popped:
        if not ks.exists(args[1], now):
            ks.counted(args[1], True)  # (Redis replies a count >= SCARD with SUNION's code, a read lookup)
        fire_removal(ctx, "s", b"spop", args[1])
    return reply.SetReply(popped or [])


@command("srandmember", -2, "readonly", specs=_RO_ACCESS, group="set", acl=_ACL_R_SLOW,
         summary="Get one or multiple random members from a set", since="1.0.0",
         complexity="Without the count argument O(1), otherwise O(N) where N is the absolute value of the "
                    "passed count.", syntax="key [count]")
def srandmember(ctx, args: list[bytes]):
    if len(args) > 3:
        raise CommandError(errors.SYNTAX)
    ks, now = ctx.ks, ctx.ks.now()
    if len(args) == 2:
        kset.read_lookup(ks, args[1], now)
        found = kset.random_members(ks, args[1], 1, False, now)
        return found[0] if found else None
    n = A.int_range_arg(args[2], -LONG_MAX, LONG_MAX)
    _, h = kset.read_lookup(ks, args[1], now)
    if n == 0 or h is None:
        return []
    if n < -MAX_REPLY:
        raise CommandError(errors.TOO_MANY_REPLIES)
    return kset.random_members(ks, args[1], abs(n), n > 1, now) or []


@command("smove", 4, "write fast", specs=("RW ACCESS DELETE index 1 range 0", "RW INSERT index 2 range 0"),
         group="set", acl=_ACL_W_FAST, summary="Move a member from one set to another", since="1.0.0",
         complexity="O(1)", syntax="source destination member")
def smove(ctx, args: list[bytes]):
    src, dst = args[1], args[2]
    moved, added = kset.move(ctx.ks, src, dst, args[3], ctx.ks.now())
    if moved and src != dst:
        fire_removal(ctx, "s", b"srem", src)
        if added:
            fire(ctx, "s", b"sadd", dst)
    return int(moved)


# -- the algebra -------------------------------------------------------------------------------

def store_result(ctx, dst: bytes, event: bytes, members: list[bytes]) -> int:
    """A STORE's write and its event: ``event`` for a result, ``del`` when an empty
    result deleted the destination, nothing when there was nothing to delete."""
    ks, now = ctx.ks, ctx.ks.now()
    on = ctx.node.events.on
    existed = on and not members and ks.exists(dst, now)
    n = kset.store(ks, dst, members, now)
    if n:
        fire(ctx, "s", event, dst)
    elif existed:
        fire(ctx, "g", b"del", dst)
    return n

@command("sinter", -2, "readonly", specs="RO ACCESS index 1 range -1", group="set", acl=_ACL_R_SLOW,
         summary="Intersect multiple sets", since="1.0.0", complexity=_INTER_COMPLEXITY,
         syntax="key [key ...]")
def sinter(ctx, args: list[bytes]):
    return reply.SetReply(kset.intersection(ctx.ks, args[1:], ctx.ks.now()))


@command("sintercard", -3, "readonly", specs="RO ACCESS index 1 keynum 0 1 1", getkeys="sintercard",
         group="set", acl=_ACL_R_SLOW, summary="Intersect multiple sets and return the cardinality of the result",
         since="7.0.0", complexity=_INTER_COMPLEXITY, syntax="numkeys key [key ...] [LIMIT limit]")
def sintercard(ctx, args: list[bytes]):
    n, limit = sintercard_args(args)
    return len(kset.intersection(ctx.ks, args[2:2 + n], ctx.ks.now(), limit))


def sintercard_args(args: list[bytes]) -> tuple[int, int]:
    """SINTERCARD's (numkeys, LIMIT or 0), or its CommandError."""
    n = A.parse_ll(args[1])
    if n is None or n < 1:
        raise CommandError(errors.NUMKEYS_POSITIVE)
    if n > len(args) - 2:
        raise CommandError(errors.NUMKEYS_TOO_MANY)
    limit = 0
    p = A.Options(args, 2 + n)
    while p.more():
        if p.accept(b"limit", 1):
            v = A.parse_ll(p.value())
            if v is None or v < 0:
                p.fail(errors.LIMIT_NEGATIVE)
            else:
                limit = v
        else:
            p.fail(errors.SYNTAX)
    p.check()
    return n, limit


@command("sinterstore", -3, "write denyoom", specs=("RW UPDATE index 1 range 0", "RO ACCESS index 2 range -1"),
         group="set", acl=_ACL_W_SLOW, summary="Intersect multiple sets and store the resulting set in a key",
         since="1.0.0", complexity=_INTER_COMPLEXITY, syntax="destination key [key ...]")
def sinterstore(ctx, args: list[bytes]):
    ks, now = ctx.ks, ctx.ks.now()
    return store_result(ctx, args[1], b"sinterstore", kset.intersection(ks, args[2:], now))


@command("sunion", -2, "readonly", specs="RO ACCESS index 1 range -1", group="set", acl=_ACL_R_SLOW,
         summary="Add multiple sets", since="1.0.0", complexity=_UNION_COMPLEXITY, syntax="key [key ...]")
def sunion(ctx, args: list[bytes]):
    return reply.SetReply(kset.union(ctx.ks, args[1:], ctx.ks.now()))


@command("sunionstore", -3, "write denyoom", specs=("OW UPDATE index 1 range 0", "RO ACCESS index 2 range -1"),
         group="set", acl=_ACL_W_SLOW, summary="Add multiple sets and store the resulting set in a key",
         since="1.0.0", complexity=_UNION_COMPLEXITY, syntax="destination key [key ...]")
def sunionstore(ctx, args: list[bytes]):
    ks, now = ctx.ks, ctx.ks.now()
    return store_result(ctx, args[1], b"sunionstore", kset.union(ks, args[2:], now))


@command("sdiff", -2, "readonly", specs="RO ACCESS index 1 range -1", group="set", acl=_ACL_R_SLOW,
         summary="Subtract multiple sets", since="1.0.0", complexity=_UNION_COMPLEXITY, syntax="key [key ...]")
def sdiff(ctx, args: list[bytes]):
    return reply.SetReply(kset.difference(ctx.ks, args[1:], ctx.ks.now()))


@command("sdiffstore", -3, "write denyoom", specs=("OW UPDATE index 1 range 0", "RO ACCESS index 2 range -1"),
         group="set", acl=_ACL_W_SLOW, summary="Subtract multiple sets and store the resulting set in a key",
         since="1.0.0", complexity=_UNION_COMPLEXITY, syntax="destination key [key ...]")
def sdiffstore(ctx, args: list[bytes]):
    ks, now = ctx.ks, ctx.ks.now()
    return store_result(ctx, args[1], b"sdiffstore", kset.difference(ks, args[2:], now))


@command("sscan", -3, "readonly", specs=_RO_ACCESS, group="set", acl=_ACL_R_SLOW,
         summary="Incrementally iterate Set elements", since="2.8.0", complexity=_SCAN_COMPLEXITY,
         syntax="key cursor [MATCH pattern] [COUNT count]")
def sscan(ctx, args: list[bytes]):
    cursor = A.parse_cursor(args[2])
    ks, now = ctx.ks, ctx.ks.now()
    hk, h = kset.read_lookup(ks, args[1], now)
    if h is None or not ks.present(hk, h, now):  # (no key: no option is parsed)
        return [b"0", []]
    count, pattern, _, _ = A.scan_options(args, 3)
    nxt, page = kset.scan(ks, args[1], cursor, count, now)
    if pattern is not None:
        page = [m for m in page if A.stringmatch(pattern, m)]
    return [b"%d" % nxt, page]
