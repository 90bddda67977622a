"""The Prometheus text exporter (--metrics-port) exports the replication figures."""

import time
import urllib.request

from tests.cluster import Cluster
from tests.helpers import free_port


def test_metrics_endpoint_exports_peer_lag_and_shipping(tmp_path):
    ports = {1: free_port(), 2: free_port()}
    c = Cluster(tmp_path, n=2, per_node_extra={i: ["--metrics-port", str(ports[i])] for i in ports})
    try:
        c.wait_streaming(20)
        r = c.client(1)
        for i in range(50):
            r.set(f"m{i}", "v")
        assert r.wait(1, 5000) == 1
        deadline = time.monotonic() + 60
        while True:
            body = urllib.request.urlopen(f"http://127.0.0.1:{ports[1]}/metrics", timeout=5).read().decode()
            rows = dict(line.rsplit(" ", 1) for line in body.splitlines() if line and not line.startswith("#"))
            if float(rows.get('marekvs_peer_entries_shipped_total{peer="2"}', 0)) >= 1 or time.monotonic() > deadline:
                break
            time.sleep(0.1)
        assert rows['marekvs_peer_up{peer="2"}'] == "1.0"
        assert float(rows['marekvs_peer_bytes_shipped_total{peer="2"}']) > 0
        assert float(rows['marekvs_peer_lag_entries{peer="2"}']) == 0
        assert float(rows["marekvs_replog_last_seq"]) >= 1
        assert float(rows["marekvs_commands_processed_total"]) >= 50
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{ports[1]}/nope", timeout=5)
            raise AssertionError("expected 404")
        except urllib.error.HTTPError as e:
            assert e.code == 404
        # prometheus_client's exposition: HELP and TYPE lines, and the standard process metrics
        assert "# TYPE marekvs_peer_lag_entries gauge" in body
        assert any(ln.startswith("# TYPE marekvs_commands_processed") and ln.endswith(" counter")
                   for ln in body.splitlines())
        assert "# HELP marekvs_peer_up " in body
        assert float(rows["process_resident_memory_bytes"]) > 0
        assert float(rows["process_cpu_seconds_total"]) > 0
    finally:
        c.stop()
