"""Members of collections: what hashes, sets and zsets share about their element records.

A hash field, a set member and a zset member is one observed-remove element record
(``core/orswot.py``) under its collection's head, at ``[pid][tag][klen][key][member]``
with the tag of the collection type's ORSWOT kind in the registry (``h``, ``S``, ``z``:
``member_tag``). This module holds, for every such kind:

Element records
    reads gated by the head (``core/head.py``: an element is live if it is live itself and
    its highest live dot is newer than the head's delete clock) and the three writes: an
    add (a new dot covering the live dots it observed), a remove (covering them), and a
    re-stamp of the envelope header with a new deadline (per-member TTL). Every write is a
    record merged by the ONE apply path, so a replica merges exactly what the origin wrote.

Per-member TTL
    Each element carries its own deadline in its envelope (``ttl_deadline_ms``). Setting
    it is an LWW write of the header (a new version, the payload unchanged): the header
    of the element lattice is LWW on (hlc, origin), so a TTL converges with no expiry
    message, and past its deadline the element reads as absent on every replica. The
    deadline sits on the envelope, the dots in the payload: a concurrent add on another
    node (an HSET, a re-add) carries its own header and the higher version decides the
    deadline; a removal is a dot lattice write and always wins over the deadline of the
    dots it observed. ``set_deadline`` / ``deadline_of`` work for any collection type
    whose element kind is ORSWOT (hashes, sets, zsets: ``registry.element_kinds``).

Counts
    HLEN / SCARD and the existence of a collection come from ``keyspace/counts.py``
    (live elements per collection, kept from the change feed).

Scan cursors (``Cursors``)
    HSCAN / SSCAN need a cursor that resumes after the last member returned, and a member
    name does not fit a Redis cursor (an unsigned 64-bit number). The node keeps a bounded
    table cursor -> (collection, next member), numbered from a random start. A cursor it
    no longer knows (evicted, another node, a restart) restarts the iteration: every
    member present for the whole iteration is still returned at least once.
"""

from __future__ import annotations

import itertools
import random
from collections import OrderedDict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from marekvs.core import envelope as env
from marekvs.core import head
from marekvs.core import keys as K
from marekvs.core import orswot, registry
from marekvs.storage.engine import prefix_end

if TYPE_CHECKING:
    from marekvs.keyspace.keyspace import Keyspace

Change = tuple[bytes, "bytes | None", bytes]  # (ikey, old record or None, new record)

_TAG_AT = K.TAG_AT
_ORD_HEAD = K.ORD_HEAD
_is_live = env.is_live
_gate_clock = orswot.gate_clock


# =========================================================================================
# Element kinds and keys
# =========================================================================================

def _member_kinds() -> dict[int, registry.RecordKind]:
    """collection type -> its ORSWOT element kind (the registry rows gated by their top
    live dot: hash fields, set members, zset members; not the zset score index)."""
    out: dict[int, registry.RecordKind] = {}
    for k in registry.KINDS:
        if k.ctype is not None and k.gate_clock is orswot.gate_clock:
            out[k.ctype] = k
    return out


MEMBER_KINDS = _member_kinds()
MEMBER_TAGS: frozenset[int] = frozenset(k.code for k in MEMBER_KINDS.values())


def member_kind(ctype: int) -> registry.RecordKind | None:
    """The ORSWOT element kind of the collection type ``ctype`` (None: it has none)."""
    return MEMBER_KINDS.get(ctype)


def element_prefix(hk: bytes, tag: bytes) -> bytes:
    """``[pid][tag][klen][key]``, the prefix of a collection's elements under ``tag``,
    from its head key ``[pid]M[klen][key]`` (same partition: no second hash)."""
    return hk[:_TAG_AT] + tag + hk[_TAG_AT + 1:]


def members_prefix(hk: bytes, h: bytes) -> bytes:
    """The prefix of the member records of the collection whose head is ``h``."""
    return element_prefix(hk, MEMBER_KINDS[head.ctype_of(h)].tag)


def gate(h: bytes, now: int) -> int:
    """The delete clock a live or dead head ``h`` gates its elements with."""
    return head.delete_clock(h, now)


def live(rec: bytes | None, dc: int, now: int) -> bool:
    """An element record is live in a collection with delete clock ``dc``."""
    return rec is not None and _is_live(rec, now) and _gate_clock(rec) > dc


def value(rec: bytes | None, dc: int, now: int) -> bytes | None:
    """The value of a member (a hash field's value; b"" for a set member), None if it
    is not live."""
    return None if rec is None else orswot.value(rec, now, dc)


def scan(ks: Keyspace, prefix: bytes, dc: int, now: int, start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
    """(member, record) of every live element under ``prefix`` from ``start`` on, in
    member (byte) order."""
    n = len(prefix)
    for ek, ev in ks.engine.scan(prefix + start, prefix_end(prefix)):
        if _is_live(ev, now) and _gate_clock(ev) > dc:
            yield ek[n:], ev


def read_collection(ks: Keyspace, key: bytes, ctype: int, now: int) -> tuple[bytes, bytes | None]:
    """``Keyspace.collection`` for a read command, counted as Redis counts it
    (``Keyspace.read``: a hit when the collection exists, whatever its type)."""
    r = ks.read(key, ctype, now)
    if r is None:
        return K.encode_head_key(key), None
    ks.found(key, r, False, now)
    return r.hk, r.head


# =========================================================================================
# Writes: every one a record for the one apply path
# =========================================================================================

# An add is "blind": the record it applies is a new dot with its value (``orswot.new``),
# covering nothing. The data model's add "contributes (dot, value) to live" and only a
# remove contributes covered dots; ``orswot.add``, which also covers the dots the add
# observed, reads the same in every history here, because replicas ship whole element
# records: a replica that holds the new dot got it in a record that also held every dot its
# origin had, so a remove that sees the new dot sees the older ones too and the value is
# always the highest live dot's. What the blind add saves: reading and parsing the current
# record to build the delta, and the covered dots an overwrite would add to it for good (a
# field HSET or HINCRBY'd a thousand times kept up to 255 covered dots, 2.5 kB, parsed by
# every later write; now the element keeps at most its four newest adds, the lattice's
# live cap). A remove is the delta ``orswot.remove`` merges (the same bytes), so the apply
# path merges it once.

def add(current: bytes | None, rtype: int, hlc: int, origin: int, val: bytes = b"",
        deadline: int = 0) -> bytes:
    """The record of an add: the dot (hlc, origin) with ``val`` and the header deadline
    ``deadline``, for the apply path to merge into ``current`` (see above), built as
    that join when it can be (``orswot.new_over``)."""
    return orswot.new_over(current, rtype, hlc, origin, val, deadline)


def remove(current: bytes, hlc: int, origin: int) -> bytes:
    """A remove covering the live dots of ``current``: the record to apply (a delta
    whose merge with ``current`` is ``orswot.remove``'s result)."""
    observed = tuple(d for d, _ in orswot.element_of(current).live)
    if not observed:
        return current
    return env.pack(env.make_flags(env.rtype_of(current), tombstone=True), hlc, origin, 0,
                    orswot.to_bytes(orswot.Element((), observed)))


def remove_named(ks: Keyspace, key: bytes, ctype: int, tag: bytes, names: Sequence[bytes], now: int) -> int:
    """Remove the live members ``names`` of the ``ctype`` collection at ``key`` (HDEL's
    fields, SREM's members): how many were live, and so removed."""
    hk, h = ks.collection(key, ctype, now)
    if h is None:
        return 0
    prefix, dc, g = element_prefix(hk, tag), gate(h, now), ks.get
    hlc, node = ks.hlc.now(), ks.node_id
    recs = []
    for name in dict.fromkeys(names):
        ik = prefix + name
        cur = g(ik)
        if cur is not None and live(cur, dc, now):
            recs.append((ik, remove(cur, hlc, node)))
    if recs:
        ks.apply(recs)
    return len(recs)


def restamp(current: bytes, hlc: int, origin: int, deadline: int) -> bytes:
    """The per-member TTL write: the header re-stamped with a new version and
    ``deadline`` (0: persistent), the dots unchanged."""
    return env.with_ttl(current, hlc, origin, deadline)


def deadline_of(rec: bytes) -> int:
    """The element's deadline (0: none)."""
    return env.ttl_of(rec)


# =========================================================================================
# Per-member TTL, generic over the collection types with ORSWOT members
# =========================================================================================

# what ``member_record`` found
NO_KEY = 0  # the key does not exist
UNSUPPORTED = 1  # the key holds a type without ORSWOT members (a string, a list, ...)
NO_MEMBER = 2  # the collection has no such live member
FOUND = 3


def member_record(ks: Keyspace, key: bytes, member: bytes,
                  now: int) -> tuple[int, bytes, bytes | None]:
    """(what was found, member ikey, live record) for ``member`` of ``key``, whatever
    the collection's type: the lookup of EXPIREMEMBER and ``TTL key member``."""
    found = ks.live_record(key, now)
    if found is None:
        return NO_KEY, b"", None
    ikey, h = found
    if ikey[_TAG_AT] != _ORD_HEAD:
        return UNSUPPORTED, b"", None
    kind = member_kind(head.ctype_of(h))
    if kind is None:
        return UNSUPPORTED, b"", None
    mk = element_prefix(ikey, kind.tag) + member
    rec = ks.get(mk)
    if not live(rec, gate(h, now), now):
        return NO_MEMBER, mk, None
    return FOUND, mk, rec


def set_deadline(ks: Keyspace, mk: bytes, rec: bytes, deadline: int) -> None:
    """Give the live member record ``rec`` at ``mk`` the deadline ``deadline`` (0:
    persist). A deadline at or before now makes it read as absent at once."""
    ks.apply([(mk, restamp(rec, ks.hlc.now(), ks.node_id, deadline))])


# =========================================================================================
# Random members (HRANDFIELD, SRANDMEMBER, SPOP)
# =========================================================================================

def sample(ks: Keyspace, hk: bytes, h: bytes, k: int, distinct: bool,
           now: int) -> list[tuple[bytes, bytes]]:
    """(member, record) of ``k`` random live members of the collection of the live head
    ``h``: without repetition (``distinct``; all of them, in member order, when ``k``
    is at least their number) or with repetition. Uniform: picked from the counted
    member list (``Counts.members``), or from a scan of a collection too big for one."""
    prefix = members_prefix(hk, h)
    pool = ks.counts.members(prefix, h, now)
    if pool is None:
        everything = list(scan(ks, prefix, gate(h, now), now))
        if distinct and k >= len(everything):
            return everything
        if distinct:
            return random.sample(everything, k)
        return random.choices(everything, k=k) if everything else []
    if not pool:
        return []
    if distinct and k >= len(pool):
        chosen = sorted(pool)
    elif distinct:
        chosen = random.sample(pool, k)
    else:
        chosen = random.choices(pool, k=k)
    get = ks.get
    return [(m, get(prefix + m)) for m in chosen]  # type: ignore[misc]


# =========================================================================================
# Scan cursors (HSCAN, SSCAN)
# =========================================================================================

MAX_CURSORS = 65_536
SCAN_BUDGET = 10  # a call reads at most this many records per COUNT (dead ones included)


class Cursors:
    """cursor -> (collection prefix, next member) of the iterations in progress."""

    def __init__(self) -> None:
        self.table: OrderedDict[int, tuple[bytes, bytes]] = OrderedDict()
        self._next = itertools.count(random.getrandbits(40) + 1)

    def store(self, prefix: bytes, resume: bytes) -> int:
        cid = next(self._next) & 0x7FFFFFFFFFFFFFFF or next(self._next)
        table = self.table
        table[cid] = (prefix, resume)
        while len(table) > MAX_CURSORS:
            table.popitem(last=False)
        return cid

    def resume(self, cid: int, prefix: bytes) -> bytes:
        """Where the iteration of ``cid`` over ``prefix`` goes on (b"": from the start,
        also for a cursor this node does not know)."""
        if cid == 0:
            return b""
        found = self.table.get(cid)
        if found is None or found[0] != prefix:
            return b""
        return found[1]


def scan_page(ks: Keyspace, hk: bytes, h: bytes, cursor: int, count: int,
              now: int) -> tuple[int, list[tuple[bytes, bytes]]]:
    """One HSCAN/SSCAN call: (next cursor, (member, record) of up to ``count`` live
    members from the cursor's position on). The call reads at most ``SCAN_BUDGET``
    records per COUNT (dead ones included), so a page may be short; 0 when done."""
    prefix = members_prefix(hk, h)
    start = ks.cursors.resume(cursor, prefix)
    dc = gate(h, now)
    out: list[tuple[bytes, bytes]] = []
    budget = SCAN_BUDGET * count
    n = len(prefix)
    for ek, ev in ks.engine.scan(prefix + start, prefix_end(prefix)):
        m = ek[n:]
        if len(out) >= count or budget <= 0:
            return ks.cursors.store(prefix, m), out
        budget -= 1
        if _is_live(ev, now) and _gate_clock(ev) > dc:
            out.append((m, ev))
    return 0, out

