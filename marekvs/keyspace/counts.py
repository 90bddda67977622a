"""Live elements per collection, for every collection type: sizes and existence.

A collection exists by one rule (``core/head.py``, "Existence"): its head is live and its
type exists while empty, or it has a live element. HLEN / SCARD are O(1) in Redis; a
prefix scan is O(n). ``Counts`` keeps the number of live elements of the collections
asked about, per collection *content* prefix (the records of the type's content kind in
the registry, ``registry.CONTENT``: hash fields, set and zset members, list elements,
stream entries, HyperLogLog registers), filled by one scan the first time it is asked and
then kept from the node's change feed (every record the apply path changes, local or
replicated): ``live(new) - live(old)`` per changed element, an element being live if its
record is and its kind's gate clock is above the head's delete clock. Elements that
expire by time change no record, so each entry also keeps the deadlines of its counted
elements in a heap and drops the ones that passed before it answers. A head change (DEL,
re-creation, EXPIRE of the key) drops the collection's entry (the delete clock may have
moved); the next question rescans. Entries are bounded (least recently used go first).
For collections a random command touched (SPOP, SRANDMEMBER, HRANDFIELD) an entry also
keeps the list of live elements (up to ``TRACK_LIMIT``), kept the same way, which makes
uniform random choice O(1).

The counts follow the keyspace's change feed (``Keyspace.changes``) while they hold an
entry: the first entry subscribes them, and a node that never counts pays nothing per write.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Iterator
from typing import Final, TYPE_CHECKING

from marekvs.core import envelope as env
from marekvs.core import head
from marekvs.core import keys as K
from marekvs.core import registry
from marekvs.storage.engine import prefix_end

if TYPE_CHECKING:
    from marekvs.keyspace.keyspace import Keyspace

Change = tuple[bytes, "bytes | None", bytes]  # (ikey, old record or None, new record)

TRACK_LIMIT = 200_000  # an entry keeps its element list up to this many elements
MAX_ENTRIES = 10_000  # collections counted at once (least recently used are dropped)
PROBE = 64  # records an existence question reads before it counts the collection

_TAG_AT = K.TAG_AT
_ORD_HEAD = K.ORD_HEAD
_NO_TTL: Final = env.NO_TTL
_TTL_AT: Final = env.TTL_AT  # record[_TTL_AT:_HEADER] is the deadline
_HEADER: Final = env.HEADER
_is_live = env.is_live
_CONTENT_CODES = registry.CONTENT_CODES
_GATE: list[Callable[[bytes], int] | None] = [None] * 256  # tag byte -> its kind's gate clock
for _k in registry.CONTENT.values():
    _GATE[_k.code] = _k.gate_clock
_CONTENT_TAGS = tuple(k.tag for k in registry.CONTENT.values())


def content_prefix(hk: bytes, h: bytes) -> bytes:
    """``[pid][tag][klen][key]``: the prefix of the elements of the collection whose head
    (key ``hk``) is ``h``, from the head key (same partition: no second hash)."""
    return hk[:_TAG_AT] + registry.CONTENT[head.ctype_of(h)].tag + hk[_TAG_AT + 1:]


def element_live(rec: bytes | None, gate: Callable[[bytes], int], dc: int, now: int) -> bool:
    return rec is not None and _is_live(rec, now) and gate(rec) > dc


def scan(ks: Keyspace, prefix: bytes, dc: int, now: int, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
    """(element suffix, record) of every live element under ``prefix`` from ``start`` on,
    in key order."""
    n = len(prefix)
    gate = _GATE[prefix[_TAG_AT]]
    assert gate is not None
    for ek, ev in ks.engine.scan(prefix + start, prefix_end(prefix)):
        if _is_live(ev, now) and gate(ev) > dc:
            yield ek[n:], ev


class _Entry:
    """The live elements of one collection under one head record, as of time ``t``:
    ``n`` of them; the deadlines of those with one (``ttl``, and a heap whose stale
    items ``ttl`` tells apart); with ``members``/``pos``, their list."""

    __slots__ = ("head", "dc", "t", "n", "ttl", "heap", "members", "pos", "gate")

    def __init__(self, h: bytes, dc: int, t: int, gate: Callable[[bytes], int]):
        self.head = h
        self.dc = dc
        self.t = t
        self.n = 0
        self.ttl: dict[bytes, int] = {}
        self.heap: list[tuple[int, bytes]] = []
        self.members: list[bytes] | None = None
        self.pos: dict[bytes, int] | None = None
        self.gate = gate

    def _add(self, m: bytes, rec: bytes) -> None:
        self.n += 1
        d = rec[_TTL_AT:_HEADER]
        if d != _NO_TTL:
            deadline = int.from_bytes(d, "big")
            self.ttl[m] = deadline
            heapq.heappush(self.heap, (deadline, m))
        members, pos = self.members, self.pos
        if members is not None and pos is not None:
            pos[m] = len(members)
            members.append(m)

    def _drop(self, m: bytes) -> None:
        self.n -= 1
        self.ttl.pop(m, None)
        members, pos = self.members, self.pos
        if members is not None and pos is not None:
            i = pos.pop(m, -1)
            if i < 0:
                return
            last = members.pop()
            if i < len(members):
                members[i] = last
                pos[last] = i

    def advance(self, now: int) -> int:
        """Drop the elements whose deadline passed by ``now``; the time the entry is at
        (it never goes back, even if the wall clock does)."""
        if now <= self.t:
            return self.t
        self.t = now
        heap = self.heap
        while heap and heap[0][0] <= now:
            d, m = heapq.heappop(heap)
            if self.ttl.get(m) == d:
                self._drop(m)
        return now

    def change(self, m: bytes, old: bytes | None, new: bytes, now: int) -> None:
        now = self.advance(now)
        dc, gate = self.dc, self.gate
        if element_live(old, gate, dc, now):
            self._drop(m)
        if element_live(new, gate, dc, now):
            self._add(m, new)


class Counts:
    """Live-element counts (and element lists) of the collections asked about; see the
    module docstring."""

    def __init__(self, ks: Keyspace):
        self.ks = ks
        self.entries: OrderedDict[bytes, _Entry] = OrderedDict()
        self.subscribed = False  # ``on_change`` follows the keyspace's change feed
        self.fills = 0  # scans that (re)built an entry (tests and benchmarks read it)
        # content prefix -> (head record, the internal key of one live element): what
        # ``nonempty`` found last, checked again by one point read
        self.witness: dict[bytes, tuple[bytes, bytes]] = {}

    # -- the change feed ------------------------------------------------------------------
    def on_change(self, changes: list[Change]) -> None:
        entries = self.entries
        if not entries:
            return
        now = 0
        for ik, old, new in changes:
            t = ik[_TAG_AT]
            if t == _ORD_HEAD:
                for tag in _CONTENT_TAGS:
                    entries.pop(ik[:_TAG_AT] + tag + ik[_TAG_AT + 1:], None)
                continue
            if t not in _CONTENT_CODES:
                continue
            klen, pos = K.decode_varint(ik, _TAG_AT + 1)
            end = pos + klen
            e = entries.get(ik[:end])
            if e is None:
                continue
            if not now:
                now = self.ks.now()
            e.change(ik[end:], old, new, now)

    # -- questions ----------------------------------------------------------------------
    def _entry(self, prefix: bytes, h: bytes, now: int, track: bool = False) -> _Entry:
        e: _Entry | None = self.entries.get(prefix)
        if e is not None:
            if e.head != h or e.dc != head.delete_clock(h, now):
                # a head change the feed did not report (never expected), or the head's
                # own deadline passed: its delete clock moved with no write
                del self.entries[prefix]
                e = None
            elif track and e.members is None and e.n <= TRACK_LIMIT:
                e = None  # rebuilt below, with its element list
            else:
                self.entries.move_to_end(prefix)
        if e is None:
            e = self._fill(prefix, h, now, track)
        e.advance(now)
        return e

    def _fill(self, prefix: bytes, h: bytes, now: int, track: bool) -> _Entry:
        if not self.subscribed:
            self.ks.changes.subscribe(self.on_change)
            self.subscribed = True
        self.fills += 1
        gate = _GATE[prefix[_TAG_AT]]
        assert gate is not None
        e = _Entry(h, head.delete_clock(h, now), now, gate)
        if track:
            e.members, e.pos = [], {}
        for m, rec in scan(self.ks, prefix, e.dc, now):
            e._add(m, rec)
            if e.members is not None and e.n > TRACK_LIMIT:
                e.members = e.pos = None
        entries = self.entries
        entries[prefix] = e
        while len(entries) > MAX_ENTRIES:
            entries.popitem(last=False)
        return e

    def count(self, prefix: bytes, h: bytes, now: int) -> int:
        """The number of live elements under ``prefix`` of the head ``h``."""
        return self._entry(prefix, h, now).n

    def nonempty(self, hk: bytes, h: bytes, now: int) -> bool:
        """The collection of the head ``h`` (live or dead) has a live element. A counted
        entry answers; else the element found last (the *witness*) is read again, one
        point read; else the first ``PROBE`` records are read, and a live one found
        becomes the witness; past them (a queue whose popped elements wait for the
        sweeper, a deleted collection) the collection is counted once, and the entry
        answers from then on."""
        prefix = content_prefix(hk, h)
        e = self.entries.get(prefix)
        dc = head.delete_clock(h, now)
        if e is not None and e.head == h and e.dc == dc:
            e.advance(now)
            return e.n > 0
        gate = _GATE[prefix[_TAG_AT]]
        assert gate is not None
        witness = self.witness
        w = witness.get(prefix)
        if w is not None:
            if w[0] is h or w[0] == h:
                rec = self.ks.get(w[1])
                if rec is not None and _is_live(rec, now) and gate(rec) > dc:
                    return True
            del witness[prefix]
        for i, (ek, ev) in enumerate(self.ks.engine.scan(prefix, prefix_end(prefix))):
            if _is_live(ev, now) and gate(ev) > dc:
                if len(witness) >= MAX_ENTRIES:
                    witness.clear()
                witness[prefix] = (h, ek)
                return True
            if i >= PROBE:
                return self.count(prefix, h, now) > 0
        return False

    def members(self, prefix: bytes, h: bytes, now: int) -> list[bytes] | None:
        """The live elements under ``prefix`` as a list kept up to date (do not change
        it), or None if the collection is too big to keep one."""
        return self._entry(prefix, h, now, track=True).members
