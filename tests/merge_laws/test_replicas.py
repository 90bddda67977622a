"""Three replicas, random local ops, a lossy network: everything converges by spec.

Each replica is a dict ``ikey -> record`` merged with ``core.merge.merge`` and its own
HLC over a shared fake wall clock (with a per-replica skew). A local op reads the
replica's records, builds new ones with the core lattice modules exactly as a command
would, merges them in, and ships each *changed* record to every peer (full mesh, like
the replication log). The network duplicates, reorders and loses messages; ``converge``
(also run at teardown) redelivers everything, then checks that every replica holds
the same bytes and that the values follow the spec, against a model kept from the
ops alone:

- strings: LWW over SET / DEL / EXPIRE; expiry wins over older writes;
- counters: the highest base version wins; every increment made on it counts (on
  whatever node); an explicit SET resets;
- set members / hash fields: a remove never resurrects an add it observed, an add the
  removes did not observe survives (unless four newer adds of the element exist: the
  documented cap rule), the value is the highest live add's, and a whole-collection
  DEL gates everything older;
- HLL: live registers are the pointwise max rank of every element added (for keys
  never deleted: see the register limitation in hll.py);
- streams: ids are unique and increasing per origin; live entries are those added,
  not XDELed, newer than the last DEL;
- lists: each position holds its LWW winner, gated by DEL.
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from marekvs.core import envelope as env
from marekvs.core import head, hll, listelem, lww, orswot, pncounter, stream
from marekvs.core import keys as K
from marekvs.core.envelope import RecordType as R
from marekvs.core.head import CollectionType as CT
from marekvs.core.hlc import HLC
from marekvs.core.merge import merge

T0 = 1_700_000_000_000
SKEWS = (0, 2, -1)
REPLICA = st.integers(0, len(SKEWS) - 1)
STRINGS = st.sampled_from([b"s0", b"s1"])
COUNTERS = st.sampled_from([b"c0", b"c1"])
SETS = [b"set0", b"set1"]
HASHES = [b"hash0"]
MEMBERS = st.sampled_from([b"a", b"b", b"c"])
VALUES = st.sampled_from([b"x", b"y", b"z"])
HLLS = [b"hll0"]
STREAMS = [b"stream0"]
LISTS = [b"list0"]
COLLECTIONS = st.sampled_from(SETS + HASHES + HLLS + STREAMS + LISTS)
PFADD_POOL = st.lists(st.sampled_from([b"e%d" % i for i in range(40)]), min_size=1, max_size=6)

_ELEMENT = {CT.SET: (R.SET_MEMBER, K.encode_set_member_key),
            CT.HASH: (R.HASH_FIELD, K.encode_hash_field_key)}


class Replica:
    def __init__(self, node: int, clock):
        self.node = node
        self.hlc = HLC(clock=clock)
        self.store: dict[bytes, bytes] = {}

    def write(self, ikey: bytes, rec: bytes) -> bytes | None:
        cur = self.store.get(ikey)
        m = merge(ikey, cur, rec)
        if m is cur:
            return None
        self.store[ikey] = m
        return m

    def scan(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        return sorted((k, v) for k, v in self.store.items() if k.startswith(prefix))


def _version(rec: bytes) -> tuple[int, int]:
    return env.hlc_of(rec), env.origin_of(rec)


class Replicas(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.now = T0
        self.replicas = [Replica(i + 1, self._clock(s)) for i, s in enumerate(SKEWS)]
        self.inflight: list[tuple[int, bytes, bytes]] = []
        self.lost: list[tuple[int, bytes, bytes]] = []
        # the model, from the ops alone
        self.string_ops = defaultdict(list)    # key -> [(version, value or None, deadline)]
        self.counter_bases = defaultdict(dict)  # key -> {base version: base value or None}
        self.increments = defaultdict(list)     # key -> [(base version, delta)]
        self.adds = defaultdict(dict)           # (key, member) -> {dot: value}
        self.covered = defaultdict(set)         # (key, member) -> covered dots
        self.dels = defaultdict(int)            # collection key -> highest DEL hlc
        self.hll_elements = defaultdict(list)   # key -> elements
        self.stream_ids = defaultdict(dict)     # key -> {id: (hlc, fields)}
        self.xdeleted = defaultdict(set)        # key -> ids
        self.list_writes = defaultdict(list)    # key -> [(pos, version, value or None)]

    def _clock(self, skew):
        return lambda: self.now + skew

    # -- plumbing -----------------------------------------------------------------------
    def _commit(self, r: Replica, records) -> None:
        for ikey, rec in records:
            m = r.write(ikey, rec)
            if m is not None:
                self.inflight.extend((j, ikey, m) for j in range(len(self.replicas))
                                     if self.replicas[j] is not r)

    def _receive(self, msg) -> None:
        dest, ikey, rec = msg
        r = self.replicas[dest]
        r.hlc.update(env.hlc_of(rec))
        r.write(ikey, rec)

    def _head(self, r: Replica, key: bytes, ctype: int, hlc: int):
        """(head record to use, records to write): re-creates a dead head."""
        hk = K.encode_head_key(key)
        h = r.store.get(hk)
        if head.is_live(h, self.now):
            return h, []
        new = head.new(ctype, hlc, r.node, prior=h, now_ms=self.now)
        return new, [(hk, new)]

    def _live(self, r: Replica, key: bytes, prefix: bytes):
        h = r.store.get(K.encode_head_key(key))
        return [(k, v) for k, v in r.scan(prefix) if head.element_live(h, v, self.now)]

    # -- network ------------------------------------------------------------------------
    @rule(ms=st.integers(0, 30))
    def tick(self, ms):
        self.now += ms

    @precondition(lambda self: self.inflight)
    @rule(i=st.integers(0, 1 << 16), keep=st.booleans())
    def deliver(self, i, keep):
        """Deliver one message in any order; ``keep`` delivers it again later."""
        i %= len(self.inflight)
        msg = self.inflight[i] if keep else self.inflight.pop(i)
        self._receive(msg)

    @precondition(lambda self: self.inflight)
    @rule(i=st.integers(0, 1 << 16))
    def lose(self, i):
        """Lose a message until the final redelivery."""
        self.lost.append(self.inflight.pop(i % len(self.inflight)))

    # -- strings ------------------------------------------------------------------------
    @rule(ri=REPLICA, key=STRINGS, value=VALUES)
    def set_string(self, ri, key, value):
        r = self.replicas[ri]
        hlc = r.hlc.now()
        self._commit(r, [(K.encode_string_key(key), lww.new(R.STRING, hlc, r.node, value))])
        self.string_ops[key].append(((hlc, r.node), value, 0))

    @rule(ri=REPLICA, key=STRINGS)
    def del_string(self, ri, key):
        r = self.replicas[ri]
        ik = K.encode_string_key(key)
        if ik in r.store and lww.value(r.store[ik], self.now) is not None:
            hlc = r.hlc.now()
            self._commit(r, [(ik, lww.tombstone(R.STRING, hlc, r.node))])
            self.string_ops[key].append(((hlc, r.node), None, 0))

    @rule(ri=REPLICA, key=STRINGS, ttl=st.integers(1, 60))
    def expire_string(self, ri, key, ttl):
        r = self.replicas[ri]
        ik = K.encode_string_key(key)
        cur = r.store.get(ik)
        if cur is not None and lww.value(cur, self.now) is not None:
            hlc = r.hlc.now()
            self._commit(r, [(ik, env.with_ttl(cur, hlc, r.node, self.now + ttl))])
            self.string_ops[key].append(((hlc, r.node), env.payload_of(cur), self.now + ttl))

    # -- counters -----------------------------------------------------------------------
    @rule(ri=REPLICA, key=COUNTERS, delta=st.integers(-3, 5))
    def incrby(self, ri, key, delta):
        r = self.replicas[ri]
        ik = K.encode_string_key(key)
        cur = r.store.get(ik)
        if cur is None:
            base = (0, 0)
        elif pncounter.is_counter(cur):
            c = pncounter.from_bytes(env.payload_of(cur))
            base = (c.base_hlc, c.base_origin)
        else:
            base = _version(cur)  # a SET's or a DEL's version
        hlc = r.hlc.now()
        self._commit(r, [(ik, pncounter.incr(cur, delta, hlc, r.node, self.now))])
        self.increments[key].append((base, delta))

    @rule(ri=REPLICA, key=COUNTERS, n=st.integers(-10, 10))
    def set_counter(self, ri, key, n):
        r = self.replicas[ri]
        hlc = r.hlc.now()
        self._commit(r, [(K.encode_string_key(key), lww.new(R.STRING, hlc, r.node, b"%d" % n))])
        self.counter_bases[key][(hlc, r.node)] = n

    @rule(ri=REPLICA, key=COUNTERS)
    def del_counter(self, ri, key):
        r = self.replicas[ri]
        ik = K.encode_string_key(key)
        if ik in r.store and pncounter.value(r.store[ik], self.now) is not None:
            hlc = r.hlc.now()
            self._commit(r, [(ik, lww.tombstone(R.STRING, hlc, r.node))])
            self.counter_bases[key][(hlc, r.node)] = None

    # -- sets and hashes (ORSWOT elements) ----------------------------------------------
    def _add(self, ri, key, ctype, member, value):
        r = self.replicas[ri]
        rtype, encode = _ELEMENT[ctype]
        ek = encode(key, member)
        cur = r.store.get(ek)
        hlc = r.hlc.now()
        _, recs = self._head(r, key, ctype, hlc)
        recs.append((ek, orswot.add(cur, rtype, hlc, r.node, value)))
        self._commit(r, recs)
        if cur is not None:
            self.covered[key, member].update(d for d, _ in orswot.element_of(cur).live)
        self.adds[key, member][(hlc, r.node)] = value

    def _remove(self, ri, key, ctype, member):
        r = self.replicas[ri]
        ek = _ELEMENT[ctype][1](key, member)
        cur = r.store.get(ek)
        h = r.store.get(K.encode_head_key(key))
        if cur is None or not head.element_live(h, cur, self.now):
            return
        self._commit(r, [(ek, orswot.remove(cur, r.hlc.now(), r.node))])
        self.covered[key, member].update(d for d, _ in orswot.element_of(cur).live)

    @rule(ri=REPLICA, key=st.sampled_from(SETS), member=MEMBERS)
    def sadd(self, ri, key, member):
        self._add(ri, key, CT.SET, member, b"")

    @rule(ri=REPLICA, key=st.sampled_from(SETS), member=MEMBERS)
    def srem(self, ri, key, member):
        self._remove(ri, key, CT.SET, member)

    @rule(ri=REPLICA, key=st.sampled_from(HASHES), field=MEMBERS, value=VALUES)
    def hset(self, ri, key, field, value):
        self._add(ri, key, CT.HASH, field, value)

    @rule(ri=REPLICA, key=st.sampled_from(HASHES), field=MEMBERS)
    def hdel(self, ri, key, field):
        self._remove(ri, key, CT.HASH, field)

    @rule(ri=REPLICA, key=COLLECTIONS)
    def del_collection(self, ri, key):
        r = self.replicas[ri]
        hk = K.encode_head_key(key)
        h = r.store.get(hk)
        if head.is_live(h, self.now):
            hlc = r.hlc.now()
            self._commit(r, [(hk, head.tombstone(h, hlc, r.node))])
            self.dels[key] = max(self.dels[key], hlc)
            event("whole collection deleted")

    # -- HLL ----------------------------------------------------------------------------
    @rule(ri=REPLICA, key=st.sampled_from(HLLS), elements=PFADD_POOL)
    def pfadd(self, ri, key, elements):
        r = self.replicas[ri]
        live = {K.decode_hll_key(k)[1]: hll.value(v)
                for k, v in self._live(r, key, K.collection_prefix(K.TAG_HLL, key))}
        self.hll_elements[key].extend(elements)
        updates = hll.pfadd(live, elements)
        if updates:
            hlc = r.hlc.now()
            _, recs = self._head(r, key, CT.HLL, hlc)
            recs += [(K.encode_hll_key(key, b), hll.new(rank, hlc, r.node))
                     for b, rank in updates.items()]
            self._commit(r, recs)

    # -- streams ------------------------------------------------------------------------
    @rule(ri=REPLICA, key=st.sampled_from(STREAMS), value=VALUES)
    def xadd(self, ri, key, value):
        r = self.replicas[ri]
        hlc = r.hlc.now()
        h, recs = self._head(r, key, CT.STREAM, hlc)
        hd = head.head_of(h)
        last = (hd.last_ms, hd.last_seq)
        sid = stream.next_id(last, hlc, r.node)
        assert sid > last and sid not in self.stream_ids[key]
        fields = [(b"f", value)]
        recs += [(K.encode_stream_key(key, *sid), stream.new(fields, hlc, r.node)),
                 (K.encode_head_key(key), head.with_last_id(h, *sid, hlc, r.node))]
        self._commit(r, recs)
        self.stream_ids[key][sid] = (hlc, fields)

    @rule(ri=REPLICA, key=st.sampled_from(STREAMS), i=st.integers(0, 1 << 16))
    def xdel(self, ri, key, i):
        r = self.replicas[ri]
        live = self._live(r, key, K.collection_prefix(K.TAG_STREAM, key))
        if live:
            ik = live[i % len(live)][0]
            self._commit(r, [(ik, stream.tombstone(r.hlc.now(), r.node))])
            self.xdeleted[key].add(K.decode_stream_key(ik)[1:])

    # -- lists --------------------------------------------------------------------------
    @rule(ri=REPLICA, key=st.sampled_from(LISTS), left=st.booleans(), value=VALUES)
    def push(self, ri, key, left, value):
        r = self.replicas[ri]
        positions = [K.decode_list_key(k)[1]
                     for k, _ in self._live(r, key, K.collection_prefix(K.TAG_LIST, key))]
        if left:
            pos = listelem.lpush_pos(min(positions) if positions else None)
        else:
            pos = listelem.rpush_pos(max(positions) if positions else None)
        hlc = r.hlc.now()
        _, recs = self._head(r, key, CT.LIST, hlc)
        recs.append((K.encode_list_key(key, pos), listelem.new(value, hlc, r.node)))
        self._commit(r, recs)
        self.list_writes[key].append((pos, (hlc, r.node), value))

    @rule(ri=REPLICA, key=st.sampled_from(LISTS), left=st.booleans())
    def pop(self, ri, key, left):
        r = self.replicas[ri]
        live = self._live(r, key, K.collection_prefix(K.TAG_LIST, key))
        if live:
            ik = live[0 if left else -1][0]
            hlc = r.hlc.now()
            self._commit(r, [(ik, listelem.tombstone(hlc, r.node))])
            self.list_writes[key].append((K.decode_list_key(ik)[1], (hlc, r.node), None))

    # -- convergence ----------------------------------------------------------------------
    @rule()
    def converge(self):
        pending, self.inflight, self.lost = self.inflight + self.lost, [], []
        for msg in reversed(pending):  # reversed: the most reordered delivery
            self._receive(msg)
        first = self.replicas[0].store
        for r in self.replicas[1:]:
            assert r.store == first, f"replica {r.node} diverged"
        self._check_strings(first)
        self._check_counters(first)
        self._check_elements(first)
        self._check_hll(first)
        self._check_streams(first)
        self._check_lists(first)

    def teardown(self):
        self.converge()

    def _check_strings(self, store):
        for key, ops in self.string_ops.items():
            _version, value, deadline = max(ops)
            if deadline and self.now >= deadline:
                value = None  # expiry wins over older writes
                event("string expired")
            assert lww.value(store[K.encode_string_key(key)], self.now) == value

    def _check_counters(self, store):
        for key in set(self.counter_bases) | set(self.increments):
            bases = dict(self.counter_bases[key])
            deltas = defaultdict(int)
            for base, d in self.increments[key]:
                deltas[base] += d
                bases.setdefault(base, None)
            winner = max(bases)
            if winner in deltas:  # a counter on the winning base: every increment counts
                expected = b"%d" % ((bases[winner] or 0) + deltas[winner])
                if len(self._slots(store, key)) > 1:
                    event("counter incremented on several nodes")
            else:  # an explicit SET (or DEL) with no increment after it
                expected = None if bases[winner] is None else b"%d" % bases[winner]
            assert pncounter.value(store[K.encode_string_key(key)], self.now) == expected

    @staticmethod
    def _slots(store, key):
        rec = store[K.encode_string_key(key)]
        return pncounter.from_bytes(env.payload_of(rec)).slots if pncounter.is_counter(rec) else {}

    def _check_elements(self, store):
        for (key, member), adds in self.adds.items():
            ctype = CT.SET if key in SETS else CT.HASH
            rec = store[_ELEMENT[ctype][1](key, member)]
            covered = self.covered[key, member]
            live = [d for d, _ in orswot.element_of(rec).live]
            assert not covered & set(live), "a remove resurrected an add it observed"
            expected = [d for d in sorted(adds, reverse=True)[:orswot.LIVE_CAP]
                        if d not in covered]
            assert live == expected, "an add no remove observed was lost"
            if len(live) > 1:
                event("element with concurrent live adds")
            if covered - set(live) and live:
                event("element re-added or concurrently added after a remove")
            h = store.get(K.encode_head_key(key))
            want = adds[expected[0]] if expected and expected[0][0] > self.dels[key] else None
            assert orswot.value(rec, self.now, head.delete_clock(h, self.now)) == want

    def _check_hll(self, store):
        for key, elements in self.hll_elements.items():
            if self.dels[key]:
                continue  # registers after DEL: see the limitation in hll.py
            h = store.get(K.encode_head_key(key))
            live = {K.decode_hll_key(k)[1]: hll.value(v) for k, v in store.items()
                    if k.startswith(K.collection_prefix(K.TAG_HLL, key))
                    and head.element_live(h, v, self.now)}
            assert live == hll.pfadd({}, elements)

    def _check_streams(self, store):
        for key, minted in self.stream_ids.items():
            h = store.get(K.encode_head_key(key))
            prefix = K.collection_prefix(K.TAG_STREAM, key)
            live = {K.decode_stream_key(k)[1:]: stream.value(v, self.now)
                    for k, v in store.items()
                    if k.startswith(prefix) and head.element_live(h, v, self.now)}
            expected = {sid: fields for sid, (hlc, fields) in minted.items()
                        if sid not in self.xdeleted[key] and hlc > self.dels[key]}
            assert live == expected
            hd = head.head_of(h)
            assert (hd.last_ms, hd.last_seq) == max(minted)

    def _check_lists(self, store):
        for key, writes in self.list_writes.items():
            winners: dict[int, tuple] = {}
            for pos, version, value in writes:
                if pos not in winners or version > winners[pos][0]:
                    winners[pos] = (version, value)
            expected = [v for p, (ver, v) in sorted(winners.items())
                        if v is not None and ver[0] > self.dels[key]]
            h = store.get(K.encode_head_key(key))
            got = [listelem.value(v, self.now) for k, v in sorted(store.items())
                   if k.startswith(K.collection_prefix(K.TAG_LIST, key))
                   and head.element_live(h, v, self.now)]
            assert got == expected


Replicas.TestCase.settings = settings(max_examples=2 * settings().max_examples,
                                      stateful_step_count=80)
TestReplicas = Replicas.TestCase
