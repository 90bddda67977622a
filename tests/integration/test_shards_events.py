"""Keyspace notifications and keyspace hits and misses on a node of two shard workers
(docs/shards.md §8a): a subscriber on either worker sees the notifications of commands
run on both workers in the order the commands ran, and commands across workers fire the
events, and count the lookups, of the whole command, as one process and redis-server do.

The commands of a sequence are pipelined from a connection on one worker, the subscriber
is on the other (or the same); its notifications are compared with a single process's and
redis-server's for the same sequence. ``A*`` keys are on worker 0, ``B*`` on worker 1.
The same sequences run as one transaction (MULTI ... EXEC) and as one script (each
command a ``redis.pcall``), where one process delivers every notification, and every
PUBLISH among them, in the order of the commands: the workers' parts hold theirs and the
coordinator delivers them in that order. A blocking command over keys of both workers,
woken by another client's write, fires the events of its move before its reply.
"""

from __future__ import annotations

import pytest

from tests.helpers import mb, notifications_seen, sync
from tests.integration.test_collection_events import messages
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


def _wrapped(commands: bytes, how: str) -> bytes:
    """The pipelined ``commands`` as they are (``""``), as one transaction, or as one
    script that runs each with ``redis.pcall`` (its keys undeclared: a script reaching
    both workers)."""
    if how == "multi":
        return b"MULTI\r\n" + commands + b"EXEC\r\n"
    if how == "script":
        calls = ["redis.pcall(%s)" % ", ".join("'%s'" % a for a in line.split())
                 for line in commands.decode().split("\r\n") if line]
        return mb(b"EVAL", "\n".join(calls).encode(), b"0")
    return commands


@pytest.mark.parametrize("flags,how", [(b"KEA", ""), (b"KEAnm", ""), (b"Kgm", ""), (b"E$", ""),
                                       (b"KEA", "multi"), (b"KEAnm", "multi"), (b"KEA", "script"),
                                       (b"KEAnm", "script")])
@pytest.mark.parametrize("seq", range(len(SEQUENCES)))
@pytest.mark.parametrize("client,listener", [(0, 1), (1, 0), (1, 1)])
def test_notifications_come_in_command_order_with_each_commands_events(shard_nodes, real_redis, seq,
                                                                         flags, how, client, listener):
    sharded, single = shard_nodes
    setup, commands = _named(SEQUENCES[seq][0]), _wrapped(_named(SEQUENCES[seq][1]), how)
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


@pytest.mark.parametrize("how", ["", "multi", "script"])
@pytest.mark.parametrize("seq", range(len(SEQUENCES)))
def test_keyspace_hits_and_misses_of_commands_across_workers_as_redis(shard_nodes, real_redis, seq, how):
    sharded, _ = shard_nodes
    setup, commands = _named(SEQUENCES[seq][0]), _wrapped(_named(SEQUENCES[seq][1]), how)
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


def _pushed(c, lst, commands: bytes) -> list[list]:
    """Every message (keyspace notifications and PUBLISHed ones) a subscriber on ``lst``
    got while ``commands`` ran on ``c`` with notifications of every class on."""
    c.sendall(b"FLUSHALL\r\nCONFIG SET notify-keyspace-events KEAnm\r\n")
    sync(c)
    lst.sendall(b"PSUBSCRIBE __key*__:*\r\nSUBSCRIBE ch\r\n")
    sync(lst)
    try:
        c.sendall(commands)
        sync(c)
        return [m for m in messages(sync(lst)) if m and m[0] in (b"message", b"pmessage")]
    finally:
        c.sendall(b"CONFIG SET notify-keyspace-events \"\"\r\n")
        sync(c)


# each command followed by a PUBLISH: a worker's notifications must not overtake the
# messages PUBLISHed after them (nor come after those PUBLISHed before them)
INTERLEAVED = ("SET A0 1\r\nSET B0 2\r\nMSET A1 3 B1 4\r\nRENAME A0 B2\r\nHSET X1 f v\r\nDEL A1 B1\r\n"
               "INCR A2\r\nSADD B1 m\r\n")


@pytest.mark.parametrize("how", ["multi", "script"])
@pytest.mark.parametrize("client,listener", [(0, 1), (1, 0), (0, 0)])
def test_a_transaction_or_script_delivers_its_notifications_and_publishes_in_order(shard_nodes, real_redis, how,
                                                                                   client, listener):
    sharded, single = shard_nodes
    lines = _named(INTERLEAVED).split(b"\r\n")[:-1]
    commands = b"".join(b"%s\r\nPUBLISH ch %d\r\n" % (line, i) for i, line in enumerate(lines))
    seen = []
    for port, pair in ((real_redis.port, None), (single.port, None), (sharded.port, (client, listener))):
        c, lst = (Conn(port), Conn(port)) if pair is None else (conn_on(port, pair[0]), conn_on(port, pair[1]))
        try:
            seen.append(_pushed(c.sock, lst.sock, _wrapped(commands, how)))
        finally:
            c.close()
            lst.close()
    want, one, got = seen
    assert len(want) > 3 * len(lines) and one == want
    assert got == want, f"shards 2: {got}\nredis-server: {want}"


@pytest.mark.parametrize("blocked", [0, 1])
def test_a_blocked_move_across_workers_fires_its_events_before_its_reply(shard_nodes, real_redis, blocked):
    """BLMOVE from a key of worker 1 to one of worker 0, woken by a push from a client of
    the other worker: its push, pop and del events reach a subscriber (on the writer's
    worker) before its reply."""
    sharded, _ = shard_nodes
    src, dst = _named("B0"), _named("A0")
    seen = []
    for port in (real_redis.port, sharded.port):
        b, c, lst = (conn_on(port, w) if port == sharded.port else Conn(port)
                     for w in (blocked, 1 - blocked, 1 - blocked))
        try:
            c.sock.sendall(b"FLUSHALL\r\nCONFIG SET notify-keyspace-events KEA\r\n")
            sync(c.sock)
            lst.sock.sendall(b"PSUBSCRIBE __key*__:*\r\nSUBSCRIBE ch\r\n")
            sync(lst.sock)
            bid = int(b.call([b"CLIENT", b"ID"])[1:-2])
            b.sock.sendall(mb(b"BLMOVE", src, dst, b"RIGHT", b"LEFT", b"0"))
            while b" flags=b " not in c.call([b"CLIENT", b"LIST", b"ID", b"%d" % bid]):
                pass  # (blocked once CLIENT LIST says so)
            c.sock.sendall(mb(b"RPUSH", src, b"x"))
            sync(c.sock)
            reply = sync(b.sock)
            c.sock.sendall(mb(b"PUBLISH", b"ch", b"end"))
            sync(c.sock)
            got = []
            while not got or got[-1][0] != b"message":
                got += [m for m in messages(sync(lst.sock)) if m and m[0] in (b"message", b"pmessage")]
            seen.append((reply, got))
            c.sock.sendall(b"CONFIG SET notify-keyspace-events \"\"\r\n")
            sync(c.sock)
        finally:
            for x in (b, c, lst):
                x.close()
    assert any(m[-1] == b"lpush" for m in seen[0][1])  # (the reference)
    assert seen[1] == seen[0]


@pytest.mark.parametrize("script,tracking", [(0, 0), (1, 1), (0, 1)])
def test_a_script_across_workers_invalidates_a_tracking_client_of_its_own_worker(shard_nodes, script, tracking):
    """A script whose call writes a key of the other worker that a tracking client read:
    the invalidation comes back with the call's reply and the script's worker tells the
    client (that worker waits for the reply and reads nothing else meanwhile: the other
    worker's own message to it held that reply, 60 s, then LOADING)."""
    sharded, _ = shard_nodes
    mine, theirs = _named("A0" if script == 0 else "B0"), _named("B0" if script == 0 else "A0")
    t, c = conn_on(sharded.port, tracking), conn_on(sharded.port, script)
    try:
        assert t.call([b"HELLO", b"3"])[:1] == b"%"
        assert t.call([b"CLIENT", b"TRACKING", b"on"]) == b"+OK\r\n"
        c.call([b"SET", theirs, b"1"])
        assert t.call([b"GET", theirs]) == b"$1\r\n1\r\n"
        c.sock.settimeout(30)  # (well under the 60 s the reply waited)
        got = c.call([b"EVAL", b"redis.call('SET', KEYS[1], 'x'); return redis.call('SET', KEYS[2], 'y')", b"2",
                      mine, theirs])
        assert got == b"+OK\r\n"
        assert b">2\r\n$10\r\ninvalidate\r\n*1\r\n$%d\r\n%s\r\n" % (len(theirs), theirs) in sync(t.sock)
    finally:
        t.close()
        c.close()


def test_a_script_across_workers_invalidates_a_bcast_client_of_its_own_worker_once(shard_nodes, real_redis):
    """The same with a BCAST tracking client: its invalidations of the other worker's keys
    come back with the call's reply (they hung the script 60 s before), gathered with its
    worker's own, one message for the prefix as one process and Redis send (the other
    worker's keys had come in a message of their own). (Redis lists a prefix's keys in
    their sorted order, marekvs in the order they changed.)"""
    sharded, single = shard_nodes
    a, b = _named("A0"), _named("B0")
    seen = []
    for port in (real_redis.port, single.port, sharded.port):
        t, c = (conn_on(port, 0), conn_on(port, 0)) if port == sharded.port else (Conn(port), Conn(port))
        try:
            assert t.call([b"HELLO", b"3"])[:1] == b"%"
            assert t.call([b"CLIENT", b"TRACKING", b"on", b"BCAST"]) == b"+OK\r\n"
            c.sock.settimeout(30)
            assert c.call([b"EVAL", b"redis.call('SET', KEYS[1], 'x'); redis.call('SET', KEYS[2], 'y'); "
                           b"return redis.call('SET', KEYS[1], 'z')", b"2", a, b]) == b"+OK\r\n"
            seen.append(sync(t.sock))
        finally:
            t.close()
            c.close()
    want = b">2\r\n$10\r\ninvalidate\r\n*2\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"
    assert seen[0] == (want % (len(b), b, len(a), a) if b < a else want % (len(a), a, len(b), b))
    assert seen[1] == want % (len(a), a, len(b), b)
    assert seen[2] == seen[1]


def test_a_key_expiring_on_the_other_worker_amid_a_script_does_not_stop_it(shard_nodes):
    """A key of worker 1 expires (its ``expired`` notification fired there) while a script
    of worker 0 is carrying calls to worker 1: the calls' replies go on (worker 0 reads
    nothing but them meanwhile, so worker 1 held them for its acknowledgement: 60 s, then
    LOADING)."""
    sharded, _ = shard_nodes
    a, b, b1 = _named("A0"), _named("B0"), _named("B1")
    c = conn_on(sharded.port, 0)
    try:
        c.call([b"FLUSHALL"])
        c.call([b"CONFIG", b"SET", b"notify-keyspace-events", b"KEA"])
        c.call([b"SET", b, b"v", b"PX", b"100"])
        c.sock.settimeout(30)
        script = b"for i = 1, 20000 do redis.call('GET', KEYS[2]) end return redis.call('SET', KEYS[1], 'x')"
        got = c.call([b"EVAL", script, b"2", a, b1])  # (~0.3-1 s: well past the deadline)
        assert got == b"+OK\r\n"
        assert c.call([b"EXISTS", b]) == b":0\r\n"  # (it expired meanwhile or by now)
    finally:
        c.call([b"CONFIG", b"SET", b"notify-keyspace-events", b""])
        c.close()
