"""The TLS port and the metrics port of a node of shard workers (docs/shards.md §4, §9 slice
10): a ``--shards 2`` node of real processes with a TLS port and a metrics port.

TLS: every worker listens on the TLS port (``SO_REUSEPORT``, as on the plaintext port), so a
TLS client lands on either; redis-py over TLS and ``redis-cli --tls`` from connections on
either worker read and write keys of both workers (single-key commands carried, MSET/MGET
units, a pipeline alternating workers), see the TLS clients in CLIENT LIST/INFO with the
TLS port as ``laddr``, get Pub/Sub messages published on the other worker, and a CONFIG SET
of the tls-* names (``tls-auth-clients``, a rotated certificate) reaches every worker's
listener; a TLS client of the worker a busy script does not run on gets BUSY and SCRIPT
KILLs it.

Metrics: one scrape answers for the whole node, whichever worker accepts it: the families
of a single process, each series once for the node, and each worker's series in
``marekvs_worker_*`` families with a ``worker`` label (server/metrics.py). The node's
counters equal the sums of the workers', and the deltas of commands, keyspace hits and
misses match, worker by worker, what the test ran through connections on each; the
exposition parses (prometheus_client's parser) with one HELP and TYPE per family; a worker
that is down answers ``marekvs_worker_up 0`` and is left out of the sums, and comes back.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from collections import Counter
from pathlib import Path

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

from marekvs.launcher import certs
from tests.helpers import CLIENT_TIMEOUT, Node, client_of, free_port, mb, sync
from tests.integration.test_tls import _try
from tests.integration.test_shards import DEADLINE, SHARDS, _cmdline, children, client_on, gone, keys_on, wait_until

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")]


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    return certs.make_pki(tmp_path_factory.mktemp("pki"), ["node1", "node2"], clients=["client"])


@pytest.fixture(scope="module")
def node(tmp_path_factory, pki):
    """Two shard workers, a plaintext port, a TLS port (client certificates required) and a
    metrics port."""
    tls_port, metrics_port = free_port(), free_port()
    n = Node(tmp_path_factory.mktemp("ports") / "data",
             extra=["--shards", str(SHARDS), "--tls-port", str(tls_port), "--metrics-port", str(metrics_port),
                    "--tls-cert-file", str(pki / "node1.pem"), "--tls-key-file", str(pki / "node1.key"),
                    "--tls-ca-cert-file", str(pki / "ca.pem")])
    n.tls_port, n.metrics_port = tls_port, metrics_port
    n.start()
    yield n
    n.stop()


def tls_kw(pki: Path, cert: str | None = "client") -> dict:
    kw = {"ssl": True, "ssl_ca_certs": str(pki / "ca.pem")}
    if cert is not None:
        kw.update(ssl_certfile=str(pki / f"{cert}.pem"), ssl_keyfile=str(pki / f"{cert}.key"))
    return kw


def tls_on(node: Node, pki: Path, worker: int, cert: str | None = "client", **kw) -> redis.Redis:
    """A redis-py client over TLS whose connection landed on ``worker``."""
    return client_on(node.tls_port, worker, **tls_kw(pki, cert), **kw)


def cli(pki: Path, port: int, stdin: bytes) -> list[bytes]:
    """``redis-cli --tls`` running the commands of ``stdin`` (one a line) on one connection."""
    r = subprocess.run(["redis-cli", "--tls", "--cacert", str(pki / "ca.pem"), "--cert", str(pki / "client.pem"),
                        "--key", str(pki / "client.key"), "-p", str(port)], input=stdin, capture_output=True,
                       timeout=60)
    assert r.returncode == 0, r
    return r.stdout.splitlines()


def served_cns(node: Node, pki: Path) -> dict[int, str]:
    """The certificate each worker's TLS listener serves now (new connections until both
    workers answered one)."""
    ctx = ssl.create_default_context(cafile=str(pki / "ca.pem"))
    ctx.load_cert_chain(str(pki / "client.pem"), str(pki / "client.key"))
    seen: dict[int, str] = {}
    deadline = time.monotonic() + DEADLINE
    while len(seen) < SHARDS and time.monotonic() < deadline:
        with ctx.wrap_socket(socket.create_connection(("127.0.0.1", node.tls_port), timeout=30),
                             server_hostname="127.0.0.1") as s:
            s.sendall(mb(b"CLIENT", b"ID"))
            worker = int(sync(s)[1:-2]) % SHARDS
            seen[worker] = dict(x[0] for x in s.getpeercert()["subject"])["commonName"]
    assert len(seen) == SHARDS, seen
    return seen


# -- TLS -----------------------------------------------------------------------------------

def test_tls_clients_on_either_worker_reach_keys_on_both(node, pki):
    a, b = keys_on(0, 3, "tls:a"), keys_on(1, 3, "tls:b")
    c0, c1 = tls_on(node, pki, 0), tls_on(node, pki, 1)
    c0_3 = tls_on(node, pki, 1, protocol=3)
    for c, mine, theirs in ((c0, a, b), (c1, b, a)):
        for k in mine + theirs:
            assert c.set(k, f"{k}@{c.client_id() % SHARDS}")
        assert [c.get(k) for k in mine + theirs] == [f"{k}@{c.client_id() % SHARDS}".encode() for k in mine + theirs]
        assert c.mset({a[0]: "m0", b[0]: "m1"}) and c.mget(a[0], b[0]) == [b"m0", b"m1"]
        assert c.delete(a[1], b[1]) == 2 and c.exists(a[1], b[1], a[2], b[2]) == 2
        p = c.pipeline(transaction=False)  # alternating workers, in order
        for i in range(40):
            p.incr(a[2] + ":n" if i % 2 else b[2] + ":n")
        assert p.execute()[-2:] == [20, 20] or c is c1
    assert c1.get(a[2] + ":n") == b"40" and c1.get(b[2] + ":n") == b"40"
    c0_3.hset(b[0] + ":h", mapping={"f": "1"})
    assert c0_3.hgetall(b[0] + ":h") == {b"f": b"1"} and c0.hgetall(b[0] + ":h") == {b"f": b"1"}
    # CLIENT INFO / LIST: the TLS port as laddr, on either worker, seen from any connection
    for c in (c0, c1):
        me = c.client_info()
        assert me["laddr"] == f"127.0.0.1:{node.tls_port}" and int(me["id"]) == c.client_id()
    listed = {int(cl["id"]): cl for cl in node.client().client_list()}
    for c in (c0, c1, c0_3):
        assert listed[c.client_id()]["laddr"] == f"127.0.0.1:{node.tls_port}"
    assert c0.info("server")["tcp_port"] == node.port
    # Pub/Sub over TLS across workers
    sub = c1.pubsub()
    sub.subscribe("tls:chan")
    assert sub.get_message(timeout=30)["type"] == "subscribe"
    assert c0.publish("tls:chan", "hi") == 1
    assert sub.get_message(timeout=30)["data"] == b"hi"
    sub.close()
    # redis-cli --tls: each connection lands on a worker; run until both were seen
    workers = set()
    deadline = time.monotonic() + DEADLINE
    while workers != {0, 1} and time.monotonic() < deadline:
        out = cli(pki, node.tls_port, f"CLIENT ID\nSET {a[0]} cli\nGET {b[0]}\nINCR {b[2]}:n\n"
                                      f"CLIENT INFO\n".encode())
        workers.add(int(out[0]) % SHARDS)
        assert out[1:3] == [b"OK", b"m1"] and int(out[3]) > 40, out
        assert f" laddr=127.0.0.1:{node.tls_port} ".encode() in out[4], out
    assert workers == {0, 1}
    assert c1.get(a[0]) == b"cli"
    c0.delete(*a, *b, a[2] + ":n", b[2] + ":n", b[0] + ":h")


def test_config_set_of_the_tls_names_reaches_every_worker(node, pki):
    plain = node.client()
    assert served_cns(node, pki) == {0: "node1", 1: "node1"}
    for _ in range(8):  # tls-auth-clients yes: no certificate, no connection (on any worker)
        with pytest.raises(redis.ConnectionError):
            client_of(node.tls_port, **tls_kw(pki, None)).ping()
    try:
        plain.config_set("tls-auth-clients", "optional")
        for w in range(SHARDS):
            assert tls_on(node, pki, w, cert=None).ping()
        assert plain.config_set("tls-cert-file", str(pki / "node2.pem"), "tls-key-file", str(pki / "node2.key"))
        assert served_cns(node, pki) == {0: "node2", 1: "node2"}
        with pytest.raises(redis.ResponseError, match="Unable to update TLS configuration"):
            plain.config_set("tls-cert-file", "/nonexistent.pem")
        assert served_cns(node, pki) == {0: "node2", 1: "node2"}
        assert plain.config_get("tls-cert-file")["tls-cert-file"] == str(pki / "node2.pem")
    finally:
        plain.config_set("tls-auth-clients", "yes", "tls-cert-file", str(pki / "node1.pem"),
                         "tls-key-file", str(pki / "node1.key"))
    assert served_cns(node, pki) == {0: "node1", 1: "node1"}


def test_a_tls_client_of_another_worker_gets_busy_and_kills_a_busy_script(node, pki):
    plain = node.client()
    plain.config_set("busy-reply-threshold", 100)
    runner, killer = client_on(node.port, 1), tls_on(node, pki, 0)
    out = []
    t = threading.Thread(target=lambda: out.append(_try(runner.eval, "while true do end", 0)))
    t.start()
    try:
        wait_until(lambda: str(_try(killer.ping)).startswith("BUSY Redis is busy running a script"),
                   "the script busy (BUSY to the TLS client of the other worker)")
        assert killer.script_kill()
    finally:
        t.join(60)
    assert str(out[0]).startswith("Script killed by user with SCRIPT KILL")
    assert killer.ping() and runner.ping()
    plain.config_set("busy-reply-threshold", 5000)


# -- metrics --------------------------------------------------------------------------------

def scrape(node: Node) -> dict[tuple[str, tuple], float]:
    """One scrape: every sample by (name, labels), after checking the exposition (one HELP
    and one TYPE per family, as promtool wants, and prometheus_client's parser reads it)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{node.metrics_port}/metrics", timeout=CLIENT_TIMEOUT) as r:
        body = r.read().decode()
    for kind in ("HELP", "TYPE"):
        names = Counter(line.split()[2] for line in body.splitlines() if line.startswith(f"# {kind} "))
        assert names and max(names.values()) == 1, [n for n, k in names.items() if k > 1]
    out = {}
    for fam in text_string_to_metric_families(body):
        for s in fam.samples:
            key = (s.name, tuple(sorted(s.labels.items())))
            assert key not in out, key
            out[key] = s.value
    return out


def node_and_workers(m: dict, name: str, **labels) -> tuple[float, list[float]]:
    """A series of the node and the same series of each worker."""
    worker = "marekvs_worker_" + name.removeprefix("marekvs_")
    return (m[(name, tuple(sorted(labels.items())))],
            [m[(worker, tuple(sorted({**labels, "worker": str(w)}.items())))] for w in range(SHARDS)])


def test_metrics_of_the_node_sum_the_workers(node):
    a, b = keys_on(0, 2, "mx:a"), keys_on(1, 2, "mx:b")
    c0, c1 = client_on(node.port, 0), client_on(node.port, 1)
    before = scrape(node)
    # worker 0's connection: 7 commands; worker 1's: 4 (hits and misses counted where the key is)
    c0.set(a[0], "1"), c0.set(b[0], "1"), c0.get(a[0]), c0.get(b[0]), c0.get(a[1]), c0.get(b[1]), c0.incr(b[0])
    c1.get(a[0]), c1.get(b[0]), c1.get(b[1]), c1.ping()
    after = scrape(node)
    for m in (before, after):
        for w in range(SHARDS):
            assert m[("marekvs_worker_up", (("worker", str(w)),))] == 1
        # every series a worker has is in the node's, the node's value its workers' sum
        for name, labels in m:
            if not name.startswith("marekvs_worker_") or name == "marekvs_worker_up" or "process_" in name:
                continue
            base = "marekvs_" + name.removeprefix("marekvs_worker_")
            if labels[-1] != ("worker", "0"):
                continue
            rest = dict(labels[:-1])
            total, each = node_and_workers(m, base, **rest)
            if base == "marekvs_replog_first_seq":  # (the logs as one: last - first + 1 entries held)
                assert total == sum(each) - (SHARDS - 1)
            else:
                assert total == sum(each), (base, rest, total, each)
        total, each = node_and_workers(m, "marekvs_connected_clients")
        assert total == sum(each) and each[0] >= 1 and each[1] >= 1
        # the process metrics count the workers and the supervisor
        total, each = node_and_workers(m, "process_resident_memory_bytes")
        assert total > sum(each) > 0
        start, starts = node_and_workers(m, "process_start_time_seconds")
        assert start <= min(starts)

    def delta(name: str) -> tuple[float, list[float]]:
        (t1, e1), (t0, e0) = node_and_workers(after, name), node_and_workers(before, name)
        return t1 - t0, [x - y for x, y in zip(e1, e0)]

    assert delta("marekvs_commands_processed_total") == (11, [7, 4])
    assert delta("marekvs_keyspace_hits_total") == (4, [2, 2])  # a[0] twice on 0; b[0] twice on 1
    assert delta("marekvs_keyspace_misses_total") == (3, [1, 2])  # a[1] on 0; b[1] twice on 1
    c0.delete(*a, *b)


def test_a_worker_down_is_reported_and_left_out_of_the_sums(node):
    m = scrape(node)
    w1 = next(p for p in children(node.pid) if _cmdline(p)[_cmdline(p).index(b"--index") + 1] == b"1")
    os.kill(node.pid, signal.SIGSTOP)  # the supervisor cannot restart it until SIGCONT
    try:
        os.kill(w1, signal.SIGKILL)
        wait_until(lambda: gone(w1), "worker 1 to die")
        m = scrape(node)  # (worker 0 answers: worker 1's socket is gone with it)
        assert m[("marekvs_worker_up", (("worker", "1"),))] == 0
        assert m[("marekvs_worker_up", (("worker", "0"),))] == 1
        assert not any(dict(labels).get("worker") == "1" for name, labels in m if name != "marekvs_worker_up")
        total, each = m[("marekvs_commands_processed_total", ())], \
            m[("marekvs_worker_commands_processed_total", (("worker", "0"),))]
        assert total == each
    finally:
        os.kill(node.pid, signal.SIGCONT)
    wait_until(lambda: scrape(node)[("marekvs_worker_up", (("worker", "1"),))] == 1, "worker 1 back in the scrape")
    assert client_of(node.port).ping()
