"""Partition ranges (docs/shards.md, slice 1): an engine, its sweeper, ``Keyspace.key_runs``
and the digest verifier over a contiguous range of partitions hold, read and iterate only
that range; the shard map says which range owns a partition.

The data is written by a node over all 4096 partitions (strings and hashes on ~2000 keys),
then the same directory is opened by an engine over one range: what it sees is checked
against what the whole engine holds in that range."""

from __future__ import annotations

import shutil
import time
from types import SimpleNamespace

import pytest

from marekvs.antientropy.background import DigestVerifier
from marekvs.antientropy.replica import BadRequest, LocalReplica
from marekvs.config import Config
from marekvs.core import keys as K
from marekvs.core import registry
from marekvs.core.hlc import HLC
from marekvs.core.partition import ALL, PARTITIONS, PartitionRange, ShardMap, partition_of, shard_of, shard_range
from marekvs.keyspace import Keyspace
from marekvs.node import Node
from marekvs.storage.engine import Engine, OutsideRange
from marekvs.storage.sweeper import Sweeper

R = PartitionRange(1000, 2047)
N = 2000


def pid_of(ikey: bytes) -> int:
    return (ikey[0] << 8) | ikey[1]


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    """A data directory written over every partition; what it holds, as the whole engine sees it."""
    path = str(tmp_path_factory.mktemp("ranges") / "db")
    node = Node(Config(data_dir=path, node_id=1, durability="no"))
    ctx = node.new_context()
    for i in range(N):
        node.dispatch(ctx, [b"SET", b"s%d" % i, b"v"])
        if i % 4 == 0:
            node.dispatch(ctx, [b"HSET", b"h%d" % i, b"f", b"v"])
    node.end_tick()
    records = list(node.engine.scan(b""))
    roots = node.engine.digest.roots()
    heads = bytes(node.engine.head_pids)
    node.close()
    return SimpleNamespace(path=path, records=records, roots=roots, heads=heads)


@pytest.fixture
def copy(whole, tmp_path):
    """A copy of the directory (a test may change it)."""
    path = str(tmp_path / "db")
    shutil.copytree(whole.path, path)
    return path


@pytest.fixture
def ranged(copy):
    e = Engine(copy, node_id=1, durability="no", partitions=R)
    yield e
    e.close()


def inside(records):
    return [(k, v) for k, v in records if R.holds(pid_of(k))]


def test_the_fixture_spreads_records_inside_and_outside_the_range(whole):
    assert 0 < len(inside(whole.records)) < len(whole.records)


def test_scans_of_a_range_engine_see_only_its_partitions(whole, ranged):
    want = inside(whole.records)
    assert list(ranged.scan(b"")) == want
    assert list(ranged.scan_committed(b"")) == want
    assert list(ranged.scan(b"\x00", b"\x03\xe9")) == [r for r in want if pid_of(r[0]) == 1000]
    assert list(ranged.scan(b"\x08\x00")) == []  # wholly past the range
    tags = registry.KEY_TAGS
    got = list(ranged.scan_tags(0, tags))
    assert got == [r for r in want if r[0][2] in tags]
    assert list(ranged.scan_tags(1500, tags, last_pid=1600)) == [r for r in got if 1500 <= pid_of(r[0]) <= 1600]
    assert list(ranged.scan_tags(3000, tags)) == []


def test_a_range_engine_refuses_keys_outside_it_before_anything_changes(whole, ranged):
    out = next(k for k, _ in whole.records if not R.holds(pid_of(k)))
    inn, rec = inside(whole.records)[0]
    for call in (lambda: ranged.get(out), lambda: ranged.purge(out), lambda: ranged.get_committed(out)):
        with pytest.raises(OutsideRange):
            call()
    newer = bytearray(rec)
    newer[1:9] = (int.from_bytes(rec[1:9], "big") + 1).to_bytes(8, "big")
    with pytest.raises(OutsideRange):
        ranged.apply([(inn, bytes(newer)), (out, rec)])
    assert ranged.get(inn) == rec and not ranged.pending and not ranged.digest.slots  # nothing applied
    assert ranged.apply([(inn, bytes(newer))]) == [(inn, bytes(newer))]  # inside: the one apply path as ever
    assert out not in ranged.cache


def test_the_head_map_marks_only_the_range(whole, ranged):
    assert any(whole.heads[:R.first]) and any(whole.heads[R.last + 1:])
    assert bytes(ranged.head_pids) == bytes(R.first) + whole.heads[R.first:R.last + 1] + bytes(PARTITIONS - R.last - 1)


def test_the_digest_rebuilt_at_open_covers_the_range_only(whole, copy):
    e = Engine(copy, node_id=1, durability="no", partitions=R)
    e.digest.cf.delete(b"F")  # as if written before digests: the next open rebuilds it from the data
    e.close()
    e = Engine(copy, node_id=1, durability="no", partitions=R)
    try:
        assert e.digest.rebuilt_at_open
        roots = e.digest.roots()
        assert roots[R.first:R.last + 1] == whole.roots[R.first:R.last + 1]
        assert not any(roots[:R.first]) and not any(roots[R.last + 1:])
    finally:
        e.close()


def test_the_sweeper_walks_and_counts_the_range(whole, ranged):
    want = [0] * PARTITIONS
    for k, _ in inside(whole.records):
        if k[2] in registry.KEY_TAGS:
            want[pid_of(k)] += 1
    sw = Sweeper(ranged, SimpleNamespace(gc_grace=10, sweep_interval=0.1))
    assert sw.partitions == R and sw.next_pid == R.first
    sw.next_pid = 2000  # near the range's end: a step wraps to its first partition
    for budget in (7, 500):
        cycles = sw.cycles
        while sw.cycles < cycles + 2:
            sw.step(budget)
            assert R.holds(sw.next_pid)
        assert sw.live_keys == want
        assert sw.last_cycle_records == len(inside(whole.records))
    sub = Sweeper(ranged, SimpleNamespace(gc_grace=10, sweep_interval=0.1), PartitionRange(1100, 1199))
    sub.sweep_all()
    assert sub.live_keys == [n if 1100 <= p <= 1199 else 0 for p, n in enumerate(want)]
    with pytest.raises(ValueError):
        Sweeper(ranged, SimpleNamespace(gc_grace=10, sweep_interval=0.1), PartitionRange(0, 1100))


def test_key_runs_of_a_range_engine_stay_in_the_range(whole, ranged):
    ks = Keyspace(ranged, HLC(), 1)
    now = time.time_ns() // 1_000_000
    runs = list(ks.key_runs(0, now))
    assert [p for p, _, _ in runs] == sorted({pid_of(k) for k, _ in inside(whole.records)})
    keys = sorted(k for _, _, ks_ in runs for k, _, _ in ks_)
    assert keys == sorted(k for k in [b"s%d" % i for i in range(N)] + [b"h%d" % i for i in range(0, N, 4)]
                          if R.holds(partition_of(k)))
    assert [p for p, _, _ in ks.key_runs(1200, now, last_pid=1300)] == [p for p, _, _ in runs if 1200 <= p <= 1300]


def test_the_digest_verifier_walks_the_range_and_corrects_it(whole, ranged):
    local = LocalReplica(ranged, HLC(), SimpleNamespace(gc_grace=10, node_id=1))
    assert local.partitions == R
    v = DigestVerifier(local)
    k, _ = inside(whole.records)[5]
    ranged.data.delete(k)  # behind the engine's back: the kept digest is now wrong for pid_of(k)
    ranged.cache.pop(k, None)
    while v.cycles == 0:
        v.step(300, 64)
        assert R.holds(v.pid)
    assert local.verified == R.count and local.corrected == 1
    assert v.last_cycle == len(inside(whole.records)) - 1
    with pytest.raises(BadRequest):
        local.verify(R.last + 1, correct=True)
    with pytest.raises(ValueError):
        DigestVerifier(local, PartitionRange(0, 10))


def test_partition_ranges_and_shard_maps():
    assert ALL.whole and ALL.count == PARTITIONS and not R.whole
    assert (R.after(1000), R.after(2047), R.start_key, R.end_key) == (1001, 1000, b"\x03\xe8", b"\x08\x00")
    for bad in ((-1, 5), (5, 4), (0, PARTITIONS)):
        with pytest.raises(ValueError):
            PartitionRange(*bad)
    for shards in (1, 2, 3, 7, 16):
        m = ShardMap.even(shards)
        assert len(m) == shards and m.ranges == tuple(shard_range(i, shards) for i in range(shards))
        assert all(m.owner[p] == shard_of(p, shards) and m.ranges[m.owner[p]].holds(p) for p in range(PARTITIONS))
        assert m.shard_of_key(b"{user1}.a") == m.owner[partition_of(b"user1")]
    for bad in ([], [PartitionRange(0, 10)], [PartitionRange(0, 10), PartitionRange(12, 4095)]):
        with pytest.raises(ValueError):
            ShardMap(bad)
    assert K.pid_prefix(R.first) == R.start_key
