"""The stream records beside the entries, beyond the generic laws (test_laws.py runs those on
them through laws_gen.LATTICES): what each lattice means.

- pending entries: an acknowledgement is sticky against every claim or delivery of its
  epoch and incarnation, whatever their versions; only a new incarnation (a claim made
  after the ack was seen) or a new epoch (a delivery after SETID) beats it; within one,
  the owner is last-writer-wins;
- groups: the position is the greatest of the base and the per-origin slots, deliveries
  on several origins all count, a SETID or DESTROY (a new version) resets them, the
  destroy clock never goes back and survives a re-CREATE;
- consumers: the stored element is the image of plain set union (adds, covered) under the
  4/4 caps, so a remove never resurrects an add it saw and an add it did not see survives;
- counters: a reader sums the records of the current head delete clock and XSETID epoch.
"""

from __future__ import annotations

import functools
import struct

from hypothesis import assume, given
from hypothesis import strategies as st
from streams_gen import (POSITIONS, abstract_consumers, consumer_element, consumer_record, counters, groups,
                         pending_records)

from marekvs.core import envelope as env
from marekvs.core import head, orswot, stream
from marekvs.core import streamgroup as G

E1, E2 = (10, 1), (20, 2)  # two group versions (epochs)


# -- pending entries -----------------------------------------------------------------------

def _delivered(epoch=E1, hlc=30, origin=1, consumer=b"c1", now=100):
    return G.deliver_pending(None, epoch, hlc, origin, consumer, now)


def test_an_ack_beats_a_concurrent_claim_whatever_its_version():
    d = _delivered()
    acked = G.ack_pending(d, 31, 1)
    late_claim = G.claim_pending(d, 99, 2, b"c2", 200, 2)  # made on a node that had not seen the ack
    assert G.pending_of(late_claim).incarnation == G.pending_of(acked).incarnation == 1
    for merged in (G.merge_pending(acked, late_claim), G.merge_pending(late_claim, acked)):
        assert merged is acked and not G.pending_live(merged, 0)


def test_an_ack_beats_a_concurrent_duplicate_delivery():
    a = _delivered(hlc=30, origin=1, consumer=b"c1")
    b = _delivered(hlc=31, origin=2, consumer=b"c2")  # the same entry delivered on another node
    both = G.merge_pending(a, b)
    assert G.pending_live(both, 0) and G.pending_of(both).consumer == b"c2"
    assert G.pending_of(both).deliveries == 2  # the duplicate shows in the delivery count
    acked = G.ack_pending(a, 32, 1)
    assert G.merge_pending(acked, b) is acked and G.merge_pending(both, acked) is acked


def test_a_claim_after_the_ack_was_seen_is_a_new_incarnation_and_wins():
    acked = G.ack_pending(_delivered(), 31, 1)
    forced = G.claim_pending(acked, 32, 2, b"c3", 300, 1)  # XCLAIM FORCE on a node that saw the ack
    assert G.pending_of(forced).incarnation == 2 and G.pending_live(forced, 0)
    assert G.merge_pending(acked, forced) is forced


def test_a_delivery_in_a_newer_epoch_beats_an_older_ack():
    acked = G.ack_pending(_delivered(E1), 31, 1)
    redelivered = G.deliver_pending(acked, E2, 40, 1, b"c1", 400)  # after XGROUP SETID
    assert G.pending_of(redelivered).epoch == E2 and G.pending_of(redelivered).incarnation == 1
    stale_ack = G.ack_pending(_delivered(E1, hlc=50), 51, 3)
    assert G.merge_pending(stale_ack, redelivered) is redelivered


def test_concurrent_claims_of_one_incarnation_pick_the_owner_by_version_and_count_both():
    d = _delivered()
    c2 = G.claim_pending(d, 40, 2, b"c2", 400)
    c3 = G.claim_pending(d, 41, 3, b"c3", 410)
    m = G.pending_of(G.merge_pending(c2, c3))
    assert (m.consumer, m.delivery_ms, m.deliveries) == (b"c3", 410, 3)
    assert G.merge_pending(c3, c2) == G.merge_pending(c2, c3)


def test_pending_entries_die_with_their_groups_destroy_clock():
    d = _delivered(E1)
    assert G.pending_live(d, 0) and G.pending_live(d, E1[0] - 1)
    assert not G.pending_live(d, E1[0])  # a DESTROY at or after the epoch's CREATE


def test_delivery_counts_follow_redis_on_one_node():
    d = _delivered()  # XREADGROUP >: 1
    assert G.pending_of(d).deliveries == 1
    d = G.claim_pending(d, 31, 1, b"c1", 110)  # a re-read of the own PEL: 2
    d = G.claim_pending(d, 32, 2, b"c2", 120)  # XCLAIM on another node: 3
    d = G.claim_pending(d, 33, 2, b"c2", 130, add=0)  # XCLAIM JUSTID: 3
    assert G.pending_of(d).deliveries == 3
    d = G.claim_pending(d, 34, 3, b"c3", 140, retrycount=7)  # RETRYCOUNT: a new base
    assert G.pending_of(d).deliveries == 7 and G.pending_of(d).consumer == b"c3"
    again = G.deliver_pending(d, E1, 35, 1, b"c1", 150)  # re-delivered with >: reset to 1
    assert G.pending_of(again).deliveries == 1
    forced = G.force_pending(E1, 36, 1, b"c1", 160)  # XCLAIM FORCE: created once, claimed once
    assert G.pending_of(forced).deliveries == 2


@given(a=pending_records(), b=pending_records())
def test_epoch_incarnation_and_acks_decide_before_anything_else(a, b):
    def key(r):
        p = G.pending_of(r)
        return (p.epoch, p.incarnation, env.is_tombstone(r))
    m = G.merge_pending(a, b)
    assert key(m) == max(key(a), key(b))
    if key(a) != key(b):
        assert m == max(a, b, key=key)


# -- groups --------------------------------------------------------------------------------

def test_deliveries_on_two_nodes_both_count_and_keep_the_header():
    g = G.new_group(10, 1, G.Position(0, 0, 1))
    on1 = G.deliver(g, 1, G.Position(5, 0, 6))
    on2 = G.deliver(g, 2, G.Position(7, 0, 8))
    assert on1[:env.HEADER] == on2[:env.HEADER] == g[:env.HEADER]
    merged = G.merge_group(on1, on2)
    assert G.group_of(merged).position() == G.Position(7, 0, 8)
    assert dict(G.group_of(merged).slots) == {1: G.Position(5, 0, 6), 2: G.Position(7, 0, 8)}
    assert G.deliver(merged, 1, G.Position(4, 0, 0)) is merged  # a slot never goes back


def test_setid_resets_the_position_wholesale_and_destroy_keeps_its_clock():
    g = G.deliver(G.new_group(10, 1, G.ZERO), 2, G.Position(9, 9, 0))
    back = G.set_position(g, 20, 1, G.Position(1, 0, 0))
    assert G.group_of(back).position() == G.Position(1, 0, 0) and not G.group_of(back).slots
    assert G.merge_group(back, G.deliver(g, 3, G.Position(12, 0, 0))) == back  # older base: dropped
    gone = G.destroy(back, 30, 2)
    assert not G.group_of(gone).live and G.group_of(gone).destroy_clock == 30
    again = G.new_group(40, 1, G.ZERO, prior=gone)
    assert G.group_of(again).live and G.group_of(again).destroy_clock == 30
    assert G.merge_group(gone, again) == again == G.merge_group(again, gone)


def test_a_recreated_group_keeps_a_dead_streams_clock():
    again = G.new_group(40, 1, G.ZERO, prior=G.new_group(10, 1, G.ZERO), dead_clock=25)
    assert G.group_of(again).destroy_clock == 25  # the old group's pending entries stay dead


@given(base=POSITIONS, slots=st.dictionaries(st.integers(1, 3), POSITIONS, max_size=3))
def test_the_position_is_the_greatest_of_base_and_slots(base, slots):
    g = G.Group(G.LIVE, 0, base, tuple(sorted(slots.items())))
    assert g.position() == max([base, *slots.values()])
    rec = env.pack(G.FLAGS, 5, 1, 0, G.group_to_bytes(g))
    for origin, pos in slots.items():
        assert G.group_of(G.deliver(rec, origin, pos)) == g


# -- consumers -----------------------------------------------------------------------------

@given(x=abstract_consumers(), y=abstract_consumers())
def test_the_consumer_join_is_the_image_of_set_union(x, y):
    (a1, c1), (a2, c2) = x, y
    got = orswot.join(consumer_element(a1, c1), consumer_element(a2, c2), *G.CONSUMER_CAPS)
    assert got == consumer_element(a1 | a2, c1 | c2)


def test_a_consumer_removed_after_being_seen_stays_removed_but_concurrent_activity_survives():
    c = G.touch_consumer(None, 10, 1, 1000)
    removed = G.remove_consumer(c, 11, 1)
    assert G.consumer_seen(removed, 0) is None
    assert G.merge_consumer(removed, c) == removed  # the late copy of the add it saw
    elsewhere = G.touch_consumer(c, 12, 2, 2000)  # seen on another node, concurrently
    merged = G.merge_consumer(removed, elsewhere)
    assert G.consumer_seen(merged, 0) == 2000
    assert G.consumer_seen(merged, 12) is None  # a DESTROY after it gates it


def test_a_consumer_touched_many_times_stays_small():
    c = None
    for i in range(50):
        c = G.touch_consumer(c, 10 + i, 1 + i % 3, 1000 + i)
    e = G.element_of_consumer(c)
    assert len(e.live) == 1 and len(e.covered) <= 4 and G.consumer_seen(c, 0) == 1049
    G.check_consumer(c)


def test_consumer_record_helpers_round_trip():
    adds, covered = {(3, 1), (5, 2)}, {(3, 1)}
    rec = consumer_record(consumer_element(adds, covered), 5, 2)
    G.check_consumer(rec)
    assert G.consumer_seen(rec, 0) == 52


# -- counters ------------------------------------------------------------------------------

def test_counters_sum_the_current_gen_and_epoch():
    # (the caller passes the live records only: a record written before the DEL at 5 is not)
    recs = [stream.Counters(5, stream.NO_EPOCH, 3, (9, 1), (2, 0)),
            stream.Counters(5, stream.NO_EPOCH, 4, (8, 1), (4, 0)),
            stream.Counters(9, stream.NO_EPOCH, 7, (1, 0), (0, 0))]  # after a DEL not yet seen
    assert stream.totals(recs, 5) == stream.Totals(stream.NO_EPOCH, 7, (9, 1), (4, 0))
    # a node that added entries concurrently with the DEL at 5 (its record, of the older
    # generation, is live): they outlive the DEL, so the last id stays above them
    survivor = stream.Counters(0, stream.NO_EPOCH, 100, (99, 0), (50, 0))
    assert stream.totals(recs + [survivor], 5) == stream.Totals(stream.NO_EPOCH, 7, (99, 0), (4, 0))
    xsetid = stream.Counters(5, (30, 2), 20, (5, 0), (1, 0))
    assert stream.totals(recs + [xsetid], 5) == stream.Totals((30, 2), 20, (5, 0), (1, 0))
    mine = stream.bump(recs[0], 5, (30, 2), added=1, last=(6, 0))
    assert mine == stream.Counters(5, (30, 2), 1, (6, 0), (0, 0))  # restarts under the new epoch
    assert stream.totals(recs + [xsetid, mine], 5) == stream.Totals((30, 2), 21, (6, 0), (1, 0))


@given(cs=st.lists(counters(), min_size=1, max_size=4), gen=st.sampled_from([0, 5, 9]))
def test_merging_one_origins_records_never_lowers_what_a_reader_sums(cs, gen):
    recs = [stream.counters_record(c, 10 + i, 1) for i, c in enumerate(cs)]
    merged = stream.counters_of(functools.reduce(stream.merge_counters, recs))
    best = max(cs, key=lambda c: (c.gen, c.epoch))
    assert (merged.gen, merged.epoch) == (best.gen, best.epoch)
    same = [c for c in cs if (c.gen, c.epoch) == (best.gen, best.epoch)]
    assert merged.added == max(c.added for c in same) and merged.last == max(c.last for c in same)


# -- the builders' records are the joins the merges compute (core/joins.py memo) -------------

def _merged_fresh(merge, a, b):
    """``merge(a, b)`` computed from the records, not answered by a memo."""
    for known in (G.KNOWN, stream.KNOWN, head.KNOWN):
        known.clear()
    return merge(a, b)


@given(x=abstract_consumers(), hlc=st.integers(1, 40), origin=st.integers(1, 3), seen=st.integers(0, 99))
def test_touching_a_consumer_builds_the_join_with_the_add(x, hlc, origin, seen):
    """Also from a writer whose clock is behind the record (hlc at or below 12, or below
    its dots): a node that applied a peer's record without taking its clock, or whose HLC
    clamped a drifting peer. The direct build kept its own version on top there, so the
    memo answered a join that the other replicas did not compute (replicas diverged)."""
    current = consumer_record(consumer_element(*x), 12, 1)
    out, was_live = G.touch_consumer_seen(current, hlc, origin, seen)
    add = G._consumer_record(env.pack(G.FLAGS, hlc, origin, 0), orswot.Element(
        (((hlc, origin), struct.pack(">Q", seen)),), tuple(d for d, _ in G.element_of_consumer(current).live)))
    assert out == _merged_fresh(G.merge_consumer, current, add)
    assert _merged_fresh(G.merge_consumer, current, out) == out
    assert G.merge_consumer(current, out) == out  # answered by the memo
    assert was_live == (G.consumer_seen(current, 0) is not None)


@given(g=groups(), slots=st.dictionaries(st.integers(1, 3), POSITIONS, max_size=3))
def test_delivering_builds_the_join(g, slots):
    assume(g.live)  # deliveries are made in live groups only
    current = env.pack(G.FLAGS, 5, 1, 0, G.group_to_bytes(g))
    out = G.deliver_slots(current, slots)
    assert _merged_fresh(G.merge_group, current, out) == out


@given(rec=pending_records(), hlc=st.integers(31, 60), origin=st.integers(1, 3), add=st.integers(0, 1))
def test_pending_ops_build_joins(rec, hlc, origin, add):
    outs = [G.claim_pending(rec, hlc, origin, b"z", 500, add), G.ack_pending(rec, hlc, origin),
            G.deliver_pending(rec, (9, 1), hlc, origin, b"z", 500)]
    for out in outs:
        assert _merged_fresh(G.merge_pending, rec, out) == out


@given(own=counters(), hlc=st.integers(31, 60), added=st.integers(0, 3))
def test_bumping_counters_builds_the_join(own, hlc, added):
    current = stream.counters_record(own, 30, 2)
    c = stream.bump(own, own.gen, own.epoch, added, (9, 9))
    out = stream.bumped(current, own, c, hlc, 2)
    assert _merged_fresh(stream.merge_counters, current, out) == out


@given(last=st.tuples(st.integers(0, 5), st.integers(0, 5)), new=st.tuples(st.integers(0, 9), st.integers(0, 9)),
       hlc=st.integers(1, 40))
def test_raising_a_stream_heads_last_id_builds_the_join(last, new, hlc):
    current = env.pack(env.make_flags(head.CollectionType.STREAM, head=True), 20, 1, 0,
                       head.to_bytes(head.Head(head.CollectionType.STREAM, 7, *last)))
    out = head.with_last_id(current, *new, hlc, 2)
    assert _merged_fresh(head.merge, current, out) == out
    assert head.last_id_of(out) == max(last, new)
