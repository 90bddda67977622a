"""Stream consumer groups as lattices: groups (b'g'), consumers (b'c'), pending entries (b'p').

Redis keeps a consumer group as one in-memory structure: a last-delivered id, an
entries-read counter, the consumers, and a pending entries list (PEL) of entries
delivered but not acknowledged. marekvs splits it into records that merge on their own,
all of them elements of the stream's collection (gated by the stream head's delete
clock like any element, ``head.element_live``), all of envelope record type
``STREAM_ENTRY`` (the 3-bit record type has no free value; the tag tells the kinds apart
and each payload starts with a format byte of its own kind, checked on every peer
record):

``g`` group ``[pid]'g'[klen][key][group]``, format ``GROUP_FMT``::

    [fmt u8 = 0x22] [state u8] [destroy_clock u64]
    [base_ms u64] [base_seq u64] [base_read u64]                        set by CREATE / SETID
    [nslots u16] nslots x ([origin u16] [ms u64] [seq u64] [read u64])  deliveries, by entry origin

  A *position* is a last-delivered id with its entries-read counter, ``read`` =
  entries-read + 1 (0: unknown, Redis's SCG_INVALID_ENTRIES_READ). The group's
  position (its last-delivered-id) is the greatest of the base and the slots, ordered as
  ``(ms, seq, read)``. The record's version is the version of the last CREATE, SETID or
  DESTROY: the shape of the PN counter of the data model, whose base version is the
  envelope's. Delivering (XREADGROUP ``>``, XCLAIM LASTID) does not make a new version:
  the delivering node raises slots and keeps the header, so concurrent deliveries on
  several nodes all count, and a CREATE/SETID (a new version) resets the position
  wholesale, as in Redis.

  Slots are keyed by the *origin of the entries delivered* (the node that XADDed them,
  the envelope origin of the entry record), not by the delivering node: an entry of
  origin ``o`` counts as delivered in the group iff its id is at or below the base or
  below or at slot ``o`` (or its pending record says so, below). Each origin's entries
  reach every node in the order that origin made them (its ids only grow, and its
  replication log is shipped in order), so an entry XADDed on node A that arrives at
  node B after B delivered newer entries of other origins is still above A's slot there
  and is delivered: a single last-delivered id would skip it for good.
  Merge: the input with the higher ``(version, LWW part)`` (the LWW part is the header,
  the state and the base) gives the header, state, base and its slots; equal keys join
  their slots pointwise (the greater position per origin); ``destroy_clock`` is the max
  of both. A lexicographic product of a total order with a join, times a max: a join.
  DESTROY is a new version with ``state`` 0 (destroyed, no base, no slots) and
  ``destroy_clock`` = its hlc. It is not a tombstone, on purpose: a tombstone is
  physically removed after gc_grace, and with it the destroy clock that keeps the old
  group's pending entries and consumers dead if the name is created again.

``p`` pending entry ``[pid]'p'[klen][key][glen][group][id_ms u64][id_seq u64]``::

    [fmt u8 = 0x24] [epoch_hlc u64] [epoch_origin u16] [incarnation u32] [flags u8]
    [delivery_ms u64] [base_hlc u64] [base_origin u16] [base_count u64]
    [nslots u8] nslots x ([origin u16] [count u64])              by origin
    [consumer: the rest]

  The *epoch* is the version of the group (its CREATE or SETID) the delivery was made
  under; the *incarnation* counts the times the entry entered this group's PEL in that
  epoch; flag bit 0, ``delivered``, says a read of the group handed the entry out (an
  XCLAIM FORCE of an entry above the group's position leaves it clear: a read with ``>``
  still delivers that entry, as in Redis). An acknowledgement (XACK, or the PEL entries
  XGROUP DELCONSUMER drops) is the record as a tombstone. Merge: the greater
  ``(epoch, incarnation)`` wins whole; within one, ``delivered`` is or-ed, and for the
  rest an ack is *sticky*, it beats any claim or delivery of the same epoch and
  incarnation however late its version (two acks: LWW); two pending records join: the
  owner (``consumer``) and delivery time are LWW by version, the delivery count is
  ``base_count + sum(counts)`` in the PN-counter shape (the higher base version wins
  whole, equal bases take each origin's max; a fresh delivery has base (0, 0, 0), so two
  nodes delivering one entry at the same time count 2, and XPENDING shows the duplicate;
  RETRYCOUNT is a new base). An ordinal sum of that product join under a chain of acks,
  times an or, inside a lexicographic order: a join. Only a node that has seen the ack
  starts a new incarnation (XCLAIM FORCE), and a SETID starts a new epoch (redelivery
  after an acknowledged read, as Redis does). A pending entry is live if its record is
  live and its epoch is newer than the group's destroy clock. A read with ``>`` skips an
  entry whose record (pending or acknowledged) is ``delivered`` in the group's epoch
  (``handed_out``): a node that receives the ack of an entry before its delivery (they
  may come from different nodes) never hands it out again.

``c`` consumer ``[pid]'c'[klen][key][glen][group][consumer]``, format ``CONSUMER_FMT``::

    [fmt u8 = 0x23] [observed-remove element]     the data model's OR element (6.2)

  A consumer is an element of an observed-remove set whose dot values are its
  seen-time (u64 ms, big-endian): every interaction (XREADGROUP, XCLAIM, CREATECONSUMER)
  is an add with a new dot that covers the dots it observed, XGROUP DELCONSUMER a remove
  of the observed dots, so a consumer active on another node at the same time survives
  its deletion. The caps are 4 live and 4 covered dots: with the OR element's cap rule a
  dot among the four highest adds is live exactly when it is not covered, so covered
  dots below the fourth-highest add decide nothing (``orswot``'s docstring), and four
  keep the record small although every read rewrites it. A consumer is live if it has a
  live dot newer than the group's destroy clock.

Every merge here is commutative, associative and idempotent byte for byte and returns
an input unchanged when it is the join (tests/merge_laws/test_streamgroup.py).
"""

from __future__ import annotations

import struct
from typing import NamedTuple

from marekvs.core import envelope as env
from marekvs.core import joins, orswot
from marekvs.core.envelope import RecordType

GROUP_FMT = 0x22
CONSUMER_FMT = 0x23
PENDING_FMT = 0x24
RTYPE = RecordType.STREAM_ENTRY
FLAGS = env.make_flags(RTYPE)
_TOMB = env.FLAG_TOMBSTONE
_SIZE = env.ENVELOPE_SIZE

Version = tuple[int, int]  # (hlc, origin)


class GroupFormatError(ValueError):
    pass


# Joins the ops below build, answered by the merges without a parse (core/joins.py).
KNOWN = joins.Known()
_built = KNOWN.built
_known = KNOWN.join


# =========================================================================================
# groups
# =========================================================================================

LIVE = 1
DESTROYED = 0
_GROUP = struct.Struct(">BBQQQQH")  # fmt, state, destroy clock, base ms/seq/read, nslots
_SLOT = struct.Struct(">HQQQ")  # origin, ms, seq, read
_STATE_END = _SIZE + 2  # header, fmt, state: then the destroy clock (max-joined, not LWW) ...
_BASE_END = _STATE_END + 8 + 24  # ... and the base: the LWW part is [:_STATE_END] + base
UNKNOWN_READ = 0  # a position's read field when entries-read is unknown


class Position(NamedTuple):
    """A last-delivered id and its entries-read counter + 1 (0: unknown)."""

    ms: int = 0
    seq: int = 0
    read: int = UNKNOWN_READ

    @property
    def id(self) -> tuple[int, int]:
        return self.ms, self.seq

    @property
    def entries_read(self) -> int | None:
        return self.read - 1 if self.read else None


ZERO = Position()


class Group(NamedTuple):
    state: int
    destroy_clock: int
    base: Position
    slots: tuple[tuple[int, Position], ...] = ()  # (origin, position), by origin

    @property
    def live(self) -> bool:
        return self.state == LIVE

    def position(self) -> Position:
        """The group's last-delivered id and entries read: the greatest position."""
        return max([self.base, *(p for _, p in self.slots)])


def group_to_bytes(g: Group) -> bytes:
    out = [_GROUP.pack(GROUP_FMT, g.state, g.destroy_clock, *g.base, len(g.slots))]
    out += [_SLOT.pack(o, *p) for o, p in g.slots]
    return b"".join(out)


def group_from_bytes(payload: bytes) -> Group:
    if len(payload) < _GROUP.size or payload[0] != GROUP_FMT:
        raise GroupFormatError("not a consumer group payload")
    _, state, clock, ms, seq, read, n = _GROUP.unpack_from(payload, 0)
    if state not in (LIVE, DESTROYED):
        raise GroupFormatError(f"unknown group state {state}")
    if len(payload) != _GROUP.size + n * _SLOT.size:
        raise GroupFormatError("group payload length does not match its slot count")
    slots = tuple((o, Position(m, s, r)) for o, m, s, r in _SLOT.iter_unpack(payload[_GROUP.size:]))
    if any(a[0] >= b[0] for a, b in zip(slots, slots[1:])):
        raise GroupFormatError("group slots not in strictly increasing origin order")
    if state == DESTROYED and (slots or (ms, seq, read) != (0, 0, 0)):
        raise GroupFormatError("a destroyed group has no position")
    return Group(state, clock, Position(ms, seq, read), slots)


_PARSED: dict[bytes, Group] = {}  # record -> its parsed group: one command reads a group
_PARSED_MAX = 4096                # record several times (lookups, merge, delivery)


def group_of(record: bytes) -> Group:
    g = _PARSED.get(record)
    if g is None:
        g = group_from_bytes(record[_SIZE:])
        if len(_PARSED) >= _PARSED_MAX:
            _PARSED.clear()
        _PARSED[record] = g
    return g


def group_live(record: bytes) -> bool:
    """The group record's state is live (not destroyed)."""
    return record[_SIZE + 1] == LIVE


def _group_key(r: bytes) -> tuple[bytes, bytes]:
    return r[1:11], r[:_STATE_END] + r[_STATE_END + 8:_BASE_END]


def merge_group(a: bytes, b: bytes) -> bytes:
    if a == b:
        return a
    known = _known(a, b)
    if known is not None:
        return known
    ga, gb = group_of(a), group_of(b)
    ka, kb = _group_key(a), _group_key(b)
    clock = max(ga.destroy_clock, gb.destroy_clock)
    if ka != kb:
        top, g = (a, ga) if ka > kb else (b, gb)
        slots = g.slots
    else:
        top, g = a, ga
        joined = dict(ga.slots)
        for o, p in gb.slots:
            if o not in joined or p > joined[o]:
                joined[o] = p
        slots = tuple(sorted(joined.items()))
    out = top[:_SIZE] + group_to_bytes(g._replace(destroy_clock=clock, slots=slots))
    if out == a:
        return a
    if out == b:
        return b
    return out


def new_group(hlc: int, origin: int, base: Position, prior: bytes | None = None,
              dead_clock: int = 0) -> bytes:
    """XGROUP CREATE (and XREADGROUP's MKSTREAM path): a group at ``base``. ``prior`` is
    a dead record stored under the name (destroyed, or gated by a DEL of the stream,
    which ``dead_clock`` is then the head's delete clock of); its destroy clock and
    ``dead_clock`` carry over, so what the old group left stays dead."""
    clock = dead_clock
    if prior is not None:
        clock = max(clock, group_of(prior).destroy_clock)
    rec = env.pack(FLAGS, hlc, origin, 0, group_to_bytes(Group(LIVE, clock, base)))
    return rec if prior is None else merge_group(prior, rec)


def set_position(current: bytes, hlc: int, origin: int, base: Position) -> bytes:
    """XGROUP SETID: a new version whose base is ``base`` (the slots reset)."""
    g = group_of(current)
    rec = env.pack(FLAGS, hlc, origin, 0, group_to_bytes(Group(LIVE, g.destroy_clock, base)))
    return _built(merge_group(current, rec), current)


def destroy(current: bytes, hlc: int, origin: int) -> bytes:
    """XGROUP DESTROY: a new version, destroyed, whose destroy clock is its hlc."""
    g = group_of(current)
    rec = env.pack(FLAGS, hlc, origin, 0,
                   group_to_bytes(Group(DESTROYED, max(g.destroy_clock, hlc), ZERO)))
    return _built(merge_group(current, rec), current)


def deliver_slots(current: bytes, positions: dict[int, Position]) -> bytes:
    """Deliveries of entries of the origins in ``positions`` up to their positions
    (XREADGROUP ``>``, XCLAIM LASTID): each origin's slot rises to its position (a slot
    never goes back); the header (version) is kept."""
    g = group_of(current)
    slots = dict(g.slots)
    changed = False
    for origin, pos in positions.items():
        if pos > slots.get(origin, ZERO):
            slots[origin] = pos
            changed = True
    if not changed:
        return current
    return _built(current[:_SIZE] + group_to_bytes(g._replace(slots=tuple(sorted(slots.items())))), current)


def deliver(current: bytes, origin: int, pos: Position) -> bytes:
    """``deliver_slots`` of one origin."""
    return deliver_slots(current, {origin: pos})


def epoch_of(record: bytes) -> Version:
    """The version a delivery under this group record belongs to."""
    return env.hlc_of(record), env.origin_of(record)


# =========================================================================================
# pending entries
# =========================================================================================

_PENDING = struct.Struct(">BQHIBQQHQB")  # fmt, epoch, incarnation, flags, delivery ms, count base, nslots
_COUNT_SLOT = struct.Struct(">HQ")  # origin, deliveries counted there
_FLAGS_AT = _SIZE + 15  # the flags byte, after fmt, epoch and incarnation
DELIVERED = 1  # flags: the entry was handed out by a read of the group (not only force-claimed)
INCARNATION_MAX = (1 << 32) - 1
NO_BASE = (0, 0, 0)  # (hlc, origin, value): the count base of a fresh delivery


class Pending(NamedTuple):
    epoch: Version
    incarnation: int
    delivered: bool  # handed out by XREADGROUP '>' (or claimed at or below the group's position)
    delivery_ms: int
    base: tuple[int, int, int]  # (hlc, origin, value) of the last RETRYCOUNT, NO_BASE: none
    slots: tuple[tuple[int, int], ...]  # (origin, deliveries counted there since the base)
    consumer: bytes

    @property
    def deliveries(self) -> int:
        """The delivery count: the base plus every node's deliveries since."""
        return self.base[2] + sum(n for _, n in self.slots)


def pending_to_bytes(p: Pending) -> bytes:
    out = [_PENDING.pack(PENDING_FMT, p.epoch[0], p.epoch[1], p.incarnation, DELIVERED if p.delivered else 0,
                         p.delivery_ms, *p.base, len(p.slots))]
    out += [_COUNT_SLOT.pack(o, n) for o, n in p.slots]
    out.append(p.consumer)
    return b"".join(out)


def pending_from_bytes(payload: bytes) -> Pending:
    if len(payload) < _PENDING.size or payload[0] != PENDING_FMT:
        raise GroupFormatError("not a pending entry payload")
    _, eh, eo, inc, flags, ms, bh, bo, bv, n = _PENDING.unpack_from(payload, 0)
    if flags & ~DELIVERED:
        raise GroupFormatError(f"unknown pending entry flags {flags:#04x}")
    end = _PENDING.size + n * _COUNT_SLOT.size
    if len(payload) < end:
        raise GroupFormatError("pending entry payload shorter than its count slots")
    slots = tuple(_COUNT_SLOT.iter_unpack(payload[_PENDING.size:end]))
    if any(a[0] >= b[0] for a, b in zip(slots, slots[1:])):
        raise GroupFormatError("count slots not in strictly increasing origin order")
    return Pending((eh, eo), inc, bool(flags), ms, (bh, bo, bv), slots, bytes(payload[end:]))


def pending_of(record: bytes) -> Pending:
    return pending_from_bytes(record[_SIZE:])


def _unflagged(r: bytes) -> bytes:
    return r[:_FLAGS_AT] + b"\0" + r[_FLAGS_AT + 1:]


def merge_pending(a: bytes, b: bytes) -> bytes:
    """(epoch, incarnation) decides; within one, the ``delivered`` flag is or-ed, and for
    the rest an acknowledgement (tombstone) beats any pending record and acks merge LWW;
    two pending records join: owner and delivery time LWW by version, the count a
    PN-counter-shaped join (the higher base wins whole, equal bases take each origin's
    max)."""
    if a == b:
        return a
    known = _known(a, b)
    if known is not None:
        return known
    # epoch hlc + origin + incarnation are the 14 payload bytes after the format byte,
    # big-endian: their bytes order like the numbers
    ea, eb = a[_SIZE + 1:_FLAGS_AT], b[_SIZE + 1:_FLAGS_AT]
    if ea != eb:
        return a if ea > eb else b
    flags = a[_FLAGS_AT] | b[_FLAGS_AT]
    ta, tb = a[0] & _TOMB, b[0] & _TOMB
    if ta != tb or ta:  # an ack beats a pending record; two acks: LWW (the flag aside)
        top = (a if ta else b) if ta != tb else (a if (a[1:11], _unflagged(a)) >= (b[1:11], _unflagged(b)) else b)
        out = top if top[_FLAGS_AT] == flags else top[:_FLAGS_AT] + bytes((flags,)) + top[_FLAGS_AT + 1:]
    else:
        pa, pb = pending_of(a), pending_of(b)
        top, pt = (a, pa) if (a[1:11], a[:_SIZE], pa.delivery_ms, pa.consumer) >= \
            (b[1:11], b[:_SIZE], pb.delivery_ms, pb.consumer) else (b, pb)
        if pa.base != pb.base:
            slots = (pa if pa.base > pb.base else pb).slots
            base = max(pa.base, pb.base)
        else:
            joined = dict(pa.slots)
            for o, n in pb.slots:
                if n > joined.get(o, -1):
                    joined[o] = n
            slots, base = tuple(sorted(joined.items())), pa.base
        out = top[:_SIZE] + pending_to_bytes(pt._replace(base=base, slots=slots, delivered=bool(flags)))
    if out == a:
        return a
    if out == b:
        return b
    return out


def _pending_record(p: Pending, hlc: int, origin: int, acked: bool = False) -> bytes:
    return env.pack(env.make_flags(RTYPE, tombstone=acked), hlc, origin, 0, pending_to_bytes(p))


def _counted(p: Pending, origin: int, add: int) -> tuple[tuple[int, int], ...]:
    slots = dict(p.slots)
    slots[origin] = slots.get(origin, 0) + add
    return tuple(sorted(slots.items()))


def _fresh(epoch: Version, incarnation: int, delivered: bool, origin: int, consumer: bytes, delivery_ms: int,
           deliveries: int) -> Pending:
    """A pending entry entering the PEL, counted ``deliveries`` times by ``origin``: the
    base is NO_BASE, so two nodes delivering the same entry concurrently count twice."""
    return Pending(epoch, min(incarnation, INCARNATION_MAX), delivered, delivery_ms, NO_BASE,
                   ((origin, deliveries),) if deliveries else (), consumer)


def deliver_pending(current: bytes | None, epoch: Version, hlc: int, origin: int, consumer: bytes,
                    now_ms: int) -> bytes:
    """An entry delivered to ``consumer`` under the group version ``epoch``
    (XREADGROUP ``>``): a new pending entry delivered once (a fresh count: two nodes that
    deliver it at the same time, neither seeing the other, count 2 once merged, so the
    duplicate shows in its delivery count). An entry already pending here in this epoch
    (XCLAIM FORCE made it pending before it was delivered) is reassigned with its count
    reset to 1, as Redis does: a new count base."""
    if current is None:
        return _pending_record(_fresh(epoch, 1, True, origin, consumer, now_ms, 1), hlc, origin)
    c = pending_of(current)
    if c.epoch < epoch:
        p = _fresh(epoch, 1, True, origin, consumer, now_ms, 1)
    elif current[0] & _TOMB:
        p = _fresh(c.epoch, c.incarnation + 1, True, origin, consumer, now_ms, 1)
    else:
        p = c._replace(delivered=True, delivery_ms=now_ms, consumer=consumer, base=(hlc, origin, 1), slots=())
    return _built(merge_pending(current, _pending_record(p, hlc, origin)), current)


def claim_pending(current: bytes, hlc: int, origin: int, consumer: bytes, delivery_ms: int,
                  add: int = 1, retrycount: int | None = None, delivered: bool = True) -> bytes:
    """XCLAIM / XAUTOCLAIM / a re-read of one's own PEL: owner and delivery time
    rewritten (LWW within the epoch and incarnation), the count raised by ``add`` on this
    origin, or set to ``retrycount`` (a new count base). On an acknowledged record
    (XCLAIM FORCE after the ack was seen): a new incarnation, counted as Redis counts a
    forced claim (created delivered once, plus ``add``), ``delivered`` if the entry is at
    or below the group's position."""
    c = pending_of(current)
    if current[0] & _TOMB:
        p = _fresh(c.epoch, c.incarnation + 1, delivered, origin, consumer, delivery_ms, 1 + add)
    else:
        p = c._replace(delivery_ms=delivery_ms, consumer=consumer, slots=_counted(c, origin, add))
    if retrycount is not None:
        p = p._replace(base=(hlc, origin, retrycount), slots=())
    return _built(merge_pending(current, _pending_record(p, hlc, origin)), current)


def force_pending(epoch: Version, hlc: int, origin: int, consumer: bytes, delivery_ms: int,
                  add: int = 1, retrycount: int | None = None, delivered: bool = False) -> bytes:
    """XCLAIM FORCE of an entry with no pending record in the group's epoch
    (``delivered``: the entry is at or below the group's position, so the group counts
    it delivered; above it, a read with ``>`` still hands it out, as in Redis)."""
    p = _fresh(epoch, 1, delivered, origin, consumer, delivery_ms, 1 + add)
    if retrycount is not None:
        p = p._replace(base=(hlc, origin, retrycount), slots=())
    return _pending_record(p, hlc, origin)


def ack_pending(current: bytes, hlc: int, origin: int) -> bytes:
    """XACK: the record as a tombstone of the same epoch and incarnation (sticky)."""
    if current[0] & _TOMB:
        return current
    return _built(merge_pending(current, _pending_record(pending_of(current), hlc, origin, acked=True)), current)


def pending_live(record: bytes, destroy_clock: int) -> bool:
    """Pending (not acknowledged) in a group whose destroy clock is ``destroy_clock``."""
    return not record[0] & _TOMB and int.from_bytes(record[_SIZE + 1:_SIZE + 9], "big") > destroy_clock


def handed_out(record: bytes, epoch: Version) -> bool:
    """The entry was delivered by a read of the group in its version ``epoch`` (or a later
    one this node has not seen yet), pending or acknowledged since: a read with ``>``
    must not hand it out again, even where the group's position does not cover it yet
    (the ack came from another node than the delivery, and arrived first)."""
    return bool(record[_FLAGS_AT] & DELIVERED) and (
        int.from_bytes(record[_SIZE + 1:_SIZE + 9], "big"),
        int.from_bytes(record[_SIZE + 9:_SIZE + 11], "big")) >= epoch


# =========================================================================================
# consumers
# =========================================================================================

CONSUMER_CAPS = (4, 4)  # live, covered
_MS = struct.Struct(">Q")


def element_of_consumer(record: bytes) -> orswot.Element:
    if len(record) <= _SIZE or record[_SIZE] != CONSUMER_FMT:
        raise GroupFormatError("not a consumer payload")
    return orswot.from_bytes(record[_SIZE + 1:])


def _consumer_record(header: bytes, e: orswot.Element) -> bytes:
    flags = (header[0] & ~_TOMB) | (0 if e.live else _TOMB)
    return bytes((flags,)) + header[1:_SIZE] + bytes((CONSUMER_FMT,)) + orswot.to_bytes(e)


def _header_key(r: bytes) -> tuple[bytes, bytes]:
    return r[1:11], bytes((r[0] & ~_TOMB,)) + r[11:_SIZE]


def merge_consumer(a: bytes, b: bytes) -> bytes:
    if a == b:
        return a
    known = _known(a, b)
    if known is not None:
        return known
    top = a if _header_key(a) >= _header_key(b) else b
    e = orswot.join(element_of_consumer(a), element_of_consumer(b), *CONSUMER_CAPS)
    out = _consumer_record(top, e)
    if out == a:
        return a
    if out == b:
        return b
    return out


def touch_consumer_seen(current: bytes | None, hlc: int, origin: int, seen_ms: int,
                        destroy_clock: int = 0) -> tuple[bytes, bool]:
    """A consumer seen at ``seen_ms`` (created if absent): an add with the dot
    ``(hlc, origin)`` covering the dots it observed; and whether the consumer was live
    before (in a group whose destroy clock is ``destroy_clock``: ``consumer_seen``). Built
    directly, from one parse: the new dot is the highest, so the join keeps it alone live,
    over the top 4 of what was live or covered (``merge_consumer(current, add)``, which
    tests/merge_laws pins it to). When the new dot is not above the record's version and
    every dot in it (a writer whose clock is behind the record: one that applied it without
    taking its clock, or whose HLC clamped a peer's drift), the direct build is not the
    join, and the add is merged instead."""
    covered: tuple[orswot.Dot, ...] = ()
    was_live = False
    behind = False
    if current is not None:
        e = element_of_consumer(current)
        was_live = not current[0] & _TOMB and bool(e.live) and e.live[0][0][0] > destroy_clock
        dots = sorted({*e.covered, *(d for d, _ in e.live)}, reverse=True)
        covered = tuple(dots[:CONSUMER_CAPS[1]])
        behind = (hlc, origin) <= max((env.hlc_of(current), env.origin_of(current)), dots[0] if dots else (0, 0))
    rec = _consumer_record(env.pack(FLAGS, hlc, origin, 0),
                           orswot.Element((((hlc, origin), _MS.pack(seen_ms)),), covered))
    if behind:
        rec = merge_consumer(current, rec)  # type: ignore[arg-type]
    return _built(rec, current), was_live


def touch_consumer(current: bytes | None, hlc: int, origin: int, seen_ms: int) -> bytes:
    """``touch_consumer_seen``'s record."""
    return touch_consumer_seen(current, hlc, origin, seen_ms)[0]


def remove_consumer(current: bytes, hlc: int, origin: int) -> bytes:
    """XGROUP DELCONSUMER: cover the observed dots."""
    observed = tuple(d for d, _ in element_of_consumer(current).live)
    if not observed:
        return current
    e = orswot.Element((), observed)
    return _built(merge_consumer(current, _consumer_record(env.pack(FLAGS, hlc, origin, 0), e)), current)


def consumer_seen(record: bytes, destroy_clock: int) -> int | None:
    """The consumer's seen-time, None if it is not live in a group whose destroy clock
    is ``destroy_clock`` (no live dot newer than it)."""
    if record[0] & _TOMB:
        return None
    live = element_of_consumer(record).live
    if not live or live[0][0][0] <= destroy_clock:
        return None
    seen: int = _MS.unpack(live[0][1])[0]
    return seen


# -- payload checks (the registry's rows) --------------------------------------------------

def check_group(record: bytes) -> None:
    group_of(record)


def check_pending(record: bytes) -> None:
    pending_of(record)


def check_consumer(record: bytes) -> None:
    e = element_of_consumer(record)
    live = [d for d, _ in e.live]
    if len(live) > CONSUMER_CAPS[0] or len(e.covered) > CONSUMER_CAPS[1]:
        raise GroupFormatError("consumer element above its caps")
    if any(a <= b for a, b in zip(live, live[1:])) or any(a <= b for a, b in zip(e.covered, e.covered[1:])):
        raise GroupFormatError("dots not in canonical (strictly descending) order")
    if not set(live).isdisjoint(e.covered):
        raise GroupFormatError("a dot is both live and covered")
    if any(len(v) != 8 for _, v in e.live):
        raise GroupFormatError("a consumer's seen-time is 8 bytes")
    if bool(record[0] & _TOMB) == bool(live):
        raise GroupFormatError("tombstone flag disagrees with the live dots")
