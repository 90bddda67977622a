"""LWW registers, tombstones and the TTL decision.

TTL decision (kept from the data model): ``merge`` is time-independent LWW on
(hlc, origin); a record past its deadline *reads* as a tombstone whose clock is the
deadline (``envelope.effective_clock``). So a stale pre-expiry value (lower version)
loses against the expiring write, and expiry converges with no message.
"""

from __future__ import annotations

from hypothesis import given
from laws_gen import VERSIONS, lww_records

from marekvs.core import envelope as env
from marekvs.core import lww
from marekvs.core.envelope import RecordType

S = RecordType.STRING
T0 = 1_700_000_000_000


def stamp(ms, logical=0):
    return ms << 16 | logical


def test_higher_version_wins_and_origin_breaks_ties():
    a = lww.new(S, stamp(T0), 1, b"a")
    b = lww.new(S, stamp(T0), 2, b"b")
    assert lww.merge(a, b) is b and lww.merge(b, a) is b
    assert lww.wins(b, a) and not lww.wins(a, b)


def test_tombstones_race_symmetrically_with_writes():
    w = lww.new(S, stamp(T0, 1), 1, b"v")
    d = lww.tombstone(S, stamp(T0, 2), 2)
    assert lww.merge(w, d) is d and lww.value(d, T0) is None
    later = lww.new(S, stamp(T0, 3), 1, b"again")
    assert lww.merge(d, later) is later and lww.value(later, T0) == b"again"


def test_equal_versions_are_the_same_write():
    a = lww.new(S, stamp(T0), 1, b"v")
    assert lww.merge(a, bytes(a)) is a


def test_expired_record_reads_as_tombstone_whose_clock_is_the_deadline():
    r = lww.new(S, stamp(T0), 1, b"v", ttl_deadline_ms=T0 + 100)
    assert lww.value(r, T0 + 99) == b"v"
    assert lww.value(r, T0 + 100) is None
    assert env.effective_clock(r, T0 + 99) == 0
    assert env.effective_clock(r, T0 + 100) == stamp(T0 + 100)


def test_stale_pre_expiry_value_loses_to_expiry_without_any_expiry_message():
    old = lww.new(S, stamp(T0), 1, b"old")
    expire = env.with_ttl(old, stamp(T0 + 10), 2, T0 + 50)  # EXPIRE: envelope rewrite
    assert env.payload_of(expire) == b"old"
    after = T0 + 60
    # a lagging replica pushes the pre-expiry value after the deadline: it loses
    assert lww.merge(expire, old) is expire and lww.merge(old, expire) is expire
    assert lww.value(lww.merge(old, expire), after) is None
    # a concurrent write older than the EXPIRE loses too
    racing = lww.new(S, stamp(T0 + 5), 3, b"racing")
    assert lww.value(lww.merge(racing, expire), after) is None


def test_write_after_the_deadline_starts_a_new_life():
    expire = lww.new(S, stamp(T0), 1, b"v", ttl_deadline_ms=T0 + 50)
    fresh = lww.new(S, stamp(T0 + 70), 2, b"fresh")
    assert lww.merge(expire, fresh) is fresh and lww.value(fresh, T0 + 80) == b"fresh"


def test_persist_is_an_lww_envelope_write():
    r = lww.new(S, stamp(T0), 1, b"v", ttl_deadline_ms=T0 + 50)
    persisted = env.with_ttl(r, stamp(T0 + 1), 2, 0)
    assert lww.merge(r, persisted) is persisted and lww.value(persisted, T0 + 999) == b"v"


@given(lww_records(), VERSIONS)
def test_a_local_write_moves_the_state_up(cur, v):
    hlc = env.hlc_of(cur) + v[0]  # the node's HLC is past everything it merged
    for op in (lww.new(S, hlc, v[1], b"w"), lww.tombstone(S, hlc, v[1]),
               env.with_ttl(cur, hlc, v[1], 7)):
        assert lww.merge(cur, op) is op


@given(lww_records())
def test_roundtrip(rec):
    p = env.payload_of(rec)
    assert lww.from_bytes(lww.to_bytes(p)) == p
