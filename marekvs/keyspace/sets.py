"""Sets: a collection head of type SET plus one observed-remove element per member.

    head    [pid] M [klen] [key]             collection type SET, delete clock
    member  [pid] S [klen] [key] [member]    ORSWOT element with empty values

SADD writes a new dot for every member it names, also for one that is already there (a
re-add covers the dots it saw and keeps the member's TTL): the add-wins observed-remove
set, in which an SREM (or SPOP) removes only the adds it observed, so a concurrent SADD
on another node survives it. A set whose members are all gone does not exist
(``Keyspace.present``).

The algebra commands (SINTER, SUNION, SDIFF and their STORE forms, SINTERCARD) read
the sets here and return members; a STORE replaces its destination in one apply: the
destination's tombstone (a head tombstone whose delete clock kills its old members, or a
string's) folded into a new head, then one add per member, so the whole result is one
replication-log entry and merges like any DEL followed by SADDs.
"""

from __future__ import annotations

from collections.abc import Sequence

from marekvs.core import envelope as env
from marekvs.core import head, orswot
from marekvs.core import keys as K
from marekvs.core.envelope import RecordType
from marekvs.core.head import CollectionType
from marekvs.keyspace import members as M
from marekvs.keyspace.keyspace import Keyspace
from marekvs.keyspace.status import WrongType

SET = CollectionType.SET
MEMBER = RecordType.SET_MEMBER
TAG = K.TAG_SET

Head = tuple[bytes, bytes | None]
_is_live = env.is_live
_gate_clock = orswot.gate_clock


def lookup(ks: Keyspace, key: bytes, now: int) -> Head:
    """(head key, live head or None) of the set ``key``; WrongType for another type."""
    return ks.collection(key, SET, now)


def read_lookup(ks: Keyspace, key: bytes, now: int) -> Head:
    """``lookup`` for a read command: counted as a keyspace hit or miss."""
    return M.read_collection(ks, key, SET, now)


def prefix_of(hk: bytes) -> bytes:
    return M.element_prefix(hk, TAG)


# -- reads ---------------------------------------------------------------------------------
# Reads are counted as keyspace hits or misses (``members.read_collection``), one per key,
# except ``random_members`` and ``scan``, which follow a command's own ``read_lookup``.

def is_member(ks: Keyspace, key: bytes, member: bytes, now: int) -> bool:
    r = ks.read(key, SET, now)
    if r is None:
        return False
    rec = ks.get(r.prefix + member)
    hit = rec is not None and _is_live(rec, now) and _gate_clock(rec) > r.dc
    ks.found(key, r, hit, now)
    return hit


def are_members(ks: Keyspace, key: bytes, members: Sequence[bytes], now: int) -> list[bool]:
    r = ks.read(key, SET, now)
    if r is None:
        return [False] * len(members)
    prefix, dc, g = r.prefix, r.dc, ks.get
    out = [M.live(g(prefix + m), dc, now) for m in members]
    ks.found(key, r, any(out), now)
    return out


def cardinality(ks: Keyspace, key: bytes, now: int) -> int:
    r = ks.read(key, SET, now)
    if r is None:
        return 0
    n = ks.counts.count(r.prefix, r.head, now)
    ks.counted(key, n > 0)
    return n


def all_members(ks: Keyspace, key: bytes, now: int) -> list[bytes]:
    """Every member, in byte order."""
    hk, h = read_lookup(ks, key, now)
    if h is None:
        return []
    return [m for m, _ in M.scan(ks, prefix_of(hk), M.gate(h, now), now)]


def random_members(ks: Keyspace, key: bytes, k: int, distinct: bool, now: int) -> list[bytes] | None:
    """SRANDMEMBER: ``k`` random members (``members.sample``); None if no set."""
    hk, h = ks.collection(key, SET, now)
    if h is None:
        return None
    return [m for m, _ in M.sample(ks, hk, h, k, distinct, now)]


def scan(ks: Keyspace, key: bytes, cursor: int, count: int, now: int) -> tuple[int, list[bytes]]:
    """One SSCAN call: (next cursor, members)."""
    hk, h = ks.collection(key, SET, now)
    if h is None:
        return 0, []
    nxt, page = M.scan_page(ks, hk, h, cursor, count, now)
    return nxt, [m for m, _ in page]


# -- writes -------------------------------------------------------------------------------

def add(ks: Keyspace, key: bytes, members: Sequence[bytes], now: int) -> int:
    """SADD: the number of members that were not in the set. Every named member gets a
    new dot (see the module docstring); one already there keeps its deadline."""
    r, created = ks.write_home(key, SET, now)
    hk, h, prefix, dc = r.hk, r.head, r.prefix, r.dc
    g = ks.get
    hlc, node = ks.hlc.now(), ks.node_id
    recs = [(hk, h)] if created else []
    added = 0
    for m in (members if len(members) == 1 else dict.fromkeys(members)):
        ik = prefix + m
        cur = g(ik)
        if cur is not None and M.live(cur, dc, now):
            recs.append((ik, M.add(cur, MEMBER, hlc, node, b"", M.deadline_of(cur))))
        else:
            added += 1
            recs.append((ik, M.add(cur, MEMBER, hlc, node)))
    ks.apply(recs)
    return added


def remove(ks: Keyspace, key: bytes, members: Sequence[bytes], now: int) -> int:
    """SREM: the number of members removed."""
    return M.remove_named(ks, key, SET, TAG, members, now)


def pop(ks: Keyspace, key: bytes, k: int, now: int) -> list[bytes] | None:
    """SPOP: remove and return ``k`` distinct random members (all of them if ``k`` is at
    least the cardinality); None if no set. Each is an SREM of the member: two nodes
    popping at once may both return one member (no coordination)."""
    hk, h = ks.collection(key, SET, now)
    if h is None:
        return None
    chosen = M.sample(ks, hk, h, k, True, now)
    if chosen:
        prefix, hlc, node = prefix_of(hk), ks.hlc.now(), ks.node_id
        ks.apply([(prefix + m, M.remove(rec, hlc, node)) for m, rec in chosen])
    return [m for m, _ in chosen]


def move(ks: Keyspace, src: bytes, dst: bytes, member: bytes, now: int) -> tuple[bool, bool]:
    """SMOVE, with Redis's order of checks: no source -> not moved (whatever the
    destination), then WRONGTYPE for either key, then the move (one apply: the source's
    remove and the destination's add). Returns (moved, added to the destination: it was
    not a member there)."""
    shk, sh = ks.collection(src, SET, now)
    if sh is None:
        return False, False
    sik = prefix_of(shk) + member
    scur = ks.get(sik)
    present = scur is not None and M.live(scur, M.gate(sh, now), now)
    try:
        dhk, dh, draw = ks.typed_head(dst, SET, now)
    except WrongType:
        if present or ks.present(shk, sh, now):
            raise
        return False, False  # an emptied source: no key
    if not present:
        return False, False
    assert scur is not None
    if dhk == shk:
        return True, False
    dhk, dh, created = ks.head_to_write(dhk, dh, draw, SET, now)
    dik = prefix_of(dhk) + member
    dcur = ks.get(dik)
    had = dcur is not None and M.live(dcur, M.gate(dh, now), now)
    deadline = M.deadline_of(dcur) if had and dcur is not None else 0
    hlc, node = ks.hlc.now(), ks.node_id
    recs = [(sik, M.remove(scur, hlc, node))]
    if created:
        recs.append((dhk, dh))
    recs.append((dik, M.add(dcur, MEMBER, hlc, node, b"", deadline)))
    ks.apply(recs)
    return True, not had


# -- the algebra ------------------------------------------------------------------------------

def _sets(ks: Keyspace, keys: Sequence[bytes], now: int) -> list[tuple[bytes, bytes, int] | None]:
    """(members prefix, head, delete clock) of each key's set, None for a missing key;
    WrongType if any key holds another type (every key is checked, as Redis 7.0 does).
    Each lookup is a counted read (the STORE forms too, as Redis 7.0 counts them)."""
    out: list[tuple[bytes, bytes, int] | None] = []
    for key in keys:
        hk, h = read_lookup(ks, key, now)
        out.append(None if h is None else (prefix_of(hk), h, M.gate(h, now)))
    return out


def intersection(ks: Keyspace, keys: Sequence[bytes], now: int, limit: int = 0) -> list[bytes]:
    """SINTER: the members of every set, in byte order; with ``limit`` (SINTERCARD) at
    most that many. Walks the smallest set and probes the others by point reads."""
    sets = _sets(ks, keys, now)
    if any(s is None for s in sets):
        return []
    found = [s for s in sets if s is not None]
    found.sort(key=lambda s: ks.counts.count(s[0], s[1], now))
    (first, _, dc), others = found[0], found[1:]
    g = ks.get
    out = []
    for m, _ in M.scan(ks, first, dc, now):
        if all(M.live(g(p + m), odc, now) for p, _, odc in others):
            out.append(m)
            if limit and len(out) >= limit:
                break
    return out


def union(ks: Keyspace, keys: Sequence[bytes], now: int) -> list[bytes]:
    """SUNION: the members of any set, in byte order."""
    out: set[bytes] = set()
    for s in _sets(ks, keys, now):
        if s is not None:
            out.update(m for m, _ in M.scan(ks, s[0], s[2], now))
    return sorted(out)


def difference(ks: Keyspace, keys: Sequence[bytes], now: int) -> list[bytes]:
    """SDIFF: the members of the first set in none of the others, in byte order."""
    sets = _sets(ks, keys, now)
    first, others = sets[0], [s for s in sets[1:] if s is not None]
    if first is None:
        return []
    g = ks.get
    return [m for m, _ in M.scan(ks, first[0], first[2], now)
            if not any(M.live(g(p + m), odc, now) for p, _, odc in others)]


def store(ks: Keyspace, dst: bytes, members: Sequence[bytes], now: int) -> int:
    """Replace ``dst`` (of any type) with the set of ``members`` in one apply; no
    members deletes it. Returns the new cardinality."""
    recs = ks.delete_records(dst, now)
    if not members:
        if recs:
            ks.apply(recs)
        return 0
    hk = K.encode_head_key(dst)
    tomb = [r for k, r in recs if k == hk]
    prior = tomb[0] if tomb else ks.get(hk)
    recs = [(k, r) for k, r in recs if k != hk]
    h = head.new(SET, ks.hlc.now(), ks.node_id, prior=prior, now_ms=now)
    recs.append((hk, h))
    prefix, g = prefix_of(hk), ks.get
    hlc, node = ks.hlc.now(), ks.node_id
    for m in members:
        ik = prefix + m
        recs.append((ik, M.add(g(ik), MEMBER, hlc, node)))
    ks.apply(recs)
    return len(members)
