"""Differential test of the list family: random command streams sent to a marekvs node and
to a stock redis-server 7.0 side by side, in RESP2 and RESP3; every reply must be the same
bytes (``test_differential.py``'s connection, normalisation and comparison).

The generator aims at the edges: a handful of keys (hash tags, a binary key, one that
holds a string, one that gets a TTL) so commands collide and lists empty and reappear;
few distinct values so LREM, LPOS and LINSERT find their pivots; indexes at and past both
ends and at the int64 limits; counts and ranks of every sign, LLONG_MIN included; options
repeated, misspelt, out of order and missing their argument; wrong arities. Blocking
commands run with short timeouts (a few ms) or none-such keys, so both servers answer
the same thing whether the list has something to pop or the wait times out; invalid
timeouts (negative, NaN, infinite, too large, not a number) are generated too. A
timeout of 0 (forever) is never sent: on an empty list the connection would wait for
good.

Not generated here: blocking commands that are woken by another client (one connection
cannot push while it waits; tests/integration/test_lists.py covers waking, fairness and
CLIENT UNBLOCK against both servers), and OBJECT ENCODING (marekvs reports quicklist
for every list; Redis 7.0 too, but its listpack threshold work is not modelled).
"""

from __future__ import annotations

import random

import pytest

from tests.integration.test_differential import fresh_pair, normalise, same

KEYS = [b"l0", b"l1", b"l2", b"{t}a", b"{t}b", b"\xffbin", b"str"]
VALUES = [b"a", b"b", b"c", b"", b"1", b"-1", b"x" * 40, b"\x00", b"a\r\nb", b"12345678901234567890"]
INDEXES = [b"0", b"1", b"2", b"-1", b"-2", b"-3", b"3", b"5", b"10", b"-10", b"100", b"-100",
           b"9223372036854775807", b"-9223372036854775808", b"9223372036854775808", b"x", b"", b"1.5", b"+1",
           b" 1", b"01", b"-0"]
COUNTS = [b"0", b"1", b"2", b"3", b"5", b"-1", b"-2", b"100", b"9223372036854775807", b"-9223372036854775808",
          b"x", b"", b"1.0", b"+2"]
TIMEOUTS = [b"0.01", b"0.005", b"1e-3", b"0.0001", b"-1", b"-0.5", b"x", b"", b"nan", b"inf", b"-inf",
            b"1e100", b"9223372036854776", b"0.01x"]
WHERE = [b"LEFT", b"RIGHT", b"left", b"Right", b"up", b""]


class Gen:
    def __init__(self, seed: int):
        self.r = random.Random(seed)

    def key(self) -> bytes:
        return self.r.choice(KEYS)

    def list_key(self) -> bytes:
        return self.r.choice(KEYS[:-1] if self.r.random() < 0.9 else KEYS)

    def val(self) -> bytes:
        return self.r.choice(VALUES)

    def vals(self, lo: int, hi: int) -> list[bytes]:
        return [self.val() for _ in range(self.r.randint(lo, hi))]

    def idx(self) -> bytes:
        return self.r.choice(INDEXES)

    def small(self) -> bytes:
        return self.r.choice([b"0", b"1", b"2", b"-1", b"-2", b"3", b"-3", b"10", b"-10"])

    def timeout(self) -> bytes:
        return self.r.choice(TIMEOUTS[:4] if self.r.random() < 0.75 else TIMEOUTS)

    def where(self) -> bytes:
        return self.r.choice(WHERE[:4] if self.r.random() < 0.9 else WHERE)

    def lpos_options(self) -> list[bytes]:
        r = self.r
        opts: list[bytes] = []
        for _ in range(r.randint(0, 3)):
            name = r.choice([b"RANK", b"COUNT", b"MAXLEN", b"rank", b"FOO"])
            opts.append(name)
            if r.random() < 0.93:
                if name.upper() == b"RANK":
                    opts.append(r.choice([b"1", b"2", b"-1", b"-2", b"0", b"3", b"-9223372036854775808",
                                          b"9223372036854775807", b"x"]))
                else:
                    opts.append(r.choice([b"0", b"1", b"2", b"3", b"-1", b"x"]))
        return opts

    def mpop_tail(self) -> list[bytes]:
        r = self.r
        keys = [self.list_key() for _ in range(r.randint(1, 3))]
        n = len(keys)
        numkeys = r.choice([b"%d" % n] * 6 + [b"0", b"-1", b"%d" % (n + 1), b"%d" % (n + 2), b"x",
                                              b"9223372036854775807"])
        tail = [numkeys, *keys, self.where()]
        opt = r.random()
        if opt < 0.4:
            tail += [b"COUNT", r.choice(COUNTS)]
        elif opt < 0.45:
            tail += [b"COUNT"]
        elif opt < 0.5:
            tail += [b"COUNT", b"1", b"COUNT", b"2"]
        elif opt < 0.53:
            tail += [b"FOO"]
        return tail

    def command(self) -> list[bytes]:
        r, k, v = self.r, self.list_key, self.val
        kind = r.randrange(60)
        if kind < 10:
            return [r.choice([b"RPUSH", b"LPUSH"]), k()] + self.vals(1, 4)
        if kind < 12:
            return [r.choice([b"RPUSHX", b"LPUSHX"]), k()] + self.vals(1, 3)
        if kind < 17:
            cmd = r.choice([b"LPOP", b"RPOP"])
            return [cmd, k()] + r.choice([[], [], [r.choice(COUNTS)], [r.choice([b"2", b"3", b"5"])], [b"1", b"2"]])
        if kind < 20:
            return [b"LRANGE", k(), r.choice([self.idx(), self.small()]), r.choice([self.idx(), self.small()])]
        if kind < 22:
            return [b"LLEN", k()] + r.choice([[], [], [], [k()]])
        if kind < 24:
            return [b"LINDEX", k(), r.choice([self.idx(), self.small()])]
        if kind < 26:
            return [b"LSET", k(), r.choice([self.idx(), self.small()]), v()]
        if kind < 28:
            return [b"LINSERT", k(), r.choice([b"BEFORE", b"AFTER", b"before", b"middle"]), v(), v()]
        if kind < 30:
            return [b"LREM", k(), r.choice(COUNTS + [b"-1", b"1", b"0"]), v()]
        if kind < 32:
            return [b"LTRIM", k(), r.choice([self.idx(), self.small()]), r.choice([self.idx(), self.small()])]
        if kind < 35:
            return [b"LPOS", k(), v()] + self.lpos_options()
        if kind < 37:
            return [b"LMOVE", k(), k(), self.where(), self.where()]
        if kind < 38:
            return [b"RPOPLPUSH", k(), k()]
        if kind < 40:
            return [b"LMPOP"] + self.mpop_tail()
        if kind < 42:
            return [r.choice([b"BLPOP", b"BRPOP"])] + [k() for _ in range(r.randint(1, 3))] + [self.timeout()]
        if kind < 43:
            return [b"BLMOVE", k(), k(), self.where(), self.where(), self.timeout()]
        if kind < 44:
            return [b"BRPOPLPUSH", k(), k(), self.timeout()]
        if kind < 45:
            return [b"BLMPOP", self.timeout()] + self.mpop_tail()
        if kind < 47:
            return [r.choice([b"DEL", b"EXISTS", b"TYPE"]), self.key()]
        if kind < 48:
            return [b"SET", r.choice([b"str", b"str", self.key()]), v()]
        if kind < 49:
            return r.choice([[b"EXPIRE", k(), r.choice([b"100", b"0", b"-1"])], [b"TTL", k()], [b"PERSIST", k()]])
        if kind < 50:
            return [b"GET", self.key()]
        if kind < 52:  # arity errors of every command
            name = r.choice([b"LPUSH", b"RPUSH", b"LPUSHX", b"LPOP", b"LLEN", b"LRANGE", b"LINDEX", b"LSET",
                             b"LINSERT", b"LREM", b"LTRIM", b"LPOS", b"LMOVE", b"RPOPLPUSH", b"LMPOP", b"BLPOP",
                             b"BRPOP", b"BLMOVE", b"BRPOPLPUSH", b"BLMPOP"])
            return [name] + [k() for _ in range(r.randint(0, 1))]
        if kind < 54:
            return [b"LRANGE", k(), b"0", b"-1"]
        if kind < 57:
            return [r.choice([b"LPOP", b"RPOP"]), k(), r.choice([b"1", b"4", b"10"])]
        return [b"RPUSH", k()] + self.vals(1, 8)


@pytest.mark.parametrize("proto", [2, 3])
@pytest.mark.parametrize("seed", range(4))
def test_random_list_commands_answer_like_redis(shared_node, real_redis, seed, proto):
    mvs, red = fresh_pair(shared_node.port, real_redis.port, proto)
    try:
        gen = Gen(seed * 10 + proto)
        history: list[tuple[list[bytes], bytes]] = []
        for i in range(1500):
            args = gen.command()
            want = normalise(args, red.call(args))
            got = normalise(args, mvs.call(args))
            history.append((args, want))
            if not same(args, got, want):
                recent = "\n".join(f"  {a!r} -> {w!r}" for a, w in history[-15:])
                pytest.fail(f"seed {seed}, command {i}: {args!r}\n  marekvs: {got!r}\n  redis:   {want!r}\n"
                            f"the last commands (redis's replies):\n{recent}")
        # the lists themselves, at the end
        for key in KEYS:
            args = [b"LRANGE", key, b"0", b"-1"]
            assert mvs.call(args) == red.call(args), key
    finally:
        mvs.close()
        red.close()
