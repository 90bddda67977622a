"""HyperLogLog, bitmap and keyspace-over-collections commands side by side with a stock
redis-server, on what a reply alone does not show: the keyspace notifications each command
fires (with the same classes enabled), the keyspace hits and misses it counts (INFO stats),
and MULTI/EXEC blocks of these commands (same bytes in RESP2 and RESP3).

Key names are fresh in every run: a deleted HLL's registers still win merges by rank until
the sweeper removes them (the data model's DEL caveat, docs/divergences.md), so an HLL name
is never written again after a FLUSHALL here.
"""

from __future__ import annotations

import itertools
import re
import socket

import pytest
import redis

from tests.helpers import Node, RedisServer, conversation, notifications_seen

_fresh = itertools.count()


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    n = Node(tmp_path_factory.mktemp("hllr") / "data").start()
    r = RedisServer(tmp_path_factory.mktemp("hllr-redis")).start()
    yield n, r
    n.stop()
    r.stop()


def fresh(template: bytes) -> bytes:
    """``template`` with every ``@`` replaced by a suffix used once in this module."""
    return template.replace(b"@", b"-%d" % next(_fresh))


# -- keyspace notifications ------------------------------------------------------------------

def notifications(port: int, setup: bytes, commands: bytes, flags: bytes) -> list[tuple[bytes, bytes]]:
    """(channel, message) of every notification ``commands`` fired with ``flags`` enabled,
    after ``setup`` ran unobserved (commands of other families, whose events are theirs)."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c, \
            socket.create_connection(("127.0.0.1", port), timeout=10) as lst:
        return notifications_seen(c, lst, setup, commands, flags)


NOTIFY = [  # (setup, commands)
    # SETBIT fires only when it creates, grows or flips; BITFIELD when a write that ran
    # changed its field (any, once the string grew); FAIL-skipped writes fire nothing
    (b"", b"SETBIT b@ 7 1\r\nSETBIT b@ 7 1\r\nSETBIT b@ 7 0\r\nSETBIT b@ 100 0\r\nGETBIT b@ 1\r\n"
     b"BITFIELD f@ SET u8 0 0\r\nBITFIELD f@ SET u8 0 0\r\nBITFIELD f@ SET u8 8 0\r\n"
     b"BITFIELD f@ SET u8 0 0 SET u8 0 1\r\nBITFIELD f@ INCRBY u8 0 0\r\n"
     b"BITFIELD n@ OVERFLOW FAIL SET u2 0 9\r\nBITFIELD f@ OVERFLOW FAIL INCRBY u2 100 7\r\n"
     b"BITFIELD_RO f@ GET u8 0\r\nBITCOUNT f@\r\nBITPOS f@ 1\r\nGETBIT nokey@ 1\r\n"),
    # BITOP: set on its destination, del when an empty result deletes one, nothing else
    (b"SET x@ ab\r\n",
     b"BITOP OR d@ x@ nokey@\r\nBITOP AND d@ nokey@\r\nBITOP AND d@ nokey@\r\nBITOP NOT d@ x@\r\n"),
    # PFADD fires when it creates or raises; PFMERGE always; PFCOUNT never
    (b"", b"PFADD h@ a b\r\nPFADD h@ a\r\nPFADD e@\r\nPFCOUNT h@\r\nPFCOUNT h@ e@ nokey@\r\n"
     b"PFMERGE m@ h@\r\nPFMERGE m@ h@\r\nPFMERGE m2@\r\n"),
    # the keyspace commands over collections of every type on this branch
    (b"HSET hash@ f v g w\r\nSADD set@ a b\r\nRPUSH list@ a b c\r\nZADD zset@ 1 a 2 b\r\n",
     b"PFADD h@ a\r\nEXPIRE h@ 100\r\nPERSIST h@\r\nRENAME h@ h2@\r\nCOPY h2@ h3@\r\nDEL h2@ h3@\r\n"
     b"RENAME hash@ hash2@\r\nCOPY hash2@ hash3@\r\nRENAMENX hash3@ hash2@\r\nRENAME set@ set2@\r\n"
     b"COPY list@ list2@\r\nUNLINK list@\r\nPEXPIRE set2@ 100000\r\nDEL hash2@ set2@ list2@\r\n"
     b"OBJECT ENCODING nokey@\r\nCOPY nokey@ x@\r\nRENAME zset@ zset2@\r\nCOPY zset2@ zset3@ REPLACE\r\n"
     b"EXPIRE zset3@ 100\r\nDEL zset2@ zset3@\r\n"),
    # errors fire nothing
    (b"SET s@ v\r\nHSET hh@ f v\r\n",
     b"PFADD s@ x\r\nPFMERGE s@ h@\r\nSETBIT hh@ 1 1\r\nPFADD hh@ x\r\nPFCOUNT hh@\r\n"),
]


@pytest.mark.parametrize("flags", [b"KEA", b"KEAnm", b"E$", b"Kg", b"KEnm"])
@pytest.mark.parametrize("seq", range(len(NOTIFY)))
def test_keyspace_notifications_as_redis(pair, flags, seq):
    node, r = pair
    setup, commands = NOTIFY[seq]
    suffix = b"-%d" % next(_fresh)
    setup, commands = setup.replace(b"@", suffix), commands.replace(b"@", suffix)
    got = notifications(node.port, setup, commands, flags)
    assert got == notifications(r.port, setup, commands, flags)
    if flags != b"Kg" or seq == 3:
        assert got or seq == 4  # (the sequences do fire)


# -- keyspace hits and misses ---------------------------------------------------------------

HITS = [
    ["SETBIT", "b@", "7", "1"], ["GETBIT", "b@", "1"], ["GETBIT", "nokey@", "1"], ["BITCOUNT", "b@"],
    ["BITCOUNT", "nokey@"], ["BITCOUNT", "b@", "0", "-1", "BIT"], ["BITPOS", "b@", "1"], ["BITPOS", "nokey@", "0"],
    ["BITOP", "OR", "d@", "b@", "nokey@"], ["BITOP", "AND", "d@", "nokey@"],
    ["BITFIELD", "b@", "GET", "u8", "0"], ["BITFIELD", "nokey@", "GET", "u8", "0"],
    ["BITFIELD", "b@", "SET", "u8", "0", "1"], ["BITFIELD_RO", "b@", "GET", "u8", "0"],
    ["BITFIELD_RO", "nokey@", "GET", "u8", "0"],
    ["PFADD", "h@", "a"], ["PFADD", "h@", "a"], ["PFCOUNT", "h@"], ["PFCOUNT", "nokey@"],
    ["PFCOUNT", "h@", "nokey@", "h@"], ["PFMERGE", "m@", "h@", "nokey@"], ["PFMERGE", "m@", "h@"],
    ["SET", "s@", "v"], ["PFCOUNT", "h@", "s@", "nokey@"], ["PFMERGE", "m@", "s@"], ["GETBIT", "h2@", "0"],
    ["HSET", "hash@", "f", "v"], ["PFCOUNT", "hash@"], ["GETBIT", "hash@", "0"],
    ["COPY", "h@", "h3@"], ["COPY", "nokey@", "x@"], ["RENAME", "h@", "h4@"], ["TYPE", "h4@"], ["TYPE", "hash@"],
    ["EXISTS", "h4@", "hash@", "nokey@"], ["OBJECT", "ENCODING", "h4@"], ["OBJECT", "ENCODING", "hash@"],
    # OBJECT ENCODING of collections written by their commands, by Redis 7.0's rules
    ["SADD", "iset@", "1", "-5", "300"], ["OBJECT", "ENCODING", "iset@"], ["SADD", "iset@", "x"],
    ["OBJECT", "ENCODING", "iset@"], ["SADD", "iset2@", *map(str, range(513))], ["OBJECT", "ENCODING", "iset2@"],
    ["SADD", "iset3@", "01"], ["OBJECT", "ENCODING", "iset3@"],
    ["HSET", "hash2@", "f", "x" * 64], ["OBJECT", "ENCODING", "hash2@"], ["HSET", "hash2@", "g", "x" * 65],
    ["OBJECT", "ENCODING", "hash2@"], ["HSET", "hash3@", *[f"f{i}" for i in range(258)]],
    ["OBJECT", "ENCODING", "hash3@"],
    ["ZADD", "zset@", "1", "m"], ["OBJECT", "ENCODING", "zset@"], ["ZADD", "zset@", "2", "m" * 65],
    ["OBJECT", "ENCODING", "zset@"], ["ZADD", "zset2@", *[x for i in range(129) for x in (str(i), f"m{i}")]],
    ["OBJECT", "ENCODING", "zset2@"], ["RPUSH", "list@", "a"], ["OBJECT", "ENCODING", "list@"],
    ["RENAME", "zset2@", "zset3@"], ["OBJECT", "ENCODING", "zset3@"], ["TYPE", "zset3@"],
]


def _stats(c: redis.Redis) -> tuple[int, int]:
    s = c.info("stats")
    return s["keyspace_hits"], s["keyspace_misses"]


def _counted(client: redis.Redis, commands: list[list[str]]) -> list[tuple[str, object, tuple[int, int]]]:
    out = []
    for cmd in commands:
        before = _stats(client)
        try:
            reply = client.execute_command(*cmd)
        except redis.ResponseError as e:
            reply = f"error: {e}"
        after = _stats(client)
        out.append((" ".join(cmd), reply, (after[0] - before[0], after[1] - before[1])))
    return out


def test_keyspace_hits_and_misses_as_redis(pair):
    node, r = pair
    suffix = b"-%d" % next(_fresh)
    commands = [[a.replace("@", suffix.decode()) for a in cmd] for cmd in HITS]
    with node.client() as m, r.client() as rc:
        assert _counted(m, commands) == _counted(rc, commands)


# -- MULTI / EXEC ------------------------------------------------------------------------------

MULTI = [
    b"MULTI\r\nPFADD h@ a b c\r\nPFADD h@ a\r\nPFCOUNT h@\r\nPFADD g@ c d\r\nPFCOUNT h@ g@\r\n"
    b"PFMERGE m@ h@ g@\r\nPFCOUNT m@\r\nTYPE m@\r\nEXEC\r\nPFCOUNT m@\r\n",
    b"MULTI\r\nSETBIT b@ 9 1\r\nGETBIT b@ 9\r\nBITCOUNT b@\r\nBITPOS b@ 1\r\n"
    b"BITFIELD b@ INCRBY i5 100 1 GET u4 0\r\nBITFIELD_RO b@ GET u8 0\r\nBITOP NOT n@ b@\r\nGET n@\r\nEXEC\r\n",
    b"SET s@ v\r\nMULTI\r\nPFADD s@ x\r\nSETBIT s@ 0 1\r\nPFCOUNT s@\r\nGET s@\r\nEXEC\r\n",
    b"HSET hash@ f v\r\nMULTI\r\nRENAME hash@ hash2@\r\nHGET hash2@ f\r\nCOPY hash2@ hash3@\r\n"
    b"EXISTS hash@ hash2@ hash3@\r\nTYPE hash3@\r\nEXEC\r\n",
    b"MULTI\r\nSETBIT b@ x 1\r\nPFADD\r\nEXEC\r\nEXISTS b@\r\n",  # queue-time errors: EXECABORT
]


def _same(out: bytes) -> bytes:
    return re.sub(rb":\d+\r\n(\$4\r\nmode|\+mode)", rb":ID\r\n\1", out)  # HELLO's client id


@pytest.mark.parametrize("hello", [b"", b"HELLO 3\r\n"], ids=["resp2", "resp3"])
@pytest.mark.parametrize("seq", range(len(MULTI)))
def test_transactions_of_these_commands_answer_like_redis(pair, hello, seq):
    node, r = pair
    data = hello + fresh(MULTI[seq])
    assert _same(conversation(node.port, data)) == _same(conversation(r.port, data))


def test_a_transaction_with_pfadd_and_a_rename_is_one_log_entry(pair):
    node, _ = pair
    with node.client() as c:
        c.hset(fresh(b"tx-hash@"), "f", "v")
        seq = int(c.info("persistence")["replog_last_seq"])
        with c.pipeline(transaction=True) as p:
            h, g = fresh(b"tx@"), fresh(b"tx-hash@")
            p.pfadd(h, "a", "b").setbit(fresh(b"tx-bits@"), 3, 1).hset(g, "f", "v").rename(g, fresh(b"tx-moved@"))
            assert p.execute() == [1, 0, 1, True]
        assert int(c.info("persistence")["replog_last_seq"]) == seq + 1
