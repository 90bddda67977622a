"""The sweep rules (core.sweep, from the registry's rows): removing what a partition's
sweep returns never changes a read, now or later, and it reclaims what it promises."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from laws_gen import element_record, represent

from marekvs.core import envelope as env
from marekvs.core import head, hll, lww, orswot, stream, zset
from marekvs.core import keys as K
from marekvs.core.envelope import RecordType
from marekvs.core.head import CollectionType as CT
from marekvs.core.registry import BY_CODE, CONTENT, Sweep
from marekvs.core.sweep import PartitionSweep, horizon

NOW, GRACE = 1000, 100  # ms: the horizon is 900 ms
USERS = (b"{t}a", b"{t}b")  # one partition
MS = st.sampled_from([850, 899, 900, 901, 950, 999, 1000, 1001])
CLOCKS = st.builds(lambda ms, lg: ms << 16 | lg, MS, st.integers(0, 2))
ORIGINS = st.integers(1, 2)
DEADLINES = st.sampled_from([0, 0, 0, 850, 900, 901, 999, 1000, 1001, 1100])


def at(ms: int, logical: int = 0) -> int:
    return ms << 16 | logical


@st.composite
def lww_records(draw, rtype: int, payload: bytes = b"v") -> bytes:
    hlc, origin = draw(CLOCKS), draw(ORIGINS)
    if draw(st.integers(0, 3)) == 0:
        return lww.tombstone(rtype, hlc, origin)
    return lww.new(rtype, hlc, origin, payload, draw(DEADLINES))


@st.composite
def head_records(draw) -> bytes:
    ctype = draw(st.sampled_from(sorted(head.TYPE_NAMES)))
    hlc, origin = draw(CLOCKS), draw(ORIGINS)
    clock = draw(st.just(0) | CLOCKS)
    tomb = draw(st.integers(0, 2)) == 0
    if tomb:
        clock = max(clock, hlc)
    flags = env.make_flags(ctype, tombstone=tomb, head=True)
    return env.pack(flags, hlc, origin, 0 if tomb else draw(DEADLINES),
                    head.to_bytes(head.Head(ctype, clock)))


@st.composite
def element_records(draw, rtype: int) -> bytes:
    adds = draw(st.sets(st.tuples(CLOCKS, ORIGINS), min_size=1, max_size=4))
    covered = draw(st.sets(st.sampled_from(sorted(adds)), max_size=len(adds)))
    e = represent(adds, covered)
    hlc = max(max(adds), (draw(CLOCKS), 0))[0]  # the latest op folded in
    return element_record(e, hlc, draw(ORIGINS), draw(DEADLINES), rtype)


@st.composite
def zset_members(draw) -> bytes:
    """A zset member record whose dots hold the scores 0 or 1 (the index keys below)."""
    adds = draw(st.sets(st.tuples(CLOCKS, ORIGINS), min_size=1, max_size=4))
    covered = draw(st.sets(st.sampled_from(sorted(adds)), max_size=len(adds)))
    e = represent(adds, covered)
    e = orswot.Element(tuple((d, zset.encode_value(float(draw(st.integers(0, 1))))) for d, _ in e.live),
                       e.covered)
    hlc = max(max(adds), (draw(CLOCKS), 0))[0]
    return element_record(e, hlc, draw(ORIGINS), draw(DEADLINES), RecordType.ZSET_MEMBER)


ELEMENTS = {
    K.TAG_HASH: element_records(RecordType.HASH_FIELD),
    K.TAG_SET: element_records(RecordType.SET_MEMBER),
    K.TAG_ZSET: zset_members(),
    K.TAG_ZSCORE: lww_records(RecordType.ZSET_MEMBER, b""),
    K.TAG_LIST: lww_records(RecordType.LIST),
    K.TAG_HLL: st.builds(hll.new, st.integers(1, hll.MAX_RANK), CLOCKS, ORIGINS),
    K.TAG_STREAM: lww_records(RecordType.STREAM_ENTRY, stream.to_bytes([(b"f", b"v")])),
}


def element_key(tag: bytes, user: bytes, n: int) -> bytes:
    kind = BY_CODE[tag[0]]
    args = {K.TAG_ZSCORE: (float(n % 2), b"e%d" % (n // 2)), K.TAG_LIST: (K.LIST_CENTER + n,), K.TAG_HLL: (n,),
            K.TAG_STREAM: (5, n)}.get(tag, (b"e%d" % n,))
    return kind.encode(user, *args)


@st.composite
def partitions(draw) -> dict[bytes, bytes]:
    store = {}
    for user in USERS:
        if draw(st.booleans()):
            store[K.encode_string_key(user)] = draw(lww_records(RecordType.STRING))
        if draw(st.integers(0, 3)):
            store[K.encode_head_key(user)] = draw(head_records())
        for tag in draw(st.sets(st.sampled_from(sorted(ELEMENTS)), max_size=4)):
            for n in range(draw(st.integers(1, 4 if tag == K.TAG_ZSCORE else 2))):
                store[element_key(tag, user, n)] = draw(ELEMENTS[tag])
    return store


def member_of(ik: bytes) -> bytes:
    """The member record key a zset index key stands for."""
    user, _, member = K.decode_zset_score_key(ik)
    return K.encode_zset_member_key(user, member)


def live_reads(store: dict[bytes, bytes], now: int) -> set[bytes]:
    """The internal keys whose record reads as live at ``now`` (an index key: its member
    is live with its score, as readers confirm it; its own envelope says nothing)."""
    out = set()
    for ik, rec in store.items():
        h = store.get(K.encode_head_key(K.user_key_of(ik)))
        if BY_CODE[ik[2]].is_key:
            live = env.is_live(rec, now)
        elif ik[2:3] == K.TAG_ZSCORE:
            m = store.get(member_of(ik))
            live = (m is not None and head.element_live(h, m, now)
                    and K.encode_score(zset.score_of(m)) == ik[len(ik) - len(K.decode_zset_score_key(ik)[2]) - 8:][:8])
        else:
            live = head.element_live(h, rec, now)
        if live:
            out.add(ik)
    return out


def sweep(store: dict[bytes, bytes], now: int = NOW, grace: int = GRACE) -> tuple[list[bytes], PartitionSweep]:
    part = PartitionSweep(now, grace)
    for ik in sorted(store):
        part.feed(ik, store[ik])
    return part.finish(), part


@given(store=partitions())
def test_removal_never_changes_a_read(store):
    dead, part = sweep(store)
    assert len(set(dead)) == len(dead) and set(dead) <= set(store)
    swept = {k: v for k, v in store.items() if k not in set(dead)}
    for now in (NOW, NOW + 1, NOW + 500):
        assert live_reads(swept, now) == live_reads(store, now)
    assert (part.live_keys, part.expiring) == keys_counted(store, NOW)


def keys_counted(store: dict[bytes, bytes], now: int) -> tuple[int, int]:
    """(keys, keys with a TTL) of ``store`` as DBSIZE counts them: a live string, a
    collection by the one existence rule (``head.present``: a live element of its content
    kind, or a live stream's or HyperLogLog's head); its TTL is its live head's."""
    n = ttl = 0
    for k, v in store.items():
        kind = BY_CODE[k[2]]
        if not kind.is_key:
            continue
        if kind.sweep is not Sweep.HEAD:
            present = env.is_live(v, now)
        else:
            content, user = CONTENT[head.ctype_of(v)], K.user_key_of(k)
            nonempty = any(ik[2] == content.code and K.user_key_of(ik) == user and head.element_live(v, r, now)
                           for ik, r in store.items())
            present = head.present(v, now, nonempty)
        n += present
        ttl += present and env.is_live(v, now) and bool(env.ttl_of(v))
    return n, ttl


@given(store=partitions())
def test_a_removed_head_leaves_no_element_behind(store):
    dead = set(sweep(store)[0])
    gone = {K.user_key_of(k) for k in dead if k[2:3] == K.TAG_HEAD}
    for k in set(store) - dead:
        if not BY_CODE[k[2]].is_key:
            assert K.user_key_of(k) not in gone


@given(store=partitions())
def test_what_the_sweep_keeps_is_what_its_rules_keep(store):
    """Every record is removed iff a rule says so (the rules, transcribed)."""
    dead = set(sweep(store)[0])
    hz = horizon(NOW, GRACE)

    def own(rec: bytes) -> bool:
        if env.is_tombstone(rec):
            return env.hlc_of(rec) < hz
        return env.ttl_of(rec) != 0 and env.ttl_of(rec) + GRACE <= NOW

    def gated(ik: bytes, rec: bytes) -> bool:
        h = store.get(K.encode_head_key(K.user_key_of(ik)))
        clock = head.delete_clock(h, NOW) if h is not None else -1
        return (h is not None and clock < hz and env.hlc_of(rec) < hz
                and BY_CODE[ik[2]].gate_clock(rec) <= clock)

    def index_held(ik: bytes) -> bool:
        """An index key stays while a live dot of its member (one the sweep keeps) holds its score."""
        mk = member_of(ik)
        m = store.get(mk)
        if m is None or own(m) or gated(mk, m):
            return False
        return ik[len(ik) - len(K.decode_zset_score_key(ik)[2]) - 8:][:8] in zset.index_scores(m)

    is_index = {k for k in store if k[2:3] == K.TAG_ZSCORE}
    elements_kept = {K.user_key_of(k) for k, v in store.items()
                     if not BY_CODE[k[2]].is_key and (k in is_index or (not own(v) and not gated(k, v)))}
    for ik, rec in store.items():
        kind = BY_CODE[ik[2]]
        if kind.is_key and not kind.head_flag:
            want = own(rec)
        elif kind.head_flag:
            want = own(rec) and K.user_key_of(ik) not in elements_kept
        elif ik in is_index:
            want = env.hlc_of(rec) < hz and not index_held(ik)
        else:
            want = own(rec) or gated(ik, rec)
        assert (ik in dead) == want, (ik, rec)


# -- scenarios -----------------------------------------------------------------------------

U = b"h"


def test_a_deleted_hash_is_reclaimed_whole_once_its_delete_is_older_than_grace():
    h = head.new(CT.HASH, at(100), 1)
    f1 = orswot.add(None, RecordType.HASH_FIELD, at(101), 1, b"v1")
    f2 = orswot.add(None, RecordType.HASH_FIELD, at(102), 1, b"v2")
    dead_head = head.tombstone(h, at(200), 2)
    store = {K.encode_head_key(U): dead_head, K.encode_hash_field_key(U, b"a"): f1,
             K.encode_hash_field_key(U, b"b"): f2}
    assert sweep(store, now=250, grace=100)[0] == []  # the DEL is younger than grace
    assert sorted(sweep(store, now=301, grace=100)[0]) == sorted(store)


def test_a_dead_head_stays_while_an_element_it_gates_cannot_go_yet():
    h = head.tombstone(head.new(CT.SET, at(100), 1), at(200), 2)
    old = orswot.add(None, RecordType.SET_MEMBER, at(150), 1)
    newer = orswot.add(None, RecordType.SET_MEMBER, at(250), 1)  # after the DEL: live
    store = {K.encode_head_key(U): h, K.encode_set_member_key(U, b"old"): old,
             K.encode_set_member_key(U, b"new"): newer}
    assert sweep(store, now=1000, grace=100)[0] == [K.encode_set_member_key(U, b"old")]


def test_elements_of_a_recreated_collection_older_than_its_delete_clock_go_the_head_stays():
    dead = head.tombstone(head.new(CT.LIST, at(100), 1), at(200), 1)
    live = head.new(CT.LIST, at(300), 1, prior=dead, now_ms=300)
    old = lww.new(RecordType.LIST, at(150), 1, b"old")
    kept = lww.new(RecordType.LIST, at(300), 1, b"new")
    store = {K.encode_head_key(U): live, K.encode_list_key(U, 1): old, K.encode_list_key(U, 2): kept}
    assert sweep(store, now=1000, grace=100)[0] == [K.encode_list_key(U, 1)]


def test_hll_registers_sort_before_their_head_and_are_still_gated():
    h = head.tombstone(head.new(CT.HLL, at(100), 1), at(200), 2)
    regs = {K.encode_hll_key(U, b): hll.new(5, at(150), 1) for b in (1, 2, 3)}
    store = {K.encode_head_key(U): h, **regs}
    assert sorted(store)[-1] == K.encode_head_key(U)  # 'H' < 'M'
    assert sorted(sweep(store, now=1000, grace=100)[0]) == sorted(store)


def test_an_orswot_element_touched_after_the_horizon_stays_until_it_is_older():
    """Its only live add predates the DEL (it reads dead), but a remove or EXPIREMEMBER
    folded in later is younger than grace: its covered dots may still be needed."""
    h = head.new(CT.SET, at(300), 1, prior=head.tombstone(head.new(CT.SET, at(100), 1), at(200), 1),
                 now_ms=300)
    e = orswot.add(None, RecordType.SET_MEMBER, at(150), 1)
    touched = env.with_ttl(e, at(950), 2, 0)  # a later envelope write, same live dot
    store = {K.encode_head_key(U): h, K.encode_set_member_key(U, b"m"): touched}
    assert not head.element_live(h, touched, 1000)
    assert sweep(store, now=1000, grace=100)[0] == []
    assert sweep(store, now=1100, grace=100)[0] == [K.encode_set_member_key(U, b"m")]
