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
    # the HyperLogLog, and the set: a member added concurrently with its DEL survives it
    # (as DBSIZE counts them, ``head.present``)
    assert sum(sw.live_keys) == 2
    assert sweep(engine)[0] == 0  # nothing more to take


def big_dead_hash(engine, user, n, t):
    """A hash deleted at ``t`` (older than gc_grace) with ``n`` fields written before the DEL."""
    h = head.new(CT.HASH, at(t - 10), 1)
    engine.apply([(K.encode_head_key(user), head.tombstone(h, at(t), 2)),
                  *((K.encode_hash_field_key(user, b"f%05d" % i),
                     orswot.add(None, RecordType.HASH_FIELD, at(t - 5), 1, b"v")) for i in range(n))])
    engine.commit()


def test_a_partition_bigger_than_a_step_is_swept_over_several_steps(engine):
    """One big collection is one partition: a step stops within it at its budget and the
    next goes on from there (read whole, a 1M-member zset held the event loop for seconds
    each time the sweeper passed it), and the partition's records are decided together."""
    big_dead_hash(engine, b"big", 5000, time.time_ns() // 1_000_000 - 60_000)
    sw = Sweeper(engine, SimpleNamespace(gc_grace=GRACE_S, sweep_interval=0.1))
    steps = 0
    while sw.cycles == 0:
        sw.step(400)
        assert sw.read_last_step <= 400
        steps += 1
    engine.commit()
    assert steps >= 5000 // 400
    assert sw.removed == 5001  # the fields, then the head once no field stays
    assert list(engine.scan(b"\x00\x00")) == []
    assert sw.pause() == 0.1 and Sweeper(engine, SimpleNamespace(gc_grace=1, sweep_interval=0.5)).pause() == 0.01


def test_a_record_written_between_the_steps_of_one_partition_is_not_removed(engine):
    """A sweep over several steps removes only what was not written since it was read:
    here the hash is re-created (a live head) and a field written again while the sweep
    is within the partition; the old fields it read go, the new head and field stay."""
    now = time.time_ns() // 1_000_000
    big_dead_hash(engine, b"big", 3000, now - 60_000)
    sw = Sweeper(engine, SimpleNamespace(gc_grace=GRACE_S, sweep_interval=0.1))
    sw.step(400)  # within the partition: the head and the first fields were read
    assert sw.cycles == 0 and sw.read_last_step == 400
    hk, fk = K.encode_head_key(b"big"), K.encode_hash_field_key(b"big", b"f00001")
    live_head = head.new(CT.HASH, at(now), 1, prior=engine.get(hk), now_ms=now)
    live_field = orswot.add(engine.get(fk), RecordType.HASH_FIELD, at(now + 1), 1, b"again")
    engine.apply([(hk, live_head), (fk, live_field)])
    engine.commit()
    while sw.cycles == 0:
        sw.step(400)
    engine.commit()
    assert engine.get(hk) == live_head and engine.get(fk) == live_field
    assert engine.get(K.encode_hash_field_key(b"big", b"f00002")) is None
    assert sw.removed == 2999  # every field but the one written again; the head stays
