"""``marekvs cluster up|status|add|stop|start|restart|down`` end to end: real detached processes
on free ports."""

from __future__ import annotations

import collections
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from marekvs import launcher as mc
from marekvs.launcher import Resp, load_state, pid_alive, port_free, stop_nodes
from tests.helpers import ROOT

pytestmark = pytest.mark.timeout(90)


def free_base(span: int) -> int:
    """A base port with ``span`` consecutive free ports (probed) in 20000-31999, below the
    kernel's ephemeral range (32768+) that other tests' free ports come from."""
    for _ in range(200):
        base = random.randrange(20000, 32000 - span)
        if all(port_free(base + i) for i in range(span)):
            return base
    raise RuntimeError("no free port range")


def cli(*args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run(
        [sys.executable, "-m", "marekvs", "cluster", *args],
        cwd=str(ROOT),
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def wait_until(pred, timeout: float = 15.0, what: str = "condition"):
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = pred()
        if last:
            return last
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what} (last: {last!r})")


def call(port: int, *args):
    with Resp(port) as c:
        return c.call(*args)


def test_cluster_up_status_add_down(tmp_path):
    d = tmp_path / "cluster"
    base = free_base(5)
    gbase = free_base(5)
    while abs(gbase - base) < 5:
        gbase = free_base(5)
    try:
        r = cli(
            "up", "--nodes", "3", "--dir", str(d), "--base-port", str(base), "--grpc-base-port", str(gbase)
        )
        assert r.returncode == 0, r.stdout + r.stderr
        st = load_state(d)
        nodes = st["nodes"]
        assert [n.id for n in nodes] == [1, 2, 3]
        assert [n.port for n in nodes] == [base, base + 1, base + 2]
        assert [n.grpc_port for n in nodes] == [gbase, gbase + 1, gbase + 2]
        assert all(pid_alive(n.pid) for n in nodes)
        assert all(os.path.isdir(n.data_dir) and os.path.exists(n.log) for n in nodes)
        for n in nodes:
            assert str(n.pid) in r.stdout

        # write on node 1, read on nodes 2 and 3
        assert call(base, "SET", "greeting", "hello") == "OK"
        assert call(base, "INCRBY", "visits", 5) == 5
        for port in (base + 1, base + 2):
            wait_until(lambda p=port: call(p, "GET", "greeting") == b"hello", what=f"greeting on {port}")
            wait_until(lambda p=port: call(p, "GET", "visits") == b"5", what=f"visits on {port}")

        # every link streaming: status shows all three nodes and 'streaming'
        def all_streaming():
            r = cli("status", "--dir", str(d), "--json")
            js = json.loads(r.stdout)
            links = [ln["state"] for s in js["nodes"] for ln in s["links"]]
            return r.returncode == 0 and len(links) == 6 and set(links) == {"streaming"}

        wait_until(all_streaming, what="all links streaming")
        r = cli("status", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "streaming" in r.stdout
        for n in nodes:
            assert str(n.pid) in r.stdout and str(n.port) in r.stdout
        table = [ln.split() for ln in r.stdout.splitlines()]
        assert {row[0] for row in table if len(row) > 2 and row[1] == "up"} >= {"1", "2", "3"}

        # a 4th node joins the live cluster and converges
        for i in range(50):
            call(base + 1, "SET", f"k{i}", f"v{i}")
        r = cli("add", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        nodes = load_state(d)["nodes"]
        assert [n.id for n in nodes] == [1, 2, 3, 4]
        n4 = nodes[3]
        assert pid_alive(n4.pid)
        assert call(base + 2, "SET", "after-join", "x") == "OK"  # written after the join, on node 3

        def converged():
            digests = {call(n.port, "DEBUG", "DIGEST") for n in nodes}
            return len(digests) == 1 and call(n4.port, "DBSIZE") == 53

        wait_until(converged, timeout=20, what="4 nodes converged")
        assert call(n4.port, "GET", "after-join") == b"x"
        # the existing nodes learned node 4 from its Hello
        r = cli("status", "--dir", str(d), "--json")
        js = json.loads(r.stdout)
        assert r.returncode == 0
        for s in js["nodes"]:
            assert s["known_peers"] == 3, s

        # down stops every pid
        pids = [n.pid for n in nodes]
        r = cli("down", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        for pid in pids:
            assert not pid_alive(pid), f"pid {pid} still running"
        r = cli("status", "--dir", str(d))
        assert r.returncode == 1
        assert "down" in r.stdout
    finally:
        if (d / "cluster.json").exists():
            stop_nodes(load_state(d)["nodes"], timeout=5)


@pytest.mark.skipif(shutil.which("openssl") is None or shutil.which("redis-cli") is None,
                    reason="needs the openssl and redis-cli commands")
def _kafka_over_ssl(t, produce_port: int, consume_port: int) -> None:
    """A record produced over SSL (the cluster's client certificate) on one node is consumed
    over SSL on another; a client without a certificate gets no metadata (where
    confluent-kafka is installed, as the other Kafka tests need it)."""
    try:
        import confluent_kafka as kafka
        from confluent_kafka.admin import AdminClient
    except ImportError:
        return
    ssl = {"security.protocol": "SSL", "ssl.ca.location": str(t / "ca.pem"),
           "ssl.certificate.location": str(t / "client.pem"), "ssl.key.location": str(t / "client.key")}
    p = kafka.Producer({"bootstrap.servers": f"127.0.0.1:{produce_port}", "message.timeout.ms": 60000, **ssl})
    p.produce("cli-tls", value=b"over tls")
    assert p.flush(60) == 0
    c = kafka.Consumer({"bootstrap.servers": f"127.0.0.1:{consume_port}", "group.id": "cli-tls",
                        "auto.offset.reset": "earliest", **ssl})
    c.subscribe(["cli-tls"])
    m = wait_until(lambda: (lambda m: m if m is not None and m.error() is None else None)(c.poll(0.5)),
                   timeout=60, what="the record consumed over SSL")
    c.close()
    assert m.value() == b"over tls"
    admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{produce_port}", "security.protocol": "SSL",
                         "ssl.ca.location": str(t / "ca.pem")})
    with pytest.raises(kafka.KafkaException):
        admin.list_topics(timeout=5)


def test_cluster_up_tls_serves_clients_over_tls_and_peers_over_mutual_tls(tmp_path):
    """``cluster up --tls --kafka``: three nodes, RESP and Kafka over TLS only (a client
    certificate required), peer links over mutual TLS; real redis-cli --tls writes on node 1
    and reads on node 3, a Kafka record produced over SSL on node 1 is read over SSL on node
    3; status and add work through TLS; a peer call in the clear or without a certificate is
    refused."""
    import grpc

    d = tmp_path / "cluster"
    base, gbase, kbase = free_base(4), free_base(4), free_base(4)
    while min(abs(gbase - base), abs(kbase - base), abs(kbase - gbase)) < 4:
        gbase, kbase = free_base(4), free_base(4)
    t = d / "tls"

    def rcli(port, *args, cert=True):
        flags = ["--tls", "--cacert", str(t / "ca.pem")]
        if cert:
            flags += ["--cert", str(t / "client.pem"), "--key", str(t / "client.key")]
        return subprocess.run(["redis-cli", *flags, "-p", str(port), *args], capture_output=True, text=True,
                              timeout=60).stdout.strip()

    try:
        r = cli("up", "--tls", "--nodes", "3", "--dir", str(d), "--base-port", str(base),
                "--grpc-base-port", str(gbase), "--kafka-base-port", str(kbase))
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"redis-cli --tls --cacert {t / 'ca.pem'}" in r.stdout
        assert f"-X security.protocol=ssl -X ssl.ca.location={t / 'ca.pem'}" in r.stdout
        _kafka_over_ssl(t, kbase, kbase + 2)
        assert rcli(base, "SET", "over", "tls") == "OK"
        wait_until(lambda: rcli(base + 2, "GET", "over") == "tls", timeout=60, what="the write on node 3")
        assert rcli(base + 1, "PING", cert=False) == ""  # no client certificate: refused at the handshake
        with socket.create_connection(("127.0.0.1", base)) as s:  # no plaintext RESP at all
            s.sendall(b"PING\r\n")
            s.settimeout(30)
            assert s.recv(100) == b""
        js = json.loads(cli("status", "--dir", str(d), "--json").stdout)
        assert [n["up"] for n in js["nodes"]] == [True, True, True]
        r = cli("add", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        wait_until(lambda: rcli(base + 3, "GET", "over") == "tls", timeout=60, what="node 4 bootstrapped over mTLS")
        # the peer port speaks TLS and wants a certificate signed by the cluster's CA
        for creds in (None, grpc.ssl_channel_credentials(root_certificates=(t / "ca.pem").read_bytes())):
            ch = grpc.insecure_channel(f"127.0.0.1:{gbase}") if creds is None else \
                grpc.secure_channel(f"127.0.0.1:{gbase}", creds)
            with ch:
                with pytest.raises(grpc.FutureTimeoutError):
                    grpc.channel_ready_future(ch).result(timeout=5)
    finally:
        if (d / "cluster.json").exists():
            stop_nodes(load_state(d)["nodes"], timeout=5)


def test_cluster_up_refuses_busy_ports(tmp_path):
    base = free_base(2)
    with socket.socket() as s:
        s.bind(("127.0.0.1", base))
        s.listen()
        r = cli(
            "up",
            "--nodes",
            "1",
            "--dir",
            str(tmp_path / "c"),
            "--base-port",
            str(base),
            "--grpc-base-port",
            str(free_base(2)),
        )
    assert r.returncode == 1
    assert "in use" in r.stderr
    assert not (tmp_path / "c" / "cluster.json").exists()


def status_json(d) -> dict:
    r = cli("status", "--dir", str(d), "--json")
    return json.loads(r.stdout)


def digests_equal(ports) -> bool:
    try:
        return len({call(p, "DEBUG", "DIGEST") for p in ports}) == 1
    except OSError:
        return False


def test_cluster_stop_start_restart_one_node_and_metrics(tmp_path):
    """stop/start/restart N act on one node while the others serve; --metrics turns on each
    node's exporter; `up` on a running cluster refuses and names the stopped node."""
    d = tmp_path / "cluster"
    base = free_base(9)
    gbase, mbase = base + 3, base + 6
    ports = [base, base + 1, base + 2]
    try:
        r = cli("up", "--nodes", "3", "--dir", str(d), "--base-port", str(base), "--grpc-base-port", str(gbase),
                "--metrics-base-port", str(mbase))
        assert r.returncode == 0, r.stdout + r.stderr
        nodes = load_state(d)["nodes"]
        assert [n.metrics_port for n in nodes] == [mbase, mbase + 1, mbase + 2]
        for n in nodes:
            with urllib.request.urlopen(f"http://127.0.0.1:{n.metrics_port}/metrics", timeout=5) as resp:
                assert b"marekvs_commands_processed_total" in resp.read()
        assert "METRICS" in r.stdout and str(mbase + 2) in r.stdout

        old2 = nodes[1].pid
        r = cli("stop", "2", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"node 2 (pid {old2}): stopped" in r.stdout
        assert not pid_alive(old2)
        js = status_json(d)
        assert [s["up"] for s in js["nodes"]] == [True, False, True]
        # the others keep serving, and replicate what is written meanwhile
        for i in range(20):
            assert call(base, "SET", f"while-down:{i}", i) == "OK"
        assert call(base + 2, "INCRBY", "c", 7) == 7

        r = cli("up", "--dir", str(d))  # the cluster is running: up refuses, pointing at `start 2`
        assert r.returncode == 1 and "start" in r.stderr and " 2" in r.stderr, r.stderr

        r = cli("start", "2", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        new2 = load_state(d)["nodes"][1].pid
        assert new2 != old2 and pid_alive(new2)
        wait_until(lambda: digests_equal(ports), timeout=30, what="node 2 caught up")
        assert call(base + 1, "GET", "while-down:19") == b"19" and call(base + 1, "GET", "c") == b"7"
        with urllib.request.urlopen(f"http://127.0.0.1:{mbase + 1}/metrics", timeout=5) as resp:
            assert resp.status == 200

        r = cli("start", "2", "--dir", str(d))  # already running: nothing to do
        assert r.returncode == 0 and f"already running (pid {new2})" in r.stdout, r.stdout + r.stderr

        old3 = load_state(d)["nodes"][2].pid
        r = cli("restart", "3", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        new3 = load_state(d)["nodes"][2].pid
        assert new3 != old3 and pid_alive(new3) and not pid_alive(old3)
        assert call(base + 2, "GET", "c") == b"7"  # its data survived the restart
        # (written on node 1, not on the restarted node: see test_writes_after_a_restart_replicate)
        assert call(base, "INCRBY", "c", 1) == 8
        wait_until(lambda: digests_equal(ports) and call(base + 2, "GET", "c") == b"8", timeout=30,
                   what="converged after restart")
        js = status_json(d)
        assert [s["pid"] for s in js["nodes"]] == [nodes[0].pid, new2, new3]
        assert all(s["reported_pid"] == s["pid"] for s in js["nodes"])

        r = cli("stop", "7", "--dir", str(d))
        assert r.returncode == 1 and "no node 7" in r.stderr
    finally:
        if (d / "cluster.json").exists():
            stop_nodes(load_state(d)["nodes"], timeout=5)


def _parent(proc: Path) -> int:
    try:
        return int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return -1


@pytest.mark.timeout(240)
def test_cluster_up_of_nodes_of_shard_workers(tmp_path):
    """--shards N: every node runs N shard workers (docs/shards.md) and replicates to the
    others; status and down see each node as one; a restart keeps the count; with --kafka
    each node's worker 0 serves Kafka: a record produced with acks=all on node 1 is consumed
    through node 2 (docs/kafka.md, "On a node of shard workers")."""
    d = tmp_path / "cluster"
    base = free_base(6)
    ports = [base, base + 1]
    try:
        r = cli("up", "--nodes", "2", "--dir", str(d), "--base-port", str(base), "--grpc-base-port",
                str(base + 2), "--shards", "2", "--kafka-base-port", str(base + 4))
        assert r.returncode == 0, r.stdout + r.stderr
        assert "2 node(s) of 2 shard workers" in r.stdout
        nodes = load_state(d)["nodes"]
        for n in nodes:
            assert json.loads((Path(n.data_dir) / "shards" / "map").read_text())["shards"] == 2
        for i in range(40):  # (keys of both workers of node 1)
            assert call(base, "SET", f"k{i}", i) == "OK"
        wait_until(lambda: digests_equal(ports) and call(base + 1, "EXISTS", *[f"k{i}" for i in range(40)]) == 40,
                   timeout=60, what="node 2 replicated node 1's writes")  # (and the Kafka brokers' record)
        js = status_json(d)
        assert [s["up"] for s in js["nodes"]] == [True, True]
        workers = [int(p.name) for n in nodes for p in Path("/proc").iterdir() if p.name.isdigit()
                   and _parent(p) == n.pid]
        assert len(workers) == 4
        try:
            import confluent_kafka as kafka
        except ImportError:
            kafka = None
        if kafka is not None:
            p = kafka.Producer({"bootstrap.servers": f"127.0.0.1:{base + 4}", "acks": "all",
                                "message.timeout.ms": 60000})
            p.produce("cli-shards", value=b"on two workers")
            assert p.flush(60) == 0
            c = kafka.Consumer({"bootstrap.servers": f"127.0.0.1:{base + 5}", "group.id": "cli-shards",
                                "auto.offset.reset": "earliest"})
            c.subscribe(["cli-shards"])
            m = wait_until(lambda: (lambda m: m if m is not None and m.error() is None else None)(c.poll(0.5)),
                           timeout=60, what="the record consumed through node 2")
            c.close()
            assert m.value() == b"on two workers"
        r = cli("down", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        assert not any(pid_alive(p) for p in [n.pid for n in nodes] + workers)  # (no orphan worker)
        r = cli("up", "--dir", str(d), "--shards", "3")  # (a restart keeps the recorded flags)
        assert r.returncode == 0 and "--shards ignored" in r.stdout, r.stdout + r.stderr
        assert call(base + 1, "GET", "k39") == b"39"
        assert json.loads((Path(load_state(d)["nodes"][0].data_dir) / "shards" / "map").read_text())["shards"] == 2
    finally:
        if (d / "cluster.json").exists():
            stop_nodes(load_state(d)["nodes"], timeout=5)


def test_cluster_finds_a_node_restarted_by_hand(tmp_path):
    """A node stopped and started again by hand (other pid, data dir given by a relative
    path): status shows its true pid and records it, and `down` stops it."""
    d = tmp_path / "cluster"
    base = free_base(4)
    gbase = base + 2
    by_hand = None
    try:
        r = cli("up", "--nodes", "2", "--dir", str(d), "--base-port", str(base), "--grpc-base-port", str(gbase))
        assert r.returncode == 0, r.stdout + r.stderr
        n2 = load_state(d)["nodes"][1]
        os.kill(n2.pid, signal.SIGTERM)
        wait_until(lambda: not pid_alive(n2.pid), what="node 2 stopped")
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        with open(d / "node2-by-hand.log", "wb") as log:
            by_hand = subprocess.Popen(
                [sys.executable, "-m", "marekvs", "serve", "--node-id", "2", "--port", str(base + 1),
                 "--grpc-port", str(gbase + 1), "--data-dir", "node2", "--peers", f"1@127.0.0.1:{gbase}"],
                cwd=str(d), env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        wait_until(lambda: call_ok(base + 1), timeout=30, what="the node started by hand answers")
        assert by_hand.pid != n2.pid

        r = cli("status", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        row = next(ln.split() for ln in r.stdout.splitlines() if ln.split()[:2] == ["2", "up"])
        assert row[2] == str(by_hand.pid), r.stdout
        assert load_state(d)["nodes"][1].pid == by_hand.pid  # recorded for the next command

        r = cli("down", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"node 2 (pid {by_hand.pid}): stopped" in r.stdout
        assert by_hand.wait(10) == 0  # SIGTERM: a clean stop
    finally:
        if by_hand is not None and by_hand.poll() is None:
            by_hand.kill()
            by_hand.wait(10)
        if (d / "cluster.json").exists():
            stop_nodes(load_state(d)["nodes"], timeout=5)


def call_ok(port: int) -> bool:
    try:
        return call(port, "PING") == "PONG"
    except OSError:
        return False


# its waits add up to 85 s before start-up and restart (log trim 20, replication 5, the
# Kafka consumer 60): the module's 90 s ended it at a load average of 7 (make test, 2 cores)
@pytest.mark.timeout(300)
def test_writes_after_a_restart_replicate(tmp_path):
    """Writes a node takes after `cluster restart` reach its peers, also when its log was empty
    (idle, everything acknowledged and trimmed) when it stopped; with --kafka-base-port the
    nodes serve Kafka too."""
    d = tmp_path / "cluster"
    base = free_base(6)
    try:
        r = cli("up", "--nodes", "2", "--dir", str(d), "--base-port", str(base), "--grpc-base-port", str(base + 2),
                "--kafka-base-port", str(base + 4))
        assert r.returncode == 0, r.stdout + r.stderr
        assert f"kcat -b 127.0.0.1:{base + 4},127.0.0.1:{base + 5} -L" in r.stdout
        for i in range(5):
            assert call(base, "SET", f"before:{i}", i) == "OK"

        def log_empty():  # node 2 has everything and node 1 trimmed it (every 0.5 s)
            info = mc.parse_info(call(base, "INFO", "replication"))
            return (call(base + 1, "EXISTS", *[f"before:{i}" for i in range(5)]) == 5
                    and int(info["log_first_seq"]) > int(info["log_last_seq"]))

        wait_until(log_empty, timeout=20, what="node 1's log trimmed empty")
        r = cli("restart", "1", "--dir", str(d))
        assert r.returncode == 0, r.stdout + r.stderr
        assert call(base, "SET", "after", "x") == "OK"
        # replication on loopback takes milliseconds: 5 s is a generous deadline
        wait_until(lambda: call(base + 1, "GET", "after") == b"x", timeout=5, what="the write after the restart")
        # `up --kafka-base-port`: every node serves Kafka; produced on node 1, consumed on node 2
        kafka = pytest.importorskip("confluent_kafka")
        trace: collections.deque[str] = collections.deque(maxlen=400)  # librdkafka's debug log, for a failure

        class Keep(logging.Handler):
            def emit(self, record: logging.LogRecord) -> None:
                trace.append(record.getMessage())

        rdlog = logging.getLogger("test_cluster_cli.rdkafka")
        rdlog.propagate = False
        rdlog.setLevel(logging.DEBUG)
        rdlog.addHandler(Keep())
        p = kafka.Producer({"bootstrap.servers": f"127.0.0.1:{base + 4}", "message.timeout.ms": 60000,
                            "debug": "broker,topic,msg,protocol", "logger": rdlog})
        delivered: list[object] = []  # the delivery report: None, or why the record was not stored
        p.produce("cli", value=b"through the cluster", on_delivery=lambda err, msg: delivered.append(err))
        assert p.flush(60) == 0
        if len(delivered) != 1 or delivered[0] is not None:  # (flush also empties the queue of a failed
            # record; a KafkaError does not compare with None)
            logs = "\n".join(f"--- node{i}.log\n" + (d / f"node{i}.log").read_text(errors="replace")[-3000:]
                             for i in (1, 2) if (d / f"node{i}.log").exists())
            views = []  # each node's replication links and its Kafka metadata of the topic
            admin = pytest.importorskip("confluent_kafka.admin")
            for i in (0, 1):
                md = admin.AdminClient({"bootstrap.servers": f"127.0.0.1:{base + 4 + i}"}).list_topics(
                    "cli", timeout=10)
                leaders = [(q.id, q.leader, q.error) for q in md.topics["cli"].partitions.values()]
                views.append(f"node {i + 1}: {call(base + i, 'INFO', 'replication')!r}; metadata: brokers "
                             f"{sorted(md.brokers)}, partitions {leaders}")
            raise AssertionError(f"the produce after the restart was not delivered: {delivered}; "
                                 + "\n".join(views) + f"\n{logs}\n--- librdkafka\n" + "\n".join(trace))

        seen: dict[str, object] = {}

        def on_node_2():  # the topic and its record replicated (else librdkafka's consumer on
            # node 2 may find no topic "cli" and look again only after its 5-minute refresh).
            # At least one record: a produce request librdkafka retried after a slow answer (a
            # loaded machine) is stored twice, as Kafka stores it without idempotence.
            for port, name in ((base, "node 1"), (base + 1, "node 2")):
                streams = call(port, "KEYS", "korvet:stream:cli:*")
                seen[name] = (call(port, "EXISTS", "korvet:topic:cli", "korvet:leaders:cli"),
                              {k: call(port, "XLEN", k) for k in streams})
            exists, lengths = seen["node 2"]  # type: ignore[misc]
            return exists == 2 and sum(lengths.values()) >= 1

        try:
            wait_until(on_node_2, timeout=60, what="topic cli and its record on node 2")
        except AssertionError as e:  # what each node held: which part did not replicate
            raise AssertionError(f"{e}; (topic and leader keys, stream lengths) per node: {seen}") from None
        c = kafka.Consumer({"bootstrap.servers": f"127.0.0.1:{base + 5}", "group.id": "cli",
                            "auto.offset.reset": "earliest"})
        c.subscribe(["cli"])
        errors: list[str] = []  # what the consumer saw meanwhile, for a failure's message

        def consumed():
            m = c.poll(0.5)
            if m is not None and m.error() is not None:
                errors.append(str(m.error()))
                return None
            return m

        try:
            m = wait_until(consumed, timeout=60, what="the record consumed on node 2")
        except AssertionError as e:
            logs = "\n".join(f"--- node{i}.log\n" + (d / f"node{i}.log").read_text(errors="replace")[-3000:]
                             for i in (1, 2) if (d / f"node{i}.log").exists())
            raise AssertionError(f"{e}; consumer errors: {errors[-10:]}\n{logs}") from None
        c.close()
        assert m.value() == b"through the cluster"
        r = cli("status", "--dir", str(d), "--json")
        assert [n["kafka_port"] for n in json.loads(r.stdout)["nodes"]] == [base + 4, base + 5]
    finally:
        if (d / "cluster.json").exists():
            stop_nodes(load_state(d)["nodes"], timeout=5)
