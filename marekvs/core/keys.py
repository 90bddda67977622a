"""Internal key layouts of the data model; every ``encode_*`` has a ``decode_*``.

All integers are big-endian so memcmp order is key order, and every key starts with
the big-endian u16 partition id so a partition is one contiguous key range::

    string           [pid:u16] b's' [userkey]
    collection head  [pid:u16] b'M' [klen] [userkey]
    hash field       [pid:u16] b'h' [klen] [userkey] [field]
    set member       [pid:u16] b'S' [klen] [userkey] [member]
    zset member      [pid:u16] b'z' [klen] [userkey] [member]
    zset score idx   [pid:u16] b'Z' [klen] [userkey] [score_be:u64] [member]
    list element     [pid:u16] b'q' [klen] [userkey] [pos:u64]
    hll register     [pid:u16] b'H' [klen] [userkey] [bucket:u16]
    stream entry     [pid:u16] b'x' [klen] [userkey] [id_ms:u64] [id_seq:u64]
    stream counters  [pid:u16] b'X' [klen] [userkey] [origin:u16]
    consumer group   [pid:u16] b'g' [klen] [userkey] [group]
    group consumer   [pid:u16] b'c' [klen] [userkey] [glen] [group] [consumer]
    pending entry    [pid:u16] b'p' [klen] [userkey] [glen] [group] [id_ms:u64] [id_seq:u64]
    ACL user         [pid:u16] b'U' [user name]
    function library [pid:u16] b'F' [library name]

``klen`` is an unsigned LEB128 varint of the user key's length, so an element key can
never collide with a user key that embeds another; ``glen`` is the same varint for a
consumer group's name, so one group's consumers (or pending entries) are one prefix. The tag b'l' (whole-list blob) is
retired and reserved: nothing writes or reads it.

ACL users (ACL SETUSER) and function libraries (FUNCTION LOAD) are node-level records,
not keys: their tags b'U' and b'F' are key spaces of their own that no user key reaches
(user keys live under b's' and b'M'), and their pid is the partition of the user or
library name, so they live in ordinary partitions and bootstrap, replication and the
sweeper carry them like any record.

Zset scores are encoded as order-preserving u64: positive doubles (and +0.0) get the
sign bit set, negative doubles are bit-inverted, so -inf < negatives < 0 < positives <
+inf in memcmp order. -0.0 is normalised to +0.0 in the index key (Redis orders them
as equal, and the member record keeps the exact score).
"""

from __future__ import annotations

import math
import struct

from marekvs.core.partition import partition_of as partition_of  # part of this module's API

TAG_STRING = b"s"
TAG_HEAD = b"M"
TAG_HASH = b"h"
TAG_SET = b"S"
TAG_ZSET = b"z"
TAG_ZSCORE = b"Z"
TAG_LIST = b"q"
TAG_HLL = b"H"
TAG_STREAM = b"x"
TAG_STREAM_COUNTER = b"X"  # stream consumer groups (core/streamgroup.py) and counters
TAG_GROUP = b"g"
TAG_CONSUMER = b"c"
TAG_PENDING = b"p"
TAG_LIST_RETIRED = b"l"  # reserved, never written
TAG_USER = b"U"  # ACL users (node-level records, not keys)
TAG_FUNCTION = b"F"  # function libraries (node-level records, not keys)
TAG_AT = 2  # ikey[TAG_AT] is the tag byte (after the u16 pid)
STRING_USERKEY_AT = 3  # a string key's user key is ikey[STRING_USERKEY_AT:]
ORD_STRING = TAG_STRING[0]
ORD_HEAD = TAG_HEAD[0]
ORD_USER = TAG_USER[0]
ORD_FUNCTION = TAG_FUNCTION[0]

_U16 = struct.Struct(">H")
_U64 = struct.Struct(">Q")
_U64x2 = struct.Struct(">QQ")
_D = struct.Struct(">d")

LIST_CENTER = 1 << 63


class KeyDecodeError(ValueError):
    """An internal key that does not follow the layouts above."""


# -- varint (unsigned LEB128) ---------------------------------------------------------

def encode_varint(n: int) -> bytes:
    if n < 0:
        raise ValueError("varint must be non-negative")
    if n < 0x80:
        return bytes((n,))
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def decode_varint(buf: bytes, pos: int = 0) -> tuple[int, int]:
    """Return (value, next position)."""
    shift = 0
    n = 0
    while True:
        if pos >= len(buf):
            raise KeyDecodeError("truncated varint")
        b = buf[pos]
        pos += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            if b == 0 and shift:
                raise KeyDecodeError("overlong varint")  # one value, one encoding
            if shift == 63 and b > 1:
                raise KeyDecodeError("varint exceeds u64")
            return n, pos
        shift += 7
        if shift > 63:
            raise KeyDecodeError("varint too long")


# -- scores --------------------------------------------------------------------------

def encode_score(score: float) -> bytes:
    if math.isnan(score):
        raise ValueError("NaN is not a valid score")
    if score == 0.0:
        score = 0.0  # -0.0 -> +0.0
    (bits,) = _U64.unpack(_D.pack(score))
    if bits & (1 << 63):
        bits = ~bits & 0xFFFFFFFFFFFFFFFF
    else:
        bits |= 1 << 63
    return _U64.pack(bits)


def decode_score(b: bytes) -> float:
    (bits,) = _U64.unpack(b)
    if bits & (1 << 63):
        bits &= ~(1 << 63) & 0xFFFFFFFFFFFFFFFF
    else:
        bits = ~bits & 0xFFFFFFFFFFFFFFFF
    score: float = _D.unpack(_U64.pack(bits))[0]
    return score


# -- key builders ----------------------------------------------------------------------

def pid_prefix(pid: int) -> bytes:
    return _U16.pack(pid)


def encode_string_key(userkey: bytes) -> bytes:
    return _U16.pack(partition_of(userkey)) + TAG_STRING + userkey


def locate_string(userkey: bytes) -> tuple[int, bytes]:
    """(pid, string key) of a user key: the first step of every string command."""
    pid = partition_of(userkey)
    return pid, _U16.pack(pid) + TAG_STRING + userkey


def string_key_in(pid: int, userkey: bytes) -> bytes:
    """The string key of ``userkey`` whose partition ``pid`` the caller computed."""
    return _U16.pack(pid) + TAG_STRING + userkey


def head_key_of_string_key(string_ikey: bytes) -> bytes:
    """The collection-head key of the user key whose string key is ``string_ikey`` (same
    partition: no second hash)."""
    n = len(string_ikey) - 3
    klen = bytes((n,)) if n < 0x80 else encode_varint(n)
    return string_ikey[:2] + TAG_HEAD + klen + string_ikey[3:]


def decode_string_key(ikey: bytes) -> bytes:
    if len(ikey) < 3 or ikey[2:3] != TAG_STRING:
        raise KeyDecodeError("not a string key")
    return ikey[3:]


def collection_prefix(tag: bytes, userkey: bytes) -> bytes:
    """``[pid][tag][klen][userkey]``: the head key itself for b'M', else the prefix
    shared by every element record of the collection."""
    return _U16.pack(partition_of(userkey)) + tag + encode_varint(len(userkey)) + userkey


def encode_head_key(userkey: bytes) -> bytes:
    return collection_prefix(TAG_HEAD, userkey)


def _decode_collection(ikey: bytes, tag: bytes) -> tuple[bytes, int]:
    """Return (userkey, position after it) of a ``[pid][tag][klen][userkey]...`` key."""
    if len(ikey) < 4 or ikey[2:3] != tag:
        raise KeyDecodeError(f"not a {tag!r} key")
    klen, pos = decode_varint(ikey, 3)
    end = pos + klen
    if end > len(ikey):
        raise KeyDecodeError("user key runs past the end")
    return ikey[pos:end], end


def decode_head_key(ikey: bytes) -> bytes:
    userkey, end = _decode_collection(ikey, TAG_HEAD)
    if end != len(ikey):
        raise KeyDecodeError("trailing bytes after head key")
    return userkey


def encode_hash_field_key(userkey: bytes, field: bytes) -> bytes:
    return collection_prefix(TAG_HASH, userkey) + field


def decode_hash_field_key(ikey: bytes) -> tuple[bytes, bytes]:
    userkey, end = _decode_collection(ikey, TAG_HASH)
    return userkey, ikey[end:]


def encode_set_member_key(userkey: bytes, member: bytes) -> bytes:
    return collection_prefix(TAG_SET, userkey) + member


def decode_set_member_key(ikey: bytes) -> tuple[bytes, bytes]:
    userkey, end = _decode_collection(ikey, TAG_SET)
    return userkey, ikey[end:]


def encode_zset_member_key(userkey: bytes, member: bytes) -> bytes:
    return collection_prefix(TAG_ZSET, userkey) + member


def decode_zset_member_key(ikey: bytes) -> tuple[bytes, bytes]:
    userkey, end = _decode_collection(ikey, TAG_ZSET)
    return userkey, ikey[end:]


def encode_zset_score_key(userkey: bytes, score: float, member: bytes) -> bytes:
    return collection_prefix(TAG_ZSCORE, userkey) + encode_score(score) + member


def decode_zset_score_key(ikey: bytes) -> tuple[bytes, float, bytes]:
    userkey, end = _decode_collection(ikey, TAG_ZSCORE)
    if end + 8 > len(ikey):
        raise KeyDecodeError("truncated score")
    return userkey, decode_score(ikey[end : end + 8]), ikey[end + 8 :]


def encode_list_key(userkey: bytes, pos: int) -> bytes:
    return collection_prefix(TAG_LIST, userkey) + _U64.pack(pos)


def decode_list_key(ikey: bytes) -> tuple[bytes, int]:
    userkey, end = _decode_collection(ikey, TAG_LIST)
    if end + 8 != len(ikey):
        raise KeyDecodeError("list key needs exactly a u64 position")
    return userkey, _U64.unpack_from(ikey, end)[0]


def encode_hll_key(userkey: bytes, bucket: int) -> bytes:
    return collection_prefix(TAG_HLL, userkey) + _U16.pack(bucket)


def decode_hll_key(ikey: bytes) -> tuple[bytes, int]:
    userkey, end = _decode_collection(ikey, TAG_HLL)
    if end + 2 != len(ikey):
        raise KeyDecodeError("hll key needs exactly a u16 bucket")
    return userkey, _U16.unpack_from(ikey, end)[0]


def encode_stream_key(userkey: bytes, ms: int, seq: int) -> bytes:
    return collection_prefix(TAG_STREAM, userkey) + _U64x2.pack(ms, seq)


def decode_stream_key(ikey: bytes) -> tuple[bytes, int, int]:
    userkey, end = _decode_collection(ikey, TAG_STREAM)
    if end + 16 != len(ikey):
        raise KeyDecodeError("stream key needs exactly u64 ms and u64 seq")
    ms, seq = _U64x2.unpack_from(ikey, end)
    return userkey, ms, seq


# -- streams: per-origin counters and consumer groups -----------------------------------

def encode_stream_counter_key(userkey: bytes, origin: int) -> bytes:
    return collection_prefix(TAG_STREAM_COUNTER, userkey) + _U16.pack(origin)


def decode_stream_counter_key(ikey: bytes) -> tuple[bytes, int]:
    userkey, end = _decode_collection(ikey, TAG_STREAM_COUNTER)
    if end + 2 != len(ikey):
        raise KeyDecodeError("stream counter key needs exactly a u16 origin")
    return userkey, _U16.unpack_from(ikey, end)[0]


def encode_group_key(userkey: bytes, group: bytes) -> bytes:
    return collection_prefix(TAG_GROUP, userkey) + group


def decode_group_key(ikey: bytes) -> tuple[bytes, bytes]:
    userkey, end = _decode_collection(ikey, TAG_GROUP)
    return userkey, ikey[end:]


def group_prefix(tag: bytes, userkey: bytes, group: bytes) -> bytes:
    """``[pid][tag][klen][userkey][glen][group]``: the prefix of one group's consumers
    (``TAG_CONSUMER``) or pending entries (``TAG_PENDING``)."""
    return collection_prefix(tag, userkey) + encode_varint(len(group)) + group


def _decode_in_group(ikey: bytes, tag: bytes) -> tuple[bytes, bytes, int]:
    userkey, pos = _decode_collection(ikey, tag)
    glen, pos = decode_varint(ikey, pos)
    end = pos + glen
    if end > len(ikey):
        raise KeyDecodeError("group name runs past the end")
    return userkey, ikey[pos:end], end


def encode_consumer_key(userkey: bytes, group: bytes, consumer: bytes) -> bytes:
    return group_prefix(TAG_CONSUMER, userkey, group) + consumer


def decode_consumer_key(ikey: bytes) -> tuple[bytes, bytes, bytes]:
    userkey, group, end = _decode_in_group(ikey, TAG_CONSUMER)
    return userkey, group, ikey[end:]


def encode_pending_key(userkey: bytes, group: bytes, ms: int, seq: int) -> bytes:
    return group_prefix(TAG_PENDING, userkey, group) + _U64x2.pack(ms, seq)


def decode_pending_key(ikey: bytes) -> tuple[bytes, bytes, int, int]:
    userkey, group, end = _decode_in_group(ikey, TAG_PENDING)
    if end + 16 != len(ikey):
        raise KeyDecodeError("pending entry key needs exactly u64 ms and u64 seq after the group")
    ms, seq = _U64x2.unpack_from(ikey, end)
    return userkey, group, ms, seq


# -- the same collection under another tag, without hashing its user key again ------------
# (a command on one stream builds keys under several tags: entries, counters, groups,
# consumers, pending entries; each encode_* above hashes the user key for the pid)

def retag(prefix: bytes, tag: bytes) -> bytes:
    """The collection prefix ``[pid][tag][klen][userkey]`` of the user key whose prefix
    under another tag is ``prefix``."""
    return prefix[:2] + tag + prefix[3:]


def id_suffix(ms: int, seq: int) -> bytes:
    """The ``[id_ms:u64][id_seq:u64]`` that ends stream entry and pending entry keys."""
    return _U64x2.pack(ms, seq)


def group_suffix(group: bytes) -> bytes:
    """The ``[glen][group]`` after the collection prefix of consumer and pending keys."""
    return encode_varint(len(group)) + group


def origin_suffix(origin: int) -> bytes:
    """The ``[origin:u16]`` that ends a stream counters key."""
    return _U16.pack(origin)


def encode_user_key(name: bytes) -> bytes:
    """The record of the ACL user ``name``: ``[pid(name)] 'U' [name]``."""
    return _U16.pack(partition_of(name)) + TAG_USER + name


def decode_user_key(ikey: bytes) -> bytes:
    """The user name of an ACL-user key (Redis allows the empty name)."""
    if len(ikey) < 3 or ikey[2:3] != TAG_USER:
        raise KeyDecodeError("not an ACL-user key")
    return ikey[3:]


def encode_function_key(name: bytes) -> bytes:
    """The record of the function library ``name``: ``[pid(name)] 'F' [name]``."""
    return _U16.pack(partition_of(name)) + TAG_FUNCTION + name


def decode_function_key(ikey: bytes) -> bytes:
    """The library name of a function-library key."""
    if len(ikey) < 3 or ikey[2:3] != TAG_FUNCTION:
        raise KeyDecodeError("not a function-library key")
    return ikey[3:]


def pid_of_ikey(ikey: bytes) -> int:
    pid: int = _U16.unpack_from(ikey, 0)[0]
    return pid


def tag_of_ikey(ikey: bytes) -> bytes:
    return ikey[2:3]


def user_key_of(ikey: bytes) -> bytes:
    """The user key of any internal key (string or collection layout; an ACL user's key
    gives its user name, a function library's key its library name)."""
    tag = ikey[2:3]
    if tag == TAG_STRING or tag == TAG_USER or tag == TAG_FUNCTION:
        return ikey[3:]
    return _decode_collection(ikey, tag)[0]
