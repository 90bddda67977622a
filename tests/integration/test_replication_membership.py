"""Membership: a node joins a live cluster it was never configured into, and a node whose
data directory was wiped comes back under a new incarnation. Both bootstrap from their
peers' snapshots while writes go on, then converge."""

from __future__ import annotations

import time

import pytest

from tests.cluster import Cluster, Writer, missing_writes, wait_for

pytestmark = pytest.mark.timeout(120)

AFTER_EVENT = 100  # writes a writer must have acknowledged after an event before the test goes on


def test_new_node_joins_live_cluster_and_bootstraps(tmp_path):
    c = Cluster(tmp_path, n=2)
    try:
        c.wait_streaming(20)
        seed = c.client(1)
        seed.mset({f"pre:{i}": f"p{i}" for i in range(3000)})  # more than one snapshot chunk
        assert seed.wait(1, 5000) == 1
        w1 = Writer(c, 1, "j1")  # both write until halted
        w2 = Writer(c, 2, "j2")
        w1.start()
        w2.start()
        w1.wait_acked(AFTER_EVENT, what="before the join")
        w2.wait_acked(AFTER_EVENT, what="before the join")
        # node 3 lists nodes 1 and 2; they were not configured with it (it bootstraps
        # from their snapshots before it listens)
        n3 = c.add_node(3, peers=[1, 2])
        joined_at = {1: len(w1.acked), 2: len(w2.acked)}
        # the join goes on after that: nodes 1 and 2 learn node 3 from its Hello and
        # start shipping to it; the writes go on until that has been seen, and after it
        wait_for(lambda: all(3 in c.peers(i) for i in (1, 2)), 30, "nodes 1 and 2 to learn node 3")
        w1.wait_more(AFTER_EVENT, what="after node 3 joined")
        w2.wait_more(AFTER_EVENT, what="after node 3 joined")
        w1.halt()
        w2.halt()
        assert len(w1.acked) > joined_at[1] and len(w2.acked) > joined_at[2], "writes stopped during the join"
        log3 = n3.log_text()
        assert "bootstrapped" in log3, log3[-2000:]
        for i in (1, 2):
            peers = c.peers(i)
            assert 3 in peers, f"node {i} did not learn node 3 from its Hello: {peers}"
        c.wait_streaming(20)
        digest = c.wait_converged(30)
        print(f"join converged in {c.last_converge_s:.2f}s after the load; digest {digest}")
        info3 = c.info(3)
        assert info3["known_peers"] == "2" and info3["connected_peers"] == "2", info3
        with c.client(3) as r3:
            assert r3.dbsize() == c.client(1).dbsize() >= 3000 + len(w1.acked) + len(w2.acked)
        expected = {**{f"pre:{i}": f"p{i}" for i in range(3000)}, **w1.acked, **w2.acked}
        assert not missing_writes(c, 3, expected)
        r1 = c.client(1)
        r1.set("after-join", "x")
        assert r1.wait(2, 5000) == 2
        assert c.client(3).get("after-join") == b"x"
        # and node 3's own writes reach both (they ship to a peer they learned at Hello)
        r3 = c.client(3)
        r3.set("from-3", "y")
        assert r3.wait(2, 5000) == 2
        assert c.client(1).get("from-3") == b"y" and c.client(2).get("from-3") == b"y"
    finally:
        c.stop()


def test_wiped_node_bootstraps_under_a_new_incarnation(tmp_path):
    c = Cluster(tmp_path, n=3)
    try:
        c.wait_streaming(20)
        r3 = c.client(3)
        r3.mset({f"old3:{i}": str(i) for i in range(200)})  # written on node 3 itself
        assert r3.wait(2, 5000) == 2
        old_inc = c.info(3)["incarnation"]
        old_digest = c.wait_converged(10)
        w1 = Writer(c, 1, "v1")  # writes until halted: all through node 3's restart and bootstrap
        w1.start()
        w1.wait_acked(AFTER_EVENT, what="before node 3's restart")
        c.restart_node(3, wipe=True)  # returns once node 3 bootstrapped and listens
        w1.wait_more(AFTER_EVENT, what="after node 3's restart")
        w1.halt()
        info = c.info(3)
        assert info["incarnation"] != old_inc, "a wiped data dir must start a new incarnation"
        assert "bootstrapped" in c[3].log_text()
        c.wait_streaming(20)
        c.wait_converged(30)
        r3 = c.client(3)
        assert [r3.get(f"old3:{i}") for i in (0, 199)] == [b"0", b"199"], "node 3's own old writes did not come back"
        assert not missing_writes(c, 3, w1.acked)
        # the new incarnation's log restarts at 1: peers must not skip it as already applied
        assert int(info["master_repl_offset"]) < 50
        r3.mset({f"new3:{i}": str(i) for i in range(50)})
        assert r3.wait(2, 5000) == 2
        for i in (1, 2):
            with c.client(i) as r:
                assert r.mget([f"new3:{j}" for j in range(50)]) == [str(j).encode() for j in range(50)], (
                    f"node {i} skipped writes of node 3's new incarnation")
        assert c.wait_converged(10) != old_digest
    finally:
        c.stop()


def test_peer_behind_a_trimmed_log_resyncs_from_a_snapshot(tmp_path):
    """--replog-max-entries caps the log: node 1 trims past a stopped node 3, marks it
    needs_resync (INFO), and when node 3 returns it pulls a snapshot instead of silently
    missing the trimmed entries."""
    c = Cluster(tmp_path, n=3, extra=["--replog-max-entries", "50"])
    try:
        c.wait_streaming(20)
        c[3].stop()
        r1 = c.client(1)
        for i in range(400):  # one round trip each: ~400 log entries on node 1, 8x the cap
            r1.set(f"t:{i}", f"v{i}")
        # the trim loop (every 0.5 s) may first run while the writes are still going:
        # wait for the flag and for a trim after the last write
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and (c.peers(1)[3]["needs_resync"] != "1"
                                               or int(c.info(1)["log_first_seq"]) <= 100):
            time.sleep(0.1)
        info1 = c.info(1)
        assert c.peers(1)[3]["needs_resync"] == "1", info1
        assert int(info1["log_first_seq"]) > 100, "the log was not trimmed past the stopped peer"
        assert "needs a resync" in c[1].log_text()
        c.start_node(3)
        c.wait_streaming(30)
        c.wait_converged(30)
        with c.client(3) as r3:
            assert r3.get("t:0") == b"v0" and r3.get("t:399") == b"v399"
            assert r3.dbsize() == 400
        # the digests can agree (snapshot applied) a moment before node 1's next
        # handshake with node 3 clears the flag
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and c.peers(1)[3]["needs_resync"] != "0":
            time.sleep(0.05)
        assert c.peers(1)[3]["needs_resync"] == "0"
    finally:
        c.stop()
