"""Hashes: a collection head of type HASH plus one observed-remove element per field.

    head   [pid] M [klen] [key]            collection type HASH, delete clock
    field  [pid] h [klen] [key] [field]    ORSWOT element: live dots carry the value

HSET adds a dot carrying the value and covering the field's live dots (it replaces
them); HDEL covers them. The value of a field is the value of its highest live dot, so
two concurrent HSETs of one field on two nodes resolve by (hlc, origin), and an HDEL
removes only the values it saw (a concurrent HSET survives it). HINCRBY and
HINCRBYFLOAT write their result the same way: last writer wins on the result (the data
model's rule; counter semantics inside hash fields are future work).

A field's TTL (HEXPIRE, EXPIREMEMBER) is its record's envelope deadline
(``members.py``); HSET and HSETNX write a field without one (as Redis 7.4: setting a
value drops its TTL), HINCRBY and HINCRBYFLOAT keep it.

A hash whose fields are all gone does not exist (``Keyspace.present``). Every
operation here takes the keyspace first, returns values or raises a typed status, and
writes through one ``ks.apply`` per command (one replication-log entry).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from marekvs.core import keys as K
from marekvs.core import orswot
from marekvs.core.envelope import RecordType
from marekvs.core.head import CollectionType
from marekvs.keyspace import members as M
from marekvs.keyspace.keyspace import Keyspace

HASH = CollectionType.HASH
FIELD = RecordType.HASH_FIELD
TAG = K.TAG_HASH

Head = tuple[bytes, bytes | None]  # (head key, live head record or None)
_value = orswot.value


def lookup(ks: Keyspace, key: bytes, now: int) -> Head:
    """(head key, live head or None) of the hash ``key``; WrongType for another type."""
    return ks.collection(key, HASH, now)


def read_lookup(ks: Keyspace, key: bytes, now: int) -> Head:
    """``lookup`` for a read command: counted as a keyspace hit or miss."""
    return M.read_collection(ks, key, HASH, now)


def prefix_of(hk: bytes) -> bytes:
    return M.element_prefix(hk, TAG)


# -- reads ---------------------------------------------------------------------------------
# Reads of one key are counted as a keyspace hit or miss (``members.read_collection``),
# except ``random_items``, ``scan`` and ``field_deadlines``, which follow a command's own
# counted ``read_lookup``.

def get(ks: Keyspace, key: bytes, field: bytes, now: int) -> bytes | None:
    r = ks.read(key, HASH, now)
    if r is None:
        return None
    rec = ks.get(r.prefix + field)
    v = None if rec is None else _value(rec, now, r.dc)
    ks.found(key, r, v is not None, now)
    return v


def get_many(ks: Keyspace, key: bytes, fields: Sequence[bytes], now: int) -> list[bytes | None]:
    r = ks.read(key, HASH, now)
    if r is None:
        return [None] * len(fields)
    prefix, dc, g = r.prefix, r.dc, ks.get
    out = [M.value(g(prefix + f), dc, now) for f in fields]
    ks.found(key, r, any(v is not None for v in out), now)
    return out


def length(ks: Keyspace, key: bytes, now: int) -> int:
    r = ks.read(key, HASH, now)
    n = 0 if r is None else ks.counts.count(r.prefix, r.head, now)
    if r is not None:
        ks.counted(key, n > 0)
    return n


def items(ks: Keyspace, key: bytes, now: int) -> list[tuple[bytes, bytes]]:
    """(field, value) of every field, in field (byte) order."""
    hk, h = read_lookup(ks, key, now)
    if h is None:
        return []
    dc = M.gate(h, now)
    return [(f, M.value(rec, dc, now) or b"") for f, rec in M.scan(ks, prefix_of(hk), dc, now)]


def random_items(ks: Keyspace, key: bytes, k: int, distinct: bool,
                 now: int) -> list[tuple[bytes, bytes]] | None:
    """``k`` random (field, value) pairs (``members.sample``); None if no hash."""
    hk, h = ks.collection(key, HASH, now)
    if h is None:
        return None
    dc = M.gate(h, now)
    return [(f, M.value(rec, dc, now) or b"") for f, rec in M.sample(ks, hk, h, k, distinct, now)]


def scan(ks: Keyspace, key: bytes, cursor: int, count: int,
         now: int) -> tuple[int, list[tuple[bytes, bytes]]]:
    """One HSCAN call: (next cursor, (field, value) pairs)."""
    hk, h = ks.collection(key, HASH, now)
    if h is None:
        return 0, []
    dc = M.gate(h, now)
    nxt, page = M.scan_page(ks, hk, h, cursor, count, now)
    return nxt, [(f, M.value(rec, dc, now) or b"") for f, rec in page]


# -- writes -------------------------------------------------------------------------------

def set_fields(ks: Keyspace, key: bytes, pairs: Sequence[bytes], now: int, nx: bool = False) -> int:
    """HSET / HMSET (``pairs`` = field, value, ...) and HSETNX (``nx``: only fields that
    do not exist): the number of fields added. A field named twice takes its last
    value."""
    r, created = ks.write_home(key, HASH, now)
    hk, h, prefix, dc = r.hk, r.head, r.prefix, r.dc
    g = ks.get
    hlc, node = ks.hlc.now(), ks.node_id
    if len(pairs) == 2:  # one field (HSET's usual form)
        values = {pairs[0]: pairs[1]}
    else:
        values = {}
        it = iter(pairs)
        for f, v in zip(it, it):
            values[f] = v
    recs = [(hk, h)] if created else []
    added = 0
    for f, v in values.items():
        ik = prefix + f
        cur = g(ik)
        if not M.live(cur, dc, now):
            added += 1
        elif nx:
            continue
        recs.append((ik, M.add(cur, FIELD, hlc, node, v)))
    if len(recs) > created:
        ks.apply(recs)
    return added


def update(ks: Keyspace, key: bytes, field: bytes, compute: Callable[[bytes | None], bytes],
           now: int) -> bytes:
    """HINCRBY / HINCRBYFLOAT: write ``compute(current value or None)`` to ``field``,
    keeping its TTL; returns the new value. Whatever ``compute`` raises writes nothing."""
    r, created = ks.write_home(key, HASH, now)
    hk, h, dc = r.hk, r.head, r.dc
    ik = r.prefix + field
    cur = ks.get(ik)
    old = M.value(cur, dc, now)
    new = compute(old)
    deadline = M.deadline_of(cur) if old is not None and cur is not None else 0
    rec = M.add(cur, FIELD, ks.hlc.now(), ks.node_id, new, deadline)
    ks.apply([(hk, h), (ik, rec)] if created else [(ik, rec)])
    return new


def delete_fields(ks: Keyspace, key: bytes, fields: Sequence[bytes], now: int) -> int:
    """HDEL: the number of fields removed."""
    return M.remove_named(ks, key, HASH, TAG, fields, now)


# -- field TTLs (Redis 7.4's HEXPIRE family) ----------------------------------------------------

NO_FIELD = -2  # no such field (or no such key)
NO_TTL = -1  # HTTL / HPERSIST: the field has no TTL
CONDITION_NOT_MET = 0
SET = 1  # HEXPIRE: deadline set; HPERSIST: TTL removed
DELETED = 2  # HEXPIRE: a deadline at or before now deletes the field

# HEXPIRE's conditions
NX, XX, GT, LT = 1, 2, 3, 4


def expire_fields(ks: Keyspace, found: Head, fields: Sequence[bytes], deadline: int, cond: int,
                  now: int) -> list[int]:
    """HEXPIRE and friends on the hash ``found`` (``lookup``'s answer): per field
    NO_FIELD, CONDITION_NOT_MET, SET or DELETED, in order (a field named twice sees the
    first one's effect). No field TTL counts as infinite for GT and LT, as in Redis 7.4."""
    hk, h = found
    if h is None:
        return [NO_FIELD] * len(fields)
    prefix, dc, node = prefix_of(hk), M.gate(h, now), ks.node_id
    written: dict[bytes, bytes] = {}
    out = []
    for f in fields:
        ik = prefix + f
        cur = written[ik] if ik in written else ks.get(ik)
        if cur is None or not M.live(cur, dc, now):
            out.append(NO_FIELD)
            continue
        prev = M.deadline_of(cur)
        if ((cond == NX and prev) or (cond == XX and not prev) or (cond == GT and (not prev or prev >= deadline))
                or (cond == LT and prev and prev <= deadline)):
            out.append(CONDITION_NOT_MET)
            continue
        if deadline <= now:
            written[ik] = M.remove(cur, ks.hlc.now(), node)
            out.append(DELETED)
        else:
            written[ik] = M.restamp(cur, ks.hlc.now(), node, deadline)
            out.append(SET)
    if written:
        ks.apply(list(written.items()))
    return out


def field_deadlines(ks: Keyspace, key: bytes, fields: Sequence[bytes], now: int) -> list[int]:
    """HTTL and friends: per field its deadline (absolute ms), NO_TTL or NO_FIELD."""
    hk, h = ks.collection(key, HASH, now)
    if h is None:
        return [NO_FIELD] * len(fields)
    prefix, dc, g = prefix_of(hk), M.gate(h, now), ks.get
    out = []
    for f in fields:
        cur = g(prefix + f)
        if cur is None or not M.live(cur, dc, now):
            out.append(NO_FIELD)
        else:
            out.append(M.deadline_of(cur) or NO_TTL)
    return out


def persist_fields(ks: Keyspace, found: Head, fields: Sequence[bytes], now: int) -> list[int]:
    """HPERSIST on the hash ``found`` (``lookup``'s answer): per field SET (its TTL
    removed), NO_TTL or NO_FIELD."""
    hk, h = found
    if h is None:
        return [NO_FIELD] * len(fields)
    prefix, dc, node = prefix_of(hk), M.gate(h, now), ks.node_id
    written: dict[bytes, bytes] = {}
    out = []
    for f in fields:
        ik = prefix + f
        cur = written[ik] if ik in written else ks.get(ik)
        if cur is None or not M.live(cur, dc, now):
            out.append(NO_FIELD)
        elif not M.deadline_of(cur):
            out.append(NO_TTL)
        else:
            written[ik] = M.restamp(cur, ks.hlc.now(), node, 0)
            out.append(SET)
    if written:
        ks.apply(list(written.items()))
    return out
