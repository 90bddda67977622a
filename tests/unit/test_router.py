"""The router (marekvs/shards/router.py): every command of the table has a class, and the
fast key path finds the keys ``Command.keys_of`` (COMMAND GETKEYS) finds, over the COMMAND
GETKEYS cases recorded from redis-server (tests/unit/test_key_specs.py) and over generated
arguments of every command with keys."""

from __future__ import annotations

import random

import pytest

from marekvs.commands.table import Command, build_table
from marekvs.core.partition import ShardMap, partition_of
from marekvs.shards import router as R
from tests.unit.test_key_specs import GETKEYS_CASES, REDIS_LIKE


@pytest.fixture(scope="module")
def table():
    """The node's table, with the Redis declarations it lacks (as test_key_specs has it)."""
    t = build_table()
    for name, cmd in REDIS_LIKE.items():
        if name.encode() not in t.commands:
            t.add(cmd)
    return t


@pytest.fixture(scope="module")
def router(table):
    return R.Router(table, ShardMap.even(3))


def resolve(table, args: list[bytes]) -> Command | None:
    """The command ``args`` name, if they pass its arity (as ``Node.admit`` checks it)."""
    cmd = table.commands.get(args[0].lower())
    if cmd is None:
        return None
    if cmd.subcommands and len(args) > 1:
        cmd = cmd.subcommands.get(args[1].lower().decode("latin-1"))
        if cmd is None:
            return None
    n, a = len(args), cmd.arity
    return None if (a > 0 and n != a) or n < -a else cmd


def test_every_command_has_one_class(table):
    missing = [c.fullname for c in table.all_commands() if R.class_of(c) is None]
    assert not missing, f"commands without a shard class (add them to router.KEYLESS): {missing}"
    assert all(R.class_of(c) in R.CLASSES for c in table.all_commands())


def test_keyless_names_only_commands_without_keys(table):
    by_name = {c.fullname: c for c in table.all_commands()}
    assert not [n for n in R.KEYLESS if n not in by_name], "KEYLESS names a command the table lacks"
    assert not [n for n in R.KEYLESS if by_name[n].has_keys], "KEYLESS names a command with keys"


def test_classes_of_some_commands(table, router):
    cls = {name: router.class_of(table.lookup(name.encode())) for name in (
        "get", "set", "hset", "xadd", "object|encoding", "mset", "del", "rename", "evalsha", "zunionstore", "exec",
        "ping", "hello", "subscribe", "multi", "info", "scan", "flushall", "config|set", "publish", "acl|setuser",
        "function|load")}
    assert cls == {
        "get": "key", "set": "key", "hset": "key", "xadd": "key", "object|encoding": "key", "mset": "keys",
        "del": "keys", "rename": "keys", "evalsha": "keys", "zunionstore": "keys", "exec": "keys", "ping": "front",
        "hello": "front", "subscribe": "front", "multi": "front", "info": "all", "scan": "all", "flushall": "all",
        "config|set": "all", "publish": "all", "acl|setuser": "node-record", "function|load": "node-record"}


def test_a_key_command_reads_its_key_at_its_position(table, router):
    for cmd in table.all_commands():
        if router.class_of(cmd) == R.KEY:
            pos = router.route(cmd).pos
            assert pos >= 1 and abs(cmd.arity) > pos, cmd.fullname  # the arity check leaves the key there


@pytest.mark.parametrize("args, keys, _", GETKEYS_CASES, ids=[b" ".join(c[0]).decode("latin-1") for c in GETKEYS_CASES])
def test_fast_path_finds_the_keys_of_the_getkeys_cases(table, router, args, keys, _):
    cmd = resolve(table, args)
    if cmd is None:
        return  # refused before routing (arity, unknown): nothing to route
    assert router.keys(cmd, args) == cmd.keys_of(args)
    if isinstance(keys, list) and cmd.has_keys:
        assert router.keys(cmd, args) == keys


# arguments the generated calls are made of: keys, counts (plain, and the forms only Redis's
# parsing reads: "01", " 2", "1x", huge), and the keywords key specs search for
TOKENS = [b"a", b"b", b"c", b"{t}x", b"0", b"1", b"2", b"3", b"9", b"-1", b"01", b" 2", b"1x", b"4294967297",
          b"STREAMS", b"streams", b"STORE", b"STOREDIST", b"BY", b"GET", b"KEYS", b"WEIGHTS", b"$", b"0-0"]


def test_fast_path_finds_the_keys_of_generated_calls_of_every_command(table, router):
    rnd = random.Random(33)
    owner = ShardMap.even(3).owner
    checked = 0
    for cmd in table.all_commands():
        if not cmd.has_keys:
            assert router.keys(cmd, [b"x"] * 4) == [] or cmd.fullname == "exec"
            continue
        head = [cmd.parent.encode(), cmd.name.encode()] if cmd.parent else [cmd.name.encode()]
        lo = max(abs(cmd.arity), len(head) + 1)
        for n in range(lo, lo + 9 if cmd.arity < 0 else lo + 1):
            for _ in range(40):
                args = head + [rnd.choice(TOKENS) for _ in range(n - len(head))]
                want = cmd.keys_of(args)
                assert router.keys(cmd, args) == want, (cmd.fullname, args)
                assert router.shards_of(cmd, args) == {owner[partition_of(k)] for k in want}
                if router.class_of(cmd) == R.KEY:
                    assert want == [args[router.route(cmd).pos]]
                    assert router.shard_of_key(cmd, args) == owner[partition_of(want[0])]
                checked += 1
    assert checked > 10_000


def test_numkeys_commands_take_the_fast_path(table, router, monkeypatch):
    # valid counts are read by the compiled steps: keys_of is not called
    calls = []
    monkeypatch.setattr(Command, "keys_of", lambda self, args: calls.append(args) or [])
    for args in ([b"evalsha", b"sha", b"2", b"k1", b"k2", b"arg"], [b"zunionstore", b"d", b"2", b"a", b"b"],
                 [b"fcall", b"f", b"0"], [b"mset", b"a", b"1", b"b", b"2"], [b"del", b"a", b"b"]):
        cmd = resolve(table, args)
        assert router.route(cmd).steps is not None
        router.keys(cmd, args)
    assert router.keys(resolve(table, [b"evalsha", b"s", b"1", b"k"]), [b"evalsha", b"s", b"1", b"k"]) == [b"k"]
    assert not calls


def test_admit_then_execute_is_dispatch(tmp_path):
    """``Node.admit`` + ``Node.execute`` (the halves a shard worker splits a command into)
    answer and count as ``Node.dispatch`` does."""
    from marekvs.commands.reply import QUEUED, Err
    from marekvs.config import Config
    from marekvs.node import Node

    node = Node(Config(data_dir=str(tmp_path / "db"), node_id=1, durability="no"))
    try:
        ctx = node.new_context()
        node.dispatch(ctx, [b"SET", b"k", b"v"])
        for refused in ([b"NOSUCH"], [b"GET"], [b"CLIENT", b"NOSUCH"]):
            r = node.admit(ctx, refused)
            assert type(r) is Err and r == node.dispatch(ctx, refused)
        get = node.admit(ctx, [b"GET", b"k"])
        assert isinstance(get, Command) and get.name == "get"
        total, calls = node.stats.total_commands, get.calls
        assert node.execute(ctx, get, [b"GET", b"k"]) == b"v" == node.dispatch(ctx, [b"GET", b"k"])
        assert (node.stats.total_commands, get.calls) == (total + 1, calls + 2)  # admitted once by dispatch
        sub = node.admit(ctx, [b"CLIENT", b"SETNAME", b"x"])
        assert sub.fullname == "client|setname" and ctx.name == b""  # admitted, not run
        node.execute(ctx, sub, [b"CLIENT", b"SETNAME", b"x"])
        assert ctx.name == b"x"
        node.dispatch(ctx, [b"MULTI"])
        assert node.admit(ctx, [b"INCR", b"n"]) is QUEUED and len(ctx.multi) == 1
        assert node.dispatch(ctx, [b"EXEC"]) == [1]
    finally:
        node.close()
