"""``marekvs cluster status``: every node, its keys, digest and links."""

from __future__ import annotations

import sys
from typing import Any

from marekvs.launcher.procs import (
    NodeSpec,
    log_tail,
    pid_alive,
)
from marekvs.launcher.resp import (
    HOST,
    Resp,
    RespError,
    parse_info,
    peer_links,
)



def node_status(n: NodeSpec, timeout: float = 2.0, host: str = HOST) -> dict[str, Any]:
    """PING, DBSIZE, DEBUG DIGEST, INFO server's process_id and INFO replication of one node."""
    r: dict[str, Any] = {
        "id": n.id,
        "pid": n.pid,
        "port": n.port,
        "grpc_port": n.grpc_port,
        "metrics_port": n.metrics_port,
        "kafka_port": n.kafka_port,
        "process": pid_alive(n.pid),
        "up": False,
        "links": [],
    }
    try:
        with Resp(n.port, host=host, timeout=timeout, tls_dir=n.tls_dir) as c:
            r["up"] = c.call("PING") == "PONG"
            r["dbsize"] = c.call("DBSIZE")
            dig = c.call("DEBUG", "DIGEST")
            r["digest"] = dig.decode() if isinstance(dig, bytes) else str(dig)
            server = parse_info(c.call("INFO", "server"))
            info = parse_info(c.call("INFO", "replication"))
    except (OSError, RespError, ValueError) as e:
        r["error"] = str(e) or type(e).__name__
        return r
    if str(server.get("process_id", "")).isdigit():
        r["reported_pid"] = int(server["process_id"])
    for k in ("node_id", "connected_peers", "known_peers", "log_first_seq", "log_last_seq"):
        if k in info:
            r[k] = int(info[k]) if str(info[k]).lstrip("-").isdigit() else info[k]
    for p in peer_links(info):
        r["links"].append(
            {
                "peer": int(p.get("id", 0)),
                "state": p.get("state", "?"),
                "lag_entries": int(p.get("lag_entries", 0) or 0),
                "lag_ms": int(p.get("lag_ms", 0) or 0),
                "addr": p.get("addr", ""),
            }
        )
    return r


# -- output ---------------------------------------------------------------------------------


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def print_nodes(nodes: list[NodeSpec], problems: dict[int, str]) -> None:
    metrics = any(n.metrics_port for n in nodes)
    kafka = any(n.kafka_port for n in nodes)
    rows = [["NODE", "STATUS", "PID", "RESP", "GRPC", *(["METRICS"] if metrics else []), *(["KAFKA"] if kafka else []),
             "DATA", "LOG"]]
    for n in nodes:
        rows.append(
            [
                str(n.id),
                "FAILED" if n.id in problems else "up",
                str(n.pid),
                f"{HOST}:{n.port}",
                str(n.grpc_port),
                *([str(n.metrics_port or "-")] if metrics else []),
                *([f"{HOST}:{n.kafka_port}"] if kafka else []),
                n.data_dir,
                n.log,
            ]
        )
    print(_table(rows))
    for nid, why in problems.items():
        n = next(x for x in nodes if x.id == nid)
        print(f"\nnode {nid} failed: {why}; last lines of {n.log}:\n{log_tail(n.log)}", file=sys.stderr)


# -- commands -------------------------------------------------------------------------------

