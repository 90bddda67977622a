"""C's ``strtod`` on a byte string, as glibc reads it (Redis parses doubles with it).

``strtod(b)`` returns ``(value, consumed, erange)``: the double read from the longest
prefix of ``b`` (cut at its first NUL, as a C string is) that forms a number, how many
bytes that prefix is (0: no number at all; the value is then 0.0), and whether glibc sets
``errno = ERANGE``. The grammar: leading white space (``isspace``), an optional sign, then
``inf``/``infinity``, ``nan`` with an optional ``(chars)``, a hexadecimal float ``0x...``
with an optional binary exponent ``p``, or a decimal with an optional exponent ``e`` (an
exponent is taken only when digits follow). ERANGE: the value overflowed to infinity, or
underflowed (a subnormal or zero result that is not exact). Decimal values round as
glibc does, correctly (Python's ``float``).
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Callable

from marekvs.core.sds import c_str

_MIN_NORMAL = 2.2250738585072014e-308
_SPACE = b" \t\n\v\f\r"
_NUM = re.compile(
    rb"([+-]?)(?:"
    rb"(infinity|inf)"
    rb"|(nan)(\([0-9a-z_]*+\))?"
    rb"|(0x)([0-9a-f]++\.?+[0-9a-f]*+|\.[0-9a-f]++)(p[+-]?[0-9]++)?"
    rb"|([0-9]++\.?+[0-9]*+|\.[0-9]++)(e[+-]?[0-9]++)?"
    rb")",
    re.IGNORECASE,
)


# A plain decimal of fewer than 300 characters can neither overflow nor underflow: read it
# with ``float`` directly (the common case: SORT's scores)
PLAIN = re.compile(rb"-?[0-9]+(?:\.[0-9]+)?")


def strtod(b: bytes) -> tuple[float, int, bool]:
    if len(b) < 300 and PLAIN.fullmatch(b):
        return float(b), len(b), False
    s = c_str(b)
    lead = len(s) - len(s.lstrip(_SPACE))
    m = _NUM.match(s, lead)
    if m is None:
        return 0.0, 0, False
    # ("0x" without hex digits fails the hex branch and reads as the decimal "0")
    sign, inf, nan, _, hx, hmant, hexp, dmant, _ = m.groups()
    neg = sign == b"-"
    if inf is not None:
        return (float("-inf") if neg else float("inf")), m.end(), False
    if nan is not None:
        return float("nan"), m.end(), False
    text = m.group(0).decode("ascii")
    if hx is not None:
        try:
            v = float.fromhex(text)
        except OverflowError:
            return (float("-inf") if neg else float("inf")), m.end(), True
        if v != 0 and abs(v) >= _MIN_NORMAL:
            return v, m.end(), False
        ip, _, fp = hmant.partition(b".")
        mant = int(ip + fp or b"0", 16)
        e = int(hexp[1:]) if hexp else 0
        return v, m.end(), _inexact(v, mant, lambda: Fraction(mant) * Fraction(2) ** (e - 4 * len(fp)))
    v = float(text)
    if v in (float("inf"), float("-inf")):
        return v, m.end(), True
    if v != 0 and abs(v) >= _MIN_NORMAL:
        return v, m.end(), False
    mant = int(any(c not in b"0." for c in dmant))  # (non-zero or not is all that counts)
    if len(text) > 1000:
        return v, m.end(), bool(mant)
    return v, m.end(), _inexact(v, mant, lambda: Fraction(text.lstrip("+-")))


def _inexact(v: float, mant: int, exact: Callable[[], Fraction]) -> bool:
    """An underflow: a zero from a non-zero mantissa, or a subnormal that is not exact
    (an exact value is only worked out for texts of a sane size: a subnormal spelled
    with thousands of digits is taken as inexact)."""
    if v == 0:
        return mant != 0
    try:
        return Fraction(abs(v)) != exact()
    except (OverflowError, ValueError, MemoryError):
        return True
