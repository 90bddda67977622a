"""ORSWOT element lattice: the caps argument, the spec's regression, local ops."""

from __future__ import annotations

import heapq

from hypothesis import given
from hypothesis import strategies as st
from laws_gen import (DEADLINES, SMALL_BYTES, VERSIONS, abstract_elements, dot_value, element_record, element_records,
                      represent)

from marekvs.core import envelope as env
from marekvs.core import orswot
from marekvs.core.envelope import RecordType

SET = RecordType.SET_MEMBER
SMALL = {"live_cap": 2, "covered_cap": 3}  # caps small enough to be hit all the time


def join_small(x, y):
    return orswot.join(x, y, **SMALL)


# -- the stored form is a homomorphic image of (adds, covered) under union --------------

@given(abstract_elements(big=True), abstract_elements(big=True))
def test_join_is_the_image_of_set_union(x, y):
    (a1, c1), (a2, c2) = x, y
    assert orswot.join(represent(a1, c1), represent(a2, c2)) == represent(a1 | a2, c1 | c2)


@given(abstract_elements(), abstract_elements())
def test_join_is_the_image_of_set_union_with_small_caps(x, y):
    (a1, c1), (a2, c2) = x, y
    got = join_small(represent(a1, c1, **SMALL), represent(a2, c2, **SMALL))
    assert got == represent(a1 | a2, c1 | c2, **SMALL)


@given(abstract_elements(), abstract_elements(), abstract_elements())
def test_small_caps_laws(x, y, z):
    a, b, c = (represent(*s, **SMALL) for s in (x, y, z))
    assert join_small(a, b) == join_small(b, a)
    assert join_small(join_small(a, b), c) == join_small(a, join_small(b, c))
    assert join_small(a, a) == a


def test_naive_live_cap_is_not_associative():
    """Why the live cap counts covered adds: truncating live to its top-N *after*
    subtracting covered depends on the merge order (module docstring)."""
    def naive(x, y, cap=4):
        cov = set(x.covered) | set(y.covered)
        live = {d: v for d, v in x.live + y.live if d not in cov}
        top = heapq.nlargest(cap, live)
        return orswot.Element(tuple((d, live[d]) for d in top), tuple(sorted(cov, reverse=True)))

    d0, *hi = [(h, 1) for h in range(10, 15)]
    a = orswot.Element(tuple((d, dot_value(d)) for d in reversed(hi)))
    b = orswot.Element(((d0, dot_value(d0)),))
    c = orswot.Element((), tuple(reversed(hi)))  # removes d1..d4, never saw d0
    assert naive(naive(a, b), c).live == ()
    assert naive(a, naive(b, c)).live == ((d0, dot_value(d0)),)
    # the real join drops d0 in both orders: four newer adds of the element exist
    assert orswot.join(orswot.join(a, b), c) == orswot.join(a, orswot.join(b, c))
    assert orswot.join(a, orswot.join(b, c)).live == ()


def test_covered_dot_dropped_by_the_cap_never_resurrects():
    old = (1, 2)
    removed = orswot.Element((), tuple((h, 1) for h in range(300, 40, -1)) + (old,))
    capped = orswot.join(removed, orswot.EMPTY)
    assert old not in capped.covered and len(capped.covered) == orswot.COVERED_CAP
    lagging_add = orswot.Element(((old, b"stale"),))
    assert orswot.join(capped, lagging_add).live == ()
    assert orswot.join(lagging_add, capped) == orswot.join(capped, lagging_add)


# -- the regression the spec names -------------------------------------------------------

def test_remove_covering_a_dot_the_local_record_never_held_keeps_its_covering_information():
    """Single-dot sketch failure: a remove covering a dot the receiving record never
    held lost that information on merge, so the old add resurrected depending on the
    delivery order. With two lattices the covered dot travels with the record."""
    d1 = orswot.new(SET, 10, 1)                      # node 1 adds
    d2 = orswot.new(SET, 11, 2)                      # node 2 adds concurrently
    rm = orswot.remove(d1, 12, 1)                    # node 1 removes what it saw: d1
    at2 = orswot.merge(d2, rm)                       # node 2 never held d1
    assert (10, 1) in orswot.element_of(at2).covered
    assert [d for d, _ in orswot.element_of(at2).live] == [(11, 2)]
    late = orswot.merge(at2, d1)                     # the old add arrives late at node 2
    assert late is at2
    for order in ((d1, d2, rm), (rm, d2, d1), (d2, d1, rm), (rm, d1, d2)):
        acc = order[0]
        for r in order[1:]:
            acc = orswot.merge(acc, r)
        assert acc == at2
    assert orswot.value(at2, 0) == b""               # present via d2 only


# -- local ops --------------------------------------------------------------------------

@given(element_records(big=False), VERSIONS, st.binary(max_size=3))
def test_add_moves_the_state_up_and_replaces_what_it_observed(cur, v, value):
    hlc = v[0] + 100  # a local stamp is newer than everything the node has merged
    observed = orswot.element_of(cur).live
    out = orswot.add(cur, RecordType.HASH_FIELD, hlc, v[1], value)
    assert orswot.merge(cur, out) == out
    assert orswot.value(out, 0) == value
    e = orswot.element_of(out)
    assert [d for d, _ in e.live] == [(hlc, v[1])]
    assert all(d in e.covered for d, _ in observed)


@given(element_records(big=False), VERSIONS)
def test_remove_moves_the_state_up_and_kills_what_it_observed(cur, v):
    out = orswot.remove(cur, v[0] + 100, v[1])
    if not orswot.element_of(cur).live:
        assert out is cur
        return
    assert orswot.merge(cur, out) == out
    assert env.is_tombstone(out) and orswot.value(out, 0) is None


def test_concurrent_add_the_remove_did_not_observe_survives():
    a = orswot.new(SET, 10, 1)
    rm = orswot.remove(a, 20, 1)
    concurrent = orswot.new(SET, 15, 2)
    m = orswot.merge(rm, concurrent)
    assert orswot.value(m, 0) == b"" and not env.is_tombstone(m)
    assert orswot.merge(m, a) is m


def test_value_is_the_highest_live_dot_and_respects_the_delete_clock_and_ttl():
    x = orswot.add(None, RecordType.HASH_FIELD, 10 << 16, 1, b"old")
    y = orswot.add(None, RecordType.HASH_FIELD, 11 << 16, 2, b"new")
    m = orswot.merge(x, y)
    assert orswot.value(m, 0) == b"new"
    assert orswot.value(m, 0, delete_clock=11 << 16) is None
    expiring = env.with_ttl(m, 12 << 16, 1, 50)           # EXPIREMEMBER: LWW envelope
    assert orswot.merge(m, expiring) == expiring
    assert orswot.value(expiring, 49) == b"new" and orswot.value(expiring, 50) is None


@given(element_records())
def test_roundtrip(rec):
    e = orswot.element_of(rec)
    assert orswot.from_bytes(orswot.to_bytes(e)) == e
    assert orswot.to_bytes(e) == rec[env.ENVELOPE_SIZE:]
    assert env.is_tombstone(rec) == (not e.live)


def test_header_is_the_lww_winner_and_the_tombstone_bit_is_recomputed():
    live = element_record(represent({(5, 1)}, set()), 5, 1)
    removal = element_record(represent({(5, 1)}, {(5, 1)}), 9, 2, ttl=0)
    concurrent = element_record(represent({(7, 3)}, set()), 7, 3, ttl=40)
    m = orswot.merge(orswot.merge(live, removal), concurrent)
    h = env.unpack_header(m)
    assert (h.hlc, h.origin, h.ttl_deadline_ms) == (9, 2, 0)
    assert not h.tombstone and orswot.value(m, 0) == dot_value((7, 3))


@given(st.none() | element_records(big=True), VERSIONS, st.integers(0, 400), SMALL_BYTES, DEADLINES,
       st.sampled_from([SET, RecordType.HASH_FIELD]))
def test_a_new_dot_built_over_the_current_record_is_their_join(cur, v, step, value, deadline, rtype):
    """``new_over`` hands the apply path the join of ``cur`` and ``new``'s record when it
    can build it from the bytes (``KNOWN``): byte for byte what the merge computes."""
    hlc, origin = v[0] + step, v[1]  # (below, at or above the dots of ``cur``)
    plain = orswot.new(rtype, hlc, origin, value, deadline)
    want = plain if cur is None else orswot.merge(cur, plain)
    got = orswot.new_over(cur, rtype, hlc, origin, value, deadline)
    assert got == plain or got == want
    orswot.KNOWN.clear()
    assert (got if cur is None else orswot.merge(cur, got)) == want
    e = None if cur is None else orswot.element_of(cur)
    if e is not None and (env.hlc_of(cur), env.origin_of(cur)) < (hlc, origin) and all(
            d < (hlc, origin) for d in [d for d, _ in e.live] + list(e.covered)):
        assert got == want  # (every local write: the join was built)
