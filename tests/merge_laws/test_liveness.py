"""One liveness rule: every reader in core answers as ``envelope.is_live`` does.

The rule (the TTL-as-tombstone rule of the data model), transcribed here independently:
a record is live iff it exists, its tombstone bit is clear, and its deadline is 0 or
still ahead (``now < deadline``); a dead record's clock is its hlc if it is a tombstone,
else ``deadline << 16``. ``lww.value``, ``listelem.value``, ``stream.value``,
``pncounter.value``, ``orswot.value``, ``head.is_live``, ``head.value``,
``head.element_live`` and ``envelope.effective_clock`` must all follow from it.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from laws_gen import (
    element_records,
    head_records,
    lww_records,
    stream_payloads,
    string_key_records,
)

from marekvs.core import envelope as env
from marekvs.core import head, listelem, lww, orswot, pncounter, stream
from marekvs.core.envelope import RecordType

NOW = st.sampled_from([0, 4, 5, 6, 19, 20, 21, 1000])


def reference_live(record: bytes | None, now: int) -> bool:
    if record is None:
        return False
    deadline = int.from_bytes(record[11:19], "big")
    return not record[0] & 1 and (deadline == 0 or now < deadline)


def reference_clock(record: bytes, now: int) -> int:
    if reference_live(record, now):
        return 0
    if record[0] & 1:
        return int.from_bytes(record[1:9], "big")
    return int.from_bytes(record[11:19], "big") << 16


ANY_RECORD = st.one_of(string_key_records(), head_records(), element_records(big=False),
                       lww_records(RecordType.LIST), lww_records(RecordType.STREAM_ENTRY, stream_payloads))


@given(rec=ANY_RECORD, now=NOW)
def test_is_live_and_effective_clock_are_the_rule(rec, now):
    assert env.is_live(rec, now) == reference_live(rec, now)
    assert env.effective_clock(rec, now) == reference_clock(rec, now)
    assert not env.is_live(None, now)


@given(rec=lww_records(payloads=st.binary(max_size=4)), now=NOW)
def test_lww_reads_follow_the_rule(rec, now):
    want = rec[env.HEADER:] if reference_live(rec, now) else None
    assert lww.value(rec, now) == want
    assert listelem.value(rec, now) == want


@given(rec=lww_records(RecordType.STREAM_ENTRY, stream_payloads), now=NOW)
def test_stream_entry_reads_follow_the_rule(rec, now):
    got = stream.value(rec, now)
    assert (got is not None) == reference_live(rec, now)
    if got is not None:
        assert stream.to_bytes(got) == rec[env.HEADER:]


@given(rec=string_key_records(), now=NOW)
def test_string_key_reads_follow_the_rule(rec, now):
    assert (pncounter.value(rec, now) is not None) == reference_live(rec, now)


@given(rec=head_records(), now=NOW)
def test_head_reads_follow_the_rule(rec, now):
    assert head.is_live is env.is_live
    assert (head.value(rec, now) is not None) == reference_live(rec, now)


@given(h=st.none() | head_records(), rec=element_records(big=False), now=NOW)
def test_element_reads_follow_the_rule_and_the_gate(h, rec, now):
    clock = head.delete_clock(h, now)
    top = orswot.top_dot(rec)
    want = reference_live(rec, now) and top is not None and top[0] > clock
    assert head.element_live(h, rec, now) == want
    assert (orswot.value(rec, now, clock) is not None) == want


@given(h=st.none() | head_records(), rec=lww_records(RecordType.LIST), now=NOW)
def test_lww_elements_are_gated_by_their_own_hlc(h, rec, now):
    clock = head.delete_clock(h, now)
    want = reference_live(rec, now) and env.hlc_of(rec) > clock
    assert head.element_live(h, rec, now) == want
