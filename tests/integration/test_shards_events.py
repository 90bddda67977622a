"""Keyspace notifications and keyspace hits and misses on a node of two shard workers
(docs/shards.md §8a): a subscriber on either worker sees the notifications of commands
run on both workers in the order the commands ran, and commands across workers fire the
events, and count the lookups, of the whole command, as one process and redis-server do.

The commands of a sequence are pipelined from a connection on one worker, the subscriber
is on the other (or the same); its notifications are compared with a single process's and
redis-server's for the same sequence. ``A*`` keys are on worker 0, ``B*`` on worker 1.
"""

from __future__ import annotations

import pytest

from tests.helpers import mb, notifications_seen, sync
from tests.integration.test_differential import Conn
from tests.integration.test_shards_multikey import NAMES, conn_on

# each: (setup, commands), names as in test_shards_multikey.NAMES
SEQUENCES = [
    ("", "MSET A0 1 B0 2 A1 3\r\nRENAME A0 B1\r\nCOPY B1 A0\r\nCOPY B1 A0\r\nCOPY B1 A0 REPLACE\r\n"
         "RENAMENX A0 B1\r\nDEL B1 A0 B0 A2\r\nMGET A1 B0 A1 B2\r\nEXISTS B2 A1 B2\r\nTOUCH A1 B0\r\n"
         "SET B0 x EX 100\r\nGETEX B0 PERSIST\r\nUNLINK A1 B0\r\n"),
    ("RPUSH A1 a b\r\nSADD A2 m n\r\n",
     "LMOVE A1 B1 LEFT RIGHT\r\nRPOPLPUSH A1 B1\r\nLMOVE A1 B1 LEFT LEFT\r\nSMOVE A2 B2 m\r\nSMOVE A2 B2 x\r\n"
     "SMOVE B2 A1 m\r\nMSETNX A0 1 B0 2\r\nMSETNX A0 1 B1 2\r\nRENAME B1 A2\r\nCOPY nokey A0\r\n"),
    ("SET S0 str\r\n",
     "PFADD A0 a b\r\nPFADD B0 c\r\nPFCOUNT A0 B0 B2\r\nPFCOUNT B2 S0 A0\r\nPFMERGE B1 A0 B0 A2\r\n"
     "PFMERGE S0 B0\r\nBITOP OR A2 S0 B2\r\nZADD A1 1 a\r\nZUNIONSTORE B2 2 A1 B0\r\nZUNION 2 A1 B2\r\n"
     "SUNIONSTORE A0 B2 A2\r\nDEL A0 A1 A2 B0 B1 B2 S0\r\n"),
]


def _named(text: str) -> bytes:
    for sym in sorted(NAMES, key=len, reverse=True):
        text = text.replace(sym, NAMES[sym])
    return text.encode()


@pytest.mark.parametrize("flags", [b"KEA", b"KEAnm", b"Kgm", b"E$"])
@pytest.mark.parametrize("seq", range(len(SEQUENCES)))
@pytest.mark.parametrize("client,listener", [(0, 1), (1, 0), (1, 1)])
def test_notifications_come_in_command_order_with_each_commands_events(shard_nodes, real_redis, seq,
                                                                         flags, client, listener):
    sharded, single = shard_nodes
    setup, commands = (_named(x) for x in SEQUENCES[seq])
    seen = []
    for port, pair in ((real_redis.port, None), (single.port, None), (sharded.port, (client, listener))):
        c, lst = (Conn(port), Conn(port)) if pair is None else (conn_on(port, pair[0]), conn_on(port, pair[1]))
        try:
            seen.append(notifications_seen(c.sock, lst.sock, b"FLUSHALL\r\n" + setup, commands, flags))
        finally:
            c.close()
            lst.close()
    want, one, got = seen
    assert want and one == want  # (the reference itself)
    assert got == want, f"shards 2: {got}\nredis-server: {want}"


def _hits_misses(conn: Conn, commands: bytes) -> tuple[int, int]:
    conn.sock.sendall(commands)
    sync(conn.sock)
    info = conn.call([b"INFO", b"stats"]).decode()
    fields = dict(line.split(":", 1) for line in info.split("\r\n") if ":" in line)
    return int(fields["keyspace_hits"]), int(fields["keyspace_misses"])


@pytest.mark.parametrize("seq", range(len(SEQUENCES)))
def test_keyspace_hits_and_misses_of_commands_across_workers_as_redis(shard_nodes, real_redis, seq):
    sharded, _ = shard_nodes
    setup, commands = (_named(x) for x in SEQUENCES[seq])
    counts = []
    for port in (sharded.port, real_redis.port):
        c = conn_on(port, 0) if port == sharded.port else Conn(port)
        try:
            c.sock.sendall(b"FLUSHALL\r\n" + setup + mb(b"CONFIG", b"RESETSTAT"))
            sync(c.sock)
            counts.append(_hits_misses(c, commands))
        finally:
            c.close()
    assert counts[0] == counts[1], f"(hits, misses): shards 2 {counts[0]}, redis-server {counts[1]}"
