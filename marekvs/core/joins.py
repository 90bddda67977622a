"""Joins already known: a memo that lets a merge skip parsing records an op just built.

An op on a record builds ``out`` as the join of the current record with its write (a
read touching a consumer, an XADD raising a stream head's last id, an ack...). The apply
path then merges the stored record with ``out`` again, and that join is ``out`` (a join
absorbs its inputs: ``merge(c, merge(c, w)) = merge(c, w)``). ``Known.built(out, current)``
remembers the pair; the lattice's merge asks ``Known.join(a, b)`` first and gets ``out``
without parsing either record. It is a pure memo of the merge function: it only ever
holds pairs whose join is ``out`` (each builder that registers is checked against the
merge itself in tests/merge_laws). Bounded: cleared when full.
"""

from __future__ import annotations


class Known:
    __slots__ = ("pairs", "limit")

    def __init__(self, limit: int = 4096):
        self.pairs: dict[bytes, bytes] = {}  # out -> the record it was built from
        self.limit = limit

    def built(self, out: bytes, current: bytes | None) -> bytes:
        """Remember that ``out`` is the join of ``current`` and a write; returns ``out``."""
        if current is not None and out != current:
            pairs = self.pairs
            if len(pairs) >= self.limit:
                pairs.clear()
            pairs[out] = current
        return out

    def join(self, a: bytes, b: bytes) -> bytes | None:
        """The join of ``a`` and ``b`` if one was built from the other, else None."""
        pairs = self.pairs
        if pairs.get(b) == a:
            return b
        if pairs.get(a) == b:
            return a
        return None

    def clear(self) -> None:
        self.pairs.clear()
