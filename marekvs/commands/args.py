"""Argument parsing shared by the command families, with Redis 7.0's exact rules.

Everything here is pure (no storage): handlers call these to turn argument bytes into
values, and every failure raises ``CommandError`` with Redis's text.

Integers (``parse_ll``)
    Redis ``string2ll``: optional '-', then digits with no leading zero (``"0"`` alone
    is fine), no '+', no spaces, at most 20 characters, within int64. ``"+1"``,
    ``" 1"``, ``"01"`` and ``"-0"`` are not integers.

Long doubles (``parse_ld`` / ``ld_add`` / ``format_ld``)
    INCRBYFLOAT works in the C ``long double`` of x86-64 Linux (x87 80-bit extended:
    64-bit significand, exponents -16382..16383, subnormals below). Python has no such
    type, so values are exact ``Fraction``s rounded to that format after every
    operation (round half to even, as the FPU does). ``parse_ld`` follows
    ``string2ld``: ``strtold`` grammar (decimal, hex ``0x1p3``, ``inf``/``infinity``),
    the whole string must be consumed (an embedded NUL fails that), no leading space,
    no NaN, and overflow or underflow to zero is refused. ``format_ld`` is
    ``ld2string(LD_STR_HUMAN)``: ``%.17Lf`` with trailing zeros (and a bare '.')
    removed, ``-0`` printed as ``0``.

Options (``Options``)
    The one option loop every command with options uses: Dragonfly's ``CmdArgParser``
    style, for Redis's ``for (j = ...; j < c->argc; j++) if (!strcasecmp(...) && moreargs)``
    loops. Keywords compare as ``strcasecmp`` does (a C string, any case: ``NX\0junk`` is
    NX, as in Redis); a value's conversion failing, or a handler's ``fail``, latches the
    first error, ends the loop, and ``check()`` raises it once at the end. Flags that
    only lead the arguments (ZADD, GEOADD: no value, no error) are ``leading_flags``.

Expire times (``parse_set_options``, ``expire_deadline``, ``parse_expire_flags``)
    SET / GETEX options as ``parseExtendedStringArgumentsOrReply``; the deadline rule
    of ``getExpireMillisecondsOrReply``; EXPIRE's NX/XX/GT/LT as
    ``parseExtendedExpireArgumentsOrReply``.

Glob (``stringmatch``)
    ``stringmatchlen`` exactly, including its quirks: ranges compare *signed* chars,
    an unterminated ``[`` class matches what it has read, ``\\`` escapes inside and
    outside classes, and the 1000-level nesting guard. It runs on an explicit stack so
    deep patterns cannot hit Python's recursion limit.
"""

from __future__ import annotations

import re
from decimal import Decimal
from fractions import Fraction

from marekvs.commands import errors
from marekvs.commands.errors import CommandError
from marekvs.core.sds import c_str

LLONG_MAX = (1 << 63) - 1
LLONG_MIN = -(1 << 63)
INT_MAX = (1 << 31) - 1
INT_MIN = -(1 << 31)
ULONG_MAX = (1 << 64) - 1


# -- integers ----------------------------------------------------------------------------

def parse_ll(b: bytes) -> int | None:
    """Redis ``string2ll``: the int64 that ``b`` spells canonically, else None."""
    n = len(b)
    if n == 0 or n >= 21:
        return None
    if b.isdigit():
        if b[0] == 48 and n > 1:
            return None
        v = int(b)
        return v if v <= LLONG_MAX else None
    if n > 1 and b[0] == 45 and b[1] != 48 and b[1:].isdigit():
        v = int(b)
        return v if v >= LLONG_MIN else None
    return None


def int_arg(b: bytes, msg: str = errors.NOT_INTEGER) -> int:
    v = parse_ll(b)
    if v is None:
        raise CommandError(msg)
    return v


def int_range_arg(b: bytes, lo: int = INT_MIN, hi: int = INT_MAX) -> int:
    """``getRangeLongFromObjectOrReply`` with no custom message."""
    v = int_arg(b)
    if v < lo or v > hi:
        raise CommandError(errors.value_out_of_range(lo, hi))
    return v


def parse_cursor(b: bytes) -> int:
    """``parseScanCursorOrReply``: C ``strtoul`` (optional sign, '-' wraps, an empty
    string is 0) but no leading space, nothing after the digits, no overflow."""
    s = c_str(b)
    if s[:1].isspace():
        raise CommandError(errors.INVALID_CURSOR)
    body = s[1:] if s[:1] in (b"+", b"-") else s
    if not s:
        return 0
    if not body.isdigit():
        raise CommandError(errors.INVALID_CURSOR)
    v = int(body)
    if v > ULONG_MAX:
        raise CommandError(errors.INVALID_CURSOR)
    return (-v) & ULONG_MAX if s[:1] == b"-" else v


# -- options ------------------------------------------------------------------------------

class Options:
    """A latched parser of a command's options, from ``args[pos]`` on::

        p = Options(args, 3)
        while p.more():
            if p.accept(b"nx"):
                nx = True
            elif p.accept(b"count", 1):  # COUNT and one more argument
                count = p.integer()
                if count < 1:
                    p.fail(errors.SYNTAX)
            else:
                p.fail(errors.SYNTAX)
        p.check()  # raises the first error, if any

    ``accept`` consumes a keyword when it matches and ``tail`` arguments follow it (else a
    later branch, or the loop's ``fail``, sees it). Reading a value (``value``, ``integer``)
    consumes it. The first ``fail`` or failed conversion is kept and later ones are
    ignored; ``more()`` is then false, so the loop ends where Redis's returns. A value
    helper that raises ``CommandError`` itself is fine: it is the first error too. A loop
    that ends at the first argument that is not an option ``break``s; ``pos`` is then where
    the rest begins."""

    __slots__ = ("args", "pos", "end", "error", "_at", "_word")

    def __init__(self, args: list[bytes], pos: int, end: int | None = None):
        self.args = args
        self.pos = pos
        self.end = len(args) if end is None else end
        self.error: str | None = None
        self._at = -1  # the position ``_word`` was read at
        self._word = b""

    def more(self) -> bool:
        """Arguments left, and no error latched."""
        return self.error is None and self.pos < self.end

    def left(self) -> int:
        """The arguments left, the current one included."""
        return self.end - self.pos

    def word(self) -> bytes:
        """The current argument as ``strcasecmp`` compares it: a C string, lower case
        (not consumed)."""
        if self._at != self.pos:
            self._at = self.pos
            self._word = c_str(self.args[self.pos]).lower() if self.pos < self.end else b""
        return self._word

    def accept(self, keyword: bytes, tail: int = 0) -> bool:
        """Is the current argument ``keyword`` (lower case), with at least ``tail``
        arguments after it? Then it is consumed."""
        pos = self.pos
        if self.end - pos > tail:
            if self._at != pos:  # (word(), inline: handlers call this in chains)
                self._at = pos
                self._word = c_str(self.args[pos]).lower()
            if self._word == keyword:
                self.pos = pos + 1
                return True
        return False

    def value(self) -> bytes:
        """The current argument, consumed (past the end: a syntax error, and b"")."""
        if self.pos >= self.end:
            self.fail(errors.SYNTAX)
            return b""
        self.pos += 1
        return self.args[self.pos - 1]

    def integer(self, msg: str = errors.NOT_INTEGER) -> int:
        """The current argument as ``string2ll`` reads it, consumed; ``msg`` latched (and
        0 returned) when it is not an integer."""
        v = parse_ll(self.value())
        if v is None:
            self.fail(msg)
            return 0
        return v

    def fail(self, msg: str) -> None:
        """Latch ``msg``, unless an error is latched already."""
        if self.error is None:
            self.error = msg

    def check(self) -> None:
        """Raise the latched error, if any."""
        if self.error is not None:
            raise CommandError(self.error)


def leading_flags(args: list[bytes], start: int, names: dict[bytes, int]) -> tuple[int, int]:
    """The flags (``names``: keyword in lower case -> bit) at ``args[start:]``, up to the
    first argument that is not one: (their bits OR-ed, where the rest begins). The grammar
    of ZADD and GEOADD (``zaddGenericCommand``'s loop): keywords as strcasecmp reads them,
    and no error to latch, so no ``Options`` either (it is a write's hot path)."""
    flags = 0
    i, n = start, len(args)
    while i < n:
        bit = names.get(c_str(args[i]).lower())
        if bit is None:
            break
        flags |= bit
        i += 1
    return flags, i


# -- long doubles (x87 80-bit extended) ---------------------------------------------------

LD_MANT = 64  # significand bits, explicit integer bit included
LD_EMIN = -16382  # exponent of the smallest normal: 2**-16382
LD_EMAX = 16383
MAX_LONG_DOUBLE_CHARS = 5 * 1024
INF = float("inf")

Ld = Fraction | float  # a finite exact value, or +-inf


def ld_round(x: Fraction) -> Ld:
    """Round an exact value to the nearest 80-bit long double (ties to even)."""
    if x == 0:
        return Fraction(0)
    a = abs(x)
    num, den = a.numerator, a.denominator
    e = num.bit_length() - den.bit_length()
    if (num << -e if e < 0 else num) < (den << e if e > 0 else den):
        e -= 1  # now 2**e <= a < 2**(e+1)
    e = max(e, LD_EMIN)
    ulp = Fraction(2) ** (e - (LD_MANT - 1))
    r = round(a / ulp) * ulp  # Fraction.__round__ rounds half to even
    if r >= Fraction(1 << (LD_EMAX + 1)):
        return INF if x > 0 else -INF
    return r if x > 0 else -r


# Possessive quantifiers: a digit run is never given back, so a long argument that
# fails to match costs one pass, not a backtracking search (5,000 digits and an 'x'
# took 0.4 s of the event loop with plain ones).
_LD_RE = re.compile(
    rb"([+-]?)(?:"
    rb"(inf(?:inity)?)"
    rb"|(nan(?:\([0-9a-z_]*+\))?)"
    rb"|0x([0-9a-f]++\.?+[0-9a-f]*+|\.[0-9a-f]++)(?:p([+-]?[0-9]++))?"
    rb"|([0-9]++\.?+[0-9]*+|\.[0-9]++)(?:e([+-]?[0-9]++))?"
    rb")",
    re.IGNORECASE,
)


def _digits_to_int(d: bytes) -> int:
    # Decimal converts without CPython's 4300-digit limit on int(str)
    return int(d) if len(d) < 4000 else int(Decimal(d.decode()))


def _int_to_digits(n: int) -> bytes:
    return b"%d" % n if n.bit_length() < 13000 else str(Decimal(n)).encode()


def _exponent(e: bytes | None) -> int:
    """A decimal exponent, saturated far beyond any long double's range."""
    if not e:
        return 0
    neg = e[:1] == b"-"
    d = e.lstrip(b"+-").lstrip(b"0") or b"0"
    v = int(d) if len(d) <= 18 else 10**18
    return -v if neg else v


def parse_ld(b: bytes) -> Ld | None:
    """Redis ``string2ld``: the long double ``b`` spells, or None."""
    if not b or len(b) >= MAX_LONG_DOUBLE_CHARS:
        return None
    # (_LD_RE has no NUL: a string with one is refused, as string2ld's length check does)
    m = _LD_RE.fullmatch(b)
    if m is None:
        return None
    sign, inf, nan, hexm, hexp, decm, dece = m.groups()
    neg = sign == b"-"
    if inf:
        return -INF if neg else INF
    if nan:
        return None
    if hexm is not None:
        ip, _, fp = hexm.partition(b".")
        mant = int(ip + fp or b"0", 16)  # base 16 has no digit limit
        exp2 = _exponent(hexp) - 4 * len(fp)
        if mant == 0:
            return Fraction(0)
        mag = mant.bit_length() + exp2  # 2**(mag-1) <= value < 2**mag
        if mag > LD_EMAX + 2:
            return None  # overflow: ERANGE with HUGE_VAL
        if mag < LD_EMIN - LD_MANT - 2:
            return None  # underflow to zero: ERANGE
        val = Fraction(mant) * (Fraction(2) ** exp2)
    else:
        ip, _, fp = decm.partition(b".")
        digits = (ip + fp).lstrip(b"0")
        if not digits:
            return Fraction(0)
        exp10 = _exponent(dece) - len(fp)
        mag = len(digits) + exp10  # 10**(mag-1) <= value < 10**mag
        if mag > 4934:
            return None
        if mag < -4952:
            return None
        val = Fraction(_digits_to_int(digits)) * (Fraction(10) ** exp10)
    r = ld_round(-val if neg else val)
    if isinstance(r, float) or r == 0:
        return None  # out of range after rounding (overflow / underflow to 0)
    return r


def ld_add(a: Ld, b: Ld) -> Ld:
    """``a + b`` in long double; an infinite or NaN result comes back as a float."""
    if isinstance(a, float):
        return a + b if isinstance(b, float) else a
    if isinstance(b, float):
        return b
    return ld_round(a + b)


def format_ld(v: Fraction) -> bytes:
    """``ld2string(..., LD_STR_HUMAN)``: ``%.17Lf`` minus trailing zeros."""
    n = round(abs(v) * 10**17)  # exact decimal rounding, ties to even (glibc printf)
    ip, fp = divmod(n, 10**17)
    s = _int_to_digits(ip) + b".%017d" % fp
    s = s.rstrip(b"0").rstrip(b".")
    if v < 0 and s != b"0":
        s = b"-" + s
    return s


# -- SET / GETEX options and expire times ----------------------------------------------------

NX = 1 << 0
XX = 1 << 1
GET = 1 << 2
KEEPTTL = 1 << 3
PERSIST = 1 << 4
EX = 1 << 5
PX = 1 << 6
EXAT = 1 << 7
PXAT = 1 << 8
_EXPIRES = EX | PX | EXAT | PXAT
_SET_ONLY, _GETEX_ONLY = 1, 2
# parseExtendedStringArgumentsOrReply's options: keyword -> (flag, the flags it may not
# join, the command it belongs to); an expire option also needs a value after it
_SET_OPTS = {
    b"nx": (NX, XX, _SET_ONLY), b"xx": (XX, NX, _SET_ONLY), b"get": (GET, 0, _SET_ONLY),
    b"keepttl": (KEEPTTL, PERSIST | _EXPIRES, _SET_ONLY), b"persist": (PERSIST, _EXPIRES | KEEPTTL, _GETEX_ONLY),
    **{w: (f, KEEPTTL | PERSIST | (_EXPIRES & ~f), _SET_ONLY | _GETEX_ONLY)
       for w, f in ((b"ex", EX), (b"px", PX), (b"exat", EXAT), (b"pxat", PXAT))},
}


def parse_set_options(args: list[bytes], start: int, for_set: bool) -> tuple[int, bytes | None]:
    """``parseExtendedStringArgumentsOrReply``: (flags, expire argument or None).

    SET takes NX XX GET KEEPTTL and one of EX PX EXAT PXAT; GETEX takes PERSIST and
    one of EX PX EXAT PXAT. A repeated option is accepted (the last value wins);
    conflicting ones are a syntax error."""
    flags = 0
    expire = None
    command = _SET_ONLY if for_set else _GETEX_ONLY
    p = Options(args, start)
    while p.more():
        opt = _SET_OPTS.get(p.word())
        if opt is None or not opt[2] & command or flags & opt[1] or (opt[0] & _EXPIRES and p.left() < 2):
            p.fail(errors.SYNTAX)
            break
        p.value()
        flags |= opt[0]
        if opt[0] & _EXPIRES:
            expire = p.value()
    p.check()
    return flags, expire


def expire_deadline(fullname: str, arg: bytes, flags: int, now: int) -> int:
    """``getExpireMillisecondsOrReply``: the absolute deadline (ms) an EX / PX / EXAT /
    PXAT argument names. It must be positive; relative forms add ``now``."""
    ms = int_arg(arg)
    seconds = bool(flags & (EX | EXAT))
    if ms <= 0 or (seconds and ms > LLONG_MAX // 1000):
        raise CommandError(errors.invalid_expire(fullname))
    if seconds:
        ms *= 1000
    if flags & (EX | PX):
        ms += now
    if ms <= 0 or ms > LLONG_MAX:  # C overflow wraps negative
        raise CommandError(errors.invalid_expire(fullname))
    return ms


E_NX = 1 << 0
E_XX = 1 << 1
E_GT = 1 << 2
E_LT = 1 << 3
_E_OPTS = {b"nx": E_NX, b"xx": E_XX, b"gt": E_GT, b"lt": E_LT}


def parse_expire_flags(args: list[bytes], start: int) -> int:
    """``parseExtendedExpireArgumentsOrReply`` (EXPIRE family NX | XX | GT | LT)."""
    flags = 0
    p = Options(args, start)
    while p.more():
        f = _E_OPTS.get(p.word())
        opt = p.value()
        if f is None:
            p.fail(errors.unsupported_option(opt))
        else:
            flags |= f
    if flags & E_NX and flags & (E_XX | E_GT | E_LT):
        p.fail(errors.NX_XX_GT_LT)
    if flags & E_GT and flags & E_LT:
        p.fail(errors.GT_LT)
    p.check()
    return flags


def expire_when(fullname: str, arg: bytes, seconds: bool, basetime: int) -> int:
    """EXPIRE's time argument as absolute ms (may be negative: the key is then
    deleted). Only overflow is an error, as in ``expireGenericCommand``."""
    when = int_arg(arg)
    if seconds:
        if when > LLONG_MAX // 1000 or when < -(-LLONG_MIN // 1000):  # C truncates
            raise CommandError(errors.invalid_expire(fullname))
        when *= 1000
    if when > LLONG_MAX - basetime:
        raise CommandError(errors.invalid_expire(fullname))
    return when + basetime


# -- SCAN, HSCAN, SSCAN, ZSCAN ------------------------------------------------------------------

def scan_options(args: list[bytes], start: int, novalues_ok: bool = False,
                 type_ok: bool = False) -> tuple[int, bytes | None, bool, bytes | None]:
    """``scanGenericCommand``'s options: (COUNT, MATCH pattern or None for ``*``, NOVALUES
    (HSCAN, as Redis 7.4), TYPE (SCAN) or None)."""
    count, pattern, novalues, typename = 10, None, False, None
    p = Options(args, start)
    while p.more():
        if p.accept(b"count", 1):
            count = p.integer()
            if count < 1:
                p.fail(errors.SYNTAX)
        elif p.accept(b"match", 1):
            pattern = p.value()
            if pattern == b"*":
                pattern = None
        elif type_ok and p.accept(b"type", 1):
            typename = p.value()
        elif novalues_ok and p.accept(b"novalues"):
            novalues = True
        else:
            p.fail(errors.SYNTAX)
    p.check()
    return count, pattern, novalues, typename


# -- limits that depend on the server's configuration ---------------------------------------

def proto_max_bulk_len(ctx) -> int:
    return ctx.node.limits.max_bulk


# -- glob (stringmatchlen) ------------------------------------------------------------------

def _signed(ch: int) -> int:
    return ch - 256 if ch > 127 else ch


def _lower(ch: int) -> int:
    return ch + 32 if 65 <= ch <= 90 else ch


def _match_from(p: bytes, pi: int, s: bytes, si: int, nocase: bool) -> tuple[int, int, int]:
    """Run the linear part of ``stringmatchlen_impl`` from (pi, si).

    Returns (1, 0, 0) on match, (0, 0, 0) on mismatch, or (2, pi, si) when a
    non-trailing '*' needs the caller to try the rest of the pattern (from pi + 1)
    at every suffix of the string starting at si."""
    plen = len(p)
    slen = len(s)
    while pi < plen and si < slen:
        c = p[pi]
        if c == 42:  # '*'
            while pi + 1 < plen and p[pi + 1] == 42:
                pi += 1
            if pi + 1 == plen:
                return 1, 0, 0
            return 2, pi, si
        if c == 63:  # '?'
            si += 1
        elif c == 91:  # '['
            pi += 1
            neg = pi < plen and p[pi] == 94
            if neg:
                pi += 1
            match = False
            sc = s[si]
            while True:
                if pi < plen and p[pi] == 92 and plen - pi >= 2:
                    pi += 1
                    if p[pi] == sc:
                        match = True
                elif pi < plen and p[pi] == 93:
                    break
                elif pi >= plen:
                    pi -= 1
                    break
                elif plen - pi >= 3 and p[pi + 1] == 45:
                    lo, hi, ch = _signed(p[pi]), _signed(p[pi + 2]), _signed(sc)
                    if lo > hi:
                        lo, hi = hi, lo
                    if nocase:
                        lo, hi, ch = _lower(lo), _lower(hi), _lower(ch)
                    pi += 2
                    if lo <= ch <= hi:
                        match = True
                elif nocase:
                    if _lower(p[pi]) == _lower(sc):
                        match = True
                elif p[pi] == sc:
                    match = True
                pi += 1
            if neg:
                match = not match
            if not match:
                return 0, 0, 0
            si += 1
        else:
            if c == 92 and plen - pi >= 2:  # '\\' escapes the next byte
                pi += 1
            if nocase:
                if _lower(p[pi]) != _lower(s[si]):
                    return 0, 0, 0
            elif p[pi] != s[si]:
                return 0, 0, 0
            si += 1
        pi += 1
        if si == slen:
            while pi < plen and p[pi] == 42:
                pi += 1
            break
    return (1 if pi == plen and si == slen else 0), 0, 0


def stringmatch(pattern: bytes, string: bytes, nocase: bool = False) -> bool:
    """Redis ``stringmatchlen``: does ``string`` match the glob ``pattern``?"""
    if pattern == b"*":
        return True
    slen = len(string)
    stack: list[list[int]] = []  # one frame per active '*': [pattern index after it, si]
    skip_longer = False  # the shared ``skipLongerMatches`` flag
    pi, si = 0, 0
    while True:
        if len(stack) > 1000:  # nesting guard of stringmatchlen_impl
            res = 0
        else:
            res, spi, ssi = _match_from(pattern, pi, string, si, nocase)
            if res == 2:
                stack.append([spi + 1, ssi])
                pi, si = spi + 1, ssi
                continue
        # ``res`` is the result of the innermost call; unwind into the '*' loops
        while True:
            if res == 1:
                return True
            if not stack:
                return False
            frame = stack[-1]
            if skip_longer:
                stack.pop()
                continue
            frame[1] += 1
            if frame[1] < slen:
                pi, si = frame
                break
            skip_longer = True
            stack.pop()
