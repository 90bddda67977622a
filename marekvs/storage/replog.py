"""The replication log: what the local commands of each committed batch changed.

Column family ``replog``: local sequence number (u64 BE) -> one entry, msgpack
``[epoch, [ikey, ...]]``: the internal keys one committed batch of local commands
changed, in the order they first changed. Shipping reads each key's *current* record: it
dominates the one the command wrote (every later record is a join over it), so peers
converge to the same state while the log stays small and a batch costs one extra put.
(Entries written before epochs existed are a bare ``[ikey, ...]``; their epoch reads 0,
"unknown".)

Positions are never reused. ``last`` is the highest sequence number the log ever held:
the newest entry, or the trim floor when every entry was trimmed. A trim deletes its range
and records the floor (``meta log_trimmed = "<seq>:<epoch>"``) in ONE WriteBatch, so no
crash, clean stop or trimmed-empty log can make a restart number its log from 1 again
(peers would skip those entries as already applied: the defect this layout fixes).

Epochs. Every opening of the data directory draws a random 63-bit *epoch*, stored in each
entry it writes. A peer records the epoch of the last entry it applied next to its
high-water mark. If this node's entry at that position carries another epoch (or the
position is past this log's end), the data directory lost entries that peers had applied:
it was restored from an older copy, or a disk lost its newest files, and the process that
now writes there reuses positions peers consider applied. Replication checks this at every
handshake (``epoch_of``) and then takes a new incarnation (``replication/manager.py``).

The newest entries are also kept in memory (``recent``) as their records, packed to the
wire form on a sender's first request, once the node has a peer (``keep_recent``).
"""

from __future__ import annotations

import os
import struct
from typing import Any, Callable

import msgpack
from rocksdict import ReadOptions, WriteBatch, WriteOptions

_U64 = struct.Struct(">Q")
RECENT_ENTRIES_BYTES = 32 << 20
_TRIMMED = b"log_trimmed"


def new_epoch() -> int:
    return int.from_bytes(os.urandom(8), "big") >> 1


def decode_entry(value: bytes) -> tuple[int, list[bytes]]:
    """(epoch, keys) of a stored entry (epoch 0 for the format without one)."""
    v = msgpack.unpackb(value)
    if v and type(v[0]) is int:
        return v[0], v[1]
    return 0, v


def entry_bytes(e: bytes | list[bytes]) -> int:
    """What a ring entry is charged: its size packed, or an estimate of the list's."""
    return len(e) if type(e) is bytes else 64 * len(e) + sum(map(len, e))


class ReplicationLog:
    def __init__(self, db: Any, cf: Any, handle: Any, meta: Any, meta_handle: Any):
        self.db = db
        self.cf = cf
        self.handle = handle
        self.meta = meta
        self.meta_handle = meta_handle
        self.epoch = new_epoch()
        trimmed = meta.get(_TRIMMED)
        if trimmed:
            seq, _, ep = trimmed.partition(b":")
            self.trimmed, self.trimmed_epoch = int(seq), int(ep or 0)
        else:
            self.trimmed, self.trimmed_epoch = 0, 0
        it = cf.iter(ReadOptions())
        it.seek_to_last()
        newest = _U64.unpack(it.key())[0] if it.valid() else 0
        self.last = max(newest, self.trimmed)  # the highest position ever used
        it.seek_to_first()
        self.first = _U64.unpack(it.key())[0] if it.valid() else self.last + 1
        # The newest entries as the commit wrote them ([ikey, value, ...]; packed to their
        # wire form on a sender's first request), so shipping does not re-read and
        # re-encode them. Kept only once the node has a peer: a lone node never pays.
        self.keep_recent = False
        self.recent: dict[int, bytes | list[bytes]] = {}
        self.recent_bytes = 0

    def close(self) -> None:
        """Drop the column-family handles (they keep the database open)."""
        self.db = self.cf = self.handle = self.meta = self.meta_handle = None

    def rebind(self, db: Any, cf: Any, handle: Any, meta: Any, meta_handle: Any) -> None:
        """The database was opened again (``Engine.recover``): the same log, new handles."""
        self.db, self.cf, self.handle, self.meta, self.meta_handle = db, cf, handle, meta, meta_handle

    # -- writing -----------------------------------------------------------------------
    def stage(self, wb: WriteBatch, keys: list[bytes]) -> int:
        """Add the entry naming ``keys`` to the commit's WriteBatch; return the position it
        takes once the batch is written (``appended``). Nothing changes before that: a
        batch that fails to be written leaves the log as it was."""
        seq = self.last + 1
        wb.put(_U64.pack(seq), msgpack.packb([self.epoch, keys]), self.handle)
        return seq

    def appended(self, seq: int, keys: list[bytes], pending: dict[bytes, bytes | None]) -> None:
        """The batch holding the entry ``stage`` put at ``seq`` is written."""
        self.last = seq
        if self.keep_recent:
            self._remember(seq, keys, pending)

    def _remember(self, seq: int, keys: list[bytes], pending: dict[bytes, bytes | None]) -> None:
        flat = []
        for k in keys:
            v = pending[k]
            if v is not None:  # (a purge in the same batch leaves nothing to ship)
                flat.append(k)
                flat.append(v)
        ring = self.recent
        ring[seq] = flat
        self.recent_bytes += entry_bytes(flat)
        while self.recent_bytes > RECENT_ENTRIES_BYTES and len(ring) > 1:
            first = next(iter(ring))
            self.recent_bytes -= entry_bytes(ring.pop(first))

    def trim(self, upto: int, wopts: WriteOptions) -> None:
        """Drop entries with seq <= ``upto`` (never past the newest), recording the floor
        and its epoch in the same WriteBatch."""
        upto = min(upto, self.last)
        if upto < self.first:
            return
        epoch = self.epoch_of(upto) or 0
        wb = WriteBatch(raw_mode=True)
        wb.delete_range(_U64.pack(self.first), _U64.pack(upto + 1), self.handle)
        wb.put(_TRIMMED, b"%d:%d" % (upto, epoch), self.meta_handle)
        self.db.write(wb, wopts)
        self.trimmed, self.trimmed_epoch = upto, epoch
        self.first = upto + 1

    # -- reading -------------------------------------------------------------------------
    def epoch_of(self, seq: int) -> int | None:
        """The epoch of the entry at ``seq`` (0: written before epochs), or None if the
        log cannot tell (trimmed below its floor, or never written)."""
        if seq == self.trimmed and 0 < seq < self.first:
            return self.trimmed_epoch
        if not self.first <= seq <= self.last:
            return None
        v = self.cf.get(_U64.pack(seq))
        return None if v is None else decode_entry(v)[0]

    def read(self, after: int, limit: int, max_bytes: int,
             get: Callable[[bytes], bytes | None]) -> list[tuple[int, list[tuple[bytes, bytes]]]]:
        """Up to ``limit`` committed entries with seq > ``after`` (no more once their
        records reach ``max_bytes``; always at least one), each with the current record
        of every key it names (``get``; keys purged since are left out)."""
        out = []
        it = self.cf.iter(ReadOptions())
        it.seek(_U64.pack(after + 1))
        size = 0
        while it.valid() and len(out) < limit and size < max_bytes:
            recs = []
            for k in decode_entry(it.value())[1]:
                v = get(k)
                if v is not None:
                    recs.append((k, v))
                    size += len(k) + len(v)
            out.append((_U64.unpack(it.key())[0], recs))
            it.next()
        return out

    def recent_packed(self, after: int, limit: int, max_bytes: int = 1 << 62) -> list[bytes] | None:
        """Packed wire entries ``after+1 ..`` (up to ``limit`` entries, and no more once
        they reach ``max_bytes``; always at least one) if the in-memory ring still holds
        ``after+1``; None sends the caller to ``read``. An entry is packed
        (``[seq, [ikey, value, ...]]``) on first use and kept packed."""
        ring = self.recent
        if after + 1 not in ring:
            return None
        out = []
        seq = after + 1
        size = 0
        packb = msgpack.packb
        while seq in ring and len(out) < limit and size < max_bytes:
            e = ring[seq]
            if type(e) is list:
                b = packb([seq, e])
                self.recent_bytes += len(b) - entry_bytes(e)
                ring[seq] = e = b
            out.append(e)
            size += len(e)
            seq += 1
        return out

    def newest_keys(self, entries: int, probes: int) -> list[bytes]:
        """The first and last ``probes`` keys of each of the newest ``entries`` entries
        (keys are in the order a batch first changed them, and stamps grow within one)."""
        out: list[bytes] = []
        it = self.cf.iter(ReadOptions())
        it.seek_to_last()
        for _ in range(entries):
            if not it.valid():
                break
            keys = decode_entry(it.value())[1]
            if len(keys) > 2 * probes:
                keys = keys[:probes] + keys[-probes:]
            out += keys
            it.prev()
        return out
