"""The background digest verifier reads a partition bigger than a step over several steps
(one collection is one partition), and a write between those steps starts the partition
again instead of mixing two states into a false correction of the kept digest."""

from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from marekvs.antientropy import background
from marekvs.antientropy.background import DigestVerifier
from marekvs.antientropy.replica import LocalReplica
from marekvs.core import head, orswot
from marekvs.core import keys as K
from marekvs.core.envelope import RecordType
from marekvs.core.head import CollectionType as CT
from marekvs.core.hlc import HLC
from marekvs.core.partition import partition_of
from marekvs.storage.engine import Engine

FIELDS = 3000


@pytest.fixture
def engine(tmp_path):
    e = Engine(str(tmp_path / "db"), node_id=1, durability="no")
    t = time.time_ns() // 1_000_000 << 16
    fields = [(K.encode_hash_field_key(b"big", b"f%05d" % i),
               orswot.add(None, RecordType.HASH_FIELD, t + i + 1, 1, b"v")) for i in range(FIELDS)]
    e.apply([(K.encode_head_key(b"big"), head.new(CT.HASH, t, 1)), *fields])
    e.commit()
    yield e
    e.close()


def verifier(engine):
    local = LocalReplica(engine, HLC(), SimpleNamespace(gc_grace=10, node_id=1))
    v = DigestVerifier(local)
    v.pid = partition_of(b"big")
    return local, v


def field(engine, i, value):
    k = K.encode_hash_field_key(b"big", b"f%05d" % i)
    engine.apply([(k, orswot.add(engine.get(k), RecordType.HASH_FIELD, HLC().now(), 1, value))])
    engine.commit()


def test_a_big_partition_is_verified_over_steps_and_corrected(engine):
    local, v = verifier(engine)
    k = K.encode_hash_field_key(b"big", b"f02500")
    engine.data.delete(k)  # behind the engine's back: the kept digest is now wrong
    engine.cache.pop(k, None)
    pid = v.pid
    steps = 0
    while v.pid == pid:
        assert v.step(400, 8) <= 400
        steps += 1
    assert steps >= FIELDS // 400 and local.corrected == 1
    assert local.verify(pid, correct=False)[0] is False  # the kept digest now matches the records


def test_a_write_between_steps_starts_the_partition_again(engine):
    local, v = verifier(engine)
    pid = v.pid
    v.step(400, 8)
    field(engine, 1, b"written between the steps")  # already read by the first step
    while v.pid == pid:
        v.step(400, 8)
    assert local.corrected == 0 and v.skipped == 0  # no false correction from two states mixed
    assert local.verify(pid, correct=False)[0] is False


def test_a_partition_written_during_every_try_is_left_to_the_next_pass(engine):
    local, v = verifier(engine)
    pid = v.pid
    for i in range(background.RESTARTS + 2):
        v.step(400, 8)
        field(engine, i, b"again %d" % i)
    v.step(400, 8)
    assert v.skipped == 1 and v.pid != pid and local.corrected == 0
