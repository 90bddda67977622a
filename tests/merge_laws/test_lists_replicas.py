"""Three in-process replicas running the real list commands, over a lossy network.

Each replica is a real ``marekvs.node.Node`` (RocksDB, keyspace, the list hints on its
change feed). A step runs a random list command on a random replica; what it wrote is
shipped as replication ships it (the committed log entries, with the *current* record
of every key they name) onto a per-link queue that reorders, duplicates and delays; a
delivery merges a shipment through the replication apply path (``Engine.apply`` without
a log entry, the clock taking the remote stamps). At the end everything still in flight
is delivered, and:

- every replica holds the same list records, byte for byte, and answers LRANGE alike;
- every hint equals one built from scratch (the feed kept it right under merges);
- nothing appears that no command put there: every value is one some push wrote;
- a value pushed once is held at most once, except through the documented at-least-once
  duplicate (two replicas moved the same element, LMOVE on both), which this machine
  records as an event when it can happen and otherwise forbids.

The replicas live for the whole test (RocksDB opens cost); each example works on its own
keys.
"""

from __future__ import annotations

import itertools
import os
import random

import pytest
from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from marekvs.config import Config
from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.keyspace import lists as kl
from marekvs.node import Node

N = 3
_NODES: list[Node] = []
_EXAMPLE = itertools.count()
_VALUE = itertools.count()


@pytest.fixture(scope="module", autouse=True)
def replicas(tmp_path_factory):
    base = tmp_path_factory.mktemp("replicas")
    _NODES[:] = [Node(Config(data_dir=str(base / f"n{i}"), node_id=i, durability="no")) for i in range(1, N + 1)]
    yield _NODES
    for n in _NODES:
        n.close()
    _NODES.clear()


def lists_of(node: Node) -> kl.Lists:
    return kl.lists_of(node.ks)


class ListReplicas(RuleBasedStateMachine):
    @initialize()
    def setup(self):
        ex = next(_EXAMPLE)
        self.keys = [b"x%d:a" % ex, b"x%d:b" % ex]
        self.nodes = _NODES
        self.ctx = [n.new_context() for n in self.nodes]
        self.shipped = [n.engine.log_seq for n in self.nodes]
        for n in self.nodes:
            n.engine.commit()
        self.shipped = [n.engine.log_seq for n in self.nodes]
        self.queues: dict[tuple[int, int], list[list[tuple[bytes, bytes]]]] = {
            (a, b): [] for a in range(N) for b in range(N) if a != b}
        self.pushed: set[bytes] = set()
        self.moved_on_two = False
        self.rng = random.Random(0)

    # -- the network -----------------------------------------------------------------------
    def ship(self, i: int) -> None:
        """Queue replica ``i``'s new log entries for every peer."""
        eng = self.nodes[i].engine
        eng.commit()
        for _, recs in eng.read_log(self.shipped[i], 1 << 30):
            mine = [(k, v) for k, v in recs if self._ours(k)]
            if mine:
                for j in range(N):
                    if j != i:
                        self.queues[(i, j)].append(mine)
        self.shipped[i] = eng.log_seq

    def _ours(self, ikey: bytes) -> bool:
        try:
            return K.user_key_of(ikey) in self.keys
        except ValueError:
            return False

    def deliver(self, a: int, b: int, k: int) -> None:
        q = self.queues[(a, b)]
        if not q:
            return
        recs = q.pop(k % len(q))
        node = self.nodes[b]
        node.hlc.update(max(env.hlc_of(v) for _, v in recs))
        node.engine.apply(recs, log_entry=False)
        node.engine.commit()

    # -- rules ------------------------------------------------------------------------------
    def run(self, i: int, *args) -> object:
        out = self.nodes[i].dispatch(self.ctx[i], [a if isinstance(a, bytes) else str(a).encode() for a in args])
        self.ship(i)
        return out

    @rule(i=st.integers(0, N - 1), k=st.integers(0, 1), left=st.booleans(), n=st.integers(1, 3))
    def push(self, i, k, left, n):
        vals = [b"v%d" % next(_VALUE) for _ in range(n)]
        self.pushed.update(vals)
        self.run(i, "LPUSH" if left else "RPUSH", self.keys[k], *vals)

    @rule(i=st.integers(0, N - 1), k=st.integers(0, 1), left=st.booleans(), n=st.integers(1, 2))
    def pop(self, i, k, left, n):
        self.run(i, "LPOP" if left else "RPOP", self.keys[k], n)

    @rule(i=st.integers(0, N - 1), k=st.integers(0, 1), index=st.integers(-3, 3))
    def lset(self, i, k, index):
        val = b"v%d" % next(_VALUE)
        self.pushed.add(val)
        self.run(i, "LSET", self.keys[k], index, val)

    @rule(i=st.integers(0, N - 1), k=st.integers(0, 1), rank=st.integers(0, 3), before=st.booleans())
    def linsert(self, i, k, rank, before):
        cur = self.nodes[i].dispatch(self.ctx[i], [b"LRANGE", self.keys[k], b"0", b"-1"])
        if cur:
            val = b"v%d" % next(_VALUE)
            self.pushed.add(val)
            self.run(i, "LINSERT", self.keys[k], "BEFORE" if before else "AFTER", cur[rank % len(cur)], val)

    @rule(i=st.integers(0, N - 1), k=st.integers(0, 1), rank=st.integers(0, 3), count=st.integers(-1, 1))
    def lrem(self, i, k, rank, count):
        cur = self.nodes[i].dispatch(self.ctx[i], [b"LRANGE", self.keys[k], b"0", b"-1"])
        if cur:
            self.run(i, "LREM", self.keys[k], count, cur[rank % len(cur)])

    @rule(i=st.integers(0, N - 1), k=st.integers(0, 1), start=st.integers(-3, 2), stop=st.integers(-3, 3))
    def ltrim(self, i, k, start, stop):
        self.run(i, "LTRIM", self.keys[k], start, stop)

    @rule(i=st.integers(0, N - 1), k=st.integers(0, 1), fl=st.booleans(), tl=st.booleans())
    def lmove(self, i, k, fl, tl):
        if any(q for q in self.queues.values()):
            self.moved_on_two = True  # another replica may move the same element (at-least-once)
        self.run(i, "LMOVE", self.keys[k], self.keys[1 - k], "LEFT" if fl else "RIGHT", "LEFT" if tl else "RIGHT")

    @rule(i=st.integers(0, N - 1), k=st.integers(0, 1))
    def delete(self, i, k):
        self.run(i, "DEL", self.keys[k])

    @rule(a=st.integers(0, N - 1), b=st.integers(0, N - 1), k=st.integers(0, 50), dup=st.booleans())
    def net(self, a, b, k, dup):
        if a == b:
            return
        q = self.queues[(a, b)]
        if dup and q:
            q.append(q[k % len(q)])  # the link delivers a shipment twice
        self.deliver(a, b, k)

    @invariant()
    def hints_are_exact(self):
        if not hasattr(self, "nodes"):
            return
        for node in self.nodes:
            check_hints(node, self.keys)

    def teardown(self):
        if not hasattr(self, "nodes"):
            return
        while any(self.queues.values()):
            for (a, b), q in self.queues.items():
                while q:
                    self.deliver(a, b, 0)
        records = [snapshot(n, self.keys) for n in self.nodes]
        assert records[0] == records[1] == records[2], "replicas hold different list records"
        ranges = [[n.dispatch(c, [b"LRANGE", k, b"0", b"-1"]) for k in self.keys]
                  for n, c in zip(self.nodes, self.ctx)]
        assert ranges[0] == ranges[1] == ranges[2]
        for node in self.nodes:
            check_hints(node, self.keys)
        held = [v for lst in ranges[0] for v in lst]
        assert set(held) <= self.pushed, "a value no command wrote"
        if len(held) != len(set(held)):
            assert self.moved_on_two, "a duplicate without a concurrent LMOVE"
            event("at-least-once duplicate through concurrent LMOVEs")
        event(f"elements held at the end: {min(len(held), 5)}{'+' if len(held) >= 5 else ''}")


def snapshot(node: Node, keys: list[bytes]) -> list[tuple[bytes, bytes]]:
    """The list records (head and elements) of ``keys`` stored on ``node``."""
    node.engine.commit()
    out = []
    for key in keys:
        hk = K.encode_head_key(key)
        hd = node.engine.get(hk)
        if hd is not None:
            out.append((hk, hd))
        prefix = K.collection_prefix(K.TAG_LIST, key)
        out.extend(node.engine.scan(prefix, prefix + b"\xff" * 9))
    return out


def check_hints(node: Node, keys: list[bytes]) -> None:
    lx = lists_of(node)
    now = node.ks.now()
    for key in keys:
        if key not in lx.hints:
            continue
        _, _, stored = kl.lookup(lx, key, now)
        used = lx.hint(key, stored, now)
        fresh = kl.Lists(node.ks, None).hint(key, stored, now)
        assert (used.count, used.clock) == (fresh.count, fresh.clock), key
        if fresh.count:
            assert (used.first, used.last) == (fresh.first, fresh.last), key


ListReplicas.TestCase.settings = settings(max_examples=int(os.environ.get("LIST_REPLICA_EXAMPLES", "40")),
                                          stateful_step_count=40, deadline=None)
test_list_replicas_converge = ListReplicas.TestCase
