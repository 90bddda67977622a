"""Function libraries (tag b'F'): one last-writer-wins register per library name.

FUNCTION LOAD stores a library as one record, replicated like any other, so every node of
the cluster can FCALL its functions::

    key      [pid(name):u16] 'F' [library name]
    value    [envelope, record type 0 (string)] [fmt u8 = 1] [library code]

The code is the whole FUNCTION LOAD payload, ``#!lua name=<name>`` line included; the
node compiles it to learn the functions (the library name, the engine, the function
names, descriptions and flags all come from running it), so nothing else is stored.
FUNCTION LOAD REPLACE writes a newer version of the register; FUNCTION DELETE and
FUNCTION FLUSH write LWW tombstones (no payload). The merge is ``lww.merge``: the higher
(hlc, origin) wins, so two nodes loading the same library name at once converge on one of
the two codes. Library records are not keys: they never appear in KEYS, SCAN, DBSIZE,
TYPE or DEBUG DIGEST, and FLUSHALL leaves them alone (as Redis keeps functions across
FLUSHALL).
"""

from __future__ import annotations

from marekvs.core import envelope as env
from marekvs.core import lww
from marekvs.core.envelope import RecordType

FMT = 1
RTYPE = RecordType.STRING


def new(code: bytes, hlc: int, origin: int) -> bytes:
    """The record of a library whose FUNCTION LOAD payload is ``code``."""
    return lww.new(RTYPE, hlc, origin, bytes((FMT,)) + code)


def tombstone(hlc: int, origin: int) -> bytes:
    """FUNCTION DELETE / FLUSH of a library."""
    return lww.tombstone(RTYPE, hlc, origin)


def to_bytes(code: bytes) -> bytes:
    return bytes((FMT,)) + code


def from_bytes(payload: bytes) -> bytes:
    """The library code of a live record's payload (ValueError if it is not one)."""
    if not payload or payload[0] != FMT:
        raise ValueError("function library payload needs format byte 1")
    return payload[1:]


def code_of(record: bytes, now_ms: int) -> bytes | None:
    """The code of a live library record, None if it is deleted."""
    if not env.is_live(record, now_ms):
        return None
    return from_bytes(record[env.HEADER:])
