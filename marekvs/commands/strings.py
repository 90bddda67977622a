"""String commands (Redis 7.0 ``t_string.c``) over the data model's string records.

A string key holds one record at ``[pid]s[key]``: either a plain LWW string (record
type 0) or a PN counter (type 6); ``keyspace/strings.py`` holds the operations on them.
The first half of this module is the family's own algorithms on values (GETRANGE's
arithmetic, LCS); the second half is the commands, each of which parses its arguments,
calls keyspace operations and returns the reply value.

Counters and TTLs follow ``keyspace/strings.py`` (the PN-counter INCR is core's
``pncounter.incr_value``). INCRBYFLOAT is computed here, in the x87 long double Redis
uses (``args.py``), and written back as a plain string that keeps the key's deadline.

Every write is one ``engine.apply`` call, so a command is one replication-log entry.
"""

from __future__ import annotations

from fractions import Fraction

from marekvs.commands import args as A
from marekvs.commands import errors, reply
from marekvs.commands.errors import CommandError
from marekvs.commands.table import command
from marekvs.core import envelope as env
from marekvs.core import pncounter
from marekvs.core.pncounter import PNCounter
from marekvs.keyspace import strings as kstr
from marekvs.keyspace.status import WrongType

_ACL_W_SLOW = "write string slow"
_ACL_W_FAST = "write string fast"
_ACL_R_FAST = "read string fast"
_ACL_R_SLOW = "read string slow"
_EXPIRE_SYNTAX = ("[EX seconds | PX milliseconds | EXAT unix-time-seconds | "
                  "PXAT unix-time-milliseconds")
_GETRANGE_COMPLEXITY = (
    "O(N) where N is the length of the returned string. The complexity is ultimately "
    "determined by the returned length, but because creating a substring from an "
    "existing string is very cheap, it can be considered O(1) for small strings.")


# =========================================================================================
# Internal API: string algorithms of the commands (the records are keyspace/strings.py's)
# =========================================================================================

def getrange_slice(s: bytes, start: int, end: int) -> bytes:
    """GETRANGE's index arithmetic, quirks included (``getrangeCommand``)."""
    n = len(s)
    if start < 0 and end < 0 and start > end:
        return b""
    if start < 0:
        start += n
    if end < 0:
        end += n
    start = max(start, 0)
    end = max(end, 0)
    if end >= n:
        end = n - 1
    if start > end or n == 0:
        return b""
    return s[start : end + 1]


class LcsTable:
    """LCS lengths of every prefix pair, bit-parallel (Hyyroe, "Bit-parallel LCS-length
    computation revisited", 2004): row i is one int ``V_i`` of len(b) bits, updated
    per byte of ``a`` as ``V = (V + U) | (V - U)`` with ``U = V & match_mask[byte]``.
    ``LCS(a[:i], b[:j])`` is the number of zero bits among the low j bits of ``V_i``.
    That is O(len(a) * len(b) / word) time and len(a) * len(b) / 8 bytes, where
    Redis's uint32 table takes 32x the memory and a Python table far longer."""

    def __init__(self, a: bytes, b: bytes):
        masks: dict[int, int] = {}
        for j, ch in enumerate(b):
            masks[ch] = masks.get(ch, 0) | (1 << j)
        full = (1 << len(b)) - 1
        v = full
        rows = [v]
        for ch in a:
            u = v & masks.get(ch, 0)
            v = ((v + u) | (v - u)) & full
            rows.append(v)
        self.rows = rows

    def __call__(self, i: int, j: int) -> int:
        return j - (self.rows[i] & ((1 << j) - 1)).bit_count()


def lcs_walk(a: bytes, b: bytes, t: LcsTable, minmatchlen: int,
             withmatchlen: bool) -> tuple[bytes, list[list]]:
    """Backtrack ``lcsCommand``'s way: the LCS string and the match ranges it emits."""
    alen = len(a)
    i, j = alen, len(b)
    out = bytearray()
    ranges: list[list] = []
    a_start = alen  # alen: no range open
    a_end = b_start = b_end = 0
    while i > 0 and j > 0:
        emit = False
        if a[i - 1] == b[j - 1]:
            out.append(a[i - 1])
            if a_start == alen:
                a_start = a_end = i - 1
                b_start = b_end = j - 1
            elif a_start == i and b_start == j:
                a_start -= 1
                b_start -= 1
            else:
                emit = True
            if a_start == 0 or b_start == 0:
                emit = True
            i -= 1
            j -= 1
        else:
            if t(i - 1, j) > t(i, j - 1):
                i -= 1
            else:
                j -= 1
            if a_start != alen:
                emit = True
        if emit:
            mlen = a_end - a_start + 1
            if minmatchlen == 0 or mlen >= minmatchlen:
                m: list = [[a_start, a_end], [b_start, b_end]]
                if withmatchlen:
                    m.append(mlen)
                ranges.append(m)
            a_start = alen
    out.reverse()
    return bytes(out), ranges


# =========================================================================================
# Commands
# =========================================================================================

@command("set", -3, "write denyoom", group="string", acl=_ACL_W_SLOW, getkeys="set",
         specs="RW ACCESS UPDATE VARIABLE_FLAGS index 1 range 0 (RW and ACCESS due to the optional `GET` argument)",
         summary="Set the string value of a key", since="1.0.0", complexity="O(1)",
         syntax="key value [NX | XX] [GET] " + _EXPIRE_SYNTAX + " | KEEPTTL]")
def set_(ctx, args: list[bytes]):
    if len(args) == 3:  # the common case: no options to parse, no clock read
        kstr.write(ctx.ks, args[1], args[2], 0)
        if ctx.node.events.on:
            ctx.fire("$", b"set", args[1])
        return reply.OK
    ks, key = ctx.ks, args[1]
    now = ctx.ks.now()
    flags, expire = A.parse_set_options(args, 3, for_set=True)
    deadline = A.expire_deadline("set", expire, flags, now) if expire is not None else 0
    found = ks.live_record(key, now)
    old = kstr.read_found(ks, key, found) if flags & A.GET else None
    if (flags & A.NX and found) or (flags & A.XX and not found):
        return old
    if flags & A.KEEPTTL and found:
        deadline = env.ttl_of(found[1])
    kstr.write(ks, key, args[2], deadline, now, found)
    ctx.fire("$", b"set", key)
    if expire is not None:
        ctx.fire("g", b"expire", key)
    return old if flags & A.GET else reply.OK


@command("setnx", 3, "write denyoom fast", specs="OW INSERT index 1 range 0", group="string", acl=_ACL_W_FAST,
         summary="Set the value of a key, only if the key does not exist", since="1.0.0",
         complexity="O(1)", syntax="key value")
def setnx(ctx, args: list[bytes]):
    now = ctx.ks.now()
    if ctx.ks.exists(args[1], now):
        return 0
    kstr.write(ctx.ks, args[1], args[2], 0, now)
    ctx.fire("$", b"set", args[1])
    return 1


def _set_expiring(ctx, args: list[bytes], name: str, unit: int):
    now = ctx.ks.now()
    deadline = A.expire_deadline(name, args[2], unit, now)
    kstr.write(ctx.ks, args[1], args[3], deadline, now)
    ctx.fire("$", b"set", args[1])
    ctx.fire("g", b"expire", args[1])
    return reply.OK


@command("setex", 4, "write denyoom", specs="OW UPDATE index 1 range 0", group="string", acl=_ACL_W_SLOW,
         summary="Set the value and expiration of a key", since="2.0.0", complexity="O(1)",
         syntax="key seconds value")
def setex(ctx, args: list[bytes]):
    return _set_expiring(ctx, args, "setex", A.EX)


@command("psetex", 4, "write denyoom", specs="OW UPDATE index 1 range 0", group="string", acl=_ACL_W_SLOW,
         summary="Set the value and expiration in milliseconds of a key", since="2.6.0",
         complexity="O(1)", syntax="key milliseconds value")
def psetex(ctx, args: list[bytes]):
    return _set_expiring(ctx, args, "psetex", A.PX)


@command("get", 2, "readonly fast", specs="RO ACCESS index 1 range 0", group="string", acl=_ACL_R_FAST,
         summary="Get the value of a key", since="1.0.0", complexity="O(1)", syntax="key")
def get(ctx, args: list[bytes]):
    return kstr.read(ctx.ks, args[1])


@command("getex", -2, "write fast", specs="RW ACCESS UPDATE index 1 range 0 (RW and UPDATE because it changes the TTL)",
         group="string", acl=_ACL_W_FAST,
         summary="Get the value of a key and optionally set its expiration", since="6.2.0",
         complexity="O(1)", syntax="key " + _EXPIRE_SYNTAX + " | PERSIST]")
def getex(ctx, args: list[bytes]):
    flags, expire = A.parse_set_options(args, 2, for_set=False)
    ks, key = ctx.ks, args[1]
    now = ctx.ks.now()
    found = ks.live_record(key, now)
    value = kstr.read_found(ks, key, found)  # (Redis reads the key: a keyspace hit or miss, keymiss)
    if found is None:
        return None
    ik, rec = found
    deadline = A.expire_deadline("getex", expire, flags, now) if expire is not None else 0
    if flags & (A.EXAT | A.PXAT) and deadline <= now:
        ks.delete(key, now)
        ctx.fire("g", b"del", key)
    elif expire is not None:
        ks.write_ttl((ik, rec), deadline)
        ctx.fire("g", b"expire", key)
    elif flags & A.PERSIST and env.ttl_of(rec):
        ks.write_ttl((ik, rec), 0)
        ctx.fire("g", b"persist", key)
    return value


@command("getdel", 2, "write fast", specs="RW ACCESS DELETE index 1 range 0", group="string", acl=_ACL_W_FAST,
         summary="Get the value of a key and delete the key", since="6.2.0",
         complexity="O(1)", syntax="key")
def getdel(ctx, args: list[bytes]):
    ks = ctx.ks
    found = ks.live_record(args[1], ks.now())
    value = kstr.read_found(ks, args[1], found)
    if found is not None:
        ks.apply(ks.tombstones(found))
        ctx.fire("g", b"del", args[1])
    return value


@command("getset", 3, "write denyoom fast", specs="RW ACCESS UPDATE index 1 range 0", group="string", acl=_ACL_W_FAST,
         summary="Set the string value of a key and return its old value", since="1.0.0",
         complexity="O(1)", syntax="key value")
def getset(ctx, args: list[bytes]):
    now = ctx.ks.now()
    old = kstr.read(ctx.ks, args[1], now)
    kstr.write(ctx.ks, args[1], args[2], 0, now)
    ctx.fire("$", b"set", args[1])
    return old


@command("mget", -2, "readonly fast", specs="RO ACCESS index 1 range -1", group="string", acl=_ACL_R_FAST,
         summary="Get the values of all the given keys", since="1.0.0",
         complexity="O(N) where N is the number of keys to retrieve.", syntax="key [key ...]")
def mget(ctx, args: list[bytes]):
    now = ctx.ks.now()
    out = []
    for key in args[1:]:
        try:
            out.append(kstr.read(ctx.ks, key, now))
        except WrongType:  # a collection reads as nil in MGET
            out.append(None)
    return out


def _mset_records(ctx, args: list[bytes], name: str, now: int) -> list[tuple[bytes, bytes]]:
    if len(args) % 2 == 0:
        raise CommandError(errors.wrong_arity(name))
    return kstr.mset_records(ctx.ks, args[1:], now)


@command("mset", -3, "write denyoom", specs="OW UPDATE index 1 range -1 2", group="string", acl=_ACL_W_SLOW,
         summary="Set multiple keys to multiple values", since="1.0.1",
         complexity="O(N) where N is the number of keys to set.",
         syntax="key value [key value ...]")
def mset(ctx, args: list[bytes]):
    now = ctx.ks.now()
    ctx.ks.apply(_mset_records(ctx, args, "mset", now))
    _fire_each(ctx, args)
    return reply.OK


@command("msetnx", -3, "write denyoom", specs="OW INSERT index 1 range -1 2", group="string", acl=_ACL_W_SLOW,
         summary="Set multiple keys to multiple values, only if none of the keys exist",
         since="1.0.1", complexity="O(N) where N is the number of keys to set.",
         syntax="key value [key value ...]")
def msetnx(ctx, args: list[bytes]):
    now = ctx.ks.now()
    if len(args) % 2 == 0:
        raise CommandError(errors.wrong_arity("msetnx"))
    if any(ctx.ks.exists(args[i], now) for i in range(1, len(args), 2)):
        return 0
    ctx.ks.apply(_mset_records(ctx, args, "msetnx", now))
    _fire_each(ctx, args)
    return 1


def _fire_each(ctx, args: list[bytes]) -> None:
    if ctx.node.events.on:
        for i in range(1, len(args), 2):
            ctx.fire("$", b"set", args[i])


@command("append", 3, "write denyoom fast", specs="RW INSERT index 1 range 0", group="string", acl=_ACL_W_FAST,
         summary="Append a value to a key", since="2.0.0",
         complexity="O(1). The amortized time complexity is O(1) assuming the appended "
                    "value is small and the already present value is of any size, since "
                    "the dynamic string library used by Redis will double the free space "
                    "available on every reallocation.",
         syntax="key value")
def append(ctx, args: list[bytes]):
    ks, key, tail = ctx.ks, args[1], args[2]
    now = ctx.ks.now()
    rec = kstr.record(ks, key, now)
    if rec is None:
        kstr.write(ks, key, tail, 0, now)
        ctx.fire("$", b"append", key)
        return len(tail)
    cur = kstr.string_value(rec)
    if len(cur) + len(tail) > A.proto_max_bulk_len(ctx):
        raise CommandError(errors.STRING_TOO_LONG)
    kstr.write_plain(ks, key, cur + tail, env.ttl_of(rec))
    ctx.fire("$", b"append", key)
    return len(cur) + len(tail)


@command("strlen", 2, "readonly fast", (1, 1, 1), group="string", acl=_ACL_R_FAST,
         summary="Get the length of the value stored in a key", since="2.2.0",
         complexity="O(1)", syntax="key")
def strlen(ctx, args: list[bytes]):
    value = kstr.read(ctx.ks, args[1])
    return 0 if value is None else len(value)


@command("getrange", 4, "readonly", specs="RO ACCESS index 1 range 0", group="string", acl=_ACL_R_SLOW,
         summary="Get a substring of the string stored at a key", since="2.4.0",
         complexity=_GETRANGE_COMPLEXITY, syntax="key start end")
def getrange(ctx, args: list[bytes]):
    start, end = A.int_arg(args[2]), A.int_arg(args[3])
    value = kstr.read(ctx.ks, args[1])
    return b"" if value is None else getrange_slice(value, start, end)


@command("substr", 4, "readonly", specs="RO ACCESS index 1 range 0", group="string", acl=_ACL_R_SLOW,
         summary="Get a substring of the string stored at a key", since="1.0.0",
         complexity=_GETRANGE_COMPLEXITY, syntax="key start end")
def substr(ctx, args: list[bytes]):
    return getrange(ctx, args)


@command("setrange", 4, "write denyoom", specs="RW UPDATE index 1 range 0", group="string", acl=_ACL_W_SLOW,
         summary="Overwrite part of a string at key starting at the specified offset",
         since="2.2.0",
         complexity="O(1), not counting the time taken to copy the new string in place. "
                    "Usually, this string is very small so the amortized complexity is "
                    "O(1). Otherwise, complexity is O(M) with M being the length of the "
                    "value argument.",
         syntax="key offset value")
def setrange(ctx, args: list[bytes]):
    ks, key, part = ctx.ks, args[1], args[3]
    offset = A.int_arg(args[2])
    if offset < 0:
        raise CommandError(errors.OFFSET_OUT_OF_RANGE)
    now = ctx.ks.now()
    rec = kstr.record(ks, key, now)
    cur = b"" if rec is None else kstr.string_value(rec)
    if not part:
        return len(cur)
    if offset + len(part) > A.proto_max_bulk_len(ctx):
        raise CommandError(errors.STRING_TOO_LONG)
    if offset > len(cur):
        cur += bytes(offset - len(cur))  # zero padding
    new = cur[:offset] + part + cur[offset + len(part):]
    kstr.write_plain(ks, key, new, 0 if rec is None else env.ttl_of(rec))
    ctx.fire("$", b"setrange", key)
    return len(new)


@command("incr", 2, "write denyoom fast", specs="RW ACCESS UPDATE index 1 range 0", group="string", acl=_ACL_W_FAST,
         summary="Increment the integer value of a key by one", since="1.0.0",
         complexity="O(1)", syntax="key")
def incr(ctx, args: list[bytes]):
    return _incr(ctx, args[1], 1)


def _incr(ctx, key: bytes, delta: int) -> int:
    value = kstr.incr(ctx.ks, key, delta, ctx.ks.now())
    if ctx.node.events.on:
        ctx.fire("$", b"incrby", key)
    return value


@command("decr", 2, "write denyoom fast", specs="RW ACCESS UPDATE index 1 range 0", group="string", acl=_ACL_W_FAST,
         summary="Decrement the integer value of a key by one", since="1.0.0",
         complexity="O(1)", syntax="key")
def decr(ctx, args: list[bytes]):
    return _incr(ctx, args[1], -1)


@command("incrby", 3, "write denyoom fast", specs="RW ACCESS UPDATE index 1 range 0", group="string", acl=_ACL_W_FAST,
         summary="Increment the integer value of a key by the given amount", since="1.0.0",
         complexity="O(1)", syntax="key increment")
def incrby(ctx, args: list[bytes]):
    return _incr(ctx, args[1], A.int_arg(args[2]))


@command("decrby", 3, "write denyoom fast", specs="RW ACCESS UPDATE index 1 range 0", group="string", acl=_ACL_W_FAST,
         summary="Decrement the integer value of a key by the given number", since="1.0.0",
         complexity="O(1)", syntax="key decrement")
def decrby(ctx, args: list[bytes]):
    by = A.int_arg(args[2])
    if by == A.LLONG_MIN:
        raise CommandError(errors.DECREMENT_OVERFLOW)
    return _incr(ctx, args[1], -by)


@command("incrbyfloat", 3, "write denyoom fast", specs="RW ACCESS UPDATE index 1 range 0",
         group="string", acl=_ACL_W_FAST,
         summary="Increment the float value of a key by the given amount", since="2.6.0",
         complexity="O(1)", syntax="key increment")
def incrbyfloat(ctx, args: list[bytes]):
    ks, key = ctx.ks, args[1]
    rec = kstr.record(ks, key, ctx.ks.now())
    if rec is None:
        cur: A.Ld | None = Fraction(0)
    elif pncounter.is_counter(rec):
        cur = Fraction(PNCounter.from_bytes(rec[env.HEADER:]).value())
    else:
        cur = A.parse_ld(rec[env.HEADER:])
    by = A.parse_ld(args[2])
    if cur is None or by is None:
        raise CommandError(errors.NOT_FLOAT)
    total = A.ld_add(cur, by)
    if isinstance(total, float):
        raise CommandError(errors.NAN_OR_INF)
    out = A.format_ld(total)
    kstr.write_plain(ks, key, out, 0 if rec is None else env.ttl_of(rec))
    ctx.fire("$", b"incrbyfloat", key)
    return out


@command("lcs", -3, "readonly", specs="RO ACCESS index 1 range 1", group="string", acl=_ACL_R_SLOW,
         summary="Find longest common substring", since="7.0.0",
         complexity="O(N*M) where N and M are the lengths of s1 and s2, respectively",
         syntax="key1 key2 [LEN] [IDX] [MINMATCHLEN len] [WITHMATCHLEN]")
def lcs(ctx, args: list[bytes]):
    now = ctx.ks.now()
    try:
        a = kstr.read(ctx.ks, args[1], now) or b""
        b = kstr.read(ctx.ks, args[2], now) or b""
    except WrongType:
        raise CommandError(errors.LCS_NOT_STRINGS) from None
    return lcs_of(args, a, b, A.proto_max_bulk_len(ctx))


def lcs_of(args: list[bytes], a: bytes, b: bytes, max_bulk_len: int):
    """LCS once its two strings are read (``a`` and ``b``; a missing key's is empty): the
    options, then the reply (a node of several shard workers reads them on theirs)."""
    getlen = getidx = withmatchlen = False
    minmatchlen = 0
    p = A.Options(args, 3)
    while p.more():
        if p.accept(b"idx"):
            getidx = True
        elif p.accept(b"len"):
            getlen = True
        elif p.accept(b"withmatchlen"):
            withmatchlen = True
        elif p.accept(b"minmatchlen", 1):
            minmatchlen = max(p.integer(), 0)
        else:
            p.fail(errors.SYNTAX)
    if getlen and getidx:
        p.fail(errors.LCS_LEN_AND_IDX)
    p.check()
    if (len(a) + 1) * (len(b) + 1) * 4 > max_bulk_len:
        raise CommandError(errors.LCS_TOO_MUCH_MEMORY)
    t = LcsTable(a, b)
    length = t(len(a), len(b))
    if getlen:
        return length
    common, ranges = lcs_walk(a, b, t, minmatchlen, withmatchlen)
    if getidx:
        return reply.Map([b"matches", ranges, b"len", length])
    return common
