"""Validation of records received from a peer, before anything is written.

A record is accepted only if its internal key follows one of the data model's layouts
(and its pid is the partition of its user key), its value holds a whole envelope with
no reserved flag bits, its record type fits its key's tag, and its payload parses
where the format is structured (counters). One bad record refuses the whole batch.
"""

from __future__ import annotations

from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core.envelope import RecordType
from marekvs.core.partition import hash64, partition_of
from marekvs.core.pncounter import PNCounter

_DECODERS = {
    K.TAG_STRING: K.decode_string_key,
    K.TAG_HEAD: K.decode_head_key,
    K.TAG_HASH: K.decode_hash_field_key,
    K.TAG_SET: K.decode_set_member_key,
    K.TAG_ZSET: K.decode_zset_member_key,
    K.TAG_ZSCORE: K.decode_zset_score_key,
    K.TAG_LIST: K.decode_list_key,
    K.TAG_HLL: K.decode_hll_key,
    K.TAG_STREAM: K.decode_stream_key,
}
_TYPES = {
    K.TAG_STRING: (RecordType.STRING, RecordType.COUNTER),
    K.TAG_HASH: (RecordType.HASH_FIELD,),
    K.TAG_SET: (RecordType.SET_MEMBER,),
    K.TAG_ZSET: (RecordType.ZSET_MEMBER,),
    K.TAG_ZSCORE: (RecordType.ZSET_MEMBER,),
    K.TAG_LIST: (RecordType.LIST,),
    K.TAG_HLL: (RecordType.HLL_REGISTER,),
    K.TAG_STREAM: (RecordType.STREAM_ENTRY,),
}


class BadRecord(ValueError):
    pass


def check_record(key: bytes, value: bytes) -> None:
    if len(key) < 3:
        raise BadRecord(f"internal key of {len(key)} bytes is truncated")
    tag = key[2:3]
    if tag == K.TAG_STRING:  # the common record: the rest of the key is the user key
        userkey = key[3:]
    else:
        dec = _DECODERS.get(tag)
        if dec is None:
            raise BadRecord(f"unknown key tag {tag!r}")
        try:
            decoded = dec(key)
        except (K.KeyDecodeError, ValueError) as e:
            raise BadRecord(f"malformed {tag!r} key: {e}") from None
        userkey = decoded if isinstance(decoded, bytes) else decoded[0]
    if partition_of(userkey) != (key[0] << 8 | key[1]):
        raise BadRecord("key's partition id does not match its user key")
    if len(value) < env.ENVELOPE_SIZE:
        raise BadRecord(f"value of {len(value)} bytes is shorter than the 19-byte envelope")
    flags = value[0]
    if flags & 0xE0:
        raise BadRecord(f"reserved envelope flag bits set ({flags:#04x})")
    is_head = bool(flags & env.FLAG_HEAD)
    if (tag == K.TAG_HEAD) != is_head:
        raise BadRecord("collection-head flag does not match the key")
    rtype = (flags >> 2) & 7
    allowed = _TYPES.get(tag)
    if allowed is not None and rtype not in allowed:
        raise BadRecord(f"record type {rtype} does not belong under tag {tag!r}")
    if rtype == RecordType.COUNTER and not flags & env.FLAG_TOMBSTONE:
        try:
            PNCounter.from_bytes(value[env.ENVELOPE_SIZE:])
        except ValueError as e:
            raise BadRecord(f"bad counter payload: {e}") from None


def check_flat(flat: list) -> list[tuple[bytes, bytes]]:
    """``check_record`` over ``[ikey, value, ikey, value, ...]``; returns the pairs.

    The bulk of replication traffic is plain string records (tag ``s``, flags with at
    most the tombstone bit: record type 0, no head, no reserved bits) whose key holds
    no ``{`` (so the whole user key is hashed). They are checked inline here - the
    same checks ``check_record`` makes for them; everything else goes through it.
    """
    keys = flat[0::2]
    values = flat[1::2]
    if len(keys) != len(values):
        raise BadRecord("an entry's records are not ikey/value pairs")
    for k, v in zip(keys, values):
        if type(k) is not bytes or type(v) is not bytes:
            raise BadRecord("a record's key or value is not bytes")
        if (len(k) > 2 and k[2] == 0x73 and len(v) >= 19 and not v[0] & 0xFE and 0x7B not in k
                and hash64(k[3:]) >> 52 == (k[0] << 8 | k[1])):
            continue
        check_record(k, v)
    return list(zip(keys, values))
