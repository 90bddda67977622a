"""The kept digest: segment hashes exact after every commit, across merges, removals,
checkpoints, clean and unclean restarts, equal on replicas that hold the same records, and
rebuilt from the data when it is missing or wrong.

The oracle is ``storage.digest.computed``: the segments recomputed from every record in
the data column family (what ``marekvs digest --check`` compares against)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marekvs.core import digest as D
from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core import orswot
from marekvs.storage import digest as SD
from marekvs.storage.engine import Engine


def string_record(hlc: int, value: bytes = b"v", origin: int = 1, tomb: bool = False, ttl: int = 0) -> bytes:
    return env.pack(env.FLAG_TOMBSTONE if tomb else 0, hlc, origin, ttl, b"" if tomb else value)


def kept_equals_data(e: Engine) -> bool:
    return list(e.digest.segs) == list(SD.computed(e.scan(b"")))


def crash(e: Engine) -> None:
    """Drop every handle without a clean close (what SIGKILL after a flushed WAL leaves)."""
    e.db.flush_wal(True)
    e.log.close()
    e.digest.close()
    e.data = e.replog = e.meta = None
    e._h_data = e._h_replog = e._h_meta = None
    e.db.close()


# -- the pure definitions ------------------------------------------------------------------

def test_delta_telescopes_and_an_absent_record_hashes_to_zero():
    k = K.encode_string_key(b"a")
    a, b, c = string_record(1 << 20, b"x"), string_record(2 << 20, b"y"), string_record(3 << 20, b"z")
    assert D.record_hash(k, D.EMPTY) == 0
    assert D.delta(k, None, a) == D.record_hash(k, a)
    assert D.delta(k, a, None) == D.record_hash(k, a)
    assert D.delta(k, a, b) ^ D.delta(k, b, c) == D.delta(k, a, c)


def test_the_same_value_under_two_keys_hashes_apart():
    v = string_record(5 << 20, b"same")
    assert D.record_hash(K.encode_string_key(b"a"), v) != D.record_hash(K.encode_string_key(b"b"), v)


def test_fine_segments_fold_into_segments_and_root():
    recs = [(K.encode_string_key(b"k%d" % i), string_record((i + 1) << 20, b"%d" % i)) for i in range(500)]
    fine = D.fine_segments_of(recs)
    assert D.segments_from_fine(fine) == D.segments_of(recs)
    assert D.root_of(fine) == D.root_of(D.segments_of(recs))
    for k, _ in recs:
        assert D.fine_segment_of(k) >> (D.FINE_BITS - D.SEGMENT_BITS) == D.segment_of(k)
    assert D.unpack_u64s(D.pack_u64s(fine), D.FINE_SEGMENTS) == fine
    with pytest.raises(ValueError):
        D.unpack_u64s(b"\x00" * 12)


def test_differing_names_every_position_where_replicas_disagree():
    assert D.differing([1, 2, 3], [1, 2, 3], [1, 2, 3]) == []
    assert D.differing([1, 2, 3], [1, 9, 3], [1, 2, 4]) == [1, 2]


# -- the engine keeps it exact ---------------------------------------------------------------

def random_ops(e: Engine, rng: random.Random, keys: list[bytes], clock: list[int], n: int) -> None:
    for _ in range(n):
        k = rng.choice(keys)
        r = rng.random()
        clock[0] += rng.randrange(1, 1 << 16)
        if r < 0.1:
            if e.get(k) is not None:
                e.purge(k)
        elif r < 0.25:
            e.apply([(k, string_record(clock[0], tomb=True))])
        elif r < 0.3:
            e.apply([(k, string_record(clock[0] - (1 << 30), b"stale"))])  # usually loses the merge
        else:
            e.apply([(k, string_record(clock[0], b"v%d" % rng.randrange(1000)))], log_entry=rng.random() < 0.5)


def test_kept_digest_is_exact_after_every_commit_and_after_restarts(tmp_path, monkeypatch):
    monkeypatch.setattr(SD, "CHECKPOINT_DELTAS", 3000)  # several checkpoints on the way
    rng = random.Random(7)
    keys = [K.encode_string_key(b"key%d" % i) for i in range(400)]
    clock = [1 << 40]
    path = str(tmp_path / "db")
    e = Engine(path, 1)
    for rnd in range(40):
        random_ops(e, rng, keys, clock, rng.randrange(1, 200))
        e.commit()
        assert kept_equals_data(e), rnd
    e.close()
    e = Engine(path, 1)  # clean restart: the checkpoint
    assert kept_equals_data(e)
    random_ops(e, rng, keys, clock, 500)
    e.commit()
    assert e.digest.deltas > 0
    crash(e)
    e = Engine(path, 1)  # unclean restart: checkpoint + delta entries replayed
    assert e.digest.deltas > 0
    assert kept_equals_data(e)
    e.close()


def test_a_key_purged_and_written_again_in_one_batch(tmp_path):
    e = Engine(str(tmp_path / "db"), 1)
    k = K.encode_string_key(b"k")
    e.apply([(k, string_record(1 << 30, b"a"))])
    e.commit()
    e.purge(k)
    assert e.get(k) is None  # gone for the rest of the batch too
    e.apply([(k, string_record(2 << 30, b"b"))])
    e.purge(k)
    e.apply([(k, string_record(3 << 30, b"c"))])
    e.commit()
    assert kept_equals_data(e)
    assert e.get(k) == string_record(3 << 30, b"c")
    e.close()


def test_orswot_merges_keep_it_exact(tmp_path):
    e = Engine(str(tmp_path / "db"), 1)
    k = K.encode_set_member_key(b"s", b"m")
    rt = env.RecordType.SET_MEMBER
    cur = None
    for i in range(1, 30):
        origin = i % 3 + 1
        if i % 5 == 0 and cur is not None:
            rec = orswot.remove(cur, i << 20, origin)
        else:
            rec = orswot.add(cur, rt, i << 20, origin)
        e.apply([(k, rec)])
        cur = e.get(k)
        if i % 4 == 0:
            e.commit()
    e.commit()
    assert kept_equals_data(e)
    e.close()


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(1, 1 << 20), st.booleans()), min_size=1, max_size=60),
       st.randoms(use_true_random=False))
def test_replicas_with_the_same_records_have_equal_digests(tmp_path_factory, writes, rnd):
    """Two engines merge the same records in different orders and batches: equal segments."""
    recs = [(K.encode_string_key(b"k%d" % k), string_record(h << 16, b"v%d" % h, tomb=t)) for k, h, t in writes]
    engines = []
    for order in (recs, rnd.sample(recs, len(recs))):
        e = Engine(str(tmp_path_factory.mktemp("db")), 1)
        for r in order:
            e.apply([r], log_entry=False)
            if rnd.random() < 0.3:
                e.commit()
        e.commit()
        engines.append(e)
    a, b = engines
    assert list(a.digest.segs) == list(b.digest.segs)
    assert a.digest.roots() == b.digest.roots()
    for e in engines:
        e.close()


# -- rebuilt when missing or wrong ------------------------------------------------------------

def test_a_directory_without_a_digest_is_rebuilt_at_open(tmp_path):
    path = str(tmp_path / "db")
    e = Engine(path, 1)
    for i in range(300):
        e.apply([(K.encode_string_key(b"k%d" % i), string_record((i + 1) << 20))])
    e.commit()
    want = list(e.digest.segs)
    e.digest.cf.delete(b"F")  # as a data directory written before digests
    e.close()
    e = Engine(path, 1)
    assert e.digest.rebuilt_at_open
    assert list(e.digest.segs) == want
    e.close()
    e = Engine(path, 1)
    assert not e.digest.rebuilt_at_open
    e.close()


def test_correct_repairs_a_partition_whose_records_went_behind_the_engines_back(tmp_path):
    path = str(tmp_path / "db")
    e = Engine(path, 1)
    keys = [K.encode_string_key(b"k%d" % i) for i in range(2000)]
    for i, k in enumerate(keys):
        e.apply([(k, string_record((i + 1) << 20))])
    e.commit()
    victim = keys[0]
    pid = D.partition_of_key(victim)
    e.data.delete(victim)  # behind the engine's back: no digest update
    e.cache.clear()
    assert not kept_equals_data(e)
    recs = list(e.scan(bytes([victim[0], victim[1]]), bytes([victim[0], victim[1] + 1])))
    wrong = e.digest.correct(pid, D.segments_of(recs))
    assert wrong == [D.segment_of(victim)]
    e.commit()
    assert kept_equals_data(e)
    e.close()
    e = Engine(path, 1)
    assert kept_equals_data(e)  # the correction was persisted
    e.close()


def test_a_sweeper_step_commits_what_it_removes(tmp_path):
    """An idle node has no tick to commit the sweeper's removals: the step commits them, so
    the kept digest (which peers compare) stops counting them at once."""
    import time
    from types import SimpleNamespace

    from marekvs.storage.sweeper import Sweeper

    e = Engine(str(tmp_path / "db"), 1)
    old = (time.time_ns() // 1_000_000 - 60_000) << 16
    e.apply([(K.encode_string_key(b"live"), string_record(old))])
    e.apply([(K.encode_string_key(b"gone%d" % i), string_record(old, tomb=True)) for i in range(5)])
    e.commit()
    before = list(e.digest.segs)
    sw = Sweeper(e, SimpleNamespace(gc_grace=1, sweep_interval=0.1))
    assert sw.step(10_000) == 5
    assert not e.pending and list(e.digest.segs) != before
    assert kept_equals_data(e) and e.data.get(K.encode_string_key(b"gone0")) is None
    e.close()
