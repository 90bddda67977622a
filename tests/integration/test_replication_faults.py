"""Faults on a real cluster: SIGKILL under load, a broken link between two nodes (through
fault-injecting proxies), and what WAIT reports when a replica is unreachable."""

from __future__ import annotations

import time

import pytest

from marekvs.replication.manager import MAX_INFLIGHT_BATCHES
from tests.cluster import Cluster, Writer, link_state, missing_writes, shard_fields, wait_for, wait_links

pytestmark = pytest.mark.timeout(120)

AFTER_EVENT = 100  # writes a writer must have acknowledged after an event before the test goes on


def test_sigkill_under_load_loses_no_acknowledged_write(tmp_path):
    c = Cluster(tmp_path, n=3, durability="always")
    try:
        writers = [Writer(c, i, f"w{i}") for i in (1, 2, 3)]  # each writes until halted
        for w in writers:
            w.start()
        for w in writers:
            w.wait_acked(51, what="before the kill")
        before = {w.node: w.n_acked for w in writers}
        c[2].kill9()
        c[2].stop()  # reaps it and closes its log handle
        # nodes 1 and 3 keep taking writes while node 2 is dead, and node 2's writer sees it
        dead_at = {w.node: w.n_acked for w in writers}
        writers[0].wait_acked(dead_at[1] + AFTER_EVENT, what="while node 2 is dead")
        writers[2].wait_acked(dead_at[3] + AFTER_EVENT, what="while node 2 is dead")
        writers[1].wait_failed(1, what="after node 2 was killed")
        during = {w.node: w.n_acked for w in writers}
        c.start_node(2)
        writers[1].wait_acked(during[2] + AFTER_EVENT, what="after node 2's restart")
        for w in writers:
            w.halt()
        assert all(before[i] > 50 for i in (1, 2, 3)), before
        assert during[1] > before[1] and during[3] > before[3], "nodes 1 and 3 stopped serving while node 2 was dead"
        assert writers[1].failed >= 1, "the writer of node 2 never saw the kill"
        assert len(writers[1].acked) > during[2], "node 2 took no writes after its restart"
        c.wait_converged(40)
        acked = {}
        for w in writers:
            acked.update(w.acked)
        print(f"acknowledged writes per node: { {w.node: len(w.acked) for w in writers} }, "
              f"failed during kill: {writers[1].failed}; converged in {c.last_converge_s:.2f}s")
        for i in (1, 2, 3):
            lost = missing_writes(c, i, acked)
            assert not lost, f"node {i} lost {len(lost)} acknowledged writes, e.g. {list(lost.items())[:5]}"
    finally:
        c.stop()


def test_configured_peer_address_is_kept_after_hello(tmp_path):
    """A link configured in --peers through a proxy must keep using that address; the
    peer's Hello (which advertises its own bind:grpc_port) must not re-point it."""
    c = Cluster.with_proxies(tmp_path, [(1, 2), (2, 1)], n=2)
    try:
        c.wait_streaming(20)
        r1 = c.client(1)
        r1.set("x", "1")
        assert r1.wait(1, 5000) == 1
        time.sleep(0.5)
        addr12 = c.peers(1)[2]["addr"]
        addr21 = c.peers(2)[1]["addr"]
        assert addr12 == f"127.0.0.1:{c.proxy(1, 2).port}", f"node 1 now dials node 2 at {addr12}"
        assert addr21 == f"127.0.0.1:{c.proxy(2, 1).port}", f"node 2 now dials node 1 at {addr21}"
        # and a cut of the proxy really cuts the link (no reconnect around it): node 1
        # sees it down, and redials through the proxy (twice, refused) instead of
        # reaching node 2 at the address it advertised
        p12 = c.proxy(1, 2)
        p12.cut()
        wait_links(c, [(1, 2)], up=False)
        dialed = p12.accepted
        wait_for(lambda: p12.accepted >= dialed + 2 or link_state(c, 1, 2) == "streaming", 30,
                 "node 1 to redial node 2 (through the proxy or around it)")
        assert c.peers(1)[2]["state"] != "streaming"
    finally:
        c.stop()


def test_broken_link_both_sides_keep_serving_then_converge(tmp_path):
    c = Cluster.with_proxies(tmp_path, [(1, 2), (2, 1)], n=3)
    try:
        c.wait_streaming(20)
        w1 = Writer(c, 1, "a1")  # both write until halted
        w2 = Writer(c, 2, "a2")
        w1.start()
        w2.start()
        w1.wait_acked(AFTER_EVENT, what="before the cut")
        w2.wait_acked(AFTER_EVENT, what="before the cut")
        c.proxy(1, 2).cut()
        c.proxy(2, 1).cut()
        wait_links(c, [(1, 2), (2, 1)], up=False)  # both sides see the link down
        cut_at = {1: len(w1.acked), 2: len(w2.acked)}
        # both sides keep serving while the link is down ...
        w1.wait_acked(cut_at[1] + 2 * AFTER_EVENT, what="with the link cut")
        w2.wait_acked(cut_at[2] + 2 * AFTER_EVENT, what="with the link cut")
        # ... and node 1 reports a lag to node 2 that grows (entries and age) while it is
        p12 = wait_for(lambda: (p := c.peers(1)[2]) and int(p["lag_entries"]) > 0 and p, 30,
                       "node 1 to report a lag to node 2")
        lag1 = int(p12["lag_entries"])
        p12b = wait_for(lambda: (p := c.peers(1)[2]) and int(p["lag_entries"]) > lag1 and int(p["lag_ms"]) > 500
                        and p, 30, "node 1's lag to node 2 to grow past 500 ms")
        p21 = c.peers(2)[1]
        during = {1: len(w1.acked), 2: len(w2.acked)}
        # node 3 still hears from both: the cluster is only missing the 1<->2 link
        assert c.peers(1)[3]["state"] == "streaming" and c.peers(2)[3]["state"] == "streaming"
        c.proxy(1, 2).heal()
        c.proxy(2, 1).heal()
        wait_links(c, [(1, 2), (2, 1)], up=True)
        w1.wait_more(AFTER_EVENT, what="after the heal")  # the catch-up runs under writes too
        w2.wait_more(AFTER_EVENT, what="after the heal")
        w1.halt()
        w2.halt()
        assert during[1] > cut_at[1] + 50 and during[2] > cut_at[2] + 50, "a side stopped serving writes"
        assert p12["state"] != "streaming" and p21["state"] != "streaming", (p12, p21)
        assert int(p12b["lag_entries"]) > lag1 > 0, (p12, p12b)
        assert int(p12b["lag_ms"]) > 500, p12b
        c.wait_streaming(20)
        c.wait_converged(30)
        print(f"lag {lag1} entries, later {p12b['lag_entries']} entries / {p12b['lag_ms']} ms; "
              f"converged {c.last_converge_s:.2f}s after heal + stop")
        acked = {**w1.acked, **w2.acked}
        for i in (1, 2, 3):
            lost = missing_writes(c, i, acked)
            assert not lost, f"node {i} misses {len(lost)} writes, e.g. {list(lost.items())[:5]}"
    finally:
        c.stop()


def test_a_stalled_peer_gets_the_backlog_in_few_coalesced_batches(tmp_path):
    """A bounded number of batches in flight per peer: the commits made while a peer is
    stopped (SIGSTOP) reach it in a few large batches, not one message per commit."""
    c = Cluster(tmp_path, n=2)
    try:
        c.wait_streaming(20)
        r1 = c.client(1)
        r1.set("warm", "1")
        c.wait_converged(20)
        before = c.peers(1)[2]
        c[2].pause()
        try:
            first = int(c.info(1)["log_last_seq"])
            for i in range(400):  # one command per round trip: one log entry each
                r1.set(f"stalled:{i}", i)
            last = int(c.info(1)["log_last_seq"])
        finally:
            c[2].resume()
        assert last - first >= 400
        c.wait_converged(30)
        after = c.peers(1)[2]
        entries = int(after["entries_shipped"]) - int(before["entries_shipped"])
        batches = int(after["batches_shipped"]) - int(before["batches_shipped"])
        assert entries >= 400, (before, after)
        # up to MAX_INFLIGHT_BATCHES go out while it is stopped, the rest in one or two; per
        # link: nodes of shard workers have one from each worker to each of the peer's
        # (docs/shards.md §5), and INFO sums their counts
        links = len(shard_fields(r1)) * int(after.get("workers", 1))
        assert batches <= links * (MAX_INFLIGHT_BATCHES + 2), f"{entries} entries went out in {batches} batches"
        print(f"{entries} entries in {batches} batches")
        assert c.client(2).get("stalled:399") == b"399"
    finally:
        c.stop()


# -- WAIT --------------------------------------------------------------------------------------
@pytest.fixture
def cluster3(tmp_path):
    c = Cluster(tmp_path, n=3)
    yield c
    c.stop()


def test_wait_counts_replicas_that_applied_the_write(cluster3):
    c = cluster3
    r1 = c.client(1)
    c.wait_streaming(20)
    t = time.monotonic()
    n = r1.wait(0, 0)  # no write yet on this connection: immediate
    assert time.monotonic() - t < 20.0 and 0 <= n <= 2, n
    r1.set("w", "1")
    assert r1.wait(2, 0) == 2
    for i in (2, 3):
        assert c.client(i).get("w") == b"1", "WAIT counted a replica that does not have the write"
    r1.set("w", "2")
    t = time.monotonic()
    n = r1.wait(0, 0)
    assert time.monotonic() - t < 20.0, "WAIT 0 0 must not block (timeout 0 would block for ever)"
    assert 0 <= n <= 2

    # a replica that cannot ack (process stopped with SIGSTOP): WAIT 2 200 gives up at ~200 ms
    c[3].pause()
    try:
        r1.set("w", "3")
        t = time.monotonic()
        n = r1.wait(2, 200)
        took = time.monotonic() - t
        assert n == 1, n
        assert 0.18 <= took < 20.0, took  # (a loaded machine may answer late, never early)
    finally:
        c[3].resume()
    assert r1.wait(2, 5000) == 2  # once it runs again it catches up and acks
    assert c.client(3).get("w") == b"3"


def test_wait_with_a_cut_link_times_out(tmp_path):
    c = Cluster.with_proxies(tmp_path, [(1, 3), (3, 1)], n=3)
    try:
        c.wait_streaming(20)
        r1 = c.client(1)
        r1.set("w", "1")
        assert r1.wait(2, 5000) == 2
        c.proxy(1, 3).cut()
        c.proxy(3, 1).cut()
        wait_links(c, [(1, 3), (3, 1)], up=False)
        r1.set("w", "2")
        t = time.monotonic()
        n = r1.wait(2, 200)
        took = time.monotonic() - t
        assert n == 1, n
        assert 0.18 <= took < 20.0, took  # (a loaded machine may answer late, never early)
        # node 1 redials node 3 through the proxy (refused) and never reaches it around it
        dialed = c.proxy(1, 3).accepted
        wait_for(lambda: c.proxy(1, 3).accepted >= dialed + 2 or link_state(c, 1, 3) == "streaming", 30,
                 "node 1 to redial node 3")
        r1.set("w", "3")
        assert r1.wait(2, 200) == 1, "the cut link healed itself around the proxy"
        c.proxy(1, 3).heal()
        c.proxy(3, 1).heal()
        wait_links(c, [(1, 3), (3, 1)], up=True)
        assert r1.wait(2, 10000) == 2
    finally:
        c.stop()
