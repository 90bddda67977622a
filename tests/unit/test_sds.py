"""core/sds.py: ``splitargs`` is Redis 7.0's ``sdssplitargs`` and ``c_str`` its C string.

Every expectation below is what redis-server 7.0.15 makes of the same line sent as an
inline request (``RPUSH L <line>``, then ``LRANGE L 0 -1``; None where it answers
"Protocol error: unbalanced quotes in request"), checked when the cases were written; lines
with a NUL, \\r or \\n cannot travel inline, so those follow sds.c as read. The RESP
parser, ACL selectors and script shebangs all split with this one function.
"""

from __future__ import annotations

import pytest

from marekvs.core.sds import c_str, splitargs

CASES = [
    # blanks
    (b"", []),
    (b"   ", []),
    (b"a b  c", [b"a", b"b", b"c"]),
    (b" \t a\tb \r\n", [b"a", b"b"]),
    (b"\x0b\x0ca\x0c b", [b"a\x0c", b"b"]),  # \v and \f are skipped before an argument ...
    (b"a\x0bb", [b"a\x0bb"]),  # ... but do not end an unquoted one
    (b"a\x0cb c", [b"a\x0cb", b"c"]),
    (b"\xff\xfe x", [b"\xff\xfe", b"x"]),
    # double quotes: \xHH and the C escapes, any other escaped byte stands for itself
    (b'"a b"', [b"a b"]),
    (b'""', [b""]),
    (b'"" x', [b"", b"x"]),
    (b'"\\x41\\x4g\\xZZ"', [b"Ax4gxZZ"]),
    (b'"\\x4"', [b"x4"]),
    (b'"\\n\\r\\t\\b\\a\\q\\\\\\""', [b'\n\r\t\x08\x07q\\"']),
    (b'"a\x0bb"', [b"a\x0bb"]),
    # single quotes: only \' is an escape
    (b"'a b'", [b"a b"]),
    (b"'it\\'s'", [b"it's"]),
    (b"'a\\nb'", [b"a\\nb"]),
    (b"'\\x41'", [b"\\x41"]),
    (b"'a\"b'", [b'a"b']),
    # quotes inside an argument join it
    (b'x"a b"', [b"xa b"]),
    (b"x'a'", [b"xa"]),
    (b"a\x0b\"b\"", [b"a\x0bb"]),
    # a closing quote must be followed by a blank (any isspace) or the end
    (b'"a"\x0b', [b"a"]),
    (b'"a"\tb', [b"a", b"b"]),
    (b'"a"b', None),
    (b"'a'b", None),
    (b'"a""b"', None),
    # unbalanced quotes
    (b'"a', None),
    (b"'a", None),
    (b'"a\\"', None),
    (b"'a\\'", None),
    (b'x "', None),
    # a NUL ends the line (a C string)
    (b"a\x00b c", [b"a"]),
    (b'"a\x00"', None),
    (b"\x00x", []),
    # script shebangs (FUNCTION LOAD, EVAL)
    (b"#!lua name=x", [b"#!lua", b"name=x"]),
    (b'#!lua "name=q" \'it\\\'s\'', [b"#!lua", b"name=q", b"it's"]),
]


@pytest.mark.parametrize("line, parts", CASES, ids=[repr(c[0]) for c in CASES])
def test_splitargs_is_sdssplitargs(line, parts):
    assert splitargs(line) == parts


def test_splitargs_returns_bytes_whatever_the_path():
    for line, parts in CASES:
        if parts:
            assert all(type(p) is bytes for p in splitargs(line))


def test_c_str_cuts_at_the_first_nul():
    assert c_str(b"abc") == b"abc"
    assert c_str(b"ab\x00c\x00") == b"ab"
    assert c_str(b"\x00") == b""
    assert c_str(b"") == b""
