"""An ACL user record: one LWW register per user name, cluster-wide.

ACL SETUSER, ACL DELUSER, ACL LOAD and CONFIG SET requirepass write these records through
the one apply path, so a user created, changed or deleted on any node reaches every node
(``core/keys.py``: ``[pid(name)] 'U' [name]``, a key space of its own that no user key
reaches). The record is an LWW register (``lww``): the newest version of the user wins
whole, and ACL DELUSER is a tombstone. Its payload is::

    [fmt u8 = 1] [rules]

``rules`` is the user's description exactly as Redis 7.0's ACL LIST prints it after
``user <name> `` (``ACLDescribeUser``): flags, password hashes (``#<sha256 hex>``: a
password is never stored in clear), then the root selector's key patterns, channel
patterns and command rules, then each further selector in parentheses, e.g.::

    on #5e88...42d8 ~app:* resetchannels &news.* -@all +get +set (%R~log:* resetchannels -@all +xrange)

Applied one space-separated token at a time (a parenthesised selector is one token) to
a user freshly made as ACL SETUSER makes one, the rules give back the user: it is the
format of an ACL file line, so any implementation of Redis's rules can read it. The rules
never hold a NUL, tab, CR, LF, VT or FF (Redis refuses them in names and patterns, and
ACL SAVE writes one user per line); a peer's record that does is refused.
"""

from __future__ import annotations

from marekvs.core import envelope as env
from marekvs.core import lww
from marekvs.core.envelope import RecordType

FMT = 1
RTYPE = RecordType.STRING  # an LWW register of bytes (the envelope's type 0)
_FORBIDDEN = frozenset(b"\x00\t\n\v\f\r")


def to_bytes(rules: bytes) -> bytes:
    return bytes((FMT,)) + rules


def from_bytes(payload: bytes) -> bytes:
    """The rules of a live user record's payload (ValueError if malformed)."""
    if not payload or payload[0] != FMT:
        raise ValueError(f"unknown ACL user format {payload[:1].hex() or 'none'}")
    rules = payload[1:]
    if not _FORBIDDEN.isdisjoint(rules):
        raise ValueError("ACL rules hold a NUL or a line break")
    return bytes(rules)


def new(rules: bytes, hlc: int, origin: int) -> bytes:
    """The record of a user with these rules."""
    return lww.new(RTYPE, hlc, origin, to_bytes(rules))


def tombstone(hlc: int, origin: int) -> bytes:
    """ACL DELUSER."""
    return lww.tombstone(RTYPE, hlc, origin)


def rules_of(record: bytes) -> bytes | None:
    """The rules of a user record, None for a deleted user. A user record never has a
    TTL deadline, so liveness is the tombstone bit."""
    if record[0] & env.FLAG_TOMBSTONE:
        return None
    return from_bytes(record[env.HEADER:])


def check(record: bytes) -> None:
    """The registry's payload check: a live record's payload parses; no deadline."""
    if record[env.TTL] != env.NO_TTL:
        raise ValueError("an ACL user record has no TTL deadline")
    if not record[0] & env.FLAG_TOMBSTONE:
        from_bytes(record[env.HEADER:])
