"""The merge laws, generic over every lattice, on the bytes ``core.merge.merge`` sees.

For each lattice (LWW strings incl. tombstones and TTLs, strings mixed with PN
counters, collection heads, ORSWOT elements of sets / hashes / zsets, the zset score
index, list elements, HLL registers, stream entries):

- commutative: ``merge(a, b) == merge(b, a)`` byte for byte;
- associative: ``merge(merge(a, b), c) == merge(a, merge(b, c))``;
- idempotent: ``merge(a, a) is a``;
- upper bound: with ``x <= y`` defined as ``merge(x, y) == y``, both inputs are below
  their join;
- identity: the result *is* an argument whenever that argument already is the join
  (the apply path writes nothing when ``result is current``).
"""

from __future__ import annotations

import functools

import pytest
from hypothesis import given
from hypothesis import strategies as st
from laws_gen import LATTICES

from marekvs.core.merge import merge

NAMES = sorted(LATTICES)


def _draw(data, name, n):
    ikey, strat = LATTICES[name]
    return ikey, [data.draw(strat, label=f"r{i}") for i in range(n)]


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_commutative(name, data):
    ikey, (a, b) = _draw(data, name, 2)
    assert merge(ikey, a, b) == merge(ikey, b, a)


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_associative(name, data):
    ikey, (a, b, c) = _draw(data, name, 3)
    assert merge(ikey, merge(ikey, a, b), c) == merge(ikey, a, merge(ikey, b, c))


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_idempotent(name, data):
    ikey, (a,) = _draw(data, name, 1)
    assert merge(ikey, a, a) is a
    assert merge(ikey, a, bytes(a)) == a


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_join_is_an_upper_bound(name, data):
    ikey, (a, b) = _draw(data, name, 2)
    ab = merge(ikey, a, b)
    assert merge(ikey, a, ab) == ab
    assert merge(ikey, b, ab) == ab
    assert merge(ikey, ab, ab) is ab


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_returns_the_argument_that_already_is_the_join(name, data):
    ikey, (a, b) = _draw(data, name, 2)
    m = merge(ikey, a, b)
    if m == a:
        assert m is a
    elif m == b:
        assert m is b
    assert merge(ikey, None, b) is b


@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_any_delivery_order_converges(name, data):
    ikey, recs = _draw(data, name, 5)
    order = data.draw(st.permutations(recs), label="order")
    dup = data.draw(st.lists(st.sampled_from(recs), max_size=3), label="duplicates")
    fold = functools.partial(functools.reduce, lambda x, y: merge(ikey, x, y))
    assert fold(list(order) + dup) == fold(recs)
