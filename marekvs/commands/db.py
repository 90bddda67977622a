"""The typed keyspace: the operations command handlers call.

A handler parses its arguments, calls an operation here, and builds the reply; the
operation reads records through the engine and writes through the ONE apply path
(``Engine.apply``), stamping every new record with the process HLC and this node's
id. Type resolution follows the spec's "What a TYPE check reads": the string key
first, then the collection head; WRONGTYPE is raised here and nowhere else.

A record is *live* if it is not a tombstone and its TTL deadline has not passed; an
expired record reads as a tombstone whose clock is the deadline.
"""

from __future__ import annotations

import time
from typing import Iterator

from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core import lww, pncounter
from marekvs.core.envelope import RecordType
from marekvs.core.hlc import HLC
from marekvs.core.partition import hash64
from marekvs.commands.errors import WRONGTYPE, CommandError
from marekvs.storage.engine import Engine

_ZERO8 = bytes(8)
_UNKNOWN = object()  # "the caller did not look the key up"
_STRING_FLAGS = env.make_flags(RecordType.STRING)
_U16 = K._U16
_ENV_PACK = env.pack_envelope


def now_ms() -> int:
    return time.time_ns() // 1_000_000


def is_live(rec: bytes | None, now: int) -> bool:
    if rec is None or rec[0] & 1:
        return False
    d = rec[11:19]
    return d == _ZERO8 or int.from_bytes(d, "big") > now


def head_key_of(string_ikey: bytes) -> bytes:
    """The collection-head key of the user key whose string key is ``string_ikey``
    (same partition: no second hash)."""
    n = len(string_ikey) - 3
    klen = bytes((n,)) if n < 0x80 else K.encode_varint(n)
    return string_ikey[:2] + b"M" + klen + string_ikey[3:]


def string_value(rec: bytes) -> bytes:
    """The string a live string-key record reads as (counters materialise)."""
    if (rec[0] >> 2) & 7 == RecordType.COUNTER:
        return b"%d" % pncounter.PNCounter.from_bytes(rec[19:]).value()
    return rec[19:]


class Keyspace:
    def __init__(self, engine: Engine, hlc: HLC, node_id: int):
        self.engine = engine
        self.hlc = hlc
        self.node_id = node_id
        self.apply = engine.apply
        self.get = engine.get
        self.head_pids = engine.head_pids

    # -- lookups -------------------------------------------------------------------
    def string_record(self, key: bytes, now: int) -> bytes | None:
        """The live record at the string key, None if absent; WRONGTYPE if the key
        holds a collection."""
        return self.string_lookup(key, now)[1]

    def string_lookup(self, key: bytes, now: int) -> tuple[bytes, bytes | None]:
        """(string ikey of ``key``, its live record or None); WRONGTYPE if the key
        holds a collection. The hot path of every string command: one key build."""
        pid = K.partition_of(key)
        ik = _U16.pack(pid) + b"s" + key
        rec = self.engine.get(ik)
        if rec is not None and not rec[0] & 1:
            d = rec[11:19]
            if d == _ZERO8 or int.from_bytes(d, "big") > now:
                return ik, rec
        if self._live_head(pid, ik, now) is not None:
            raise CommandError(WRONGTYPE)
        return ik, None

    def read_string(self, key: bytes, now: int = 0) -> bytes | None:
        """What GET reads at ``key``: its string (a counter materialises), None if
        absent; WRONGTYPE if the key holds a collection. ``now`` 0 reads the clock
        only if it is needed (a record with a deadline, a partition with heads).

        The hot path of GET and MGET, kept flat on purpose: built as
        ``string_lookup`` + ``string_value`` it took five Python calls and a clock
        read per key, and a GET at -P 16 cost 3.09 instead of 2.64 us of server CPU
        (README.md, "Performance", tenth session)."""
        pid = K.partition_of(key)
        ik = _U16.pack(pid) + b"s" + key
        rec = self.get(ik)
        if rec is not None and not rec[0] & 1:
            d = rec[11:19]
            if d == _ZERO8 or int.from_bytes(d, "big") > (now or now_ms()):
                return rec[19:] if rec[0] == _STRING_FLAGS else string_value(rec)
        if self.head_pids[pid] and self._live_head(pid, ik, now or now_ms()) is not None:
            raise CommandError(WRONGTYPE)
        return None

    def _live_head(self, pid: int, string_ik: bytes, now: int) -> tuple[bytes, bytes] | None:
        """(head key, record) of the live collection head of the user key whose string
        key is ``string_ik``, or None; no read in a partition that never held a head."""
        if not self.head_pids[pid]:
            return None
        hk = head_key_of(string_ik)
        h = self.engine.get(hk)
        return (hk, h) if is_live(h, now) else None  # type: ignore[return-value]

    def live_record(self, key: bytes, now: int) -> tuple[bytes, bytes] | None:
        """(ikey, record) of the live record that holds ``key``, of any type."""
        pid = K.partition_of(key)
        ik = _U16.pack(pid) + b"s" + key
        rec = self.engine.get(ik)
        if is_live(rec, now):
            return ik, rec  # type: ignore[return-value]
        return self._live_head(pid, ik, now)

    def type_name(self, key: bytes, now: int) -> str:
        found = self.live_record(key, now)
        if found is None:
            return "none"
        ikey, rec = found
        if ikey[2:3] == K.TAG_STRING:
            return "string"
        from marekvs.core import head  # collection heads

        return head.type_name(rec)

    def exists(self, key: bytes, now: int) -> bool:
        return self.live_record(key, now) is not None

    # -- writes --------------------------------------------------------------------
    def stamp(self) -> int:
        return self.hlc.now()

    def string_records(self, key: bytes, value: bytes, ttl: int, now: int = 0,
                       found: object = _UNKNOWN) -> list[tuple[bytes, bytes]]:
        """Records that make ``key`` the string ``value``, replacing any other type.

        ``found`` is what ``live_record(key, now)`` returned, when the caller already
        looked. Otherwise the collection head is only read when the partition may
        hold heads (``Engine.head_pids``) and no live string holds the key (a live
        string means no live head): the hot path of SET (MSET: ``mset_records``).
        """
        pid = K.partition_of(key)
        ik = _U16.pack(pid) + b"s" + key
        out = [(ik, _ENV_PACK(_STRING_FLAGS, self.hlc.now(), self.node_id, ttl) + value)]
        if found is _UNKNOWN:
            if not self.head_pids[pid]:
                return out  # the common case: no head to read
            found = self._head_under(pid, ik, now or now_ms())
        if found is not None and found[0][2:3] == K.TAG_HEAD:  # type: ignore[index]
            out.append(self._head_tombstone(*found))  # type: ignore[misc]
        return out

    def mset_records(self, pairs: list[bytes], now: int) -> list[tuple[bytes, bytes]]:
        """``string_records`` for every ``key, value`` of ``pairs`` (MSET's arguments
        after its name), no TTL, stamped with consecutive HLCs of one clock read: one
        call per command, the per-key work inlined."""
        out: list[tuple[bytes, bytes]] = []
        stamp = self.hlc.reserve(len(pairs) // 2)
        pack, flags, node = _ENV_PACK, _STRING_FLAGS, self.node_id
        head_pids, u16, partition_of = self.head_pids, _U16.pack, K.partition_of
        it = iter(pairs)
        for key, value in zip(it, it):
            pid = partition_of(key) if 123 in key else hash64(key) >> 52  # 123: b"{"
            ik = u16(pid) + b"s" + key
            out.append((ik, pack(flags, stamp, node, 0) + value))
            stamp += 1
            if head_pids[pid]:
                found = self._head_under(pid, ik, now)
                if found is not None:
                    out.append(self._head_tombstone(*found))
        return out

    def _head_under(self, pid: int, ik: bytes, now: int) -> tuple[bytes, bytes] | None:
        """The live collection head a string write to the string key ``ik`` replaces
        (a live string there means there is none)."""
        return None if is_live(self.engine.get(ik), now) else self._live_head(pid, ik, now)

    def set_string(self, key: bytes, value: bytes, ttl: int, now: int = 0,
                   found: object = _UNKNOWN) -> None:
        """``string_records`` applied; ``now`` 0 reads the clock only if needed."""
        self.engine.apply(self.string_records(key, value, ttl, now, found))

    def delete_records(self, key: bytes, now: int) -> list[tuple[bytes, bytes]]:
        """Tombstones for whatever live record holds ``key`` (none if absent)."""
        found = self.live_record(key, now)
        if found is None:
            return []
        ikey, rec = found
        if ikey[2:3] == K.TAG_STRING:
            return [(ikey, lww.tombstone(RecordType.STRING, self.hlc.now(), self.node_id))]
        return [self._head_tombstone(ikey, rec)]

    def _head_tombstone(self, hk: bytes, head_rec: bytes) -> tuple[bytes, bytes]:
        from marekvs.core import head

        return hk, head.tombstone(head_rec, self.hlc.now(), self.node_id)

    def delete(self, key: bytes, now: int) -> bool:
        recs = self.delete_records(key, now)
        if recs:
            self.engine.apply(recs)
        return bool(recs)

    def set_ttl(self, key: bytes, deadline: int, now: int) -> bool:
        """EXPIRE/PERSIST: an LWW rewrite of the envelope, payload unchanged."""
        found = self.live_record(key, now)
        if found is None:
            return False
        ikey, rec = found
        self.engine.apply([(ikey, env.with_ttl(rec, self.hlc.now(), self.node_id, deadline))])
        return True

    # -- iteration -------------------------------------------------------------------
    # A user key can have a live string record and a live collection head at once (a
    # SET and a collection write made concurrently on two nodes). It reads as the
    # string (the spec's type check reads the string key first), so the iterations
    # below list it once, as the string ('M' sorts before 's' within a partition: a
    # partition's heads are held until its strings have been seen).
    STEP_RECORDS = 1024  # key records read per step of a whole-keyspace pass

    def key_runs(self, first_pid: int, now: int) -> Iterator[tuple[int, int, list[tuple[bytes, bytes, bytes]]]]:
        """(pid, key records read, live keys as (user key, ikey, record)) of every
        partition from ``first_pid`` on that holds a string or head record, live or
        not, in order. One iterator (``Engine.scan_tags``): element records and empty
        partitions are skipped by seeks."""
        cur = -1
        n = 0
        keys: list[tuple[bytes, bytes, bytes]] = []
        heads: dict[bytes, tuple[bytes, bytes, bytes]] = {}
        for ikey, rec in self.engine.scan_tags(first_pid, K.TAG_HEAD + K.TAG_STRING):
            pid = (ikey[0] << 8) | ikey[1]
            if pid != cur:
                if n:
                    keys.extend(heads.values())
                    yield cur, n, keys
                cur, n, keys, heads = pid, 0, [], {}
            n += 1
            if not is_live(rec, now):
                continue
            if ikey[2] == 0x73:  # b's'
                key = ikey[3:]
                if heads:
                    heads.pop(key, None)
                keys.append((key, ikey, rec))
            else:
                key = K.user_key_of(ikey)
                heads[key] = (key, ikey, rec)
        if n:
            keys.extend(heads.values())
            yield cur, n, keys

    def all_keys(self, now: int) -> Iterator[tuple[bytes, bytes, bytes]]:
        """(user key, ikey, record) of every live key, in partition order."""
        for step in self.all_keys_in_steps(now):
            yield from step

    def all_keys_in_steps(self, now: int) -> Iterator[list[tuple[bytes, bytes, bytes]]]:
        """``all_keys`` as one list per step of whole partitions holding at least
        ``STEP_RECORDS`` key records (the last one fewer), so that a caller can pause
        between them (``commands/stepwise.py``). One iterator, opened at the first
        step, reads one snapshot of the data."""
        out: list[tuple[bytes, bytes, bytes]] = []
        n = 0
        step = self.STEP_RECORDS
        for _, records, keys in self.key_runs(0, now):
            out += keys
            n += records
            if n >= step:
                yield out
                out = []
                n = 0
        yield out
