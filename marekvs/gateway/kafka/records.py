"""Record batches (message format v2) <-> stream entries in Korvet's layout.

The codec is kafka-python's ``kafka.record``: batch headers, varint records, CRC-32C and
the four compression codecs (gzip from the standard library, snappy, lz4 and zstd from
their packages). Produced batches are taken apart into one entry per record; a fetch builds
new batches from the entries (one per run of records whose offsets fit the batch's 32-bit
last-offset delta: offsets are sparse, ``offsets.py``), compressed with the topic's
``compression.type`` when it names a codec.

A record's fields: ``key`` and ``value`` (absent when null), ``timestamp`` (ms, decimal),
``header.<name>`` per header in order (a name may repeat; a null value reads back empty).
An entry written by a Redis client with other fields is read the same way: fields it does
not have are null, a ``timestamp`` that is not a number reads as the entry id's ms.
"""

from __future__ import annotations

import struct
from typing import Any, Iterable, NamedTuple

from kafka.record.default_records import DefaultRecordBatch, DefaultRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords

CODECS = {"none": 0, "uncompressed": 0, "producer": 0, "gzip": 1, "snappy": 2, "lz4": 3, "zstd": 4}
_I64 = struct.Struct(">q")
_I32 = struct.Struct(">i")
MAX_DELTA = (1 << 31) - 1
NO_PRODUCER = -1


class BadBatch(Exception):
    """A produced record set that cannot be stored: ``code`` is the Kafka error."""

    def __init__(self, code: int, message: str):
        super().__init__(message)
        self.code = code


class Batch(NamedTuple):
    producer_id: int
    producer_epoch: int
    base_sequence: int
    transactional: bool
    records: list[tuple[bytes | None, bytes | None, int, list[tuple[str, bytes | None]]]]
    size: int


def decode(data: bytes, corrupt: int, invalid: int) -> list[Batch]:
    """The batches of a produce request's record set (``corrupt``: the error code for a
    bad CRC, ``invalid``: for anything else a v2 broker refuses)."""
    out = []
    try:
        mr = MemoryRecords(bytes(data))
        while True:
            b = mr.next_batch()
            if b is None:
                break
            if not isinstance(b, DefaultRecordBatch):
                raise BadBatch(invalid, "record batches of message format 2 only")
            if not b.validate_crc():
                raise BadBatch(corrupt, "record batch CRC mismatch")
            if b.is_control_batch:
                raise BadBatch(invalid, "control batches are written by brokers only")
            recs = [(r.key, r.value, r.timestamp, list(r.headers)) for r in b]
            if len(recs) != b.records_count:
                raise BadBatch(corrupt, "record count does not match the batch header")
            out.append(Batch(b.producer_id, b.producer_epoch, b.base_sequence, b.is_transactional, recs,
                             b.size_in_bytes))
    except BadBatch:
        raise
    except Exception as e:  # truncated varints, bad lengths, a codec that fails to inflate
        raise BadBatch(corrupt, f"malformed record batch: {e!r}") from None
    if not out:
        raise BadBatch(invalid, "no record batch")
    return out


def entry_fields(key: bytes | None, value: bytes | None, timestamp: int,
                 headers: list[tuple[str, bytes | None]]) -> list[bytes]:
    fields: list[bytes] = []
    if key is not None:
        fields += [b"key", key]
    if value is not None:
        fields += [b"value", value]
    fields += [b"timestamp", b"%d" % timestamp]
    for name, v in headers:
        fields += [b"header." + name.encode("utf-8", "surrogateescape"), b"" if v is None else v]
    return fields


def record_of(ms: int, flat: list[bytes]) -> tuple[bytes | None, bytes | None, int, list[tuple[str, bytes]]]:
    key = value = None
    ts = ms
    headers = []
    for i in range(0, len(flat) - 1, 2):
        f, v = flat[i], flat[i + 1]
        if f == b"value":
            value = v
        elif f == b"key":
            key = v
        elif f == b"timestamp":
            try:
                ts = int(v)
            except ValueError:
                pass
        elif f.startswith(b"header."):
            headers.append((f[7:].decode("utf-8", "surrogateescape"), v))
    return key, value, ts, headers


def encode(entries: Iterable[tuple[int, Any, list[bytes]]], codec: int, leader_epoch: int,
           max_bytes: int) -> tuple[bytes, int]:
    """Record batches of ``entries`` ((offset, id, fields) in offset order) up to about
    ``max_bytes`` (the first record always goes, as Kafka returns a first batch larger
    than the limit), and how many records went."""
    out = bytearray()
    n = 0
    builder = None
    base = 0
    for off, sid, flat in entries:
        key, value, ts, headers = record_of(sid[0], flat)
        if builder is not None and off - base > MAX_DELTA:
            out += _finish(builder, base, leader_epoch)
            builder = None
        if builder is None:
            if n and len(out) >= max_bytes:
                break
            builder = DefaultRecordBatchBuilder(2, codec, False, NO_PRODUCER, -1, -1, 1 << 31)
            base = off
        builder.append(off - base, ts, key, value, headers)
        n += 1
        if len(out) + builder.size() >= max_bytes:
            out += _finish(builder, base, leader_epoch)
            builder = None
            break
    if builder is not None:
        out += _finish(builder, base, leader_epoch)
    return bytes(out), n


def _finish(builder: DefaultRecordBatchBuilder, base: int, leader_epoch: int) -> bytearray:
    buf = builder.build()
    _I64.pack_into(buf, 0, base)  # base offset and leader epoch sit before the CRC'd part
    _I32.pack_into(buf, 12, leader_epoch)
    return buf
