"""The storage engine: RocksDB (via rocksdict) under the data model's records.

Column families
    ``data``    internal key -> envelope + payload (the records of the data model)
    ``replog``  local sequence number (u64 BE) -> one replication-log entry: the
                internal keys the local commands of one committed batch changed
                (``storage/replog.py`` owns it: positions, epochs, trimming, the
                ring of recent entries)
    ``meta``    node metadata: node id, peers' high-water marks, format version,
                the log's trim floor, the clock
    ``digest``  the kept digest: segment hashes of every partition, exact after every
                commit (``storage/digest.py``; the hashes are ``core/digest.py``'s)

The one apply path
    ``apply(records)`` takes records (internal key, envelope + payload), reads the
    current value, merges with ``core.merge.merge`` and writes only what changed,
    adding the changed keys of a local command to the batch's log entry. Local
    commands and replication both end here; a blind overwrite never happens. What
    changed is reported to ``on_change`` (the node's change feed), except node-level
    records (ACL users, function libraries), which go to ``on_node_change``.

Group commit
    Writes go to an in-memory pending batch that reads see at once (through the
    write-through cache). ``commit()`` turns everything pending - data records, log
    entries, metadata - into ONE RocksDB WriteBatch, synced when durability is
    ``always``. The server calls it once per event-loop tick, before it sends the
    replies of that tick, so an acknowledged write is always in a committed batch and
    a crash loses whole unacknowledged commands, never half of one. Nothing else
    commits mid-tick: a scan merges the pending writes into what it reads from RocksDB,
    so a transaction or a script that scans keeps its writes in one batch and one log
    entry (peers apply it whole).

Digests (anti-entropy): ``apply`` and ``purge`` note each change's digest delta (the
hash of the new record XOR the hash of the one it replaced, while both are still in the
CPU's cache); ``commit`` puts the batch's deltas in the same WriteBatch and folds them into
the kept digest once it is written (``storage/digest.py``). Those are the only digest
lines in the apply path and the commit, each marked ``(digest)``.

Durability (like Redis's appendfsync): ``always`` syncs the WAL with every batch,
``everysec`` syncs it from a background thread once per second (``wal.py``), ``no``
leaves it to the OS. The directory's identity (node id, format, incarnation) is checked
at open (``identity.py``); the replication log is ``replog.py``'s.

Cache: a bounded dict of ikey -> stored bytes (or ``MISSING``) in front of RocksDB,
written through. Entries are only evicted when nothing is pending (at commit time, or
by a read when no write waits), so a pending record is always readable. ``MISSING``
caches absence, which keeps GET-miss and type lookups (one extra point read per
command, as the spec says) off RocksDB.

Head map: ``head_pids[pid]`` is 1 once partition ``pid`` may hold a collection head
(any ``M`` record, tombstones included): set at open from the data, and by ``apply``
before the record is readable. A string command on a key of a partition without one
skips the head lookup (the spec's second point read of a TYPE check) and caches one
record per key instead of two. It is never cleared while the engine is open.

Partition range: an engine holds the partitions of one ``PartitionRange``
(``core/partition.py``), by default all 4096; a shard worker's engine holds its shard's
contiguous range (docs/shards.md). An engine over a smaller range never holds, reads or
iterates a record outside it: ``get``, ``apply`` and ``purge`` refuse such a key
(``OutsideRange``: a routing bug, raised before anything changed), scans are clipped to
the range, and the head map, the digest rebuild and the sweeper see only its partitions.
The checks are bound per instance (``_bind_range``), so an engine of every partition
pays nothing for them on its hot path. Every operation on a partition runs to completion
on the event-loop thread without yielding, which serialises everything on a shard (and
makes multi-key commands on one hash tag atomic).
"""

from __future__ import annotations

from bisect import bisect_left, insort

import gc
import logging
import os
import struct
import threading
import time
from itertools import islice
from typing import Any, Callable, Iterator

from rocksdict import BlockBasedOptions, Options, Rdict, ReadOptions, WriteBatch, WriteOptions

from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core import merge as _merge
from marekvs.core import registry
from marekvs.core.hlc import LOGICAL_BITS
from marekvs.core.partition import ALL, PartitionRange
from marekvs.storage import identity
from marekvs.storage.digest import KeptDigest, key_hash
from marekvs.storage.replog import ReplicationLog
from marekvs.storage.wal import WalSyncer

log = logging.getLogger("marekvs.storage")

_TAG_AT = K.TAG_AT
_ORD_HEAD = K.ORD_HEAD
_NODE_TAG = bytes(1 if c in registry.NODE_TAGS else 0 for c in range(256))  # tag byte -> node record?
# apply() tests head and node-level tags behind one compare: every tag above this one (the
# string tag 's' among them) is neither
_SLOW_TAGS_MAX = max(_ORD_HEAD, *registry.NODE_TAGS)
if K.ORD_STRING <= _SLOW_TAGS_MAX:
    raise RuntimeError("the string tag must sort above the head and node-level record tags")
MISSING = None  # cached absence is stored as None; a cache miss is _NOT_CACHED
_NOT_CACHED = object()
_U16 = struct.Struct(">H")
_EMPTY = b""  # (digest) no record
FORMAT_VERSION = 1
# A commit also saves the clock when the clock runs this far ahead of the wall clock (it
# took a peer's stamp from a clock that leads ours): a restart, which takes far longer,
# would otherwise stamp below records it already holds once the log that named them is
# trimmed (``max_hlc``).
HLC_LEAD_MS = 100
# A WAL file is deleted only once every column family has flushed what it holds, and
# ``replog`` and ``meta`` take a small write with every commit but fill their memtables
# slowly: left to RocksDB's default (four times all the memtables, ~1.1 GB here) the WAL
# grew by ~13 MB/s under SET -P 16 and a restart after a crash replayed all of it. Past
# this total RocksDB flushes the column families that pin the oldest WAL file.
MAX_TOTAL_WAL_BYTES = 64 << 20
DURABILITY_MODES = ("always", "everysec", "no")
RETRY_SECONDS = 1.0  # after a failed write, how often a commit tries again
# max_hlc: how many of the newest log entries, and keys at each end of one, it reads
_HLC_ENTRIES = 64
_HLC_PROBES = 16
_HANDLES = ("data", "replog", "meta", "_h_data", "_h_replog", "_h_meta")  # what _open_db opens


StorageError = identity.StorageError


class StorageWriteError(StorageError):
    """A batch could not be written (a full disk, an I/O error): nothing of it committed."""


class OutsideRange(StorageError):
    """A key outside the engine's partition range was read or written (a routing bug)."""


class Engine:
    def __init__(self, path: str, node_id: int, durability: str = "everysec",
                 cache_entries: int = 500_000, max_total_wal_bytes: int = MAX_TOTAL_WAL_BYTES,
                 hlc: Any = None, partitions: PartitionRange = ALL):
        if durability not in DURABILITY_MODES:
            raise ValueError(f"durability must be one of {DURABILITY_MODES}")
        self.path = path
        self.node_id = node_id
        self.partitions = partitions  # the partitions this engine holds (see the module docstring)
        os.makedirs(path, exist_ok=True)
        self._max_total_wal_bytes = max_total_wal_bytes
        self._open_db()
        self._check_identity()
        self.digest = KeptDigest(self.db, self.db.get_column_family("digest"),
                                 self.db.get_column_family_handle("digest"), self.data, partitions)

        self.cache: dict[bytes, bytes | None] = {}
        self.cache_entries = cache_entries
        self.pending: dict[bytes, bytes | None] = {}  # None = physical delete
        self._pkeys: list[bytes] = []  # pending's keys sorted, for scans (_pending_keys)
        self._pkeys_of: object = None  # the pending dict _pkeys was made from
        self.pending_log: dict[bytes, None] = {}  # keys changed by local commands, in order
        self.pending_meta: dict[bytes, bytes | None] = {}
        self.head_pids = self._find_head_partitions()
        self.log = ReplicationLog(self.db, self.replog, self._h_replog, self.meta, self._h_meta)
        # The log sequence number the pending batch's entry will have (or the last
        # committed one if nothing local is pending): what WAIT waits for. A plain
        # attribute kept by apply and commit: every write command reads it.
        self.next_seq = self.log.last
        self.hlc = hlc  # the node's clock (core.hlc.HLC), saved by commit when it leads

        self._wopts = WriteOptions()
        self.wal = WalSyncer(path)
        self.set_durability(durability)

        self.commit_listeners: list[Callable[[int], None]] = []  # called with log_seq after a batch with log entries
        # Called with [(ikey, old record or None, new record), ...] after every apply that
        # changed something, local or replicated (the node's change feed); None costs the
        # apply path nothing.
        self.on_change: Callable[[list[tuple[bytes, bytes | None, bytes]]], None] | None = None
        # Called with [(ikey, new record), ...] when node-level records (the registry's
        # NODE_TAGS: ACL users, function libraries) changed, local or replicated. They are
        # not keys, so they never reach ``on_change`` (WATCH, tracking, notifications see
        # keys only).
        self.on_node_change: Callable[[list[tuple[bytes, bytes]]], None] | None = None
        # stats
        self.batches = 0
        self.records_written = 0
        self.last_commit_size = 0
        self.closed = False
        # why the last commit failed (None: writes work): the node refuses writes with
        # MISCONF while it is set, and retries (``commit`` reopens the database first)
        self.write_error: str | None = None
        self.failed_commits = 0
        self._retry_at = 0.0
        self.dirty = False  # records applied since the last commit attempt
        if not partitions.whole:
            self._bind_range()

    def _bind_range(self) -> None:
        """An engine over part of the partitions: ``get``, ``apply`` and ``purge`` check
        their keys and the scans are clipped to the range, through methods bound to this
        instance (an engine of every partition keeps the class's, unchecked)."""
        lo, hi = self.partitions.start_key, self.partitions.end_key
        cls = type(self)

        def check(ikey: bytes) -> None:
            if not lo <= ikey < hi:
                raise OutsideRange(f"key {ikey[:40]!r} is outside partitions {self.partitions}")

        def get(ikey: bytes) -> bytes | None:
            check(ikey)
            return cls.get(self, ikey)

        def apply(records: list[tuple[bytes, bytes]], log_entry: bool = True) -> list[tuple[bytes, bytes]]:
            for ikey, _ in records:
                check(ikey)
            return cls.apply(self, records, log_entry)

        def purge(ikey: bytes) -> None:
            check(ikey)
            cls.purge(self, ikey)

        def clip(start: bytes, end: bytes | None) -> tuple[bytes, bytes]:
            return max(start, lo), (hi if end is None else min(end, hi))

        def scan(start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
            start, end = clip(start, end)
            return cls.scan(self, start, end) if start < end else iter(())

        def scan_committed(start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
            start, end = clip(start, end)
            return cls.scan_committed(self, start, end) if start < end else iter(())

        self.get = get  # type: ignore[method-assign]
        self.apply = apply  # type: ignore[method-assign]
        self.purge = purge  # type: ignore[method-assign]
        self.scan = scan  # type: ignore[method-assign]
        self.scan_committed = scan_committed  # type: ignore[method-assign]

    def _open_db(self) -> None:
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.create_missing_column_families(True)
        opts.increase_parallelism(2)
        opts.set_max_background_jobs(2)
        opts.set_max_total_wal_size(self._max_total_wal_bytes)
        cf = {name: Options(raw_mode=True) for name in ("data", "replog", "meta", "digest")}
        cf["data"] = data_options()
        self.db = Rdict(self.path, opts, column_families=cf)
        self.data = self.db.get_column_family("data")
        self.replog = self.db.get_column_family("replog")
        self.meta = self.db.get_column_family("meta")
        self._h_data = self.db.get_column_family_handle("data")
        self._h_replog = self.db.get_column_family_handle("replog")
        self._h_meta = self.db.get_column_family_handle("meta")

    # -- identity ------------------------------------------------------------------
    def _check_identity(self) -> None:
        self.fresh, self.incarnation = identity.check(self.meta, self.path, self.node_id, FORMAT_VERSION)
        if self.fresh:
            self.db.flush_wal(True)

    def new_incarnation(self, incarnation: int) -> None:
        """Take a new incarnation (replication found this directory behind its peers)."""
        self.put_meta(b"incarnation", b"%d" % incarnation)
        self.commit()
        self.db.flush_wal(True)
        self.incarnation = incarnation

    # -- the replication log (storage/replog.py) ------------------------------------
    @property
    def log_seq(self) -> int:
        return self.log.last

    @property
    def log_first(self) -> int:
        return self.log.first

    @property
    def keep_recent(self) -> bool:
        return self.log.keep_recent

    @keep_recent.setter
    def keep_recent(self, v: bool) -> None:
        self.log.keep_recent = v

    @property
    def recent_entries(self) -> dict[int, bytes | list[bytes]]:
        return self.log.recent

    def recent_packed(self, after: int, limit: int, max_bytes: int = 1 << 62) -> list[bytes] | None:
        return self.log.recent_packed(after, limit, max_bytes)

    def read_log(self, after: int, limit: int,
                 max_bytes: int = 1 << 62) -> list[tuple[int, list[tuple[bytes, bytes]]]]:
        """Committed log entries with the committed records they name (never a pending
        write: a batch that fails to commit must not reach a peer)."""
        return self.log.read(after, limit, max_bytes, self.get_committed)

    def trim_log(self, upto: int) -> None:
        self.log.trim(upto, self._wopts)

    def _find_head_partitions(self) -> bytearray:
        found = bytearray(ALL.count)  # (indexed by pid; only the range's can be set)
        it = self.data.iter(ReadOptions())
        for pid in range(self.partitions.first, self.partitions.last + 1):
            prefix = K.pid_prefix(pid) + K.TAG_HEAD
            it.seek(prefix)
            if it.valid() and it.key().startswith(prefix):
                found[pid] = 1
        return found

    def meta_items(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        """Committed metadata entries whose key starts with ``prefix``."""
        out = []
        it = self.meta.iter(ReadOptions())
        it.seek(prefix)
        while it.valid() and it.key().startswith(prefix):
            out.append((it.key(), it.value()))
            it.next()
        return out

    # -- reads -----------------------------------------------------------------------
    def get(self, ikey: bytes) -> bytes | None:
        """The stored record at ``ikey`` (pending writes included), or None."""
        v = self.cache.get(ikey, _NOT_CACHED)
        if v is not _NOT_CACHED:
            return v  # type: ignore[return-value]
        v = self.data.get(ikey)
        cache = self.cache
        cache[ikey] = v
        if len(cache) > self.cache_entries and not self.pending:
            # reads alone fill the cache too (a read-only load never commits); with
            # nothing pending no entry is a pending record, so this may evict
            self._evict()
        return v

    def scan(self, start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Records with ``start <= ikey < end`` in key order, pending writes included
        (``_with_pending``): a scan never commits, so the writes of one tick (a MULTI/EXEC,
        a script) stay one batch and one log entry whatever the commands read."""
        it = self.data.iter(ReadOptions())
        it.seek(start)
        base = _iterate(it, end)
        if not self.pending:
            return base
        keys = self._pending_keys()
        lo = bisect_left(keys, start)
        hi = len(keys) if end is None else bisect_left(keys, end, lo)
        if lo == hi:
            return base
        pending = self.pending
        return _with_pending(base, [(k, pending[k]) for k in keys[lo:hi]])

    def _pending_keys(self) -> list[bytes]:
        """The pending keys in order, kept across the scans of one tick: ``pending`` only
        grows (a dict, in insertion order) until the commit replaces it, so a scan sorts
        in only the keys written since the previous scan (timsort merges the sorted run
        and the new tail in linear time) instead of filtering and sorting the whole tick's
        writes each time: a pipelined tick of XREADGROUPs or a script scanning after each
        write stays linear in the tick."""
        p = self.pending
        keys = self._pkeys
        if self._pkeys_of is not p:
            keys = self._pkeys = sorted(p)
            self._pkeys_of = p
        elif len(keys) < len(p):
            new = list(islice(p, len(keys), None))
            if len(new) < 16:
                for k in new:
                    insort(keys, k)
            else:
                keys += new
                keys.sort()
        return keys

    def scan_tags(self, first_pid: int, tags: bytes, last_pid: int | None = None) -> Iterator[tuple[bytes, bytes]]:
        """Records of partitions ``first_pid`` to ``last_pid`` (default: to the end of the
        engine's range) whose tag byte (the byte after the pid) is in ``tags``, in key
        order, pending writes included, from ONE iterator that seeks over everything else:
        the records of other tags (a big hash's fields), and empty partitions, cost one
        seek each instead of one read per record, or a new iterator per partition (which
        seeks every memtable and L0 file: ~3 us, 14 ms for all 4096)."""
        r = self.partitions
        first_pid = max(first_pid, r.first)
        end_pid = r.last + 1 if last_pid is None else min(last_pid, r.last) + 1
        if first_pid >= end_pid:
            return iter(())
        wanted = bytes(sorted(set(tags)))
        base = self._scan_tags(first_pid, end_pid, wanted)
        if not self.pending:
            return base
        keys = self._pending_keys()
        pending = self.pending
        lo = bisect_left(keys, _U16.pack(first_pid))
        hi = bisect_left(keys, _U16.pack(end_pid), lo)
        over = [(k, pending[k]) for k in keys[lo:hi] if k[2] in wanted]
        return _with_pending(base, over) if over else base

    def _scan_tags(self, first_pid: int, end_pid: int, wanted: bytes) -> Iterator[tuple[bytes, bytes]]:
        first = wanted[:1]
        it = self.data.iter(ReadOptions())
        it.seek(_U16.pack(first_pid) + first)
        while it.valid():
            k = it.key()
            pid = (k[0] << 8) | k[1]
            if pid >= end_pid:
                return
            t = k[2]
            if t in wanted:
                yield k, it.value()
                it.next()
                continue
            after = [w for w in wanted if w > t]
            if after:  # the next wanted tag of this partition
                it.seek(k[:2] + bytes((after[0],)))
            else:
                if pid + 1 >= end_pid:
                    return
                it.seek(_U16.pack(pid + 1) + first)

    # -- the apply path --------------------------------------------------------------
    def apply(self, records: list[tuple[bytes, bytes]], log_entry: bool = True) -> list[tuple[bytes, bytes]]:
        """Merge ``records`` into the store; return the records that changed.

        With ``log_entry`` (local commands) the changed keys join the replication-log
        entry of the pending batch, which is committed with the data.
        """
        changed = []
        cache = self.cache
        pending = self.pending
        merge = _merge.merge
        notify = self.on_change
        dslot, dx = self.digest.slots.append, self.digest.xs.append  # (digest)
        kh_ = key_hash  # (digest)
        notes: list[tuple[bytes, bytes | None, bytes]] = []
        node_recs: list[tuple[bytes, bytes]] | None = None
        for ikey, incoming in records:
            cur = cache.get(ikey, _NOT_CACHED)
            if cur is _NOT_CACHED:
                cur = self.data.get(ikey)
            m = merge(ikey, cur, incoming)  # type: ignore[arg-type]
            if m is cur:
                continue
            t = ikey[_TAG_AT]
            if t <= _SLOW_TAGS_MAX:  # (one compare for the rest, strings among them)
                if t == _ORD_HEAD:  # a collection head
                    self.head_pids[(ikey[0] << 8) | ikey[1]] = 1
                elif _NODE_TAG[t]:  # a node-level record (an ACL user, a function library): not on the feed
                    if node_recs is None:
                        node_recs = []
                    node_recs.append((ikey, m))
                    t = -1
            cache[ikey] = m
            kh = kh_(ikey)  # (digest) slot = pid << 4 | segment; delta = H(new) ^ H(old)
            dslot(((ikey[0] << 8 | ikey[1]) << 4) | kh >> 60)
            dx(kh_(m, kh) ^ kh_(cur or _EMPTY, kh))  # type: ignore[arg-type]
            pending[ikey] = m
            changed.append((ikey, m))
            if notify is not None and t >= 0:
                notes.append((ikey, cur, m))  # type: ignore[arg-type]
        if changed:
            self.dirty = True
        if changed and log_entry:
            self.next_seq = self.log.last + 1
            plog = self.pending_log
            for k, _ in changed:
                plog[k] = None
        if notes:
            notify(notes)  # type: ignore[misc]
        if node_recs is not None and self.on_node_change is not None:
            self.on_node_change(node_recs)
        return changed

    def put_meta(self, key: bytes, value: bytes | None) -> None:
        """Metadata written in the same batch as the pending data (e.g. a peer's
        high-water mark next to the records applied from it)."""
        self.pending_meta[key] = value

    def get_meta(self, key: bytes) -> bytes | None:
        if key in self.pending_meta:
            return self.pending_meta[key]
        return self.meta.get(key)

    def purge(self, ikey: bytes) -> None:
        """Physically remove a record (expiry sweeper / GC only: never a user write)."""
        self.digest.removed(ikey, self.get(ikey))  # (digest)
        self.pending[ikey] = None
        # Cached as absent (not dropped): a read, or an apply in the same batch, must see
        # the record gone, not the committed copy (the digest counts it gone already).
        self.cache[ikey] = MISSING

    # -- commit ----------------------------------------------------------------------
    def commit(self) -> int:
        """Write everything pending as ONE WriteBatch. Returns records written.

        A batch that cannot be written (a full disk, an I/O error) changes nothing: the
        pending records, log entry, digest deltas and metadata stay pending, nothing is
        reported committed (no log position, no commit listener), ``write_error`` says
        why, and ``StorageWriteError`` is raised. RocksDB refuses every later write once
        one failed (its background error is sticky), so the next commit first opens the
        database again (``recover``), then writes what is pending with whatever came
        since."""
        pending = self.pending
        plog = self.pending_log
        pmeta = self.pending_meta
        self.dirty = False
        if not pending and not plog and not pmeta and not self.digest.pending_work():
            return 0
        if self.write_error is not None:
            now = time.monotonic()
            if now < self._retry_at:  # one attempt a second (a reopen is not cheap)
                raise StorageWriteError(self.write_error)
            self._retry_at = now + RETRY_SECONDS
            self.recover()
        wb = WriteBatch(raw_mode=True)
        h = self._h_data
        # (Writing a big batch in key order makes RocksDB's memtable inserts ~2x
        # cheaper, but sorting scattered keys in Python costs as much: no gain, see
        # bench/README_cluster.md, "Sixth reading".)
        for k, v in pending.items():
            if v is None:
                wb.delete(k, h)
            else:
                wb.put(k, v, h)
        keys = list(plog) if plog else []
        seq = self.log.stage(wb, keys) if plog else 0
        digested = self.digest.prepare(wb)  # (digest) the batch's deltas, same WriteBatch
        hlc = self.hlc
        if hlc is not None and (hlc.last >> LOGICAL_BITS) > hlc.wall() + HLC_LEAD_MS:
            pmeta[b"hlc"] = b"%d" % hlc.last
        if pmeta:
            hm = self._h_meta
            for k, v in pmeta.items():
                if v is None:
                    wb.delete(k, hm)
                else:
                    wb.put(k, v, hm)
        try:
            self.db.write(wb, self._wopts)
        except Exception as e:
            self.failed_commits += 1
            if self.write_error is None:
                log.error("storage write failed, nothing of it is committed: %s", e)
                self._retry_at = time.monotonic() + RETRY_SECONDS
            self.write_error = str(e)
            raise StorageWriteError(str(e)) from None
        if self.write_error is not None:
            log.warning("storage writes work again: %d records written that were pending", len(pending))
            self.write_error = None
        if seq:
            self.log.appended(seq, keys, pending)
        self.digest.applied(digested)  # (digest)
        n = len(pending)
        self.batches += 1
        self.records_written += n
        self.last_commit_size = n
        self.pending = {}
        self.pending_log = {}
        self.pending_meta = {}
        if len(self.cache) > self.cache_entries:
            self._evict()
        if seq:
            for f in self.commit_listeners:
                f(seq)
        return n

    def recover(self) -> None:
        """After a failed write: open the database again (RocksDB keeps refusing writes
        once one failed), keeping everything pending. The caller retries the commit;
        while the disk stays full that fails again. StorageWriteError if it cannot be
        opened (the next commit tries again)."""
        log.info("opening the database again after a failed write")
        self._drop_handles()
        try:
            self.db.close()
        except Exception:
            pass
        del self.db
        gc.collect()
        try:
            self._open_db()
        except Exception as e:
            self.write_error = str(e)
            raise StorageWriteError(f"reopening the database failed: {e}") from None
        self.log.rebind(self.db, self.replog, self._h_replog, self.meta, self._h_meta)
        self.digest.rebind(self.db, self.db.get_column_family("digest"), self.db.get_column_family_handle("digest"))
        self.wal.path = self.path

    def _drop_handles(self) -> None:
        # column-family handles keep the database (and its LOCK) alive: gone until _open_db
        for name in _HANDLES:
            if hasattr(self, name):
                delattr(self, name)
        self.log.close()
        self.digest.close()

    # -- committed reads: what may leave the node --------------------------------------
    def get_committed(self, ikey: bytes) -> bytes | None:
        """The record at ``ikey`` as the last commit left it (not a pending write): what
        replication ships, snapshots and anti-entropy read."""
        if ikey in self.pending:
            return self.data.get(ikey)  # RocksDB holds committed writes only
        return self.get(ikey)

    def scan_committed(self, start: bytes, end: bytes | None = None) -> Iterator[tuple[bytes, bytes]]:
        """``scan`` of the committed records only (no pending write)."""
        it = self.data.iter(ReadOptions())
        it.seek(start)
        return _iterate(it, end)

    def _evict(self) -> None:
        drop = len(self.cache) - self.cache_entries + self.cache_entries // 10
        cache = self.cache
        for k in list(islice(cache, drop)):
            del cache[k]

    def set_durability(self, mode: str) -> None:
        if mode not in DURABILITY_MODES:
            raise ValueError(f"durability must be one of {DURABILITY_MODES}")
        self.durability = mode
        self._wopts.sync = mode == "always"
        if mode == "everysec":
            self.wal.start()
        else:
            self.wal.pause()

    @property
    def _syncer(self) -> threading.Thread | None:
        return self.wal.thread

    def sync(self) -> None:
        self.commit()
        self.db.flush_wal(True)

    # -- misc ------------------------------------------------------------------------
    def max_hlc(self) -> int:
        """The highest HLC this node is known to have used, for a restart (a node never
        stamps below what it already wrote): the one saved at the last clean shutdown
        (``save_hlc``), and the newest local records, found through the log.

        A log entry names every key of one committed batch, so after a bulk load the
        newest entries name hundreds of thousands of keys: reading them all made a
        restart take minutes. Only the first and last ``_HLC_PROBES`` keys of each of
        the newest ``_HLC_ENTRIES`` entries are read (keys are in the order the batch
        first changed them, and stamps grow within a batch): at most 2,048 reads."""
        best = int(self.meta.get(b"hlc") or 0)
        get = self.data.get
        for k in self.log.newest_keys(_HLC_ENTRIES, _HLC_PROBES):
            v = get(k)
            if v is not None:
                best = max(best, int.from_bytes(v[env.HLC], "big"))
        return best

    def save_hlc(self, hlc: int) -> None:
        """Keep the clock's last value (remote clocks it took in included) for the next
        start: written with the pending batch (a clean shutdown calls this)."""
        self.put_meta(b"hlc", b"%d" % hlc)

    def approximate_size(self) -> int:
        try:
            return int(self.db.property_int_value("rocksdb.total-sst-files-size") or 0)
        except Exception:
            return 0

    def close(self) -> None:
        if self.closed:
            return
        try:
            self.commit()
            self.digest.checkpoint()  # (digest) a restart replays no delta entries
        except Exception as e:  # a full disk: what is pending was never acknowledged
            log.error("closing with writes that could not be committed (%s): they are lost", e)
        self.wal.stop()
        try:
            self.db.flush_wal(True)
        except Exception as e:
            log.error("closing: the WAL could not be synced (%s)", e)
        finally:
            self.closed = True
            # column-family handles keep the database (and its LOCK) alive: drop them
            # first so the directory can be reopened, even by this process
            self._drop_handles()
            self.cache.clear()
            self.db.close()
            del self.db
            gc.collect()


def _iterate(it: Any, end: bytes | None) -> Iterator[tuple[bytes, bytes]]:
    while it.valid():
        k = it.key()
        if end is not None and k >= end:
            return
        yield k, it.value()
        it.next()


def _with_pending(base: Iterator[tuple[bytes, bytes]],
                  over: list[tuple[bytes, bytes | None]]) -> Iterator[tuple[bytes, bytes]]:
    """Merge the stored records ``base`` with the sorted pending writes ``over`` (taken
    when the scan began, as the RocksDB iterator takes its snapshot): a pending record
    replaces the stored one, a pending delete (None) hides it."""
    i, n = 0, len(over)
    for k, v in base:
        while i < n and over[i][0] < k:
            pk, pv = over[i]
            i += 1
            if pv is not None:
                yield pk, pv
        if i < n and over[i][0] == k:
            pv = over[i][1]
            i += 1
            if pv is not None:
                yield k, pv
            continue
        yield k, v
    for pk, pv in over[i:]:
        if pv is not None:
            yield pk, pv


def data_options() -> Options:
    """Options of the ``data`` column family. Point reads of absent keys are common
    (every type lookup reads the string key, then the head key), so the SST files and
    the memtable carry whole-key bloom filters: a miss costs a filter probe, not a
    block read.

    Index and filter blocks stay with the open table readers (RocksDB's default), not
    in the block cache: cached there (``cache_index_and_filter_blocks``) every point
    read of a record missing from the record cache cost ~37 us instead of ~3.6 us
    (measured on a million keys: a restart, or any dataset larger than the record
    cache, paid it on every first read and every write's read of the current record).
    The price is memory outside the cache: ~1.25 MB of filter per million records."""
    o = Options(raw_mode=True)
    table = BlockBasedOptions()
    table.set_bloom_filter(10, False)
    o.set_block_based_table_factory(table)
    o.set_memtable_prefix_bloom_ratio(0.1)
    o.set_memtable_whole_key_filtering(True)
    o.set_optimize_filters_for_hits(False)
    # Small memtables: an insert of a random key walks a skiplist whose size sets its
    # cache misses (measured: 2.1 us/record at the 64 MB default, 1.4 us at 8 MB), and
    # rocksdict holds the GIL while it writes. Reads rarely reach RocksDB (the record
    # cache), so the extra L0 files cost little; flushes run on RocksDB's threads.
    o.set_write_buffer_size(8 << 20)
    o.set_max_write_buffer_number(4)
    return o


def prefix_end(prefix: bytes) -> bytes | None:
    """The smallest key greater than every key starting with ``prefix``."""
    p = bytearray(prefix)
    while p:
        if p[-1] != 0xFF:
            p[-1] += 1
            return bytes(p)
        p.pop()
    return None

