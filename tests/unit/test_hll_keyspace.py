"""HyperLogLog in the keyspace (keyspace/hll.py): the estimator's accuracy from 1 to 10
million elements on the frozen mapping, the records PFADD / PFMERGE write (and do not), the
register cache against the stored registers (local writes, records merged from a peer,
DEL, EXPIRE, RENAME), and the DEL caveat of the data model.

In-process: a real node (RocksDB in a temporary directory) and its ``dispatch``.
"""

from __future__ import annotations


import pytest
import xxhash

from marekvs.config import Config
from marekvs.core import envelope as env
from marekvs.core import head, hll
from marekvs.core import keys as K
from marekvs.keyspace import hll as khll
from marekvs.node import Node
from marekvs.server import resp

SIGMA = 1.04 / hll.M ** 0.5  # HyperLogLog's standard error with m = 16384: 0.81%


class InProcess:
    def __init__(self, path: str, node_id: int = 1):
        self.node = Node(Config(data_dir=path, node_id=node_id, durability="no"))
        self.ks = self.node.ks
        self.engine = self.node.engine
        self.c = self.node.new_context()

    def __call__(self, *argv):
        r = self.node.dispatch(self.c, [a if isinstance(a, bytes) else str(a).encode() for a in argv])
        return ("ERR", str(r)) if isinstance(r, resp.Err) else r

    @property
    def cache(self) -> khll.RegisterCache:
        return khll.cache_for(self.ks)

    def registers(self, key: bytes) -> dict[int, int]:
        _, h = khll.lookup(self.ks, key, self.ks.now())
        return khll.register_map(self.ks, key, h, self.ks.now())


@pytest.fixture
def n(tmp_path):
    node = InProcess(str(tmp_path / "db"))
    yield node
    node.node.close()


# -- accuracy ---------------------------------------------------------------------------------

def test_the_estimate_stays_within_three_standard_errors_from_1_to_10_million():
    """Over core's mapping and estimator (the same code PFCOUNT runs), at 23 cardinalities
    from 1 to 10^7: |estimate - n| <= 3 sigma * n (sigma = 1.04 / sqrt(m) = 0.81%), and
    exact up to a few hundred elements, where the estimator is near linear counting."""
    checks = [1, 2, 3, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10_000, 20_000, 50_000, 100_000,
              200_000, 500_000, 1_000_000, 2_000_000, 5_000_000, 10_000_000]
    ranks = bytearray(hll.M)
    x = xxhash.xxh3_64_intdigest
    sentinel, mask = 1 << (64 - hll.P), hll.M - 1
    i = 0
    bad = {}
    for c in checks:
        while i < c:  # hll.observe, inlined: 10^7 calls
            h = x(b"element:%d" % i)
            i += 1
            w = (h >> hll.P) | sentinel
            r = (w & -w).bit_length()
            if r > ranks[h & mask]:
                ranks[h & mask] = r
        est = khll.estimate(ranks)
        if abs(est - c) > max(3 * SIGMA * c, 0 if c <= 200 else 1):
            bad[c] = est
    assert not bad, bad
    assert hll.observe(b"element:9999999")[0] in {b for b, r in enumerate(ranks) if r}


def test_estimate_of_a_rank_array_is_core_count_of_the_register_map():
    ranks = bytearray(hll.M)
    regs: dict[int, int] = {}
    for e in (b"x%d" % i for i in range(30_000)):
        b, r = hll.observe(e)
        if r > ranks[b]:
            ranks[b] = regs[b] = r
        if len(regs) in (1, 10, 5000, 15000):
            assert khll.estimate(ranks) == hll.count(regs)
    assert khll.estimate(ranks) == hll.count(regs)
    assert khll.estimate(bytes(hll.M)) == 0


def test_pfcount_through_the_node_is_accurate_and_a_union_over_keys(n):
    for start in range(0, 20_000, 1000):
        n("PFADD", "a", *[b"e%d" % i for i in range(start, start + 1000)])
    n("PFADD", "b", *[b"e%d" % i for i in range(10_000, 30_000)])
    for key, true in (("a", 20_000), ("b", 20_000)):
        assert abs(n("PFCOUNT", key) - true) <= 3 * SIGMA * true
    union = n("PFCOUNT", "a", "b", "nokey")
    assert abs(union - 30_000) <= 3 * SIGMA * 30_000  # a union, not a sum (40,000)
    assert n("PFCOUNT", "a", "a") == n("PFCOUNT", "a")
    assert n("PFMERGE", "u", "a", "b") == b"OK"
    assert n("PFCOUNT", "u") == union


# -- what is written ---------------------------------------------------------------------------

def test_pfadd_writes_one_register_per_raised_bucket_and_a_duplicate_writes_nothing(n):
    elements = [b"a", b"b", b"c", b"d"]
    want: dict[int, int] = {}
    for e in elements:
        b, r = hll.observe(e)
        want[b] = max(want.get(b, 0), r)
    assert n("PFADD", "h", *elements) == 1
    assert n.registers(b"h") == want
    n.engine.commit()
    seq, written = n.engine.log_seq, n.engine.records_written
    for _ in range(3):
        assert n("PFADD", "h", *elements) == 0
        assert n("PFADD", "h") == 0
    n.engine.commit()
    assert (n.engine.log_seq, n.engine.records_written) == (seq, written)  # no record, no log entry


def test_pfadd_creates_the_key_even_without_elements_and_pfmerge_creates_its_destination(n):
    assert n("PFADD", "empty") == 1
    assert n("EXISTS", "empty") == 1 and n("TYPE", "empty") == b"string"
    assert n("PFCOUNT", "empty") == 0
    assert n("PFMERGE", "dest") == b"OK"
    assert n("EXISTS", "dest") == 1 and n("PFCOUNT", "dest") == 0
    n("PFADD", "src", "x", "y")
    n.engine.commit()
    assert n("PFMERGE", "dest", "src") == b"OK"
    assert n.registers(b"dest") == n.registers(b"src")
    n.engine.commit()
    seq = n.engine.log_seq
    assert n("PFMERGE", "dest", "src", "nokey") == b"OK"  # nothing rises: nothing written
    n.engine.commit()
    assert n.engine.log_seq == seq


def test_types(n):
    n("SET", "s", "a string")
    n("PFADD", "h", "a")
    n("HSET", "hash", "f", "v")
    not_hll = ("ERR", "WRONGTYPE Key is not a valid HyperLogLog string value.")
    wrong = ("ERR", "WRONGTYPE Operation against a key holding the wrong kind of value")
    assert n("PFADD", "s", "x") == not_hll
    assert n("PFCOUNT", "s") == not_hll
    assert n("PFCOUNT", "h", "s") == not_hll
    assert n("PFMERGE", "s", "h") == not_hll
    assert n("PFMERGE", "h", "s") == not_hll
    assert n("PFADD", "hash", "x") == wrong
    assert n("PFCOUNT", "h", "hash") == wrong
    assert n("GET", "h") == wrong and n("SETBIT", "h", 1, 1) == wrong and n("APPEND", "h", "x") == wrong
    assert n("TYPE", "h") == b"string"
    assert n("SET", "h", "replaced") == b"OK" and n("GET", "h") == b"replaced"
    # a hash emptied by HDEL is no key (its head stays, live): PFADD makes an HLL there
    assert n("HDEL", "hash", "f") == 1 and n("EXISTS", "hash") == 0
    assert n("PFADD", "hash", "x") == 1 and n("TYPE", "hash") == b"string"
    assert n("PFCOUNT", "hash") == 1 and n("HLEN", "hash") == wrong


# -- the register cache --------------------------------------------------------------------------

def test_the_cache_follows_local_writes_peer_records_del_expire_and_rename(n):
    n("PFADD", "h", *[b"e%d" % i for i in range(100)])
    assert n("PFCOUNT", "h") == 100
    cache = n.cache
    assert b"h" in cache.entries and cache.builds == 1
    assert n("PFCOUNT", "h") == 100 and cache.builds == 1  # cached
    n("PFADD", "h", *[b"f%d" % i for i in range(100)])
    assert n("PFCOUNT", "h") == khll.estimate(_dense(n.registers(b"h"))) in range(196, 205)
    assert cache.builds == 1  # kept current from the change feed, not rebuilt
    # a register merged from a peer (the replication apply path: log_entry=False)
    bucket = next(b for b in range(hll.M) if b not in n.registers(b"h"))
    peer = hll.new(5, n.ks.stamp(), 2)
    n.engine.apply([(K.encode_hll_key(b"h", bucket), peer)], log_entry=False)
    assert cache.entries[b"h"].ranks[bucket] == 5
    assert n("PFCOUNT", "h") == khll.estimate(_dense(n.registers(b"h")))
    # EXPIRE rewrites the head: the entry is dropped and rebuilt under the new head
    assert n("EXPIRE", "h", 1000) == 1
    assert b"h" not in cache.entries
    assert n("PFCOUNT", "h") == khll.estimate(_dense(n.registers(b"h"))) and cache.builds == 2
    assert n("RENAME", "h", "g") == b"OK"
    assert n("PFCOUNT", "h") == 0 and b"h" not in cache.entries
    assert n("PFCOUNT", "g") == khll.estimate(_dense(n.registers(b"g")))
    assert n("DEL", "g") == 1
    assert n("PFCOUNT", "g") == 0 and not cache.entries


def test_the_cache_never_serves_a_dead_or_expired_hll(n, monkeypatch):
    n("PFADD", "h", "a", "b")
    assert n("PFCOUNT", "h") == 2
    now = n.ks.now()
    n("PEXPIREAT", "h", now + 50)
    assert n("PFCOUNT", "h") == 2
    monkeypatch.setattr(n.ks, "now", lambda: now + 60)
    assert n("PFCOUNT", "h") == 0 and n("EXISTS", "h") == 0


def test_the_cache_is_bounded_and_unsubscribes_when_empty(n):
    cache = n.cache
    cache.capacity = 3
    for i in range(5):
        n("PFADD", "k%d" % i, "x")
        n("PFCOUNT", "k%d" % i)
    assert list(cache.entries) == [b"k2", b"k3", b"k4"]
    assert cache.on_changes in n.node.changes.subscribers
    for i in range(5):
        n("DEL", "k%d" % i)
    assert not cache.entries
    assert cache.on_changes not in n.node.changes.subscribers  # writes pay nothing again
    assert n.engine.on_change is None


def test_registers_with_a_ttl_are_read_but_never_cached(n):
    n("PFADD", "h", "a")
    b, _ = hll.observe(b"zzz")
    expiring = env.pack(hll.FLAGS, n.ks.stamp(), 2, n.ks.now() + 100_000, hll.to_bytes(3))
    n.engine.apply([(K.encode_hll_key(b"h", b), expiring)], log_entry=False)
    assert n("PFCOUNT", "h") == hll.count(n.registers(b"h")) == 2
    assert b"h" not in n.cache.entries


# -- DEL (the data model's caveat) -------------------------------------------------------------------

def test_after_del_the_same_elements_count_again_at_once(n):
    """PFADD after DEL counts what it added (the reproduction: PFADD h 1 2 3, DEL h,
    PFADD h 1 2 3, PFCOUNT h answered 0): the new registers are of the new head's
    generation and win over the dead ones whatever their ranks (keyspace/hll.py)."""
    n("PFADD", "h", "1", "2", "3")
    assert n("DEL", "h") == 1
    assert n("PFADD", "h", "1", "2", "3") == 1
    assert n("PFCOUNT", "h") == 3
    elements = [b"e%d" % i for i in range(50)]
    n("PFADD", "h2", *elements)
    assert n("DEL", "h2") == 1
    assert n("PFCOUNT", "h2") == 0
    assert n("PFADD", "h2", *elements) == 1  # created again
    assert n("PFCOUNT", "h2") == 50
    assert n("PFCOUNT", "h", "h2") == 53
    assert n("PFMERGE", "m", "h", "h2") == b"OK" and n("PFCOUNT", "m") == 53
    assert n("DEL", "m") == 1
    assert n("PFMERGE", "m", "h") == b"OK" and n("PFCOUNT", "m") == 3  # a merge after DEL counts too
    # and the cache follows: one more element counts at once
    assert n("PFADD", "h2", "brand-new") == 1 and n("PFCOUNT", "h2") == 51


def _dense(regs: dict[int, int]) -> bytearray:
    out = bytearray(hll.M)
    for b, r in regs.items():
        out[b] = r
    return out


def test_the_hot_paths_copies_equal_core_s_functions():
    cache = khll.RegisterCache()
    for key in (b"k", b"{t}x", b"\xff" * 200):
        pid, ik, hk, prefix = cache.locate(key)
        assert (pid, ik) == K.locate_string(key) and hk == K.encode_head_key(key)
        for bucket in (0, 1, 255, 256, hll.M - 1):
            assert prefix + khll._BUCKETS[bucket] == K.encode_hll_key(key, bucket)
    for rank in (1, 7, hll.MAX_RANK):
        assert khll.register_record(rank, 12345, 3) == hll.new(rank, 12345, 3)
    h = head.new(head.CollectionType.HLL, 99, 1)
    assert h[khll._CTYPE_AT] == head.ctype_of(h) == khll.HLL
