"""The exchange in-process: real engines (RocksDB) as replicas, no network.

``plan`` (pure) joins records with the core lattices and says what each replica lacks;
``LocalReplica`` answers from an engine and validates what it is pushed; ``exchange``
drives any set of replicas. Here the replicas are several engines in one process, so
divergence is made directly and the outcome checked against the data: after an
exchange, every engine holds the same records and the same digest, nothing was lost,
nothing deleted came back, and nothing past gc_grace travelled."""

from __future__ import annotations

import asyncio
import random
import time
from types import SimpleNamespace

import pytest

from marekvs.antientropy import exchange as X
from marekvs.antientropy import plan as P
from marekvs.antientropy.replica import VERIFY_CHECK, VERIFY_CORRECT, BadRequest, LocalReplica
from marekvs.core import digest as D
from marekvs.core import envelope as env
from marekvs.core import head, orswot
from marekvs.core import keys as K
from marekvs.core.hlc import HLC
from marekvs.core.merge import merge
from marekvs.storage import digest as SD
from marekvs.storage.engine import Engine

NOW = time.time_ns() // 1_000_000


def rec(hlc_ms: int, value: bytes = b"v", origin: int = 1, tomb: bool = False, ttl: int = 0) -> bytes:
    return env.pack(env.FLAG_TOMBSTONE if tomb else 0, hlc_ms << 16, origin, ttl, b"" if tomb else value)


def skey(name: str) -> bytes:
    return K.encode_string_key(name.encode())


def replica(tmp_path, name: str, node_id: int, gc_grace: int = 3600) -> LocalReplica:
    e = Engine(str(tmp_path / name), node_id)
    config = SimpleNamespace(node_id=node_id, gc_grace=gc_grace)
    return LocalReplica(e, HLC(), config, address=name)


def records(r: LocalReplica) -> dict[bytes, bytes]:
    return dict(r.engine.scan(b""))


def run(coro):
    return asyncio.run(coro)


# -- plan (pure) -------------------------------------------------------------------------------

def test_plan_sends_each_replica_the_join_it_lacks():
    a, b, c = skey("a"), skey("b"), skey("c")
    old, new = rec(NOW - 60_000, b"old"), rec(NOW - 50_000, b"new")
    tomb = rec(NOW - 40_000, tomb=True)
    plan = P.plan_records({1: {a: old, b: tomb}, 2: {a: new, c: old}, 3: {a: new, b: old, c: old}}, NOW)
    assert plan.keys == 3 and plan.differing == 3
    assert plan.only_on == {1: 0, 2: 0, 3: 0}
    assert sorted(plan.pushes[1]) == sorted([(a, new), (c, old)])
    assert plan.pushes[2] == [(b, tomb)]  # the delete wins the join: never resurrected
    assert plan.pushes[3] == [(b, tomb)]
    only = P.plan_records({1: {a: old}, 2: {}}, NOW)
    assert only.only_on == {1: 1, 2: 0} and only.pushes[2] == [(a, old)]


def test_plan_leaves_young_differences_to_log_shipping():
    a = skey("a")
    plan = P.plan_records({1: {a: rec(NOW - 100)}, 2: {}}, NOW, settle_ms=2000)
    assert plan.in_flight == 1 and plan.pushes[2] == []
    assert P.plan_records({1: {a: rec(NOW - 100)}, 2: {}}, NOW, settle_ms=0).pushes[2]


def test_plan_joins_orswot_elements_with_the_core_lattice():
    k = K.encode_set_member_key(b"s", b"m")
    rt = env.RecordType.SET_MEMBER
    add1 = orswot.new(rt, (NOW - 9000) << 16, 1)
    add2 = orswot.new(rt, (NOW - 8000) << 16, 2)
    removed = orswot.remove(add1, (NOW - 7000) << 16, 3)  # observed add1 only
    plan = P.plan_records({1: {k: removed}, 2: {k: add2}}, NOW)
    joined = merge(k, removed, add2)
    assert plan.pushes[1] == [(k, joined)] and plan.pushes[2] == [(k, joined)]
    assert orswot.value(joined, NOW) is not None  # the concurrent add survives the remove


def test_repair_batches_keep_a_partition_together():
    recs = sorted((K.encode_string_key(b"k%d" % i), rec(NOW, b"x" * 10)) for i in range(300))
    out = P.batches(recs, 50, 1 << 20)
    assert [r for b in out for r in b] == recs
    for b in out:
        assert len(b) <= 50 or len({k[:2] for k, _ in b}) == 1
    pids = [{k[:2] for k, _ in b} for b in out]
    for x, y in zip(pids, pids[1:]):
        assert not (x & y) or len(x) == 1  # a partition spans batches only when it alone is too big
    big = [(K.string_key_in(7, b"k%d" % i), rec(NOW)) for i in range(120)]
    assert [len(b) for b in P.batches(sorted(big), 50, 1 << 20)] == [50, 50, 20]


# -- gc_grace ------------------------------------------------------------------------------------

GRACE_MS = 10_000
OLD = NOW - 60_000  # well past the horizon (NOW - GRACE_MS)


def collection(userkey: bytes, deleted_at_ms: int, element_at_ms: int) -> list[tuple[bytes, bytes]]:
    """A set deleted at ``deleted_at_ms`` (head tombstone) with one member added before."""
    rt = env.RecordType.SET_MEMBER
    live = head.new(head.CollectionType.SET, element_at_ms << 16, 1)
    dead = head.tombstone(live, deleted_at_ms << 16, 1)
    member = orswot.new(rt, element_at_ms << 16, 1)
    return [(K.encode_head_key(userkey), dead), (K.encode_set_member_key(userkey, b"m"), member)]


def test_a_receiver_refuses_what_its_sweep_would_remove():
    tomb = (skey("t"), rec(OLD, tomb=True))
    expired = (skey("e"), rec(OLD - 1000, b"x", ttl=OLD))
    young_tomb = (skey("y"), rec(NOW - 1000, tomb=True))
    live = (skey("l"), rec(OLD, b"live"))
    for r in (tomb, expired):
        assert P.refused({}, [r], NOW, GRACE_MS) == {r[0]}
    assert P.refused({}, [young_tomb, live], NOW, GRACE_MS) == set()
    # a deleted collection: the head and the member it gates both go
    hd, member = collection(b"s", OLD, OLD - 1000)
    assert P.refused({}, [hd, member], NOW, GRACE_MS) == {hd[0], member[0]}
    # the member alone, its head swept here: not stored (it would read as live)
    assert P.refused({}, [member], NOW, GRACE_MS) == {member[0]}
    # ... but with a live head here it is a member like any other
    live_head = (hd[0], head.new(head.CollectionType.SET, (OLD - 5000) << 16, 1))
    assert P.refused({live_head[0]: live_head[1]}, [member], NOW, GRACE_MS) == set()
    # and a young member without a head yet is in flight, not refused
    young = (K.encode_set_member_key(b"s2", b"m"), orswot.new(env.RecordType.SET_MEMBER, (NOW - 100) << 16, 1))
    assert P.refused({}, [young], NOW, GRACE_MS) == set()


def test_exchange_neither_sends_nor_stores_records_past_gc_grace(tmp_path):
    """Node 1 swept a tombstone, an expired record and a deleted set; node 2 has not yet:
    the exchange must not push them back to node 1, and node 2 removes them as it reads."""
    r1, r2 = replica(tmp_path, "a", 1, gc_grace=10), replica(tmp_path, "b", 2, gc_grace=10)
    gone = [(skey("t"), rec(OLD, tomb=True)), (skey("e"), rec(OLD - 1000, b"x", ttl=OLD)),
            *collection(b"s", OLD, OLD - 1000)]
    keep = [(skey("k%d" % i), rec(OLD, b"v%d" % i)) for i in range(50)]
    for r in (r1, r2):
        r.engine.apply(keep, log_entry=False)
    r2.engine.apply(gone, log_entry=False)
    r1.engine.commit()
    r2.engine.commit()
    assert r1.engine.digest.roots() != r2.engine.digest.roots()
    rep = run(X.exchange([r1, r2], opts=X.Options(settle_ms=0)))
    assert rep.records_repaired == {} or sum(rep.records_repaired.values()) == 0
    assert r2.removed_past_gc_grace == len(gone)
    assert records(r1) == records(r2) == dict(keep)
    assert r1.engine.digest.roots() == r2.engine.digest.roots()
    # and pushed directly, node 1 refuses them all
    got = r1.push_now(gone)
    assert (got.applied, got.past_gc_grace) == (0, len(gone))
    assert records(r1) == dict(keep)


# -- exchange between engines ------------------------------------------------------------------------

def diverge(reps: list[LocalReplica], rng: random.Random, n: int) -> dict[bytes, bytes]:
    """Write ``n`` random records, each to a random non-empty subset of replicas; return
    the join every replica must end with."""
    want: dict[bytes, bytes] = {}
    for i in range(n):
        k = skey("key%d" % rng.randrange(n // 2))
        r = rec(NOW - 30_000 + i, b"v%d" % i, origin=rng.randrange(1, 4), tomb=rng.random() < 0.1)
        want[k] = r if k not in want else merge(k, want[k], r)
        for x in rng.sample(reps, rng.randrange(1, len(reps) + 1)):
            x.engine.apply([(k, r)], log_entry=False)
    for x in reps:
        x.engine.commit()
    return want


@pytest.mark.parametrize("dry_run", [False, True])
def test_exchange_makes_replicas_equal(tmp_path, dry_run):
    rng = random.Random(3)
    reps = [replica(tmp_path, "r%d" % i, i) for i in (1, 2, 3)]
    want = diverge(reps, rng, 3000)
    before = [records(r) for r in reps]
    rep = run(X.exchange(reps, opts=X.Options(settle_ms=0, dry_run=dry_run, batch=16, push_records=100)))
    assert rep.partitions_compared == 4096 and rep.partitions_mismatched > 0
    assert rep.keys_differing > 0 and rep.exit_code == 1
    if dry_run:
        assert [records(r) for r in reps] == before
        assert rep.records_repaired == {} and rep.status == "differences found (dry run)"
        return
    for r in reps:
        assert records(r) == want
    assert len({tuple(r.engine.digest.roots()) for r in reps}) == 1
    again = run(X.exchange(reps, opts=X.Options(settle_ms=0)))
    assert again.status == "consistent" and again.partitions_mismatched == 0 and again.exit_code == 0
    for r in reps:
        assert list(r.engine.digest.segs) == list(SD.computed(r.engine.scan(b"")))


def test_verify_finds_records_deleted_behind_the_engines_back(tmp_path):
    reps = [replica(tmp_path, "r%d" % i, i) for i in (1, 2)]
    recs = [(skey("k%d" % i), rec(OLD, b"%d" % i)) for i in range(2000)]
    for r in reps:
        r.engine.apply(recs, log_entry=False)
        r.engine.commit()
    lost = [k for k, _ in recs if D.partition_of_key(k) == D.partition_of_key(recs[0][0])]
    for k in lost:
        reps[1].engine.data.delete(k)  # behind the engine's back
    reps[1].engine.cache.clear()
    plain = run(X.exchange(reps, opts=X.Options(settle_ms=0)))
    assert plain.status == "consistent"  # the kept digests cannot know
    checked = run(reps[1].roots(0, 4096, VERIFY_CHECK))
    assert checked.wrong == [D.partition_of_key(lost[0])]
    kept = list(reps[1].engine.digest.segs)
    dry = run(X.exchange(reps, opts=X.Options(settle_ms=0, verify=VERIFY_CHECK, dry_run=True)))
    assert dry.digests_wrong == {"2": 1} and dry.records_to_push == {"2": len(lost)} and dry.records_repaired == {}
    assert list(reps[1].engine.digest.segs) == kept and reps[1].corrected == 0  # a dry run writes nothing
    rep = run(X.exchange(reps, opts=X.Options(settle_ms=0, verify=VERIFY_CORRECT)))
    assert rep.digests_wrong == {"2": 1} and rep.records_repaired == {"2": len(lost)}
    assert records(reps[0]) == records(reps[1]) == dict(recs)


def test_a_push_with_one_bad_record_writes_nothing(tmp_path):
    r = replica(tmp_path, "a", 1)
    good = (skey("good"), rec(OLD, b"x"))
    bad = [
        (b"\x00\x01l" + b"k", rec(OLD)),  # the retired tag
        (b"\x00\x01?" + b"k", rec(OLD)),  # an unknown tag
        (skey("short"), b"\x00" * 5),  # no whole envelope
        (b"\x0f\xffs" + b"k", rec(OLD)),  # partition id not the key's
        (skey("flags"), b"\xe0" + rec(OLD)[1:]),  # reserved flag bits
    ]
    for b in bad:
        with pytest.raises(BadRequest):
            r.push_now([good, b])
    assert records(r) == {}
    with pytest.raises(BadRequest):
        run(r.roots(4000, 200))
    with pytest.raises(BadRequest):
        run(r.fine({5: [16]}))
    with pytest.raises(BadRequest):
        run(r.fetch({4096: [0]}))


def test_verify_with_writes_pending_finds_nothing_wrong(tmp_path):
    """Scans merge the pending writes (a tick's batch is not committed mid-tick); the kept
    digest counts committed records only. Verifying while writes are pending must not take
    their difference for records changed behind the engine's back."""
    r = replica(tmp_path, "r1", 1)
    k = skey("pending")
    r.engine.apply([(k, rec(OLD, b"committed"))], log_entry=False)
    r.engine.commit()
    r.engine.apply([(k, rec(OLD + 1, b"pending")), (skey("new-pending"), rec(OLD))], log_entry=False)
    bad, n, _ = r.verify(D.partition_of_key(k), correct=True)
    assert not bad and r.corrected == 0
    assert SD.computed(r.engine.scan(b"")) == r.engine.digest.segs
