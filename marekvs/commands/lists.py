"""List commands (Redis 7.0 ``t_list.c``) over the data model's per-position records.

``keyspace/lists.py`` holds the records, the per-list hints that map ranks to positions
and every operation; this module parses arguments in Redis's order (what is checked
before the key is looked up, and what after), calls one operation and returns the reply
value. Error texts live in ``errors.py``.

Blocking commands (BLPOP, BRPOP, BLMOVE, BRPOPLPUSH, BLMPOP) first try once as their
non-blocking form; if there is nothing to pop they wait in the node's blocking registry
(``node/blocking.py``: first blocked first served, timeouts, CLIENT UNBLOCK, MULTI and
scripts), whose ``attempt`` is the same operation again. A key that holds another type
while a client waits keeps it waiting (Redis serves list waiters only from lists); a
BLMOVE whose destination turned into another type gets WRONGTYPE, as in Redis.

Reply shapes as Redis 7.0: a missing key is a null bulk for the single-value forms and
a null array (RESP2 ``*-1``, RESP3 ``_``) for the array forms (LPOP/RPOP with a count,
LMPOP, BLPOP, BRPOP, BLMPOP), and every blocking command's timeout is a null array,
except BLMOVE/BRPOPLPUSH refused to block inside MULTI or a script, which answer a
null bulk.

Keyspace notifications: each command fires Redis 7.0's events after its write, in Redis's
order, and ``del`` when it emptied its key (``commands/members.py``: ``fire``,
``fire_removal``); its reads count INFO's keyspace hits and misses as Redis's
``lookupKeyRead`` does (the keyspace's ``read_lookup`` and counted reads).
A blocked pop fires its events when it is served, as Redis does (after the push that
served it).
"""

from __future__ import annotations

import math

from marekvs.commands import args as A
from marekvs.commands import errors, reply
from marekvs.commands.errors import CommandError
from marekvs.commands.members import fire_removal
from marekvs.commands.table import command
from marekvs.keyspace import lists as kl
from marekvs.keyspace.status import WrongType

_W_FAST = "write list fast"
_W_SLOW = "write list slow"
_R_FAST = "read list fast"
_R_SLOW = "read list slow"
_W_BLOCKING = "write list slow blocking"
_PUSH_COMPLEXITY = ("O(1) for each element added, so O(N) to add N elements when the command is "
                    "called with multiple arguments.")
_MPOP_COMPLEXITY = "O(N+M) where N is the number of provided keys and M is the number of elements returned."
_LONG_MAX = (1 << 63) - 1
# A timeout longer than this (in ms; ~139 years) waits forever: the event loop's timers
# cannot take Redis's whole range, and nobody can tell the difference.
_FOREVER_MS = 1 << 42


# =========================================================================================
# Argument grammar of the family
# =========================================================================================

def lists(ctx) -> kl.Lists:
    """The keyspace's lists (their hints follow the keyspace's change feed)."""
    lx = ctx.ks.extensions.get("lists")
    return lx if lx is not None else kl.lists_of(ctx.ks)


def parse_timeout(b: bytes) -> float:
    """A blocking command's timeout in seconds (0: forever), as Redis 7.0's
    ``getTimeoutFromObjectOrReply`` reads it: a long double of seconds, times 1000 in
    long double, rounded up to whole ms and cast to a long long (which makes an infinite
    or too large value negative)."""
    v = A.parse_ld(b)
    if v is None:
        raise CommandError(errors.TIMEOUT_NOT_FLOAT)
    ms = A.ld_round(v * 1000) if not isinstance(v, float) else v
    if isinstance(ms, float) or math.ceil(ms) > _LONG_MAX:
        raise CommandError(errors.TIMEOUT_NEGATIVE)  # (long long) of inf or past LLONG_MAX
    t = math.ceil(ms)
    if t < 0:
        raise CommandError(errors.TIMEOUT_NEGATIVE)
    return 0.0 if t > _FOREVER_MS else t / 1000


def _where(b: bytes) -> bool:
    """LEFT (True) or RIGHT (False), any case (a C string, as strcasecmp reads it)."""
    w = errors.c_str(b).lower()
    if w == b"left":
        return True
    if w == b"right":
        return False
    raise CommandError(errors.SYNTAX)


def _positive(b: bytes, msg: str) -> int:
    """``getRangeLongFromObjectOrReply(1, LONG_MAX, msg)``: one message for every failure."""
    v = A.parse_ll(b)
    if v is None or v < 1:
        raise CommandError(msg)
    return v


def _non_negative(b: bytes, msg: str) -> int:
    """``getPositiveLongFromObjectOrReply`` (0 allowed)."""
    v = A.parse_ll(b)
    if v is None or v < 0:
        raise CommandError(msg)
    return v


def mpop_args(args: list[bytes], numkeys_at: int) -> tuple[list[bytes], bool, int]:
    """LMPOP / BLMPOP: ``numkeys key... LEFT|RIGHT [COUNT count]`` from ``numkeys_at``:
    (keys, left, count), checked in ``lmpopGenericCommand``'s order."""
    numkeys = _positive(args[numkeys_at], errors.NUMKEYS_POSITIVE)
    where_at = numkeys_at + numkeys + 1
    if where_at >= len(args):
        raise CommandError(errors.SYNTAX)
    left = _where(args[where_at])
    count = -1
    p = A.Options(args, where_at + 1)
    while p.more():
        if count == -1 and p.accept(b"count", 1):
            count = _positive(p.value(), errors.COUNT_POSITIVE)
        else:
            p.fail(errors.SYNTAX)
    p.check()
    return args[numkeys_at + 1:where_at], left, 1 if count == -1 else count


def _push(ctx, key: bytes, values: list[bytes], left: bool, xx: bool) -> int:
    n = kl.op_push(lists(ctx), key, values, left, xx, ctx.ks.now())
    if n and ctx.node.events.on:
        ctx.node.events.fire("l", b"lpush" if left else b"rpush", key)
    return n


def _popped(ctx, key: bytes, left: bool) -> None:
    """The events of a pop from ``key``: lpop/rpop, then del if it emptied the list."""
    if ctx.node.events.on:
        fire_removal(ctx, "l", b"lpop" if left else b"rpop", key)


def _moved(ctx, src: bytes, dst: bytes, from_left: bool, to_left: bool) -> None:
    """LMOVE's events, in Redis's order: the push on the destination, then the pop (and
    del) of the source; also when both are one list."""
    if ctx.node.events.on:
        ctx.node.events.fire("l", b"lpush" if to_left else b"rpush", dst)
        fire_removal(ctx, "l", b"lpop" if from_left else b"rpop", src)


# =========================================================================================
# Commands
# =========================================================================================

@command("lpush", -3, "write denyoom fast", specs="RW INSERT index 1 range 0", group="list", acl=_W_FAST,
         summary="Prepend one or multiple elements to a list", since="1.0.0", complexity=_PUSH_COMPLEXITY,
         syntax="key element [element ...]")
def lpush(ctx, args: list[bytes]):
    return _push(ctx, args[1], args[2:], True, False)


@command("rpush", -3, "write denyoom fast", specs="RW INSERT index 1 range 0", group="list", acl=_W_FAST,
         summary="Append one or multiple elements to a list", since="1.0.0", complexity=_PUSH_COMPLEXITY,
         syntax="key element [element ...]")
def rpush(ctx, args: list[bytes]):
    return _push(ctx, args[1], args[2:], False, False)


@command("lpushx", -3, "write denyoom fast", specs="RW INSERT index 1 range 0", group="list", acl=_W_FAST,
         summary="Prepend an element to a list, only if the list exists", since="2.2.0",
         complexity=_PUSH_COMPLEXITY, syntax="key element [element ...]")
def lpushx(ctx, args: list[bytes]):
    return _push(ctx, args[1], args[2:], True, True)


@command("rpushx", -3, "write denyoom fast", specs="RW INSERT index 1 range 0", group="list", acl=_W_FAST,
         summary="Append an element to a list, only if the list exists", since="2.2.0",
         complexity=_PUSH_COMPLEXITY, syntax="key element [element ...]")
def rpushx(ctx, args: list[bytes]):
    return _push(ctx, args[1], args[2:], False, True)


def _pop(ctx, args: list[bytes], left: bool, name: str):
    if len(args) > 3:
        raise CommandError(errors.wrong_arity(name))
    lx, now = lists(ctx), ctx.ks.now()
    if len(args) == 2:
        got = kl.op_pop(lx, args[1], left, 1, now)
        if got is None:
            return None
        _popped(ctx, args[1], left)
        return got[0]
    count = _non_negative(args[2], errors.NOT_POSITIVE)
    if count == 0:  # the type is still checked, then Redis's fast exit
        return reply.NULL_ARRAY if kl.lookup(lx, args[1], now)[1] is None else []
    got = kl.op_pop(lx, args[1], left, count, now)
    if got is None:
        return reply.NULL_ARRAY
    _popped(ctx, args[1], left)
    return got


@command("lpop", -2, "write fast", specs="RW ACCESS DELETE index 1 range 0", group="list", acl=_W_FAST,
         summary="Remove and get the first elements in a list", since="1.0.0",
         complexity="O(N) where N is the number of elements returned", syntax="key [count]")
def lpop(ctx, args: list[bytes]):
    return _pop(ctx, args, True, "lpop")


@command("rpop", -2, "write fast", specs="RW ACCESS DELETE index 1 range 0", group="list", acl=_W_FAST,
         summary="Remove and get the last elements in a list", since="1.0.0",
         complexity="O(N) where N is the number of elements returned", syntax="key [count]")
def rpop(ctx, args: list[bytes]):
    return _pop(ctx, args, False, "rpop")


@command("llen", 2, "readonly fast", specs="RO index 1 range 0", group="list", acl=_R_FAST,
         summary="Get the length of a list", since="1.0.0", complexity="O(1)", syntax="key")
def llen(ctx, args: list[bytes]):
    return kl.op_len(lists(ctx), args[1], ctx.ks.now())


@command("lrange", 4, "readonly", specs="RO ACCESS index 1 range 0", group="list", acl=_R_SLOW,
         summary="Get a range of elements from a list", since="1.0.0",
         complexity="O(S+N) where S is the distance of start offset from HEAD for small lists, from nearest "
                    "end (HEAD or TAIL) for large lists; and N is the number of elements in the specified range.",
         syntax="key start stop")
def lrange(ctx, args: list[bytes]):
    start, stop = A.int_arg(args[2]), A.int_arg(args[3])
    return kl.op_range(lists(ctx), args[1], start, stop, ctx.ks.now())


@command("lindex", 3, "readonly", specs="RO ACCESS index 1 range 0", group="list", acl=_R_SLOW,
         summary="Get an element from a list by its index", since="1.0.0",
         complexity="O(N) where N is the number of elements to traverse to get to the element at index. This "
                    "makes asking for the first or the last element of the list O(1).",
         syntax="key index")
def lindex(ctx, args: list[bytes]):
    lx, now = lists(ctx), ctx.ks.now()
    if kl.read_lookup(lx, args[1], now)[1] is None:  # the key first, then the index (Redis's order)
        return None
    return kl.op_index(lx, args[1], A.int_arg(args[2]), now)


@command("lset", 4, "write denyoom", specs="RW UPDATE index 1 range 0", group="list", acl=_W_SLOW,
         summary="Set the value of an element in a list by its index", since="1.0.0",
         complexity="O(N) where N is the length of the list. Setting either the first or the last element "
                    "of the list is O(1).",
         syntax="key index element")
def lset(ctx, args: list[bytes]):
    lx, now = lists(ctx), ctx.ks.now()
    found = kl.lookup(lx, args[1], now)
    if found[1] is None:
        raise CommandError(errors.NO_SUCH_KEY)
    if not kl.op_set(lx, args[1], found, A.int_arg(args[2]), args[3], now):
        raise CommandError(errors.INDEX_OUT_OF_RANGE)
    ctx.fire("l", b"lset", args[1])
    return reply.OK


@command("linsert", 5, "write denyoom", specs="RW INSERT index 1 range 0", group="list", acl=_W_SLOW,
         summary="Insert an element before or after another element in a list", since="2.2.0",
         complexity="O(N) where N is the number of elements to traverse before seeing the value pivot. This "
                    "means that inserting somewhere on the left end on the list (head) can be considered O(1) "
                    "and inserting somewhere on the right end (tail) is O(N).",
         syntax="key BEFORE | AFTER pivot element")
def linsert(ctx, args: list[bytes]):
    where = args[2].lower()
    if where not in (b"before", b"after"):
        raise CommandError(errors.SYNTAX)
    n = kl.op_insert(lists(ctx), args[1], where == b"before", args[3], args[4], ctx.ks.now())
    if n > 0:
        ctx.fire("l", b"linsert", args[1])
    return n


@command("lrem", 4, "write", specs="RW DELETE index 1 range 0", group="list", acl=_W_SLOW,
         summary="Remove elements from a list", since="1.0.0",
         complexity="O(N+M) where N is the length of the list and M is the number of elements removed.",
         syntax="key count element")
def lrem(ctx, args: list[bytes]):
    n = kl.op_rem(lists(ctx), args[1], A.int_arg(args[2]), args[3], ctx.ks.now())
    if n:
        fire_removal(ctx, "l", b"lrem", args[1])
    return n


@command("ltrim", 4, "write", specs="RW DELETE index 1 range 0", group="list", acl=_W_SLOW,
         summary="Trim a list to the specified range", since="1.0.0",
         complexity="O(N) where N is the number of elements to be removed by the operation.",
         syntax="key start stop")
def ltrim(ctx, args: list[bytes]):
    start, stop = A.int_arg(args[2]), A.int_arg(args[3])
    if kl.op_trim(lists(ctx), args[1], start, stop, ctx.ks.now()):
        fire_removal(ctx, "l", b"ltrim", args[1])  # (also when nothing was trimmed, as Redis)
    return reply.OK


@command("lpos", -3, "readonly", specs="RO ACCESS index 1 range 0", group="list", acl=_R_SLOW,
         summary="Return the index of matching elements on a list", since="6.0.6",
         complexity="O(N) where N is the number of elements in the list, for the average case. When searching "
                    "for elements near the head or the tail of the list, or when the MAXLEN option is provided, "
                    "the command may run in constant time.",
         syntax="key element [RANK rank] [COUNT num-matches] [MAXLEN len]")
def lpos(ctx, args: list[bytes]):
    rank, count, maxlen = 1, -1, 0
    p = A.Options(args, 3)
    while p.more():
        if p.accept(b"rank", 1):
            rank = p.integer()
            if rank == 0:
                p.fail(errors.LPOS_RANK_ZERO)
        elif p.accept(b"count", 1):
            count = _non_negative(p.value(), errors.LPOS_COUNT_NEGATIVE)
        elif p.accept(b"maxlen", 1):
            maxlen = _non_negative(p.value(), errors.LPOS_MAXLEN_NEGATIVE)
        else:
            p.fail(errors.SYNTAX)
    p.check()
    found = kl.op_pos(lists(ctx), args[1], args[2], rank, count, maxlen, ctx.ks.now())
    if count != -1:
        return found or []
    return found[0] if found else None


@command("lmove", 5, "write denyoom", specs=("RW ACCESS DELETE index 1 range 0", "RW INSERT index 2 range 0"),
         group="list", acl=_W_SLOW, summary="Pop an element from a list, push it to another list and return it",
         since="6.2.0", complexity="O(1)", syntax="source destination LEFT | RIGHT LEFT | RIGHT")
def lmove(ctx, args: list[bytes]):
    from_left, to_left = _where(args[3]), _where(args[4])
    got = kl.op_move(lists(ctx), args[1], args[2], from_left, to_left, ctx.ks.now())
    if got is not None:
        _moved(ctx, args[1], args[2], from_left, to_left)
    return got


@command("rpoplpush", 3, "write denyoom", specs=("RW ACCESS DELETE index 1 range 0", "RW INSERT index 2 range 0"),
         group="list", acl=_W_SLOW,
         summary="Remove the last element in a list, prepend it to another list and return it",
         since="1.2.0", complexity="O(1)", syntax="source destination")
def rpoplpush(ctx, args: list[bytes]):
    got = kl.op_move(lists(ctx), args[1], args[2], False, True, ctx.ks.now())
    if got is not None:
        _moved(ctx, args[1], args[2], False, True)
    return got


@command("lmpop", -4, "write", specs="RW ACCESS DELETE index 1 keynum 0 1 1", getkeys="lmpop", group="list",
         acl=_W_SLOW, summary="Pop elements from a list", since="7.0.0", complexity=_MPOP_COMPLEXITY,
         syntax="numkeys key [key ...] LEFT | RIGHT [COUNT count]")
def lmpop(ctx, args: list[bytes]):
    keys, left, count = mpop_args(args, 1)
    got = kl.op_mpop(lists(ctx), keys, left, count, ctx.ks.now())
    if got is None:
        return reply.NULL_ARRAY
    _popped(ctx, got[0], left)
    return [got[0], got[1]]


# -- blocking -------------------------------------------------------------------------------

def _block_pop(ctx, keys: list[bytes], left: bool, count: int, timeout: float, one: bool):
    """BLPOP / BRPOP (``one``: the reply is [key, value]) and BLMPOP ([key, [values]])."""
    lx = lists(ctx)

    def shape(got):
        if got is None:
            return None
        _popped(ctx, got[0], left)
        return [got[0], got[1][0] if one else got[1]]

    got = kl.op_mpop(lx, keys, left, count, ctx.ks.now())
    if got is not None:
        return shape(got)

    def attempt():
        return shape(kl.op_mpop(lx, keys, left, count, ctx.ks.now(), skip_wrong_type=True))

    return ctx.node.blocking.block(ctx, keys, attempt, timeout, _null_array)


def _null_array():
    return reply.NULL_ARRAY


@command("blpop", -3, "write noscript blocking", specs="RW ACCESS DELETE index 1 range -2", group="list",
         acl=_W_BLOCKING,
         summary="Remove and get the first element in a list, or block until one is available",
         since="2.0.0", complexity="O(N) where N is the number of provided keys.", syntax="key [key ...] timeout")
def blpop(ctx, args: list[bytes]):
    return _block_pop(ctx, args[1:-1], True, 1, parse_timeout(args[-1]), True)


@command("brpop", -3, "write noscript blocking", specs="RW ACCESS DELETE index 1 range -2", group="list",
         acl=_W_BLOCKING,
         summary="Remove and get the last element in a list, or block until one is available",
         since="2.0.0", complexity="O(N) where N is the number of provided keys.", syntax="key [key ...] timeout")
def brpop(ctx, args: list[bytes]):
    return _block_pop(ctx, args[1:-1], False, 1, parse_timeout(args[-1]), True)


@command("blmpop", -5, "write blocking", specs="RW ACCESS DELETE index 2 keynum 0 1 1", getkeys="blmpop",
         group="list", acl=_W_BLOCKING, summary="Pop elements from a list, or block until one is available",
         since="7.0.0", complexity=_MPOP_COMPLEXITY,
         syntax="timeout numkeys key [key ...] LEFT | RIGHT [COUNT count]")
def blmpop(ctx, args: list[bytes]):
    keys, left, count = mpop_args(args, 2)
    return _block_pop(ctx, keys, left, count, parse_timeout(args[1]), False)


def _block_move(ctx, src: bytes, dst: bytes, from_left: bool, to_left: bool, timeout: float):
    lx = lists(ctx)
    got = kl.op_move(lx, src, dst, from_left, to_left, ctx.ks.now())
    if got is not None:
        _moved(ctx, src, dst, from_left, to_left)
        return got
    if ctx.deny_blocking:  # MULTI / a script: Redis answers a null bulk here, not its timeout reply
        return None

    def attempt():
        now = ctx.ks.now()
        try:
            if kl.lookup(lx, src, now)[1] is None:
                return None
        except WrongType:
            return None  # the source is not a list (now): keep waiting
        try:
            got = kl.op_move(lx, src, dst, from_left, to_left, now)
            if got is not None:
                _moved(ctx, src, dst, from_left, to_left)
            return got
        except WrongType:
            return reply.Err(errors.WRONGTYPE)  # the destination is not a list: Redis ends the wait so

    return ctx.node.blocking.block(ctx, [src], attempt, timeout, _null_array)


@command("blmove", 6, "write denyoom noscript blocking",
         specs=("RW ACCESS DELETE index 1 range 0", "RW INSERT index 2 range 0"), group="list", acl=_W_BLOCKING,
         summary="Pop an element from a list, push it to another list and return it; or block until one is "
                 "available",
         since="6.2.0", complexity="O(1)", syntax="source destination LEFT | RIGHT LEFT | RIGHT timeout")
def blmove(ctx, args: list[bytes]):
    from_left, to_left = _where(args[3]), _where(args[4])
    return _block_move(ctx, args[1], args[2], from_left, to_left, parse_timeout(args[5]))


@command("brpoplpush", 4, "write denyoom noscript blocking",
         specs=("RW ACCESS DELETE index 1 range 0", "RW INSERT index 2 range 0"), group="list", acl=_W_BLOCKING,
         summary="Pop an element from a list, push it to another list and return it; or block until one is "
                 "available",
         since="2.2.0", complexity="O(1)", syntax="source destination timeout")
def brpoplpush(ctx, args: list[bytes]):
    return _block_move(ctx, args[1], args[2], False, True, parse_timeout(args[3]))
