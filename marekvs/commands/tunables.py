"""Redis tuning parameters that mean nothing to this engine, as CONFIG SET/GET sees them.

They are accepted, remembered and returned by CONFIG GET, so tools and harnesses that set
them keep working (docs/compatibility.md lists them), and they are validated the way
Redis 7.0's ``config.c`` validates them, with its error texts: a value Redis would refuse
is refused here too, and CONFIG GET returns the value as Redis prints it back (``1k`` ->
``1024``, ``YES`` -> ``yes``, ``KEA`` -> ``AKE``). Pure functions, no I/O.

``check(name, value, current)`` returns the canonical text or raises ``TunableError`` with the
message that follows Redis's ``CONFIG SET failed (possibly related to argument ...) - ``.
"""

from __future__ import annotations

import re
from typing import Callable

from marekvs.commands import errors

INT_MAX = (1 << 31) - 1
UINT_MAX = (1 << 32) - 1
LLONG_MAX = (1 << 63) - 1
ULLONG_MAX = (1 << 64) - 1


class TunableError(ValueError):
    pass


# -- value types --------------------------------------------------------------------------

def yes_no(value: str) -> str:
    v = value.lower()
    if v not in ("yes", "no"):
        raise TunableError(errors.CFG_BOOL)
    return v


_bool = yes_no


def one_of(*choices: str) -> Callable[[str], str]:
    def parse(value: str) -> str:
        v = value.lower()
        if v not in choices:
            raise TunableError(errors.cfg_one_of(choices))
        return v
    return parse


_LL = re.compile(r"(0|-?[1-9][0-9]*)\Z")  # string2ll: no '+', spaces, leading zeros or "-0"
_STRTOLL = re.compile(r"\s*[+-]?[0-9]+\Z")  # C strtoll, whole string: leading space and a sign


def int_between(lo: int, hi: int) -> Callable[[str], str]:
    def parse(value: str) -> str:
        v = int(value) if _LL.match(value) else None
        if v is None or not -(1 << 63) <= v <= LLONG_MAX:
            raise TunableError(errors.CFG_NOT_INTEGER)
        if not lo <= v <= hi:
            raise TunableError(errors.cfg_between(lo, hi))
        return str(v)
    return parse


_MEM = re.compile(r"([0-9]*)(b|k|kb|m|mb|g|gb)?\Z", re.IGNORECASE)
_UNIT = {"": 1, "b": 1, "k": 1000, "kb": 1024, "m": 1000**2, "mb": 1024**2, "g": 1000**3, "gb": 1024**3}


def memtoull(value: str) -> int | None:
    """Redis ``memtoull``: digits and an optional unit (``1k`` = 1000, ``1kb`` = 1024);
    no digits read as 0, too many saturate (``strtoull``), and the product wraps at
    2**64 as in C. None if malformed."""
    m = _MEM.match(value)
    if m is None or len(m.group(1)) >= 128:
        return None
    n = min(int(m.group(1) or 0), ULLONG_MAX)
    return (n * _UNIT[(m.group(2) or "").lower()]) & ULLONG_MAX


def _memory(hi: int, lo: int = 0) -> Callable[[str], str]:
    def parse(value: str) -> str:
        v = memtoull(value)
        if v is None:
            raise TunableError(errors.CFG_NOT_MEMORY)
        if not lo <= v <= hi:
            raise TunableError(errors.cfg_between(lo, hi))
        return str(v)
    return parse


class _Fixed:
    """A parameter CONFIG SET cannot change (Redis: IMMUTABLE_CONFIG / PROTECTED_CONFIG)."""

    def __init__(self, kind: str):
        self.kind = kind

    def __call__(self, value: str) -> str:
        raise TunableError(errors.cfg_immutable(self.kind))


def _save(value: str) -> str:
    """``save``: pairs of "seconds changes" separated by single spaces, or empty."""
    if value == "":
        return ""
    parts = value.split(" ")
    if len(parts) % 2:
        raise TunableError(errors.CFG_SAVE)
    out = []
    for i, p in enumerate(parts):
        v = int(p) if _STRTOLL.match(p) else None
        if v is None or (i % 2 == 0 and v < 1) or (i % 2 == 1 and v < 0):
            raise TunableError(errors.CFG_SAVE)
        out.append(str(v))
    return " ".join(out)


_CLIENT_CLASSES = {"normal": "normal", "slave": "slave", "replica": "slave", "pubsub": "pubsub"}


def _client_output_buffer_limit(value: str, current: str) -> str:
    """``class hard soft seconds`` groups; the classes not named keep their limits."""
    args = value.split()
    if len(args) % 4:
        raise TunableError(errors.CFG_BUFFER_LIMIT_ARGS)
    limits = {}
    cur = current.split()
    for i in range(0, len(cur), 4):
        limits[cur[i]] = cur[i + 1:i + 4]
    for i in range(0, len(args), 4):
        cls = _CLIENT_CLASSES.get(args[i].lower())
        if cls is None:
            raise TunableError(errors.CFG_BUFFER_LIMIT_CLASS)
        hard, soft = memtoull(args[i + 1]), memtoull(args[i + 2])
        secs = args[i + 3]
        if hard is None or soft is None or not _STRTOLL.match(secs) or int(secs) < 0:
            raise TunableError(errors.CFG_BUFFER_LIMIT_VALUES)
        limits[cls] = [str(hard), str(soft), str(int(secs))]
    return " ".join(" ".join([c] + limits.get(c, ["0", "0", "0"])) for c in ("normal", "slave", "pubsub"))


# notify-keyspace-events: class characters, and 'A' for the ten that print as one letter
_EVENT_CLASSES = "g$lshzxetd"  # generic string list set hash zset expired evicted stream module


def _notify_keyspace_events(value: str) -> str:
    flags = set()
    for ch in value:
        if ch == "A":
            flags.update(_EVENT_CLASSES)
        elif ch in "g$lshzxeKEtmdn":
            flags.add(ch)
        else:
            raise TunableError(errors.CFG_EVENT_CLASS)
    if flags.issuperset(_EVENT_CLASSES):
        out = "A"
    else:
        out = "".join(ch for ch in _EVENT_CLASSES + "n" if ch in flags)
    return out + "".join(ch for ch in "KEm" if ch in flags)


def _hz(value: str) -> str:
    """``hz``: any int in 0..INT_MAX is accepted, then clamped to 1..500 (``updateHZ``)."""
    return str(min(max(int(int_between(0, INT_MAX)(value)), 1), 500))


# -- the table -------------------------------------------------------------------------------

_MEM_LL = _memory(LLONG_MAX)
_COUNT = int_between(0, LLONG_MAX)

# name -> (default as CONFIG GET prints it, parser)
PARAMS: dict[str, tuple[str, Callable[[str], str]]] = {
    "save": ("", _save),
    "appendonly": ("yes", _bool),
    "appendfilename": ("appendonly.aof", _Fixed("immutable")),
    "dbfilename": ("dump.rdb", _Fixed("protected")),
    "databases": ("1", _Fixed("immutable")),
    "maxmemory": ("0", _memory(ULLONG_MAX)),
    "maxmemory-policy": ("noeviction", one_of("volatile-lru", "volatile-lfu", "volatile-random", "volatile-ttl",
                                             "allkeys-lru", "allkeys-lfu", "allkeys-random", "noeviction")),
    "maxmemory-samples": ("5", int_between(1, INT_MAX)),
    "hash-max-listpack-entries": ("512", _COUNT),
    "hash-max-listpack-value": ("64", _MEM_LL),
    "list-max-listpack-size": ("-2", int_between(-(1 << 31), INT_MAX)),
    "list-compress-depth": ("0", int_between(0, INT_MAX)),
    "set-max-intset-entries": ("512", _COUNT),
    "set-max-listpack-entries": ("128", _COUNT),  # Redis 7.2's; accepted for newer clients
    "zset-max-listpack-entries": ("128", _COUNT),
    "zset-max-listpack-value": ("64", _MEM_LL),
    "stream-node-max-bytes": ("4096", _MEM_LL),
    "stream-node-max-entries": ("100", _COUNT),
    "hll-sparse-max-bytes": ("3000", _MEM_LL),
    "activerehashing": ("yes", _bool),
    "activedefrag": ("no", _bool),
    "lazyfree-lazy-eviction": ("no", _bool),
    "lazyfree-lazy-expire": ("no", _bool),
    "lazyfree-lazy-server-del": ("no", _bool),
    "lazyfree-lazy-user-del": ("no", _bool),
    "lazyfree-lazy-user-flush": ("no", _bool),
    "hz": ("10", _hz),
    "dynamic-hz": ("yes", _bool),
    "latency-tracking": ("yes", _bool),
    "notify-keyspace-events": ("", _notify_keyspace_events),
    "slowlog-log-slower-than": ("10000", int_between(-1, LLONG_MAX)),
    "slowlog-max-len": ("128", _COUNT),
    "latency-monitor-threshold": ("0", _COUNT),
    "busy-reply-threshold": ("5000", _COUNT),
    "tcp-keepalive": ("300", int_between(0, INT_MAX)),
    # request limits: the RESP parser reads them (server.limits), see server/resp.py
    "proto-max-bulk-len": ("536870912", _memory(LLONG_MAX, 1024 * 1024)),
    "client-query-buffer-limit": ("1073741824", _memory(LLONG_MAX, 1024 * 1024)),
    "client-output-buffer-limit": ("normal 0 0 0 slave 268435456 67108864 60 pubsub 33554432 8388608 60",
                                   _client_output_buffer_limit),  # type: ignore[dict-item]
    "no-appendfsync-on-rewrite": ("no", _bool),
    "auto-aof-rewrite-percentage": ("100", int_between(0, INT_MAX)),
    "auto-aof-rewrite-min-size": ("67108864", _MEM_LL),
    "rdbcompression": ("yes", _bool),
    "rdbchecksum": ("yes", _Fixed("immutable")),
    "stop-writes-on-bgsave-error": ("yes", _bool),
    "protected-mode": ("yes", _bool),
    "loglevel": ("notice", one_of("debug", "verbose", "notice", "warning")),
    "timeout": ("0", int_between(0, INT_MAX)),
    "tcp-backlog": ("511", _Fixed("immutable")),
    "repl-diskless-sync": ("yes", _bool),
    "enable-debug-command": ("no", _Fixed("immutable")),
    # ACL (node/acl.py reads them; CONFIG GET shows the configured aclfile)
    "acllog-max-len": ("128", _COUNT),
    "acl-pubsub-default": ("resetchannels", one_of("allchannels", "resetchannels")),
    "aclfile": ("", _Fixed("immutable")),
}

# Redis 7.0's old names: one parameter under two names (values are kept under the new
# name only; CONFIG GET shows them under both)
ALIASES = {
    "hash-max-ziplist-entries": "hash-max-listpack-entries",
    "hash-max-ziplist-value": "hash-max-listpack-value",
    "list-max-ziplist-size": "list-max-listpack-size",
    "zset-max-ziplist-entries": "zset-max-listpack-entries",
    "zset-max-ziplist-value": "zset-max-listpack-value",
    "lua-time-limit": "busy-reply-threshold",
}


def canonical_name(name: str) -> str | None:
    """The parameter ``name`` (lower case) stands for, or None if it is not a tunable."""
    name = ALIASES.get(name, name)
    return name if name in PARAMS else None


def value(changed: dict[str, str], name: str) -> str:
    """The tunable ``name`` (canonical): its value in ``changed``, else its default."""
    return changed.get(name, PARAMS[name][0])


def values(changed: dict[str, str]) -> dict[str, str]:
    """Every tunable under every name: its value in ``changed`` (by canonical name),
    else its default."""
    out = {name: changed.get(name, d) for name, (d, _) in PARAMS.items()}
    out.update({alias: out[name] for alias, name in ALIASES.items()})
    return out


def check_settable(name: str) -> None:
    """``TunableError`` if CONFIG SET may not change the tunable ``name`` at all."""
    parse = PARAMS[name][1]
    if isinstance(parse, _Fixed):
        parse("")


def check(name: str, value: str, current: str) -> str:
    """The canonical form of ``value`` for the tunable ``name`` (canonical name), whose
    value is now ``current``; ``TunableError`` if Redis would refuse it."""
    parse = PARAMS[name][1]
    if parse is _client_output_buffer_limit:
        return _client_output_buffer_limit(value, current)
    return parse(value)
