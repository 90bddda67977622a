"""Strings and counters: the records at a string key ``[pid] b's' [key]``.

A string key holds a plain LWW string (record type 0) or a PN counter (type 6); reads
materialise a counter as its decimal string. INCR-family writes go through core's
``pncounter.incr_value`` (the one INCR rule); every other write freezes the key into a
plain string record, whose newer version beats the counter's base.

TTL: INCR-family, INCRBYFLOAT, APPEND and SETRANGE keep the key's deadline (the command
layer passes it); SET without KEEPTTL, GETSET and MSET drop it. A deadline already in the
past is stored as given: the record reads as deleted.

Writing a string where a collection lives replaces it: the records include ONE tombstone
of the collection's head. Every write is one ``apply`` (one replication-log entry).

Hot paths (GET, SET, MSET, INCR) are flat on purpose: built from the general lookups a GET
took five Python calls and a clock read per key, and cost 3.09 instead of 2.64 us of
server CPU at -P 16 (bench/README.md). They inline core's liveness rule with its named
header bounds; tests/unit/test_keyspace.py pins them to ``envelope.is_live``.
"""

from __future__ import annotations

from typing import Final

from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core import pncounter
from marekvs.core.envelope import RecordType
from marekvs.core.partition import hash64
from marekvs.keyspace.keyspace import Keyspace
from marekvs.keyspace.status import NotInteger, Overflow, WrongType

_UNKNOWN = object()  # "the caller did not look the key up"
_STRING_FLAGS = env.make_flags(RecordType.STRING)
_COUNTER_FLAGS = pncounter.FLAGS
_TTL_AT: Final = env.TTL_AT  # record[_TTL_AT:_HEADER] is the deadline
_NO_TTL: Final = env.NO_TTL
_HEADER: Final = env.HEADER
_TOMB = env.FLAG_TOMBSTONE
_ENV_PACK = env.pack_envelope
_ORD_HEAD = K.ORD_HEAD
_ORD_STRING = K.ORD_STRING
_TAG_AT = K.TAG_AT
_locate = K.locate_string
_string_key_in = K.string_key_in


def string_value(rec: bytes) -> bytes:
    """The string a live string-key record reads as (counters materialise)."""
    if rec[0] == _COUNTER_FLAGS:
        return b"%d" % pncounter.PNCounter.from_bytes(rec[_HEADER:]).value()
    return rec[_HEADER:]


def lookup(ks: Keyspace, key: bytes, now: int, dead: bool = False) -> tuple[bytes, bytes | None]:
    """(string ikey of ``key``, its live record or None); WrongType if the key holds a
    collection. The hot path of every string write: one key build. ``dead``: a dead
    record there comes back too (INCR builds on a dead counter's base), so the caller
    reads it once."""
    pid, ik = _locate(key)
    rec = ks.get(ik)
    if rec is not None and not rec[0] & _TOMB:
        d = rec[_TTL_AT:_HEADER]
        if d == _NO_TTL or int.from_bytes(d, "big") > now:
            return ik, rec
    if ks.live_head(pid, ik, now) is not None:
        raise WrongType()
    return ik, (rec if dead else None)


def record(ks: Keyspace, key: bytes, now: int) -> bytes | None:
    """The live record at the string key, None if absent; WrongType for a collection."""
    return lookup(ks, key, now)[1]


def read(ks: Keyspace, key: bytes, now: int = 0) -> bytes | None:
    """What GET reads at ``key``: its string (a counter materialises), None if absent;
    WrongType if the key holds a collection. ``now`` 0 reads the clock only if it is
    needed (a record with a deadline, a partition with heads)."""
    pid, ik = _locate(key)
    rec = ks.get(ik)
    if rec is not None and not rec[0] & _TOMB:
        d = rec[_TTL_AT:_HEADER]
        if d == _NO_TTL or int.from_bytes(d, "big") > (now or ks.now()):
            ks.hits += 1  # (``Keyspace.counted``, inline: GET's hot path)
            return rec[_HEADER:] if rec[0] == _STRING_FLAGS else string_value(rec)
    if ks.head_pids[pid] and ks.live_head(pid, ik, now or ks.now()) is not None:
        ks.counted(key, True)
        raise WrongType()
    ks.counted(key, False)
    return None


def read_found(ks: Keyspace, key: bytes, found: tuple[bytes, bytes] | None) -> bytes | None:
    """``read`` of ``key`` whose live record the caller already has (``found``, what
    ``ks.live_record`` answered): counted the same, WrongType for a collection. SET ... GET
    reads the key once for both its answer and its write."""
    if found is None:
        ks.counted(key, False)
        return None
    ks.counted(key, True)
    if found[0][_TAG_AT] != _ORD_STRING:
        raise WrongType()
    return string_value(found[1])


def records(ks: Keyspace, key: bytes, value: bytes, ttl: int, now: int = 0,
            found: object = _UNKNOWN) -> list[tuple[bytes, bytes]]:
    """Records that make ``key`` the string ``value``, replacing any other type.

    ``found`` is what ``ks.live_record(key, now)`` returned, when the caller already
    looked. Otherwise the collection head is only read when the partition may hold heads
    (``Engine.head_pids``) and no live string holds the key (a live string means no live
    head): the hot path of SET (MSET: ``mset_records``)."""
    pid, ik = _locate(key)
    out = [(ik, _ENV_PACK(_STRING_FLAGS, ks.hlc.now(), ks.node_id, ttl) + value)]
    if found is _UNKNOWN:
        if not ks.head_pids[pid]:
            return out  # the common case: no head to read
        found = ks.head_under(pid, ik, now or ks.now())
    if found is not None and found[0][_TAG_AT] == _ORD_HEAD:  # type: ignore[index]
        out.append(ks.head_tombstone(*found))  # type: ignore[misc]
    return out


def write(ks: Keyspace, key: bytes, value: bytes, ttl: int, now: int = 0,
          found: object = _UNKNOWN) -> None:
    """``records`` applied; ``now`` 0 reads the clock only if needed."""
    ks.apply(records(ks, key, value, ttl, now, found))


def write_plain(ks: Keyspace, key: bytes, value: bytes, ttl: int) -> None:
    """Freeze ``key`` into the plain string ``value`` with deadline ``ttl`` (the caller
    knows it is a string or absent)."""
    ks.apply([(K.encode_string_key(key), _ENV_PACK(_STRING_FLAGS, ks.hlc.now(), ks.node_id, ttl) + value)])


def mset_records(ks: Keyspace, pairs: list[bytes], now: int) -> list[tuple[bytes, bytes]]:
    """``records`` for every ``key, value`` of ``pairs`` (MSET's arguments after its
    name), no TTL, stamped with consecutive HLCs of one clock read: one call per command,
    the per-key work inlined."""
    out: list[tuple[bytes, bytes]] = []
    stamp = ks.hlc.reserve(len(pairs) // 2)
    pack, flags, node = _ENV_PACK, _STRING_FLAGS, ks.node_id
    head_pids, key_in, partition_of = ks.head_pids, _string_key_in, K.partition_of
    it = iter(pairs)
    for key, value in zip(it, it):
        pid = partition_of(key) if 123 in key else hash64(key) >> 52  # 123: b"{"
        ik = key_in(pid, key)
        out.append((ik, pack(flags, stamp, node, 0) + value))
        stamp += 1
        if head_pids[pid]:
            found = ks.head_under(pid, ik, now)
            if found is not None:
                out.append(ks.head_tombstone(*found))
    return out


def incr(ks: Keyspace, key: bytes, delta: int, now: int) -> int:
    """INCRBY ``delta`` on ``key`` (core's ``pncounter.incr_value``): the new value.
    NotInteger if it holds a string that is not an integer, Overflow past int64."""
    ik, current = lookup(ks, key, now, True)  # a dead record sets the base
    try:
        rec, value = pncounter.incr_value(current, delta, ks.hlc.now(), ks.node_id, now)
    except ValueError:
        raise NotInteger() from None
    except OverflowError:
        raise Overflow() from None
    ks.apply([(ik, rec)])
    return value


def copy(ks: Keyspace, src_rec: bytes, dst: bytes, dst_found: tuple[bytes, bytes] | None, now: int,
         src_ik: bytes | None = None) -> None:
    """Write ``src_rec``'s string (and deadline) at ``dst`` (whose live record is
    ``dst_found``, ``ks.live_record``'s answer), optionally deleting the source (RENAME:
    ``src_ik``, its string key), as one apply (one replication-log entry)."""
    recs = records(ks, dst, string_value(src_rec), env.ttl_of(src_rec), now, dst_found)
    if src_ik is not None:
        recs.extend(ks.tombstones((src_ik, src_rec)))
    ks.apply(recs)
