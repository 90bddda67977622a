"""Validation of records received from a peer, before anything is written.

The rules are the record-kind registry's (``core.registry.check_record``): a record is
accepted only if its internal key follows the layout of a known tag (and its pid is
the partition of its user key), its value holds a whole envelope with no reserved
flag bits, the collection-head flag and the record type fit the tag, and its payload
parses where merge or a read would parse it (counters, heads, ORSWOT elements, HLL
registers, stream entries). One bad record refuses the whole batch.
"""

from __future__ import annotations

from marekvs.core import registry
from marekvs.core.partition import hash64


class BadRecord(ValueError):
    pass


def check_record(key: bytes, value: bytes) -> None:
    try:
        registry.check_record(key, value)
    except registry.InvalidRecord as e:
        raise BadRecord(str(e)) from None


def check_flat(flat: list) -> list[tuple[bytes, bytes]]:
    """``check_record`` over ``[ikey, value, ikey, value, ...]``; returns the pairs.

    The bulk of replication traffic is plain string records (tag ``s`` = 0x73, flags
    with at most the tombstone bit: record type 0, no head, no reserved bits) whose key
    holds no ``{`` (0x7B, so the whole user key is hashed). They are checked inline here:
    the checks ``registry.STRING`` makes of them (no payload check for a plain string);
    everything else goes through ``check_record``. tests/unit/test_replication_codec.py
    and tests/merge_laws/test_registry.py pin this to the general path.
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
