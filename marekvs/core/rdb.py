"""Redis 7.0's serialization of one value: the payload of DUMP and RESTORE (``rdb.c``).

A DUMP payload is one value in the RDB format, then a footer::

    [object type u8] [the value's encoding] [rdb version u16 LE] [CRC-64 u64 LE]

The CRC (``crc64.py``, CRC-64/Jones) covers everything before it, version included.
Redis 7.0 writes RDB version 10 and reads any version up to its own; a payload of a
later version (Redis 7.2's 11) or with a wrong CRC is refused (``PayloadError``: "DUMP
payload version or checksum are wrong"); a payload whose value does not parse is
``RdbError`` ("Bad data format").

Building blocks (all integers little-endian unless said)
    length      ``00xxxxxx`` 6 bits; ``01xxxxxx xxxxxxxx`` 14 bits (big-endian);
                ``0x80`` + u32 BE; ``0x81`` + u64 BE. ``11xxxxxx`` marks an encoded
                string (where a plain length is expected Redis reads its low 6 bits).
    string      a length and the bytes; or ``0xC0`` i8, ``0xC1`` i16, ``0xC2`` i32 (a
                string that spells an integer canonically, 11 bytes at most); or
                ``0xC3`` LZF: compressed length, original length, the LZF stream
                (``lzf.py``). Redis compresses strings over 20 bytes when that saves four
                bytes; marekvs writes them as they are (as Redis with rdbcompression no).
    listpack    u32 total bytes, u16 count (65535: unknown), entries, ``0xFF``. An entry is
                its encoding (a 7/13/16/24/32/64-bit integer when the element spells one
                canonically, else a string with a 6/12/32-bit length) and its "backlen",
                the entry's size in 7-bit groups, readable backwards.
    intset      u32 width (2, 4 or 8), u32 count, the integers ascending at that width.
    ziplist     (read only: Redis 6 and older) u32 bytes, u32 tail, u16 count, entries
                of [previous entry length] [encoding] [data], ``0xFF``.
    zipmap      (read only: Redis 2.x hashes) u8 count, [len] key [len] [free] value ...

Values and the encodings written (Redis 7.0's rules, from the value and ``Limits``, the
``*-max-*`` parameters; what Redis would hold for that value, except that marekvs keeps
no history: a collection that shrank is written compact again)::

    string   0  STRING
    list     18 QUICKLIST_2: nodes of listpacks, filled as RPUSH fills them
                (``list-max-listpack-size``); an element of 1 GB or more is a PLAIN node
    set      11 SET_INTSET   every member an integer, at most set-max-intset-entries
             2  SET          otherwise: the members as strings
    zset     17 ZSET_LISTPACK  at most zset-max-listpack-entries members of at most
                               zset-max-listpack-value bytes: member, score, ... ascending
             5  ZSET_2         otherwise: highest first, scores as binary64 LE
    hash     16 HASH_LISTPACK  at most hash-max-listpack-entries fields, fields and values
                               of at most hash-max-listpack-value bytes
             4  HASH           otherwise
    HLL      0  STRING: Redis's dense sketch of the registers (``hll_dense``), a string as
                Redis holds an HLL; a string holding a valid sketch reads back as one
    stream   19 STREAM_LISTPACKS_2: listpack nodes filled as XADD fills them
                (``stream-node-max-bytes``/``-entries``, live entries only), the
                counters, the consumer groups with their PELs and consumers

Read: every type Redis 7.0 reads except module values (6, 7: "Bad data format", as a
Redis without the module answers): strings; lists 1, 10, 14, 18; sets 2, 11; zsets 3, 5,
12, 17; hashes 4, 9, 13, 16; streams 15 (Redis 5/6: a group's entries-read estimated as
Redis 7.0 estimates it) and 19.

Validation is deep, always (as Redis's ``sanitize-dump-payload yes``): every listpack,
ziplist, intset and zipmap is checked entry by entry, and an empty collection, a
duplicate member or field, an odd number of hash or zset entries, a NaN score, a length
running past the payload, or an unknown type or encoding is ``RdbError``; nothing is
allocated from a length the payload cannot back. A stream is checked as Redis's deep
sanitization checks it (every node's entries and lp-counts, no duplicate node, group,
consumer or PEL entry, every consumer's PEL entry in its group's PEL and every PEL entry
owned) and further: its length and every node's counts must match the entries, entry
ids must be unique and none above the last id.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Union

from marekvs.core import lzf
from marekvs.core.crc64 import crc64
from marekvs.core.strtod import strtod

RDB_VERSION = 10  # Redis 7.0

TYPE_STRING = 0
TYPE_LIST = 1
TYPE_SET = 2
TYPE_ZSET = 3
TYPE_HASH = 4
TYPE_ZSET_2 = 5
TYPE_MODULE = 6
TYPE_MODULE_2 = 7
TYPE_HASH_ZIPMAP = 9
TYPE_LIST_ZIPLIST = 10
TYPE_SET_INTSET = 11
TYPE_ZSET_ZIPLIST = 12
TYPE_HASH_ZIPLIST = 13
TYPE_LIST_QUICKLIST = 14
TYPE_STREAM_LISTPACKS = 15
TYPE_HASH_LISTPACK = 16
TYPE_ZSET_LISTPACK = 17
TYPE_LIST_QUICKLIST_2 = 18
TYPE_STREAM_LISTPACKS_2 = 19

QUICKLIST_PLAIN = 1
QUICKLIST_PACKED = 2
PACKED_THRESHOLD = 1 << 30  # an element this big gets a quicklist node of its own (PLAIN)
_OPTIMIZATION_LEVEL = (4096, 8192, 16384, 32768, 65536)  # list-max-listpack-size -1 .. -5
_SIZE_SAFETY_LIMIT = 8192
_SIZE_ESTIMATE_OVERHEAD = 8
_FILL_MAX = (1 << 15) - 1

_LLONG_MIN = -(1 << 63)
_LLONG_MAX = (1 << 63) - 1


class PayloadError(ValueError):
    """The footer is missing, or its RDB version or CRC is wrong."""


class RdbError(ValueError):
    """The value does not parse (Redis: "Bad data format")."""


# =========================================================================================
# Values
# =========================================================================================

@dataclass(frozen=True, slots=True)
class String:
    value: bytes


@dataclass(frozen=True, slots=True)
class List:
    items: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class Set:
    members: Sequence[bytes]


@dataclass(frozen=True, slots=True)
class Zset:
    entries: Sequence[tuple[bytes, float]]  # (member, score)


@dataclass(frozen=True, slots=True)
class Hash:
    pairs: Sequence[tuple[bytes, bytes]]  # (field, value)


StreamId = tuple[int, int]  # (ms, seq)


@dataclass(frozen=True, slots=True)
class StreamConsumer:
    name: bytes
    seen_ms: int
    pending: Sequence[StreamId]  # the ids of the group's PEL this consumer owns, ascending


@dataclass(frozen=True, slots=True)
class StreamGroup:
    name: bytes
    last_id: StreamId  # last-delivered-id
    entries_read: int  # -1: unknown (Redis's SCG_INVALID_ENTRIES_READ)
    pending: Sequence[tuple[StreamId, int, int]]  # the PEL: (id, delivery ms, delivery count), ascending
    consumers: Sequence[StreamConsumer]  # by name


@dataclass(frozen=True, slots=True)
class Stream:
    entries: Sequence[tuple[StreamId, Sequence[bytes]]]  # (id, [field, value, ...]), ascending
    last_id: StreamId = (0, 0)
    first_id: StreamId = (0, 0)
    max_deleted: StreamId = (0, 0)
    entries_added: int = 0
    groups: Sequence[StreamGroup] = ()  # by name


Value = Union[String, List, Set, Zset, Hash, Stream]


@dataclass(frozen=True, slots=True)
class Limits:
    """The parameters that choose an encoding (Redis 7.0's defaults)."""

    hash_max_listpack_entries: int = 512
    hash_max_listpack_value: int = 64
    set_max_intset_entries: int = 512
    zset_max_listpack_entries: int = 128
    zset_max_listpack_value: int = 64
    list_max_listpack_size: int = -2
    stream_node_max_bytes: int = 4096
    stream_node_max_entries: int = 100


DEFAULT_LIMITS = Limits()


# =========================================================================================
# Integers as Redis reads them
# =========================================================================================

def string2ll(b: bytes) -> int | None:
    """Redis's ``string2ll`` (and ``lpStringToInt64``): the int64 ``b`` spells
    canonically (no '+', no leading zero or space, not "-0"), else None."""
    n = len(b)
    if n == 0 or n > 20:
        return None
    digits = b[1:] if b[0] == 45 else b  # '-'
    if not digits or not digits.isdigit() or not digits.isascii():
        return None
    if digits[0] == 48 and (len(digits) > 1 or b[0] == 45):
        return None
    v = int(b)
    return v if _LLONG_MIN <= v <= _LLONG_MAX else None


def d2string(x: float) -> bytes:
    """Redis 7.0's ``d2string``: how a listpack zset spells a score (an integral value
    within +-2^52 as an integer, else ``%.17g``)."""
    if math.isnan(x):
        return b"nan"
    if math.isinf(x):
        return b"inf" if x > 0 else b"-inf"
    if x == 0:
        return b"-0" if math.copysign(1.0, x) < 0 else b"0"
    if -4503599627370495.0 < x < 4503599627370496.0 and x == int(x):
        return b"%d" % int(x)
    return b"%.17g" % x


# =========================================================================================
# Writing
# =========================================================================================

def encode_length(n: int) -> bytes:
    if n < 1 << 6:
        return bytes((n,))
    if n < 1 << 14:
        return bytes((0x40 | n >> 8, n & 0xFF))
    if n <= 0xFFFFFFFF:
        return b"\x80" + n.to_bytes(4, "big")
    return b"\x81" + n.to_bytes(8, "big")


def _encode_int(v: int) -> bytes | None:
    """``rdbEncodeInteger``: the shortest of i8, i16, i32, or None."""
    if -(1 << 7) <= v < 1 << 7:
        return b"\xc0" + v.to_bytes(1, "little", signed=True)
    if -(1 << 15) <= v < 1 << 15:
        return b"\xc1" + v.to_bytes(2, "little", signed=True)
    if -(1 << 31) <= v < 1 << 31:
        return b"\xc2" + v.to_bytes(4, "little", signed=True)
    return None


def _string(s: bytes) -> bytes:
    """``rdbSaveRawString`` without LZF: an integer encoding when ``s`` (11 bytes at
    most) spells one canonically, else length and bytes."""
    if len(s) <= 11:
        v = string2ll(s)
        if v is not None:
            enc = _encode_int(v)
            if enc is not None:
                return enc
    return encode_length(len(s)) + s


def _backlen(n: int) -> bytes:
    """``lpEncodeBacklen``: the entry size ``n`` in 7-bit groups, most significant
    first, every byte but the first with its high bit set."""
    if n <= 127:
        return bytes((n,))
    if n < 16383:
        return bytes((n >> 7, (n & 127) | 128))
    if n < 2097151:
        return bytes((n >> 14, ((n >> 7) & 127) | 128, (n & 127) | 128))
    if n < 268435455:
        return bytes((n >> 21, ((n >> 14) & 127) | 128, ((n >> 7) & 127) | 128, (n & 127) | 128))
    return bytes((n >> 28, ((n >> 21) & 127) | 128, ((n >> 14) & 127) | 128, ((n >> 7) & 127) | 128,
                  (n & 127) | 128))


def _lp_entry(s: bytes) -> bytes:
    """One listpack entry (encoding, data, backlen) for the element ``s``."""
    v = string2ll(s)
    if v is not None:
        if 0 <= v <= 127:
            e = bytes((v,))
        elif -4096 <= v <= 4095:
            u = v & 0x1FFF
            e = bytes((0xC0 | u >> 8, u & 0xFF))
        elif -32768 <= v <= 32767:
            e = b"\xf1" + v.to_bytes(2, "little", signed=True)
        elif -8388608 <= v <= 8388607:
            e = b"\xf2" + v.to_bytes(3, "little", signed=True)
        elif -(1 << 31) <= v < 1 << 31:
            e = b"\xf3" + v.to_bytes(4, "little", signed=True)
        else:
            e = b"\xf4" + v.to_bytes(8, "little", signed=True)
    else:
        n = len(s)
        if n < 64:
            e = bytes((0x80 | n,)) + s
        elif n < 4096:
            e = bytes((0xE0 | n >> 8, n & 0xFF)) + s
        else:
            e = b"\xf0" + n.to_bytes(4, "little") + s
    return e + _backlen(len(e))


def _listpack_of(entries: Sequence[bytes]) -> bytes:
    """A listpack of already encoded entries."""
    body = b"".join(entries)
    total = 6 + len(body) + 1
    return struct.pack("<IH", total, min(len(entries), 65535)) + body + b"\xff"


def listpack(elements: Sequence[bytes]) -> bytes:
    return _listpack_of([_lp_entry(s) for s in elements])


def _fill(size: int) -> int:
    return max(-5, min(size, _FILL_MAX))


def _allow_insert(node_sz: int, count: int, fill: int, sz: int) -> bool:
    """``_quicklistNodeAllowInsert`` (7.0): whether an element of ``sz`` bytes joins a
    node of ``node_sz`` bytes and ``count`` elements."""
    new_sz = node_sz + sz + _SIZE_ESTIMATE_OVERHEAD
    if fill < 0 and new_sz <= _OPTIMIZATION_LEVEL[-fill - 1]:
        return True
    if new_sz > _SIZE_SAFETY_LIMIT:
        return False
    return count < fill


def _quicklist(items: Sequence[bytes], limits: Limits) -> bytes:
    """QUICKLIST_2: the nodes RPUSH of ``items`` one by one would make."""
    fill = _fill(limits.list_max_listpack_size)
    nodes: list[bytes] = []
    cur: list[bytes] = []
    cur_sz = 0
    for s in items:
        if len(s) >= PACKED_THRESHOLD:
            if cur:
                nodes.append(encode_length(QUICKLIST_PACKED) + _string(_listpack_of(cur)))
                cur, cur_sz = [], 0
            nodes.append(encode_length(QUICKLIST_PLAIN) + _string(s))
            continue
        e = _lp_entry(s)
        if cur and _allow_insert(cur_sz, len(cur), fill, len(s)):
            cur.append(e)
            cur_sz += len(e)
        else:
            if cur:
                nodes.append(encode_length(QUICKLIST_PACKED) + _string(_listpack_of(cur)))
            cur, cur_sz = [e], 7 + len(e)
    if cur:
        nodes.append(encode_length(QUICKLIST_PACKED) + _string(_listpack_of(cur)))
    return encode_length(len(nodes)) + b"".join(nodes)


def _dump_string(v: String, limits: Limits) -> tuple[int, bytes]:
    return TYPE_STRING, _string(v.value)


def _dump_list(v: List, limits: Limits) -> tuple[int, bytes]:
    return TYPE_LIST_QUICKLIST_2, _quicklist(v.items, limits)


def _dump_set(v: Set, limits: Limits) -> tuple[int, bytes]:
    ints = [string2ll(m) for m in v.members] if len(v.members) <= limits.set_max_intset_entries else None
    if ints is not None and None not in ints:
        vals = sorted(i for i in ints if i is not None)
        lo, hi = vals[0], vals[-1]
        width = 2 if -(1 << 15) <= lo and hi < 1 << 15 else 4 if -(1 << 31) <= lo and hi < 1 << 31 else 8
        blob = struct.pack("<II", width, len(vals)) + b"".join(i.to_bytes(width, "little", signed=True)
                                                              for i in vals)
        return TYPE_SET_INTSET, _string(blob)
    return TYPE_SET, encode_length(len(v.members)) + b"".join(_string(m) for m in v.members)


def _dump_zset(v: Zset, limits: Limits) -> tuple[int, bytes]:
    entries = sorted(v.entries, key=lambda e: (e[1], e[0]))
    if len(entries) <= limits.zset_max_listpack_entries and \
            all(len(m) <= limits.zset_max_listpack_value for m, _ in entries):
        els: list[bytes] = []
        for m, s in entries:
            els += (m, d2string(s))
        return TYPE_ZSET_LISTPACK, _string(listpack(els))
    out = [encode_length(len(entries))]
    for m, s in reversed(entries):
        out.append(_string(m) + struct.pack("<d", s))
    return TYPE_ZSET_2, b"".join(out)


def _dump_hash(v: Hash, limits: Limits) -> tuple[int, bytes]:
    mx = limits.hash_max_listpack_value
    if len(v.pairs) <= limits.hash_max_listpack_entries and all(len(f) <= mx and len(x) <= mx for f, x in v.pairs):
        els: list[bytes] = []
        for f, x in v.pairs:
            els += (f, x)
        return TYPE_HASH_LISTPACK, _string(listpack(els))
    return TYPE_HASH, encode_length(len(v.pairs)) + b"".join(_string(f) + _string(x) for f, x in v.pairs)


# -- streams ---------------------------------------------------------------------------------------
# A stream (RDB_TYPE_STREAM_LISTPACKS_2) is its radix tree of listpack nodes, each keyed by
# its master id (u64 ms, u64 seq, big-endian: a 16-byte string), then the metadata::
#
#     [nodes len] nodes x ([master id string] [listpack string])
#     [length] [last ms] [last seq] [first ms] [first seq] [max-deleted ms] [max-deleted seq]
#     [entries-added] [groups len] groups x (
#         [name string] [last-delivered ms] [seq] [entries-read (-1 as 2^64-1)]
#         [PEL len] PEL x ([id: 16 bytes BE] [delivery ms: i64 LE] [delivery count len])
#         [consumers len] consumers x ([name string] [seen ms: i64 LE]
#                                      [PEL len] PEL x [id: 16 bytes BE]))
#
# A node's listpack (t_stream.c): the master entry ``count deleted nfields field... 0``,
# then per entry ``flags ms-diff seq-diff [nfields] (field value | value)... lp-count``,
# the diffs from the master id as int64, the field names left out (flag SAMEFIELDS, 2)
# when they are the master's, flag DELETED (1) on an XDELed entry, lp-count the number of
# elements of the entry before it. ``_stream_nodes`` fills nodes as XADD fills them
# (``stream-node-max-bytes``, ``stream-node-max-entries``): the entries are the live
# ones (marekvs keeps no deleted entry inside a node), so a stream that never had an
# XDEL or a trim is Redis's byte for byte.

U64 = (1 << 64) - 1
STREAM_LISTPACK_MAX_SIZE = 1 << 30
STREAM_ITEM_FLAG_DELETED = 1
STREAM_ITEM_FLAG_SAMEFIELDS = 2
_ID16 = struct.Struct(">QQ")
_MS = struct.Struct("<q")


def _i64(v: int) -> int:
    """``v`` modulo 2^64 as an int64 (a diff of two u64 ids, as C computes it)."""
    v &= U64
    return v - (1 << 64) if v >> 63 else v


def _lp_int(v: int) -> bytes:
    return _lp_entry(b"%d" % v)


def _stream_nodes(entries: Sequence[tuple[StreamId, Sequence[bytes]]], limits: Limits) -> list[tuple[StreamId, bytes]]:
    """(master id, listpack) of each node, as ``streamAppendItem`` of ``entries`` in
    order would make them."""
    max_bytes = limits.stream_node_max_bytes
    if max_bytes <= 0 or max_bytes > STREAM_LISTPACK_MAX_SIZE:
        max_bytes = STREAM_LISTPACK_MAX_SIZE
    max_entries = limits.stream_node_max_entries
    nodes: list[tuple[StreamId, bytes]] = []
    master: StreamId = (0, 0)
    mfields: list[bytes] = []
    body: list[bytes] = []  # every entry of the node after the master count
    body_sz = count = 0

    def close() -> None:
        nodes.append((master, _listpack_of([_lp_int(count)] + body)))

    for sid, flat in entries:
        fields = list(flat[0::2])
        if count:
            lp_bytes = 7 + len(_lp_int(count)) + body_sz
            if lp_bytes + sum(len(x) for x in flat) >= max_bytes or 0 < max_entries <= count:
                close()
                count = 0
        if not count:
            master, mfields = sid, fields
            body = [_lp_int(0), _lp_int(len(fields)), *[_lp_entry(f) for f in fields], _lp_int(0)]
            body_sz = sum(len(e) for e in body)
        same = fields == mfields
        out = [_lp_int(STREAM_ITEM_FLAG_SAMEFIELDS if same else 0), _lp_int(_i64(sid[0] - master[0])),
               _lp_int(_i64(sid[1] - master[1]))]
        if same:
            out += [_lp_entry(x) for x in flat[1::2]]
            out.append(_lp_int(len(fields) + 3))
        else:
            out.append(_lp_int(len(fields)))
            out += [_lp_entry(x) for x in flat]
            out.append(_lp_int(2 * len(fields) + 4))
        body += out
        body_sz += sum(len(e) for e in out)
        count += 1
    if count:
        close()
    return nodes


def _dump_stream(v: Stream, limits: Limits) -> tuple[int, bytes]:
    nodes = _stream_nodes(v.entries, limits)
    out = [encode_length(len(nodes))]
    out += [_string(_ID16.pack(*m)) + _string(lp) for m, lp in nodes]
    out += [encode_length(x) for x in (len(v.entries), *v.last_id, *v.first_id, *v.max_deleted, v.entries_added)]
    out.append(encode_length(len(v.groups)))
    for g in v.groups:
        out.append(_string(g.name) + encode_length(g.last_id[0]) + encode_length(g.last_id[1])
                   + encode_length(g.entries_read & U64))
        out.append(encode_length(len(g.pending)))
        out += [_ID16.pack(*sid) + _MS.pack(ms) + encode_length(n) for sid, ms, n in g.pending]
        out.append(encode_length(len(g.consumers)))
        for c in g.consumers:
            out.append(_string(c.name) + _MS.pack(c.seen_ms) + encode_length(len(c.pending)))
            out += [_ID16.pack(*sid) for sid in c.pending]
    return TYPE_STREAM_LISTPACKS_2, b"".join(out)


# One entry per value type: how it is written. (Adding a type is one row here and one in
# ``LOADERS`` below.)
DUMPERS: dict[type, Callable[..., tuple[int, bytes]]] = {
    String: _dump_string, List: _dump_list, Set: _dump_set, Zset: _dump_zset, Hash: _dump_hash,
    Stream: _dump_stream,
}


def footer(body: bytes) -> bytes:
    """``body`` (type byte and value) with the version and the CRC appended."""
    body += struct.pack("<H", RDB_VERSION)
    return body + struct.pack("<Q", crc64(0, body))


def dump(value: Value, limits: Limits = DEFAULT_LIMITS) -> bytes:
    """The DUMP payload of ``value``."""
    rtype, body = DUMPERS[type(value)](value, limits)
    return footer(bytes((rtype,)) + body)


# =========================================================================================
# HyperLogLog sketches: Redis's "HYLL" strings
# =========================================================================================
# Redis keeps a HyperLogLog as a string: a 16-byte header ("HYLL", the encoding, 3 unused
# bytes, the cached cardinality as u64 LE whose top bit marks it stale) and the 16384
# registers, dense (6 bits each, least significant bits first: 12288 bytes) or sparse
# (opcodes ZERO 00xxxxxx: xxxxxx+1 empty registers, XZERO 01xxxxxx yyyyyyyy: a 14-bit run
# of empty ones, VAL 1vvvvvxx: xx+1 registers of value vvvvv+1). marekvs keeps one record
# per register, so DUMP of an HLL writes the dense sketch of its registers and RESTORE
# of a valid sketch (Redis's ``isHLLObjectOrReply`` test, then a sparse sketch must cover
# every register exactly) writes registers again. The registers mean the same in both
# (P = 14, ranks up to 51); only the element hash differs (docs/divergences.md).

HLL_REGISTERS = 16384
HLL_MAX_RANK = 51
HLL_HEADER = 16
HLL_DENSE_SIZE = HLL_HEADER + HLL_REGISTERS * 6 // 8
_HLL_MAGIC = b"HYLL"


def hll_dense(ranks: bytes | bytearray) -> bytes:
    """The dense sketch of 16384 register ranks, its cached cardinality marked stale."""
    out = bytearray(_HLL_MAGIC + bytes(4) + bytes(7) + b"\x80")
    for j in range(0, HLL_REGISTERS, 4):
        x = ranks[j] | ranks[j + 1] << 6 | ranks[j + 2] << 12 | ranks[j + 3] << 18
        out += x.to_bytes(3, "little")
    return bytes(out)


def hll_ranks(sketch: bytes) -> bytes | None:
    """The 16384 register ranks of a valid HYLL string, dense or sparse; None if it is
    not one (then it is just a string), or if a register holds more than a rank can."""
    if len(sketch) < HLL_HEADER or sketch[:4] != _HLL_MAGIC or sketch[4] > 1:
        return None
    if sketch[4] == 0:
        if len(sketch) != HLL_DENSE_SIZE:
            return None
        ranks = bytearray(HLL_REGISTERS)
        r = sketch[HLL_HEADER:]
        for j in range(0, len(r), 3):
            x = r[j] | r[j + 1] << 8 | r[j + 2] << 16
            i = j // 3 * 4
            ranks[i], ranks[i + 1], ranks[i + 2], ranks[i + 3] = x & 63, x >> 6 & 63, x >> 12 & 63, x >> 18
    else:
        ranks = bytearray()
        p, end = HLL_HEADER, len(sketch)
        while p < end:
            op = sketch[p]
            if op < 0x40:  # ZERO
                run, v = (op & 0x3F) + 1, 0
                p += 1
            elif op < 0x80:  # XZERO
                if p + 1 >= end:
                    return None
                run, v = ((op & 0x3F) << 8 | sketch[p + 1]) + 1, 0
                p += 2
            else:  # VAL
                run, v = (op & 0x03) + 1, (op >> 2 & 0x1F) + 1
                p += 1
            if len(ranks) + run > HLL_REGISTERS:
                return None
            ranks += bytes((v,)) * run
        if len(ranks) != HLL_REGISTERS:
            return None
    if max(ranks) > HLL_MAX_RANK:
        return None
    return bytes(ranks)


# =========================================================================================
# Reading
# =========================================================================================

class Reader:
    """A cursor over the payload; every read past its end is ``RdbError``."""

    __slots__ = ("buf", "pos")

    def __init__(self, buf: bytes):
        self.buf = buf
        self.pos = 0

    def take(self, n: int) -> bytes:
        end = self.pos + n
        if n < 0 or end > len(self.buf):
            raise RdbError("value runs past the end of the payload")
        out = self.buf[self.pos:end]
        self.pos = end
        return out

    def byte(self) -> int:
        return self.take(1)[0]

    def length(self) -> tuple[int, bool]:
        """(length, is an encoded string): ``rdbLoadLenByRef``."""
        b = self.byte()
        t = b >> 6
        if t == 0:
            return b & 0x3F, False
        if t == 1:
            return (b & 0x3F) << 8 | self.byte(), False
        if t == 3:
            return b & 0x3F, True
        if b == 0x80:
            return int.from_bytes(self.take(4), "big"), False
        if b == 0x81:
            return int.from_bytes(self.take(8), "big"), False
        raise RdbError(f"unknown length encoding {b:#04x}")

    def count(self) -> int:
        """A plain length (``rdbLoadLen(rdb, NULL)``: an encoded one reads as its low 6
        bits, as Redis does)."""
        return self.length()[0]

    def string(self) -> bytes:
        """``rdbGenericLoadStringObject``."""
        n, encoded = self.length()
        if not encoded:
            return self.take(n)
        if n == 0:
            return b"%d" % int.from_bytes(self.take(1), "little", signed=True)
        if n == 1:
            return b"%d" % int.from_bytes(self.take(2), "little", signed=True)
        if n == 2:
            return b"%d" % int.from_bytes(self.take(4), "little", signed=True)
        if n == 3:
            clen = self.count()
            olen = self.count()
            data = self.take(clen)
            try:
                return lzf.decompress(data, olen)
            except lzf.LzfError as e:
                raise RdbError(f"invalid LZF compressed string: {e}") from None
        raise RdbError(f"unknown string encoding {n}")

    def binary_double(self) -> float:
        d: float = struct.unpack("<d", self.take(8))[0]
        return d

    def text_double(self) -> float:
        """``rdbLoadDoubleValue`` (the old ZSET type): 253 NaN, 254 +inf, 255 -inf, else
        that many bytes of text read with ``%lg``."""
        n = self.byte()
        if n == 255:
            return -math.inf
        if n == 254:
            return math.inf
        if n == 253:
            return math.nan
        v, used, _ = strtod(self.take(n))
        if not used:
            raise RdbError("a score is not a number")
        return v


# -- listpacks, ziplists, intsets, zipmaps ------------------------------------------------------

def _lp_value(buf: bytes, p: int, end: int) -> tuple[bytes, int]:
    """(element, size of encoding and data) of the listpack entry at ``p``."""
    enc = buf[p]
    if enc < 0x80:
        return b"%d" % enc, 1
    if enc < 0xC0:
        n = enc & 0x3F
        if p + 1 + n > end:
            raise RdbError("listpack entry past the end")
        return buf[p + 1:p + 1 + n], 1 + n
    if p + 1 >= end:
        raise RdbError("listpack entry past the end")
    if enc < 0xE0:
        u = (enc & 0x1F) << 8 | buf[p + 1]
        return b"%d" % (u - (1 << 13) if u >= 1 << 12 else u), 2
    if enc < 0xF0:
        n = (enc & 0x0F) << 8 | buf[p + 1]
        if p + 2 + n > end:
            raise RdbError("listpack entry past the end")
        return buf[p + 2:p + 2 + n], 2 + n
    width = {0xF1: 2, 0xF2: 3, 0xF3: 4, 0xF4: 8}.get(enc)
    if enc == 0xF0:
        if p + 5 > end:
            raise RdbError("listpack entry past the end")
        n = int.from_bytes(buf[p + 1:p + 5], "little")
        if p + 5 + n > end:
            raise RdbError("listpack entry past the end")
        return buf[p + 5:p + 5 + n], 5 + n
    if width is None:
        raise RdbError(f"invalid listpack encoding {enc:#04x}")
    if p + 1 + width > end:
        raise RdbError("listpack entry past the end")
    return b"%d" % int.from_bytes(buf[p + 1:p + 1 + width], "little", signed=True), 1 + width


def listpack_elements(blob: bytes) -> list[bytes]:
    """Every element of a listpack, validated entry by entry (``lpValidateIntegrity``,
    deep): the header's size and count, each entry inside the blob with its backlen,
    the end marker last."""
    size = len(blob)
    if size < 7:
        raise RdbError("listpack shorter than its header")
    total, count = struct.unpack_from("<IH", blob, 0)
    if total != size or blob[-1] != 0xFF:
        raise RdbError("listpack size or end marker wrong")
    end = size - 1
    out: list[bytes] = []
    p = 6
    while p < end:
        value, n = _lp_value(blob, p, end)
        bl = _backlen(n)
        if p + n + len(bl) > end or blob[p + n:p + n + len(bl)] != bl:
            raise RdbError("listpack entry's back length is wrong")
        out.append(value)
        p += n + len(bl)
    if count != 65535 and count != len(out):
        raise RdbError("listpack count is wrong")
    return out


def ziplist_elements(blob: bytes) -> list[bytes]:
    """Every element of a ziplist (Redis 6 and older), validated as
    ``ziplistValidateIntegrity`` (deep) does."""
    size = len(blob)
    if size < 11:
        raise RdbError("ziplist shorter than its header")
    zlbytes, zltail, count = struct.unpack_from("<IIH", blob, 0)
    if zlbytes != size or blob[-1] != 0xFF:
        raise RdbError("ziplist size or end marker wrong")
    end = size - 1
    p = 10
    prev_size = 0
    last = -1
    out: list[bytes] = []
    while p < end:
        start = p
        b = blob[p]
        if b < 254:
            prevlen = b
            p += 1
        elif b == 254:
            if p + 5 > end:
                raise RdbError("ziplist entry past the end")
            prevlen = int.from_bytes(blob[p + 1:p + 5], "little")
            p += 5
        else:
            raise RdbError("bad ziplist previous length")
        if prevlen != prev_size:
            raise RdbError("ziplist previous length is wrong")
        if p >= end:
            raise RdbError("ziplist entry past the end")
        e = blob[p]
        kind = e >> 6
        value: bytes
        if kind < 3:
            if kind == 0:
                n, hdr = e & 0x3F, 1
            elif kind == 1:
                if p + 2 > end:
                    raise RdbError("ziplist entry past the end")
                n, hdr = (e & 0x3F) << 8 | blob[p + 1], 2
            else:
                if p + 5 > end:
                    raise RdbError("ziplist entry past the end")
                n, hdr = int.from_bytes(blob[p + 1:p + 5], "big"), 5
            if p + hdr + n > end:
                raise RdbError("ziplist entry past the end")
            value = blob[p + hdr:p + hdr + n]
            p += hdr + n
        else:
            width = {0xC0: 2, 0xD0: 4, 0xE0: 8, 0xF0: 3, 0xFE: 1}.get(e)
            if width is not None:
                if p + 1 + width > end:
                    raise RdbError("ziplist entry past the end")
                value = b"%d" % int.from_bytes(blob[p + 1:p + 1 + width], "little", signed=True)
                p += 1 + width
            elif 0xF1 <= e <= 0xFD:
                value = b"%d" % ((e & 0x0F) - 1)
                p += 1
            else:
                raise RdbError(f"invalid ziplist encoding {e:#04x}")
        out.append(value)
        prev_size = p - start
        last = start
    if p != end or (last >= 0 and last != zltail) or (count != 65535 and count != len(out)):
        raise RdbError("ziplist tail or count is wrong")
    return out


def intset_members(blob: bytes) -> list[bytes]:
    """The members of an intset (``intsetValidateIntegrity``, deep: strictly ascending)."""
    if len(blob) < 8:
        raise RdbError("intset shorter than its header")
    width, count = struct.unpack_from("<II", blob, 0)
    if width not in (2, 4, 8) or 8 + count * width != len(blob) or count == 0:
        raise RdbError("intset header is wrong")
    vals = [int.from_bytes(blob[i:i + width], "little", signed=True) for i in range(8, len(blob), width)]
    if any(a >= b for a, b in zip(vals, vals[1:])):
        raise RdbError("intset is not strictly ascending")
    return [b"%d" % v for v in vals]


def zipmap_pairs(blob: bytes) -> list[tuple[bytes, bytes]]:
    """The pairs of a zipmap (a Redis 2.x hash), validated as ``zipmapValidateIntegrity``."""
    size = len(blob)
    if size < 2:
        raise RdbError("zipmap too short")
    p = 1
    out: list[tuple[bytes, bytes]] = []

    def length() -> int:
        nonlocal p
        b = blob[p]
        if b < 254:
            p += 1
            return b
        if b == 254 and p + 5 <= size:
            p += 5
            return int.from_bytes(blob[p - 4:p], "little")
        raise RdbError("bad zipmap length")

    while p < size and blob[p] != 0xFF:
        n = length()
        if p + n > size:
            raise RdbError("zipmap entry past the end")
        k = blob[p:p + n]
        p += n
        if p >= size:
            raise RdbError("zipmap entry past the end")
        n = length()
        if p >= size:
            raise RdbError("zipmap entry past the end")
        free = blob[p]
        p += 1
        if p + n + free > size:
            raise RdbError("zipmap entry past the end")
        out.append((k, blob[p:p + n]))
        p += n + free
    if p != size - 1 or (blob[0] < 254 and blob[0] != len(out)):
        raise RdbError("zipmap end or count is wrong")
    return out


# -- values of each type ------------------------------------------------------------------

def _pairs(flat: list[bytes], what: str) -> list[tuple[bytes, bytes]]:
    if len(flat) % 2:
        raise RdbError(f"{what} with an odd number of entries")
    it = iter(flat)
    return list(zip(it, it))


def _unique(keys: list[bytes], what: str) -> None:
    if not keys:
        raise RdbError(f"empty {what}")
    if len(set(keys)) != len(keys):
        raise RdbError(f"duplicate {what} members")


def _hash(pairs: list[tuple[bytes, bytes]]) -> Hash:
    _unique([f for f, _ in pairs], "hash")
    return Hash(pairs)


def _set(members: list[bytes]) -> Set:
    _unique(members, "set")
    return Set(members)


def _zset(entries: list[tuple[bytes, float]]) -> Zset:
    _unique([m for m, _ in entries], "zset")
    if any(s != s for _, s in entries):
        raise RdbError("zset with a NaN score")
    return Zset(entries)


def _list(items: list[bytes]) -> List:
    if not items:
        raise RdbError("empty list")
    return List(items)


def _score(text: bytes) -> float:
    """``zzlGetScore``: the score a listpack/ziplist zset spells (strtod of the text,
    whatever follows the number)."""
    return strtod(text[:127])[0]


def _zset_flat(flat: list[bytes]) -> Zset:
    return _zset([(m, _score(s)) for m, s in _pairs(flat, "zset")])


def _load_string(r: Reader) -> Value:
    return String(r.string())


def _load_list(r: Reader) -> Value:
    return _list([r.string() for _ in range(r.count())])


def _load_set(r: Reader) -> Value:
    return _set([r.string() for _ in range(r.count())])


def _load_zset(r: Reader, binary: bool) -> Value:
    n = r.count()
    out: list[tuple[bytes, float]] = []
    for _ in range(n):
        m = r.string()
        out.append((m, r.binary_double() if binary else r.text_double()))
    return _zset(out)


def _load_hash(r: Reader) -> Value:
    n = r.count()
    return _hash([(r.string(), r.string()) for _ in range(n)])


def _load_quicklist(r: Reader, version: int) -> Value:
    items: list[bytes] = []
    for _ in range(r.count()):
        container = r.count() if version == 2 else QUICKLIST_PACKED
        if container not in (QUICKLIST_PACKED, QUICKLIST_PLAIN):
            raise RdbError("quicklist node container is wrong")
        data = r.string()
        if not data:
            raise RdbError("empty quicklist node")
        if container == QUICKLIST_PLAIN:
            items.append(data)
        else:
            items += listpack_elements(data) if version == 2 else ziplist_elements(data)
    return _list(items)


def _lp_integer(el: bytes) -> int:
    """``lpGetIntegerIfValid``: the int64 a stream listpack element holds."""
    v = string2ll(el)
    if v is None:
        raise RdbError("a stream listpack element is not an integer")
    return v


def _stream_node(master: StreamId, blob: bytes) -> tuple[list[tuple[StreamId, list[bytes]]], int]:
    """(live entries, deleted count) of one node, validated as
    ``streamValidateListpackIntegrity`` (deep) does, and its counts checked against its
    entries."""
    els = listpack_elements(blob)
    if not els:
        raise RdbError("empty listpack inside stream")
    n = len(els)
    p = 0

    def nxt() -> bytes:
        nonlocal p
        if p >= n:
            raise RdbError("stream listpack ends inside an entry")
        p += 1
        return els[p - 1]

    count, deleted, nfields = _lp_integer(nxt()), _lp_integer(nxt()), _lp_integer(nxt())
    if count < 0 or deleted < 0 or nfields < 0:
        raise RdbError("negative count in a stream node")
    mfields = [nxt() for _ in range(min(nfields, n))]
    if _lp_integer(nxt()) != 0:
        raise RdbError("stream master entry not terminated by 0")
    live: list[tuple[StreamId, list[bytes]]] = []
    dead = 0
    for _ in range(count + deleted):
        flags = _lp_integer(nxt())
        ms = (master[0] + _lp_integer(nxt())) & U64
        seq = (master[1] + _lp_integer(nxt())) & U64
        if flags & STREAM_ITEM_FLAG_SAMEFIELDS:
            flat: list[bytes] = []
            for f in mfields:
                flat += (f, nxt())
            extra = 3
        else:
            k = _lp_integer(nxt())
            if k < 0 or 2 * k > n:
                raise RdbError("stream entry field count is wrong")
            flat = [nxt() for _ in range(2 * k)]
            extra = k + 4
        if _lp_integer(nxt()) != len(flat) // 2 + extra:
            raise RdbError("stream entry lp-count is wrong")
        if flags & STREAM_ITEM_FLAG_DELETED:
            dead += 1
        else:
            live.append(((ms, seq), flat))
    if p != n:
        raise RdbError("stream listpack has elements after its entries")
    if len(live) != count or dead != deleted:
        raise RdbError("stream node counts do not match its entries")
    return live, dead


def _estimate_read(length: int, added: int, first: StreamId, last: StreamId, maxdel: StreamId,
                   sid: StreamId) -> int:
    """``streamEstimateDistanceFromFirstEverEntry`` (a group of an RDB type 15 stream,
    which has no entries-read of its own)."""
    if not added:
        return 0
    if sid == last:
        return added
    if sid > last:
        return -1
    if maxdel == (0, 0) or maxdel < first:
        if sid < first:
            return added - length
        if sid == first:
            return added - length + 1
    return -1


def _millis(r: Reader) -> int:
    """``rdbLoadMillisecondTime`` (a delivery or seen time); one before 1970 is refused
    (Redis never writes one; marekvs keeps these times unsigned)."""
    ms: int = _MS.unpack(r.take(8))[0]
    if ms < 0:
        raise RdbError("a negative time in a consumer group")
    return ms


def _load_stream(r: Reader, v2: bool) -> Value:
    entries: list[tuple[StreamId, list[bytes]]] = []
    masters: set[bytes] = set()
    for _ in range(r.count()):
        key = r.string()
        if len(key) != 16:
            raise RdbError("stream node key is not the size of a stream id")
        if key in masters:
            raise RdbError("stream node added twice")
        masters.add(key)
        live, _ = _stream_node(_ID16.unpack(key), r.string())
        entries += live
    entries.sort(key=lambda e: e[0])
    if any(a[0] == b[0] for a, b in zip(entries, entries[1:])):
        raise RdbError("duplicate stream entry id")
    length = r.count()
    last = (r.count(), r.count())
    if v2:
        first = (r.count(), r.count())
        maxdel = (r.count(), r.count())
        added = r.count()
    else:
        first, maxdel, added = (entries[0][0] if entries else (0, 0)), (0, 0), length
    if length != len(entries):
        raise RdbError("stream length does not match its entries")
    if entries and entries[-1][0] > last:
        raise RdbError("stream entry above the stream's last id")
    groups: list[StreamGroup] = []
    names: set[bytes] = set()
    for _ in range(r.count()):
        name = r.string()
        if name in names:
            raise RdbError("duplicate consumer group name")
        names.add(name)
        gid = (r.count(), r.count())
        read = r.count() if v2 else _estimate_read(length, added, first, last, maxdel, gid) & U64
        pel: dict[StreamId, tuple[int, int]] = {}
        for _ in range(r.count()):
            sid = _ID16.unpack(r.take(16))
            ms = _millis(r)
            if sid in pel:
                raise RdbError("duplicate global PEL entry")
            pel[sid] = (ms, r.count())
        owner: dict[StreamId, bytes] = {}
        consumers: list[StreamConsumer] = []
        cnames: set[bytes] = set()
        for _ in range(r.count()):
            cname = r.string()
            if cname in cnames:
                raise RdbError("duplicate stream consumer")
            cnames.add(cname)
            seen = _millis(r)
            own: list[StreamId] = []
            for _ in range(r.count()):
                sid = _ID16.unpack(r.take(16))
                if sid not in pel:
                    raise RdbError("consumer entry not found in the group's PEL")
                if sid in own:
                    raise RdbError("duplicate consumer PEL entry")
                owner[sid] = cname
                own.append(sid)
            consumers.append(StreamConsumer(cname, seen, own))
        if len(owner) != len(pel):
            raise RdbError("a PEL entry without consumer")
        # an entry two consumers list is the last one's, as Redis's loader leaves it
        consumers = [StreamConsumer(c.name, c.seen_ms, sorted(i for i in c.pending if owner[i] == c.name))
                     for c in sorted(consumers, key=lambda c: c.name)]
        groups.append(StreamGroup(name, gid, read - (1 << 64) if read >> 63 else read,
                                  [(sid, ms, cnt) for sid, (ms, cnt) in sorted(pel.items())], consumers))
    groups.sort(key=lambda g: g.name)
    return Stream(entries, last, first, maxdel, added, groups)


LOADERS: dict[int, Callable[[Reader], Value]] = {
    TYPE_STRING: _load_string,
    TYPE_LIST: _load_list,
    TYPE_SET: _load_set,
    TYPE_ZSET: lambda r: _load_zset(r, binary=False),
    TYPE_HASH: _load_hash,
    TYPE_ZSET_2: lambda r: _load_zset(r, binary=True),
    TYPE_HASH_ZIPMAP: lambda r: _hash(zipmap_pairs(r.string())),
    TYPE_LIST_ZIPLIST: lambda r: _list(ziplist_elements(r.string())),
    TYPE_SET_INTSET: lambda r: _set(intset_members(r.string())),
    TYPE_ZSET_ZIPLIST: lambda r: _zset_flat(ziplist_elements(r.string())),
    TYPE_HASH_ZIPLIST: lambda r: _hash(_pairs(ziplist_elements(r.string()), "hash")),
    TYPE_LIST_QUICKLIST: lambda r: _load_quicklist(r, 1),
    TYPE_HASH_LISTPACK: lambda r: _hash(_pairs(listpack_elements(r.string()), "hash")),
    TYPE_ZSET_LISTPACK: lambda r: _zset_flat(listpack_elements(r.string())),
    TYPE_LIST_QUICKLIST_2: lambda r: _load_quicklist(r, 2),
    TYPE_STREAM_LISTPACKS: lambda r: _load_stream(r, v2=False),
    TYPE_STREAM_LISTPACKS_2: lambda r: _load_stream(r, v2=True),
}
# a module value (6, 7) is "Bad data format", as in a Redis without that module


def check_footer(payload: bytes) -> int:
    """``verifyDumpPayload``: the payload's RDB version, if it is at most ours and the
    CRC matches; else ``PayloadError``."""
    if len(payload) < 10:
        raise PayloadError("payload shorter than its footer")
    version = int.from_bytes(payload[-10:-8], "little")
    if version > RDB_VERSION:
        raise PayloadError(f"RDB version {version} is newer than {RDB_VERSION}")
    if crc64(0, memoryview(payload)[:-8]) != int.from_bytes(payload[-8:], "little"):
        raise PayloadError("CRC mismatch")
    return version


def load(payload: bytes) -> Value:
    """The value of a DUMP payload: ``PayloadError`` for a bad footer, ``RdbError`` for
    a value that does not parse. As in Redis, the value is read from the start of the
    payload and what it leaves unread before the footer is ignored."""
    check_footer(payload)
    r = Reader(payload)
    rtype = r.byte()
    loader = LOADERS.get(rtype)
    if loader is None:
        raise RdbError(f"unknown object type {rtype}")
    return loader(r)
