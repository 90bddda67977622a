"""The command table's metadata (arity, flags, key positions, docs) and the COMMAND INFO
reply built from it, checked against Redis 7.0.15's own ``COMMAND INFO`` output.

The REDIS_INFO rows were captured from a real redis-server 7.0.15 with
``COMMAND INFO <name>`` (flags and ACL categories sorted); the key specs are reduced
to (begin_search index, find_keys lastkey, keystep) per spec.
"""

from __future__ import annotations

import re

import pytest

from marekvs.commands import docs
from marekvs.commands.table import Command, KeySpec, build_table

TABLE = build_table()


def all_commands() -> list[Command]:
    out = []
    for c in TABLE:
        out.append(c)
        out.extend(c.subcommands.values())
    return out


ALL = all_commands()
IDS = [c.fullname for c in ALL]


def lookup(fullname: str) -> Command:
    if "|" in fullname:
        parent, sub = fullname.split("|", 1)
        return TABLE.lookup(parent.encode()).subcommands[sub]
    c = TABLE.lookup(fullname.encode())
    assert c is not None, f"{fullname} is not in the table"
    return c


# -- structure of every entry ----------------------------------------------------------

@pytest.mark.parametrize("cmd", ALL, ids=IDS)
def test_entry_is_runnable(cmd):
    if cmd.subcommands:
        assert cmd.parent is None, "only top-level commands can be containers"
        for name, sub in cmd.subcommands.items():
            assert sub.name == name and sub.parent == cmd.name
            assert sub.handler is not None and not sub.subcommands
    else:
        assert callable(cmd.handler), f"{cmd.fullname} has neither a handler nor subcommands"


@pytest.mark.parametrize("cmd", ALL, ids=IDS)
def test_arity(cmd):
    assert cmd.arity != 0
    if cmd.parent is not None:
        # a subcommand's arity counts the container name and the subcommand name
        assert abs(cmd.arity) >= 2
    if cmd.subcommands:
        # containers: -2 (CLIENT, CONFIG ...) or -1 when the bare name is a command (COMMAND)
        assert cmd.arity in (-1, -2)


@pytest.mark.parametrize("cmd", ALL, ids=IDS)
def test_key_positions(cmd):
    first, last, step = cmd.first_key, cmd.last_key, cmd.step
    assert first >= 0
    if first == 0:
        assert (last, step) == (0, 0), "no keys: last and step must be 0"
        return
    assert step >= 1
    if last >= 0:
        assert first <= last
        # the last key position must exist for a minimal valid call
        assert abs(cmd.arity) > last or cmd.arity < 0
    # a fixed-arity command cannot have keys past its arity
    if cmd.arity > 0:
        assert first < cmd.arity
        if last >= 0:
            assert last < cmd.arity


@pytest.mark.parametrize("cmd", ALL, ids=IDS)
def test_docs_metadata(cmd):
    assert cmd.summary.strip(), f"{cmd.fullname} has no summary"
    assert re.fullmatch(r"\d+\.\d+\.\d+", cmd.since), cmd.since
    assert cmd.group in {"generic", "string", "list", "set", "sorted-set", "hash", "pubsub",
                         "transactions", "connection", "server", "scripting", "hyperloglog",
                         "cluster", "sentinel", "geo", "stream", "bitmap"}, cmd.group
    assert cmd.complexity.strip()
    assert cmd.name == cmd.name.lower()


@pytest.mark.parametrize("cmd", ALL, ids=IDS)
def test_flags_are_consistent(cmd):
    flags = set(cmd.flags)
    assert len(flags) == len(cmd.flags), "duplicate flags"
    assert not ({"write", "readonly"} <= flags), "write and readonly at once"
    if "denyoom" in flags:
        assert "write" in flags
    from marekvs.commands.table import KeyFlag

    channels_only = cmd.key_specs and all(spec.flags & KeyFlag.NOT_KEY for spec in cmd.key_specs)
    if cmd.first_key and not cmd.subcommands and not channels_only and cmd.group != "transactions":
        # every command that touches keys says whether it reads or writes them (shard
        # channels of SSUBSCRIBE/SPUBLISH are declared with NOT_KEY specs: not keys; WATCH
        # neither reads nor writes its keys, and Redis flags it neither way)
        assert flags & {"write", "readonly"}, f"{cmd.fullname} has keys but no read/write flag"


WRITE_COMMANDS = [
    "set", "setnx", "setex", "psetex", "mset", "msetnx", "getset", "getdel", "getex", "append",
    "setrange", "incr", "decr", "incrby", "decrby", "incrbyfloat", "del", "unlink", "expire",
    "pexpire", "expireat", "pexpireat", "persist", "rename", "renamenx", "copy", "flushall", "flushdb",
]
READ_COMMANDS = [
    "get", "mget", "strlen", "getrange", "substr", "exists", "ttl", "pttl", "type", "keys", "scan",
    "randomkey", "dbsize", "touch", "expiretime", "pexpiretime", "lcs",
]


@pytest.mark.parametrize("name", WRITE_COMMANDS)
def test_write_commands_are_flagged_write(name):
    c = TABLE.lookup(name.encode())
    if c is None:
        pytest.skip(f"{name} not implemented")
    assert c.is_write and "readonly" not in c.flags


@pytest.mark.parametrize("name", READ_COMMANDS)
def test_read_commands_are_flagged_readonly(name):
    c = TABLE.lookup(name.encode())
    if c is None:
        pytest.skip(f"{name} not implemented")
    assert "readonly" in c.flags and not c.is_write


def test_table_lookup_is_case_insensitive():
    assert TABLE.lookup(b"GET") is TABLE.lookup(b"get") is TABLE.lookup(b"gEt")
    assert TABLE.lookup(b"nosuchcommand") is None


def test_keys_of():
    assert lookup("mset").keys_of([b"mset", b"a", b"1", b"b", b"2"]) == [b"a", b"b"]
    assert lookup("del").keys_of([b"del", b"a", b"b", b"c"]) == [b"a", b"b", b"c"]
    assert lookup("get").keys_of([b"get", b"a"]) == [b"a"]
    assert lookup("set").keys_of([b"set", b"k", b"v", b"EX", b"10"]) == [b"k"]
    assert lookup("ping").keys_of([b"ping"]) == []


# -- against Redis 7.0.15's COMMAND INFO -------------------------------------------------

# name: (arity, flags, first, last, step, acl categories, key specs in table.py's grammar)
REDIS_INFO = {
    "get": (2, ["fast", "readonly"], 1, 1, 1, ["@fast", "@read", "@string"], ["RO ACCESS index 1 range 0"]),
    "set": (-3, ["denyoom", "write"], 1, 1, 1, ["@slow", "@string", "@write"],
            ["RW ACCESS UPDATE VARIABLE_FLAGS index 1 range 0 (RW and ACCESS due to the optional `GET` argument)"]),
    "mset": (-3, ["denyoom", "write"], 1, -1, 2, ["@slow", "@string", "@write"], ["OW UPDATE index 1 range -1 2"]),
    "msetnx": (-3, ["denyoom", "write"], 1, -1, 2, ["@slow", "@string", "@write"], ["OW INSERT index 1 range -1 2"]),
    "mget": (-2, ["fast", "readonly"], 1, -1, 1, ["@fast", "@read", "@string"], ["RO ACCESS index 1 range -1"]),
    "del": (-2, ["write"], 1, -1, 1, ["@keyspace", "@slow", "@write"], ["RM DELETE index 1 range -1"]),
    "unlink": (-2, ["fast", "write"], 1, -1, 1, ["@fast", "@keyspace", "@write"], ["RM DELETE index 1 range -1"]),
    "exists": (-2, ["fast", "readonly"], 1, -1, 1, ["@fast", "@keyspace", "@read"], ["RO index 1 range -1"]),
    "incr": (2, ["denyoom", "fast", "write"], 1, 1, 1, ["@fast", "@string", "@write"],
             ["RW ACCESS UPDATE index 1 range 0"]),
    "incrby": (3, ["denyoom", "fast", "write"], 1, 1, 1, ["@fast", "@string", "@write"],
               ["RW ACCESS UPDATE index 1 range 0"]),
    "incrbyfloat": (3, ["denyoom", "fast", "write"], 1, 1, 1, ["@fast", "@string", "@write"],
                    ["RW ACCESS UPDATE index 1 range 0"]),
    "expire": (-3, ["fast", "write"], 1, 1, 1, ["@fast", "@keyspace", "@write"], ["RW UPDATE index 1 range 0"]),
    # arity -2, not Redis's 2: KeyDB's TTL key [member] (per-member TTL, docs/divergences.md)
    "ttl": (-2, ["fast", "readonly"], 1, 1, 1, ["@fast", "@keyspace", "@read"], ["RO ACCESS index 1 range 0"]),
    "setex": (4, ["denyoom", "write"], 1, 1, 1, ["@slow", "@string", "@write"], ["OW UPDATE index 1 range 0"]),
    "getrange": (4, ["readonly"], 1, 1, 1, ["@read", "@slow", "@string"], ["RO ACCESS index 1 range 0"]),
    "rename": (3, ["write"], 1, 2, 1, ["@keyspace", "@slow", "@write"],
               ["RW ACCESS DELETE index 1 range 0", "OW UPDATE index 2 range 0"]),
    "copy": (-3, ["denyoom", "write"], 1, 2, 1, ["@keyspace", "@slow", "@write"],
             ["RO ACCESS index 1 range 0", "OW UPDATE index 2 range 0"]),
    "lcs": (-3, ["readonly"], 1, 2, 1, ["@read", "@slow", "@string"], ["RO ACCESS index 1 range 1"]),
    "scan": (-2, ["readonly"], 0, 0, 0, ["@keyspace", "@read", "@slow"], []),
    "keys": (2, ["readonly"], 0, 0, 0, ["@dangerous", "@keyspace", "@read", "@slow"], []),
    "ping": (-1, ["fast"], 0, 0, 0, ["@connection", "@fast"], []),
    "echo": (2, ["fast", "loading", "stale"], 0, 0, 0, ["@connection", "@fast"], []),
    "auth": (-2, ["allow_busy", "fast", "loading", "no_auth", "noscript", "stale"], 0, 0, 0,
             ["@connection", "@fast"], []),
    "hello": (-1, ["allow_busy", "fast", "loading", "no_auth", "noscript", "stale"], 0, 0, 0,
              ["@connection", "@fast"], []),
    "select": (2, ["fast", "loading", "stale"], 0, 0, 0, ["@connection", "@fast"], []),
    "quit": (-1, ["allow_busy", "fast", "loading", "no_auth", "noscript", "stale"], 0, 0, 0,
             ["@connection", "@fast"], []),
    "reset": (1, ["allow_busy", "fast", "loading", "no_auth", "noscript", "stale"], 0, 0, 0,
              ["@connection", "@fast"], []),
    "info": (-1, ["loading", "stale"], 0, 0, 0, ["@dangerous", "@slow"], []),
    "dbsize": (1, ["fast", "readonly"], 0, 0, 0, ["@fast", "@keyspace", "@read"], []),
    "flushall": (-1, ["write"], 0, 0, 0, ["@dangerous", "@keyspace", "@slow", "@write"], []),
    "time": (1, ["fast", "loading", "stale"], 0, 0, 0, ["@fast"], []),
    "lastsave": (1, ["fast", "loading", "stale"], 0, 0, 0, ["@admin", "@dangerous", "@fast"], []),
    "shutdown": (-1, ["admin", "allow_busy", "loading", "no_multi", "noscript", "stale"], 0, 0, 0,
                 ["@admin", "@dangerous", "@slow"], []),
    "command": (-1, ["loading", "stale"], 0, 0, 0, ["@connection", "@slow"], []),
    "client": (-2, [], 0, 0, 0, ["@slow"], []),
    "config": (-2, [], 0, 0, 0, ["@slow"], []),
    "client|setname": (3, ["loading", "noscript", "stale"], 0, 0, 0, ["@connection", "@slow"], []),
    "client|getname": (2, ["loading", "noscript", "stale"], 0, 0, 0, ["@connection", "@slow"], []),
    "client|id": (2, ["loading", "noscript", "stale"], 0, 0, 0, ["@connection", "@slow"], []),
    "client|list": (-2, ["admin", "loading", "noscript", "stale"], 0, 0, 0,
                    ["@admin", "@connection", "@dangerous", "@slow"], []),
    "client|kill": (-3, ["admin", "loading", "noscript", "stale"], 0, 0, 0,
                    ["@admin", "@connection", "@dangerous", "@slow"], []),
    "config|get": (-3, ["admin", "loading", "noscript", "stale"], 0, 0, 0, ["@admin", "@dangerous", "@slow"], []),
    "config|set": (-4, ["admin", "loading", "noscript", "stale"], 0, 0, 0, ["@admin", "@dangerous", "@slow"], []),
    "command|count": (2, ["loading", "stale"], 0, 0, 0, ["@connection", "@slow"], []),
    "command|info": (-2, ["loading", "stale"], 0, 0, 0, ["@connection", "@slow"], []),
    "command|docs": (-2, ["loading", "stale"], 0, 0, 0, ["@connection", "@slow"], []),
    "command|getkeys": (-4, ["loading", "stale"], 0, 0, 0, ["@connection", "@slow"], []),
    "command|getkeysandflags": (-4, ["loading", "stale"], 0, 0, 0, ["@connection", "@slow"], []),
    "config|help": (2, ["loading", "stale"], 0, 0, 0, ["@slow"], []),
    "save": (1, ["admin", "no_async_loading", "no_multi", "noscript"], 0, 0, 0, ["@admin", "@dangerous", "@slow"], []),
    "role": (1, ["fast", "loading", "noscript", "stale"], 0, 0, 0, ["@admin", "@dangerous", "@fast"], []),
    "wait": (3, ["noscript"], 0, 0, 0, ["@connection", "@slow"], []),
    "getdel": (2, ["fast", "write"], 1, 1, 1, ["@fast", "@string", "@write"], ["RW ACCESS DELETE index 1 range 0"]),
    "getex": (-2, ["fast", "write"], 1, 1, 1, ["@fast", "@string", "@write"],
              ["RW ACCESS UPDATE index 1 range 0 (RW and UPDATE because it changes the TTL)"]),
    "append": (3, ["denyoom", "fast", "write"], 1, 1, 1, ["@fast", "@string", "@write"], ["RW INSERT index 1 range 0"]),
    "setnx": (3, ["denyoom", "fast", "write"], 1, 1, 1, ["@fast", "@string", "@write"], ["OW INSERT index 1 range 0"]),
    "persist": (2, ["fast", "write"], 1, 1, 1, ["@fast", "@keyspace", "@write"], ["RW UPDATE index 1 range 0"]),
    "renamenx": (3, ["fast", "write"], 1, 2, 1, ["@fast", "@keyspace", "@write"],
                 ["RW ACCESS DELETE index 1 range 0", "OW INSERT index 2 range 0"]),
    "object|encoding": (3, ["readonly"], 2, 2, 1, ["@keyspace", "@read", "@slow"], ["RO index 2 range 0"]),
}
NAMES = sorted(REDIS_INFO)


def _s(x) -> str:
    return x.decode() if isinstance(x, bytes) else str(x)


def _map(flat) -> dict:
    return {_s(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}


def info_of(name: str) -> list:
    return docs.info_reply(lookup(name))


@pytest.mark.parametrize("name", NAMES)
def test_arity_and_key_positions_match_redis(name):
    arity, _, first, last, step, _, _ = REDIS_INFO[name]
    reply = info_of(name)
    assert _s(reply[0]) == name
    assert (reply[1], reply[3], reply[4], reply[5]) == (arity, first, last, step)


def test_flags_match_redis():
    # COMMAND INFO flags exactly as Redis 7.0 names them (no_auth, allow_busy with an
    # underscore; internal markers such as "sentinel" are not part of the reply).
    bad = {}
    for name in NAMES:
        got = sorted(_s(f) for f in info_of(name)[2])
        if got != REDIS_INFO[name][1]:
            bad[name] = {"marekvs": got, "redis": REDIS_INFO[name][1]}
    assert not bad, bad


ACL_CATEGORIES = {"keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
                  "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous",
                  "connection", "transaction", "scripting"}


def test_acl_categories_are_redis_categories():
    bad = {}
    for cmd in ALL:
        cats = {_s(c) for c in docs.info_reply(cmd)[6]}
        if not cats or not {c.lstrip("@") for c in cats} <= ACL_CATEGORIES or (
                not cmd.subcommands and len(cats & {"@fast", "@slow"}) != 1):
            bad[cmd.fullname] = sorted(cats)
    # every category must be one Redis knows, and every command is either @fast or @slow
    assert not bad, bad


def test_acl_categories_match_redis():
    bad = {}
    for name in NAMES:
        got = sorted(_s(f) for f in info_of(name)[6])
        if got != REDIS_INFO[name][5]:
            bad[name] = {"marekvs": got, "redis": REDIS_INFO[name][5]}
    assert not bad, bad


@pytest.mark.parametrize("name", NAMES)
def test_key_specs_match_redis(name):
    # the whole key spec as COMMAND INFO shows it: notes, flags, begin_search, find_keys
    want = [docs.key_spec_reply(KeySpec.parse(text)) for text in REDIS_INFO[name][6]]
    assert info_of(name)[8] == want


SCRIPT_RUNNERS = {"eval", "evalsha", "fcall"}


def _keys_not_channels(c) -> bool:
    from marekvs.commands.table import KeyFlag

    return bool(c.key_specs) and not all(spec.flags & KeyFlag.NOT_KEY for spec in c.key_specs)


@pytest.mark.parametrize("cmd", [c for c in ALL if _keys_not_channels(c)],
                         ids=[c.fullname for c in ALL if _keys_not_channels(c)])
def test_key_spec_access_flags(cmd):
    # each spec says exactly one of RO/RW/OW/RM; a write command writes through at least
    # one of them (COPY reads its source), a read-only one through none (shard channels,
    # NOT_KEY specs, have none: SSUBSCRIBE, SPUBLISH; PFCOUNT is declared readonly and
    # may_replicate with an RW spec by Redis: it may rewrite the sketch's cached cardinality)
    access = [{_s(f) for f in _map(spec)["flags"]} & {"RO", "RW", "OW", "RM"} for spec in docs.info_reply(cmd)[8]]
    assert all(len(a) == 1 for a in access), access
    if cmd.fullname == "xreadgroup":
        # Redis 7.0.15 declares XREADGROUP's keys "RO ACCESS" although it writes the group
        # (Redis 7.2 made it RW); COMMAND INFO answers as the reference server does
        assert access == [{"RO"}]
    elif cmd.is_write:
        assert any(a != {"RO"} for a in access), access
    elif cmd.name in SCRIPT_RUNNERS:
        # EVAL, EVALSHA, FCALL write through the script they run, not themselves: no write
        # flag, and RW keys (Redis: "we assume the worst")
        assert access == [{"RW"}], access
    elif "may_replicate" in cmd.flags:
        assert cmd.key_specs[0].notes, "an RW spec of a readonly command says why"
    else:
        assert all(a == {"RO"} for a in access), access


def test_info_reply_shape():
    reply = info_of("client")
    assert len(reply) == 10
    subs = {_s(s[0]) for s in reply[9]}
    assert {"client|setname", "client|getname", "client|id", "client|list"} <= subs
    for s in reply[9]:
        assert len(s) == 10 and _s(s[0]).startswith("client|")


# -- COMMAND DOCS --------------------------------------------------------------------------

@pytest.mark.parametrize("cmd", [c for c in TABLE], ids=[c.name for c in TABLE])
def test_doc_reply_has_the_required_fields(cmd):
    m = _map(docs.doc_reply(cmd))
    for field in ("summary", "since", "group", "complexity"):
        assert _s(m[field]).strip(), field
    if cmd.syntax:
        assert m.get("arguments"), f"{cmd.name} declares a syntax but COMMAND DOCS has no arguments"
        for a in m["arguments"]:
            am = _map(a)
            assert _s(am["name"]) and _s(am["type"]) in {
                "string", "integer", "double", "key", "pattern", "unix-time", "pure-token", "oneof", "block"}
    if cmd.subcommands:
        subs = _map(m["subcommands"])
        assert set(subs) == {s.fullname for s in cmd.subcommands.values()}


def test_doc_reply_of_set():
    m = _map(docs.doc_reply(lookup("set")))
    assert _s(m["group"]) == "string" and _s(m["since"]) == "1.0.0"
    args = [_map(a) for a in m["arguments"]]
    assert [_s(a["name"]) for a in args[:2]] == ["key", "value"]
    assert _s(args[0]["type"]) == "key" and _s(args[1]["type"]) == "string"
    # the options are optional
    for a in args[2:]:
        assert "optional" in {_s(f) for f in a.get("flags", [])}, a


def test_parse_syntax_shapes():
    assert docs.parse_syntax("") == []
    assert docs.parse_syntax("key") == [{"name": "key", "type": "key", "key_spec_index": 0}]
    got = docs.parse_syntax("key [key ...]")
    assert len(got) == 1 and got[0]["type"] == "key" and "multiple" in got[0]["flags"]
    got = docs.parse_syntax("[NX | XX]")
    assert len(got) == 1 and got[0]["type"] == "oneof" and "optional" in got[0]["flags"]
    assert [a["token"] for a in got[0]["arguments"]] == ["NX", "XX"]
    got = docs.parse_syntax("key seconds")
    assert got[1] == {"name": "seconds", "type": "integer"}


def test_parse_syntax_repeated_group():
    # "key value [key value ...]" (MSET): Redis 7.0 COMMAND DOCS has ONE argument, a
    # block {key, value} flagged "multiple"; redis-cli turns it into the hint
    # "key value [key value ...]".
    got = docs.parse_syntax("key value [key value ...]")
    assert len(got) == 1, got
    assert got[0]["type"] == "block" and "multiple" in got[0]["flags"]
    assert [a["name"] for a in got[0]["arguments"]] == ["key", "value"]


@pytest.mark.parametrize("name", ["client", "config", "command", "debug", "object"])
def test_help_lists_every_subcommand_as_redis_formats_it(name):
    """``<CONTAINER> HELP``: simple strings, Redis's first and last lines, and a line
    for every subcommand the table declares (a help that forgets one fails)."""
    from marekvs.server.resp import Simple

    help_ = TABLE.lookup(name.encode()).subcommands["help"]
    assert (help_.arity, help_.flags) == (2, ("loading", "stale"))
    lines = help_.handler(None, [name.encode(), b"help"])
    assert all(type(x) is Simple for x in lines)
    text = [x.decode() for x in lines]
    assert text[0] == f"{name.upper()} <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert text[-2] == "HELP" and text[-1].strip() in ("Print this help.", "Prints this help.")
    listed = {t.split()[0] for t in text[1:] if not t.startswith((" ", "("))}  # "(no subcommand)"
    assert listed == {s.upper() for s in TABLE.lookup(name.encode()).subcommands}
    lines.append(Simple(b"x"))  # the reply is the caller's: the next call is unchanged
    assert help_.handler(None, [name.encode(), b"help"]) == lines[:-1]
