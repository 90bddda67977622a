"""Each write reads each record at most once, and writes the fewest records the data
model allows (issue 34, item 4).

Commands run through ``node.dispatch`` on a real node (real RocksDB, the compiled build
when ``make test`` built it), with the engine's point read (``Engine.get``, which every
lookup of the keyspace and the families goes through: ``Keyspace.get`` is bound to it)
wrapped to count reads per internal key, and the apply path wrapped to count the records
a command changed. A second read of a record in one command is repeated work (a cache
hit, but a Python call, and for a collection element usually a second parse); a record
written beyond the data model's minimum is a write every replica merges for nothing.

The minimum per command, from the data model (crates_ref/DATA_MODEL.md): a string or
counter write is one record; a field, member or list element one record (plus the head
when the command creates the collection); a zset member two (its member record and its
score-index record); a stream entry two (the entry and its origin's counter record, which
mints the next ids); MSET one per key.
"""

from __future__ import annotations

import collections

import pytest

from marekvs.config import Config
from marekvs.node import Node

# Commands in order on one node: each is checked after the ones before it ran (their
# writes committed), so the keys exist, are emptied, re-created, renamed... as a client
# would see them. A line starting with "+" is setup, not checked.
SCRIPT = """
+SET s 10
+SET str hello
+HSET h f 1 g 2 x 3
+SADD st a b c
+SADD st2 b c d
+ZADD z 1 a 2 b 3 c
+RPUSH l a b c d
+XADD x 1-1 f v
+XGROUP CREATE x g 0
+PFADD hll a b
+SETBIT bm 5 1
+GEOADD geo 13.3 38.1 pa
+SET t 5 EX 1000
SET s 11
SET s 12 GET
SET s 13 XX
SET new 1 NX
SETNX s 1
GETSET s 14
GETDEL str
GETEX s EX 100
GETEX s PERSIST
APPEND s x
SETRANGE s 1 y
INCR s2
INCR s2
INCRBY t 3
DECR t
INCRBYFLOAT f 1.5
MSET a 1 b 2
MSETNX c 1 d 2
EXPIRE s 100
PEXPIRE s 100000
PERSIST s
DEL s
INCR s
UNLINK h
HSET h f 2
HSETNX h f 3
HINCRBY h x 1
HINCRBYFLOAT h x 1.5
HDEL h g
HEXPIRE h 100 FIELDS 1 f
HPERSIST h FIELDS 1 f
SADD st d
SREM st a
SPOP st
SMOVE st st2 b
ZADD z 5 a
ZADD z XX GT 6 b
ZINCRBY z 2 c
ZREM z a
ZPOPMIN z
LPUSH l x
RPUSH l y
LPOP l
RPOP l
LSET l 0 q
LINSERT l BEFORE q r
LREM l 1 r
LTRIM l 0 1
LMOVE l l2 LEFT RIGHT
XADD x * f v
XACK x g 1-1
XDEL x 1-1
XTRIM x MAXLEN 10
XGROUP CREATE x g2 0
PFADD hll c
SETBIT bm 7 1
BITFIELD bm INCRBY u8 0 1
GEOADD geo 13.4 38.2 pb
RENAME t t2
COPY a a2
RENAME z z9
COPY st2 st3
SETEX se 100 v
HMSET h2 a 1 b 2
HDEL h2 a b
HSET h2 c 3
ZADD z9 1 x 2 y 3 w
ZPOPMAX z9
SREM st2 b c d
SADD st2 e
RPUSH l3 a b c
LMPOP 1 l3 LEFT COUNT 2
XADD x2 MAXLEN 5 * f v
XGROUP CREATE x2 g2 0
XREADGROUP GROUP g2 c1 COUNT 1 STREAMS x2 >
PFMERGE hll2 hll
SINTERSTORE st4 st st3
ZUNIONSTORE z10 1 z9
DEL k1 k2 k3
EXPIRE h2 100
"""

# The matrix's write rows (bench_single.py) on keys that exist, and on new keys: the
# records each one writes.
WRITES = [
    ("SET s2 v", 1),
    ("INCR c", 1),
    ("INCR c", 1),
    ("HSET hh f v", 2),  # a new hash: its head and the field
    ("HSET hh f2 v", 1),
    ("HSET hh f2 w", 1),
    ("SADD ss m", 2),
    ("SADD ss m2", 1),
    ("ZADD zz 1 m", 3),  # head, member, score index
    ("ZADD zz 2 m2", 2),
    ("ZADD zz 3 m2", 2),
    ("LPUSH ll v", 2),  # a new list: its head and the element
    ("LPUSH ll v", 1),
    ("XADD xx * f v", 3),  # head, entry, origin counter
    ("XADD xx * f v", 2),
    ("MSET m1 1 m2 2 m3 3", 3),
]


class Counting:
    """A node whose point reads and applied records are counted per command."""

    def __init__(self, path: str):
        self.node = Node(Config(data_dir=path, node_id=1, durability="no"))
        self.ctx = self.node.new_context()
        eng, ks = self.node.engine, self.node.ks
        self.reads: collections.Counter[bytes] = collections.Counter()
        self.written = 0
        get, apply = eng.get, eng.apply

        def counted_get(ikey: bytes) -> bytes | None:
            self.reads[ikey] += 1
            return get(ikey)

        def counted_apply(records, log_entry=True):
            changed = apply(records, log_entry)
            self.written += len(changed)
            return changed

        eng.get = ks.get = counted_get
        eng.apply = ks.apply = counted_apply

    def run(self, line: str):
        self.reads.clear()
        self.written = 0
        r = self.node.dispatch(self.ctx, line.encode().split())
        self.node.end_tick()
        assert not isinstance(r, Exception), (line, r)
        return r

    def close(self) -> None:
        self.node.close()


@pytest.fixture
def n(tmp_path):
    c = Counting(str(tmp_path / "db"))
    yield c
    c.close()


def test_keyspace_reads_go_through_the_counted_get(n):
    # the wrapping reaches what the families call (else the next test proves nothing)
    n.run("HSET h f v")
    n.run("HGET h f")
    assert len(n.reads) >= 2


def test_each_write_reads_each_record_at_most_once(n):
    twice = {}
    for line in SCRIPT.strip().splitlines():
        setup = line.startswith("+")
        n.run(line.lstrip("+"))
        if not setup:
            again = {k: c for k, c in n.reads.items() if c > 1}
            if again:
                twice[line] = again
    assert twice == {}


def test_matrix_writes_write_the_data_models_minimum(n):
    for line, records in WRITES:
        n.run(line)
        assert n.written == records, (line, n.written)
        assert max(n.reads.values(), default=0) <= 1, (line, n.reads)
