"""TLS for clients on the RESP port, end to end: real nodes with a TLS port, real ``redis-cli
--tls`` and redis-py ``ssl=True``, side by side with a stock redis-server over TLS.

Everything that works in the clear works over TLS (pipelines, RESP3, Pub/Sub, blocking
commands, MONITOR, big values, the same replies byte for byte); client certificates are
checked at the handshake as ``tls-auth-clients`` says; CONFIG GET/SET of the tls-* names,
a certificate rotated for new connections; ``tls-auth-clients-user CN``; a TLS-only node
(``port 0``) with its metrics over HTTPS; and bad input (plaintext on the TLS port, TLS on
the plaintext port, stalled and half-finished handshakes by the thousand, garbage) closes
the connection with a log line, leaks no descriptor or memory, and the node keeps serving.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import socket
import ssl
import subprocess
import threading
import time
import urllib.request
from pathlib import Path

import pytest
import redis

from marekvs.launcher import certs
from tests.cluster import wait_for
from tests.integration.test_shards import children
from tests.helpers import CLIENT_TIMEOUT, Node, RedisServer, client_of, conversation, free_port, mb, sync

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl CLI not installed")]

HANDSHAKE_TIMEOUT = 2  # the nodes' tls_handshake_timeout (s)


@pytest.fixture(scope="module")
def pki(tmp_path_factory) -> Path:
    d = certs.make_pki(tmp_path_factory.mktemp("pki"), ["node1", "node2"], clients=["client", "alice"])
    certs.make_cert(d, "expired", server=False, days=-1)
    rogue = d / "rogue"
    rogue.mkdir()
    certs.make_pki(rogue, [], clients=["client"])  # another CA's client certificate
    return d


def tls_flags(pki: Path, cert: str = "node1") -> list[str]:
    return ["--tls-cert-file", str(pki / f"{cert}.pem"), "--tls-key-file", str(pki / f"{cert}.key"),
            "--tls-ca-cert-file", str(pki / "ca.pem")]


@pytest.fixture(scope="module")
def node(tmp_path_factory, pki):
    """Plaintext port and TLS port; a short handshake timeout."""
    tls_port = free_port()
    n = Node(tmp_path_factory.mktemp("tlsnode") / "data",
             extra=["--tls-port", str(tls_port), *tls_flags(pki), "--tls-handshake-timeout", str(HANDSHAKE_TIMEOUT)])
    n.tls_port = tls_port
    n.start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def tls_redis(tmp_path_factory, pki):
    """A stock redis-server with a TLS port beside its plaintext one."""
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    tls_port = free_port()
    r = RedisServer(tmp_path_factory.mktemp("redis-tls"),
                    extra=["--save", "", "--appendonly", "no", "--tls-port", str(tls_port), *tls_flags(pki)])
    r.tls_port = tls_port
    r.start()
    yield r
    r.stop()


def client_ctx(pki: Path, cert: str | None = "client") -> ssl.SSLContext:
    ctx = ssl.create_default_context(cafile=str((pki / "rogue" if cert == "rogue" else pki) / "ca.pem"))
    ctx.load_verify_locations(str(pki / "ca.pem"))
    if cert is not None:
        d = pki / "rogue" if cert == "rogue" else pki
        name = "client" if cert == "rogue" else cert
        ctx.load_cert_chain(str(d / f"{name}.pem"), str(d / f"{name}.key"))
    return ctx


def tls_client(port: int, pki: Path, cert: str = "client", **kw) -> redis.Redis:
    return client_of(port, ssl=True, ssl_ca_certs=str(pki / "ca.pem"), ssl_certfile=str(pki / f"{cert}.pem"),
                     ssl_keyfile=str(pki / f"{cert}.key"), **kw)


def tls_socket(port: int, pki: Path, cert: str | None = "client") -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", port), timeout=30)
    return client_ctx(pki, cert).wrap_socket(raw, server_hostname="127.0.0.1")


def tls_conversation(port: int, pki: Path, data: bytes) -> bytes:
    with tls_socket(port, pki) as s:
        s.sendall(data)
        return sync(s) + sync(s)


def cli(pki: Path, port: int, *args: str, cert: str | None = "client", stdin: bytes | None = None,
        extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess:
    flags = ["--tls", "--cacert", str(pki / "ca.pem")]
    if cert is not None:
        d = pki / "rogue" if cert == "rogue" else pki
        name = "client" if cert == "rogue" else cert
        flags += ["--cert", str(d / f"{name}.pem"), "--key", str(d / f"{name}.key")]
    return subprocess.run(["redis-cli", *flags, *extra, "-p", str(port), *args], input=stdin,
                          capture_output=True, timeout=60)


def closed_by_server(s: socket.socket, timeout: float = 30.0) -> bool:
    """Does the server close ``s`` (EOF or reset) within ``timeout``, whatever it sends first?"""
    s.settimeout(timeout)
    try:
        while s.recv(65536):
            pass
    except (ConnectionResetError, ssl.SSLError):
        pass
    except socket.timeout:
        return False
    return True


# -- everything as in the clear ----------------------------------------------------------------

def test_redis_cli_and_redis_py_work_over_tls_as_in_the_clear(node, pki, redis_cli):
    r = cli(pki, node.tls_port, "SET", "tls:k", "v")
    assert r.stdout == b"OK\n", r
    assert cli(pki, node.tls_port, "GET", "tls:k").stdout == b"v\n"
    pipe = b"".join(mb(b"RPUSH", b"tls:list", b"%d" % i) for i in range(2000))
    r = cli(pki, node.tls_port, "--pipe", stdin=pipe)
    assert b"errors: 0, replies: 2000" in r.stdout, r
    c = tls_client(node.tls_port, pki)
    big = os.urandom(8 << 20)
    c.set("tls:big", big)
    assert c.get("tls:big") == big and c.strlen("tls:big") == len(big)
    p = c.pipeline(transaction=False)
    for _ in range(500):
        p.incr("tls:n")
    assert p.execute()[-1] == 500
    r3 = tls_client(node.tls_port, pki, protocol=3)
    r3.hset("tls:h", mapping={"a": "1", "b": "2"})
    assert r3.hgetall("tls:h") == {b"a": b"1", b"b": b"2"}
    # CLIENT LIST shows a TLS client as Redis does: laddr is the TLS port; INFO's tcp_port the plaintext one
    me = c.client_info()
    assert me["laddr"] == f"127.0.0.1:{node.tls_port}"
    assert c.info("server")["tcp_port"] == node.port
    plain = node.client()
    assert any(cl["laddr"] == f"127.0.0.1:{node.tls_port}" for cl in plain.client_list())
    # Pub/Sub and a blocking command over TLS, fed from the plaintext port
    sub = c.pubsub()
    sub.subscribe("tls:chan")
    assert sub.get_message(timeout=30)["type"] == "subscribe"
    wait_for(lambda: plain.publish("tls:chan", "hello") == 1, 30, "the TLS subscriber")
    assert sub.get_message(timeout=30)["data"] == b"hello"
    sub.close()
    got = []
    t = threading.Thread(target=lambda: got.append(tls_client(node.tls_port, pki).blpop("tls:q", 60)))
    t.start()
    wait_for(lambda: plain.info("clients")["blocked_clients"] == 1, 30, "BLPOP blocked")
    plain.lpush("tls:q", "x")
    t.join(60)
    assert got == [(b"tls:q", b"x")]
    # MONITOR over TLS sees a command run in the clear
    with tls_socket(node.tls_port, pki) as m:
        m.sendall(mb(b"MONITOR"))
        assert m.recv(100) == b"+OK\r\n"
        plain.set("tls:monitored", "1")
        seen = b""
        while b"tls:monitored" not in seen:
            seen += m.recv(65536)
        assert b'"SET" "tls:monitored" "1"' in seen
    plain.delete("tls:k", "tls:list", "tls:big", "tls:n", "tls:h", "tls:monitored")


SCRIPT = (mb(b"SET", b"d:k", b"v") + mb(b"GET", b"d:k") + b"PING\r\n" + mb(b"INCR", b"d:k")
          + mb(b"APPEND", b"d:k", b"w") + mb(b"HSET", b"d:h", b"f", b"1", b"g", b"2") + mb(b"HGETALL", b"d:h")
          + mb(b"NOSUCH", b"x") + mb(b"GET") + mb(b"DEL", b"d:k", b"d:h") + mb(b"EXISTS", b"d:k"))


def test_the_same_replies_over_tls_as_in_the_clear_and_as_redis_over_tls(node, tls_redis, pki):
    mine_plain = conversation(node.port, SCRIPT)
    mine_tls = tls_conversation(node.tls_port, pki, SCRIPT)
    theirs_tls = tls_conversation(tls_redis.tls_port, pki, SCRIPT)
    assert mine_tls == mine_plain
    assert mine_tls == theirs_tls
    hello = mb(b"HELLO", b"3") + mb(b"HSET", b"d:h", b"f", b"1") + mb(b"HGETALL", b"d:h") + mb(b"DEL", b"d:h")
    client_id = re.compile(rb"\$2\r\nid\r\n:\d+\r\n")  # (HELLO's id: each connection its own)
    assert client_id.sub(b"", tls_conversation(node.tls_port, pki, hello)) == \
           client_id.sub(b"", conversation(node.port, hello))


# -- certificates ------------------------------------------------------------------------------

def test_client_certificates_are_checked_at_the_handshake_as_tls_auth_clients_says(node, pki, redis_cli):
    plain = node.client()

    def pong(cert):
        r = cli(pki, node.tls_port, "PING", cert=cert)
        return r.stdout == b"PONG\n"

    assert pong("client") and pong("alice")
    assert not pong(None) and not pong("rogue") and not pong("expired")
    log = node.log_text()
    for why in ("PEER_DID_NOT_RETURN_A_CERTIFICATE", "CERTIFICATE_VERIFY_FAILED"):
        assert f"Error accepting a client connection: {why}" in log, why
    try:
        plain.config_set("tls-auth-clients", "optional")
        assert pong(None) and pong("client") and not pong("rogue") and not pong("expired")
        plain.config_set("tls-auth-clients", "no")
        assert pong(None) and pong("rogue")  # (not asked for, not checked)
    finally:
        plain.config_set("tls-auth-clients", "yes")
    assert not pong(None) and pong("client")


def test_config_get_and_set_of_the_tls_names_and_a_certificate_rotated_for_new_connections(node, tls_redis, pki):
    plain = node.client()
    got = plain.config_get("tls-*")
    assert got["tls-port"] == str(node.tls_port) and got["tls-cert-file"] == str(pki / "node1.pem")
    assert got["tls-auth-clients"] == "yes" and got["tls-protocols"] == "" and got["tls-replication"] == "no"
    theirs = tls_redis.client().config_get("tls-*")
    mine = set(got)
    # Redis 7.0's names; tls-client-* (Redis's own outgoing connections) and tls-cluster have no
    # counterpart here; tls-auth-clients-user is Redis 8.6's
    assert set(theirs) - mine == {"tls-client-cert-file", "tls-client-key-file", "tls-client-key-file-pass",
                                  "tls-cluster"}
    assert mine - set(theirs) == {"tls-auth-clients-user"}
    assert {k: v for k, v in got.items() if k in theirs and "file" not in k and k != "tls-port"} == \
           {k: v for k, v in theirs.items() if k in mine and "file" not in k and k != "tls-port"}

    def served_cn() -> str:
        with tls_socket(node.tls_port, pki) as s:
            return dict(x[0] for x in s.getpeercert()["subject"])["commonName"]

    before = tls_client(node.tls_port, pki)
    assert before.ping() and served_cn() == "node1"
    try:
        assert plain.config_set("tls-cert-file", str(pki / "node2.pem"), "tls-key-file", str(pki / "node2.key"))
        assert served_cn() == "node2"
        assert before.ping()  # the connections open keep their session
        for name, value in (("tls-cert-file", "/nonexistent.pem"), ("tls-ciphers", "BOGUS"),
                            ("tls-protocols", "TLSv1.9"), ("tls-key-file", str(pki / "node1.key"))):
            msg = (f"CONFIG SET failed (possibly related to argument '{name}') - Unable to update TLS "
                   "configuration. Check server logs.")
            with pytest.raises(redis.ResponseError, match=f"^{msg}$".replace("(", r"\(").replace(")", r"\)")):
                plain.config_set(name, value)
        assert plain.config_get("tls-cert-file")["tls-cert-file"] == str(pki / "node2.pem")
        assert served_cn() == "node2" and "Failed to load certificate or private key" in node.log_text()
    finally:
        plain.config_set("tls-cert-file", str(pki / "node1.pem"), "tls-key-file", str(pki / "node1.key"))
    assert served_cn() == "node1"
    # values refused with Redis's texts (side by side with redis-server)
    theirs = tls_redis.client()
    for name, value in (("tls-auth-clients", "maybe"), ("tls-session-caching", "maybe"),
                        ("tls-prefer-server-ciphers", "1"), ("tls-session-cache-size", "-1"),
                        ("tls-session-cache-timeout", "x")):
        errors = []
        for c in (plain, theirs):
            with pytest.raises(redis.ResponseError) as ei:
                c.config_set(name, value)
            errors.append(str(ei.value))
        assert errors[0] == errors[1], errors
    assert plain.config_set("tls-session-cache-size", "100", "tls-prefer-server-ciphers", "YES")
    assert plain.config_get("tls-prefer-server-ciphers") == {"tls-prefer-server-ciphers": "yes"}
    assert plain.config_set("tls-session-cache-size", "20480", "tls-prefer-server-ciphers", "no")
    with pytest.raises(redis.ResponseError, match="^CONFIG SET failed .*'tls-port'.* can't set immutable config$"):
        plain.config_set("tls-port", str(node.tls_port))


# -- bad input ---------------------------------------------------------------------------------

def fds_of(pid: int) -> int:
    """The open descriptors of the node of ``pid``: its own, and its shard workers'."""
    return sum(len(os.listdir(f"/proc/{p}/fd")) for p in [pid, *children(pid)])


def rss_kb(pid: int) -> int:
    """The resident memory of the node of ``pid``: its own, and its shard workers'."""
    total = 0
    for p in [pid, *children(pid)]:
        with open(f"/proc/{p}/status") as f:
            total += int(f.read().split("VmRSS:")[1].split()[0])
    return total


CLIENT_HELLO_START = bytes.fromhex("16030100c4010000c00303") + os.urandom(32)  # a record, then it stops


def test_bad_input_closes_the_connection_with_a_log_line_and_the_node_keeps_serving(node, pki):
    plain = node.client()
    # plaintext RESP on the TLS port
    with socket.create_connection(("127.0.0.1", node.tls_port), timeout=30) as s:
        s.sendall(mb(b"PING"))
        assert closed_by_server(s)
    # a TLS client on the plaintext port
    with pytest.raises((ssl.SSLError, ConnectionError)):
        tls_socket(node.port, pki)
    wait_for(lambda: f"a TLS handshake on the plaintext port 127.0.0.1:{node.port}" in node.log_text(), 30,
             "the plaintext port's log line")
    # handshakes that stall (nothing, or half a ClientHello) are closed after tls_handshake_timeout
    for data in (b"", CLIENT_HELLO_START):
        with socket.create_connection(("127.0.0.1", node.tls_port), timeout=30) as s:
            s.sendall(data)
            t0 = time.monotonic()
            assert closed_by_server(s, 60)
            assert time.monotonic() - t0 >= HANDSHAKE_TIMEOUT - 0.5
    # garbage after the handshake: in a TLS record it is RESP garbage, answered as in the clear
    garbage = mb(b"SET", b"g", b"1") + b"*1\r\n$-5\r\n"
    assert tls_conversation(node.tls_port, pki, garbage) == conversation(node.port, garbage)
    assert plain.delete("g") == 1
    # ... and garbage under the TLS layer (not a TLS record) ends the session
    s = tls_socket(node.tls_port, pki)
    raw = socket.socket(fileno=os.dup(s.fileno()))
    raw.sendall(os.urandom(64) + b"\r\n")
    assert closed_by_server(s)
    raw.close()
    s.close()
    assert cli(pki, node.tls_port, "PING").stdout == b"PONG\n" and plain.ping()


def test_thousands_of_half_finished_handshakes_leak_no_descriptor_or_memory(node, pki):
    plain = node.client()
    clients = plain.info("clients")["connected_clients"]
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 4500:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, 4500), hard))
    n = min(2000, resource.getrlimit(resource.RLIMIT_NOFILE)[0] - 200)
    with tls_socket(node.tls_port, pki) as s:  # warm the TLS path up before the baseline
        s.sendall(mb(b"PING"))
        s.recv(10)
    wait_for(lambda: plain.info("clients")["connected_clients"] == clients, 30, "the warm-up client gone")
    base_fds, base_rss = fds_of(node.pid), rss_kb(node.pid)
    for _ in range(2):
        socks = []
        for i in range(n):
            s = socket.create_connection(("127.0.0.1", node.tls_port), timeout=30)
            if i % 2:
                s.sendall(CLIENT_HELLO_START)
            socks.append(s)
        # (the node closes those it has had for tls_handshake_timeout itself) and still serves
        assert cli(pki, node.tls_port, "PING").stdout == b"PONG\n" and plain.ping()
        for s in socks:
            s.close()
        wait_for(lambda: fds_of(node.pid) <= base_fds, 60,
                 lambda: f"descriptors back to {base_fds} (now {fds_of(node.pid)})")
    # the buffers those handshakes took go back to the OS once they stop (uvloop's 256 KiB each)
    wait_for(lambda: rss_kb(node.pid) < base_rss + 64 * 1024, 60,
             lambda: f"memory back near {base_rss} kB (now {rss_kb(node.pid)} kB)")
    assert "Error accepting a client connection" in node.log_text()
    assert plain.info("clients")["connected_clients"] <= clients  # (none left behind: earlier tests' may go)
    assert tls_client(node.tls_port, pki).ping()


def test_tls_clients_wait_out_a_busy_script_and_are_served_after_it(node, pki):
    plain = node.client()
    plain.config_set("busy-reply-threshold", 100)
    waiting = tls_client(node.tls_port, pki, single_connection_client=True)
    assert waiting.ping()  # connected before the script starts
    killer = node.client()
    assert killer.ping()
    runner = node.client(single_connection_client=True)
    # (a node of shard workers, MAREKVS_TEST_SHARDS: a TLS client of a worker other than the
    # script's is read meanwhile and answered BUSY, as Redis answers every client)
    args = node.args()
    shards = int(args[args.index("--shards") + 1]) if "--shards" in args else 1
    same = runner.client_id() % shards == waiting.client_id() % shards
    out = []
    t = threading.Thread(target=lambda: out.append(_try(runner.eval, "while true do end", 0)))
    t.start()
    # (PING, answered where the connection is: a command carried to the script's worker
    # before it was busy would wait for the script, docs/divergences.md; each probe on a new
    # connection with a short timeout: a PING the node read in the tick the script began in
    # is in flight, and waits for the script's end, server/busy.py)
    wait_for(lambda: str(_try(node.client(socket_timeout=5).ping)).startswith("BUSY"), 60, "the script busy")
    answered = []
    t2 = threading.Thread(target=lambda: answered.append(_try(waiting.ping)))
    t2.start()
    time.sleep(0.3)  # (the PING is on its way while the script runs)
    assert killer.script_kill()
    t.join(60)
    t2.join(60)
    assert str(out[0]).startswith("Script killed by user with SCRIPT KILL")
    if same:
        assert answered == [True]
    else:
        assert len(answered) == 1 and str(answered[0]).startswith("BUSY Redis is busy running a script")
    assert waiting.set("after", 1) and plain.delete("after") == 1
    plain.config_set("busy-reply-threshold", 5000)


def _try(fn, *args):
    try:
        return fn(*args)
    except redis.RedisError as e:
        return e


# -- a TLS-only node: port 0, client certificates naming ACL users, metrics over HTTPS --------

def test_tls_only_node_maps_certificate_cns_to_acl_users_and_serves_metrics_over_https(tmp_path, pki):
    port, metrics = free_port(), free_port()
    n = Node(tmp_path / "data", port=port,
             extra=["--port", "0", "--tls-port", str(port), *tls_flags(pki), "--tls-auth-clients-user", "CN",
                    "--metrics-port", str(metrics), "--metrics-tls", "yes"])
    n.start()
    try:
        admin = tls_client(port, pki)  # CN=client: no such user, so the default user
        assert admin.acl_whoami() == "default"
        assert admin.config_get("port") == {"port": "0"} and admin.info("server")["tcp_port"] == port
        log = admin.acl_log()
        assert log[0]["reason"] == "tls-cert" and log[0]["username"] == "client"
        admin.acl_setuser("alice", enabled=True, passwords=["+secret"], keys=["*"], commands=["+@all"])
        admin.config_set("requirepass", "adminpw")
        alice = tls_client(port, pki, cert="alice")
        assert alice.acl_whoami() == "alice" and alice.set("k", "v")  # no AUTH: the certificate says who
        stranger = tls_client(port, pki)
        with pytest.raises(redis.AuthenticationError):
            stranger.get("k")
        assert tls_client(port, pki, password="adminpw").get("k") == b"v"
        admin = tls_client(port, pki, password="adminpw")
        admin.acl_setuser("alice", enabled=False)
        with pytest.raises(redis.AuthenticationError):
            tls_client(port, pki, cert="alice").get("k")
        assert admin.acl_log()[0]["username"] == "alice" and admin.acl_log()[0]["reason"] == "tls-cert"
        # no plaintext port at all
        with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
            s.sendall(mb(b"PING"))
            assert closed_by_server(s)
        # the exporter over HTTPS, with the TLS port's certificate and client check
        with urllib.request.urlopen(f"https://127.0.0.1:{metrics}/metrics", context=client_ctx(pki),
                                    timeout=CLIENT_TIMEOUT) as resp:
            body = resp.read().decode()
        failures = re.search(r"^marekvs_tls_handshake_failures_total (\S+)$", body, re.M)
        assert failures and float(failures.group(1)) >= 1  # (the plaintext PING above)
        with pytest.raises(OSError):
            urllib.request.urlopen(f"https://127.0.0.1:{metrics}/metrics", context=client_ctx(pki, None),
                                   timeout=CLIENT_TIMEOUT)
    finally:
        n.stop()


def test_a_node_whose_certificate_does_not_load_does_not_start(tmp_path, pki):
    port = free_port()
    n = Node(tmp_path / "data", port=port, extra=["--tls-port", str(free_port()), "--tls-cert-file",
                                                  str(pki / "node1.pem"), "--tls-key-file", str(pki / "node2.key"),
                                                  "--tls-ca-cert-file", str(pki / "ca.pem")])
    with pytest.raises(RuntimeError, match="exited with 1"):
        n.start(timeout=60)
    n.stop()
    assert "Failed to load certificate or private key" in n.log_text()
    assert "Failed to configure TLS. Check logs for more info." in n.log_text()
