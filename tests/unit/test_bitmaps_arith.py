"""The bit arithmetic of keyspace/bitmaps.py against a naive bit-by-bit reading of the
value (bit 0 = the most significant bit of the first byte, zero padded on the right):
counts, searches and BITFIELD's fields over random values and ranges. Redis's replies
for the same are the differential test's (tests/integration/test_differential_hll_bitmaps.py).
"""

from __future__ import annotations

import random

import pytest

from marekvs.keyspace import bitmaps as kbit


def bit(value: bytes, i: int) -> int:
    return (value[i >> 3] >> (7 - (i & 7))) & 1 if i >> 3 < len(value) else 0


def values(seed: int, n: int = 3000):
    r = random.Random(seed)
    for _ in range(n):
        v = bytes(r.choice((0, 255, r.randrange(256))) for _ in range(r.randrange(1, 7)))
        yield r, v


def test_count_bits_counts_exactly_the_range():
    for r, v in values(1):
        first, last = r.randrange(len(v) * 8), r.randrange(len(v) * 8)
        want = sum(bit(v, i) for i in range(first, last + 1))
        assert kbit.count_bits(v, first, last) == want, (v, first, last)


def test_find_bit_finds_the_first_equal_bit_of_the_range():
    for r, v in values(2):
        first, last, b = r.randrange(len(v) * 8), r.randrange(len(v) * 8), r.randrange(2)
        want = next((i for i in range(first, last + 1) if bit(v, i) == b), -1)
        assert kbit.find_bit(v, b, first, last) == want, (v, b, first, last)


@pytest.mark.parametrize("signed", [False, True])
def test_get_field_reads_and_set_field_writes_only_the_field(signed):
    for r, v in values(3 if signed else 4):
        bits = r.randrange(1, 65 if signed else 64)
        offset = r.randrange(len(v) * 8 + 16)
        raw = sum(bit(v, offset + k) << (bits - 1 - k) for k in range(bits))
        want = raw - (1 << bits) if signed and raw >> (bits - 1) else raw
        assert kbit.get_field(v, offset, bits, signed) == want
        buf = bytearray(v) + bytes((offset + bits + 7) // 8)
        new = r.randrange(1 << bits)
        kbit.set_field(buf, offset, bits, new)
        assert kbit.get_field(buf, offset, bits, False) == new
        outside = [i for i in range(len(buf) * 8) if not offset <= i < offset + bits]
        assert all(bit(buf, i) == bit(v, i) for i in outside)
