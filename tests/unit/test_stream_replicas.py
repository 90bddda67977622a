"""Consumer groups on three in-process replicas with a hostile network: what a user relies on.

Three real nodes (engine, keyspace, command table) run real commands (``node.dispatch``).
Every ``apply`` of a command is one message to each peer, applied there through the same
apply path as replication (``engine.apply(..., log_entry=False)``). The network is what
replication guarantees and no more: each link (origin, peer) delivers in order, as a log
shipped from the peer's acknowledgement does, but links run at any relative speed, so
messages from different origins arrive in any order, and any message already delivered
may arrive again (a resend after a reconnect); at the end every link drains, so the three
stores must converge. A hypothesis state machine
mixes XADD, XREADGROUP ``>``, XACK, XCLAIM and XAUTOCLAIM on any node with message
deliveries, and checks, against a model kept from the replies alone:

- an entry acknowledged anywhere is never delivered with ``>`` by a node that already
  holds the acknowledgement;
- after convergence every replica holds the same records, no acknowledged entry is
  pending, every delivered or claimed entry that was never acknowledged is pending (no
  loss), the group's last-delivered id is the greatest id any node delivered, and a read
  with ``>`` then delivers exactly the entries never delivered (an entry added on one
  node and read past on another before it arrived is not skipped).
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from marekvs.commands.reply import Err
from marekvs.config import Config
from marekvs.core import keys as K
from marekvs.core import streamgroup as G
from marekvs.keyspace import streams as xs
from marekvs.storage.engine import prefix_end
from marekvs.node import Node

KEY, GROUP = b"s", b"g"
CONSUMERS = st.sampled_from([b"c1", b"c2", b"c3"])
NODE = st.integers(0, 2)


def _id(b: bytes) -> tuple[int, int]:
    ms, seq = b.split(b"-")
    return int(ms), int(seq)


class Replica:
    def __init__(self, i: int, root: str, outbox: list):
        self.i = i
        self.node = Node(Config(data_dir=f"{root}/n{i}", node_id=i + 1, durability="no",
                                clock_offset_ms=3 * i))
        self.ctx = self.node.new_context()
        engine = self.node.engine

        def apply(records, log_entry=True):
            changed = engine.apply(records, log_entry)
            if changed:
                outbox.append((self.i, list(changed)))
            return changed

        self.node.ks.apply = apply

    def call(self, *args: bytes):
        return self.node.dispatch(self.ctx, list(args))

    def receive(self, records) -> None:
        self.node.engine.apply(list(records), log_entry=False)

    def records(self) -> dict[bytes, bytes]:
        self.node.engine.commit()
        return dict(self.node.engine.scan(b""))

    def pending_record(self, sid: tuple[int, int]) -> bytes | None:
        return self.node.ks.get(K.encode_pending_key(KEY, GROUP, *sid))

    def close(self) -> None:
        self.node.close()


class GroupReplicas(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.root = tempfile.mkdtemp(prefix="mvs-stream-replicas-")
        self.outbox: list[tuple[int, list]] = []
        # per link (from, to): the messages in flight, in order, and those delivered
        self.links: dict[tuple[int, int], list[list]] = {(a, b): [] for a in range(3) for b in range(3) if a != b}
        self.sent: dict[tuple[int, int], list[list]] = {link: [] for link in self.links}
        self.nodes = [Replica(i, self.root, self.outbox) for i in range(3)]
        self.delivered: dict[tuple[int, int], set[bytes]] = {}  # id -> consumers that got it
        self.acked: set[tuple[int, int]] = set()
        self.added: list[tuple[int, int]] = []
        self.rnd = random.Random(0)

    def _post(self) -> None:
        for origin, records in self.outbox:
            for to in range(3):
                if to != origin:
                    self.links[(origin, to)].append(records)
        self.outbox.clear()

    def _call(self, n: int, *args: bytes):
        r = self.nodes[n].call(*args)
        self._post()
        assert not isinstance(r, Err), (args, r)
        return r

    @initialize()
    def create_group(self):
        self._call(0, b"XGROUP", b"CREATE", KEY, GROUP, b"0", b"MKSTREAM")
        self.flush()

    # -- commands ----------------------------------------------------------------------
    @rule(n=NODE)
    def xadd(self, n):
        self.added.append(_id(self._call(n, b"XADD", KEY, b"*", b"f", b"v")))

    @rule(n=NODE, consumer=CONSUMERS, count=st.integers(1, 3))
    def read(self, n, consumer, count):
        before = {sid: self.nodes[n].pending_record(sid) for sid in self.added}
        r = self._call(n, b"XREADGROUP", b"GROUP", GROUP, consumer, b"COUNT", b"%d" % count,
                       b"STREAMS", KEY, b">")
        if r is None or type(r).__name__ == "NullArray":
            return
        for raw_id, _ in r[0][1]:
            sid = _id(raw_id)
            rec = before.get(sid)
            assert rec is None or not (rec[0] & 1), f"node {n} delivered {sid} after holding its ack"
            self.delivered.setdefault(sid, set()).add(consumer)

    @precondition(lambda self: self.delivered)
    @rule(n=NODE, data=st.data())
    def ack(self, n, data):
        sid = data.draw(st.sampled_from(sorted(self.delivered)))
        if self._call(n, b"XACK", KEY, GROUP, b"%d-%d" % sid) == 1:
            self.acked.add(sid)

    @precondition(lambda self: self.delivered)
    @rule(n=NODE, consumer=CONSUMERS, data=st.data())
    def claim(self, n, consumer, data):
        sid = data.draw(st.sampled_from(sorted(self.delivered)))
        for raw_id, _ in self._call(n, b"XCLAIM", KEY, GROUP, consumer, b"0", b"%d-%d" % sid):
            self.delivered[_id(raw_id)].add(consumer)

    @rule(n=NODE, consumer=CONSUMERS)
    def autoclaim(self, n, consumer):
        _, claimed, deleted = self._call(n, b"XAUTOCLAIM", KEY, GROUP, consumer, b"0", b"0", b"COUNT", b"2")
        assert deleted == []  # nothing is deleted here: a missing entry just has not arrived
        for raw_id, _ in claimed:
            self.delivered[_id(raw_id)].add(consumer)

    # -- network -------------------------------------------------------------------------
    def _busy(self) -> list[tuple[int, int]]:
        return [link for link, q in self.links.items() if q]

    @precondition(lambda self: self._busy())
    @rule(data=st.data())
    def network(self, data):
        link = data.draw(st.sampled_from(self._busy()))
        records = self.links[link].pop(0)
        self.sent[link].append(records)
        self.nodes[link[1]].receive(records)

    @precondition(lambda self: any(self.sent.values()))
    @rule(data=st.data())
    def resend(self, data):
        link = data.draw(st.sampled_from([link for link, done in self.sent.items() if done]))
        self.nodes[link[1]].receive(data.draw(st.sampled_from(self.sent[link])))

    def flush(self) -> None:
        """Drain every link, choosing the next link at random."""
        while busy := self._busy():
            link = busy[self.rnd.randrange(len(busy))]
            records = self.links[link].pop(0)
            self.sent[link].append(records)
            self.nodes[link[1]].receive(records)

    @invariant()
    def replies_stay_sane(self):
        assert self.acked <= set(self.delivered)

    @invariant()
    def the_in_memory_pel_is_the_records_pel(self):
        """Each node's PEL index (kept from the change feed, replicated records included)
        holds exactly the live pending records on its disk."""
        for r in self.nodes:
            ks = r.node.ks
            st = xs.lookup(ks, KEY, ks.now())
            g = None if st is None else xs.group(ks, st, GROUP)
            if g is None:
                continue
            got = dict(xs.cache_of(ks).pel(ks, g).ids)
            want = {}
            prefix = K.group_prefix(K.TAG_PENDING, KEY, GROUP)
            for ik, rec in ks.engine.scan(prefix, prefix_end(prefix)):
                if G.pending_live(rec, g.destroy_clock):
                    want[K.decode_pending_key(ik)[2:]] = G.pending_of(rec).consumer
            assert got == want

    def teardown(self):
        try:
            self.flush()
            stores = [r.records() for r in self.nodes]
            assert stores[0] == stores[1] == stores[2], "replicas diverged"
            pending = {}
            for k, rec in stores[0].items():
                if k[2:3] == K.TAG_PENDING and G.pending_live(rec, 0):
                    _, _, ms, seq = K.decode_pending_key(k)
                    pending[(ms, seq)] = G.pending_of(rec).consumer
            assert not set(pending) & self.acked, "an acknowledged entry is pending again"
            lost = set(self.delivered) - self.acked - set(pending)
            assert not lost, f"delivered entries neither acknowledged nor pending: {lost}"
            for sid, consumer in pending.items():
                assert consumer in self.delivered[sid]
            info = self.nodes[0].call(b"XINFO", b"GROUPS", KEY)
            last = dict(zip(info[0][::2], info[0][1::2]))[b"last-delivered-id"]
            assert _id(last) == max(self.delivered, default=(0, 0))
            for r in self.nodes[1:]:
                assert r.call(b"XPENDING", KEY, GROUP) == self.nodes[0].call(b"XPENDING", KEY, GROUP)
            # no entry is skipped by the group: whatever was never delivered (added on one
            # node while another read past it) is delivered now, and then nothing is left
            rest = self.nodes[1].call(b"XREADGROUP", b"GROUP", GROUP, b"late", b"STREAMS", KEY, b">")
            late = {_id(raw) for raw, _ in rest[0][1]} if isinstance(rest, list) else set()
            assert not late & set(self.delivered), "an entry delivered twice after convergence"
            assert set(self.added) == set(self.delivered) | late, "entries the group never delivers"
        finally:
            for r in self.nodes:
                r.close()
            shutil.rmtree(self.root, ignore_errors=True)


# ~25 s on a loaded 2-core machine; HYPOTHESIS_PROFILE=deep (as `make laws`) runs 300
_DEEP = os.environ.get("HYPOTHESIS_PROFILE") == "deep"
GroupReplicas.TestCase.settings = settings(max_examples=300 if _DEEP else 50, stateful_step_count=40,
                                           deadline=None)
test_consumer_groups_converge_without_loss_or_redelivery_after_ack = GroupReplicas.TestCase
