"""HyperLogLog registers: frozen element mapping, strict no-op duplicates, estimator."""

from __future__ import annotations

import xxhash
from hypothesis import given
from hypothesis import strategies as st

from marekvs.core import hll

ELEMENTS = st.lists(st.binary(max_size=8), max_size=30)


@given(st.binary(max_size=64))
def test_element_mapping_is_low_14_bits_and_redis_pattern_length(e):
    h = xxhash.xxh3_64_intdigest(e)
    bucket, rank = hll.observe(e)
    assert bucket == h & 0x3FFF
    rest, expected = h >> 14, 1
    while expected <= 50 and not rest & 1:
        rest >>= 1
        expected += 1
    assert rank == expected and 1 <= rank <= hll.MAX_RANK == 51


def test_duplicate_pfadd_is_a_strict_noop():
    first = hll.new(7, 100, 1)
    dup_elsewhere = hll.new(7, 200, 2)
    assert hll.merge(first, dup_elsewhere) is first
    assert hll.merge(dup_elsewhere, first) is first


def test_higher_rank_wins_with_its_own_envelope():
    low = hll.new(3, 500, 1)
    high = hll.new(9, 100, 2)
    assert hll.merge(low, high) is high and hll.merge(high, low) is high


@given(ELEMENTS, ELEMENTS)
def test_pfadd_in_two_steps_equals_pfadd_of_the_union(xs, ys):
    regs = hll.pfadd({}, xs)
    regs.update(hll.pfadd(regs, ys))
    assert regs == hll.pfadd({}, xs + ys)
    assert hll.pfadd(regs, xs + ys) == {}  # nothing rises: PFADD replies 0


@given(ELEMENTS, ELEMENTS, ELEMENTS)
def test_pfmerge_is_the_pointwise_max(xs, ys, zs):
    dest = hll.pfadd({}, xs)
    merged = {**dest, **hll.pfmerge(dest, hll.pfadd({}, ys), hll.pfadd({}, zs))}
    assert merged == hll.pfadd({}, xs + ys + zs)


def test_pfadd_of_a_register_moves_the_state_up():
    cur = hll.new(4, 100, 1)
    for rank in (5, 51):
        up = hll.new(rank, 200, 2)
        assert hll.merge(cur, up) is up


def test_count_matches_cardinality_within_redis_error():
    assert hll.count({}) == 0
    for n in (1, 10, 100, 1_000, 20_000):
        est = hll.count(hll.pfadd({}, (b"element:%d" % i for i in range(n))))
        assert abs(est - n) <= max(1, 0.02 * n), (n, est)


def test_roundtrip():
    for rank in range(hll.MAX_RANK + 1):
        assert hll.from_bytes(hll.to_bytes(rank)) == (rank, 0)
        assert hll.from_bytes(hll.to_bytes(rank, 77)) == (rank, 77)
        assert hll.value(hll.new(rank, 1, 1)) == rank
