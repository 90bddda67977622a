"""In-process tests of the scripting engine (``node/scripting/``) on a real node: the
sandbox against escapes (Python objects, the interpreter's real globals, bytecode,
read-only tables, metatables, coroutines), runaway scripts (infinite loops killed through
the hook, coroutines included, deep recursion, unbounded allocation under the memory cap,
FUNCTION LOAD's timeout) with the node working afterwards; a script's writes are one
replication-log entry; time is frozen during a script; library records (resolution of
clashing libraries, reload after a restart, FUNCTION FLUSH/DELETE tombstones, FLUSHALL);
and the pure parts: shebang and metadata parsing (sdssplitargs), the FUNCTION DUMP payload
(CRC-64, LZF, RDB strings), Redis's rand48, the conversions' stack-height rule, the C
libraries' corner cases."""

from __future__ import annotations

import time

import pytest

from marekvs.commands.reply import Err, Map, SetReply, Simple
from marekvs.config import Config
from marekvs.core import envelope as env
from marekvs.core import funclib
from marekvs.core import keys as K
from marekvs.node import Node
from marekvs.node.scripting import functions as F
from marekvs.node.scripting import libs
from marekvs.node.scripting.runtime import LLONG_MIN, c_llong


@pytest.fixture
def node(tmp_path):
    n = Node(Config(data_dir=str(tmp_path / "data"), node_id=1, durability="no"))
    yield n
    n.close()


def run(node, *args):
    ctx = getattr(node, "_test_ctx", None)
    if ctx is None:
        ctx = node._test_ctx = node.new_context()
    return node.dispatch(ctx, [a if isinstance(a, bytes) else str(a).encode() for a in args])


def ev(node, script, *args):
    return run(node, "EVAL", script, len(args), *args) if args else run(node, "EVAL", script, 0)


# -- the sandbox ------------------------------------------------------------------------------

@pytest.mark.parametrize("script", [
    "return os.execute('true')", "return io.open('/etc/passwd')", "return debug.getinfo(1)",
    "return python.eval('1')", "return require('os')", "return dofile('/etc/passwd')",
    "return loadfile('/etc/passwd')", "return getfenv(0)", "return setfenv(1, {})", "return newproxy()",
    "return package.loaded", "return module('x')",
])
def test_the_dangerous_globals_are_absent(node, script):
    r = ev(node, script)
    assert isinstance(r, Err) and "Script attempted to access nonexistent global variable" in r


@pytest.mark.parametrize("script", [
    "return redis.call.__class__", "return redis.call['__globals__']", "return cjson.encode.__self__",
    "return tostring(redis.pcall.__init__)", "local f = redis.call return f.__code__",
    "return bit.band.func_globals",
])
def test_python_objects_expose_nothing(node, script):
    r = ev(node, script)
    assert isinstance(r, Err) and "not allowed" in r or "AttributeError" in str(r), r


def test_no_chunk_reaches_the_real_globals(node):
    # every way to compile or run code lands in the sandbox, never in the interpreter's
    # own globals (which hold os, io, debug and lupa's python table)
    for script in [
        "return loadstring('return type(os)')()",
        "return load(function() if x then return nil end x = 1 return 'return type(io)' end)()",
        "return coroutine.wrap(function() return type(debug) end)()",
        "local co = coroutine.create(function() return type(python) end) local ok, v = coroutine.resume(co) "
        "return v",
        "return string.gsub('a', 'a', function() return type(os) end)",
        "return pcall(function() return type(os) end)",
    ]:
        r = ev(node, script)
        assert r != b"table", (script, r)
    assert ev(node, "local f, e = loadstring(string.dump(function() return 1 end)) return e") == \
        b"[string \"\x1bLuaQ\"]:1: unexpected symbol near 'char(27)'"


def test_tables_stay_read_only_across_scripts(node):
    attempts = [
        "string.upper = nil", "rawset(string, 'upper', nil)", "table.insert(string, 1)",
        "setmetatable(string, {})", "getmetatable('').__index = {}", "getmetatable(_G).__index = nil",
        "rawset(_G, 'x', 1)", "redis.call = function() return 'pwned' end", "cjson.encode = nil",
        "local mt = getmetatable('') mt.__index.upper = nil", "math.random = function() return 4 end",
        "_G._G = 1", "coroutine.create = nil", "for k in pairs(string) do rawset(string, k, nil) end",
    ]
    for script in attempts:
        r = ev(node, script)
        assert isinstance(r, Err) and "readonly table" in r, (script, r)
    # nothing changed for the next script
    assert ev(node, "return ('x'):upper()") == b"X"
    assert ev(node, "return redis.call('ping')") == Simple(b"PONG")
    assert ev(node, "return cjson.encode({1})") == b"[1]"
    assert ev(node, "return type(math.random())") == b"number"


def test_globals_do_not_leak_between_scripts(node):
    assert isinstance(ev(node, "leak = 1"), Err)
    assert "nonexistent global variable 'leak'" in ev(node, "return leak")
    # KEYS/ARGV are the current call's
    assert run(node, "EVAL", "return {KEYS[1], ARGV[1]}", 1, "k1", "a1") == [b"k1", b"a1"]
    assert run(node, "EVAL", "return {#KEYS, #ARGV}", 0) == [0, 0]


# -- runaway scripts ----------------------------------------------------------------------------

LOOPS = [
    "local i = 0 while true do i = i + 1 end",
    "while true do pcall(function() while true do end end) end",
    "while true do local ok, e = pcall(error, 'x') end",
    "local co = coroutine.wrap(function() while true do end end) co()",
    "while true do coroutine.resume(coroutine.create(function() while true do end end)) end",
    "local function f() return f() end return f()",
    "while true do redis.pcall('ping') end",
]


@pytest.mark.parametrize("script", LOOPS)
def test_an_endless_script_is_killed_and_the_node_goes_on(node, script):
    node.set_tunable("busy-reply-threshold", "20")
    sc = node.scripting
    polls = []

    def poll():  # what the RESP server does while the script is busy: here, a SCRIPT KILL
        polls.append(sc.running.name)
        if len(polls) == 2:
            assert sc.kill(True) is True

    sc.busy_poll = poll
    t = time.monotonic()
    r = ev(node, script)
    assert isinstance(r, Err) and r.startswith("ERR Script killed by user with SCRIPT KILL... script: "), r
    assert time.monotonic() - t < 30
    assert sc.running is None
    assert ev(node, "local n = 0 for i = 1, 300000 do n = n + 1 end return n") == 300000  # the hook is reset
    assert run(node, "SET", "after", "1") == Simple(b"OK")


def test_kill_is_refused_after_a_write_and_for_the_other_kind(node):
    node.set_tunable("busy-reply-threshold", "20")
    sc = node.scripting
    seen = {}

    def poll():
        seen["script kill"] = sc.kill(True)
        seen["function kill"] = sc.kill(False)
        sc.running.dirty = False  # (let the test end the script)
        sc.kill(True)

    sc.busy_poll = poll
    r = ev(node, "redis.call('set', 'k', 'v') while true do end")
    assert seen["script kill"] == Err("UNKILLABLE Sorry the script already executed write commands against the "
                                      "dataset. You can either wait the script termination or kill the server "
                                      "in a hard way using the SHUTDOWN NOSAVE command.")
    assert seen["function kill"] == seen["script kill"]  # (a write makes any kill UNKILLABLE first)
    assert isinstance(r, Err)
    assert sc.kill(True) == Err("NOTBUSY No scripts in execution right now.")


def test_a_zero_threshold_never_makes_a_script_busy(node):
    node.set_tunable("busy-reply-threshold", "0")
    polls = []
    node.scripting.busy_poll = lambda: polls.append(1)
    assert ev(node, "local n = 0 for i = 1, 3000000 do n = n + 1 end return n") == 3000000
    assert polls == []


@pytest.mark.parametrize("script, text", [
    ("local function f() f() end f()", "stack overflow"),
    ("local function f(n) return 1 + f(n) end return f(1)", "stack overflow"),
    ("local function f() pcall(f) end f() return 'survived'", None),
    ("local t = {} t[1] = t return cjson.encode(t)", "excessive nesting"),
    ("local s = '[' for i = 1, 2000 do s = s .. '[' end return cjson.decode(s)",
     "Found too many nested data structures (1001) at character 1001"),
])
def test_deep_recursion_is_an_error(node, script, text):
    r = ev(node, script)
    if text is None:
        assert r == b"survived" or isinstance(r, Err)
    else:
        assert isinstance(r, Err) and text in r, r
    assert ev(node, "return 1") == 1


def test_the_memory_cap_ends_a_greedy_script_and_memory_comes_back(tmp_path):
    n = Node(Config(data_dir=str(tmp_path / "small"), node_id=1, durability="no"))
    try:
        n.scripting = type(n.scripting)(n, max_memory=32 << 20)
        for script in ["local t = {} local i = 0 while true do i = i + 1 t[i] = string.rep('x', 1000) .. i end",
                       "return string.rep('x', 64 * 1024 * 1024)",
                       "local s = 'x' while true do s = s .. s end"]:
            r = ev(n, script)
            assert r == Err("ERR Error running script %s, not enough memory " % libs.sha1hex(script.encode()).decode())
            assert n.scripting.eval_vm.memory() < 16 << 20  # the garbage was collected
            assert ev(n, "return #string.rep('y', 1000)") == 1000
        r = run(n, "FUNCTION", "LOAD", "#!lua name=big\nlocal s = 'x' while true do s = s .. s end")
        assert r == Err("ERR Error registering functions: ERR not enough memory")
        assert run(n, "FUNCTION", "LOAD", lib("small", "sf")) == b"small"
    finally:
        n.close()


def test_function_load_times_out(node):
    r = run(node, "FUNCTION", "LOAD", "#!lua name=slow\nlocal i = 0 while true do i = i + 1 end")
    assert r == Err("ERR Error registering functions: ERR FUNCTION LOAD timeout")
    assert run(node, "FUNCTION", "LOAD", "#!lua name=fast\nredis.register_function('f', function() return 1 end)") \
        == b"fast"
    assert run(node, "FCALL", "f", 0) == 1


# -- one batch, frozen time -----------------------------------------------------------------------

def test_a_script_is_one_replication_log_entry(node):
    eng = node.engine
    eng.commit()
    first = eng.log_seq
    ev(node, "for i = 1, 50 do redis.call('set', 'k' .. i, i) end redis.call('del', 'k3') return 1")
    assert len(eng.pending_log) == 50 and eng.next_seq == first + 1
    eng.commit()
    assert eng.log_seq == first + 1  # one entry for the whole script


def test_time_is_frozen_while_a_script_runs(node):
    r = ev(node, """
        redis.call('set', 'exp', 'v', 'PX', 30)
        local t0 = redis.call('pttl', 'exp')
        local n = 0
        for i = 1, 2000000 do n = n + i end  -- well past the deadline
        return {redis.call('get', 'exp'), redis.call('pttl', 'exp'), t0}
    """)
    assert r[0] == b"v" and r[1] == r[2] == 30


def test_a_script_that_writes_sets_the_callers_last_write(node):
    ctx = node.new_context()
    node.dispatch(ctx, [b"EVAL", b"return redis.call('set', 'w', 1)", b"0"])
    assert ctx.last_write_seq == node.engine.next_seq


# -- function library records ----------------------------------------------------------------------

def lib(name: str, *funcs: str, body: str = "1") -> bytes:
    regs = "\n".join(f"redis.register_function('{f}', function() return {body} end)" for f in funcs)
    return f"#!lua name={name}\n{regs}\n".encode()


def test_clashing_libraries_resolve_by_record_version(node):
    sc = node.scripting
    stamp = node.hlc.now
    a, b = stamp(), stamp()
    recs = [(K.encode_function_key(b"newer"), funclib.new(lib("newer", "f", "g", body="'new'"), b, 2)),
            (K.encode_function_key(b"older"), funclib.new(lib("older", "f", body="'old'"), a, 3))]
    node.ks.apply(recs)  # both arrive (as from peers): the older keeps 'f'
    assert run(node, "FCALL", "f", 0) == b"old"
    assert sc.left_out == [b"newer"]
    assert [lib_.name for lib_ in sc.catalog.libraries.values()] == [b"older"]
    assert run(node, "FUNCTION", "DELETE", "older") is not None
    assert run(node, "FCALL", "f", 0) == b"new"  # the newer library loads once 'f' is free
    assert run(node, "FCALL", "g", 0) == b"new"


def test_functions_survive_flushall_and_restart(tmp_path):
    path = str(tmp_path / "data")
    n = Node(Config(data_dir=path, node_id=1, durability="no"))
    run(n, "FUNCTION", "LOAD", lib("keep", "k1", "k2", body="'kept'"))
    run(n, "FUNCTION", "LOAD", lib("gone", "x"))
    run(n, "FUNCTION", "DELETE", "gone")
    run(n, "SET", "key", "v")
    run(n, "FLUSHALL")
    assert run(n, "FCALL", "k1", 0) == b"kept"
    assert run(n, "DBSIZE") == 0 and run(n, "KEYS", "*") == []
    n.close()
    n = Node(Config(data_dir=path, node_id=1, durability="no"))
    try:
        assert run(n, "FCALL", "k2", 0) == b"kept"
        assert run(n, "FCALL", "x", 0) == Err("ERR Function not found")
        assert sorted(lib_.name for lib_ in n.scripting.catalog.libraries.values()) == [b"keep"]
    finally:
        n.close()


def test_library_records_are_not_keys_and_not_on_the_change_feed(node):
    seen = []
    node.changes.subscribe(lambda changes: seen.extend(ik for ik, _, _ in changes))
    run(node, "FUNCTION", "LOAD", lib("nk", "nkf"))
    run(node, "SET", "real", "1")
    assert seen == [K.encode_string_key(b"real")]
    ikey = K.encode_function_key(b"nk")
    rec = node.engine.get(ikey)
    assert funclib.code_of(rec, node.ks.now()) == lib("nk", "nkf")
    assert run(node, "DBSIZE") == 1 and run(node, "TYPE", "nk") == Simple(b"none")
    run(node, "FUNCTION", "FLUSH")
    assert env.is_tombstone(node.engine.get(ikey))


def test_function_restore_policies(node):
    run(node, "FUNCTION", "LOAD", lib("one", "a"))
    dump = run(node, "FUNCTION", "DUMP")
    assert run(node, "FUNCTION", "RESTORE", dump) == Err("ERR Library one already exists")
    run(node, "FUNCTION", "LOAD", lib("two", "b"))
    assert run(node, "FUNCTION", "RESTORE", dump, "REPLACE") == Simple(b"OK")
    assert run(node, "FUNCTION", "RESTORE", dump, "FLUSH") == Simple(b"OK")
    assert [x[1] for x in run(node, "FUNCTION", "LIST")] == [b"one"]
    run(node, "FUNCTION", "LOAD", lib("three", "c"))
    clash = F.dump([lib("four", "c")])
    assert run(node, "FUNCTION", "RESTORE", clash) == Err("ERR Function c already exists")
    assert run(node, "FUNCTION", "RESTORE", dump[:-1] + bytes([dump[-1] ^ 1])) == \
        Err("ERR DUMP payload version or checksum are wrong")


def test_function_stats_and_list_shapes(node):
    run(node, "FUNCTION", "LOAD", b"#!lua name=shp\nredis.register_function{function_name='s1', callback=function() "
        b"return 1 end, flags={'no-writes', 'allow-stale'}, description='d'}")
    listed = run(node, "FUNCTION", "LIST", "WITHCODE")
    assert isinstance(listed[0], Map) and listed[0][:4] == [b"library_name", b"shp", b"engine", b"LUA"]
    f = listed[0][5][0]
    assert f[:4] == [b"name", b"s1", b"description", b"d"] and isinstance(f[5], SetReply)
    assert list(f[5]) == [Simple(b"no-writes"), Simple(b"allow-stale")]
    stats = run(node, "FUNCTION", "STATS")
    assert stats == Map([b"running_script", None, b"engines",
                         Map([b"LUA", Map([b"libraries_count", 1, b"functions_count", 1])])])


def test_error_stats_count_a_failed_command_once(node):
    run(node, "SET", "s", "abc")
    before = dict(node.error_codes), node.stats.error_replies
    r = ev(node, "return redis.call('incr', 's')")
    assert isinstance(r, Err)
    assert node.stats.error_replies == before[1] + 1
    assert node.error_codes["ERR"] == before[0].get("ERR", 0) + 1
    ev(node, "return redis.pcall('incr', 's')")
    assert node.stats.error_replies == before[1] + 2
    ev(node, "error('own')")  # a script's own error counts once too
    assert node.stats.error_replies == before[1] + 3


# -- pure parts -----------------------------------------------------------------------------------

def test_shebang_and_metadata():
    assert F.eval_shebang(b"return 1") == (F.EVAL_COMPAT, 0)
    assert F.eval_shebang(b"#!lua flags=no-writes,allow-oom\nreturn 1") == (1 | 2, 31)
    for bad, text in [(b"#!lua", "Invalid script shebang"),
    (b"#!lua flags=x\n", "Unexpected flag in script shebang: x"),
                      (b"#!py\n", "Unexpected engine in script shebang: #!py"),
                      (b"#!lua name=x\n", "Unknown lua shebang option: name=x")]:
        with pytest.raises(F.MetadataError, match=text):
            F.eval_shebang(bad)
    assert F.library_metadata(b"#!LUA name=lib\ncode") == (b"LUA", b"lib", b"\ncode")
    for bad, text in [(b"x", "Missing library metadata"), (b"#!lua name=x", "Invalid library metadata"),
                      (b"#!lua\n", "Library name was not given"),
                      (b"#!lua name=a name=b\n", "name argument was given multiple times"),
                      (b"#!lua foo=1\n", "Invalid metadata value given: foo=1")]:
        with pytest.raises(F.MetadataError, match=text):
            F.library_metadata(bad)


def test_dump_payload_format():
    codes = [b"#!lua name=a\n" + b"x" * 70, b"#!lua name=b\n" + b"y" * 20000]
    payload = F.dump(codes)
    assert payload[0] == 245 and payload[1:3] == bytes((0x40 | (83 >> 8), 83 & 0xFF))  # 14-bit length
    assert payload[-10:-8] == (10).to_bytes(2, "little")
    assert F.verify_payload(payload) and F.read_payload(payload) == codes
    assert not F.verify_payload(payload[:-1] + b"\x00")
    # an LZF-compressed RDB string, as Redis writes one: a literal run and a back-reference
    from marekvs.core import rdb

    code = b"abcabcabc"
    lzf = bytes([2]) + b"abc" + bytes([(4 << 5) | 0, 2])  # "abc" then copy 6 bytes from 3 back
    body = bytes([245, 0xC3, len(lzf), len(code)]) + lzf
    assert F.read_payload(rdb.footer(body)) == [code]
    short = bytes([245, 0xC3, len(lzf), 10]) + lzf  # says 10 bytes, makes 9
    with pytest.raises(F.PayloadError, match="failed loading the given functions payload"):
        F.read_payload(rdb.footer(short))


def test_rand48_is_redis_s():
    # the first three values of math.random(1000) on a fresh redis-server 7.0
    r = libs.Rand48()
    vals = [int((r.lrand48() % libs.LRAND48_MAX) / libs.LRAND48_MAX * 1000) + 1 for _ in range(3)]
    assert vals == [397, 841, 354]
    r.seed(0)
    assert r.x == 0x330E


def test_number_conversion_is_c_s():
    assert c_llong(3.99) == 3 and c_llong(-3.99) == -3 and c_llong(float("nan")) == LLONG_MIN
    assert c_llong(float("inf")) == LLONG_MIN and c_llong(2.0**63) == LLONG_MIN and c_llong(1 << 64) == LLONG_MIN
    assert c_llong(-(2**63)) == -(2**63)


def test_deep_replies_stop_where_redis_s_lua_stack_does(node):
    # one stack slot per array level, three per map or set level, four for a map key
    r = ev(node, "local t={} t[1]=t return t")
    depth = 0
    while isinstance(r, list):
        r = r[0]
        depth += 1
    assert depth == 7995 and r == Err("ERR reached lua stack limit")


def test_libraries_corner_cases(node):
    cases = {
        "return bit.tohex(-1)": b"ffffffff", "return bit.tobit(2^31)": -(2**31),
        "return bit.arshift(-1, 31)": -1, "return bit.rol(1, 32)": 1,
        "return cjson.encode({a={b={}}})": b'{"a":{"b":{}}}',
        "return cjson.encode(1e100)": b"1e+100",
        "return cmsgpack.pack(127, 128, -32, -33)": b"\x7f\xcc\x80\xe0\xd0\xdf",
        "return struct.size('i8 !8 d')": 16, "return struct.pack('<H', 0x1234)": b"\x34\x12",
    }
    for script, want in cases.items():
        assert ev(node, script) == want, script
