"""One merge entry point for the apply path: ``merge(ikey, current, incoming)``.

The internal key's tag chooses the lattice (the tag is authoritative; the envelope's
record type is checked by the lattice itself). Every lattice's ``merge`` is pure,
commutative, associative and idempotent (proved in tests/merge_laws), and returns
one of its arguments *unchanged* (the same object) when that argument already is the
join, so the apply path can tell "nothing changed, write nothing" with ``is``.

    tag   records                       lattice
    's'   strings, PN counters          pncounter.merge (plain LWW unless a counter)
    'M'   collection heads              head.merge
    'h'   hash fields                   orswot.merge
    'S'   set members                   orswot.merge
    'z'   zset members (score = value)  orswot.merge
    'Z'   zset score index              lww.merge
    'q'   list elements                 listelem.merge (LWW)
    'H'   HLL registers                 hll.merge
    'x'   stream entries                stream.merge (LWW)

The zset score index ``'Z'`` is derived: the member record (``'z'``) is the source of
truth for the score, the index key carries an envelope and no payload. It merges as an
LWW register so a replica's index converges like any record, but the storage layer
maintains it in the same batch as the member record (writing the new score's index
key and an LWW tombstone at the old score's) and readers confirm a hit against the
member record. Tags not listed (including the retired b'l') merge as LWW registers.
"""

from __future__ import annotations

from marekvs.core import head, hll, listelem, lww, orswot, pncounter, stream


# tag byte -> merge(a, b). Tags not listed merge as LWW registers.
MERGERS = {
    ord("s"): pncounter.merge,  # any two string-key records (plain pairs: inlined below)
    ord("M"): head.merge,
    ord("h"): orswot.merge,
    ord("S"): orswot.merge,
    ord("z"): orswot.merge,
    ord("Z"): lww.merge,
    ord("q"): listelem.merge,
    ord("H"): hll.merge,
    ord("x"): stream.merge,
}


def merge(ikey: bytes, current: bytes | None, incoming: bytes) -> bytes:
    if current is None:
        return incoming
    if ikey[2] == 0x73 and not (current[0] | incoming[0]) & 0x18:
        # the hot case, two string records neither of which is a counter (type 6 has
        # bits 0x18): lww.merge inlined
        va, vb = current[1:11], incoming[1:11]
        return incoming if vb > va or (vb == va and incoming > current) else current
    f = MERGERS.get(ikey[2])
    if f is None:
        return lww.merge(current, incoming)
    return f(current, incoming)
