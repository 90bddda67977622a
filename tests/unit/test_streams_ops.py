"""In-process tests of the stream family (keyspace/streams.py, commands/streams.py) on a real
node: what each command writes (one apply, valid records of the stream kinds), and that
the in-memory state the commands rely on stays equal to the records and keeps the costs
bounded: a capped stream never rescans the tombstones of its trimmed entries, a group's
PEL is read without its acknowledged records, and an entry or pending record merged from a
peer is seen.
"""

from __future__ import annotations

import pytest

from marekvs.commands.reply import NULL_ARRAY
from marekvs.config import Config
from marekvs.core import keys as K
from marekvs.core import registry
from marekvs.core import stream as S
from marekvs.keyspace import streams as xs
from marekvs.node import Node


class Client:
    def __init__(self, path):
        self.node = Node(Config(data_dir=str(path), node_id=1, durability="no"))
        self.ctx = self.node.new_context()
        self.engine = self.node.engine
        self.read = 0  # records the engine's scans returned
        scan = self.engine.scan

        def counted(*a, **kw):
            for item in scan(*a, **kw):
                self.read += 1
                yield item

        self.engine.scan = counted

    def __call__(self, *args):
        return self.node.dispatch(self.ctx, [a if isinstance(a, bytes) else str(a).encode() for a in args])

    def close(self):
        self.node.close()


@pytest.fixture
def c(tmp_path):
    cl = Client(tmp_path / "n")
    yield cl
    cl.close()


def test_each_command_is_one_apply_of_valid_stream_records(c):
    applied = []
    apply = c.node.ks.apply

    def spy(records, *a, **kw):
        applied.append(list(records))
        return apply(records, *a, **kw)

    c.node.ks.apply = spy
    for cmd in (("XADD", "s", "MAXLEN", "2", "*", "a", "b"), ("XGROUP", "CREATE", "s", "g", "0"),
                ("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">"), ("XCLAIM", "s", "g", "c2", "0", "0-1"),
                ("XSETID", "s", "9999999999999-0"), ("XGROUP", "DELCONSUMER", "s", "g", "c1")):
        before = len(applied)
        c(*cmd)
        assert len(applied) - before <= 1, cmd
    for records in applied:
        for ik, rec in records:
            kind = registry.check_record(ik, rec)
            assert kind.tag in (K.TAG_HEAD, K.TAG_STREAM, K.TAG_STREAM_COUNTER, K.TAG_GROUP, K.TAG_CONSUMER,
                                K.TAG_PENDING)


def test_a_capped_stream_never_rescans_its_trimmed_entries(c):
    for _ in range(600):
        c("XADD", "capped", "MAXLEN", "10", "*", "f", "v")
    c.engine.commit()
    c.read = 0
    for _ in range(50):
        c("XADD", "capped", "MAXLEN", "10", "*", "f", "v")
        got = c("XRANGE", "capped", "-", "+", "COUNT", "3")
        assert len(got) == 3
    assert c("XLEN", "capped") == 10
    # each XADD reads the live entries it may trim, each XRANGE three: not the 590 dead ones
    assert c.read < 50 * (12 + 4), c.read


def test_a_groups_pel_is_read_without_its_acknowledged_records(c):
    ids = [c("XADD", "s", "*", "n", str(i)) for i in range(300)]
    c("XGROUP", "CREATE", "s", "g", "0")
    c("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", ">")
    assert c("XPENDING", "s", "g")[0] == 300  # the PEL in memory: built by one scan
    assert c("XACK", "s", "g", *ids[:-2]) == 298  # and kept from the change feed
    c.engine.commit()
    c.read = 0
    assert c("XPENDING", "s", "g") == [2, ids[-2], ids[-1], [[b"alice", b"2"]]]
    assert [e[0] for e in c("XPENDING", "s", "g", "-", "+", "10")] == ids[-2:]
    assert [e[0] for e in c("XAUTOCLAIM", "s", "g", "bob", "0", "0")[1]] == ids[-2:]
    assert c("XREADGROUP", "GROUP", "g", "alice", "STREAMS", "s", "0") == [[b"s", []]]
    assert c.read < 10, c.read  # not the 298 acknowledged records


def test_records_merged_from_a_peer_update_the_in_memory_state(c):
    ks = c.node.ks
    for i in range(5):
        c("XADD", "s", "*", "n", str(i))
    c("XTRIM", "s", "MAXLEN", "1")
    assert len(c("XRANGE", "s", "-", "+")) == 1  # the scans now start at the surviving entry
    c("XGROUP", "CREATE", "s", "g", "0")
    assert len(c("XREADGROUP", "GROUP", "g", "x", "STREAMS", "s", ">")[0][1]) == 1  # read past it all
    # a peer's entry, with an id below every live one (made earlier, elsewhere, arriving now)
    peer = 7
    low = (1, S.make_seq(peer, 0))
    dc = xs.lookup(ks, b"s", ks.now()).dc
    c.engine.apply([(K.encode_stream_key(b"s", *low), S.new([(b"from", b"peer")], ks.hlc.now(), peer)),
                    (K.encode_stream_counter_key(b"s", peer),
                     S.counters_record(S.Counters(dc, S.NO_EPOCH, 1, low), ks.hlc.now(), peer))], log_entry=False)
    got = c("XRANGE", "s", "-", "+")
    assert got[0] == [b"1-%d" % low[1], [b"from", b"peer"]] and len(got) == 2
    assert c("XLEN", "s") == 2
    # the group read past its id, but not past its origin's entries: it is delivered
    got = c("XREADGROUP", "GROUP", "g", "x", "STREAMS", "s", ">")
    assert got == [[b"s", [[b"1-%d" % low[1], [b"from", b"peer"]]]]]
    assert c("XREADGROUP", "GROUP", "g", "x", "STREAMS", "s", ">") is NULL_ARRAY
    # a peer's pending record (its consumer's delivery) shows in XPENDING at once
    pk = K.encode_pending_key(b"s", b"g", 2, 0)
    g = xs.group(ks, xs.lookup(ks, b"s", ks.now()), b"g")
    from marekvs.core import streamgroup as G
    c.engine.apply([(pk, G.deliver_pending(None, g.epoch, ks.hlc.now(), peer, b"remote", ks.now()))],
                   log_entry=False)
    assert c("XPENDING", "s", "g")[0] == 3 and [b"remote", b"1"] in c("XPENDING", "s", "g")[3]
