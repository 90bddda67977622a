"""The metrics of a node of shard workers (``server/metrics.merged``): how each family's
workers' series make the node's, and the per-worker families, in a valid exposition."""

from __future__ import annotations

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from marekvs.server.metrics import Collected, families, merged


def _worker(commands: float, lag_ms: float, up: float, first: float, last: float, start: float) -> list:
    peer = {"peer": "2"}
    return [("marekvs_commands_processed_total", {}, commands), ("marekvs_replog_last_seq", {}, last),
            ("marekvs_replog_first_seq", {}, first), ("marekvs_peer_up", peer, up),
            ("marekvs_peer_lag_ms", peer, lag_ms), ("marekvs_peer_lag_entries", peer, 3.0),
            ("process_cpu_seconds_total", {}, 1.5), ("process_start_time_seconds", {}, start)]


SUPERVISOR = [("process_cpu_seconds_total", {}, 0.25), ("process_start_time_seconds", {}, 100.0)]


def _samples(rows) -> dict:
    body = generate_latest(Collected(families(rows))).decode()
    types = [line.split()[2] for line in body.splitlines() if line.startswith("# TYPE ")]
    assert len(types) == len(set(types))  # one TYPE (and HELP) per family
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(body) for s in fam.samples}


def test_the_node_series_sum_the_workers_but_where_a_sum_means_nothing():
    m = _samples(merged([_worker(10, 50, 1, 1, 40, 101), _worker(5, 900, 0, 7, 9, 102)], SUPERVISOR))
    peer = (("peer", "2"),)
    assert m[("marekvs_commands_processed_total", ())] == 15
    assert m[("marekvs_peer_lag_entries", peer)] == 6
    assert m[("marekvs_peer_lag_ms", peer)] == 900  # the oldest entry a peer lacks, on any worker
    assert m[("marekvs_peer_up", peer)] == 0  # not every worker streams to it
    # the logs as one: 40 + 3 entries held
    assert m[("marekvs_replog_last_seq", ())] - m[("marekvs_replog_first_seq", ())] + 1 == 43
    assert m[("process_cpu_seconds_total", ())] == 3.25  # the workers and the supervisor
    assert m[("process_start_time_seconds", ())] == 100  # the node's: its supervisor's
    assert m[("marekvs_worker_commands_processed_total", (("worker", "1"),))] == 5
    assert m[("marekvs_worker_peer_lag_ms", (("peer", "2"), ("worker", "0")))] == 50
    assert m[("marekvs_worker_process_start_time_seconds", (("worker", "1"),))] == 102
    assert m[("marekvs_worker_up", (("worker", "0"),))] == 1


def test_a_worker_that_did_not_answer_is_down_and_left_out():
    m = _samples(merged([None, _worker(5, 900, 1, 7, 9, 102)], SUPERVISOR))
    assert m[("marekvs_worker_up", (("worker", "0"),))] == 0
    assert m[("marekvs_worker_up", (("worker", "1"),))] == 1
    assert m[("marekvs_commands_processed_total", ())] == 5
    assert m[("marekvs_peer_up", (("peer", "2"),))] == 1
    assert not any(dict(labels).get("worker") == "0" for name, labels in m if name != "marekvs_worker_up")
