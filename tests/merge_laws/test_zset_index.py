"""The zset score index across replicas: members are ORSWOT records, the index is LWW
records the commands write next to them, and a replica repairs its index after merging
records it did not write (keyspace/zsets.py; crates_ref/DATA_MODEL.md 6.6).

A pure model of N replicas (core's records and merges only, no engine): random ZADDs and
ZREMs on random replicas, records shipped between replicas in random order and batches
(duplicated, reordered, partial), each receiver applying core's merge and then the
node's repair rule. Properties: after the writes stop and every replica has everything,
all replicas hold the same bytes, and on every replica each live member has exactly one
live index key, at its current score and with its deadline, and no other index key of
it is live - whatever the delivery order. A replica's index also agrees with its own
members after every single step (the repair keeps the invariant, it does not only
restore it at the end).
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
        old = zset.index_for(rec, NOW)
        if old is not None and old[0] == score:
            return
        t = self.stamp()
        self.put(mk(member), orswot.add(rec, zset.RTYPE, t, self.origin, zset.encode_value(score)))
        self.put(ik(score, member), zset.index_live(t, self.origin))
        if old is not None:
            self.put(ik(old[0], member), zset.index_tombstone(t, self.origin))

    def zrem(self, member: bytes) -> None:
        rec = self.recs.get(mk(member))
        old = zset.index_for(rec, NOW)
        if rec is None or old is None:
            return
        t = self.stamp()
        self.put(mk(member), orswot.remove(rec, t, self.origin))
        self.put(ik(old[0], member), zset.index_tombstone(t, self.origin))

    # -- receiving a peer's records, then the repair --------------------------------------
    def receive(self, records: list[tuple[bytes, bytes]]) -> None:
        check: dict[bytes, set[bytes]] = {}
        for key, rec in records:
            changed = self.put(key, rec)
            if changed is None:
                continue
            old, _ = changed
            if key[2:3] == K.TAG_ZSET:
                _, member = K.decode_zset_member_key(key)
                extra = check.setdefault(member, set())
                was = zset.index_for(old, NOW)
                if was is not None:
                    extra.add(K.encode_score(was[0]))
            else:
                _, _, member = K.decode_zset_score_key(key)
                check.setdefault(member, set()).add(key[-len(member) - 8:len(key) - len(member)])
        repairs = []
        t = 0
        for member, extra in check.items():
            want = zset.index_for(self.recs.get(mk(member)), NOW)
            want_sb = K.encode_score(want[0]) if want is not None else None
            if want_sb is not None:
                extra.add(want_sb)
            for sb in extra:
                key = K.collection_prefix(K.TAG_ZSCORE, KEY) + sb + member
                live = env.is_live(self.recs.get(key), NOW)
                if sb == want_sb and not live:
                    t = t or self.stamp()
                    repairs.append((key, zset.index_live(t, self.origin)))
                elif sb != want_sb and live:
                    t = t or self.stamp()
                    repairs.append((key, zset.index_tombstone(t, self.origin)))
        for key, rec in repairs:
            self.put(key, rec)

    # -- the property -------------------------------------------------------------------------
    def index_agrees(self) -> bool:
        for member in MEMBERS:
            want = zset.index_for(self.recs.get(mk(member)), NOW)
            live = {key for key, rec in self.recs.items()
                    if key[2:3] == K.TAG_ZSCORE and key.endswith(member)
                    and K.decode_zset_score_key(key)[2] == member and env.is_live(rec, NOW)}
            expected = set() if want is None else {ik(want[0], member)}
            if live != expected:
                return False
        return True


OPS = st.lists(
    st.one_of(
        st.tuples(st.just("add"), st.integers(0, 2), st.sampled_from(MEMBERS), st.sampled_from(SCORES)),
        st.tuples(st.just("rem"), st.integers(0, 2), st.sampled_from(MEMBERS), st.just(0.0)),
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
            rs[op[1]].zrem(op[2])
        else:
            src, dst, rnd = rs[op[1]], rs[op[2]], op[3]
            if src is dst:
                continue
            recs = [r for r in src.recs.items() if rnd.random() < 0.6]
            rnd.shuffle(recs)
            dst.receive(recs)
        assert all(r.index_agrees() for r in rs), op
    for _ in range(3):  # everything reaches everyone (repairs included)
        for a in rs:
            for b in rs:
                if a is not b:
                    b.receive(list(a.recs.items()))
    assert rs[0].recs == rs[1].recs == rs[2].recs
    for r in rs:
        assert r.index_agrees()


def test_the_race_the_repair_exists_for():
    """1 adds a at 1; 3 sees it and removes it; 2 adds a at 1 without having seen 1's add,
    with an older clock than 3's remove. Merged, a is live at 1 and its index key must be."""
    r1, r2, r3 = Replica(1), Replica(2), Replica(3)
    r3.clock = 10
    r1.zadd(b"a", 1.0)
    r3.receive(list(r1.recs.items()))
    r3.zrem(b"a")
    r2.zadd(b"a", 1.0)
    assert env.hlc_of(r2.recs[ik(1.0, b"a")]) < env.hlc_of(r3.recs[ik(1.0, b"a")])
    r1.receive(list(r3.recs.items()))
    r1.receive(list(r2.recs.items()))
    assert zset.index_for(r1.recs[mk(b"a")], NOW) == (1.0, 0)
    assert env.is_live(r1.recs[ik(1.0, b"a")], NOW)  # repaired, with r1's next clock
    assert r1.index_agrees()


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
    assert merge(key, rec, zset.add_delta(rec, hlc, origin, score)) == want
    if rec is not None:
        assert zset.live_dots(rec) == tuple(d for d, _ in orswot.element_of(rec).live)
        removed = orswot.remove(rec, hlc, origin)
        delta = zset.remove_delta(rec, hlc, origin)
        assert (delta is None and removed is rec) or merge(key, rec, delta) == removed
