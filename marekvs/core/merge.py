"""One merge entry point for the apply path: ``merge(ikey, current, incoming)``.

The internal key's tag chooses the lattice through the record-kind registry
(``registry.BY_CODE``: the row's ``merge``); the tag is authoritative, the envelope's
record type is checked by the lattice itself (and by replication's validation). Every
lattice's ``merge`` is pure, commutative, associative and idempotent (proved in
tests/merge_laws), and returns one of its arguments *unchanged* (the same object) when
that argument already is the join, so the apply path can tell "nothing changed, write
nothing" with ``is``.

    tag   records                       lattice (the registry row's merge)
    's'   strings, PN counters          pncounter.merge (plain LWW unless a counter)
    'M'   collection heads              head.merge
    'h'   hash fields                   orswot.merge
    'S'   set members                   orswot.merge
    'z'   zset members (score = value)  orswot.merge
    'Z'   zset score index              lww.merge
    'q'   list elements                 lww.merge
    'H'   HLL registers                 hll.merge
    'x'   stream entries                lww.merge

The zset score index ``'Z'`` is derived: the member record (``'z'``) is the source of
truth for the score, the index key carries an envelope and no payload. It merges as an
LWW register so a replica's records converge like any, but its envelope decides nothing:
the keyspace writes the new score's index key in the same batch as the member record, and
readers confirm every index key against the member record (``core/zset.py``). A tag
without a row (the retired b'l', an unknown byte: never accepted from a peer) merges as an
LWW register.

Hot path: two plain string records (the bulk of all writes) merge with ``lww.merge``
inlined; tests/merge_laws/test_registry.py pins that to the string row's merge.
"""

from __future__ import annotations

from marekvs.core import lww, registry

_BY_CODE = registry.BY_CODE
_lww_merge = lww.merge


def merge(ikey: bytes, current: bytes | None, incoming: bytes) -> bytes:
    if current is None:
        return incoming
    if ikey[2] == 0x73 and not (current[0] | incoming[0]) & 0x18:
        # the hot case (0x73 is registry.STRING's tag b's'), two string records neither
        # of which is a counter (type 6 has bits 0x18): lww.merge inlined
        va, vb = current[1:11], incoming[1:11]
        return incoming if vb > va or (vb == va and incoming > current) else current
    kind = _BY_CODE[ikey[2]]
    return (_lww_merge if kind is None else kind.merge)(current, incoming)
