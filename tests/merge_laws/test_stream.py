"""Stream ids and entries."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st
from laws_gen import FIELDS

from marekvs.core import envelope as env
from marekvs.core import stream

MS = 1_700_000_000_000
IDS = st.tuples(st.integers(MS - 3, MS + 3), st.integers(0, (8 << 20) - 1))


@given(IDS, st.integers(MS - 3, MS + 3), st.integers(0, 7))
def test_next_id_is_strictly_greater_and_carries_the_origin(last, ms, origin):
    sid = stream.next_id(last, ms << 16, origin)
    assert sid > last
    assert stream.split_seq(sid[1])[0] == origin
    assert sid[0] >= ms


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2)), min_size=1, max_size=60))
def test_ids_from_many_origins_are_unique_and_increasing(steps):
    """Nodes minting into one stream whose last id they share (after merges)."""
    last, ms, seen = (0, 0), MS, set()
    for origin, tick in steps:
        ms += tick
        sid = stream.next_id(last, ms << 16, origin)
        assert sid > last and sid not in seen
        seen.add(sid)
        last = sid


def test_counter_resets_per_ms_and_overflow_borrows_the_next_ms():
    o = 5
    assert stream.next_id((MS - 1, 0), MS << 16, o) == (MS, o << 20)
    assert stream.next_id((MS, o << 20 | 41), MS << 16, o) == (MS, o << 20 | 42)
    full = (MS, o << 20 | stream.COUNTER_MAX)
    assert stream.next_id(full, MS << 16, o) == (MS + 1, o << 20)
    higher_origin = (MS, 9 << 20)
    assert stream.next_id(higher_origin, MS << 16, o) == (MS + 1, o << 20)
    assert stream.next_id((MS + 7, 3), MS << 16, o) == (MS + 7, o << 20)  # clock behind


def test_make_seq_and_id_text():
    assert stream.make_seq(3, 17) == (3 << 20) | 17
    with pytest.raises(ValueError):
        stream.make_seq(3, 1 << 20)
    assert stream.format_id((MS, 5)) == b"%d-5" % MS
    assert stream.parse_id(b"12-3") == (12, 3) and stream.parse_id(b"12") == (12, 0)
    for bad in (b"", b"-1", b"1-", b"a-1", b"1-2-3", b"18446744073709551616-0"):
        with pytest.raises(ValueError):
            stream.parse_id(bad)


def test_xdel_is_an_lww_tombstone_over_the_immutable_entry():
    e = stream.new([(b"f", b"v")], 10, 1)
    assert stream.merge(e, bytes(e)) is e  # equal id, equal version: same entry
    d = stream.tombstone(20, 2)
    assert stream.merge(e, d) is d and stream.value(d, 0) is None
    assert stream.value(e, 0) == [(b"f", b"v")]


@given(FIELDS)
def test_roundtrip(fields):
    b = stream.to_bytes(fields)
    assert b[0] == stream.FMT and stream.from_bytes(b) == fields
    assert env.payload_of(stream.new(fields, 1, 1)) == b
    with pytest.raises(stream.StreamFormatError):
        stream.from_bytes(b + b"\x00")
