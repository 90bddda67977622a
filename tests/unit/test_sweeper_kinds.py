"""The expiry sweeper over RocksDB applies the registry's sweep rules to every kind:
collection elements gated by their head's delete clock go once it is older than
gc_grace, and a dead head stays while an element of its collection stays."""

import time
from types import SimpleNamespace

import pytest

from marekvs.core import head, hll, lww, orswot
from marekvs.core import keys as K
from marekvs.core.envelope import RecordType
from marekvs.core.head import CollectionType as CT
from marekvs.storage.engine import Engine
from marekvs.storage.sweeper import Sweeper

GRACE_S = 10


@pytest.fixture
def engine(tmp_path):
    e = Engine(str(tmp_path / "db"), node_id=1, durability="no")
    yield e
    e.close()


def at(ms):
    return ms << 16


def sweep(engine):
    sw = Sweeper(engine, SimpleNamespace(gc_grace=GRACE_S, sweep_interval=0.1))
    removed = sw.sweep_all()
    engine.commit()
    return removed, sw


def test_a_hash_deleted_before_gc_grace_is_reclaimed_with_its_fields(engine):
    now = time.time_ns() // 1_000_000
    old, recent = now - 60_000, now - 1_000
    for user, deleted_at in ((b"old", old), (b"recent", recent)):
        h = head.new(CT.HASH, at(deleted_at - 10), 1)
        fields = [(K.encode_hash_field_key(user, b"f%d" % i),
                   orswot.add(None, RecordType.HASH_FIELD, at(deleted_at - 5), 1, b"v")) for i in range(3)]
        engine.apply([(K.encode_head_key(user), head.tombstone(h, at(deleted_at), 2)), *fields])
    engine.commit()
    removed, sw = sweep(engine)
    assert removed == 4  # the old hash's head and its three fields
    assert engine.get(K.encode_head_key(b"old")) is None
    assert all(engine.get(K.encode_hash_field_key(b"old", b"f%d" % i)) is None for i in range(3))
    assert engine.get(K.encode_head_key(b"recent")) is not None
    assert sum(sw.live_keys) == 0


def test_a_dead_head_stays_while_a_newer_element_does_and_gated_registers_go(engine):
    now = time.time_ns() // 1_000_000
    t = now - 60_000
    dead = head.tombstone(head.new(CT.SET, at(t), 1), at(t + 10), 2)
    newer = orswot.add(None, RecordType.SET_MEMBER, at(t + 20), 3)  # concurrent with the DEL
    hll_head = head.new(CT.HLL, at(t + 30), 1,
                        prior=head.tombstone(head.new(CT.HLL, at(t), 1), at(t + 20), 1), now_ms=t + 30)
    engine.apply([
        (K.encode_head_key(b"s"), dead),
        (K.encode_set_member_key(b"s", b"old"), orswot.add(None, RecordType.SET_MEMBER, at(t + 5), 1)),
        (K.encode_set_member_key(b"s", b"new"), newer),
        (K.encode_head_key(b"p"), hll_head),
        (K.encode_hll_key(b"p", 1), hll.new(9, at(t + 5), 1)),  # before the DEL: gated
        (K.encode_hll_key(b"p", 2), hll.new(3, at(t + 40), 1, generation=at(t + 20))),  # after it: live
        (K.encode_list_key(b"p", K.LIST_CENTER), lww.new(RecordType.LIST, at(t + 5), 1, b"x")),
    ])
    engine.commit()
    logged = engine.log_seq
    removed, sw = sweep(engine)
    assert removed == 3 and engine.log_seq == logged  # removal is not a replicated write
    assert engine.get(K.encode_head_key(b"s")) == dead
    assert engine.get(K.encode_set_member_key(b"s", b"new")) == newer
    for gone in (K.encode_set_member_key(b"s", b"old"), K.encode_hll_key(b"p", 1),
                 K.encode_list_key(b"p", K.LIST_CENTER)):
        assert engine.get(gone) is None
    assert engine.get(K.encode_hll_key(b"p", 2)) is not None
    assert sum(sw.live_keys) == 1  # the HyperLogLog's live head
    assert sweep(engine)[0] == 0  # nothing more to take


def test_a_partition_bigger_than_a_step_stretches_the_pause_to_the_budget_rate(engine):
    """One big collection is one partition, read whole by a step: the next step waits in
    proportion, so the sweeper reads at its budget's rate whatever the partitions' sizes
    (it re-read a 100k-field hash ten times a second, two thirds of a node's CPU)."""
    t = time.time_ns() // 1_000_000
    h = head.new(CT.HASH, at(t), 1)
    recs = [(K.encode_head_key(b"big"), h)]
    recs += [(K.encode_hash_field_key(b"big", b"f%d" % i),
              orswot.add(None, RecordType.HASH_FIELD, at(t) + i + 1, 1, b"v")) for i in range(5000)]
    engine.apply(recs)
    engine.commit()
    sw = Sweeper(engine, SimpleNamespace(gc_grace=3600, sweep_interval=0.1))
    sw.sweep_all()  # the first cycle
    budget = sw.budget()
    sw.step(budget)
    assert sw.read_last_step == 5001  # the whole partition, whatever the budget
    assert budget < 1000 and sw.pause(budget) == pytest.approx(0.1 * 5001 / budget)
    small = Sweeper(engine, SimpleNamespace(gc_grace=3600, sweep_interval=0.1))
    small.cycles, small.read_last_step = 1, 10
    assert small.pause(400) == 0.1  # a step within its budget: the plain interval
