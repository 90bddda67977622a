"""Node-wide commands on a node of several shard workers (docs/shards.md §4; issue 33,
slice 3): every worker runs the command on its own partitions and state, and the worker
holding the connection merges the replies into the one a single process gives.

``MERGES`` names each command carried this way and how its replies combine:

- summed: DBSIZE, PUBLISH/SPUBLISH (receivers on the node), SLOWLOG LEN,
  PUBSUB NUMPAT, CLIENT KILL with filters (clients killed);
- concatenated: KEYS (each key lives on one worker), CLIENT LIST (each client is on one
  worker), PUBSUB CHANNELS/SHARDCHANNELS (set union);
- the same change everywhere (CONFIG SET, CONFIG RESETSTAT, FLUSHALL/FLUSHDB, SCRIPT
  LOAD/FLUSH, CLIENT PAUSE/UNPAUSE, SLOWLOG RESET, SAVE, MEMORY PURGE): the first error
  if a worker refused, else the connection's worker's reply. FLUSHALL is not atomic
  across workers (a write on one worker may land after its flush and before another's);
- one of them: RANDOMKEY (a random worker's key among those that have one), CLIENT
  KILL ip:port and SCRIPT KILL / FUNCTION KILL (OK where it was found, else the error),
  CLIENT UNBLOCK (1 where the client was);
- by key: PUBSUB NUMSUB/SHARDNUMSUB (counts summed per channel), DEBUG DIGEST (the XOR
  of every key's digest: the same digest as one process holding the same data), DEBUG
  DIGEST-VALUE (each key's digest from the worker where it lives);
- SLOWLOG GET: the newest entries of every worker (by id: the workers take entry ids from
  one node-wide sequence, ``shards/clients.py``), ``count`` of them;
  ACL LOG likewise (each worker logs the denials of its own connections), by age; ACL LOG
  RESET empties every worker's;
- FUNCTION STATS: the connection's worker's counts (every worker loads every library:
  ``server/noderecords.py``), the running function of whichever worker runs one;
- LASTSAVE: the oldest worker's (every write before it is saved on every worker);
- MEMORY STATS and MEMORY DOCTOR: each worker answers its figures (``VIA``: the part
  command ``~memory``, ``commands/memory.figures``), summed (its resident and peak sizes,
  RocksDB's bytes and memtables, the replication log's bytes and backlog, keys, query
  buffers, the record caches' entries and capacity: every worker has a cache of
  ``cache_entries``), and the reply is made from the sums by the code a single process
  runs (``stats_reply``, ``doctor_report``): the ratios and per-key figures are the
  node's, the peak is the sum of the workers' peaks (each at its own moment: at least
  the node's peak). The supervisor, which holds no data, is not counted. MEMORY
  MALLOC-STATS: the same answer everywhere;
- LATENCY LATEST: per event, the newest sample of any worker (the highest of samples of
  the same second) and the highest maximum; LATENCY HISTORY: the samples of every worker
  by second (the highest of the same second), the last 160 as one process keeps; LATENCY
  RESET: the events reset on any worker, counted once (``VIA``: ``~latreset`` answers
  their names);
- SCAN (not a merge: ``Mesh``): its cursor names a partition, and the worker owning it
  scans on (``~scan``); where that worker's range ends before the call collected its
  COUNT of keys (or read its bound of records), the next worker goes on with what is
  left, so one call answers what one process's would;
- INFO: the connection's worker's text, with the counters of the node summed over the
  workers (``merge_info``: clients, memory, stats, the keyspace line, command and error
  stats, the storage counters and the log's positions of persistence; the Marekvs section
  already names the workers' ranges), and the Replication and Antientropy sections merged
  over the workers (``_replication``, ``_antientropy``).

Replies cross the mesh as msgpack values (``pack``/``unpack``): the reply types of
``commands/reply.py`` are msgpack extension types, so a merge sees what the handler
returned, and the front encodes the merged value in the client's protocol.
"""

from __future__ import annotations

import functools
import random
from typing import Any, Callable, Generator

import msgpack  # type: ignore[import-untyped]

from marekvs.commands import keys, memory, reply
from marekvs.commands.monitoring import LATENCY_SAMPLES
from marekvs.commands.reply import Err
from marekvs.commands.table import Command

# -- replies across the mesh ----------------------------------------------------------------

_TYPES: tuple[type, ...] = (reply.Simple, Err, reply.Map, reply.SetReply, reply.Double, reply.BulkArray,
                            reply.DoubleText, reply.Verbatim, reply.BigNumber, reply.NullArray, tuple)
_CODE = {t: i for i, t in enumerate(_TYPES)}


def _default(v: Any) -> msgpack.ExtType:
    code = _CODE.get(type(v))
    if code is None:
        raise TypeError(f"a reply of type {type(v).__name__} cannot cross the mesh")
    t = _TYPES[code]
    if t is reply.NullArray:
        return msgpack.ExtType(code, b"")
    if t is tuple:
        return msgpack.ExtType(code, pack(list(v)))
    base: Any = bytes if issubclass(t, bytes) else str if t is Err else float if t is reply.Double else list
    return msgpack.ExtType(code, pack(base(v)))


def _ext(code: int, data: bytes) -> Any:
    t = _TYPES[code]
    if t is reply.NullArray:
        return reply.NULL_ARRAY
    v = unpack(data)
    if t is tuple:
        return v
    if t is reply.Simple and v == b"OK":
        return reply.OK
    return t(v)


def pack(value: Any) -> bytes:
    """A reply value as bytes (``unpack`` gives it back, its reply types kept)."""
    data: bytes = msgpack.packb(value, use_bin_type=True, strict_types=True, default=_default)
    return data


def unpack(data: bytes) -> Any:
    return msgpack.unpackb(data, raw=False, ext_hook=_ext, strict_map_key=False)


# -- merges (``replies[0]`` is the connection's worker's) -------------------------------------

Merge = Callable[[list[Any], list[bytes]], Any]


def _error(replies: list[Any]) -> Any:
    for r in replies:
        if type(r) is Err:
            return r
    return None


def _same(replies: list[Any], args: list[bytes]) -> Any:
    e = _error(replies)
    return replies[0] if e is None else e


def _sum(replies: list[Any], args: list[bytes]) -> Any:
    e = _error(replies)
    return sum(replies) if e is None else e


def _concat(replies: list[Any], args: list[bytes]) -> Any:
    e = _error(replies)
    if e is not None:
        return e
    if isinstance(replies[0], bytes):  # CLIENT LIST: lines
        return type(replies[0])(b"".join(replies))
    out = type(replies[0])()
    for r in replies:
        out.extend(r)
    return out


def _union(replies: list[Any], args: list[bytes]) -> Any:
    e = _error(replies)
    if e is not None:
        return e
    seen: dict[Any, None] = {}
    for r in replies:
        seen.update(dict.fromkeys(r))
    return type(replies[0])(seen)


def _any_ok(replies: list[Any], args: list[bytes]) -> Any:
    """OK (or 1) where one worker did it, else the connection's worker's reply."""
    for r in replies:
        if type(r) is not Err and r != 0:
            return r
    return replies[0]


def _client_kill(replies: list[Any], args: list[bytes]) -> Any:
    if len(args) == 3:  # the old form, CLIENT KILL ip:port: OK where it was
        return _any_ok(replies, args)
    return _sum(replies, args)


def _random(replies: list[Any], args: list[bytes]) -> Any:
    found = [r for r in replies if r is not None]
    return random.choice(found) if found else None


def _numsub(replies: list[Any], args: list[bytes]) -> Any:
    e = _error(replies)
    if e is not None:
        return e
    out = list(replies[0])
    for r in replies[1:]:
        for i in range(1, len(out), 2):
            out[i] += r[i]
    return type(replies[0])(out)


def _digest(replies: list[Any], args: list[bytes]) -> Any:
    e = _error(replies)
    if e is not None:
        return e
    acc = 0
    for r in replies:
        acc ^= int(r, 16)
    return reply.Simple(b"%040x" % acc)


def _digest_value(replies: list[Any], args: list[bytes]) -> Any:
    e = _error(replies)
    if e is not None:
        return e
    zero = b"0" * 40
    return [next((r[i] for r in replies if r[i] != zero), replies[0][i]) for i in range(len(replies[0]))]


def _slowlog_get(replies: list[Any], args: list[bytes]) -> Any:
    e = _error(replies)
    if e is not None:
        return e
    entries = [x for r in replies for x in r]
    entries.sort(key=lambda x: x[0], reverse=True)  # [id, time, usec, argv, addr, name]: ids node-wide
    count = 10
    if len(args) > 2:
        count = int(args[2])
    return entries if count < 0 else entries[:count]


def _lastsave(replies: list[Any], args: list[bytes]) -> Any:
    e = _error(replies)
    return min(replies) if e is None else e


def _acl_log(replies: list[Any], args: list[bytes]) -> Any:
    """ACL LOG: every worker's entries (each logs the denials of its connections), newest
    first (by ``age-seconds``), ``count`` of them; ACL LOG RESET: the same change."""
    e = _error(replies)
    if e is not None or len(args) > 2 and args[2].lower() == b"reset":
        return _same(replies, args)
    entries = [x for r in replies for x in r]
    entries.sort(key=lambda m: m[m.index(b"age-seconds") + 1])
    count = max(int(args[2]), 0) if len(args) > 2 else 10
    return entries[:count]


def _function_stats(replies: list[Any], args: list[bytes]) -> Any:
    """FUNCTION STATS: the libraries are loaded on every worker (the connection's worker's
    counts); the running function is the one running on any worker."""
    e = _error(replies)
    if e is not None:
        return e
    out = type(replies[0])(replies[0])
    out[1] = next((r[1] for r in replies if r[1] is not None), None)
    return out


# -- INFO --------------------------------------------------------------------------------------

# the sections whose numeric fields are the node's sums over its workers; the others are
# the connection's worker's (its process id, uptime, clock, configuration, ...)
_SUMMED_SECTIONS = frozenset((b"clients", b"memory", b"stats", b"keyspace", b"commandstats", b"errorstats",
                              b"cpu"))
# fields of those sections that are not sums
_NOT_SUMMED = frozenset((b"maxclients", b"maxmemory", b"maxmemory_policy", b"mem_allocator",
                         b"used_memory_peak_perc", b"maxmemory_human"))


def _fields(value: bytes) -> list[tuple[bytes, bytes]]:
    """``a=1,b=2`` as pairs (a keyspace or command stats line), or [] for a plain value."""
    if b"=" not in value:
        return []
    pairs = []
    for part in value.split(b","):
        k, _, v = part.partition(b"=")
        pairs.append((k, v))
    return pairs


def _num(v: bytes) -> int | float | None:
    try:
        return int(v)
    except ValueError:
        try:
            return float(v)
        except ValueError:
            return None


def _fmt(x: int | float) -> bytes:
    return b"%d" % x if isinstance(x, int) else b"%.6f" % x


def _human(n: int) -> bytes:
    for unit, size in ((b"G", 1 << 30), (b"M", 1 << 20), (b"K", 1 << 10)):
        if n >= size:
            return b"%.2f%s" % (n / size, unit)
    return b"%dB" % n


Section = tuple[bytes, bytes, list[tuple[bytes, bytes]]]  # title line, name, fields


def _parse(text: bytes) -> list[Section]:
    """INFO's text (``commands/admin.info_text``) as its sections."""
    sections: list[Section] = []
    for line in text.split(b"\r\n"):
        if line.startswith(b"# "):
            sections.append((line, line[2:].strip().lower(), []))
        elif line and sections:
            k, _, v = line.partition(b":")
            sections[-1][2].append((k, v))
    return sections


def _add(a: bytes, b: bytes) -> bytes:
    x, y = _num(a), _num(b)
    if x is None or y is None:
        return a
    return _fmt(x + y)


def _join(pairs: dict[bytes, bytes]) -> bytes:
    return b",".join(k + b"=" + v for k, v in pairs.items())


Fields = list[tuple[bytes, bytes]]


def _summed(name: bytes, mine: Fields, others: list[Fields]) -> dict[bytes, bytes]:
    """One section's fields, the numbers summed over the workers (``a=1,b=2`` lines field by
    field), then what is derived from sums recomputed."""
    merged = dict(mine)
    for fields in others:
        for k, v in fields:
            if k in _NOT_SUMMED:
                continue
            if k not in merged:
                merged[k] = v
            elif _fields(v):
                have = dict(_fields(merged[k]))
                for fk, fv in _fields(v):
                    if name == b"keyspace" and fk == b"avg_ttl":  # an estimate: the greatest
                        have[fk] = max(have.get(fk, b"0"), fv, key=lambda t: _num(t) or 0)
                    else:
                        have[fk] = _add(have[fk], fv) if fk in have else fv
                merged[k] = _join(have)
            else:
                merged[k] = _add(merged[k], v)
    for k, v in merged.items():
        if k.endswith(b"_human") and isinstance(_num(merged.get(k[:-6], b"")), int):
            merged[k] = _human(int(merged[k[:-6]]))
        elif name == b"commandstats":  # the mean of the sums
            f = dict(_fields(v))
            calls, usec = _num(f.get(b"calls", b"")), _num(f.get(b"usec", b""))
            if calls and usec is not None and b"usec_per_call" in f:
                f[b"usec_per_call"] = b"%.2f" % (usec / calls)
                merged[k] = _join(f)
    return merged


# INFO replication of a node of shard workers (replication/manager.py ``info_fields``): each
# worker ships its own log (docs/shards.md §5), and names it in a ``shard<j>`` line
# (partitions, incarnation, log epoch and bounds). The merge: those lines, every worker's;
# these fields summed over the workers' logs; ``bootstrapping`` the highest; the peers
# merged by id (``_merge_peer``; ``connected_peers`` and ``known_peers`` counted from them);
# ``last_incarnation_change`` the first worker's that has one; the rest (role, ids, worker
# 0's incarnation and epoch) worker 0's; ``log_first_seq`` as if the logs were one, each
# after the other (``concatenated``: ``log_last_seq - log_first_seq + 1`` is still the
# entries the logs hold, and an empty log stays ``first == last + 1``), as the metrics port
# does. The workers are taken in their order, so any worker answers the same.
_REPLICATION_SUMMED = frozenset((b"master_repl_offset", b"log_last_seq", b"refused_batches",
                                 b"pubsub_relayed", b"pubsub_received", b"pubsub_dropped",
                                 b"incarnation_changes"))
_PEER_SAME = frozenset((b"id", b"addr", b"resp", b"workers"))
_PEER_MAX = frozenset((b"lag_ms", b"needs_resync"))


def concatenated(first: float, other: float) -> float:
    """The first position of two logs taken as one, the second after the first (positions
    from 1: ``last - first + 1`` entries held stays true of the sums)."""
    return first + other - 1


def _numbered(k: bytes, prefix: bytes) -> bool:
    return k.startswith(prefix) and k[len(prefix):].isdigit()


def _worker_of(fields: Fields) -> int:
    return next((int(k[5:]) for k, _ in fields if _numbered(k, b"shard")), 1 << 30)


def _merge_peer(lines: list[dict[bytes, bytes]]) -> dict[bytes, bytes]:
    """One peer's line from each worker's (its links from that worker's log): positions
    and counters summed, the state ``streaming`` only where every worker streams to it
    (else the first worker's that does not), the lag and ``needs_resync`` the highest,
    ``last_ack_ms`` the oldest (-1 where a worker never had an ack)."""
    out = dict(lines[0])
    for k, v in lines[0].items():
        vals = [d.get(k, v) for d in lines]
        if k in _PEER_SAME:
            continue
        if k == b"state":
            out[k] = next((x for x in vals if x != b"streaming"), b"streaming")
        elif k == b"last_ack_ms":
            nums = [_num(x) or 0 for x in vals]
            out[k] = b"-1" if -1 in nums else _fmt(max(nums))
        elif k in _PEER_MAX:
            out[k] = _fmt(max(_num(x) or 0 for x in vals))
        elif all(_num(x) is not None for x in vals):
            out[k] = _fmt(sum(_num(x) or 0 for x in vals))
    return out


def _replication(sections: list[Fields]) -> Fields:
    """INFO replication of the node from each worker's section (see above); a node of one
    process has no ``shard<j>`` line: its section as it is."""
    if len(sections) < 2 or any(_worker_of(fs) == 1 << 30 for fs in sections):
        return sections[0]
    sections = sorted(sections, key=_worker_of)
    dicts = [dict(fs) for fs in sections]
    shards = sorted(((k, v) for fs in sections for k, v in fs if _numbered(k, b"shard")),
                    key=lambda kv: int(kv[0][5:]))
    peers: dict[int, list[dict[bytes, bytes]]] = {}
    for fs in sections:
        for k, v in fs:
            if _numbered(k, b"peer"):
                d = dict(_fields(v))
                peers.setdefault(int(d.get(b"id", b"0")), []).append(d)
    merged = [_merge_peer(ls) for _, ls in sorted(peers.items())]
    out: Fields = []
    for k, v in sections[0]:
        if _numbered(k, b"shard") or _numbered(k, b"peer"):
            continue
        if k in _REPLICATION_SUMMED:
            v = _fmt(sum(_num(d.get(k, b"0")) or 0 for d in dicts))
        elif k == b"log_first_seq":
            v = _fmt(functools.reduce(concatenated, (_num(d.get(k, b"1")) or 0 for d in dicts)))
        elif k == b"bootstrapping":
            v = _fmt(max(_num(d.get(k, b"0")) or 0 for d in dicts))
        elif k == b"connected_peers":
            v = b"%d" % sum(p[b"state"] == b"streaming" for p in merged)
        elif k == b"known_peers":
            v = b"%d" % len(merged)
        elif k == b"last_incarnation_change":
            v = next((d[k] for d in dicts if d.get(k)), v)
        out.append((k, v))
    out += shards
    out += [(b"peer%d" % i, _join(p)) for i, p in enumerate(merged)]
    return out


# INFO antientropy of a node of shard workers (antientropy/background.py ``info_fields``):
# each worker runs its own exchanges over its partitions and serves calls; the node's
# counts are their sums, the last exchange the most recent worker's, the verifier's whole
# passes the fewest any worker made, the rest the same on every worker.
_AE_LAST = (b"last_exchange_peer", b"last_exchange_age_ms", b"last_exchange_ms",
            b"last_exchange_mismatched_partitions", b"last_exchange_error")
_AE_SAME = frozenset((b"antientropy_interval_s",))


def _antientropy(sections: list[Fields]) -> Fields:
    dicts = [dict(fs) for fs in sections]

    def recency(d: dict[bytes, bytes]) -> tuple[bool, int, bytes]:
        age = int(_num(d.get(b"last_exchange_age_ms", b"-1")) or 0)
        return age < 0, age, d.get(b"last_exchange_error", b"")

    last = min(dicts, key=recency)  # (never exchanged: age -1, last)
    out: Fields = []
    for k, v in sections[0]:
        if k in _AE_LAST:
            v = last.get(k, v)
        elif k == b"digest_verify_cycles":
            v = _fmt(min(_num(d.get(k, b"0")) or 0 for d in dicts))
        elif k == b"digest_rebuilt_at_open":
            v = _fmt(max(_num(d.get(k, b"0")) or 0 for d in dicts))
        elif k not in _AE_SAME and all(_num(d.get(k, b"0")) is not None for d in dicts):
            v = _fmt(sum(_num(d.get(k, b"0")) or 0 for d in dicts))
        out.append((k, v))
    return out


def _persistence(mine: Fields, others: list[Fields]) -> dict[bytes, bytes]:
    """The persistence section of the node: the storage counters and sizes summed, the
    oldest save time, a write error of any worker; the log's positions as those of one
    log holding every worker's entries (``replog_last_seq`` grows by one for a write on
    any worker, as on one process; ``replog_first_seq`` such that last - first + 1 is
    the entries the workers keep: ``concatenated``)."""
    merged = dict(mine)
    for fields in others:
        for k, v in fields:
            have = merged.get(k)
            if have is None:
                merged[k] = v
            elif k == b"rdb_last_save_time":
                merged[k] = min(have, v, key=lambda t: _num(t) or 0)
            elif k in (b"aof_last_write_status", b"storage_write_error"):
                if v and v != b"ok" and (not have or have == b"ok"):
                    merged[k] = v
            elif k == b"replog_first_seq":
                merged[k] = _fmt(concatenated(_num(have) or 0, _num(v) or 0))
            elif k.startswith((b"storage_", b"replog_")):
                merged[k] = _add(have, v)
    return merged


def merge_info(texts: list[bytes]) -> bytes:
    """INFO's text for the node from each worker's (the first is the connection's), in
    ``info_text``'s layout."""
    parsed = [_parse(t) for t in texts]
    parts = []
    for title, name, fields in parsed[0]:
        others = [fs for p in parsed[1:] for _, n, fs in p if n == name]
        if name in _SUMMED_SECTIONS:
            pairs = list(_summed(name, fields, others).items())
        elif name == b"replication":
            pairs = _replication([fields] + others)
        elif name == b"antientropy":
            pairs = _antientropy([fields] + others)
        elif name == b"persistence":
            pairs = list(_persistence(fields, others).items())
        else:
            pairs = list(fields)
        parts.append(title + b"\r\n" + b"".join(k + b":" + v + b"\r\n" for k, v in pairs))
    return b"\r\n".join(parts)


def _info(replies: list[Any], args: list[bytes]) -> Any:
    e = _error(replies)
    if e is not None:
        return e
    return type(replies[0])(merge_info([bytes(r) for r in replies]))


# -- MEMORY, LATENCY -------------------------------------------------------------------------

def _summed_figures(replies: list[Any]) -> Any:
    e = _error(replies)
    if e is not None:
        return e
    out: dict[str, int] = {}
    for r in replies:
        for k, v in r.items():
            out[k] = out.get(k, 0) + v
    return out


def _memory_stats(replies: list[Any], args: list[bytes]) -> Any:
    f = _summed_figures(replies)
    return f if type(f) is Err else memory.stats_reply(f)


def _memory_doctor(replies: list[Any], args: list[bytes]) -> Any:
    f = _summed_figures(replies)
    return f if type(f) is Err else reply.Verbatim(memory.doctor_report(f).encode())


def _latency_latest(replies: list[Any], args: list[bytes]) -> Any:
    e = _error(replies)
    if e is not None:
        return e
    events: dict[bytes, list[Any]] = {}  # event -> [event, time, latest ms, max ms]
    for r in replies:
        for name, t, ms, top in r:
            have = events.get(name)
            if have is None:
                events[name] = [name, t, ms, top]
                continue
            if t > have[1] or t == have[1] and ms > have[2]:
                have[1], have[2] = t, ms
            have[3] = max(have[3], top)
    return list(events.values())


def _latency_history(replies: list[Any], args: list[bytes]) -> Any:
    e = _error(replies)
    if e is not None:
        return e
    by_second: dict[int, int] = {}
    for r in replies:
        for t, ms in r:
            by_second[t] = max(by_second.get(t, 0), ms)
    return [[t, by_second[t]] for t in sorted(by_second)[-LATENCY_SAMPLES:]]


def _latency_reset(replies: list[Any], args: list[bytes]) -> Any:
    e = _error(replies)
    if e is not None:
        return e
    return len(set().union(*replies))


def _part(name: str, handler: Callable[[Any, list[bytes]], Any]) -> Command:
    # ("admin": never shown to MONITOR, the client's command is, once: ``Mesh`` feeds it)
    return Command(name=name, handler=handler, arity=-2, flags=("readonly", "admin"), first_key=0, last_key=0,
                   step=0)


def _scan_part(ctx: Any, args: list[bytes]) -> Any:
    """``~scan cursor want budget SCAN ...``: a worker's step of SCAN (``keys.scan_step``)
    from ``cursor`` with ``want`` keys left to collect and ``budget`` records left to
    read: [next cursor, the keys passing MATCH and TYPE, want left, budget left]."""
    r = keys.scan_step(ctx, args[4:], int(args[1]), (int(args[2]), int(args[3])) if args[2] else None)
    return list(r)


def scan_walk(ranges: Any, j: int, cursor: int, args: list[bytes]) -> Generator[tuple[int, list[bytes]], Any, Any]:
    """SCAN ``args`` over the workers from ``j`` (whose ``ranges``), at ``cursor``: yields
    each step's worker and ``~scan`` arguments and is sent its reply; returns the reply.
    It goes on at the next worker, as one process's call goes on over the next
    partitions, while worker ``j``'s range ended before the call collected its COUNT of
    keys or read its bound of records."""
    step: Any = None
    found: list[bytes] = []
    while True:
        left = [b"", b""] if step is None else [b"%d" % step[2], b"%d" % step[3]]
        step = yield j, [b"~scan", b"%d" % cursor, *left, *args]
        if type(step) is Err:
            return step
        found += step[1]
        nxt, _, want, budget = step
        if not (want > 0 and budget > 0 and j + 1 < len(ranges) and nxt == ranges[j + 1].first):
            return [b"%d" % nxt, found]
        j += 1
        cursor = nxt


def replication_view(node: Any, last_write: int, marks: bool = True) -> list[Any]:
    """A worker's replication figures, for the Kafka gateway of worker 0
    (``gateway/kafka/replicas.py``): [``last_write`` (the asking client's last write
    here), this worker's log end, per peer [node id, streaming, acked seq of this log,
    last ack (``time.monotonic()``: one clock for the processes of a node), the peer's
    log ends at the Hellos this worker received ([[incarnation, log end], ...], the
    peer's current workers'), and, with ``marks``, this worker's high-water marks of
    the peer's logs ([[incarnation, mark], ...]; else None)]]."""
    repl = node.replication
    if repl is None:
        return [last_write, node.engine.log_seq, []]
    peers = []
    for p in repl.peers.values():
        incs = p.incarnations or frozenset((p.incarnation,))
        hellos = [[i, n] for i, n in p.hellos.items() if i in incs]
        peers.append([p.node_id, p.state == "streaming", p.acked_seq, p.last_ack, hellos,
                      [[i, repl.hwm(p.node_id, i)] for i in incs.union(i for i, _ in hellos)] if marks else None])
    return [last_write, node.engine.log_seq, peers]


# the part command a node-wide command runs on every worker instead of itself, where the
# merge needs more than its replies (what each worker answers: its figures, the names of
# the events it reset); the client's command is counted once, on the connection's worker
FAN_PARTS: dict[str, Command] = {
    "~memory": _part("~memory", lambda ctx, args: memory.figures(ctx.node)),
    "~scan": _part("~scan", _scan_part),
    "~latreset": _part("~latreset", lambda ctx, args: ctx.node.latency.reset_events(
        [a.decode("utf-8", "surrogateescape") for a in args[2:]])),
    # (carried by the Kafka gateway: after a produced batch's XADDs, and polled)
    "~replicas": _part("~replicas", lambda ctx, args: replication_view(ctx.node, ctx.last_write_seq)),
}
VIA: dict[str, Command] = {"memory|stats": FAN_PARTS["~memory"], "memory|doctor": FAN_PARTS["~memory"],
                           "latency|reset": FAN_PARTS["~latreset"]}

MERGES: dict[str, Merge] = {
    "dbsize": _sum, "publish": _sum, "spublish": _sum, "slowlog|len": _sum, "latency|reset": _latency_reset,
    "memory|stats": _memory_stats, "memory|doctor": _memory_doctor, "memory|malloc-stats": _same,
    "latency|latest": _latency_latest, "latency|history": _latency_history,
    "pubsub|numpat": _sum, "client|kill": _client_kill,
    "keys": _concat, "client|list": _concat,
    "pubsub|channels": _union, "pubsub|shardchannels": _union,
    "config|set": _same, "config|resetstat": _same, "flushall": _same, "flushdb": _same,
    "script|load": _same, "script|flush": _same, "client|pause": _same, "client|unpause": _same,
    "slowlog|reset": _same, "save": _same, "memory|purge": _same,
    "randomkey": _random, "script|kill": _any_ok, "function|kill": _any_ok, "client|unblock": _any_ok,
    "pubsub|numsub": _numsub, "pubsub|shardnumsub": _numsub,
    "debug|digest": _digest, "debug|digest-value": _digest_value,
    "slowlog|get": _slowlog_get, "lastsave": _lastsave, "info": _info,
    "acl|log": _acl_log, "function|stats": _function_stats,
}
