"""LZF decompression, as Redis's ``lzf_d.c`` (liblzf 3.6) reads what ``lzf_c.c`` wrote.

Redis compresses a string of more than 20 bytes in an RDB file or a DUMP payload with LZF
when ``rdbcompression`` is on (the default) and it saves at least four bytes. The format
is a sequence of tokens, each starting with a control byte ``ctrl``:

- ``ctrl < 32``: a literal run: the next ``ctrl + 1`` bytes are copied to the output;
- otherwise a back reference: ``len = ctrl >> 5`` (7 means "7 plus the next byte"), then
  one more byte ``lo``; ``len + 2`` bytes are copied from ``((ctrl & 31) << 8 | lo) + 1``
  bytes back in the output (the source may overlap what is being written: a run).

Only decompression is here: marekvs writes strings uncompressed (a payload Redis reads
as if ``rdbcompression`` were off). Every malformed input (a token running past the end
of the input, a reference before the start of the output, more output than announced)
raises ``LzfError``, so a bad payload is refused, never misread.
"""

from __future__ import annotations


class LzfError(ValueError):
    """The input is not an LZF stream of the announced length."""


def decompress(data: bytes | memoryview, out_len: int) -> bytes:
    """The ``out_len`` bytes the LZF stream ``data`` decompresses to (all of ``data``
    must be consumed, and produce exactly ``out_len`` bytes, as Redis requires)."""
    src = bytes(data)
    n = len(src)
    out = bytearray()
    i = 0
    while i < n:
        ctrl = src[i]
        i += 1
        if ctrl < 32:
            run = ctrl + 1
            if i + run > n:
                raise LzfError("literal run past the end of the input")
            if len(out) + run > out_len:
                raise LzfError("more output than announced")
            out += src[i:i + run]
            i += run
            continue
        length = ctrl >> 5
        if length == 7:
            if i >= n:
                raise LzfError("back reference past the end of the input")
            length += src[i]
            i += 1
        if i >= n:
            raise LzfError("back reference past the end of the input")
        back = ((ctrl & 0x1F) << 8 | src[i]) + 1
        i += 1
        length += 2
        start = len(out) - back
        if start < 0:
            raise LzfError("back reference before the start of the output")
        if len(out) + length > out_len:
            raise LzfError("more output than announced")
        if back >= length:
            out += out[start:start + length]
        else:  # the source overlaps the bytes being written: a repeated pattern
            chunk = out[start:]
            reps = -(-length // back)
            out += (chunk * reps)[:length]
    if len(out) != out_len:
        raise LzfError(f"{len(out)} bytes decompressed, {out_len} announced")
    return bytes(out)
