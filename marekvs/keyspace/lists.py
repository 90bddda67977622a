"""Lists: a collection head plus one position-keyed LWW record per element (tag b'q').

The records (the data model's "Lists", ``core/listelem.py``)::

    head     [pid] b'M' [klen] [key]           ctype LIST; TTL and the delete clock ride it
    element  [pid] b'q' [klen] [key] [pos u64]  payload = the raw value (LWW register)

The first element lands at ``LIST_CENTER``; LPUSH takes ``first - 1``, RPUSH
``last + 1``; a pop writes a tombstone at its position; LSET overwrites one position;
LINSERT and a LREM that removes from the middle rewrite the list compacted from
LIST_CENTER (``listelem.rebuild``). LTRIM, and a LREM whose removals all sit at the
ends, only remove from the ends: they write tombstones there, as pops do, and leave
every other element where it is (no rewrite, and a concurrent LSET of a kept element
on another node survives). Every command is one ``apply``.

Emptiness. A list emptied by a pop, LTRIM or LREM disappears as in Redis, by the
keyspace's one existence rule (``Keyspace.present``: a list exists while it has a live
element): the removal writes the tombstones of the elements it removed and nothing more.
An element pushed concurrently on another node, which the emptying node had not seen,
is not one it removed: it stays, and the list exists again everywhere once it arrives. A
list whose head is dead (DEL, expiry) exists too while it has an element newer than that
death (one pushed on a node that had not seen the DEL); the next write re-creates its head.

Positions, not ranks. A command addresses elements by rank (index); the records are
keyed by position. A per-list *hint* (``Hint``, kept in memory by ``Lists``) maps one to
the other without rescanning the tombstones that pops leave behind: the live element
count (LLEN is O(1)), the first and last live positions, and the clock it was built for.
While ``count == last - first + 1`` the list is *dense* and rank ``i`` is position
``first + i``: push, pop, LINDEX, LSET and LRANGE are point reads and writes, O(1) per
element however many tombstones precede the first live element. A hint is built by one
scan of the list's records on first use and then kept up to date from the node's change
feed, which reports every record the apply path changes, local or replicated. A list made
sparse by concurrent writers (a rebuild on one node racing pushes on another) works
through scans from the nearest known position instead.

What a hint counts: the element records that are live and newer than the delete clock of
the head record stored at the key (``head.delete_clock``), whether that head is live or
not. A head change that raises the delete clock above every element the hint saw (a DEL,
a pop-to-empty, an expiry) makes the hint empty without a scan; any other change of the
clock drops it (rebuilt on next use). Expiry of a head reports no change, so every use
checks the clock. Elements never carry a TTL of their own here; a list holding one (only
a peer could write it) is not cached and is scanned on every use.

Costs (docs/compatibility.md has the table): push, pop, LLEN O(1) per element; LINDEX,
LSET O(1) on a dense list; LRANGE O(range); LTRIM O(removed); LINSERT O(n); LREM O(n),
plus O(n) writes when it removes from the middle; LPOS O(n); a sparse list (rare) or the
first use of a list after a restart costs one scan of its records.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Final, Protocol

from marekvs.core import envelope as env
from marekvs.core import head
from marekvs.core import keys as K
from marekvs.core import listelem
from marekvs.core.envelope import RecordType
from marekvs.core.head import CollectionType
from marekvs.keyspace.keyspace import Keyspace
from marekvs.keyspace.status import NoSuchKey, WrongType
from marekvs.storage.engine import prefix_end

LIST = CollectionType.LIST
CENTER = K.LIST_CENTER
MAX_HINTS = 100_000  # lists whose hint is kept in memory (~600 B each; the oldest goes first)
POINT_READS = 128  # a dense range up to this many elements is read by point reads, else a scan

_ELEMENT_FLAGS = env.make_flags(RecordType.LIST)
_TOMBSTONE_FLAGS = env.make_flags(RecordType.LIST, tombstone=True)
_PACK = env.pack_envelope
_HEADER: Final = env.HEADER
_NO_TTL: Final = env.NO_TTL
_TTL_AT: Final = env.TTL_AT  # record[_TTL_AT:_HEADER] is the deadline
_HLC_AT: Final = env.HLC_AT  # record[_HLC_AT:_ORIGIN_AT] is the hlc
_ORIGIN_AT: Final = env.ORIGIN_AT
_ORD_LIST = K.TAG_LIST[0]
_ORD_HEAD = K.ORD_HEAD
_TAG_AT = K.TAG_AT
_CTYPE_AT = env.HEADER + 1  # a head payload's ctype byte (core/head.py's layout)
_CLOCK_AT: Final = env.HEADER + 2  # ... and its delete clock, at [_CLOCK_AT:_CLOCK_END]
_CLOCK_END: Final = env.HEADER + 10

Change = tuple[bytes, bytes | None, bytes]
Record = tuple[bytes, bytes]  # (internal key, record)
Element = tuple[int, bytes]  # (position, record)


class Feed(Protocol):
    """The keyspace's change feed (``keyspace/changes.py``), as this module uses it."""

    def subscribe(self, fn: Callable[[list[Change]], None]) -> None: ...

    def unsubscribe(self, fn: Callable[[list[Change]], None]) -> None: ...


def alive(rec: bytes, clock: int, now: int) -> bool:
    """An element record counts in its list: live (``envelope.is_live``) and newer than
    the head's delete clock ``clock`` (``head.element_live``, inlined; a list element's
    gate clock is its hlc). tests/unit/test_lists_ops.py pins it to core's rule."""
    if rec[0] & 1:
        return False
    d = rec[_TTL_AT:_HEADER]
    if d != _NO_TTL and int.from_bytes(d, "big") <= now:
        return False
    return int.from_bytes(rec[_HLC_AT:_ORIGIN_AT], "big") > clock


def pos_bytes(pos: int) -> bytes:
    return pos.to_bytes(8, "big")


class Keys:
    """The internal keys of one list: its string key (what a TYPE check reads first), its
    head key and the prefix of its element keys. Built once per list (one partition hash)
    and kept with its hint."""

    __slots__ = ("pid", "string", "head", "prefix")

    def __init__(self, key: bytes) -> None:
        self.pid, self.string = K.locate_string(key)
        self.head = K.head_key_of_string_key(self.string)
        self.prefix = K.TAG_LIST.join((self.head[:2], self.head[3:]))


class Hint:
    """What a list's element records amount to (see the module docstring). ``first`` and
    ``last`` are bounds: the true first live position is >= ``first`` and the true last
    <= ``last``, exactly equal when ``exact_first`` / ``exact_last``."""

    __slots__ = ("keys", "prefix", "clock", "count", "first", "last", "exact_first", "exact_last", "max_hlc")

    def __init__(self, keys: Keys, clock: int) -> None:
        self.keys = keys  # the list's internal keys
        self.prefix = keys.prefix  # [pid] b'q' [klen] [key]: the element key prefix
        self.clock = clock  # the delete clock the count is relative to
        self.count = 0
        self.first = self.last = CENTER
        self.exact_first = self.exact_last = True
        self.max_hlc = 0  # the highest hlc of any element ever counted

    def empty(self, clock: int) -> None:
        self.clock = clock
        self.count = 0
        self.first = self.last = CENTER
        self.exact_first = self.exact_last = True

    @property
    def dense(self) -> bool:
        return self.exact_first and self.exact_last and self.count == self.last - self.first + 1


class Lists:
    """The lists of one keyspace: their hints, kept up to date from the change feed
    (subscribed while any hint is held)."""

    def __init__(self, ks: Keyspace, feed: Feed | None) -> None:
        self.ks = ks
        self.feed = feed
        self.hints: dict[bytes, Hint] = {}
        self.subscribed = False
        self.builds = 0  # scans that built a hint (tests and INFO-like checks read it)

    # -- hints ----------------------------------------------------------------------------
    def hint(self, key: bytes, head_rec: bytes | None, now: int, keys: Keys | None = None,
             live: bool = False) -> Hint:
        """The hint of ``key`` whose stored head record is ``head_rec`` (live or dead;
        ``live`` says it may be live, a shortcut for a live head without TTL), with exact
        bounds: from memory if it still holds, else built by a scan."""
        if live and head_rec is not None and head_rec[_TTL_AT:_HEADER] == _NO_TTL and not head_rec[0] & 1:
            clock = int.from_bytes(head_rec[_CLOCK_AT:_CLOCK_END], "big")  # a live head's: the one in its payload
        else:
            clock = head.delete_clock(head_rec, now)
        h = self.hints.get(key)
        if h is not None and h.clock != clock:
            if clock > h.clock and (h.count == 0 or clock >= h.max_hlc):
                h.empty(clock)  # every element it counted is older than the new clock
            else:
                self.drop(key)
                h = None
        if h is None:
            h = self._build(key, keys or Keys(key), clock, now)
        if h.count and not (h.exact_first and h.exact_last):
            self._resolve(h, now)
        return h

    def drop(self, key: bytes) -> None:
        self.hints.pop(key, None)
        if not self.hints and self.subscribed and self.feed is not None:
            self.feed.unsubscribe(self.changed)
            self.subscribed = False

    def _build(self, key: bytes, keys: Keys, clock: int, now: int) -> Hint:
        self.builds += 1
        h = Hint(keys, clock)
        prefix = h.prefix
        n = len(prefix)
        cacheable = True
        for ik, rec in self.ks.engine.scan(prefix, prefix_end(prefix)):
            if not alive(rec, clock, now):
                continue
            if rec[_TTL_AT:_HEADER] != _NO_TTL:
                cacheable = False  # its expiry would change the list with no change reported
            pos = int.from_bytes(ik[n:], "big")
            if not h.count:
                h.first = pos
            h.last = pos
            h.count += 1
            hlc = int.from_bytes(rec[_HLC_AT:_ORIGIN_AT], "big")
            if hlc > h.max_hlc:
                h.max_hlc = hlc
        if cacheable and self.feed is not None:
            hints = self.hints
            if len(hints) >= MAX_HINTS:
                del hints[next(iter(hints))]
            hints[key] = h
            if not self.subscribed:
                self.feed.subscribe(self.changed)
                self.subscribed = True
        return h

    def _resolve(self, h: Hint, now: int) -> None:
        """Make inexact bounds exact: the first live position at or after ``first``; the
        last live position, found from ``first + count - 1`` (the lowest it can be)."""
        n = len(h.prefix)
        end = prefix_end(h.prefix)
        scan = self.ks.engine.scan
        if not h.exact_first:
            for ik, rec in scan(h.prefix + pos_bytes(h.first), end):
                if alive(rec, h.clock, now):
                    h.first = int.from_bytes(ik[n:], "big")
                    break
            h.exact_first = True
        if not h.exact_last:
            last = h.first
            for ik, rec in scan(h.prefix + pos_bytes(h.first + h.count - 1), end):
                if alive(rec, h.clock, now):
                    last = int.from_bytes(ik[n:], "big")
            h.last = last
            h.exact_last = True

    def changed(self, changes: list[Change]) -> None:
        """The change feed's subscriber: fold every changed list element or head into the
        hint of its list, if one is held. Runs inside every apply while hints are held,
        so the element case is inlined (an element a hint counts has no TTL, so its
        liveness needs no clock: not a tombstone, and newer than the hint's clock)."""
        hints = self.hints
        flags = _ELEMENT_FLAGS
        for ik, old, new in changes:
            t = ik[2]
            if t != _ORD_LIST and t != _ORD_HEAD:
                continue
            n = ik[3]
            h = hints.get(ik[4:4 + n] if n < 0x80 else K.user_key_of(ik))
            if h is None:
                continue
            if t == _ORD_HEAD:
                self._head(h, new)
                continue
            if new[_TTL_AT:_HEADER] != _NO_TTL:
                self.drop(K.user_key_of(ik))  # see _build: not cacheable
                continue
            clock = h.clock
            live = new[0] == flags and int.from_bytes(new[_HLC_AT:_ORIGIN_AT], "big") > clock
            was = old is not None and old[0] == flags and int.from_bytes(old[_HLC_AT:_ORIGIN_AT], "big") > clock
            if live:
                hlc = int.from_bytes(new[_HLC_AT:_ORIGIN_AT], "big")
                if hlc > h.max_hlc:
                    h.max_hlc = hlc
                if was:
                    continue
                pos = int.from_bytes(ik[-8:], "big")
                if not h.count:
                    h.first = h.last = pos
                    h.exact_first = h.exact_last = True
                elif pos <= h.first:
                    h.first = pos
                    h.exact_first = True
                elif pos >= h.last:
                    h.last = pos
                    h.exact_last = True
                h.count += 1
            elif was:
                self._removed(h, int.from_bytes(ik[-8:], "big"))

    def _head(self, h: Hint, new: bytes) -> None:
        clock = head.delete_clock(new, self.ks.now())
        if clock != h.clock:
            if clock > h.clock and (h.count == 0 or clock >= h.max_hlc):
                h.empty(clock)
            else:
                self.drop(K.user_key_of(h.keys.head))

    def _removed(self, h: Hint, pos: int) -> None:
        if not h.count or pos < h.first or pos > h.last:
            self.drop(K.user_key_of(h.keys.head))  # cannot happen while the hint is right
            return
        dense = h.dense
        h.count -= 1
        if not h.count:
            h.empty(h.clock)
        elif pos == h.first:
            h.first = pos + 1
            h.exact_first = dense
        elif pos == h.last:
            h.last = pos - 1
            h.exact_last = dense


def lists_of(ks: Keyspace) -> Lists:
    """The ``Lists`` of ``ks`` (a keyspace extension), made on first use, following the
    keyspace's change feed while it holds a hint."""
    return ks.extension("lists", lambda k: Lists(k, k.changes))


# -- reading ------------------------------------------------------------------------------

def lookup(lx: Lists, key: bytes, now: int) -> tuple[Keys, bytes | None, bytes | None]:
    """(the list's keys, its head if the list exists, the head record stored at the key,
    live or not, or None). The list exists by the keyspace's rule (``Keyspace.present``:
    a live element, counted by the hint, whether the head is live or dead). WrongType if
    the key holds another type: a live string (read first, as the spec's TYPE check
    does) or an existing collection of another type; this is ``Keyspace.existing`` with
    the keys and the count taken from the list's hint (tests/unit/test_lists_ops.py holds
    the two to the same answers)."""
    ks = lx.ks
    h = lx.hints.get(key)
    keys = Keys(key) if h is None else h.keys
    get = ks.get
    s = get(keys.string)
    if s is not None and not s[0] & 1:
        d = s[_TTL_AT:_HEADER]
        if d == _NO_TTL or int.from_bytes(d, "big") > now:
            raise WrongType()
    if not ks.head_pids[keys.pid]:
        return keys, None, None
    hd = get(keys.head)
    if hd is None:
        return keys, None, None
    if hd[_CTYPE_AT] != LIST:
        if ks.present(keys.head, hd, now):
            raise WrongType()
        return keys, None, hd
    live = not hd[0] & 1
    if live:
        d = hd[_TTL_AT:_HEADER]
        live = d == _NO_TTL or int.from_bytes(d, "big") > now
    if lx.hint(key, hd, now, keys, live).count:
        return keys, hd, hd
    return keys, None, hd


def read_lookup(lx: Lists, key: bytes, now: int) -> tuple[Keys, bytes | None, bytes | None]:
    """``lookup`` for a read command (LLEN, LRANGE, LINDEX, LPOS), counted as a keyspace
    hit or miss (a key of another type is a hit: Redis found it)."""
    ks = lx.ks
    try:
        found = lookup(lx, key, now)
    except WrongType:
        ks.counted(key, True)
        raise
    ks.counted(key, found[1] is not None)
    return found


def _scan(lx: Lists, h: Hint, start: int, now: int) -> Iterator[Element]:
    """(position, record) of the live elements from position ``start`` on, in order."""
    prefix = h.prefix
    n = len(prefix)
    clock = h.clock
    for ik, rec in lx.ks.engine.scan(prefix + pos_bytes(start), prefix_end(prefix)):
        if alive(rec, clock, now):
            yield int.from_bytes(ik[n:], "big"), rec


def _points(lx: Lists, h: Hint, positions: range) -> list[Element] | None:
    """The records at ``positions`` of a dense list, or None if one of them is not a live
    element, i.e. the hint was wrong (the caller drops it). A record the hint counts is
    live and newer than its clock: it was checked when counted, and only a change the
    feed reports (or a head expiry, which ``Lists.hint`` checks) could alter that, so a
    missing record or a tombstone is the one thing to look for here."""
    get = lx.ks.get
    prefix = h.prefix
    flags = _ELEMENT_FLAGS
    out = []
    for pos in positions:
        rec = get(prefix + pos.to_bytes(8, "big"))
        if rec is None or rec[0] != flags:
            return None
        out.append((pos, rec))
    return out


def _slice(lx: Lists, key: bytes, h: Hint, head_rec: bytes, start: int, stop: int,
           now: int) -> list[Element]:
    """The live elements of ranks ``start..stop`` (0 <= start <= stop < count)."""
    n = stop - start + 1
    if h.dense and n <= POINT_READS:
        got = _points(lx, h, range(h.first + start, h.first + stop + 1))
        if got is not None:
            return got
        lx.drop(key)  # the hint was wrong: a new one, and the scans below
        h = lx.hint(key, head_rec, now)
    if h.dense:
        it = _scan(lx, h, h.first + start, now)
    else:
        it = _scan(lx, h, h.first, now)
        for _ in zip(range(start), it):
            pass
    return [el for _, el in zip(range(n), it)]


def _ends(lx: Lists, key: bytes, h: Hint, head_rec: bytes, n: int, left: bool,
          now: int) -> tuple[list[Element], Hint]:
    """The first (``left``) or last ``n`` live elements (n <= count), from that end, and
    the hint they were found with (a new one if ``h`` turned out wrong)."""
    if h.dense:
        got = _points(lx, h, range(h.first, h.first + n) if left else range(h.last, h.last - n, -1))
        if got is not None:
            return got, h
        lx.drop(key)
        h = lx.hint(key, head_rec, now)
        n = min(n, h.count)
        if not n:
            return [], h
    if left:
        return _slice(lx, key, h, head_rec, 0, n - 1, now), h
    holes = h.last - h.first + 1 - h.count
    els = list(_scan(lx, h, max(h.first, h.last - n + 1 - holes), now))
    return els[::-1][:n], h


def elements(lx: Lists, key: bytes, now: int) -> list[Element]:
    """Every live element of the list ``key`` in order ([] if absent)."""
    keys, hd, _ = lookup(lx, key, now)
    if hd is None:
        return []
    h = lx.hint(key, hd, now, keys, True)
    return list(_scan(lx, h, h.first, now)) if h.count else []


def values(lx: Lists, key: bytes, now: int) -> list[bytes]:
    return [rec[_HEADER:] for _, rec in elements(lx, key, now)]


def op_len(lx: Lists, key: bytes, now: int) -> int:
    keys, hd, _ = read_lookup(lx, key, now)
    return 0 if hd is None else lx.hint(key, hd, now, keys, True).count


def op_range(lx: Lists, key: bytes, start: int, stop: int, now: int) -> list[bytes]:
    """LRANGE: the values of ranks ``start..stop`` (negative from the end, Redis's
    clamping)."""
    keys, hd, _ = read_lookup(lx, key, now)
    if hd is None:
        return []
    h = lx.hint(key, hd, now, keys, True)
    n = h.count
    if start < 0:
        start += n
    if stop < 0:
        stop += n
    if start < 0:
        start = 0
    if start > stop or start >= n:
        return []
    if stop >= n:
        stop = n - 1
    if h.dense and stop - start < POINT_READS:  # the hot path: values by point reads
        get = lx.ks.get
        prefix = h.prefix
        first = h.first
        recs = [get(prefix + p.to_bytes(8, "big")) for p in range(first + start, first + stop + 1)]
        flags = _ELEMENT_FLAGS
        for rec in recs:
            if rec is None or rec[0] != flags:
                break  # the hint was wrong: _slice drops it and scans
        else:
            return [rec[_HEADER:] for rec in recs]  # type: ignore[index]
    return [rec[_HEADER:] for _, rec in _slice(lx, key, h, hd, start, stop, now)]


def op_index(lx: Lists, key: bytes, index: int, now: int) -> bytes | None:
    keys, hd, _ = lookup(lx, key, now)
    if hd is None:
        return None
    h = lx.hint(key, hd, now, keys, True)
    if index < 0:
        index += h.count
    if index < 0 or index >= h.count:
        return None
    return _slice(lx, key, h, hd, index, index, now)[0][1][_HEADER:]


def op_pos(lx: Lists, key: bytes, element: bytes, rank: int, count: int, maxlen: int,
           now: int) -> list[int] | None:
    """LPOS's matches, as ``lposCommand`` finds them (``count`` -1: no COUNT option, at
    most one index is returned; 0: all). None when the key does not exist."""
    keys, hd, _ = read_lookup(lx, key, now)
    if hd is None:
        return None
    h = lx.hint(key, hd, now, keys, True)
    reverse = rank < 0
    if reverse:
        rank = _wrap64(-rank)  # -LLONG_MIN stays LLONG_MIN, as in C
    llen = h.count
    it: Iterator[Element]
    if reverse:
        it = _reversed(lx, key, h, hd, now)
    else:
        it = _scan(lx, h, h.first, now) if llen else iter(())
    out: list[int] = []
    matches = 0
    for index, (_, rec) in enumerate(it):
        if maxlen and index >= maxlen:
            break
        if rec[_HEADER:] == element:
            matches += 1
            if matches >= rank:
                out.append(llen - index - 1 if reverse else index)
                if count == -1 or (count and _wrap64(matches - rank + 1) >= count):
                    break
    return out


def _reversed(lx: Lists, key: bytes, h: Hint, head_rec: bytes, now: int) -> Iterator[Element]:
    """The live elements from the last to the first: point reads down a dense list (a
    LPOS with MAXLEN stops early), else one forward scan, reversed."""
    if not h.count:
        return
    if h.dense:
        get = lx.ks.get
        prefix = h.prefix
        for pos in range(h.last, h.first - 1, -1):
            rec = get(prefix + pos.to_bytes(8, "big"))
            if rec is None or not alive(rec, h.clock, now):
                break  # the hint was wrong: fall back on the scan below for the rest
            yield pos, rec
        else:
            return
        lx.drop(key)
        rest = [el for el in _scan(lx, lx.hint(key, head_rec, now), h.first, now) if el[0] < pos]
        yield from reversed(rest)
        return
    yield from reversed(list(_scan(lx, h, h.first, now)))


def _wrap64(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


# -- writing ------------------------------------------------------------------------------

def _push_records(h: Hint, values_: list[bytes], left: bool, stamp: int, node: int) -> list[Record]:
    """Element records that push ``values_`` one by one onto an end of the list ``h``
    describes, stamped ``stamp``, ``stamp + 1``, ..."""
    prefix = h.prefix
    if h.count:
        pos = listelem.lpush_pos(h.first) if left else listelem.rpush_pos(h.last)
    else:
        pos = CENTER
    step = -1 if left else 1
    if not 0 <= pos + step * (len(values_) - 1) <= listelem.POS_MAX:
        raise OverflowError("list position space exhausted")
    out = []
    for v in values_:
        out.append((prefix + pos.to_bytes(8, "big"), _PACK(_ELEMENT_FLAGS, stamp, node, 0) + v))
        stamp += 1
        pos += step
    return out


def _tombstones(h: Hint, positions: list[int], stamp: int, node: int) -> list[Record]:
    prefix = h.prefix
    out = []
    for pos in positions:
        out.append((prefix + pos.to_bytes(8, "big"), _PACK(_TOMBSTONE_FLAGS, stamp, node, 0)))
        stamp += 1
    return out


def op_push(lx: Lists, key: bytes, values_: list[bytes], left: bool, xx: bool, now: int) -> int:
    """LPUSH / RPUSH (LPUSHX / RPUSHX with ``xx``): the new length (0 when ``xx`` and
    the list does not exist)."""
    ks = lx.ks
    keys, hd, stored = lookup(lx, key, now)
    if hd is None and xx:
        return 0
    h = lx.hint(key, stored, now, keys, True)
    before = h.count
    recs: list[Record] = []
    if _needs_head(hd, stored, now):  # (a dead head's delete clock carries over: the hint's clock)
        recs.append((keys.head, head.new(LIST, ks.hlc.now(), ks.node_id, prior=stored, now_ms=now)))
    n = len(values_)
    recs += _push_records(h, values_, left, ks.hlc.now() if n == 1 else ks.hlc.reserve(n), ks.node_id)
    ks.apply(recs)
    return before + n


def _needs_head(hd: bytes | None, stored: bytes | None, now: int) -> bool:
    """A write to a list whose head is ``hd`` when it exists (else None), ``stored`` the
    head record at the key, writes a new head: the rule of ``Keyspace.head_for_write``
    (a live head is kept while the list exists or has no TTL)."""
    if stored is None or stored[_CTYPE_AT] != LIST or stored[0] & 1:
        return True
    d = stored[_TTL_AT:_HEADER]
    if d == _NO_TTL:
        return False
    return int.from_bytes(d, "big") <= now or hd is None


def _removal(lx: Lists, hd: bytes, h: Hint, positions: list[int]) -> list[Record]:
    """Records that remove the live elements at ``positions``: their tombstones. Removing
    the last one writes nothing more: the list then does not exist (``lookup``)."""
    ks = lx.ks
    n = len(positions)
    return _tombstones(h, positions, ks.hlc.now() if n == 1 else ks.hlc.reserve(n), ks.node_id)


def op_pop(lx: Lists, key: bytes, left: bool, count: int, now: int) -> list[bytes] | None:
    """LPOP / RPOP of up to ``count`` elements: their values, or None if the list does
    not exist."""
    keys, hd, _ = lookup(lx, key, now)
    if hd is None:
        return None
    h = lx.hint(key, hd, now, keys, True)
    if not h.count:
        return None  # a live head with no element left (they were popped on another node)
    els, h = _ends(lx, key, h, hd, min(count, h.count), left, now)
    lx.ks.apply(_removal(lx, hd, h, [p for p, _ in els]))
    return [rec[_HEADER:] for _, rec in els] if els else None


def op_mpop(lx: Lists, keys: list[bytes], left: bool, count: int, now: int,
            skip_wrong_type: bool = False) -> tuple[bytes, list[bytes]] | None:
    """LMPOP / BLPOP: pop up to ``count`` from the first of ``keys`` that holds a list.
    WrongType for a key of another type met before it (skipped instead with
    ``skip_wrong_type``: a blocked client keeps waiting, as in Redis)."""
    for key in keys:
        try:
            lkeys, hd, _ = lookup(lx, key, now)
        except WrongType:
            if skip_wrong_type:
                continue
            raise
        if hd is None:
            continue
        h = lx.hint(key, hd, now, lkeys, True)
        if not h.count:
            continue
        els, h = _ends(lx, key, h, hd, min(count, h.count), left, now)
        if not els:
            continue
        lx.ks.apply(_removal(lx, hd, h, [p for p, _ in els]))
        return key, [rec[_HEADER:] for _, rec in els]
    return None


def op_set(lx: Lists, key: bytes, found: tuple[Keys, bytes | None, bytes | None], index: int,
           value: bytes, now: int) -> bool:
    """LSET of the list ``found`` (``lookup``'s answer for ``key``, which Redis checks
    before it parses the index): overwrite rank ``index``; False if it is out of range,
    NoSuchKey if the list does not exist."""
    ks = lx.ks
    keys, hd, _ = found
    if hd is None:
        raise NoSuchKey()
    h = lx.hint(key, hd, now, keys, True)
    if index < 0:
        index += h.count
    if index < 0 or index >= h.count:
        return False
    pos = _slice(lx, key, h, hd, index, index, now)[0][0]
    ks.apply([(h.prefix + pos_bytes(pos), _PACK(_ELEMENT_FLAGS, ks.hlc.now(), ks.node_id, 0) + value)])
    return True


def _remove_ranks(lx: Lists, hd: bytes, h: Hint, old: list[Element], gone: list[int]) -> None:
    """Remove the elements of ranks ``gone`` (ascending) from the live elements ``old``,
    in one apply: ranks at the ends only (all of them among those) are tombstones there
    (the others stay in place, the list stays dense); anything else rewrites the rest
    compacted from LIST_CENTER (``_rebuild``)."""
    n, k = len(old), len(gone)
    at_head = 0
    while at_head < k and gone[at_head] == at_head:
        at_head += 1
    if all(r == n - k + i for i, r in enumerate(gone[at_head:], at_head)):
        lx.ks.apply(_removal(lx, hd, h, [old[r][0] for r in gone]))
        return
    dropped = set(gone)
    _rebuild(lx, h, old, [rec[_HEADER:] for r, (_, rec) in enumerate(old) if r not in dropped])


def _rebuild(lx: Lists, h: Hint, old: list[Element], new: list[bytes]) -> None:
    """Rewrite the list (live elements ``old``) as ``new`` compacted from LIST_CENTER
    (``listelem.rebuild``: positions already holding their value are not written), in one
    apply; the hint ends exact (the apply's changes may have left it bounds to resolve)."""
    ks = lx.ks
    writes, deletes = listelem.rebuild([(p, rec[_HEADER:]) for p, rec in old], new)
    stamp = ks.hlc.reserve(len(writes) + len(deletes))
    node = ks.node_id
    prefix = h.prefix
    recs = [(prefix + pos_bytes(p), _PACK(_ELEMENT_FLAGS, stamp + i, node, 0) + v)
            for i, (p, v) in enumerate(writes)]
    recs += _tombstones(h, deletes, stamp + len(writes), node)
    ks.apply(recs)
    h.count, h.first, h.last = len(new), CENTER, CENTER + len(new) - 1
    h.exact_first = h.exact_last = True
    h.max_hlc = max(h.max_hlc, stamp + len(writes) + len(deletes))


def op_insert(lx: Lists, key: bytes, before: bool, pivot: bytes, value: bytes, now: int) -> int:
    """LINSERT: the new length, -1 if ``pivot`` is not in the list, 0 if there is no
    list. Next to the first or last element it is a push; elsewhere a rebuild."""
    ks = lx.ks
    keys, hd, _ = lookup(lx, key, now)
    if hd is None:
        return 0
    h = lx.hint(key, hd, now, keys, True)
    old = list(_scan(lx, h, h.first, now)) if h.count else []
    vals = [rec[_HEADER:] for _, rec in old]
    try:
        i = vals.index(pivot)
    except ValueError:
        return -1
    at = i if before else i + 1
    if at == 0 or at == len(vals):
        ks.apply(_push_records(h, [value], at == 0, ks.hlc.now(), ks.node_id))
        return len(vals) + 1
    vals.insert(at, value)
    _rebuild(lx, h, old, vals)
    return len(vals)


def op_rem(lx: Lists, key: bytes, count: int, value: bytes, now: int) -> int:
    """LREM: how many elements equal to ``value`` were removed (``count`` > 0 from the
    head, < 0 from the tail, 0 all)."""
    keys, hd, _ = lookup(lx, key, now)
    if hd is None:
        return 0
    h = lx.hint(key, hd, now, keys, True)
    old = list(_scan(lx, h, h.first, now)) if h.count else []
    order = range(len(old) - 1, -1, -1) if count < 0 else range(len(old))
    # (Redis negates a negative count in a long: LLONG_MIN stays negative, a limit never
    # reached, so every match goes)
    limit = 0 if count == -(1 << 63) else abs(count)
    gone: list[int] = []
    for r in order:
        if old[r][1][_HEADER:] == value:
            gone.append(r)
            if limit and len(gone) == limit:
                break
    if gone:
        _remove_ranks(lx, hd, h, old, sorted(gone))
    return len(gone)


def op_trim(lx: Lists, key: bytes, start: int, stop: int, now: int) -> bool:
    """LTRIM: keep ranks ``start..stop`` (Redis's clamping); the others are removed from
    the ends (tombstones). False if there is no list."""
    ks = lx.ks
    keys, hd, _ = lookup(lx, key, now)
    if hd is None:
        return False
    h = lx.hint(key, hd, now, keys, True)
    n = h.count
    if start < 0:
        start += n
    if stop < 0:
        stop += n
    if start < 0:
        start = 0
    if start > stop or start >= n:
        ltrim, rtrim = n, 0
    else:
        if stop >= n:
            stop = n - 1
        ltrim, rtrim = start, n - stop - 1
    if not ltrim and not rtrim:
        return True
    if ltrim + rtrim >= n:  # nothing left: every element's tombstone (the list then does not exist)
        ltrim, rtrim = n, 0
    if h.dense:
        gone = list(range(h.first, h.first + ltrim)) + list(range(h.last - rtrim + 1, h.last + 1))
    else:
        els = list(_scan(lx, h, h.first, now))
        gone = [p for p, _ in els[:ltrim]] + [p for p, _ in els[n - rtrim:]]
    ks.apply(_tombstones(h, gone, ks.hlc.reserve(len(gone)), ks.node_id))
    return True


def op_move(lx: Lists, src: bytes, dst: bytes, from_left: bool, to_left: bool,
            now: int) -> bytes | None:
    """LMOVE / RPOPLPUSH: the value moved, or None if ``src`` holds no list. WrongType
    if either key holds another type (``src`` checked first, ``dst`` only when there is
    something to move, as Redis does)."""
    ks = lx.ks
    skeys, shd, _ = lookup(lx, src, now)
    if shd is None:
        return None
    sh = lx.hint(src, shd, now, skeys, True)
    if not sh.count:
        return None
    dkeys, dhd, dstored = lookup(lx, dst, now)
    els, sh = _ends(lx, src, sh, shd, 1, from_left, now)
    if not els:
        return None
    pos, rec = els[0]
    value = rec[_HEADER:]
    node = ks.node_id
    if src == dst:
        if sh.count == 1 or from_left == to_left:
            return value  # the list comes out as it was: nothing to write
        to = listelem.lpush_pos(sh.first) if to_left else listelem.rpush_pos(sh.last)
        stamp = ks.hlc.reserve(2)
        ks.apply([(sh.prefix + pos_bytes(pos), _PACK(_TOMBSTONE_FLAGS, stamp, node, 0)),
                  (sh.prefix + pos_bytes(to), _PACK(_ELEMENT_FLAGS, stamp + 1, node, 0) + value)])
        return value
    recs = _removal(lx, shd, sh, [pos])
    dh = lx.hint(dst, dstored, now, dkeys, True)
    if _needs_head(dhd, dstored, now):
        recs.append((dkeys.head, head.new(LIST, ks.hlc.now(), node, prior=dstored, now_ms=now)))
    recs += _push_records(dh, [value], to_left, ks.hlc.now(), node)
    ks.apply(recs)
    return value
