"""Multi-key commands whose keys are on different shard workers (docs/shards.md §9, slice
4): ZUNION/ZINTER/ZDIFF/ZINTERCARD and their STORE forms, ZRANGESTORE, PFCOUNT/PFMERGE,
BITOP, LCS, GEOSEARCHSTORE and GEORADIUS[BYMEMBER] STORE/STOREDIST, LMPOP/ZMPOP and XREAD
(not BLOCK), each as one unit across the workers.

Every case runs on a ``--shards 2`` node, on a single process (``--shards 1``) and on a
stock redis-server side by side, raw RESP in and out: each reply must be the same bytes
on all three (errors, WRONGTYPE, arity and RESP3 shapes included), except where marked
``~``: PFCOUNT's estimate, which only a single process is asked to match (marekvs hashes
elements with xxh3, Redis with MurmurHash). The keys of a case are on different workers
(``A*``, ``D0`` on worker 0; ``B*``, ``D1`` on worker 1), and each case runs once from a
connection on each worker (RESP2 on worker 0, RESP3 on worker 1), so each worker
coordinates units.
"""

from __future__ import annotations

import socket
import threading

import hiredis
import pytest

from tests.integration.test_differential import Conn, fresh_pair, normalise
from tests.integration.test_shards import keys_on

_W0 = keys_on(0, 6, "k")
_W1 = keys_on(1, 6, "k")
# symbolic key -> the key's name: A* and D0 on worker 0, B* and D1 on worker 1
NAMES = {"A0": _W0[0], "A1": _W0[1], "A2": _W0[2], "D0": _W0[3], "S0": _W0[4], "X0": _W0[5],
         "B0": _W1[0], "B1": _W1[1], "B2": _W1[2], "D1": _W1[3], "S1": _W1[4], "X1": _W1[5]}

ZSETS = ["ZADD A0 1 a 2 b 3 c", "ZADD B0 2 b 3 c 4 d 1.5 e", "SADD B1 c d e", "SET S1 str", "SET S0 str",
         "RPUSH A1 x"]

CASES = {
    "zunion_zinter_zdiff": ZSETS + [
        "ZUNION 2 A0 B0", "ZUNION 2 A0 B0 WITHSCORES", "ZUNION 3 A0 B0 B1 WEIGHTS 1 2 3 AGGREGATE MAX WITHSCORES",
        "ZUNION 2 A0 B0 AGGREGATE MIN WITHSCORES", "ZUNION 3 A0 X1 B1", "ZINTER 2 A0 B0 WITHSCORES AGGREGATE MIN",
        "ZINTER 3 A0 B0 B1", "ZINTER 2 B1 A0 WEIGHTS 2 0.5 WITHSCORES", "ZINTER 2 A0 X1", "ZDIFF 2 A0 B0 WITHSCORES",
        "ZDIFF 2 B1 A0", "ZDIFF 3 B0 A0 B1 WITHSCORES", "ZINTERCARD 2 A0 B0", "ZINTERCARD 2 A0 B0 LIMIT 1",
        "ZINTERCARD 3 A0 B0 X1", "ZINTERCARD 2 B1 B0 LIMIT 0",
        # errors, in Redis's order: numkeys, then each key's type, then the options
        "ZUNION 2 A0 S1", "ZUNION 2 A0 A1 BADOPT", "ZUNION 2 A0 B0 BADOPT", "ZUNION 2 A0 B0 WEIGHTS 1",
        "ZUNION 2 A0 B0 WEIGHTS 1 x", "ZUNION 2 A0 B0 AGGREGATE foo", "ZUNION 0 A0 B0", "ZUNION 3 A0 B0",
        "ZUNION x A0 B0", "ZDIFF 2 A0 B0 WEIGHTS 1 1", "ZINTERCARD 2 A0 B0 LIMIT -1", "ZINTERCARD 2 A0 S1 LIMIT x",
        "ZINTER 2 S0 B0", "ZUNION 2 A0", "ZINTERCARD 2 A0 B0 WITHSCORES",
    ],
    "zstores": ZSETS + [
        "ZUNIONSTORE D1 2 A0 B0 WEIGHTS 2 1", "ZRANGE D1 0 -1 WITHSCORES", "ZINTERSTORE D0 2 B0 B1",
        "ZRANGE D0 0 -1 WITHSCORES", "ZINTERSTORE D0 2 B0 B1 AGGREGATE MAX WEIGHTS 1 10", "ZRANGE D0 0 -1 WITHSCORES",
        "ZDIFFSTORE D1 2 A0 B0", "ZRANGE D1 0 -1 WITHSCORES", "ZDIFFSTORE D1 2 X0 B0", "EXISTS D1",
        "SET D1 old EX 100", "ZUNIONSTORE D1 2 A0 B0", "TYPE D1", "TTL D1", "ZUNIONSTORE D1 2 A0 S1", "TYPE D1",
        "ZUNIONSTORE D1 2 A0 B0 WITHSCORES", "ZUNIONSTORE D1 0 A0", "ZINTERSTORE S1 2 A0 B0", "TYPE S1",
        "ZUNIONSTORE D1", "ZUNIONSTORE D0 2 B0 B1", "ZRANGE D0 0 -1 WITHSCORES",
    ],
    "zrangestore": ZSETS + [
        "ZRANGESTORE D1 A0 0 -1", "ZRANGE D1 0 -1 WITHSCORES", "ZRANGESTORE D1 A0 (1 +inf BYSCORE LIMIT 0 1",
        "ZRANGE D1 0 -1 WITHSCORES", "ZRANGESTORE D1 A0 [a [b BYLEX", "ZRANGE D1 0 -1 WITHSCORES",
        "ZRANGESTORE D0 B0 0 1 REV", "ZRANGE D0 0 -1 WITHSCORES", "ZRANGESTORE D1 S0 0 -1",
        "ZRANGESTORE D1 A0 0 -1 WITHSCORES", "ZRANGESTORE D1 A0 0 1 LIMIT 0 1", "ZRANGESTORE D0 B1 0 -1",
        "ZRANGESTORE D1 A0 x 1", "ZRANGESTORE D1 X0 0 -1", "EXISTS D1", "ZRANGESTORE D1 A0 0",
    ],
    "hll": [
        "PFADD A0 a b c", "PFADD B0 c d e f", "SET S1 str", "RPUSH A1 x", "PFADD {t}0 a b c", "PFADD {t}1 c d e f",
        "~PFCOUNT A0 B0", "~PFCOUNT B0 A0 X1", "~PFCOUNT {t}0 {t}1", "PFMERGE D1 A0 B0", "~PFCOUNT D1",
        "PFADD D0 z", "EXPIRE D0 100", "PFMERGE D0 B0 A0", "~PFCOUNT D0", "TTL D0", "PFMERGE D1 X0 X1",
        "~PFCOUNT D1", "PFCOUNT A0 S1", "PFCOUNT A1 S1", "PFCOUNT S1 A1", "PFMERGE D1 A0 S1", "PFMERGE S1 A0",
        "PFMERGE A1 B0", "~PFCOUNT D1", "PFMERGE B2 A0", "~PFCOUNT B2", "PFCOUNT",
    ],
    "bitop": [
        "SET A0 foobar", "SET B0 abcdef", "SET B1 \xff", "RPUSH A1 x", "BITOP AND D1 A0 B0", "GET D1",
        "BITOP OR D0 A0 B0 B1", "GET D0", "BITOP XOR D1 A0 B1", "GET D1", "BITOP NOT D1 A0", "GET D1",
        "SET D1 x EX 100", "BITOP OR D1 A0 B0", "TTL D1", "BITOP AND D1 X0 X1", "EXISTS D1", "BITOP AND D1 A0 A1",
        "BITOP AND D1 B0 X0 A1", "BITOP FOO D1 A0 B0", "BITOP NOT D1 A0 B0", "BITOP AND D1",
    ],
    "lcs": [
        "SET A0 ohmytext", "SET B0 mynewtext", "RPUSH B1 x", "LCS A0 B0", "LCS A0 B0 LEN", "LCS A0 B0 IDX",
        "LCS A0 B0 IDX MINMATCHLEN 4 WITHMATCHLEN", "LCS B0 A0 IDX WITHMATCHLEN", "LCS A0 X1", "LCS A0 B1",
        "LCS B1 A0 LEN", "LCS A0 B0 LEN IDX", "LCS A0 B0 FOO", "LCS A0 B0 MINMATCHLEN x", "LCS A0",
    ],
    "geo": [
        "GEOADD A0 13.361389 38.115556 Palermo 15.087269 37.502669 Catania 12.5 41.9 Rome", "SET S0 str",
        "GEOSEARCHSTORE D1 A0 FROMLONLAT 15 37 BYRADIUS 200 km ASC", "ZRANGE D1 0 -1 WITHSCORES",
        "GEOSEARCHSTORE D1 A0 FROMMEMBER Palermo BYBOX 400 400 km DESC COUNT 1 STOREDIST",
        "ZRANGE D1 0 -1 WITHSCORES", "GEOSEARCHSTORE D1 A0 FROMMEMBER Palermo BYRADIUS 1000 mi STOREDIST",
        "ZRANGE D1 0 -1 WITHSCORES", "GEOSEARCHSTORE D1 A0 FROMMEMBER nobody BYRADIUS 10 km",
        "GEOSEARCHSTORE D1 S0 FROMLONLAT 15 37 BYRADIUS 200 km",
        "GEOSEARCHSTORE D1 A0 FROMLONLAT 15 37 BYRADIUS 200 km WITHDIST",
        "GEOSEARCHSTORE D1 A0 BYRADIUS 200 km", "GEOSEARCHSTORE D1 A0 FROMLONLAT 15 37 BYRADIUS 200 km COUNT 0",
        "GEORADIUS A0 15 37 200 km STORE D1", "ZRANGE D1 0 -1 WITHSCORES",
        "GEORADIUS A0 15 37 2000 km STOREDIST D1 ASC COUNT 2",
        "ZRANGE D1 0 -1 WITHSCORES", "GEORADIUSBYMEMBER A0 Palermo 500 km STORE D1", "ZRANGE D1 0 -1 WITHSCORES",
        "GEORADIUS A0 15 37 200 km STORE D1 WITHDIST", "GEORADIUSBYMEMBER A0 nobody 500 km STORE D1",
        "GEORADIUS S0 15 37 200 km STORE D1", "GEOSEARCHSTORE D1 X0 FROMLONLAT 15 37 BYRADIUS 200 km", "EXISTS D1",
        "GEORADIUS A0 15 37 200 km STORE D0 STOREDIST D1", "ZRANGE D1 0 -1 WITHSCORES", "EXISTS D0",
    ],
    "mpop": [
        "RPUSH B0 a b c", "ZADD B1 1 a 2 b 3 c", "SET S0 str", "LMPOP 2 A0 B0 LEFT", "LMPOP 3 A0 A1 B0 RIGHT COUNT 5",
        "LMPOP 2 A0 B0 LEFT", "RPUSH B0 d", "LMPOP 2 S0 B0 LEFT", "LMPOP 2 B0 S0 LEFT", "ZMPOP 2 A0 B1 MIN COUNT 2",
        "ZMPOP 2 X0 X1 MAX", "ZMPOP 2 S0 B1 MIN", "ZMPOP 2 B1 S0 MAX", "LMPOP 2 A0 B0 UP", "LMPOP 0 A0 B0 LEFT",
        "LMPOP 2 A0 B0 LEFT COUNT 0", "ZMPOP 2 A0 B1", "LMPOP 2 A0 B0", "ZMPOP 3 A0 B1 MIN",
    ],
    "xread": [
        "XADD A0 1-1 f v", "XADD B0 2-1 g w", "XADD B0 2-2 h x", "SET S1 str", "XREAD STREAMS B0 A0 0 0",
        "XREAD COUNT 1 STREAMS A0 B0 0-0 0", "XREAD STREAMS A0 B0 $ $", "XREAD STREAMS A0 B0 1-1 2-2",
        "XREAD STREAMS A0 B0 1-1 2-1", "XREAD STREAMS A0 X1 0 0", "XREAD STREAMS A0 B0 0 bad",
        "XREAD STREAMS S1 A0 0 bad", "XREAD STREAMS A0 S1 0 0", "XREAD STREAMS A0 B0 0 >", "XREAD STREAMS A0 B0 0",
        "XREAD COUNT x STREAMS A0 B0 0 0",
        "XREAD STREAMS A0 S1 bad 0", "XREAD COUNT 0 STREAMS B0 A0 2-1 0",
    ],
    # blocking commands over keys of both workers (slice 5): data at once, a short timeout's nil, errors
    "blocking": [
        "RPUSH B0 a b", "ZADD B1 1 m 2 n", "SET S0 str", "RPUSH A1 x", "BLPOP A0 B0 0.01", "BRPOP A0 B0 0.01",
        "BLPOP A0 B0 0.01", "BLPOP S0 B0 0.01", "BLMPOP 0.01 2 A0 A1 RIGHT COUNT 3", "BLMPOP 0.01 2 A0 B0 LEFT",
        "BZPOPMIN A0 B1 0.01", "BZPOPMAX A0 B1 0.01", "BZPOPMIN A0 B1 0.01", "BZMPOP 0.01 2 A0 B1 MIN",
        "ZADD B1 3 o 4 p", "BZMPOP 0.01 2 A0 B1 MAX COUNT 5", "RPUSH A1 y z", "BLMOVE A1 B2 LEFT RIGHT 0.01",
        "BRPOPLPUSH A1 B2 0.01", "LRANGE B2 0 -1", "BRPOPLPUSH A0 B2 0.01", "BLMOVE A0 B2 LEFT LEFT 0.01",
        "RPUSH A0 q", "BLMOVE A0 S1 LEFT LEFT 0.01", "SET S1 s", "BLMOVE A0 S1 LEFT LEFT 0.01", "LRANGE A0 0 -1",
        "BLPOP A0 B0 x", "BLPOP A0 B0 -1", "BLMPOP 0 2 A0 B0 LEFT COUNT 0", "BZMPOP x 2 A0 B0 MIN",
        "BZPOPMIN A0 B0 -1", "BLMOVE A0 B0 UP LEFT 0", "BRPOPLPUSH A0 B0 x", "BLMPOP 0 2 A0 B0",
        "XREAD BLOCK 10 STREAMS X0 X1 0 0", "XADD X1 1-1 f v", "XREAD BLOCK 10 STREAMS X0 X1 0 0",
        "XREAD BLOCK 10 STREAMS X0 X1 $ $", "XREAD BLOCK -1 STREAMS X0 X1 0 0", "XREAD BLOCK x STREAMS X0 X1 0 0",
        "XREAD BLOCK 10 STREAMS X0 X1 0 bad", "XREAD BLOCK 10 STREAMS S0 X1 0 0",
    ],
    "xreadgroup": [
        "XADD A0 1-1 f v", "XADD B0 2-1 g w", "XADD B0 2-2 h x", "XGROUP CREATE A0 g 0", "XGROUP CREATE B0 g 0",
        "XREADGROUP GROUP g c COUNT 1 STREAMS B0 A0 > >", "XREADGROUP GROUP g c STREAMS A0 B0 > >",
        "XREADGROUP GROUP g c STREAMS A0 B0 > >", "XREADGROUP GROUP g c BLOCK 10 STREAMS A0 B0 > >",
        "XREADGROUP GROUP g c STREAMS A0 B0 0 0", "XREADGROUP GROUP g d BLOCK 10 STREAMS B0 A0 0 >",
        "XPENDING B0 g", "XREADGROUP GROUP g c STREAMS A0 X1 > >", "XREADGROUP GROUP g c STREAMS X0 B0 > >",
        "XREADGROUP GROUP g c STREAMS A0 B0 > $", "XREADGROUP GROUP g c BLOCK -1 STREAMS A0 B0 > >",
        "XADD A0 3-1 i y", "XREADGROUP GROUP g e NOACK STREAMS A0 B0 > >", "XPENDING A0 g",
    ],
    # SORT and SORT_RO with BY/GET patterns (w_1, w_4, h_1, h_3, h_4 on worker 1; w_2, w_3, h_2 on
    # worker 0) and STORE at the other worker (slice 4: every worker is locked for patterns)
    "sort": [
        "RPUSH A0 3 1 2 4", "SADD B0 2 4 1", "ZADD A1 1 4 2 3 3 1", "MSET w_1 30 w_2 10 w_3 20 w_4 x",
        "HSET h_1 f 9 g a", "HSET h_2 f 8", "HSET h_3 f 7", "SET S1 str", "SORT A0 BY w_* LIMIT 0 3",
        "SORT A0 BY w_*", "SORT A0 BY w_* ALPHA", "SORT A0 BY w_* ALPHA DESC GET # GET w_* GET h_*->f",
        "SORT B0 BY h_*->f GET h_*->g GET #", "SORT A1 BY nosort GET w_* GET h_*->f", "SORT_RO A0 GET w_* ALPHA",
        "SORT_RO B0 BY h_*->f DESC GET #", "SORT A0 BY w_* STORE D1", "SORT A0 ALPHA STORE D1", "LRANGE D1 0 -1",
        "SORT A0 BY h_*->f GET w_* STORE D1", "LRANGE D1 0 -1", "SORT B0 STORE D0", "LRANGE D0 0 -1",
        "SORT X0 BY w_* STORE D1", "EXISTS D1", "SORT S1 BY w_*", "SORT A0 BY w_* LIMIT x 1", "SORT A0 GET",
        "SORT_RO A0 BY w_* STORE D1", "SORT A0 BY w_* FOO", "SET D1 old", "SORT B0 BY nosort GET w_* STORE D1",
        "TYPE D1", "LRANGE D1 0 -1", "SORT A0 GET # GET w_* LIMIT 1 2 DESC",
    ],
    # units of several phases queued in MULTI: each runs after what was queued before it
    "in_multi_phases": ZSETS + [
        "RPUSH X0 3 1 2", "MSET w_1 30 w_2 10 w_3 20", "MULTI", "SET w_1 5", "SORT X0 BY w_* STORE D1",
        "LRANGE D1 0 -1", "ZUNIONSTORE D0 2 A0 B0", "RENAME D0 B2", "ZRANGE B2 0 -1 WITHSCORES", "MSETNX A2 x B2 y",
        "MSETNX A2 x X1 y",
        "LMOVE X0 D0 LEFT RIGHT", "SORT_RO X0 GET w_*", "SORT S1 BY w_*", "GET X1", "EXEC", "LRANGE D0 0 -1",
    ],
    # node-wide commands queued in MULTI: on every worker, in queue order, merged
    "in_multi_node_wide": [
        "SET A0 1", "MULTI", "SET B0 2", "DBSIZE", "KEYS B*", "FLUSHALL", "DBSIZE", "SET A1 x", "DBSIZE", "GET B0",
        "EXEC", "DBSIZE",
    ],
    "in_multi": ZSETS + [
        "MULTI", "ZUNION 2 A0 B0 WITHSCORES", "LCS A0 B0", "ZINTERCARD 2 A0 B0", "EXEC",
    ],
    # blocking commands over keys of both workers queued in MULTI: their non-blocking form, as Redis
    "blocking_in_multi": [
        "RPUSH B0 a b", "ZADD B1 1 m 2 n 3 o", "SET S0 str", "RPUSH A1 x y z", "XADD X1 1-1 f v", "MULTI",
        "BLPOP A0 B0 0", "BRPOP A0 B0 0", "BLPOP A0 B0 0", "BLMPOP 0 2 A0 A1 RIGHT COUNT 2", "BZPOPMIN A0 B1 0",
        "BZMPOP 0 2 A0 B1 MAX COUNT 1", "BZPOPMAX A0 X1 0", "BLMOVE A1 B2 LEFT RIGHT 0", "BRPOPLPUSH A0 B2 0",
        "BLMOVE A0 B2 LEFT LEFT 0", "XREAD BLOCK 0 STREAMS X0 X1 0 0", "XREAD BLOCK 0 STREAMS X0 X1 $ $",
        "BLPOP S0 B0 0", "BLPOP A0 B0 x", "BZMPOP 0 2 A0 B1 MIN", "EXEC", "LRANGE B2 0 -1", "ZRANGE B1 0 -1",
    ],
}


def _argv(line: str) -> tuple[bool, list[bytes]]:
    only_marekvs = line.startswith("~")
    return only_marekvs, [NAMES.get(w, w).encode("latin-1") for w in line.lstrip("~").split()]


def conn_on(port: int, worker: int, shards: int = 2) -> Conn:
    """A raw connection the kernel gave to ``worker`` (CLIENT ID % shards)."""
    for _ in range(200):
        c = Conn(port)
        got = c.call([b"CLIENT", b"ID"])
        if int(got[1:-2]) % shards == worker:
            return c
        c.close()
    raise AssertionError(f"no connection landed on worker {worker}")


def three_way(shard_nodes, real_redis, proto: int, worker: int) -> tuple[Conn, tuple[Conn, Conn]]:
    """A connection on ``worker`` of the two-worker node, and connections to the single
    process and redis-server (``fresh_pair``: both flushed), all in RESP ``proto``."""
    sharded, single = shard_nodes
    conns = fresh_pair(single.port, real_redis.port, proto)
    mine = conn_on(sharded.port, worker)
    if proto == 3:
        assert mine.call([b"HELLO", b"3"])[:1] == b"%"
    return mine, conns


@pytest.mark.parametrize("proto,worker", [(2, 0), (3, 1)])
@pytest.mark.parametrize("case", sorted(CASES))
def test_multikey_commands_across_workers_answer_as_one_process_and_redis(shard_nodes, real_redis, case, proto, worker):
    mine, conns = three_way(shard_nodes, real_redis, proto, worker)
    try:
        assert mine.call([b"FLUSHALL"]) == b"+OK\r\n"
        for line in CASES[case]:
            only_marekvs, argv = _argv(line)
            got = normalise(argv, mine.call(argv))
            one = normalise(argv, conns[0].call(argv))
            assert got == one, f"{line}: shards 2 {got!r}, one process {one!r}"
            want = normalise(argv, conns[1].call(argv))
            if not only_marekvs:
                assert got == want, f"{line}: marekvs {got!r}, redis-server {want!r}"
    finally:
        for c in (mine, *conns):
            c.close()


def test_zunionstore_across_workers_is_atomic_against_transactions(shard_nodes):
    """Writers move a member's score in both zsets at once (a transaction across the
    workers); ZUNIONSTORE and ZINTER across them always see both changed or neither:
    every member's two scores are equal, so each summed score is even."""
    sharded, _ = shard_nodes
    a, b, d = (NAMES[k].encode() for k in ("A2", "B2", "D0"))
    setup = conn_on(sharded.port, 0)
    setup.call([b"DEL", a, b, d])
    setup.call([b"ZADD", a, b"0", b"m"])
    setup.call([b"ZADD", b, b"0", b"m"])
    stop = threading.Event()
    errors: list[str] = []

    def writer(worker: int) -> None:
        c = conn_on(sharded.port, worker)
        try:
            i = 0
            while not stop.is_set():
                i += 1
                c.sock.sendall(b"".join(_resp(*x) for x in (
                    [b"MULTI"], [b"ZADD", a, b"%d" % i, b"m"], [b"ZADD", b, b"%d" % i, b"m"], [b"EXEC"])))
                _read_replies(c.sock, 4)
        except Exception as e:  # noqa: BLE001 - reported by the test
            errors.append(repr(e))
        finally:
            c.close()

    threads = [threading.Thread(target=writer, args=(w,)) for w in (0, 1)]
    for t in threads:
        t.start()
    readers = [conn_on(sharded.port, w) for w in (0, 1)]
    try:
        for n in range(150):
            r = readers[n % 2]
            assert r.call([b"ZUNIONSTORE", d, b"2", a, b]) == b":1\r\n"
            score = r.call([b"ZSCORE", d, b"m"]).split(b"\r\n")[1]
            assert int(score) % 2 == 0, f"ZUNIONSTORE saw one write of a transaction: {score!r}"
            got = r.call([b"ZINTER", b"2", a, b, b"WEIGHTS", b"1", b"-1", b"WITHSCORES"])
            assert got.split(b"\r\n")[-2] == b"0", f"ZINTER saw one write of a transaction: {got!r}"
    finally:
        stop.set()
        for t in threads:
            t.join(60)
        for c in (setup, *readers):
            c.close()
    assert not errors


def _resp(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(x), x) for x in args)


def _read_replies(sock: socket.socket, n: int) -> None:
    reader = hiredis.Reader()
    got = 0
    while got < n:
        data = sock.recv(65536)
        assert data, "connection closed"
        reader.feed(data)
        while reader.gets() is not False:
            got += 1
