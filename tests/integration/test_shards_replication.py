"""Replication between nodes of different shard counts (docs/shards.md §5; issue 33, slice 6).

Real processes and real gRPC: a full mesh of a node of one process, one of 2 shard workers
and one of 3 (``--peers id@host:grpc_port`` as for any node). Each worker's log is a
stream of its own; a sender ships each receiving worker the records of its partitions.

- convergence: one writer per node, each the only writer of its keys, pipelines every
  family (strings with TTLs, bitmaps, hashes, sets, zsets, lists, streams, DEL) while all
  add to shared counters and a shared set; afterwards DEBUG DIGEST is equal everywhere and
  every node holds exactly what the writes define (a model: each key's last write, each
  counter the sum of every node's increments, the shared set the union). An ACL user set
  on one node can AUTH on every worker of every node.
- failure: with ``durability always``, a worker of the 3-worker node (a sender and a
  receiver) and one of the 2-worker node are SIGKILLed while writers write through every
  node; each is restarted by its supervisor, and every acknowledged write ends on every node.
- bootstrap by partition range: a fresh node of 3 workers joins a node of one whose log was
  trimmed (each worker pulls its partitions), replicates both ways, and a fresh node of one
  process then pulls every worker of it (their logs trimmed too).
- Pub/Sub: a subscriber on every worker of every node receives each message PUBLISHed on
  any node exactly once, in each publisher's order.
- contiguous worker ports (``grpc_worker_ports contiguous``): worker i listens on the node's
  gRPC port + 1 + i, and a peer dials it relative to the port it dialled, so a proxy of the
  node's 3 ports carries every link (the links are streaming through it, and cutting it
  stops them: writes wait until it heals); a worker port that is taken stops the node
  before it serves, naming the port, no worker left behind.
- WAIT from a connection on one worker after a write carried to another counts a peer
  only once that worker's log is acknowledged there (a peer stopped with SIGSTOP is not
  counted; once resumed it is); a peer's write wakes a BLPOP and breaks a WATCH of a key of
  another worker than the client's.
"""

from __future__ import annotations

import json
import os
import random
import re
import signal
import socket
import subprocess
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from marekvs.core.partition import ShardMap
from tests.cluster import Cluster, Proxy, info_section, peer_fields, shard_fields, wait_for
from tests.helpers import ROOT, Node, client_of, free_ports
from tests.integration.test_shards import _cmdline, children

pytestmark = pytest.mark.timeout(180)

WORKERS = {1: 1, 2: 2, 3: 3}  # node id -> shard workers
KEYS = 10  # per family and writer
BATCHES = 40
BATCH = 20  # commands per pipeline
COUNTERS = [f"ctr:{i}" for i in range(5)]


def mixed_cluster(tmp_path, **kw) -> Cluster:
    c = Cluster(tmp_path, n=len(WORKERS), start=False,
                per_node_extra={i: ["--shards", str(n)] for i, n in WORKERS.items()}, **kw)
    try:
        return c.start()
    except BaseException:
        c.stop()  # (the nodes that did start: none is left behind)
        raise


def conn_on_worker(port: int, workers: int, worker: int) -> redis.Redis:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        # (no retries: redis-py retries a failed AUTH on a new connection, maybe another worker's)
        c = client_of(port, single_connection_client=True, retry=Retry(NoBackoff(), 0))
        if c.client_id() % workers == worker:
            return c
        c.close()
    raise AssertionError(f"no connection landed on worker {worker}")


class Model:
    """What one writer's writes define, key by key (it is their only writer)."""

    def __init__(self) -> None:
        self.strings: dict[str, bytes] = {}
        self.ttl: set[str] = set()  # strings with a TTL
        self.bits: dict[str, set[int]] = {}
        self.hashes: dict[str, dict[bytes, bytes]] = {}
        self.sets: dict[str, set[bytes]] = {}
        self.zsets: dict[str, dict[bytes, float]] = {}
        self.lists: dict[str, list[bytes]] = {}
        self.streams: dict[str, list[tuple[bytes, bytes]]] = {}  # (id, value)

    def families(self) -> list[dict]:
        return [self.strings, self.bits, self.hashes, self.sets, self.zsets, self.lists, self.streams]

    def delete(self, key: str) -> None:
        for f in self.families():
            f.pop(key, None)
        self.ttl.discard(key)


def writer(c: redis.Redis, w: int, seed: int, model: Model, counters: dict[str, int], shared: set[bytes],
           errors: list[str]) -> None:
    rng = random.Random(seed)
    keys = {f: [f"n{w}:{f}:{i}" for i in range(KEYS)] for f in "sbhtzlx"}
    seqs: dict[str, int] = {}
    try:
        for b in range(BATCHES):
            p = c.pipeline(transaction=False)
            for i in range(BATCH):
                n = b * BATCH + i
                fam = rng.choice("sbhtzlxcd")
                if fam == "c":
                    k, d = rng.choice(COUNTERS), rng.randint(-5, 9)
                    p.incrby(k, d)
                    counters[k] = counters.get(k, 0) + d
                    member = f"{w}-{n}".encode()
                    p.sadd("shared:set", member)
                    shared.add(member)
                    continue
                if fam == "d":
                    k = rng.choice(keys[rng.choice("sbhtzlx")])
                    p.delete(k)
                    model.delete(k)
                    continue
                k = rng.choice(keys[fam])
                v = f"{w}:{n}".encode()
                if fam == "s":
                    if rng.random() < 0.3 and k in model.strings:
                        p.expire(k, 1000)
                        model.ttl.add(k)
                    else:
                        p.set(k, v)
                        model.strings[k] = v
                        model.ttl.discard(k)
                elif fam == "b":
                    bit = rng.randrange(64)
                    p.setbit(k, bit, 1)
                    model.bits.setdefault(k, set()).add(bit)
                elif fam == "h":
                    f = b"f%d" % rng.randrange(4)
                    if rng.random() < 0.2 and k in model.hashes:
                        p.hdel(k, f)
                        model.hashes[k].pop(f, None)
                        if not model.hashes[k]:
                            del model.hashes[k]
                    else:
                        p.hset(k, f, v)
                        model.hashes.setdefault(k, {})[f] = v
                elif fam == "t":
                    m = b"m%d" % rng.randrange(6)
                    if rng.random() < 0.2 and k in model.sets:
                        p.srem(k, m)
                        model.sets[k].discard(m)
                        if not model.sets[k]:
                            del model.sets[k]
                    else:
                        p.sadd(k, m)
                        model.sets.setdefault(k, set()).add(m)
                elif fam == "z":
                    m = b"m%d" % rng.randrange(6)
                    score = float(rng.randint(-50, 50))
                    p.zadd(k, {m: score})
                    model.zsets.setdefault(k, {})[m] = score
                elif fam == "l":
                    if rng.random() < 0.2 and model.lists.get(k):
                        p.lpop(k)
                        model.lists[k].pop(0)
                        if not model.lists[k]:
                            del model.lists[k]
                    else:
                        p.rpush(k, v)
                        model.lists.setdefault(k, []).append(v)
                else:  # stream, with ids of our own
                    seqs[k] = seqs.get(k, 0) + 1
                    if k not in model.streams:
                        seqs[k] = max(seqs[k], n + 1)  # (a stream deleted and made again: ids go on)
                    sid = b"%d-1" % seqs[k]
                    p.xadd(k, {"v": v}, id=sid)
                    model.streams.setdefault(k, []).append((sid, v))
            for r in p.execute(raise_on_error=False):
                if isinstance(r, Exception):
                    errors.append(f"writer {w}: {r!r}")
    except Exception as e:  # noqa: BLE001 - reported by the test
        errors.append(f"writer {w}: {e!r}")


def check_model(c: redis.Redis, model: Model, where: str) -> None:
    for k, v in model.strings.items():
        assert c.get(k) == v, (where, k)
        assert (c.ttl(k) > 0) == (k in model.ttl), (where, k, c.ttl(k))
    for k, bits in model.bits.items():
        assert c.bitcount(k) == len(bits) and all(c.getbit(k, i) for i in bits), (where, k)
    for k, h in model.hashes.items():
        assert c.hgetall(k) == h, (where, k)
    for k, s in model.sets.items():
        assert c.smembers(k) == s, (where, k)
    for k, z in model.zsets.items():
        assert dict(c.zrange(k, 0, -1, withscores=True)) == z, (where, k)
    for k, lst in model.lists.items():
        assert c.lrange(k, 0, -1) == lst, (where, k)
    for k, entries in model.streams.items():
        assert [(i, f[b"v"]) for i, f in c.xrange(k)] == entries, (where, k)


def test_nodes_of_1_2_and_3_workers_converge_to_what_the_writes_define(tmp_path):
    with mixed_cluster(tmp_path) as cluster:
        models = {w: Model() for w in WORKERS}
        counters: dict[int, dict[str, int]] = {w: {} for w in WORKERS}
        shared: dict[int, set[bytes]] = {w: set() for w in WORKERS}
        errors: list[str] = []
        clients = {w: cluster.client(w) for w in WORKERS}
        # a user is a record at its name's partition: a peer ships it to the worker owning it,
        # which passes it on to its siblings (every worker may AUTH it)
        clients[1].acl_setuser("alice", enabled=True, passwords=["+pw"], commands=["+@all"], keys=["*"])
        threads = [threading.Thread(target=writer, args=(clients[w], w, 600 + w, models[w], counters[w], shared[w],
                                                         errors)) for w in WORKERS]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not errors, errors[:5]
        digest = cluster.wait_converged(timeout=60)
        total = {k: sum(cs.get(k, 0) for cs in counters.values()) for k in COUNTERS}
        union = set().union(*shared.values())
        for i in WORKERS:
            c = clients[i]
            assert c.execute_command("DEBUG", "DIGEST") == digest.encode() or str(c.execute_command(
                "DEBUG", "DIGEST")) == digest
            for w, model in models.items():
                check_model(c, model, f"node {i}, writer {w}")
            for k, v in total.items():
                assert int(c.get(k) or 0) == v, (i, k)
            assert c.smembers("shared:set") == union, i
            # INFO replication: every peer streaming, and how many workers it ships to
            fields = peer_fields(c)
            assert sorted(fields) == sorted(j for j in WORKERS if j != i)
            for j, f in fields.items():
                assert f["state"] == "streaming", (i, j, f)
                assert f["workers"] == str(WORKERS[j]), (i, j, f)
            for w in range(WORKERS[i]):
                wait_for(lambda i=i, w=w: _auths(cluster[i].port, WORKERS[i], w, "alice", "pw"), 60,
                         f"alice on worker {w} of node {i}")


def _auths(port: int, workers: int, worker: int, user: str, password: str) -> bool:
    """AUTH through a connection of ``worker`` (a failed AUTH closes it: a new one each try)."""
    with conn_on_worker(port, workers, worker) as c:
        try:
            return bool(c.execute_command("AUTH", user, password))
        except redis.AuthenticationError:
            return False


# -- a worker SIGKILLed mid-shipping ------------------------------------------------------------

def worker_pids(node) -> dict[int, int]:
    """Shard worker index -> pid, of the node's supervisor's children."""
    out = {}
    for pid in children(node.pid):
        try:
            argv = _cmdline(pid)
        except FileNotFoundError:  # (a worker that exited since it was listed: a killed one)
            continue
        if b"--index" in argv:
            out[int(argv[argv.index(b"--index") + 1])] = pid
    return out


class AckedWriter(threading.Thread):
    """SETs keys of its own through one node until stopped, remembering what was acknowledged
    (a write that got an error may or may not have been applied)."""

    def __init__(self, port: int, name: str):
        super().__init__(daemon=True)
        self.port, self.name = port, name
        self.acked: dict[str, str] = {}
        self.stop = threading.Event()

    def run(self) -> None:
        c = None
        n = 0
        while not self.stop.is_set():
            try:
                if c is None:
                    c = client_of(self.port, retry=Retry(NoBackoff(), 0))
                k, v = f"{self.name}:{n}", f"{n}"
                if c.set(k, v):
                    self.acked[k] = v
            except (redis.RedisError, OSError):
                if c is not None:
                    c.close()
                c = None
                time.sleep(0.01)
            n += 1

    def wait_acked(self, more: int, since: int | None = None, timeout: float = 60) -> None:
        base = len(self.acked) if since is None else since
        deadline = time.monotonic() + timeout
        while len(self.acked) < base + more:
            assert time.monotonic() < deadline, f"{self.name}: {len(self.acked) - base} of {more} writes acked"
            time.sleep(0.02)


def kill_worker(node, index: int, shards: int, writer: AckedWriter) -> None:
    """SIGKILL worker ``index`` of ``node``, then wait until it serves again: a new pid, and a
    key of its partitions written through it."""
    old = worker_pids(node)[index]
    os.kill(old, signal.SIGKILL)
    key = next(f"probe:{i}" for i in range(10_000) if ShardMap.even(shards).shard_of_key(b"probe:%d" % i) == index)
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, f"worker {index} of node {node.node_id} did not come back"
        if worker_pids(node).get(index, old) != old:
            try:
                with client_of(node.port, retry=Retry(NoBackoff(), 0)) as c:
                    if c.set(key, "x"):
                        break
            except (redis.RedisError, OSError):
                pass
        time.sleep(0.05)
    writer.wait_acked(100)  # (and shipping goes on)


def test_a_worker_killed_mid_shipping_restarts_and_its_peers_catch_up(tmp_path):
    with mixed_cluster(tmp_path, durability="always") as cluster:
        writers = [AckedWriter(cluster[i].port, f"w{i}") for i in WORKERS]
        for w in writers:
            w.start()
        try:
            for w in writers:
                w.wait_acked(150)
            kill_worker(cluster[3], 1, 3, writers[2])  # a sender and a receiver of 3
            kill_worker(cluster[2], 0, 2, writers[1])
            writers[0].wait_acked(100)
        finally:
            for w in writers:
                w.stop.set()
            for w in writers:
                w.join(30)
        cluster.wait_converged(timeout=60)
        acked = {k: v for w in writers for k, v in w.acked.items()}
        keys = sorted(acked)
        for i in WORKERS:
            with cluster.client(i) as c:
                for j in range(0, len(keys), 500):
                    chunk = keys[j:j + 500]
                    got = c.mget(chunk)
                    lost = [k for k, v in zip(chunk, got) if v != acked[k].encode()]
                    assert not lost, f"node {i} lacks {len(lost)} acknowledged writes: {lost[:5]}"
        assert "exited" in cluster[3].log_text()  # (the supervisor saw its worker die)


# -- bootstrap by partition range ---------------------------------------------------------------

def test_fresh_nodes_bootstrap_by_range_from_nodes_of_another_shard_count_whose_logs_were_trimmed(tmp_path):
    cluster = Cluster(tmp_path, n=1, per_node_extra={1: ["--shards", "1", "--replog-max-entries", "50"]})
    try:
        c1 = cluster.client(1)
        model, counters, shared, errors = Model(), {}, set(), []
        writer(c1, 1, 71, model, counters, shared, errors)
        assert not errors, errors[:5]
        for i in range(100):  # (a log entry each: a pipeline's commands share one)
            c1.set(f"one:{i}", i)
        wait_for(lambda: int(info_section(c1, "replication")["log_first_seq"]) > 1, 30, "node 1 trims its log")
        # a fresh node of 3 workers: each pulls its partitions from node 1
        cluster.add_node(2, peers=[1], extra=["--shards", "3", "--replog-max-entries", "50"])
        assert "bootstrapped" in cluster[2].log_text()
        cluster.wait_converged(timeout=60)
        c2 = cluster.client(2)
        check_model(c2, model, "node 2")
        assert c2.smembers("shared:set") == shared
        # then both ways by shipping: node 1 learnt node 2 from its Hello
        model2, errors = Model(), []
        writer(c2, 2, 72, model2, {}, set(), errors)
        assert not errors, errors[:5]
        c1.set("from1", "x")
        for i in range(300):
            c2.set(f"two:{i}", i)
        cluster.wait_converged(timeout=60)
        check_model(c1, model2, "node 1")
        assert c2.get("from1") == b"x"
        # a fresh node of one process pulls every worker of node 2 (their logs trimmed too)
        wait_for(lambda: all(int(s["log_first_seq"]) > 1 for s in shard_fields(c2)), 30, "node 2 trims its logs")
        cluster.add_node(3, peers=[2], extra=["--shards", "1"])
        cluster.wait_converged(timeout=60)
        c3 = cluster.client(3)
        check_model(c3, model, "node 3")
        check_model(c3, model2, "node 3")
        assert c3.get("from1") == b"x" and c3.get("two:299") == b"299" and c3.get("one:99") == b"99"
        assert "bootstrapped" in cluster[3].log_text()
    finally:
        cluster.stop()


# -- Pub/Sub relay ------------------------------------------------------------------------------

def sock_on_worker(port: int, workers: int, worker: int) -> socket.socket:
    """A raw connection the kernel gave to ``worker`` of a node of ``workers`` (CLIENT ID %
    workers names it)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"CLIENT ID\r\n")
        got = b""
        while not got.endswith(b"\r\n"):
            got += s.recv(100)
        if int(got[1:-2]) % workers == worker:
            return s
        s.close()
    raise AssertionError(f"no connection landed on worker {worker}")


def test_publish_on_any_worker_reaches_subscribers_on_every_worker_of_every_node(tmp_path):
    with mixed_cluster(tmp_path) as cluster:
        subs = {(i, w): sock_on_worker(cluster[i].port, n, w) for i, n in WORKERS.items() for w in range(n)}
        got = {k: b"" for k in subs}
        for s in subs.values():
            s.sendall(b"SUBSCRIBE room\r\n")
        for k, s in subs.items():
            while not got[k].endswith(b":1\r\n"):
                got[k] += s.recv(1000)
            got[k] = b""
            s.settimeout(0.05)

        def drain() -> None:
            for k, s in subs.items():
                try:
                    while True:
                        d = s.recv(65536)
                        assert d, f"subscriber {k} closed"
                        got[k] += d
                except TimeoutError:
                    pass

        # publishers on the last worker of each node; the relay streams open with the links:
        # probes until every subscriber has had one from every node
        pubs = {i: sock_on_worker(cluster[i].port, n, n - 1) for i, n in WORKERS.items()}
        deadline = time.monotonic() + 60
        while not all(b"probe%d" % i in g for g in got.values() for i in pubs):
            assert time.monotonic() < deadline, {k: g[-200:] for k, g in got.items()}
            for i, p in pubs.items():
                p.sendall(b"PUBLISH room probe%d\r\n" % i)
            drain()
        for g in got:
            got[g] = b""
        for i, p in pubs.items():
            p.sendall(b"".join(b"PUBLISH room m%d-%03d\r\n" % (i, j) for j in range(50)))
        deadline = time.monotonic() + 60
        while not all(b"m%d-049" % i in g for g in got.values() for i in pubs):
            assert time.monotonic() < deadline, {k: g[-200:] for k, g in got.items()}
            drain()
        drain()
        for k, g in got.items():
            for i in pubs:
                seen = re.findall(rb"m%d-\d{3}" % i, g)
                # each message once, in publish order (one publisher's: one stream per peer)
                assert seen == [b"m%d-%03d" % (i, j) for j in range(50)], (k, i, seen[:10])
        for s in [*subs.values(), *pubs.values()]:
            s.close()


# -- WAIT ----------------------------------------------------------------------------------------

def test_wait_counts_a_peer_once_every_worker_the_client_wrote_to_is_acknowledged(tmp_path):
    with mixed_cluster(tmp_path) as cluster:
        cluster.wait_streaming()
        shards = ShardMap.even(3)
        on = {w: next(f"k{w}:{i}" for i in range(10_000) if shards.shard_of_key(b"k%d:%d" % (w, i)) == w)
              for w in range(3)}
        c = conn_on_worker(cluster[3].port, 3, 0)
        for w in range(3):
            c.set(on[w], "a")
        assert c.execute_command("WAIT", 2, 30_000) == 2
        os.kill(cluster[1].pid, signal.SIGSTOP)  # node 1 (one process) acknowledges nothing now
        try:
            c.set(on[2], "b")  # a write on worker 2 only, from a connection on worker 0
            t0 = time.monotonic()
            assert c.execute_command("WAIT", 2, 300) == 1  # node 2 only: node 1 has not acked worker 2's
            assert time.monotonic() - t0 >= 0.29
            assert c.execute_command("WAIT", 1, 30_000) == 1
        finally:
            os.kill(cluster[1].pid, signal.SIGCONT)
        assert c.execute_command("WAIT", 2, 30_000) == 2
        assert cluster.client(1).get(on[2]) == b"b"
        with pytest.raises(redis.ResponseError, match="timeout is negative"):
            c.execute_command("WAIT", 1, -1)
        # a peer's write wakes a client blocked on a key of another worker, and breaks a
        # WATCH of such a key (the owner applies it through its change feed, as a local write)
        got: list = []
        blocked = threading.Thread(target=lambda: got.append(c.blpop([f"{on[2]}:list"], 60)))
        blocked.start()
        c1, c3 = cluster.client(1), cluster.client(3)
        wait_for(lambda: c3.info("clients")["blocked_clients"] == 1, 60, "the BLPOP blocked")
        c1.rpush(f"{on[2]}:list", "x")
        blocked.join(60)
        assert got == [(f"{on[2]}:list".encode(), b"x")]
        w = conn_on_worker(cluster[3].port, 3, 0)
        w.execute_command("WATCH", on[1])
        c1.set(on[1], "from-a-peer")
        wait_for(lambda: w.get(on[1]) == b"from-a-peer", 60, "the peer's SET on node 3")
        w.execute_command("MULTI")
        w.execute_command("SET", on[1], "mine")
        assert w.execute_command("EXEC") is None  # aborted: the watched key changed
        assert c.get(on[1]) == b"from-a-peer"
        w.close()
        c.close()


def test_contiguous_worker_ports_carry_every_link_through_a_proxy_of_the_node_range(tmp_path):
    """Node 2 (2 workers, contiguous ports G, G+1, G+2) is reached by node 1 (one process)
    only through a proxy of L, L+1, L+2 in front of them: its Hello names the offsets, so node
    1's links to both workers go through the proxy, and cutting it cuts the links (with
    ephemeral ports node 1 dialled the workers' own ports: a cut at the node port left
    them streaming)."""
    grpc2, listen = free_ports(3), free_ports(3)
    proxy = Proxy(listen_port=listen, target_port=grpc2, span=3).start()
    c = Cluster(tmp_path, n=2, start=False, links={(1, 2): listen},
                per_node_extra={1: ["--shards", "1"], 2: ["--shards", "2", "--grpc-worker-ports", "contiguous"]})
    try:
        c.nodes[2].grpc_port = grpc2
        for i in c.ids:
            c.nodes[i].extra = c.node_args(i)
        c.start()
        ports = sorted(json.loads(f.read_text())["port"] for f in (c[2].data_dir / "shards").glob("*.grpc"))
        assert ports == [grpc2 + 1, grpc2 + 2]
        c.wait_streaming()
        assert all(proxy.accepted_on[1:])  # each worker's link came through the proxy
        shards = ShardMap.even(2)
        keys = [next(f"k{w}:{i}" for i in range(10_000) if shards.shard_of_key(b"k%d:%d" % (w, i)) == w)
                for w in range(2)]
        a, b = c.client(1), c.client(2)
        for k in keys:
            a.set(k, "1")
        wait_for(lambda: all(b.get(k) == b"1" for k in keys), 60, "node 1's writes on both workers of node 2")
        proxy.cut()
        wait_for(lambda: peer_fields(a).get(2, {}).get("state") not in (None, "streaming"), 60,
                 lambda: f"node 1's links to node 2 seen down: {peer_fields(a)}")
        for k in keys:
            a.set(k, "2")
        a.execute_command("WAIT", 1, 500)  # (nothing can acknowledge them: only a pause here)
        assert [b.get(k) for k in keys] == [b"1", b"1"]
        proxy.heal()
        wait_for(lambda: all(b.get(k) == b"2" for k in keys), 60, "the writes after the heal")
        assert c.wait_converged(60)
    finally:
        c.stop()
        proxy.close()


def test_a_taken_contiguous_worker_port_stops_the_node_before_it_serves(tmp_path):
    grpc = free_ports(3)
    n = Node(tmp_path / "d", grpc_port=grpc, extra=["--shards", "2", "--grpc-worker-ports", "contiguous"])
    held = socket.socket()
    held.bind(("127.0.0.1", grpc + 2))  # worker 1's port
    held.listen(1)
    try:
        r = subprocess.run(n.args(), cwd=str(ROOT), env=dict(os.environ, PYTHONPATH=str(ROOT)),
                           capture_output=True, text=True, timeout=120)
    finally:
        held.close()
    assert r.returncode == 1
    assert f"the gRPC port of shard worker 1: {grpc + 2} (grpc_port + 1 + worker) is in use" in r.stderr
    assert "listening on" not in r.stderr
    # and free, the same node starts (every worker on its port)
    n.start()
    try:
        assert n.client().ping()
    finally:
        n.stop()


def test_a_copy_across_workers_writes_the_records_one_process_writes(tmp_path):
    """COPY of a list whose source and destination are on two workers writes what one
    process writes (commands/keys.py): each element at its own position, not a DUMP's
    value rebuilt from the list's center. The positions decide how a push made on a peer
    that has not seen the copy merges with it: here [x y z] copied over dst [a], and b
    pushed right of [a] on node 2 after the copy, in the copy's partition, merge to
    [x y z b] as on one process (rebuilt positions put b on y's: [x b z]). The history test
    on three nodes of two workers found it."""
    shards = ShardMap.even(2)
    src = next(f"src{i}" for i in range(10_000) if shards.shard_of_key(b"src%d" % i) == 0)
    dst = next(f"dst{i}" for i in range(10_000) if shards.shard_of_key(b"dst%d" % i) == 1)
    with Cluster.with_proxies(tmp_path, [(1, 2)], n=2, extra=["--antientropy-interval", "0"],
                              per_node_extra={1: ["--shards", "2"], 2: ["--shards", "1"]}) as c:
        c.wait_streaming(60)
        a, b = c.client(1), c.client(2)
        a.lpush(src, "z", "y", "x")  # (pushed left: x y z below the center)
        a.rpush(dst, "a")
        c.wait_converged(60)
        c.proxy(1, 2).cut()
        wait_for(lambda: peer_fields(a).get(2, {}).get("state") not in (None, "streaming"), 60,
                 lambda: f"node 1's links to node 2 seen down: {peer_fields(a)}")
        assert a.copy(src, dst, replace=True)
        after = time.time_ns() // 1_000_000 + 2
        while time.time_ns() // 1_000_000 < after:  # (node 2's push stamped in a later millisecond)
            pass
        assert b.rpush(dst, "b") == 2
        c.proxy(1, 2).heal()
        c.wait_converged(60)
        for cl in (a, b):
            assert cl.lrange(dst, 0, -1) == [b"x", b"y", b"z", b"b"]
