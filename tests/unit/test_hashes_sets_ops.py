"""In-process tests of the hash, set and per-member TTL families with a real Node.

Commands run through ``node.dispatch`` on a real engine in a temporary directory, as a
RESP connection runs them; the clock is frozen where a test needs time to pass. What is
checked here and not over the wire: the records the commands write (their kind, that
each command is one apply and one replication-log entry, that every record is valid for a
peer), the live-member counts against a scan after random histories (local and
replicated writes, members expiring by time, DELs), the per-member TTL on a zset member
record (another family's type, reached through the registry), scan cursors the node does
not know, and the random choice on collections too big to keep a member list.
"""

from __future__ import annotations

import random
from collections import Counter

import pytest

from marekvs.config import Config
from marekvs.core import envelope as env
from marekvs.core import head as H
from marekvs.core import keys as K
from marekvs.core import orswot, registry
from marekvs.core.envelope import RecordType
from marekvs.keyspace import members as M
from marekvs.keyspace import counts
from marekvs.node import Node
from marekvs.server import resp


class Error(str):
    pass


class N:
    """A real node with one client context."""

    def __init__(self, path: str, node_id: int = 1):
        self.node = Node(Config(data_dir=path, node_id=node_id, durability="no"))
        self.ks = self.node.ks
        self.engine = self.node.engine
        self.c = self.node.new_context()

    def __call__(self, *argv):
        r = self.node.dispatch(self.c, [a if isinstance(a, bytes) else str(a).encode() for a in argv])
        return Error(r) if isinstance(r, resp.Err) else r

    def close(self) -> None:
        self.node.close()


@pytest.fixture
def n(tmp_path):
    node = N(str(tmp_path / "db"))
    yield node
    node.close()


@pytest.fixture
def clock(n, monkeypatch):
    """Freeze the command clock, and the HLC's wall clock with it (a write after a
    deadline must be stamped after it, as on a real clock)."""
    state = {"now": n.ks.now()}
    monkeypatch.setattr(n.ks, "now", lambda: state["now"])
    monkeypatch.setattr(n.ks.hlc, "_clock", lambda: state["now"])
    monkeypatch.setattr(n.ks.hlc, "_wall", False)
    return state


def scan_count(n: N, tag: bytes, key: bytes) -> int:
    """Live members by brute force: every record under the prefix, gated by the head (a
    dead head too: members written after its death on another node count)."""
    now = n.ks.now()
    h = n.engine.get(K.encode_head_key(key))
    if h is None:
        return 0
    prefix = K.collection_prefix(tag, key)
    return sum(1 for _, rec in n.engine.scan(prefix, prefix + b"\xff" * 8)
               if H.element_live(h, rec, now))


# -- records ---------------------------------------------------------------------------------

def test_each_command_is_one_apply_and_one_log_entry_of_valid_records(n):
    seen: list[list[tuple[bytes, bytes]]] = []
    apply = n.engine.apply

    def spy(records, log_entry=True):
        changed = apply(records, log_entry)
        seen.append(changed)
        return changed

    n.ks.apply = spy
    for argv in (["HSET", "h", "a", "1", "b", "2"], ["HDEL", "h", "a"], ["HINCRBY", "h", "n", "3"],
                 ["SADD", "s", "x", "y"], ["SREM", "s", "x"], ["SMOVE", "s", "t", "y"],
                 ["SADD", "u", "1", "2"], ["SINTERSTORE", "d", "u", "u"], ["EXPIREMEMBER", "u", "1", "100"],
                 ["HEXPIRE", "h", "100", "FIELDS", "2", "b", "n"], ["SPOP", "u", "1"]):
        before = len(seen)
        seq = n.engine.next_seq
        assert not isinstance(n(*argv), Error), argv
        assert len(seen) == before + 1, argv  # one apply ...
        assert n.engine.next_seq == seq + 1, argv  # ... one replication-log entry
        for ikey, rec in seen[-1]:
            kind = registry.check_record(ikey, rec)  # what a peer accepts
            assert kind.tag in (K.TAG_HEAD, K.TAG_HASH, K.TAG_SET), argv
        n.engine.commit()


def test_overwrites_keep_an_element_record_small(n):
    """Adds are blind (a new dot, covering nothing: keyspace/members.py): a field written
    a thousand times keeps its four newest adds, not the dots of every overwrite."""
    ik = K.collection_prefix(K.TAG_HASH, b"h") + b"f"
    for i in range(1000):
        n("HINCRBY", "h", "f", "1")
        if i == 0:
            first = orswot.top_dot(n.engine.get(ik))
    rec = n.engine.get(ik)
    e = orswot.element_of(rec)
    assert len(e.live) == orswot.LIVE_CAP and not e.covered and len(rec) < 120
    assert n("HGET", "h", "f") == b"1000" and first not in {d for d, _ in e.live}
    assert env.rtype_of(rec) == RecordType.HASH_FIELD
    n("HDEL", "h", "f")  # a remove covers every live dot it saw
    e = orswot.element_of(n.engine.get(ik))
    assert not e.live and len(e.covered) == orswot.LIVE_CAP


def test_a_re_add_writes_a_new_dot_and_keeps_the_member_ttl(n):
    n("SADD", "s", "m")
    n("EXPIREMEMBER", "s", "m", "100")
    ik = K.collection_prefix(K.TAG_SET, b"s") + b"m"
    before = n.engine.get(ik)
    assert n("SADD", "s", "m") == 0
    after = n.engine.get(ik)
    assert orswot.top_dot(after) > orswot.top_dot(before)  # a dot a concurrent SREM has not seen
    assert env.ttl_of(after) == env.ttl_of(before)


# -- a collection with no live member does not exist -----------------------------------------

def test_emptied_collections_vanish_for_every_generic_command(n):
    n("HSET", "h", "f", "v")
    n("SADD", "s", "m")
    n("HDEL", "h", "f")
    n("SREM", "s", "m")
    for key in (b"h", b"s"):
        assert n("EXISTS", key) == 0 and n("TYPE", key) == b"none" and n("TTL", key) == -2
        assert n("EXPIRE", key, "100") == 0 and n("DEL", key) == 0
    assert n("DBSIZE") == 0 and n("KEYS", "*") == [] and n("SCAN", "0")[1] == []
    assert n("INCR", "h") == 1 and n("SADD", "h2", "x") == 1
    assert n("HSET", "s", "f", "v") == 1 and n("TYPE", "s") == b"hash"


def test_the_last_member_expiring_takes_the_key(n, clock):
    n("SADD", "s", "a", "b")
    n("HSET", "h", "f", "v")
    assert n("SCARD", "s") == 2 and n("HLEN", "h") == 1
    n("EXPIREMEMBER", "s", "a", "10")
    n("EXPIREMEMBER", "s", "b", "20")
    n("EXPIREMEMBER", "h", "f", "20")
    clock["now"] += 15_000
    assert n("SCARD", "s") == 1 and n("EXISTS", "s") == 1
    clock["now"] += 10_000
    assert n("SCARD", "s") == 0 and n("EXISTS", "s", "h") == 0 and n("DBSIZE") == 0


# -- counts ---------------------------------------------------------------------------------------

def test_counts_follow_random_local_histories(n, clock):
    rnd = random.Random(7)
    n("SCARD", "s")  # subscribe the counts to the change feed
    for step in range(1500):
        op = rnd.randrange(10)
        m = b"m%d" % rnd.randrange(12)
        if op < 4:
            n("SADD", "s", m)
        elif op < 6:
            n("SREM", "s", m)
        elif op < 7:
            n("EXPIREMEMBER", "s", m, str(rnd.choice([1, 5, 30])))
        elif op < 8:
            clock["now"] += rnd.choice([0, 1000, 4000])
        elif op < 9:
            n("SPOP", "s", str(rnd.randrange(3)))
        else:
            if rnd.random() < 0.1:
                n("DEL", "s")
            else:
                n("SMOVE", "s", "t", m)
        if step % 10 == 0:
            assert n("SCARD", "s") == scan_count(n, K.TAG_SET, b"s"), step
    assert n.ks.counts.fills < 200  # kept up to date, not rebuilt at every question


def test_counts_follow_records_replicated_from_a_peer(tmp_path):
    a, b = N(str(tmp_path / "a"), 1), N(str(tmp_path / "b"), 2)
    try:
        rnd = random.Random(3)
        b("HLEN", "h")
        for step in range(400):
            src = a if rnd.random() < 0.5 else b
            f = b"f%d" % rnd.randrange(8)
            op = rnd.randrange(6)
            got = []
            real = src.ks.apply

            def spy(records, log_entry=True, real=real, got=got):
                changed = real(records, log_entry)
                got.extend(changed)
                return changed

            src.ks.apply = spy
            if op < 3:
                src("HSET", "h", f, "v")
            elif op < 5:
                src("HDEL", "h", f)
            elif rnd.random() < 0.2:
                src("DEL", "h")
            src.ks.apply = real
            if src is a:  # ship a's records to b, as replication does
                b.engine.apply(got, log_entry=False)
            assert b("HLEN", "h") == scan_count(b, K.TAG_HASH, b"h"), step
    finally:
        a.close()
        b.close()


def test_random_choice_without_a_member_list_is_uniform(n, monkeypatch):
    monkeypatch.setattr(counts, "TRACK_LIMIT", 10)  # too big to keep a list: picked from a scan
    n("SADD", "s", *[b"%02d" % i for i in range(40)])
    picks = Counter(n("SRANDMEMBER", "s", "-8000"))
    assert len(picks) == 40 and min(picks.values()) > 120 and max(picks.values()) < 300
    popped = n("SPOP", "s", "15")
    assert len(set(popped)) == 15 and n("SCARD", "s") == 25


# -- cursors --------------------------------------------------------------------------------------

def test_a_cursor_the_node_does_not_know_restarts_the_iteration(n):
    n("SADD", "s", *[b"%03d" % i for i in range(50)])
    cursor, page = n("SSCAN", "s", "0", "COUNT", "5")
    assert int(cursor) and len(page) == 5
    nxt, again = n("SSCAN", "s", "123456789", "COUNT", "5")
    assert again == page  # from the start
    n.ks.cursors.table.clear()  # evicted (or another node, or a restart)
    seen = set()
    c = cursor
    while True:
        c, page = n("SSCAN", "s", c, "COUNT", "7")
        seen.update(page)
        if c == b"0":
            break
    assert len(seen) == 50


# -- per-member TTL on any ORSWOT member kind --------------------------------------------------------

def test_expiremember_reaches_a_zset_member_through_the_registry(n):
    """The zset commands are another family's: write a zset the way its records are laid
    out (a ZSET head, a 'z' member whose value is the score) and expire its member."""
    key = b"z"
    hk = K.encode_head_key(key)
    mk = K.encode_zset_member_key(key, b"m")
    n.ks.apply([(hk, H.new(H.CollectionType.ZSET, n.ks.stamp(), 1)),
                (mk, orswot.new(RecordType.ZSET_MEMBER, n.ks.stamp(), 1, b"1.5"))])
    assert M.member_kind(H.CollectionType.ZSET).tag == K.TAG_ZSET
    assert n("EXPIREMEMBER", "z", "m", "100") == 1
    assert n("TTL", "z", "m") == 100 and 99_000 < n("PTTL", "z", "m") <= 100_000
    assert n("EXPIREMEMBER", "z", "nosuch", "100") == 0
    assert n("EXPIREMEMBER", "z", "m", "0") == 1
    assert not H.element_live(n.engine.get(hk), n.engine.get(mk), n.ks.now())


def test_expiremember_on_types_without_members_is_unsupported(n):
    n("SET", "str", "v")
    n.ks.apply([(K.encode_head_key(b"l"), H.new(H.CollectionType.LIST, n.ks.stamp(), 1)),
                (K.encode_list_key(b"l", K.LIST_CENTER), env.pack(env.make_flags(RecordType.LIST), n.ks.stamp(),
                                                                  1, 0, b"x"))])
    assert n("EXPIREMEMBER", "str", "m", "10") == Error("ERR object type is unsupported")
    assert n("EXPIREMEMBER", "l", "m", "10") == Error("ERR object type is unsupported")
    assert n("TTL", "l", "m") == -1


# -- the remembered typed home of a key (Keyspace.lookup) --------------------------------------------

def test_the_remembered_collection_follows_every_change_of_the_key(n, clock):
    n("SADD", "s", "m")
    assert n("SISMEMBER", "s", "m") == 1 and (b"s", H.CollectionType.SET) in n.ks.homes
    # a string record from a peer, written concurrently (no head tombstone with it)
    n.engine.apply([(K.encode_string_key(b"s"), env.pack(env.make_flags(RecordType.STRING), n.ks.stamp(), 2, 0,
                                                         b"v"))], log_entry=False)
    assert n("SISMEMBER", "s", "m") == Error("WRONGTYPE Operation against a key holding the wrong kind of value")
    n("DEL", "s")  # deletes the string the key reads as; the set shows again (keyspace.py)
    assert n("SISMEMBER", "s", "m") == 1
    n("DEL", "s")
    assert n("SISMEMBER", "s", "m") == 0 and n("SADD", "s", "m") == 1 and n("SISMEMBER", "s", "m") == 1
    n("EXPIRE", "s", "10")  # a head with a deadline is not remembered: it dies with no write
    assert n("SISMEMBER", "s", "m") == 1
    clock["now"] += 11_000
    assert n("SISMEMBER", "s", "m") == 0 and n("SADD", "s", "x") == 1 and n("SCARD", "s") == 1
    n("HSET", "h", "f", "v")
    assert n("HGET", "h", "f") == b"v"
    n("DEL", "h")
    assert n("HGET", "h", "f") is None and n("HSET", "h", "f", "w") == 1 and n("HGET", "h", "f") == b"w"
