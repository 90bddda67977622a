"""Stream and consumer-group commands (Redis 7.0 ``t_stream.c``) over marekvs's records.

The first half of this module is the family's argument grammar (Redis's stream id
parser, quirks included: ``string2ull`` accepts what ``strtoull`` accepts, ``ms-*``,
intervals with ``(``, XADD/XTRIM's trimming options) and reply shapes; the second half is
the commands, each of which parses its arguments, calls ``keyspace/streams.py`` and
returns the reply value. The records, their merges and what a cluster does with them are
described in ``keyspace/streams.py``, ``core/stream.py``, ``core/streamgroup.py`` and
docs/streams.md.

Ids. XADD ``*`` mints ``ms-seq`` with ``seq = origin << 20 | counter`` (the data model's
cluster-unique ids), so the sequence part of an id made here is not Redis's 0, 1, 2...:
ids keep Redis's order and every rule that compares them (XADD's "equal or smaller"
check, ranges, ``$``, ``>``), not Redis's values. ``ms-*`` takes the same sequence range.

Blocking. XREAD BLOCK and XREADGROUP BLOCK wait in the node's blocking registry
(``ctx.node.blocking``) on their stream keys: a record merged from a peer wakes them like
a local write (the change feed reports both), and the retry is the command's own
non-blocking path. The stream cache (``keyspace/streams.py``) is subscribed to the same
change feed the first time a stream command runs.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from marekvs.commands import args as A
from marekvs.commands import errors, table
from marekvs.commands.errors import CommandError
from marekvs.commands.reply import NULL_ARRAY, OK, Err, Map
from marekvs.commands.table import command
from marekvs.core.stream import StreamId, format_id
from marekvs.keyspace import streams as xs
from marekvs.keyspace.status import WrongType

U64_MAX = xs.U64_MAX
MAX_ID = xs.MAX_ID
MIN_ID = xs.MIN_ID
BLOCK_DEFAULT_COUNT = 1000  # Redis's XREAD_BLOCK_DEFAULT_COUNT
_ACL_W_FAST = "write stream fast"
_ACL_W_SLOW = "write stream slow"
_ACL_R_SLOW = "read stream slow"
_ACL_R_FAST = "read stream fast"
_SPACE = b" \t\n\v\f\r"


def _containers() -> tuple[table.Command, ...]:
    out = []
    for name, summary in (("xgroup", "A container for consumer groups commands"),
                          ("xinfo", "A container for stream introspection commands")):
        c = table.container(name, -2, group="stream", summary=summary, since="5.0.0")
        c.acl = ("slow",)
        out.append(c)
    return tuple(out)


CONTAINERS = _containers()


# =========================================================================================
# Internal API: ids, options and replies
# =========================================================================================

def string2ull(b: bytes) -> int | None:
    """Redis's ``string2ull`` on a C string: ``string2ll`` if that parses (negative
    fails), else ``strtoull`` (leading white space, a sign, digits; ``-n`` wraps)."""
    v = A.parse_ll(b)
    if v is not None:
        return v if v >= 0 else None
    i = 0
    while i < len(b) and b[i] in _SPACE:
        i += 1
    neg = False
    if i < len(b) and b[i] in b"+-":
        neg = b[i] == 45
        i += 1
    digits = b[i:]
    if not digits or not digits.isdigit() or not digits.isascii():
        return None
    v = int(digits)
    if v > U64_MAX:
        return None
    return (-v) % (1 << 64) if neg else v


def _invalid_id() -> CommandError:
    return CommandError(errors.INVALID_STREAM_ID)


def parse_id(arg: bytes, strict: bool = False, missing_seq: int = 0,
             seq_star: bool = False) -> tuple[int, int | None]:
    """Redis's ``streamGenericParseIDOrReply``: ``-`` and ``+`` (unless ``strict``),
    ``ms`` (with ``missing_seq``), ``ms-seq``, and ``ms-*`` when ``seq_star`` (its
    sequence comes back None)."""
    if len(arg) > 127:
        raise _invalid_id()
    buf = errors.c_str(arg)
    if buf in (b"-", b"+"):
        if strict:
            raise _invalid_id()
        return (0, 0) if buf == b"-" else MAX_ID
    ms_part, dash, seq_part = buf.partition(b"-")
    ms = string2ull(ms_part)
    if ms is None:
        raise _invalid_id()
    if not dash:
        return ms, missing_seq
    if seq_star and seq_part == b"*":
        return ms, None
    seq = string2ull(seq_part)
    if seq is None:
        raise _invalid_id()
    return ms, seq


def full_id(arg: bytes, strict: bool = True, missing_seq: int = 0) -> StreamId:
    ms, seq = parse_id(arg, strict, missing_seq)
    assert seq is not None
    return ms, seq


def parse_interval(arg: bytes, missing_seq: int) -> tuple[StreamId, bool]:
    """``streamParseIntervalIDOrReply``: (id, exclusive) of a range bound."""
    if len(arg) > 1 and arg[:1] == b"(":
        return full_id(arg[1:], True, missing_seq), True
    return full_id(arg, False, missing_seq), False


def range_bounds(start_arg: bytes, end_arg: bytes) -> tuple[StreamId, StreamId]:
    start, ex = parse_interval(start_arg, 0)
    if ex:
        nxt = xs.incr_id(start)
        if nxt is None:
            raise CommandError(errors.INVALID_START_ID)
        start = nxt
    end, ex = parse_interval(end_arg, U64_MAX)
    if ex:
        prv = xs.decr_id(end)
        if prv is None:
            raise CommandError(errors.INVALID_END_ID)
        end = prv
    return start, end


def _is(arg: bytes, word: bytes) -> bool:
    """strcasecmp on a C string."""
    return errors.c_str(arg).lower() == word


def parse_add_or_trim(args: list[bytes], xadd: bool) -> tuple[int, xs.Trim | None, bool,
                                                               tuple[int, int | None] | None]:
    """``streamParseAddOrTrimArgsOrReply``: (position of the id, or past the options for
    XTRIM; trimming; NOMKSTREAM; the id given to XADD (None: ``*``))."""
    maxlen: int | None = None
    minid: StreamId | None = None
    approx = False
    limit = 0
    limit_given = False
    nomkstream = False
    given: tuple[int, int | None] | None = None
    if xadd and args[2] == b"*":  # the common case: no option, an id to generate
        return 2, None, False, None
    p = A.Options(args, 2)
    while p.more():
        w = p.word()
        if xadd and w == b"*":  # (the common case: an id to generate)
            break
        if (w == b"maxlen" or w == b"minid") and p.accept(w, 1):
            if maxlen is not None or minid is not None:
                p.fail(errors.MAXLEN_AND_MINID)
                continue
            approx = p.accept(b"~", 1)  # MAXLEN ~ <count> (a C string: "~" alone)
            if not approx:
                p.accept(b"=", 1)
            if w == b"maxlen":
                maxlen = p.integer()
                if maxlen < 0:
                    p.fail(errors.MAXLEN_NEGATIVE)
            else:
                minid = full_id(p.value(), True)
        elif p.accept(b"limit", 1):
            limit = p.integer()
            if limit < 0:
                p.fail(errors.XTRIM_LIMIT_NEGATIVE)
            limit_given = True
        elif xadd and p.accept(b"nomkstream"):
            nomkstream = True
        elif xadd:  # the id (or a syntax error: an id that does not parse)
            given = parse_id(args[p.pos], True, 0, seq_star=True)
            break
        else:
            p.fail(errors.SYNTAX)
    strategy = maxlen is not None or minid is not None
    if limit and not strategy:
        p.fail(errors.LIMIT_WITHOUT_STRATEGY)
    if not xadd and not strategy:
        p.fail(errors.XTRIM_WITHOUT_STRATEGY)
    if limit_given and not approx:
        p.fail(errors.LIMIT_WITHOUT_APPROX)
    p.check()
    if approx and not limit_given:
        limit = 10_000  # 100 * stream-node-max-entries
    trim = xs.Trim(maxlen, minid, approx, limit) if strategy else None
    return p.pos, trim, nomkstream, given


def fmt(sid: StreamId) -> bytes:
    return format_id(sid)


def entry_reply(sid: StreamId, fields: list[bytes] | None) -> list[Any]:
    """``[id, [f1, v1, ...]]``; an entry gone from the stream: ``[id, nil]``."""
    return [b"%d-%d" % sid, NULL_ARRAY if fields is None else fields]


def entries_reply(entries: list[xs.Entry]) -> list[Any]:
    return [[b"%d-%d" % sid, fields] for sid, fields in entries]


def _lookup(ctx: Any, key: bytes) -> xs.Stream | None:
    return xs.lookup(ctx.ks, key, ctx.ks.now())


def _read(ctx: Any, key: bytes) -> xs.Stream | None:
    """``_lookup`` where Redis calls ``lookupKeyRead``: a keyspace hit (a key of another
    type too, before the WRONGTYPE error) or a miss (INFO stats, the ``keymiss`` event)."""
    ks = ctx.ks
    try:
        st = _lookup(ctx, key)
    except WrongType:
        ks.counted(key, True)
        raise
    ks.counted(key, st is not None)
    return st


def _nogroup_read(key: bytes, group: bytes) -> CommandError:
    return CommandError(errors.nogroup_read(key, group))


def _timeout_ms(arg: bytes) -> int:
    """``getTimeoutFromObjectOrReply`` in milliseconds."""
    v = A.parse_ll(arg)
    if v is None:
        raise CommandError(errors.TIMEOUT_NOT_INT)
    if v < 0:
        raise CommandError(errors.TIMEOUT_NEGATIVE)
    if v > A.LLONG_MAX - int(time.time() * 1000):
        raise CommandError(errors.TIMEOUT_OUT_OF_RANGE)
    return v


# =========================================================================================
# Commands
# =========================================================================================

@command("xadd", -5, "write denyoom fast",
         specs="RW UPDATE index 1 range 0 (UPDATE instead of INSERT because of the optional trimming feature)",
         group="stream", acl=_ACL_W_FAST, since="5.0.0",
         summary="Appends a new entry to a stream",
         complexity="O(1) when adding a new entry, O(N) when trimming where N being the number of "
                    "entries evicted.",
         syntax="key [NOMKSTREAM] [MAXLEN | MINID [= | ~] threshold [LIMIT count]] id field value "
                "[field value ...]")
def xadd(ctx, args: list[bytes]):
    pos, trim, nomkstream, given = parse_add_or_trim(args, True)
    field_pos = pos + 1
    nf = len(args) - field_pos
    if nf < 2 or nf % 2:
        raise CommandError(errors.wrong_arity("xadd"))
    if given is not None and given == (0, 0):
        raise CommandError(errors.XADD_ID_ZERO)
    fields = list(zip(args[field_pos::2], args[field_pos + 1::2]))
    now = ctx.ks.now()
    ms, seq = (None, None) if given is None else given
    try:
        sid, trimmed = xs.add(ctx.ks, args[1], fields, ms, seq, nomkstream, trim, now)
    except xs.IdNotGreater:
        raise CommandError(errors.XADD_ID_TOO_SMALL) from None
    except xs.IdExhausted:
        raise CommandError(errors.STREAM_EXHAUSTED) from None
    except xs.SeqExhausted:
        raise CommandError(errors.ELEMENTS_TOO_LARGE) from None
    if sid is None:
        return None
    ctx.fire("t", b"xadd", args[1])
    if trimmed:
        ctx.fire("t", b"xtrim", args[1])
    return fmt(sid)


@command("xlen", 2, "readonly fast", specs="RO index 1 range 0", group="stream", acl=_ACL_R_FAST,
         since="5.0.0", summary="Return the number of entries in a stream", syntax="key")
def xlen(ctx, args: list[bytes]):
    st = _read(ctx, args[1])
    return 0 if st is None else st.length


def _range(ctx, args: list[bytes], rev: bool):
    start_arg, end_arg = (args[3], args[2]) if rev else (args[2], args[3])
    start, end = range_bounds(start_arg, end_arg)
    count = -1
    p = A.Options(args, 4)
    while p.more():
        if p.accept(b"count", 1):
            count = max(p.integer(), 0)
        else:
            p.fail(errors.SYNTAX)
    p.check()
    st = _read(ctx, args[1])
    if st is None:
        return []
    if count == 0:
        return NULL_ARRAY
    return entries_reply(xs.range_entries(ctx.ks, st, start, end, max(count, 0), rev))


@command("xrange", -4, "readonly", specs="RO ACCESS index 1 range 0", group="stream", acl=_ACL_R_SLOW,
         since="5.0.0", summary="Return a range of elements in a stream, with IDs matching the specified "
                                 "IDs interval",
         complexity="O(N) with N being the number of elements being returned. If N is constant (e.g. "
                    "always asking for the first 10 elements with COUNT), you can consider it O(1).",
         syntax="key start end [COUNT count]")
def xrange(ctx, args: list[bytes]):
    return _range(ctx, args, False)


@command("xrevrange", -4, "readonly", specs="RO ACCESS index 1 range 0", group="stream",
         acl=_ACL_R_SLOW, since="5.0.0",
         summary="Return a range of elements in a stream, with IDs matching the specified IDs interval, "
                 "in reverse order (from greater to smaller IDs) compared to XRANGE",
         complexity="O(N) with N being the number of elements returned. If N is constant (e.g. always "
                    "asking for the first 10 elements with COUNT), you can consider it O(1).",
         syntax="key end start [COUNT count]")
def xrevrange(ctx, args: list[bytes]):
    return _range(ctx, args, True)


@command("xdel", -3, "write fast", specs="RW DELETE index 1 range 0", group="stream", acl=_ACL_W_FAST,
         since="5.0.0", summary="Removes the specified entries from the stream. Returns the number of "
                                 "items actually deleted, that may be different from the number of IDs "
                                 "passed in case certain IDs do not exist.",
         complexity="O(1) for each single item to delete in the stream, regardless of the stream size.",
         syntax="key id [id ...]")
def xdel(ctx, args: list[bytes]):
    st = _lookup(ctx, args[1])
    if st is None:
        return 0
    ids = [full_id(a) for a in args[2:]]
    n = xs.delete(ctx.ks, st, ids)
    if n:
        ctx.fire("t", b"xdel", args[1])
    return n


@command("xtrim", -4, "write", specs="RW DELETE index 1 range 0", group="stream", acl=_ACL_W_SLOW,
         since="5.0.0", summary="Trims the stream to (approximately if '~' is passed) a certain size",
         complexity="O(N), with N being the number of evicted entries. Constant times are very small "
                    "however, since entries are organized in macro nodes containing multiple entries "
                    "that can be released with a single deallocation.",
         syntax="key MAXLEN | MINID [= | ~] threshold [LIMIT count]")
def xtrim(ctx, args: list[bytes]):
    _, trim, _, _ = parse_add_or_trim(args, False)
    assert trim is not None
    st = _lookup(ctx, args[1])
    if st is None:
        return 0
    n = xs.trim(ctx.ks, st, trim)
    if n:
        ctx.fire("t", b"xtrim", args[1])
    return n


@command("xsetid", -3, "write denyoom fast", specs="RW UPDATE index 1 range 0", group="stream",
         acl=_ACL_W_FAST, since="5.0.0", summary="An internal command for replicating stream values",
         syntax="key last-id [ENTRIESADDED entries-added] [MAXDELETEDID max-deleted-id]")
def xsetid(ctx, args: list[bytes]):
    sid = full_id(args[2])
    added: int | None = None
    maxdel = MIN_ID
    p = A.Options(args, 3)
    while p.more():
        if p.accept(b"entriesadded", 1):
            added = p.integer()
            if added < 0:
                p.fail(errors.ENTRIES_ADDED_NEGATIVE)
        elif p.accept(b"maxdeletedid", 1):
            maxdel = full_id(p.value())
            if sid < maxdel:
                p.fail(errors.XSETID_BELOW_MAXDEL)
        else:
            p.fail(errors.SYNTAX)
    p.check()
    if _lookup(ctx, args[1]) is None:
        raise CommandError(errors.NO_SUCH_KEY)
    try:
        xs.set_id(ctx.ks, args[1], sid, added, maxdel, ctx.ks.now())
    except xs.SetIdTooSmall as e:
        raise CommandError(errors.XSETID_TOO_SMALL if e.detail == "top" else errors.XSETID_ADDED_TOO_SMALL) \
            from None
    ctx.fire("t", b"xsetid", args[1])
    return OK


# -- XREAD / XREADGROUP --------------------------------------------------------------------------

class _ReadArgs:
    __slots__ = ("timeout", "count", "noack", "group", "consumer", "keys", "ids")

    def __init__(self) -> None:
        self.timeout: int | None = None
        self.count = 0
        self.noack = False
        self.group: bytes | None = None
        self.consumer = b""
        self.keys: list[bytes] = []
        self.ids: list[bytes] = []


def parse_read(args: list[bytes], xreadgroup: bool, ctx: Any = None) -> _ReadArgs:
    r = _ReadArgs()
    n = len(args)
    streams_arg = 0
    p = A.Options(args, 1)
    while p.more():
        if p.accept(b"block", 1):
            if ctx is not None and ctx is getattr(getattr(ctx.node, "scripting", None), "ctx", None):
                # a script (not MULTI, which answers as a timeout): Redis refuses BLOCK outright
                p.fail(errors.XREAD_BLOCK_IN_SCRIPT % errors.echo(args[0]))
                continue
            r.timeout = _timeout_ms(p.value())
        elif p.accept(b"count", 1):
            r.count = max(p.integer(), 0)
        elif p.accept(b"streams", 1):
            streams_arg = p.pos
            nstreams = n - streams_arg
            if nstreams % 2:
                p.fail(errors.XREAD_UNBALANCED)
            r.keys = args[streams_arg:streams_arg + nstreams // 2]
            r.ids = args[streams_arg + nstreams // 2:]
            break
        elif p.accept(b"group", 2):
            if not xreadgroup:
                p.fail(errors.XREAD_GROUP_OPTION)
            r.group, r.consumer = p.value(), p.value()
        elif p.accept(b"noack"):
            if not xreadgroup:
                p.fail(errors.XREAD_NOACK_OPTION)
            r.noack = True
        else:
            p.fail(errors.SYNTAX)
    if not streams_arg:
        p.fail(errors.SYNTAX)
    if xreadgroup and r.group is None:
        p.fail(errors.XREADGROUP_NO_GROUP)
    p.check()
    return r


_NEW = None  # the '>' id


def _resolve(ctx, r: _ReadArgs, xreadgroup: bool,
             groups: list[xs.GroupRef] | None = None) -> list[tuple[bytes, StreamId | None]]:
    """(key, id) per stream, as Redis resolves them: key by key, its type and group
    checked before its id is parsed. ``$`` is the stream's last id; ``>`` is None.
    XREADGROUP's groups are appended to ``groups``."""
    out: list[tuple[bytes, StreamId | None]] = []
    for key, arg in zip(r.keys, r.ids):
        st = _read(ctx, key)
        if r.group is not None:
            g = None if st is None else xs.group(ctx.ks, st, r.group)
            if g is None:
                raise _nogroup_read(key, r.group)
            if groups is not None:
                groups.append(g)
        if arg == b"$":
            if xreadgroup:
                raise CommandError(errors.XREADGROUP_DOLLAR)
            out.append((key, MIN_ID if st is None else st.last_id))
        elif arg == b">":
            if not xreadgroup:
                raise CommandError(errors.XREAD_GT_OPTION)
            out.append((key, _NEW))
        else:
            out.append((key, full_id(arg)))
    return out


def _read_reply(ctx, served: list[tuple[bytes, list[Any]]]) -> Any:
    return read_reply(ctx.proto, served)


def read_reply(proto: int, served: list[tuple[bytes, list[Any]]]) -> Any:
    """XREAD's reply of the streams ``served`` ((key, entries), in the order asked)."""
    if proto == 3:
        return Map([x for pair in served for x in pair])
    return [[k, v] for k, v in served]


def _xread_once(ctx, targets: list[tuple[bytes, StreamId | None]], count: int,
                first_only: bool = False) -> list[tuple[bytes, list[Any]]]:
    """The entries after each target's id; the first call of a command counts its
    lookups as reads (Redis's second ``lookupKeyRead`` per stream), a blocked client's
    retries do not (Redis serves them with ``lookupKeyWrite``)."""
    served = []
    look = _lookup if first_only else _read
    for key, after in targets:
        st = look(ctx, key)
        if st is None or not st.length:
            continue
        assert after is not None
        if xs.last_valid_id(ctx.ks, st) <= after:
            continue
        start = xs.incr_id(after)
        if start is None:
            continue
        served.append((key, entries_reply(xs.range_entries(ctx.ks, st, start, MAX_ID, count))))
        if first_only:
            break
    return served


def _block(ctx, keys: list[bytes], attempt: Callable[[], Any], timeout_ms: int) -> Any:
    return ctx.node.blocking.block(ctx, keys, attempt, timeout_ms / 1000.0, lambda: NULL_ARRAY)


@command("xread", -4, "readonly blocking", specs="RO ACCESS keyword STREAMS 1 range -1 1 2",
         group="stream", acl="read stream slow blocking", since="5.0.0",
         summary="Return never seen elements in multiple streams, with IDs greater than the ones reported "
                 "by the caller for each stream. Can block.",
         complexity="For each stream mentioned: O(N) with N being the number of elements being returned, "
                    "it means that XREAD-ing with a fixed COUNT is O(1). Note that when the BLOCK option "
                    "is used, XADD will pay O(M) time in order to serve the M clients blocked on the "
                    "stream getting new data.",
         syntax="[COUNT count] [BLOCK milliseconds] STREAMS key [key ...] id [id ...]")
def xread(ctx, args: list[bytes]):
    r = parse_read(args, False, ctx)
    targets = _resolve(ctx, r, False)
    served = _xread_once(ctx, targets, r.count)
    if served:
        return _read_reply(ctx, served)
    if r.timeout is None:
        return NULL_ARRAY
    count = r.count or BLOCK_DEFAULT_COUNT

    def attempt():
        try:
            got = _xread_once(ctx, targets, count, first_only=True)
        except WrongType:
            return None
        return _read_reply(ctx, got) if got else None

    return _block(ctx, r.keys, attempt, r.timeout)


def _group_read(ctx, key: bytes, group: bytes, consumer: bytes, after: StreamId | None, count: int,
                noack: bool, retry: bool = False, g: xs.GroupRef | None = None) -> list[Any] | None | Err:
    """One stream of XREADGROUP: its entries, None when '>' has nothing new (``retry``: a
    blocked client's, whose lookup is not a counted read). ``g``: the group as this
    command resolved it a moment ago (the same lookup, counted again as Redis counts its
    second ``lookupKeyRead``)."""
    if g is not None:
        ctx.ks.counted(key, True)
    else:
        st = (_lookup if retry else _read)(ctx, key)
        g = None if st is None else xs.group(ctx.ks, st, group)
        if g is None:
            return None if st is None else Err(errors.NOGROUP_BLOCKED_GONE)
    now = ctx.ks.now()
    if after is _NEW:
        got, created = xs.read_new(ctx.ks, g, consumer, count, noack, now)
        reply = None if got is None else entries_reply(got)
    else:
        hist, created = xs.read_history(ctx.ks, g, consumer, after, count, now)
        reply = [entry_reply(sid, fields) for sid, fields in hist]
    if created:
        ctx.fire("t", b"xgroup-createconsumer", key)
    return reply


@command("xreadgroup", -7, "write blocking", specs="RO ACCESS keyword STREAMS 4 range -1 1 2",
         group="stream", acl="write stream slow blocking", since="5.0.0",
         summary="Return new entries from a stream using a consumer group, or access the history of the "
                 "pending entries for a given consumer. Can block.",
         complexity="For each stream mentioned: O(M) with M being the number of elements returned. If M "
                    "is constant (e.g. always asking for the first 10 elements with COUNT), you can "
                    "consider it O(1). On the other side when XREADGROUP blocks, XADD will pay the O(N) "
                    "time in order to serve the N clients blocked on the stream getting new data.",
         syntax="GROUP group consumer [COUNT count] [BLOCK milliseconds] [NOACK] STREAMS key [key ...] "
                "id [id ...]")
def xreadgroup(ctx, args: list[bytes]):
    r = parse_read(args, True, ctx)
    resolved: list[xs.GroupRef] = []
    targets = _resolve(ctx, r, True, resolved)
    assert r.group is not None
    group, consumer = r.group, r.consumer
    # a key named twice must see the first read's writes: look it up again then
    reuse = len(set(r.keys)) == len(r.keys)
    served = []
    for (key, after), g in zip(targets, resolved):
        got = _group_read(ctx, key, group, consumer, after, r.count, r.noack, g=g if reuse else None)
        if isinstance(got, Err):
            return got
        if got is not None:
            served.append((key, got))
    if served:
        return _read_reply(ctx, served)
    if r.timeout is None:
        return NULL_ARRAY
    count = r.count or BLOCK_DEFAULT_COUNT

    def attempt():
        for key, after in targets:
            try:
                got = _group_read(ctx, key, group, consumer, after, count, r.noack, retry=True)
            except WrongType:
                continue
            if isinstance(got, Err):
                return got
            if got is not None:
                return _read_reply(ctx, [(key, got)])
        return None

    return _block(ctx, r.keys, attempt, r.timeout)


# -- XACK / XPENDING / XCLAIM / XAUTOCLAIM ------------------------------------------------------

@command("xack", -4, "write fast", specs="RW UPDATE index 1 range 0", group="stream", acl=_ACL_W_FAST,
         since="5.0.0", summary="Marks a pending message as correctly processed, effectively removing it "
                                 "from the pending entries list of the consumer group. Return value of the "
                                 "command is the number of messages successfully acknowledged, that is, the "
                                 "IDs we were actually able to resolve in the PEL.",
         complexity="O(1) for each message ID processed.", syntax="key group id [id ...]")
def xack(ctx, args: list[bytes]):
    st = _read(ctx, args[1])
    g = None if st is None else xs.group(ctx.ks, st, args[2])
    if g is None:
        return 0
    ids = [full_id(a) for a in args[3:]]
    return xs.ack(ctx.ks, g, ids)


def _require_group(ctx, key: bytes, group: bytes) -> xs.GroupRef:
    st = _read(ctx, key)
    g = None if st is None else xs.group(ctx.ks, st, group)
    if g is None:
        raise CommandError(errors.nogroup_key(key, group))
    return g


@command("xpending", -3, "readonly", specs="RO ACCESS index 1 range 0", group="stream", acl=_ACL_R_SLOW,
         since="5.0.0", summary="Return information and entries from a stream consumer group pending "
                                 "entries list, that are messages fetched but never acknowledged.",
         complexity="O(N) with N being the number of elements returned, so asking for a small fixed "
                    "number of entries per call is O(1). O(M), where M is the total number of entries "
                    "scanned when used with the IDLE filter. When the command returns just the summary "
                    "and the list of consumers is small, it runs in O(1) time; otherwise, an additional "
                    "O(N) time for iterating every consumer.",
         syntax="key group [[IDLE min-idle-time] start end count [consumer]]")
def xpending(ctx, args: list[bytes]):
    n = len(args)
    if n != 3 and (n < 6 or n > 9):
        raise CommandError(errors.SYNTAX)
    minidle = 0
    consumer: bytes | None = None
    if n >= 6:
        at = 3
        if _is(args[3], b"idle"):
            minidle = A.int_arg(args[4])
            if n < 8:
                raise CommandError(errors.SYNTAX)
            at += 2
        count = max(A.int_arg(args[at + 2]), 0)
        start, end = range_bounds(args[at], args[at + 1])
        if at + 3 < n:
            consumer = args[at + 3]
    st = _read(ctx, args[1])
    g = None if st is None else xs.group(ctx.ks, st, args[2])
    if g is None:
        raise CommandError(errors.nogroup_key(args[1], args[2]))
    if n == 3:
        summary = xs.pending_summary(ctx.ks, g)
        if not summary.size or summary.first is None or summary.last is None:
            return [0, None, None, NULL_ARRAY]
        per = summary.per_consumer
        return [summary.size, fmt(summary.first), fmt(summary.last), [[c, b"%d" % per[c]] for c in sorted(per)]]
    if consumer is not None and not xs.consumer_exists(ctx.ks, g, consumer):
        return []
    now = ctx.ks.now()
    out = []
    if count and start <= end:
        for p in xs.pending(ctx.ks, g, start, end, consumer):
            if minidle and now - p.delivery_ms < minidle:
                continue
            out.append([fmt(p.id), p.consumer, max(now - p.delivery_ms, 0), p.deliveries])
            if len(out) == count:
                break
    return out


@command("xclaim", -6, "write fast", specs="RW UPDATE index 1 range 0", group="stream", acl=_ACL_W_FAST,
         since="5.0.0", summary="Changes (or acquires) ownership of a message in a consumer group, as if "
                                 "the message was delivered to the specified consumer.",
         complexity="O(log N) with N being the number of messages in the PEL of the consumer group.",
         syntax="key group consumer min-idle-time id [id ...] [IDLE ms] [TIME unix-time-milliseconds] "
                "[RETRYCOUNT count] [FORCE] [JUSTID] [LASTID lastid]")
def xclaim(ctx, args: list[bytes]):
    g = _require_group(ctx, args[1], args[2])
    minidle = A.parse_ll(args[4])
    if minidle is None:
        raise CommandError(errors.XCLAIM_MIN_IDLE)
    minidle = max(minidle, 0)
    j = 5
    ids: list[StreamId] = []
    while j < len(args):
        try:
            ids.append(full_id(args[j]))
        except CommandError:
            break
        j += 1
    now = ctx.ks.now()
    delivery: int | None = None
    retrycount: int | None = None
    force = justid = False
    lastid = MIN_ID
    p = A.Options(args, j)
    while p.more():
        if p.accept(b"force"):
            force = True
        elif p.accept(b"justid"):
            justid = True
        elif p.accept(b"idle", 1):
            delivery = now - p.integer(errors.XCLAIM_IDLE)
        elif p.accept(b"time", 1):
            delivery = p.integer(errors.XCLAIM_TIME)
        elif p.accept(b"retrycount", 1):
            retrycount = p.integer(errors.XCLAIM_RETRYCOUNT)
        elif p.accept(b"lastid", 1):
            lastid = full_id(p.value())
        else:
            p.fail(errors.xclaim_option(p.value()))
    p.check()
    if delivery is None or delivery < 0 or delivery > now:
        delivery = now
    how = xs.Claim(minidle, delivery, retrycount if retrycount is not None and retrycount >= 0 else None,
                   force, justid)
    got, created = xs.claim(ctx.ks, g, args[3], ids, how, lastid, now)
    if created:
        ctx.fire("t", b"xgroup-createconsumer", args[1])
    if justid:
        return [fmt(sid) for sid, _ in got]
    return [entry_reply(sid, fields) for sid, fields in got]


@command("xautoclaim", -6, "write fast", specs="RW DELETE index 1 range 0", group="stream",
         acl=_ACL_W_FAST, since="6.2.0",
         summary="Changes (or acquires) ownership of messages in a consumer group, as if the messages "
                 "were delivered to the specified consumer.",
         complexity="O(1) if COUNT is small.",
         syntax="key group consumer min-idle-time start [COUNT count] [JUSTID]")
def xautoclaim(ctx, args: list[bytes]):
    minidle = A.parse_ll(args[4])
    if minidle is None:
        raise CommandError(errors.XAUTOCLAIM_MIN_IDLE)
    minidle = max(minidle, 0)
    start, ex = parse_interval(args[5], 0)
    if ex:
        nxt = xs.incr_id(start)
        if nxt is None:
            raise CommandError(errors.INVALID_START_ID)
        start = nxt
    count = 100
    justid = False
    j = 6
    max_count = A.LLONG_MAX // 16
    p = A.Options(args, j)
    while p.more():
        if p.accept(b"count", 1):
            v = A.parse_ll(p.value())
            if v is None or v < 1 or v > max_count:
                p.fail(errors.XAUTOCLAIM_COUNT)
            else:
                count = v
        elif p.accept(b"justid"):
            justid = True
        else:
            p.fail(errors.SYNTAX)
    p.check()
    g = _require_group(ctx, args[1], args[2])
    cursor, got, deleted, created = xs.autoclaim(ctx.ks, g, args[3], minidle, start, count, justid,
                                                 ctx.ks.now())
    if created:
        ctx.fire("t", b"xgroup-createconsumer", args[1])
    claimed = [fmt(sid) for sid, _ in got] if justid else [entry_reply(sid, f) for sid, f in got]
    return [fmt(cursor), claimed, [fmt(sid) for sid in deleted]]


# -- XGROUP ----------------------------------------------------------------------------------------

_XGROUP_HELP = (
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
)
xgroup_help = table.help_subcommand("xgroup", _XGROUP_HELP, group="stream", acl="stream slow")


def _entries_read(arg: bytes) -> int | None:
    v = A.int_arg(arg)
    if v < 0 and v != -1:
        raise CommandError(errors.ENTRIESREAD_NEGATIVE)
    return None if v == -1 else v


def _xgroup_target(ctx, args: list[bytes], mkstream: bool,
                   need_group: bool) -> tuple[xs.Stream | None, xs.GroupRef | None]:
    """Redis's common XGROUP checks: the key (a stream, existing unless MKSTREAM) and, for
    the subcommands that need it, the group."""
    st = _lookup(ctx, args[2])
    if mkstream:
        return st, None
    if st is None:
        raise CommandError(errors.XGROUP_NO_KEY)
    g = xs.group(ctx.ks, st, args[3])
    if g is None and need_group:
        raise CommandError(errors.nogroup_name(args[2], args[3]))
    return st, g


@command("create", -5, "write denyoom", specs="RW INSERT index 2 range 0", group="stream",
         parent="xgroup", acl=_ACL_W_SLOW, since="5.0.0", summary="Create a consumer group.",
         syntax="key group id | $ [MKSTREAM] [ENTRIESREAD entries-read]")
def xgroup_create(ctx, args: list[bytes]):
    mkstream = False
    entries_read: int | None = None
    n = len(args)
    if n > 8:
        raise CommandError(errors.subcommand_syntax("xgroup", args[1]))
    p = A.Options(args, 5)
    while p.more():
        if p.accept(b"mkstream"):
            mkstream = True
        elif p.accept(b"entriesread", 1):
            entries_read = _entries_read(p.value())
        else:
            p.fail(errors.subcommand_syntax("xgroup", args[1]))
    p.check()
    st = _lookup(ctx, args[2])  # (``_xgroup_target``'s checks; the group is read once, below)
    if st is None and not mkstream:
        raise CommandError(errors.XGROUP_NO_KEY)
    if args[4] == b"$":
        sid = MIN_ID if st is None else st.last_id
    else:
        sid = full_id(args[4])
    if st is None:
        st = xs.create_empty(ctx.ks, args[2], ctx.ks.now())
    try:
        xs.group_create(ctx.ks, st, args[3], sid, entries_read)
    except xs.BusyGroup:
        raise CommandError(errors.BUSYGROUP) from None
    ctx.fire("t", b"xgroup-create", args[2])
    return OK


@command("setid", -5, "write", specs="RW UPDATE index 2 range 0", group="stream", parent="xgroup",
         acl=_ACL_W_SLOW, since="5.0.0", summary="Set a consumer group to an arbitrary last delivered ID value.",
         syntax="key group id | $ [ENTRIESREAD entries-read]")
def xgroup_setid(ctx, args: list[bytes]):
    n = len(args)
    entries_read: int | None = None
    if n not in (5, 7):
        raise CommandError(errors.subcommand_syntax("xgroup", args[1]))
    if n == 7:
        if not _is(args[5], b"entriesread"):
            raise CommandError(errors.subcommand_syntax("xgroup", args[1]))
        entries_read = _entries_read(args[6])
    st, g = _xgroup_target(ctx, args, False, True)
    assert st is not None and g is not None
    sid = st.last_id if args[4] == b"$" else full_id(args[4], strict=False)
    xs.group_setid(ctx.ks, g, sid, entries_read)
    ctx.fire("t", b"xgroup-setid", args[2])
    return OK


@command("destroy", 4, "write", specs="RW DELETE index 2 range 0", group="stream", parent="xgroup",
         acl=_ACL_W_SLOW, since="5.0.0", summary="Destroy a consumer group.",
         complexity="O(N) where N is the number of entries in the group's pending entries list (PEL).",
         syntax="key group")
def xgroup_destroy(ctx, args: list[bytes]):
    _, g = _xgroup_target(ctx, args, False, False)
    if g is None:
        return 0
    xs.group_destroy(ctx.ks, g)
    ctx.fire("t", b"xgroup-destroy", args[2])
    return 1


@command("createconsumer", 5, "write denyoom", specs="RW INSERT index 2 range 0", group="stream",
         parent="xgroup", acl=_ACL_W_SLOW, since="6.2.0",
         summary="Create a consumer in a consumer group.", syntax="key group consumer")
def xgroup_createconsumer(ctx, args: list[bytes]):
    _, g = _xgroup_target(ctx, args, False, True)
    assert g is not None
    created = xs.create_consumer(ctx.ks, g, args[4], ctx.ks.now())
    if created:
        ctx.fire("t", b"xgroup-createconsumer", args[2])
    return int(created)


@command("delconsumer", 5, "write", specs="RW DELETE index 2 range 0", group="stream", parent="xgroup",
         acl=_ACL_W_SLOW, since="5.0.0", summary="Delete a consumer from a consumer group.",
         syntax="key group consumer")
def xgroup_delconsumer(ctx, args: list[bytes]):
    _, g = _xgroup_target(ctx, args, False, True)
    assert g is not None
    if not xs.consumer_exists(ctx.ks, g, args[4]):
        return 0
    n = xs.delete_consumer(ctx.ks, g, args[4])
    ctx.fire("t", b"xgroup-delconsumer", args[2])
    return n


# -- XINFO -------------------------------------------------------------------------------------

_XINFO_HELP = (
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
)
xinfo_help = table.help_subcommand("xinfo", _XINFO_HELP, group="stream", acl="stream slow")


def _xinfo_stream_of(ctx, key: bytes) -> xs.Stream:
    st = _read(ctx, key)
    if st is None:
        raise CommandError(errors.NO_SUCH_KEY)
    return st


def _entries_read_reply(pos: Any) -> int | None:
    return pos.entries_read


def _radix(st: xs.Stream) -> tuple[int, int]:
    """Redis's radix-tree-keys/nodes, as if every node held ``NODE_ENTRIES`` entries."""
    keys = -(-st.length // xs.NODE_ENTRIES)
    return keys, keys + 1


@command("stream", -3, "readonly", specs="RO ACCESS index 2 range 0", group="stream", parent="xinfo",
         acl=_ACL_R_SLOW, since="5.0.0", summary="Get information about a stream",
         syntax="key [FULL [COUNT count]]")
def xinfo_stream(ctx, args: list[bytes]):
    st = _xinfo_stream_of(ctx, args[2])
    rest = args[3:]
    full = bool(rest)
    count = 10
    if rest:
        if not _is(rest[0], b"full"):
            raise CommandError(errors.subcommand_syntax("xinfo", args[1]))
        if len(rest) > 1:
            if len(rest) != 3 or not _is(rest[1], b"count"):
                raise CommandError(errors.subcommand_syntax("xinfo", args[1]))
            count = A.int_arg(rest[2])
            if count < 0:
                count = 10
    ks = ctx.ks
    tot = st.totals()
    keys, nodes = _radix(st)
    out: list[Any] = [b"length", st.length, b"radix-tree-keys", keys, b"radix-tree-nodes", nodes,
                      b"last-generated-id", fmt(tot.last), b"max-deleted-entry-id", fmt(tot.max_deleted),
                      b"entries-added", tot.added, b"recorded-first-entry-id", fmt(xs.first_id(ks, st))]
    groups = xs.groups(ks, st)
    if not full:
        first, last = xs.first_entry(ks, st), xs.last_entry(ks, st)
        out += [b"groups", len(groups),
                b"first-entry", None if first is None else entry_reply(*first),
                b"last-entry", None if last is None else entry_reply(*last)]
        return Map(out)
    out += [b"entries", entries_reply(xs.range_entries(ks, st, MIN_ID, MAX_ID, count))]
    greps = []
    for g in groups:
        pos = g.position()
        pel = list(xs.pending(ks, g))
        cons = xs.consumers(ks, g)
        crep = []
        for c in cons:
            mine = [p for p in pel if p.consumer == c.name]
            crep.append(Map([b"name", c.name, b"seen-time", c.seen_ms, b"pel-count", len(mine),
                             b"pending", [[fmt(p.id), p.delivery_ms, p.deliveries]
                                          for p in (mine[:count] if count else mine)]]))
        greps.append(Map([b"name", g.name, b"last-delivered-id", fmt(pos.id),
                          b"entries-read", _entries_read_reply(pos), b"lag", xs.lag(ks, st, pos),
                          b"pel-count", len(pel),
                          b"pending", [[fmt(p.id), p.consumer, p.delivery_ms, p.deliveries]
                                       for p in (pel[:count] if count else pel)],
                          b"consumers", crep]))
    out += [b"groups", greps]
    return Map(out)


@command("groups", 3, "readonly", specs="RO ACCESS index 2 range 0", group="stream", parent="xinfo",
         acl=_ACL_R_SLOW, since="5.0.0", summary="List the consumer groups of a stream", syntax="key")
def xinfo_groups(ctx, args: list[bytes]):
    st = _xinfo_stream_of(ctx, args[2])
    ks = ctx.ks
    out = []
    for g in xs.groups(ks, st):
        pos = g.position()
        out.append(Map([b"name", g.name, b"consumers", len(xs.consumers(ks, g)),
                        b"pending", xs.pending_summary(ks, g).size, b"last-delivered-id", fmt(pos.id),
                        b"entries-read", _entries_read_reply(pos), b"lag", xs.lag(ks, st, pos)]))
    return out


@command("consumers", 4, "readonly", specs="RO ACCESS index 2 range 0", group="stream", parent="xinfo",
         acl=_ACL_R_SLOW, since="5.0.0", summary="List the consumers in a consumer group",
         syntax="key group")
def xinfo_consumers(ctx, args: list[bytes]):
    st = _xinfo_stream_of(ctx, args[2])
    g = xs.group(ctx.ks, st, args[3])
    if g is None:
        raise CommandError(errors.nogroup_name(args[2], args[3]))
    now = ctx.ks.now()
    per = xs.pending_summary(ctx.ks, g).per_consumer
    return [Map([b"name", c.name, b"pending", per.get(c.name, 0), b"idle", max(now - c.seen_ms, 0)])
            for c in xs.consumers(ctx.ks, g)]

