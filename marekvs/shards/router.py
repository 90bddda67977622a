"""The router: which shard runs a command, from its class and its keys (docs/shards.md §1-§2).

Every command and subcommand of the table has one **class**, where it runs:

- ``key``: one key at a fixed position (``GET k``, ``SET k v``, ``HSET k f v`` ...): on the
  shard owning the key's partition. The key is read at its position, ``args[pos]``, with
  no key spec walked: ``Command.keys_of`` costs 2.2-3.7 µs a call, more than a whole GET
  (bench/bench_hop.py); this costs one index.
- ``keys``: several keys, or keys at positions the arguments decide (MSET, DEL, RENAME,
  ZUNIONSTORE, EVALSHA, XREAD, SORT ...): on the shard of their partitions when they share
  one, else as a cross-worker unit (§3). EXEC is one too: its keys are those of its queued
  commands and of WATCH (its own arguments name none).
- ``front``: no key, and nothing another shard has that this one lacks (PING, HELLO, AUTH,
  CLIENT SETNAME, SUBSCRIBE, MULTI, COMMAND ...): on the shard holding the connection.
- ``all``: node-wide (INFO, DBSIZE, SCAN, KEYS, FLUSHALL, CONFIG SET, CLIENT LIST/KILL/
  PAUSE, PUBLISH, SCRIPT LOAD, SLOWLOG ...): on every shard, the replies gathered or the
  change applied everywhere (§4).
- ``node-record``: writes node-level records (ACL users, function libraries), kept at the
  shard of their name's partition (``core/keys.py``) and broadcast to every shard (§4).

A command with keys (``Command.has_keys``) is ``key`` or ``keys``, from its key specs:
``key`` when it has one spec of real keys, an index with a range of one. Every command
without keys is named in ``KEYLESS``; a unit test fails for a command of the table that
has no class, so a new command cannot be routed by accident.

**The fast key path** (``Router.keys``) finds the keys ``Command.keys_of`` (COMMAND GETKEYS)
finds, without walking the specs at run time: each command's specs are compiled once into
index+range and index+keynum steps (the ``numkeys`` of ZUNIONSTORE, EVAL, EVALSHA, FCALL,
LMPOP, SINTERCARD ...; the count read only when it is a plain decimal). Arguments the
compiled steps cannot read as Redis would (a spec invalid for them, a count like ``01``
or ``1x``), and the commands whose specs search for a keyword or cannot describe their
keys (XREAD's STREAMS, GEORADIUS's STORE, SORT's BY/GET), take ``keys_of`` itself, which
stays the reference (tests/unit/test_router.py compares the two over the COMMAND GETKEYS
cases and generated arguments of every command with keys).
"""

from __future__ import annotations

from typing import Sequence

from marekvs.commands.table import Command, CommandTable, Index, KeyFlag, Keynum, Range
from marekvs.core.partition import ShardMap, partition_of

KEY, KEYS, FRONT, ALL, NODE_RECORD = "key", "keys", "front", "all", "node-record"
CLASSES = (KEY, KEYS, FRONT, ALL, NODE_RECORD)

# Where each command without keys runs (see the module docstring). Containers named alone
# (``client``) answer only errors and help: on the front.
KEYLESS: dict[str, str] = {
    **dict.fromkeys((
        "acl", "acl|cat", "acl|dryrun", "acl|genpass", "acl|getuser", "acl|help", "acl|list", "acl|save",
        "acl|users", "acl|whoami", "auth", "client", "client|caching", "client|getname", "client|getredir",
        "client|help", "client|id", "client|info", "client|no-evict", "client|reply", "client|setinfo",
        "client|setname", "client|tracking", "client|trackinginfo", "command", "command|count",
        "command|docs", "command|getkeys", "command|getkeysandflags", "command|help", "command|info",
        "command|list", "config", "config|get", "config|help", "debug", "debug|help", "debug|sleep",
        "discard", "echo", "function", "function|dump", "function|help", "function|list", "hello",
        "latency", "latency|help", "memory", "memory|help", "monitor", "multi", "object", "object|help",
        "ping", "psubscribe", "pubsub", "pubsub|help", "punsubscribe", "quit", "reset", "role", "script",
        "script|exists", "script|help", "select", "slowlog", "slowlog|help", "ssubscribe", "subscribe",
        "sunsubscribe", "time", "unsubscribe", "unwatch", "xgroup", "xgroup|help", "xinfo", "xinfo|help",
    ), FRONT),
    **dict.fromkeys((
        "acl|log", "client|kill", "client|list", "client|pause", "client|unblock", "client|unpause",
        "config|resetstat", "config|set", "dbsize", "debug|digest", "debug|digest-value", "flushall",
        "flushdb", "function|kill", "function|stats", "info", "keys", "lastsave", "latency|history",
        "latency|latest", "latency|reset", "memory|doctor", "memory|malloc-stats", "memory|purge",
        "memory|stats", "publish", "pubsub|channels", "pubsub|numpat", "pubsub|numsub",
        "pubsub|shardchannels", "pubsub|shardnumsub", "randomkey", "save", "scan", "script|flush",
        "script|kill", "script|load", "shutdown", "slowlog|get", "slowlog|len", "slowlog|reset", "spublish",
        "swapdb", "wait",
    ), ALL),
    **dict.fromkeys((
        "acl|deluser", "acl|load", "acl|setuser", "function|delete", "function|flush", "function|load",
        "function|restore",
    ), NODE_RECORD),
    "exec": KEYS,
}

# A compiled key spec: (kind, position, a, b, step). _RANGE: keys from ``position`` to
# ``a`` (>= 0: relative to ``position``; < 0: from the end of the arguments). _KEYNUM: the
# count at ``position + a``, the keys from ``position + b``.
_RANGE, _KEYNUM = 0, 1
Step = tuple[int, int, int, int, int]


class Route:
    """How one command is routed: its class, and for a ``key`` command the key's position,
    for a ``keys`` command its compiled specs (``None``: take ``Command.keys_of``)."""

    __slots__ = ("cls", "pos", "steps")

    def __init__(self, cls: str, pos: int = 0, steps: tuple[Step, ...] | None = None):
        self.cls = cls
        self.pos = pos
        self.steps = steps


def class_of(cmd: Command) -> str | None:
    """The class of ``cmd`` (None: a command without keys that ``KEYLESS`` does not name)."""
    if not cmd.has_keys:
        return KEYLESS.get(cmd.fullname)
    specs = [s for s in cmd.key_specs if not s.flags & KeyFlag.NOT_KEY]
    if len(specs) == 1 and specs[0].is_range and specs[0].find_keys.lastkey == 0:  # type: ignore[union-attr]
        return KEY
    return KEYS


def _compile(cmd: Command) -> tuple[Step, ...] | None:
    """The specs of real keys as steps, or None when one cannot be compiled (a keyword
    search, an unknown step, a limit, an incomplete spec)."""
    steps: list[Step] = []
    for s in cmd.key_specs:
        if s.flags & KeyFlag.NOT_KEY:
            continue
        bs, fk = s.begin_search, s.find_keys
        if not isinstance(bs, Index) or s.flags & KeyFlag.INCOMPLETE:
            return None
        if isinstance(fk, Range) and not fk.limit:
            steps.append((_RANGE, bs.pos, fk.lastkey, 0, fk.keystep))
        elif isinstance(fk, Keynum):
            steps.append((_KEYNUM, bs.pos, fk.keynumidx, fk.firstkey, fk.keystep))
        else:
            return None
    return tuple(steps)


def route_of(cmd: Command) -> Route:
    cls = class_of(cmd)
    if cls is None:
        raise ValueError(f"command {cmd.fullname} has no shard class (add it to router.KEYLESS)")
    if cls == KEY:
        spec = next(s for s in cmd.key_specs if not s.flags & KeyFlag.NOT_KEY)
        return Route(cls, pos=spec.begin_search.pos)  # type: ignore[union-attr]
    if cls == KEYS and cmd.has_keys:
        return Route(cls, steps=_compile(cmd))
    return Route(cls, steps=())


class Router:
    """Routes for every command of ``table`` over ``shards`` (a ``ShardMap``)."""

    def __init__(self, table: CommandTable, shards: ShardMap):
        self.shards = shards
        self._owner = shards.owner
        # by the command object's id: a command lives as long as its table, and an int
        # hashes faster than a subcommand's full name is built
        self._routes: dict[int, Route] = {id(c): route_of(c) for c in table.all_commands()}

    def route(self, cmd: Command) -> Route:
        return self._routes[id(cmd)]

    def class_of(self, cmd: Command) -> str:
        return self._routes[id(cmd)].cls

    def keys(self, cmd: Command, args: Sequence[bytes]) -> list[bytes]:
        """The keys of ``args`` (the command name at 0, arity already checked): the keys
        ``cmd.keys_of(args)`` returns, in its order (see the module docstring)."""
        r = self._routes[id(cmd)]
        if r.pos:
            return [args[r.pos]]
        steps = r.steps
        if steps is None:
            return cmd.keys_of(args)
        keys: list[bytes] = []
        argc = len(args)
        for kind, first, a, b, step in steps:
            if kind == _RANGE:
                last = first + a if a >= 0 else argc + a
            else:
                at = first + a
                if at >= argc:
                    return cmd.keys_of(args)
                n = args[at]
                if not n.isdigit() or (n[0] == 48 and len(n) > 1) or len(n) > 9:  # (48: "0")
                    return cmd.keys_of(args)
                if n == b"0":  # no key (a script without keys): the spec calls it invalid, and
                    return []  # the getkeys procedure Redis then asks finds none either
                first += b
                last = first + int(n) - 1
            if last >= argc or last < first:
                return cmd.keys_of(args)  # invalid for these arguments: as Redis judges it
            keys += args[first:last + 1:step]
        return keys

    def shard_of_key(self, cmd: Command, args: Sequence[bytes]) -> int | None:
        """The shard of a ``key`` command's key; None for the other classes."""
        pos = self._routes[id(cmd)].pos
        return self._owner[partition_of(args[pos])] if pos else None

    def shards_of(self, cmd: Command, args: Sequence[bytes]) -> set[int]:
        """The shards owning the keys of ``args`` (empty for a command without keys)."""
        owner = self._owner
        return {owner[partition_of(k)] for k in self.keys(cmd, args)}
