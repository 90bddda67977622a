"""Generic keyspace commands (Redis 7.0 ``db.c`` / ``expire.c`` / ``object.c``).

These work on whatever record holds a key - the string record or a collection head
- through the Keyspace's type-agnostic lookups (``live_record``, ``delete_records``,
``set_ttl``). A TTL is the envelope's absolute deadline; EXPIRE / PERSIST rewrite the
envelope (an LWW write with the payload unchanged) and a deadline at or before now
deletes the key instead, as Redis does.

Iteration (KEYS, SCAN, RANDOMKEY) walks the 4096 partitions in order with
``Keyspace.key_runs`` (one iterator; empty partitions cost nothing). The SCAN cursor is
the next partition id to visit (0 when done; on a shard worker whose range ends before
the last partition, the next worker's first: the mesh sends a cursor to the worker owning
it) and a call always finishes the partitions it starts, so a key that exists for the
whole scan is returned at least once, and COUNT bounds the keys visited as in Redis
(MATCH and TYPE filter afterwards).

RENAME / COPY move strings and counters (the destination gets a plain string record
with a new version; a counter is materialised, which reads the same) and collections of
every type: every live element record is re-keyed under the destination with a fresh
version, with a new head, in one apply (one replication-log entry;
``keyspace/collections.py``).

OBJECT reports what marekvs can know: ENCODING is derived from the value (no record
keeps Redis's in-memory representation; a collection's by Redis's rules from its
contents and the ``*-max-*`` parameters, ``collections.encoding``), REFCOUNT follows
Redis's shared-integer rule, IDLETIME is 0 and FREQ needs an LFU policy, as in Redis.
"""

from __future__ import annotations

import random

from marekvs.commands import args as A
from marekvs.commands import errors, reply, table
from marekvs.commands.errors import CommandError
from marekvs.commands.members import member_ttl
from marekvs.commands.stepwise import in_steps
from marekvs.commands.table import command
from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core import pncounter
from marekvs.core.partition import PARTITIONS
from marekvs.keyspace import Keyspace
from marekvs.keyspace import collections as kcoll
from marekvs.keyspace import strings as kstr


def _object_container() -> table.Command:
    c = table.container("object", -2, group="generic",
                        summary="A container for object introspection commands", since="2.2.3")
    c.acl = ("slow",)  # as Redis's COMMAND INFO object
    return c


CONTAINERS = (_object_container(),)

_ACL_W_SLOW = "keyspace write slow"
_ACL_W_FAST = "keyspace write fast"
_ACL_R_FAST = "keyspace read fast"
_ACL_R_SLOW = "keyspace read slow"
_EXPIRE_FLAGS_SYNTAX = " [NX | XX | GT | LT]"
_OBJ_SHARED_INTEGERS = 10000
_OBJ_SHARED_REFCOUNT = (1 << 31) - 1


# =========================================================================================
# Internal API
# =========================================================================================

def is_string_ikey(ikey: bytes) -> bool:
    return ikey[K.TAG_AT] == K.ORD_STRING


def op_scan(ks: Keyspace, cursor: int, count: int, now: int, budget: int | None = None
            ) -> tuple[int, list[bytes], int]:
    """Visit whole partitions from ``cursor`` until ``count`` keys are collected, or
    ``budget`` (``10 * count``) key records were read (Redis's bound on the empty buckets
    one call visits: after a FLUSHALL the tombstones stay until gc_grace, and a call must
    not read them all); the next cursor is the next partition holding key records (the
    empty ones between hold no key present for the whole scan). Also the records read."""
    found: list[bytes] = []
    if budget is None:
        budget = 10 * count
    read = 0
    for pid, records, keys in ks.key_runs(cursor, now):
        if len(found) >= count or read >= budget:
            return pid, found, read
        found.extend(k for k, _, _ in keys)
        read += records
    last = ks.engine.partitions.last  # a shard worker's range ends: the next worker's first
    return (0 if last == PARTITIONS - 1 else last + 1), found, read


def op_random_key(ks: Keyspace, now: int) -> bytes | None:
    """A random live key: the first partition with live keys from a random pid on
    (wrapping around), then a random key in it."""
    start = random.randrange(PARTITIONS)
    for first in (start, 0):
        for pid, _, keys in ks.key_runs(first, now):
            if first == 0 and pid >= start:
                return None
            if keys:
                return random.choice(keys)[0]
    return None


def op_delete_keys(ks: Keyspace, keys: list[bytes], now: int) -> list[bytes]:
    """DEL: tombstone every live key (repeats count once) in one apply; the keys deleted."""
    recs: list[tuple[bytes, bytes]] = []
    deleted = []
    for key in dict.fromkeys(keys):
        r = ks.delete_records(key, now)
        if r:
            deleted.append(key)
            recs.extend(r)
    if recs:
        ks.apply(recs)
    return deleted


def string_encoding(rec: bytes) -> bytes:
    if pncounter.is_counter(rec):
        return b"int"
    v = rec[env.HEADER:]
    if len(v) <= 20 and A.parse_ll(v) is not None:
        return b"int"
    return b"embstr" if len(v) <= 44 else b"raw"


def encoding_limits(ctx) -> kcoll.Limits:
    """The ``*-max-*`` parameters OBJECT ENCODING of a collection depends on."""
    t = ctx.node.tunable
    return kcoll.Limits(int(t("hash-max-listpack-entries")), int(t("hash-max-listpack-value")),
                        int(t("set-max-intset-entries")), int(t("zset-max-listpack-entries")),
                        int(t("zset-max-listpack-value")))


def _policy(ctx) -> str:
    return ctx.node.tunable("maxmemory-policy").lower()


def _lfu(ctx) -> bool:
    return _policy(ctx).endswith("-lfu")


def shared_integers(ctx) -> bool:
    """Redis shares small integer objects unless maxmemory is set with an LRU/LFU
    policy (MAXMEMORY_FLAG_NO_SHARED_INTEGERS)."""
    return int(ctx.node.tunable("maxmemory")) == 0 or not _policy(ctx).endswith(("-lru", "-lfu"))


# =========================================================================================
# Commands
# =========================================================================================

@command("del", -2, "write", specs="RM DELETE index 1 range -1", group="generic", acl=_ACL_W_SLOW,
         summary="Delete a key", since="1.0.0",
         complexity="O(N) where N is the number of keys that will be removed. When a key "
                    "to remove holds a value other than a string, the individual "
                    "complexity for this key is O(M) where M is the number of elements in "
                    "the list, set, sorted set or hash. Removing a single key that holds a "
                    "string value is O(1).",
         syntax="key [key ...]")
@command("unlink", -2, "write fast", specs="RM DELETE index 1 range -1", group="generic", acl=_ACL_W_FAST,
         summary="Delete a key asynchronously in another thread. Otherwise it is just as "
                 "DEL, but non blocking.", since="4.0.0",
         complexity="O(1) for each key removed regardless of its size. Then the command "
                    "does O(N) work in a different thread in order to reclaim memory, where "
                    "N is the number of allocations the deleted objects where composed of.",
         syntax="key [key ...]")
def del_(ctx, args: list[bytes]):
    """DEL and UNLINK: a collection dies in one head tombstone, so both are O(1) per key."""
    deleted = op_delete_keys(ctx.ks, args[1:], ctx.ks.now())
    if ctx.node.events.on:
        for key in deleted:
            ctx.fire("g", b"del", key)
    return len(deleted)


@command("exists", -2, "readonly fast", (1, -1, 1), group="generic", acl=_ACL_R_FAST,
         summary="Determine if a key exists", since="1.0.0",
         complexity="O(N) where N is the number of keys to check.", syntax="key [key ...]")
def exists(ctx, args: list[bytes]):
    now = ctx.ks.now()
    return sum(1 for key in args[1:] if ctx.ks.read_record(key, now) is not None)


@command("touch", -2, "readonly fast", (1, -1, 1), group="generic", acl=_ACL_R_FAST,
         summary="Alters the last access time of a key(s). Returns the number of existing "
                 "keys specified.", since="3.2.1",
         complexity="O(N) where N is the number of keys that will be touched.",
         syntax="key [key ...]")
def touch(ctx, args: list[bytes]):
    return exists(ctx, args)


@command("type", 2, "readonly fast", (1, 1, 1), group="generic", acl=_ACL_R_FAST,
         summary="Determine the type stored at key", since="1.0.0", complexity="O(1)",
         syntax="key")
def type_(ctx, args: list[bytes]):
    return reply.Simple(ctx.ks.type_name(args[1], ctx.ks.now()).encode())


# -- expiry --------------------------------------------------------------------------------

def _expire(ctx, args: list[bytes], name: str, seconds: bool, relative: bool):
    flags = A.parse_expire_flags(args, 3)
    now = ctx.ks.now()
    when = A.expire_when(name, args[2], seconds, now if relative else 0)
    ks, key = ctx.ks, args[1]
    found = ks.live_record(key, now)
    if found is None:
        return 0
    current = env.ttl_of(found[1]) or -1  # -1: persistent, an infinite TTL
    if flags & A.E_NX and current != -1:
        return 0
    if flags & A.E_XX and current == -1:
        return 0
    if flags & A.E_GT and (current == -1 or when <= current):
        return 0
    if flags & A.E_LT and current != -1 and when >= current:
        return 0
    if when <= now:
        ks.delete(key, now)
        ctx.fire("g", b"del", key)
    else:
        ks.write_ttl(found, when)
        ctx.fire("g", b"expire", key)
    return 1


@command("expire", -3, "write fast", specs="RW UPDATE index 1 range 0", group="generic", acl=_ACL_W_FAST,
         summary="Set a key's time to live in seconds", since="1.0.0", complexity="O(1)",
         syntax="key seconds" + _EXPIRE_FLAGS_SYNTAX)
def expire(ctx, args: list[bytes]):
    return _expire(ctx, args, "expire", seconds=True, relative=True)


@command("pexpire", -3, "write fast", specs="RW UPDATE index 1 range 0", group="generic", acl=_ACL_W_FAST,
         summary="Set a key's time to live in milliseconds", since="2.6.0",
         complexity="O(1)", syntax="key milliseconds" + _EXPIRE_FLAGS_SYNTAX)
def pexpire(ctx, args: list[bytes]):
    return _expire(ctx, args, "pexpire", seconds=False, relative=True)


@command("expireat", -3, "write fast", specs="RW UPDATE index 1 range 0", group="generic", acl=_ACL_W_FAST,
         summary="Set the expiration for a key as a UNIX timestamp", since="1.2.0",
         complexity="O(1)", syntax="key unix-time-seconds" + _EXPIRE_FLAGS_SYNTAX)
def expireat(ctx, args: list[bytes]):
    return _expire(ctx, args, "expireat", seconds=True, relative=False)


@command("pexpireat", -3, "write fast", specs="RW UPDATE index 1 range 0", group="generic", acl=_ACL_W_FAST,
         summary="Set the expiration for a key as a UNIX timestamp specified in "
                 "milliseconds", since="2.6.0",
         complexity="O(1)", syntax="key unix-time-milliseconds" + _EXPIRE_FLAGS_SYNTAX)
def pexpireat(ctx, args: list[bytes]):
    return _expire(ctx, args, "pexpireat", seconds=False, relative=False)


def _ttl(ctx, key: bytes, ms: bool, absolute: bool, args: list[bytes] | None = None) -> int:
    """``ttlGenericCommand``: -2 absent, -1 persistent, else the (rounded) TTL. With
    ``args`` (TTL/PTTL) the KeyDB form ``TTL key member`` is the member's TTL."""
    now = ctx.ks.now()
    if args is not None and len(args) > 2:
        deadline = _member_ttl(ctx, args, now)
        if deadline < 0:
            return deadline
    else:
        found = ctx.ks.read_record(key, now)
        if found is None:
            return -2
        deadline = env.ttl_of(found[1])
    if not deadline:
        return -1
    ttl = max(deadline if absolute else deadline - now, 0)
    return ttl if ms else (ttl + 500) // 1000


# -- TTL key member: KeyDB's per-member TTL (hashes-sets; commands/members.py) ----------
# TTL and PTTL take an optional member (KeyDB's arity -2); a third argument is KeyDB's
# "Invalid arguments".

def _member_ttl(ctx, args: list[bytes], now: int) -> int:
    if len(args) > 3:
        raise CommandError(errors.MEMBER_TTL_ARGUMENTS)
    return member_ttl(ctx.ks, args[1], args[2], now)


@command("ttl", -2, "readonly fast", specs="RO ACCESS index 1 range 0", group="generic", acl=_ACL_R_FAST,
         summary="Get the time to live for a key in seconds", since="1.0.0",
         complexity="O(1)", syntax="key [member]")
def ttl(ctx, args: list[bytes]):
    return _ttl(ctx, args[1], ms=False, absolute=False, args=args)


@command("pttl", -2, "readonly fast", specs="RO ACCESS index 1 range 0", group="generic", acl=_ACL_R_FAST,
         summary="Get the time to live for a key in milliseconds", since="2.6.0",
         complexity="O(1)", syntax="key [member]")
def pttl(ctx, args: list[bytes]):
    return _ttl(ctx, args[1], ms=True, absolute=False, args=args)


@command("expiretime", 2, "readonly fast", specs="RO ACCESS index 1 range 0", group="generic", acl=_ACL_R_FAST,
         summary="Get the expiration Unix timestamp for a key", since="7.0.0",
         complexity="O(1)", syntax="key")
def expiretime(ctx, args: list[bytes]):
    return _ttl(ctx, args[1], ms=False, absolute=True)


@command("pexpiretime", 2, "readonly fast", specs="RO ACCESS index 1 range 0", group="generic", acl=_ACL_R_FAST,
         summary="Get the expiration Unix timestamp for a key in milliseconds",
         since="7.0.0", complexity="O(1)", syntax="key")
def pexpiretime(ctx, args: list[bytes]):
    return _ttl(ctx, args[1], ms=True, absolute=True)


@command("persist", 2, "write fast", specs="RW UPDATE index 1 range 0", group="generic", acl=_ACL_W_FAST,
         summary="Remove the expiration from a key", since="2.2.0", complexity="O(1)",
         syntax="key")
def persist(ctx, args: list[bytes]):
    now = ctx.ks.now()
    found = ctx.ks.live_record(args[1], now)
    if found is None or not env.ttl_of(found[1]):
        return 0
    ctx.ks.write_ttl(found, 0)
    ctx.fire("g", b"persist", args[1])
    return 1


# -- iteration -----------------------------------------------------------------------------

@command("keys", 2, "readonly", (0, 0, 0), group="generic",
         acl="keyspace read slow dangerous",
         summary="Find all keys matching the given pattern", since="1.0.0",
         complexity="O(N) with N being the number of keys in the database, under the "
                    "assumption that the key names in the database and the given pattern "
                    "have limited length.",
         syntax="pattern")
def keys(ctx, args: list[bytes]):
    return in_steps(ctx, _matching_keys(ctx.ks, args[1], ctx.ks.now()))


def _matching_keys(ks: Keyspace, pattern: bytes, now: int):
    match = A.stringmatch
    out: list[bytes] = []
    for step in ks.all_keys_in_steps(now):
        out += [k for k, _, _ in step if match(pattern, k)]
        yield
    return out


@command("scan", -2, "readonly", (0, 0, 0), group="generic", acl=_ACL_R_SLOW,
         summary="Incrementally iterate the keys space", since="2.8.0",
         complexity="O(1) for every call. O(N) for a complete iteration, including enough "
                    "command calls for the cursor to return back to 0. N is the number of "
                    "elements inside the collection.",
         syntax="cursor [MATCH pattern] [COUNT count] [TYPE type]")
def scan(ctx, args: list[bytes]):
    nxt, found, _, _ = scan_step(ctx, args)
    return [b"%d" % nxt, found]


def scan_step(ctx, args: list[bytes], cursor: int | None = None, left: tuple[int, int] | None = None
              ) -> tuple[int, list[bytes], int, int]:
    """SCAN's work (``args``: the command's), from ``cursor`` (else its own) with ``left``
    keys to collect and records to read (else its COUNT's): the next cursor, the keys
    found that pass its MATCH and TYPE, and what is left to collect and to read (a node of
    several shard workers goes on at the next worker's first partition while some is:
    ``shards/fanout.py``)."""
    if cursor is None:
        cursor = A.parse_cursor(args[1])
    count, pattern, _, type_arg = A.scan_options(args, 2, type_ok=True)
    typename = None if type_arg is None else type_arg.decode("latin-1").lower()
    if cursor >= PARTITIONS:  # a cursor marekvs never returned: nothing is left
        return 0, [], 0, 0
    want, budget = left if left is not None else (count, 10 * count)
    now = ctx.ks.now()
    nxt, found, read = op_scan(ctx.ks, cursor, want, now, budget)
    collected = len(found)
    if pattern is not None:
        found = [k for k in found if A.stringmatch(pattern, k)]
    if typename is not None:
        found = [k for k in found if ctx.ks.type_name(k, now) == typename]
    return nxt, found, want - collected, budget - read


@command("randomkey", 1, "readonly", (0, 0, 0), group="generic", acl=_ACL_R_SLOW,
         summary="Return a random key from the keyspace", since="1.0.0", complexity="O(1)",
         syntax="")
def randomkey(ctx, args: list[bytes]):
    return op_random_key(ctx.ks, ctx.ks.now())


# -- moving keys ---------------------------------------------------------------------------

def _rename(ctx, args: list[bytes], nx: bool):
    ks, src, dst = ctx.ks, args[1], args[2]
    now = ctx.ks.now()
    found = ks.live_record(src, now)
    if found is None:
        raise CommandError(errors.NO_SUCH_KEY)
    if src == dst:
        return 0 if nx else reply.OK
    dst_found = ks.live_record(dst, now)
    if nx and dst_found is not None:
        return 0
    ikey, rec = found
    if is_string_ikey(ikey):
        kstr.copy(ks, rec, dst, dst_found, now, src_ik=ikey)
    else:
        kcoll.move(ks, src, rec, dst, dst_found, now, delete_source=True)
    if ctx.node.events.on:  # (Redis fires the destination's "new" first: it deletes one that
        ctx.node.events.flush_new()  # existed and adds the key, and adding fires "new")
        if dst_found is not None:
            ctx.fire("n", b"new", dst)
    ctx.fire("g", b"rename_from", src)
    ctx.fire("g", b"rename_to", dst)
    return 1 if nx else reply.OK


@command("rename", 3, "write", specs=("RW ACCESS DELETE index 1 range 0", "OW UPDATE index 2 range 0"),
         group="generic", acl=_ACL_W_SLOW,
         summary="Rename a key", since="1.0.0", complexity="O(1)", syntax="key newkey")
def rename(ctx, args: list[bytes]):
    return _rename(ctx, args, nx=False)


@command("renamenx", 3, "write fast", specs=("RW ACCESS DELETE index 1 range 0", "OW INSERT index 2 range 0"),
         group="generic", acl=_ACL_W_FAST,
         summary="Rename a key, only if the new key does not exist", since="1.0.0",
         complexity="O(1)", syntax="key newkey")
def renamenx(ctx, args: list[bytes]):
    return _rename(ctx, args, nx=True)


@command("copy", -3, "write denyoom", specs=("RO ACCESS index 1 range 0", "OW UPDATE index 2 range 0"),
         group="generic", acl=_ACL_W_SLOW,
         summary="Copy a key", since="6.2.0",
         complexity="O(N) worst case for collections, where N is the number of nested "
                    "items. O(1) for string values.",
         syntax="source destination [DB destination-db] [REPLACE]")
def copy(ctx, args: list[bytes]):
    ks, src, dst = ctx.ks, args[1], args[2]
    replace = False
    p = A.Options(args, 3)
    while p.more():
        if p.accept(b"replace"):
            replace = True
        elif p.accept(b"db", 1):
            if A.int_range_arg(p.value()) != 0:  # (one keyspace: database 0)
                p.fail(errors.DB_OUT_OF_RANGE)
        else:
            p.fail(errors.SYNTAX)
    p.check()
    if src == dst:
        raise CommandError(errors.SAME_OBJECT)
    now = ctx.ks.now()
    found = ks.read_record(src, now)  # (Redis reads the source: a keyspace hit or miss)
    if found is None:
        return 0
    dst_found = ks.live_record(dst, now)
    if not replace and dst_found is not None:
        return 0
    ikey, rec = found
    if is_string_ikey(ikey):
        kstr.copy(ks, rec, dst, dst_found, now)
    else:
        kcoll.move(ks, src, rec, dst, dst_found, now, delete_source=False)
    if dst_found is not None:  # (REPLACE: Redis deletes it and adds the copy, which fires "new")
        ctx.fire("n", b"new", dst)
    ctx.fire("g", b"copy_to", dst)
    return 1


# -- OBJECT --------------------------------------------------------------------------------

_OBJECT_HELP = (
    "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "ENCODING <key>",
    "    Return the kind of internal representation used in order to store the value",
    "    associated with a <key>.",
    "FREQ <key>",
    "    Return the access frequency index of the <key>. The returned integer is",
    "    proportional to the logarithm of the recent access frequency of the key.",
    "IDLETIME <key>",
    "    Return the idle time of the <key>, that is the approximated number of",
    "    seconds elapsed since the last access to the key.",
    "REFCOUNT <key>",
    "    Return the number of references of the value associated with the specified",
    "    <key>.",
    "HELP",
    "    Prints this help.",
)


@command("help", 2, "loading stale", (0, 0, 0), group="generic", parent="object",
         acl="keyspace slow",
         summary="Show helpful text about the different subcommands", since="6.2.0",
         complexity="O(1)", syntax="")
def object_help(ctx, args: list[bytes]):
    return [reply.Simple(line.encode()) for line in _OBJECT_HELP]


def _object_lookup(ctx, key: bytes, now: int):
    """The key OBJECT inspects, as Redis's objectCommandLookup reads it: a keyspace hit or
    miss, but no keymiss event."""
    found = ctx.ks.live_record(key, now)
    ctx.ks.counted(key, found is not None, event=False)
    return found


@command("encoding", 3, "readonly", (2, 2, 1), group="generic", parent="object",
         acl=_ACL_R_SLOW, summary="Inspect the internal encoding of a Redis object",
         since="2.2.3", complexity="O(1)", syntax="key")
def object_encoding(ctx, args: list[bytes]):
    now = ctx.ks.now()
    found = _object_lookup(ctx, args[2], now)
    if found is None:
        return None
    ikey, rec = found
    if is_string_ikey(ikey):
        return string_encoding(rec)
    return kcoll.encoding(ctx.ks, args[2], rec, now, encoding_limits(ctx))


@command("freq", 3, "readonly", (2, 2, 1), group="generic", parent="object",
         acl=_ACL_R_SLOW,
         summary="Get the logarithmic access frequency counter of a Redis object",
         since="4.0.0", complexity="O(1)", syntax="key")
def object_freq(ctx, args: list[bytes]):
    if _object_lookup(ctx, args[2], ctx.ks.now()) is None:
        return None
    if not _lfu(ctx):
        raise CommandError(errors.LFU_NOT_SELECTED)
    return 0  # access frequency is not tracked


@command("idletime", 3, "readonly", (2, 2, 1), group="generic", parent="object",
         acl=_ACL_R_SLOW, summary="Get the time since a Redis object was last accessed",
         since="2.2.3", complexity="O(1)", syntax="key")
def object_idletime(ctx, args: list[bytes]):
    if _object_lookup(ctx, args[2], ctx.ks.now()) is None:
        return None
    if _lfu(ctx):
        raise CommandError(errors.LFU_SELECTED)
    return 0  # access time is not tracked


@command("refcount", 3, "readonly", (2, 2, 1), group="generic", parent="object",
         acl=_ACL_R_SLOW,
         summary="Get the number of references to the value of the key", since="2.2.3",
         complexity="O(1)", syntax="key")
def object_refcount(ctx, args: list[bytes]):
    found = _object_lookup(ctx, args[2], ctx.ks.now())
    if found is None:
        return None
    ikey, rec = found
    if is_string_ikey(ikey) and string_encoding(rec) == b"int" and shared_integers(ctx):
        v = int(kstr.string_value(rec))
        if 0 <= v < _OBJ_SHARED_INTEGERS:
            return _OBJ_SHARED_REFCOUNT
    return 1
