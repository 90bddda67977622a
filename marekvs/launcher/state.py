"""``DIR/cluster.json``: the recorded nodes of a local cluster, and planning new ones."""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from marekvs.launcher import certs
from marekvs.launcher.procs import (
    NodeSpec,
    find_pid,
    port_free,
    start_node,
    wait_ready,
)
from marekvs.launcher.resp import (
    HOST,
)


STATE_FILE = "cluster.json"


def state_path(d: str | Path) -> Path:
    return Path(d) / STATE_FILE


def load_state(d: str | Path) -> dict[str, Any]:
    with open(state_path(d)) as f:
        st = json.load(f)
    st["nodes"] = [NodeSpec(**n) for n in st["nodes"]]
    return st


def save_state(d: str | Path, st: dict[str, Any]) -> None:
    p = state_path(d)
    tmp = p.with_suffix(".json.tmp")
    data = dict(st)
    data["nodes"] = [asdict(n) for n in st["nodes"]]
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(data, f, indent=2)
        f.write("\n")
    os.replace(tmp, p)


def plan_nodes(
    d: str | Path, n: int, base_port: int, grpc_base_port: int, metrics_base_port: int = 0, tls: bool = False,
    kafka_base_port: int = 0,
) -> list[NodeSpec]:
    d = Path(d).resolve()
    return [
        NodeSpec(
            id=i,
            port=base_port + i - 1,
            grpc_port=grpc_base_port + i - 1,
            data_dir=str(d / f"node{i}"),
            log=str(d / f"node{i}.log"),
            metrics_port=metrics_base_port + i - 1 if metrics_base_port else 0,
            kafka_port=kafka_base_port + i - 1 if kafka_base_port else 0,
            tls_dir=str(tls_dir(d)) if tls else "",
        )
        for i in range(1, n + 1)
    ]


def tls_dir(d: str | Path) -> Path:
    """Where ``cluster up --tls`` keeps the cluster's CA, node and client certificates."""
    return Path(d).resolve() / "tls"


def start_recorded(st: dict[str, Any], node: NodeSpec) -> int:
    """Start one node of the cluster recorded in ``st`` (its peers, durability, name, secret
    and extra flags)."""
    return start_node(node, st["nodes"], st["durability"], st["name"], st.get("secret", ""), st.get("extra"))


def node_ports(n: NodeSpec) -> list[int]:
    return [n.port, n.grpc_port] + [p for p in (n.metrics_port, n.kafka_port) if p]


def start_cluster(
    d: str | Path,
    nodes: int,
    base_port: int = 7000,
    grpc_base_port: int = 17000,
    durability: str = "everysec",
    secret: str = "",
    name: str = "marekvs",
    timeout: float = 60.0,
    extra: list[str] | None = None,
    metrics_base_port: int = 0,
    tls: bool = False,
    kafka_base_port: int = 0,
) -> tuple[dict[str, Any], dict[int, str]]:
    """Start a fresh full-mesh cluster in ``d``; returns (state, {node id: problem}).
    ``metrics_base_port`` > 0 gives node i the Prometheus port ``metrics_base_port``+i-1,
    ``kafka_base_port`` > 0 the Kafka listener ``kafka_base_port``+i-1.
    ``tls``: a throwaway CA and certificates in ``DIR/tls`` (``certs.make_pki``); each node
    serves RESP over TLS only, on its port, and its peer links over mutual TLS."""
    d = Path(d).resolve()
    d.mkdir(parents=True, exist_ok=True)
    specs = plan_nodes(d, nodes, base_port, grpc_base_port, metrics_base_port, tls, kafka_base_port)
    if tls:
        certs.make_pki(tls_dir(d), [f"node{s.id}" for s in specs])
    st = {
        "name": name,
        "secret": secret,
        "durability": durability,
        "host": HOST,
        "base_port": base_port,
        "grpc_base_port": grpc_base_port,
        "metrics_base_port": metrics_base_port,
        "kafka_base_port": kafka_base_port,
        "extra": list(extra or []),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "nodes": specs,
    }
    for s in specs:
        start_recorded(st, s)
    save_state(d, st)
    return st, wait_ready(specs, timeout)


def add_node(d: str | Path, timeout: float = 60.0) -> tuple[dict[str, Any], NodeSpec, dict[int, str]]:
    """Start one more node joining the cluster recorded in ``d``."""
    d = Path(d).resolve()
    st = load_state(d)
    nodes: list[NodeSpec] = st["nodes"]
    nid = max(n.id for n in nodes) + 1
    used = {p for n in nodes for p in node_ports(n)}

    def next_free(after: int) -> int:
        p = after + 1
        while p in used or not port_free(p):
            p += 1
        used.add(p)
        return p

    port = next_free(max(n.port for n in nodes))
    gport = next_free(max(n.grpc_port for n in nodes))
    mport = next_free(max(n.metrics_port for n in nodes)) if any(n.metrics_port for n in nodes) else 0
    kport = next_free(max(n.kafka_port for n in nodes)) if any(n.kafka_port for n in nodes) else 0
    spec = NodeSpec(
        id=nid,
        port=port,
        grpc_port=gport,
        data_dir=str(d / f"node{nid}"),
        log=str(d / f"node{nid}.log"),
        metrics_port=mport,
        kafka_port=kport,
        tls_dir=nodes[0].tls_dir,
    )
    if spec.tls_dir:
        certs.make_pki(Path(spec.tls_dir), [f"node{nid}"], clients=())
    st["nodes"] = nodes + [spec]
    start_recorded(st, spec)
    save_state(d, st)
    return st, spec, wait_ready([spec], timeout)


def refresh_pids(d: str | Path, st: dict[str, Any]) -> dict[int, int]:
    """Set every node's pid to the one ``find_pid`` finds (a node not running keeps its
    recorded pid) and save the state when one changed. Returns {node id: pid found or 0}."""
    found = {}
    changed = False
    for n in st["nodes"]:
        pid = found[n.id] = find_pid(n)
        if pid and pid != n.pid:
            n.pid = pid
            changed = True
    if changed:
        save_state(d, st)
    return found
