"""Resharding a data directory (docs/shards.md §7; ``marekvs/shards/reshard.py``) at the
storage level: a directory written by one process over all 4096 partitions (strings,
hashes, zsets, TTLs, an ACL user, a function library, a log, peers' high-water marks) is
resharded 1 -> 3 -> 2 -> 1; after each step every worker's directory holds exactly the
records of its range, its kept digest equals the digest computed from them, its log (a new
incarnation) names every key the old logs named in its range, its high-water mark of each
peer stream is the lowest of the old directories it took partitions from, its clock floor
is the highest old clock; back at one process the directory is a single process's again.
Leftovers of an interrupted reshard are deleted before anything opens."""

from __future__ import annotations

import fcntl
import json
import os
from dataclasses import replace

import pytest

from marekvs.config import Config
from marekvs.core.partition import PartitionRange
from marekvs.node import Node
from marekvs.shards import reshard
from marekvs.storage.digest import computed
from marekvs.storage.engine import Engine
from marekvs.storage.replog import decode_entry

N = 1500


def pid_of(ikey: bytes) -> int:
    return (ikey[0] << 8) | ikey[1]


def open_all(layout: reshard.Layout) -> list[Engine]:
    return [Engine(d, node_id=1, durability="no", partitions=r) for d, r in zip(layout.dirs, layout.ranges)]


def logged(e: Engine) -> set[bytes]:
    return {k for _, v in e.replog.items() for k in decode_entry(v)[1]}


def meta(e: Engine, key: bytes) -> bytes | None:
    return e.meta.get(key)


@pytest.fixture
def single(tmp_path):
    """One process's directory; what it holds."""
    cfg = Config(data_dir=str(tmp_path / "d"), node_id=1, durability="no")
    node = Node(cfg)
    ctx = node.new_context()
    for i in range(N):
        node.dispatch(ctx, [b"SET", b"s%d" % i, b"v%d" % i])
        if i % 3 == 0:
            node.dispatch(ctx, [b"HSET", b"h%d" % i, b"f", b"v", b"g", b"w"])
            node.dispatch(ctx, [b"ZADD", b"z%d" % i, b"1", b"a", b"2.5", b"b"])
            node.dispatch(ctx, [b"PEXPIRE", b"s%d" % i, b"100000000"])
        if i % 100 == 99:
            node.end_tick()  # a log entry per tick
    node.dispatch(ctx, [b"ACL", b"SETUSER", b"alice", b"on", b">pw", b"~*", b"+@all"])
    node.dispatch(ctx, [b"FUNCTION", b"LOAD", b"#!lua name=lib\nredis.register_function('f', function() return 1 end)"])
    node.end_tick()
    e = node.engine
    e.put_meta(b"hwm:2:77", b"100:5")
    e.put_meta(b"peer:2", b"127.0.0.1:1")
    records = list(e.scan(b""))
    keys = logged(e)
    clock = e.max_hlc()
    incarnation = e.incarnation
    node.close()
    return cfg, records, keys, clock, incarnation


def check(cfg: Config, shards: int, records, keys: set[bytes], clock: int, marks: list[bytes | None]) -> None:
    layout = reshard.committed(cfg.data_dir)
    assert layout is not None and layout.shards == shards and layout.single == (shards == 1)
    engines = open_all(layout)
    try:
        for e, r, mark in zip(engines, layout.ranges, marks):
            mine = [(k, v) for k, v in records if r.holds(pid_of(k))]
            assert list(e.scan(b"")) == mine
            assert list(e.digest.segs) == list(computed(mine))
            assert logged(e) == {k for k in keys if r.holds(pid_of(k))}
            assert e.log.first == 1
            assert meta(e, b"hwm:2:77") == mark
            assert meta(e, b"peer:2") == b"127.0.0.1:1"
            assert e.max_hlc() >= clock
    finally:
        for e in engines:
            e.close()


def test_reshard_1_3_2_1_keeps_records_digests_logs_marks_and_clock(single):
    cfg, records, keys, clock, incarnation = single
    assert any(k[2:3] == b"U" for k, _ in records) and any(k[2:3] == b"F" for k, _ in records)
    assert reshard.prepare(replace(cfg, shards=3)) == [os.path.join(cfg.data_dir, "shards", d)
                                                       for d in ("0-1365", "1366-2730", "2731-4095")]
    assert not os.path.exists(os.path.join(cfg.data_dir, "CURRENT"))
    check(cfg, 3, records, keys, clock, [b"100:5"] * 3)
    three = reshard.committed(cfg.data_dir)
    assert three is not None
    engines = open_all(three)
    assert incarnation not in {e.incarnation for e in engines} and len({e.incarnation for e in engines}) == 3
    # different marks per old worker: each new worker takes the lowest of the ones it takes from
    engines[1].put_meta(b"hwm:2:77", b"50:4")
    engines[2].put_meta(b"hwm:2:77", None)
    engines[2].put_meta(b"hwm:3:9", b"7:1")  # (a stream only worker 2 received from)
    for e in engines:
        e.commit()
        e.close()
    dirs = reshard.prepare(replace(cfg, shards=2))
    assert [os.path.basename(d) for d in dirs] == ["0-2047", "2048-4095"]
    assert sorted(os.listdir(os.path.join(cfg.data_dir, "shards"))) == ["0-2047", "2048-4095", "map"]
    check(cfg, 2, records, keys, clock, [b"50:4", None])
    two = reshard.committed(cfg.data_dir)
    assert two is not None
    for e in open_all(two):
        assert meta(e, b"hwm:3:9") is None
        e.close()
    assert reshard.prepare(replace(cfg, shards=1)) == [cfg.data_dir]
    assert not os.path.exists(os.path.join(cfg.data_dir, "shards"))
    check(cfg, 1, records, keys, clock, [None])  # (worker 1 of 2 never received from stream 2:77)


def test_a_map_of_old_names_and_names_taken_get_new_directories(single, tmp_path):
    cfg, records, keys, clock, _ = single
    reshard.prepare(replace(cfg, shards=2))
    # a map written before "dirs" existed names its directories <first>-<last>
    with open(reshard.map_path(cfg.data_dir), "w") as f:
        json.dump({"shards": 2, "ranges": [[0, 2047], [2048, 4095]]}, f)
    old = reshard.committed(cfg.data_dir)
    assert old is not None and [os.path.basename(d) for d in old.dirs] == ["0-2047", "2048-4095"]
    new = reshard.wanted(cfg.data_dir, 2, old)
    assert [os.path.basename(d) for d in new.dirs] == ["0-2047.1", "2048-4095.1"]
    assert reshard.wanted(cfg.data_dir, 4, old).dirs[1].endswith("1024-2047")


def test_leftovers_of_an_interrupted_reshard_are_deleted(single):
    cfg, records, keys, clock, _ = single
    base = os.path.join(cfg.data_dir, "shards")
    # 1 -> N interrupted before the switch: shards/ beside a single layout
    os.makedirs(os.path.join(base, "0-2047"))
    open(os.path.join(base, "map.tmp"), "w").close()
    assert reshard.prepare(cfg) == [cfg.data_dir]
    assert not os.path.exists(base)
    # N -> M interrupted: a directory the map does not name; N -> 1 interrupted: RocksDB
    # files in data_dir beside the map
    reshard.prepare(replace(cfg, shards=2))
    os.makedirs(os.path.join(base, "0-1365"))
    Engine(cfg.data_dir, node_id=1, durability="no").close()
    assert os.path.exists(os.path.join(cfg.data_dir, "CURRENT"))
    reshard.prepare(replace(cfg, shards=2))
    assert sorted(os.listdir(base)) == ["0-2047", "2048-4095", "map"]
    assert not os.path.exists(os.path.join(cfg.data_dir, "CURRENT"))
    check(cfg, 2, records, keys, clock, [b"100:5"] * 2)


def test_a_failed_reshard_leaves_the_layout_unchanged(single):
    cfg, records, keys, clock, _ = single
    with pytest.raises(reshard.Refused, match="belongs to node 1, not 2"):
        reshard.prepare(replace(cfg, shards=2, node_id=2))
    layout = reshard.committed(cfg.data_dir)
    assert layout is not None and layout.single
    assert not os.path.exists(os.path.join(cfg.data_dir, "shards"))
    check(cfg, 1, records, keys, clock, [b"100:5"])


def test_worker_directories_without_a_map_are_refused(tmp_path):
    base = tmp_path / "d" / "shards"
    Engine(str(base / "0-2047"), node_id=1, durability="no", partitions=PartitionRange(0, 2047)).close()
    with pytest.raises(reshard.Refused, match="no shard map"):
        reshard.prepare(Config(data_dir=str(tmp_path / "d"), node_id=1, shards=2))


def test_one_process_at_a_time_lays_a_directory_out(single):
    cfg = single[0]
    fd = os.open(cfg.data_dir, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        with pytest.raises(reshard.Refused, match="another process is laying out"):
            reshard.prepare(replace(cfg, shards=2))
    finally:
        os.close(fd)
    assert reshard.prepare(replace(cfg, shards=2))[0].endswith("0-2047")
