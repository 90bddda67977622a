"""Hypothesis strategies for every lattice's records, and the ORSWOT reference model.

Versions, dots and deadlines come from small universes so that generated records
collide on versions, dots and ranks often: the interesting merges are the close ones.
"""

from __future__ import annotations

import random

from hypothesis import strategies as st

from marekvs.core import envelope as env
from marekvs.core import acluser, head, hll, keys, orswot, pncounter, stream, zset
from marekvs.core.envelope import RecordType

ORIGINS = st.integers(1, 3)
HLCS = st.integers(1, 30)
VERSIONS = st.tuples(HLCS, ORIGINS)
DEADLINES = st.sampled_from([0, 0, 0, 5, 20])
SMALL_BYTES = st.binary(max_size=3)


def dot_value(dot: tuple[int, int]) -> bytes:
    """One add, one value: the value an add with this dot carries."""
    return b"%d.%d" % dot


# -- LWW-shaped records --------------------------------------------------------------------

@st.composite
def lww_records(draw, rtype: int = RecordType.STRING, payloads=SMALL_BYTES) -> bytes:
    hlc, origin = draw(VERSIONS)
    if draw(st.integers(0, 3)) == 0:
        return env.pack(env.make_flags(rtype, tombstone=True), hlc, origin, 0)
    return env.pack(env.make_flags(rtype), hlc, origin, draw(DEADLINES), draw(payloads))


@st.composite
def counters(draw) -> pncounter.PNCounter:
    base = draw(st.one_of(st.just((0, 0)), VERSIONS))
    slots = draw(st.dictionaries(ORIGINS, st.tuples(st.integers(0, 6), st.integers(0, 6)),
                                 max_size=3))
    return pncounter.PNCounter(base[0], base[1], draw(st.integers(-3, 3)), slots)


@st.composite
def string_key_records(draw) -> bytes:
    """Anything stored at a string key: plain strings, tombstones, PN counters."""
    if draw(st.booleans()):
        return draw(lww_records(payloads=st.sampled_from([b"0", b"7", b"x"])))
    c = draw(counters())
    hlc, origin = draw(VERSIONS)
    return pncounter.record(c, max(hlc, c.base_hlc), origin, draw(DEADLINES))


# -- ORSWOT elements -----------------------------------------------------------------------

def represent(adds: set[tuple[int, int]], covered: set[tuple[int, int]],
              live_cap: int = orswot.LIVE_CAP,
              covered_cap: int = orswot.COVERED_CAP) -> orswot.Element:
    """Reference model: the stored form R(A, C) of the abstract state (every add dot
    seen, every covered dot), written independently of orswot.join."""
    top = sorted(adds, reverse=True)[:live_cap]
    return orswot.Element(
        tuple((d, dot_value(d)) for d in top if d not in covered),
        tuple(sorted(covered, reverse=True)[:covered_cap]),
    )


@st.composite
def abstract_elements(draw, big: bool = False) -> tuple[set, set]:
    """(A, C) with C a subset of A; ``big`` adds runs long enough to pass the caps."""
    adds = draw(st.sets(st.tuples(st.integers(1, 12), ORIGINS), max_size=10))
    if big and draw(st.integers(0, 3)) == 0:
        start, n = draw(st.integers(1, 40)), draw(st.integers(200, 320))
        adds |= {(h, 1 + h % 3) for h in range(start, start + n)}
    rnd = random.Random(draw(st.integers(0, 2**32)))  # one draw, however many dots
    p = draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))
    covered = {d for d in sorted(adds) if rnd.random() < p}
    return adds, covered


def element_record(e: orswot.Element, hlc: int, origin: int, ttl: int = 0,
                   rtype: int = RecordType.SET_MEMBER) -> bytes:
    flags = env.make_flags(rtype, tombstone=not e.live)
    return env.pack(flags, hlc, origin, ttl, orswot.to_bytes(e))


def score_value(dot: tuple[int, int]) -> bytes:
    """The value a zset member's add with this dot carries: an 8-byte score
    (``core/zset.py``; replication refuses anything else)."""
    return zset.encode_value(dot[0] + dot[1] / 8 - 3)


@st.composite
def element_records(draw, rtype: int = RecordType.SET_MEMBER, big: bool = True) -> bytes:
    adds, covered = draw(abstract_elements(big=big))
    hlc, origin = draw(VERSIONS)
    e = represent(adds, covered)
    if rtype == RecordType.ZSET_MEMBER:
        e = orswot.Element(tuple((d, score_value(d)) for d, _ in e.live), e.covered)
    return element_record(e, hlc, origin, draw(DEADLINES), rtype)


# -- heads, HLL registers, stream entries ----------------------------------------------------

CTYPES = st.sampled_from(sorted(head.TYPE_NAMES))


@st.composite
def heads(draw) -> head.Head:
    return head.Head(draw(CTYPES), draw(st.integers(0, 30)), draw(st.integers(0, 3)),
                     draw(st.integers(0, 3)), draw(st.sampled_from([b"", b"", b"c1", b"c2"])))


@st.composite
def head_records(draw) -> bytes:
    h = draw(heads())
    hlc, origin = draw(VERSIONS)
    tomb = draw(st.integers(0, 3)) == 0
    flags = env.make_flags(h.ctype, tombstone=tomb, head=True)
    return env.pack(flags, hlc, origin, 0 if tomb else draw(DEADLINES), head.to_bytes(h))


@st.composite
def hll_records(draw) -> bytes:
    hlc, origin = draw(VERSIONS)
    return hll.new(draw(st.integers(0, hll.MAX_RANK)), hlc, origin)


@st.composite
def user_records(draw) -> bytes:
    """ACL user records: a user's rules, or a tombstone (ACL DELUSER); never a deadline."""
    hlc, origin = draw(VERSIONS)
    if draw(st.integers(0, 3)) == 0:
        return acluser.tombstone(hlc, origin)
    return acluser.new(draw(st.sampled_from([b"on nopass ~* &* +@all", b"off resetchannels -@all", b""])),
                       hlc, origin)


FIELDS = st.lists(st.tuples(SMALL_BYTES, SMALL_BYTES), max_size=3)
stream_payloads = FIELDS.map(stream.to_bytes)

U = b"k"
LATTICES = {
    "string": (keys.encode_string_key(U), lww_records()),
    "string+counter": (keys.encode_string_key(U), string_key_records()),
    "head": (keys.encode_head_key(U), head_records()),
    "set-member": (keys.encode_set_member_key(U, b"m"), element_records()),
    "hash-field": (keys.encode_hash_field_key(U, b"f"), element_records(RecordType.HASH_FIELD)),
    "zset-member": (keys.encode_zset_member_key(U, b"m"), element_records(RecordType.ZSET_MEMBER)),
    "zset-score-index": (keys.encode_zset_score_key(U, 1.5, b"m"),
                         lww_records(RecordType.ZSET_MEMBER, st.just(b""))),
    "list-element": (keys.encode_list_key(U, keys.LIST_CENTER), lww_records(RecordType.LIST)),
    "hll-register": (keys.encode_hll_key(U, 7), hll_records()),
    "stream-entry": (keys.encode_stream_key(U, 5, 1 << 20),
                     lww_records(RecordType.STREAM_ENTRY, stream_payloads)),
    "acl-user": (keys.encode_user_key(U), user_records()),
    "function-library": (keys.encode_function_key(b"mylib"),
                         lww_records(RecordType.STRING, SMALL_BYTES.map(lambda code: b"\x01" + code))),
}

# the stream records beside the entries (streams_gen.py)
import streams_gen  # noqa: E402 - laws_gen's own directory is on the path (conftest.py)

LATTICES.update({
    "stream-counters": (keys.encode_stream_counter_key(U, 2), streams_gen.counter_records()),
    "stream-group": (keys.encode_group_key(U, b"grp"), streams_gen.group_records()),
    "group-consumer": (keys.encode_consumer_key(U, b"grp", b"c1"), streams_gen.consumer_records()),
    "group-pending": (keys.encode_pending_key(U, b"grp", 5, 1 << 20), streams_gen.pending_records()),
})
