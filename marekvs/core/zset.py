"""Sorted-set records: the member record's score and the score-index record.

A zset is a collection head (``head.py``, ctype ZSET) plus two records per member, written
in the same apply:

- the **member record** ``[pid]'z'[klen][key][member]``: an ORSWOT element
  (``orswot.py``) whose dot values are scores. The member's score is the value of its
  highest live dot. Each value is exactly 8 bytes, the score as an IEEE-754 binary64,
  big-endian (``encode_value``); writers store ``+0.0`` for ``-0.0`` (Redis keeps a
  listpack zset's ``-0`` as ``0``) and never a NaN. This layout is pinned by
  ``crates_ref/format/member_scores.jsonl``;
- the **score-index record** ``[pid]'Z'[klen][key][score:u64][member]``
  (``keys.encode_zset_score_key``: the order-preserving score bytes, then the member): an
  LWW register with no payload, record type ZSET_MEMBER, written live with the dot of
  every add of that score, in the same apply as the member record.

The index is a hint, never the truth: ``Z(s, m)`` stands for "m has score s" exactly when
s is the score of m's member record (the value of its highest live dot), whatever the
index record's own envelope says. Concurrent writes can leave an index record dead while
its member holds its score (a remove on one node tombstoned it, as older versions did,
while an add on another node that never saw the removed add wrote it again with an older
clock) or live after its member moved on; neither is repaired with new writes, so a
merge is decided by the records alone and a replica never writes while it merges.
Readers scan the index in order and confirm each hit against the member record; the
sweeper keeps an index record while a live dot of its member holds its score
(``index_scores``) and removes it past gc_grace once none does (``core/sweep.py``).
"""

from __future__ import annotations

import struct

from marekvs.core import envelope as env
from marekvs.core import orswot
from marekvs.core.envelope import RecordType
from marekvs.core.keys import encode_score

RTYPE = RecordType.ZSET_MEMBER
VALUE_SIZE = 8
_D = struct.Struct(">d")
_HEADER = env.HEADER
_LIVE_FLAGS = env.make_flags(RTYPE)
_TOMB_FLAGS = env.make_flags(RTYPE, tombstone=True)
_pack = env.pack_envelope


class ScoreFormatError(ValueError):
    """A member record whose top value is not an 8-byte score."""


def encode_value(score: float) -> bytes:
    """The dot value of a member record: the score as a big-endian binary64 (``-0.0``
    stored as ``+0.0``). NaN is refused."""
    if score != score:
        raise ValueError("NaN is not a valid score")
    return _D.pack(score + 0.0)  # -0.0 + 0.0 == +0.0


def decode_value(value: bytes) -> float:
    if len(value) != VALUE_SIZE:
        raise ScoreFormatError(f"a score value is {VALUE_SIZE} bytes, not {len(value)}")
    score: float = _D.unpack(value)[0]
    return score


def score_of(record: bytes) -> float | None:
    """The score a member record holds (its highest live dot's value), None if it has no
    live dot. Payload only: the caller applies liveness (TTL, head gate)."""
    if len(record) <= _HEADER or not record[_HEADER]:
        return None
    # [nlive][origin u16][hlc u64][vlen varint = 8][8 bytes]...
    at = _HEADER + 11
    if record[at] != VALUE_SIZE:
        raise ScoreFormatError("a zset member's top value is not an 8-byte score")
    score: float = _D.unpack_from(record, at + 1)[0]
    return score


def check_member(record: bytes) -> None:
    """Every live value of a member record is an 8-byte non-NaN score (replication's
    validation, after the ORSWOT element check)."""
    for _, v in orswot.element_of(record).live:
        s = decode_value(v)
        if s != s:
            raise ScoreFormatError("a zset score is NaN")


# -- the writes of one command ----------------------------------------------------------------

_DOT = struct.Struct(">HQ")  # a dot on the wire: origin, then hlc


def live_dots(record: bytes) -> tuple[tuple[int, int], ...]:
    """The live dots of an ORSWOT record, highest first (its live section only: the
    covered dots, up to 255 of them, are not parsed)."""
    return tuple(orswot.live_section(record)[0])


def add_delta(current: bytes | None, hlc: int, origin: int, score: float) -> bytes:
    """ZADD of ``score`` at dot (hlc, origin) as the record the apply path merges into
    ``current``: the new live dot, covering every live dot of ``current`` (it replaces
    what it saw). ``merge(current, add_delta(...)) == orswot.add(current, ...)``.

    When every dot of ``current`` is below the new one and its live dots above its
    covered ones (always so for a local write: the HLC is above every dot this node has
    seen), that join is built here from the bytes: the new dot live, then the observed
    dots and ``current``'s covered section as they stand, capped at 255. It is handed over
    as known (``orswot.KNOWN``), so the apply path does not parse either record. That is
    what keeps a hot member cheap: one updated a thousand times holds 255 covered dots
    (2.5 kB), and parsing, joining and re-encoding them cost five times the rest of a
    ZADD. Otherwise the delta itself goes (observed dots covered), and the apply path
    joins it."""
    value = encode_value(score)
    head = _pack(_LIVE_FLAGS, hlc, origin, 0) + b"\x01" + _DOT.pack(origin, hlc) + b"\x08" + value
    if current is None:
        return head + b"\x00"
    observed, ends = orswot.live_section(current)
    n = len(observed)
    pos = ends[-1] if ends else _HEADER + 1
    dots = b"".join(_DOT.pack(o, h) for h, o in observed)
    ncov = current[pos] if pos < len(current) else -1
    cov = current[pos + 1:]
    if (ncov >= 0 and len(cov) == 10 * ncov and (not observed or observed[0] < (hlc, origin))
            and current[1:11] < head[1:11]):  # (and its version below the new dot's: the new header wins)
        below = observed[-1] if observed else (hlc, origin)
        if not ncov or _first_dot(cov) < below:
            keep = min(orswot.COVERED_CAP, n + ncov)
            return orswot.KNOWN.built(head + bytes((keep,)) + (dots + cov)[:10 * keep], current)
    return head + bytes((n,)) + dots


def _first_dot(covered: bytes) -> tuple[int, int]:
    o, h = _DOT.unpack_from(covered, 0)
    return h, o


def remove_delta(current: bytes, hlc: int, origin: int) -> bytes | None:
    """ZREM at (hlc, origin): a tombstone covering every live dot of ``current`` (None if
    it has none). ``merge(current, remove_delta(...)) == orswot.remove(current, ...)``."""
    observed = live_dots(current)
    if not observed:
        return None
    return env.pack(_TOMB_FLAGS, hlc, origin, 0, orswot.to_bytes(orswot.Element((), observed)))


# -- the score-index record ------------------------------------------------------------------

def index_live(hlc: int, origin: int, ttl_deadline_ms: int = 0) -> bytes:
    """A live score-index record (envelope only): the member's score is this key's."""
    return _pack(_LIVE_FLAGS, hlc, origin, ttl_deadline_ms)


def index_scores(member_record: bytes) -> set[bytes]:
    """The order-preserving score bytes of every live dot of a member record: the index
    records of the member the sweeper keeps (a removal arriving later can uncover an
    older live dot, whose score then needs its index record again)."""
    return {encode_score(decode_value(v)) for _, v in orswot.element_of(member_record).live}
