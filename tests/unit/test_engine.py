"""The storage engine: the one apply path, group commit, the log, the sweeper, identity."""

import os
import time
from types import SimpleNamespace

import msgpack
import pytest

from marekvs import config as cfgmod
from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core import lww
from marekvs.core.envelope import RecordType
from marekvs.core.partition import shard_of, shard_range
from marekvs.storage.engine import Engine, StorageError, prefix_end
from marekvs.storage.sweeper import Sweeper


def rec(hlc, value=b"v", origin=1, ttl=0, tomb=False):
    if tomb:
        return lww.tombstone(RecordType.STRING, hlc, origin)
    return lww.new(RecordType.STRING, hlc, origin, value, ttl)


@pytest.fixture
def engine(tmp_path):
    e = Engine(str(tmp_path / "db"), node_id=1, durability="no")
    yield e
    e.close()


def test_apply_merges_and_skips_what_does_not_change(engine):
    k = K.encode_string_key(b"k")
    assert engine.apply([(k, rec(10, b"new"))]) == [(k, rec(10, b"new"))]
    assert engine.apply([(k, rec(5, b"old"))]) == []  # older version loses: nothing written
    assert engine.apply([(k, rec(10, b"new"))]) == []  # same version: the same write
    assert engine.get(k) == rec(10, b"new")
    assert engine.apply([(k, rec(11, tomb=True))]) != []
    assert env.is_tombstone(engine.get(k))


def test_one_batch_one_log_entry_naming_changed_keys(engine):
    a, b = K.encode_string_key(b"a"), K.encode_string_key(b"b")
    engine.apply([(a, rec(1))])
    engine.apply([(b, rec(2))])
    engine.apply([(a, rec(0))])  # loses: not logged
    assert engine.next_seq == engine.log_seq + 1
    engine.commit()
    entries = engine.read_log(0, 10)
    assert [(seq, [k for k, _ in recs]) for seq, recs in entries] == [(1, [a, b])]
    assert engine.next_seq == engine.log_seq == 1
    engine.apply([(a, rec(3, b"x"))])
    engine.commit()
    (seq, recs), = engine.read_log(1, 10)
    assert seq == 2 and recs == [(a, rec(3, b"x"))]  # shipping reads the current record


def test_shipping_reads_stop_at_the_byte_cap_but_hold_at_least_one_entry(engine):
    engine.keep_recent = True  # as replication sets it once the node has a peer
    big = b"x" * 1000
    for i in range(6):  # six entries of ~1 kB each
        engine.apply([(K.encode_string_key(b"k%d" % i), rec(i + 1, big))])
        engine.commit()
    for read in (lambda cap: engine.recent_packed(0, 100, cap), lambda cap: engine.read_log(0, 100, cap)):
        assert len(read(1 << 30)) == 6
        assert len(read(2500)) == 3  # stops once it holds >= 2500 bytes
        assert len(read(1)) == 1  # never empty: an entry bigger than the cap still goes
    assert len(engine.recent_packed(3, 2)) == 2  # the entry limit still applies


def test_a_node_without_peers_keeps_no_ring_and_shipping_reads_the_log(engine):
    a, b = K.encode_string_key(b"a"), K.encode_string_key(b"b")
    engine.apply([(a, rec(1))])
    engine.commit()
    assert engine.recent_entries == {} and engine.recent_packed(0, 10) is None
    engine.keep_recent = True  # a peer appears: later commits are kept
    engine.apply([(b, rec(2))])
    engine.commit()
    assert engine.recent_packed(0, 10) is None  # entry 1 only on disk
    assert engine.read_log(0, 10) == [(1, [(a, rec(1))]), (2, [(b, rec(2))])]
    (packed,) = engine.recent_packed(1, 10)
    assert msgpack.unpackb(packed) == [2, [b, rec(2)]]


def test_replication_apply_is_not_logged_but_metadata_commits_with_it(engine):
    k = K.encode_string_key(b"r")
    engine.apply([(k, rec(7, origin=2))], log_entry=False)
    engine.put_meta(b"hwm:2:99", b"5")
    engine.commit()
    assert engine.read_log(0, 10) == []
    assert engine.meta.get(b"hwm:2:99") == b"5"
    assert engine.data.get(k) == rec(7, origin=2)


def test_reads_see_pending_writes_and_survive_cache_eviction(tmp_path):
    e = Engine(str(tmp_path / "db"), node_id=1, durability="no", cache_entries=10)
    keys = [K.encode_string_key(b"k%d" % i) for i in range(50)]
    for i, k in enumerate(keys):
        e.apply([(k, rec(i + 1, b"%d" % i))])
    assert all(e.get(k) == rec(i + 1, b"%d" % i) for i, k in enumerate(keys))  # before commit
    e.commit()
    assert len(e.cache) <= 10
    assert all(e.get(k) == rec(i + 1, b"%d" % i) for i, k in enumerate(keys))
    e.close()


def test_data_survives_reopen_and_log_sequence_continues(tmp_path):
    path = str(tmp_path / "db")
    e = Engine(path, node_id=3, durability="always")
    inc = e.incarnation
    assert e.fresh
    e.apply([(K.encode_string_key(b"k"), rec(1))])
    e.commit()
    e.close()
    e = Engine(path, node_id=3, durability="always")
    assert not e.fresh and e.incarnation == inc and e.log_seq == 1
    assert e.get(K.encode_string_key(b"k")) == rec(1)
    e.close()


@pytest.mark.parametrize("n", [10, 6000])
def test_a_commit_writes_its_records_and_purges_in_any_order_of_size(tmp_path, n):
    """Small and big commits persist their records, purges included, and log the
    keys in the order they changed."""
    path = str(tmp_path / "db")
    e = Engine(path, node_id=1, durability="always")
    keys = [K.encode_string_key(b"k%d" % (n - i)) for i in range(n)]  # descending
    for i, k in enumerate(keys):
        e.apply([(k, rec(i + 1, b"%d" % i))])
    e.commit()
    for k in keys[::3]:
        e.apply([(k, rec(10 * n, b"new"))])
    for k in keys[1::3]:
        e.purge(k)
    e.commit()
    assert e.read_log(1, 10)[0][1] == [(k, rec(10 * n, b"new")) for k in keys[::3]]
    e.close()
    e = Engine(path, node_id=1, durability="always")
    for i, k in enumerate(keys):
        want = {0: rec(10 * n, b"new"), 1: None, 2: rec(i + 1, b"%d" % i)}[i % 3]
        assert e.data.get(k) == want
    e.close()


def _wal_bytes(path: str) -> int:
    total = 0
    for f in os.listdir(path):
        if f.endswith(".log"):
            try:
                total += os.path.getsize(os.path.join(path, f))
            except FileNotFoundError:  # deleted by a flush meanwhile
                pass
    return total


def test_the_write_ahead_log_stays_bounded(tmp_path):
    """Every commit also writes the small replog (and often meta) column families, whose
    memtables fill slowly; a WAL file goes only once every family has flushed it. The
    engine caps the WAL's total size, so RocksDB flushes the families that pin old files
    instead of keeping every file: 96 MB written against a 4 MB cap leave the cap plus
    what the data family's memtables still hold (9-15 MB measured), not 96 MB."""
    path = str(tmp_path / "db")
    e = Engine(path, node_id=1, durability="no", max_total_wal_bytes=4 << 20)
    big = b"x" * 4096
    for i in range(600):
        e.apply([(K.encode_string_key(b"k%d" % (j % 2000)), rec(j + 1, big))
                 for j in range(i * 40, i * 40 + 40)])
        e.put_meta(b"hwm", b"%d" % i)
        e.commit()
    deadline = time.monotonic() + 20
    while _wal_bytes(path) > 32 << 20 and time.monotonic() < deadline:
        time.sleep(0.1)
    assert _wal_bytes(path) <= 32 << 20, f"WAL files hold {_wal_bytes(path) >> 20} MB against a 4 MB cap"
    e.close()
    e = Engine(path, node_id=1, durability="no")
    assert e.get(K.encode_string_key(b"k1999")) == rec(24000, big)
    assert e.log_seq == 600 and e.get_meta(b"hwm") == b"599"
    e.close()


def test_data_dir_of_another_node_is_refused(tmp_path):
    Engine(str(tmp_path / "db"), node_id=1).close()
    with pytest.raises(StorageError, match="belongs to node 1"):
        Engine(str(tmp_path / "db"), node_id=2)


def test_trim_log_drops_entries_up_to(engine):
    for i in range(5):
        engine.apply([(K.encode_string_key(b"k%d" % i), rec(1))])
        engine.commit()
    engine.trim_log(3)
    assert [s for s, _ in engine.read_log(0, 10)] == [4, 5]
    assert engine.log_first == 4


def test_durability_modes(tmp_path):
    e = Engine(str(tmp_path / "db"), node_id=1, durability="everysec")
    assert e._syncer is not None and e._syncer.is_alive()
    e.set_durability("always")
    assert e._wopts.sync
    e.set_durability("no")
    assert not e._wopts.sync
    with pytest.raises(ValueError):
        e.set_durability("sometimes")
    e.close()


def test_sweeper_removes_dead_records_only_after_gc_grace(engine):
    now = time.time_ns() // 1_000_000
    hlc_now = now << 16
    live = K.encode_string_key(b"live")
    fresh_tomb = K.encode_string_key(b"fresh-tomb")
    old_tomb = K.encode_string_key(b"old-tomb")
    expired_long_ago = K.encode_string_key(b"expired-long-ago")
    expired_recently = K.encode_string_key(b"expired-recently")
    engine.apply([
        (live, rec(hlc_now)),
        (fresh_tomb, rec(hlc_now, tomb=True)),
        (old_tomb, rec((now - 20_000) << 16, tomb=True)),
        (expired_long_ago, rec(hlc_now, ttl=now - 20_000)),
        (expired_recently, rec(hlc_now, ttl=now - 1_000)),
    ])
    engine.commit()
    sw = Sweeper(engine, SimpleNamespace(gc_grace=10, sweep_interval=0.1))
    assert sw.sweep_all() == 2
    assert sum(sw.live_keys) == 1 and sum(sw.expiring) == 0  # only "live" is a live key
    engine.commit()
    assert engine.data.get(old_tomb) is None and engine.data.get(expired_long_ago) is None
    assert engine.get(old_tomb) is None
    for k in (live, fresh_tomb, expired_recently):
        assert engine.data.get(k) is not None
    assert engine.read_log(1, 10) == []  # removal is not a replicated write


def test_sweeper_steps_are_bounded_by_records_and_count_live_keys(engine):
    now = time.time_ns() // 1_000_000
    engine.apply([(K.encode_string_key(b"k%d" % i), rec(now << 16, ttl=(now + 60_000) if i % 2 else 0))
                  for i in range(500)])
    engine.commit()
    sw = Sweeper(engine, SimpleNamespace(gc_grace=10, sweep_interval=0.1))
    sw.step(100)
    assert 0 < sw.next_pid < 4096 and sw.cycles == 0  # stopped after ~100 records
    while sw.cycles == 0:
        sw.step(100)
    assert sum(sw.live_keys) == 500 and sum(sw.expiring) == 250


def test_sweeper_counts_every_partition_like_a_full_scan(engine):
    """Steps of any size (one iterator each, across partition boundaries and the wrap)
    count each partition's live keys as a scan of that partition alone would."""
    from marekvs.core.partition import partition_of

    now = time.time_ns() // 1_000_000
    keys = [b"p%d" % i for i in range(700)]
    engine.apply([(K.encode_string_key(k), rec(now << 16, ttl=(now + 60_000) if i % 3 == 0 else 0,
                                               tomb=i % 7 == 0)) for i, k in enumerate(keys)])
    engine.commit()
    want = [0] * 4096
    for i, k in enumerate(keys):
        want[partition_of(k)] += i % 7 != 0
    for budget in (1, 37, 5000):
        sw = Sweeper(engine, SimpleNamespace(gc_grace=10, sweep_interval=0.1))
        sw.next_pid = 4000  # start near the end: the step wraps
        steps = 0
        while sw.cycles < 2:
            sw.step(budget)
            steps += 1
        assert sw.live_keys == want, budget
        assert sw.last_cycle_records == len(keys)
        assert steps > 2 if budget < 700 else steps <= 2


def test_prefix_end_and_shards():
    assert prefix_end(b"ab") == b"ac"
    assert prefix_end(b"a\xff") == b"b"
    assert prefix_end(b"\xff\xff") is None
    for shards in (1, 3, 4, 7):
        ranges = [shard_range(s, shards) for s in range(shards)]
        assert ranges[0].first == 0 and ranges[-1].last == 4095
        assert all(ranges[i].last + 1 == ranges[i + 1].first for i in range(shards - 1))
        assert all(shard_of(p, shards) == s for s, r in enumerate(ranges) for p in (r.first, r.last))


def test_config_precedence_file_env_flags(tmp_path):
    f = tmp_path / "node.toml"
    f.write_text('port = 7000\nnode_id = 4\ndurability = "always"\npeers = ["2@h:1"]\n')
    cfg = cfgmod.load(str(f), env={"MAREKVS_PORT": "7001", "MAREKVS_GC_GRACE": "5"},
                      overrides={"port": "7002"})
    assert (cfg.port, cfg.node_id, cfg.durability, cfg.gc_grace, cfg.peers) == (7002, 4, "always", 5, ["2@h:1"])
    assert cfgmod.load(None, env={}).bind == "127.0.0.1"
    with pytest.raises(ValueError):
        cfgmod.load(None, env={"MAREKVS_DURABILITY": "sometimes"})
    f.write_text("no_such_option = 1\n")
    with pytest.raises(ValueError, match="unknown option"):
        cfgmod.load(str(f), env={})


def test_sweeper_paces_its_steps_by_the_size_of_the_last_cycle(engine):
    from marekvs.storage import sweeper as S

    now = time.time_ns() // 1_000_000
    engine.apply([(K.encode_string_key(b"k%d" % i), rec(now << 16)) for i in range(3000)])
    engine.commit()
    sw = Sweeper(engine, SimpleNamespace(gc_grace=10, sweep_interval=0.1))
    assert sw.budget() == S.RECORDS_PER_STEP  # the first cycle: INFO keyspace waits for it
    sw.step(700)
    while sw.cycles == 0:
        sw.step(700)
    assert sw.last_cycle_records == 3000
    assert sw.budget() == S.MIN_STEP  # 3000 records over a 30 s cycle: the floor
    sw.last_cycle_records = 10_000_000
    assert sw.budget() == S.RECORDS_PER_STEP  # a huge keyspace: the ceiling
    sw.last_cycle_records = 600_000
    assert sw.budget() == int(600_000 * 0.1 / S.CYCLE_SECONDS)
    while sw.cycles == 1:  # the second cycle counts from the wrap on
        sw.step(700)
    assert sw.last_cycle_records == 3000


def test_head_map_marks_partitions_that_may_hold_a_collection_head(tmp_path):
    from marekvs.core import head as H
    from marekvs.core.partition import partition_of

    path = str(tmp_path / "db")
    e = Engine(path, node_id=1, durability="no")
    assert not any(e.head_pids)
    e.apply([(K.encode_string_key(b"s"), rec(5 << 16))])
    assert not any(e.head_pids)  # strings do not count
    hk = K.encode_head_key(b"h")
    e.apply([(hk, H.new(H.CollectionType.HASH, 6 << 16, 1))])
    assert e.head_pids[partition_of(b"h")] == 1  # visible as soon as applied
    assert sum(e.head_pids) == 1
    e.apply([(hk, H.tombstone(e.get(hk), 7 << 16, 1))])
    e.close()
    e = Engine(path, node_id=1, durability="no")  # found again at open, tombstone or not
    assert e.head_pids[partition_of(b"h")] == 1 and sum(e.head_pids) == 1
    e.close()


class CountingReads:
    """Stands in for a column family: counts point reads, delegates everything."""

    def __init__(self, cf):
        self.cf = cf
        self.gets = 0

    def get(self, k):
        self.gets += 1
        return self.cf.get(k)

    def __getattr__(self, name):
        return getattr(self.cf, name)


def test_restart_clock_reads_a_bounded_sample_of_the_newest_log_entries(tmp_path):
    """After a bulk load the newest log entries name every key of big batches; the
    start-up clock reads the keys at both ends of each, not all of them (it read every
    one, and a restart after loading a million keys took minutes)."""
    e = Engine(str(tmp_path / "db"), node_id=1, durability="no")
    for batch in range(3):
        e.apply([(K.encode_string_key(b"k%d:%d" % (batch, i)), rec(1000 + batch * 10_000 + i))
                 for i in range(10_000)])
        e.commit()
    e.close()
    e = Engine(str(tmp_path / "db"), node_id=1, durability="no")
    e.data = counting = CountingReads(e.data)
    assert e.max_hlc() == 1000 + 2 * 10_000 + 9_999  # the last key of the newest entry
    assert counting.gets == 3 * 32
    e.data = counting.cf
    e.close()


def test_a_clean_shutdown_keeps_the_clock_for_the_next_start(tmp_path):
    """Remote clocks taken in by the receive rule are in no local record: the clock is
    saved at shutdown so a restarted node does not stamp below them."""
    e = Engine(str(tmp_path / "db"), node_id=1, durability="no")
    e.apply([(K.encode_string_key(b"a"), rec(50))])
    e.save_hlc(7_000_000)
    e.close()
    e = Engine(str(tmp_path / "db"), node_id=1, durability="no")
    assert e.max_hlc() == 7_000_000
    e.close()


def test_scan_tags_reads_only_the_wanted_tags_from_a_partition_on(engine):
    """One iterator over the key records: other tags and empty partitions are sought
    past, and the partitions before ``first_pid`` are not read."""
    def ik(pid, tag, rest=b"k"):
        return pid.to_bytes(2, "big") + tag + rest
    keys = [ik(3, b"s"), ik(5, b"H"), ik(5, b"M"), ik(5, b"h", b"f1"), ik(5, b"h", b"f2"),
            ik(5, b"s", b"a"), ik(5, b"s", b"b"), ik(5, b"z"), ik(6, b"h"), ik(4095, b"S"),
            ik(4095, b"s")]
    for k in keys:
        engine.data.put(k, rec(1))
    assert [k for k, _ in engine.scan_tags(4, b"sM")] == [
        ik(5, b"M"), ik(5, b"s", b"a"), ik(5, b"s", b"b"), ik(4095, b"s")]
    assert [k for k, _ in engine.scan_tags(0, b"s")] == [
        ik(3, b"s"), ik(5, b"s", b"a"), ik(5, b"s", b"b"), ik(4095, b"s")]
    assert [k for k, _ in engine.scan_tags(6, b"Mh")] == [ik(6, b"h")]
    assert list(engine.scan_tags(4095, b"M")) == []


def test_scans_see_pending_writes_without_committing_them(engine):
    """A scan in the middle of a tick (KEYS inside MULTI/EXEC, a script) merges the
    pending writes into what it reads and commits nothing: the tick's writes stay one
    WriteBatch and one log entry."""
    def ik(pid, tag, rest=b"k"):
        return pid.to_bytes(2, "big") + tag + rest
    stored = [ik(1, b"s", b"a"), ik(1, b"s", b"c"), ik(2, b"s", b"a"), ik(2, b"h", b"f")]
    engine.apply([(k, rec(1)) for k in stored])
    engine.commit()
    engine.apply([(ik(1, b"s", b"b"), rec(2)), (ik(1, b"s", b"c"), rec(3, b"new")),
                  (ik(2, b"s", b"a"), rec(4, tomb=True)), (ik(3, b"s", b"z"), rec(5))])
    engine.purge(ik(2, b"h", b"f"))
    seq = engine.log_seq
    assert [(k, v) for k, v in engine.scan(ik(1, b"s", b""), ik(3, b"s", b""))] == [
        (ik(1, b"s", b"a"), rec(1)), (ik(1, b"s", b"b"), rec(2)), (ik(1, b"s", b"c"), rec(3, b"new")),
        (ik(2, b"s", b"a"), rec(4, tomb=True))]  # a tombstone record is a record; a purge is not
    assert [k for k, _ in engine.scan(b"")] == [ik(1, b"s", b"a"), ik(1, b"s", b"b"), ik(1, b"s", b"c"),
                                               ik(2, b"s", b"a"), ik(3, b"s", b"z")]
    assert [k for k, _ in engine.scan_tags(2, b"sh")] == [ik(2, b"s", b"a"), ik(3, b"s", b"z")]
    assert engine.log_seq == seq and engine.pending  # nothing committed
    engine.commit()
    assert [k for k, _ in engine.scan_tags(2, b"sh")] == [ik(2, b"s", b"a"), ik(3, b"s", b"z")]
    (_, recs), = engine.read_log(seq, 10)
    assert len(recs) == 4  # the four writes of the tick: one entry


def test_scans_interleaved_with_writes_in_one_tick_read_each_state(engine):
    """Scans between the writes of one tick (the engine keeps the pending keys sorted
    across them, adding only what each write added) read exactly the state at that
    point, against a model, over several ticks and commits."""
    import random
    rng = random.Random(7)

    def ik(n):
        return (n % 5).to_bytes(2, "big") + b"s" + b"%03d" % n
    model: dict[bytes, bytes] = {}
    for tick in range(30):
        for step in range(rng.randint(1, 40)):
            k = ik(rng.randrange(200))
            if rng.random() < 0.15:
                engine.purge(k)
                model.pop(k, None)
            elif rng.random() < 0.8:
                r = rec(tick * 100 + step + 1, b"v%d" % step)
                engine.apply([(k, r)])
                model[k] = r  # stamps only grow here: the newer write wins
            if rng.random() < 0.4:
                lo, hi = sorted((ik(rng.randrange(200)), ik(rng.randrange(200))))
                want = sorted((kk, v) for kk, v in model.items() if lo <= kk < hi)
                assert list(engine.scan(lo, hi)) == want
                pid = rng.randrange(5)
                assert [kk for kk, _ in engine.scan_tags(pid, b"s")] == sorted(
                    kk for kk in model if int.from_bytes(kk[:2], "big") >= pid)
        if rng.random() < 0.5:
            engine.commit()
    assert list(engine.scan(b"")) == sorted(model.items())


def test_reads_alone_keep_the_cache_bounded(tmp_path):
    """A read-only load never commits; its misses (cached absences included) are
    evicted by the reads themselves (the cache grew without bound: 330,000 entries
    for a cap of 100,000 under redis-benchmark GET), but never a pending record."""
    e = Engine(str(tmp_path / "db"), node_id=1, durability="no", cache_entries=100)
    stored = [K.encode_string_key(b"k%d" % i) for i in range(500)]
    e.apply([(k, rec(1)) for k in stored])
    e.commit()
    e.cache.clear()
    peak = 0
    for i in range(2000):
        e.get(stored[i % 500] if i % 2 else K.encode_string_key(b"absent%d" % i))
        peak = max(peak, len(e.cache))
    assert peak <= 101
    pending = K.encode_string_key(b"pending")
    e.apply([(pending, rec(7))])
    for i in range(500):
        e.get(K.encode_string_key(b"other%d" % i))
    assert e.get(pending) == rec(7)  # not evicted while it waits for the commit
    e.commit()
    assert len(e.cache) <= 100
    e.close()
