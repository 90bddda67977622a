"""In-process tests of the sorted sets (keyspace/zsets.py, commands/zsets.py, geo): the
records one command writes, the in-memory order mirror against a rebuild from the index,
the index after merges (a hint confirmed by the members: nothing is repaired), emptied
zsets, per-member TTLs, DEL and stores, blocking pops woken by a local or a replicated
write.

Nodes are real (engine in a temporary directory, ``dispatch``), and "replication" ships
the records of one node's committed log entries into another node's apply path exactly
as a peer's receiver does (``Engine.apply(records, log_entry=False)``).
"""

from __future__ import annotations

import asyncio
import random

import pytest

from marekvs.commands import reply
from marekvs.config import Config
from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core import orswot, zset
from marekvs.keyspace import zsets as Z
from marekvs.node import Node
from marekvs.server import resp
from marekvs.storage.engine import prefix_end


class N:
    """A real node with one client context; ``n("ZADD", "z", 1, "a")`` runs a command."""

    def __init__(self, path: str, node_id: int = 1):
        self.node = Node(Config(data_dir=path, node_id=node_id, durability="no"))
        self.ks = self.node.ks
        self.engine = self.node.engine
        self.c = self.node.new_context()
        self.shipped: dict[int, int] = {}  # peer id -> last log seq shipped to it

    def __call__(self, *argv):
        args = [a if isinstance(a, bytes) else str(a).encode() for a in argv]
        return self.node.dispatch(self.c, args)

    def wire(self, *argv, proto: int = 2) -> bytes:
        self.c.proto = proto
        try:
            return resp.encode(self(*argv), proto)
        finally:
            self.c.proto = 2

    @property
    def z(self) -> Z.Zsets:
        return Z.state(self.ks)

    def ship_to(self, other: N) -> int:
        """Apply this node's committed log entries not yet shipped to ``other``, as a
        peer's receiver does; returns how many records went."""
        self.engine.commit()
        after = self.shipped.get(other.node.config.node_id, 0)
        n = 0
        for seq, recs in self.engine.read_log(after, 10_000):
            other.engine.apply(recs, log_entry=False)
            after = seq
            n += len(recs)
        self.shipped[other.node.config.node_id] = after
        other.engine.commit()
        return n

    def records(self, prefix: bytes) -> dict[bytes, bytes]:
        self.engine.commit()
        return dict(self.engine.scan(prefix, prefix_end(prefix)))

    def close(self) -> None:
        self.node.close()


@pytest.fixture
def n(tmp_path):
    node = N(str(tmp_path / "a"))
    yield node
    node.close()


@pytest.fixture
def pair(tmp_path):
    a, b = N(str(tmp_path / "a"), 1), N(str(tmp_path / "b"), 2)
    yield a, b
    a.close()
    b.close()


def index_entries(node: N, key: bytes) -> set[tuple[bytes, float]]:
    """(member, score) of every index record of ``key``, whatever its envelope says (the
    index is a hint: readers confirm each entry against its member)."""
    p = Z.prefixes(key)
    out = set()
    for ik in node.records(p.by_score):
        _, s, m = K.decode_zset_score_key(ik)
        out.add((m, s))
    return out


def member_state(node: N, key: bytes) -> dict[bytes, float]:
    """member -> score of every envelope-live member record of ``key``."""
    p = Z.prefixes(key)
    now = node.ks.now()
    out = {}
    for ik, rec in node.records(p.members).items():
        if env.is_live(rec, now) and zset.score_of(rec) is not None:
            out[ik[len(p.members):]] = zset.score_of(rec)
    return out


def assert_index_agrees(node: N, key: bytes) -> None:
    """Every live member has an index record at its score (the index may hold more: the
    entries of scores its members left, which readers skip and the sweeper reclaims)."""
    entries = index_entries(node, key)
    for m, s in member_state(node, key).items():
        assert (m, s) in entries, (m, s)


def mirror_equals_rebuild(node: N, key: bytes) -> None:
    """The mirror the feed kept equals one rebuilt from the index now."""
    got = node("ZRANGE", key, 0, -1, "WITHSCORES")
    node.z.orders.clear()
    node.z.cached = 0
    again = node("ZRANGE", key, 0, -1, "WITHSCORES")
    if type(again) is resp.Blocking:  # (a rebuild in steps: a big zset, or small steps)
        again = asyncio.run(again.awaitable)
    assert again == got


# -- what one command writes ---------------------------------------------------------------------

def test_zadd_writes_member_and_index_in_one_log_entry(n):
    n.engine.commit()
    first = n.engine.log_seq
    assert n("ZADD", "z", 1, "a", 2, "b") == 2
    n.engine.commit()
    entries = n.engine.read_log(first, 100)
    assert len(entries) == 1  # one command, one entry
    keys = {ik for ik, _ in entries[0][1]}
    p = Z.prefixes(b"z")
    assert keys == {p.head, p.member_key(b"a"), p.member_key(b"b"), p.index_key(1.0, b"a"), p.index_key(2.0, b"b")}
    # a score change: the member and the new score's index key, one stamp (the old key
    # stays until the sweeper: readers confirm every index key against its member)
    assert n("ZADD", "z", "XX", "CH", 5, "a") == 1
    n.engine.commit()
    (_, recs), = n.engine.read_log(first + 1, 100)
    got = dict(recs)
    assert set(got) == {p.member_key(b"a"), p.index_key(5.0, b"a")}
    assert not env.is_tombstone(got[p.index_key(5.0, b"a")])
    assert len({r[env.VERSION] for r in got.values()}) == 1
    assert zset.score_of(got[p.member_key(b"a")]) == 5.0
    assert len(got[p.index_key(5.0, b"a")]) == env.ENVELOPE_SIZE  # no payload
    assert n("ZRANGEBYSCORE", "z", 1, 1) == []  # the old score's key is not a's any more
    # the same score again is a re-add (a new dot, as SADD's): it answers 0, as Redis
    seq = n.engine.log_seq
    assert n("ZADD", "z", 5, "a") == 0
    n.engine.commit()
    assert n.engine.log_seq == seq + 1
    assert_index_agrees(n, b"z")


def test_a_zset_emptied_by_any_removal_disappears(n):
    for empty in (["ZREM", "z", "a", "b"], ["ZPOPMIN", "z", 5], ["ZREMRANGEBYSCORE", "z", "-inf", "+inf"],
                  ["ZREMRANGEBYRANK", "z", 0, -1], ["ZREMRANGEBYLEX", "z", "-", "+"],
                  ["ZMPOP", 1, "z", "MAX", "COUNT", 9]):
        n("ZADD", "z", 1, "a", 2, "b")
        n(*empty)
        assert n("EXISTS", "z") == 0 and n("TYPE", "z") == reply.Simple(b"none"), empty
        assert n("DEBUG", "DIGEST") == reply.Simple(b"0" * 40)
    # removing some keeps it
    n("ZADD", "z", 1, "a", 2, "b")
    n("ZREM", "z", "a", "nope")
    assert n("EXISTS", "z") == 1 and n("ZCARD", "z") == 1


def test_writing_another_type_where_a_zset_lives_is_wrongtype(n):
    n("ZADD", "z", 1, "a")
    n("SET", "s", "v")
    assert str(n("ZADD", "s", 1, "a")).startswith("WRONGTYPE")
    assert str(n("ZRANGE", "s", 0, -1)).startswith("WRONGTYPE")
    assert str(n("GEOADD", "s", 1, 1, "a")).startswith("WRONGTYPE")
    assert n("SET", "z", "v") == reply.OK  # a string write replaces it, as in Redis
    assert n("GET", "z") == b"v" and str(n("ZCARD", "z")).startswith("WRONGTYPE")


def test_del_and_recreate_hide_old_members_and_rebuild_the_mirror(n):
    n("ZADD", "z", 1, "a", 2, "b")
    assert n("ZRANGE", "z", 0, -1) == [b"a", b"b"]
    n("DEL", "z")
    assert n("ZCARD", "z") == 0
    n("ZADD", "z", 3, "c")
    assert n("ZRANGE", "z", 0, -1, "WITHSCORES") == [b"c", b"3"]
    assert n("ZSCORE", "z", "a") is None and n("ZRANK", "z", "a") is None
    n("ZADD", "z", 4, "a")  # a member a DEL gated comes back with its new score only
    assert n("ZRANGE", "z", 0, -1, "WITHSCORES") == [b"c", b"3", b"a", b"4"]
    assert_index_agrees(n, b"z")
    mirror_equals_rebuild(n, b"z")


def test_stores_replace_the_destination_whatever_it_held(n):
    n("ZADD", "src", 1, "a", 2, "b", 3, "c")
    n("SET", "d1", "string")
    n("ZADD", "d2", 9, "old", 1, "a")
    assert n("ZRANGESTORE", "d1", "src", 0, 1) == 2
    assert n("ZUNIONSTORE", "d2", 1, "src", "WEIGHTS", 10) == 3
    assert n("TYPE", "d1") == reply.Simple(b"zset")
    assert n("ZRANGE", "d1", 0, -1, "WITHSCORES") == [b"a", b"1", b"b", b"2"]
    assert n("ZRANGE", "d2", 0, -1, "WITHSCORES") == [b"a", b"10", b"b", b"20", b"c", b"30"]
    for key in (b"d1", b"d2"):
        assert_index_agrees(n, key)
    # an empty result deletes the destination
    assert n("ZINTERSTORE", "d2", 2, "src", "nope") == 0
    assert n("EXISTS", "d2") == 0


# -- the mirror ------------------------------------------------------------------------------------

def test_mirror_follows_random_commands_and_equals_a_rebuild(n):
    rnd = random.Random(7)
    members = [b"m%d" % i for i in range(40)]
    n("ZADD", "z", 0, "m0")
    for i in range(1500):
        op = rnd.randrange(8)
        m = rnd.choice(members)
        if op < 3:
            n("ZADD", "z", rnd.choice([rnd.randint(-5, 5), rnd.random()]), m)
        elif op < 4:
            n("ZINCRBY", "z", rnd.randint(-3, 3), m)
        elif op < 5:
            n("ZREM", "z", m, rnd.choice(members))
        elif op < 6:
            n(rnd.choice(["ZPOPMIN", "ZPOPMAX"]), "z", rnd.randint(1, 3))
        elif op < 7:
            n("ZREMRANGEBYSCORE", "z", rnd.randint(-5, 0), rnd.randint(0, 5)) if rnd.random() < 0.1 else None
        else:
            assert n("ZRANK", "z", m) == (None if n("ZSCORE", "z", m) is None else n("ZRANK", "z", m))
        if i % 100 == 0:
            mirror_equals_rebuild(n, b"z")
    mirror_equals_rebuild(n, b"z")
    assert_index_agrees(n, b"z")
    got = n("ZRANGE", "z", 0, -1, "WITHSCORES")
    pairs = list(zip(got[0::2], map(float, got[1::2])))
    assert pairs == sorted(pairs, key=lambda p: (p[1], p[0]))
    assert n("ZCARD", "z") == len(pairs)


def _scores(node: N, key: str) -> dict[bytes, float]:
    got = node("ZRANGE", key, 0, -1, "WITHSCORES")
    return dict(zip(got[0::2], map(float, got[1::2])))


def test_a_big_zset_is_mirrored_in_steps_while_it_changes(n, monkeypatch):
    """The first read of a zset's order builds its mirror in steps (``Zsets.warming``): the
    command waits (a Blocking reply) while other commands run, and what they change
    meanwhile is in the mirror it ends with."""
    monkeypatch.setattr(Z, "BUILD_STEP", 10)
    n("ZADD", "z", *[x for i in range(200) for x in (i, b"m%03d" % i)])
    model = {b"m%03d" % i: float(i) for i in range(200)}
    n.z.orders.clear()
    n.z.cached = 0
    blocked = n("ZCARD", "z")
    assert type(blocked) is resp.Blocking and b"z" in n.z.building
    other = n("ZCOUNT", "z", "-inf", "+inf")  # a second reader drives the same build
    assert type(other) is resp.Blocking and len(n.z.building) == 1
    # writes while the build runs: a new member, a removed one, a moved one
    assert n("ZADD", "z", 500, "new") == 1 and n("ZREM", "z", "m007") == 1
    assert n("ZINCRBY", "z", 1000, "m003") == 1003
    model.update({b"new": 500.0, b"m003": 1003.0})
    del model[b"m007"]

    async def both():
        return await asyncio.gather(blocked.awaitable, other.awaitable)
    assert asyncio.run(both()) == [200, 200]
    assert not n.z.building and b"z" in n.z.orders
    assert n("ZCARD", "z") == 200 and _scores(n, "z") == model  # (answered at once: held)
    mirror_equals_rebuild(n, b"z")


def test_a_mirror_built_in_steps_is_dropped_when_its_key_is_deleted_meanwhile(n, monkeypatch):
    monkeypatch.setattr(Z, "BUILD_STEP", 10)
    n("ZADD", "z", *[x for i in range(200) for x in (i, b"m%03d" % i)])
    n.z.orders.clear()
    n.z.cached = 0
    blocked = n("ZRANGE", "z", 0, -1, "WITHSCORES")
    assert type(blocked) is resp.Blocking
    n("DEL", "z")
    n("ZADD", "z", 1, "a", 2, "b")
    assert asyncio.run(blocked.awaitable) == [b"a", b"1", b"b", b"2"]
    assert n("ZCARD", "z") == 2 and not n.z.building


def test_a_mirror_is_built_at_once_inside_a_transaction_and_for_a_small_zset(n, monkeypatch):
    monkeypatch.setattr(Z, "BUILD_STEP", 10)
    n("ZADD", "small", 1, "a", 2, "b")
    n.z.orders.clear()
    assert n("ZRANK", "small", "b") == 1  # within the steps a command runs at once
    n("ZADD", "z", *[x for i in range(200) for x in (i, b"m%03d" % i)])
    n.z.orders.clear()
    n.z.cached = 0
    assert n("MULTI") == reply.OK and n("ZCARD", "z") == reply.QUEUED
    assert n("EXEC") == [200]


def test_ranks_and_ranges_of_a_large_zset_come_from_the_mirror(n):
    n("ZADD", "big", *[x for i in range(3000) for x in (i % 97, b"m%05d" % i)])
    assert n("ZCARD", "big") == 3000
    o = n.z.orders[b"big"]
    ordered = sorted((i % 97, b"m%05d" % i) for i in range(3000))
    for r in (0, 1, 1499, 2999):
        assert n("ZRANK", "big", ordered[r][1]) == r
        assert n("ZREVRANK", "big", ordered[r][1]) == 2999 - r
    assert n("ZRANGE", "big", 100, 104) == [m for _, m in ordered[100:105]]
    assert n("ZRANGEBYSCORE", "big", "(3", 4, "LIMIT", 2, 3) == [m for s, m in ordered if 3 < s <= 4][2:5]
    assert n("ZCOUNT", "big", 10, "(20") == sum(1 for s, _ in ordered if 10 <= s < 20)
    assert n.z.orders[b"big"] is o  # no rebuild along the way


def test_zscan_of_a_big_zset_returns_every_member_once_while_it_changes(n):
    n("ZADD", "big", *[x for i in range(1000) for x in (i, b"m%d" % i)])
    seen: list[bytes] = []
    cursor = b"0"
    rounds = 0
    while True:
        cursor, items = n("ZSCAN", "big", cursor, "COUNT", 50)
        seen += items[0::2]
        n("ZADD", "big", 5000 + rounds, b"new%d" % rounds)  # concurrent changes
        rounds += 1
        if cursor == b"0":
            break
    assert rounds > 10
    assert {b"m%d" % i for i in range(1000)} <= set(seen)


# -- per-member TTL and the head's delete clock ------------------------------------------------------

def test_a_member_whose_own_ttl_passed_leaves_ranges_ranks_and_counts(n):
    n("ZADD", "z", 1, "a", 2, "b", 3, "c")
    assert n("ZRANGE", "z", 0, -1) == [b"a", b"b", b"c"]
    # another module (EXPIREMEMBER) sets b's deadline: an envelope rewrite of its record
    p = Z.prefixes(b"z")
    now = n.ks.now()
    rec = n.ks.get(p.member_key(b"b"))
    n.ks.apply([(p.member_key(b"b"), env.with_ttl(rec, n.ks.stamp(), 1, now + 1000))])
    # the index is not rewritten (the member's deadline decides), the mirror knows it
    assert n("ZRANK", "z", "c") == 2
    clock = n.ks.now
    n.ks.now = lambda: now + 1000  # the deadline passes
    try:
        assert n("ZRANGE", "z", 0, -1) == [b"a", b"c"]
        assert n("ZRANK", "z", "c") == 1 and n("ZRANK", "z", "b") is None
        assert n("ZCARD", "z") == 2 and n("ZSCORE", "z", "b") is None
        assert n("ZCOUNT", "z", "-inf", "+inf") == 2
        assert_index_agrees(n, b"z")
        mirror_equals_rebuild(n, b"z")
    finally:
        n.ks.now = clock


def test_no_command_writes_what_it_did_not_change(n):
    n("ZADD", "z", 1, "a", 2, "b")
    n.engine.commit()
    seq = n.engine.log_seq
    mirror_equals_rebuild(n, b"z")  # reads write nothing (no repair of any kind)
    n("ZRANGE", "z", 0, -1)
    n("ZSCORE", "z", "a")
    n.engine.commit()
    assert n.engine.log_seq == seq


# -- merges from peers ----------------------------------------------------------------------------------

def test_the_mirror_follows_records_merged_from_a_peer(pair):
    a, b = pair
    a("ZADD", "z", 1, "x", 2, "y")
    a.ship_to(b)
    assert b("ZRANGE", "z", 0, -1, "WITHSCORES") == [b"x", b"1", b"y", b"2"]  # b builds its mirror
    a("ZADD", "z", 0, "y", 3, "w")
    a("ZREM", "z", "x")
    a.ship_to(b)
    assert b("ZRANGE", "z", 0, -1, "WITHSCORES") == [b"y", b"0", b"w", b"3"]
    assert b.z.orders.get(b"z") is not None
    mirror_equals_rebuild(b, b"z")
    assert_index_agrees(b, b"z")


def _member_rec(score: float, dot: tuple[int, int], covers=(), ttl: int = 0) -> bytes:
    e = orswot.Element(((dot, zset.encode_value(score)),), tuple(sorted(covers, reverse=True)))
    return env.pack(env.make_flags(zset.RTYPE), dot[0], dot[1], ttl, orswot.to_bytes(e))


def _remove_rec(dot: tuple[int, int], covers) -> bytes:
    e = orswot.Element((), tuple(sorted(covers, reverse=True)))
    return env.pack(env.make_flags(zset.RTYPE, tombstone=True), dot[0], dot[1], 0, orswot.to_bytes(e))


@pytest.mark.parametrize("order", [(0, 1, 2), (2, 1, 0), (1, 2, 0), (0, 2, 1)])
def test_a_removal_racing_an_older_unseen_add_of_the_same_score_keeps_the_member_ranged(n, order):
    """Node 1 adds m at 1 (dot 10); node 3 removes it (dot 30, covers 10), and (as older
    versions did) tombstones its index key; node 2, which never saw dot 10, adds m at 1
    again with an older clock (dot 25). Merged, m is live at 1 while the index key at 1 is
    a tombstone at 30 (it beats the live key at 25): readers confirm the index against the
    member, not the key's envelope, so m is in every range, whatever order the records come
    in, and nothing is written to repair anything."""
    n("ZCARD", "any")  # the first sorted-set command attaches the mirrors to the feed
    p = Z.prefixes(b"z")
    h = n.ks.get(p.head)
    assert h is None
    from marekvs.core import head
    hd = head.new(head.CollectionType.ZSET, 5, 1)
    batches = [
        [(p.head, hd),
         (p.member_key(b"m"), _member_rec(1.0, (10, 1))), (p.index_key(1.0, b"m"), zset.index_live(10, 1)),
         (p.member_key(b"k"), _member_rec(0.0, (10, 1))), (p.index_key(0.0, b"k"), zset.index_live(10, 1))],
        [(p.member_key(b"m"), _remove_rec((30, 3), [(10, 1)])),
         (p.index_key(1.0, b"m"), env.pack(env.make_flags(zset.RTYPE, tombstone=True), 30, 3, 0))],
        [(p.member_key(b"m"), _member_rec(1.0, (25, 2))), (p.index_key(1.0, b"m"), zset.index_live(25, 2))],
    ]
    for i in order:
        n.engine.apply(batches[i], log_entry=False)
    n.engine.commit()
    assert n("ZRANGE", "z", 0, -1, "WITHSCORES") == [b"k", b"0", b"m", b"1"]
    assert n("ZRANGEBYSCORE", "z", 1, 1) == [b"m"] and n("ZRANK", "z", "m") == 1
    mirror_equals_rebuild(n, b"z")
    assert n.engine.read_log(0, 100) == []  # nothing written: a merge is the records alone


def test_concurrent_adds_keep_the_newest_score_and_the_index_follows(pair):
    a, b = pair
    a("ZADD", "z", 1, "m")
    b("ZADD", "z", 2, "m")  # concurrent: neither saw the other
    a.ship_to(b)
    b.ship_to(a)
    sa, sb = a("ZSCORE", "z", "m"), b("ZSCORE", "z", "m")
    assert sa == sb == 2.0  # b's add has the newer dot
    for x in (a, b):
        assert_index_agrees(x, b"z")
        assert x("ZRANGEBYSCORE", "z", 1, 1) == []
        assert x("ZRANGE", "z", 0, -1, "WITHSCORES") == [b"m", b"2"]
    assert a("DEBUG", "DIGEST") == b("DEBUG", "DIGEST")


def test_concurrent_removals_of_the_last_members_leave_no_key(pair):
    a, b = pair
    a("ZADD", "z", 1, "x", 2, "y")
    a.ship_to(b)
    a("ZREM", "z", "x")  # a still counts y
    b("ZREM", "z", "y")  # b still counts x
    a.ship_to(b)
    b.ship_to(a)
    for x in (a, b):  # no member left: no key, with nothing written by the merge
        assert x("EXISTS", "z") == 0 and x("ZCARD", "z") == 0
    assert a("DEBUG", "DIGEST") == b("DEBUG", "DIGEST") == reply.Simple(b"0" * 40)


def test_a_concurrent_add_survives_the_removal_of_the_last_member(pair):
    """The reproduction of the lost write: node a empties the zset while node b, which had
    not seen the removal, adds a member; both keep it."""
    a, b = pair
    a("ZADD", "z", 1, "a")
    a.ship_to(b)
    assert b("ZADD", "z", 2, "b") == 1  # acknowledged
    assert a("ZREM", "z", "a") == 1  # a had not seen b: the zset is empty on a
    assert a("EXISTS", "z") == 0
    a.ship_to(b)
    b.ship_to(a)
    for x in (a, b):
        assert x("ZRANGE", "z", 0, -1, "WITHSCORES") == [b"b", b"2"]


def test_random_concurrent_histories_converge_with_an_agreeing_index(pair):
    a, b = pair
    rnd = random.Random(3)
    members = [b"m%d" % i for i in range(12)]
    for _ in range(30):
        for x in (a, b):
            for _ in range(rnd.randint(1, 8)):
                op = rnd.randrange(6)
                m = rnd.choice(members)
                if op < 3:
                    x("ZADD", "z", rnd.randint(0, 4), m)
                elif op < 4:
                    x("ZINCRBY", "z", 1, m)
                elif op < 5:
                    x("ZREM", "z", m)
                else:
                    x("ZPOPMIN", "z")
        if rnd.random() < 0.7:
            a.ship_to(b)
        if rnd.random() < 0.7:
            b.ship_to(a)
    a.ship_to(b)
    b.ship_to(a)
    assert a("DEBUG", "DIGEST") == b("DEBUG", "DIGEST")
    assert a("ZRANGE", "z", 0, -1, "WITHSCORES") == b("ZRANGE", "z", 0, -1, "WITHSCORES")
    for x in (a, b):
        assert_index_agrees(x, b"z")
        mirror_equals_rebuild(x, b"z")
    assert index_entries(a, b"z") == index_entries(b, b"z")


# -- blocking pops -------------------------------------------------------------------------------

def _run(node: N, coro):
    async def main():
        node.node.start(asyncio.get_running_loop())
        try:
            return await coro()
        finally:
            node.node.sweeper.stop()

    return asyncio.run(main())


def test_bzpopmin_is_woken_by_another_clients_zadd(n):
    async def go():
        waiter = n.node.new_context()
        b = n.node.dispatch(waiter, [b"BZPOPMIN", b"q1", b"q2", b"0"])
        assert type(b) is reply.Blocking
        task = asyncio.ensure_future(b.awaitable)
        await asyncio.sleep(0.01)
        assert not task.done()
        n("ZADD", "q2", 7, "x", 3, "y")
        assert await asyncio.wait_for(task, 5) == [b"q2", b"y", 3.0]
        assert n("ZRANGE", "q2", 0, -1) == [b"x"]
    _run(n, go)


def test_bzpopmax_is_woken_by_a_replicated_record_and_times_out_otherwise(pair):
    a, b = pair

    async def go():
        waiter = b.node.new_context()
        t0 = asyncio.get_running_loop().time()
        r = await b.node.dispatch(waiter, [b"BZPOPMAX", b"q", b"0.05"]).awaitable
        assert r is reply.NULL_ARRAY and asyncio.get_running_loop().time() - t0 >= 0.04
        task = asyncio.ensure_future(b.node.dispatch(waiter, [b"BZMPOP", b"0", b"1", b"q", b"MAX",
                                                             b"COUNT", b"5"]).awaitable)
        await asyncio.sleep(0.01)
        a("ZADD", "q", 1, "lo", 9, "hi")
        a.ship_to(b)
        assert await asyncio.wait_for(task, 5) == [b"q", [[b"hi", 9.0], [b"lo", 1.0]]]
        assert b("EXISTS", "q") == 0
    _run(b, go)


def test_blocked_pops_are_served_first_blocked_first_served(n):
    async def go():
        c1, c2 = n.node.new_context(), n.node.new_context()
        t1 = asyncio.ensure_future(n.node.dispatch(c1, [b"BZPOPMIN", b"q", b"0"]).awaitable)
        t2 = asyncio.ensure_future(n.node.dispatch(c2, [b"BZPOPMIN", b"q", b"0"]).awaitable)
        await asyncio.sleep(0.01)
        n("ZADD", "q", 1, "a")
        assert await asyncio.wait_for(t1, 5) == [b"q", b"a", 1.0]
        await asyncio.sleep(0.01)
        assert not t2.done()
        n("ZADD", "q", 2, "b")
        assert await asyncio.wait_for(t2, 5) == [b"q", b"b", 2.0]
    _run(n, go)


def test_blocking_pops_inside_multi_answer_at_once(n):
    n.c.deny_blocking = True
    try:
        assert n("BZPOPMIN", "q", "0") is reply.NULL_ARRAY
        assert n("BZMPOP", "0", "1", "q", "MIN") is reply.NULL_ARRAY
    finally:
        n.c.deny_blocking = False


# -- reply shapes -----------------------------------------------------------------------------------

def test_resp3_shapes(n):
    n("ZADD", "z", 1.5, "a", 2, "b")
    assert n.wire("ZSCORE", "z", "a", proto=3) == b",1.5\r\n"
    assert n.wire("ZSCORE", "z", "a", proto=2) == b"$3\r\n1.5\r\n"
    assert n.wire("ZRANGE", "z", 0, 0, "WITHSCORES", proto=3) == b"*1\r\n*2\r\n$1\r\na\r\n,1.5\r\n"
    assert n.wire("ZRANK", "z", "b", "WITHSCORE", proto=3) == b"*2\r\n:1\r\n,2\r\n"
    assert n.wire("ZRANK", "z", "nope", "WITHSCORE", proto=3) == b"_\r\n"
    assert n.wire("ZRANK", "z", "nope", "WITHSCORE", proto=2) == b"*-1\r\n"
    assert n.wire("ZREVRANK", "z", "b", "WITHSCORE", proto=2) == b"*2\r\n:0\r\n$1\r\n2\r\n"
    assert str(n("ZRANK", "z", "b", "WITHSCORES")) == "ERR syntax error"
    n("GEOADD", "g", "13.361389", "38.115556", "p")
    assert n.wire("GEOPOS", "g", "p", proto=3) == b"*1\r\n*2\r\n,13.36138933897018433\r\n,38.11555639549629859\r\n"
    assert n.wire("GEOPOS", "g", "p", proto=2) == \
        b"*1\r\n*2\r\n$20\r\n13.36138933897018433\r\n$20\r\n38.11555639549629859\r\n"


def test_bulk_array_replies_encode_as_arrays_of_bulk_strings():
    from marekvs.commands.reply import BulkArray
    items = [b"", b"a", b"element:000000000001", b"x" * 1023, b"y" * 1024, b"z" * 5000]
    for proto in (2, 3):
        assert resp.encode(BulkArray(items), proto) == resp.encode(list(items), proto)
        assert resp.encode(BulkArray(), proto) == b"*0\r\n"
