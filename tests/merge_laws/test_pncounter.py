"""PN counters at string keys: concurrent increments count, SET resets."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from laws_gen import VERSIONS, counters, string_key_records

from marekvs.core import envelope as env
from marekvs.core import lww, pncounter
from marekvs.core.envelope import RecordType
from marekvs.core.keys import encode_string_key
from marekvs.core.merge import merge

K = encode_string_key(b"counter")
S = RecordType.STRING


def fold(*recs):
    acc = recs[0]
    for r in recs[1:]:
        acc = merge(K, acc, r)
    return acc


def test_concurrent_increments_on_different_nodes_all_count():
    base = lww.new(S, 10, 1, b"5")
    a = pncounter.incr(base, 2, 20, 1, 0)
    b = pncounter.incr(base, 3, 21, 2, 0)
    c = pncounter.incr(pncounter.incr(base, -1, 22, 3, 0), -1, 23, 3, 0)
    for order in ((a, b, c), (c, b, a), (b, base, c, a)):
        assert pncounter.value(fold(*order), 0) == b"8"


def test_concurrent_incr_on_a_fresh_key_counts_on_every_node():
    a = pncounter.incr(None, 1, 20, 1, 0)
    b = pncounter.incr(None, 1, 21, 2, 0)
    assert pncounter.value(fold(a, b), 0) == b"2"


def test_explicit_set_resets_the_counter():
    a = pncounter.incr(None, 5, 20, 1, 0)
    reset = lww.new(S, 25, 2, b"100")
    late_incr = pncounter.incr(a, 1, 30, 1, 0)  # made on the old base, concurrently
    assert pncounter.value(fold(a, reset, late_incr), 0) == b"100"
    after = pncounter.incr(reset, 1, 31, 3, 0)
    assert pncounter.value(fold(late_incr, after, reset), 0) == b"101"


def test_concurrent_incrs_after_the_same_del_all_count():
    dead = lww.tombstone(S, 40, 1)
    a = pncounter.incr(dead, 1, 41, 2, 0)
    b = pncounter.incr(dead, 1, 42, 3, 0)
    assert pncounter.value(fold(a, dead, b), 0) == b"2"


def test_expire_on_a_counter_is_lww_on_the_envelope_and_keeps_the_slots():
    a = pncounter.incr(None, 4, 20, 1, 0)
    exp = env.with_ttl(a, 30, 2, 1000)
    b = pncounter.incr(a, 1, 25, 3, 0)
    m = fold(exp, b)
    assert env.ttl_of(m) == 1000 and pncounter.value(m, 999) == b"5"
    assert pncounter.value(m, 1000) is None


def test_incr_keeps_ttl_and_restarts_after_expiry():
    s = lww.new(S, 10, 1, b"7", ttl_deadline_ms=100)
    live = pncounter.incr(s, 1, 20, 1, 50)
    assert env.ttl_of(live) == 100 and pncounter.value(live, 50) == b"8"
    restarted = pncounter.incr(live, 1, 30, 2, 150)
    assert env.ttl_of(restarted) == 0 and pncounter.value(fold(live, restarted), 150) == b"1"


def test_incr_rejects_non_integers_and_overflow():
    for bad in (b"x", b"", b" 1", b"+1", b"01", b"-0", b"9223372036854775808"):
        with pytest.raises(ValueError):
            pncounter.incr(lww.new(S, 1, 1, bad), 1, 2, 1, 0)
    top = lww.new(S, 1, 1, b"9223372036854775807")
    with pytest.raises(OverflowError):
        pncounter.incr(top, 1, 2, 1, 0)
    assert pncounter.value(pncounter.incr(top, -1, 2, 1, 0), 0) == b"9223372036854775806"


@given(string_key_records(), st.integers(-5, 5), VERSIONS)
def test_incr_moves_the_state_up(cur, delta, v):
    try:
        out = pncounter.incr(cur, delta, env.hlc_of(cur) + v[0], v[1], 0)
    except ValueError:
        assert not pncounter.is_counter(cur)
        return
    assert merge(K, cur, out) == out
    assert merge(K, out, cur) == out


@given(counters())
def test_roundtrip(c):
    assert pncounter.from_bytes(pncounter.to_bytes(c)) == c


@given(counters(), st.sampled_from([1, 2, 3, 7]), st.integers(-(1 << 62), 1 << 62))
def test_bump_on_the_bytes_is_apply(c, node, delta):
    """INCR's byte-level fast path gives exactly the payload and value of the
    general path, and declines (None) exactly when the general path must rebase or
    add a slot."""
    rec = pncounter.record(c, 10, node)
    try:
        got = pncounter.bump(rec, node, delta)
    except OverflowError:
        assert not pncounter.INT64_MIN <= c.value() + delta <= pncounter.INT64_MAX
        return
    if node not in c.slots:
        assert got is None
        return
    pos, neg = c.slots[node]
    if (pos + delta if delta >= 0 else neg - delta) >= 1 << 63:
        assert got is None
        return
    want = c.apply(node, delta)
    assert got == (want.to_bytes(), want.value())


@given(counters(), counters(), VERSIONS, VERSIONS)
def test_byte_level_dominance_agrees_with_the_parsed_one(a, b, va, vb):
    ra, rb = pncounter.record(a, *va), pncounter.record(b, *vb)
    if pncounter._dominates_bytes(ra, rb):
        assert pncounter._dominates(a, b)
        assert a.merge(b) == a


@given(VERSIONS, st.integers(-3, 3), st.sampled_from([1, 2, 7]),
       st.one_of(st.integers(-(1 << 63), (1 << 63) - 1), st.integers(-5, 5)))
def test_fresh_on_the_bytes_is_new_then_apply(base, base_value, node, delta):
    got = pncounter.fresh(base[0], base[1], base_value, node, delta)
    if delta == -(1 << 63):
        assert got is None  # -delta does not fit a slot: the general path rebases
        return
    assert got == pncounter.PNCounter.new(base[0], base[1], base_value).apply(node, delta).to_bytes()


@given(counters(), st.lists(st.tuples(st.integers(0, 2), st.integers(-3, 3)), max_size=4),
       st.lists(st.tuples(st.integers(0, 2), st.integers(-3, 3)), max_size=4),
       VERSIONS, VERSIONS, st.sampled_from([0, 0, 5]), st.sampled_from([0, 5, 9]))
def test_steady_state_merge_is_the_parsed_join(c, ops_a, ops_b, va, vb, ttl_a, ttl_b):
    """Two counters on one base with the same nodes (what the merge's first branch
    takes): the result is the envelope with the higher (version, envelope bytes) over
    the parsed join of the slots, either way round."""
    nodes = sorted(c.slots)
    a, b = c, c
    for ops, side in ((ops_a, "a"), (ops_b, "b")):
        for i, delta in ops:
            if nodes:
                cur = a if side == "a" else b
                nxt = cur.apply(nodes[i % len(nodes)], delta)
                a, b = (nxt, b) if side == "a" else (a, nxt)
    ra = pncounter.record(a, max(va[0], c.base_hlc), va[1], ttl_a)
    rb = pncounter.record(b, max(vb[0], c.base_hlc), vb[1], ttl_b)
    top = ra if (ra[1:11], ra[:19]) >= (rb[1:11], rb[:19]) else rb
    want = top[:19] + a.merge(b).to_bytes()
    assert pncounter.merge(ra, rb) == want == pncounter.merge(rb, ra)
