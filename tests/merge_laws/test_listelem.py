"""List elements: positions around LIST_CENTER, LWW per position, rebuilds."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from marekvs.core import listelem
from marekvs.core.keys import LIST_CENTER


def test_first_push_lands_at_the_center_and_ends_grow_outwards():
    assert listelem.lpush_pos(None) == listelem.rpush_pos(None) == LIST_CENTER
    assert listelem.lpush_pos(LIST_CENTER) == LIST_CENTER - 1
    assert listelem.rpush_pos(LIST_CENTER + 4) == LIST_CENTER + 5
    with pytest.raises(OverflowError):
        listelem.lpush_pos(0)
    with pytest.raises(OverflowError):
        listelem.rpush_pos(listelem.POS_MAX)


def test_colliding_concurrent_pushes_lose_one_element_deterministically():
    a = listelem.new(b"from-1", 10, 1)
    b = listelem.new(b"from-2", 10, 2)
    assert listelem.merge(a, b) is b and listelem.merge(b, a) is b


def test_pop_is_a_tombstone_that_moves_the_state_up():
    a = listelem.new(b"x", 10, 1)
    t = listelem.tombstone(11, 1)
    assert listelem.merge(a, t) is t and listelem.value(t, 0) is None


@given(st.lists(st.binary(max_size=2), max_size=8), st.lists(st.binary(max_size=2), max_size=8),
       st.integers(-5, 5))
def test_rebuild_lays_out_values_from_the_center(old_values, new_values, shift):
    old = [(LIST_CENTER + shift + i, v) for i, v in enumerate(old_values)]
    writes, deletes = listelem.rebuild(old, new_values)
    state = dict(old)
    for p in deletes:
        del state[p]
    state.update(writes)
    assert [state[p] for p in sorted(state)] == new_values
    assert sorted(state) == list(listelem.compact_positions(len(new_values)))
    assert all(dict(old).get(p) != v for p, v in writes)


def test_roundtrip():
    assert listelem.from_bytes(listelem.to_bytes(b"raw")) == b"raw"
