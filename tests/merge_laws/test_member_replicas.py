"""Three replicas running the hash and set operations: the records they write converge by spec.

Unlike test_replicas.py, which builds records with the core lattices directly, every op
here is the keyspace operation a command runs (``keyspace/hashes.py``, ``sets.py``,
``members.py``: HSET, HDEL, HINCRBY, HEXPIRE, HPERSIST, SADD, SREM, SPOP, SMOVE,
SINTERSTORE, EXPIREMEMBER, DEL, EXPIRE of the key) on a real ``Keyspace`` over a real
RocksDB engine per replica, each with its own HLC over a shared fake wall clock (with a
skew). The records an op changed are shipped to the peers over a network that reorders,
duplicates and loses messages (lost ones are redelivered at the end, as log shipping
resumes), and merged by the peers' ``Engine.apply`` exactly as replication merges them.
Each replica keeps its live-member counts from its engine's change feed.

At the end (``converge``, also at teardown) every replica must hold the same bytes, read
the same members, values, cardinalities and TTLs, and follow the lattice of the data
model, checked against what the ops did (the dots each add minted, the dots each remove
or overwrite covered, the DEL clocks):

- a remove never resurrects an add it observed (a covered dot is never live);
- an add that no remove observed and that is newer than the key's last delete clock is
  live (unless four newer adds of the element exist: the documented cap of the element
  lattice);
- a member's deadline is the one written by its latest header write (LWW), and past it
  the member is absent on every replica;
- the counts (HLEN / SCARD) equal a scan.

Keys are fresh for every example (the engines are opened once per module).
"""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections import defaultdict

from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from marekvs.core import envelope as env
from marekvs.core import head, orswot
from marekvs.core import keys as K
from marekvs.core.hlc import HLC
from marekvs.keyspace import Keyspace
from marekvs.keyspace import hashes as khash
from marekvs.keyspace import members as M
from marekvs.keyspace import sets as kset
from marekvs.storage.engine import Engine, prefix_end

T0 = 1_800_000_000_000
SKEWS = (0, 3, -2)
REPLICA = st.integers(0, len(SKEWS) - 1)
SETS = st.sampled_from([b"s0", b"s1"])
MEMBERS = st.sampled_from([b"a", b"b", b"c"])
VALUES = st.sampled_from([b"x", b"y", b"7"])
TAGS = (K.TAG_SET, K.TAG_HASH)

_DIR = tempfile.mkdtemp(prefix="member-replicas-")
_ENGINES = [Engine(f"{_DIR}/r{i}", i + 1, durability="no") for i in range(len(SKEWS))]
_EXAMPLE = itertools.count()


def teardown_module() -> None:
    for e in _ENGINES:
        e.close()
    shutil.rmtree(_DIR, ignore_errors=True)


class Replica:
    """A keyspace over one engine; ``ks.apply`` reports what an op changed."""

    def __init__(self, engine: Engine, node: int, machine: "MemberReplicas", skew: int):
        self.engine = engine
        self.node = node
        self.ks = Keyspace(engine, HLC(clock=lambda: machine.now + skew), node)
        self.ks.now = lambda: machine.now
        self.ks.counts.subscribed = True
        engine.on_change = self.ks.counts.on_change
        self.outbox: list[tuple[bytes, bytes, bytes | None]] = []  # (ikey, record, old)

        def apply(records, log_entry=True):
            olds = {k: engine.get(k) for k, _ in records}
            changed = engine.apply(records, log_entry)
            self.outbox.extend((k, v, olds[k]) for k, v in changed)
            return changed

        self.ks.apply = apply


class MemberReplicas(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.now = T0 + next(_EXAMPLE) * 10_000_000  # fresh time and keys for every example
        self.ex = b"e%d:" % (self.now // 10_000_000)
        self.replicas = [Replica(e, i + 1, self, s) for i, (e, s) in enumerate(zip(_ENGINES, SKEWS))]
        self.inflight: list[tuple[int, bytes, bytes, frozenset]] = []
        self.lost: list[tuple[int, bytes, bytes, frozenset]] = []
        # what the ops did, per element ikey
        self.adds: dict[bytes, set] = defaultdict(set)  # dots minted by adds
        self.covered: dict[bytes, set] = defaultdict(set)  # dots covered by removes/overwrites
        self.headers: dict[bytes, list] = defaultdict(list)  # (version, deadline) header writes
        self.keys: set[bytes] = set()
        # causality, per element ikey: the add ops (intents, written or not) each replica
        # knows of; the add ops a later remove or overwrite observed; each add's stamp
        self.ops = itertools.count(1)
        self.known: list[dict[bytes, set]] = [defaultdict(set) for _ in self.replicas]
        self.observed: dict[bytes, set] = defaultdict(set)
        self.intents: dict[bytes, dict[int, int]] = defaultdict(dict)  # ikey -> {op: stamp hlc}

    def key(self, k: bytes) -> bytes:
        return self.ex + k

    # -- plumbing ------------------------------------------------------------------------
    def _run(self, r: Replica, op, adds: tuple[bytes, ...] = ()) -> None:
        """Run ``op`` on ``r``; ``adds`` names the element keys the op means to add (an
        add that writes nothing is then still an intent the model expects to survive)."""
        ri = self.replicas.index(r)
        r.outbox.clear()
        op(r.ks)
        op_id = next(self.ops)
        minted: dict[bytes, int] = {}
        for ikey, rec, old in r.outbox:
            new_dots, newly_covered = self._observe(ikey, rec, old)
            if newly_covered or new_dots:  # a remove or an overwrite observes the adds known here
                self.observed[ikey] |= self.known[ri][ikey]
            if new_dots:
                minted[ikey] = max(new_dots)[0]
        for ikey in set(adds) | set(minted):
            self.observed[ikey] |= self.known[ri][ikey]
            self.intents[ikey][op_id] = minted.get(ikey, r.ks.hlc.last)
            self.known[ri][ikey].add(op_id)
        for ikey, rec, _ in r.outbox:
            snapshot = frozenset(self.known[ri][ikey])
            self.inflight.extend((j, ikey, rec, snapshot) for j in range(len(self.replicas))
                                 if self.replicas[j] is not r)

    def _observe(self, ikey: bytes, rec: bytes, old: bytes | None) -> tuple[list, list]:
        """(dots this write minted, dots it newly covered) of an element write."""
        if ikey[K.TAG_AT] not in M.MEMBER_TAGS:
            return [], []
        new_e = orswot.element_of(rec)
        old_e = orswot.element_of(old) if old is not None else orswot.EMPTY
        seen = {d for d, _ in old_e.live} | set(old_e.covered)
        minted = [d for d, _ in new_e.live if d not in seen]
        covered = [d for d in new_e.covered if d not in old_e.covered]
        self.adds[ikey].update(minted)
        self.covered[ikey].update(covered)
        if old is None or rec[env.VERSION] != old[env.VERSION]:
            self.headers[ikey].append(((env.hlc_of(rec), env.origin_of(rec)), env.ttl_of(rec)))
        return minted, covered

    def _receive(self, msg) -> None:
        dest, ikey, rec, knows = msg
        r = self.replicas[dest]
        r.ks.hlc.update(env.hlc_of(rec))
        r.engine.apply([(ikey, rec)], log_entry=False)
        self.known[dest][ikey] |= knows

    def _ik(self, tag: bytes, key: bytes, member: bytes) -> bytes:
        return K.collection_prefix(tag, self.key(key)) + member

    # -- network and time ------------------------------------------------------------------
    @rule(ms=st.sampled_from([0, 1, 5, 10, 400, 2000]))
    def tick(self, ms):
        self.now += ms

    @precondition(lambda self: self.inflight)
    @rule(i=st.integers(0, 1 << 16), keep=st.booleans())
    def deliver(self, i, keep):
        i %= len(self.inflight)
        msg = self.inflight[i] if keep else self.inflight.pop(i)
        self._receive(msg)

    @precondition(lambda self: self.inflight)
    @rule(i=st.integers(0, 1 << 16))
    def lose(self, i):
        self.lost.append(self.inflight.pop(i % len(self.inflight)))

    # -- sets ---------------------------------------------------------------------------------
    @rule(ri=REPLICA, key=SETS, ms=st.lists(MEMBERS, min_size=1, max_size=3))
    def sadd(self, ri, key, ms):
        self.keys.add(self.key(key))
        self._run(self.replicas[ri], lambda ks: kset.add(ks, self.key(key), ms, self.now),
                  adds=tuple(self._ik(K.TAG_SET, key, m) for m in ms))

    @rule(ri=REPLICA, key=SETS, ms=st.lists(MEMBERS, min_size=1, max_size=3))
    def srem(self, ri, key, ms):
        self._run(self.replicas[ri], lambda ks: kset.remove(ks, self.key(key), ms, self.now))

    @rule(ri=REPLICA, key=SETS, n=st.integers(1, 2))
    def spop(self, ri, key, n):
        self._run(self.replicas[ri], lambda ks: kset.pop(ks, self.key(key), n, self.now))

    @rule(ri=REPLICA, src=SETS, dst=SETS, m=MEMBERS)
    def smove(self, ri, src, dst, m):
        self.keys.add(self.key(dst))
        self._run(self.replicas[ri], lambda ks: kset.move(ks, self.key(src), self.key(dst), m, self.now))

    @rule(ri=REPLICA, dst=SETS, a=SETS, b=SETS)
    def sinterstore(self, ri, dst, a, b):
        self.keys.add(self.key(dst))

        def op(ks):
            kset.store(ks, self.key(dst), kset.intersection(ks, [self.key(a), self.key(b)], self.now), self.now)
        self._run(self.replicas[ri], op)

    # -- hashes -----------------------------------------------------------------------------
    @rule(ri=REPLICA, f=MEMBERS, v=VALUES)
    def hset(self, ri, f, v):
        self.keys.add(self.key(b"h"))
        self._run(self.replicas[ri], lambda ks: khash.set_fields(ks, self.key(b"h"), [f, v], self.now),
                  adds=(self._ik(K.TAG_HASH, b"h", f),))

    @rule(ri=REPLICA, f=MEMBERS)
    def hdel(self, ri, f):
        self._run(self.replicas[ri], lambda ks: khash.delete_fields(ks, self.key(b"h"), [f], self.now))

    @rule(ri=REPLICA, f=MEMBERS, by=st.integers(-2, 3))
    def hincrby(self, ri, f, by):
        self.keys.add(self.key(b"h"))

        def compute(old):
            try:
                return b"%d" % (int(old or b"0") + by)
            except ValueError:
                return b"%d" % by  # (a non-integer value: overwritten, the op still writes)
        self._run(self.replicas[ri], lambda ks: khash.update(ks, self.key(b"h"), f, compute, self.now),
                  adds=(self._ik(K.TAG_HASH, b"h", f),))

    @rule(ri=REPLICA, f=MEMBERS, ttl=st.integers(-1, 3000), cond=st.sampled_from([0, 1, 2, 3, 4]))
    def hexpire(self, ri, f, ttl, cond):
        self._run(self.replicas[ri], lambda ks: khash.expire_fields(
            ks, khash.lookup(ks, self.key(b"h"), self.now), [f], self.now + ttl, cond, self.now))

    @rule(ri=REPLICA, f=MEMBERS)
    def hpersist(self, ri, f):
        self._run(self.replicas[ri], lambda ks: khash.persist_fields(
            ks, khash.lookup(ks, self.key(b"h"), self.now), [f], self.now))

    # -- per-member TTL and whole keys ------------------------------------------------------------
    @rule(ri=REPLICA, key=st.sampled_from([b"s0", b"s1", b"h"]), m=MEMBERS, ttl=st.integers(1, 3000))
    def expiremember(self, ri, key, m, ttl):
        def op(ks):
            found, mk, rec = M.member_record(ks, self.key(key), m, self.now)
            if rec is not None:
                M.set_deadline(ks, mk, rec, self.now + ttl)
        self._run(self.replicas[ri], op)

    @rule(ri=REPLICA, key=st.sampled_from([b"s0", b"s1", b"h"]))
    def delete(self, ri, key):
        self._run(self.replicas[ri], lambda ks: ks.delete(self.key(key), self.now))

    @rule(ri=REPLICA, key=st.sampled_from([b"s0", b"h"]), ttl=st.integers(1, 3000))
    def expire_key(self, ri, key, ttl):
        self._run(self.replicas[ri], lambda ks: ks.set_ttl(self.key(key), self.now + ttl, self.now))

    # -- checks -------------------------------------------------------------------------------
    @invariant()
    def counts_are_a_scan(self):
        for r in self.replicas:
            for key in self.keys:
                assert self._card(r, key) == self._scan_card(r, key)

    def _card(self, r: Replica, key: bytes) -> int:
        hk = K.encode_head_key(key)
        h = r.ks.get(hk)  # (a dead head gates; members written after its death count)
        if h is None or head.ctype_of(h) not in M.MEMBER_KINDS:
            return 0
        return r.ks.counts.count(M.members_prefix(hk, h), h, self.now)

    def _scan_card(self, r: Replica, key: bytes) -> int:
        h = r.engine.get(K.encode_head_key(key))
        if h is None or head.ctype_of(h) not in M.MEMBER_KINDS:
            return 0
        prefix = M.members_prefix(K.encode_head_key(key), h)
        return sum(1 for _, rec in r.engine.scan(prefix, prefix_end(prefix)) if head.element_live(h, rec, self.now))

    def _records(self, r: Replica) -> dict[bytes, bytes]:
        out = {}
        for key in self.keys:
            for tag in (K.TAG_HEAD,) + TAGS:
                p = K.collection_prefix(tag, key)
                for k, v in r.engine.scan(p, prefix_end(p)):
                    out[k] = v
        return out

    def teardown(self):
        self.converge()

    def converge(self):
        for msg in self.lost + self.inflight:
            self._receive(msg)
        self.lost, self.inflight = [], []
        states = [self._records(r) for r in self.replicas]
        assert states[0] == states[1] == states[2], "replicas hold different records"
        reads = [self._reads(r) for r in self.replicas]
        assert reads[0] == reads[1] == reads[2], "replicas read differently"
        for ikey, rec in states[0].items():
            if ikey[K.TAG_AT] in M.MEMBER_TAGS:
                self._check_element(ikey, rec, states[0])

    def _reads(self, r: Replica):
        out = {}
        for key in sorted(self.keys):
            t = r.ks.type_name(key, self.now)
            if t == "set":
                out[key] = (t, kset.all_members(r.ks, key, self.now), kset.cardinality(r.ks, key, self.now))
            elif t == "hash":
                out[key] = (t, khash.items(r.ks, key, self.now), khash.length(r.ks, key, self.now))
            else:
                out[key] = (t,)
        return out

    def _check_element(self, ikey: bytes, rec: bytes, state: dict[bytes, bytes]) -> None:
        e = orswot.element_of(rec)
        live = {d for d, _ in e.live}
        adds, covered = self.adds[ikey], self.covered[ikey]
        assert not live & covered, "a remove resurrected an add it observed"
        userkey = K.user_key_of(ikey)
        h = state.get(K.encode_head_key(userkey))
        gate = head.delete_clock(h, self.now) if h is not None else 0
        for d in adds - covered:
            newer = sum(1 for x in adds if x > d)
            if d[0] > gate and newer < orswot.LIVE_CAP:
                assert d in live, "an add no remove observed was lost"
        # the same at the level of the commands: an add op that no later remove or
        # overwrite observed (causally) survives, unless a DEL newer than it gates it or
        # the element's cap dropped it
        for op_id, stamp in self.intents[ikey].items():
            newer = sum(1 for x in adds if x[0] > stamp)
            if op_id not in self.observed[ikey] and stamp > gate and newer < orswot.LIVE_CAP:
                assert live, f"a concurrent add (op {op_id}) did not survive a remove that did not observe it"
        if self.headers[ikey]:
            version, deadline = max(self.headers[ikey])
            assert (env.hlc_of(rec), env.origin_of(rec)) == version
            assert env.ttl_of(rec) == deadline, "the member's deadline is not its latest header write's"


# the profile's example count (tests/merge_laws/conftest.py: `make laws` runs many more)
MemberReplicas.TestCase.settings = settings(stateful_step_count=40, deadline=None)
TestMemberReplicas = MemberReplicas.TestCase


def _scenario(*steps) -> MemberReplicas:
    m = MemberReplicas()
    for name, kw in steps:
        getattr(m, name)(**kw)
    return m


def test_a_re_add_survives_a_concurrent_remove_of_the_add_it_repeats():
    """SADD of a member a replica already has still adds: a remove on another replica
    that saw only the first add must not take it (the case a no-op re-add gets wrong)."""
    m = _scenario(("sadd", dict(ri=0, key=b"s0", ms=[b"a"])),
                  ("converge", {}),  # every replica has the member
                  ("sadd", dict(ri=1, key=b"s0", ms=[b"a"])),
                  ("srem", dict(ri=0, key=b"s0", ms=[b"a"])))
    m.converge()
    for r in m.replicas:
        assert kset.is_member(r.ks, m.key(b"s0"), b"a", m.now)


def test_hset_concurrent_with_hdel_and_a_field_ttl_on_a_third_replica():
    # (ticks of 10 ms put the ops in HLC order despite the replicas' clock skews)
    m = _scenario(("hset", dict(ri=0, f=b"f", v=b"x")),
                  ("converge", {}),
                  ("tick", dict(ms=10)), ("hset", dict(ri=1, f=b"f", v=b"y")),
                  ("tick", dict(ms=10)), ("hdel", dict(ri=0, f=b"f")),
                  ("tick", dict(ms=10)), ("hexpire", dict(ri=2, f=b"f", ttl=1000, cond=0)))
    m.converge()
    for r in m.replicas:
        assert khash.get(r.ks, m.key(b"h"), b"f", m.now) == b"y"  # the HSET HDEL did not see
    m.tick(ms=2000)
    m.converge()
    for r in m.replicas:  # the TTL (a later header write than the HSET) took it everywhere
        assert khash.get(r.ks, m.key(b"h"), b"f", m.now) is None
