"""The sweeper reclaims collections' records (core/sweep.py's rules, storage/sweeper.py),
for hashes, sets, zsets, lists, streams and HyperLogLogs built through the keyspace with
core's record constructors (tests/records.py) and the commands of this branch: after DEL
(the head's delete clock gates every element), for expired and removed members, for an
expired collection, and for the elements a re-created collection's head gates; never a live
record, never before gc_grace, and never changing what any read returns (DEBUG DIGEST).

In-process: a real node on RocksDB in a temporary directory, its sweeper run by the test.
"""

from __future__ import annotations

import time

import pytest

from marekvs.config import Config
from marekvs.core import envelope as env
from marekvs.core import orswot
from marekvs.core import keys as K
from marekvs.core.envelope import RecordType
from marekvs.core.head import CollectionType as CT
from marekvs.node import Node
from marekvs.server import resp
from tests import records as R

TYPES = list(R.TYPES.items())


class InProcess:
    def __init__(self, path: str):
        self.node = Node(Config(data_dir=path, node_id=1, durability="no"))
        self.ks = self.node.ks
        self.engine = self.node.engine
        self.c = self.node.new_context()

    def __call__(self, *argv):
        r = self.node.dispatch(self.c, [a if isinstance(a, bytes) else str(a).encode() for a in argv])
        return ("ERR", str(r)) if isinstance(r, resp.Err) else r

    def sweep_until(self, done, what: str, timeout: float = 30.0) -> None:
        """Run whole sweeper cycles until ``done()`` (gc_grace counts in wall-clock ms, so
        a record stamped this millisecond is reclaimable from the next one on)."""
        deadline = time.monotonic() + timeout
        while True:
            self.node.sweeper.sweep_all()
            self.engine.commit()
            if done():
                return
            assert time.monotonic() < deadline, f"sweeper did not reclaim {what}: left {self.left()}"
            time.sleep(0.002)

    def left(self) -> dict[bytes, list[bytes]]:
        return {k: R.stored(self.ks, k) for k in self.keys}

    def digest(self) -> bytes:
        return self("DEBUG", "DIGEST")


@pytest.fixture
def n(tmp_path):
    node = InProcess(str(tmp_path / "db"))
    node.keys = []
    yield node
    node.node.close()


@pytest.mark.parametrize("name,ctype", TYPES, ids=[t for t, _ in TYPES])
def test_a_deleted_collection_is_reclaimed_whole_after_gc_grace(n, name, ctype):
    R.build(n.ks, b"gone", ctype, 40)
    R.build(n.ks, b"kept", ctype, 5)
    n.keys = [b"gone", b"kept"]
    kept = R.stored(n.ks, b"kept")
    assert n("DEL", "gone") == 1
    n.node.config.gc_grace = 3600
    n.node.sweeper.sweep_all()
    assert len(R.stored(n.ks, b"gone")) > 40  # within gc_grace: every record stays
    digest = n.digest()
    n.node.config.gc_grace = 0
    n.sweep_until(lambda: not R.stored(n.ks, b"gone"), "the deleted collection")
    assert R.stored(n.ks, b"kept") == kept
    assert n.digest() == digest
    assert n("DBSIZE") == 1


@pytest.mark.parametrize("name,ctype", TYPES, ids=[t for t, _ in TYPES])
def test_the_elements_a_recreated_head_gates_are_reclaimed_and_the_new_ones_stay(n, name, ctype):
    R.build(n.ks, b"c", ctype, 30)
    assert n("DEL", "c") == 1
    if ctype == CT.HLL:
        n("PFADD", "c")  # an empty HLL again (re-adding old elements would hit the DEL caveat)
        new = 0
    else:
        R.build(n.ks, b"c", ctype, 0)
        n.ks.apply(R.element_records(n.ks, b"c", ctype, 3, start=1000))
        new = 3
    before = R.content(n.ks, b"c")
    digest = n.digest()
    n.keys = [b"c"]
    n.node.config.gc_grace = 0
    per = 2 if ctype == CT.ZSET else 1  # a zset member has its score index entry
    n.sweep_until(lambda: len(R.stored(n.ks, b"c")) == 1 + new * per, "the gated elements")
    assert R.content(n.ks, b"c") == before and n.digest() == digest


@pytest.mark.parametrize("ctype", [CT.HASH, CT.SET, CT.ZSET], ids=["hash", "set", "zset"])
def test_expired_and_removed_members_are_reclaimed(n, ctype):
    now = n.ks.now()
    R.build(n.ks, b"c", ctype, 10)
    tag = {CT.HASH: K.TAG_HASH, CT.SET: K.TAG_SET, CT.ZSET: K.TAG_ZSET}[ctype]
    members = sorted(k for k in R.stored(n.ks, b"c") if k[2:3] == tag)
    expiring, removed = members[0], members[1]
    rec = n.ks.get(expiring)
    n.ks.apply([(expiring, env.with_ttl(rec, n.ks.stamp(), 1, now + 20)),
                (removed, orswot.remove(n.ks.get(removed), n.ks.stamp(), 1))])
    assert n.ks.get(removed)[0] & env.FLAG_TOMBSTONE  # a removed member is a tombstone record
    n.node.config.gc_grace = 0
    n.keys = [b"c"]
    n.sweep_until(lambda: n.ks.get(expiring) is None and n.ks.get(removed) is None,
                  "the expired and the removed member")
    left = [k for k in R.stored(n.ks, b"c") if k[2:3] == tag]
    assert left == members[2:]


@pytest.mark.parametrize("name,ctype", TYPES, ids=[t for t, _ in TYPES])
def test_an_expired_collection_is_reclaimed(n, name, ctype):
    R.build(n.ks, b"c", ctype, 10, head_ttl=n.ks.now() + 30)
    n.keys = [b"c"]
    n.node.config.gc_grace = 0
    n.sweep_until(lambda: not R.stored(n.ks, b"c"), "the expired collection")
    assert n("EXISTS", "c") == 0


def test_info_keyspace_counts_every_collection_head_and_those_with_a_ttl(n):
    for i, (_, ctype) in enumerate(TYPES):
        R.build(n.ks, b"k%d" % i, ctype, 3, head_ttl=n.ks.now() + 100_000 if i % 2 else 0)
    n("SET", "s", "v")
    n("DEL", "k0")
    n.node.sweeper.sweep_all()
    text = n("INFO", "keyspace")
    assert f"db0:keys={len(TYPES)},expires={len(TYPES) // 2},avg_ttl=0".encode() in text
    assert n("DBSIZE") == len(TYPES)


def test_info_keyspace_stops_counting_a_collection_its_last_element_left(n):
    """INFO keyspace counts what DBSIZE counts: a list, set, hash or zset whose last
    element was removed (its head record stays) is gone; an emptied stream stays, as in
    Redis; FLUSHALL leaves nothing (each was counted for ever before)."""
    n("RPUSH", "l", "a")
    n("SADD", "s", "a")
    n("HSET", "h", "f", "v", "g", "w")
    n("ZADD", "z", 1, "a")
    n("EXPIRE", "z", 1000)
    n("XADD", "x", "1-1", "f", "v")
    n("SET", "str", "v")
    n.node.sweeper.sweep_all()
    assert b"db0:keys=6,expires=1,avg_ttl=0" in n("INFO", "keyspace")
    n("LPOP", "l")
    n("SREM", "s", "a")
    n("HDEL", "h", "f", "g")
    n("ZREM", "z", "a")
    n("XDEL", "x", "1-1")
    n.node.sweeper.sweep_all()
    assert n("DBSIZE") == 2 and b"db0:keys=2,expires=0,avg_ttl=0" in n("INFO", "keyspace")
    n("RPUSH", "l", "b")  # (a list again, over the emptied one's head)
    n.node.sweeper.sweep_all()
    assert n("DBSIZE") == 3 and b"db0:keys=3,expires=0" in n("INFO", "keyspace")
    n("FLUSHALL")
    n.node.sweeper.sweep_all()
    assert n("DBSIZE") == 0 and b"db0:" not in n("INFO", "keyspace")


def test_a_member_removed_within_gc_grace_stays(n):
    R.build(n.ks, b"s", CT.SET, 3)
    member = K.encode_set_member_key(b"s", b"0")
    n.ks.apply([(member, orswot.remove(n.ks.get(member), n.ks.stamp(), 1))])
    n.node.config.gc_grace = 3600
    n.node.sweeper.sweep_all()
    n.engine.commit()
    assert n.ks.get(member) is not None  # its covered dots still stop a late add
    assert env.rtype_of(n.ks.get(member)) == RecordType.SET_MEMBER
