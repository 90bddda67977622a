"""Pub/Sub, keyspace notifications and client-side caching on one node, side by side with a
stock redis-server: the same byte sequences give the same replies and messages (RESP2 and
RESP3); redis-py's PubSub (sync and asyncio) and client-side cache and `redis-cli SUBSCRIBE`
work unchanged; a slow subscriber is cut off by the output-buffer limit while the node keeps
serving."""

from __future__ import annotations

import asyncio
import re
import shutil
import socket
import subprocess
import time

import pytest
import redis

from tests.helpers import Node, RedisServer, conversation, mb, notifications_seen, sync


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    n = Node(tmp_path_factory.mktemp("ps") / "data").start()
    r = RedisServer(tmp_path_factory.mktemp("ps-redis")).start()
    yield n, r
    n.stop()
    r.stop()


def same(out: bytes) -> bytes:
    return re.sub(rb":\d+\r\n\$4\r\nmode", b":ID\r\n$4\r\nmode", out)  # HELLO's client id


PUBSUB_SEQUENCES = [
    b"SUBSCRIBE a b\r\nGET x\r\nPING\r\nPING hi\r\nUNSUBSCRIBE b\r\nUNSUBSCRIBE\r\nUNSUBSCRIBE\r\nGET x\r\n",
    b"HELLO 3\r\nSUBSCRIBE a\r\nGET x\r\nPING\r\nPUNSUBSCRIBE\r\nRESET\r\nGET x\r\n",
    b"PSUBSCRIBE h*llo\r\nSSUBSCRIBE s1\r\nSUNSUBSCRIBE\r\nPUNSUBSCRIBE x\r\nQUIT\r\n",
    b"SUBSCRIBE a a\r\nPUBSUB NUMSUB a b\r\n",
    b"PUBSUB NUMPAT\r\nPUBSUB CHANNELS\r\nPUBLISH nochan m\r\nPUBSUB HELP\r\nPUBSUB SHARDNUMSUB x\r\n",
    b"SUBSCRIBE\r\nPSUBSCRIBE\r\nPUBLISH a\r\n",
    b"HELLO 3\r\nSUBSCRIBE a\r\nHELLO 2\r\nGET x\r\n",
    b"SUBSCRIBE a\r\nHELLO 3\r\nGET x\r\n",
    b"HELLO 3\r\nPUBSUB NUMSUB a b\r\nPUBSUB CHANNELS *\r\n",
]


@pytest.mark.parametrize("data", PUBSUB_SEQUENCES, ids=lambda d: repr(d)[:40])
def test_pubsub_replies_as_redis(pair, data):
    node, r = pair
    assert same(conversation(node.port, data)) == same(conversation(r.port, data))


def test_messages_as_redis_in_both_protocols(pair):
    node, r = pair
    for hello in (b"", b"HELLO 3\r\n"):
        outs = []
        for port in (node.port, r.port):
            with socket.create_connection(("127.0.0.1", port), timeout=10) as sub:
                sub.sendall(hello + b"SUBSCRIBE news\r\nPSUBSCRIBE n*\r\nSSUBSCRIBE shard\r\n")
                sync(sub)
                with socket.create_connection(("127.0.0.1", port), timeout=10) as pub:
                    pub.sendall(mb(b"PUBLISH", b"news", b"hello\r\nworld") + mb(b"PUBLISH", b"nope", b"x")
                                + mb(b"SPUBLISH", b"shard", b"s") + mb(b"PUBSUB", b"NUMPAT"))
                    replies = b""
                    while replies.count(b"\r\n") < 4:
                        replies += pub.recv(100)
                    assert replies == b":2\r\n:1\r\n:1\r\n:1\r\n"
                outs.append(same(sync(sub)))
        assert outs[0] == outs[1], hello


def quiet_for(s: socket.socket, settle: float) -> bytes:
    """What arrives on ``s`` within ``settle`` seconds (to assert that nothing more does)."""
    out = b""
    s.settimeout(settle)
    while True:
        try:
            d = s.recv(65536)
        except TimeoutError:
            return out
        if not d:
            return out
        out += d


def test_redis_py_pubsub_sync_and_asyncio(pair):
    node, _ = pair
    c = node.client()
    ps = c.pubsub()
    got = []
    ps.subscribe("plain")
    ps.psubscribe(**{"pat:*": lambda m: got.append(m)})
    deadline = time.monotonic() + 30
    while ps.get_message(timeout=0.5) is not None or time.monotonic() > deadline:
        pass  # the subscribe confirmations
    assert c.publish("plain", "one") == 1
    assert c.publish("pat:x", "two") == 1
    msg = None
    while msg is None and time.monotonic() < deadline:
        msg = ps.get_message(ignore_subscribe_messages=True, timeout=1)
    assert msg == {"type": "message", "pattern": None, "channel": b"plain", "data": b"one"}
    while not got and time.monotonic() < deadline:
        ps.get_message(timeout=1)  # runs the pattern handler
    assert got[0]["data"] == b"two" and got[0]["channel"] == b"pat:x"
    ps.close()

    async def go():
        ac = redis.asyncio.Redis(port=node.port, protocol=3)
        aps = ac.pubsub()
        await aps.subscribe("async")
        await aps.get_message(timeout=5)  # the confirmation
        assert await ac.publish("async", "hi") == 1
        m = await aps.get_message(ignore_subscribe_messages=True, timeout=10)
        assert m["data"] == b"hi"
        await aps.aclose()
        await ac.aclose()

    asyncio.run(go())


@pytest.mark.skipif(shutil.which("redis-cli") is None, reason="redis-cli is not installed")
def test_redis_cli_subscribe(pair):
    node, _ = pair
    p = subprocess.Popen(["redis-cli", "-p", str(node.port), "SUBSCRIBE", "cli"], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    try:
        c = node.client()
        deadline = time.monotonic() + 30
        while c.pubsub_numsub("cli")[0][1] == 0 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.publish("cli", "via redis-cli") == 1
        lines = []
        while b"via redis-cli" not in b"".join(lines) and time.monotonic() < deadline:
            lines.append(p.stdout.readline())
        assert b"via redis-cli" in b"".join(lines)
    finally:
        p.kill()
        p.wait()


def test_slow_subscriber_is_cut_off_and_the_node_keeps_serving(tmp_path):
    node = Node(tmp_path / "data").start()
    try:
        c = node.client()
        c.config_set("client-output-buffer-limit", "pubsub 256kb 128kb 1")
        slow = socket.create_connection(("127.0.0.1", node.port), timeout=10)
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.sendall(b"SUBSCRIBE flood\r\n")
        sync(slow)
        assert c.pubsub_numsub("flood")[0][1] == 1
        payload = b"x" * 4096
        deadline = time.monotonic() + 60
        while c.pubsub_numsub("flood")[0][1] and time.monotonic() < deadline:
            p = c.pipeline(transaction=False)
            for _ in range(100):
                p.publish("flood", payload)
            p.execute()
        assert c.pubsub_numsub("flood")[0][1] == 0, "the slow subscriber was never disconnected"
        assert c.ping()
        rss = c.info("memory")["used_memory"]
        for _ in range(20):  # a flood with no subscriber: nothing kept
            p = c.pipeline(transaction=False)
            for _ in range(500):
                p.publish("nobody", payload)
            p.execute()
        assert c.info("memory")["used_memory"] < rss + 64 * 1024 * 1024
        slow.close()
    finally:
        node.stop()


def test_a_subscriber_cut_off_with_output_still_queued_is_dropped_at_once(tmp_path):
    # The limit trips while the connection's transport still holds bytes the kernel would
    # not take (the subscriber reads nothing). Redis frees such a client at once, its
    # output discarded; a close that first waited for that output to drain would wait for
    # ever, and the subscriber would stay subscribed (seen once in ten fresh-clone runs).
    node = Node(tmp_path / "data").start()
    try:
        c = node.client()
        c.config_set("client-output-buffer-limit", "pubsub 0 0 0")
        slow = socket.create_connection(("127.0.0.1", node.port), timeout=10)
        slow.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        slow.sendall(b"SUBSCRIBE flood\r\n")
        sync(slow)
        payload = b"x" * 65536
        for _ in range(16):  # 16 MB, more than the kernel's socket buffers take
            p = c.pipeline(transaction=False)
            for _ in range(16):
                p.publish("flood", payload)
            p.execute()
        assert c.pubsub_numsub("flood")[0][1] == 1  # no limit: still subscribed
        c.config_set("client-output-buffer-limit", "pubsub 256kb 128kb 1")
        assert c.publish("flood", b"one more") == 1  # counted, then over the limit: cut off
        deadline = time.monotonic() + 60
        while c.pubsub_numsub("flood")[0][1] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.pubsub_numsub("flood")[0][1] == 0, "the cut-off subscriber is still subscribed"
        assert c.ping()
        slow.close()
    finally:
        node.stop()


def notifications(port: int, commands: bytes, flags: bytes) -> list[tuple[bytes, bytes]]:
    with socket.create_connection(("127.0.0.1", port), timeout=10) as c, \
            socket.create_connection(("127.0.0.1", port), timeout=10) as lst:
        return notifications_seen(c, lst, b"FLUSHALL\r\n", commands, flags)


NOTIFY_SEQUENCES = [
    b"SET a 1\r\nSET a 2 EX 100\r\nINCR n\r\nINCRBY n 5\r\nDECR n\r\nINCRBYFLOAT f 1.5\r\nAPPEND a x\r\n"
    b"SETRANGE a 1 yy\r\nGETSET a z\r\nGETDEL a\r\n",
    b"MSET a 1 b 2\r\nDEL a b c\r\nSET a 1\r\nEXPIRE a 100\r\nPERSIST a\r\nPEXPIRE a -1\r\nSET k v\r\n"
    b"RENAME k k2\r\nCOPY k2 k3\r\nGETEX k3 EX 50\r\nGETEX k3 PERSIST\r\nSETEX s 10 v\r\nSETNX s2 v\r\n",
    b"GET nokey\r\nEXISTS nokey\r\nTYPE nokey\r\nSET a 1\r\nGET a\r\n",
]


@pytest.mark.parametrize("flags", [b"KEA", b"KEAnm", b"Kg", b"E$", b"KEx", b"KEn", b"K$gm"])
@pytest.mark.parametrize("seq", range(len(NOTIFY_SEQUENCES)))
def test_keyspace_notifications_as_redis(pair, flags, seq):
    node, r = pair
    data = NOTIFY_SEQUENCES[seq]
    assert notifications(node.port, data, flags) == notifications(r.port, data, flags)


def test_expired_fires_once_at_the_deadline(pair):
    node, r = pair
    for port in (node.port, r.port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as c, \
                socket.create_connection(("127.0.0.1", port), timeout=10) as lst:
            c.sendall(b"CONFIG SET notify-keyspace-events Ex\r\n")
            sync(c)
            lst.sendall(b"SUBSCRIBE __keyevent@0__:expired\r\n")
            sync(lst)
            c.sendall(b"SET e1 v PX 100\r\nSET e2 v PX 100\r\n")
            sync(c)
            got = b""
            lst.settimeout(30)
            while got.count(b"expired") < 2:
                got += lst.recv(1000)
            assert b"e1" in got and b"e2" in got
            assert quiet_for(lst, 0.5) == b""  # once each
            c.sendall(b"CONFIG SET notify-keyspace-events \"\"\r\n")
            sync(c)


TRACKING_SEQUENCES = [
    b"CLIENT TRACKING on\r\nCLIENT GETREDIR\r\nCLIENT TRACKINGINFO\r\n",
    b"CLIENT TRACKING on PREFIX a\r\n", b"CLIENT TRACKING on BCAST PREFIX a PREFIX ab\r\n",
    b"CLIENT TRACKING on REDIRECT 99999\r\n", b"CLIENT TRACKING on OPTIN OPTOUT\r\n",
    b"CLIENT TRACKING on BCAST OPTIN\r\n", b"CLIENT CACHING yes\r\n",
    b"CLIENT TRACKING on\r\nCLIENT CACHING yes\r\n", b"CLIENT TRACKING on OPTIN\r\nCLIENT CACHING no\r\n",
    b"CLIENT TRACKING maybe\r\n", b"CLIENT TRACKING on FOO\r\n", b"CLIENT GETREDIR\r\nCLIENT TRACKINGINFO\r\n",
    b"HELLO 3\r\nCLIENT TRACKING on BCAST PREFIX a NOLOOP\r\nCLIENT TRACKINGINFO\r\nCLIENT TRACKING off\r\n"
    b"CLIENT TRACKINGINFO\r\n",
    b"HELLO 3\r\nCLIENT TRACKING on\r\nGET k1\r\nSET k1 v\r\nGET k1\r\nFLUSHALL\r\n",
    b"CLIENT TRACKING on\r\nCLIENT TRACKING on BCAST\r\n",
    b"HELLO 3\r\nCLIENT TRACKING on OPTIN\r\nGET a\r\nSET a 1\r\nCLIENT CACHING yes\r\nGET a\r\nSET a 2\r\n",
    b"HELLO 3\r\nCLIENT TRACKING on BCAST NOLOOP\r\nSET a 1\r\nCLIENT TRACKING off\r\nCLIENT TRACKING on BCAST\r\n"
    b"SET a 2\r\nMSET a 1 b 2\r\n",
    b"HELLO 3\r\nCLIENT TRACKING on NOLOOP\r\nGET a\r\nSET a 1\r\nGET a\r\nRESET\r\nCLIENT TRACKINGINFO\r\n",
]


@pytest.mark.parametrize("data", TRACKING_SEQUENCES, ids=lambda d: repr(d)[:40])
def test_client_tracking_as_redis(pair, data):
    node, r = pair
    outs = []
    for port in (node.port, r.port):
        outs.append(same(conversation(port, data)))
        conversation(port, b"FLUSHALL\r\n")
    assert outs[0] == outs[1]


def test_tracking_redirect_to_a_resp2_subscriber(pair):
    node, r = pair
    outs = []
    for port in (node.port, r.port):
        with socket.create_connection(("127.0.0.1", port), timeout=10) as inv, \
                socket.create_connection(("127.0.0.1", port), timeout=10) as c:
            inv.sendall(b"CLIENT ID\r\nSUBSCRIBE __redis__:invalidate\r\n")
            cid = int(sync(inv).split(b"\r\n")[0][1:])
            c.sendall(b"CLIENT TRACKING on REDIRECT %d\r\nGET rk\r\nSET rk 1\r\n" % cid)
            sync(c)
            outs.append(sync(inv))
    assert outs[0] == outs[1] and b"rk" in outs[0]


def test_redis_py_client_side_cache(tmp_path):
    # redis-py enables its cache only for servers whose HELLO reports 7.4 or later
    from redis.cache import CacheConfig

    node = Node(tmp_path / "data", extra=["--redis-version", "7.4.0"]).start()
    try:  # (stopped by its pid whatever happens: no server outlives the test)
        cached = redis.Redis(port=node.port, protocol=3, cache_config=CacheConfig())
        writer = node.client()
        writer.set("cached-key", "one")
        assert cached.get("cached-key") == b"one"
        assert cached.get("cached-key") == b"one"  # (from the cache)
        writer.set("cached-key", "two")
        deadline = time.monotonic() + 30
        while cached.get("cached-key") != b"two" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert cached.get("cached-key") == b"two"
        cached.close()
    finally:
        node.stop()
