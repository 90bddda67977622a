"""Redis's C-string rules that several layers share: ``c_str`` and ``splitargs``.

Redis keeps arguments as sds strings and many of its routines read them as C strings: a
NUL byte ends the text (``strcasecmp``, ``%s`` in an error, ``sdssplitargs``). One
implementation here serves the RESP server's inline requests (``server/resp.py``), ACL
selector rules (``commands/aclrules.py``) and script shebang lines
(``node/scripting/functions.py``); core is the one layer all three may import.

``splitargs`` is ``sdssplitargs`` (src/sds.c, Redis 7.0) byte for byte:

- blanks (``isspace``: space, \\t \\n \\r \\v \\f) separate arguments; an unquoted argument
  ends at a space, \\t, \\n or \\r only (a \\v or \\f inside one is kept);
- "double quotes" take ``\\xHH`` (two hex digits) and ``\\n \\r \\t \\b \\a``; any other
  escaped byte stands for itself;
- 'single quotes' take only ``\\'``; every other byte is literal;
- a quoted part may follow unquoted bytes of the same argument (``a"b c"`` is ``ab c``);
- a closing quote followed by anything but a blank, and an unbalanced quote, make the
  whole line an error: None;
- the line is a C string: a NUL ends it.

tests/unit/test_sds.py pins these against what redis-server 7.0 answers.
"""

from __future__ import annotations

# isspace() in the C locale: skipped between arguments and required after a closing quote
_BLANKS = b" \n\r\t\x0b\x0c"
# what ends an unquoted argument (sdssplitargs' switch: NUL is the end of the line here)
_ENDS = b" \n\r\t"
_ESCAPES = {0x6E: 10, 0x72: 13, 0x74: 9, 0x62: 8, 0x61: 7}  # \n \r \t \b \a
_HEX = frozenset(b"0123456789abcdefABCDEF")


def c_str(b: bytes) -> bytes:
    """``b`` read as a C string: the bytes up to the first NUL."""
    z = b.find(b"\x00")
    return b if z < 0 else b[:z]


def splitargs(line: bytes) -> list[bytes] | None:
    """``sdssplitargs``: the arguments of ``line``, or None (unbalanced quotes, or a
    closing quote not followed by a blank)."""
    line = c_str(line)
    if b'"' not in line and b"'" not in line and b"\x0b" not in line and b"\x0c" not in line:
        return line.split()  # (bytes.split() splits at exactly _BLANKS)
    args: list[bytes] = []
    i, n = 0, len(line)
    while True:
        while i < n and line[i] in _BLANKS:
            i += 1
        if i >= n:
            return args
        cur = bytearray()
        inq = insq = False
        while True:
            if inq:
                if i >= n:
                    return None
                c = line[i]
                if c == 0x5C and i + 3 < n and line[i + 1] == 0x78 and line[i + 2] in _HEX and line[i + 3] in _HEX:
                    cur.append(int(line[i + 2:i + 4], 16))
                    i += 3
                elif c == 0x5C and i + 1 < n:
                    i += 1
                    cur.append(_ESCAPES.get(line[i], line[i]))
                elif c == 0x22:
                    if i + 1 < n and line[i + 1] not in _BLANKS:
                        return None
                    i += 1
                    break  # a closing quote ends the argument
                else:
                    cur.append(c)
            elif insq:
                if i >= n:
                    return None
                c = line[i]
                if c == 0x5C and i + 1 < n and line[i + 1] == 0x27:
                    i += 1
                    cur.append(0x27)
                elif c == 0x27:
                    if i + 1 < n and line[i + 1] not in _BLANKS:
                        return None
                    i += 1
                    break
                else:
                    cur.append(c)
            else:
                if i >= n:
                    break
                c = line[i]
                if c in _ENDS:
                    break
                if c == 0x22:
                    inq = True
                elif c == 0x27:
                    insq = True
                else:
                    cur.append(c)
            i += 1
        args.append(bytes(cur))
