"""The record-kind registry: it covers every tag the key codecs define, each row's codec,
validation and merge agree with the lattices, the hot-path shortcuts agree with the rows,
and merge, validation and the sweep read the row (a new kind is one row)."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given
from hypothesis import strategies as st
from laws_gen import LATTICES, element_record, head_records

from marekvs.core import envelope as env
from marekvs.core import head, hll, lww, orswot, pncounter, registry, stream
from marekvs.core import keys as K
from marekvs.core.envelope import RecordType
from marekvs.core.head import CollectionType as CT
from marekvs.core.merge import merge
from marekvs.core.partition import partition_of
from marekvs.core.registry import BY_CODE, BY_TAG, KINDS, RETIRED, InvalidRecord, Sweep, check_record
from marekvs.core.sweep import PartitionSweep
from marekvs.replication.validate import BadRecord, check_flat
from marekvs.replication.validate import check_record as replication_check

NAMES = sorted(LATTICES)
U = b"k"

# one sample internal key per kind: (row, encode arguments after the user key)
SAMPLES = {
    "string": (), "head": (), "hash-field": (b"f",), "set-member": (b"m",),
    "zset-member": (b"m",), "zset-score": (-2.5, b"m"), "list-element": (K.LIST_CENTER,),
    "hll-register": (7,), "stream-entry": (5, 1 << 20),
    "stream-counters": (3,), "stream-group": (b"grp",), "group-consumer": (b"grp", b"c1"),
    "group-pending": (b"grp", 5, 1 << 20), "acl-user": (), "function-library": (),
}


def test_every_tag_the_codecs_define_has_a_row_or_is_retired():
    tags = {v for n, v in vars(K).items() if n.startswith("TAG_") and isinstance(v, bytes)}
    assert tags == set(BY_TAG) | set(RETIRED)
    assert not set(BY_TAG) & set(RETIRED)
    assert all(len(k.tag) == 1 for k in KINDS) and len({k.tag for k in KINDS}) == len(KINDS)
    assert {k.name for k in KINDS} == set(SAMPLES)
    assert [c for c in range(256) if BY_CODE[c] is not None] == sorted(k.code for k in KINDS)
    assert all(BY_CODE[k.code] is k for k in KINDS)


def test_key_and_element_tags():
    assert registry.KEY_TAGS == K.TAG_HEAD + K.TAG_STRING  # what iteration scans, in key order
    assert registry.ELEMENT_TAGS == bytes(sorted(k.code for k in KINDS if k.ctype is not None))
    # node-level records, neither keys nor elements: ACL users and function libraries
    assert registry.NODE_TAGS == bytes(sorted(K.TAG_FUNCTION + K.TAG_USER))
    assert {k.tag for k in KINDS if k.head_flag} == {K.TAG_HEAD}
    for k in KINDS:
        if k.is_node:
            assert k.sweep is Sweep.RECORD and k.gate_clock is None and not k.is_key
            continue
        assert (k.sweep in (Sweep.ELEMENT, Sweep.INDEX)) == (not k.is_key) == (k.gate_clock is not None)
        assert (k.sweep is Sweep.INDEX) == (k is registry.ZSET_SCORE)  # derived from the members
        assert (k.ctype is None) == k.is_key
    assert [k.tag for k in registry.element_kinds(CT.ZSET)] == [K.TAG_ZSET, K.TAG_ZSCORE]
    assert {k.ctype for k in KINDS if not k.is_key and not k.is_node} == set(head.TYPE_NAMES)


@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.name)
@given(uk=st.binary(max_size=300))
def test_each_row_codec_round_trips(kind, uk):
    ikey = kind.encode(uk, *SAMPLES[kind.name])
    assert ikey[2:3] == kind.tag and ikey[:2] == partition_of(uk).to_bytes(2, "big")
    assert kind.user_key(ikey) == uk == K.user_key_of(ikey)
    assert ikey.startswith(kind.prefix(uk))
    decoded = kind.decode(ikey)
    assert kind.encode(*((decoded,) if isinstance(decoded, bytes) else decoded)) == ikey


# -- merge ---------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_merge_dispatches_to_the_row(name, data):
    ikey, strat = LATTICES[name]
    a, b = data.draw(strat), data.draw(strat)
    assert merge(ikey, a, b) == BY_CODE[ikey[2]].merge(a, b)


@given(a=LATTICES["string"][1], b=LATTICES["string"][1])
def test_inlined_string_merge_is_the_string_row(a, b):
    """merge.merge's shortcut for two plain string records (tag 0x73) is the row's merge."""
    assert registry.STRING.code == 0x73
    ikey = K.encode_string_key(U)
    got = merge(ikey, a, b)
    assert got == registry.STRING.merge(a, b) == lww.merge(a, b)
    assert got is a or got is b


def test_a_tag_without_a_row_merges_as_lww():
    a = env.pack(0, 5, 1, 0, b"a")
    b = env.pack(0, 6, 1, 0, b"b")
    assert merge(b"\x00\x00l" + U, a, b) is b and merge(b"\x00\x00?" + U, b, a) is b


# -- gating -------------------------------------------------------------------------------

ELEMENT_LATTICES = [n for n in NAMES if BY_CODE[LATTICES[n][0][2]].ctype is not None]


@pytest.mark.parametrize("name", ELEMENT_LATTICES)
@given(data=st.data(), h=st.none() | head_records(), now=st.sampled_from([0, 5, 20, 100]))
def test_element_liveness_gates_by_the_rows_gate_clock(name, data, h, now):
    """head.element_live (which has no key, only the record) gates every kind by the
    clock its registry row names, the clock the sweep gates by."""
    ikey, strat = LATTICES[name]
    rec = data.draw(strat)
    kind = BY_CODE[ikey[2]]
    assert head.gate_clock(rec) == kind.gate_clock(rec)
    assert head.element_live(h, rec, now) == (
        env.is_live(rec, now) and kind.gate_clock(rec) > head.delete_clock(h, now))


# -- validation ------------------------------------------------------------------------------

@pytest.mark.parametrize("name", NAMES)
@given(data=st.data())
def test_every_record_the_lattices_make_is_valid(name, data):
    ikey, strat = LATTICES[name]
    rec = data.draw(strat)
    assert check_record(ikey, rec) is BY_CODE[ikey[2]]
    assert check_record(ikey, merge(ikey, rec, data.draw(strat))) is BY_CODE[ikey[2]]


STRUCTURED = ["string+counter", "head", "set-member", "hash-field", "zset-member",
              "hll-register", "stream-entry", "stream-counters", "stream-group", "group-consumer",
              "group-pending"]
_STREAM_GROUP_KINDS = ("stream-counters", "stream-group", "group-consumer", "group-pending")


@pytest.mark.parametrize("name", STRUCTURED)
@given(data=st.data())
def test_a_payload_that_does_not_parse_is_a_bad_record(name, data):
    ikey, strat = LATTICES[name]
    rec = data.draw(strat)
    kind = BY_CODE[ikey[2]]
    parsed = (kind.head_flag or kind.merge is orswot.merge or kind.merge is hll.merge
              or pncounter.is_counter(rec) or (name == "stream-entry" and not env.is_tombstone(rec))
              or name in _STREAM_GROUP_KINDS)  # always parsed, tombstone or not
    if not parsed:
        return  # a plain string, or a tombstone whose payload nothing reads
    # cut into the fixed or counted part of the payload (a head's config is opaque)
    cut = data.draw(st.integers(env.ENVELOPE_SIZE, min(len(rec), env.ENVELOPE_SIZE + 26) - 1))
    with pytest.raises(InvalidRecord, match="payload"):
        check_record(ikey, rec[:cut])
    with pytest.raises(BadRecord):
        replication_check(ikey, rec[:cut])


def test_structured_payload_rules():
    k_set = K.encode_set_member_key(U, b"m")
    ok = element_record(orswot.Element((((9, 1), b""),), ((5, 2),)), 9, 1)
    check_record(k_set, ok)
    bad = {
        "order": orswot.Element((((3, 1), b""), ((9, 1), b"")), ()),
        "overlap": orswot.Element((((9, 1), b""),), ((9, 1),)),
        "cap": orswot.Element(tuple(((h, 1), b"") for h in (9, 8, 7, 6, 5)), ()),
    }
    for e in bad.values():  # keys: what is wrong
        with pytest.raises(InvalidRecord, match="payload"):
            check_record(k_set, element_record(e, 9, 1))
    flipped = bytes((ok[0] | env.FLAG_TOMBSTONE,)) + ok[1:]
    with pytest.raises(InvalidRecord, match="tombstone flag"):
        check_record(k_set, flipped)

    k_head = K.encode_head_key(U)
    h = head.new(CT.SET, 5, 1)
    check_record(k_head, h)
    with pytest.raises(InvalidRecord, match="collection type"):  # envelope says hash, payload set
        check_record(k_head, env.pack(env.make_flags(CT.HASH, head=True), 5, 1, 0, h[env.HEADER:]))
    with pytest.raises(InvalidRecord, match="head flag"):
        check_record(k_head, env.pack(env.make_flags(CT.SET), 5, 1, 0, h[env.HEADER:]))

    k_hll = K.encode_hll_key(U, 3)
    check_record(k_hll, hll.new(hll.MAX_RANK, 5, 1))
    with pytest.raises(InvalidRecord, match="rank"):
        check_record(k_hll, hll.new(hll.MAX_RANK + 1, 5, 1))

    k_z = K.encode_zset_score_key(U, 1.0, b"m")
    check_record(k_z, lww.new(RecordType.ZSET_MEMBER, 5, 1, b""))
    with pytest.raises(InvalidRecord, match="no payload"):
        check_record(k_z, lww.new(RecordType.ZSET_MEMBER, 5, 1, b"1.0"))

    k_x = K.encode_stream_key(U, 5, 1)
    check_record(k_x, stream.new([(b"f", b"v")], 5, 1))
    check_record(k_x, stream.tombstone(6, 1))
    with pytest.raises(InvalidRecord, match="stream-entry payload"):
        check_record(k_x, lww.new(RecordType.STREAM_ENTRY, 5, 1, b"\x02junk"))


def test_retired_and_unknown_tags_are_refused():
    rec = lww.new(RecordType.LIST, 5, 1, b"blob")
    retired = K.pid_prefix(partition_of(U)) + K.TAG_LIST_RETIRED + K.encode_varint(1) + U
    with pytest.raises(InvalidRecord, match="retired key tag"):
        check_record(retired, rec)
    with pytest.raises(InvalidRecord, match="unknown key tag"):
        check_record(K.pid_prefix(partition_of(U)) + b"?" + U, rec)


@given(user=st.binary(max_size=8), flags=st.integers(0, 255), size=st.integers(17, 30),
       own_pid=st.booleans())
def test_check_flat_shortcut_is_the_string_row(user, flags, size, own_pid):
    """check_flat's inline acceptance of plain string records is exactly what the string
    row accepts (the general path) for those records."""
    assert registry.STRING.code == 0x73 and not registry.STRING.head_flag
    assert RecordType.STRING in registry.STRING.rtypes
    pid = partition_of(user) if own_pid else (partition_of(user) + 1) % 4096
    key = pid.to_bytes(2, "big") + b"s" + user
    value = (bytes((flags,)) + bytes(18) + b"v" * 12)[:size]
    try:
        check_record(key, value)
        ok = True
    except InvalidRecord:
        ok = False
    if ok:
        assert check_flat([key, value]) == [(key, value)]
    else:
        with pytest.raises(BadRecord):
            check_flat([key, value])


# -- a new kind is one row -------------------------------------------------------------------

@pytest.fixture
def install():
    """Put a row in its tag's slot of ``registry.BY_CODE`` for one test."""
    codes = []

    def put(kind: registry.RecordKind) -> None:
        assert BY_CODE[kind.code] is None
        codes.append(kind.code)
        BY_CODE[kind.code] = kind

    yield put
    for c in codes:
        BY_CODE[c] = None


def test_a_new_kind_is_one_row_that_merge_validation_and_the_sweep_read(install):
    """A hypothetical stream element kind under the free tag b'k', gated by its stream's
    head: installing its row (and nothing else) makes merge dispatch to it, validation
    accept its records and refuse others, and the sweep gate it by the stream's head."""
    calls = []

    def spy_merge(a: bytes, b: bytes) -> bytes:
        calls.append((a, b))
        return lww.merge(a, b)

    def encode(userkey: bytes, group: bytes) -> bytes:
        return K.collection_prefix(b"k", userkey) + group

    def decode(ikey: bytes) -> tuple[bytes, bytes]:
        userkey = K.user_key_of(ikey)
        return userkey, ikey[len(K.collection_prefix(b"k", userkey)):]

    group = dataclasses.replace(registry.STREAM_ENTRY, tag=b"k", name="hypothetical", encode=encode,
                                decode=decode, user_key=lambda ik: decode(ik)[0],
                                prefix=lambda uk: K.collection_prefix(b"k", uk), merge=spy_merge,
                                check_payload=lambda rec: None)
    ikey = encode(U, b"grp")
    with pytest.raises(InvalidRecord, match="unknown key tag"):
        check_record(ikey, lww.new(RecordType.STREAM_ENTRY, 5, 1, b"x"))
    install(group)

    a, b = lww.new(RecordType.STREAM_ENTRY, 5, 1, b"x"), lww.new(RecordType.STREAM_ENTRY, 6, 1, b"y")
    assert merge(ikey, a, b) is b and calls == [(a, b)]
    assert check_record(ikey, a) is group
    replication_check(ikey, a)
    with pytest.raises(InvalidRecord, match="does not belong"):
        check_record(ikey, lww.new(RecordType.LIST, 5, 1, b"x"))

    now, grace = 10_000, 1_000
    hd = head.tombstone(head.new(CT.STREAM, 1 << 16, 1), 2 << 16, 1)  # DEL long ago
    sweep = PartitionSweep(now, grace)
    for k, r in sorted([(K.encode_head_key(U), hd), (ikey, a)]):
        sweep.feed(k, r)
    assert sorted(sweep.finish()) == sorted([K.encode_head_key(U), ikey])


@given(h=head_records())
def test_heads_are_key_records_counted_by_the_sweep(h):
    sweep = PartitionSweep(10**6, 0)
    sweep.feed(K.encode_head_key(U), h)
    sweep.finish()
    assert sweep.live_keys == head.present(h, 10**6, False)  # (alone: a live stream's or HyperLogLog's)
