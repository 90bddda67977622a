"""MEMORY USAGE, STATS, DOCTOR, MALLOC-STATS, PURGE, HELP (Redis 7.0's ``object.c``), with
figures that mean something for this engine (docs/compatibility.md lists them).

marekvs keeps its data in RocksDB, not in a heap of Redis objects, and has no allocator
of its own to ask (INFO's ``mem_allocator`` is ``libc``). So:

- MEMORY USAGE key [SAMPLES n] is the bytes of the records the key owns in RocksDB (their
  internal keys and stored values, before compression): its string record, or its head
  and its live element records of every kind (a zset's members and score index entries),
  a collection's sampled as Redis samples (the first ``n`` elements, 5 by default, 0 for
  all; their mean size times the element count; ``keyspace/values.py``). Nil for a key
  that does not exist.
- MEMORY STATS keeps Redis's fields, in Redis's order (clients read them by name), and
  fills them from what the process and RocksDB report: the process's resident size for
  the allocator figures, RocksDB's data column family (SST files and memtables) for the
  dataset, the replication log's column family for the backlog; the fields that have no
  counterpart here (Lua caches, AOF buffer, replicas' buffers) are 0. marekvs's own
  figures follow, under ``marekvs.*`` names.
- MEMORY DOCTOR reports, in Redis's words where they apply, what this engine can tell.
- MEMORY MALLOC-STATS answers as Redis built with libc does; MEMORY PURGE runs Python's
  garbage collector (the nearest thing to returning dirty pages) and answers OK.
"""

from __future__ import annotations

import gc

from marekvs.commands import args as A
from marekvs.commands import errors, reply
from marekvs.commands.dump import values
from marekvs.commands.table import command, container, help_subcommand

CONTAINERS = (
    container("memory", -2, group="server", acl="slow", summary="A container for memory diagnostics commands",
              since="4.0.0"),
)

_DEFAULT_SAMPLES = 5
_SMALL_DATASET = 5 << 20  # below this Redis's doctor says the instance is (nearly) empty


def _prop(cf, name: str) -> int:
    try:
        return int(cf.property_int_value(name) or 0)
    except Exception:
        return 0


def _stored(cf) -> int:
    """Bytes a column family holds: SST files plus memtables."""
    return _prop(cf, "rocksdb.total-sst-files-size") + _prop(cf, "rocksdb.cur-size-all-mem-tables")


@command("usage", -3, "readonly", specs="RO index 2 range 0", parent="memory", group="server",
         acl="read slow", summary="Estimate the memory usage of a key", since="4.0.0",
         complexity="O(N) where N is the number of samples.", syntax="key [SAMPLES count]")
def memory_usage(ctx, args: list[bytes]):
    samples = _DEFAULT_SAMPLES
    p = A.Options(args, 3)
    while p.more():
        if p.accept(b"samples", 1):
            samples = p.integer()
            if samples < 0:
                p.fail(errors.SYNTAX)
        else:
            p.fail(errors.SYNTAX)
    p.check()
    return values(ctx).size(args[2], samples, ctx.ks.now())


def figures(node) -> dict[str, int]:
    """What MEMORY STATS and MEMORY DOCTOR report, as numbers: a node of several shard
    workers sums each worker's (``shards/fanout.py``) and makes the same reply from the
    sums (``stats_reply``, ``doctor_report``)."""
    e = node.engine
    rss = node.memory_rss()
    return {
        "rss": rss, "peak": max(node.memory_peak, rss),
        "data": _stored(e.data), "replog": _stored(e.replog),
        "memtables": _prop(e.data, "rocksdb.cur-size-all-mem-tables"),
        "block_cache": _prop(e.data, "rocksdb.block-cache-usage"),
        "table_readers": _prop(e.data, "rocksdb.estimate-table-readers-mem"),
        "keys": sum(node.sweeper.live_keys),
        "queries": sum(c.query_buffer() for c in node.clients.values()),
        "cache": len(e.cache), "cache_capacity": e.cache_entries, "backlog": e.log_seq - e.log_first,
    }


@command("stats", 2, "", parent="memory", group="server", acl="slow",
         summary="Show memory usage details", since="4.0.0", complexity="O(1)")
def memory_stats(ctx, args: list[bytes]):
    return stats_reply(figures(ctx.node))


def stats_reply(f: dict[str, int]) -> reply.Map:
    """MEMORY STATS's reply from ``figures``."""
    rss, peak, data, keys = f["rss"], f["peak"], f["data"], f["keys"]
    overhead = max(rss - data, 0)
    out: list = [
        b"peak.allocated", peak, b"total.allocated", rss, b"startup.allocated", 0,
        b"replication.backlog", f["replog"], b"clients.slaves", 0, b"clients.normal", f["queries"],
        b"cluster.links", 0, b"aof.buffer", 0, b"lua.caches", 0, b"functions.caches", 0,
    ]
    if keys:
        out += [b"db.0", reply.Map([b"overhead.hashtable.main", 0, b"overhead.hashtable.expires", 0,
                                    b"overhead.hashtable.slot-to-keys", 0])]
    out += [
        b"overhead.total", overhead, b"keys.count", keys, b"keys.bytes-per-key", data // keys if keys else 0,
        b"dataset.bytes", data, b"dataset.percentage", reply.Double(100 * data / rss if rss else 0.0),
        b"peak.percentage", reply.Double(100 * rss / peak if peak else 0.0),
        b"allocator.allocated", rss, b"allocator.active", rss, b"allocator.resident", rss,
        b"allocator-fragmentation.ratio", reply.Double(1.0), b"allocator-fragmentation.bytes", 0,
        b"allocator-rss.ratio", reply.Double(1.0), b"allocator-rss.bytes", 0,
        b"rss-overhead.ratio", reply.Double(1.0), b"rss-overhead.bytes", 0,
        b"fragmentation", reply.Double(1.0), b"fragmentation.bytes", 0,
        # marekvs's own
        b"marekvs.rocksdb.memtables", f["memtables"], b"marekvs.rocksdb.block-cache", f["block_cache"],
        b"marekvs.rocksdb.table-readers", f["table_readers"],
        b"marekvs.record-cache.entries", f["cache"],
    ]
    return reply.Map(out)


_EMPTY = ("Hi Sam, this instance is empty or is using very little memory, my issues detector can't be used in "
          "these conditions. Please, leave for your mission on Earth and fill it with some data. The new Sam and I "
          "will be back to our programming as soon as I finished rebooting.\n")
_FINE = ("Hi Sam, I can't find any memory issue in your instance. I can only account for what occurs on this "
         "base.\n")
_REPLOG_BACKLOG = 1_000_000  # log entries kept for peers past which a peer is far behind


def doctor_report(f: dict[str, int]) -> str:
    """What MEMORY DOCTOR says from ``figures`` (Redis's sentences for the checks that
    apply here)."""
    if f["data"] < _SMALL_DATASET:
        return _EMPTY
    issues = []
    if f["peak"] > f["rss"] * 3 // 2:
        issues.append(" * Peak memory: In the past this instance used more than 150% the memory that is currently "
                      "using. The allocator is normally not able to release memory after a peak, so you can "
                      "expect to see a big fragmentation ratio, however this is actually harmless and is only "
                      "due to the memory peak, and if the Redis instance Resident Set Size (RSS) is currently "
                      "bigger than expected, the memory will be used as soon as you fill the Redis instance "
                      "with more data. If the memory peak was only occasional and you want to try to reclaim "
                      "memory, please try the MEMORY PURGE command, otherwise the only other option is to "
                      "shutdown and restart the instance.\n\n")
    if f["cache"] >= f["cache_capacity"]:
        issues.append(f" * Record cache full: the {f['cache_capacity']} records of the write-through cache in front "
                      "of RocksDB are all in use, so reads of other keys go to RocksDB (its block cache, then "
                      "disk). If the working set is bigger and memory allows, raise cache_entries.\n\n")
    backlog = f["backlog"]
    if backlog > _REPLOG_BACKLOG:
        issues.append(f" * Replication backlog: {backlog} replication-log entries are kept because a peer has not "
                      "acknowledged them (INFO replication shows which). The log is trimmed once every peer has "
                      "applied it; a peer past replog_max_entries re-bootstraps.\n\n")
    if not issues:
        return _FINE
    return ("Sam, I detected a few issues in this Redis instance memory implants:\n\n" + "".join(issues)
            + "I'm here to keep you safe, Sam. I want to help you.\n")


@command("doctor", 2, "", parent="memory", group="server", acl="slow",
         summary="Outputs memory problems report", since="4.0.0", complexity="O(1)")
def memory_doctor(ctx, args: list[bytes]):
    return reply.Verbatim(doctor_report(figures(ctx.node)).encode())


@command("malloc-stats", 2, "", parent="memory", group="server", acl="slow",
         summary="Show allocator internal stats", since="4.0.0",
         complexity="Depends on how much memory is allocated, could be slow")
def memory_malloc_stats(ctx, args: list[bytes]):
    return b"Stats not supported for the current allocator"


@command("purge", 2, "", parent="memory", group="server", acl="slow",
         summary="Ask the allocator to release memory", since="4.0.0",
         complexity="Depends on how much memory is allocated, could be slow")
def memory_purge(ctx, args: list[bytes]):
    gc.collect()
    return reply.OK


memory_help = help_subcommand("memory", (
    "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "DOCTOR",
    "    Return memory problems reports.",
    "MALLOC-STATS",
    "    Return internal statistics report from the memory allocator.",
    "PURGE",
    "    Attempt to purge dirty pages for reclamation by the allocator.",
    "STATS",
    "    Return information about the memory usage of the server.",
    "USAGE <key> [SAMPLES <count>]",
    "    Return memory in bytes used by <key> and its value. Nested values are",
    "    sampled up to <count> times (default: 5, 0 means sample all).",
    "HELP",
    "    Prints this help."), group="server", since="4.0.0", acl="slow")
