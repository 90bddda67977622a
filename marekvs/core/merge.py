"""One merge entry point for the apply path: ``merge(ikey, current, incoming)``.

The internal key's tag chooses the lattice (the tag is authoritative; the envelope's
record type is checked by the lattice itself). Every lattice's ``merge`` is pure,
commutative, associative and idempotent (proved in tests/merge_laws), and returns
one of its arguments *unchanged* (the same object) when that argument already is the
join, so the apply path can tell "nothing changed, write nothing" with ``is``.
"""

from __future__ import annotations

from marekvs.core import lww, pncounter
from marekvs.core.envelope import RecordType

_COUNTER = RecordType.COUNTER


def _merge_string(a: bytes, b: bytes) -> bytes:
    if (a[0] >> 2) & 7 == _COUNTER or (b[0] >> 2) & 7 == _COUNTER:
        return pncounter.merge(a, b)
    return b if b[1:11] > a[1:11] else a


# tag byte -> merge(a, b). Tags not listed merge as LWW registers.
MERGERS = {
    ord("s"): _merge_string,
}


def merge(ikey: bytes, current: bytes | None, incoming: bytes) -> bytes:
    if current is None:
        return incoming
    f = MERGERS.get(ikey[2])
    if f is None:
        return lww.merge(current, incoming)
    return f(current, incoming)
