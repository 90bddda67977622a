"""Clock skew: node 2 runs 10 s ahead (--clock-offset-ms 10000, testing only).

Expected behaviour (the data model's HLC rules):
- node 2's records carry HLCs ~10 s ahead and are shipped verbatim (never re-stamped);
- the receivers clamp their *own* clock at wall + max_clock_drift (5 s), log
  "HLC DRIFT" loudly and count it in INFO marekvs hlc_clamped;
- LWW is decided by (hlc, origin) only, so for as long as the skew lasts node 2 wins
  every conflict on the same key -- not only a truly concurrent one, but even a write
  node 1 makes *after* it has seen node 2's value (node 1's clamped clock is 5 s behind
  node 2's stamps). That is the documented price of a clock that NTP does not fix: the
  cluster still converges, deterministically, on the same (wrong-by-wall-time) winner.
"""

from __future__ import annotations

import threading
import time

import pytest

from tests.cluster import Cluster

pytestmark = pytest.mark.timeout(120)

SKEW_MS = 10_000


def test_skewed_node_is_clamped_and_lww_stays_deterministic(tmp_path):
    c = Cluster(tmp_path, n=3, per_node_extra={2: ["--clock-offset-ms", str(SKEW_MS)]})
    try:
        c.wait_streaming(20)
        r = {i: c.client(i) for i in (1, 2, 3)}
        # concurrent writers on nodes 1 and 2 to the same keys
        keys = [f"skew:{i}" for i in range(30)]

        def write(i: int) -> None:
            with c.client(i) as cl:
                for k in keys:
                    cl.set(k, f"from{i}")

        ts = [threading.Thread(target=write, args=(i,)) for i in (1, 2)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(30)
        # causally later: node 1 overwrites a key after it has read node 2's value
        r[2].set("causal", "from2")
        assert r[2].wait(2, 5000) == 2
        assert r[1].get("causal") == b"from2"
        assert r[1].set("causal", "from1-later") is True
        c.wait_converged(20)

        for i in (1, 2, 3):
            assert r[i].mget(keys) == [b"from2"] * len(keys), f"node {i}: node 2 (10 s ahead) must win every conflict"
            assert r[i].get("causal") == b"from2", f"node {i}: the skewed node wins even a causally later write"

        wall = int(time.time() * 1000)
        for i in (1, 3):
            m = c.info(i, "marekvs")
            assert int(m["hlc_clamped"]) > 0, f"node {i} never clamped node 2's clock: {m}"
            ahead = int(m["hlc_physical_ms"]) - wall
            assert ahead <= 5000 + 1000, f"node {i}'s clock jumped {ahead} ms ahead: the clamp did not hold"
            assert "HLC DRIFT" in c[i].log_text(), f"node {i} did not log the drift"
        m2 = c.info(2, "marekvs")
        assert int(m2["hlc_physical_ms"]) - wall >= SKEW_MS - 1000
        # a write node 1 makes once node 2 stops writing still loses until the skew is over
        r[1].set("causal", "from1-again")
        c.wait_converged(20)
        assert {r[i].get("causal") for i in (1, 2, 3)} == {b"from2"}
    finally:
        c.stop()
