#!/usr/bin/env python3
"""Generate the golden vectors of marekvs's frozen on-disk / on-wire format.

    python crates_ref/format/generate.py           # (re)write the *.jsonl files
    python crates_ref/format/generate.py --check   # exit 1 if a file is stale

Every vector is computed twice and the two must agree before anything is written:

1. with the project's code (``marekvs.core.partition / keys / envelope``), and
2. with an independent reference written here from the spec alone: a byte-by-byte
   transcription of Redis's ``keyHashSlot`` hash-tag scan, ``xxhash.xxh3_64_intdigest``
   called directly, a hand-written LEB128 loop, ``int.to_bytes`` key assembly, and
   ``struct``-level IEEE-754 bit twiddling for scores and envelopes.

The record-kind table (``kinds.jsonl``) is checked the same way: the registry's rows
against a transcription of the table in ``crates_ref/DATA_MODEL.md``.

On top of that a handful of literal, hand-derived byte strings (see ``_ANCHORS``) pin
the encoders to values worked out on paper, so the vectors are not merely circular.

Conventions of the output (see crates_ref/README.md): one JSON object per line, byte
strings hex-encoded (lowercase, ``*_hex``), u64-range integers as decimal *strings*
(JSON numbers are not exact beyond 2**53 in many languages), small integers as numbers,
doubles as their Python ``repr`` string plus their exact IEEE-754 bits.
"""

from __future__ import annotations

import json
import math
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import xxhash  # noqa: E402

from marekvs.core import envelope as env  # noqa: E402
from marekvs.core import keys as K  # noqa: E402
from marekvs.core import partition as P  # noqa: E402

U64_MAX = (1 << 64) - 1


# =====================================================================================
# Independent reference implementation (spec transcription; shares no code with core)
# =====================================================================================

def ref_hash_tag(key: bytes) -> bytes:
    """Redis cluster.c keyHashSlot, transcribed loop for loop."""
    keylen = len(key)
    s = 0
    while s < keylen:
        if key[s] == 0x7B:  # '{'
            break
        s += 1
    if s == keylen:
        return key
    e = s + 1
    while e < keylen:
        if key[e] == 0x7D:  # '}'
            break
        e += 1
    if e == keylen or e == s + 1:
        return key
    return key[s + 1 : e]


def ref_xxh3(data: bytes) -> int:
    return xxhash.xxh3_64_intdigest(data)


def ref_pid(key: bytes) -> int:
    return ref_xxh3(ref_hash_tag(key)) >> 52


def ref_varint(n: int) -> bytes:
    out = []
    while True:
        low = n % 128
        n //= 128
        if n == 0:
            out.append(low)
            return bytes(out)
        out.append(low + 128)


def ref_score(x: float) -> bytes:
    if x != x:
        raise ValueError("NaN")
    if x == 0:
        x = 0.0
    bits = int.from_bytes(struct.pack(">d", x), "big")
    if x < 0 or (x == 0 and math.copysign(1.0, x) < 0):
        bits = bits ^ U64_MAX  # bitwise NOT of all 64 bits
    else:
        bits = bits | 0x8000000000000000  # flip the (clear) sign bit
    return bits.to_bytes(8, "big")


def ref_u16(n: int) -> bytes:
    return n.to_bytes(2, "big")


def ref_u64(n: int) -> bytes:
    return n.to_bytes(8, "big")


def ref_prefix(tag: bytes, uk: bytes) -> bytes:
    return ref_u16(ref_pid(uk)) + tag + ref_varint(len(uk)) + uk


def ref_envelope(flags: int, hlc: int, origin: int, ttl: int, payload: bytes = b"") -> bytes:
    return bytes([flags]) + ref_u64(hlc) + ref_u16(origin) + ref_u64(ttl) + payload


def ref_flags(rtype: int, tombstone: bool, head: bool) -> int:
    return rtype * 4 + (1 if tombstone else 0) + (2 if head else 0)


# Literal byte strings derived by hand (comments show the derivation).
_ANCHORS = {
    # a zset member's dot value: binary64 big-endian; 1.5 = 0x3FF8 << 48; -0.0 stored as +0.0
    "member value(1.5)": (lambda: ref_member_value(1.5), bytes.fromhex("3ff8000000000000")),
    "member value(-0.0)": (lambda: ref_member_value(-0.0), bytes.fromhex("0000000000000000")),
    # XXH3-64 (seed 0) known answers: empty input, and "abc".
    "xxh3('')": (lambda: ref_xxh3(b""), 0x2D06800538D394C2),
    "xxh3('abc')": (lambda: ref_xxh3(b"abc"), 0x78AF5F94892F3950),
    # LEB128: 300 = 0b10_0101100 -> 0xAC 0x02; 128 -> 0x80 0x01; 16384 -> 80 80 01
    "varint(0)": (lambda: K.encode_varint(0), bytes.fromhex("00")),
    "varint(127)": (lambda: K.encode_varint(127), bytes.fromhex("7f")),
    "varint(128)": (lambda: K.encode_varint(128), bytes.fromhex("8001")),
    "varint(300)": (lambda: K.encode_varint(300), bytes.fromhex("ac02")),
    "varint(16384)": (lambda: K.encode_varint(16384), bytes.fromhex("808001")),
    # scores: 1.5 = 0x3FF8000000000000 -> sign bit set -> BFF8000000000000
    "score(1.5)": (lambda: K.encode_score(1.5), bytes.fromhex("bff8000000000000")),
    # -1.5 = 0xBFF8000000000000 -> NOT -> 4007FFFFFFFFFFFF
    "score(-1.5)": (lambda: K.encode_score(-1.5), bytes.fromhex("4007ffffffffffff")),
    # +0.0 = 0 -> 8000000000000000; -0.0 is normalised to +0.0 first
    "score(0.0)": (lambda: K.encode_score(0.0), bytes.fromhex("8000000000000000")),
    "score(-0.0)": (lambda: K.encode_score(-0.0), bytes.fromhex("8000000000000000")),
    # +inf = 7FF0000000000000 -> FFF0000000000000; -inf = FFF0... -> NOT -> 000FFF...
    "score(+inf)": (lambda: K.encode_score(math.inf), bytes.fromhex("fff0000000000000")),
    "score(-inf)": (lambda: K.encode_score(-math.inf), bytes.fromhex("000fffffffffffff")),
    # envelope: zset-member (3) tombstone -> flags 3<<2|1 = 0x0D; hlc = 1<<16|2;
    # origin 7; ttl 0; payload "ab"
    "envelope(zset,tomb)": (
        lambda: env.pack(env.make_flags(3, tombstone=True), (1 << 16) | 2, 7, 0, b"ab"),
        bytes.fromhex("0d" "0000000000010002" "0007" "0000000000000000" "6162"),
    ),
    # envelope: head (bit1) of a hash (rtype 1) -> 1<<2|2 = 0x06, all-ones fields
    "envelope(head,max)": (
        lambda: env.pack(env.make_flags(1, head=True), U64_MAX, 0xFFFF, U64_MAX),
        bytes.fromhex("06" + "ff" * 8 + "ffff" + "ff" * 8),
    ),
    # ACL user "" : pid 0x2D0, tag 'U' = 0x55, no name bytes
    "user_key('')": (lambda: K.encode_user_key(b""), bytes.fromhex("02d055")),
    # string key of "" : pid(xxh3('')) = 0x2D06800538D394C2 >> 52 = 0x2D0 -> 02 d0 73
    "string_key('')": (lambda: K.encode_string_key(b""), bytes.fromhex("02d073")),
    "head_key('')": (lambda: K.encode_head_key(b""), bytes.fromhex("02d04d00")),
}


def check_anchors() -> None:
    for name, (fn, want) in _ANCHORS.items():
        got = fn()
        if got != want:
            raise AssertionError(f"anchor {name}: got {got!r}, want {want!r}")


def _agree(what: str, ours, ref) -> None:
    if ours != ref:
        raise AssertionError(f"core and reference disagree on {what}: core={ours!r} ref={ref!r}")


# =====================================================================================
# Vector builders
# =====================================================================================

def _text(b: bytes) -> str | None:
    """A readable rendering when the bytes are printable UTF-8 (informational only)."""
    try:
        s = b.decode("utf-8")
    except UnicodeDecodeError:
        return None
    if all(c.isprintable() for c in s) and len(s) <= 64:
        return s
    return None


def _pattern(n: int) -> bytes:
    return bytes((i * 31 + 7) & 0xFF for i in range(n))


def partition_vectors() -> list[dict]:
    keys: list[tuple[str, bytes]] = [
        ("empty", b""),
        ("a", b"a"),
        ("abc", b"abc"),
        ("foo", b"foo"),
        ("bar", b"bar"),
        ("user1", b"user1"),
        ("user:1000", b"user:1000"),
        ("user:1001", b"user:1001"),
        ("session:abcdef", b"session:abcdef"),
        ("counter", b"counter"),
        ("mylist", b"mylist"),
        ("myhash", b"myhash"),
        ("key:with:colons:and-dashes_and_underscores", b"key:with:colons:and-dashes_and_underscores"),
        ("space", b"hello world"),
        ("nul", b"\x00"),
        ("nul-nul", b"\x00\x00"),
        ("ff", b"\xff"),
        ("ff-x4", b"\xff\xff\xff\xff"),
        ("nul-in-middle", b"a\x00b"),
        ("binary-mix", b"\x00\x01\x02\x7f\x80\xfe\xff"),
        ("all-256", bytes(range(256))),
        ("unicode-e-acute", "é".encode()),
        ("unicode-cjk", "键值".encode()),
        ("unicode-emoji", "🔑:1".encode()),
        ("unicode-mixed", "ключ:ünïcödé".encode()),
        ("not-utf8", b"\xc3\x28"),
    ]
    # Lengths that walk every XXH3-64 code path (0, 1-3, 4-8, 9-16, 17-128, 129-240, >240).
    for n in (2, 3, 4, 8, 9, 16, 17, 127, 128, 129, 240, 241, 300, 1024, 4096):
        keys.append((f"len-{n}", _pattern(n)))
    out = []
    seen = set()
    for name, k in keys:
        assert k not in seen, name
        seen.add(k)
        hashed = ref_hash_tag(k)
        h = ref_xxh3(hashed)
        _agree(f"hash_tag({k!r})", P.hash_tag(k), hashed)
        _agree(f"pid({k!r})", P.partition_of(k), h >> 52)
        _agree(f"xxh3 hex({k!r})", xxhash.xxh3_64(hashed).hexdigest(), f"{h:016x}")
        rec = {"name": name, "key_hex": k.hex()}
        t = _text(k)
        if t is not None:
            rec["key_text"] = t
        rec.update({
            "len": len(k),
            "hashed_hex": hashed.hex(),
            "xxh3_64": str(h),
            "xxh3_64_hex": f"{h:016x}",
            "pid": h >> 52,
            "pid_hex": f"{h >> 52:04x}",
        })
        out.append(rec)
    return out


def hashtag_vectors() -> list[dict]:
    cases: list[tuple[bytes, str]] = [
        (b"foo{bar}baz", "tag in the middle"),
        (b"{bar}", "whole key is a tag"),
        (b"{bar}baz", "tag at the start"),
        (b"foo{bar}", "tag at the end"),
        (b"{}", "empty tag: whole key hashed"),
        (b"foo{}bar", "empty tag in the middle: whole key hashed"),
        (b"{}{bar}", "first pair empty: Redis does not look further, whole key hashed"),
        (b"foo{", "no closing brace: whole key hashed"),
        (b"{", "lone open brace"),
        (b"}", "lone close brace"),
        (b"foo}", "close brace only"),
        (b"foo}{bar}", "a '}' before the first '{' is ignored"),
        (b"}{bar}", "leading '}' ignored"),
        (b"{{bar}}", "first '{' to first '}': hashes '{bar'"),
        (b"{bar}{zap}", "only the first pair counts"),
        (b"a{b}{c}", "only the first pair counts"),
        (b"{a{b}c}", "nested: first '{' to first '}': hashes 'a{b'"),
        (b"{{}}", "hashes '{' (non-empty)"),
        (b"{}}", "empty first pair then '}': whole key"),
        (b"{ }", "a space is a non-empty tag"),
        (b"", "empty key: hashed as is"),
        (b"foo", "no braces"),
        (b"foo{bar", "unterminated"),
        (b"foo{b}", "single-byte tag"),
        (b"{\x00}", "NUL tag"),
        (b"x{\xff\xfe}y", "binary tag"),
        ("{ключ}:1".encode(), "utf-8 tag"),
        (b"rate:{user1}:count", "co-located with user1"),
        (b"rate:{user1}:window", "co-located with user1"),
        (b"{user1}", "co-located with user1"),
        (b"user1", "plain key equal to the tag"),
        (b"user:{1000}:followers", "co-located with 1000"),
        (b"user:{1000}:following", "co-located with 1000"),
        (b"1000", "plain key equal to the tag"),
    ]
    out = []
    for k, note in cases:
        hashed = ref_hash_tag(k)
        _agree(f"hash_tag({k!r})", P.hash_tag(k), hashed)
        pid = ref_pid(k)
        _agree(f"pid({k!r})", P.partition_of(k), pid)
        rec = {"kind": "case", "key_hex": k.hex()}
        t = _text(k)
        if t is not None:
            rec["key_text"] = t
        rec.update({
            "hashed_hex": hashed.hex(),
            "tagged": hashed != k,
            "pid": pid,
            "note": note,
        })
        out.append(rec)
    groups = [
        ([b"rate:{user1}:count", b"rate:{user1}:window", b"{user1}", b"user1",
          b"{user1}{other}", b"x}{user1}"], "rate-limiter keys share user1's partition"),
        ([b"user:{1000}:followers", b"user:{1000}:following", b"1000", b"{1000}"],
         "Redis docs example"),
        ([b"{{bar}}", b"{bar"], "tag '{bar' hashes like the key '{bar'"),
        ([b"a{b}{c}", b"b", b"{b}"], "first pair wins"),
        ([b"{ }", b" "], "space tag"),
    ]
    for members, note in groups:
        pids = {ref_pid(m) for m in members}
        assert len(pids) == 1, (members, pids)
        for m in members:
            _agree(f"pid({m!r})", P.partition_of(m), ref_pid(m))
        out.append({"kind": "same_partition", "keys_hex": [m.hex() for m in members],
                    "pid": pids.pop(), "note": note})
    return out


def varint_vectors() -> list[dict]:
    values = [0, 1, 127, 128, 255, 300, 16383, 16384, 2097151, 2097152,
              2**32, 2**63 - 1, 2**64 - 1]
    out = []
    for v in values:
        b = ref_varint(v)
        _agree(f"varint({v})", K.encode_varint(v), b)
        _agree(f"decode varint({v})", K.decode_varint(b), (v, len(b)))
        out.append({"value": str(v), "hex": b.hex(), "len": len(b)})
    return out


def _score_repr(x: float) -> str:
    if math.isinf(x):
        return "+inf" if x > 0 else "-inf"
    return repr(x)


def score_vectors() -> list[dict]:
    scores = [-math.inf, -1.7976931348623157e308, -1e308, -2.0, -1.5, -1.0,
              -2.2250738585072014e-308, -5e-324, -0.0, 0.0, 5e-324,
              2.2250738585072014e-308, 1.0, 1.5, 2.0, 1e308, 1.7976931348623157e308,
              math.inf]
    out = []
    for x in scores:
        b = ref_score(x)
        _agree(f"encode_score({x!r})", K.encode_score(x), b)
        d = K.decode_score(b)
        assert d == x, (x, d)
        if x == 0:
            assert math.copysign(1.0, d) == 1.0, "-0.0 must decode as +0.0"
        out.append({
            "score": _score_repr(x),
            "bits_hex": struct.pack(">d", x).hex(),
            "hex": b.hex(),
            "decoded": _score_repr(d),
            # position in numeric order; -0.0 and 0.0 compare equal and share it
            "order": sorted(set(scores)).index(x),
        })
    # memcmp order must equal numeric order (hand-check, not just trusted).
    by_hex = sorted(out, key=lambda r: bytes.fromhex(r["hex"]))
    assert [r["order"] for r in by_hex] == sorted(r["order"] for r in out)
    return out


def ref_member_value(x: float) -> bytes:
    """A zset member's score as its dot value: binary64 big-endian, -0.0 stored as +0.0."""
    assert not math.isnan(x)
    return struct.pack(">d", 0.0 if x == 0 else x)


def ref_member_record(x: float, hlc: int, origin: int) -> bytes:
    """A zset member record after one ZADD: envelope (record type 3) + an ORSWOT payload
    with one live dot (origin, hlc) whose value is the score, and no covered dot."""
    value = ref_member_value(x)
    payload = bytes((1,)) + origin.to_bytes(2, "big") + hlc.to_bytes(8, "big") + bytes((len(value),)) + value
    payload += bytes((0,))
    return bytes((3 << 2,)) + hlc.to_bytes(8, "big") + origin.to_bytes(2, "big") + bytes(8) + payload


def member_score_vectors() -> list[dict]:
    """The value a zset member record's dots carry (DATA_MODEL.md 6.2): the score as an
    IEEE-754 binary64, big-endian, 8 bytes; -0.0 is stored as +0.0; NaN is never stored.
    Each line also gives the whole record of a first ZADD of that score."""
    from marekvs.core import orswot, zset

    scores = [-math.inf, -1.7976931348623157e308, -2.5, -1.0, -5e-324, -0.0, 0.0, 5e-324, 0.1, 1.0, 1.5,
              3479099956230698.0, 9007199254740993.0, 1e17, 1.7976931348623157e308, math.inf]
    hlc, origin = (1_700_000_000_000 << 16) | 7, 2
    out = []
    for x in scores:
        v = ref_member_value(x)
        _agree(f"zset.encode_value({x!r})", zset.encode_value(x), v)
        rec = ref_member_record(x, hlc, origin)
        _agree(f"member record of {x!r}", orswot.new(env.RecordType.ZSET_MEMBER, hlc, origin, v), rec)
        d = zset.score_of(rec)
        assert d == x and (x != 0 or math.copysign(1.0, d) == 1.0), (x, d)
        out.append({
            "score": _score_repr(x),
            "bits_hex": struct.pack(">d", x).hex(),
            "value_hex": v.hex(),
            "hlc": str(hlc),
            "origin": origin,
            "record_hex": rec.hex(),
        })
    return out


def key_vectors() -> list[dict]:
    uks: list[tuple[str, bytes]] = [
        ("empty", b""),
        ("ascii", b"myhash"),
        ("binary", b"\x00k\xff"),
        ("tagged", b"rate:{user1}:count"),
        ("utf8", "ключ".encode()),
        ("len127", _pattern(127)),
        ("len128", _pattern(128)),
        ("len300", _pattern(300)),
    ]
    elems = [b"", b"f1", b"\x00\xff", "поле".encode()]
    out: list[dict] = []

    def emit(layout: str, tag: bytes, uk_name: str, uk: bytes, ikey: bytes, ref: bytes,
             **inputs) -> None:
        _agree(f"{layout} key of {uk!r} {inputs}", ikey, ref)
        rec = {"layout": layout, "tag": tag.decode(), "userkey_name": uk_name,
               "userkey_hex": uk.hex()}
        rec.update(inputs)
        rec.update({"pid": ref_pid(uk), "klen_hex": ref_varint(len(uk)).hex(),
                    "ikey_hex": ikey.hex()})
        if layout not in ("string", "user", "function"):  # (no klen: the name is the rest of the key)
            rec["prefix_hex"] = ref_prefix(tag, uk).hex()
        out.append(rec)

    for name, uk in uks:
        emit("string", b"s", name, uk, K.encode_string_key(uk),
             ref_u16(ref_pid(uk)) + b"s" + uk)
        emit("head", b"M", name, uk, K.encode_head_key(uk), ref_prefix(b"M", uk))
    # element layouts: every user key with one element, and one user key with all elements
    for name, uk in uks:
        for el in elems if name == "ascii" else elems[1:2]:
            emit("hash", b"h", name, uk, K.encode_hash_field_key(uk, el),
                 ref_prefix(b"h", uk) + el, field_hex=el.hex())
            emit("set", b"S", name, uk, K.encode_set_member_key(uk, el),
                 ref_prefix(b"S", uk) + el, member_hex=el.hex())
            emit("zset", b"z", name, uk, K.encode_zset_member_key(uk, el),
                 ref_prefix(b"z", uk) + el, member_hex=el.hex())
    zs = [(-math.inf, b"m"), (-1.5, b"m"), (-0.0, b"m"), (0.0, b""), (2.5, b"member"),
          (1e308, b"\x00"), (math.inf, b"m")]
    for name, uk in uks:
        for score, m in (zs if name == "ascii" else zs[4:5]):
            emit("zscore", b"Z", name, uk, K.encode_zset_score_key(uk, score, m),
                 ref_prefix(b"Z", uk) + ref_score(score) + m,
                 score=_score_repr(score), score_bits_hex=struct.pack(">d", score).hex(),
                 member_hex=m.hex())
    positions = [0, 1, K.LIST_CENTER - 1, K.LIST_CENTER, K.LIST_CENTER + 1, U64_MAX]
    for name, uk in uks:
        for pos in (positions if name == "ascii" else [K.LIST_CENTER]):
            emit("list", b"q", name, uk, K.encode_list_key(uk, pos),
                 ref_prefix(b"q", uk) + ref_u64(pos), pos=str(pos))
    for name, uk in uks:
        for bucket in ([0, 1, 255, 256, 16383, 65535] if name == "ascii" else [42]):
            emit("hll", b"H", name, uk, K.encode_hll_key(uk, bucket),
                 ref_prefix(b"H", uk) + ref_u16(bucket), bucket=bucket)
    streams = [(0, 0), (0, 1), (1700000000000, 0), (1700000000000, (3 << 20) | 17),
               (1700000000001, 0), (U64_MAX, U64_MAX)]
    for name, uk in uks:
        for ms, seq in (streams if name == "ascii" else streams[3:4]):
            emit("stream", b"x", name, uk, K.encode_stream_key(uk, ms, seq),
                 ref_prefix(b"x", uk) + ref_u64(ms) + ref_u64(seq), ms=str(ms), seq=str(seq))
    # streams beside their entries: per-origin counters and consumer groups
    groups = [b"", b"g", "группа".encode(), _pattern(130)]
    for name, uk in uks:
        for origin in ([0, 1, 255, 256, 65535] if name == "ascii" else [3]):
            emit("stream-counters", b"X", name, uk, K.encode_stream_counter_key(uk, origin),
                 ref_prefix(b"X", uk) + ref_u16(origin), origin=origin)
        for grp in (groups if name == "ascii" else groups[1:2]):
            emit("stream-group", b"g", name, uk, K.encode_group_key(uk, grp),
                 ref_prefix(b"g", uk) + grp, group_hex=grp.hex())
            for cons in ([b"", b"c1", b"\x00\xff"] if name == "ascii" else [b"c1"]):
                emit("group-consumer", b"c", name, uk, K.encode_consumer_key(uk, grp, cons),
                     ref_prefix(b"c", uk) + ref_varint(len(grp)) + grp + cons,
                     group_hex=grp.hex(), consumer_hex=cons.hex())
            for ms, seq in (streams if name == "ascii" else streams[3:4]):
                emit("group-pending", b"p", name, uk, K.encode_pending_key(uk, grp, ms, seq),
                     ref_prefix(b"p", uk) + ref_varint(len(grp)) + grp + ref_u64(ms) + ref_u64(seq),
                     group_hex=grp.hex(), ms=str(ms), seq=str(seq))
    # function libraries: the library name in the string layout (no klen), tag F (the codec
    # takes any bytes; FUNCTION LOAD only makes names of letters, digits and '_')
    for name, uk in uks + [("libname", b"mylib_2")]:
        emit("function", b"F", name, uk, K.encode_function_key(uk), ref_u16(ref_pid(uk)) + b"F" + uk)
    # ACL users: [pid(name)] 'U' [name], no klen (the name is the rest of the key)
    for name, uk in uks:
        ikey = K.encode_user_key(uk)
        _agree(f"user name of {ikey!r}", K.decode_user_key(ikey), uk)
        emit("user", b"U", name, uk, ikey, ref_u16(ref_pid(uk)) + b"U" + uk)
    return out


def ref_user_record(rules: bytes | None, hlc: int, origin: int) -> bytes:
    """An ACL user record (DATA_MODEL.md 16): envelope of record type 0 (tombstone for a
    deleted user) and, when live, the payload [fmt 1][rules]."""
    if rules is None:
        return ref_envelope(ref_flags(0, True, False), hlc, origin, 0)
    return ref_envelope(ref_flags(0, False, False), hlc, origin, 0, b"\x01" + rules)


def acl_user_vectors() -> list[dict]:
    """ACL user records: the key, the rules, the record ACL SETUSER (or DELUSER) writes,
    and the merge of two writes (LWW on (hlc, origin))."""
    from marekvs.core import acluser, lww

    hlc, origin = (1_700_000_000_000 << 16) | 3, 2
    pw = b"5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8"  # sha256("password")
    pw2 = b"ef92b778bafe771e89245b89ecbc08a44a4e166c06659911881f383d4473e94f"  # sha256("password123")
    users = [
        ("default", b"default", b"on nopass ~* &* +@all"),
        ("app", b"app", b"on #" + pw + b" ~app:* resetchannels &news.* -@all +@read +set"),
        ("two-passwords", b"ops", b"on #" + pw + b" #" + pw2 + b" ~* &* +@all -flushall -flushdb"),
        ("selector", b"reporting", b"on #" + pw + b" resetchannels -@all +ping (%R~log:* resetchannels -@all +get)"),
        ("selectors", b"etl", b"on nopass %R~in:* %W~out:* resetchannels -@all +@read (~tmp:* &* +@all) "
                              b"(resetchannels -@all)"),
        ("first-arg", b"legacy", b"on nopass skip-sanitize-payload ~* resetchannels -@all +select|0 +get"),
        ("off", b"nobody", b"off resetchannels -@all"),
        ("empty-name", b"", b"off resetchannels -@all"),
        ("binary-name", b"\xffu\x01", b"off sanitize-payload resetchannels -@all"),
        ("utf8-name", "пользователь".encode(), b"on nopass ~* &* -@all +@pubsub"),
        ("long-name", b"u" * 300, b"off resetchannels -@all"),
        ("deleted", b"gone", None),
    ]
    out = []
    for label, name, rules in users:
        rec = ref_user_record(rules, hlc, origin)
        ours = acluser.new(rules, hlc, origin) if rules is not None else acluser.tombstone(hlc, origin)
        _agree(f"user record {label}", ours, rec)
        _agree(f"user rules {label}", acluser.rules_of(rec), rules)
        acluser.check(rec)
        newer = ref_user_record(b"off resetchannels -@all", hlc + 1, 1)
        _agree(f"user merge {label}", (lww.merge(rec, newer), lww.merge(newer, rec)), (newer, newer))
        out.append({"name": label, "user_hex": name.hex(), "user_text": _text(name),
                    "ikey_hex": K.encode_user_key(name).hex(), "rules": None if rules is None else rules.decode(),
                    "hlc": str(hlc), "origin": origin, "record_hex": rec.hex(),
                    "newer_hex": newer.hex(), "merged_hex": newer.hex()})
    return out


def envelope_vectors() -> list[dict]:
    out: list[dict] = []
    hlc_real = (1700000000123 << 16) | 5

    def emit(name: str, rtype: int, tombstone: bool, head: bool, hlc: int, origin: int,
             ttl: int, payload: bytes = b"") -> None:
        flags = ref_flags(rtype, tombstone, head)
        _agree("make_flags", env.make_flags(rtype, tombstone=tombstone, head=head), flags)
        value = ref_envelope(flags, hlc, origin, ttl, payload)
        _agree(f"envelope {name}", env.pack(flags, hlc, origin, ttl, payload), value)
        # independent struct-level check of the fixed header
        _agree(f"struct header {name}", struct.pack(">BQHQ", flags, hlc, origin, ttl),
               value[:19])
        e, p = env.unpack(value)
        assert (e.flags, e.hlc, e.origin, e.ttl_deadline_ms, p) == (flags, hlc, origin, ttl, payload)
        assert (e.tombstone, e.head, e.rtype) == (tombstone, head, rtype)
        out.append({
            "name": name,
            "flags": flags,
            "tombstone": tombstone,
            "head": head,
            "rtype": rtype,
            "rtype_name": env.RecordType.NAMES[rtype],
            "hlc": str(hlc),
            "hlc_phys_ms": str(hlc >> 16),
            "hlc_logical": hlc & 0xFFFF,
            "origin": origin,
            "ttl_deadline_ms": str(ttl),
            "payload_hex": payload.hex(),
            "version_key": str((hlc << 16) | origin),
            "hex": value.hex(),
        })

    for rtype in range(8):
        rn = env.RecordType.NAMES[rtype]
        for tomb in (False, True):
            for head in (False, True):
                name = rn + ("+tombstone" if tomb else "") + ("+head" if head else "")
                emit(name, rtype, tomb, head, hlc_real, 1, 0)
    emit("all-zero", 0, False, False, 0, 0, 0)
    emit("all-max", 7, True, True, U64_MAX, 0xFFFF, U64_MAX)
    emit("hlc-max", 0, False, False, U64_MAX, 1, 0)
    emit("hlc-phys-max-logical-0", 0, False, False, ((1 << 48) - 1) << 16, 1, 0)
    emit("hlc-logical-max", 0, False, False, (1700000000000 << 16) | 0xFFFF, 1, 0)
    emit("origin-max", 0, False, False, hlc_real, 0xFFFF, 0)
    emit("origin-0", 0, False, False, hlc_real, 0, 0)
    emit("ttl-max", 0, False, False, hlc_real, 2, U64_MAX)
    emit("ttl-real", 0, False, False, hlc_real, 2, 1700000060000)
    emit("string-with-payload", 0, False, False, hlc_real, 3, 0, b"hello")
    emit("binary-payload", 2, False, False, hlc_real, 3, 0, b"\x00\xff\x00")
    emit("tombstone-with-ttl", 1, True, False, hlc_real, 4, 1700000060000)
    return out


# The record-kind registry, transcribed from DATA_MODEL.md §14: one row per tag.
# (tag, name, key after [pid][tag], record types, role, head flag, lattice, payload,
#  sweep rule, collection type of the gating head, clock the head gates by)
REF_KINDS = [
    ("s", "string", "[userkey]", [0, 6], "key", False, "pncounter",
     "raw bytes (type 0) or a PN counter (type 6)", "record", None, None),
    ("M", "head", "[klen][userkey]", [1, 2, 3, 4, 5, 7], "key", True, "head",
     "head: fmt, ctype (= record type), delete clock, last stream id, config", "head", None, None),
    ("h", "hash-field", "[klen][userkey][field]", [1], "element", False, "orswot",
     "ORSWOT element, dot values = field values", "element", 1, "top-live-dot"),
    ("S", "set-member", "[klen][userkey][member]", [2], "element", False, "orswot",
     "ORSWOT element, empty dot values", "element", 2, "top-live-dot"),
    ("z", "zset-member", "[klen][userkey][member]", [3], "element", False, "orswot",
     "ORSWOT element, dot values = scores", "element", 3, "top-live-dot"),
    ("Z", "zset-score", "[klen][userkey][score:u64][member]", [3], "element", False, "lww",
     "none (derived index, confirmed by the member)", "index", 3, "hlc"),
    ("q", "list-element", "[klen][userkey][pos:u64]", [4], "element", False, "lww",
     "raw value bytes", "element", 4, "hlc"),
    ("H", "hll-register", "[klen][userkey][bucket:u16]", [7], "element", False, "hll",
     "the rank (one byte, 0..51), then the generation (u64) when not 0", "element", 7, "generation"),
    ("x", "stream-entry", "[klen][userkey][id_ms:u64][id_seq:u64]", [5], "element", False, "lww",
     "stream entry: fmt, field/value pairs", "element", 5, "hlc"),
    ("X", "stream-counters", "[klen][userkey][origin:u16]", [5], "element", False, "counters",
     "stream counters: fmt 0x21, gen, epoch, entries added, last id, max deleted id", "element", 5, "hlc"),
    ("g", "stream-group", "[klen][userkey][group]", [5], "element", False, "group",
     "consumer group: fmt 0x22, state, destroy clock, base position, positions by entry origin",
     "element", 5, "hlc"),
    ("c", "group-consumer", "[klen][userkey][glen][group][consumer]", [5], "element", False, "consumer",
     "consumer: fmt 0x23, OR element (caps 4/4), dot values = seen-time u64", "element", 5, "hlc"),
    ("p", "group-pending", "[klen][userkey][glen][group][id_ms:u64][id_seq:u64]", [5], "element", False,
     "pending", "pending entry: fmt 0x24, epoch, incarnation, delivered flag, delivery time and count, consumer",
     "element", 5, "hlc"),
    ("U", "acl-user", "[user name]", [0], "node", False, "lww",
     "ACL user: fmt 1, the rules as ACL LIST prints them (none for a deleted user); no TTL", "record",
     None, None),
    ("F", "function-library", "[library name]", [0], "node", False, "lww",
     "fmt u8 = 1, then the library code (FUNCTION LOAD's payload)", "record", None, None),
]
REF_RETIRED = [("l", "whole-list LWW blob")]


def kind_vectors() -> list[dict]:
    from marekvs.core import head, hll, lww, orswot, pncounter, registry, stream, streamgroup

    lattices = {pncounter.merge: "pncounter", head.merge: "head", orswot.merge: "orswot",
                lww.merge: "lww", hll.merge: "hll", stream.merge_counters: "counters",
                streamgroup.merge_group: "group", streamgroup.merge_consumer: "consumer",
                streamgroup.merge_pending: "pending"}
    gates = {orswot.gate_clock: "top-live-dot", env.hlc_of: "hlc", hll.gate_clock: "generation", None: None}
    out: list[dict] = []
    _agree("registry tags", [k.tag.decode() for k in registry.KINDS], [r[0] for r in REF_KINDS])
    for kind, (tag, name, layout, rtypes, role, head_flag, lattice, payload, sweep, ctype,
               gate) in zip(registry.KINDS, REF_KINDS):
        role_of = "key" if kind.is_key else ("node" if kind.is_node else "element")
        core = (kind.name, sorted(kind.rtypes), role_of, kind.head_flag,
                lattices[kind.merge], kind.sweep.value, kind.ctype, gates[kind.gate_clock])
        _agree(f"registry row {tag!r}", core, (name, rtypes, role, head_flag, lattice, sweep, ctype, gate))
        out.append({"tag": tag, "tag_hex": tag.encode().hex(), "name": name, "retired": False,
                    "key": f"[pid:u16] '{tag}' {layout}", "rtypes": rtypes, "role": role,
                    "head_flag": head_flag, "lattice": lattice, "payload": payload, "sweep": sweep,
                    "ctype": ctype, "gate": gate})
    _agree("retired tags", sorted(t.decode() for t in registry.RETIRED), [r[0] for r in REF_RETIRED])
    for tag, what in REF_RETIRED:
        out.append({"tag": tag, "tag_hex": tag.encode().hex(), "name": what, "retired": True})
    return out


def function_vectors() -> list[dict]:
    """Function-library records (DATA_MODEL.md §17): the key, and the whole stored value of
    a live library (envelope type 0, fmt byte 1, the code) or of its tombstone."""
    from marekvs.core import funclib

    out: list[dict] = []
    hlc_real = (1700000000123 << 16) | 5
    libs = [
        ("mylib", b"#!lua name=mylib\nredis.register_function('f', function() return 1 end)\n"),
        ("lib_2", b"#!lua name=lib_2\nredis.register_function{function_name='g', "
                  b"callback=function(keys, args) return keys[1] end, flags={'no-writes'}}"),
        ("x", b"#!lua name=x\n"),
        ("utf8", "#!lua name=utf8\n-- \u043a\u043b\u044e\u0447\nredis.register_function('u', function() end)".encode()),
        ("long", b"#!lua name=long\n" + b"--" + b"a" * 300 + b"\nredis.register_function('l', function() end)"),
    ]
    for name, code in libs:
        key = name.encode()
        for hlc, origin in ((hlc_real, 1), ((1 << 48) - 1 << 16, 0xFFFF), (1, 2)):
            ref_key = ref_u16(ref_pid(key)) + b"F" + key
            _agree(f"function key {name}", K.encode_function_key(key), ref_key)
            live = ref_envelope(ref_flags(0, False, False), hlc, origin, 0, b"\x01" + code)
            _agree(f"function record {name}", funclib.new(code, hlc, origin), live)
            out.append({"name": name, "kind": "live", "hlc": str(hlc), "origin": origin, "code_hex": code.hex(),
                        "ikey_hex": ref_key.hex(), "value_hex": live.hex()})
        tomb = ref_envelope(ref_flags(0, True, False), hlc_real + 7, 3, 0)
        _agree(f"function tombstone {name}", funclib.tombstone(hlc_real + 7, 3), tomb)
        out.append({"name": name, "kind": "tombstone", "hlc": str(hlc_real + 7), "origin": 3,
                    "ikey_hex": (ref_u16(ref_pid(key)) + b"F" + key).hex(), "value_hex": tomb.hex()})
    return out


FILES = {
    "partition.jsonl": partition_vectors,
    "hashtags.jsonl": hashtag_vectors,
    "keys.jsonl": key_vectors,
    "varint.jsonl": varint_vectors,
    "scores.jsonl": score_vectors,
    "member_scores.jsonl": member_score_vectors,
    "envelope.jsonl": envelope_vectors,
    "kinds.jsonl": kind_vectors,
    "acl_users.jsonl": acl_user_vectors,
    "functions.jsonl": function_vectors,
}


def render(rows: list[dict]) -> str:
    return "".join(json.dumps(r, ensure_ascii=False, separators=(", ", ": ")) + "\n" for r in rows)


def build() -> dict[str, str]:
    check_anchors()
    return {name: render(fn()) for name, fn in FILES.items()}


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, text in build().items():
        path = HERE / name
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)} ({text.count(chr(10))} vectors)")
    if stale:
        print("stale vector files (run crates_ref/format/generate.py): " + ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
