"""The zset score index across replicas: members are ORSWOT records, the index is LWW
records the commands write next to them, and the index is a hint that readers confirm
against the members (keyspace/zsets.py, core/zset.py; crates_ref/DATA_MODEL.md 6.6).

A pure model of N replicas (core's records and merges only, no engine): random ZADDs and
ZREMs on random replicas (an older version's ZREM, which tombstoned the index key of the
score it removed, among them), records shipped between replicas in random order and
batches (duplicated, reordered, partial), each receiver applying core's merge and nothing
else. Properties: after the writes stop and every replica has everything, all replicas
hold the same bytes; and on every replica each live member has an index record (whatever
its envelope) at its current score, so a reader that walks the index and confirms each
entry against its member finds every member, at its score. (Before that, a partial
shipment can carry a member without its index record, as an anti-entropy repair of one
segment can: the mirror is built from the members first, so it still finds the member.)
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from laws_gen import element_records

from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core import orswot, zset
from marekvs.core.envelope import RecordType
from marekvs.core.merge import merge

KEY = b"z"
MEMBERS = [b"a", b"b", b"c"]
SCORES = [0.0, 1.0, 2.5, -1.0]
NOW = 0  # no TTLs in this model: liveness is the tombstone bit


def mk(member: bytes) -> bytes:
    return K.encode_zset_member_key(KEY, member)


def ik(score: float, member: bytes) -> bytes:
    return K.encode_zset_score_key(KEY, score, member)


class Replica:
    def __init__(self, origin: int):
        self.origin = origin
        self.recs: dict[bytes, bytes] = {}
        self.clock = 0

    def stamp(self) -> int:
        self.clock += 1
        return self.clock

    def put(self, key: bytes, rec: bytes) -> tuple[bytes | None, bytes] | None:
        """Merge one record in; (old, new) if it changed."""
        cur = self.recs.get(key)
        m = merge(key, cur, rec)
        if m is cur:
            return None
        self.recs[key] = m
        self.clock = max(self.clock, env.hlc_of(m))  # HLC receive rule
        return cur, m

    # -- commands (as keyspace/zsets.py writes them) ----------------------------------------
    def zadd(self, member: bytes, score: float) -> None:
        rec = self.recs.get(mk(member))
        t = self.stamp()
        self.put(mk(member), orswot.add(rec, zset.RTYPE, t, self.origin, zset.encode_value(score)))
        self.put(ik(score, member), zset.index_live(t, self.origin))

    def zrem(self, member: bytes, old_style: bool = False) -> None:
        """A removal; ``old_style`` also tombstones the index key of the score it removed,
        as versions before the index became a hint did (data written by them)."""
        rec = self.recs.get(mk(member))
        if rec is None or zset.score_of(rec) is None or env.is_tombstone(rec):
            return
        t = self.stamp()
        old = zset.score_of(rec)
        self.put(mk(member), orswot.remove(rec, t, self.origin))
        if old_style:
            self.put(ik(old, member), env.pack(env.make_flags(zset.RTYPE, tombstone=True), t, self.origin, 0))

    def receive(self, records: list[tuple[bytes, bytes]]) -> None:
        for key, rec in records:
            self.put(key, rec)

    # -- the property -------------------------------------------------------------------------
    def index_agrees(self) -> bool:
        """Every live member has an index record at its score, live or not."""
        for member in MEMBERS:
            rec = self.recs.get(mk(member))
            if rec is None or env.is_tombstone(rec):
                continue
            if ik(zset.score_of(rec), member) not in self.recs:
                return False
        return True


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 2), st.sampled_from(MEMBERS), st.sampled_from(SCORES)),
        st.tuples(st.just("rem"), st.integers(0, 2), st.sampled_from(MEMBERS), st.booleans()),
        # ship a random subset of one replica's records to another, in a random order
        st.tuples(st.just("ship"), st.integers(0, 2), st.integers(0, 2), st.randoms(use_true_random=False)),
    ),
    max_size=60,
)


@settings(max_examples=300, deadline=None)
@given(ops=OPS)
def test_replicas_converge_and_every_index_agrees_with_its_members(ops):
    rs = [Replica(1), Replica(2), Replica(3)]
    for op in ops:
        if op[0] == "add":
            rs[op[1]].zadd(op[2], op[3])
        elif op[0] == "rem":
            rs[op[1]].zrem(op[2], op[3])
        else:
            src, dst, rnd = rs[op[1]], rs[op[2]], op[3]
            if src is dst:
                continue
            recs = [r for r in src.recs.items() if rnd.random() < 0.6]
            rnd.shuffle(recs)
            dst.receive(recs)
    for _ in range(2):  # everything reaches everyone
        for a in rs:
            for b in rs:
                if a is not b:
                    b.receive(list(a.recs.items()))
    assert rs[0].recs == rs[1].recs == rs[2].recs
    for r in rs:
        assert r.index_agrees()


def test_the_race_an_index_tombstone_loses_to_the_member():
    """1 adds a at 1; 3 sees it and removes it (an older version's removal: it tombstones
    the index key at 1); 2 adds a at 1 without having seen 1's add, with an older clock
    than 3's remove. Merged, a is live at 1 and its index key is a tombstone: the member
    decides (a reader confirms the key against it), and nothing is written to repair it."""
    r1, r2, r3 = Replica(1), Replica(2), Replica(3)
    r3.clock = 10
    r1.zadd(b"a", 1.0)
    r3.receive(list(r1.recs.items()))
    r3.zrem(b"a", old_style=True)
    r2.zadd(b"a", 1.0)
    assert env.hlc_of(r2.recs[ik(1.0, b"a")]) < env.hlc_of(r3.recs[ik(1.0, b"a")])
    r1.receive(list(r3.recs.items()))
    before = dict(r1.recs)
    r1.receive(list(r2.recs.items()))
    assert zset.score_of(r1.recs[mk(b"a")]) == 1.0 and not env.is_tombstone(r1.recs[mk(b"a")])
    assert env.is_tombstone(r1.recs[ik(1.0, b"a")])  # the key lost, the member holds
    assert r1.index_agrees()
    assert set(r1.recs) == set(before)  # no write of r1's own


# -- the deltas the commands hand the apply path ------------------------------------------------

@settings(max_examples=300, deadline=None)
@given(rec=st.none() | element_records(RecordType.ZSET_MEMBER), score=st.sampled_from(SCORES),
       dot=st.tuples(st.integers(10**6, 10**6 + 5), st.integers(1, 3)))
def test_add_and_remove_deltas_merge_to_orswot_add_and_remove(rec, score, dot):
    """A ZADD/ZREM hands the apply path a delta; merged with the current record it must
    be exactly core's add / remove (so the stored bytes are the lattice's)."""
    key = mk(b"a")
    hlc, origin = dot
    want = orswot.add(rec, zset.RTYPE, hlc, origin, zset.encode_value(score))
    delta = zset.add_delta(rec, hlc, origin, score)
    assert merge(key, rec, delta) == want
    # a delta built as the join itself (``orswot.KNOWN``) is that join byte for byte: the
    # merge without the memo agrees
    orswot.KNOWN.clear()
    assert merge(key, rec, delta) == want
    if rec is not None:
        live, covered = zset.live_dots(rec), orswot.element_of(rec).covered
        if (all(d < dot for d in live + covered) and (not live or not covered or covered[0] < live[-1])
                and (env.hlc_of(rec), env.origin_of(rec)) < dot):
            assert delta == want  # (the case of every local write: the join was built)
    if rec is not None:
        assert zset.live_dots(rec) == tuple(d for d, _ in orswot.element_of(rec).live)
        removed = orswot.remove(rec, hlc, origin)
        delta = zset.remove_delta(rec, hlc, origin)
        assert (delta is None and removed is rec) or merge(key, rec, delta) == removed
