"""Hypothesis strategies for the stream records beside the entries: per-origin counters
(b'X'), consumer groups (b'g'), consumers (b'c') and pending entries (b'p').

Versions, clocks, epochs, incarnations and positions come from small universes (as in
laws_gen) so that generated records collide often: the interesting merges are the close
ones. ``laws_gen.LATTICES`` lists them with the other lattices, so every generic law and
registry test runs on them too.
"""

from __future__ import annotations

import random
import struct

from hypothesis import strategies as st

from marekvs.core import envelope as env
from marekvs.core import orswot, stream
from marekvs.core import streamgroup as G

ORIGINS = st.integers(1, 3)
HLCS = st.integers(1, 30)
VERSIONS = st.tuples(HLCS, ORIGINS)
SMALL_IDS = st.tuples(st.integers(0, 3), st.integers(0, 2))


# -- counters -----------------------------------------------------------------------------

@st.composite
def counters(draw) -> stream.Counters:
    return stream.Counters(draw(st.sampled_from([0, 5, 9])),
                           draw(st.sampled_from([stream.NO_EPOCH, (3, 1), (7, 2)])),
                           draw(st.integers(0, 5)), draw(SMALL_IDS), draw(SMALL_IDS))


@st.composite
def counter_records(draw) -> bytes:
    hlc, origin = draw(VERSIONS)
    return stream.counters_record(draw(counters()), hlc, origin)


# -- groups --------------------------------------------------------------------------------

POSITIONS = st.builds(G.Position, st.integers(0, 3), st.integers(0, 2), st.integers(0, 3))


@st.composite
def groups(draw) -> G.Group:
    clock = draw(st.sampled_from([0, 0, 4, 12]))
    if draw(st.integers(0, 3)) == 0:
        return G.Group(G.DESTROYED, clock, G.ZERO)
    slots = draw(st.dictionaries(ORIGINS, POSITIONS, max_size=3))
    return G.Group(G.LIVE, clock, draw(POSITIONS), tuple(sorted(slots.items())))


@st.composite
def group_records(draw) -> bytes:
    hlc, origin = draw(VERSIONS)
    return env.pack(G.FLAGS, hlc, origin, 0, G.group_to_bytes(draw(groups())))


# -- pending entries -----------------------------------------------------------------------

@st.composite
def pending_records(draw) -> bytes:
    hlc, origin = draw(VERSIONS)
    base = draw(st.sampled_from([G.NO_BASE, G.NO_BASE, (5, 1, 3), (8, 2, 0)]))
    slots = draw(st.dictionaries(ORIGINS, st.integers(0, 3), max_size=3))
    p = G.Pending(draw(st.sampled_from([(1, 1), (4, 2), (9, 1)])), draw(st.integers(1, 3)),
                  draw(st.booleans()), draw(st.integers(0, 9)), base, tuple(sorted(slots.items())),
                  draw(st.sampled_from([b"a", b"b", b""])))
    acked = draw(st.booleans())
    return env.pack(env.make_flags(G.RTYPE, tombstone=acked), hlc, origin, 0, G.pending_to_bytes(p))


# -- consumers -----------------------------------------------------------------------------

def seen_value(dot: tuple[int, int]) -> bytes:
    """One add, one value: the seen-time an add with this dot carries."""
    return struct.pack(">Q", dot[0] * 10 + dot[1])


def consumer_element(adds: set[tuple[int, int]], covered: set[tuple[int, int]]) -> orswot.Element:
    """The stored form R(A, C) with the consumer caps (4 live, 4 covered)."""
    live_cap, covered_cap = G.CONSUMER_CAPS
    top = sorted(adds, reverse=True)[:live_cap]
    return orswot.Element(tuple((d, seen_value(d)) for d in top if d not in covered),
                          tuple(sorted(covered, reverse=True)[:covered_cap]))


def consumer_record(e: orswot.Element, hlc: int, origin: int) -> bytes:
    flags = env.make_flags(G.RTYPE, tombstone=not e.live)
    return env.pack(flags, hlc, origin, 0, bytes((G.CONSUMER_FMT,)) + orswot.to_bytes(e))


@st.composite
def abstract_consumers(draw) -> tuple[set, set]:
    adds = draw(st.sets(st.tuples(st.integers(1, 12), ORIGINS), max_size=9))
    rnd = random.Random(draw(st.integers(0, 2**32)))
    p = draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))
    return adds, {d for d in sorted(adds) if rnd.random() < p}


@st.composite
def consumer_records(draw) -> bytes:
    adds, covered = draw(abstract_consumers())
    hlc, origin = draw(VERSIONS)
    return consumer_record(consumer_element(adds, covered), hlc, origin)
