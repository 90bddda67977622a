"""The kept digest: the root and segment hashes of every partition (``core/digest.py``),
exact after every commit and durable in the same WriteBatch as the data it describes.

In memory: ``segs``, one u64 per (partition, segment) slot, ``pid << 4 | segment``
(4096 x 16 = 65,536 slots, 512 KB: small enough to stay in a core's cache; a table of
256 segments per partition, 8 MB, cost a cache miss per write). Roots are XORed from the
segments when asked for.

How a commit keeps it (``Engine.apply``/``purge``/``commit``):

- ``apply`` and ``purge`` append each change's slot and delta, ``H(new) ^ H(old)`` (``b""``
  for an absent record), to ``slots``/``xs``. They hash the two records right where the
  merge has just read them: hashed at commit instead, the replaced records had left the
  CPU's cache and their hashes cost ~3x as much (measured). Several changes of one key in
  a batch telescope: their XOR is H(final) ^ H(before the batch).
- ``prepare`` (in ``commit``, before the WriteBatch is written) puts ONE delta entry with
  the batch's slots and deltas into the commit's WriteBatch: a crash loses the data and
  its deltas together, never one of them.
- ``applied`` (after the write succeeded) XORs the deltas into ``segs`` (a ``map`` over
  the batch, no Python loop).

Column family ``digest``::

    b"F"          b"<format>": present = the kept digest covers the data
    b"C"          checkpoint: every slot, u64 BE (512 KB)
    b"D" seq:u64  one commit's deltas: n:u32, n x slot:u32, n x delta:u64 (BE)

The kept digest is the checkpoint XOR every delta entry (replayed in order at open).
Once the entries hold ``CHECKPOINT_DELTAS`` deltas, a checkpoint writes the table and
deletes every entry (its own WriteBatch, written right after a commit: either it
happened or the entries are all still there). A clean close checkpoints.

The table has every partition's slots; an engine over a range of partitions
(``Engine.partitions``) keeps only its range's, and its rebuild at open reads only them.

Missing or doubted digests are rebuilt from the data: at open when the marker is missing
(a data directory written before digests existed, or whose digest was dropped);
``rebuild`` (``marekvs digest --rebuild``); one partition at a time by ``correct`` when a
verification (the partition's segments recomputed from its records, compared with the
kept ones) finds it wrong, e.g. after a record was deleted behind the engine's back. A
correction is a delta too, written with the next commit.
"""

from __future__ import annotations

import logging
import struct
import sys
from array import array
from collections import deque
from operator import xor
from typing import Any, Iterable, Iterator

from rocksdict import ReadOptions, WriteBatch, WriteOptions

from marekvs.core import digest as D
from marekvs.core.partition import ALL, PARTITIONS, PartitionRange

log = logging.getLogger("marekvs.storage")

CHECKPOINT_DELTAS = 1 << 18  # deltas kept as entries before a checkpoint (~3 MB; ~0.1 s to replay)
_MARKER = b"F"
_CKPT = b"C"
_DELTA = b"D"
_U32 = struct.Struct(">I")
_U64 = struct.Struct(">Q")
_LITTLE = sys.byteorder == "little"
_h = key_hash = D.key_hash
_E = D.EMPTY
_BITS = D.SEGMENT_BITS
_SHIFT = D.SEGMENT_SHIFT
_NSEG = D.SEGMENTS


def _be(a: array) -> bytes:
    if _LITTLE:
        a = array(a.typecode, a)
        a.byteswap()
    return a.tobytes()


def _from_be(typecode: str, b: bytes) -> array:
    a = array(typecode, b)
    if _LITTLE:
        a.byteswap()
    return a


class KeptDigest:
    def __init__(self, db: Any, cf: Any, handle: Any, data: Any, partitions: PartitionRange = ALL):
        self.db = db
        self.cf = cf
        self.handle = handle
        self.segs = array("Q", bytes(8 * D.SLOTS))
        self.slots: list[int] = []  # the slot of each change in the pending batch ...
        self.xs: list[int] = []  # ... and its delta (the engine appends them)
        self.seq = 0  # the newest delta entry
        self.deltas = 0  # deltas held in entries since the last checkpoint
        self._fixes: list[tuple[int, int]] = []  # (slot, xor) corrections for the next commit
        self.corrected = 0  # partitions ``correct`` found wrong
        self.rebuilt_at_open = False
        marker = cf.get(_MARKER)
        if marker == b"%d" % D.FORMAT:
            self._load()
            return
        it = data.iter(ReadOptions())
        it.seek(partitions.start_key)
        if marker is None and not (it.valid() and it.key() < partitions.end_key):
            cf.put(_MARKER, b"%d" % D.FORMAT)  # a new data directory: the digest of nothing
            return
        del it
        log.warning("the data directory has no digest of its data (%s): rebuilding it from the data",
                    "written before digests" if marker is None else f"digest format {marker!r}")
        self.rebuild(_scan_range(data, partitions))
        self.rebuilt_at_open = True

    def close(self) -> None:
        self.db = self.cf = self.handle = None

    # -- the commit path --------------------------------------------------------------------
    def removed(self, ikey: bytes, old: bytes | None) -> None:
        """A record is physically removed (the engine's ``purge``)."""
        kh = _h(ikey)
        self.slots.append((((ikey[0] << 8) | ikey[1]) << _BITS) | (kh >> _SHIFT))
        self.xs.append(_h(_E, kh) ^ _h(old or _E, kh))

    def rebind(self, db: Any, cf: Any, handle: Any) -> None:
        """The database was opened again (``Engine.recover``): new handles."""
        self.db, self.cf, self.handle = db, cf, handle

    def prepare(self, wb: WriteBatch) -> tuple[array, array, int] | None:
        """Put the delta entry of the pending batch (and of queued corrections) into ``wb``;
        hand the result to ``applied`` once ``wb`` is written."""
        if not self.slots and not self._fixes:
            return None
        slots = array("I", self.slots)
        xs = array("Q", self.xs)
        fixes = len(self._fixes)
        if fixes:
            slots.extend(s for s, _ in self._fixes)
            xs.extend(x for _, x in self._fixes)
        wb.put(_DELTA + _U64.pack(self.seq + 1), _U32.pack(len(xs)) + _be(slots) + _be(xs), self.handle)
        return slots, xs, fixes

    def applied(self, prepared: tuple[array, array, int] | None) -> None:
        """The WriteBatch of ``prepared`` is written: fold its deltas into the segments.
        (Until then nothing changed: a batch that fails to be written is prepared again,
        with whatever came since, by the next commit.)"""
        if prepared is None:
            return
        self.seq += 1
        self.slots.clear()
        self.xs.clear()
        slots, xs, fixes = prepared
        del self._fixes[:fixes]
        segs = self.segs
        # segs[slot] ^= x for each pair, in order (a slot may repeat: each read sees the
        # write before it, as the maps are consumed one element at a time)
        deque(map(segs.__setitem__, slots, map(xor, map(segs.__getitem__, slots), xs)), 0)
        self.deltas += len(xs)
        if self.deltas >= CHECKPOINT_DELTAS:
            try:
                self.checkpoint()
            except Exception as e:  # (a full disk: the deltas stay, the next commit tries again)
                log.warning("digest checkpoint failed: %s", e)

    def pending_work(self) -> bool:
        return bool(self._fixes)

    # -- persistence ------------------------------------------------------------------------
    def checkpoint(self, wopts: WriteOptions | None = None) -> None:
        """Write the whole table and drop every delta entry, in one WriteBatch (between commits)."""
        if not self.deltas:
            return
        wb = WriteBatch(raw_mode=True)
        wb.put(_CKPT, _be(self.segs), self.handle)
        wb.delete_range(_DELTA, _DELTA + _U64.pack(self.seq + 1), self.handle)
        self.db.write(wb, wopts or WriteOptions())
        self.deltas = 0

    def _load(self) -> None:
        segs = self.segs
        packed = self.cf.get(_CKPT)
        if packed is not None:
            self.segs = segs = _from_be("Q", packed)
            if len(segs) != D.SLOTS:
                raise ValueError(f"digest checkpoint of {len(segs)} slots, not {D.SLOTS}")
        it = self.cf.iter(ReadOptions())
        it.seek(_DELTA)
        entries = 0
        while it.valid() and it.key()[:1] == _DELTA:
            self.seq = _U64.unpack(it.key()[1:9])[0]
            v = it.value()
            n = _U32.unpack(v[:4])[0]
            slots = _from_be("I", v[4:4 + 4 * n])
            xs = _from_be("Q", v[4 + 4 * n:4 + 12 * n])
            deque(map(segs.__setitem__, slots, map(xor, map(segs.__getitem__, slots), xs)), 0)
            self.deltas += n
            entries += 1
            it.next()
        if entries:
            log.info("digest: replayed %d delta entries (%d deltas) over the checkpoint", entries, self.deltas)

    # -- reading ------------------------------------------------------------------------------
    def roots(self, first: int = 0, count: int = PARTITIONS) -> list[int]:
        """The roots of partitions ``first .. first + count - 1``."""
        segs = self.segs
        out = []
        for pid in range(first, min(first + count, PARTITIONS)):
            r = 0
            for s in segs[pid << _BITS:(pid + 1) << _BITS]:
                r ^= s
            out.append(r)
        return out

    def segments(self, pid: int) -> list[int]:
        return list(self.segs[pid << _BITS:(pid + 1) << _BITS])

    # -- rebuilding ---------------------------------------------------------------------------
    def rebuild(self, records: Iterable[tuple[bytes, bytes]], wopts: WriteOptions | None = None) -> None:
        """Recompute every segment from ``records`` (all the data, in any order) and write it
        as the checkpoint, dropping every delta entry: one WriteBatch."""
        self.replace(computed(records), wopts)

    def replace(self, segs: array, wopts: WriteOptions | None = None) -> None:
        """Make ``segs`` (every slot) the kept digest: written as the checkpoint, every
        delta entry dropped, in one WriteBatch (``rebuild``; a reshard copies the slots of
        the partitions it moves, ``shards/reshard.py``)."""
        if len(segs) != D.SLOTS:
            raise ValueError(f"a digest of {len(segs)} slots, not {D.SLOTS}")
        self.segs = segs
        self.slots.clear()
        self.xs.clear()
        self._fixes = []
        wb = WriteBatch(raw_mode=True)
        wb.put(_CKPT, _be(self.segs), self.handle)
        wb.delete_range(_DELTA, _DELTA + b"\xff" * 9, self.handle)
        wb.put(_MARKER, b"%d" % D.FORMAT, self.handle)
        self.db.write(wb, wopts or WriteOptions())
        self.deltas = 0

    def correct(self, pid: int, actual: list[int]) -> list[int]:
        """Queue what makes partition ``pid``'s kept segments equal ``actual`` (its segments
        recomputed from its records with nothing pending); return the segments that are
        wrong. The correction is a delta of the next commit and reaches ``segs`` with it:
        commit right after, before anything else is applied."""
        segs = self.segs
        base = pid << _BITS
        wrong = [s for s in range(_NSEG) if segs[base + s] != actual[s]]
        for s in wrong:
            self._fixes.append((base + s, segs[base + s] ^ actual[s]))
        if wrong:
            self.corrected += 1
        return wrong


def computed(records: Iterable[tuple[bytes, bytes]]) -> array:
    """Every slot's segment hash, computed from ``records`` (all the data, any order)."""
    segs = array("Q", bytes(8 * D.SLOTS))
    for ikey, value in records:
        kh = _h(ikey)
        segs[(((ikey[0] << 8) | ikey[1]) << _BITS) | (kh >> _SHIFT)] ^= _h(value, kh) ^ _h(_E, kh)
    return segs


def _scan_range(data: Any, partitions: PartitionRange) -> Iterator[tuple[bytes, bytes]]:
    """The records of ``partitions`` (an engine over a range never reads past it)."""
    it = data.iter(ReadOptions())
    it.seek(partitions.start_key)
    end = partitions.end_key
    while it.valid():
        k = it.key()
        if k >= end:
            return
        yield k, it.value()
        it.next()
