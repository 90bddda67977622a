"""Pub/Sub, keyspace notifications and client-side caching across three real nodes: a message
published on node 1 reaches a subscriber on node 3 in order; a notification listener on node
2 sees a SET, a DEL and an expiry made on node 1; a tracking client on node 2 is invalidated
by a write on node 1."""

from __future__ import annotations

import re
import socket
import time

import pytest

from tests.cluster import Cluster

pytestmark = pytest.mark.timeout(180)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("pscluster"), n=3)
    c.wait_streaming()
    yield c
    c.stop()


def read_until(s: socket.socket, pred, timeout: float = 60) -> bytes:
    out = b""
    deadline = time.monotonic() + timeout
    s.settimeout(1)
    while not pred(out):
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out; got {out[-500:]!r}")
        try:
            d = s.recv(65536)
        except TimeoutError:
            continue
        assert d, "connection closed"
        out += d
    return out


def test_publish_on_one_node_reaches_subscribers_of_another_in_order(cluster):
    sub = socket.create_connection(("127.0.0.1", cluster[3].port), timeout=10)
    sub.sendall(b"SUBSCRIBE room\r\n")
    read_until(sub, lambda o: o.endswith(b":1\r\n"))
    pub = cluster.client(1)
    # the relay stream to node 3 opens with the link: publish probes until one arrives
    deadline = time.monotonic() + 60
    got = b""
    sub.settimeout(0.2)
    while b"probe" not in got:
        assert time.monotonic() < deadline, "no message relayed from node 1 to node 3"
        assert pub.publish("room", "probe") == 0  # PUBLISH counts node 1's own subscribers
        try:
            got += sub.recv(65536)
        except TimeoutError:
            pass
    for i in range(300):
        pub.publish("room", f"m{i:03d}")
    out = read_until(sub, lambda o: b"m299" in o)
    seen = re.findall(rb"m\d{3}", out)
    assert seen == [b"m%03d" % i for i in range(300)]  # all of them, in publish order
    pat = socket.create_connection(("127.0.0.1", cluster[2].port), timeout=10)
    pat.sendall(b"HELLO 3\r\nPSUBSCRIBE ro*\r\n")
    read_until(pat, lambda o: b"psubscribe" in o)
    pub.publish("room", "to-patterns-too")
    out = read_until(pat, lambda o: b"to-patterns-too" in o)
    assert b">4\r\n$8\r\npmessage\r\n$3\r\nro*\r\n$4\r\nroom\r\n" in out  # a RESP3 push on node 2
    sub.close()
    pat.close()


def test_keyspace_notifications_of_writes_made_on_another_node(cluster):
    c2 = cluster.client(2)
    c2.config_set("notify-keyspace-events", "KEA")
    lst = socket.create_connection(("127.0.0.1", cluster[2].port), timeout=10)
    lst.sendall(b"PSUBSCRIBE __keyevent@0__:*\r\n")
    read_until(lst, lambda o: o.endswith(b":1\r\n"))
    c1 = cluster.client(1)
    c1.set("watched", "v")
    read_until(lst, lambda o: b"__keyevent@0__:set\r\n$7\r\nwatched" in o)
    c1.delete("watched")
    read_until(lst, lambda o: b"__keyevent@0__:del\r\n$7\r\nwatched" in o)
    c1.set("short-lived", "v", px=300)
    out = read_until(lst, lambda o: b"__keyevent@0__:expired\r\n$11\r\nshort-lived" in o)
    assert out.count(b"__keyevent@0__:expired\r\n$11\r\nshort-lived") == 1
    c1.set("counted", 1)
    c1.incrby("counted", 5)
    read_until(lst, lambda o: b"__keyevent@0__:incrby\r\n$7\r\ncounted" in o)
    c2.config_set("notify-keyspace-events", "")
    lst.close()


def test_tracking_client_is_invalidated_by_a_write_on_another_node(cluster):
    t = socket.create_connection(("127.0.0.1", cluster[2].port), timeout=10)
    c1 = cluster.client(1)
    c1.set("tracked", "old")
    cluster.wait_converged()
    t.sendall(b"HELLO 3\r\nCLIENT TRACKING on\r\nGET tracked\r\n")
    read_until(t, lambda o: o.endswith(b"$3\r\nold\r\n"))
    c1.set("tracked", "new")
    read_until(t, lambda o: b">2\r\n$10\r\ninvalidate\r\n*1\r\n$7\r\ntracked\r\n" in o)
    t.sendall(b"GET tracked\r\n")
    read_until(t, lambda o: o.endswith(b"$3\r\nnew\r\n"))  # the write replicated before its invalidation
    t.close()


def test_relay_streams_of_flapping_links_leave_nothing_pending_at_stop(tmp_path):
    # Each time a peer goes away, the pub/sub relay stream to it ends; its message generator
    # must end with it. (It used to wait on its queue for ever: every flap left a task, and a
    # clean stop logged "Task was destroyed but it is pending!" for each, found by the docker
    # test after its node 3 had been stopped twice.)
    c = Cluster(tmp_path, n=2)
    try:
        c.wait_streaming(60)
        for _ in range(2):
            c.kill9(2)
            c.start_node(2)
            c.wait_streaming(60)
            assert c.client(1).publish("room", "after a flap") == 0
        code = c[1].stop()
        log = c[1].log_text()
        assert code == 0 and "stopped cleanly" in log, log[-3000:]
        for bad in ("Task was destroyed", "never retrieved", "Traceback"):
            assert bad not in log, log[-3000:]
    finally:
        c.stop()
