"""The collection families (hashes, sets, lists, sorted sets, geo) side by side with a stock
redis-server 7.0: the keyspace notifications each command fires, in order, on
``__keyspace@0__:*`` and ``__keyevent@0__:*`` (and ``new`` / ``keymiss`` when asked for);
the keyspace hits and misses each command counts (INFO stats); client tracking of their
reads, invalidated by a write of another client or by a record merged from a peer on a
three-node cluster; MULTI/EXEC with them. Redis 7.4's field TTLs (absent from 7.0) are
checked against the events Redis 7.4's ``t_hash.c`` fires.

No test waits on time: the listener reads up to a sentinel message PUBLISHed after the
commands (the server delivers in order), a client up to its reply to a sentinel PING
(``tests/helpers.sync``), a deadline event until it arrives (generous socket timeouts).
"""

from __future__ import annotations

import re
import socket

import pytest
import redis

from tests.helpers import Node, RedisServer, conversation, mb, sync

SENTINEL = b"__sentinel__"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    n = Node(tmp_path_factory.mktemp("cev") / "data").start()
    r = RedisServer(tmp_path_factory.mktemp("cev-redis")).start()
    yield n, r
    n.stop()
    r.stop()


# -- the listener's stream ---------------------------------------------------------------------

def _parse(buf: bytes, i: int = 0):
    """One RESP2/RESP3 reply at ``buf[i:]``: (value, next index), None if incomplete."""
    end = buf.find(b"\r\n", i)
    if end < 0:
        return None
    t, line = buf[i:i + 1], buf[i + 1:end]
    if t in (b"*", b">"):
        n = int(line)
        out, j = [], end + 2
        for _ in range(max(n, 0)):
            got = _parse(buf, j)
            if got is None:
                return None
            v, j = got
            out.append(v)
        return out, j
    if t == b"$":
        n = int(line)
        if n < 0:
            return None, end + 2
        if len(buf) < end + 2 + n + 2:
            return None
        return buf[end + 2:end + 2 + n], end + 2 + n + 2
    return line, end + 2


def messages(buf: bytes) -> list[list]:
    out, i = [], 0
    while i < len(buf):
        got = _parse(buf, i)
        if got is None:
            break
        v, i = got
        out.append(v)
    return out


class Listener:
    """A client subscribed to every keyspace and keyevent channel of db 0 and to the
    sentinel channel."""

    def __init__(self, port: int):
        self.s = socket.create_connection(("127.0.0.1", port), timeout=60)
        self.s.sendall(b"PSUBSCRIBE __keyspace@0__:* __keyevent@0__:*\r\nSUBSCRIBE " + SENTINEL + b"\r\n")
        self.buf = b""
        self.until(lambda m: m[:1] == [b"subscribe"])

    def until(self, done) -> list[list]:
        """Messages up to the first one ``done`` accepts (included)."""
        out = []
        while True:
            got = _parse(self.buf)
            if got is not None:
                m, i = got
                self.buf = self.buf[i:]
                out.append(m)
                if done(m):
                    return out
                continue
            d = self.s.recv(65536)
            assert d, "the listener's connection closed"
            self.buf += d

    def close(self) -> None:
        self.s.close()


def _event(m: list) -> tuple[bytes, bytes] | None:
    """(channel, message) of a keyspace notification."""
    if m and m[0] == b"pmessage":
        return m[2], m[3]
    return None


def event_stream(port: int, lines: list[str], flags: bytes) -> list[tuple[str, list, bytes]]:
    """(command, its events in order, its reply) for each of ``lines`` run on a client,
    as a listener sees them: after each command the client PUBLISHes a numbered sentinel,
    so every command's events are told apart (inside MULTI the sentinels are queued and
    run in place)."""
    c = socket.create_connection(("127.0.0.1", port), timeout=60)
    c.sendall(b"FLUSHALL\r\nCONFIG SET notify-keyspace-events " + flags + b"\r\n")
    sync(c)
    lst = Listener(port)
    out = []
    waiting: list[tuple[int, str]] = []
    multi = False
    try:
        for i, line in enumerate(lines):
            c.sendall(mb(*line.encode().split()) + mb(b"PUBLISH", SENTINEL, b"%d" % i))
            waiting.append((i, line))
            name = line.split()[0].upper()
            multi = (multi or name == "MULTI") and name not in ("EXEC", "DISCARD")
            if multi:
                continue  # (a PING would be queued: the transaction's replies come with EXEC's)
            reply = sync(c)
            for j, queued in waiting:
                got = lst.until(lambda m, j=j: m[:1] == [b"message"] and m[2] == b"%d" % j)
                out.append((queued, [e for e in map(_event, got) if e is not None], reply if j == i else b""))
            waiting = []
    finally:
        c.sendall(b"CONFIG SET notify-keyspace-events \"\"\r\n")
        sync(c)
        c.close()
        lst.close()
    return out


HASHES = """HSET h a 1 b 2
HSET h a 1
HSETNX h a 3
HSETNX h c 3
HMSET h d 4
HINCRBY h n 5
HINCRBY h a notanint
HINCRBYFLOAT h f 1.5
HINCRBYFLOAT h d x
HGET h a
HMGET h a zz
HDEL h zz
HDEL h a b
HDEL h c d n f
HDEL h x
HDEL nokey x
SET str v
HSET str a 1
HDEL str a
HINCRBY str a 1
HGETALL str
HLEN h
HKEYS nokey
HRANDFIELD h
HSCAN h 0
HSET h2 a 1
DEL h2"""

SETS = """SADD s a b c
SADD s a
SREM s x
SREM s a
SMOVE s d b
SMOVE s d b
SMOVE s s c
SPOP s
SADD s2 1 2 3
SPOP s2 0
SPOP s2 5
SADD p 1 2 3
SPOP p 2
SPOP nokey
SADD a 1 2
SADD b 2 3
SINTERSTORE dst a b
SUNIONSTORE dst a b
SDIFFSTORE dst a a
SDIFFSTORE dst a a
SINTERSTORE dst a nokey
SUNIONSTORE dst a
SINTERSTORE dst a nokey
SET str x
SUNIONSTORE str a
SADD str y
SINTER a b
SISMEMBER a 1
SMEMBERS nokey
SCARD a
SMOVE a b 1
SMOVE a b 2
SMOVE str b 3
SREM b 1 2 3"""

LISTS = """LPUSH l a b
RPUSH l c
LPUSHX nol x
RPUSHX l d
LINSERT l BEFORE c x
LINSERT l AFTER zz y
LINSERT nol AFTER a b
LSET l 0 z
LSET l 99 z
LREM l 0 nothere
LREM l 1 x
LTRIM l 0 -1
LTRIM l 0 1
LTRIM nol 0 1
LPOP l
RPOP l
RPOP l
RPUSH l 1 2 3
LPOP l 0
LPOP l 5
RPUSH l 1 2
LMOVE l l2 LEFT RIGHT
LMOVE l l2 LEFT LEFT
RPOPLPUSH l2 l2
LMOVE l2 l2 LEFT LEFT
LMOVE nol l2 LEFT LEFT
LMPOP 2 nol l2 RIGHT COUNT 10
RPUSH q 1
BLPOP q 0
RPUSH q 1 2
BLMOVE q q2 LEFT RIGHT 0
BRPOPLPUSH q q2 0
BLMPOP 0 1 q2 LEFT COUNT 1
BRPOP q2 0
RPUSH t 1 2 3
LTRIM t 5 10
LRANGE t 0 -1
LINDEX l2 0
LLEN nol
LPOS nol x
RPUSH r a b a
LREM r 0 a
LREM r 0 b
SET str v
LPUSH str a
RPUSH m x
LMOVE m str LEFT LEFT"""

ZSETS = """ZADD z 1 a 2 b
ZADD z 1 a
ZADD z XX 5 nope
ZADD z INCR 1 a
ZINCRBY z 1 b
ZINCRBY z 0 b
ZADD z CH 3 a
ZADD z NX 9 a
ZADD z GT 1 a
ZREM z nope
ZREM z a
ZADD z 1 a 2 c 3 d 4 e
ZREMRANGEBYSCORE z 100 200
ZREMRANGEBYSCORE z 1 1
ZREMRANGEBYRANK z 0 0
ZPOPMIN z
ZPOPMIN z 0
ZPOPMAX z 10
ZPOPMAX z
ZADD lx 0 a 0 b 0 c
ZREMRANGEBYLEX lx [a [b
ZREMRANGEBYLEX lx - +
ZADD z2 1 a 2 b
ZADD z3 2 b 3 c
ZUNIONSTORE d 2 z2 z3
ZINTERSTORE d 2 z2 z3
ZDIFFSTORE d 2 z2 z3
ZINTERSTORE d 2 z2 nokey
ZINTERSTORE d 2 z2 nokey
ZRANGESTORE d2 z2 0 -1
ZRANGESTORE d2 z2 5 10
ZMPOP 1 z2 MIN
BZPOPMIN z2 0
BZMPOP 0 1 z3 MAX COUNT 5
ZSCORE z3 b
ZRANGE nokey 0 -1
ZRANK z3 c
ZCARD nokey
SET str v
ZADD str 1 a
ZUNIONSTORE str 1 z2"""

GEO = """GEOADD g 13.361389 38.115556 Palermo 15.087269 37.502669 Catania
GEOADD g 13.361389 38.115556 Palermo
GEOADD g XX 1 1 Nope
GEOADD g CH 13.361389 38.2 Palermo
GEOSEARCHSTORE gd g FROMLONLAT 15 37 BYRADIUS 200 km
GEORADIUS g 15 37 200 km STORE gd2
GEOSEARCHSTORE gd g FROMLONLAT 0 0 BYRADIUS 1 km
GEOSEARCHSTORE gd g FROMLONLAT 0 0 BYRADIUS 1 km
GEORADIUSBYMEMBER g Palermo 10 km STOREDIST gd3
GEOSEARCHSTORE gd4 nokey FROMLONLAT 0 0 BYRADIUS 1 km
GEOSEARCHSTORE gd3 nokey FROMLONLAT 0 0 BYRADIUS 1 km
GEOPOS g Palermo
GEODIST nokey a b
GEOHASH g Palermo
GEOSEARCH g FROMLONLAT 15 37 BYRADIUS 200 km"""

# every read command of the families on a present, a missing and a wrong-type key, then
# writes that read nothing; a hash emptied by HDEL reads as a missing key
READS = """HSET h a 1 b 22
SADD s x y
RPUSH l a b c
ZADD z 1 a 2 b
SET str v
GEOADD g 13.361389 38.115556 Palermo
HGET h a
HGET h zz
HGET nokey a
HGET str a
HEXISTS h a
HEXISTS h zz
HEXISTS nokey a
HEXISTS str a
HSTRLEN h b
HSTRLEN nokey b
HVALS h
HVALS str
HKEYS h
HMGET nokey a b
HMGET h zz yy
HMGET h a yy
HLEN h
HLEN str
HRANDFIELD h 2
HRANDFIELD nokey 2 WITHVALUES
HRANDFIELD h 0
HRANDFIELD h notanumber
HRANDFIELD nokey
HSCAN nokey 0
HSCAN str 0
HSCAN h 0 COUNT 5
HGETALL h
SISMEMBER s x
SISMEMBER s zz
SISMEMBER nokey zz
SISMEMBER str a
SMISMEMBER s x zz
SMISMEMBER s zz yy
SMISMEMBER nokey x
SMEMBERS s
SMEMBERS str
SCARD s
SCARD nokey
SRANDMEMBER s
SRANDMEMBER nokey
SRANDMEMBER s 5
SRANDMEMBER nokey -3
SRANDMEMBER s 0
SSCAN s 0
SSCAN nokey 0
SINTER s nokey
SINTER nokey s
SINTER s str s
SUNION s nokey s
SUNION s str nokey
SDIFF nokey s
SDIFF s str
SINTERCARD 2 s nokey
SINTERCARD 2 s s LIMIT 1
SINTERSTORE d s str
SUNIONSTORE d nokey s
LLEN l
LLEN str
LRANGE l 0 -1
LRANGE str 0 -1
LRANGE l x 1
LINDEX l 1
LINDEX l 99
LINDEX l notanumber
LINDEX str 0
LPOS l b
LPOS l zz
LPOS str a
LPOS l a RANK 0
ZSCORE z a
ZSCORE z zz
ZSCORE str a
ZMSCORE z a zz
ZMSCORE nokey a
ZCARD z
ZCARD str
ZCOUNT z -inf +inf
ZCOUNT nokey 0 1
ZCOUNT z x y
ZLEXCOUNT z - +
ZRANGE z 0 -1
ZRANGE z 0 -1 WITHSCORES
ZRANGE str 0 -1
ZRANGE nokey 0 -1 BYSCORE
ZREVRANGE z 0 0
ZRANGEBYSCORE z 1 2
ZREVRANGEBYSCORE nokey 2 1
ZRANGEBYLEX z - +
ZREVRANGEBYLEX z + -
ZRANK z a
ZRANK z zz
ZRANK nokey a
ZREVRANK z a
ZREVRANK str a
ZRANDMEMBER z
ZRANDMEMBER nokey
ZRANDMEMBER z 2 WITHSCORES
ZRANDMEMBER nokey 2
ZSCAN z 0
ZSCAN nokey 0
ZUNION 2 z nokey
ZUNION 3 z s nokey
ZINTER 2 z str
ZINTER 2 nokey z
ZDIFF 2 z s
ZINTERCARD 2 z s
ZUNIONSTORE d 2 z s
ZRANGESTORE d nokey 0 -1
ZRANGESTORE d str 0 -1
ZUNIONSTORE d 2 str z
GEOPOS g Palermo nope
GEOPOS nokey Palermo
GEOHASH nokey x
GEODIST g Palermo Palermo
GEODIST str a b
GEOSEARCH nokey FROMLONLAT 15 37 BYRADIUS 200 km
GEOSEARCH str FROMLONLAT 15 37 BYRADIUS 200 km
GEORADIUS g 15 37 200 km
GEORADIUS_RO g 15 37 200 km
GEORADIUS nokey 15 37 200 km
GEORADIUSBYMEMBER g Palermo 10 km
GEORADIUSBYMEMBER nokey Palermo 10 km
GEORADIUSBYMEMBER_RO g Palermo 10 km
GEOSEARCHSTORE d2 str FROMLONLAT 15 37 BYRADIUS 200 km
SMOVE s s2 x
SPOP s 1
SPOP s
LPOP str
LMOVE l l2 LEFT LEFT
ZPOPMIN z
ZMPOP 1 z MIN
LMPOP 1 l LEFT
HDEL h a b
HLEN h
HGET h a
HEXISTS h a
HGETALL h
HRANDFIELD h
HSCAN h 0"""

# keys that go and come back: Redis fires "new" each time one is created
RECREATE = """HSET h a 1
HDEL h a
HSET h a 1
HDEL h a
HINCRBY h n 1
HDEL h n
HSETNX h a 1
HDEL h a
HINCRBYFLOAT h f 1.5
SADD s a
SREM s a
SADD s a
SPOP s
SADD t 1
SMOVE t s 1
SMOVE s t 1
SADD a 1 2
SINTERSTORE s a a
SREM s 1 2
SUNIONSTORE s a
SET str v
SUNIONSTORE str a
SET str2 v
ZUNIONSTORE str2 1 a
SET str3 v
SINTERSTORE str3 a nokey
RPUSH l 1
LPOP l
RPUSH l 1
LMOVE l l LEFT LEFT
ZADD z 1 a
ZREM z a
ZADD z 1 a
HSET h2 x 1
DEL h2
HSET h2 x 1"""

MULTI = """MULTI
HSET h a 1
SADD s a
RPUSH l a
ZADD z 1 a
HDEL h a
LPOP l
SET str v
SADD str x
ZREM z a
EXEC"""

FAMILIES = {"hashes": HASHES, "sets": SETS, "lists": LISTS, "zsets": ZSETS, "geo": GEO, "reads": READS,
            "recreate": RECREATE, "multi": MULTI}


@pytest.mark.parametrize("flags", [b"KEA", b"KEAnm", b"Kh", b"Elgn", b"Ksz$m"])
@pytest.mark.parametrize("family", list(FAMILIES))
def test_keyspace_notifications_as_redis(pair, family, flags):
    node, r = pair
    lines = FAMILIES[family].splitlines()
    ours, theirs = event_stream(node.port, lines, flags), event_stream(r.port, lines, flags)
    for (line, got, reply), (_, want, want_reply) in zip(ours, theirs):
        assert got == want, f"{line}: {got} (redis: {want}; replies {reply!r} / {want_reply!r})"


def test_a_sequence_fires_something(pair):
    # (the comparison above would pass on two silent servers)
    node, _ = pair
    fired = [e for _, events, _ in event_stream(node.port, HASHES.splitlines(), b"KEA") for e in events]
    assert (b"__keyevent@0__:hdel", b"h") in fired and (b"__keyspace@0__:h", b"del") in fired


BLOCKED = [  # (the blocked client's command, the other client's commands)
    ("BLPOP q 0", ["RPUSH q a"]),
    ("BRPOP q1 q 0", ["RPUSH q a b", "LPUSH q1 c"]),
    ("BLMOVE q dst RIGHT LEFT 0", ["RPUSH q a"]),
    ("BRPOPLPUSH q q 0", ["RPUSH q a"]),
    ("BLMPOP 0 1 q LEFT COUNT 3", ["RPUSH q a b"]),
    ("BZPOPMIN z 0", ["ZADD z 1 a"]),
    ("BZPOPMAX z 0", ["ZADD z 1 a 2 b"]),
    ("BZMPOP 0 1 z MIN COUNT 5", ["ZADD z 1 a 2 b"]),
]


@pytest.mark.parametrize("blocked, writes", BLOCKED, ids=[b for b, _ in BLOCKED])
def test_a_blocked_pop_served_by_another_client_fires_as_redis(pair, blocked, writes):
    streams = []
    for port in (pair[0].port, pair[1].port):
        c = socket.create_connection(("127.0.0.1", port), timeout=60)
        b = socket.create_connection(("127.0.0.1", port), timeout=60)
        c.sendall(b"FLUSHALL\r\nCONFIG SET notify-keyspace-events KEA\r\n")
        sync(c)
        lst = Listener(port)
        b.sendall(b"CLIENT ID\r\n")
        bid = int(sync(b)[1:-2])
        b.sendall(mb(*blocked.encode().split()))
        while True:  # blocked once CLIENT LIST says so (no sleep)
            c.sendall(b"CLIENT LIST ID %d\r\n" % bid)
            if b" flags=b " in sync(c):
                break
        for w in writes:
            c.sendall(mb(*w.encode().split()))
            sync(c)
        reply = sync(b)
        c.sendall(mb(b"PUBLISH", SENTINEL, b"end"))
        sync(c)
        got = lst.until(lambda m: m[:1] == [b"message"])
        streams.append(([e for e in map(_event, got) if e is not None], reply))
        c.sendall(b"CONFIG SET notify-keyspace-events \"\"\r\n")
        sync(c)
        for s in (b, c):
            s.close()
        lst.close()
    assert streams[0] == streams[1]
    assert any(ev[1] in (b"lpop", b"rpop", b"zpopmin", b"zpopmax") for ev in streams[0][0])


# -- Redis 7.4's field TTLs (redis-server 7.0 has none: the events of t_hash.c in 7.4) ----------

def test_field_ttl_commands_fire_redis_7_4_events(pair):
    node, _ = pair
    lines = ["HSET h a 1 b 2 c 3", "HEXPIRE h 100 FIELDS 2 a nope", "HEXPIRE h 100 NX FIELDS 1 a",
             "HPEXPIRE h 100000 XX FIELDS 1 a", "HPERSIST h FIELDS 1 a", "HPERSIST h FIELDS 1 a",
             "HPERSIST nokey FIELDS 1 a", "HEXPIRE nokey 10 FIELDS 1 a", "HPEXPIRE h 0 FIELDS 1 b",
             "HEXPIREAT h 1 FIELDS 2 a c", "HTTL h FIELDS 1 a", "SADD s m n", "EXPIREMEMBER s m 100",
             "EXPIREMEMBER s m 0", "EXPIREMEMBER s n 0", "HSET h2 f v", "EXPIREMEMBER h2 f 0"]
    ev = b"__keyevent@0__:"
    got = [[(e[0][len(ev):], e[1]) for e in events if e[0].startswith(ev)]
           for _, events, _ in event_stream(node.port, lines, b"KEA")]
    assert got == [
        [(b"hset", b"h")],
        [(b"hexpire", b"h")],
        [],  # NX: the condition was not met, nothing changed
        [(b"hexpire", b"h")],
        [(b"hpersist", b"h")],
        [],  # no TTL left to remove
        [], [],  # no key
        [(b"hdel", b"h")],  # a deadline in the past deletes the field
        [(b"hdel", b"h"), (b"del", b"h")],  # ... and the hash with its last one
        [],
        [(b"sadd", b"s")],
        [],  # KeyDB's EXPIREMEMBER fires nothing ...
        [(b"srem", b"s")],  # ... until the member goes (at once for a deadline in the past)
        [(b"srem", b"s"), (b"del", b"s")],
        [(b"hset", b"h2")],
        [(b"hexpired", b"h2"), (b"del", b"h2")],
    ]


def test_hpersist_fires_once_per_command(pair):
    node, _ = pair
    lines = ["HSET h a 1", "HEXPIRE h 100 FIELDS 1 a", "HPERSIST h FIELDS 1 a", "HPERSIST h FIELDS 1 a"]
    events = [e for _, evs, _ in event_stream(node.port, lines, b"E") for e in evs]
    assert events == []  # no class: nothing
    events = [[e[0] for e in evs] for _, evs, _ in event_stream(node.port, lines, b"Eh")]
    assert events == [[b"__keyevent@0__:hset"], [b"__keyevent@0__:hexpire"], [b"__keyevent@0__:hpersist"], []]


def test_member_deadlines_fire_when_they_pass(pair):
    """A hash field's deadline fires hexpired (Redis 7.4), a set member's srem (KeyDB),
    once per key for the members that expire together, then del when the key goes."""
    node, _ = pair
    c = node.client()
    c.flushall()
    c.config_set("notify-keyspace-events", "KEA")
    lst = Listener(node.port)
    try:
        c.hset("h", mapping={"a": 1, "b": 2, "c": 3})
        c.execute_command("HPEXPIRE", "h", 50, "FIELDS", 2, "a", "b")
        c.sadd("s", "m")
        c.execute_command("EXPIREMEMBER", "s", "m", 50, "ms")
        c.hset("gone", "f", 1)
        c.execute_command("HPEXPIRE", "gone", 60000, "FIELDS", 1, "f")
        c.hdel("gone", "f")  # removed before its deadline: fires nothing at it
        c.hset("kept", "f", 1)
        c.execute_command("HPEXPIRE", "kept", 50, "FIELDS", 1, "f")
        c.hset("kept", "f", 2)  # a new value drops the TTL (Redis 7.4)
        # (each when it is due; on a node of shard workers h and s are on different workers,
        # each firing its own deadlines: the two may come in either order)
        want = {(b"__keyevent@0__:hexpired", b"h"), (b"__keyevent@0__:del", b"s")}
        lst.until(lambda m: want.discard(_event(m)) or not want)
        c.execute_command("HPEXPIRE", "h", 50, "FIELDS", 1, "c")
        got = lst.until(lambda m: _event(m) == (b"__keyevent@0__:del", b"h"))
        events = [e for e in map(_event, got) if e is not None and e[0].startswith(b"__keyevent")]
        assert events == [(b"__keyevent@0__:hexpire", b"h"), (b"__keyevent@0__:hexpired", b"h"),
                          (b"__keyevent@0__:del", b"h")]
        assert c.exists("h") == 0 and c.hget("kept", "f") == b"2"
        c.publish(SENTINEL, "end")
        rest = lst.until(lambda m: m[:1] == [b"message"])
        assert [_event(m) for m in rest if _event(m)] == []  # nothing for "gone" or "kept"
    finally:
        c.config_set("notify-keyspace-events", "")
        lst.close()


def test_field_deadlines_present_before_notifications_were_on_fire(pair):
    node, _ = pair
    c = node.client()
    c.config_set("notify-keyspace-events", "")
    lst = Listener(node.port)
    try:
        ttl = 300
        while True:  # a deadline that was still ahead when the notifications were turned on
            c.flushall()
            c.hset("early", "f", 1)
            c.execute_command("HPEXPIRE", "early", ttl, "FIELDS", 1, "f")
            c.config_set("notify-keyspace-events", "Eh")
            if c.execute_command("HPTTL", "early", "FIELDS", 1, "f")[0] > 0:
                break
            c.config_set("notify-keyspace-events", "")
            ttl *= 4
        got = lst.until(lambda m: _event(m) is not None)
        assert _event(got[-1]) == (b"__keyevent@0__:hexpired", b"early")
    finally:
        c.config_set("notify-keyspace-events", "")
        lst.close()


# -- keyspace hits and misses ---------------------------------------------------------------------

def hits_and_misses(port: int, lines: list[str]) -> list[tuple[str, int, int]]:
    """(command, hits, misses) it counted, for each of ``lines``; a transaction counts
    as one entry, on its EXEC."""
    c = redis.Redis(port=port, single_connection_client=True)
    c.flushall()
    out = []
    multi = False
    for line in lines:
        name = line.split()[0].upper()
        if not multi:
            before = c.info("stats")
        multi = (multi or name == "MULTI") and name not in ("EXEC", "DISCARD")
        try:
            c.execute_command(*line.split())
        except redis.ResponseError:
            pass
        if multi:
            continue
        after = c.info("stats")
        out.append((line, after["keyspace_hits"] - before["keyspace_hits"],
                    after["keyspace_misses"] - before["keyspace_misses"]))
    c.close()
    return out


@pytest.mark.parametrize("family", list(FAMILIES))
def test_keyspace_hits_and_misses_as_redis(pair, family):
    node, r = pair
    lines = FAMILIES[family].splitlines()
    assert hits_and_misses(node.port, lines) == hits_and_misses(r.port, lines)


def test_reads_are_counted_at_all(pair):
    node, _ = pair
    counted = hits_and_misses(node.port, READS.splitlines())
    assert sum(h for _, h, _ in counted) > 50 and sum(m for _, _, m in counted) > 30


# -- client tracking of the families' reads ---------------------------------------------------------

TRACKED_READS = [  # (setup, the tracked read, a write that changes the key each time)
    ("HSET h a 1 b 2", "HGET h a", "HSET h a 3"),
    ("HSET h a 1 b 2", "HGETALL h", "HINCRBY h b 1"),
    ("HSET h a 1", "HMGET h a b", "HINCRBY h a 1"),
    ("HSET h a 1", "HLEN h", "HSET h c 1"),
    ("HSET h a 1 b 2 c 3", "HKEYS h", "HDEL h a b c"),
    ("RPUSH l a b c", "LRANGE l 0 -1", "RPUSH l d"),
    ("RPUSH l a b c", "LINDEX l 0", "LPOP l"),
    ("RPUSH l a b c", "LLEN l", "LMOVE l other LEFT LEFT"),
    ("SADD s a b c", "SCARD s", "SPOP s"),
    ("ZADD z 1 a", "ZRANGE z 0 -1", "ZINCRBY z 1 a"),
]


@pytest.mark.parametrize("setup, read, write", TRACKED_READS, ids=[r for _, r, _ in TRACKED_READS])
def test_tracking_invalidates_collection_reads_as_redis(pair, setup, read, write):
    """A RESP3 client tracking its reads (default mode) gets ``invalidate`` when another
    client writes the key it read, once; reading it again re-arms it."""
    outs = []
    for port in (pair[0].port, pair[1].port):
        conversation(port, b"FLUSHALL\r\n" + mb(*setup.encode().split()))
        with socket.create_connection(("127.0.0.1", port), timeout=60) as t, \
                socket.create_connection(("127.0.0.1", port), timeout=60) as w:
            t.sendall(b"HELLO 3\r\nCLIENT TRACKING on\r\n")
            sync(t)
            t.sendall(mb(*read.encode().split()))
            first = sync(t)
            for _ in range(2):  # the second write: no second invalidation (not read again)
                w.sendall(mb(*write.encode().split()))
                sync(w)
            pushed = sync(t)
            t.sendall(mb(*read.encode().split()))
            again = sync(t)
            w.sendall(mb(*write.encode().split()))
            sync(w)
            outs.append((first, pushed, again, sync(t)))
    assert outs[0] == outs[1]
    assert outs[0][1].startswith(b">2\r\n$10\r\ninvalidate\r\n") and outs[0][1].count(b"invalidate") == 1
    if "HDEL" not in write:  # (the hash is gone after the first HDEL: the next ones change nothing)
        assert outs[0][3].count(b"invalidate") == 1


@pytest.mark.timeout(240)
def test_tracking_invalidated_by_a_hash_and_a_list_write_on_another_node(tmp_path):
    from tests.cluster import Cluster

    with Cluster(tmp_path, n=3) as cluster:
        cluster.wait_streaming()
        c1 = cluster.client(1)
        c1.hset("th", "f", "old")
        c1.rpush("tl", "a")
        cluster.wait_converged(timeout=60)
        t = socket.create_connection(("127.0.0.1", cluster[2].port), timeout=60)
        t.sendall(b"HELLO 3\r\nCLIENT TRACKING on\r\nHGET th f\r\nLRANGE tl 0 -1\r\n")
        buf = b""
        while not buf.endswith(b"*1\r\n$1\r\na\r\n"):
            buf += t.recv(65536)
        assert b"$3\r\nold\r\n" in buf
        c1.hset("th", "f", "new")
        buf = b""
        while b"$2\r\nth\r\n" not in buf:  # the invalidation of a record merged from node 1
            buf += t.recv(65536)
        assert b">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\nth\r\n" in buf
        c1.rpush("tl", "b")
        while b"$2\r\ntl\r\n" not in buf:
            buf += t.recv(65536)
        assert b">2\r\n$10\r\ninvalidate\r\n*1\r\n$2\r\ntl\r\n" in buf
        t.sendall(b"HGET th f\r\nLRANGE tl 0 -1\r\n")
        out = b""
        while not out.endswith(b"$1\r\nb\r\n"):
            out += t.recv(65536)
        assert b"$3\r\nnew\r\n" in out  # the write replicated before its invalidation
        t.close()


# -- MULTI/EXEC --------------------------------------------------------------------------------

TRANSACTIONS = [
    b"MULTI\r\nHSET h a 1 b 2\r\nSADD s x\r\nLPUSH l a b\r\nZADD z 1 m 2 n\r\nHGETALL h\r\nSMEMBERS s\r\n"
    b"LRANGE l 0 -1\r\nZRANGE z 0 -1 WITHSCORES\r\nHINCRBY h a 5\r\nZINCRBY z 1 m\r\nEXEC\r\n",
    b"HELLO 3\r\nMULTI\r\nHSET h a 1\r\nHGETALL h\r\nSADD s x\r\nSMEMBERS s\r\nZADD z 1 m\r\n"
    b"ZRANGE z 0 -1 WITHSCORES\r\nZSCORE z m\r\nEXEC\r\n",
    b"SET str v\r\nMULTI\r\nHSET str a 1\r\nLPUSH l x\r\nSADD str y\r\nLLEN l\r\nZADD str 1 m\r\nLPOP str\r\n"
    b"HGET l a\r\nEXEC\r\nLRANGE l 0 -1\r\n",
    b"MULTI\r\nHINCRBY h a notanint\r\nHSET h a x\r\nHINCRBY h a 1\r\nHGET h a\r\nEXEC\r\n",
    b"MULTI\r\nBLPOP nolist 0\r\nBRPOP nolist 1\r\nBRPOPLPUSH nolist d 0\r\nBLMOVE nolist d LEFT LEFT 0\r\n"
    b"BZPOPMIN nz 0\r\nBLMPOP 0 1 nolist LEFT\r\nBZMPOP 0 1 nz MIN\r\nRPUSH q 1 2\r\nBLPOP q 0\r\n"
    b"BRPOPLPUSH q d 0\r\nLRANGE d 0 -1\r\nEXEC\r\n",
    b"HELLO 3\r\nMULTI\r\nBLPOP nolist 0\r\nBLMOVE nolist d LEFT LEFT 0\r\nBZPOPMAX nz 0\r\nEXEC\r\n",
    b"MULTI\r\nHSET h\r\nSADD s x\r\nEXEC\r\nEXISTS s\r\n",
    b"MULTI\r\nSADD s a\r\nSPOP s 5\r\nSCARD s\r\nEXISTS s\r\nEXEC\r\n",
    b"RPUSH l a\r\nWATCH l\r\nLPOP l\r\nMULTI\r\nRPUSH l b\r\nEXEC\r\nLRANGE l 0 -1\r\n",
    b"HSET h a 1\r\nWATCH h\r\nHGET h a\r\nMULTI\r\nHSET h a 2\r\nEXEC\r\nHGET h a\r\n",
    b"SADD s a\r\nWATCH s\r\nSREM s zz\r\nMULTI\r\nSCARD s\r\nEXEC\r\n",  # a write that changed nothing
]


@pytest.mark.parametrize("data", TRANSACTIONS, ids=lambda d: repr(d)[:48])
def test_transactions_with_collections_answer_like_redis(pair, data):
    node, r = pair
    outs = []
    for port in (node.port, r.port):
        conversation(port, b"FLUSHALL\r\n")
        outs.append(re.sub(rb":\d+\r\n(\$4\r\nmode|\+mode)", rb":ID\r\n\1", conversation(port, data)))
    assert outs[0] == outs[1]


def test_watch_of_a_hash_aborts_on_another_clients_write_like_redis(pair):
    outs = []
    for port in (pair[0].port, pair[1].port):
        conversation(port, b"FLUSHALL\r\nHSET h a 1\r\nRPUSH l x\r\n")
        with socket.create_connection(("127.0.0.1", port), timeout=60) as a, \
                socket.create_connection(("127.0.0.1", port), timeout=60) as b:
            a.sendall(b"WATCH h l\r\n")
            sync(a)
            b.sendall(b"HDEL h a\r\n")
            sync(b)
            a.sendall(b"MULTI\r\nHSET h a 2\r\nLPOP l\r\nEXEC\r\nHGETALL h\r\nLRANGE l 0 -1\r\n")
            outs.append(sync(a))
    assert outs[0] == outs[1] and b"*-1\r\n" in outs[0]
