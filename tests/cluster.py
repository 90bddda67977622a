"""Multi-node test harness: a loopback cluster of real ``marekvs serve`` processes and a
fault-injecting TCP proxy to put between two of them.

``Cluster(tmp_path, n=3)`` allocates RESP and gRPC ports for every node up front, so each
node's ``--peers`` can list the others before any of them runs, and starts them all with
the same ``--cluster-secret``. ``links={(a, b): port}`` makes node ``a`` reach node ``b``
through ``port`` instead of ``b``'s gRPC port; ``Cluster.with_proxies(...)`` builds a
``Proxy`` per directed link that way, so ``cluster.proxy(1, 2).cut()`` breaks node 1's
outbound link to node 2 (the ``1->2`` shipping stream and everything node 1 asks node 2).

``wait_converged`` is the one convergence oracle of the replication tests: it polls
``DEBUG DIGEST`` on every running node until all digests are equal and stay equal for
one more poll, and on timeout fails with every node's digest and ``INFO replication``.

Tests that need something to happen *while* something else goes on (writes during a
join, a cut, a restart) wait for events, never for a fixed time or a fixed number of
operations: ``wait_for`` polls a condition under a generous deadline, ``wait_links``
waits until links show as up or down in INFO replication, and a ``Writer`` writes until
it is halted, with ``wait_acked``/``wait_more`` to wait until it has had writes
acknowledged after an event. That holds on a fast machine and on a loaded one.

Every process and proxy is started by the test and stopped by its own handle (pid /
socket), never by name.
"""

from __future__ import annotations

import select
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Self

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.helpers import START_TIMEOUT, Node, free_port, free_ports, grpc_port_range, node_shards

SECRET = "test-cluster-secret"

# -- fault-injecting proxy -----------------------------------------------------------------
class Proxy:
    """A TCP forwarder on 127.0.0.1:``listen_port`` to 127.0.0.1:``target_port``; with
    ``span`` n, on the n contiguous ports from ``listen_port`` to the n from ``target_port``
    (port k to port k: a node of N shard workers with ``grpc_worker_ports contiguous``
    serves its gRPC port and its workers' N ports after it, and a peer dials the workers
    relative to the port it dialled, so one proxy of span N+1 carries every link to it).

    ``cut()`` drops every open connection and, until ``heal()``, refuses new ones (accept
    then immediately reset: the client sees the connection fail) or, with
    ``mode="blackhole"``, accepts them and silently swallows their bytes (the client sees
    a hang until its own deadline). ``stall()`` keeps the open connections but forwards
    nothing either way from then on (a peer that hangs: the link looks up, nothing
    arrives, nothing is acknowledged); ``heal()`` then drops them so clients redial. Each
    applies to every port of the span. One thread accepts, two threads pump each
    connection.
    """

    def __init__(self, listen_port: int | None = None, target_port: int = 0, host: str = "127.0.0.1",
                 span: int = 1):
        self.host = host
        self.span = span
        self.listen_port = listen_port or free_ports(span)
        self.target_port = target_port
        self.mode = "forward"  # forward | refuse | blackhole | stall
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._socks: list[socket.socket] = []
        self._thread: threading.Thread | None = None
        self._closed = False
        self.accepted = 0
        self.accepted_on = [0] * span  # per port of the span
        self.bytes_forwarded = 0

    @property
    def port(self) -> int:
        return self.listen_port

    def start(self) -> Proxy:
        for k in range(self.span):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((self.host, self.listen_port + k))
            s.listen(64)
            self._socks.append(s)
        self._thread = threading.Thread(target=self._accept_loop, name=f"proxy-{self.listen_port}", daemon=True)
        self._thread.start()
        return self

    def _accept_loop(self) -> None:
        while not self._closed:
            try:
                ready, _, _ = select.select(self._socks, [], [], 0.2)
            except (OSError, ValueError):  # (closed)
                return
            for sock in ready:
                k = self._socks.index(sock)
                try:
                    client, _ = sock.accept()
                except OSError:
                    if self._closed:
                        return
                    continue
                self._serve(client, k)

    def _serve(self, client: socket.socket, k: int) -> None:
        self.accepted += 1
        self.accepted_on[k] += 1
        mode = self.mode
        if mode == "refuse":
            _reset(client)
            return
        if mode in ("blackhole", "stall"):
            self._track(client)
            threading.Thread(target=self._swallow, args=(client,), daemon=True).start()
            return
        try:
            upstream = socket.create_connection((self.host, self.target_port + k), timeout=2)
            upstream.settimeout(None)
        except OSError:
            _reset(client)
            return
        client.settimeout(None)
        for s in (client, upstream):
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._track(s)
        threading.Thread(target=self._pump, args=(client, upstream), daemon=True).start()
        threading.Thread(target=self._pump, args=(upstream, client), daemon=True).start()

    def _track(self, s: socket.socket) -> None:
        with self._lock:
            self._conns.add(s)

    def _untrack_close(self, s: socket.socket) -> None:
        with self._lock:
            self._conns.discard(s)
        try:
            s.close()
        except OSError:
            pass

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                data = src.recv(65536)
                if data and self.mode == "stall":
                    continue  # held open, never delivered
                if not data or self.mode != "forward":
                    break
                dst.sendall(data)
                self.bytes_forwarded += len(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                self._untrack_close(s)

    def _swallow(self, s: socket.socket) -> None:
        try:
            while self.mode in ("blackhole", "stall") and s.recv(65536):
                pass
        except OSError:
            pass
        finally:
            self._untrack_close(s)

    def _drop_all(self) -> None:
        with self._lock:
            conns = list(self._conns)
            self._conns.clear()
        for s in conns:
            _reset(s)

    def cut(self, mode: str = "refuse") -> None:
        assert mode in ("refuse", "blackhole")
        self.mode = mode
        self._drop_all()

    def stall(self) -> None:
        self.mode = "stall"

    def heal(self) -> None:
        was = self.mode
        self.mode = "forward"
        if was in ("blackhole", "stall"):
            self._drop_all()  # held connections never forwarded anything: let clients redial

    def close(self) -> None:
        self._closed = True
        self.mode = "refuse"
        self._drop_all()
        if self._thread is not None:
            self._thread.join(2)
        for sock in self._socks:
            sock.close()


def _reset(s: socket.socket) -> None:
    """Close with RST (SO_LINGER 0) so the other end sees the link die at once."""
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
    except OSError:
        pass
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass


# -- cluster ---------------------------------------------------------------------------------
class ConvergenceTimeout(AssertionError):
    pass


def info_section(client, section: str) -> dict[str, str]:
    """INFO <section> as a flat dict of raw strings (redis-py's parser turns
    ``a=1,b=2`` values into dicts and numbers; the tests want the text)."""
    pool = client.connection_pool
    try:
        conn = pool.get_connection()
    except TypeError:  # redis-py < 5.3 wants the command name
        conn = pool.get_connection("INFO")
    try:
        conn.send_command("INFO", section)
        raw = conn.read_response()
    finally:
        pool.release(conn)
    if isinstance(raw, str):
        raw = raw.encode()
    out = {}
    for line in raw.decode().splitlines():
        if line and not line.startswith("#") and ":" in line:
            k, v = line.split(":", 1)
            out[k] = v.strip()
    return out


def peer_fields(client) -> dict[int, dict[str, str]]:
    """INFO replication's ``peerN`` lines keyed by peer node id."""
    out = {}
    for k, v in info_section(client, "replication").items():
        if k.startswith("peer") and k[4:].isdigit():
            d = dict(item.split("=", 1) for item in v.split(","))
            out[int(d["id"])] = d
    return out


def shard_fields(client) -> list[dict[str, str]]:
    """INFO replication's ``shard<j>`` lines (each worker's log of a node of shard workers),
    in worker order; a node of one process: its own fields, as one."""
    info = info_section(client, "replication")
    lines = sorted((int(k[5:]), v) for k, v in info.items() if k.startswith("shard") and k[5:].isdigit())
    return [dict(item.split("=", 1) for item in v.split(",")) for _, v in lines] or [info]


class Cluster:
    """``n`` nodes with ids 1..n on loopback, full mesh.

    ``links`` maps a directed pair ``(a, b)`` to the port node ``a`` dials for node ``b``
    (default: ``b``'s gRPC port). ``per_node_extra`` adds flags to one node only.
    ``start=False`` only builds the nodes (start them with ``start_node``).
    """

    def __init__(self, tmp_path: Path, n: int = 3, extra: Iterable[str] = (), durability: str = "everysec",
                 secret: str = SECRET, per_node_extra: dict[int, list[str]] | None = None,
                 links: dict[tuple[int, int], int] | None = None, start: bool = True,
                 ids: Iterable[int] | None = None):
        self.tmp_path = Path(tmp_path)
        self.secret = secret
        self.durability = durability
        self.extra = list(extra)
        self.per_node_extra = dict(per_node_extra or {})
        self.links = dict(links or {})
        self.ids = list(ids) if ids is not None else list(range(1, n + 1))
        self.proxies: dict[tuple[int, int], Proxy] = {}
        self.nodes: dict[int, Node] = {}
        ports = {i: (free_port(), grpc_port_range()) for i in self.ids}
        for i in self.ids:
            port, gport = ports[i]
            self.nodes[i] = Node(self.tmp_path / f"data{i}", port=port, node_id=i, durability=durability,
                                 grpc_port=gport)
        for i in self.ids:
            self.nodes[i].extra = self.node_args(i)
        if start:
            self.start()

    @classmethod
    def with_proxies(cls, tmp_path: Path, pairs: Iterable[tuple[int, int]], **kw) -> Cluster:
        """A cluster whose directed links ``pairs`` each go through their own Proxy
        (``cluster.proxy(a, b)``; for a node ``b`` of shard workers, one spanning its
        gRPC port and its workers', so cutting it cuts every link of ``a`` to ``b``).
        Proxies start before the nodes."""
        kw_start = kw.pop("start", True)
        c = cls(tmp_path, start=False, **kw)
        for a, b in pairs:
            # a node of N shard workers: its gRPC port and its workers' N after it (test_shards)
            n = node_shards(c.nodes[b].extra)
            p = Proxy(target_port=c.nodes[b].grpc_port, span=n + 1 if n > 1 else 1).start()
            c.proxies[(a, b)] = p
            c.links[(a, b)] = p.port
        for i in c.ids:
            c.nodes[i].extra = c.node_args(i)
        if kw_start:
            c.start()
        return c

    # -- wiring --------------------------------------------------------------------------
    def peer_spec(self, a: int, b: int) -> str:
        port = self.links.get((a, b), self.nodes[b].grpc_port)
        return f"{b}@127.0.0.1:{port}"

    def node_args(self, i: int, peers: Iterable[int] | None = None) -> list[str]:
        others = [j for j in (self.ids if peers is None else peers) if j != i]
        args = ["--cluster-secret", self.secret, *self.extra, *self.per_node_extra.get(i, [])]
        if others:
            args += ["--peers", ",".join(self.peer_spec(i, j) for j in others)]
        return args

    def add_node(self, node_id: int, peers: Iterable[int] | None = None, extra: Iterable[str] = (),
                 start: bool = True) -> Node:
        """A new node whose --peers lists ``peers`` (default: all current nodes); the
        current nodes are not told about it (they learn it from its Hello)."""
        peers = list(self.ids if peers is None else peers)
        n = Node(self.tmp_path / f"data{node_id}", node_id=node_id, durability=self.durability)
        self.nodes[node_id] = n
        self.ids.append(node_id)
        self.per_node_extra[node_id] = list(extra)
        n.extra = self.node_args(node_id, peers)
        if start:
            n.start()
        return n

    def proxy(self, a: int, b: int) -> Proxy:
        return self.proxies[(a, b)]

    # -- life cycle ----------------------------------------------------------------------
    def start(self) -> Cluster:
        """Start every node at once: a fresh node waits (up to 3 s per peer) to bootstrap
        from its peers, so starting them one by one would cost seconds per node."""
        errors: list[BaseException] = []

        def run(i: int) -> None:
            try:
                self.start_node(i)
            except (RuntimeError, TimeoutError, OSError) as e:  # re-raised below
                errors.append(e)

        threads = [threading.Thread(target=run, args=(i,)) for i in self.ids]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        return self

    def start_node(self, i: int, timeout: float = START_TIMEOUT) -> Node:
        n = self.nodes[i]
        try:
            n.start(timeout=timeout)
        except (RuntimeError, TimeoutError) as e:
            raise RuntimeError(f"node {i} did not start: {e}\n--- its log ---\n{n.log_text()[-3000:]}") from None
        return n

    def kill9(self, i: int) -> None:
        """SIGKILL node ``i`` and reap it (its data dir and ports stay for a restart)."""
        self.nodes[i].kill9()
        self.nodes[i].stop()

    def restart_node(self, i: int, wipe: bool = False, timeout: float = START_TIMEOUT) -> Node:
        """Stop node ``i`` (SIGTERM) and start it again on the same ports and id;
        ``wipe=True`` removes its data directory in between (a new incarnation)."""
        n = self.nodes[i]
        n.stop()
        if wipe:
            shutil.rmtree(n.data_dir, ignore_errors=True)
        return self.start_node(i, timeout)

    def stop(self) -> None:
        for n in self.nodes.values():
            try:
                n.stop()
            except (OSError, subprocess.SubprocessError) as e:
                print(f"stopping node {n.node_id} failed: {e!r}")
        for p in self.proxies.values():
            p.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __getitem__(self, i: int) -> Node:
        return self.nodes[i]

    def running(self) -> list[int]:
        return [i for i, n in self.nodes.items() if n.proc is not None and n.proc.poll() is None]

    def client(self, i: int, **kw):
        return self.nodes[i].client(**kw)

    # -- oracles -------------------------------------------------------------------------
    def digests(self, ids: Iterable[int] | None = None) -> dict[int, str]:
        out = {}
        for i in (self.running() if ids is None else ids):
            try:
                with self.client(i, socket_timeout=5) as c:
                    d = c.execute_command("DEBUG", "DIGEST")
                out[i] = d.decode() if isinstance(d, bytes) else str(d)
            except (redis.RedisError, OSError) as e:  # a node restarting: report it, keep polling
                out[i] = f"<error {e!r}>"
        return out

    def wait_converged(self, timeout: float = 30.0, ids: Iterable[int] | None = None,
                       interval: float = 0.1) -> str:
        """Poll DEBUG DIGEST on every (running) node until all are equal twice in a row;
        return the digest. On timeout raise with each node's digest and INFO replication."""
        ids = list(self.running() if ids is None else ids)
        deadline = time.monotonic() + timeout
        prev = None
        last: dict[int, str] = {}
        self.last_converge_s = None
        t0 = time.monotonic()
        while time.monotonic() < deadline:
            last = self.digests(ids)
            vals = set(last.values())
            if len(vals) == 1 and not next(iter(vals)).startswith("<error"):
                d = next(iter(vals))
                if prev == d:
                    self.last_converge_s = time.monotonic() - t0
                    return d
                prev = d
            else:
                prev = None
            time.sleep(interval)
        report = [f"no convergence after {timeout}s; digests: {last}"]
        for i in ids:
            try:
                with self.client(i, socket_timeout=5) as c:
                    rep = info_section(c, "replication")
                report.append(f"node {i} INFO replication: {rep}")
            except (redis.RedisError, OSError) as e:
                report.append(f"node {i}: INFO failed: {e!r}")
        raise ConvergenceTimeout("\n".join(report) + self.exited_report())

    def info(self, i: int, section: str = "replication") -> dict[str, str]:
        with self.client(i) as c:
            return info_section(c, section)

    def peers(self, i: int) -> dict[int, dict[str, str]]:
        with self.client(i) as c:
            return peer_fields(c)

    def wait_streaming(self, timeout: float = 20.0, ids: Iterable[int] | None = None) -> None:
        """Wait until every node's every known peer link is in state ``streaming``."""
        ids = list(self.running() if ids is None else ids)
        deadline = time.monotonic() + timeout
        states = {}
        while time.monotonic() < deadline:
            states = {i: {p: d["state"] for p, d in self.peers(i).items()} for i in ids}
            if all(s == "streaming" for st in states.values() for s in st.values()) and all(
                    set(st) >= set(ids) - {i} for i, st in states.items()):
                return
            time.sleep(0.1)
        raise AssertionError(f"links not all streaming after {timeout}s: {states}{self.exited_report()}")

    def exited_report(self) -> str:
        """Exit code and log tail of every started node that is no longer running."""
        out = []
        for i, n in self.nodes.items():
            if n.proc is not None and n.proc.poll() is not None:
                out.append(f"\n--- node {i} exited with {n.proc.returncode}; its log ---\n{n.log_text()[-3000:]}")
        return "".join(out)


# -- waiting for events ---------------------------------------------------------------------
def wait_for(pred, timeout: float, what, interval: float = 0.05):
    """Poll ``pred()`` until it returns something truthy and return that. On timeout raise
    an AssertionError naming ``what`` (a string, or a callable giving one, so it can show
    the state it last saw). The replication tests wait for the events they need with
    this (a link seen down, writes acknowledged after it) instead of sleeping a fixed time
    and hoping: deadlines are generous, and an idle machine does not pay them."""
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout}s waiting for {what() if callable(what) else what}")
        time.sleep(interval)


def link_state(cluster: Cluster, i: int, peer: int) -> str:
    """The state of node ``i``'s link to ``peer`` in its INFO replication ("streaming",
    "down", ...; "<unknown>" while node ``i`` does not know ``peer``)."""
    return cluster.peers(i).get(peer, {}).get("state", "<unknown>")


def wait_links(cluster: Cluster, links: Iterable[tuple[int, int]], up: bool, timeout: float = 30.0) -> None:
    """Wait until every directed link ``(i, peer)`` shows as streaming (``up``) or as not
    streaming (not ``up``) in node ``i``'s INFO replication."""
    links = list(links)
    seen: dict[tuple[int, int], str] = {}

    def check() -> bool:
        seen.update({(i, j): link_state(cluster, i, j) for i, j in links})
        return all((seen[lk] == "streaming") == up for lk in links)

    wait_for(check, timeout, lambda: f"links {'up' if up else 'down'}: last seen {seen}{cluster.exited_report()}")


# -- load ----------------------------------------------------------------------------------
class Writer(threading.Thread):
    """Writes unique keys ``<prefix>:<n>`` = ``<prefix>-<n>`` to one node, one SET per
    round trip, and records each acknowledged one. Connection errors (a killed node) are
    not acknowledged writes: the writer redials.

    By default it writes until ``stop`` is set (``halt()``): a test that needs writes to
    go on during something (a join, a cut, a restart) lets it run, observes that thing
    happen, then waits with ``wait_acked`` until the writer has had more writes
    acknowledged after it, and only then stops it. ``max_s`` is only a safety bound (a
    writer that hits it makes the waits fail, saying so); ``max_ops`` bounds the count."""

    def __init__(self, cluster: Cluster, node: int, prefix: str, max_ops: int | None = None, max_s: float = 100.0):
        super().__init__(daemon=True)
        self.cluster, self.node, self.prefix = cluster, node, prefix
        self.max_ops, self.max_s = max_ops, max_s
        self.acked: dict[str, str] = {}
        self.failed = 0
        self.ops = 0  # attempted (acknowledged, refused or failed)
        self.stop = threading.Event()

    @property
    def n_acked(self) -> int:
        return len(self.acked)

    def run(self) -> None:
        deadline = time.monotonic() + self.max_s
        client = None
        n = 0
        while ((self.max_ops is None or n < self.max_ops) and not self.stop.is_set()
               and time.monotonic() < deadline):
            key, val = f"{self.prefix}:{n}", f"{self.prefix}-{n}"
            try:
                if client is None:
                    client = self.cluster.client(self.node, socket_timeout=3, socket_connect_timeout=1,
                                                 retry=Retry(NoBackoff(), 0))  # see every failure
                if client.set(key, val) is True:
                    self.acked[key] = val
                n += 1
            except (redis.ConnectionError, redis.TimeoutError):
                self.failed += 1
                n += 1  # the key may or may not be written: never reuse it
                client = None
                time.sleep(0.05)
            self.ops = n
        if client is not None:
            client.close()

    def wait_acked(self, n: int, timeout: float = 60.0, what: str = "") -> int:
        """Wait until at least ``n`` writes are acknowledged; return the count. Fails at
        once if the writer has ended (its bound hit) before that."""
        def check() -> int | bool:
            if self.n_acked >= n:
                return self.n_acked
            if not self.is_alive():
                raise AssertionError(f"writer {self.prefix} on node {self.node} ended after {self.ops} ops "
                                     f"({self.n_acked} acked, {self.failed} failed) before {n} acked {what}")
            return False

        return wait_for(check, timeout, lambda: f"{n} writes acknowledged by node {self.node} {what} "
                        f"(writer {self.prefix}: {self.n_acked} acked, {self.failed} failed)")

    def wait_more(self, n: int, timeout: float = 60.0, what: str = "") -> int:
        """Wait until ``n`` more writes than now are acknowledged."""
        return self.wait_acked(self.n_acked + n, timeout, what)

    def wait_failed(self, n: int = 1, timeout: float = 60.0, what: str = "") -> int:
        return wait_for(lambda: self.failed >= n and self.failed, timeout,
                        f"{n} failed writes on node {self.node} {what} (writer {self.prefix}: {self.failed})")

    def halt(self, timeout: float = 30.0) -> None:
        self.stop.set()
        self.join(timeout)
        assert not self.is_alive(), f"writer {self.prefix} on node {self.node} did not stop"


def missing_writes(cluster: Cluster, node: int, expected: dict[str, str]) -> dict[str, object]:
    """The keys of ``expected`` that node ``node`` does not hold with exactly that value."""
    keys = list(expected)
    got = {}
    with cluster.client(node) as c:
        for i in range(0, len(keys), 500):
            chunk = keys[i:i + 500]
            got.update(zip(chunk, c.mget(chunk)))
    return {k: got[k] for k in keys if got[k] != expected[k].encode()}
