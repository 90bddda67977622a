"""Hold marekvs.core to the frozen golden vectors in crates_ref/format/*.jsonl.

Every vector is checked in both directions: encoding the inputs must give the
expected bytes, and decoding the bytes must give back the inputs.
"""

from __future__ import annotations

import importlib.util
import json
import math
import struct
from pathlib import Path

import pytest
import xxhash

from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core import partition as P

ROOT = Path(__file__).resolve().parents[2]
FORMAT = ROOT / "crates_ref" / "format"
VECTOR_FILES = ("partition.jsonl", "hashtags.jsonl", "keys.jsonl", "varint.jsonl",
                "scores.jsonl", "member_scores.jsonl", "envelope.jsonl", "kinds.jsonl", "acl_users.jsonl",
                "functions.jsonl")


def load(name: str) -> list[dict]:
    with open(FORMAT / name, encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def params(name: str, idkey=None):
    rows = load(name)
    ids = []
    for i, r in enumerate(rows):
        label = r.get(idkey) if idkey else None
        ids.append(f"{i}-{label}" if isinstance(label, str) else str(i))
    return pytest.mark.parametrize("v", rows, ids=ids)


def H(s: str) -> bytes:
    return bytes.fromhex(s)


def parse_score(s: str) -> float:
    return float(s)  # float() accepts "+inf", "-inf", "-0.0", "5e-324"


# -- files and generator ----------------------------------------------------------------

@pytest.mark.parametrize("name", VECTOR_FILES)
def test_vector_file_present_and_documented(name):
    rows = load(name)
    assert len(rows) >= 10
    assert f"`{name}`" in (ROOT / "crates_ref" / "README.md").read_text(encoding="utf-8")


def test_generator_output_is_up_to_date():
    spec = importlib.util.spec_from_file_location("_marekvs_format_generate", FORMAT / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    built = gen.build()  # also re-runs the independent cross-checks and anchors
    assert sorted(built) == sorted(VECTOR_FILES)
    for name, text in built.items():
        assert (FORMAT / name).read_text(encoding="utf-8") == text, f"{name} is stale"


# -- partition ----------------------------------------------------------------------------

@params("partition.jsonl", "name")
def test_partition_vector(v):
    key, hashed = H(v["key_hex"]), H(v["hashed_hex"])
    assert len(key) == v["len"]
    assert P.hash_tag(key) == hashed
    h = int(v["xxh3_64"])
    assert f"{h:016x}" == v["xxh3_64_hex"]
    assert xxhash.xxh3_64_intdigest(hashed) == h
    assert h >> 52 == v["pid"] and f"{v['pid']:04x}" == v["pid_hex"]
    assert P.partition_of(key) == v["pid"]
    assert 0 <= v["pid"] < P.PARTITIONS
    if "key_text" in v:
        assert v["key_text"].encode("utf-8") == key
    # the string key carries the pid, and decodes back
    ikey = K.encode_string_key(key)
    assert K.pid_of_ikey(ikey) == v["pid"]
    assert K.decode_string_key(ikey) == key


def test_partition_samples_cover_required_kinds():
    keys = [H(v["key_hex"]) for v in load("partition.jsonl")]
    assert b"" in keys
    assert any(b"\x00" in k for k in keys) and any(b"\xff" in k for k in keys)
    assert any(len(k) > 240 for k in keys)
    assert any(k.decode("utf-8", "replace") != k.decode("ascii", "replace") for k in keys)


# -- hash tags ------------------------------------------------------------------------------

HASHTAGS = load("hashtags.jsonl")


@pytest.mark.parametrize("v", [r for r in HASHTAGS if r["kind"] == "case"],
                         ids=lambda r: r.get("key_text", r["key_hex"]) or "<empty>")
def test_hashtag_case(v):
    key, hashed = H(v["key_hex"]), H(v["hashed_hex"])
    assert P.hash_tag(key) == hashed
    assert (hashed != key) == v["tagged"]
    assert P.partition_of(key) == v["pid"]
    assert P.partition_of(key) == xxhash.xxh3_64_intdigest(hashed) >> 52
    # the hashed bytes never contain '}', so hash_tag is idempotent: a tagged key lands
    # exactly where a plain key made of its tag bytes lands
    assert P.hash_tag(hashed) == hashed
    assert P.partition_of(hashed) == v["pid"]


@pytest.mark.parametrize("v", [r for r in HASHTAGS if r["kind"] == "same_partition"],
                         ids=lambda r: r["note"])
def test_hashtag_same_partition(v):
    pids = {P.partition_of(H(k)) for k in v["keys_hex"]}
    assert pids == {v["pid"]}
    # and every internal key of these user keys starts with the same pid prefix
    for k in v["keys_hex"]:
        uk = H(k)
        for ikey in (K.encode_string_key(uk), K.encode_head_key(uk),
                     K.encode_hash_field_key(uk, b"f"), K.encode_list_key(uk, K.LIST_CENTER)):
            assert ikey[:2] == K.pid_prefix(v["pid"])


def test_hashtag_required_cases_present():
    texts = {r.get("key_text") for r in HASHTAGS if r["kind"] == "case"}
    for t in ("foo{bar}baz", "{bar}", "{}", "{}{bar}", "foo{", "foo}{bar}", "{{bar}}",
              "{bar}{zap}", "a{b}{c}", "", "{ }", "{a{b}c}"):
        assert t in texts, t
    by_text = {r.get("key_text"): r for r in HASHTAGS if r["kind"] == "case"}
    # the Redis keyHashSlot corner cases, stated literally
    assert H(by_text["{}{bar}"]["hashed_hex"]) == b"{}{bar}"
    assert H(by_text["{{bar}}"]["hashed_hex"]) == b"{bar"
    assert H(by_text["foo}{bar}"]["hashed_hex"]) == b"bar"
    assert H(by_text["{ }"]["hashed_hex"]) == b" "


# -- internal keys -----------------------------------------------------------------------------

def _encode(v: dict, uk: bytes) -> bytes:
    lay = v["layout"]
    if lay == "string":
        return K.encode_string_key(uk)
    if lay == "head":
        return K.encode_head_key(uk)
    if lay == "hash":
        return K.encode_hash_field_key(uk, H(v["field_hex"]))
    if lay == "set":
        return K.encode_set_member_key(uk, H(v["member_hex"]))
    if lay == "zset":
        return K.encode_zset_member_key(uk, H(v["member_hex"]))
    if lay == "zscore":
        return K.encode_zset_score_key(uk, parse_score(v["score"]), H(v["member_hex"]))
    if lay == "list":
        return K.encode_list_key(uk, int(v["pos"]))
    if lay == "hll":
        return K.encode_hll_key(uk, v["bucket"])
    if lay == "stream":
        return K.encode_stream_key(uk, int(v["ms"]), int(v["seq"]))
    if lay == "stream-counters":
        return K.encode_stream_counter_key(uk, v["origin"])
    if lay == "stream-group":
        return K.encode_group_key(uk, H(v["group_hex"]))
    if lay == "group-consumer":
        return K.encode_consumer_key(uk, H(v["group_hex"]), H(v["consumer_hex"]))
    if lay == "group-pending":
        return K.encode_pending_key(uk, H(v["group_hex"]), int(v["ms"]), int(v["seq"]))
    if lay == "user":
        return K.encode_user_key(uk)
    if lay == "function":
        return K.encode_function_key(uk)
    raise AssertionError(f"unknown layout {lay}")


def _check_decode(v: dict, uk: bytes, ikey: bytes) -> None:
    lay = v["layout"]
    if lay == "string":
        assert K.decode_string_key(ikey) == uk
    elif lay == "head":
        assert K.decode_head_key(ikey) == uk
    elif lay == "hash":
        assert K.decode_hash_field_key(ikey) == (uk, H(v["field_hex"]))
    elif lay == "set":
        assert K.decode_set_member_key(ikey) == (uk, H(v["member_hex"]))
    elif lay == "zset":
        assert K.decode_zset_member_key(ikey) == (uk, H(v["member_hex"]))
    elif lay == "zscore":
        u, score, m = K.decode_zset_score_key(ikey)
        want = parse_score(v["score"])
        assert (u, m) == (uk, H(v["member_hex"]))
        assert score == want
        assert math.copysign(1.0, score) == (1.0 if want == 0 else math.copysign(1.0, want))
        assert struct.pack(">d", want).hex() == v["score_bits_hex"]
    elif lay == "list":
        assert K.decode_list_key(ikey) == (uk, int(v["pos"]))
    elif lay == "hll":
        assert K.decode_hll_key(ikey) == (uk, v["bucket"])
    elif lay == "stream":
        assert K.decode_stream_key(ikey) == (uk, int(v["ms"]), int(v["seq"]))
    elif lay == "stream-counters":
        assert K.decode_stream_counter_key(ikey) == (uk, v["origin"])
    elif lay == "stream-group":
        assert K.decode_group_key(ikey) == (uk, H(v["group_hex"]))
    elif lay == "group-consumer":
        assert K.decode_consumer_key(ikey) == (uk, H(v["group_hex"]), H(v["consumer_hex"]))
    elif lay == "group-pending":
        assert K.decode_pending_key(ikey) == (uk, H(v["group_hex"]), int(v["ms"]), int(v["seq"]))
    elif lay == "user":
        assert K.decode_user_key(ikey) == uk
    elif lay == "function":
        assert K.decode_function_key(ikey) == uk


TAGS = {"string": K.TAG_STRING, "head": K.TAG_HEAD, "hash": K.TAG_HASH, "set": K.TAG_SET,
        "zset": K.TAG_ZSET, "zscore": K.TAG_ZSCORE, "list": K.TAG_LIST, "hll": K.TAG_HLL,
        "stream": K.TAG_STREAM, "stream-counters": K.TAG_STREAM_COUNTER, "stream-group": K.TAG_GROUP,
        "group-consumer": K.TAG_CONSUMER, "group-pending": K.TAG_PENDING, "user": K.TAG_USER,
        "function": K.TAG_FUNCTION}


@params("keys.jsonl", "layout")
def test_key_vector(v):
    uk = H(v["userkey_hex"])
    want = H(v["ikey_hex"])
    assert TAGS[v["layout"]] == v["tag"].encode()
    ikey = _encode(v, uk)
    assert ikey == want
    _check_decode(v, uk, want)
    assert K.pid_of_ikey(want) == v["pid"] == P.partition_of(uk)
    assert K.tag_of_ikey(want) == v["tag"].encode()
    assert K.user_key_of(want) == uk
    assert K.encode_varint(len(uk)).hex() == v["klen_hex"]
    if v["layout"] not in ("string", "user", "function"):  # (no collection: the name is the rest of the key)
        prefix = H(v["prefix_hex"])
        assert K.collection_prefix(v["tag"].encode(), uk) == prefix
        assert want.startswith(prefix)
        assert prefix == K.pid_prefix(v["pid"]) + v["tag"].encode() + H(v["klen_hex"]) + uk


def test_key_vectors_cover_every_layout_and_klen_width():
    rows = load("keys.jsonl")
    assert {r["layout"] for r in rows} == set(TAGS)
    for lay in TAGS:
        lens = {len(H(r["userkey_hex"])) for r in rows if r["layout"] == lay}
        assert {127, 128, 300} <= lens, lay
    klens = {len(H(r["klen_hex"])) for r in rows}
    assert klens == {1, 2}
    # the retired whole-list tag is reserved and used by no layout
    assert K.TAG_LIST_RETIRED == b"l"
    assert all(H(r["ikey_hex"])[2:3] != b"l" for r in rows)


# -- varint --------------------------------------------------------------------------------------

@params("varint.jsonl", "value")
def test_varint_vector(v):
    n, b = int(v["value"]), H(v["hex"])
    assert len(b) == v["len"]
    assert K.encode_varint(n) == b
    assert K.decode_varint(b) == (n, len(b))
    assert K.decode_varint(b"\xaa" + b + b"tail", 1) == (n, 1 + len(b))


def test_varint_required_values_present():
    values = {int(r["value"]) for r in load("varint.jsonl")}
    assert {0, 1, 127, 128, 255, 300, 16383, 16384, 2**32, 2**63 - 1} <= values


# -- scores ---------------------------------------------------------------------------------------

SCORES = load("scores.jsonl")


@pytest.mark.parametrize("v", SCORES, ids=lambda r: r["score"])
def test_score_vector(v):
    x = parse_score(v["score"])
    assert struct.pack(">d", x).hex() == v["bits_hex"]
    b = H(v["hex"])
    assert len(b) == 8
    assert K.encode_score(x) == b
    d = K.decode_score(b)
    assert d == parse_score(v["decoded"]) == x
    assert math.copysign(1.0, d) == math.copysign(1.0, parse_score(v["decoded"]))
    if x == 0:
        assert math.copysign(1.0, d) == 1.0  # -0.0 normalised


def test_score_hex_order_is_numeric_order():
    by_hex = sorted(SCORES, key=lambda r: H(r["hex"]))
    by_num = sorted(SCORES, key=lambda r: parse_score(r["score"]))
    assert [parse_score(r["score"]) for r in by_hex] == [parse_score(r["score"]) for r in by_num]
    assert [r["order"] for r in by_hex] == sorted(r["order"] for r in SCORES)
    # -0.0 and 0.0 encode identically
    zeros = {r["hex"] for r in SCORES if parse_score(r["score"]) == 0}
    assert zeros == {"8000000000000000"}


# -- zset member scores (the dot values of 'z' records) -------------------------------------

MEMBER_SCORES = load("member_scores.jsonl")


@pytest.mark.parametrize("v", MEMBER_SCORES, ids=lambda r: r["score"])
def test_member_score_vector(v):
    from marekvs.core import orswot, zset

    x = parse_score(v["score"])
    assert struct.pack(">d", x).hex() == v["bits_hex"]
    value = H(v["value_hex"])
    assert len(value) == 8 and zset.encode_value(x) == value
    assert zset.decode_value(value) == x
    rec = H(v["record_hex"])
    assert orswot.new(env.RecordType.ZSET_MEMBER, int(v["hlc"]), v["origin"], value) == rec
    assert zset.score_of(rec) == x
    assert math.copysign(1.0, zset.score_of(rec)) == (1.0 if x == 0 else math.copysign(1.0, x))
    e, payload = env.unpack(rec)
    assert e.rtype == env.RecordType.ZSET_MEMBER and not e.tombstone
    assert orswot.from_bytes(payload).live == (((int(v["hlc"]), v["origin"]), value),)


def test_member_score_negative_zero_is_stored_as_zero():
    rows = {r["score"]: r for r in MEMBER_SCORES}
    assert rows["-0.0"]["value_hex"] == rows["0.0"]["value_hex"] == "0000000000000000"
    assert rows["-0.0"]["record_hex"] == rows["0.0"]["record_hex"]


def test_score_required_values_present():
    got = {r["score"] for r in SCORES}
    for s in ("-inf", "-1e+308", "-1.5", "-5e-324", "-0.0", "0.0", "5e-324", "1.5",
              "1e+308", "+inf"):
        assert s in got, s


def test_score_nan_rejected():
    with pytest.raises(ValueError):
        K.encode_score(math.nan)
    with pytest.raises(ValueError):
        K.encode_zset_score_key(b"k", math.nan, b"m")


# -- envelope ---------------------------------------------------------------------------------------

@params("envelope.jsonl", "name")
def test_envelope_vector(v):
    value = H(v["hex"])
    payload = H(v["payload_hex"])
    hlc, ttl, origin = int(v["hlc"]), int(v["ttl_deadline_ms"]), v["origin"]
    assert len(value) == env.ENVELOPE_SIZE + len(payload)
    # encode
    flags = env.make_flags(v["rtype"], tombstone=v["tombstone"], head=v["head"])
    assert flags == v["flags"]
    assert env.pack(flags, hlc, origin, ttl, payload) == value
    assert hlc == (int(v["hlc_phys_ms"]) << 16) | v["hlc_logical"]
    # decode
    e, p = env.unpack(value)
    assert (e.flags, e.hlc, e.origin, e.ttl_deadline_ms, p) == (flags, hlc, origin, ttl, payload)
    assert env.unpack_header(value) == e
    assert (e.tombstone, e.head, e.rtype) == (v["tombstone"], v["head"], v["rtype"])
    assert env.RecordType.NAMES[e.rtype] == v["rtype_name"]
    assert e.version == (hlc, origin)
    # sliced accessors
    assert env.flags_of(value) == flags
    assert env.rtype_of(value) == v["rtype"]
    assert env.is_tombstone(value) == v["tombstone"]
    assert env.hlc_of(value) == hlc
    assert env.origin_of(value) == origin
    assert env.ttl_of(value) == ttl
    assert env.payload_of(value) == payload
    assert env.version_key(value) == int(v["version_key"]) == (hlc << 16) | origin
    # struct-level cross-check of the header layout
    assert struct.unpack(">BQHQ", value[:19]) == (flags, hlc, origin, ttl)


def test_envelope_vectors_cover_all_flag_combos_and_edges():
    rows = load("envelope.jsonl")
    combos = {(r["rtype"], r["tombstone"], r["head"]) for r in rows}
    assert combos == {(t, a, b) for t in range(8) for a in (False, True) for b in (False, True)}
    hlcs = {int(r["hlc"]) for r in rows}
    ttls = {int(r["ttl_deadline_ms"]) for r in rows}
    origins = {r["origin"] for r in rows}
    assert {0, 2**64 - 1} <= hlcs and {0, 2**64 - 1} <= ttls and {0, 0xFFFF} <= origins


# -- the record-kind registry --------------------------------------------------------------

KINDS = load("kinds.jsonl")


@pytest.mark.parametrize("v", KINDS, ids=lambda r: r["tag"])
def test_kind_vector(v):
    from marekvs.core import head, hll, lww, orswot, pncounter, registry, stream, streamgroup

    tag = v["tag"].encode()
    assert H(v["tag_hex"]) == tag and len(tag) == 1
    if v["retired"]:
        assert tag in registry.RETIRED and tag not in registry.BY_TAG
        return
    kind = registry.BY_TAG[tag]
    lattices = {"pncounter": pncounter.merge, "head": head.merge, "orswot": orswot.merge,
                "lww": lww.merge, "hll": hll.merge, "counters": stream.merge_counters,
                "group": streamgroup.merge_group, "consumer": streamgroup.merge_consumer,
                "pending": streamgroup.merge_pending}
    gates = {"top-live-dot": orswot.gate_clock, "hlc": env.hlc_of, "generation": hll.gate_clock, None: None}
    assert kind.name == v["name"] and sorted(kind.rtypes) == v["rtypes"]
    assert kind.is_key == (v["role"] == "key") and kind.head_flag == v["head_flag"]
    assert kind.is_node == (v["role"] == "node")
    assert kind.merge is lattices[v["lattice"]] and kind.sweep.value == v["sweep"]
    assert kind.ctype == v["ctype"] and kind.gate_clock is gates[v["gate"]]
    assert v["key"].startswith(f"[pid:u16] '{v['tag']}' ")


def test_kind_vectors_cover_the_registry_and_the_key_layouts():
    from marekvs.core import registry

    assert [v["tag"].encode() for v in KINDS if not v["retired"]] == [k.tag for k in registry.KINDS]
    assert {v["tag"].encode() for v in KINDS if v["retired"]} == set(registry.RETIRED)
    layouts = {r["tag"] for r in load("keys.jsonl")}
    assert layouts == {v["tag"] for v in KINDS if not v["retired"]}


# -- ACL user records -------------------------------------------------------------------------------

@params("acl_users.jsonl", "name")
def test_acl_user_vector(v):
    """The record ACL SETUSER writes (envelope of type 0, payload [fmt 1][rules]) or ACL
    DELUSER writes (a tombstone), its key, and LWW between two writes."""
    from marekvs.core import acluser, lww, registry

    name, rec = H(v["user_hex"]), H(v["record_hex"])
    hlc, origin = int(v["hlc"]), v["origin"]
    assert K.encode_user_key(name).hex() == v["ikey_hex"] and K.decode_user_key(H(v["ikey_hex"])) == name
    rules = None if v["rules"] is None else v["rules"].encode()
    want = acluser.new(rules, hlc, origin) if rules is not None else acluser.tombstone(hlc, origin)
    assert want == rec and acluser.rules_of(rec) == rules
    assert rec[:19] == struct.pack(">BQHQ", 1 if rules is None else 0, hlc, origin, 0)
    assert rec[19:] == (b"" if rules is None else b"\x01" + rules)
    assert registry.check_record(H(v["ikey_hex"]), rec) is registry.ACL_USER
    newer = H(v["newer_hex"])
    assert lww.merge(rec, newer) == lww.merge(newer, rec) == H(v["merged_hex"])


# -- function libraries (DATA_MODEL.md section 17) -------------------------------------------

@params("functions.jsonl", "name")
def test_function_library_vector(v):
    from marekvs.core import funclib, registry

    name = v["name"].encode()
    ikey, value = H(v["ikey_hex"]), H(v["value_hex"])
    assert K.encode_function_key(name) == ikey and K.decode_function_key(ikey) == name
    assert K.pid_of_ikey(ikey) == P.partition_of(name)
    hlc, origin = int(v["hlc"]), v["origin"]
    if v["kind"] == "live":
        code = H(v["code_hex"])
        assert funclib.new(code, hlc, origin) == value
        assert funclib.code_of(value, 0) == code
    else:
        assert funclib.tombstone(hlc, origin) == value
        assert funclib.code_of(value, 0) is None
    assert registry.check_record(ikey, value) is registry.FUNCTION_LIBRARY
