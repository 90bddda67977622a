"""The replication log (marekvs.storage.replog): positions are never reused, epochs tell
one opening of a data directory from another, and the clock survives a trimmed log."""

from __future__ import annotations

import struct

import msgpack

from marekvs.core import keys as K
from marekvs.core import lww
from marekvs.core.envelope import RecordType
from marekvs.core.hlc import HLC
from marekvs.storage.engine import Engine


def rec(hlc: int, value: bytes = b"v") -> bytes:
    return lww.new(RecordType.STRING, hlc, 1, value)


def write(e: Engine, n: int, start: int = 1) -> None:
    for i in range(start, start + n):
        e.apply([(K.encode_string_key(b"k%d" % i), rec(i))])
        e.commit()


def test_positions_are_not_reused_after_the_log_was_trimmed_empty(tmp_path):
    path = str(tmp_path / "db")
    e = Engine(path, node_id=1, durability="always")
    write(e, 5)
    e.trim_log(5)
    assert e.read_log(0, 10) == [] and (e.log_first, e.log_seq) == (6, 5)
    e.close()
    e = Engine(path, node_id=1, durability="always")
    assert (e.log_first, e.log_seq) == (6, 5)  # was (1, 0): the next entry reused position 1
    write(e, 1, start=6)
    assert [s for s, _ in e.read_log(0, 10)] == [6]
    e.close()


def test_a_trim_past_the_newest_entry_is_capped(tmp_path):
    e = Engine(str(tmp_path / "db"), node_id=1, durability="no")
    write(e, 3)
    e.trim_log(10**9)  # a peer claiming more than the log holds must not move the floor
    assert (e.log_first, e.log_seq) == (4, 3)
    write(e, 1, start=4)
    assert [s for s, _ in e.read_log(0, 10)] == [4]
    e.close()


def test_a_crash_after_a_trim_keeps_the_floor(tmp_path):
    # the trim and its floor are one WriteBatch: there is no moment when the entries are
    # gone and the floor is not written (SIGKILL right after a trim is this reopen)
    path = str(tmp_path / "db")
    e = Engine(path, node_id=1, durability="always")
    write(e, 4)
    e.trim_log(4)
    e.db.flush_wal(True)
    e.log.close()  # no clean close: no save_hlc, no commit at shutdown
    e.digest.close()  # (its column-family handle keeps the database open too)
    e.data = e.replog = e.meta = None
    e._h_data = e._h_replog = e._h_meta = None
    e.db.close()
    e = Engine(path, node_id=1, durability="always")
    assert e.log_seq == 4
    e.close()


def test_each_opening_writes_its_entries_under_a_new_epoch(tmp_path):
    path = str(tmp_path / "db")
    e = Engine(path, node_id=1, durability="always")
    write(e, 2)
    first = e.log.epoch
    assert e.log.epoch_of(1) == e.log.epoch_of(2) == first
    e.close()
    e = Engine(path, node_id=1, durability="always")
    assert e.log.epoch != first
    write(e, 1, start=3)
    assert e.log.epoch_of(2) == first and e.log.epoch_of(3) == e.log.epoch
    assert e.log.epoch_of(4) is None and e.log.epoch_of(0) is None
    e.trim_log(2)
    assert e.log.epoch_of(2) == first  # the floor keeps the epoch of its entry
    assert e.log.epoch_of(1) is None
    e.close()


def test_entries_of_the_format_without_epochs_read_with_epoch_zero(tmp_path):
    e = Engine(str(tmp_path / "db"), node_id=1, durability="no")
    k = K.encode_string_key(b"old")
    e.apply([(k, rec(1))], log_entry=False)
    e.commit()
    e.replog.put(struct.pack(">Q", 1), msgpack.packb([k]))
    e.close()
    e = Engine(str(tmp_path / "db"), node_id=1, durability="no")
    assert e.log_seq == 1 and e.log.epoch_of(1) == 0
    assert e.read_log(0, 10) == [(1, [(k, rec(1))])]
    e.close()


def test_a_clock_ahead_of_the_wall_clock_is_saved_by_commit(tmp_path):
    # a peer's stamp from a clock 3 s ahead is in no local log entry; once the log that
    # named our later writes is trimmed, a restart would stamp below them
    path = str(tmp_path / "db")
    wall = [1_000_000]
    hlc = HLC(clock=lambda: wall[0])
    e = Engine(path, node_id=1, durability="always", hlc=hlc)
    hlc.update((wall[0] + 3000) << 16)
    stamp = hlc.now()
    e.apply([(K.encode_string_key(b"a"), rec(stamp))])
    e.commit()
    e.trim_log(e.log_seq)
    e.log.close()
    e.digest.close()  # (its column-family handle keeps the database open too)
    e.data = e.replog = e.meta = None
    e._h_data = e._h_replog = e._h_meta = None
    e.db.close()  # a crash: no save_hlc at shutdown
    e = Engine(path, node_id=1, durability="always")
    assert e.max_hlc() >= stamp
    e.close()


def test_a_clock_in_step_with_the_wall_clock_costs_no_write(tmp_path):
    e = Engine(str(tmp_path / "db"), node_id=1, durability="no", hlc=HLC())
    write(e, 3)
    assert e.meta.get(b"hlc") is None
    e.close()
