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
"""

from __future__ import annotations

import asyncio
from typing import Any, Iterator

from prometheus_client import CollectorRegistry, ProcessCollector, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

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
}


class NodeCollector:
    """Reads the node at scrape time (prometheus_client's custom-collector protocol)."""

    def __init__(self, node: Any):
        self.node = node

    def collect(self) -> Iterator[Metric]:
        n = self.node
        rows: list[tuple[str, dict[str, str], float]] = [
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
        families: dict[str, Metric] = {}
        for name, labels, value in rows:
            counter = name.endswith("_total")
            base = name[:-6] if counter else name
            fam = families.get(base)
            if fam is None:
                kind = CounterMetricFamily if counter else GaugeMetricFamily
                fam = families[base] = kind(base, HELP.get(base, base), labels=sorted(labels))
            fam.add_metric([labels[k] for k in sorted(labels)], value)
        yield from families.values()


def registry_for(node: Any) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=False)
    reg.register(NodeCollector(node))  # type: ignore[arg-type]
    ProcessCollector(registry=reg)
    return reg


async def start_metrics(node: Any, tls: Any = None) -> asyncio.AbstractServer:
    """The exporter on ``metrics_port``; over HTTPS when ``tls`` (a ``ServerTls``) is given."""
    registry = registry_for(node)

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            if request.split(b" ")[1:2] == [b"/metrics"]:
                body = generate_latest(registry)
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
                                      ssl_handshake_timeout=node.config.tls_handshake_timeout if context else None)
