"""The pure DUMP/RESTORE codec (core/rdb.py, crc64.py, lzf.py, strtod.py): golden payloads
redis-server 7.0.15 produced, round trips of every value type under random limits, and
every malformed payload refused with the right error. (tests/integration/
test_dump_restore.py exchanges payloads with a live redis-server both ways.)"""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marekvs.core import lzf, rdb
from marekvs.core.crc64 import crc64
from marekvs.core.strtod import strtod

# DUMP replies of redis-server 7.0.15 (rdbcompression yes, default *-max-* parameters)
GOLDEN = {
    "list quicklist_2": (
        rdb.List([b"a", b"b", b"1", b"2", b"300", b"-5", b"70000", b"x"]),
        b"\x12\x01\x02\x1f\x1f\x00\x00\x00\x08\x00\x81a\x02\x81b\x02\x01\x01\x02\x01\xc1,\x02\xdf\xfb\x02"
        b"\xf2p\x11\x01\x04\x81x\x02\xff\n\x00\x98v\x9eRS\xce\xe4\x8f"),
    "hash listpack": (
        rdb.Hash([(b"f", b"v"), (b"n", b"12")]),
        b"\x10\x12\x12\x00\x00\x00\x04\x00\x81f\x02\x81v\x02\x81n\x02\x0c\x01\xff\n\x00\x016\x94\x81\xd3[\x89t"),
    "set intset": (
        rdb.Set([b"-70000", b"1", b"2", b"3"]),
        b"\x0b\x18\x04\x00\x00\x00\x04\x00\x00\x00\x90\xee\xfe\xff\x01\x00\x00\x00\x02\x00\x00\x00\x03\x00\x00"
        b"\x00\n\x00\xa8\xb6<b,\xbf,\x9c"),
    "zset listpack": (
        rdb.Zset([(b"c", -3.0), (b"a", 1.0), (b"b", 2.5)]),
        b"\x11\x1a\x1a\x00\x00\x00\x06\x00\x81c\x02\xdf\xfd\x02\x81a\x02\x01\x01\x81b\x02\x832.5\x04\xff\n\x00"
        b"\xa6\x8a\x1a\xb1\xa9\xf2\xdc\xc2"),
    "string int16": (rdb.String(b"12345"), b"\x00\xc190\n\x00\x9d\x94\xea'\x93\xfc\x08\xb9"),
}
# a stream (redis-server 7.0.15 with rdbcompression no: XADD 1-1 f v, 1-2 f w, 2-0 a 1 b 2;
# XGROUP CREATE k g 1-1 ENTRIESREAD 1): one node, the second entry SAMEFIELDS, the third not
STREAM_GOLDEN = (
    rdb.Stream([((1, 1), [b"f", b"v"]), ((1, 2), [b"f", b"w"]), ((2, 0), [b"a", b"1", b"b", b"2"])],
               (2, 0), (1, 1), (0, 0), 3, [rdb.StreamGroup(b"g", (1, 1), 1, [], [])]),
    b"\x13\x01\x10\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00\x00\x00\x00\x00\x01==\x00\x00\x00\x18\x00\x03"
    b"\x01\x00\x01\x01\x01\x81f\x02\x00\x01\x02\x01\x00\x01\x00\x01\x81v\x02\x04\x01\x02\x01\x00\x01\x01\x01\x81w"
    b"\x02\x04\x01\x00\x01\x01\x01\xdf\xff\x02\x02\x01\x81a\x02\x01\x01\x81b\x02\x02\x01\x08\x01\xff\x03\x02\x00"
    b"\x01\x01\x00\x00\x03\x01\x01g\x01\x01\x01\x00\x00\n\x00\xa76\xe7\xb0\x9d\x0b\xd6B")
# LZF-compressed payloads (strings over 20 bytes): marekvs reads them, writes them plain
LZF_STRING = (b"\x00\xc3\x13@C\x03abca\xe0&\x02\x03-xyz\xe0\x01\x03\x01yz\n\x00\x06\x1eZ+\x17\x17\xa5\xf8",
              rdb.String(b"abc" * 17 + b"-xyz" * 4))
LZF_HASH = (b"\x10\xc3)7\x137\x00\x00\x00\x06\x00\x86field1\x07\x86value \x07`\x0f\x002\xa0\x0f \x07`\x0f\x003"
            b"\xa0\x0f\x023\x07\xff\n\x00\xdf%U$1\x11\xf7\x97",
            rdb.Hash([(b"field1", b"value1"), (b"field2", b"value2"), (b"field3", b"value3")]))


def canon(v: rdb.Value):
    """A value as a comparable whole (sets and hashes are unordered)."""
    if isinstance(v, rdb.Set):
        return ("set", sorted(v.members))
    if isinstance(v, rdb.Hash):
        return ("hash", sorted(v.pairs))
    if isinstance(v, rdb.Zset):
        return ("zset", sorted(v.entries))
    if isinstance(v, rdb.List):
        return ("list", list(v.items))
    if isinstance(v, rdb.Stream):
        return ("stream", [(i, list(f)) for i, f in v.entries], v.last_id, v.first_id, v.max_deleted,
                v.entries_added, [(g.name, g.last_id, g.entries_read, list(g.pending),
                                   [(c.name, c.seen_ms, list(c.pending)) for c in g.consumers]) for g in v.groups])
    return ("string", v.value)


# -- CRC-64 and LZF ----------------------------------------------------------------------------

def test_crc64_check_value_is_redis_s():
    assert crc64(0, b"123456789") == 0xE9C6D914C4B8D9CA  # crc64.c's self-test


@given(st.binary(max_size=300), st.binary(max_size=300))
def test_crc64_continues_a_running_checksum(a, b):
    assert crc64(crc64(0, a), b) == crc64(0, a + b)


@given(st.binary(max_size=100))
def test_crc64_sliced_equals_bytewise(data):
    from marekvs.core.crc64 import _T0
    crc = 0
    for x in data:
        crc = _T0[(crc ^ x) & 0xFF] ^ (crc >> 8)
    assert crc64(0, data) == crc


def test_lzf_golden_payloads_decompress():
    assert rdb.load(LZF_STRING[0]) == LZF_STRING[1]
    assert rdb.load(LZF_HASH[0]) == LZF_HASH[1]


@pytest.mark.parametrize("stream, n", [
    (b"\x05abc", 6),  # literal run past the end of the input
    (b"\x00a\x20", 3),  # back reference missing its offset byte
    (b"\x00a\x20\x05", 3),  # reference before the start of the output
    (b"\x02abc", 2),  # more output than announced
    (b"\x02abc", 4),  # less output than announced
    (b"\x00a\xe0", 20),  # long back reference missing its length byte
])
def test_lzf_malformed_streams_are_refused(stream, n):
    with pytest.raises(lzf.LzfError):
        lzf.decompress(stream, n)


def test_lzf_overlapping_back_reference_repeats():
    # 'ab' then copy 8 bytes from 2 back: a run of the pattern
    assert lzf.decompress(b"\x01ab\xc0\x01", 10) == b"ab" * 5


# -- strtod as glibc ------------------------------------------------------------------------------

@pytest.mark.parametrize("text, value, used, erange", [
    (b"1e-310", 1e-310, 6, True), (b"4.9406564584124654e-324", 5e-324, 23, True),
    (b"0x1p-1074", 5e-324, 9, False), (b"0x1p-1080", 0.0, 9, True), (b"1e-400", 0.0, 6, True),
    (b"1e400", math.inf, 5, True), (b" 12", 12.0, 3, False), (b"12 ", 12.0, 2, False), (b"0x", 0.0, 1, False),
    (b"0x1A", 26.0, 4, False), (b"1e", 1.0, 1, False), (b"1e+", 1.0, 1, False), (b"infinity", math.inf, 8, False),
    (b"infx", math.inf, 3, False), (b"-0", -0.0, 2, False), (b".5", 0.5, 2, False), (b".", 0.0, 0, False),
    (b"+.e1", 0.0, 0, False), (b"0x.p1", 0.0, 1, False), (b"2.2250738585072011e-308", 2.225073858507201e-308, 23, True),
    (b"", 0.0, 0, False), (b"1\x002", 1.0, 1, False), (b"0x1.8p1", 3.0, 7, False),
])
def test_strtod_reads_as_glibc(text, value, used, erange):  # (values printed by a C program)
    got = strtod(text)
    assert got[1:] == (used, erange) and got[0] == value and math.copysign(1, got[0]) == math.copysign(1, value)


def test_strtod_nan():
    v, used, erange = strtod(b"nan(abc)")
    assert v != v and used == 8 and not erange


# -- golden payloads --------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_dump_is_byte_for_byte_redis_s(name):
    value, payload = GOLDEN[name]
    assert rdb.dump(value) == payload


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_redis_payloads_load(name):
    value, payload = GOLDEN[name]
    assert canon(rdb.load(payload)) == canon(value)


def test_stream_golden_payload():
    value, payload = STREAM_GOLDEN
    assert rdb.dump(value) == payload
    assert canon(rdb.load(payload)) == canon(value)


def test_stream_nodes_split_as_xadd_fills_them():
    entries = [((i, 0), [b"f", b"x" * 5]) for i in range(1, 250)]
    nodes = rdb._stream_nodes(entries, rdb.DEFAULT_LIMITS)
    assert [m for m, _ in nodes] == [(1, 0), (101, 0), (201, 0)]  # 100 entries a node
    nodes = rdb._stream_nodes(entries, rdb.Limits(stream_node_max_bytes=1000, stream_node_max_entries=0))
    assert all(len(lp) < 1000 + 40 for _, lp in nodes) and len(nodes) == 4  # (the test counts raw bytes)
    # a seq below the master's is a negative diff; ids past 2^63 wrap as int64
    v = rdb.Stream([((5, 9), [b"a", b"1"]), ((6, 0), [b"a", b"2"]), ((U64, U64), [b"a", b"3"])], (U64, U64))
    assert canon(rdb.load(rdb.dump(v))) == canon(v)


# -- round trips --------------------------------------------------------------------------------------

elements = st.one_of(st.binary(max_size=80), st.integers(-(1 << 63), (1 << 63) - 1).map(lambda i: b"%d" % i),
                     st.sampled_from([b"0", b"-0", b"01", b"+1", b"127", b"128", b"-4096", b"4095", b"4096",
                                      b"32767", b"-32769", b"8388607", b"8388608", b"2147483648", b" 1"]))
scores = st.one_of(st.floats(allow_nan=False), st.integers(-(1 << 60), 1 << 60).map(float))
limits = st.builds(rdb.Limits, st.integers(0, 20), st.integers(0, 100), st.integers(0, 20), st.integers(0, 20),
                   st.integers(0, 100), st.integers(-7, 10), st.integers(0, 3000), st.integers(0, 12))
U64 = (1 << 64) - 1
ids = st.tuples(st.one_of(st.integers(0, 50), st.integers(0, U64)), st.one_of(st.integers(0, 5), st.integers(0, U64)))


@st.composite
def streams(draw):
    sids = sorted(draw(st.sets(ids, max_size=40)))
    entries = [(i, [x for _ in range(draw(st.integers(1, 3))) for x in (draw(st.sampled_from([b"f", b"g", b"1"])),
                                                                         draw(elements))]) for i in sids]
    last = max([draw(ids), *sids])
    groups = []
    for name in sorted(draw(st.sets(st.binary(max_size=5), max_size=3))):
        pel = sorted(draw(st.sets(ids, max_size=6)))
        names = sorted(draw(st.sets(st.binary(max_size=4), min_size=1 if pel else 0, max_size=3)))
        owner = {i: draw(st.sampled_from(names)) for i in pel}
        consumers = [rdb.StreamConsumer(n, draw(st.integers(0, 1 << 62)), [i for i in pel if owner[i] == n])
                     for n in names]
        groups.append(rdb.StreamGroup(name, draw(ids), draw(st.integers(-1, 1 << 62)),
                                      [(i, draw(st.integers(0, 1 << 62)), draw(st.integers(0, U64))) for i in pel],
                                      consumers))
    return rdb.Stream(entries, last, sids[0] if sids else (0, 0), draw(ids), draw(st.integers(0, U64)), groups)


@st.composite
def values(draw):
    kind = draw(st.sampled_from(["string", "list", "set", "zset", "hash", "stream"]))
    if kind == "stream":
        return draw(streams())
    if kind == "string":
        return rdb.String(draw(st.one_of(elements, st.binary(min_size=100, max_size=3000))))
    if kind == "list":
        return rdb.List(draw(st.lists(st.one_of(elements, st.binary(min_size=500, max_size=3000)), min_size=1,
                                      max_size=60)))
    if kind == "set":
        return rdb.Set(draw(st.lists(elements, min_size=1, max_size=40, unique=True)))
    if kind == "zset":
        ms = draw(st.lists(elements, min_size=1, max_size=40, unique=True))
        return rdb.Zset([(m, draw(scores) + 0.0) for m in ms])
    fs = draw(st.lists(elements, min_size=1, max_size=40, unique=True))
    return rdb.Hash([(f, draw(elements)) for f in fs])


@settings(max_examples=300, deadline=None)
@given(values(), limits)
def test_every_value_round_trips_under_any_limits(value, lim):
    assert canon(rdb.load(rdb.dump(value, lim))) == canon(value)


def test_encodings_follow_redis_thresholds():
    lim = rdb.Limits()
    assert rdb.dump(rdb.Set([b"%d" % i for i in range(512)]))[0] == rdb.TYPE_SET_INTSET
    assert rdb.dump(rdb.Set([b"%d" % i for i in range(513)]))[0] == rdb.TYPE_SET
    assert rdb.dump(rdb.Set([b"1", b"a"]))[0] == rdb.TYPE_SET
    assert rdb.dump(rdb.Hash([(b"%d" % i, b"v") for i in range(512)]))[0] == rdb.TYPE_HASH_LISTPACK
    assert rdb.dump(rdb.Hash([(b"%d" % i, b"v") for i in range(513)]))[0] == rdb.TYPE_HASH
    assert rdb.dump(rdb.Hash([(b"f", b"v" * 64)]))[0] == rdb.TYPE_HASH_LISTPACK
    assert rdb.dump(rdb.Hash([(b"f", b"v" * 65)]))[0] == rdb.TYPE_HASH
    assert rdb.dump(rdb.Zset([(b"%d" % i, 1.0) for i in range(128)]))[0] == rdb.TYPE_ZSET_LISTPACK
    assert rdb.dump(rdb.Zset([(b"%d" % i, 1.0) for i in range(129)]))[0] == rdb.TYPE_ZSET_2
    assert rdb.dump(rdb.Zset([(b"m" * 65, 1.0)]), lim)[0] == rdb.TYPE_ZSET_2
    assert rdb.dump(rdb.List([b"x"]))[0] == rdb.TYPE_LIST_QUICKLIST_2


def test_quicklist_nodes_split_as_rpush_fills_them():
    # -2: 8 KB per node; 100 elements of 100 bytes take two nodes (~80 per node)
    body = rdb.dump(rdb.List([b"x" * 100] * 100))
    assert body[1] == 2  # two nodes
    one_per_node = rdb.dump(rdb.List([b"x" * 100] * 3), rdb.Limits(list_max_listpack_size=1))
    assert one_per_node[1] == 3


def test_d2string_is_redis_s():
    assert [rdb.d2string(x) for x in (1.0, -3.0, 2.5, 0.1, 1e20, 4503599627370496.0, -math.inf, math.inf)] == \
        [b"1", b"-3", b"2.5", b"0.10000000000000001", b"1e+20", b"4503599627370496", b"-inf", b"inf"]


# -- bad payloads --------------------------------------------------------------------------------------

def test_footer_errors():
    good = rdb.dump(rdb.String(b"hello"))
    with pytest.raises(rdb.PayloadError):
        rdb.load(good[:-1] + bytes([good[-1] ^ 1]))  # CRC
    with pytest.raises(rdb.PayloadError):
        rdb.load(rdb.footer(b"\x00\x05hello")[:-10] + struct.pack("<H", 11) + bytes(8))  # version 11
    newer = b"\x00\x05hello" + struct.pack("<H", 11)
    with pytest.raises(rdb.PayloadError):
        rdb.load(newer + struct.pack("<Q", crc64(0, newer)))  # a good CRC does not save version 11
    for short in (b"", b"x" * 9):
        with pytest.raises(rdb.PayloadError):
            rdb.load(short)
    old = b"\x00\x05hello" + struct.pack("<H", 6)  # an old version is read
    assert rdb.load(old + struct.pack("<Q", crc64(0, old))) == rdb.String(b"hello")


@settings(max_examples=100, deadline=None)
@given(values(), st.data())
def test_truncated_payloads_are_refused(value, data):
    payload = rdb.dump(value)
    for cut in data.draw(st.lists(st.integers(0, len(payload) - 1), max_size=20)):
        with pytest.raises(rdb.PayloadError):  # the footer is gone
            rdb.load(payload[:cut])
    body = payload[:-10]
    for cut in data.draw(st.lists(st.integers(1, len(body) - 1), max_size=20)) if len(body) > 1 else ():
        # a value cut short under a good footer: as in Redis, the value may read on into
        # the footer's bytes, so this is bad data or another value, never the original, unless
        # the footer's version bytes are the very bytes cut off (the string "10", int-encoded
        # C0 0A, cut after C0: the version 10 reads as 0A)
        try:
            got = rdb.load(rdb.footer(body[:cut]))
        except rdb.RdbError:
            continue
        assert canon(got) != canon(value) or (body[:cut] + rdb.footer(b"")[:2]).startswith(body)


def test_a_string_cut_short_is_bad_data():
    body = rdb.dump(rdb.String(b"x" * 100))[:-10]
    for cut in range(1, len(body) - 10):
        with pytest.raises(rdb.RdbError):
            rdb.load(rdb.footer(body[:cut]))


@pytest.mark.parametrize("body", [
    b"\x08\x00",  # type 8 does not exist
    b"\x14\x00",  # type 20 does not exist in 7.0
    b"\x06\x00",  # a module value
    b"\x00\x82",  # unknown length encoding
    b"\x00\xc4",  # unknown string encoding
    b"\x02\x00",  # empty set
    b"\x02\x02\x01a\x01a",  # duplicate set member
    b"\x04\x01\x01f\x01v\x04\x01",  # fine hash, then junk: accepted (below), not here
    b"\x0b" + rdb._string(struct.pack("<II", 2, 2) + struct.pack("<hh", 2, 1)),  # intset out of order
    b"\x0b" + rdb._string(struct.pack("<II", 3, 1) + b"\x01\x00\x00"),  # intset width 3
    b"\x10" + rdb._string(rdb.listpack([b"f"])),  # hash listpack with an odd count
    b"\x10" + rdb._string(rdb.listpack([b"f", b"1", b"f", b"2"])),  # duplicate hash field
    b"\x11" + rdb._string(rdb.listpack([b"m", b"nan"])),  # NaN score
    b"\x05\x01\x01m" + struct.pack("<d", math.nan),  # NaN score (binary)
    b"\x12\x01\x02\x00",  # empty quicklist node
    b"\x12\x01\x03\x01x",  # quicklist container 3
    b"\x12\x01\x02" + rdb._string(rdb.listpack([])),  # a list with no element
    b"\x10" + rdb._string(b"\x07\x00\x00\x00\x00\x00\x00"),  # listpack without its end marker
    b"\x10" + rdb._string(rdb.listpack([b"f", b"v"])[:-3] + b"\x03\xff"),  # bad backlen
    b"\x0d" + rdb._string(b"\x0b\x00\x00\x00\x0a\x00\x00\x00\x00\x00\xff"),  # empty ziplist hash
])
def test_malformed_values_are_bad_data(body):
    if body == b"\x04\x01\x01f\x01v\x04\x01":
        assert rdb.load(rdb.footer(body)) == rdb.Hash([(b"f", b"v")])  # Redis ignores what follows
        return
    with pytest.raises(rdb.RdbError):
        rdb.load(rdb.footer(body))


def test_huge_lengths_allocate_nothing():
    for body in (b"\x00\x81" + (1 << 62).to_bytes(8, "big"), b"\x02\x81" + (1 << 62).to_bytes(8, "big") + b"\x01a",
                 b"\x00\xc3\x81" + (1 << 40).to_bytes(8, "big") + b"\x81" + (1 << 60).to_bytes(8, "big")):
        with pytest.raises(rdb.RdbError):
            rdb.load(rdb.footer(body))


# -- older encodings (Redis 6 and before) ------------------------------------------------------------

def _ziplist(entries: list[bytes]) -> bytes:
    out = b""
    prev = 0
    tail = 10
    for e in entries:
        tail = 10 + len(out)
        pl = bytes([prev]) if prev < 254 else b"\xfe" + prev.to_bytes(4, "little")
        enc = bytes([len(e)]) + e if len(e) < 64 else bytes([0x40 | len(e) >> 8, len(e) & 0xFF]) + e
        ent = pl + enc
        out += ent
        prev = len(ent)
    total = 10 + len(out) + 1
    return struct.pack("<IIH", total, tail, len(entries)) + out + b"\xff"


def test_old_encodings_load():
    assert rdb.load(rdb.footer(b"\x0a" + rdb._string(_ziplist([b"a", b"b" * 70])))) == rdb.List([b"a", b"b" * 70])
    assert rdb.load(rdb.footer(b"\x0d" + rdb._string(_ziplist([b"f", b"v"])))) == rdb.Hash([(b"f", b"v")])
    assert rdb.load(rdb.footer(b"\x0c" + rdb._string(_ziplist([b"m", b"1.5"])))) == rdb.Zset([(b"m", 1.5)])
    ql = b"\x0e\x02" + rdb._string(_ziplist([b"a"])) + rdb._string(_ziplist([b"b", b"c"]))
    assert rdb.load(rdb.footer(ql)) == rdb.List([b"a", b"b", b"c"])
    assert rdb.load(rdb.footer(b"\x01\x02\x01a\x01b")) == rdb.List([b"a", b"b"])
    assert rdb.load(rdb.footer(b"\x03\x02\x01a\x031.5\x01b\xfe")) == rdb.Zset([(b"a", 1.5), (b"b", math.inf)])
    zipmap = b"\x02\x01f\x01\x00v\x02ff\x02\x01vv\x00\xff"  # free byte after "vv"
    assert rdb.load(rdb.footer(b"\x09" + rdb._string(zipmap))) == rdb.Hash([(b"f", b"v"), (b"ff", b"vv")])
    bad_prev = bytearray(_ziplist([b"a", b"b"]))
    bad_prev[13] = 5  # the second entry's previous length
    with pytest.raises(rdb.RdbError):
        rdb.load(rdb.footer(b"\x0a" + rdb._string(bytes(bad_prev))))


# -- HyperLogLog sketches -------------------------------------------------------------------------

def test_hll_dense_round_trips_every_rank():
    ranks = bytes(i % 52 for i in range(rdb.HLL_REGISTERS))
    sketch = rdb.hll_dense(ranks)
    assert len(sketch) == rdb.HLL_DENSE_SIZE and sketch[:5] == b"HYLL\x00" and sketch[15] & 0x80
    assert rdb.hll_ranks(sketch) == ranks


def test_hll_sparse_sketches_decode():
    header = b"HYLL\x01" + bytes(11)
    # register 0 = 3 (VAL 3 x1), 16383 zeros (XZERO of 16383 = 0x3fff: 0x7f 0xfe)
    assert rdb.hll_ranks(header + bytes([0x80 | 2 << 2]) + b"\x7f\xfe") == b"\x03" + bytes(16383)
    # ZERO x64 (0x3f) 256 times = 16384 empty registers
    assert rdb.hll_ranks(header + b"\x3f" * 256) == bytes(16384)
    # a value run of 4 registers of 32 at the end
    assert rdb.hll_ranks(header + b"\x7f\xfb" + bytes([0x80 | 31 << 2 | 3])) == bytes(16380) + b"\x20" * 4


@pytest.mark.parametrize("sketch", [
    b"HYLX\x00" + bytes(11 + 12288),  # magic
    b"HYLL\x02" + bytes(11),  # encoding
    b"HYLL\x00" + bytes(11 + 12287),  # dense size
    b"HYLL\x01" + bytes(11) + b"\x3f" * 255,  # sparse: too few registers
    b"HYLL\x01" + bytes(11) + b"\x3f" * 257,  # sparse: too many
    b"HYLL\x01" + bytes(11) + b"\x7f",  # sparse: XZERO cut short
    b"HYLL\x00" + bytes(11) + b"\x3f" + bytes(12287),  # dense: a register of 63 (> 51)
    b"HYLL",  # short
])
def test_invalid_sketches_are_plain_strings(sketch):
    assert rdb.hll_ranks(sketch) is None
