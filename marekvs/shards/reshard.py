"""The data directory's shard layout, and resharding it on restart (docs/shards.md §7;
issue 33, slice 8).

Layouts
    *single*   the RocksDB files in ``data_dir`` itself: what one process (``shards 1``)
               writes and opens, as it always did;
    *map*      ``data_dir/shards/map`` (JSON: ``shards``, ``ranges``, ``dirs``) and one
               RocksDB directory per worker, ``data_dir/shards/<dir>`` (``<first>-<last>``;
               a map written before ``dirs`` existed names them so). ``shards N > 1``.

The committed layout is the map if there is one, else the single one if ``data_dir/CURRENT``
exists, else none (a new directory). Anything else found there is what an interrupted
reshard left, and is deleted before anything opens (``_tidy``): worker directories the map
does not name, the single layout's files next to a map, ``shards/`` next to a single layout.

Resharding (``prepare``, when ``config.shards`` differs from the committed layout), before
any worker serves, with every old directory open read-only in practice (``Engine``, no
writes but its close):

1. each new worker's directory (a new incarnation: ``identity``) gets, from every old
   directory whose range meets its range, the records of the partitions they share (one
   iteration over that contiguous key range, written in key order into an SST file and
   ingested into ``data``: ``copy_records``), and their kept digest slots (``pid << 4 |
   segment``), copied exactly (``KeptDigest.replace``);
2. its log names the keys of every entry the old logs still hold in its range (entries of
   about ``LOG_KEYS`` keys): peers may not have them yet, and shipping twice is harmless;
3. per peer stream (``hwm:<origin>:<incarnation>`` in ``meta``) the lowest high-water mark of
   the old directories it takes partitions from (a stream one of them never received from
   starts at 0); the peers it knew (``peer:``) and the aclfile marker from any of them;
4. the clock floor (``meta hlc``): the highest clock of every old directory
   (``Engine.max_hlc``), so no worker stamps below a record it now holds;
5. the switch, atomic: the new map is written and renamed over the old one (for the single
   layout, built in ``data_dir`` itself, the map is removed); then the old directories are
   deleted. A crash before the switch leaves the old layout (the next start deletes the
   new directories and copies again); after it, the new one (the next start deletes what
   is left of the old).

The test-only variable ``MAREKVS_TEST_RESHARD_KILL`` (``copy``: after the first copied range;
``switch``: right after the switch) makes the process SIGKILL itself there, so a test can
check both sides of the switch without racing a timer.
"""

from __future__ import annotations

import fcntl
import gc
import json
import logging
import os
import shutil
import signal
import time
import traceback
from array import array
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from marekvs.config import Config
from marekvs.core.digest import SEGMENT_BITS, SLOTS
from marekvs.core.partition import ALL, PartitionRange, ShardMap
from marekvs.shards.clients import CLIENTS_FILE

if TYPE_CHECKING:
    from marekvs.storage.engine import Engine

log = logging.getLogger("marekvs.reshard")

LOG_KEYS = 4096  # keys (at least) per entry of a new worker's re-logged entries
KILL_ENV = "MAREKVS_TEST_RESHARD_KILL"
SCRATCH = "copying"  # the SST files of a copy, in data_dir/shards/ (never a worker directory's name)
# meta keys a new directory gets otherwise (its identity, a new log) or merges (hwm:, hlc)
_OWN_META = (b"node_id", b"format_version", b"incarnation", b"log_trimmed", b"hlc")


class Refused(Exception):
    """The node cannot start with this configuration or data directory (the message says why)."""


@dataclass(frozen=True)
class Layout:
    """A data directory's shard layout: each worker's range and directory (a path under
    ``data_dir``, or ``data_dir`` itself)."""

    ranges: tuple[PartitionRange, ...]
    dirs: tuple[str, ...]
    single: bool  # the RocksDB files in data_dir itself

    @property
    def shards(self) -> int:
        return len(self.ranges)

    def describe(self) -> str:
        return "one process (data_dir itself)" if self.single else f"{self.shards} shard workers"


def map_path(root: str) -> str:
    return os.path.join(root, "shards", "map")


def port_file(r: PartitionRange) -> str:
    """The name, in ``data_dir/shards/``, of the file where the worker of ``r`` publishes
    its own gRPC port and incarnation (``replication/workers.py``); part of the layout."""
    return f"{r.first}-{r.last}.grpc"


def committed(root: str) -> Layout | None:
    """The committed layout of ``root`` (None: a new data directory)."""
    path = map_path(root)
    if os.path.exists(path):
        try:
            with open(path) as f:
                m = json.load(f)
            ranges = tuple(PartitionRange(a, b) for a, b in m["ranges"])
            ShardMap(ranges)
            names = m.get("dirs") or [f"{r.first}-{r.last}" for r in ranges]
            if len(names) != len(ranges) or any(os.sep in n or n in ("", ".", "..", "map", SCRATCH) for n in names):
                raise ValueError("its directories do not match its ranges")
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise Refused(f"the shard map {path} cannot be read: {e}") from None
        return Layout(ranges, tuple(os.path.join(root, "shards", n) for n in names), single=False)
    if os.path.exists(os.path.join(root, "CURRENT")):
        return Layout((ALL,), (root,), single=True)
    return None


def wanted(root: str, shards: int, old: Layout | None) -> Layout:
    """The layout ``shards`` asks for; worker directories are named ``<first>-<last>``, with
    a suffix where the old layout holds that name already (``.1``, ``.2``, ...)."""
    if shards == 1:
        return Layout((ALL,), (root,), single=True)
    taken = set(old.dirs) if old is not None else set()
    dirs = []
    for r in ShardMap.even(shards).ranges:
        name, k = f"{r.first}-{r.last}", 0
        while os.path.join(root, "shards", name) in taken:
            k += 1
            name = f"{r.first}-{r.last}.{k}"
        dirs.append(os.path.join(root, "shards", name))
    return Layout(ShardMap.even(shards).ranges, tuple(dirs), single=False)


def _write_map(root: str, layout: Layout) -> None:
    """Write the map of ``layout`` atomically (a file written, synced and renamed)."""
    base = os.path.join(root, "shards")
    os.makedirs(base, exist_ok=True)
    path = map_path(root)
    tmp = path + ".tmp"
    body = {"shards": layout.shards, "ranges": [[r.first, r.last] for r in layout.ranges],
            "dirs": [os.path.basename(d) for d in layout.dirs]}
    with open(tmp, "w") as f:
        json.dump(body, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
    _sync_dir(base)


def _sync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _destroy_single(root: str) -> None:
    """Delete the single layout's RocksDB files in ``root`` (nothing else there)."""
    from rocksdict import Options, Rdict

    Rdict.destroy(root, Options(raw_mode=True))


def _tidy(root: str, layout: Layout | None) -> None:
    """Delete what an interrupted reshard left beside the committed ``layout``."""
    base = os.path.join(root, "shards")
    if layout is None or layout.single:
        if os.path.isdir(base):
            if layout is None and any(os.path.exists(os.path.join(base, d, "CURRENT")) for d in os.listdir(base)):
                raise Refused(f"{base} holds worker directories but no shard map (shards/map): restore the map, "
                              "or move the directories away")
            log.info("deleting %s: what a reshard left (the data directory's layout is %s)", base,
                     "one process's" if layout else "new")
            shutil.rmtree(base)
        return
    keep = {os.path.basename(d) for d in layout.dirs} | {port_file(r) for r in layout.ranges} | {"map", CLIENTS_FILE}
    for name in sorted(os.listdir(base)):
        if name not in keep:
            log.info("deleting %s: what a reshard left (not in the shard map)", os.path.join(base, name))
            p = os.path.join(base, name)
            shutil.rmtree(p) if os.path.isdir(p) else os.remove(p)
    if os.path.exists(os.path.join(root, "CURRENT")):
        log.info("deleting the RocksDB files in %s: what a reshard to one process left (the shard map says %d "
                 "workers)", root, layout.shards)
        _destroy_single(root)


def prepare(config: Config) -> list[str]:
    """Lay out ``config.data_dir`` for ``config.shards`` workers, resharding what it holds if
    its layout is another one; the workers' data directories, in worker order. ``Refused``
    when it cannot (the committed layout is then unchanged)."""
    root = config.data_dir
    os.makedirs(root, exist_ok=True)
    fd = os.open(root, os.O_RDONLY)
    try:
        try:  # (two processes laying out one directory: the second could delete what the first builds)
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise Refused(f"another process is laying out the data directory {root}") from None
        return _prepare(config, root)
    finally:
        os.close(fd)  # (the lock with it)


def _prepare(config: Config, root: str) -> list[str]:
    old = committed(root)
    _tidy(root, old)
    new = wanted(root, config.shards, old)
    if old is None:
        if not new.single:  # a new node of several workers
            _write_map(root, new)
            for d in new.dirs:
                os.makedirs(d, exist_ok=True)
        return list(new.dirs)
    if old.single == new.single and old.ranges == new.ranges:
        for d in old.dirs:
            os.makedirs(d, exist_ok=True)
        return list(old.dirs)
    failed = None
    try:
        reshard(config, old, new)
    except Refused:
        raise
    except Exception as e:
        # (the traceback as text: a record or an exception that kept its frames would keep
        # the column families they name, so the databases, open)
        log.error("resharding %s failed:\n%s", root, traceback.format_exc())
        failed = (f"resharding {root} from {old.describe()} to {new.describe()} failed, its layout is "
                  f"unchanged: {e}")
    if failed is not None:
        gc.collect()
        try:
            _tidy(root, committed(root))  # (what it made so far)
        except Exception as e:
            log.error("deleting what the failed reshard made: %s", e)
        raise Refused(failed)
    return list(new.dirs)


def _kill_point(name: str) -> None:
    if os.environ.get(KILL_ENV) == name:
        log.warning("%s=%s: killing this process here (tests only)", KILL_ENV, name)
        logging.shutdown()
        os.kill(os.getpid(), signal.SIGKILL)


def _meets(a: PartitionRange, b: PartitionRange) -> PartitionRange | None:
    lo, hi = max(a.first, b.first), min(a.last, b.last)
    return PartitionRange(lo, hi) if lo <= hi else None


def reshard(config: Config, old: Layout, new: Layout) -> None:
    """Copy ``old`` into ``new`` (§7, steps 1-4), switch the map, delete ``old`` (step 5)."""
    from marekvs.storage.engine import Engine

    root = config.data_dir
    t0 = time.monotonic()
    log.info("resharding %s: from %s to %s", root, old.describe(), new.describe())
    olds: list[Engine | None] = []
    news: list[Engine] = []
    scratch = os.path.join(root, "shards", SCRATCH)  # (deleted with what a reshard leaves)
    try:
        for d, r in zip(old.dirs, old.ranges):
            if not os.path.exists(os.path.join(d, "CURRENT")):  # (a worker that never started: no data)
                log.info("worker directory %s holds no database: partitions %s are empty", d, r)
                olds.append(None)
                continue
            olds.append(Engine(d, config.node_id, durability="no", partitions=r))
        floor = max((e.max_hlc() for e in olds if e is not None), default=0)
        total_records = total_bytes = 0
        for d, r in zip(new.dirs, new.ranges):
            t1 = time.monotonic()
            e = Engine(d, config.node_id, durability="no", partitions=r)
            news.append(e)
            sources = [(src, part) for src, orng in zip(olds, old.ranges)
                       if (part := _meets(orng, r)) is not None]
            records = size = 0
            segs = array("Q", bytes(8 * SLOTS))
            for src, part in sources:
                if src is None:
                    continue
                n, b = copy_records(src, e, part, scratch)
                records += n
                size += b
                lo, hi = part.first << SEGMENT_BITS, (part.last + 1) << SEGMENT_BITS
                segs[lo:hi] = src.digest.segs[lo:hi]
                _kill_point("copy")
            e.digest.replace(segs)
            entries, keys = relog([src for src, _ in sources if src is not None], e)
            streams = merge_meta([src for src, _ in sources], e, floor)
            e.commit()
            for cf in (e.replog, e.meta, e.db.get_column_family("digest")):  # (data: ingested files)
                cf.flush(True)
            log.info("worker directory %s (partitions %s, incarnation %d): %d records (%.1f MB) from %d old "
                     "director%s, %d keys re-logged in %d entries, %d peer streams, in %.2f s", d, r, e.incarnation,
                     records, size / 1e6, len(sources), "y" if len(sources) == 1 else "ies", keys, entries, streams,
                     time.monotonic() - t1)
            total_records += records
            total_bytes += size
    finally:
        for x in news + [o for o in olds if o is not None]:
            x.close()
    news.clear()
    olds.clear()
    shutil.rmtree(scratch, ignore_errors=True)
    # step 5: the switch
    if new.single:
        os.remove(map_path(root))
        _sync_dir(os.path.join(root, "shards"))
    else:
        _write_map(root, new)
    _kill_point("switch")
    if old.single:
        _destroy_single(root)
    else:
        for d in old.dirs:
            shutil.rmtree(d, ignore_errors=True)
    if new.single:
        shutil.rmtree(os.path.join(root, "shards"), ignore_errors=True)
    took = time.monotonic() - t0
    log.info("resharded %s from %s to %s: %d records (%.1f MB) in %.2f s (%.1f MB/s), clock floor %d", root,
             old.describe(), new.describe(), total_records, total_bytes / 1e6, took,
             total_bytes / 1e6 / max(took, 1e-9), floor)


def _without_wal() -> Any:
    """Write options of the copy: no WAL (what it writes is flushed before the switch)."""
    from rocksdict import WriteOptions

    wo = WriteOptions()
    wo.disable_wal = True  # type: ignore[method-assign, assignment]  # (a property; the stub says a method)
    return wo


def copy_records(src: "Engine", dst: "Engine", part: PartitionRange, scratch: str) -> tuple[int, int]:
    """Copy the records of partitions ``part`` from ``src`` into ``dst``: written in key
    order into an SST file in ``scratch`` and ingested (moved) into ``dst``'s ``data``;
    (records, bytes of keys and values). Twice as fast as WriteBatches into the memtable
    and a flush (bench/README.md, "Resharding"); memory stays at one block of the file."""
    from rocksdict import IngestExternalFileOptions, ReadOptions, SstFileWriter

    from marekvs.storage.engine import data_options

    ro = ReadOptions()
    ro.set_iterate_upper_bound(part.end_key)
    os.makedirs(scratch, exist_ok=True)
    path = os.path.join(scratch, f"{part.first}-{part.last}.sst")
    w = SstFileWriter(data_options())
    w.open(path)
    n = size = 0
    records: Iterator[tuple[bytes, bytes]] = iter(src.data.items(from_key=part.start_key, read_opt=ro))  # type: ignore[arg-type]
    for k, v in records:
        w[k] = v
        n += 1
        size += len(k) + len(v)
    if n:
        w.finish()
        opts = IngestExternalFileOptions()
        opts.set_move_files(True)
        dst.data.ingest_external_file([path], opts)
    del w
    if os.path.exists(path):
        os.remove(path)
    return n, size


def relog(sources: list["Engine"], dst: "Engine") -> tuple[int, int]:
    """Step 2: ``dst``'s log gets entries naming every key in its range that the logs of
    ``sources`` still hold, in their order (entries of at least ``LOG_KEYS`` keys, each key
    once in an entry, but for the last); (entries, keys)."""
    from rocksdict import ReadOptions, WriteBatch

    from marekvs.storage.replog import decode_entry

    lo, hi = dst.partitions.start_key, dst.partitions.end_key
    wo = _without_wal()
    entries = total = 0
    chunk: dict[bytes, None] = {}

    def put() -> None:
        nonlocal entries, total
        keys = list(chunk)
        wb = WriteBatch(raw_mode=True)
        seq = dst.log.stage(wb, keys)
        dst.db.write(wb, wo)
        dst.log.appended(seq, keys, {})
        entries += 1
        total += len(keys)
        chunk.clear()

    for src in sources:
        for _, value in src.replog.items(read_opt=ReadOptions()):
            chunk.update(dict.fromkeys([k for k in decode_entry(value)[1] if lo <= k < hi]))
            if len(chunk) >= LOG_KEYS:
                put()
    if chunk:
        put()
    return entries, total


def merge_meta(sources: list["Engine | None"], dst: "Engine", floor: int) -> int:
    """Steps 3 and 4 into ``dst``'s pending metadata: per peer stream the lowest high-water
    mark of ``sources`` (a stream absent from one of them is left out: it starts at 0), the
    other entries from whichever holds them (peers, the aclfile marker), and the clock floor;
    the streams kept."""
    marks: dict[bytes, tuple[int, bytes]] | None = None
    other: dict[bytes, bytes] = {}
    for src in sources:
        have: dict[bytes, tuple[int, bytes]] = {}
        if src is not None:
            for k, v in src.meta_items(b""):
                if k.startswith(b"hwm:"):
                    have[k] = (int(v.partition(b":")[0]), v)
                elif k not in _OWN_META:
                    other.setdefault(k, v)
        if marks is None:
            marks = have
        else:
            marks = {k: min(m, have[k]) for k, m in marks.items() if k in have}
    for k, v in other.items():
        dst.put_meta(k, v)
    for k, (_, v) in (marks or {}).items():
        dst.put_meta(k, v)
    dst.put_meta(b"hlc", b"%d" % floor)
    return len(marks or {})
