"""HyperLogLog replicas through the keyspace: three in-process nodes (real engines on
RocksDB, their change feeds and register caches) run random PFADD / PFMERGE / DEL / RENAME
/ PFCOUNT, and ship every record a local command changed to the others over a network that
reorders, duplicates and delays. Whatever the order:

- the replicas converge byte for byte (every stored record equal);
- PFCOUNT answers the same on every replica, and its cached estimate always equals the
  estimate recomputed from the stored registers (the cache follows records merged from
  peers, not only local writes);
- an HLL only ever PFADDed (never deleted, renamed over or merged into) holds exactly the
  registers of one PFADD of every element added on any node: PFADD on different nodes is
  a union.

(core's register lattice and its laws: tests/merge_laws/test_hll.py and test_replicas.py.)
"""

from __future__ import annotations

import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from marekvs.config import Config
from marekvs.core import hll
from marekvs.keyspace import hll as khll
from marekvs.node import Node

REPLICA = st.integers(0, 2)
KEYS = [b"a", b"b", b"{t}c"]
CLEAN = b"{t}clean"  # only ever PFADDed
ELEMENTS = st.lists(st.sampled_from([b"e%d" % i for i in range(60)]), max_size=8)


class HllReplicas(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.dir = tempfile.mkdtemp(prefix="hll-replicas-")
        self.nodes = [Node(Config(data_dir=f"{self.dir}/n{i}", node_id=i + 1, durability="no")) for i in range(3)]
        self.ctx = [n.new_context() for n in self.nodes]
        self.inbox: list[list[list[tuple[bytes, bytes]]]] = [[], [], []]
        self.clean: set[bytes] = set()

    def teardown(self):
        try:
            self.converge()
        finally:
            for n in self.nodes:
                n.close()
            shutil.rmtree(self.dir, ignore_errors=True)

    # -- the network ------------------------------------------------------------------------
    def run(self, i: int, *args: bytes):
        node = self.nodes[i]
        node.engine.commit()
        r = node.dispatch(self.ctx[i], list(args))
        keys = list(node.engine.pending_log)
        node.engine.commit()
        if keys:
            batch = [(k, node.engine.get(k)) for k in keys]
            for j in range(3):
                if j != i:
                    self.inbox[j].append(batch)
        return r

    def deliver(self, j: int, k: int) -> None:
        batch = self.inbox[j][k]
        node = self.nodes[j]
        node.hlc.update(max(int.from_bytes(v[1:9], "big") for _, v in batch))
        node.engine.apply(batch, log_entry=False)
        node.engine.commit()

    @rule(j=REPLICA, pick=st.integers(0, 1000), keep=st.booleans())
    def receive(self, j, pick, keep):
        if self.inbox[j]:
            k = pick % len(self.inbox[j])
            self.deliver(j, k)
            if not keep:  # else: a duplicate comes later
                self.inbox[j].pop(k)

    def converge(self) -> None:
        for j in range(3):
            while self.inbox[j]:
                self.deliver(j, 0)
                self.inbox[j].pop(0)
        stores = [dict(n.engine.scan(b"")) for n in self.nodes]
        assert stores[0] == stores[1] == stores[2]
        for key in KEYS + [CLEAN]:
            counts = {self.run(i, b"PFCOUNT", key) for i in range(3)}
            assert len(counts) == 1, (key, counts)
        want = hll.pfadd({}, self.clean)
        for n in self.nodes:
            _, h = khll.lookup(n.ks, CLEAN, n.ks.now())
            assert khll.register_map(n.ks, CLEAN, h, n.ks.now()) == want

    # -- local commands -----------------------------------------------------------------------
    @rule(i=REPLICA, key=st.sampled_from(KEYS), elements=ELEMENTS)
    def pfadd(self, i, key, elements):
        assert self.run(i, b"PFADD", key, *elements) in (0, 1)

    @rule(i=REPLICA, elements=ELEMENTS)
    def pfadd_clean(self, i, elements):
        self.run(i, b"PFADD", CLEAN, *elements)
        self.clean.update(elements)

    @rule(i=REPLICA, dest=st.sampled_from(KEYS), srcs=st.lists(st.sampled_from(KEYS + [CLEAN]), max_size=3))
    def pfmerge(self, i, dest, srcs):
        assert self.run(i, b"PFMERGE", dest, *srcs) == b"OK"

    @rule(i=REPLICA, key=st.sampled_from(KEYS))
    def delete(self, i, key):
        self.run(i, b"DEL", key)

    @rule(i=REPLICA, src=st.sampled_from(KEYS), dst=st.sampled_from(KEYS))
    def rename(self, i, src, dst):
        self.run(i, b"RENAME", src, dst)

    @rule(i=REPLICA, keys=st.lists(st.sampled_from(KEYS + [CLEAN]), min_size=1, max_size=3))
    def pfcount(self, i, keys):
        self.run(i, b"PFCOUNT", *keys)

    @invariant()
    def cached_estimates_equal_the_stored_registers(self):
        for n in self.nodes:
            cache = khll.cache_for(n.ks)
            now = n.ks.now()
            for key, entry in list(cache.entries.items()):
                _, h = n.ks.collection(key, khll.HLL, now)
                if h is None or cache.valid(key, h) is None:
                    continue
                regs = khll.register_map(n.ks, key, h, now)
                assert {b: r for b, r in enumerate(entry.ranks) if r} == regs, key
                if entry.count is not None:
                    assert entry.count == hll.count(regs)


HllReplicas.TestCase.settings = settings(max_examples=15, stateful_step_count=40, deadline=None, derandomize=True)
test_hll_replicas_converge_and_the_cache_follows_merged_records = HllReplicas.TestCase
