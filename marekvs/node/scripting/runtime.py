"""One Lua interpreter (lupa's Lua 5.1) dressed as Redis 7.0's, and the conversions between
Lua values and reply values.

``LuaVM`` owns a ``lupa.lua51.LuaRuntime`` (strings are bytes both ways, Python objects are
opaque to Lua, a memory cap), runs the sandbox prelude (``sandbox.py``) in it and keeps the
prelude's internal entry points. The scripting engine (``engine.py``) has two: one for
EVAL (reset by SCRIPT FLUSH) and one for function libraries, as Redis has.

Conversions, as Redis 7.0's ``script_lua.c``:

- ``to_lua(value, resp)``: the reply value of a command called by ``redis.call`` as the
  script sees it under its protocol (``redis.setresp``). RESP2: null -> ``false``, status
  -> ``{ok=...}``, a map -> a flat array, a double -> its string, a boolean -> 1/0; RESP3:
  null -> ``nil``, ``{map={...}}``, ``{set={k=true}}``, ``{double=n}``, booleans,
  ``{verbatim_string={format=, string=}}``, ``{big_number=...}``. Errors never get here
  (``redis.call`` raises them, ``redis.pcall`` returns ``{err=...}``). Tables are filled
  key by key in reply order, as Redis's parser fills them, so they iterate alike.
- ``to_reply(value, resp)``: a script's return value as the reply (luaReplyToRedisReply):
  a string -> bulk, a number -> integer (C truncation; NaN and out of range give
  LLONG_MIN as on x86-64), ``true`` -> 1 (RESP2 scripts) or a boolean (RESP3),
  ``false``/``nil`` -> null, ``{err=}`` -> the error as it is, ``{ok=}`` -> status,
  ``{double=}``, ``{big_number=}``, ``{verbatim_string=}``, ``{map=}``, ``{set=}``, and any
  other table -> an array up to its first nil. Redis converts recursively on the Lua stack
  and answers "reached lua stack limit" where ``lua_checkstack`` fails; the conversion here
  is iterative and tracks the stack height Redis would use (one slot per array level,
  three per map or set level, four for a map key), so deep and self-referencing tables
  answer exactly as on Redis.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import lupa.lua51 as lua51

from marekvs.commands import errors
from marekvs.commands.reply import (BigNumber, Double, DoubleText, Err, Map, NullArray, SetReply, Simple, Verbatim,
                                    format_double)
from marekvs.node.scripting import libs
from marekvs.node.scripting.sandbox import PRELUDE

log = logging.getLogger("marekvs.scripting")

lua_type = lua51.lua_type
LuaError = lua51.LuaError
LuaMemoryError = lua51.LuaMemoryError

LUAI_MAXCSTACK = 8000  # Lua 5.1's limit on the C stack slots lua_checkstack may give
ROOT_HEIGHT = 2  # a script's result sits above the error handler on Redis's Lua stack
LLONG_MIN = -(1 << 63)
STACK_LIMIT = Err(errors.LUA_STACK_LIMIT)


class LuaRaise(Exception):
    """Raised by a Python function called from Lua to raise a Lua error: ``value`` is the
    error value (a string, or a table such as ``{err=...}``). Lua sees the exception as a
    userdata; the sandbox unwraps it wherever an error is caught (the error handler,
    ``pcall``, ``xpcall``, ``coroutine.resume``)."""

    def __init__(self, value: Any):
        super().__init__(value)
        self.value = value


def unwrap(e: Any) -> Any:
    return e.value if isinstance(e, LuaRaise) else e


def raising(f: Callable[..., tuple], where: Callable[[], Any]) -> Callable[..., Any]:
    """A ``libs`` function ((True, results...) or (False, message)) as a Lua function. Its
    errors carry the position of the Lua code that called it, as ``luaL_error`` adds it
    (``where``: "user_script:1: ", or nothing when the caller is not Lua code)."""
    def lua_function(*args: Any) -> Any:
        r = f(*args)
        if r[0]:
            return r[1] if len(r) == 2 else r[1:]
        raise LuaRaise((where() or b"") + r[1].encode("utf-8", "surrogateescape"))
    return lua_function


# Lua's allocator fails past the memory cap. Inside the interpreter that is an error a
# script gets; but lupa also allocates outside any protected call (pushing the arguments of
# a call from Python, keeping a reference to a table it returns), and an allocation that
# fails there aborts the process (Lua's "PANIC: unprotected error"). So the cap that scripts
# meet is ``max_memory`` only while user code runs; Python's own calls into the interpreter
# (around a script, and inside the Python functions a script calls) run with this much more.
HEADROOM = 16 << 20
SLACK = 1 << 20  # below the cap: a run starts only with at least this much left


def _deny_attributes(obj: Any, name: Any, setting: bool) -> Any:
    raise AttributeError("access to Python objects is not allowed from scripts")


def c_llong(x: int | float) -> int:
    """``(long long)lua_tonumber(...)`` on x86-64: truncation, LLONG_MIN when out of range."""
    if isinstance(x, float):
        if x != x or not -9.223372036854776e18 <= x < 9.223372036854776e18:
            return LLONG_MIN
        return int(x)
    return x if LLONG_MIN <= x < (1 << 63) else LLONG_MIN


def error_text(text: str) -> bytes:
    """luaPushErrorBuff of an error reply ``-text``: the code is kept (a text without a
    space gets ERR), CR/LF trimmed from both ends of the message."""
    buf = text.encode("utf-8", "surrogateescape")
    sp = buf.find(b" ")
    if sp < 0:
        code, msg = b"ERR", buf
    else:
        code, msg = buf[:sp], buf[sp + 1:]
    return code + b" " + msg.strip(b"\r\n")


class LuaVM:
    """One sandboxed Lua interpreter. ``callbacks`` are the Python functions the sandbox
    calls (``call``, ``pcall``, ``hook``, ``log``, ``setresp``, ``sha1hex``, ``set_repl``,
    ``acl_check``); the C libraries come from ``libs``."""

    def __init__(self, kind: str, callbacks: dict[str, Callable[..., Any]], max_memory: int,
                 redis_version: str, rng: libs.Rand48):
        self.kind = kind
        self.cap = max_memory
        self.rt = lua51.LuaRuntime(encoding=None, register_eval=False, register_builtins=False,
                                   unpack_returned_tuples=True, attribute_filter=_deny_attributes,
                                   max_memory=max_memory + HEADROOM)
        set_max = self.rt.set_max_memory
        tight, relaxed = max_memory, max_memory + HEADROOM

        def guarded(f: Callable[..., Any]) -> Callable[..., Any]:
            """``f`` called from user code: Python may call back into Lua, with headroom."""
            def lua_function(*args: Any) -> Any:
                set_max(relaxed)
                try:
                    return f(*args)
                finally:
                    set_max(tight)
            return lua_function

        self.tighten = lambda: set_max(tight)
        self.relax = lambda: set_max(relaxed)
        bridge = libs.Bridge()
        bridge.lua_type = lua_type
        pyfuncs: dict[bytes, Callable[..., Any]] = {}
        where_box: list[Callable[[], Any]] = []

        def where() -> Any:
            return where_box[0]() if where_box else b""

        for prefix, funcs in (("bit_", libs.make_bit(bridge)), ("struct_", libs.make_struct(bridge)),
                              ("cjson_", libs.make_cjson(bridge)), ("cmsgpack_", libs.make_cmsgpack(bridge)),
                              ("math_", libs.make_math(bridge, rng))):
            for name, f in funcs.items():
                pyfuncs[(prefix + name).encode()] = guarded(raising(f, where))
        table_from = self.rt.table_from
        cb: dict[bytes, Any] = {k.encode(): (v if k == "hook" else guarded(v)) for k, v in callbacks.items()}
        cb[b"libs"] = table_from(pyfuncs)
        cb[b"unwrap"] = unwrap
        major, minor, patch = (int(x) for x in (redis_version.split(".") + ["0", "0"])[:3])
        prelude = self.rt.eval("loadstring")(PRELUDE.encode(), b"=[marekvs]")
        api = prelude(table_from(cb), kind.encode(), redis_version.encode(),
                      (major << 16) | (minor << 8) | patch)
        self.api = api
        where_box.append(api.where)
        self.compile_fn = api.compile
        self.run_eval_fn = api.run_eval
        self.run_function_fn = api.run_function
        self.classify = api.classify
        self.slice = api.slice
        self.pairs = api.pairs
        self.errinfo = api.errinfo
        self.new_array = api.new_array
        self.new_map = api.new_map
        self.new_set = api.new_set
        self.new_err = api.new_err
        self.gc_step = api.gc_step
        self.reset_hook = api.reset_hook
        bridge.new_array = api.new_array
        bridge.new_map = api.new_map
        bridge.is_null = api.is_null
        bridge.null = api.null
        bridge.rawget = api.rawget
        bridge.items = self._items
        self.calls = 0

    # -- memory ----------------------------------------------------------------------------
    def memory(self) -> int:
        return int(self.rt.get_memory_used() or 0)

    def gc(self) -> None:
        """A full collection (after a script ran out of memory, there is little room to
        do anything else)."""
        try:
            self.api.gc()
        except LuaError:
            log.warning("Lua garbage collection failed")

    def after_run(self) -> None:
        """Redis steps the collector every 50 scripts, to spread its cost."""
        self.calls += 1
        if self.calls >= 50:
            self.calls = 0
            try:
                self.gc_step()
            except LuaError:
                self.gc()

    # -- running ---------------------------------------------------------------------------
    def compile(self, code: bytes, chunkname: bytes) -> tuple[Any, bytes | None]:
        """(function, None) or (None, the compiler's message)."""
        r = self.compile_fn(code, chunkname)
        if type(r) is tuple:
            return (r[0], None) if r[0] is not None else (None, r[1])
        return r, None

    def room(self, need: int = 0) -> bool:
        """Is there room under the cap to start user code with ``need`` bytes of
        arguments? (A full collection first if the interpreter is close to it.)"""
        used = self.memory()
        if used + need < self.cap >> 1:
            return True  # (the common case, decided without adding anything up)
        limit = self.cap - SLACK - need
        if used > limit:
            self.gc()
        return self.memory() <= limit

    def _tight(self, f: Callable[..., Any], *args: Any) -> Any:
        """Call the Lua function ``f`` (user code runs in it) under the scripts' cap."""
        self.tighten()
        try:
            return f(*args)
        finally:
            self.relax()

    def run_eval(self, fn: Any, nkeys: int, args: list[bytes]) -> tuple[bool, Any]:
        return self._tight(self.run_eval_fn, fn, nkeys, *args)  # type: ignore[no-any-return]

    def run_function(self, cb: Any, nkeys: int, args: list[bytes]) -> tuple[bool, Any]:
        return self._tight(self.run_function_fn, cb, nkeys, *args)  # type: ignore[no-any-return]

    def load_library(self, code: bytes) -> tuple[bool, Any, Any]:
        r = self._tight(self.api.load_library, code)
        if r[0]:
            return True, [tuple(r[1][i + 1][j] for j in (1, 2, 3, 4)) for i in range(len(r[1]))], None
        return False, r[1], r[2]

    def _items(self, t: Any) -> list[tuple[Any, Any]]:
        out: list[tuple[Any, Any]] = []
        k = None
        while True:
            r = self.pairs(t, k)
            n = r[0] if type(r) is tuple else r
            if not n:
                return out
            flat = r[1:]
            for i in range(0, n, 2):
                out.append((flat[i], flat[i + 1]))
            if n < 1000:
                return out
            k = flat[n - 2]

    def _array(self, t: Any) -> list[Any]:
        out: list[Any] = []
        i = 1
        slice_ = self.slice
        while True:
            r = slice_(t, i)
            if r is None:
                return out
            if type(r) is not tuple:
                out.append(r)
                return out
            out.extend(r)
            if len(r) < 1000:
                return out
            i += len(r)

    def error_info(self, e: Any) -> tuple[bool, Any, Any, Any, bool]:
        """(is a table, err, source, line, ignore_error_stats_update) of an error object."""
        r = self.errinfo(e)
        if not r[0]:
            return False, r[1], None, None, False
        r = tuple(r) + (None,) * (5 - len(r))
        return True, r[1], r[2], r[3], bool(r[4])

    # -- reply values -> Lua -----------------------------------------------------------------
    def to_lua(self, v: Any, resp3: bool) -> Any:
        """A reply value (not an error) as the script sees it."""
        t = type(v)
        if t is bytes or t is int:
            return v
        if v is None:
            return None if resp3 else False
        if t is Simple:
            return self.new_map(b"ok", bytes(v))
        if t is list or t is tuple:
            return self.new_array(*[self.to_lua(x, resp3) for x in v])
        if t is Err:
            return self.new_map(b"err", error_text(v))
        if t is str:
            return v.encode()
        if t is Map:
            if resp3:
                flat = [self.to_lua(x, resp3) for x in v]
                return self.new_map(b"map", self.new_map(*flat))
            return self.new_array(*[self.to_lua(x, resp3) for x in v])
        if t is SetReply:
            if resp3:
                return self.new_map(b"set", self.new_set(*[self.to_lua(x, resp3) for x in v]))
            return self.new_array(*[self.to_lua(x, resp3) for x in v])
        if t is Double or t is float:
            if resp3:
                return self.new_map(b"double", float(v))
            return format_double(v)
        if t is DoubleText:  # a double the command formatted itself (ZSCORE, GEOPOS)
            if resp3:
                return self.new_map(b"double", float(v))
            return bytes(v)
        if t is bool:
            return v if resp3 else int(v)
        if t is Verbatim:
            if resp3:
                return self.new_map(b"verbatim_string", self.new_map(b"format", b"txt", b"string", bytes(v)))
            return bytes(v)
        if t is NullArray:
            return None if resp3 else False
        if t is BigNumber:
            return self.new_map(b"big_number", bytes(v)) if resp3 else bytes(v)
        if isinstance(v, bytes):
            return bytes(v)
        if isinstance(v, list):
            return self.new_array(*[self.to_lua(x, resp3) for x in v])
        raise TypeError(f"cannot give {t.__name__} to a script")

    # -- Lua -> reply values ---------------------------------------------------------------
    def to_reply(self, value: Any, resp3: bool) -> Any:
        """A script's return value as a reply value (luaReplyToRedisReply)."""
        t = type(value)
        if t is bytes:
            return value
        if t is int or t is float:
            return c_llong(value)
        if t is bool:
            return value if resp3 else (1 if value else None)
        if value is None:
            return None
        root: list[Any] = []
        # work items: (value, stack height, list to append the converted value to)
        stack: list[tuple[Any, int, list[Any]]] = [(value, ROOT_HEIGHT, root)]
        while stack:
            v, h, out = stack.pop()
            if h + 4 > LUAI_MAXCSTACK:
                out.append(STACK_LIMIT)
                continue
            t = type(v)
            if t is bytes:
                out.append(v)
            elif t is int or t is float:
                out.append(c_llong(v))
            elif t is bool:
                out.append(v if resp3 else (1 if v else None))
            elif v is None or lua_type(v) != "table":
                out.append(None)
            else:
                self._table(v, h, out, stack, resp3)
        return root[0]

    def _table(self, v: Any, h: int, out: list[Any], stack: list[tuple[Any, int, list[Any]]],
               resp3: bool) -> None:
        r = self.classify(v)
        kind = r if type(r) is bytes else r[0]
        if kind == b"err":
            _, msg, _, _, _ = self.error_info(r[1])
            out.append(Err(_as_text(msg)))
        elif kind == b"ok":
            out.append(Simple(r[1].replace(b"\r", b" ").replace(b"\n", b" ")))
        elif kind == b"double":
            out.append(Double(r[1]))
        elif kind == b"big_number":
            out.append(BigNumber(r[1].replace(b"\r", b" ").replace(b"\n", b" ")))
        elif kind == b"verbatim":
            out.append(Verbatim(r[1]))
        elif kind == b"map":
            m = Map()
            out.append(m)
            items = self._items(r[1])
            # values at height h + 3, keys at h + 4; pushed reversed: popped in order
            for k, x in reversed(items):
                stack.append((x, h + 3, m))
                stack.append((k, h + 4, m))
        elif kind == b"set":
            s = SetReply()
            out.append(s)
            for k, _ in reversed(self._items(r[1])):
                stack.append((k, h + 3, s))
        else:
            a: list[Any] = []
            out.append(a)
            for x in reversed(self._array(v)):
                stack.append((x, h + 1, a))


def _as_text(msg: Any) -> str:
    if type(msg) is bytes:
        return msg.decode("utf-8", "surrogateescape")
    if type(msg) is int or type(msg) is float:
        return libs._num_to_lua_string(msg).decode()
    return "(null)"
