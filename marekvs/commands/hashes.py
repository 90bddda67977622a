"""Hash commands (Redis 7.0 ``t_hash.c``, and Redis 7.4's field TTLs) over per-field records.

A hash is a collection head plus one observed-remove element per field
(``keyspace/hashes.py`` holds the operations, ``keyspace/members.py`` what fields share
with set and zset members). Each handler parses its arguments in Redis's order (so the
same bad input gets the same error), calls one keyspace operation and returns the reply
value. Replicated semantics: docs/compatibility.md, "Hashes".

The field TTL commands of Redis 7.4 (HEXPIRE, HPEXPIRE, HEXPIREAT, HPEXPIREAT, HTTL,
HPTTL, HEXPIRETIME, HPEXPIRETIME, HPERSIST) set and read each field record's own deadline;
their replies are 7.4's (-2 no such field, -1 no TTL, 0 condition not met, 1 done,
2 deleted by a deadline in the past). HSCAN's NOVALUES is 7.4's too; so are their events
(``hexpire``, ``hpersist``, ``hdel`` for a deadline in the past).

Keyspace notifications: each command fires Redis 7.0's events after its write, in Redis's
order, and ``del`` when it emptied its key (``commands/members.py``: ``fire``,
``fire_removal``); its reads count INFO's keyspace hits and misses as Redis's
``lookupKeyRead`` does (the keyspace's ``read_lookup`` and counted reads).
"""

from __future__ import annotations

from fractions import Fraction

from marekvs.commands import args as A
from marekvs.commands import errors, reply
from marekvs.commands.errors import CommandError
from marekvs.commands.members import fire, fire_removal
from marekvs.commands.table import command
from marekvs.keyspace import hashes as khash

_ACL_W_FAST = "write hash fast"
_ACL_R_FAST = "read hash fast"
_ACL_R_SLOW = "read hash slow"
_RW_UPDATE = "RW UPDATE index 1 range 0"
_RO_ACCESS = "RO ACCESS index 1 range 0"
_RO = "RO index 1 range 0"
_ALL_COMPLEXITY = "O(N) where N is the size of the hash."
_SCAN_COMPLEXITY = ("O(1) for every call. O(N) for a complete iteration, including enough command "
                    "calls for the cursor to return back to 0. N is the number of elements inside "
                    "the collection..")
_FIELDS_COMPLEXITY = "O(N) where N is the number of arguments to the command"
LONG_MAX = (1 << 63) - 1
MAX_REPLY = (1 << 31) - 1  # elements one random reply may hold (errors.TOO_MANY_REPLIES)
# Redis 7.4's field deadlines stop at EB_EXPIRE_TIME_MAX >> 2 (ms)
HFE_MAX_ABS_TIME_MSEC = ((1 << 48) - 1) >> 2


# =========================================================================================
# Internal API
# =========================================================================================

def _hash_int(old: bytes | None) -> int:
    if old is None:
        return 0
    v = A.parse_ll(old)
    if v is None:
        raise CommandError(errors.HASH_NOT_INTEGER)
    return v


def pairs_reply(ctx, items: list[tuple[bytes, bytes]], withvalues: bool) -> list:
    """HRANDFIELD's shape: fields; with values a flat list (RESP2) or [field, value]
    pairs (RESP3)."""
    if not withvalues:
        return [f for f, _ in items]
    if ctx.proto >= 3:
        return [[f, v] for f, v in items]
    return [x for f, v in items for x in (f, v)]


# -- field TTLs: Redis 7.4's argument grammar -------------------------------------------------

_CONDITIONS = {b"nx": khash.NX, b"xx": khash.XX, b"gt": khash.GT, b"lt": khash.LT}


def _fields(args: list[bytes], at: int, msg: str) -> list[bytes]:
    """``FIELDS numfields field...`` with FIELDS at ``at``: the fields."""
    if args[at].lower() != b"fields":
        raise CommandError(errors.FIELDS_MISSING)
    n = A.parse_ll(args[at + 1])
    if n is None or n < 1:
        raise CommandError(msg)
    if n != len(args) - at - 2:
        raise CommandError(errors.NUMFIELDS_MISMATCH)
    return args[at + 2:]


def _hexpire(ctx, args: list[bytes], name: str, seconds: bool, relative: bool):
    ks, key = ctx.ks, args[1]
    now = ks.now()
    found = khash.lookup(ks, key, now)  # WRONGTYPE before anything else, as Redis 7.4
    when = A.int_arg(args[2])
    if when < 0:
        raise CommandError(errors.EXPIRE_NEGATIVE)
    base = now if relative else 0
    if seconds:
        if when > HFE_MAX_ABS_TIME_MSEC // 1000:
            raise CommandError(errors.invalid_expire(name))
        when *= 1000
    if when > HFE_MAX_ABS_TIME_MSEC - base:
        raise CommandError(errors.invalid_expire(name))
    cond = _CONDITIONS.get(args[3].lower(), 0)
    fields = _fields(args, 4 if cond else 3, errors.NUMFIELDS_POSITIVE)
    out = khash.expire_fields(ks, found, fields, when + base, cond, now)
    if khash.DELETED in out:  # (a deadline in the past deletes every field it names)
        fire_removal(ctx, "h", b"hdel", key)
    elif khash.SET in out:
        fire(ctx, "h", b"hexpire", key)
    return out


def _httl(ctx, args: list[bytes], ms: bool, absolute: bool):
    ks, key = ctx.ks, args[1]
    now = ks.now()
    khash.read_lookup(ks, key, now)
    fields = _fields(args, 2, errors.NUMFIELDS_NOT_POSITIVE_INT)
    out = []
    for d in khash.field_deadlines(ks, key, fields, now):
        if d < 0:
            out.append(d)
        else:
            left = d if absolute else d - now
            out.append(left if ms else (left + 999) // 1000)
    return out


# =========================================================================================
# Commands
# =========================================================================================

@command("hset", -4, "write denyoom fast", specs=_RW_UPDATE, group="hash", acl=_ACL_W_FAST,
         summary="Set the string value of a hash field", since="2.0.0",
         complexity="O(1) for each field/value pair added, so O(N) to add N field/value pairs when "
                    "the command is called with multiple field/value pairs.",
         syntax="key field value [field value ...]")
@command("hmset", -4, "write denyoom fast", specs=_RW_UPDATE, group="hash", acl=_ACL_W_FAST,
         summary="Set multiple hash fields to multiple values", since="2.0.0",
         complexity="O(N) where N is the number of fields being set.",
         syntax="key field value [field value ...]")
def hset(ctx, args: list[bytes]):
    if len(args) % 2:
        raise CommandError(errors.wrong_arity(args[0].decode("latin-1").lower()))
    on = ctx.node.events.on
    added = khash.set_fields(ctx.ks, args[1], args[2:], ctx.ks.now())
    if on:
        fire(ctx, "h", b"hset", args[1])
    return reply.OK if args[0].lower() == b"hmset" else added


@command("hsetnx", 4, "write denyoom fast", specs="RW INSERT index 1 range 0", group="hash", acl=_ACL_W_FAST,
         summary="Set the value of a hash field, only if the field does not exist", since="2.0.0",
         complexity="O(1)", syntax="key field value")
def hsetnx(ctx, args: list[bytes]):
    added = khash.set_fields(ctx.ks, args[1], args[2:], ctx.ks.now(), nx=True)
    if added:
        fire(ctx, "h", b"hset", args[1])
    return added


@command("hget", 3, "readonly fast", specs=_RO_ACCESS, group="hash", acl=_ACL_R_FAST,
         summary="Get the value of a hash field", since="2.0.0", complexity="O(1)", syntax="key field")
def hget(ctx, args: list[bytes]):
    return khash.get(ctx.ks, args[1], args[2], ctx.ks.now())


@command("hmget", -3, "readonly fast", specs=_RO_ACCESS, group="hash", acl=_ACL_R_FAST,
         summary="Get the values of all the given hash fields", since="2.0.0",
         complexity="O(N) where N is the number of fields being requested.", syntax="key field [field ...]")
def hmget(ctx, args: list[bytes]):
    return khash.get_many(ctx.ks, args[1], args[2:], ctx.ks.now())


@command("hdel", -3, "write fast", specs="RW DELETE index 1 range 0", group="hash", acl=_ACL_W_FAST,
         summary="Delete one or more hash fields", since="2.0.0",
         complexity="O(N) where N is the number of fields to be removed.", syntax="key field [field ...]")
def hdel(ctx, args: list[bytes]):
    n = khash.delete_fields(ctx.ks, args[1], args[2:], ctx.ks.now())
    if n:
        fire_removal(ctx, "h", b"hdel", args[1])
    return n


@command("hexists", 3, "readonly fast", specs=_RO, group="hash", acl=_ACL_R_FAST,
         summary="Determine if a hash field exists", since="2.0.0", complexity="O(1)", syntax="key field")
def hexists(ctx, args: list[bytes]):
    return int(khash.get(ctx.ks, args[1], args[2], ctx.ks.now()) is not None)


@command("hstrlen", 3, "readonly fast", specs=_RO, group="hash", acl=_ACL_R_FAST,
         summary="Get the length of the value of a hash field", since="3.2.0", complexity="O(1)",
         syntax="key field")
def hstrlen(ctx, args: list[bytes]):
    return len(khash.get(ctx.ks, args[1], args[2], ctx.ks.now()) or b"")


@command("hlen", 2, "readonly fast", specs=_RO, group="hash", acl=_ACL_R_FAST,
         summary="Get the number of fields in a hash", since="2.0.0", complexity="O(1)", syntax="key")
def hlen(ctx, args: list[bytes]):
    return khash.length(ctx.ks, args[1], ctx.ks.now())


@command("hkeys", 2, "readonly", specs=_RO_ACCESS, group="hash", acl=_ACL_R_SLOW,
         summary="Get all the fields in a hash", since="2.0.0", complexity=_ALL_COMPLEXITY, syntax="key")
def hkeys(ctx, args: list[bytes]):
    return [f for f, _ in khash.items(ctx.ks, args[1], ctx.ks.now())]


@command("hvals", 2, "readonly", specs=_RO_ACCESS, group="hash", acl=_ACL_R_SLOW,
         summary="Get all the values in a hash", since="2.0.0", complexity=_ALL_COMPLEXITY, syntax="key")
def hvals(ctx, args: list[bytes]):
    return [v for _, v in khash.items(ctx.ks, args[1], ctx.ks.now())]


@command("hgetall", 2, "readonly", specs=_RO_ACCESS, group="hash", acl=_ACL_R_SLOW,
         summary="Get all the fields and values in a hash", since="2.0.0", complexity=_ALL_COMPLEXITY,
         syntax="key")
def hgetall(ctx, args: list[bytes]):
    return reply.Map(x for fv in khash.items(ctx.ks, args[1], ctx.ks.now()) for x in fv)


@command("hincrby", 4, "write denyoom fast", specs="RW ACCESS UPDATE index 1 range 0", group="hash",
         acl=_ACL_W_FAST, summary="Increment the integer value of a hash field by the given number",
         since="2.0.0", complexity="O(1)", syntax="key field increment")
def hincrby(ctx, args: list[bytes]):
    by = A.int_arg(args[3])

    def compute(old: bytes | None) -> bytes:
        v = _hash_int(old)
        if (by < 0 and v < 0 and by < A.LLONG_MIN - v) or (by > 0 and v > 0 and by > A.LLONG_MAX - v):
            raise CommandError(errors.OVERFLOW)
        return b"%d" % (v + by)

    v = int(khash.update(ctx.ks, args[1], args[2], compute, ctx.ks.now()))
    fire(ctx, "h", b"hincrby", args[1])
    return v


@command("hincrbyfloat", 4, "write denyoom fast", specs="RW ACCESS UPDATE index 1 range 0", group="hash",
         acl=_ACL_W_FAST, summary="Increment the float value of a hash field by the given amount",
         since="2.6.0", complexity="O(1)", syntax="key field increment")
def hincrbyfloat(ctx, args: list[bytes]):
    by = A.parse_ld(args[3])
    if by is None:
        raise CommandError(errors.NOT_FLOAT)
    if isinstance(by, float):
        raise CommandError(errors.NAN_OR_INFINITY)

    def compute(old: bytes | None) -> bytes:
        cur = Fraction(0) if old is None else A.parse_ld(old)
        if cur is None:
            raise CommandError(errors.HASH_NOT_FLOAT)
        total = A.ld_add(cur, by)
        if isinstance(total, float):
            raise CommandError(errors.NAN_OR_INF)
        return A.format_ld(total)

    v = khash.update(ctx.ks, args[1], args[2], compute, ctx.ks.now())
    fire(ctx, "h", b"hincrbyfloat", args[1])
    return v


@command("hrandfield", -2, "readonly", specs=_RO_ACCESS, group="hash", acl=_ACL_R_SLOW,
         summary="Get one or multiple random fields from a hash", since="6.2.0",
         complexity="O(N) where N is the number of fields returned", syntax="key [count [WITHVALUES]]")
def hrandfield(ctx, args: list[bytes]):
    ks, now = ctx.ks, ctx.ks.now()
    if len(args) == 2:
        khash.read_lookup(ks, args[1], now)
        found = khash.random_items(ctx.ks, args[1], 1, False, now)
        return found[0][0] if found else None
    n = A.int_range_arg(args[2], -LONG_MAX, LONG_MAX)
    if len(args) > 4 or (len(args) == 4 and args[3].lower() != b"withvalues"):
        raise CommandError(errors.SYNTAX)
    withvalues = len(args) == 4
    if withvalues and (n < -LONG_MAX // 2 or n > LONG_MAX // 2):
        raise CommandError(errors.OUT_OF_RANGE)
    _, h = khash.read_lookup(ks, args[1], now)
    if n == 0 or h is None:
        return []
    distinct = n > 1
    if not distinct and -n > MAX_REPLY:
        raise CommandError(errors.TOO_MANY_REPLIES)
    found = khash.random_items(ctx.ks, args[1], abs(n), distinct, now)
    return pairs_reply(ctx, found or [], withvalues)


@command("hscan", -3, "readonly", specs=_RO_ACCESS, group="hash", acl=_ACL_R_SLOW,
         summary="Incrementally iterate hash fields and associated values", since="2.8.0",
         complexity=_SCAN_COMPLEXITY, syntax="key cursor [MATCH pattern] [COUNT count] [NOVALUES]")
def hscan(ctx, args: list[bytes]):
    cursor = A.parse_cursor(args[2])
    ks, now = ctx.ks, ctx.ks.now()
    hk, h = khash.read_lookup(ks, args[1], now)
    if h is None or not ks.present(hk, h, now):  # (no key: no option is parsed)
        return [b"0", []]
    count, pattern, novalues, _ = A.scan_options(args, 3, novalues_ok=True)
    nxt, page = khash.scan(ks, args[1], cursor, count, now)
    if pattern is not None:
        page = [(f, v) for f, v in page if A.stringmatch(pattern, f)]
    flat = [f for f, _ in page] if novalues else [x for fv in page for x in fv]
    return [b"%d" % nxt, flat]


# -- field TTLs (Redis 7.4) ---------------------------------------------------------------------

_HEXPIRE_SYNTAX = " [NX | XX | GT | LT] FIELDS numfields field [field ...]"


@command("hexpire", -6, "write denyoom fast", specs=_RW_UPDATE, group="hash", acl=_ACL_W_FAST,
         summary="Set expiry for hash field using relative time to expire (seconds)", since="7.4.0",
         complexity=_FIELDS_COMPLEXITY, syntax="key seconds" + _HEXPIRE_SYNTAX)
def hexpire(ctx, args: list[bytes]):
    return _hexpire(ctx, args, "hexpire", seconds=True, relative=True)


@command("hpexpire", -6, "write denyoom fast", specs=_RW_UPDATE, group="hash", acl=_ACL_W_FAST,
         summary="Set expiry for hash field using relative time to expire (milliseconds)", since="7.4.0",
         complexity=_FIELDS_COMPLEXITY, syntax="key milliseconds" + _HEXPIRE_SYNTAX)
def hpexpire(ctx, args: list[bytes]):
    return _hexpire(ctx, args, "hpexpire", seconds=False, relative=True)


@command("hexpireat", -6, "write denyoom fast", specs=_RW_UPDATE, group="hash", acl=_ACL_W_FAST,
         summary="Set expiry for hash field using an absolute Unix timestamp (seconds)", since="7.4.0",
         complexity=_FIELDS_COMPLEXITY, syntax="key unix-time-seconds" + _HEXPIRE_SYNTAX)
def hexpireat(ctx, args: list[bytes]):
    return _hexpire(ctx, args, "hexpireat", seconds=True, relative=False)


@command("hpexpireat", -6, "write denyoom fast", specs=_RW_UPDATE, group="hash", acl=_ACL_W_FAST,
         summary="Set expiry for hash field using an absolute Unix timestamp (milliseconds)", since="7.4.0",
         complexity=_FIELDS_COMPLEXITY, syntax="key unix-time-milliseconds" + _HEXPIRE_SYNTAX)
def hpexpireat(ctx, args: list[bytes]):
    return _hexpire(ctx, args, "hpexpireat", seconds=False, relative=False)


_HTTL_SYNTAX = "key FIELDS numfields field [field ...]"


@command("httl", -5, "readonly fast", specs=_RO_ACCESS, group="hash", acl=_ACL_R_FAST,
         summary="Returns the TTL in seconds of a hash field.", since="7.4.0",
         complexity=_FIELDS_COMPLEXITY, syntax=_HTTL_SYNTAX)
def httl(ctx, args: list[bytes]):
    return _httl(ctx, args, ms=False, absolute=False)


@command("hpttl", -5, "readonly fast", specs=_RO_ACCESS, group="hash", acl=_ACL_R_FAST,
         summary="Returns the TTL in milliseconds of a hash field.", since="7.4.0",
         complexity=_FIELDS_COMPLEXITY, syntax=_HTTL_SYNTAX)
def hpttl(ctx, args: list[bytes]):
    return _httl(ctx, args, ms=True, absolute=False)


@command("hexpiretime", -5, "readonly fast", specs=_RO_ACCESS, group="hash", acl=_ACL_R_FAST,
         summary="Returns the expiration time of a hash field as a Unix timestamp, in seconds.",
         since="7.4.0", complexity=_FIELDS_COMPLEXITY, syntax=_HTTL_SYNTAX)
def hexpiretime(ctx, args: list[bytes]):
    return _httl(ctx, args, ms=False, absolute=True)


@command("hpexpiretime", -5, "readonly fast", specs=_RO_ACCESS, group="hash", acl=_ACL_R_FAST,
         summary="Returns the expiration time of a hash field as a Unix timestamp, in msec.",
         since="7.4.0", complexity=_FIELDS_COMPLEXITY, syntax=_HTTL_SYNTAX)
def hpexpiretime(ctx, args: list[bytes]):
    return _httl(ctx, args, ms=True, absolute=True)


@command("hpersist", -5, "write fast", specs=_RW_UPDATE, group="hash", acl=_ACL_W_FAST,
         summary="Removes the expiration time for each specified field", since="7.4.0",
         complexity=_FIELDS_COMPLEXITY, syntax=_HTTL_SYNTAX)
def hpersist(ctx, args: list[bytes]):
    ks, key = ctx.ks, args[1]
    now = ks.now()
    found = khash.lookup(ks, key, now)
    fields = _fields(args, 2, errors.NUMFIELDS_NOT_POSITIVE_INT)
    out = khash.persist_fields(ks, found, fields, now)
    if khash.SET in out:
        fire(ctx, "h", b"hpersist", key)
    return out
