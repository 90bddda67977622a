"""Streams and consumer groups on real clusters (processes on loopback, real gRPC): what a
user of marekvs can rely on (docs/streams.md).

- A group created on one node is usable on every node, and consumers on different nodes
  share its position: each entry read once with ``>`` while the deliveries replicate.
- An entry acknowledged anywhere is never delivered again once the ack has replicated:
  not with ``>``, not by XCLAIM or XAUTOCLAIM, not in XPENDING; even on a node that gets
  the ack before the delivery it acknowledges (the delivering node's link to it cut).
- A consumer failing over to another node (its node killed) sees its pending entries
  there, reads them as its history, and they can be XCLAIMed and XAUTOCLAIMed there.
- Two nodes delivering the same entry at the same time (the link between them cut) hand
  it to two consumers: an at-least-once duplicate that XPENDING shows (delivery count 2),
  never a loss.
- XREAD BLOCK and XREADGROUP BLOCK on node 1 are woken by an XADD made on node 2.

Every wait is for the event needed (a key replicated, a client blocked, digests equal),
with generous deadlines.
"""

from __future__ import annotations

import threading

import pytest

from tests.cluster import Cluster, info_section, wait_for, wait_links

pytestmark = pytest.mark.timeout(240)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("streams-cluster"), n=3)
    c.wait_streaming(30)
    yield c
    c.stop()


def _raw(c):
    """A client without redis-py's stream reply callbacks (the RESP2 trees)."""
    for name in list(c.response_callbacks):
        if name.upper().startswith("X"):
            del c.response_callbacks[name]
    return c


def clients(c: Cluster) -> dict:
    return {i: _raw(c.client(i, protocol=2)) for i in c.running()}


def entries(reply) -> list[bytes]:
    """The ids of an XREAD/XREADGROUP reply (RESP2), of every stream."""
    return [sid for _, es in (reply or []) for sid, _ in es]


def pending_ids(cl, key, group) -> list[bytes]:
    return [e[0] for e in cl.execute_command("XPENDING", key, group, "-", "+", "1000")]


def replicated(c: Cluster, on: int, marker: str) -> None:
    """Wait until node ``on`` holds the key ``marker``: written after the records a test
    waits for on the same node, it arrives after them (each origin's log ships in order)."""
    with c.client(on) as cl:
        wait_for(lambda: cl.exists(marker), 60, f"{marker} on node {on}")


def test_a_group_created_on_one_node_is_usable_on_every_node(cluster):
    c = cluster
    n = clients(c)
    n[1].execute_command("XGROUP", "CREATE", "jobs", "workers", "$", "MKSTREAM")
    ids = [n[1].execute_command("XADD", "jobs", "*", "job", str(i)) for i in range(9)]
    c.wait_converged(60)
    got = {}
    for i in (1, 2, 3):  # one after the other, each read replicated before the next
        got[i] = entries(n[i].execute_command("XREADGROUP", "GROUP", "workers", f"w{i}", "COUNT", "3",
                                              "STREAMS", "jobs", ">"))
        c.wait_converged(60)
    assert got == {1: ids[0:3], 2: ids[3:6], 3: ids[6:9]}
    for i in (1, 2, 3):
        summary = n[i].execute_command("XPENDING", "jobs", "workers")
        assert summary[0] == 9 and sorted(summary[3]) == [[b"w1", b"3"], [b"w2", b"3"], [b"w3", b"3"]]
        groups = n[i].execute_command("XINFO", "GROUPS", "jobs")
        info = dict(zip(groups[0][::2], groups[0][1::2]))
        assert info[b"last-delivered-id"] == ids[-1] and info[b"consumers"] == 3 and info[b"lag"] == 0
    for i in (1, 2, 3):  # acks anywhere, for entries delivered anywhere
        assert n[i].execute_command("XACK", "jobs", "workers", *ids[(i % 3) * 3:(i % 3) * 3 + 3]) == 3
    c.wait_converged(60)
    for i in (1, 2, 3):
        assert n[i].execute_command("XPENDING", "jobs", "workers")[0] == 0
        assert n[i].execute_command("XREADGROUP", "GROUP", "workers", "w", "STREAMS", "jobs", ">") is None


def test_an_entry_acked_anywhere_is_never_delivered_again_once_the_ack_replicated(cluster):
    c = cluster
    n = clients(c)
    n[2].execute_command("XGROUP", "CREATE", "acked", "g", "0", "MKSTREAM")
    sid = n[2].execute_command("XADD", "acked", "*", "k", "v")
    c.wait_converged(60)
    assert entries(n[1].execute_command("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "acked", ">")) == [sid]
    c.wait_converged(60)
    assert n[3].execute_command("XACK", "acked", "g", sid) == 1
    c.wait_converged(60)
    for i in (1, 2, 3):
        assert n[i].execute_command("XREADGROUP", "GROUP", "g", f"c{i}", "STREAMS", "acked", ">") is None
        assert n[i].execute_command("XCLAIM", "acked", "g", "thief", "0", sid) == []
        assert n[i].execute_command("XAUTOCLAIM", "acked", "g", "thief", "0", "0")[1] == []
        assert n[i].execute_command("XPENDING", "acked", "g")[0] == 0
        assert n[i].execute_command("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "acked", "0") == \
            [[b"acked", []]]


def test_a_node_that_gets_the_ack_before_the_delivery_does_not_deliver_again(tmp_path):
    """Node 1 delivers; node 2 receives the delivery and acknowledges it; node 3 receives
    node 2's ack while node 1's delivery is held back (link 1->3 cut). The ack comes with
    node 2's view of the group's position, so node 3 never hands the entry out again."""
    c = Cluster.with_proxies(tmp_path, [(1, 3)], n=3)
    try:
        c.wait_streaming(30)
        n = clients(c)
        n[2].execute_command("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM")
        sid = n[2].execute_command("XADD", "s", "*", "k", "v")
        c.wait_converged(60)
        c.proxy(1, 3).cut()
        wait_links(c, [(1, 3)], up=False)
        assert entries(n[1].execute_command("XREADGROUP", "GROUP", "g", "c1", "STREAMS", "s", ">")) == [sid]
        wait_for(lambda: pending_ids(n[2], "s", "g") == [sid], 60, "the delivery on node 2")
        assert n[3].execute_command("XPENDING", "s", "g")[0] == 0  # node 3 has not seen it
        assert n[2].execute_command("XACK", "s", "g", sid) == 1
        n[2].set("after-ack", "1")
        replicated(c, 3, "after-ack")
        assert n[3].execute_command("XREADGROUP", "GROUP", "g", "c3", "STREAMS", "s", ">") is None
        assert n[3].execute_command("XAUTOCLAIM", "s", "g", "c3", "0", "0")[1] == []
        c.proxy(1, 3).heal()
        wait_links(c, [(1, 3)], up=True)
        c.wait_converged(60)
        for i in (1, 2, 3):
            assert n[i].execute_command("XPENDING", "s", "g")[0] == 0
            assert n[i].execute_command("XREADGROUP", "GROUP", "g", "x", "STREAMS", "s", ">") is None
    finally:
        c.stop()


def test_a_consumer_failing_over_sees_its_pending_entries_and_they_can_be_claimed(tmp_path):
    c = Cluster(tmp_path, n=3)
    try:
        c.wait_streaming(30)
        n = clients(c)
        n[1].execute_command("XGROUP", "CREATE", "orders", "billing", "$", "MKSTREAM")
        ids = [n[1].execute_command("XADD", "orders", "*", "order", str(i)) for i in range(6)]
        assert entries(n[1].execute_command("XREADGROUP", "GROUP", "billing", "alice", "STREAMS",
                                            "orders", ">")) == ids
        assert n[1].execute_command("XACK", "orders", "billing", ids[0]) == 1
        n[1].set("alice-read", "1")
        replicated(c, 2, "alice-read")
        c.kill9(1)  # alice's node dies; she reconnects to node 2
        history = n[2].execute_command("XREADGROUP", "GROUP", "billing", "alice", "STREAMS", "orders", "0")
        assert entries(history) == ids[1:]
        assert n[2].execute_command("XCLAIM", "orders", "billing", "bob", "0", ids[1], ids[2], "JUSTID") == \
            ids[1:3]
        cursor, claimed, deleted = n[2].execute_command("XAUTOCLAIM", "orders", "billing", "carol", "0",
                                                        b"(" + ids[2], "COUNT", "2")
        assert [e[0] for e in claimed] == ids[3:5] and deleted == [] and cursor == ids[5]
        pend = {e[0]: (e[1], e[3]) for e in n[2].execute_command("XPENDING", "orders", "billing", "-", "+", "10")}
        # deliveries: alice's read (1), her history read on node 2 (2); JUSTID does not count
        assert pend == {ids[1]: (b"bob", 2), ids[2]: (b"bob", 2), ids[3]: (b"carol", 3),
                        ids[4]: (b"carol", 3), ids[5]: (b"alice", 2)}
        c.wait_converged(60, ids=[2, 3])
        assert n[3].execute_command("XACK", "orders", "billing", *ids[1:]) == 5
        c.start_node(1)
        n[1] = _raw(c.client(1, protocol=2))
        c.wait_streaming(60)
        c.wait_converged(60)
        for i in (1, 2, 3):
            assert n[i].execute_command("XPENDING", "orders", "billing")[0] == 0
    finally:
        c.stop()


def test_concurrent_deliveries_on_two_nodes_are_duplicates_xpending_shows(tmp_path):
    c = Cluster.with_proxies(tmp_path, [(1, 2), (2, 1)], n=3)
    try:
        c.wait_streaming(30)
        n = clients(c)
        n[3].execute_command("XGROUP", "CREATE", "s", "g", "0", "MKSTREAM")
        ids = [n[3].execute_command("XADD", "s", "*", "n", str(i)) for i in range(4)]
        c.wait_converged(60)
        c.proxy(1, 2).cut()
        c.proxy(2, 1).cut()
        wait_links(c, [(1, 2), (2, 1)], up=False)
        got1 = entries(n[1].execute_command("XREADGROUP", "GROUP", "g", "one", "COUNT", "2", "STREAMS", "s", ">"))
        got2 = entries(n[2].execute_command("XREADGROUP", "GROUP", "g", "two", "COUNT", "3", "STREAMS", "s", ">"))
        assert got1 == ids[:2] and got2 == ids[:3]  # neither saw the other's deliveries
        c.proxy(1, 2).heal()
        c.proxy(2, 1).heal()
        wait_links(c, [(1, 2), (2, 1)], up=True)
        c.wait_converged(60)
        views = [n[i].execute_command("XPENDING", "s", "g", "-", "+", "10") for i in (1, 2, 3)]
        assert views[0] == views[1] == views[2] or all(
            [(e[0], e[1], e[3]) for e in v] == [(e[0], e[1], e[3]) for e in views[0]] for v in views)
        pend = {e[0]: (e[1], e[3]) for e in views[0]}
        assert set(pend) == set(ids[:3])  # nothing lost
        assert pend[ids[0]][1] == 2 and pend[ids[1]][1] == 2  # delivered twice: the duplicates show
        assert pend[ids[0]][0] in (b"one", b"two") and pend[ids[2]] == (b"two", 1)
        for i in (1, 2, 3):
            groups = n[i].execute_command("XINFO", "GROUPS", "s")
            assert dict(zip(groups[0][::2], groups[0][1::2]))[b"last-delivered-id"] == ids[2]
        assert entries(n[1].execute_command("XREADGROUP", "GROUP", "g", "one", "STREAMS", "s", ">")) == [ids[3]]
    finally:
        c.stop()


def _blocked(cl) -> int:
    return int(info_section(cl, "clients")["blocked_clients"])


@pytest.mark.parametrize("grouped", [False, True], ids=["xread", "xreadgroup"])
def test_a_blocked_read_on_one_node_is_woken_by_an_xadd_on_another(cluster, grouped):
    c = cluster
    key = f"wake:{int(grouped)}"
    admin = _raw(c.client(1, protocol=2))
    if grouped:
        admin.execute_command("XGROUP", "CREATE", key, "g", "$", "MKSTREAM")
        c.wait_converged(60)
        cmd = ("XREADGROUP", "GROUP", "g", "c", "BLOCK", "0", "STREAMS", key, ">")
    else:
        cmd = ("XREAD", "BLOCK", "0", "STREAMS", key, "$")
    waiter = _raw(c.client(1, socket_timeout=60, protocol=2))
    got = {}
    t = threading.Thread(target=lambda: got.setdefault("r", waiter.execute_command(*cmd)), daemon=True)
    t.start()
    wait_for(lambda: _blocked(admin) == 1, 30, "the read blocked on node 1")
    with c.client(2) as n2:
        sid = n2.execute_command("XADD", key, "*", "from", "node-2")
    t.join(60)
    assert not t.is_alive(), "the read on node 1 was not woken by the XADD on node 2"
    assert got["r"] == [[key.encode(), [[sid, [b"from", b"node-2"]]]]]
    if grouped:
        c.wait_converged(60)
        with c.client(3, protocol=2) as n3:
            assert _raw(n3).execute_command("XPENDING", key, "g")[:3] == [1, sid, sid]
    waiter.close()
    admin.close()
