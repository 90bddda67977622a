"""Property tests of the frozen format in marekvs.core (keys, scores, envelope, HLC)."""

from __future__ import annotations

import logging
import math
import struct

import pytest
import xxhash
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from marekvs.core import envelope as env
from marekvs.core import hlc as H
from marekvs.core import keys as K
from marekvs.core import partition as P

# CI-friendly: no deadline (shared runners are noisy), no example database on disk.
FAST = settings(max_examples=150, deadline=None, database=None)
MED = settings(max_examples=60, deadline=None, database=None)

U64 = st.integers(0, 2**64 - 1)
U16 = st.integers(0, 2**16 - 1)
userkeys = st.binary(max_size=200)
# keys that share a hash tag (hence a partition): collisions can only be ruled out by
# the klen, not by the pid
tagged_userkeys = st.binary(max_size=40).map(lambda b: b"{t}" + b)
some_userkeys = st.one_of(userkeys, tagged_userkeys, st.binary(min_size=120, max_size=320))
elems = st.binary(max_size=40)
scores = st.floats(allow_nan=False)


# -- partition -------------------------------------------------------------------------

def redis_key_hash_slot_bytes(key: bytes) -> bytes:
    """Transcription of Redis keyHashSlot's brace scan (independent of core)."""
    s = next((i for i, c in enumerate(key) if c == 0x7B), None)
    if s is None:
        return key
    e = next((i for i in range(s + 1, len(key)) if key[i] == 0x7D), None)
    if e is None or e == s + 1:
        return key
    return key[s + 1 : e]


brace_keys = st.lists(st.sampled_from([b"{", b"}", b"{}", b"{a}", b"}{", b"a", b"b", b"\x00",
                                      b"\xff", b" "]),
                      max_size=10).map(b"".join)


@FAST
@given(st.one_of(brace_keys, st.binary(max_size=64)))
def test_hash_tag_matches_redis_rule(key):
    hashed = redis_key_hash_slot_bytes(key)
    assert P.hash_tag(key) == hashed
    assert P.partition_of(key) == xxhash.xxh3_64_intdigest(hashed) >> 52
    assert 0 <= P.partition_of(key) < P.PARTITIONS
    assert P.hash_tag(hashed) == hashed  # idempotent: the tag holds no '}'


@FAST
@given(st.binary(max_size=30), st.binary(min_size=1, max_size=30).filter(lambda t: b"}" not in t),
       st.binary(max_size=30))
def test_hash_tag_colocates(pre, tag, post):
    assume(b"{" not in pre)
    key = pre + b"{" + tag + b"}" + post
    assert P.partition_of(key) == P.partition_of(tag) == P.partition_of(b"{" + tag + b"}")


# -- varint -------------------------------------------------------------------------------

@FAST
@given(U64, st.binary(max_size=8))
def test_varint_round_trip_and_prefix_free(n, tail):
    b = K.encode_varint(n)
    assert K.decode_varint(b + tail) == (n, len(b))
    assert len(b) == max(1, -(-n.bit_length() // 7))
    assert all(x & 0x80 for x in b[:-1]) and not b[-1] & 0x80
    if len(b) > 1:
        assert b[-1] != 0  # minimal encoding


def test_varint_rejects_bad_input():
    with pytest.raises(ValueError):
        K.encode_varint(-1)
    for bad in (b"", b"\x80", b"\xff\xff"):
        with pytest.raises(K.KeyDecodeError):
            K.decode_varint(bad)
    with pytest.raises(K.KeyDecodeError):
        K.decode_varint(b"\xff" * 11)


# -- key layouts: encode/decode round trip ---------------------------------------------------

@FAST
@given(some_userkeys, elems, scores, U64, U16, U64, U64)
def test_every_layout_round_trips(uk, el, score, pos, bucket, ms, seq):
    pid = P.partition_of(uk)
    cases = [
        (K.encode_string_key(uk), K.decode_string_key, uk, K.TAG_STRING),
        (K.encode_head_key(uk), K.decode_head_key, uk, K.TAG_HEAD),
        (K.encode_hash_field_key(uk, el), K.decode_hash_field_key, (uk, el), K.TAG_HASH),
        (K.encode_set_member_key(uk, el), K.decode_set_member_key, (uk, el), K.TAG_SET),
        (K.encode_zset_member_key(uk, el), K.decode_zset_member_key, (uk, el), K.TAG_ZSET),
        (K.encode_zset_score_key(uk, score, el), K.decode_zset_score_key, (uk, score, el),
         K.TAG_ZSCORE),
        (K.encode_list_key(uk, pos), K.decode_list_key, (uk, pos), K.TAG_LIST),
        (K.encode_hll_key(uk, bucket), K.decode_hll_key, (uk, bucket), K.TAG_HLL),
        (K.encode_stream_key(uk, ms, seq), K.decode_stream_key, (uk, ms, seq), K.TAG_STREAM),
    ]
    for ikey, dec, want, tag in cases:
        assert dec(ikey) == want
        assert K.pid_of_ikey(ikey) == pid
        assert ikey[:2] == K.pid_prefix(pid)
        assert K.tag_of_ikey(ikey) == tag
        assert K.user_key_of(ikey) == uk
        if tag != K.TAG_STRING:
            assert ikey.startswith(K.collection_prefix(tag, uk))
    # the exact layout of the score index key, rebuilt with struct
    bits = struct.unpack(">Q", struct.pack(">d", score + 0.0))[0]
    enc = bits ^ 0xFFFFFFFFFFFFFFFF if bits >> 63 else bits | 1 << 63
    assert K.encode_zset_score_key(uk, score, el) == (
        K.collection_prefix(K.TAG_ZSCORE, uk) + struct.pack(">Q", enc) + el)


@FAST
@given(some_userkeys)
def test_decoders_reject_other_layouts(uk):
    keys = {
        K.TAG_HEAD: (K.encode_head_key(uk), K.decode_head_key),
        K.TAG_HASH: (K.encode_hash_field_key(uk, b"f"), K.decode_hash_field_key),
        K.TAG_SET: (K.encode_set_member_key(uk, b"m"), K.decode_set_member_key),
        K.TAG_ZSET: (K.encode_zset_member_key(uk, b"m"), K.decode_zset_member_key),
        K.TAG_ZSCORE: (K.encode_zset_score_key(uk, 1.0, b"m"), K.decode_zset_score_key),
        K.TAG_LIST: (K.encode_list_key(uk, 1), K.decode_list_key),
        K.TAG_HLL: (K.encode_hll_key(uk, 1), K.decode_hll_key),
        K.TAG_STREAM: (K.encode_stream_key(uk, 1, 2), K.decode_stream_key),
        K.TAG_STRING: (K.encode_string_key(uk), K.decode_string_key),
    }
    for tag_a, (ikey, _) in keys.items():
        for tag_b, (_, dec) in keys.items():
            if tag_a != tag_b:
                with pytest.raises(K.KeyDecodeError):
                    dec(ikey)


@FAST
@given(some_userkeys)
def test_truncated_fixed_suffixes_rejected(uk):
    for ikey, dec in ((K.encode_list_key(uk, 5), K.decode_list_key),
                      (K.encode_hll_key(uk, 5), K.decode_hll_key),
                      (K.encode_stream_key(uk, 5, 6), K.decode_stream_key),
                      (K.encode_zset_score_key(uk, 5.0, b""), K.decode_zset_score_key)):
        with pytest.raises(K.KeyDecodeError):
            dec(ikey[:-1])
    if uk:
        with pytest.raises(K.KeyDecodeError):  # user key runs past the end
            K.decode_head_key(K.encode_head_key(uk)[:-1])
    with pytest.raises(K.KeyDecodeError):  # trailing bytes
        K.decode_head_key(K.encode_head_key(uk) + b"x")


# -- order preservation ------------------------------------------------------------------------

def _score_cmp_ok(a: float, b: float) -> bool:
    ea, eb = K.encode_score(a), K.encode_score(b)
    return (ea < eb) == (a < b) and (ea == eb) == (a == b) and (ea > eb) == (a > b)


@FAST
@given(scores, scores)
def test_score_memcmp_order_is_numeric_order(a, b):
    assert _score_cmp_ok(a, b)
    assert len(K.encode_score(a)) == 8
    d = K.decode_score(K.encode_score(a))
    assert d == a and (d != 0 or math.copysign(1.0, d) == 1.0)


@FAST
@given(st.lists(scores, max_size=30))
def test_score_index_keys_sort_by_score(xs):
    uk = b"z"
    ikeys = sorted(K.encode_zset_score_key(uk, x, b"") for x in xs)
    assert [K.decode_zset_score_key(k)[1] for k in ikeys] == sorted(x + 0.0 for x in xs)


def test_score_specials():
    assert K.encode_score(-0.0) == K.encode_score(0.0)
    for a, b in [(-math.inf, -1.7976931348623157e308), (-5e-324, 0.0), (0.0, 5e-324),
                 (1.7976931348623157e308, math.inf)]:
        assert K.encode_score(a) < K.encode_score(b)
    with pytest.raises(ValueError):
        K.encode_score(math.nan)


@FAST
@given(some_userkeys, U64, U64)
def test_list_position_order(uk, p1, p2):
    a, b = K.encode_list_key(uk, p1), K.encode_list_key(uk, p2)
    assert (a < b) == (p1 < p2) and (a == b) == (p1 == p2)


@FAST
@given(some_userkeys, U64, U64, U64, U64)
def test_stream_key_order_is_id_order(uk, ms1, s1, ms2, s2):
    a, b = K.encode_stream_key(uk, ms1, s1), K.encode_stream_key(uk, ms2, s2)
    assert (a < b) == ((ms1, s1) < (ms2, s2)) and (a == b) == ((ms1, s1) == (ms2, s2))


@FAST
@given(some_userkeys, st.integers(0, 2**16 - 1), st.integers(0, 2**16 - 1))
def test_hll_bucket_order(uk, b1, b2):
    assert (K.encode_hll_key(uk, b1) < K.encode_hll_key(uk, b2)) == (b1 < b2)


# -- no collisions or prefix confusion across user keys -----------------------------------------

ELEMENT_ENCODERS = {
    K.TAG_HASH: lambda uk, el: K.encode_hash_field_key(uk, el),
    K.TAG_SET: lambda uk, el: K.encode_set_member_key(uk, el),
    K.TAG_ZSET: lambda uk, el: K.encode_zset_member_key(uk, el),
    K.TAG_ZSCORE: lambda uk, el: K.encode_zset_score_key(uk, 0.5, el),
    K.TAG_LIST: lambda uk, el: K.encode_list_key(uk, int.from_bytes(el[:8].ljust(8, b"\0"), "big")),
    K.TAG_HLL: lambda uk, el: K.encode_hll_key(uk, int.from_bytes(el[:2].ljust(2, b"\0"), "big")),
    K.TAG_STREAM: lambda uk, el: K.encode_stream_key(uk, len(el), 7),
}


@FAST
@given(some_userkeys, some_userkeys, elems, elems)
def test_no_prefix_confusion_between_user_keys(a, b, ea, eb):
    assume(a != b)
    for tag, enc in ELEMENT_ENCODERS.items():
        pa, pb = K.collection_prefix(tag, a), K.collection_prefix(tag, b)
        ka, kb = enc(a, ea), enc(b, eb)
        # the collection prefix of A never captures an element (or the head) of B
        assert not kb.startswith(pa)
        assert not ka.startswith(pb)
        assert ka != kb
        assert K.user_key_of(ka) == a and K.user_key_of(kb) == b
    ha, hb = K.encode_head_key(a), K.encode_head_key(b)
    assert ha != hb and not hb.startswith(ha) and not ha.startswith(hb)
    assert K.encode_string_key(a) != K.encode_string_key(b)


@FAST
@given(tagged_userkeys, tagged_userkeys, elems, elems)
def test_same_partition_element_keys_never_collide(a, b, ea, eb):
    # same pid by construction; the klen alone must keep the key spaces apart
    assume(a != b)
    assert P.partition_of(a) == P.partition_of(b)
    for enc in ELEMENT_ENCODERS.values():
        assert enc(a, ea) != enc(b, eb)


@FAST
@given(some_userkeys, elems)
def test_layouts_are_disjoint(uk, el):
    ikeys = [K.encode_string_key(uk), K.encode_head_key(uk)] + [
        enc(uk, el) for enc in ELEMENT_ENCODERS.values()]
    assert len({k[2:3] for k in ikeys}) == len(ikeys)
    assert K.TAG_LIST_RETIRED not in {k[2:3] for k in ikeys}


# -- envelope ----------------------------------------------------------------------------------

@FAST
@given(st.integers(0, 7), st.booleans(), st.booleans(), U64, U16, U64, st.binary(max_size=64))
def test_envelope_round_trip(rtype, tomb, head, hlc, origin, ttl, payload):
    flags = env.make_flags(rtype, tombstone=tomb, head=head)
    assert flags < 32
    value = env.pack(flags, hlc, origin, ttl, payload)
    assert value == struct.pack(">BQHQ", flags, hlc, origin, ttl) + payload
    assert len(value) == env.ENVELOPE_SIZE + len(payload)
    e, p = env.unpack(value)
    assert e == (flags, hlc, origin, ttl) and p == payload
    assert (e.rtype, e.tombstone, e.head, e.version) == (rtype, tomb, head, (hlc, origin))
    assert env.unpack_header(value) == e
    assert env.hlc_of(value) == hlc and env.origin_of(value) == origin
    assert env.ttl_of(value) == ttl and env.payload_of(value) == payload
    assert env.rtype_of(value) == rtype and env.is_tombstone(value) == tomb


@FAST
@given(U64, U16, U64, U16)
def test_version_key_orders_like_hlc_origin(h1, o1, h2, o2):
    v1 = env.pack(0, h1, o1, 0)
    v2 = env.pack(0, h2, o2, 0)
    assert (env.version_key(v1) < env.version_key(v2)) == ((h1, o1) < (h2, o2))


def test_envelope_too_short():
    with pytest.raises(env.EnvelopeError):
        env.unpack(b"\x00" * 18)
    with pytest.raises(env.EnvelopeError):
        env.unpack_header(b"")


# -- HLC ---------------------------------------------------------------------------------------

class FakeClock:
    def __init__(self, ms: int):
        self.ms = ms

    def __call__(self) -> int:
        return self.ms


BASE_MS = 1_700_000_000_000
events = st.lists(
    st.one_of(
        st.tuples(st.just("tick"), st.integers(-10_000, 10_000)),  # clock moves, maybe back
        st.tuples(st.just("now"), st.just(0)),
        st.tuples(st.just("recv"), st.integers(-20_000, 4_000)),  # remote offset in ms
    ),
    max_size=60,
)


@FAST
@given(events)
def test_hlc_stamps_strictly_increase_even_if_wall_clock_goes_back(evs):
    clock = FakeClock(BASE_MS)
    hlc = H.HLC(clock=clock)
    last = 0
    for kind, arg in evs:
        if kind == "tick":
            clock.ms = max(0, clock.ms + arg)
            continue
        if kind == "now":
            n = hlc.now()
            assert n >= clock.ms << 16  # never behind the wall clock
        else:
            remote = H.pack(clock.ms + arg, abs(arg) % 65536)
            n = hlc.update(remote)
            assert n > remote  # receive rule: strictly after the remote (not clamped here)
        assert n > last
        assert hlc.last == n
        last = n
    assert hlc.clamped == 0


@FAST
@given(U64.map(lambda x: x >> 8), st.integers(0, 4_999), st.integers(0, 65535))
def test_hlc_receive_rule(local_prev, ahead_ms, logical):
    clock = FakeClock(BASE_MS)
    hlc = H.HLC(clock=clock)
    hlc.observe(min(local_prev, (BASE_MS + 100_000) << 16))
    local = hlc.last
    remote = H.pack(BASE_MS + ahead_ms, logical)
    n = hlc.update(remote)
    assert n == max(local, remote) + 1
    assert n > local and n > remote
    assert hlc.clamped == 0


@pytest.mark.parametrize("ahead_ms", [5_001, 10_000, 3_600_000])
def test_hlc_clamps_remote_too_far_ahead(caplog, ahead_ms):
    clock = FakeClock(BASE_MS)
    hlc = H.HLC(clock=clock)
    remote = H.pack(BASE_MS + ahead_ms, 3)
    with caplog.at_level(logging.ERROR, logger="marekvs.hlc"):
        n = hlc.update(remote)
    assert hlc.clamped == 1
    assert n == ((BASE_MS + H.DEFAULT_MAX_DRIFT_MS) << 16) + 1
    assert n < remote
    recs = [r for r in caplog.records if r.name == "marekvs.hlc"]
    assert len(recs) == 1 and recs[0].levelno >= logging.ERROR
    assert "drift" in recs[0].getMessage().lower()
    assert str(ahead_ms) in recs[0].getMessage()
    # the clock keeps going forward from the clamped value
    assert hlc.now() == n + 1
    hlc.update(remote)
    assert hlc.clamped == 2


def test_hlc_does_not_clamp_within_drift(caplog):
    clock = FakeClock(BASE_MS)
    hlc = H.HLC(clock=clock)
    remote = H.pack(BASE_MS + 5_000, 0)  # exactly max_clock_drift ahead: accepted
    with caplog.at_level(logging.ERROR, logger="marekvs.hlc"):
        assert hlc.update(remote) == remote + 1
    assert hlc.clamped == 0
    assert not [r for r in caplog.records if r.name == "marekvs.hlc"]


@MED
@given(st.integers(1, 300), st.integers(0, 65535))
def test_hlc_logical_overflow_borrows_next_ms(n_events, start_logical):
    ms = BASE_MS
    clock = FakeClock(ms)
    hlc = H.HLC(clock=clock)
    hlc.observe(H.pack(ms, start_logical))
    stamps = [hlc.now() for _ in range(n_events)]
    assert all(a < b for a, b in zip(stamps, stamps[1:]))
    assert stamps[0] == H.pack(ms, start_logical) + 1
    for s in stamps:
        assert H.pack(H.physical_ms(s), H.logical(s)) == s
    # crossing 0xFFFF carries into the next millisecond with logical 0
    total = start_logical + n_events
    assert H.physical_ms(stamps[-1]) == ms + total // 65536
    assert H.logical(stamps[-1]) == total % 65536
    # when the wall clock catches up with the borrowed ms, stamps stay monotonic
    clock.ms = H.physical_ms(stamps[-1])
    assert hlc.now() > stamps[-1]


def test_hlc_overflow_exact_boundary():
    clock = FakeClock(BASE_MS)
    hlc = H.HLC(clock=clock)
    hlc.observe(H.pack(BASE_MS, 0xFFFF))
    assert hlc.now() == H.pack(BASE_MS + 1, 0)
    clock.ms = BASE_MS + 1
    assert hlc.now() == H.pack(BASE_MS + 1, 1)
    clock.ms = BASE_MS + 2
    assert hlc.now() == H.pack(BASE_MS + 2, 0)


def test_hlc_observe_never_goes_back():
    clock = FakeClock(BASE_MS)
    hlc = H.HLC(clock=clock)
    hlc.observe(H.pack(BASE_MS + 50, 9))
    hlc.observe(H.pack(BASE_MS - 50, 0))  # lower: ignored
    assert hlc.now() == H.pack(BASE_MS + 50, 10)



@FAST
@given(st.lists(st.tuples(st.integers(-3, 3), st.integers(1, 20)), min_size=1, max_size=30))
def test_hlc_reserve_hands_out_a_run_of_fresh_stamps(steps):
    """MSET reserves one stamp per key at once: the run starts after every earlier
    stamp, never behind the wall clock, and the next stamp comes after the run."""
    clock = FakeClock(BASE_MS)
    hlc = H.HLC(clock=clock)
    last = 0
    for tick, n in steps:
        clock.ms = max(0, clock.ms + tick)
        first = hlc.reserve(n)
        assert first > last and first >= clock.ms << 16
        assert hlc.last == first + n - 1
        last = hlc.last
        nxt = hlc.now()
        assert nxt > last
        last = nxt
