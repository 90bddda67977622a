"""A minimal Prometheus text exporter (``--metrics-port``): GET /metrics.

Exports the replication figures of INFO replication (per-peer lag in entries and
ms, bytes and entries shipped, resync flags) plus a few node counters.
"""

from __future__ import annotations

import asyncio
from typing import Any


def render(node: Any) -> bytes:
    rows = [("marekvs_commands_processed_total", {}, node.stats.total_commands),
            ("marekvs_connected_clients", {}, len(node.clients)),
            ("marekvs_hlc_clamped_total", {}, node.hlc.clamped)]
    rows += node.replication.metrics()
    lines = []
    for name, labels, value in rows:
        lab = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines.append(f"{name}{{{lab}}} {value}" if lab else f"{name} {value}")
    return ("\n".join(lines) + "\n").encode()


async def start_metrics(node: Any) -> asyncio.AbstractServer:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await asyncio.wait_for(reader.readline(), 5)
            while (await asyncio.wait_for(reader.readline(), 5)) not in (b"\r\n", b"\n", b""):
                pass
            if request.split(b" ")[1:2] == [b"/metrics"]:
                body = render(node)
                head = b"HTTP/1.0 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\n"
            else:
                body = b"not found\n"
                head = b"HTTP/1.0 404 Not Found\r\nContent-Type: text/plain\r\n"
            writer.write(head + b"Content-Length: %d\r\n\r\n" % len(body) + body)
            await writer.drain()
        except (asyncio.TimeoutError, ConnectionError, IndexError):
            pass
        finally:
            writer.close()

    return await asyncio.start_server(handle, node.config.bind, node.config.metrics_port)
