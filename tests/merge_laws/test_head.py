"""Collection heads: DEL vs re-creation, gating, last stream id."""

from __future__ import annotations

from hypothesis import given
from laws_gen import VERSIONS, head_records, heads

from marekvs.core import envelope as env
from marekvs.core import head, lww, orswot
from marekvs.core.envelope import RecordType
from marekvs.core.head import CollectionType as CT

T = 1_000_000  # ms


def st_(ms, logical=0):
    return ms << 16 | logical


def test_del_and_concurrent_recreation_converge_in_any_order():
    h = head.new(CT.HASH, st_(T), 1)
    old_field = orswot.add(None, RecordType.HASH_FIELD, st_(T), 1, b"old")
    dead = head.tombstone(h, st_(T + 10), 2)                   # DEL on node 2
    recreated = head.new(CT.SET, st_(T + 20), 3, prior=dead, now_ms=T + 20)
    lagging = head.with_last_id(h, 0, 0, st_(T + 5), 1)        # an older head write
    results = {head.merge(head.merge(a, b), c) for a, b, c in
               ((h, dead, recreated), (recreated, lagging, dead), (dead, recreated, h))}
    assert len(results) == 1
    m = results.pop()
    assert head.type_name(m) == "set" and head.is_live(m, T + 30)
    assert head.delete_clock(m, T + 30) == st_(T + 10)
    assert not head.element_live(m, old_field, T + 30)


def test_concurrent_recreation_without_seeing_the_del_still_gates_old_elements():
    h = head.new(CT.SET, st_(T), 1)
    old = orswot.new(RecordType.SET_MEMBER, st_(T), 1)
    dead = head.tombstone(h, st_(T + 10), 2)
    write = head.with_last_id(h, 0, 0, st_(T + 20), 1)       # a head write unaware of DEL
    m = head.merge(write, dead)
    assert head.is_live(m, T + 30)
    assert not head.element_live(m, old, T + 30)
    newer = orswot.new(RecordType.SET_MEMBER, st_(T + 20), 1)
    assert head.element_live(m, newer, T + 30)


def test_element_live_follows_delete_clock_and_head_expiry():
    h = env.with_ttl(head.new(CT.LIST, st_(T), 1), st_(T + 1), 1, T + 100)
    elem = lww.new(RecordType.LIST, st_(T + 50), 1, b"v")
    assert head.element_live(h, elem, T + 99)
    assert not head.element_live(h, elem, T + 100)             # expired head gates
    after = lww.new(RecordType.LIST, st_(T + 150), 2, b"w")
    assert head.element_live(h, after, T + 160)                # written after expiry
    assert head.element_live(None, elem, T)
    assert not head.element_live(None, lww.tombstone(RecordType.LIST, st_(T), 1), T)


def test_recreation_after_expiry_keeps_the_expiry_gate():
    h = env.with_ttl(head.new(CT.HASH, st_(T), 1), st_(T + 1), 1, T + 100)
    old = orswot.new(RecordType.HASH_FIELD, st_(T + 50), 1, b"old")
    again = head.new(CT.HASH, st_(T + 200), 2, prior=h, now_ms=T + 200)
    assert env.ttl_of(again) == 0
    assert head.delete_clock(again, T + 200) == st_(T + 100)
    assert not head.element_live(again, old, T + 200)


def test_orswot_elements_are_gated_by_their_highest_live_dot():
    h = head.tombstone(head.new(CT.SET, st_(T), 1), st_(T + 10), 1)
    stale = orswot.new(RecordType.SET_MEMBER, st_(T + 5), 2)
    touched = env.with_ttl(stale, st_(T + 20), 2, T + 10_000)  # EXPIREMEMBER after the DEL
    assert not head.element_live(h, touched, T + 30)


def test_last_id_never_goes_backwards_not_even_across_del_and_type_change():
    s = head.with_last_id(head.new(CT.STREAM, st_(T), 1), T, 9, st_(T + 1), 1)
    dead = head.tombstone(s, st_(T + 2), 1)
    as_hash = head.new(CT.HASH, st_(T + 3), 1, prior=dead, now_ms=T + 3)
    h = head.head_of(head.merge(s, as_hash))
    assert (h.last_ms, h.last_seq, h.ctype) == (T, 9, CT.HASH)


@given(head_records(), VERSIONS)
def test_local_ops_move_the_state_up(cur, v):
    hlc = env.hlc_of(cur) + v[0]
    for op in (head.tombstone(cur, hlc, v[1]),
               head.with_last_id(cur, 5, 5, hlc, v[1]),
               head.new(CT.ZSET, hlc, v[1], prior=cur, now_ms=10),
               env.with_ttl(cur, hlc, v[1], 40)):
        assert head.merge(cur, op) == op


@given(heads())
def test_roundtrip(h):
    assert head.from_bytes(head.to_bytes(h)) == h


def test_type_names():
    names = {head.type_name(head.new(ct, 1, 1)) for ct in head.TYPE_NAMES}
    assert names == {"hash", "set", "zset", "list", "stream", "string"}
