"""Reply values: what a command returns, before any protocol encodes it.

A handler returns plain Python values or one of these types; ``server/resp.py`` encodes them
as RESP2 or RESP3, and other callers (MULTI/EXEC, a script's ``redis.call``, a gateway) take
them as they are. ``bytes`` is a bulk string, ``int`` an integer, ``None`` a null, ``list``
an array, ``str`` a bulk string of its UTF-8 bytes, ``bool`` a RESP3 boolean (RESP2 integer),
``float`` a double.
"""

from __future__ import annotations

from typing import Any


class Simple(bytes):
    """A simple string reply (+OK)."""


class Err(str):
    """An error reply; the text starts with its code (ERR, WRONGTYPE, ...)."""


class Map(list):
    """A map reply: a flat list [k1, v1, k2, v2, ...]. RESP3 '%', RESP2 flat array."""


class SetReply(list):
    """RESP3 '~', RESP2 array."""


class Double(float):
    """RESP3 ',', RESP2 bulk string."""


class BulkArray(list):
    """An array of bulk strings (a range of members): the encoder formats it in one pass
    instead of one call per element."""


def format_double(x: float) -> bytes:
    """The text of a double reply (RESP2's bulk string, a script's RESP2 view of it): Redis's
    ``%.17g`` with inf, -inf and nan spelled out, an integral value below 1e17 as an integer."""
    if x != x:
        return b"nan"
    if x == float("inf"):
        return b"inf"
    if x == float("-inf"):
        return b"-inf"
    if x == int(x) and abs(x) < 1e17:
        return b"%d" % int(x) if x != 0 or str(x)[0] != "-" else b"-0"
    return ("%.17g" % x).encode()


class DoubleText(bytes):
    """A double the command formatted itself (Redis's addReplyHumanLongDouble, GEOPOS):
    RESP3 ',' with this text, RESP2 a bulk string."""


class Verbatim(bytes):
    """RESP3 '=' (txt), RESP2 bulk string."""


class BigNumber(bytes):
    """RESP3 '(' (a script's ``{big_number=...}``), RESP2 bulk string."""


class Push(list):
    """RESP3 '>' push, RESP2 array. ``wire`` caches its encoding per protocol, so a message
    fanned out to many subscribers is encoded once per protocol, not once per client."""

    __slots__ = ("wire",)

    def __init__(self, items: list[Any]):
        super().__init__(items)
        self.wire: dict[int, bytes] = {}


class Replies(list):
    """Several replies to one command, each sent on its own (SUBSCRIBE's one per channel)."""


class NullArray:
    """Null array: RESP2 '*-1', RESP3 '_'."""


class Blocking:
    """Returned by a handler that must wait (WAIT, DEBUG SLEEP): the connection holds
    its later commands, in order, until ``awaitable`` yields the reply."""

    __slots__ = ("awaitable",)

    def __init__(self, awaitable: object):
        self.awaitable = awaitable


NO_REPLY = object()  # the handler closes the connection without a reply (SHUTDOWN)
NULL_ARRAY = NullArray()
OK = Simple(b"OK")
PONG = Simple(b"PONG")
QUEUED = Simple(b"QUEUED")

