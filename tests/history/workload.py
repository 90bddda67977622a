"""Random operations for the history checker, chosen from what the running node sees.

``Workload.next(rng, node, view)`` returns the argv of one command on one key of the
history's pools (see ``model.POOL_TYPES``); ``view(key)`` is the model's state of a key on
the node about to run it, so removals name members that node has, LSET an index in range,
XACK ids it has pending, and so on. Every type the data model defines is covered, with the
whole-key commands (DEL, PEXPIRE, PERSIST, RENAME, COPY, FLUSHALL) over all of them.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from tests.history.model import MAX_ID, KeyState

TTLS = (1, 2, 3, 5, 40, 100_000)  # ms: some pass within a history, some never
FIELDS = [b"f0", b"f1", b"f2"]
MEMBERS = [b"a", b"b", b"c", b"d"]
ELEMENTS = [b"e%d" % i for i in range(24)]


class Workload:
    def __init__(self, ns: bytes, keys_per_pool: int = 2, flushall: bool = True, pools: str = "shSzlxp",
                 ttls: tuple[int, ...] = TTLS):
        self.ns = ns
        self.pools = pools
        self.ttls = ttls
        self.n = keys_per_pool
        self.flushall = flushall
        self.serial = 0

    def key(self, pool: str, i: int) -> bytes:
        return b"%s:%s:%d" % (pool.encode(), self.ns, i)

    def keys(self) -> list[bytes]:
        return [self.key(p, i) for p in self.pools for i in range(self.n)]

    def unique(self) -> bytes:
        self.serial += 1
        return b"v%d" % self.serial

    def next(self, rng: random.Random, view: Callable[[bytes], KeyState]) -> list[bytes]:
        r = rng.random()
        pool = rng.choice(self.pools)
        k = self.key(pool, rng.randrange(self.n))
        other = self.key(pool, rng.randrange(self.n))
        if r < 0.14:
            return self.whole(rng, k, other, view)
        gen = getattr(self, "op_" + {"s": "string", "h": "hash", "S": "set", "z": "zset", "l": "list",
                                      "x": "stream", "p": "hll"}[pool])
        return gen(rng, k, other, view(k), view)

    def whole(self, rng: random.Random, k: bytes, other: bytes, view) -> list[bytes]:
        c = rng.random()
        if c < 0.3:
            return [b"DEL", k]
        if c < 0.55:
            return [b"PEXPIRE", k, b"%d" % rng.choice(self.ttls)]
        if c < 0.65:
            return [b"PERSIST", k]
        if c < 0.82:
            return [b"RENAME", k, other]
        if c < 0.97 or not self.flushall:
            return [b"COPY", k, other] + ([b"REPLACE"] if rng.random() < 0.7 else [])
        return [b"FLUSHALL"]

    # -- per type ----------------------------------------------------------------------------
    def op_string(self, rng, k, other, st: KeyState, view) -> list[bytes]:
        c = rng.random()
        if c < 0.35:
            v = b"%d" % rng.randrange(-3, 9) if rng.random() < 0.7 else b"x" + self.unique()
            return [b"SET", k, v] + ([b"PX", b"%d" % rng.choice(self.ttls)] if rng.random() < 0.2 else [])
        if c < 0.8 and (not st.exists or st.counter or _is_int(st.value)):
            return [b"INCRBY", k, b"%d" % rng.randrange(-3, 6)]
        if c < 0.9:
            return [b"APPEND", k, b"%d" % rng.randrange(10)]
        return [b"SETBIT", k, b"%d" % rng.randrange(24), b"%d" % rng.randrange(2)]  # a bitmap is a string

    def op_hash(self, rng, k, other, st: KeyState, view) -> list[bytes]:
        c = rng.random()
        f = rng.choice(FIELDS)
        have = sorted(st.elems)
        if c < 0.4:
            v = b"%d" % rng.randrange(5) if rng.random() < 0.6 else b"x" + self.unique()
            return [b"HSET", k, f, v]
        if c < 0.6 and have:
            return [b"HDEL", k] + rng.sample(have, rng.randint(1, len(have)))
        if c < 0.75:
            e = st.elems.get(f)
            if e is None or _is_int(e.value):
                return [b"HINCRBY", k, f, b"%d" % rng.randrange(-2, 4)]
        if c < 0.9 and have:
            return [b"HPEXPIRE", k, b"%d" % rng.choice(self.ttls), b"FIELDS", b"1", rng.choice(have)]
        if have:
            return [b"HPERSIST", k, b"FIELDS", b"1", rng.choice(have)]
        return [b"HSET", k, f, b"1"]

    def op_set(self, rng, k, other, st: KeyState, view) -> list[bytes]:
        c = rng.random()
        have = sorted(st.elems)
        if c < 0.45 or not have:
            return [b"SADD", k] + rng.sample(MEMBERS, rng.randint(1, 2))
        if c < 0.7:
            return [b"SREM", k] + rng.sample(have, rng.randint(1, len(have)))
        if c < 0.85:
            return [b"SPOP", k] + ([b"%d" % rng.randint(1, 2)] if rng.random() < 0.5 else [])
        return [b"SMOVE", k, other, rng.choice(have)]

    def op_zset(self, rng, k, other, st: KeyState, view) -> list[bytes]:
        c = rng.random()
        have = sorted(st.elems)
        m = rng.choice(MEMBERS)
        if c < 0.4 or not have:
            return [b"ZADD", k, b"%d" % rng.randrange(4), m]
        if c < 0.55:
            return [b"ZINCRBY", k, b"%d" % rng.randrange(-1, 3), m]
        if c < 0.75:
            return [b"ZREM", k] + rng.sample(have, rng.randint(1, len(have)))
        if c < 0.88:
            return [b"ZPOPMIN", k, b"%d" % rng.randint(1, 2)]
        lo = rng.randrange(-1, 4)
        return [b"ZREMRANGEBYSCORE", k, b"%d" % lo, b"%d" % (lo + rng.randrange(2))]

    def op_list(self, rng, k, other, st: KeyState, view) -> list[bytes]:
        c = rng.random()
        n = len(st.slots)
        vals = [st.slots[p] for p in sorted(st.slots)]
        if c < 0.35 or not n:
            return [rng.choice((b"LPUSH", b"RPUSH")), k] + [self.unique() for _ in range(rng.randint(1, 3))]
        if c < 0.55:
            return [rng.choice((b"LPOP", b"RPOP")), k] + ([b"%d" % rng.randint(1, 2)] if rng.random() < 0.5 else [])
        if c < 0.63:
            return [b"LSET", k, b"%d" % rng.randrange(-n, n), self.unique()]
        if c < 0.71:
            a = rng.randrange(-n, n)
            return [b"LTRIM", k, b"%d" % a, b"%d" % rng.randrange(-n, n)]
        if c < 0.79:
            return [b"LREM", k, b"%d" % rng.randint(-1, 1), rng.choice(vals)]
        if c < 0.88:
            return [b"LINSERT", k, rng.choice((b"BEFORE", b"AFTER")), rng.choice(vals), self.unique()]
        return [b"LMOVE", k, other, rng.choice((b"LEFT", b"RIGHT")), rng.choice((b"LEFT", b"RIGHT"))]

    def op_stream(self, rng, k, other, st: KeyState, view) -> list[bytes]:
        c = rng.random()
        ids = sorted(st.slots)
        if c < 0.35:
            return [b"XADD", k, b"*", b"f", self.unique()]
        if c < 0.42:
            if rng.random() < 0.3:
                return [b"XADD", k, b"%d-%d" % MAX_ID, b"f", self.unique()]
            ms = min(st.last_id[0] + rng.randint(0, 2), MAX_ID[0]) if st.exists else rng.randint(0, 3)
            return [b"XADD", k, b"%d-%d" % (ms, rng.randint(0, 3)), b"f", self.unique()]
        if c < 0.5 and ids:
            return [b"XDEL", k] + [b"%d-%d" % rng.choice(ids)]
        if c < 0.56:
            return [b"XTRIM", k, b"MAXLEN", b"%d" % rng.randint(0, 2)]
        if c < 0.68:
            return [b"XGROUP", b"CREATE", k, b"g", rng.choice((b"0", b"$"))] + (
                [b"MKSTREAM"] if rng.random() < 0.5 else [])
        if c < 0.85:
            return [b"XREADGROUP", b"GROUP", b"g", b"c", b"COUNT", b"%d" % rng.randint(1, 3),
                    b"STREAMS", k, b">"]
        pending = sorted(st.groups.get(b"g", (None, set()))[1])
        if pending:
            return [b"XACK", k, b"g"] + [b"%d-%d" % i for i in rng.sample(pending, rng.randint(1, len(pending)))]
        return [b"XADD", k, b"*", b"f", self.unique()]

    def op_hll(self, rng, k, other, st: KeyState, view) -> list[bytes]:
        if rng.random() < 0.8:
            return [b"PFADD", k] + rng.sample(ELEMENTS, rng.randint(0, 4))
        return [b"PFMERGE", k, other]


def _is_int(v: bytes | None) -> bool:
    if v is None:
        return False
    try:
        return v == b"%d" % int(v)
    except ValueError:
        return False
