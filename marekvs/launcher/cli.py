"""The ``marekvs cluster`` subcommands."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from marekvs import config as cfgmod
from marekvs.launcher import certs
from marekvs.launcher.procs import (
    NodeSpec,
    port_free,
    stop_nodes,
    wait_ready,
)
from marekvs.launcher.resp import (
    HOST,
)
from marekvs.launcher.state import (
    add_node,
    load_state,
    node_ports,
    plan_nodes,
    refresh_pids,
    save_state,
    start_cluster,
    start_recorded,
    state_path,
    tls_dir,
)
from marekvs.launcher.status import (
    _table,
    node_status,
    print_nodes,
)


DEFAULT_METRICS_BASE_PORT = 9400
DEFAULT_KAFKA_BASE_PORT = 9092


def cmd_up(args: argparse.Namespace) -> int:
    d = Path(args.dir).resolve()
    metrics_base = 0
    if args.metrics or args.metrics_base_port is not None:
        metrics_base = args.metrics_base_port or DEFAULT_METRICS_BASE_PORT
    if state_path(d).exists():
        st = load_state(d)
        nodes = st["nodes"]
        found = refresh_pids(d, st)
        running = [n for n in nodes if found[n.id]]
        if running:
            stopped = [str(n.id) for n in nodes if not found[n.id]]
            print(
                f"marekvs cluster: {state_path(d)} has running nodes "
                f"({', '.join(str(n.id) for n in running)}); run `marekvs cluster down --dir {args.dir}` first"
                + (f", or `marekvs cluster start --dir {args.dir} {' '.join(stopped)}` to start the stopped ones"
                   if stopped else ""),
                file=sys.stderr,
            )
            return 1
        print(
            f"restarting the {len(nodes)} recorded nodes of {state_path(d)} on their data directories"
            + (f" (--nodes {args.nodes} ignored)" if args.nodes not in (None, len(nodes)) else "")
            + (" (--metrics ignored: the recorded nodes keep their ports)" if metrics_base else "")
            + (" (--shards ignored: the recorded nodes keep their flags)" if args.shards is not None else "")
        )
        busy = [p for n in nodes for p in node_ports(n) if not port_free(p)]
        if busy:
            print(f"marekvs cluster: ports in use: {busy}", file=sys.stderr)
            return 1
        for n in nodes:
            start_recorded(st, n)
        save_state(d, st)
        problems = wait_ready(nodes, args.timeout)
        print_nodes(nodes, problems)
        return 1 if problems else 0
    if args.nodes is None:
        args.nodes = 3
    if args.nodes < 1:
        print("marekvs cluster: --nodes must be >= 1", file=sys.stderr)
        return 1
    kafka_base = 0
    if args.kafka or args.kafka_base_port is not None:
        kafka_base = args.kafka_base_port or DEFAULT_KAFKA_BASE_PORT
    extra: list[str] = []
    if args.shards is not None:
        try:
            shards = cfgmod.load(env={}, overrides={"shards": args.shards}).shards
        except ValueError as e:
            print(f"marekvs cluster: --shards: {e}", file=sys.stderr)
            return 1
        extra = ["--shards", str(shards)]
    specs = plan_nodes(d, args.nodes, args.base_port, args.grpc_base_port, metrics_base, args.tls, kafka_base)
    busy = [p for s in specs for p in node_ports(s) if not port_free(p)]
    if busy:
        print(
            f"marekvs cluster: ports in use: {busy} (choose --base-port / --grpc-base-port"
            + (" / --metrics-base-port" if metrics_base else "") + (" / --kafka-base-port" if kafka_base else "")
            + ")",
            file=sys.stderr,
        )
        return 1
    st, problems = start_cluster(
        d,
        args.nodes,
        args.base_port,
        args.grpc_base_port,
        args.durability,
        args.secret or "",
        args.name,
        args.timeout,
        metrics_base_port=metrics_base,
        tls=args.tls,
        kafka_base_port=kafka_base,
        extra=extra,
    )
    print(f"cluster {args.name!r}: {args.nodes} node(s){f' of {extra[1]} shard workers' if extra else ''}, "
          f"state in {state_path(d)}")
    print_nodes(st["nodes"], problems)
    t = tls_dir(d)
    if kafka_base:
        boot = ",".join(f"127.0.0.1:{s.kafka_port}" for s in specs)
        ssl = (f" -X security.protocol=ssl -X ssl.ca.location={t / 'ca.pem'} -X ssl.certificate.location="
               f"{t / 'client.pem'} -X ssl.key.location={t / 'client.key'}") if args.tls else ""
        print(f"Kafka on every node{' over TLS' if args.tls else ''} (docs/kafka.md): kcat -b {boot}{ssl} -L")
    if args.tls:
        print(f"TLS only (certificates in {t}): redis-cli --tls --cacert {t / 'ca.pem'} --cert "
              f"{t / 'client.pem'} --key {t / 'client.key'} -p {args.base_port}")
    return 1 if problems else 0


def _cluster_dir(args: argparse.Namespace) -> Path | None:
    """The cluster directory of ``args``, or None (reported) if no cluster was started there."""
    d = Path(args.dir).resolve()
    if not state_path(d).exists():
        print(f"marekvs cluster: no {state_path(d)}; start a cluster with `marekvs cluster up`",
              file=sys.stderr)
        return None
    return d


def cmd_add(args: argparse.Namespace) -> int:
    d = _cluster_dir(args)
    if d is None:
        return 1
    st, spec, problems = add_node(d, args.timeout)
    print(
        f"node {spec.id} joins cluster {st['name']!r} (peers: "
        f"{', '.join(str(n.id) for n in st['nodes'] if n.id != spec.id)})"
    )
    print_nodes([spec], problems)
    return 1 if problems else 0


def _port_nodes(ports: str, tls: str = "") -> list[NodeSpec]:
    out = []
    for i, p in enumerate(x for x in ports.split(",") if x.strip()):
        out.append(NodeSpec(id=i + 1, port=int(p), grpc_port=0, data_dir="", log="", tls_dir=tls))
    return out


def cmd_status(args: argparse.Namespace) -> int:
    if args.ports:
        # nodes we did not start (e.g. containers): what they report about themselves
        try:
            nodes = _port_nodes(args.ports, args.tls_dir)
        except ValueError:
            print(f"marekvs cluster: --ports wants comma-separated port numbers, not {args.ports!r}",
                  file=sys.stderr)
            return 2
        statuses = [node_status(n, host=args.host) for n in nodes]
        for s in statuses:
            s["id"] = s.get("node_id", s["id"])
            s["pid"] = s.get("reported_pid", 0)
            s["process"] = s["up"]
        name, where = "(ports)", f"{args.host}:{args.ports}"
    else:
        d = _cluster_dir(args)
        if d is None:
            return 1
        st = load_state(d)
        refresh_pids(d, st)
        statuses = [node_status(n) for n in st["nodes"]]
        name, where = st["name"], str(state_path(d))
    bad = [s for s in statuses if not s["up"]]
    if args.json:
        print(json.dumps({"name": name, "dir": where if not args.ports else "", "nodes": statuses}, indent=2))
        return 1 if bad else 0
    metrics = any(s.get("metrics_port") for s in statuses)
    kafka = any(s.get("kafka_port") for s in statuses)
    rows = [["NODE", "STATUS", "PID", "RESP", "GRPC", "KEYS", "DIGEST", "LOG", "PEERS",
             *(["METRICS"] if metrics else []), *(["KAFKA"] if kafka else [])]]
    for s in statuses:
        status = "up" if s["up"] else ("down" if not s["process"] else "unresponsive")
        rows.append(
            [
                str(s["id"]),
                status,
                str(s["pid"]) if s["process"] else f"({s['pid']})",
                str(s["port"]),
                str(s["grpc_port"] or "-"),
                str(s.get("dbsize", "-")),
                s.get("digest", "-")[:12],
                str(s.get("log_last_seq", "-")),
                f"{s.get('connected_peers', '-')}/{s.get('known_peers', '-')}" if s["up"] else "-",
                *([str(s.get("metrics_port") or "-")] if metrics else []),
                *([str(s.get("kafka_port") or "-")] if kafka else []),
            ]
        )
    print(f"cluster {name!r} ({where})")
    print(_table(rows))
    link_rows = [["NODE", "-> PEER", "STATE", "LAG_ENTRIES", "LAG_MS"]]
    for s in statuses:
        for ln in s["links"]:
            link_rows.append(
                [str(s["id"]), str(ln["peer"]), ln["state"], str(ln["lag_entries"]), str(ln["lag_ms"])]
            )
    if len(link_rows) > 1:
        print("\nlinks (from INFO replication of each node)")
        print(_table(link_rows))
    digests = {s["digest"] for s in statuses if s.get("digest")}
    if len(digests) == 1 and not bad:
        print("\nall nodes have the same DEBUG DIGEST (converged)")
    elif len(digests) > 1:
        print(f"\n{len(digests)} different DEBUG DIGESTs (not converged yet, or writes in flight)")
    for s in bad:
        print(f"node {s['id']}: {s.get('error', 'down')}", file=sys.stderr)
    return 1 if bad else 0


def cmd_down(args: argparse.Namespace) -> int:
    d = _cluster_dir(args)
    if d is None:
        return 1
    st = load_state(d)
    refresh_pids(d, st)
    res = stop_nodes(st["nodes"], args.timeout)
    for n in st["nodes"]:
        print(f"node {n.id} (pid {n.pid}): {res[n.id]}")
    return 1 if any(v == "failed" for v in res.values()) else 0


def _selected(st: dict[str, Any], ids: list[int]) -> list[NodeSpec] | None:
    by_id = {n.id: n for n in st["nodes"]}
    unknown = [i for i in ids if i not in by_id]
    if unknown:
        print(
            f"marekvs cluster: no node {', '.join(map(str, unknown))} in this cluster "
            f"(nodes: {', '.join(str(i) for i in by_id)})",
            file=sys.stderr,
        )
        return None
    return [by_id[i] for i in dict.fromkeys(ids)]


def _stop(d: Path, st: dict[str, Any], nodes: list[NodeSpec], timeout: float) -> bool:
    res = stop_nodes(nodes, timeout)
    for n in nodes:
        print(f"node {n.id} (pid {n.pid}): {res[n.id]}")
    # "not ours": the recorded pid belongs to another process now, and no process is this node
    return not any(res[n.id] == "failed" for n in nodes)


def _start(d: Path, st: dict[str, Any], nodes: list[NodeSpec], found: dict[int, int], timeout: float) -> bool:
    todo = []
    for n in nodes:
        if found.get(n.id):
            print(f"node {n.id}: already running (pid {found[n.id]})")
        else:
            todo.append(n)
    busy = {n.id: [p for p in node_ports(n) if not port_free(p)] for n in todo}
    busy = {i: ports for i, ports in busy.items() if ports}
    if busy:
        for i, ports in busy.items():
            print(f"marekvs cluster: node {i}: ports in use: {ports}", file=sys.stderr)
        return False
    for n in todo:
        start_recorded(st, n)
    save_state(d, st)
    problems = wait_ready(todo, timeout)
    if todo:
        print_nodes(todo, problems)
    return not problems


def cmd_stop(args: argparse.Namespace) -> int:
    d = _cluster_dir(args)
    if d is None:
        return 1
    st = load_state(d)
    nodes = _selected(st, args.node)
    if nodes is None:
        return 1
    refresh_pids(d, st)
    return 0 if _stop(d, st, nodes, args.timeout) else 1


def cmd_start(args: argparse.Namespace) -> int:
    d = _cluster_dir(args)
    if d is None:
        return 1
    st = load_state(d)
    nodes = _selected(st, args.node)
    if nodes is None:
        return 1
    found = refresh_pids(d, st)
    return 0 if _start(d, st, nodes, found, args.timeout) else 1


def cmd_restart(args: argparse.Namespace) -> int:
    d = _cluster_dir(args)
    if d is None:
        return 1
    st = load_state(d)
    nodes = _selected(st, args.node)
    if nodes is None:
        return 1
    refresh_pids(d, st)
    if not _stop(d, st, nodes, args.stop_timeout):
        return 1
    return 0 if _start(d, st, nodes, {}, args.timeout) else 1


def cmd_certs(args: argparse.Namespace) -> int:
    out = Path(args.out)
    names = [n for n in args.nodes.split(",") if n]
    clients = [c for c in args.clients.split(",") if c]
    try:
        certs.make_pki(out, names, clients, hosts=[h for h in args.hosts.split(",") if h], readable=args.readable)
    except (certs.CertError, OSError) as e:
        print(f"marekvs certs: {e}", file=sys.stderr)
        return 1
    print(f"CA {out / 'ca.pem'}; nodes: {', '.join(names) or '-'}; clients: {', '.join(clients) or '-'} "
          f"(NAME.pem and NAME.key in {out})")
    return 0


def add_certs_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "certs", help="make a throwaway CA and node and client certificates (TLS for a test cluster)",
        description="Make, with the openssl command, a CA (DIR/ca.pem, kept with its key: run again to add "
        "names) and for each node name a certificate for TLS servers and clients (its name and --hosts as "
        "alternative names: the node serves its TLS port and dials its peers with it), and for each client "
        "name a client certificate (CN = the name). For development and tests, not for production.",
        formatter_class=_Fmt,
    )
    p.add_argument("--out", required=True, metavar="DIR", help="directory for the files (created if missing)")
    p.add_argument("--nodes", default="", metavar="N1,N2,..", help="node names (host names peers dial)")
    p.add_argument("--clients", default="client", metavar="C1,..", help="client certificate names")
    p.add_argument("--hosts", default=",".join(certs.LOCAL_HOSTS), metavar="H1,..",
                   help="more alternative names of every node certificate")
    p.add_argument("--readable", action="store_true",
                   help="keys readable by every user (a directory shared with containers of another uid)")
    p.set_defaults(func=cmd_certs)


class _Fmt(argparse.ArgumentDefaultsHelpFormatter):
    def _get_help_string(self, action: argparse.Action) -> str | None:
        if action.default in (None, "", False):
            return action.help
        return super()._get_help_string(action)


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "cluster",
        help="run a local multi-node cluster (up, status, add, stop, start, restart, down)",
        description="Run a local multi-node marekvs cluster on 127.0.0.1: every node is a "
        "detached `marekvs serve` process recorded in DIR/cluster.json.",
    )
    csub = p.add_subparsers(dest="cluster_cmd", required=True)
    fmt = _Fmt

    def common(q: argparse.ArgumentParser) -> None:
        q.add_argument(
            "--dir", default="./cluster", help="cluster directory (node data dirs, logs, cluster.json)"
        )

    def node_ids(q: argparse.ArgumentParser) -> None:
        q.add_argument("node", type=int, nargs="+", metavar="N", help="node id(s), as in `marekvs cluster status`")

    up = csub.add_parser("up", help="start N nodes in a full mesh", formatter_class=fmt)
    up.add_argument(
        "--nodes",
        type=int,
        default=None,
        help="number of nodes (default 3; a stopped cluster in --dir restarts with its recorded nodes)",
    )
    up.add_argument("--base-port", type=int, default=7000, help="RESP port of node 1 (node i: base+i-1)")
    up.add_argument(
        "--grpc-base-port", type=int, default=17000, help="gRPC port of node 1 (node i: base+i-1)"
    )
    up.add_argument(
        "--metrics",
        action="store_true",
        help=f"turn on every node's Prometheus exporter (GET /metrics), node i on "
        f"--metrics-base-port+i-1 (default base {DEFAULT_METRICS_BASE_PORT})",
    )
    up.add_argument(
        "--metrics-base-port", type=int, default=None, help="metrics port of node 1 (implies --metrics)"
    )
    up.add_argument(
        "--kafka",
        action="store_true",
        help=f"serve the Kafka protocol on every node (docs/kafka.md), node i on --kafka-base-port+i-1 "
        f"(default base {DEFAULT_KAFKA_BASE_PORT})",
    )
    up.add_argument("--kafka-base-port", type=int, default=None, help="Kafka port of node 1 (implies --kafka)")
    up.add_argument(
        "--tls",
        action="store_true",
        help="make a throwaway CA and certificates in DIR/tls: every node serves RESP (and Kafka, with "
        "--kafka) over TLS only (client certificate required: DIR/tls/client.pem) and its peer links over "
        "mutual TLS",
    )
    common(up)
    up.add_argument("--durability", default="everysec", choices=["always", "everysec", "no"])
    up.add_argument("--shards", default=None, metavar="N|auto",
                    help="shard worker processes of every node (docs/shards.md; default: the nodes' own, auto)")
    up.add_argument("--secret", default="", help="cluster secret (passed to nodes through the environment)")
    up.add_argument("--name", default="marekvs", help="cluster name")
    up.add_argument(
        "--timeout", type=float, default=60.0, help="seconds to wait for every node to answer PING"
    )
    up.set_defaults(func=cmd_up)

    st = csub.add_parser(
        "status", help="every node: up/down, pid, DBSIZE, DEBUG DIGEST, links and lag", formatter_class=fmt
    )
    common(st)
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.add_argument(
        "--ports",
        default="",
        metavar="P1,P2,..",
        help="show the nodes answering on these RESP ports of --host instead of a cluster directory "
        "(e.g. the ports a docker compose cluster publishes); PID is what each node reports",
    )
    st.add_argument("--host", default=HOST, help="host of --ports")
    st.add_argument("--tls-dir", default="", metavar="DIR",
                    help="reach --ports over TLS with DIR/ca.pem and the client certificate DIR/client.pem "
                         "(the files of `marekvs certs`, e.g. the docker compose TLS variant's)")
    st.set_defaults(func=cmd_status)

    ad = csub.add_parser("add", help="start one more node that joins the live cluster", formatter_class=fmt)
    common(ad)
    ad.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the node to answer PING")
    ad.set_defaults(func=cmd_add)

    sp = csub.add_parser("stop", help="stop node N (the others keep running)", formatter_class=fmt)
    node_ids(sp)
    common(sp)
    sp.add_argument("--timeout", type=float, default=15.0, help="seconds after SIGTERM before SIGKILL")
    sp.set_defaults(func=cmd_stop)

    sa = csub.add_parser(
        "start", help="start stopped node N again (its recorded ports, data directory and peers)",
        formatter_class=fmt,
    )
    node_ids(sa)
    common(sa)
    sa.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the node to answer PING")
    sa.set_defaults(func=cmd_start)

    rs = csub.add_parser("restart", help="stop node N, then start it again", formatter_class=fmt)
    node_ids(rs)
    common(rs)
    rs.add_argument("--stop-timeout", type=float, default=15.0, help="seconds after SIGTERM before SIGKILL")
    rs.add_argument("--timeout", type=float, default=60.0, help="seconds to wait for the node to answer PING")
    rs.set_defaults(func=cmd_restart)

    dn = csub.add_parser("down", help="stop every node by its pid", formatter_class=fmt)
    common(dn)
    dn.add_argument("--timeout", type=float, default=15.0, help="seconds after SIGTERM before SIGKILL")
    dn.set_defaults(func=cmd_down)
