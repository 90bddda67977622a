"""Which records of a partition may be physically removed: the registry's sweep rules.

Pure: the storage sweeper (``storage/sweeper.py``) reads a partition's records in key
order, feeds them to a ``PartitionSweep`` and removes what ``finish`` returns. Removal is
not a user write (it is neither replicated nor logged), so it must not change what any
read returns, now or after a later merge of anything younger than the horizon:

- the *horizon* is ``(now - gc_grace) << 16`` as an HLC value. gc_grace is the longest a
  peer's write may take to arrive; a record older than the horizon can no longer meet a
  late one it must beat (the same contract as Cassandra's gc_grace_seconds);
- every kind (``Sweep.RECORD``): a tombstone whose hlc is below the horizon; a record
  whose TTL deadline passed gc_grace ago (``deadline + gc_grace <= now``);
- an element (``Sweep.ELEMENT``) also when its head gates it: its ``gate_clock`` is at
  or below the head's delete clock (``head.delete_clock``: the DEL clock, or the head's
  own tombstone / expiry clock), and that clock and the element's own hlc are both below
  the horizon. It reads as dead already, and a stale copy arriving later is gated by the
  same clock. The head is read once per collection, not once per element: within a
  partition a head key (tag ``'M'``) sorts before the elements of every tag above it, so
  its clock is known when they come; HLL registers (``'H'``) sort before it and are
  decided at ``finish``;
- a head (``Sweep.HEAD``) removable by the first rule stays as long as any element record
  of its collection stays: removing it would lift the gate and revive the elements it
  holds dead (and a re-created head would start from delete clock 0);
- a zset score-index record (``Sweep.INDEX``) is a hint whose own envelope decides
  nothing (``core/zset.py``): it is removed once its hlc is below the horizon and no live
  dot of its member's record holds its score (the member record is gone, or removed by
  this sweep, or holds other scores). Index records (``'Z'``) sort before the member
  records (``'z'``) of their partition: they are decided when their member comes, or at
  ``finish`` if none does.

While it reads, a ``PartitionSweep`` also counts the partition's keys and those with a
TTL, which INFO keyspace reports: a live string, and a collection by the one existence
rule (``head.present``, as ``Keyspace.present`` and DBSIZE decide it): its head is a live
stream's or HyperLogLog's, or it has a live element of its content kind above the head's
delete clock (a collection emptied by LPOP, SREM, HDEL, ... keeps its head record, and was
counted for ever).
"""

from __future__ import annotations

from marekvs.core import envelope as env
from marekvs.core import head, zset
from marekvs.core import keys as K
from marekvs.core.registry import BY_CODE, CONTENT, CONTENT_CODES, RecordKind, Sweep

_BY_CODE = BY_CODE
_RECORD = Sweep.RECORD
_HEAD = Sweep.HEAD
_INDEX = Sweep.INDEX
_ORD_HEAD = K.ORD_HEAD
_ORD_ZSET = K.TAG_ZSET[0]


def horizon(now_ms: int, grace_ms: int) -> int:
    """The HLC below which a record is older than gc_grace."""
    return (now_ms - grace_ms) << 16


class PartitionSweep:
    """The sweep of one partition: ``feed`` its records in key order, then ``finish``."""

    __slots__ = ("now", "grace", "horizon", "dead", "live_keys", "expiring",
                 "_clocks", "_heads", "_held", "_early", "_index", "_pending", "_early_live")

    def __init__(self, now_ms: int, grace_ms: int) -> None:
        self.now = now_ms
        self.grace = grace_ms
        self.horizon = horizon(now_ms, grace_ms)
        self.dead: list[bytes] = []  # internal keys to remove
        self.live_keys = 0  # live key records (strings, heads) ...
        self.expiring = 0  # ... and those of them with a deadline
        self._clocks: dict[bytes, int] = {}  # user key -> its head's delete clock, if below the horizon
        self._heads: dict[bytes, bytes] = {}  # user key -> key of its removable head
        self._held: set[bytes] = set()  # user keys with an element record that stays
        self._early: list[tuple[bytes, bytes, int]] = []  # (ikey, user key, gate) before the head
        # zset index records older than the horizon, waiting for their member record:
        # member record key -> [(index ikey, score bytes)]
        self._index: dict[bytes, list[tuple[bytes, bytes]]] = {}
        # INFO keyspace: user key -> (its head's delete clock, a TTL, its content kind's
        # tag code) of a collection not counted yet, waiting for a live content element;
        # and the highest gate clock of the live content elements that sort before their
        # head (HLL registers), by (user key, tag code)
        self._pending: dict[bytes, tuple[int, bool, int]] = {}
        self._early_live: dict[tuple[bytes, int], int] = {}

    def feed(self, ikey: bytes, record: bytes) -> None:
        kind = _BY_CODE[ikey[2]]
        d = int.from_bytes(record[11:19], "big")
        if record[0] & 1:  # a tombstone
            own = int.from_bytes(record[1:9], "big") < self.horizon
        else:
            own = d != 0 and d + self.grace <= self.now
            if kind is not None and kind.is_key and kind.sweep is not _HEAD and (not d or d > self.now):
                self.live_keys += 1
                if d:
                    self.expiring += 1
        if kind is None or kind.sweep is _RECORD:
            if own:
                self.dead.append(ikey)
            return
        try:
            userkey = K.user_key_of(ikey)
        except ValueError:  # a malformed collection key: its own rule only
            if own:
                self.dead.append(ikey)
            return
        if kind.sweep is _HEAD:
            clock = head.delete_clock(record, self.now)
            self._count_head(userkey, record, clock, d)
            if clock < self.horizon:
                self._clocks[userkey] = clock
            if own:
                self._heads[userkey] = ikey
            return
        if kind.sweep is _INDEX:
            if int.from_bytes(record[1:9], "big") < self.horizon:
                n = len(ikey) - len(K.decode_zset_score_key(ikey)[2])  # (the member follows the score)
                mk = K.encode_zset_member_key(userkey, ikey[n:])
                self._index.setdefault(mk, []).append((ikey, ikey[n - 8:n]))
            self._held.add(userkey)  # (decided with its member; a head waits for it anyway)
            return
        code = ikey[2]
        if code in CONTENT_CODES and (code < _ORD_HEAD or userkey in self._pending):  # (else: counted, or not)
            self._count_element(userkey, code, kind, record)
        if own:
            self.dead.append(ikey)
        elif kind.gate_clock is None or int.from_bytes(record[1:9], "big") >= self.horizon:
            self._held.add(userkey)
        elif ikey[2] < _ORD_HEAD:  # sorts before its head: decided at finish
            self._early.append((ikey, userkey, kind.gate_clock(record)))
        else:
            self._gate(ikey, userkey, kind.gate_clock(record))

        if ikey[2] == _ORD_ZSET and self._index:
            waiting = self._index.pop(ikey, None)
            if waiting:
                removed = bool(self.dead) and self.dead[-1] is ikey
                try:
                    keep = set() if removed else zset.index_scores(record)
                except ValueError:  # (not a zset member's record: it holds no index)
                    keep = set()
                self.dead.extend(ik for ik, sb in waiting if sb not in keep)

    def _count_head(self, userkey: bytes, record: bytes, clock: int, d: int) -> None:
        """INFO keyspace's count of the collection whose head is ``record`` (delete clock
        ``clock``, TTL deadline ``d``): now if it exists without a live element (a live
        stream or HyperLogLog) or one sorted before it, else once one comes."""
        ttl = bool(d) and env.is_live(record, self.now)
        content = CONTENT.get(head.ctype_of(record))
        code = content.code if content is not None else -1
        early = self._early_live.get((userkey, code))
        if head.present(record, self.now, early is not None and early > clock):
            self.live_keys += 1
            self.expiring += ttl
        elif content is not None:
            self._pending[userkey] = (clock, ttl, code)

    def _count_element(self, userkey: bytes, code: int, kind: RecordKind, record: bytes) -> None:
        """A content element (``kind``, ``record``): if live, it makes its collection
        count when its head waits for one of its content kind below its gate clock."""
        if not env.is_live(record, self.now) or kind.gate_clock is None:
            return
        gate = kind.gate_clock(record)
        if code < _ORD_HEAD:  # (before its head: judged when the head comes)
            if gate > self._early_live.get((userkey, code), -1):
                self._early_live[(userkey, code)] = gate
            return
        waiting = self._pending.get(userkey)
        if waiting is not None and waiting[2] == code and gate > waiting[0]:
            del self._pending[userkey]
            self.live_keys += 1
            self.expiring += waiting[1]

    def _gate(self, ikey: bytes, userkey: bytes, gate: int) -> None:
        clock = self._clocks.get(userkey)
        if clock is not None and gate <= clock:
            self.dead.append(ikey)
        else:
            self._held.add(userkey)

    def finish(self) -> list[bytes]:
        """The internal keys of the partition that may be removed."""
        for ikey, userkey, gate in self._early:
            self._gate(ikey, userkey, gate)
        self._early = []
        self._pending, self._early_live = {}, {}
        for waiting in self._index.values():  # index records whose member record is gone
            self.dead.extend(ik for ik, _ in waiting)
        self._index = {}
        held = self._held
        self.dead.extend(ikey for userkey, ikey in self._heads.items() if userkey not in held)
        self._heads = {}
        return self.dead
