"""Sorted-set commands (Redis 7.0 ``t_zset.c``) over the records of ``keyspace/zsets.py``.

The first half is the family's argument grammar, ported from Redis with its quirks: the
two float parsers (``getDoubleFromObject`` for scores and weights: the whole string, no
leading space, no overflow; ``strtod`` as ``zslParseRange`` calls it for ranges: a C string,
leading space and overflow accepted, an empty string is 0), lex range items, the blocking
timeout, and the reply shapes (WITHSCORES is a flat array in RESP2 and an array of
[member, double] pairs in RESP3; ZSCAN's scores are bulk strings in both). The second half
is the commands: each parses its arguments in Redis's order (so the same error wins),
calls the keyspace and returns the reply value.

Replicated semantics (docs/compatibility.md): members are observed-remove elements, so a
ZREM never removes an add it did not see; concurrent ZADDs of one member keep the score
of the newest dot; ZINCRBY and ZADD INCR are last-writer-wins on the result (two
concurrent increments of one member keep one of them). Blocking pops wake on a ZADD made
on any node once it has replicated here; two nodes can serve the same member to waiters
of their own (no coordination).

Keyspace notifications: each command fires Redis 7.0's events after its write, in Redis's
order, and ``del`` when it emptied its key (``commands/members.py``: ``fire``,
``fire_removal``); its reads count INFO's keyspace hits and misses as Redis's
``lookupKeyRead`` does (the keyspace's ``read_lookup`` and counted reads).
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
from typing import Any, Callable, Generator, Iterator

from marekvs.commands import args as A
from marekvs.commands import errors
from marekvs.commands.errors import CommandError
from marekvs.commands.members import fire, fire_removal
from marekvs.commands.reply import NULL_ARRAY, BulkArray, Double
from marekvs.commands.stepwise import in_steps
from marekvs.commands.table import command
from marekvs.keyspace import zsets as Z
from marekvs.keyspace.status import WrongType

_ACL_W_FAST = "write sortedset fast"
_ACL_W_SLOW = "write sortedset slow"
_ACL_R_FAST = "read sortedset fast"
_ACL_R_SLOW = "read sortedset slow"
_RANGE_COMPLEXITY = ("O(log(N)+M) with N being the number of elements in the sorted set and M the number of "
                     "elements being returned. If M is constant (e.g. always asking for the first 10 elements "
                     "with LIMIT), you can consider it O(log(N)).")
_INF = math.inf
LLONG_MAX = (1 << 63) - 1


# =========================================================================================
# Internal API: argument grammar and reply shapes
# =========================================================================================

# strtod's grammar (glibc): leading space, a sign, inf/infinity, nan[(chars)], hex with an
# optional binary exponent, decimal with an optional exponent. Possessive quantifiers: a
# failed match costs one pass.
_STRTOD = re.compile(
    rb"[ \t\n\v\f\r]*+([+-]?+)(?:"
    rb"(inf(?:inity)?)"
    rb"|(nan(?:\([0-9a-z_]*+\))?)"
    rb"|(0x(?:[0-9a-f]++\.?+[0-9a-f]*+|\.[0-9a-f]++)(?:p[+-]?[0-9]++)?)"
    rb"|((?:[0-9]++\.?+[0-9]*+|\.[0-9]++)(?:e[+-]?[0-9]++)?)"
    rb")",
    re.IGNORECASE,
)


def strtod(b: bytes) -> tuple[float, int, bool]:
    """C ``strtod`` on ``b``: (value, bytes consumed, ERANGE). Nothing converted gives
    (0.0, 0, False), as strtod's end pointer then stays at the start."""
    m = _STRTOD.match(b)
    if m is None:
        return 0.0, 0, False
    sign, inf, nan, hexm, decm = m.groups()
    neg = sign == b"-"
    erange = False
    if inf:
        v = _INF
    elif nan:
        v = math.nan
    elif hexm:
        try:
            v = float.fromhex(hexm.decode())
        except OverflowError:
            v, erange = _INF, True
        else:
            erange = v == 0.0 and any(c not in b"0.xX" for c in hexm.split(b"p")[0].split(b"P")[0])
    else:
        mant = decm.lower().split(b"e")[0]
        v = float(decm)
        if v == _INF:
            erange = True
        elif v == 0.0 and mant.strip(b"0.") != b"":
            erange = True
    return (-v if neg else v), m.end(), erange


def parse_double(b: bytes) -> float | None:
    """Redis ``getDoubleFromObject``: the whole string must be a double; no leading
    space, no overflow to infinity or underflow to zero, no NaN."""
    if not b or b[:1].isspace() or b[:1] == b"\x0b":
        return None
    v, end, erange = strtod(b)
    if end != len(b) or (erange and (v in (_INF, -_INF) or v == 0.0)) or v != v:
        return None
    return v


def double_arg(b: bytes, msg: str = errors.NOT_FLOAT) -> float:
    v = parse_double(b)
    if v is None:
        raise CommandError(msg)
    return v


def _range_item(b: bytes) -> tuple[float, bool] | None:
    """One end of a score range (``zslParseRange``): '(' makes it exclusive; the rest is
    a C string that strtod must consume whole; NaN is refused."""
    s = errors.c_str(b)
    ex = s[:1] == b"("
    if ex:
        s = s[1:]
    v, end, _ = strtod(s)
    if end != len(s) or v != v:
        return None
    return v, ex


def score_range(lo: bytes, hi: bytes) -> Z.ScoreRange:
    a, b = _range_item(lo), _range_item(hi)
    if a is None or b is None:
        raise CommandError(errors.ZSET_MIN_MAX_NOT_FLOAT)
    return Z.ScoreRange(a[0], b[0], a[1], b[1])


def _lex_item(b: bytes) -> tuple[Z.LexItem, bool] | None:
    c = b[:1]
    if c == b"+":
        return (Z.LEX_MAX, True) if b[1:2] in (b"", b"\x00") else None
    if c == b"-":
        return (Z.LEX_MIN, True) if b[1:2] in (b"", b"\x00") else None
    if c == b"(":
        return b[1:], True
    if c == b"[":
        return b[1:], False
    return None


def lex_range(lo: bytes, hi: bytes) -> Z.LexRange:
    a, b = _lex_item(lo), _lex_item(hi)
    if a is None or b is None:
        raise CommandError(errors.ZSET_NOT_STRING_RANGE)
    return Z.LexRange(a[0], b[0], a[1], b[1])


def timeout_arg(ctx, b: bytes) -> float:
    """``getTimeoutFromObjectOrReply`` in seconds: a long double, times 1000, truncated
    to whole milliseconds (a C cast: out of range is LLONG_MIN, so negative); 0 is
    forever. Returns seconds."""
    ld = A.parse_ld(b)
    if ld is None:
        raise CommandError(errors.TIMEOUT_NOT_FLOAT)
    if isinstance(ld, float):  # +-inf
        ms = -(1 << 63)
    else:
        v = A.ld_round(ld * 1000)
        ms = int(v) if not isinstance(v, float) and abs(v) < (1 << 63) else -(1 << 63)
    if ms < 0:
        raise CommandError(errors.TIMEOUT_NEGATIVE)
    if ms > 0 and ms > LLONG_MAX - ctx.ks.now():
        raise CommandError(errors.TIMEOUT_OUT_OF_RANGE)
    return ms / 1000.0


_LL_HALF = float((LLONG_MAX) // 2)


def format_score(x: float) -> bytes:
    """Redis's ``d2string`` (how a listpack stores a score, and ZSCAN prints it): an
    integral value within +-LLONG_MAX/2 as an integer, else ``%.17g``; inf spelled out."""
    if x == _INF:
        return b"inf"
    if x == -_INF:
        return b"-inf"
    if -_LL_HALF <= x <= _LL_HALF and x == int(x):
        return b"-0" if x == 0 and math.copysign(1.0, x) < 0 else b"%d" % int(x)
    return b"%.17g" % x


def double_text(x: float) -> bytes:
    """``addReplyDouble``'s text (``%.17g``, inf spelled out): a RESP2 score."""
    if x == _INF:
        return b"inf"
    if x == -_INF:
        return b"-inf"
    return b"%.17g" % x


def with_scores(ctx, entries: list[Z.Entry], withscores: bool) -> list:
    """A range reply: members, or members and scores (RESP2 a flat array of bulk strings,
    RESP3 [member, double] pairs)."""
    return scored(ctx.proto, entries, withscores)


def scored(proto: int, entries: list[Z.Entry], withscores: bool) -> list:
    """``with_scores`` for a client of protocol ``proto``."""
    if not withscores:
        return BulkArray([m for _, m in entries])
    if proto == 3:
        return [[m, Double(s)] for s, m in entries]
    out = BulkArray()
    for s, m in entries:
        out.append(m)
        out.append(double_text(s))
    return out


def ordered(handler: Callable[[Any, list[bytes]], Any]) -> Callable[[Any, list[bytes]], Any]:
    """A read of the order of the zset at ``args[1]``: a mirror not held yet is built
    first, in steps (``Zsets.warming``), the client waiting for it as for DBSIZE
    (``commands/stepwise.py``; in MULTI/EXEC or a script, at once), so the first read of
    a big zset does not stop every other client for the whole scan."""
    @functools.wraps(handler)
    def run(ctx: Any, args: list[bytes]) -> Any:
        work = _z(ctx).warming(args[1], ctx.ks.now()) if len(args) > 1 else None
        if work is None:
            return handler(ctx, args)

        def then() -> Generator[None, None, Any]:
            yield from work
            return handler(ctx, args)
        return in_steps(ctx, then())
    return run


def _z(ctx) -> Z.Zsets:
    return Z.state(ctx.ks)


def _numkeys(b: bytes, msg: str | None = None) -> int:
    v = A.parse_ll(b)
    if v is None:
        raise CommandError(msg or errors.NOT_INTEGER)
    return v


# =========================================================================================
# Commands: adding, scores, removing
# =========================================================================================

_NX, _XX, _CH, _INCR, _GT, _LT = (1 << b for b in range(6))
_ZADD_FLAGS = {b"nx": _NX, b"xx": _XX, b"ch": _CH, b"incr": _INCR, b"gt": _GT, b"lt": _LT}


def _zadd(ctx, args: list[bytes], incr: bool):
    """zaddGenericCommand: options, pairs, incompatibilities, scores, then the key."""
    flags, i = A.leading_flags(args, 2, _ZADD_FLAGS)
    nx, xx, ch, gt, lt = bool(flags & _NX), bool(flags & _XX), bool(flags & _CH), bool(flags & _GT), bool(flags & _LT)
    incr = incr or bool(flags & _INCR)
    n = len(args) - i
    if n % 2 or not n:
        raise CommandError(errors.SYNTAX)
    if nx and xx:
        raise CommandError(errors.ZADD_XX_NX)
    if (gt and nx) or (lt and nx) or (gt and lt):
        raise CommandError(errors.ZADD_GT_LT_NX)
    if incr and n > 2:
        raise CommandError(errors.ZADD_INCR_PAIR)
    items = [(double_arg(args[j]), args[j + 1]) for j in range(i, len(args), 2)]
    return add_items(ctx, args[1], items, Z.AddFlags(nx, xx, gt, lt, incr), ch)


def add_items(ctx, key: bytes, items: list[tuple[float, bytes]], flags: Z.AddFlags, ch: bool):
    """ZADD's write and reply (GEOADD shares it)."""
    try:
        r = Z.add(_z(ctx), key, items, flags, ctx.ks.now())
    except Z.NotAScore:
        raise CommandError(errors.ZSET_NAN_SCORE) from None
    if (r.added or r.updated) and ctx.node.events.on:
        ctx.node.events.fire("z", b"zincr" if flags.incr else b"zadd", key)
    if flags.incr:
        return Double(r.score) if r.processed and r.score is not None else None
    return r.added + r.updated if ch else r.added


@command("zadd", -4, "write denyoom fast", specs="RW UPDATE index 1 range 0", group="sorted-set",
         acl=_ACL_W_FAST, since="1.2.0",
         summary="Add one or more members to a sorted set, or update its score if it already exists",
         complexity="O(log(N)) for each item added, where N is the number of elements in the sorted set.",
         syntax="key [NX | XX] [GT | LT] [CH] [INCR] score member [score member ...]")
def zadd(ctx, args: list[bytes]):
    return _zadd(ctx, args, False)


@command("zincrby", 4, "write denyoom fast", specs="RW ACCESS UPDATE index 1 range 0", group="sorted-set",
         acl=_ACL_W_FAST, since="1.2.0", summary="Increment the score of a member in a sorted set",
         complexity="O(log(N)) where N is the number of elements in the sorted set.",
         syntax="key increment member")
def zincrby(ctx, args: list[bytes]):
    return _zadd(ctx, args, True)


@command("zrem", -3, "write fast", specs="RW DELETE index 1 range 0", group="sorted-set", acl=_ACL_W_FAST,
         since="1.2.0", summary="Remove one or more members from a sorted set",
         complexity="O(M*log(N)) with N being the number of elements in the sorted set and M the number of "
                    "elements to be removed.",
         syntax="key member [member ...]")
def zrem(ctx, args: list[bytes]):
    n = Z.remove(_z(ctx), args[1], args[2:], ctx.ks.now())
    if n:
        fire_removal(ctx, "z", b"zrem", args[1])
    return n


@command("zscore", 3, "readonly fast", specs="RO ACCESS index 1 range 0", group="sorted-set", acl=_ACL_R_FAST,
         since="1.2.0", summary="Get the score associated with the given member in a sorted set",
         complexity="O(1)", syntax="key member")
def zscore(ctx, args: list[bytes]):
    z, now = _z(ctx), ctx.ks.now()
    zs = Z.read_lookup(z, args[1], now)
    s = None if zs is None else Z.score(z, zs, args[2], now)
    return None if s is None else Double(s)


@command("zmscore", -3, "readonly fast", specs="RO ACCESS index 1 range 0", group="sorted-set",
         acl=_ACL_R_FAST, since="6.2.0", summary="Get the score associated with the given members in a sorted set",
         complexity="O(N) where N is the number of members being requested.", syntax="key member [member ...]")
def zmscore(ctx, args: list[bytes]):
    z, now = _z(ctx), ctx.ks.now()
    zs = Z.read_lookup(z, args[1], now)
    out: list = []
    for m in args[2:]:
        s = None if zs is None else Z.score(z, zs, m, now)
        out.append(None if s is None else Double(s))
    return out


@command("zcard", 2, "readonly fast", specs="RO index 1 range 0", group="sorted-set", acl=_ACL_R_FAST,
         since="1.2.0", summary="Get the number of members in a sorted set", complexity="O(1)", syntax="key")
@ordered
def zcard(ctx, args: list[bytes]):
    return Z.card(_z(ctx), args[1], ctx.ks.now())


@command("zcount", 4, "readonly fast", specs="RO ACCESS index 1 range 0", group="sorted-set", acl=_ACL_R_FAST,
         since="2.0.0", summary="Count the members in a sorted set with scores within the given values",
         complexity="O(log(N)) with N being the number of elements in the sorted set.", syntax="key min max")
@ordered
def zcount(ctx, args: list[bytes]):
    r = score_range(args[2], args[3])
    z, now = _z(ctx), ctx.ks.now()
    zs = Z.read_lookup(z, args[1], now)
    return 0 if zs is None else Z.score_count(Z.order_of(z, zs, now), r)


@command("zlexcount", 4, "readonly fast", specs="RO ACCESS index 1 range 0", group="sorted-set",
         acl=_ACL_R_FAST, since="2.8.9",
         summary="Count the number of members in a sorted set between a given lexicographical range",
         complexity="O(log(N)) with N being the number of elements in the sorted set.", syntax="key min max")
@ordered
def zlexcount(ctx, args: list[bytes]):
    r = lex_range(args[2], args[3])
    z, now = _z(ctx), ctx.ks.now()
    zs = Z.read_lookup(z, args[1], now)
    return 0 if zs is None else Z.lex_count(Z.order_of(z, zs, now), r)


# =========================================================================================
# Commands: ranges
# =========================================================================================

RANK, SCORE, LEX = "rank", "score", "lex"


def zrange_generic(ctx, args: list[bytes], at: int, store: bytes | None, rangetype: str | None,
                   reverse: bool | None):
    """zrangeGenericCommand: ``args[at]`` is the source key, then min, max and options.
    ``rangetype`` / ``reverse`` None leave them to the options (ZRANGE, ZRANGESTORE).
    Returns the entries' reply, or with ``store`` the number stored."""
    key = args[at]
    minidx, maxidx = at + 1, at + 2
    withscores = False
    offset, limit = 0, -1
    p = A.Options(args, at + 3)
    while p.more():
        if store is None and p.accept(b"withscores"):
            withscores = True
        elif p.accept(b"limit", 2):
            offset = p.integer()
            limit = p.integer()
        elif reverse is None and p.accept(b"rev"):
            reverse = True
        elif rangetype is None and p.accept(b"bylex"):
            rangetype = LEX
        elif rangetype is None and p.accept(b"byscore"):
            rangetype = SCORE
        else:
            p.fail(errors.SYNTAX)
    reverse = bool(reverse)
    rangetype = rangetype or RANK
    if limit != -1 and rangetype == RANK:
        p.fail(errors.ZRANGE_LIMIT_RANK)
    if withscores and rangetype == LEX:
        p.fail(errors.ZRANGE_WITHSCORES_LEX)
    p.check()
    if reverse and rangetype in (SCORE, LEX):
        minidx, maxidx = maxidx, minidx
    if rangetype == RANK:
        start, end = _long(args[minidx]), _long(args[maxidx])
    elif rangetype == SCORE:
        sr = score_range(args[minidx], args[maxidx])
    else:
        lr = lex_range(args[minidx], args[maxidx])
    z, now = _z(ctx), ctx.ks.now()
    zs = Z.read_lookup(z, key, now)
    if zs is None:
        entries: list[Z.Entry] = []
    else:
        o = Z.order_of(z, zs, now)
        if rangetype == RANK:
            r = Z.sanitize_ranks(start, end, len(o))
            entries = [] if r is None else Z.rank_range(o, r[0], r[1], reverse)
        elif rangetype == SCORE:
            entries = Z.score_range(o, sr, reverse, offset, limit)
        else:
            entries = Z.lex_range(o, lr, reverse, offset, limit)
    if store is not None:
        return store_entries(ctx, store, b"zrangestore", entries)
    return with_scores(ctx, entries, withscores)


_captured: list[tuple[bytes, bytes, list[Z.Entry]]] | None = None


@contextlib.contextmanager
def stores_captured() -> Iterator[list[tuple[bytes, bytes, list[Z.Entry]]]]:
    """Within it, a STORE command's write (``store_entries``) is not made but kept, as
    (destination, event, entries), in the list it gives: a node of several shard workers
    runs the command where its source lives and writes the result where the destination
    lives (``shards/units.py``)."""
    global _captured
    outer, _captured = _captured, []
    try:
        yield _captured
    finally:
        _captured = outer


def store_entries(ctx, dest: bytes, event: bytes, entries) -> int:
    """A STORE's write (``Z.store``) and its event: ``event`` for a result, ``del`` when
    an empty result deleted the destination, nothing when there was nothing to delete."""
    if _captured is not None:
        kept = list(entries)
        _captured.append((dest, event, kept))
        return len(kept)
    ks, now = ctx.ks, ctx.ks.now()
    on = ctx.node.events.on
    items = list(entries)
    existed = on and not items and ks.exists(dest, now)
    n = Z.store(_z(ctx), dest, items, now)
    if n:
        fire(ctx, "z", event, dest)
    elif existed:
        fire(ctx, "g", b"del", dest)
    return n


def _long(b: bytes) -> int:
    return A.int_arg(b)


@command("zrange", -4, "readonly", specs="RO ACCESS index 1 range 0", group="sorted-set", acl=_ACL_R_SLOW,
         since="1.2.0", summary="Return a range of members in a sorted set",
         complexity="O(log(N)+M) with N being the number of elements in the sorted set and M the number of "
                    "elements returned.",
         syntax="key start stop [BYSCORE | BYLEX] [REV] [LIMIT offset count] [WITHSCORES]")
@ordered
def zrange(ctx, args: list[bytes]):
    if len(args) == 4:  # the common case, ZRANGE key start stop, without the option loop
        start, end = A.parse_ll(args[2]), A.parse_ll(args[3])
        if start is not None and end is not None:
            z, now = _z(ctx), ctx.ks.now()
            zs = Z.read_lookup(z, args[1], now)
            if zs is None:
                return []
            o = Z.order_of(z, zs, now)
            r = Z.sanitize_ranks(start, end, len(o))
            if r is None:
                return []
            return BulkArray([m for _, m in o.sl.islice(r[0], r[1] + 1)])
    return zrange_generic(ctx, args, 1, None, None, None)


@command("zrangestore", -5, "write denyoom", specs=("OW UPDATE index 1 range 0", "RO ACCESS index 2 range 0"),
         group="sorted-set", acl=_ACL_W_SLOW, since="6.2.0",
         summary="Store a range of members from sorted set into another key",
         complexity="O(log(N)+M) with N being the number of elements in the sorted set and M the number of "
                    "elements stored into the destination key.",
         syntax="dst src min max [BYSCORE | BYLEX] [REV] [LIMIT offset count]")
def zrangestore(ctx, args: list[bytes]):
    return zrange_generic(ctx, args, 2, args[1], None, None)


@command("zrevrange", -4, "readonly", specs="RO ACCESS index 1 range 0", group="sorted-set", acl=_ACL_R_SLOW,
         since="1.2.0", summary="Return a range of members in a sorted set, by index, with scores ordered from high "
                                "to low",
         complexity="O(log(N)+M) with N being the number of elements in the sorted set and M the number of "
                    "elements returned.",
         syntax="key start stop [WITHSCORES]")
@ordered
def zrevrange(ctx, args: list[bytes]):
    return zrange_generic(ctx, args, 1, None, RANK, True)


@command("zrangebyscore", -4, "readonly", specs="RO ACCESS index 1 range 0", group="sorted-set", acl=_ACL_R_SLOW,
         since="1.0.5", summary="Return a range of members in a sorted set, by score", complexity=_RANGE_COMPLEXITY,
         syntax="key min max [WITHSCORES] [LIMIT offset count]")
@ordered
def zrangebyscore(ctx, args: list[bytes]):
    return zrange_generic(ctx, args, 1, None, SCORE, False)


@command("zrevrangebyscore", -4, "readonly", specs="RO ACCESS index 1 range 0", group="sorted-set",
         acl=_ACL_R_SLOW, since="2.2.0",
         summary="Return a range of members in a sorted set, by score, with scores ordered from high to low",
         complexity=_RANGE_COMPLEXITY, syntax="key max min [WITHSCORES] [LIMIT offset count]")
@ordered
def zrevrangebyscore(ctx, args: list[bytes]):
    return zrange_generic(ctx, args, 1, None, SCORE, True)


@command("zrangebylex", -4, "readonly", specs="RO ACCESS index 1 range 0", group="sorted-set", acl=_ACL_R_SLOW,
         since="2.8.9", summary="Return a range of members in a sorted set, by lexicographical range",
         complexity=_RANGE_COMPLEXITY, syntax="key min max [LIMIT offset count]")
@ordered
def zrangebylex(ctx, args: list[bytes]):
    return zrange_generic(ctx, args, 1, None, LEX, False)


@command("zrevrangebylex", -4, "readonly", specs="RO ACCESS index 1 range 0", group="sorted-set",
         acl=_ACL_R_SLOW, since="2.8.9",
         summary="Return a range of members in a sorted set, by lexicographical range, ordered from higher to "
                 "lower strings.",
         complexity=_RANGE_COMPLEXITY, syntax="key max min [LIMIT offset count]")
@ordered
def zrevrangebylex(ctx, args: list[bytes]):
    return zrange_generic(ctx, args, 1, None, LEX, True)


def _zrank(ctx, args: list[bytes], reverse: bool):
    if len(args) == 3:  # the common case
        z, now = _z(ctx), ctx.ks.now()
        zs = Z.read_lookup(z, args[1], now)
        if zs is None:
            return None
        o = Z.order_of(z, zs, now)
        r = o.rank(args[2])
        return r if r is None or not reverse else len(o) - 1 - r
    if len(args) > 4:
        raise CommandError(errors.wrong_arity(args[0].decode("latin-1").lower()))
    withscore = False
    if len(args) == 4:
        if args[3].lower() != b"withscore":
            raise CommandError(errors.SYNTAX)
        withscore = True
    miss = NULL_ARRAY if withscore else None
    z, now = _z(ctx), ctx.ks.now()
    zs = Z.read_lookup(z, args[1], now)
    if zs is None:
        return miss
    o = Z.order_of(z, zs, now)
    r = o.rank(args[2])
    if r is None:
        return miss
    if reverse:
        r = len(o) - 1 - r
    return [r, Double(o.scores[args[2]])] if withscore else r


@command("zrank", -3, "readonly fast", specs="RO ACCESS index 1 range 0", group="sorted-set", acl=_ACL_R_FAST,
         since="2.0.0", summary="Determine the index of a member in a sorted set", complexity="O(log(N))",
         syntax="key member [WITHSCORE]")
@ordered
def zrank(ctx, args: list[bytes]):
    return _zrank(ctx, args, False)


@command("zrevrank", -3, "readonly fast", specs="RO ACCESS index 1 range 0", group="sorted-set", acl=_ACL_R_FAST,
         since="2.0.0", summary="Determine the index of a member in a sorted set, with scores ordered from high to low",
         complexity="O(log(N))", syntax="key member [WITHSCORE]")
@ordered
def zrevrank(ctx, args: list[bytes]):
    return _zrank(ctx, args, True)


# -- range removals -------------------------------------------------------------------------

def _zremrange(ctx, args: list[bytes], rangetype: str):
    if rangetype == RANK:
        start, end = _long(args[2]), _long(args[3])
    elif rangetype == SCORE:
        sr = score_range(args[2], args[3])
    else:
        lr = lex_range(args[2], args[3])
    z, now = _z(ctx), ctx.ks.now()
    zs = Z.lookup(z, args[1], now)
    if zs is None:
        return 0
    o = Z.order_of(z, zs, now)
    if rangetype == RANK:
        r = Z.sanitize_ranks(start, end, len(o))
        entries = [] if r is None else Z.rank_range(o, r[0], r[1], False)
    elif rangetype == SCORE:
        entries = Z.score_range(o, sr, False)
    else:
        entries = Z.lex_range(o, lr, False)
    Z.remove_entries(z, zs, entries, now)
    if entries:
        fire_removal(ctx, "z", b"zremrangeby" + rangetype.encode(), args[1])
    return len(entries)


@command("zremrangebyrank", 4, "write", specs="RW DELETE index 1 range 0", group="sorted-set", acl=_ACL_W_SLOW,
         since="2.0.0", summary="Remove all members in a sorted set within the given indexes",
         complexity="O(log(N)+M) with N being the number of elements in the sorted set and M the number of "
                    "elements removed by the operation.",
         syntax="key start stop")
def zremrangebyrank(ctx, args: list[bytes]):
    return _zremrange(ctx, args, RANK)


@command("zremrangebyscore", 4, "write", specs="RW DELETE index 1 range 0", group="sorted-set", acl=_ACL_W_SLOW,
         since="1.2.0", summary="Remove all members in a sorted set within the given scores",
         complexity="O(log(N)+M) with N being the number of elements in the sorted set and M the number of "
                    "elements removed by the operation.",
         syntax="key min max")
def zremrangebyscore(ctx, args: list[bytes]):
    return _zremrange(ctx, args, SCORE)


@command("zremrangebylex", 4, "write", specs="RW DELETE index 1 range 0", group="sorted-set", acl=_ACL_W_SLOW,
         since="2.8.9", summary="Remove all members in a sorted set between the given lexicographical range",
         complexity="O(log(N)+M) with N being the number of elements in the sorted set and M the number of "
                    "elements removed by the operation.",
         syntax="key min max")
def zremrangebylex(ctx, args: list[bytes]):
    return _zremrange(ctx, args, LEX)


# =========================================================================================
# Commands: pops, blocking pops
# =========================================================================================

def _pop_first(ctx, keys: list[bytes], highest: bool, count: int, check_types: bool
               ) -> tuple[bytes, list[Z.Entry]] | None:
    """genericZpopCommand's candidate: the first key holding a zset (WRONGTYPE on the
    first existing key of another type when ``check_types``), popped of ``count``."""
    z, now = _z(ctx), ctx.ks.now()
    for key in keys:
        try:
            zs = Z.lookup(z, key, now)
        except WrongType:
            if check_types:
                raise
            continue
        if zs is None:
            continue
        got = Z.pop(z, zs, count, highest, now)
        if got:
            fire_removal(ctx, "z", b"zpopmax" if highest else b"zpopmin", key)
        if got or check_types:
            return key, got
    return None


def _zpop(ctx, args: list[bytes], highest: bool):
    if len(args) > 3:
        raise CommandError(errors.SYNTAX)
    count = -1
    if len(args) == 3:
        count = A.int_arg(args[2], errors.OUT_OF_RANGE_POSITIVE)
        if count < 0:
            raise CommandError(errors.OUT_OF_RANGE_POSITIVE)
        if count == 0:  # (after the type check)
            Z.lookup(_z(ctx), args[1], ctx.ks.now())
            return []
    found = _pop_first(ctx, [args[1]], highest, 1 if count < 0 else count, True)
    if found is None:
        return []
    got = found[1]
    if ctx.proto == 3 and count != -1:
        return [[m, Double(s)] for s, m in got]
    out: list = []
    for s, m in got:
        out += (m, Double(s))
    return out


@command("zpopmin", -2, "write fast", specs="RW ACCESS DELETE index 1 range 0", group="sorted-set",
         acl=_ACL_W_FAST, since="5.0.0", summary="Remove and return members with the lowest scores in a sorted set",
         complexity="O(log(N)*M) with N being the number of elements in the sorted set, and M being the number of "
                    "elements popped.",
         syntax="key [count]")
def zpopmin(ctx, args: list[bytes]):
    return _zpop(ctx, args, False)


@command("zpopmax", -2, "write fast", specs="RW ACCESS DELETE index 1 range 0", group="sorted-set",
         acl=_ACL_W_FAST, since="5.0.0", summary="Remove and return members with the highest scores in a sorted set",
         complexity="O(log(N)*M) with N being the number of elements in the sorted set, and M being the number of "
                    "elements popped.",
         syntax="key [count]")
def zpopmax(ctx, args: list[bytes]):
    return _zpop(ctx, args, True)


def mpop_args(args: list[bytes], at: int) -> tuple[list[bytes], bool, int]:
    """zmpopGenericCommand's parse: numkeys at ``at``, the keys, MIN|MAX, [COUNT n]."""
    v = A.parse_ll(args[at])
    if v is None or v < 1:
        raise CommandError(errors.NUMKEYS_POSITIVE)
    where = at + v + 1
    if where >= len(args):
        raise CommandError(errors.SYNTAX)
    p = A.Options(args, where)
    w = p.word()
    if w not in (b"min", b"max"):
        raise CommandError(errors.SYNTAX)
    p.value()
    count = -1
    while p.more():
        if count == -1 and p.accept(b"count", 1):
            c = A.parse_ll(p.value())
            if c is None or c < 1:
                p.fail(errors.COUNT_POSITIVE)
            else:
                count = c
        else:
            p.fail(errors.SYNTAX)
    p.check()
    return args[at + 1:where], w == b"max", 1 if count == -1 else count


def _mpop_reply(key: bytes, got: list[Z.Entry]) -> list:
    return [key, [[m, Double(s)] for s, m in got]]


@command("zmpop", -4, "write", specs="RW ACCESS DELETE index 1 keynum 0 1 1", getkeys="lmpop", group="sorted-set",
         acl=_ACL_W_SLOW, since="7.0.0", summary="Remove and return members with scores in a sorted set",
         complexity="O(K) + O(M*log(N)) where K is the number of provided keys, N being the number of elements in "
                    "the sorted set, and M being the number of elements popped.",
         syntax="numkeys key [key ...] MIN | MAX [COUNT count]")
def zmpop(ctx, args: list[bytes]):
    keys, highest, count = mpop_args(args, 1)
    found = _pop_first(ctx, keys, highest, count, True)
    return NULL_ARRAY if found is None else _mpop_reply(*found)


def _block(ctx, keys: list[bytes], highest: bool, count: int, timeout: float, mpop: bool):
    first = _pop_first(ctx, keys, highest, count, True)
    if first is not None:
        return _mpop_reply(*first) if mpop else [first[0], first[1][0][1], Double(first[1][0][0])]

    def attempt():
        got = _pop_first(ctx, keys, highest, count, False)
        if got is None:
            return None
        return _mpop_reply(*got) if mpop else [got[0], got[1][0][1], Double(got[1][0][0])]

    return ctx.node.blocking.block(ctx, keys, attempt, timeout, lambda: NULL_ARRAY)


@command("bzpopmin", -3, "write noscript blocking fast", specs="RW ACCESS DELETE index 1 range -2",
         group="sorted-set", acl="write sortedset fast blocking", since="5.0.0",
         summary="Remove and return the member with the lowest score from one or more sorted sets, or block until "
                 "one is available",
         complexity="O(log(N)) with N being the number of elements in the sorted set.",
         syntax="key [key ...] timeout")
def bzpopmin(ctx, args: list[bytes]):
    timeout = timeout_arg(ctx, args[-1])
    return _block(ctx, args[1:-1], False, 1, timeout, False)


@command("bzpopmax", -3, "write noscript blocking fast", specs="RW ACCESS DELETE index 1 range -2",
         group="sorted-set", acl="write sortedset fast blocking", since="5.0.0",
         summary="Remove and return the member with the highest score from one or more sorted sets, or block until "
                 "one is available",
         complexity="O(log(N)) with N being the number of elements in the sorted set.",
         syntax="key [key ...] timeout")
def bzpopmax(ctx, args: list[bytes]):
    timeout = timeout_arg(ctx, args[-1])
    return _block(ctx, args[1:-1], True, 1, timeout, False)


@command("bzmpop", -5, "write blocking", specs="RW ACCESS DELETE index 2 keynum 0 1 1", getkeys="blmpop",
         group="sorted-set", acl="write sortedset slow blocking", since="7.0.0",
         summary="Remove and return members with scores in a sorted set or block until one is available",
         complexity="O(K) + O(M*log(N)) where K is the number of provided keys, N being the number of elements in "
                    "the sorted set, and M being the number of elements popped.",
         syntax="timeout numkeys key [key ...] MIN | MAX [COUNT count]")
def bzmpop(ctx, args: list[bytes]):
    keys, highest, count = mpop_args(args, 2)
    timeout = timeout_arg(ctx, args[1])
    return _block(ctx, keys, highest, count, timeout, True)


# =========================================================================================
# Commands: union, intersection, difference
# =========================================================================================

SUM, MIN, MAX = "sum", "min", "max"


def _aggregate(target: float, val: float, how: str) -> float:
    """zunionInterAggregate (NaN of inf + -inf is 0)."""
    if how == SUM:
        target = target + val
        return 0.0 if target != target else target
    if how == MIN:
        return val if val < target else target
    return val if val > target else target


def setop(ctx, args: list[bytes], at: int, op: str, dest: bytes | None, card_only: bool = False):
    """zunionInterDiffGenericCommand: numkeys at ``at``; the keys are looked up (and
    type-checked) before the options are parsed, as Redis does."""
    setnum = setop_numkeys(args, at)
    z, now = _z(ctx), ctx.ks.now()
    sources: list[tuple[int, Z.Zset] | None] = [Z.lookup_setlike(z, k, now)
                                                 for k in args[at + 1:at + 1 + setnum]]
    members = [{} if s is None else Z.members_of(z, s[0], s[1], now) for s in sources]
    return setop_reply(ctx, args, at, op, dest, card_only, members)


def setop_numkeys(args: list[bytes], at: int) -> int:
    """The number of source keys of a ZUNION/ZINTER/ZDIFF(STORE)/ZINTERCARD (numkeys at
    ``at``): its errors come before any key is read."""
    setnum = A.int_arg(args[at])
    if setnum < 1:
        name = args[0].decode("latin-1").lower()
        raise CommandError(errors.zset_at_least_one_key(name))
    if setnum > len(args) - (at + 1):
        raise CommandError(errors.SYNTAX)
    return setnum


def setop_reply(ctx, args: list[bytes], at: int, op: str, dest: bytes | None, card_only: bool,
                members: list[dict[bytes, float]]):
    """The rest of ``setop`` once the sources are read (``members``: each key's members and
    scores, a set's at 1, a missing key's empty): the options, the algebra, the reply or
    the STORE (``store_entries``)."""
    entries = setop_result(args, at, op, dest is not None, card_only, members)
    if card_only:
        return entries
    if dest is not None:
        return store_entries(ctx, dest, b"z" + op.encode() + b"store", entries[1])
    return scored(ctx.proto, entries[1], entries[0])


def setop_result(args: list[bytes], at: int, op: str, store: bool, card_only: bool,
                 members: list[dict[bytes, float]]) -> Any:
    """The options (parsed after the keys were read) and the algebra over the sources'
    ``members``: the count for ZINTERCARD, else (WITHSCORES given, the entries in order)."""
    setnum = len(members)
    weights = [1.0] * setnum
    how = SUM
    withscores = False
    limit = 0
    p = A.Options(args, at + 1 + setnum)
    while p.more():
        if op != "diff" and not card_only and p.accept(b"weights", setnum):
            for i in range(setnum):
                weights[i] = double_arg(p.value(), errors.ZSET_WEIGHT_NOT_FLOAT)
        elif op != "diff" and not card_only and p.accept(b"aggregate", 1):
            a = p.word()
            p.value()
            if a in (b"sum", b"min", b"max"):
                how = a.decode()
            else:
                p.fail(errors.SYNTAX)
        elif not store and not card_only and p.accept(b"withscores"):
            withscores = True
        elif card_only and p.accept(b"limit", 1):
            lv = A.parse_ll(p.value())
            if lv is None or lv < 0:
                p.fail(errors.LIMIT_NEGATIVE)
            else:
                limit = lv
        else:
            p.fail(errors.SYNTAX)
    p.check()
    result: dict[bytes, float] = {}
    if op == "diff":
        first = members[0]
        rest = members[1:]
        result = {m: s for m, s in first.items() if not any(m in r for r in rest)}
    else:
        order = sorted(range(setnum), key=lambda i: len(members[i]))  # stable, as glibc's qsort
        srcs = [(members[i], weights[i]) for i in order]
        if op == "inter":
            if srcs[0][0]:
                count = 0
                base, w0 = srcs[0]
                for m in base:
                    sc = w0 * base[m]
                    if sc != sc:
                        sc = 0.0
                    ok = True
                    for other, w in srcs[1:]:
                        v = other.get(m)
                        if v is None:
                            ok = False
                            break
                        sc = _aggregate(sc, v * w, how)
                    if not ok:
                        continue
                    if card_only:
                        count += 1
                        if limit and count >= limit:
                            break
                    else:
                        result[m] = sc
                if card_only:
                    return count
            elif card_only:
                return 0
        else:
            for src, w in srcs:
                for m, v in src.items():
                    sc = w * v
                    if sc != sc:
                        sc = 0.0
                    if m in result:
                        result[m] = _aggregate(result[m], sc, how)
                    else:
                        result[m] = sc
    return withscores, sorted((s, m) for m, s in result.items())


_SETOP_SYNTAX = "numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM | MIN | MAX] [WITHSCORES]"


@command("zunion", -3, "readonly", specs="RO ACCESS index 1 keynum 0 1 1", getkeys="zunion_inter_diff",
         group="sorted-set", acl=_ACL_R_SLOW, since="6.2.0", summary="Add multiple sorted sets",
         complexity="O(N)+O(M*log(M)) with N being the sum of the sizes of the input sorted sets, and M being the "
                    "number of elements in the resulting sorted set.",
         syntax=_SETOP_SYNTAX)
def zunion(ctx, args: list[bytes]):
    return setop(ctx, args, 1, "union", None)


@command("zinter", -3, "readonly", specs="RO ACCESS index 1 keynum 0 1 1", getkeys="zunion_inter_diff",
         group="sorted-set", acl=_ACL_R_SLOW, since="6.2.0", summary="Intersect multiple sorted sets",
         complexity="O(N*K)+O(M*log(M)) worst case with N being the smallest input sorted set, K being the number "
                    "of input sorted sets and M being the number of elements in the resulting sorted set.",
         syntax=_SETOP_SYNTAX)
def zinter(ctx, args: list[bytes]):
    return setop(ctx, args, 1, "inter", None)


@command("zdiff", -3, "readonly", specs="RO ACCESS index 1 keynum 0 1 1", getkeys="zunion_inter_diff",
         group="sorted-set", acl=_ACL_R_SLOW, since="6.2.0", summary="Subtract multiple sorted sets",
         complexity="O(L + (N-K)log(N)) worst case where L is the total number of elements in all the sets, N is "
                    "the size of the first set, and K is the size of the result set.",
         syntax="numkeys key [key ...] [WITHSCORES]")
def zdiff(ctx, args: list[bytes]):
    return setop(ctx, args, 1, "diff", None)


_STORE_SPECS = ("OW UPDATE index 1 range 0", "RO ACCESS index 2 keynum 0 1 1")


@command("zunionstore", -4, "write denyoom", specs=_STORE_SPECS, getkeys="zunion_inter_diff_store",
         group="sorted-set", acl=_ACL_W_SLOW, since="2.0.0",
         summary="Add multiple sorted sets and store the resulting sorted set in a new key",
         complexity="O(N)+O(M log(M)) with N being the sum of the sizes of the input sorted sets, and M being the "
                    "number of elements in the resulting sorted set.",
         syntax="destination numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM | MIN | MAX]")
def zunionstore(ctx, args: list[bytes]):
    return setop(ctx, args, 2, "union", args[1])


@command("zinterstore", -4, "write denyoom", specs=_STORE_SPECS, getkeys="zunion_inter_diff_store",
         group="sorted-set", acl=_ACL_W_SLOW, since="2.0.0",
         summary="Intersect multiple sorted sets and store the resulting sorted set in a new key",
         complexity="O(N*K)+O(M*log(M)) worst case with N being the smallest input sorted set, K being the number "
                    "of input sorted sets and M being the number of elements in the resulting sorted set.",
         syntax="destination numkeys key [key ...] [WEIGHTS weight [weight ...]] [AGGREGATE SUM | MIN | MAX]")
def zinterstore(ctx, args: list[bytes]):
    return setop(ctx, args, 2, "inter", args[1])


@command("zdiffstore", -4, "write denyoom", specs=_STORE_SPECS, getkeys="zunion_inter_diff_store",
         group="sorted-set", acl=_ACL_W_SLOW, since="6.2.0",
         summary="Subtract multiple sorted sets and store the resulting sorted set in a new key",
         complexity="O(L + (N-K)log(N)) worst case where L is the total number of elements in all the sets, N is "
                    "the size of the first set, and K is the size of the result set.",
         syntax="destination numkeys key [key ...]")
def zdiffstore(ctx, args: list[bytes]):
    return setop(ctx, args, 2, "diff", args[1])


@command("zintercard", -3, "readonly", specs="RO ACCESS index 1 keynum 0 1 1", getkeys="zunion_inter_diff",
         group="sorted-set", acl=_ACL_R_SLOW, since="7.0.0",
         summary="Intersect multiple sorted sets and return the cardinality of the result",
         complexity="O(N*K) worst case with N being the smallest input sorted set, K being the number of input "
                    "sorted sets.",
         syntax="numkeys key [key ...] [LIMIT limit]")
def zintercard(ctx, args: list[bytes]):
    return setop(ctx, args, 1, "inter", None, card_only=True)


# =========================================================================================
# Commands: random members, scan
# =========================================================================================

@command("zrandmember", -2, "readonly", specs="RO ACCESS index 1 range 0", group="sorted-set", acl=_ACL_R_SLOW,
         since="6.2.0", summary="Get one or multiple random elements from a sorted set",
         complexity="O(N) where N is the number of elements returned", syntax="key [count [WITHSCORES]]")
@ordered
def zrandmember(ctx, args: list[bytes]):
    z, now = _z(ctx), ctx.ks.now()
    if len(args) >= 3:
        count = A.int_range_arg(args[2], -LLONG_MAX, LLONG_MAX)
        withscores = False
        if len(args) > 4 or (len(args) == 4 and args[3].lower() != b"withscores"):
            raise CommandError(errors.SYNTAX)
        if len(args) == 4:
            withscores = True
            if count < -LLONG_MAX // 2 or count > LLONG_MAX // 2:
                raise CommandError(errors.OUT_OF_RANGE)
        zs = Z.read_lookup(z, args[1], now)
        if zs is None or count == 0:
            return []
        o = Z.order_of(z, zs, now)
        got = Z.random_entries(o, abs(count), count > 0)
        return with_scores(ctx, got, withscores)
    zs = Z.read_lookup(z, args[1], now)
    if zs is None:
        return None
    o = Z.order_of(z, zs, now)
    got = Z.random_entries(o, 1, False)
    return got[0][1] if got else None


@command("zscan", -3, "readonly", specs="RO ACCESS index 1 range 0", group="sorted-set", acl=_ACL_R_SLOW,
         since="2.8.0", summary="Incrementally iterate sorted sets elements and associated scores",
         complexity="O(1) for every call. O(N) for a complete iteration, including enough command calls for the "
                    "cursor to return back to 0. N is the number of elements inside the collection..",
         syntax="key cursor [MATCH pattern] [COUNT count]")
@ordered
def zscan(ctx, args: list[bytes]):
    cursor = A.parse_cursor(args[2])
    z, now = _z(ctx), ctx.ks.now()
    zs = Z.read_lookup(z, args[1], now)
    if zs is None:  # (before the options are parsed, as Redis does)
        return [b"0", []]
    count, pattern, _, _ = A.scan_options(args, 3)
    nxt, got = Z.scan(Z.order_of(z, zs, now), cursor, count)
    out: list[bytes] = []
    for s, m in got:
        if pattern is None or A.stringmatch(pattern, m):
            out += (m, format_score(s))
    return [b"%d" % nxt, out]
