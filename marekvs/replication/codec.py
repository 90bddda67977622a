"""Encoding of log entries inside a ``Batch`` (msgpack), and its strict decoder.

Wire form: ``[[seq, [ikey, value, ikey, value, ...]], ...]``. The decoder refuses
anything that is not exactly that shape (types, pairing, ascending consecutive
sequence numbers) with ``BadRecord``; record contents are checked by
``validate.check_flat`` (``check_record`` for each record).
"""

from __future__ import annotations

import msgpack

from marekvs.replication.validate import BadRecord, check_flat

Entries = list[tuple[int, list[tuple[bytes, bytes]]]]


def pack_entries(entries: Entries) -> bytes:
    out = []
    for seq, recs in entries:
        flat: list[bytes] = []
        for k, v in recs:
            flat.append(k)
            flat.append(v)
        out.append([seq, flat])
    return msgpack.packb(out)


def unpack_entries(payload: bytes) -> Entries:
    """Decode and validate a batch's entries; ``BadRecord`` on anything malformed."""
    try:
        raw = msgpack.unpackb(payload, use_list=True, raw=True, strict_map_key=True)
    except (ValueError, msgpack.ExtraData, msgpack.FormatError, msgpack.StackError) as e:
        raise BadRecord(f"undecodable entries: {e}") from None
    if not isinstance(raw, list):
        raise BadRecord("entries are not a list")
    out: Entries = []
    prev = None
    for item in raw:
        if not (isinstance(item, list) and len(item) == 2 and type(item[0]) is int
                and isinstance(item[1], list) and len(item[1]) % 2 == 0):
            raise BadRecord("an entry is not [seq, [ikey, value, ...]]")
        seq, flat = item
        if prev is not None and seq != prev + 1:
            raise BadRecord(f"entries {prev} and {seq} are not consecutive")
        prev = seq
        out.append((seq, check_flat(flat)))
    return out
