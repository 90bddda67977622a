"""commands/args.Options: the latched option parser every command with options uses.

What the handlers rely on: keywords compare as strcasecmp does (any case, a C string), a
keyword is consumed only when the arguments it needs follow it, the FIRST error is kept
(a failed conversion or ``fail``), the loop stops there, and ``check`` raises it once.
The replies themselves are pinned against redis-server by
tests/integration/test_differential_options.py.
"""

from __future__ import annotations

import pytest

from marekvs.commands import errors
from marekvs.commands.args import Options, leading_flags
from marekvs.commands.errors import CommandError


def test_keywords_match_like_strcasecmp_and_need_their_tail():
    p = Options([b"CMD", b"Nx", b"count\x00junk", b"5", b"LIMIT"], 1)
    assert p.word() == b"nx" and p.pos == 1  # word() does not consume
    assert not p.accept(b"xx") and p.accept(b"nx") and p.pos == 2
    assert p.accept(b"count", 1) and p.integer() == 5
    assert not p.accept(b"limit", 1) and p.pos == 4  # LIMIT without its value: left for the loop's else
    assert p.accept(b"limit") and not p.more()
    p.check()


def test_the_first_error_is_kept_and_ends_the_loop():
    p = Options([b"count", b"x", b"count", b"0"], 0)
    seen = []
    while p.more():
        if p.accept(b"count", 1):
            n = p.integer()
            seen.append(n)
            if n < 1:
                p.fail(errors.SYNTAX)  # ignored: NOT_INTEGER came first
        else:
            p.fail(errors.SYNTAX)
    assert seen == [0] and p.error == errors.NOT_INTEGER
    with pytest.raises(CommandError) as e:
        p.check()
    assert e.value.message == errors.NOT_INTEGER


def test_a_value_past_the_end_is_a_syntax_error():
    p = Options([b"a"], 0, 1)
    assert p.value() == b"a"
    assert p.value() == b"" and p.error == errors.SYNTAX and not p.more()


def test_a_loop_that_ends_at_the_first_non_option_leaves_pos_there():
    p = Options([b"ZADD", b"z", b"NX", b"ch", b"1", b"m"], 2)
    flags = []
    while p.more():
        if p.accept(b"nx") or p.accept(b"ch"):
            flags.append(p.args[p.pos - 1])
        else:
            break
    assert flags == [b"NX", b"ch"] and p.pos == 4 and p.left() == 2
    p.check()


def test_integer_takes_a_custom_message():
    p = Options([b"1.5"], 0)
    assert p.integer(errors.TIMEOUT_NOT_INT) == 0
    assert p.error == errors.TIMEOUT_NOT_INT


def test_leading_flags_stop_at_the_first_non_flag():
    names = {b"nx": 1, b"ch": 2}
    assert leading_flags([b"ZADD", b"z", b"NX", b"ch\x00x", b"1", b"m"], 2, names) == (3, 4)
    assert leading_flags([b"ZADD", b"z", b"1", b"nx"], 2, names) == (0, 2)
    assert leading_flags([b"ZADD", b"z", b"nx"], 2, names) == (1, 3)
