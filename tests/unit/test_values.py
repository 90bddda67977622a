"""In-process tests of whole values (keyspace/values.py) through a real node's dispatch:
RESTORE over a key of every type with a value of every type, one apply per command,
records the registry accepts, the per-type states (list hints, zset mirrors, member
counts) in step with the records, and MEMORY USAGE against an independent sum."""

from __future__ import annotations

import pytest

from marekvs.config import Config
from marekvs.core import head, rdb, registry
from marekvs.core import keys as K
from marekvs.core.envelope import is_live
from marekvs.node import Node
from marekvs.storage.engine import prefix_end

VALUES = {
    "string": rdb.String(b"hello"),
    "list": rdb.List([b"c", b"a", b"b", b"a"]),
    "set": rdb.Set([b"x", b"y", b"1"]),
    "zset": rdb.Zset([(b"m1", 1.5), (b"m2", -2.0), (b"m3", 1.5)]),
    "hash": rdb.Hash([(b"f1", b"v1"), (b"f2", b"")]),
    "hll": rdb.String(rdb.hll_dense(bytes((i * 7) % 52 if i % 3 == 0 else 0 for i in range(rdb.HLL_REGISTERS)))),
    "stream": rdb.Stream([((5, 1), [b"f", b"1"]), ((5, 2), [b"f", b"2", b"g", b"x"]), ((7, 0), [b"f", b"3"])],
                         (9, 0), (5, 1), (4, 0), 11,
                         [rdb.StreamGroup(b"g", (5, 2), 9, [((5, 1), 1000, 3), ((5, 2), 2000, 1)],
                                          [rdb.StreamConsumer(b"alice", 1500, [(5, 2)]),
                                           rdb.StreamConsumer(b"bob", 900, [(5, 1)]),
                                           rdb.StreamConsumer(b"idle", 100, [])]),
                          rdb.StreamGroup(b"h", (0, 0), -1, [], [])]),
}
BUILD = {  # commands that give "k" an old value of each type
    "none": [],
    "string": [[b"SET", b"k", b"old"]],
    "counter": [[b"INCRBY", b"k", b"7"]],
    "list": [[b"RPUSH", b"k", b"o1", b"o2", b"o3", b"o4", b"o5"]],
    "set": [[b"SADD", b"k", b"x", b"old"]],
    "zset": [[b"ZADD", b"k", b"9", b"m1", b"3", b"old"]],
    "hash": [[b"HSET", b"k", b"f1", b"old", b"g", b"old"]],
    "hll": [[b"PFADD", b"k", b"a", b"b", b"c"]],
    "stream": [[b"XADD", b"k", b"5-1", b"old", b"1"], [b"XADD", b"k", b"6-0", b"old", b"2"],
               [b"XGROUP", b"CREATE", b"k", b"g", b"0"], [b"XGROUP", b"CREATE", b"k", b"old", b"0"],
               [b"XREADGROUP", b"GROUP", b"g", b"carol", b"STREAMS", b"k", b">"]],
}


@pytest.fixture
def node(tmp_path):
    n = Node(Config(data_dir=str(tmp_path / "d"), node_id=1, durability="no"))
    yield n
    n.close()


def run(node, *args):
    ctx = node.new_context()
    try:
        return node.dispatch(ctx, [a if isinstance(a, bytes) else str(a).encode() for a in args])
    finally:
        node.drop_context(ctx)


def read(node, key: bytes):
    t = run(node, b"TYPE", key)
    if t == b"string":
        return t, run(node, b"GET", key)
    if t == b"list":
        return t, run(node, b"LRANGE", key, 0, -1), run(node, b"LLEN", key)
    if t == b"set":
        return t, sorted(run(node, b"SMEMBERS", key)), run(node, b"SCARD", key)
    if t == b"zset":
        return t, run(node, b"ZRANGE", key, 0, -1, b"WITHSCORES"), run(node, b"ZCARD", key)
    if t == b"hash":
        return t, sorted(run(node, b"HGETALL", key)), run(node, b"HLEN", key)
    if t == b"stream":
        groups = [(g[1], g[7], g[9], g[11]) for g in run(node, b"XINFO", b"GROUPS", key)]  # name, id, read, lag
        pel = [[p[0], p[1], p[3]] for p in run(node, b"XPENDING", key, b"g", b"-", b"+", 10)]
        consumers = [(c[1], c[3]) for c in run(node, b"XINFO", b"CONSUMERS", key, b"g")]  # name, pending
        return t, run(node, b"XRANGE", key, b"-", b"+"), run(node, b"XLEN", key), groups, pel, consumers
    return (t,)


def expected(value: rdb.Value):
    if isinstance(value, rdb.String) and rdb.hll_ranks(value.value) is not None:
        return b"string", value.value  # (read back by DUMP: an HLL has no GET)
    if isinstance(value, rdb.String):
        return b"string", value.value
    if isinstance(value, rdb.List):
        return b"list", list(value.items), len(value.items)
    if isinstance(value, rdb.Set):
        return b"set", sorted(value.members), len(value.members)
    if isinstance(value, rdb.Zset):
        flat = []
        for m, s in sorted(value.entries, key=lambda e: (e[1], e[0])):
            flat += [m, b"%g" % s]
        return b"zset", flat, len(value.entries)
    if isinstance(value, rdb.Stream):
        sid = b"%d-%d".__mod__
        pel = [[sid(i), c.name, n] for i, _, n in value.groups[0].pending
               for c in value.groups[0].consumers if i in c.pending]
        return (b"stream", [[sid(i), list(f)] for i, f in value.entries], len(value.entries),
                [(b"g", b"5-2", 9, 2), (b"h", b"0-0", None, 3)], pel,  # (lags as Redis computes them)
                [(c.name, len(c.pending)) for c in value.groups[0].consumers])
    return b"hash", sorted(x for p in value.pairs for x in p), len(value.pairs)


def records_of(node, key: bytes) -> list[tuple[bytes, bytes]]:
    out = []
    for kind in registry.KINDS:
        p = kind.prefix(key)
        out += list(node.engine.scan(p, prefix_end(p) if not kind.is_key or kind.tag == K.TAG_HEAD else p + b"\x00"))
    return out


@pytest.mark.parametrize("old", sorted(BUILD))
@pytest.mark.parametrize("new", sorted(VALUES))
def test_restore_replaces_any_type_in_one_apply(node, old, new):
    for cmd in BUILD[old]:
        run(node, *cmd)
    applies = []
    real = node.ks.apply

    def counting(recs, *a, **kw):
        applies.append(len(recs))
        return real(recs, *a, **kw)

    node.ks.apply = counting
    try:
        assert run(node, b"RESTORE", b"k", 0, rdb.dump(VALUES[new]), b"REPLACE") == b"OK"
    finally:
        node.ks.apply = real
    assert len(applies) == 1
    got = read(node, b"k") if new != "hll" else (b"string", rdb.load(run(node, b"DUMP", b"k")).value)
    want = expected(VALUES[new])
    if new == "zset":
        got = (got[0], [x if i % 2 == 0 else b"%g" % float(x) for i, x in enumerate(got[1])], got[2])
    assert got == want
    for ik, rec in records_of(node, b"k"):
        registry.check_record(ik, rec)  # every record is one a peer would accept
    # the type's state stays in step: a write after the RESTORE reads right
    if new == "list":
        run(node, b"LPUSH", b"k", b"first")
        assert run(node, b"LRANGE", b"k", 0, -1) == [b"first", *VALUES["list"].items]
    if new == "zset":
        run(node, b"ZADD", b"k", 0, b"m0")
        assert run(node, b"ZRANK", b"k", b"m1") == 2 and run(node, b"ZCARD", b"k") == 4
    if new == "hll":
        assert run(node, b"PFCOUNT", b"k") > 0 and run(node, b"GET", b"k").startswith("WRONGTYPE")
    if new == "stream":
        assert run(node, b"XADD", b"k", b"*", b"n", b"1").split(b"-")[0] != b"0"
        delivered = run(node, b"XREADGROUP", b"GROUP", b"g", b"dave", b"STREAMS", b"k", b">")
        assert [e[0] for e in delivered[0][1]][0] == b"7-0" and run(node, b"XLEN", b"k") == 4
        assert run(node, b"XACK", b"k", b"g", b"5-1", b"5-2") == 2
    if new in ("set", "hash"):
        assert run(node, b"SCARD" if new == "set" else b"HLEN", b"k") == got[2]


def test_restore_with_a_ttl_sets_the_deadline_on_the_key(node):
    for name, value in VALUES.items():
        key = name.encode()
        assert run(node, b"RESTORE", key, 50_000, rdb.dump(value)) == b"OK"
        assert 0 < run(node, b"PTTL", key) <= 50_000, name
        found = node.ks.live_record(key, node.ks.now())
        assert found is not None and int.from_bytes(found[1][11:19], "big") > 0


def test_memory_usage_samples_zero_is_the_sum_of_the_live_records(node):
    run(node, b"ZADD", b"z", *[x for i in range(50) for x in (i, b"member-%d" % i)])
    run(node, b"ZREM", b"z", b"member-3")
    run(node, b"RPUSH", b"l", *[b"v" * i for i in range(40)])
    run(node, b"LPOP", b"l", 2)
    for i in range(1, 30):
        run(node, b"XADD", b"x", b"%d-1" % i, b"f", b"v" * i)
    run(node, b"XDEL", b"x", b"3-1")
    run(node, b"XGROUP", b"CREATE", b"x", b"g", b"0")
    run(node, b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", b"4", b"STREAMS", b"x", b">")
    run(node, b"XACK", b"x", b"g", b"1-1")
    now = node.ks.now()
    for key in (b"z", b"l", b"x"):
        hk = K.encode_head_key(key)
        h = node.ks.get(hk)
        total = len(hk) + len(h)
        for kind in registry.element_kinds(head.ctype_of(h)):
            p = kind.prefix(key)
            total += sum(len(ik) + len(rec) for ik, rec in node.engine.scan(p, prefix_end(p))
                         if is_live(rec, now) and head.element_live(h, rec, now))
        assert run(node, b"MEMORY", b"USAGE", key, b"SAMPLES", 0) == total
