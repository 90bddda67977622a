"""Prometheus metrics (``--metrics-port``): ``GET /metrics`` in the text exposition format.

The metrics are built with ``prometheus_client`` at each scrape, from the node's own
counters (commands, clients, errors, keyspace hits, the clock) and replication's per-peer
figures (lag in entries and ms, bytes and entries shipped, resync flags), plus the standard
process metrics (CPU seconds, resident memory, open file descriptors, start time). The
scrape runs on the node's event loop, so it reads a consistent state without locks; the
HTTP server is a few lines of asyncio (one request per connection). With ``metrics_tls yes``
it is HTTPS with the context the TLS port started with (``server/tls.py``: the same
certificate, CA and ``tls-auth-clients``); a CONFIG SET of the tls-* names reaches the
exporter at the next start.

A node of several shard workers (docs/shards.md §4) has one metrics port too: every worker
listens on it (``SO_REUSEPORT``) and the one a scrape reaches asks each sibling for its
rows over the mesh (``Mesh.gather_metrics``), then answers for the whole node (``merged``):

- the families a single process exports, under the same names and labels (dashboards and
  alerts written for one process keep working), each series once for the node: summed
  over the workers (counters, clients), the log positions as if the workers' logs were one,
  each after the other (``replog_last_seq`` summed, ``replog_first_seq`` such that
  ``last - first + 1`` is still the entries the logs hold), except ``peer_lag_ms`` and
  ``peer_needs_resync`` (the highest: the oldest entry a peer lacks, on any worker) and
  ``peer_up`` (the lowest: 1 only while every worker streams to the peer); the process
  metrics count the node's processes, the workers and their supervisor (CPU seconds,
  memory and open descriptors summed; the start time and the descriptor limit are the
  supervisor's, the node's pid);
- each worker's own series, in families of their own named ``marekvs_worker_...``
  (``marekvs_commands_processed_total`` -> ``marekvs_worker_commands_processed_total``,
  ``process_cpu_seconds_total`` -> ``marekvs_worker_process_cpu_seconds_total``) with a
  ``worker`` label, so that the sum over any family stays meaningful (no series counted
  twice); and ``marekvs_worker_up{worker}``: 1 if the worker answered this scrape within
  ``GATHER_S`` (0 while it is down, restarting, or busy for that long: a script, a unit),
  whose series are then left out of the sums.
"""

from __future__ import annotations

import asyncio
import operator
from typing import Any, Awaitable, Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from marekvs.shards.fanout import concatenated

HELP = {
    "marekvs_commands_processed": "Commands run by this node since start (or CONFIG RESETSTAT).",
    "marekvs_connected_clients": "Client connections open now.",
    "marekvs_blocked_clients": "Clients waiting in a blocking command.",
    "marekvs_error_replies": "Error replies sent.",
    "marekvs_keyspace_hits": "Read lookups that found their key.",
    "marekvs_keyspace_misses": "Read lookups that did not find their key.",
    "marekvs_hlc_clamped": "Peer clocks clamped for leading this node's wall clock by more than max_clock_drift.",
    "marekvs_replog_last_seq": "Newest position of this node's replication log.",
    "marekvs_replog_first_seq": "Oldest position still held in this node's replication log.",
    "marekvs_peer_up": "1 while the link to the peer is streaming.",
    "marekvs_peer_lag_entries": "Log entries the peer has not acknowledged.",
    "marekvs_peer_lag_ms": "Age of the oldest log entry the peer has not acknowledged.",
    "marekvs_peer_bytes_shipped": "Bytes of log entries shipped to the peer.",
    "marekvs_peer_entries_shipped": "Log entries shipped to the peer.",
    "marekvs_peer_needs_resync": "1 if the peer fell behind the trimmed log and must bootstrap.",
    "marekvs_peer_applied_entries": "Log entries of the peer applied here.",
    # anti-entropy (marekvs/antientropy/background.py)
    "marekvs_antientropy_exchanges": "Background anti-entropy exchanges this node ran.",
    "marekvs_antientropy_exchange_errors": "Background exchanges that failed (peer unreachable, refused).",
    "marekvs_antientropy_partitions_compared": "Partitions whose roots the background exchanges compared.",
    "marekvs_antientropy_mismatched_partitions": "Partitions whose roots differed in a background exchange.",
    "marekvs_antientropy_records_repaired": "Records the background exchanges changed, here (pulled) or on peers "
                                            "(pushed).",
    "marekvs_antientropy_keys_in_flight": "Differing keys younger than antientropy_settle, left to log shipping.",
    "marekvs_antientropy_pushed_records_applied": "Records pushed here by exchanges and repair tools that changed "
                                                  "this node.",
    "marekvs_antientropy_records_removed_past_gc_grace": "Records past gc_grace removed when an exchange read "
                                                         "their partition.",
    "marekvs_antientropy_calls_refused": "Anti-entropy calls refused (secret, cluster, bad arguments or records).",
    "marekvs_digest_verified_partitions": "Partitions whose kept digest was recomputed from the data.",
    "marekvs_digest_corrected_partitions": "Partitions whose kept digest differed from the data and was corrected.",
    "marekvs_tls_handshake_failures": "TLS handshakes on the TLS port (and the Kafka port with kafka_tls) that "
                                      "failed or timed out (the connection was closed).",
    "marekvs_worker_up": "1 if the shard worker answered this scrape (0: down, restarting or busy).",
}

Row = tuple[str, dict[str, str], float]  # (sample name, labels, value); "_total": a counter
GATHER_S = 5.0  # how long a scrape of a node of several shard workers waits for each sibling
_WORKER = "marekvs_worker_"
_HIGHEST = frozenset(("marekvs_peer_lag_ms", "marekvs_peer_needs_resync"))
_LOWEST = frozenset(("marekvs_peer_up",))
_SUPERVISORS = frozenset(("process_start_time_seconds", "process_max_fds"))  # the node's: its pid's


def node_rows(node: Any) -> list[Row]:
    """The node's own figures (a shard worker's: its own), without the process metrics."""
    n = node
    rows: list[Row] = [
        ("marekvs_commands_processed_total", {}, n.stats.total_commands),
        ("marekvs_connected_clients", {}, len(n.clients)),
        ("marekvs_blocked_clients", {}, sum(1 for c in n.clients.values() if c.blocked)),
        ("marekvs_error_replies_total", {}, n.stats.error_replies),
        ("marekvs_keyspace_hits_total", {}, n.ks.hits),
        ("marekvs_keyspace_misses_total", {}, n.ks.misses),
        ("marekvs_hlc_clamped_total", {}, n.hlc.clamped),
        ("marekvs_tls_handshake_failures_total", {}, n.stats.tls_handshake_failures),
    ]
    if n.replication is not None:
        rows += n.replication.metrics()
    if getattr(n, "antientropy", None) is not None:
        rows += n.antientropy.metrics()
    return rows


def process_rows(pid: int | str = "self") -> list[Row]:
    """prometheus_client's standard process metrics of process ``pid``, as rows."""
    rows: list[Row] = []
    for fam in ProcessCollector(registry=None, pid=lambda: pid).collect():
        HELP.setdefault(fam.name, fam.documentation)
        rows += [(x.name, dict(x.labels), x.value) for x in fam.samples]
    return rows


def worker_rows(node: Any) -> list[Row]:
    """What a shard worker answers a sibling's scrape with (``Mesh.gather_metrics``)."""
    return node_rows(node) + process_rows()


def families(rows: Iterable[Row]) -> list[Metric]:
    """The rows as metric families, in order of first appearance (one HELP and TYPE each)."""
    out: dict[str, Metric] = {}
    for name, labels, value in rows:
        counter = name.endswith("_total")
        base = name[:-6] if counter else name
        fam = out.get(base)
        if fam is None:
            kind = CounterMetricFamily if counter else GaugeMetricFamily
            fam = out[base] = kind(base, _help(base), labels=sorted(labels))
        fam.add_metric([labels[k] for k in sorted(labels)], value)
    return list(out.values())


def _help(base: str) -> str:
    if base in HELP or not base.startswith(_WORKER):
        return HELP.get(base, base)
    rest = base[len(_WORKER):]
    of = HELP.get("marekvs_" + rest) or HELP.get(rest) or rest
    return f"One shard worker's: {of}"


def merged(per_worker: list[list[Row] | None], supervisor: list[Row]) -> list[Row]:
    """A node of several shard workers, from each worker's rows (None: it did not answer)
    and the supervisor's process rows: the node's series, then each worker's (the module
    docstring)."""
    node: dict[tuple[str, tuple[tuple[str, str], ...]], Row] = {}
    answered = [rows for rows in per_worker if rows is not None]
    for rows in answered + [supervisor]:
        for name, labels, value in rows:
            if name in _SUPERVISORS and rows is not supervisor:
                continue
            key = (name, tuple(sorted(labels.items())))
            had = node.get(key)
            if had is not None:
                value = (max if name in _HIGHEST else min if name in _LOWEST else
                         concatenated if name == "marekvs_replog_first_seq" else operator.add)(had[2], value)
            node[key] = (name, labels, value)
    out = list(node.values())
    for i, rows in enumerate(per_worker):
        w = str(i)
        out.append((_WORKER + "up", {"worker": w}, 0.0 if rows is None else 1.0))
        for name, labels, value in rows or ():
            out.append((_WORKER + name.removeprefix("marekvs_"), {**labels, "worker": w}, value))
    return out


class NodeCollector:
    """Reads the node at scrape time (prometheus_client's custom-collector protocol)."""

    def __init__(self, node: Any):
        self.node = node

    def collect(self) -> Iterator[Metric]:
        yield from families(node_rows(self.node))


class Collected:
    """Families already gathered (what ``generate_latest`` reads)."""

    def __init__(self, fams: list[Metric]):
        self.fams = fams

    def collect(self) -> list[Metric]:
        return self.fams


def registry_for(node: Any) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(NodeCollector(node))  # type: ignore[arg-type]
    ProcessCollector(registry=reg)
    return reg


Gather = Callable[[list[Row], float], Awaitable[list[list[Row] | None]]]


async def start_metrics(node: Any, tls: Any = None, gather: Gather | None = None) -> asyncio.AbstractServer:
    """The exporter on ``metrics_port``; over HTTPS when ``tls`` (a ``ServerTls``) is given.
    A shard worker's (``gather``: ``Mesh.gather_metrics``) shares the port with its siblings
    and answers for the whole node."""
    registry = registry_for(node)

    async def scrape() -> bytes:
        if gather is None:
            return generate_latest(registry)
        per_worker = await gather(worker_rows(node), GATHER_S)
        return generate_latest(Collected(families(merged(per_worker, process_rows(node.pid)))))  # type: ignore[arg-type]

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            if request.split(b" ")[1:2] == [b"/metrics"]:
                body = await scrape()
                head = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
            else:
                body = b"not found\n"
                head = b"HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
            writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()
        except (asyncio.TimeoutError, OSError, IndexError):
            pass
        finally:
            writer.close()

    context = tls.context if tls is not None else None
    return await asyncio.start_server(handle, node.config.bind, node.config.metrics_port, ssl=context,
                                      ssl_handshake_timeout=node.config.tls_handshake_timeout if context else None,
                                      reuse_port=gather is not None or None)
