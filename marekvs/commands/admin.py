"""Server commands: INFO, CONFIG, DBSIZE, FLUSHDB/FLUSHALL, TIME, LASTSAVE, SAVE,
SHUTDOWN, WAIT, ROLE.

FLUSHDB / FLUSHALL are replicated writes: they write an LWW tombstone for every live
key (string records and collection heads) through the apply path, as one command, so
a peer that receives the records converges on the flush exactly like on a DEL of
every key; writes made after the flush (higher HLC) survive it everywhere.
"""

from __future__ import annotations

import asyncio
import dataclasses
import fnmatch
import logging
import os
import platform
import resource
import sys
import time

from marekvs import __version__
from marekvs.commands import errors, reply, tunables
from marekvs.commands.args import Options, int_arg
from marekvs.commands.errors import CommandError
from marekvs.commands.stepwise import in_steps
from marekvs.commands.table import command, container, help_subcommand
from marekvs.config import CHOICES
from marekvs.core.partition import PARTITIONS, ShardMap

log = logging.getLogger("marekvs.server")

CONTAINERS = (
    container("config", group="server", summary="A container for server configuration commands.",
              since="2.0.0", acl="slow"),
)

def _live_params(node) -> dict[str, str]:
    cfg = node.config
    return {
        "port": str(cfg.port), "bind": cfg.bind, "dir": os.path.abspath(cfg.data_dir),
        "requirepass": cfg.requirepass, "appendfsync": node.engine.durability, "aclfile": cfg.aclfile,
        "gc-grace": str(cfg.gc_grace),
        "max-clock-drift": str(cfg.max_clock_drift), "node-id": str(cfg.node_id),
        "shards": str(cfg.shards), "maxclients": str(node.maxclients),
        **{name: str(getattr(cfg, _field(name))) for name in (*_TLS_PARAMS, *_TLS_FIXED)},
    }


def _field(name: str) -> str:
    """The Config field of a Redis parameter name (tls-cert-file -> tls_cert_file)."""
    return name.replace("-", "_")


def _choice(name: str):
    """A parser for one of ``config.CHOICES[name]`` (any case; printed as spelled there)."""
    choices = CHOICES[name]

    def parse(value: str) -> str:
        for c in choices:
            if c.lower() == value.lower():
                return c
        raise tunables.TunableError(errors.cfg_one_of(choices))
    return parse


# TLS (server/tls.py): CONFIG SET checks each value, then the RESP server builds a context
# from all of them (node.tls_prepare) before anything is set; the new one serves the
# connections accepted after the reply. tls-port and tls-replication are fixed at start.
_TLS_PARAMS = {
    "tls-cert-file": str, "tls-key-file": str, "tls-key-file-pass": str, "tls-ca-cert-file": str,
    "tls-ca-cert-dir": str, "tls-auth-clients": _choice("tls_auth_clients"),
    "tls-auth-clients-user": _choice("tls_auth_clients_user"), "tls-protocols": str, "tls-ciphers": str,
    "tls-ciphersuites": str, "tls-prefer-server-ciphers": tunables.yes_no, "tls-session-caching": tunables.yes_no,
    "tls-session-cache-size": tunables.int_between(0, tunables.INT_MAX),
    "tls-session-cache-timeout": tunables.int_between(0, tunables.INT_MAX), "tls-dh-params-file": str,
}
_TLS_FIXED = ("tls-port", "tls-replication")


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
def config_get(ctx, args):
    node = ctx.node
    params = tunables.values(node.tunables)
    params.update(_live_params(node))
    out: list = []
    seen = set()
    for pat in args[2:]:
        p = pat.decode("utf-8", "replace").lower()
        for name in sorted(params):
            if name not in seen and fnmatch.fnmatchcase(name, p):
                seen.add(name)
                out += [name.encode(), params[name].encode()]
    return reply.Map(out)


@command("set", -4, "admin noscript loading stale", parent="config", group="server",
         summary="Sets configuration parameters in-flight.", since="2.0.0",
         syntax="parameter value [parameter value ...]")
def config_set(ctx, args):
    if len(args) % 2:
        raise CommandError(errors.SYNTAX)
    node = ctx.node
    pairs = [(args[i].decode("utf-8", "replace"), args[i + 1].decode("utf-8", "replace"))
             for i in range(2, len(args), 2)]
    # As Redis: every name must exist and be changeable, and appear once, then every
    # value must be valid, before anything is set (all or nothing).
    # The first pass stops at the first unknown, unchangeable or repeated name.
    names: list[str] = []
    for i, (name, _) in enumerate(pairs):
        low = name.lower()
        canon = low if low in _OWN_PARAMS or low in _TLS_PARAMS or low in _TLS_FIXED else tunables.canonical_name(low)
        if canon is None:
            raise CommandError(errors.config_set_unknown(name))
        try:
            if canon in _TLS_FIXED:
                raise tunables.TunableError(errors.cfg_immutable("immutable"))
            if canon not in _OWN_PARAMS and canon not in _TLS_PARAMS:
                tunables.check_settable(canon)
            if any(low == earlier.lower() for earlier, _ in pairs[:i]):
                raise tunables.TunableError(errors.CFG_DUPLICATE)  # (two names of one: fine)
        except tunables.TunableError as e:
            raise _set_failed(name, e) from None
        names.append(canon)
    changes: list[tuple[str, str, str]] = []
    for canon, (name, given) in zip(names, pairs):
        try:
            if canon in _OWN_PARAMS:
                value = _OWN_PARAMS[canon](given)
            elif canon in _TLS_PARAMS:
                value = _TLS_PARAMS[canon](given)
            else:
                value = tunables.check(canon, given, node.tunable(canon))
        except tunables.TunableError as e:
            raise _set_failed(name, e) from None
        changes.append((canon, value, given))
    # the changes that can fail come first, before any other is made: a TLS context for the
    # new tls-* values is built (nothing is swapped yet), then maxclients
    tls = {_field(canon): value for canon, value, _ in changes if canon in _TLS_PARAMS}
    swap_tls = None
    if tls:
        cfg = node.config
        tls = {f: type(getattr(cfg, f))(v) for f, v in tls.items()}
        if node.tls_prepare is not None:
            try:
                swap_tls = node.tls_prepare(dataclasses.replace(cfg, **tls))
            except ValueError:  # (the reason is logged: server/tls.py)
                first = next(name for canon, (name, _) in zip(names, pairs) if canon in _TLS_PARAMS)
                log.warning("Failed applying new configuration. Possibly related to new %s setting. "
                            "Restoring previous settings.", first.lower())
                raise CommandError(errors.config_set_failed(first, errors.CFG_TLS)) from None
    for name, value, given in sorted(changes, key=lambda change: change[0] != "maxclients"):
        if name == "maxclients":
            try:
                node.set_maxclients(int(value))
            except ValueError as e:
                raise _set_failed("maxclients", e) from None
        elif name == "appendfsync":
            node.set_durability(value)
        elif name == "requirepass":
            node.config.requirepass = value
            node.acl.set_requirepass(value)  # the default user's password, on every node
        elif name == "gc-grace":
            node.config.gc_grace = int(value)
        elif name == "max-clock-drift":
            node.config.max_clock_drift = int(value)
            node.hlc.max_drift_ms = int(value)
        elif name in _TLS_PARAMS:
            setattr(node.config, _field(name), tls[_field(name)])
        else:
            node.set_tunable(name, value, given)
    if swap_tls is not None:
        swap_tls()
    return reply.OK


def _set_failed(name: str, e: Exception) -> CommandError:
    return CommandError(errors.config_set_failed(name, str(e)))


@command("resetstat", 2, "admin noscript loading stale", parent="config", group="server",
         summary="Resets the server's statistics.", since="2.0.0")
def config_resetstat(ctx, args):
    ctx.node.reset_stats()
    return reply.OK


config_help = help_subcommand("config", (
    "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET <pattern>", "    Return parameters matching the glob-like <pattern> and their values.",
    "SET <directive> <value>", "    Set the configuration <directive> to <value>.",
    "RESETSTAT", "    Reset statistics reported by the INFO command.",
    "HELP", "    Print this help."), group="server", acl="slow")


# -- keyspace-wide ----------------------------------------------------------------------

@command("dbsize", 1, "readonly fast", group="server", acl="keyspace read fast",
         summary="Returns the number of keys in the database.")
def dbsize(ctx, args):
    return in_steps(ctx, _count_keys(ctx.ks, ctx.ks.now()))


def _count_keys(ks, now):
    n = 0
    for step in ks.all_keys_in_steps(now):
        n += len(step)
        yield
    return n


def _flush(ctx, args):
    if len(args) > 2 or (len(args) == 2 and args[1].upper() not in (b"ASYNC", b"SYNC")):
        raise CommandError(errors.SYNTAX)
    ks = ctx.ks
    now = ctx.ks.now()
    tracking = ctx.node.tracking
    tracking.flush_all()  # one null invalidation for everybody, not one per key
    recs = []
    for key, _, _ in list(ks.all_keys(now)):
        recs += ks.delete_records(key, now)
    if recs:
        tracking.suppress = True
        try:
            ks.apply(recs)
        finally:
            tracking.suppress = False
    return reply.OK


@command("flushdb", -1, "write", group="server", acl="keyspace write slow dangerous",
         summary="Removes all keys from the current database.",
         syntax="[ASYNC | SYNC]")
def flushdb(ctx, args):
    return _flush(ctx, args)


@command("flushall", -1, "write", group="server", acl="keyspace write slow dangerous",
         summary="Removes all keys from all databases.",
         syntax="[ASYNC | SYNC]")
def flushall(ctx, args):
    return _flush(ctx, args)


@command("time", 1, "loading stale fast", group="server", acl="fast", summary="Returns the server time.", since="2.6.0")
def time_(ctx, args):
    t = time.time_ns() // 1000
    return [b"%d" % (t // 1_000_000), b"%d" % (t % 1_000_000)]


@command("lastsave", 1, "loading stale fast", group="server", acl="admin fast dangerous",
         summary="Returns the Unix timestamp of the last successful save to disk.")
def lastsave(ctx, args):
    return ctx.node.last_save


@command("save", 1, "admin noscript no_async_loading no_multi", group="server",
         summary="Synchronously saves the database(s) to disk.")
def save(ctx, args):
    ctx.node.save()
    return reply.OK


@command("shutdown", -1, "admin noscript loading stale no_multi allow_busy", group="server",
         summary="Synchronously saves the database(s) to disk and shuts down the Redis server.",
         syntax="[NOSAVE | SAVE] [NOW] [FORCE] [ABORT]")
def shutdown(ctx, args):
    given: set[bytes] = set()
    p = Options(args, 1)
    while p.more():
        w = p.word()
        if w in (b"nosave", b"save", b"now", b"force", b"abort"):
            given.add(w)
            p.value()
        else:
            p.fail(errors.SYNTAX)
    if (b"abort" in given and len(given) > 1) or {b"nosave", b"save"} <= given:
        p.fail(errors.SYNTAX)  # an illegal combination
    p.check()
    if b"abort" in given:
        raise CommandError(errors.NO_SHUTDOWN)
    ctx.node.request_shutdown()
    ctx.close_after_reply()
    return reply.NO_REPLY  # Redis closes the connection without a reply


# -- INFO -----------------------------------------------------------------------------

def _section_server(s) -> list[tuple[str, object]]:
    up = int(time.monotonic() - s.started_mono)
    return [
        ("redis_version", s.config.redis_version), ("marekvs_version", __version__),
        ("redis_git_sha1", "00000000"), ("redis_git_dirty", 0), ("redis_mode", "standalone"),
        ("os", f"{platform.system()} {platform.release()} {platform.machine()}"),
        ("arch_bits", 64 if sys.maxsize > 2**32 else 32), ("multiplexing_api", "epoll"),
        ("python_version", platform.python_version()), ("process_id", s.pid),
        ("run_id", s.run_id), ("tcp_port", s.config.client_port), ("server_time_usec", time.time_ns() // 1000),
        ("uptime_in_seconds", up), ("uptime_in_days", up // 86400), ("hz", 10),
        ("executable", sys.argv[0]), ("config_file", s.config_file or ""),
    ]


def _section_clients(s):
    blocked = sum(1 for ctx in s.clients.values() if ctx.blocked and not ctx.trying)
    return [("connected_clients", len(s.clients)), ("blocked_clients", blocked),
            ("tracking_clients", s.tracking.clients), ("pubsub_clients", sum(c.in_pubsub for c in s.clients.values())),
            ("maxclients", s.maxclients)]


def _section_memory(s):
    """The process's resident memory (marekvs has no allocator of its own to ask: the
    record cache, RocksDB's memtables and block cache and Python's heap are all in it)."""
    rss = s.memory_rss()
    peak = max(s.memory_peak, rss)
    return [("used_memory", rss), ("used_memory_human", _human(rss)), ("used_memory_rss", rss),
            ("used_memory_rss_human", _human(rss)), ("used_memory_peak", peak),
            ("used_memory_peak_human", _human(peak)), ("used_memory_peak_perc", f"{100 * rss / peak:.2f}%"),
            ("maxmemory", 0), ("maxmemory_human", "0B"), ("maxmemory_policy", "noeviction"),
            ("cache_entries", len(s.engine.cache)), ("mem_allocator", "libc")]


def _human(n: int) -> str:
    """Redis's bytesToHuman."""
    for unit, size in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f}{unit}"
    return f"{n}B"


def _section_persistence(s):
    e = s.engine
    return [("loading", 0), ("rdb_changes_since_last_save", 0), ("rdb_bgsave_in_progress", 0),
            ("rdb_last_save_time", s.last_save), ("aof_enabled", 1), ("aof_rewrite_in_progress", 0),
            ("aof_last_write_status", "ok" if e.write_error is None else "err"), ("appendfsync", e.durability),
            ("storage_engine", "rocksdb"), ("storage_batches", e.batches),
            ("storage_records_written", e.records_written),
            ("storage_failed_commits", e.failed_commits), ("storage_write_error", e.write_error or ""),
            ("storage_sst_bytes", e.approximate_size()), ("replog_first_seq", e.log_first),
            ("replog_last_seq", e.log_seq)]


def _section_stats(s):
    st = s.stats
    return [("total_connections_received", st.total_connections), ("total_commands_processed", st.total_commands),
            ("rejected_connections", st.rejected_connections), ("expired_keys", 0),
            ("expired_records_removed", s.sweeper.removed), ("evicted_keys", 0),
            ("total_error_replies", st.error_replies), ("unexpected_error_replies", st.unexpected_errors),
            ("instantaneous_ops_per_sec", s.ops.rate()), ("keyspace_hits", s.ks.hits),
            ("keyspace_misses", s.ks.misses), ("pubsub_channels", len(s.pubsub.channels)),
            ("pubsub_patterns", s.pubsub.numpat()), ("pubsubshard_channels", len(s.pubsub.shard_channels)),
            *s.tracking.info(), ("client_query_buffer_limit_disconnections", st.query_buffer_closes)]


def _section_commandstats(s):
    """Every command run or refused since the last CONFIG RESETSTAT, as Redis prints it."""
    out = []
    for c in s.table.all_commands():
        if c.calls or c.rejected_calls or c.failed_calls:
            usec = c.nsec // 1000
            per = usec / c.calls if c.calls else 0.0
            out.append((f"cmdstat_{c.fullname}", f"calls={c.calls},usec={usec},usec_per_call={per:.2f},"
                                                 f"rejected_calls={c.rejected_calls},failed_calls={c.failed_calls}"))
    return out


def _section_errorstats(s):
    return [(f"errorstat_{code}", f"count={n}") for code, n in sorted(s.error_codes.items())]


def _section_replication(s):
    return [("role", "master"), ("connected_slaves", 0), ("replication_mode", "active-active"),
            ("master_replid", s.run_id),
            ("master_repl_offset", s.engine.log_seq)] + s.replication.info_fields()


def _section_cluster(s):
    return [("cluster_enabled", 0)]  # a standalone Redis with one database (commands/databases.py)


def _section_keyspace(s):
    """From the sweeper's per-partition counts (refreshed every sweep cycle), so INFO
    stays O(partitions); DBSIZE is the exact count."""
    n = sum(s.sweeper.live_keys)
    return [("db0", f"keys={n},expires={sum(s.sweeper.expiring)},avg_ttl=0")] if n else []


def _section_marekvs(s):
    return [("node_id", s.config.node_id), ("partitions", PARTITIONS), ("shards", s.config.shards),
            ("shard_ranges", ",".join(map(str, ShardMap.even(s.config.shards).ranges))), ("hlc", s.hlc.last),
            ("hlc_physical_ms", s.hlc.last >> 16), ("hlc_clamped", s.hlc.clamped),
            ("max_clock_drift_ms", s.hlc.max_drift_ms), ("gc_grace_seconds", s.config.gc_grace),
            ("sweeper_cycles", s.sweeper.cycles)]


# -- INFO antientropy: the background exchange and the digest verifier --------------------
# (marekvs/antientropy/background.py; the process attaches it as ``node.antientropy``)

def _section_antientropy(s):
    ae = s.antientropy
    return ae.info_fields() if ae is not None else []


SECTIONS = {
    "antientropy": _section_antientropy,
    "server": _section_server, "clients": _section_clients, "memory": _section_memory,
    "persistence": _section_persistence, "stats": _section_stats, "replication": _section_replication,
    "cpu": lambda s: [("used_cpu_sys", "%.6f" % resource.getrusage(resource.RUSAGE_SELF).ru_stime),
                      ("used_cpu_user", "%.6f" % resource.getrusage(resource.RUSAGE_SELF).ru_utime)],
    "cluster": _section_cluster, "keyspace": _section_keyspace, "marekvs": _section_marekvs,
    "modules": lambda s: [], "errorstats": _section_errorstats, "commandstats": _section_commandstats,
}
# Redis 7.0's sections in its order (genRedisInfoString), and marekvs's own at the end.
# latencystats is not kept by this node: asked for by name it prints nothing, like an
# unknown section.
SECTION_ORDER = ("server", "clients", "memory", "persistence", "stats", "replication", "cpu", "modules",
                 "commandstats", "errorstats", "latencystats", "cluster", "keyspace", "marekvs", "antientropy")
# what INFO, INFO default, INFO all and INFO everything print (Redis: default has every
# section but commandstats and latencystats; all and everything every one)
DEFAULT_SECTIONS = ("server", "clients", "memory", "persistence", "stats", "replication", "cpu",
                    "modules", "errorstats", "cluster", "keyspace", "marekvs", "antientropy")
ALL_SECTIONS = SECTION_ORDER
_TITLES = {"cpu": "CPU"}  # as Redis spells the header (the others: capitalised)


def info_sections(names: list[str]) -> list[str]:
    """The sections ``INFO names...`` prints, in Redis's order: every section named
    (any case), ``default`` (also with no names) the default ones, ``all`` and
    ``everything`` every one; unknown names add nothing."""
    wanted: set[str] = set()
    if not names:
        wanted.update(DEFAULT_SECTIONS)
    for n in names:
        n = n.lower()
        if n == "default":
            wanted.update(DEFAULT_SECTIONS)
        elif n in ("all", "everything"):
            wanted.update(ALL_SECTIONS)
        else:
            wanted.add(n)
    return [n for n in SECTION_ORDER if n in wanted and n in SECTIONS]


def info_text(node, names: list[str]) -> str:
    parts = []
    for n in info_sections(names):
        body = "".join(f"{k}:{v}\r\n" for k, v in SECTIONS[n](node))
        parts.append(f"# {_TITLES.get(n) or n.capitalize()}\r\n{body}")
    return "\r\n".join(parts)


@command("info", -1, "loading stale sentinel", group="server", acl="slow dangerous",
         summary="Returns information and statistics about the server.", syntax="[section [section ...]]")
def info(ctx, args):
    names = [a.decode("utf-8", "replace").lower() for a in args[1:]]
    return reply.Verbatim(info_text(ctx.node, names).encode())


# -- replication ------------------------------------------------------------------------

@command("wait", 3, "noscript", group="generic", since="3.0.0", complexity="O(1)", acl="connection slow",
         summary="Blocks until the asynchronous replication of all preceding write commands sent by the "
                 "connection is completed.", syntax="numreplicas timeout")
def wait(ctx, args):
    need = int_arg(args[1])
    timeout = int_arg(args[2], errors.TIMEOUT_NOT_INT)
    if timeout < 0:
        raise CommandError(errors.TIMEOUT_NEGATIVE)
    node = ctx.node
    seq = ctx.last_write_seq
    have = node.replication.acked_count(seq)
    if have >= need or seq == 0 or ctx.deny_blocking:
        return have

    async def waiting():
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout / 1000 if timeout else None
        while True:
            n = node.replication.acked_count(seq)
            if n >= need:
                return n
            left = None if deadline is None else deadline - loop.time()
            if left is not None and left <= 0:
                return n
            try:
                await asyncio.wait_for(node.ack_waiter().wait(), left)
            except asyncio.TimeoutError:
                return node.replication.acked_count(seq)

    return reply.Blocking(waiting())


@command("role", 1, "noscript loading stale fast", group="server", since="2.8.12", acl="admin fast dangerous",
         summary="Returns the replication role.")
def role(ctx, args):
    return [b"master", ctx.node.engine.log_seq, [
        [p.resp_addr.rsplit(":", 1)[0].encode() if p.resp_addr else b"",
         (p.resp_addr.rsplit(":", 1)[1] if p.resp_addr else "0").encode(), b"%d" % p.acked_seq]
        for p in ctx.node.replication.peers.values()]]
