"""The C libraries Redis 7.0 links into its Lua, rebuilt on Python: ``bit`` (LuaBitOp 1.0.2),
``struct`` (Roberto Ierusalimschy's lua_struct), ``cjson`` (lua-cjson 2.1.0) and ``cmsgpack``
(lua_cmsgpack 0.4.0), plus Redis's ``math.random`` generator (``rand.c``'s 48-bit linear
congruential generator) and ``redis.sha1hex``.

lupa's Lua 5.1 has none of these C modules, so each library function here is a Python
function that the sandbox (``sandbox.py``) wraps in a Lua function. The calling
convention keeps Python exceptions away from Lua: a function returns a tuple whose first
item is ``True`` followed by its Lua results, or ``False`` followed by the error message,
which the Lua wrapper raises with ``error(msg, 0)`` (a C library function's errors carry
no position, as in Redis).

Behaviour follows the C sources byte for byte where a script can see it: LuaBitOp's
double-to-int32 conversion (the 2^52+2^51 rounding trick, so ``bit.tobit(2^32+1) == 1``),
struct's sizes on x86-64 Linux (``l`` = 8 bytes, native little endian, alignment rules),
lua-cjson's number format (``%.14g``), escapes (``/`` -> ``\\/``), sparse-array rule and
``{}`` for an empty table, and lua_cmsgpack's choice of encodings (str8 for 32..255
bytes, float32 when a double survives the round trip, arrays only for 1..n keys).
Tables reach Python through ``Bridge``: the Lua runtime's own table iteration (``next``
order, which is Redis's order) and its builders, which fill new tables key by key as the
C code does, so a decoded table iterates in the same order as on Redis.
"""

from __future__ import annotations

import hashlib
import json
import math
import struct
from typing import Any, Callable

import msgpack

Result = tuple  # (True, *values) or (False, message)


class Bridge:
    """What the libraries need from the Lua runtime (``runtime.LuaVM`` provides it)."""

    lua_type: Callable[[Any], str | None]  # 'table', 'userdata', ... or None for Python values
    new_array: Callable[..., Any]  # values -> a Lua table t[1..n], filled in order
    new_map: Callable[..., Any]  # k1, v1, k2, v2, ... -> a Lua table filled in that order
    is_null: Callable[[Any], bool]  # is the value cjson.null?
    null: Any  # cjson.null
    items: Callable[[Any], Any]  # a Lua table's (key, value) pairs in ``next`` order
    rawget: Callable[[Any, Any], Any]


def _typename(bridge: Bridge, v: Any) -> str:
    """Lua's type() of a value that came from Lua."""
    if v is None:
        return "nil"
    t = type(v)
    if t is bool:
        return "boolean"
    if t is int or t is float:
        return "number"
    if t is bytes:
        return "string"
    return bridge.lua_type(v) or "userdata"


def _argerr(n: int, fname: str, expected: str, got: str) -> Result:
    return (False, f"bad argument #{n} to '{fname}' ({expected} expected, got {got})")


def _tonumber(v: Any) -> float | int | None:
    """lua_tonumber: numbers, and strings that read as numbers."""
    t = type(v)
    if t is int or t is float:
        return v  # type: ignore[no-any-return]
    if t is bytes:
        s = v.strip()
        try:
            if s[:2].lower() in (b"0x",) or s[:3].lower() in (b"-0x", b"+0x"):
                return int(s, 16)
            return float(s) if s else None
        except ValueError:
            return None
    return None


# =========================================================================================
# bit (LuaBitOp 1.0.2)
# =========================================================================================

_MAGIC = 6755399441055744.0  # 2^52 + 2^51
_D = struct.Struct("<d")
_Q = struct.Struct("<Q")


def _barg(bridge: Bridge, v: Any, n: int, fname: str, given: bool = True) -> int | Result:
    x = _tonumber(v)
    if x is None:
        return _argerr(n, fname, "number", _typename(bridge, v) if given else "no value")
    try:
        b = _Q.unpack(_D.pack(float(x) + _MAGIC))[0] & 0xFFFFFFFF
    except OverflowError:
        b = 0
    return b


def _sbits(b: int) -> int:
    b &= 0xFFFFFFFF
    return b - (1 << 32) if b & 0x80000000 else b


def make_bit(bridge: Bridge) -> dict[str, Callable[..., Result]]:
    def args(fname: str, vals: tuple, need: int) -> list[int] | Result:
        out = []
        for i in range(max(need, len(vals))):
            r = _barg(bridge, vals[i] if i < len(vals) else None, i + 1, fname, i < len(vals))
            if isinstance(r, tuple):
                return r
            out.append(r)
        return out

    def op(fname: str, fn: Callable[[int, int], int]) -> Callable[..., Result]:
        def f(*vals: Any) -> Result:
            a = args(fname, vals, 1)
            if isinstance(a, tuple):
                return a
            b = a[0]
            for x in a[1:]:
                b = fn(b, x)
            return (True, _sbits(b))
        return f

    def shift(fname: str, fn: Callable[[int, int], int]) -> Callable[..., Result]:
        def f(*vals: Any) -> Result:
            a = args(fname, vals[:2], 2)
            if isinstance(a, tuple):
                return a
            return (True, _sbits(fn(a[0], a[1] & 31)))
        return f

    def unary(fname: str, fn: Callable[[int], int]) -> Callable[..., Result]:
        def f(*vals: Any) -> Result:
            a = args(fname, vals[:1], 1)
            if isinstance(a, tuple):
                return a
            return (True, _sbits(fn(a[0])))
        return f

    def tohex(*vals: Any) -> Result:
        a = args("tohex", vals[:1], 1)
        if isinstance(a, tuple):
            return a
        b = a[0]
        n = 8
        if len(vals) > 1:
            nb = _barg(bridge, vals[1], 2, "tohex")
            if isinstance(nb, tuple):
                return nb
            n = _sbits(nb)
        digits = "0123456789abcdef"
        if n < 0:
            n = -n
            digits = digits.upper()
        n = min(n, 8)
        out = []
        for _ in range(n):
            out.append(digits[b & 15])
            b >>= 4
        return (True, "".join(reversed(out)).encode())

    def rol(b: int, n: int) -> int:
        return ((b << n) | (b >> (32 - n))) & 0xFFFFFFFF if n else b

    def ror(b: int, n: int) -> int:
        return ((b << (32 - n)) | (b >> n)) & 0xFFFFFFFF if n else b

    return {
        "tobit": unary("tobit", lambda b: b),
        "bnot": unary("bnot", lambda b: ~b),
        "bswap": unary("bswap", lambda b: int.from_bytes(b.to_bytes(4, "little"), "big")),
        "band": op("band", lambda a, b: a & b),
        "bor": op("bor", lambda a, b: a | b),
        "bxor": op("bxor", lambda a, b: a ^ b),
        "lshift": shift("lshift", lambda b, n: b << n),
        "rshift": shift("rshift", lambda b, n: b >> n),
        "arshift": shift("arshift", lambda b, n: _sbits(b) >> n),
        "rol": shift("rol", rol),
        "ror": shift("ror", ror),
        "tohex": tohex,
    }


# =========================================================================================
# struct (lua_struct.c as Redis ships it; sizes of x86-64 Linux)
# =========================================================================================

_SIZES = {"b": 1, "B": 1, "h": 2, "H": 2, "l": 8, "L": 8, "T": 8, "f": 4, "d": 8, "x": 1}
MAXINTSIZE = 32
MAXALIGN = 8


class _StructError(Exception):
    pass


class _Fmt:
    """Reads a struct format string as lua_struct.c does (getnum, optsize, options)."""

    def __init__(self, fmt: bytes, fname: str):
        self.fmt = fmt
        self.i = 0
        self.fname = fname
        self.little = True  # native x86
        self.align = 1

    def getnum(self, default: int) -> int:
        f = self.fmt
        if self.i >= len(f) or not 48 <= f[self.i] <= 57:
            return default
        a = 0
        while self.i < len(f) and 48 <= f[self.i] <= 57:
            d = f[self.i] - 48
            if a > (2**31 - 1) // 10 or a * 10 > (2**31 - 1) - d:
                raise _StructError("integral size overflow")
            a = a * 10 + d
            self.i += 1
        return a

    def next(self) -> tuple[str, int] | None:
        if self.i >= len(self.fmt):
            return None
        opt = chr(self.fmt[self.i])
        self.i += 1
        if opt in _SIZES:
            return opt, _SIZES[opt]
        if opt == "c":
            return opt, self.getnum(1)
        if opt in "iI":
            sz = self.getnum(4)
            if sz > MAXINTSIZE:
                raise _StructError(f"integral size {sz} is larger than limit of {MAXINTSIZE}")
            return opt, sz
        return opt, 0

    def toalign(self, length: int, opt: str, size: int) -> int:
        if size == 0 or opt == "c":
            return 0
        size = min(size, self.align)
        return (size - (length & (size - 1))) & (size - 1)

    def control(self, opt: str) -> None:
        if opt == " ":
            return
        if opt == ">":
            self.little = False
        elif opt == "<":
            self.little = True
        elif opt == "!":
            a = self.getnum(MAXALIGN)
            if a == 0 or a & (a - 1):
                raise _StructError(f"alignment {a} is not a power of 2")
            self.align = a
        else:
            raise _StructError(f"bad argument #1 to '{self.fname}' (invalid format option '{opt}')")


_INT_OPTS = frozenset("bBhHlLTiI")


def _c_uint64(n: float | int) -> int:
    """``(Uinttype)(Inttype)n`` (negative) or ``(Uinttype)n`` of lua_struct's putinteger on
    x86-64: truncated, and 2^63 where C's conversion is out of range."""
    if isinstance(n, float):
        if n != n or n in (math.inf, -math.inf):
            return 1 << 63
        n = int(n)
    if n < 0:
        return n & 0xFFFFFFFFFFFFFFFF if n >= -(1 << 63) else 1 << 63
    return n if n < (1 << 64) else 1 << 63


def make_struct(bridge: Bridge) -> dict[str, Callable[..., Result]]:
    def checkstr(v: Any, n: int, fname: str) -> bytes | Result:
        t = type(v)
        if t is bytes:
            return v  # type: ignore[no-any-return]
        if t is int or t is float:
            return _num_to_lua_string(v)
        return _argerr(n, fname, "string", _typename(bridge, v) if n else "no value")

    def pack(*args: Any) -> Result:
        if not args:
            return _argerr(1, "pack", "string", "no value")
        fmt = checkstr(args[0], 1, "pack")
        if isinstance(fmt, tuple):
            return fmt
        h = _Fmt(fmt, "pack")
        out = bytearray()
        arg = 1
        total = 0
        try:
            while True:
                nx = h.next()
                if nx is None:
                    break
                opt, size = nx
                pad = h.toalign(total, opt, size)
                total += pad
                out += bytes(pad)
                if opt in _INT_OPTS:
                    n = _tonumber(args[arg]) if arg < len(args) else None
                    if n is None:
                        return _argerr(arg + 1, "pack", "number",
                                       _typename(bridge, args[arg]) if arg < len(args) else "no value")
                    arg += 1
                    v = _c_uint64(n)
                    b = (v & ((1 << (8 * size)) - 1)).to_bytes(size, "little")
                    out += b if h.little else b[::-1]
                elif opt == "x":
                    out.append(0)
                elif opt in "fd":
                    n = _tonumber(args[arg]) if arg < len(args) else None
                    if n is None:
                        return _argerr(arg + 1, "pack", "number",
                                       _typename(bridge, args[arg]) if arg < len(args) else "no value")
                    arg += 1
                    code = "f" if opt == "f" else "d"
                    try:
                        out += struct.pack(("<" if h.little else ">") + code, float(n))
                    except OverflowError:
                        out += struct.pack(("<" if h.little else ">") + code,
                                           math.copysign(math.inf, float(n)))
                elif opt in "cs":
                    s = checkstr(args[arg], arg + 1, "pack") if arg < len(args) else \
                        _argerr(arg + 1, "pack", "string", "no value")
                    if isinstance(s, tuple):
                        return s
                    arg += 1
                    if size == 0:
                        size = len(s)
                    if len(s) < size:
                        return (False, f"bad argument #{arg} to 'pack' (string too short)")
                    out += s[:size]
                    if opt == "s":
                        out.append(0)
                        size += 1
                else:
                    h.control(opt)
                total += size
        except _StructError as e:
            return (False, str(e))
        return (True, bytes(out))

    def unpack(*args: Any) -> Result:
        fmt = checkstr(args[0], 1, "unpack") if args else _argerr(1, "unpack", "string", "no value")
        if isinstance(fmt, tuple):
            return fmt
        data = checkstr(args[1], 2, "unpack") if len(args) > 1 else _argerr(2, "unpack", "string", "no value")
        if isinstance(data, tuple):
            return data
        pos = 1
        if len(args) > 2 and args[2] is not None:
            p = _tonumber(args[2])
            if p is None:
                return _argerr(3, "unpack", "number", _typename(bridge, args[2]))
            pos = int(p)
        if pos <= 0:
            return (False, "bad argument #3 to 'unpack' (offset must be 1 or greater)")
        pos -= 1
        ld = len(data)
        h = _Fmt(fmt, "unpack")
        res: list[Any] = []
        try:
            while True:
                nx = h.next()
                if nx is None:
                    break
                opt, size = nx
                pos += h.toalign(pos, opt, size)
                if not (size <= ld and pos <= ld - size):
                    return (False, "bad argument #2 to 'unpack' (data string too short)")
                if opt in _INT_OPTS:
                    raw = data[pos:pos + size]
                    v = int.from_bytes(raw, "little" if h.little else "big") & 0xFFFFFFFFFFFFFFFF
                    if opt.islower():
                        mask = (0xFFFFFFFFFFFFFFFF << (size * 8 - 1)) & 0xFFFFFFFFFFFFFFFF
                        if v & mask:
                            v |= mask
                        if v & (1 << 63):
                            v -= 1 << 64
                    res.append(float(v) if abs(v) >= 1 << 53 else v)
                elif opt == "x":
                    pass
                elif opt in "fd":
                    code = "f" if opt == "f" else "d"
                    res.append(struct.unpack(("<" if h.little else ">") + code, data[pos:pos + size])[0])
                elif opt == "c":
                    if size == 0:
                        if not res or not isinstance(res[-1], (int, float)):
                            return (False, "format 'c0' needs a previous size")
                        size = int(res.pop())
                        if not (size <= ld and pos <= ld - size):
                            return (False, "bad argument #2 to 'unpack' (data string too short)")
                    res.append(data[pos:pos + size])
                elif opt == "s":
                    e = data.find(b"\x00", pos)
                    if e < 0:
                        return (False, "unfinished string in data")
                    size = e - pos + 1
                    res.append(data[pos:e])
                else:
                    h.control(opt)
                pos += size
        except _StructError as e:
            return (False, str(e))
        return (True, *res, pos + 1)

    def size(*args: Any) -> Result:
        fmt = checkstr(args[0], 1, "size") if args else _argerr(1, "size", "string", "no value")
        if isinstance(fmt, tuple):
            return fmt
        h = _Fmt(fmt, "size")
        pos = 0
        try:
            while True:
                nx = h.next()
                if nx is None:
                    break
                opt, sz = nx
                pos += h.toalign(pos, opt, sz)
                if opt == "s":
                    return (False, "bad argument #1 to 'size' (options 's' has no fixed size)")
                if opt == "c" and sz == 0:
                    return (False, "bad argument #1 to 'size' (options 'c0' has no fixed size)")
                if not opt.isalnum():
                    h.control(opt)
                pos += sz
        except _StructError as e:
            return (False, str(e))
        return (True, pos)

    return {"pack": pack, "unpack": unpack, "size": size}


def _num_to_lua_string(v: int | float) -> bytes:
    """lua_tolstring of a number: LUAI_NUMFFORMAT "%.14g"."""
    return b"%.14g" % v


# =========================================================================================
# cjson (lua-cjson 2.1.0 with Redis's defaults)
# =========================================================================================

_ESCAPES = {i: b"\\u%04x" % i for i in range(32)}
_ESCAPES.update({8: b"\\b", 9: b"\\t", 10: b"\\n", 12: b"\\f", 13: b"\\r",
                 34: b'\\"', 92: b"\\\\", 47: b"\\/", 127: b"\\u007f"})
_ESCAPE_TABLE = [(_ESCAPES.get(i) or bytes((i,))) for i in range(256)]


def json_string(s: bytes) -> bytes:
    table = _ESCAPE_TABLE
    return b'"' + b"".join([table[c] for c in s]) + b'"'


class CjsonConfig:
    def __init__(self) -> None:
        self.encode_max_depth = 1000
        self.decode_max_depth = 1000
        self.sparse_convert = False
        self.sparse_ratio = 2
        self.sparse_safe = 10
        self.precision = 14
        self.encode_invalid_numbers = False
        self.decode_invalid_numbers = True
        self.keep_buffer = True


class _JsonError(Exception):
    pass


def _fmt_number(x: float | int, precision: int) -> bytes:
    if isinstance(x, int) and abs(x) < 10**precision:
        return b"%d" % x
    return (b"%%.%dg" % precision) % x


def make_cjson(bridge: Bridge) -> dict[str, Callable[..., Result]]:
    cfg = CjsonConfig()

    def encode_value(v: Any, depth: int, out: list[bytes]) -> None:
        t = type(v)
        if t is bytes:
            out.append(json_string(v))
        elif t is int or t is float:
            if v != v or v in (math.inf, -math.inf):
                if not cfg.encode_invalid_numbers:
                    raise _JsonError("Cannot serialise number: must not be NaN or Inf")
                out.append(b"nan" if v != v else (b"inf" if v > 0 else b"-inf"))
            else:
                out.append(_fmt_number(v, cfg.precision))
        elif t is bool:
            out.append(b"true" if v else b"false")
        elif v is None:
            out.append(b"null")
        else:
            lt = bridge.lua_type(v)
            if lt == "table":
                encode_table(v, depth + 1, out)
            elif lt == "userdata" and bridge.is_null(v):
                out.append(b"null")
            else:
                raise _JsonError(f"Cannot serialise {lt}: type not supported")

    def encode_table(tbl: Any, depth: int, out: list[bytes]) -> None:
        if depth > cfg.encode_max_depth:
            raise _JsonError(f"Cannot serialise, excessive nesting ({depth})")
        items = list(bridge.items(tbl))
        mx = 0
        n = 0
        array = True
        for k, _ in items:
            if type(k) in (int, float) and k and math.floor(k) == k and k >= 1:
                mx = max(mx, int(k))
                n += 1
                continue
            array = False
            break
        if array and cfg.sparse_ratio > 0 and mx > n * cfg.sparse_ratio and mx > cfg.sparse_safe:
            if not cfg.sparse_convert:
                raise _JsonError("Cannot serialise table: excessively sparse array")
            array = False
        if array and mx > 0:
            out.append(b"[")
            for i in range(1, mx + 1):
                if i > 1:
                    out.append(b",")
                encode_value(bridge.rawget(tbl, i), depth, out)
            out.append(b"]")
            return
        out.append(b"{")
        first = True
        for k, v in items:
            if not first:
                out.append(b",")
            first = False
            tk = type(k)
            if tk is bytes:
                out.append(json_string(k))
            elif tk is int or tk is float:
                out.append(b'"' + _fmt_number(k, cfg.precision) + b'"')
            else:
                raise _JsonError(f"Cannot serialise {_typename(bridge, k)}: table key must be a number or string")
            out.append(b":")
            encode_value(v, depth, out)
        out.append(b"}")

    def encode(*args: Any) -> Result:
        if len(args) != 1:
            return (False, "bad argument #1 to 'encode' (expected 1 argument)")
        out: list[bytes] = []
        try:
            encode_value(args[0], 0, out)
        except _JsonError as e:
            return (False, str(e))
        return (True, b"".join(out))

    def to_lua(v: Any, depth: int) -> Any:
        t = type(v)
        if t is str:
            return v.encode("utf-8", "surrogatepass")
        if t is list:
            if depth >= cfg.decode_max_depth:
                raise _JsonError(f"Found too many nested data structures ({depth + 1})")
            return bridge.new_array(*[to_lua(x, depth + 1) for x in v])
        if t is _Pairs:
            if depth >= cfg.decode_max_depth:
                raise _JsonError(f"Found too many nested data structures ({depth + 1})")
            flat: list[Any] = []
            for k, x in v:
                flat.append(k.encode("utf-8", "surrogatepass"))
                flat.append(to_lua(x, depth + 1))
            return bridge.new_map(*flat)
        if v is None:
            return bridge.null
        if t is int:
            return float(v) if abs(v) >= 1 << 53 else v
        return v

    def decode(*args: Any) -> Result:
        if len(args) != 1:
            return (False, "bad argument #1 to 'decode' (expected 1 argument)")
        s = args[0]
        if type(s) in (int, float):
            s = _num_to_lua_string(s)
        if type(s) is not bytes:
            return _argerr(1, "decode", "string", _typename(bridge, s))
        too_deep = _nesting_error(s, cfg.decode_max_depth)
        if too_deep is not None:
            return (False, too_deep)
        try:
            text = s.decode("utf-8", "surrogateescape")
            value = json.loads(text, object_pairs_hook=_Pairs, parse_constant=_constant)
            return (True, to_lua(value, 0))
        except json.JSONDecodeError as e:
            return (False, f"Expected value but found invalid token at character {e.pos + 1}")
        except _JsonError as e:
            return (False, str(e))
        except (RecursionError, ValueError):
            return (False, f"Found too many nested data structures ({cfg.decode_max_depth + 1})")

    def setting(name: str, lo: int, hi: int) -> Callable[..., Result]:
        def f(*args: Any) -> Result:
            if args and args[0] is not None:
                n = _tonumber(args[0])
                if n is None or not lo <= n <= hi:
                    return (False, f"bad argument #1 to '{name}' (expected integer between {lo} and {hi})")
                setattr(cfg, _CFG_ATTR[name], int(n))
            return (True, getattr(cfg, _CFG_ATTR[name]))
        return f

    def sparse(*args: Any) -> Result:
        if args and args[0] is not None:
            cfg.sparse_convert = bool(args[0]) and args[0] not in (b"off",)
        if len(args) > 1 and args[1] is not None:
            cfg.sparse_ratio = int(_tonumber(args[1]) or 0)
        if len(args) > 2 and args[2] is not None:
            cfg.sparse_safe = int(_tonumber(args[2]) or 0)
        return (True, cfg.sparse_convert, cfg.sparse_ratio, cfg.sparse_safe)

    def flag(attr: str) -> Callable[..., Result]:
        def f(*args: Any) -> Result:
            if args and args[0] is not None:
                setattr(cfg, attr, args[0] not in (False, b"off"))
            return (True, getattr(cfg, attr))
        return f

    return {
        "encode": encode, "decode": decode,
        "encode_max_depth": setting("encode_max_depth", 1, 2**31 - 1),
        "decode_max_depth": setting("decode_max_depth", 1, 2**31 - 1),
        "encode_number_precision": setting("encode_number_precision", 1, 14),
        "encode_sparse_array": sparse,
        "encode_invalid_numbers": flag("encode_invalid_numbers"),
        "decode_invalid_numbers": flag("decode_invalid_numbers"),
        "encode_keep_buffer": flag("keep_buffer"),
    }


_CFG_ATTR = {"encode_max_depth": "encode_max_depth", "decode_max_depth": "decode_max_depth",
             "encode_number_precision": "precision"}


def _nesting_error(s: bytes, limit: int) -> str | None:
    """lua-cjson's depth check, which fails as the parser opens the array or object one
    level too deep (before anything after it is read)."""
    if s.count(b"[") + s.count(b"{") <= limit:
        return None
    depth = 0
    in_str = esc = False
    for i, c in enumerate(s):
        if in_str:
            if esc:
                esc = False
            elif c == 92:
                esc = True
            elif c == 34:
                in_str = False
        elif c == 34:
            in_str = True
        elif c in (91, 123):
            depth += 1
            if depth > limit:
                return f"Found too many nested data structures ({depth}) at character {i + 1}"
        elif c in (93, 125):
            depth -= 1
    return None


class _Pairs(list):
    """A JSON object's (key, value) pairs in document order."""


def _constant(name: str) -> float:
    return {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}[name]


# =========================================================================================
# cmsgpack (lua_cmsgpack 0.4.0)
# =========================================================================================

MAX_NESTING = 16
_F32 = struct.Struct(">f")


def _is_int64(n: float | int) -> bool:
    if isinstance(n, int):
        return -(1 << 63) <= n < (1 << 63)
    return math.isfinite(n) and -2.0**63 <= n < 2.0**63 and int(n) == n


def _mp_int(n: int, out: bytearray) -> None:
    if n >= 0:
        if n <= 127:
            out.append(n)
        elif n <= 0xFF:
            out += b"\xcc" + n.to_bytes(1, "big")
        elif n <= 0xFFFF:
            out += b"\xcd" + n.to_bytes(2, "big")
        elif n <= 0xFFFFFFFF:
            out += b"\xce" + n.to_bytes(4, "big")
        else:
            out += b"\xcf" + n.to_bytes(8, "big")
    elif n >= -32:
        out.append(n & 0xFF)
    elif n >= -128:
        out += b"\xd0" + n.to_bytes(1, "big", signed=True)
    elif n >= -32768:
        out += b"\xd1" + n.to_bytes(2, "big", signed=True)
    elif n >= -(1 << 31):
        out += b"\xd2" + n.to_bytes(4, "big", signed=True)
    else:
        out += b"\xd3" + n.to_bytes(8, "big", signed=True)


def _mp_double(d: float, out: bytearray) -> None:
    try:
        f = _F32.unpack(_F32.pack(d))[0]
    except OverflowError:
        f = None
    if f is not None and f == d:
        out += b"\xca" + _F32.pack(d)
    else:
        out += b"\xcb" + struct.pack(">d", d)


def _mp_bytes(s: bytes, out: bytearray) -> None:
    n = len(s)
    if n < 32:
        out.append(0xA0 | n)
    elif n <= 0xFF:
        out += b"\xd9" + bytes((n,))
    elif n <= 0xFFFF:
        out += b"\xda" + n.to_bytes(2, "big")
    else:
        out += b"\xdb" + n.to_bytes(4, "big")
    out += s


def _mp_len(n: int, fix: int, m16: bytes, m32: bytes, out: bytearray) -> None:
    if n <= 15:
        out.append(fix | n)
    elif n <= 0xFFFF:
        out += m16 + n.to_bytes(2, "big")
    else:
        out += m32 + n.to_bytes(4, "big")


class _Missing(Exception):
    pass


class _BadFormat(Exception):
    pass


def make_cmsgpack(bridge: Bridge) -> dict[str, Callable[..., Result]]:
    def enc(v: Any, level: int, out: bytearray) -> None:
        t = type(v)
        if t is bytes:
            _mp_bytes(v, out)
        elif t is bool:
            out.append(0xC3 if v else 0xC2)
        elif t is int or t is float:
            if _is_int64(v):
                _mp_int(int(v), out)
            else:
                _mp_double(float(v), out)
        elif bridge.lua_type(v) == "table" and level < MAX_NESTING:
            items = list(bridge.items(v))
            mx = 0
            array = True
            for k, _ in items:
                if type(k) in (int, float) and k > 0 and math.isfinite(k) and \
                        -2**31 <= k < 2**31 and int(k) == k:
                    mx = max(mx, int(k))
                    continue
                array = False
                break
            if array and mx == len(items):
                _mp_len(mx, 0x90, b"\xdc", b"\xdd", out)
                for i in range(1, mx + 1):
                    enc(bridge.rawget(v, i), level + 1, out)
            else:
                _mp_len(len(items), 0x80, b"\xde", b"\xdf", out)
                for k, x in items:
                    enc(k, level + 1, out)
                    enc(x, level + 1, out)
        else:
            out.append(0xC0)

    def pack(*args: Any) -> Result:
        if not args:
            return (False, "bad argument #0 to 'pack' (MessagePack pack needs input.)")
        out = bytearray()
        for a in args:
            enc(a, 0, out)
        return (True, bytes(out))

    def to_lua(v: Any) -> Any:
        t = type(v)
        if t is list:
            return bridge.new_array(*[to_lua(x) for x in v])
        if t is _Pairs:
            flat: list[Any] = []
            for k, x in v:
                flat.append(to_lua(k))
                flat.append(to_lua(x))
            return bridge.new_map(*flat)
        if t is int:
            return float(v) if abs(v) >= 1 << 53 else v
        if t is msgpack.ExtType:
            raise _BadFormat()
        return v

    def unpack_full(s: Any, limit: int, offset: int) -> Result:
        if type(s) in (int, float):
            s = _num_to_lua_string(s)
        if type(s) is not bytes:
            return _argerr(1, "unpack", "string", _typename(bridge, s))
        decode_all = not limit and not offset
        if offset < 0 or limit < 0:
            return (False, f"Invalid request to unpack with offset of {offset} and limit of {len(s)}.")
        if offset > len(s):
            return (False, f"Start offset {offset} greater than input length {len(s)}.")
        if decode_all:
            limit = 2**31 - 1
        u = msgpack.Unpacker(raw=True, strict_map_key=False, object_pairs_hook=_Pairs,
                             max_buffer_size=max(len(s), 1) + 16)
        u.feed(s[offset:])
        out: list[Any] = []
        consumed = 0
        remaining = len(s) - offset
        try:
            while remaining - consumed > 0 and len(out) < limit:
                try:
                    obj = u.unpack()
                except msgpack.OutOfData:
                    raise _Missing() from None
                except (msgpack.ExtraData, msgpack.FormatError, msgpack.StackError, ValueError):
                    raise _BadFormat() from None
                consumed = u.tell()
                out.append(to_lua(obj))
        except _Missing:
            return (False, "Missing bytes in input.")
        except _BadFormat:
            return (False, "Bad data format in input.")
        if not decode_all:
            left = remaining - consumed
            return (True, -1 if left == 0 else len(s) - left, *out)
        return (True, *out)

    def unpack(*args: Any) -> Result:
        return unpack_full(args[0] if args else None, 0, 0)

    def unpack_one(*args: Any) -> Result:
        off = int(_tonumber(args[1]) or 0) if len(args) > 1 and args[1] is not None else 0
        return unpack_full(args[0] if args else None, 1, off)

    def unpack_limit(*args: Any) -> Result:
        lim = _tonumber(args[1]) if len(args) > 1 else None
        if lim is None:
            return _argerr(2, "unpack_limit", "number",
                           _typename(bridge, args[1]) if len(args) > 1 else "no value")
        off = int(_tonumber(args[2]) or 0) if len(args) > 2 and args[2] is not None else 0
        return unpack_full(args[0] if args else None, int(lim), off)

    return {"pack": pack, "unpack": unpack, "unpack_one": unpack_one, "unpack_limit": unpack_limit}


# =========================================================================================
# math.random (Redis's rand.c: the 48-bit generator of drand48)
# =========================================================================================

_A = 0x5DEECE66D
_C = 0xB
_MASK48 = (1 << 48) - 1
LRAND48_MAX = 2**31 - 1


class Rand48:
    """redisSrand48 / redisLrand48: one generator per node, shared by every script and
    function, starting from drand48's default state and moving on from call to call, as
    in Redis 7.0 (whose effects replication lets scripts be random: peers receive the
    values a script wrote, never run it)."""

    __slots__ = ("x",)
    DEFAULT = 0x1234ABCD330E  # rand.c's X2 X1 X0

    def __init__(self) -> None:
        self.x = self.DEFAULT

    def seed(self, seedval: int) -> None:
        seedval &= 0xFFFFFFFF
        self.x = (seedval << 16 | 0x330E) & _MASK48

    def lrand48(self) -> int:
        self.x = (_A * self.x + _C) & _MASK48
        return self.x >> 17


def make_math(bridge: Bridge, rng: Rand48) -> dict[str, Callable[..., Result]]:
    def checkint(args: tuple, i: int) -> int | Result:
        v = args[i] if i < len(args) else None
        n = _tonumber(v)
        if n is None:
            return _argerr(i + 1, "random", "number", _typename(bridge, v) if i < len(args) else "no value")
        return _c_int(n)

    def random(*args: Any) -> Result:
        r = (rng.lrand48() % LRAND48_MAX) / LRAND48_MAX
        if not args:
            return (True, r)
        if len(args) == 1:
            u = checkint(args, 0)
            if isinstance(u, tuple):
                return u
            if not 1 <= u:
                return (False, "bad argument #1 to 'random' (interval is empty)")
            return (True, math.floor(r * u) + 1)
        if len(args) == 2:
            lo = checkint(args, 0)
            if isinstance(lo, tuple):
                return lo
            hi = checkint(args, 1)
            if isinstance(hi, tuple):
                return hi
            if not lo <= hi:
                return (False, "bad argument #2 to 'random' (interval is empty)")
            return (True, math.floor(r * (hi - lo + 1)) + lo)
        return (False, "wrong number of arguments")

    def randomseed(*args: Any) -> Result:
        v = args[0] if args else None
        n = _tonumber(v)
        if n is None:
            return _argerr(1, "randomseed", "number", _typename(bridge, v) if args else "no value")
        rng.seed(_c_int(n))
        return (True,)

    return {"random": random, "randomseed": randomseed}


def _c_int(n: float | int) -> int:
    """luaL_checkint: ``(int)`` of the lua_Number, truncated; out of range gives INT_MIN
    (x86-64's cvttsd2si)."""
    if isinstance(n, float):
        if n != n or n in (math.inf, -math.inf):
            return -(2**31)
        n = int(n)
    return n if -(2**31) <= n < 2**31 else -(2**31)


def sha1hex(data: bytes) -> bytes:
    return hashlib.sha1(data).hexdigest().encode()
