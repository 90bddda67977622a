"""In-process tests of the list family (keyspace/lists.py, commands/lists.py) on a real node.

Commands run through a real ``marekvs.node.Node``'s ``dispatch`` (RocksDB in a temporary
directory, no listener). Besides the replies, these tests hold the per-list hints to what
the records say: after any sequence of commands, local or replicated records, DEL, SET,
expiry, the hint a command uses equals one built from scratch by a scan, and a queue
(pushes at one end, pops at the other) never rescans the tombstones its pops left.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marekvs.commands.reply import NULL_ARRAY, Blocking, Err
from marekvs.config import Config
from marekvs.core import envelope as env
from marekvs.core import head, listelem
from marekvs.core import keys as K
from marekvs.core.keys import LIST_CENTER
from marekvs.keyspace import lists as kl
from marekvs.keyspace.status import WrongType
from marekvs.node import Node

C = LIST_CENTER


class Client:
    """A real node in-process with one client context."""

    def __init__(self, path):
        self.node = Node(Config(data_dir=str(path), node_id=1, durability="no"))
        self.ks = self.node.ks
        self.ctx = self.node.new_context()

    def __call__(self, *argv):
        return self.node.dispatch(self.ctx, [a if isinstance(a, bytes) else str(a).encode() for a in argv])

    @property
    def lx(self) -> kl.Lists:
        return kl.lists_of(self.ks)

    def positions(self, key: bytes) -> list[int]:
        """Positions of the live elements, read from the records themselves."""
        _, hd, stored = kl.lookup(self.lx, key, self.ks.now())
        if hd is None:
            return []
        prefix = K.collection_prefix(K.TAG_LIST, key)
        return [int.from_bytes(s, "big") for s, _ in self.ks.elements(K.TAG_LIST, key, hd, self.ks.now())
                if len(s) == 8 and prefix]

    def peer_apply(self, records):
        """Records arriving from a peer: the replication apply path (no log entry)."""
        top = max(env.hlc_of(r) for _, r in records)
        self.node.hlc.update(top)
        self.node.engine.apply(records, log_entry=False)

    def close(self):
        self.node.close()


@pytest.fixture
def r(tmp_path):
    c = Client(tmp_path / "db")
    yield c
    c.close()


def assert_hint_exact(c: Client, key: bytes) -> None:
    """The hint held for ``key`` (if any) says what a fresh scan says."""
    lx = c.lx
    h = lx.hints.get(key)
    if h is None:
        return
    now = c.ks.now()
    keys, _, stored = kl.lookup(lx, key, now)
    fresh = kl.Lists(c.ks, None).hint(key, stored, now)
    used = lx.hint(key, stored, now)
    assert (used.count, used.clock) == (fresh.count, fresh.clock)
    if fresh.count:
        assert (used.first, used.last) == (fresh.first, fresh.last)


# -- core rules inlined here ---------------------------------------------------------------

@given(tomb=st.booleans(), hlc=st.integers(0, 50), clock=st.integers(0, 50),
       ttl=st.sampled_from([0, 5, 10, 15]), now=st.integers(0, 20))
def test_alive_is_cores_element_liveness(tomb, hlc, clock, ttl, now):
    rec = (listelem.tombstone(hlc, 1) if tomb else listelem.new(b"v", hlc, 1))
    rec = rec[:11] + ttl.to_bytes(8, "big") + rec[19:]
    hd = head.new(head.CollectionType.LIST, 1, 1)
    hd = hd[:21] + clock.to_bytes(8, "big") + hd[29:]
    assert kl.alive(rec, clock, now) == head.element_live(hd, rec, now)


def test_lookup_answers_as_keyspace_collection(r):
    r("RPUSH", "l", "a")
    r("SET", "s", "x")
    r("HSET", "h", "f", "v")  # (unknown command until hashes exist: then an absent key)
    r("RPUSH", "gone", "a")
    r("DEL", "gone")
    r("RPUSH", "emptied", "a")
    r("RPOP", "emptied")
    now = r.ks.now()
    for key in (b"l", b"s", b"h", b"gone", b"emptied", b"none"):
        try:
            want = r.ks.existing(key, head.CollectionType.LIST, now)
        except WrongType:
            with pytest.raises(WrongType):
                kl.lookup(r.lx, key, now)
            continue
        keys, hd, stored = kl.lookup(r.lx, key, now)
        assert (None if hd is None else (keys.head, hd)) == want
        assert stored == r.ks.get(keys.head)
        assert keys.prefix == K.collection_prefix(K.TAG_LIST, key)


# -- the records -------------------------------------------------------------------------

def test_pushes_take_positions_from_the_center_outwards(r):
    assert r("RPUSH", "l", "a", "b") == 2
    assert r("LPUSH", "l", "z", "y") == 4
    assert r.positions(b"l") == [C - 2, C - 1, C, C + 1]
    assert r("LRANGE", "l", 0, -1) == [b"y", b"z", b"a", b"b"]
    hd = r.ks.get(K.encode_head_key(b"l"))
    assert head.type_name(hd) == "list" and env.is_live(hd, r.ks.now())
    rec = r.ks.get(K.encode_list_key(b"l", C))
    assert rec[0] == env.make_flags(env.RecordType.LIST) and rec[env.HEADER:] == b"a"


def test_a_pop_writes_a_tombstone_and_the_last_pop_nothing_more(r):
    r("RPUSH", "l", "a", "b")
    assert r("LPOP", "l") == b"a"
    assert env.is_tombstone(r.ks.get(K.encode_list_key(b"l", C)))
    assert r("EXISTS", "l") == 1
    assert r("RPOP", "l") == b"b"
    assert r("EXISTS", "l") == 0 and r("TYPE", "l") == b"none"
    assert env.is_tombstone(r.ks.get(K.encode_list_key(b"l", C + 1)))
    assert env.is_live(r.ks.get(K.encode_head_key(b"l")), r.ks.now())  # no head tombstone: no element, no key
    assert r("LPUSH", "l", "new") == 1  # the popped elements stay dead
    assert r("LRANGE", "l", 0, -1) == [b"new"]


def test_ltrim_and_end_lrem_leave_the_kept_elements_in_place(r):
    r("RPUSH", "l", *"abcdef")
    assert r("LTRIM", "l", 1, -2) == b"OK"
    assert r.positions(b"l") == [C + 1, C + 2, C + 3, C + 4]
    assert r("LREM", "l", 1, "b") == 1  # the first one: removed from the end, no rewrite
    assert r.positions(b"l") == [C + 2, C + 3, C + 4]
    assert r("LREM", "l", 0, "d") == 1  # from the middle: a rebuild from the center
    assert r.positions(b"l") == [C, C + 1]
    assert r("LRANGE", "l", 0, -1) == [b"c", b"e"]
    assert r("LTRIM", "l", 5, 10) == b"OK"
    assert r("EXISTS", "l") == 0


def test_linsert_next_to_an_end_is_a_push_and_elsewhere_a_rebuild(r):
    r("RPUSH", "l", "a", "b", "c")
    assert r("LINSERT", "l", "BEFORE", "a", "x") == 4
    assert r.positions(b"l") == [C - 1, C, C + 1, C + 2]
    assert r("LINSERT", "l", "AFTER", "c", "y") == 5
    assert r("LINSERT", "l", "after", "a", "m") == 6
    assert r.positions(b"l") == [C + i for i in range(6)]
    assert r("LRANGE", "l", 0, -1) == [b"x", b"a", b"m", b"b", b"c", b"y"]
    assert r("LINSERT", "l", "before", "zz", "q") == -1
    assert r("LINSERT", "nokey", "before", "a", "q") == 0


def test_lmove_to_the_same_list(r):
    r("RPUSH", "l", "a", "b", "c")
    assert r("RPOPLPUSH", "l", "l") == b"c"
    assert r("LRANGE", "l", 0, -1) == [b"c", b"a", b"b"]
    assert r.positions(b"l") == [C - 1, C, C + 1]  # still dense
    assert r("LMOVE", "l", "l", "LEFT", "LEFT") == b"c"
    assert r("LMOVE", "l", "l", "LEFT", "RIGHT") == b"c"
    assert r("LRANGE", "l", 0, -1) == [b"a", b"b", b"c"]
    r("RPUSH", "one", "x")
    assert r("LMOVE", "one", "one", "RIGHT", "LEFT") == b"x"
    assert r("LRANGE", "one", 0, -1) == [b"x"]


def test_writing_another_type_where_a_list_lives_is_wrongtype(r):
    r("RPUSH", "l", "a")
    r("SET", "s", "x")
    wrong = "WRONGTYPE Operation against a key holding the wrong kind of value"
    for args in (("LPUSH", "s", "a"), ("LLEN", "s"), ("LRANGE", "s", 0, 1), ("LPOP", "s"), ("LPOP", "s", 0),
                 ("LMOVE", "l", "s", "LEFT", "LEFT"), ("LMOVE", "s", "l", "LEFT", "LEFT"), ("GET", "l"),
                 ("INCR", "l"), ("BLPOP", "s", 0), ("LMPOP", 2, "none", "s", "LEFT")):
        got = r(*args)
        assert type(got) is Err and got == wrong, args
    assert r("LMOVE", "none", "s", "LEFT", "LEFT") is None  # no source: dst never checked
    assert r("LRANGE", "l", 0, -1) == [b"a"]  # the failed LMOVE popped nothing
    assert r("SET", "l", "str") == b"OK"  # SET replaces any type
    assert r("TYPE", "l") == b"string" and r("LLEN", "l") == wrong


def test_reply_shapes_of_missing_keys(r):
    assert r("LPOP", "none") is None
    assert r("LPOP", "none", 2) is NULL_ARRAY
    assert r("LPOP", "none", 0) is NULL_ARRAY
    r("RPUSH", "l", "a")
    assert r("LPOP", "l", 0) == []
    assert r("LMPOP", 1, "none", "LEFT") is NULL_ARRAY
    assert r("LPOS", "none", "a") is None and r("LPOS", "none", "a", "COUNT", 0) == []
    assert r("LINDEX", "none", "notanumber") is None  # the key first, then the index
    assert r("LSET", "none", "x", "v") == "ERR no such key"
    assert r("LRANGE", "none", 0, -1) == [] and r("LLEN", "none") == 0


def test_expiry_rides_the_head(r):
    r("RPUSH", "l", "a", "b")
    assert r("PEXPIRE", "l", 100_000) == 1
    assert 0 < r("PTTL", "l") <= 100_000
    assert r("PEXPIRE", "l", 20) == 1
    while r("PTTL", "l") != -2:  # (the wall clock passing 20 ms, which it always does)
        time.sleep(0.005)
    assert r("EXISTS", "l") == 0 and r("LLEN", "l") == 0 and r("LPOP", "l") is None
    builds = r.lx.builds
    assert r("RPUSH", "l", "c") == 1  # expired elements stay dead under the new head
    assert r("LRANGE", "l", 0, -1) == [b"c"]
    assert r.lx.builds == builds  # the expiry emptied the hint without a scan
    assert_hint_exact(r, b"l")


# -- the hints ---------------------------------------------------------------------------

def test_a_queue_never_rescans_its_tombstones(r):
    """1000 RPUSH then LPOPs: the hint is built once (the first RPUSH, an empty scan)
    and no pop scans; the last pop deletes the list."""
    lx = r.lx
    for i in range(1000):
        r("RPUSH", "q", i)
    engine = r.node.engine
    scans = []
    real_scan = engine.scan
    engine.scan = lambda *a, **k: scans.append(a) or real_scan(*a, **k)
    try:
        for i in range(1000):
            assert r("LPOP", "q") == b"%d" % i
            if i % 100 == 0:
                assert r("LLEN", "q") == 999 - i
                assert r("LINDEX", "q", 0) == (b"%d" % (i + 1) if i < 999 else None)
    finally:
        engine.scan = real_scan
    assert scans == [] and lx.builds == 1
    assert r("EXISTS", "q") == 0


def test_a_hint_is_built_by_one_scan_after_a_restart(tmp_path):
    c = Client(tmp_path / "db")
    for i in range(50):
        c("RPUSH", "q", i)
    for _ in range(20):
        c("LPOP", "q")
    c.close()
    c = Client(tmp_path / "db")
    try:
        assert c("LLEN", "q") == 30 and c.lx.builds == 1
        assert c("LPOP", "q") == b"20" and c("RPOP", "q") == b"49" and c.lx.builds == 1
    finally:
        c.close()


def test_replicated_records_update_the_hint(r):
    r("RPUSH", "l", "a", "b", "c")
    assert r("LLEN", "l") == 3
    stamp = r.node.hlc.now() + 1000
    peer = 2
    prefix = K.collection_prefix(K.TAG_LIST, b"l")
    # a peer pushed at both ends and popped the middle element of our view
    r.peer_apply([(prefix + (C - 1).to_bytes(8, "big"), listelem.new(b"p0", stamp, peer)),
                  (prefix + (C + 3).to_bytes(8, "big"), listelem.new(b"p4", stamp + 1, peer)),
                  (prefix + (C + 1).to_bytes(8, "big"), listelem.tombstone(stamp + 2, peer))])
    assert r("LLEN", "l") == 4
    assert r("LRANGE", "l", 0, -1) == [b"p0", b"a", b"c", b"p4"]  # a sparse list: scans
    assert r("LINDEX", "l", 2) == b"c" and r("LINDEX", "l", -1) == b"p4"
    assert r("LSET", "l", 2, "C") == b"OK"
    assert r("RPOP", "l", 2) == [b"p4", b"C"]
    assert r("LPOP", "l") == b"p0"
    assert r("LRANGE", "l", 0, -1) == [b"a"]
    assert_hint_exact(r, b"l")
    # the peer's DEL, newer than everything we hold: the hint empties without a scan
    builds = r.lx.builds
    hd = r.ks.get(K.encode_head_key(b"l"))
    r.peer_apply([(K.encode_head_key(b"l"), head.tombstone(hd, r.node.hlc.now() + 1000, peer))])
    assert r("LLEN", "l") == 0 and r("EXISTS", "l") == 0 and r.lx.builds == builds


def test_a_concurrent_push_survives_the_pop_of_the_last_element(r):
    """A peer's push, concurrent with our pop-to-empty, arrives after it: the pop removed
    only the element it saw, so the list exists again with the pushed one (the lost-write
    reproduction of RPUSH on one node while another LPOPs the last element)."""
    r("RPUSH", "l", "a")
    stamp = r.node.hlc.now() - 5  # older than the pop: it did not see it
    assert r("RPOP", "l") == b"a"
    assert r("EXISTS", "l") == 0
    r.peer_apply([(K.encode_list_key(b"l", C + 1), listelem.new(b"b", stamp, 2))])
    assert r("EXISTS", "l") == 1 and r("LRANGE", "l", 0, -1) == [b"b"]
    assert r("RPUSH", "l", "next") == 2
    assert r("LRANGE", "l", 0, -1) == [b"b", b"next"]
    assert_hint_exact(r, b"l")


def test_a_push_after_a_del_it_did_not_see_keeps_the_list(r):
    """A peer's push newer than our DEL, made on a node that had not seen it: the DEL
    gates only what is older, and the list exists (its head dead) with that element."""
    r("RPUSH", "l", "a")
    assert r("DEL", "l") == 1
    stamp = r.node.hlc.now() + 1000
    r.peer_apply([(K.encode_list_key(b"l", C + 1), listelem.new(b"late", stamp, 2))])
    assert r("EXISTS", "l") == 1 and r("LRANGE", "l", 0, -1) == [b"late"] and r("TTL", "l") == -1
    assert r("RPUSH", "l", "next") == 2
    assert r("LRANGE", "l", 0, -1) == [b"late", b"next"]
    assert_hint_exact(r, b"l")


def test_a_wrong_hint_is_noticed_and_rebuilt(r):
    """A record changed behind the feed's back (the sweeper purging is the one real
    case, and it only purges dead records): the point reads notice, the hint goes."""
    r("RPUSH", "l", "a", "b", "c")
    r.node.engine.purge(K.encode_list_key(b"l", C))
    r.node.engine.commit()
    assert r("LRANGE", "l", 0, -1) == [b"b", b"c"]
    assert r("LLEN", "l") == 2
    assert r("LPOP", "l") == b"b"


OPS = st.one_of(
    st.tuples(st.sampled_from(["LPUSH", "RPUSH", "LPUSHX", "RPUSHX"]), st.sampled_from(["k0", "k1"]),
              st.lists(st.sampled_from("abc"), min_size=1, max_size=3)),
    st.tuples(st.sampled_from(["LPOP", "RPOP"]), st.sampled_from(["k0", "k1"]), st.integers(1, 4)),
    st.tuples(st.just("LSET"), st.sampled_from(["k0", "k1"]), st.integers(-4, 4), st.sampled_from("xy")),
    st.tuples(st.just("LINSERT"), st.sampled_from(["k0", "k1"]), st.sampled_from(["BEFORE", "AFTER"]),
              st.sampled_from("abcx"), st.sampled_from("mn")),
    st.tuples(st.just("LREM"), st.sampled_from(["k0", "k1"]), st.integers(-2, 2), st.sampled_from("abcx")),
    st.tuples(st.just("LTRIM"), st.sampled_from(["k0", "k1"]), st.integers(-4, 4), st.integers(-4, 4)),
    st.tuples(st.just("LMOVE"), st.sampled_from(["k0", "k1"]), st.sampled_from(["k0", "k1"]),
              st.sampled_from(["LEFT", "RIGHT"]), st.sampled_from(["LEFT", "RIGHT"])),
    st.tuples(st.just("DEL"), st.sampled_from(["k0", "k1"])),
    st.tuples(st.just("PEER"), st.sampled_from(["k0", "k1"]), st.integers(-3, 3), st.booleans()),
)


class Model:
    """Redis's lists as Python lists."""

    def __init__(self):
        self.lists: dict[str, list[str]] = {}

    def apply(self, op):
        name, key = op[0], op[1]
        lst = self.lists.setdefault(key, [])
        if name in ("LPUSH", "LPUSHX"):
            if name == "LPUSH" or lst:
                for v in op[2]:
                    lst.insert(0, v)
        elif name in ("RPUSH", "RPUSHX"):
            if name == "RPUSH" or lst:
                lst.extend(op[2])
        elif name in ("LPOP", "RPOP"):
            for _ in range(min(op[2], len(lst))):
                lst.pop(0 if name == "LPOP" else -1)
        elif name == "LSET":
            if -len(lst) <= op[2] < len(lst):
                lst[op[2]] = op[3]
        elif name == "LINSERT":
            if op[3] in lst:
                i = lst.index(op[3])
                lst.insert(i if op[2] == "BEFORE" else i + 1, op[4])
        elif name == "LREM":
            count, v = op[2], op[3]
            idx = [i for i, x in enumerate(lst) if x == v]
            if count < 0:
                idx = idx[::-1][:-count]
            elif count > 0:
                idx = idx[:count]
            for i in sorted(idx, reverse=True):
                del lst[i]
        elif name == "LTRIM":
            n = len(lst)
            s, e = op[2] + n if op[2] < 0 else op[2], op[3] + n if op[3] < 0 else op[3]
            s = max(s, 0)
            lst[:] = [] if s > e or s >= n else lst[s:min(e, n - 1) + 1]
        elif name == "LMOVE":
            src, dst = self.lists.setdefault(op[1], []), self.lists.setdefault(op[2], [])
            if src:
                v = src.pop(0 if op[3] == "LEFT" else -1)
                dst.insert(0 if op[4] == "LEFT" else len(dst), v)
        elif name == "DEL":
            lst.clear()


@settings(max_examples=60, deadline=None)
@given(ops=st.lists(OPS, min_size=1, max_size=40))
def test_random_commands_match_a_model_and_the_hints_stay_exact(tmp_path_factory, ops):
    c = Client(tmp_path_factory.mktemp("model") / "db")
    model = Model()
    stamp = itertools.count(1)
    try:
        for op in ops:
            if op[0] == "PEER":
                # a peer overwrites (or pops) the element at rank op[2]: no model change
                # for an overwrite with the same value; a pop is an LREM of that rank
                key, rank, pop = op[1], op[2], op[3]
                lst = model.lists.get(key, [])
                if not lst or not -len(lst) <= rank < len(lst):
                    continue
                pos = c.positions(key.encode())[rank]
                hlc = c.node.hlc.now() + 1000 + next(stamp)
                ik = K.encode_list_key(key.encode(), pos)
                if pop and len(lst) > 1:
                    c.peer_apply([(ik, listelem.tombstone(hlc, 2))])
                    del lst[rank]
                else:
                    c.peer_apply([(ik, listelem.new(lst[rank].encode(), hlc, 2))])
                continue
            got = c(*op[:2], *[x for a in op[2:] for x in (a if isinstance(a, list) else [a])])
            if op[0] == "LSET":
                lst = model.lists.get(op[1], [])
                want_err = None if -len(lst) <= op[2] < len(lst) else (
                    "ERR index out of range" if lst else "ERR no such key")
                assert (got if type(got) is Err else None) == want_err, (op, got)
            else:
                assert type(got) is not Err, (op, got)
            model.apply(op)
            for key in ("k0", "k1"):
                want = [v.encode() for v in model.lists.get(key, [])]
                assert c("LRANGE", key, 0, -1) == want, (op, key)
                assert c("LLEN", key) == len(want)
                assert c("EXISTS", key) == (1 if want else 0)
                assert_hint_exact(c, key.encode())
    finally:
        c.close()


# -- blocking, in-process --------------------------------------------------------------------

def run_loop(c: Client, coro):
    async def main():
        c.node.start(asyncio.get_running_loop())
        try:
            return await coro()
        finally:
            c.node.sweeper.stop()

    return asyncio.run(main())


def test_a_record_from_a_peer_wakes_blpop(r):
    async def go():
        ctx = r.node.new_context()
        b = r.node.dispatch(ctx, [b"BLPOP", b"q", b"0"])
        assert type(b) is Blocking
        task = asyncio.ensure_future(b.awaitable)
        await asyncio.sleep(0)
        stamp = r.node.hlc.now() + 1000
        r.peer_apply([(K.encode_head_key(b"q"), head.new(head.CollectionType.LIST, stamp, 2)),
                      (K.encode_list_key(b"q", C), listelem.new(b"from-peer", stamp + 1, 2))])
        assert await asyncio.wait_for(task, 5) == [b"q", b"from-peer"]
        assert r("EXISTS", "q") == 0  # the pop emptied it: one head tombstone
    run_loop(r, go)


def test_a_waiter_on_a_key_of_another_type_keeps_waiting(r):
    async def go():
        ctx = r.node.new_context()
        task = asyncio.ensure_future(r.node.dispatch(ctx, [b"BLPOP", b"k", b"other", b"0"]).awaitable)
        await asyncio.sleep(0)
        r("SET", "k", "string")
        await asyncio.sleep(0.01)
        assert not task.done()
        r("RPUSH", "other", "v")
        assert await asyncio.wait_for(task, 5) == [b"other", b"v"]
    run_loop(r, go)


def test_blocking_commands_inside_multi_answer_at_once(r):
    ctx = r.node.new_context()
    ctx.deny_blocking = True
    assert r.node.dispatch(ctx, [b"BLPOP", b"q", b"0"]) is NULL_ARRAY
    assert r.node.dispatch(ctx, [b"BLMPOP", b"0", b"1", b"q", b"LEFT"]) is NULL_ARRAY
    assert r.node.dispatch(ctx, [b"BLMOVE", b"q", b"d", b"LEFT", b"LEFT", b"0"]) is None  # a null bulk
    assert r.node.dispatch(ctx, [b"BRPOPLPUSH", b"q", b"d", b"0"]) is None


@pytest.mark.parametrize("arg, want", [
    (b"0", 0.0), (b"0.5", 0.5), (b"1e-3", 0.001), (b"0.0001", 0.001), (b"-0.0001", 0.0), (b"-0", 0.0),
    (b"0x10", 16.0), (b"1e-400", 0.001), (b"9223372036854775", 0.0)])
def test_timeouts_round_up_to_whole_milliseconds(arg, want):
    from marekvs.commands.lists import parse_timeout
    assert parse_timeout(arg) == want


@pytest.mark.parametrize("arg, err", [
    (b"-1", "ERR timeout is negative"), (b"inf", "ERR timeout is negative"), (b"1e100", "ERR timeout is negative"),
    (b"9223372036854776", "ERR timeout is negative"), (b"nan", "ERR timeout is not a float or out of range"),
    (b"x", "ERR timeout is not a float or out of range"), (b" 1", "ERR timeout is not a float or out of range")])
def test_bad_timeouts(arg, err):
    from marekvs.commands.errors import CommandError
    from marekvs.commands.lists import parse_timeout
    with pytest.raises(CommandError) as e:
        parse_timeout(arg)
    assert e.value.message == err
