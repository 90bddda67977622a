"""RENAME, RENAMENX and COPY of collections of every type, and OBJECT ENCODING of each type,
in-process through a real node's ``dispatch`` (keyspace/collections.py).

The collections are built with core's record constructors (``tests/records.py``), so every
type is covered whether or not its commands are on this branch: a move must re-key every
live element record with a fresh version of this node, rebuild the zset score index, carry
per-member TTLs, the head's TTL and a stream's state, replace whatever the destination
held, and be one apply (one replication-log entry).
"""

from __future__ import annotations

import pytest

from marekvs.config import Config
from marekvs.core import envelope as env
from marekvs.core import head, lww, orswot
from marekvs.core import keys as K
from marekvs.core.envelope import RecordType
from marekvs.core.head import CollectionType as CT
from marekvs.node import Node
from marekvs.server import resp
from tests import records as R

TYPES = list(R.TYPES.items())


class InProcess:
    def __init__(self, path: str, node_id: int = 1):
        self.node = Node(Config(data_dir=path, node_id=node_id, durability="no"))
        self.ks = self.node.ks
        self.engine = self.node.engine
        self.c = self.node.new_context()

    def __call__(self, *argv):
        r = self.node.dispatch(self.c, [a if isinstance(a, bytes) else str(a).encode() for a in argv])
        return ("ERR", str(r)) if isinstance(r, resp.Err) else r

    def log_entries(self, fn) -> int:
        """Replication-log entries the command(s) run by ``fn`` produced (committed)."""
        self.engine.commit()
        before = self.engine.log_seq
        fn()
        self.engine.commit()
        return self.engine.log_seq - before


@pytest.fixture
def n(tmp_path):
    node = InProcess(str(tmp_path / "db"), node_id=7)
    yield node
    node.node.close()


@pytest.mark.parametrize("name,ctype", TYPES, ids=[t for t, _ in TYPES])
def test_rename_moves_every_live_element_with_fresh_versions_in_one_log_entry(n, name, ctype):
    future = n.ks.now() + 3_600_000
    R.build(n.ks, b"src", ctype, 20, head_ttl=future, member_ttl=future + 5 if ctype in (1, 2, 3) else 0,
            config=b"cfg" if ctype == CT.STREAM else b"")
    before = R.content(n.ks, b"src")
    assert before is not None and any(before[k] for k in before if k not in ("type", "ctype", "ttl", "last_id",
                                                                          "config"))
    mark = n.ks.stamp()
    assert n.log_entries(lambda: n("RENAME", "src", "{x}dst")) == 1
    assert R.content(n.ks, b"{x}dst") == before
    assert n("EXISTS", "src") == 0 and R.content(n.ks, b"src") is None
    assert all(hlc > mark and origin == 7 for hlc, origin in R.element_versions(n.ks, b"{x}dst"))
    assert n("TYPE", "{x}dst") == before["type"].encode()
    assert n("PTTL", "{x}dst") > 3_500_000  # the head's TTL moved with it


@pytest.mark.parametrize("name,ctype", TYPES, ids=[t for t, _ in TYPES])
def test_copy_keeps_the_source_and_the_copies_are_independent(n, name, ctype):
    R.build(n.ks, b"a", ctype, 10)
    before = R.content(n.ks, b"a")
    assert n.log_entries(lambda: n("COPY", "a", "b")) == 1
    assert R.content(n.ks, b"a") == before == R.content(n.ks, b"b")
    # a write to one does not show in the other; DEL of the source leaves the copy
    R.build(n.ks, b"a", ctype, 3, config=b"")
    assert R.content(n.ks, b"b") == before
    assert n("DEL", "a") == 1
    assert R.content(n.ks, b"b") == before


@pytest.mark.parametrize("name,ctype", TYPES, ids=[t for t, _ in TYPES])
def test_rename_replaces_a_destination_of_any_type_and_its_elements_stay_dead(n, name, ctype):
    R.build(n.ks, b"src", ctype, 4)
    want = R.content(n.ks, b"src")
    for other_name, other in TYPES:
        if other == CT.HLL and ctype == CT.HLL:
            continue  # the HLL DEL caveat: test_hll_destination_with_registers_keeps_the_higher_ranks
        dst = b"dst-" + other_name.encode()
        R.build(n.ks, dst, other, 30)
        assert n("COPY", "src", dst) == 0  # no REPLACE: the destination exists
        assert n("COPY", "src", dst, "REPLACE") == 1
        got = R.content(n.ks, dst)
        # a head's last stream id is max-joined, even across DEL (stream ids never go back)
        assert got.pop("last_id") >= want["last_id"]
        assert got == {k: v for k, v in want.items() if k != "last_id"}, other_name
    n("SET", "dst", "a string")
    assert n("RENAME", "src", "dst") == b"OK"
    got = R.content(n.ks, b"dst")
    assert got.pop("last_id") >= want["last_id"]
    assert got == {k: v for k, v in want.items() if k != "last_id"}
    assert n("GET", "dst") == ("ERR", "WRONGTYPE Operation against a key holding the wrong kind of value")


def test_a_string_renamed_over_a_collection_replaces_it(n):
    R.build(n.ks, b"h", CT.HASH, 5)
    n("SET", "s", "value")
    assert n("RENAME", "s", "h") == b"OK"
    assert n("TYPE", "h") == b"string" and n("GET", "h") == b"value"


def test_renamenx_and_copy_without_replace_leave_an_existing_destination(n):
    R.build(n.ks, b"a", CT.SET, 5)
    R.build(n.ks, b"b", CT.HASH, 2)
    b_before = R.content(n.ks, b"b")
    assert n("RENAMENX", "a", "b") == 0
    assert n("COPY", "a", "b") == 0
    assert R.content(n.ks, b"b") == b_before
    assert n("RENAMENX", "a", "c") == 1
    assert n("TYPE", "c") == b"set" and n("EXISTS", "a") == 0
    assert n("RENAMENX", "a", "d") == ("ERR", "ERR no such key")
    assert n("COPY", "c", "c") == ("ERR", "ERR source and destination objects are the same")
    assert n("RENAME", "c", "c") == b"OK" and n("TYPE", "c") == b"set"


def test_gated_and_expired_elements_are_not_moved(n):
    now = n.ks.now()
    R.build(n.ks, b"h", CT.HASH, 3)
    assert n("DEL", "h") == 1
    R.build(n.ks, b"h", CT.HASH, 0)  # re-created: the three old fields are gated
    hk = K.encode_head_key(b"h")
    live = orswot.add(None, RecordType.HASH_FIELD, n.ks.stamp(), 7, b"live")
    gone = orswot.add(None, RecordType.HASH_FIELD, n.ks.stamp(), 7, b"expired", now - 1)
    n.ks.apply([(K.encode_hash_field_key(b"h", b"new"), live), (K.encode_hash_field_key(b"h", b"old"), gone)])
    assert n("RENAME", "h", "h2") == b"OK"
    got = R.content(n.ks, b"h2")
    assert [s for s, _, _ in got["hash-field"]] == [b"new"]
    assert n.ks.get(hk)[0] & env.FLAG_TOMBSTONE


def test_zset_score_index_is_rebuilt_from_the_members(n):
    R.build(n.ks, b"z", CT.ZSET, 3)  # members m0..m2 with scores 0, 0.5, 1.0
    s = n.ks.stamp
    stale = K.encode_zset_score_key(b"z", 9.0, b"gone")  # no member record
    older = K.encode_zset_score_key(b"z", 7.0, b"m1")  # m1's older index entry, still live
    n.ks.apply([(stale, lww.new(RecordType.ZSET_MEMBER, s(), 7, b"")),
                (older, lww.new(RecordType.ZSET_MEMBER, 1, 7, b""))])
    assert n("RENAME", "z", "z2") == b"OK"
    idx = [K.decode_score(sfx[:8]) for sfx, _, _ in R.content(n.ks, b"z2")["zset-score"]]
    members = [sfx[8:] for sfx, _, _ in R.content(n.ks, b"z2")["zset-score"]]
    assert sorted(zip(members, idx)) == [(b"m0", 0.0), (b"m1", 0.5), (b"m2", 1.0)]


def test_stream_state_moves_with_the_head(n):
    R.build(n.ks, b"s", CT.STREAM, 5, config=b"some-config")
    h = head.head_of(n.ks.get(K.encode_head_key(b"s")))
    assert n("RENAME", "s", "t") == b"OK"
    moved = head.head_of(n.ks.get(K.encode_head_key(b"t")))
    assert (moved.last_ms, moved.last_seq, moved.config) == (h.last_ms, h.last_seq, b"some-config")
    assert moved.delete_clock > 0  # gates whatever "t" held before


def test_hll_destination_with_registers_takes_the_moved_ones(n):
    # The moved registers are of the new head's generation: they win over the registers
    # the destination held, whatever their ranks (keyspace/hll.py, "DEL and generations").
    R.build(n.ks, b"a", CT.HLL, 50)
    R.build(n.ks, b"b", CT.HLL, 50)  # the same elements: every rank equal
    assert n("PFCOUNT", "a") == n("PFCOUNT", "b") == 50
    assert n("RENAME", "a", "b") == b"OK"
    assert n("PFCOUNT", "b") == 50
    assert n("EXISTS", "b") == 1 and n("TYPE", "b") == b"string"
    R.build(n.ks, b"c", CT.HLL, 5)
    assert n("RENAME", "c", "b") == b"OK"
    assert n("PFCOUNT", "b") == 5  # the old registers, of higher ranks in part, are gone


def test_rename_of_a_big_collection_is_one_apply(n):
    R.build(n.ks, b"big", CT.SET, 3000)
    assert n.log_entries(lambda: n("RENAME", "big", "big2")) == 1
    assert len(R.content(n.ks, b"big2")["set-member"]) == 3000


# -- OBJECT ENCODING ------------------------------------------------------------------------

def _put(n, key: bytes, ctype: int, items: list[tuple[bytes, bytes]]) -> None:
    recs = [(K.encode_head_key(key), head.new(ctype, n.ks.stamp(), 7))]
    tag = {CT.HASH: K.TAG_HASH, CT.SET: K.TAG_SET, CT.ZSET: K.TAG_ZSET}[ctype]
    for member, value in items:
        recs.append((K.collection_prefix(tag, key) + member, orswot.add(None, ctype, n.ks.stamp(), 7, value)))
    n.ks.apply(recs)


def test_object_encoding_follows_redis_rules_for_every_type(n):
    _put(n, b"h", CT.HASH, [(b"f%d" % i, b"v") for i in range(10)])
    assert n("OBJECT", "ENCODING", "h") == b"listpack"
    _put(n, b"h2", CT.HASH, [(b"f", b"x" * 65)])
    assert n("OBJECT", "ENCODING", "h2") == b"hashtable"
    _put(n, b"h3", CT.HASH, [(b"f" * 65, b"x")])
    assert n("OBJECT", "ENCODING", "h3") == b"hashtable"
    _put(n, b"s", CT.SET, [(b"%d" % i, b"") for i in range(10)] + [(b"-5", b"")])
    assert n("OBJECT", "ENCODING", "s") == b"intset"
    _put(n, b"s2", CT.SET, [(b"1", b""), (b"01", b"")])  # "01" is not an integer to Redis
    assert n("OBJECT", "ENCODING", "s2") == b"hashtable"
    _put(n, b"z", CT.ZSET, [(b"m%d" % i, K.encode_score(i)) for i in range(10)])
    assert n("OBJECT", "ENCODING", "z") == b"listpack"
    _put(n, b"z2", CT.ZSET, [(b"m" * 65, K.encode_score(1))])
    assert n("OBJECT", "ENCODING", "z2") == b"skiplist"
    R.build(n.ks, b"l", CT.LIST, 3)
    assert n("OBJECT", "ENCODING", "l") == b"quicklist"
    R.build(n.ks, b"x", CT.STREAM, 3)
    assert n("OBJECT", "ENCODING", "x") == b"stream"
    n("PFADD", "p", "a")
    assert n("OBJECT", "ENCODING", "p") == b"raw"


def test_object_encoding_reads_the_max_parameters(n):
    _put(n, b"h", CT.HASH, [(b"f%d" % i, b"v") for i in range(10)])
    _put(n, b"s", CT.SET, [(b"%d" % i, b"") for i in range(10)])
    _put(n, b"z", CT.ZSET, [(b"m%d" % i, K.encode_score(i)) for i in range(10)])
    assert n("CONFIG", "SET", "hash-max-listpack-entries", "9", "set-max-intset-entries", "9",
             "zset-max-ziplist-entries", "9") == b"OK"
    assert [n("OBJECT", "ENCODING", k) for k in ("h", "s", "z")] == [b"hashtable", b"hashtable", b"skiplist"]
    assert n("CONFIG", "SET", "hash-max-listpack-entries", "10", "set-max-intset-entries", "10",
             "zset-max-listpack-entries", "10", "hash-max-listpack-value", "1",
             "zset-max-listpack-value", "1") == b"OK"
    assert [n("OBJECT", "ENCODING", k) for k in ("h", "s", "z")] == [b"hashtable", b"intset", b"skiplist"]
    assert n("CONFIG", "SET", "hash-max-listpack-value", "2", "zset-max-listpack-value", "2") == b"OK"
    assert [n("OBJECT", "ENCODING", k) for k in ("h", "s", "z")] == [b"listpack", b"intset", b"listpack"]


def test_object_encoding_of_a_collection_that_shrank_is_the_compact_one_again(n):
    # (Redis never converts back; marekvs keeps no encoding: docs/divergences.md)
    _put(n, b"h", CT.HASH, [(b"f", b"x" * 100)])
    assert n("OBJECT", "ENCODING", "h") == b"hashtable"
    rec = n.ks.get(K.encode_hash_field_key(b"h", b"f"))
    n.ks.apply([(K.encode_hash_field_key(b"h", b"f"), orswot.remove(rec, n.ks.stamp(), 7)),
                (K.encode_hash_field_key(b"h", b"g"), orswot.add(None, CT.HASH, n.ks.stamp(), 7, b"y"))])
    assert n("OBJECT", "ENCODING", "h") == b"listpack"


# -- the types whose commands exist, through their commands ---------------------------------

def _read(n, key: str) -> object:
    """Everything a client can read of the collection ``key`` (and its TTLs)."""
    t = n("TYPE", key)
    if t == b"hash":
        fields = sorted(n("HKEYS", key))
        return t, n("HLEN", key), sorted(n("HGETALL", key)), [n("HPTTL", key, "FIELDS", 1, f)[0] > 0 for f in fields]
    if t == b"set":
        return t, n("SCARD", key), sorted(n("SMEMBERS", key))
    if t == b"list":
        return t, n("LLEN", key), n("LRANGE", key, 0, -1), n("LINDEX", key, -1), n("LPOS", key, "x5")
    if t == b"zset":
        return (t, n("ZCARD", key), n("ZRANGE", key, 0, -1, "WITHSCORES"), n("ZRANK", key, "m7"),
                n("ZRANGEBYSCORE", key, 3, 9), n("ZREVRANGE", key, 0, 4), n("ZSCORE", key, "m11"))
    return t, n("PFCOUNT", key)


def _fill(n, key: str, kind: str, salt: str = "") -> None:
    if kind == "hash":
        n("HSET", key, *[x for i in range(40) for x in (f"f{i}", f"v{i}")])
        n("HDEL", key, "f3", "f4")
        n("HPEXPIRE", key, 100_000, "FIELDS", 2, "f5", "f6")
    elif kind == "set":
        n("SADD", key, *[f"m{i}" for i in range(40)], *range(10))
        n("SREM", key, "m1", "m2")
    elif kind == "zset":
        n("ZADD", key, *[x for i in range(40) for x in (i % 13, f"m{i}")])
        n("ZREM", key, "m1", "m2")
        n("ZINCRBY", key, 100, "m11")
        n("ZADD", key, "XX", "GT", 50, "m12")
    elif kind == "list":
        n("RPUSH", key, *[f"x{i}" for i in range(30)])
        n("LPUSH", key, "first", "second")
        n("LPOP", key)
        n("RPOP", key, 2)
        n("LSET", key, 3, "changed")
    else:
        n("PFADD", key, *[f"e{salt}{i}" for i in range(500)])


@pytest.mark.parametrize("kind", ["hash", "set", "zset", "list", "hll"])
def test_rename_and_copy_of_collections_written_by_their_commands(n, kind):
    _fill(n, "a", kind)
    n("PEXPIRE", "a", 500_000)
    want = _read(n, "a")
    assert n.log_entries(lambda: n("COPY", "a", "b")) == 1
    assert _read(n, "b") == want and 0 < n("PTTL", "b") <= 500_000
    assert n.log_entries(lambda: n("RENAME", "a", "c")) == 1
    assert n("EXISTS", "a") == 0 and _read(n, "c") == want
    # the copies are independent, and each one's counts and hints follow its own writes
    # a new collection at the renamed-away name (an HLL of other elements: the registers
    # the RENAME left behind, dead, still win merges by rank until swept, the DEL caveat)
    _fill(n, "a", kind, salt="again")
    assert _read(n, "a")[:2] == want[:2] if kind != "hll" else 450 < _read(n, "a")[1] <= 510
    if kind == "hash":
        n("HSET", "b", "new", "1")
        n("HDEL", "c", "f10")
        assert (n("HLEN", "b"), n("HLEN", "c")) == (want[1] + 1, want[1] - 1)
    elif kind == "set":
        n("SADD", "b", "new")
        n("SREM", "c", "m10")
        assert (n("SCARD", "b"), n("SCARD", "c")) == (want[1] + 1, want[1] - 1)
    elif kind == "zset":
        n("ZADD", "b", -1, "new")
        n("ZREM", "c", "m0")  # (score 0: ranked before m7)
        assert (n("ZCARD", "b"), n("ZCARD", "c")) == (want[1] + 1, want[1] - 1)
        assert n("ZRANGE", "b", 0, 0) == [b"new"] and n("ZRANK", "c", "m7") == want[3] - 1
    elif kind == "list":
        n("RPUSH", "b", "new")
        assert n("LPOP", "c") == want[2][0]
        assert n("LRANGE", "b", -1, -1) == [b"new"] and n("LRANGE", "c", 0, -1) == want[2][1:]
    else:
        n("PFADD", "b", *[f"z{i}" for i in range(500)])
        assert n("PFCOUNT", "b") > want[1] + 400 and n("PFCOUNT", "c") == want[1]
    # RENAME over an existing collection of another type replaces it
    n("SADD", "other", "x")
    assert n("RENAME", "c", "other") == b"OK" and _read(n, "other")[0] == want[0]


def test_an_emptied_hash_cannot_be_renamed_and_a_rename_onto_one_creates_the_moved_key(n):
    n("HSET", "h", "f", "v")
    n("HDEL", "h", "f")  # emptied: no key (its head stays)
    assert n("RENAME", "h", "x") == ("ERR", "ERR no such key")
    assert n("COPY", "h", "x") == 0
    n("SADD", "s", "a")
    assert n("RENAME", "s", "h") == b"OK"
    assert n("TYPE", "h") == b"set" and n("SMEMBERS", "h") == {b"a"} or n("SMEMBERS", "h") == [b"a"]
