"""RESP2/RESP3 codec, sans-I/O: feed bytes, get commands; encode replies to bytes.

The request parser follows Redis's ``processMultibulkBuffer`` / ``processInlineBuffer``
(networking.c, 7.0) so malformed input gets Redis's exact error text:

- a request starting with ``*`` is multibulk; anything else is an inline command
  (split like ``sdssplitargs``: spaces, "double" and 'single' quotes, \\xHH escapes);
  an empty inline line is ignored (``redis-cli --pipe`` sends one);
- ``*N`` with N <= 0 is skipped; N not a canonical integer or > INT_MAX is
  ``invalid multibulk length``; bulk headers must start with ``$`` (``expected '$',
  got 'X'``), lengths must be canonical, >= 0 and <= proto-max-bulk-len
  (``invalid bulk length``); header lines longer than 64 KB are ``too big ...``;
- before AUTH (when a password is set) more than 10 arguments or bulks over 16 KB are
  refused (``unauthenticated multibulk length`` / ``unauthenticated bulk length``);
- a NUL byte ends every line search, as Redis's ``strchr`` does: an inline request, a
  count line or a bulk header with a NUL before its line end is never complete, so it
  waits (Redis answers nothing either) until more than 64 KB are buffered, then fails
  with the ``too big ...`` error of its kind. ``splitargs`` (core/sds.py) reads its line as a C
  string for the same reason (``sdssplitargs`` stops at a NUL).

Every parse step either consumes bytes or stops (waits for more, or fails): no input
makes a loop spin in place (tests/unit/test_resp_fuzz.py checks it with hypothesis
over arbitrary bytes in arbitrary splits). Memory is bounded per connection: a bulk
by ``Limits.max_bulk`` (proto-max-bulk-len), and what a connection holds of requests
not yet complete (buffered bytes plus the arguments of a multibulk still arriving) is
``pending_bytes()``, which the server keeps under ``Limits.max_query``
(client-query-buffer-limit) by closing the connection, as Redis does.

After a protocol error the commands parsed before it are still returned; the caller
replies to them, then sends the error and closes the connection, as Redis does.

Big values: while a bulk longer than the buffered bytes is outstanding the parser only
collects chunks (no re-scan, no quadratic concatenation) and joins them once.
Parser state survives across ``feed`` calls, so a huge multibulk arriving in many
reads is parsed in linear time.

Fast path: ``RequestParser`` frames well-formed multibulk traffic with hiredis (C),
which is several times faster than Python, and keeps the strict parser above as the
reference. hiredis accepts a superset of requests (other reply types as elements) and
waits where Redis fails fast (huge declared lengths), so: a chunk that does not start
a multibulk, or that contains a newline followed by a RESP type byte other than ``$``
or ``*``, or any parsed command that is not a flat list of bulk strings, or any hiredis
error, hands the connection to the strict parser at the exact byte where the current
command starts (hiredis only accepts canonical lengths, so the bytes each returned
command consumed are known); a partial command left in hiredis is also checked by the
strict parser, so a bad or oversized header fails at once with Redis's text. Clients
that must authenticate first are always parsed strictly.
"""

from __future__ import annotations

import re

import hiredis

from marekvs.commands.reply import (  # noqa: F401 - the reply values this module encodes
    NO_REPLY,
    BigNumber,
    NULL_ARRAY,
    OK,
    PONG,
    QUEUED,
    Blocking,
    BulkArray,
    Replies,
    Double,
    DoubleText,
    Err,
    Map,
    NullArray,
    Push,
    SetReply,
    Simple,
    Verbatim,
    format_double,
)
from marekvs.config import Limits
from marekvs.core.sds import splitargs

INT_MAX = 2**31 - 1
PROTO_INLINE_MAX_SIZE = 64 * 1024
UNAUTH_MAX_MULTIBULK = 10
UNAUTH_MAX_BULK = 16384
# A request that starts as a TLS record (a ClientHello: handshake type 0x16, version 3.x) is
# a TLS client on the plaintext port: closed at once, where Redis would wait for a newline
TLS_ON_PLAINTEXT = "Protocol error: TLS handshake on a plaintext port"


class ProtocolError(Exception):
    """A request the server cannot frame; the message is the exact Redis text."""


def _canon_int(b: bytes) -> int | None:
    """Redis ``string2ll``: optional '-', digits, no leading zeros, no '+'/spaces."""
    if b.isdigit():
        if b[0] == 48 and len(b) > 1:
            return None
        return int(b)
    if len(b) > 1 and b[0] == 45 and b[1:].isdigit() and b[1] != 48:
        return int(b)
    return None


DEFAULT_LIMITS = Limits()
# what an argument of a multibulk still arriving is charged beyond its bytes (a bytes
# object and its list slot), so a request of many tiny arguments is bounded too
ARG_OVERHEAD = 48


def _line_end(buf: bytes, ch: bytes, pos: int, n: int) -> int:
    """Redis's ``strchr(buf + pos, ch)``: the index of ``ch`` from ``pos``, or -1 if there
    is none or a NUL comes first (C strings end there)."""
    i = buf.find(ch, pos)
    z = buf.find(b"\x00", pos, n if i < 0 else i)
    return -1 if z >= 0 else i


class StrictParser:
    """The reference request parser. ``feed(data)`` returns (commands, error)."""

    __slots__ = ("_buf", "_chunks", "_buffered", "_need", "_args", "_left", "_args_bytes", "_scanned",
                 "_stuck", "auth_required", "gated", "limits")

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self._buf = b""
        self._chunks: list[bytes] = []
        self._buffered = 0
        self._need = 0  # bytes the pending bulk needs before parsing can resume
        self._args: list[bytes] | None = None  # multibulk in progress
        self._left = 0  # bulks still to read for it
        self._args_bytes = 0  # what its arguments so far are charged (pending_bytes)
        self._scanned = 0  # bytes of the buffered inline line already searched for its end
        self._stuck = False  # the buffered line has a NUL before its end: it never completes
        self.auth_required = False
        self.gated = False  # a password is configured: AUTH/RESET may change the limits
        self.limits = limits

    def pending_bytes(self) -> int:
        """What this connection holds of requests not yet complete: buffered bytes and
        the arguments of a multibulk still arriving."""
        return len(self._buf) + self._buffered + self._args_bytes

    def idle(self) -> bool:
        """No partial request buffered."""
        return not self._buf and not self._need and self._args is None

    def _reset(self) -> None:
        self._buf = b""
        self._chunks = []
        self._buffered = self._need = self._left = self._args_bytes = self._scanned = 0
        self._args = None
        self._stuck = False

    def feed(self, data: bytes) -> tuple[list[list[bytes]], str | None]:
        if self._need:
            self._chunks.append(data)
            self._buffered += len(data)
            if len(self._buf) + self._buffered < self._need:
                return [], None
            self._chunks.insert(0, self._buf)
            buf = b"".join(self._chunks)
            self._chunks = []
            self._buffered = 0
            self._need = 0
        elif self._buf:
            buf = self._buf + data
        else:
            buf = data
        out: list[list[bytes]] = []
        try:
            pos = self._parse(buf, out)
        except ProtocolError as e:
            self._reset()
            return out, str(e)
        self._buf = buf[pos:] if pos < len(buf) else b""
        return out, None

    def _parse(self, buf: bytes, out: list[list[bytes]]) -> int:
        pos = 0
        n = len(buf)
        args = self._args
        left = self._left
        find = buf.find
        max_bulk = self.limits.max_bulk
        while pos < n:
            if args is None:
                if buf[pos] != 42:  # inline
                    if buf[pos] == 22 and not self._scanned:
                        if pos + 1 == n:
                            break  # (the next byte says whether it is a TLS record)
                        if buf[pos + 1] == 3:
                            raise ProtocolError(TLS_ON_PLAINTEXT)
                    # (the line end is searched once per byte: a line arriving in many
                    # reads is not re-scanned from its start every time)
                    nl = -1 if self._stuck else _line_end(buf, b"\n", pos + self._scanned, n)
                    if nl < 0:
                        if n - pos > PROTO_INLINE_MAX_SIZE:
                            raise ProtocolError("Protocol error: too big inline request")
                        self._stuck = self._stuck or find(b"\x00", pos + self._scanned) >= 0
                        self._scanned = n - pos
                        break
                    self._scanned = 0
                    end = nl - 1 if nl > pos and buf[nl - 1] == 13 else nl
                    parts = splitargs(buf[pos:end])
                    if parts is None:
                        raise ProtocolError("Protocol error: unbalanced quotes in request")
                    pos = nl + 1
                    if parts:
                        out.append(parts)
                        if self.gated or self.auth_required:
                            break  # see below: one command at a time
                    continue
                cr = _line_end(buf, b"\r", pos, n)
                if cr < 0 or cr + 1 >= n:
                    if n - pos > PROTO_INLINE_MAX_SIZE:
                        raise ProtocolError("Protocol error: too big mbulk count string")
                    break
                count = _canon_int(buf[pos + 1 : cr])
                if count is None or count > INT_MAX:
                    raise ProtocolError("Protocol error: invalid multibulk length")
                if count > UNAUTH_MAX_MULTIBULK and self.auth_required:
                    raise ProtocolError("Protocol error: unauthenticated multibulk length")
                pos = cr + 2
                if count <= 0:
                    continue
                args = []
                left = count
            # bulks of the multibulk in progress
            while left:
                if pos >= n:
                    break
                cr = _line_end(buf, b"\r", pos, n)
                if cr < 0 or cr + 1 >= n:
                    if n - pos > PROTO_INLINE_MAX_SIZE:
                        raise ProtocolError("Protocol error: too big bulk count string")
                    break
                if buf[pos] != 36:
                    raise ProtocolError("Protocol error: expected '$', got '%s'" % chr(buf[pos]))
                ln = _canon_int(buf[pos + 1 : cr])
                if ln is None or ln < 0 or ln > max_bulk:
                    raise ProtocolError("Protocol error: invalid bulk length")
                if ln > UNAUTH_MAX_BULK and self.auth_required:
                    raise ProtocolError("Protocol error: unauthenticated bulk length")
                start = cr + 2
                end = start + ln
                if end + 2 > n:
                    # wait for the whole bulk; resume at this header next time
                    self._need = end + 2 - pos
                    break
                args.append(buf[start:end])
                self._args_bytes += ln + ARG_OVERHEAD
                pos = end + 2
                left -= 1
            if left:
                break
            out.append(args)
            args = None
            self._args_bytes = 0
            if self.gated or self.auth_required:
                # AUTH may lift the unauthenticated limits for what follows, RESET may
                # restore them: with a password set, hand over one command at a time
                break
        self._args = args
        self._left = left
        return pos


# A newline followed by '+', '=' or '(' may start an element hiredis returns as bytes
# although Redis refuses it in a request (simple, verbatim, big-number): such chunks
# go to the strict parser (``RequestParser.feed``). So does a multibulk count this
# large: hiredis would allocate for it before failing or waiting (seconds for
# *2147483647), where Redis answers at once.
_BIG_COUNT = re.compile(rb"\*[0-9]{6}")


def _consumed(cmds: list[list[bytes]]) -> int:
    """Bytes the fast path consumed for ``cmds``: hiredis only accepts canonical
    lengths, so each request's size follows from its arguments."""
    return sum(canonical_len(a) for a in cmds)


def canonical_len(args: list[bytes]) -> int:
    """Bytes of ``args`` as a canonical multibulk request."""
    n = 3 + len(str(len(args)))
    for a in args:
        la = len(a)
        n += 5 + la + len(str(la))
    return n


class RequestParser:
    """Request parser with a hiredis fast path and the strict parser as reference.

    Invariant: in fast mode hiredis holds nothing between feeds. A chunk is parsed by
    hiredis only if it starts a multibulk and has no newline followed by ``+`` or
    ``=``; every returned command must be a non-empty flat list of bytes, and the
    canonical sizes of the returned commands must add up to the whole chunk. At the
    first command that breaks any of this, the rest of the chunk goes to the strict
    parser, which stays in charge until it is back at a clean boundary.
    """

    __slots__ = ("_reader", "_strict", "fast")

    def __init__(self, limits: Limits = DEFAULT_LIMITS) -> None:
        self._reader = hiredis.Reader()
        self._strict = StrictParser(limits)
        self.fast = True

    @property
    def auth_required(self) -> bool:
        return self._strict.auth_required

    @auth_required.setter
    def auth_required(self, v: bool) -> None:
        self._strict.auth_required = v

    @property
    def gated(self) -> bool:
        return self._strict.gated

    @gated.setter
    def gated(self, v: bool) -> None:
        self._strict.gated = v

    def pending_bytes(self) -> int:
        """Bytes held of requests not yet complete (none while ``fast``: in fast mode
        hiredis holds nothing between feeds)."""
        return 0 if self.fast else self._strict.pending_bytes()

    def more(self) -> tuple[list[list[bytes]], str | None]:
        """Parse what is still buffered (after a command changed the auth state)."""
        if self.fast or self._strict.idle():
            return [], None
        return self.feed(b"")

    def _to_strict(self, rest: bytes, done: list[list[bytes]]) -> tuple[list[list[bytes]], str | None]:
        self._reader = hiredis.Reader()
        self.fast = False
        cmds, err = self._strict.feed(rest) if rest else ([], None)
        if err is None and self._strict.idle() and not self._strict.auth_required:
            self.fast = True
        return (done + cmds if done else cmds), err

    @staticmethod
    def unauthenticated_error(args: list[bytes]) -> str | None:
        """The protocol error Redis gives ``args`` under the unauthenticated limits."""
        if len(args) > UNAUTH_MAX_MULTIBULK:
            return "Protocol error: unauthenticated multibulk length"
        for a in args:
            if len(a) > UNAUTH_MAX_BULK:
                return "Protocol error: unauthenticated bulk length"
        return None

    def feed(self, data: bytes) -> tuple[list[list[bytes]], str | None]:
        if not self.fast or data[:1] != b"*" or self._strict.auth_required:
            if self.fast:
                return self._to_strict(data, [])
            st = self._strict
            cmds, err = st.feed(data)
            if err is None and st.idle() and not st.auth_required:
                self.fast = True
            return cmds, err
        # (each type byte is looked for alone first, as an int: one memchr, where a
        # bytes needle costs several times more per chunk)
        if ((43 in data and b"\n+" in data) or (61 in data and b"\n=" in data)  # '+' '='
                or (40 in data and b"\n(" in data) or _BIG_COUNT.search(data) is not None):  # '('
            return self._to_strict(data, [])
        r = self._reader
        r.feed(data)
        out: list[list[bytes]] = []
        try:
            while True:
                o = r.gets()
                if o is False:
                    break
                if type(o) is not list or not o:
                    return self._to_strict(data[_consumed(out):], out)
                for a in o:
                    if type(a) is not bytes:
                        return self._to_strict(data[_consumed(out):], out)
                out.append(o)
            # Was the chunk consumed to its end? hiredis answers an empty multibulk
            # with exactly [] only if it was between requests; mid-request the probe
            # would be read as part of the pending request (then the reader is
            # replaced anyway).
            r.feed(b"*0\r\n")
            probe = r.gets()
        except Exception:  # hiredis.ProtocolError, or a RESP3 map of lists (TypeError)
            return self._to_strict(data[_consumed(out):], out)
        if type(probe) is list and not probe:
            if len(data) > self._strict.limits.max_bulk:
                # a bulk in this chunk may be over proto-max-bulk-len (CONFIG SET can
                # lower it below what hiredis accepts): the strict parser judges it
                for i, cmd in enumerate(out):
                    if any(len(a) > self._strict.limits.max_bulk for a in cmd):
                        return self._to_strict(data[_consumed(out[:i]):], out[:i])
            return out, None
        # A partial command: the strict parser judges its header at once (invalid or
        # oversized lengths fail now, as in Redis) and collects big values without
        # re-scanning; the fast path resumes at the next clean boundary.
        return self._to_strict(data[_consumed(out):], out)


# -- encoding replies ----------------------------------------------------------------------

R_OK = b"+OK\r\n"
R_NULL2 = b"$-1\r\n"
R_NULL3 = b"_\r\n"
_BULK_LEN = tuple(b"$%d\r\n" % n for n in range(1024))  # bulk headers of short strings


def encode(obj: object, proto: int = 2) -> bytes:
    out: list[bytes] = []
    _enc(obj, proto, out)
    return b"".join(out)


def _enc(obj: object, proto: int, out: list[bytes]) -> None:  # noqa: C901 - one dispatch
    t = type(obj)
    if t is bytes:
        out.append(b"$%d\r\n%s\r\n" % (len(obj), obj))  # type: ignore[arg-type]
    elif t is int:
        out.append(b":%d\r\n" % obj)  # type: ignore[str-format]
    elif obj is None:
        out.append(R_NULL3 if proto == 3 else R_NULL2)
    elif t is Simple:
        out.append(b"+%s\r\n" % obj)
    elif t is list or t is tuple:
        out.append(b"*%d\r\n" % len(obj))  # type: ignore[arg-type]
        for x in obj:  # type: ignore[attr-defined]
            _enc(x, proto, out)
    elif t is BulkArray:
        out.append(b"*%d\r\n" % len(obj))  # type: ignore[arg-type]
        lens = _BULK_LEN  # pieces, not one format per element: ~5x faster for 100 members
        for x in obj:  # type: ignore[attr-defined]
            n = len(x)
            out += (lens[n] if n < 1024 else b"$%d\r\n" % n, x, b"\r\n")
    elif t is Err:
        # CR/LF of echoed input become spaces; raw bytes echoed come back as they were
        msg = str(obj).replace("\r", " ").replace("\n", " ")
        out.append(b"-%s\r\n" % msg.encode("utf-8", "surrogateescape"))
    elif t is str:
        b = obj.encode()  # type: ignore[attr-defined]
        out.append(b"$%d\r\n%s\r\n" % (len(b), b))
    elif t is Map:
        if proto == 3:
            out.append(b"%%%d\r\n" % (len(obj) // 2))  # type: ignore[arg-type]
        else:
            out.append(b"*%d\r\n" % len(obj))  # type: ignore[arg-type]
        for x in obj:  # type: ignore[attr-defined]
            _enc(x, proto, out)
    elif t is Double:
        s = format_double(obj)  # type: ignore[arg-type]
        out.append(b",%s\r\n" % s if proto == 3 else b"$%d\r\n%s\r\n" % (len(s), s))
    elif t is bool:
        out.append((b"#t\r\n" if obj else b"#f\r\n") if proto == 3 else (b":1\r\n" if obj else b":0\r\n"))
    elif t is NullArray:
        out.append(R_NULL3 if proto == 3 else b"*-1\r\n")
    elif t is SetReply:
        out.append((b"~%d\r\n" if proto == 3 else b"*%d\r\n") % len(obj))  # type: ignore[arg-type, operator]
        for x in obj:  # type: ignore[attr-defined]
            _enc(x, proto, out)
    elif t is Verbatim:
        if proto == 3:
            out.append(b"=%d\r\ntxt:%s\r\n" % (len(obj) + 4, obj))  # type: ignore[arg-type]
        else:
            out.append(b"$%d\r\n%s\r\n" % (len(obj), obj))  # type: ignore[arg-type]
    elif t is Replies:
        for x in obj:  # type: ignore[attr-defined]
            _enc(x, proto, out)
    elif t is Push:
        out.append((b">%d\r\n" if proto == 3 else b"*%d\r\n") % len(obj))  # type: ignore[arg-type, operator]
        for x in obj:  # type: ignore[attr-defined]
            _enc(x, proto, out)
    elif t is float:
        _enc(Double(obj), proto, out)  # type: ignore[arg-type]
    elif t is BigNumber:
        out.append(b"(%s\r\n" % obj if proto == 3 else b"$%d\r\n%s\r\n" % (len(obj), obj))  # type: ignore[arg-type]
    elif t is DoubleText:
        out.append(b",%s\r\n" % obj if proto == 3 else b"$%d\r\n%s\r\n" % (len(obj), obj))  # type: ignore
    else:
        raise TypeError(f"cannot encode {t.__name__} as RESP")
