"""Server commands: INFO, CONFIG, DBSIZE, FLUSHDB/FLUSHALL, TIME, LASTSAVE, SAVE,
SHUTDOWN, COMMAND.

FLUSHDB / FLUSHALL are replicated writes: they write an LWW tombstone for every live
key (string records and collection heads) through the apply path, as one command, so
a peer that receives the records converges on the flush exactly like on a DEL of
every key; writes made after the flush (higher HLC) survive it everywhere.
"""

from __future__ import annotations

import fnmatch
import logging
import os
import platform
import resource
import sys
import time

from marekvs import REDIS_COMPAT_VERSION, __version__
from marekvs.commands import docs, errors, tunables
from marekvs.commands.db import now_ms
from marekvs.commands.errors import CommandError
from marekvs.commands.stepwise import in_steps
from marekvs.commands.table import command, container, help_subcommand
from marekvs.core.partition import PARTITIONS
from marekvs.server import resp
from marekvs.storage.engine import shard_range

log = logging.getLogger("marekvs.server")

CONTAINERS = (
    container("config", group="server", summary="A container for server configuration commands.",
              since="2.0.0", acl="slow"),
    container("command", -1, "loading stale", group="server", acl="connection slow",
              summary="Returns detailed information about all commands.", since="2.8.13",
              handler=lambda c, args: [docs.info_reply(x) for x in _all_commands(c.server.table)]),
)

def _live_params(server) -> dict[str, str]:
    cfg = server.config
    return {
        "port": str(cfg.port), "bind": cfg.bind, "dir": os.path.abspath(cfg.data_dir),
        "requirepass": cfg.requirepass, "appendfsync": server.engine.durability,
        "gc-grace": str(cfg.gc_grace),
        "max-clock-drift": str(cfg.max_clock_drift), "node-id": str(cfg.node_id),
        "shards": str(cfg.shards), "maxclients": str(server.maxclients),
    }


RESERVED_FDS = 32  # Redis's CONFIG_MIN_RESERVED_FDS: descriptors kept for everything but clients

# CONFIG SET parameters of marekvs itself, with their parsers (the tunables: ``tunables``)
_OWN_PARAMS = {
    "appendfsync": tunables.one_of("everysec", "always", "no"),
    "requirepass": str,
    "gc-grace": tunables.int_between(0, tunables.LLONG_MAX),
    "max-clock-drift": tunables.int_between(0, tunables.LLONG_MAX),
    "maxclients": tunables.int_between(1, tunables.UINT_MAX),
}


@command("get", -3, "admin noscript loading stale", parent="config", group="server",
         summary="Returns the effective values of configuration parameters.", since="2.0.0",
         syntax="parameter [parameter ...]")
def config_get(c, args):
    server = c.server
    params = tunables.values(server.config_extra)
    params.update(_live_params(server))
    out: list = []
    seen = set()
    for pat in args[2:]:
        p = pat.decode("utf-8", "replace").lower()
        for name in sorted(params):
            if name not in seen and fnmatch.fnmatchcase(name, p):
                seen.add(name)
                out += [name.encode(), params[name].encode()]
    return resp.Map(out)


@command("set", -4, "admin noscript loading stale", parent="config", group="server",
         summary="Sets configuration parameters in-flight.", since="2.0.0",
         syntax="parameter value [parameter value ...]")
def config_set(c, args):
    if len(args) % 2:
        raise CommandError(errors.SYNTAX)
    server = c.server
    pairs = [(args[i].decode("utf-8", "replace"), args[i + 1].decode("utf-8", "replace"))
             for i in range(2, len(args), 2)]
    # As Redis: every name must exist and be changeable, and appear once, then every
    # value must be valid, before anything is set (all or nothing).
    # The first pass stops at the first unknown, unchangeable or repeated name.
    names: list[str] = []
    for i, (name, _) in enumerate(pairs):
        low = name.lower()
        canon = low if low in _OWN_PARAMS else tunables.canonical_name(low)
        if canon is None:
            raise CommandError(f"ERR Unknown option or number of arguments for CONFIG SET - '{name}'")
        try:
            if canon not in _OWN_PARAMS:
                tunables.check_settable(canon)
            if any(low == earlier.lower() for earlier, _ in pairs[:i]):
                raise tunables.TunableError("duplicate parameter")  # (two names of one: fine)
        except tunables.TunableError as e:
            raise _set_failed(name, e) from None
        names.append(canon)
    changes: list[tuple[str, str]] = []
    for canon, (name, value) in zip(names, pairs):
        try:
            if canon in _OWN_PARAMS:
                value = _OWN_PARAMS[canon](value)
            else:
                value = tunables.check(canon, value, tunables.value(server.config_extra, canon))
        except tunables.TunableError as e:
            raise _set_failed(name, e) from None
        changes.append((canon, value))
    # maxclients first: the one change that can fail, before any other is made
    for name, value in sorted(changes, key=lambda change: change[0] != "maxclients"):
        if name == "maxclients":
            _set_maxclients(server, int(value))
        elif name == "appendfsync":
            server.set_durability(value)
        elif name == "requirepass":
            server.config.requirepass = value
        elif name == "gc-grace":
            server.config.gc_grace = int(value)
        elif name == "max-clock-drift":
            server.config.max_clock_drift = int(value)
            server.hlc.max_drift_ms = int(value)
        else:
            server.config_extra[name] = value
            if name == "proto-max-bulk-len":
                server.limits.max_bulk = int(value)
            elif name == "client-query-buffer-limit":
                server.limits.max_query = int(value)
    return resp.OK


def _set_maxclients(server, n: int) -> None:
    """CONFIG SET maxclients: as Redis, the open-files limit is raised if it must be; if
    it cannot be raised enough the old value stays and the error says what would fit."""
    fits = fit_open_files(n)
    if fits != n:
        raise _set_failed("maxclients", ValueError(
            f"The operating system is not able to handle the specified number of clients, try with {fits}"))
    server.maxclients = n


def fit_open_files(maxclients: int) -> int:
    """Raise the open-files limit for ``maxclients`` clients as Redis's
    ``adjustOpenFilesLimit`` does, and return how many clients the limit allows:
    ``maxclients`` itself, or the limit less ``RESERVED_FDS`` when it cannot be raised
    that far (logged, as Redis logs it).

    Redis computes the descriptors needed as a 32-bit unsigned sum (so ``maxclients
    4294967295`` needs 31) and, when the soft limit is lower, sets soft and hard limit
    to the first value that works, stepping down by 16 from the need: the largest
    ``need - 16k`` at or under what the process may set (``fs.nr_open`` with the
    privilege, else the hard limit). That value is computed here, not searched."""
    need = (maxclients + RESERVED_FDS) & 0xFFFFFFFF
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return maxclients
    best = soft
    for ceiling in (need, _nr_open(), hard):
        if ceiling == resource.RLIM_INFINITY or ceiling >= need:
            step = need
        else:
            step = need - -(-(need - ceiling) // 16) * 16
        if step <= soft:
            continue
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (step, step))
        except (ValueError, OSError):
            continue
        best = step
        break
    if best >= need:
        log.info("Increased maximum number of open files to %d (it was originally set to %d).",
                 best, soft)
        return maxclients
    log.warning("You requested maxclients of %d requiring at least %d max file descriptors. "
                "Current maximum open files is %d. maxclients has been reduced to %d to "
                "compensate for low ulimit. If you need higher maxclients increase 'ulimit -n'.",
                maxclients, need, best, best - RESERVED_FDS)
    return max(1, best - RESERVED_FDS)


def raise_soft_open_files() -> None:
    """At start: the soft open-files limit up to the hard one. RocksDB's files (every SST
    stays open) share the limit with the clients, so the node takes what it may; the
    client count itself stays bounded by maxclients."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


def _nr_open() -> int:
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1 << 20


def _set_failed(name: str, e: Exception) -> CommandError:
    return CommandError(f"ERR CONFIG SET failed (possibly related to argument '{name}') - {e}")


@command("resetstat", 2, "admin noscript loading stale", parent="config", group="server",
         summary="Resets the server's statistics.", since="2.0.0")
def config_resetstat(c, args):
    s = c.server
    s.total_commands = s.error_replies = s.rejected_connections = s.unexpected_errors = 0
    s.total_connections = len(s.clients)
    return resp.OK


config_help = help_subcommand("config", (
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>", "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>", "    Set the configuration <directive> to <value>.",
    "RESETSTAT", "    Reset statistics reported by the INFO command.",
    "HELP", "    Print this help."), group="server")


# -- keyspace-wide ----------------------------------------------------------------------

@command("dbsize", 1, "readonly fast", group="server", acl="keyspace read fast",
         summary="Returns the number of keys in the database.")
def dbsize(c, args):
    return in_steps(_count_keys(c.ks, now_ms()))


def _count_keys(ks, now):
    n = 0
    for step in ks.all_keys_in_steps(now):
        n += len(step)
        yield
    return n


def _flush(c, args):
    if len(args) > 2 or (len(args) == 2 and args[1].upper() not in (b"ASYNC", b"SYNC")):
        raise CommandError(errors.SYNTAX)
    ks = c.ks
    now = now_ms()
    recs = []
    for key, _, _ in list(ks.all_keys(now)):
        recs += ks.delete_records(key, now)
    if recs:
        ks.apply(recs)
    return resp.OK


@command("flushdb", -1, "write", group="server", acl="keyspace write slow dangerous",
         summary="Removes all keys from the current database.",
         syntax="[ASYNC | SYNC]")
def flushdb(c, args):
    return _flush(c, args)


@command("flushall", -1, "write", group="server", acl="keyspace write slow dangerous",
         summary="Removes all keys from all databases.",
         syntax="[ASYNC | SYNC]")
def flushall(c, args):
    return _flush(c, args)


@command("time", 1, "loading stale fast", group="server", acl="fast", summary="Returns the server time.", since="2.6.0")
def time_(c, args):
    t = time.time_ns() // 1000
    return [b"%d" % (t // 1_000_000), b"%d" % (t % 1_000_000)]


@command("lastsave", 1, "loading stale fast", group="server", acl="admin fast dangerous",
         summary="Returns the Unix timestamp of the last successful save to disk.")
def lastsave(c, args):
    return c.server.last_save


@command("save", 1, "admin noscript", group="server",
         summary="Synchronously saves the database(s) to disk.")
def save(c, args):
    c.server.engine.sync()
    c.server.last_save = int(time.time())
    return resp.OK


@command("shutdown", -1, "admin noscript loading stale no_multi allow_busy", group="server",
         summary="Synchronously saves the database(s) to disk and shuts down the Redis server.",
         syntax="[NOSAVE | SAVE] [NOW] [FORCE] [ABORT]")
def shutdown(c, args):
    for a in args[1:]:
        if a.upper() not in (b"NOSAVE", b"SAVE", b"NOW", b"FORCE", b"ABORT"):
            raise CommandError(errors.SYNTAX)
    if any(a.upper() == b"ABORT" for a in args[1:]):
        raise CommandError("ERR No shutdown in progress.")
    c.server.request_shutdown()
    c.close_after_reply()
    return resp.NO_REPLY  # Redis closes the connection without a reply


# -- INFO -----------------------------------------------------------------------------

def _section_server(s) -> list[tuple[str, object]]:
    up = int(time.monotonic() - s.started_mono)
    return [
        ("redis_version", REDIS_COMPAT_VERSION), ("marekvs_version", __version__),
        ("redis_git_sha1", "00000000"), ("redis_git_dirty", 0), ("redis_mode", "standalone"),
        ("os", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("arch_bits", 64 if sys.maxsize > 2**32 else 32), ("multiplexing_api", "epoll"),
        ("python_version", platform.python_version()), ("process_id", os.getpid()),
        ("run_id", s.run_id), ("tcp_port", s.config.port), ("server_time_usec", time.time_ns() // 1000),
        ("uptime_in_seconds", up), ("uptime_in_days", up // 86400), ("hz", 10),
        ("executable", sys.argv[0]), ("config_file", s.config_file or ""),
    ]


def _section_clients(s):
    return [("connected_clients", len(s.clients)), ("blocked_clients", 0), ("tracking_clients", 0),
            ("maxclients", s.maxclients)]


def _section_memory(s):
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return [("used_memory", rss), ("used_memory_human", f"{rss / 1048576:.2f}M"), ("used_memory_rss", rss),
            ("maxmemory", 0), ("maxmemory_policy", "noeviction"), ("cache_entries", len(s.engine.cache)),
            ("mem_allocator", "libc")]


def _section_persistence(s):
    e = s.engine
    return [("loading", 0), ("rdb_changes_since_last_save", 0), ("rdb_bgsave_in_progress", 0),
            ("rdb_last_save_time", s.last_save), ("aof_enabled", 1), ("aof_rewrite_in_progress", 0),
            ("aof_last_write_status", "ok"), ("appendfsync", e.durability), ("storage_engine", "rocksdb"),
            ("storage_batches", e.batches), ("storage_records_written", e.records_written),
            ("storage_sst_bytes", e.approximate_size()), ("replog_first_seq", e.log_first),
            ("replog_last_seq", e.log_seq)]


def _section_stats(s):
    return [("total_connections_received", s.total_connections), ("total_commands_processed", s.total_commands),
            ("rejected_connections", s.rejected_connections), ("expired_keys", 0),
            ("expired_records_removed", s.sweeper.removed), ("evicted_keys", 0),
            ("total_error_replies", s.error_replies), ("unexpected_error_replies", s.unexpected_errors)]


def _section_replication(s):
    return [("replication_mode", "active-active"), ("connected_slaves", 0), ("master_replid", s.run_id),
            ("master_repl_offset", s.engine.log_seq)] + s.repl.info_fields()


def _section_cluster(s):
    return [("cluster_enabled", 0)]


def _section_keyspace(s):
    """From the sweeper's per-partition counts (refreshed every sweep cycle), so INFO
    stays O(partitions); DBSIZE is the exact count."""
    n = sum(s.sweeper.live_keys)
    return [("db0", f"keys={n},expires={sum(s.sweeper.expiring)},avg_ttl=0")] if n else []


def _section_marekvs(s):
    lo_hi = [shard_range(i, s.config.shards) for i in range(s.config.shards)]
    return [("node_id", s.config.node_id), ("partitions", PARTITIONS), ("shards", s.config.shards),
            ("shard_ranges", ",".join(f"{lo}-{hi}" for lo, hi in lo_hi)), ("hlc", s.hlc.last),
            ("hlc_physical_ms", s.hlc.last >> 16), ("hlc_clamped", s.hlc.clamped),
            ("max_clock_drift_ms", s.hlc.max_drift_ms), ("gc_grace_seconds", s.config.gc_grace),
            ("sweeper_cycles", s.sweeper.cycles)]


SECTIONS = {
    "server": _section_server, "clients": _section_clients, "memory": _section_memory,
    "persistence": _section_persistence, "stats": _section_stats, "replication": _section_replication,
    "cpu": lambda s: [("used_cpu_sys", "%.6f" % resource.getrusage(resource.RUSAGE_SELF).ru_stime),
                      ("used_cpu_user", "%.6f" % resource.getrusage(resource.RUSAGE_SELF).ru_utime)],
    "cluster": _section_cluster, "keyspace": _section_keyspace, "marekvs": _section_marekvs,
}
DEFAULT_SECTIONS = ("server", "clients", "memory", "persistence", "stats", "replication", "cpu",
                    "cluster", "keyspace", "marekvs")


def info_text(server, names: list[str]) -> str:
    if not names or any(n in ("all", "everything", "default") for n in names):
        names = list(DEFAULT_SECTIONS)
    parts = []
    for n in names:
        f = SECTIONS.get(n)
        if f is None:
            continue
        body = "".join(f"{k}:{v}\r\n" for k, v in f(server))
        parts.append(f"# {n.capitalize()}\r\n{body}")
    return "\r\n".join(parts)


@command("info", -1, "loading stale sentinel", group="server", acl="slow dangerous",
         summary="Returns information and statistics about the server.", syntax="[section [section ...]]")
def info(c, args):
    names = [a.decode("utf-8", "replace").lower() for a in args[1:]]
    return resp.Verbatim(info_text(c.server, names).encode())


# -- COMMAND --------------------------------------------------------------------------

def _all_commands(table):
    return sorted(table, key=lambda x: x.name)


@command("count", 2, "loading stale", parent="command", group="server", acl="connection slow",
         summary="Returns a count of commands.", since="2.8.13")
def command_count(c, args):
    return len(c.server.table)


@command("info", -2, "loading stale", parent="command", group="server", acl="connection slow",
         summary="Returns information about one, multiple or all commands.", since="2.8.13",
         syntax="[command-name [command-name ...]]")
def command_info(c, args):
    table = c.server.table
    if len(args) == 2:
        return [docs.info_reply(x) for x in _all_commands(table)]
    out = []
    for name in args[2:]:
        cmd = table.lookup(name)
        out.append(docs.info_reply(cmd) if cmd else None)
    return out


@command("docs", -2, "loading stale", parent="command", group="server", acl="connection slow",
         summary="Returns documentary information about one, multiple or all commands.", since="7.0.0",
         syntax="[command-name [command-name ...]]")
def command_docs(c, args):
    table = c.server.table
    names = args[2:] or [x.name.encode() for x in _all_commands(table)]
    out: list = []
    for name in names:
        cmd = table.lookup(name)
        if cmd is not None:
            out += [cmd.name.encode(), docs.doc_reply(cmd)]
    return resp.Map(out)


@command("list", -2, "loading stale", parent="command", group="server", acl="connection slow",
         summary="Returns a list of command names.", since="7.0.0",
         syntax="[FILTERBY MODULE module-name | ACLCAT category | PATTERN pattern]")
def command_list(c, args):
    cmds = _all_commands(c.server.table)
    if len(args) > 2:
        if len(args) != 5 or args[2].upper() != b"FILTERBY":
            raise CommandError(errors.SYNTAX)
        kind, val = args[3].upper(), args[4].decode("utf-8", "replace")
        if kind == b"MODULE":
            cmds = []
        elif kind == b"ACLCAT":
            cmds = [x for x in cmds if val in (x.acl or (x.group,))]
        elif kind == b"PATTERN":
            cmds = [x for x in cmds if fnmatch.fnmatchcase(x.name, val.lower())]
        else:
            raise CommandError(errors.SYNTAX)
    return [x.name.encode() for x in cmds]


@command("getkeys", -4, "loading stale", parent="command", group="server", acl="connection slow",
         summary="Extracts the key names from an arbitrary command.", since="2.8.13",
         syntax="command [arg [arg ...]]")
def command_getkeys(c, args):
    cmd = c.server.table.lookup(args[2])
    if cmd is None:
        raise CommandError("ERR Invalid command specified")
    sub = args[2:]
    if (cmd.arity > 0 and len(sub) != cmd.arity) or len(sub) < -cmd.arity:
        raise CommandError("ERR Invalid number of arguments specified for command")
    keys = cmd.keys_of(sub)
    if not keys:
        raise CommandError("ERR The command has no key arguments")
    return keys


command_help = help_subcommand("command", (
    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "(no subcommand)", "    Return details about all Redis commands.",
    "COUNT", "    Return the total number of commands in this Redis server.",
    "LIST", "    Return a list of all commands in this Redis server.",
    "INFO [<command-name> ...]", "    Return details about multiple Redis commands.",
    "DOCS [<command-name> ...]", "    Return documentation details about multiple Redis commands.",
    "GETKEYS <full-command>", "    Return the keys from a full Redis command.",
    "HELP", "    Print this help."), group="server", acl="connection slow")
