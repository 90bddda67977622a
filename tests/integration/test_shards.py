"""Shard workers, EXPERIMENTAL (docs/shards.md slice 2): a ``--shards 2`` node of real
processes (a supervisor and two workers) against redis-py.

Keys on both workers from connections on either; a pipeline alternating workers keeps its
order (a second client never sees ``ready`` without ``data``); what is not carried across
workers yet gets the documented error; SIGTERM and SIGKILL of the supervisor leave no
process behind (the process tree read from /proc); a SIGKILLed worker comes back on its
data while its partitions answer LOADING at once.

A connection's worker is ``CLIENT ID % 2`` (ids are ``worker + k * shards``); the kernel
spreads connections over the workers (SO_REUSEPORT), so ``client_on`` connects until it
lands on the one it wants.
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from marekvs import config as cfgmod
from marekvs.core.partition import ShardMap, partition_of
from tests.helpers import ROOT, Node, children, client_of

SHARDS = 2
OWNER = ShardMap.even(SHARDS).owner
DEADLINE = 120.0


def worker_of(key: str) -> int:
    return OWNER[partition_of(key.encode())]


def keys_on(worker: int, n: int, prefix: str) -> list[str]:
    out = []
    i = 0
    while len(out) < n:
        k = f"{prefix}{i}"
        if worker_of(k) == worker:
            out.append(k)
        i += 1
    return out


def client_on(port: int, worker: int, **kw) -> redis.Redis:
    """A client whose connection the kernel gave to ``worker`` (one connection: no pool
    may open a second one elsewhere)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        # (no retries: redis-py retries a LOADING reply, with back-off, as a connection error)
        try:
            c = client_of(port, single_connection_client=True, retry=Retry(NoBackoff(), 0), **kw)
        except redis.ConnectionError:  # (a connection the kernel gave a worker that just died)
            continue
        try:
            if c.client_id() % SHARDS == worker:
                return c
        except redis.ConnectionError:
            pass
        c.close()
    raise AssertionError(f"no connection landed on worker {worker}")


def writers_then_readers(writers: list[threading.Thread], readers: list[threading.Thread],
                         stop: threading.Event) -> None:
    """Run writer and reader threads together until the writers end, then stop the readers
    (each joined with a generous deadline: the caller checks none is left alive)."""
    for t in writers + readers:
        t.start()
    for t in writers:
        t.join(DEADLINE)
    stop.set()
    for t in readers:
        t.join(DEADLINE)


def wait_until(pred, what: str, timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def run_until(threads: list[threading.Thread], stop: threading.Event, pred, what: str) -> None:
    """Start ``threads``, wait for ``pred()``, then set ``stop`` and join them."""
    for t in threads:
        t.start()
    try:
        wait_until(pred, what)
    finally:
        stop.set()
        for t in threads:
            t.join(DEADLINE)


def alive(pid: int) -> bool:
    """Running (a zombie, dead and not yet reaped, is not)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def gone(pid: int) -> bool:
    """Dead, every thread of it: a killed process's leader is a zombie ('Z') while its
    other threads (RocksDB's, gRPC's) still exit, and they hold its descriptors until then
    (its listening sockets too: a connection the kernel hands them meanwhile is reset)."""
    try:
        return not alive(pid) and len(os.listdir(f"/proc/{pid}/task")) <= 1
    except OSError:
        return True


def start(tmp_path, durability: str = "no") -> Node:
    n = Node(tmp_path / "data", durability=durability, extra=["--shards", str(SHARDS)]).start()
    workers = wait_until(lambda: len(children(n.pid)) == SHARDS and children(n.pid), "the workers")
    assert len(workers) == SHARDS
    return n


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = start(tmp_path_factory.mktemp("shards"))
    yield n
    n.stop()


@pytest.mark.parametrize("protocol", [2, 3])
def test_single_key_commands_on_both_workers(node, protocol):
    a, b = client_on(node.port, 0, protocol=protocol), client_on(node.port, 1, protocol=protocol)
    p = f"p{protocol}:"
    for w in (0, 1):
        s, c, h, z, x, lst, st = (keys_on(w, 1, p + kind)[0] for kind in ("s", "c", "h", "z", "x", "l", "st"))
        for me, other in ((a, b), (b, a)):
            assert me.set(s, "v" * 100)
            assert other.get(s) == b"v" * 100
            assert me.incr(c) in (1, 12) and other.incrby(c, 10) in (11, 22)
            assert me.hset(h, mapping={"f1": "1", "f2": "2"}) in (0, 2)
            assert other.hgetall(h) == {b"f1": b"1", b"f2": b"2"}
            assert me.zadd(z, {"a": 1.5, "b": 2}) in (0, 2)
            assert [list(m) for m in other.zrange(z, 0, -1, withscores=True)] == [[b"a", 1.5], [b"b", 2.0]]
            xid = me.xadd(x, {"f": "v"})
            assert other.xrange(x)[-1] == (xid, {b"f": b"v"})
            me.rpush(lst, "x", "y")
            assert other.lrange(lst, -2, -1) == [b"x", b"y"]
            me.sadd(st, "m")
            assert other.smembers(st) == {b"m"}
            assert other.expire(s, 100) and 0 < me.ttl(s) <= 100
        assert a.get(keys_on(w, 1, p + "absent")[0]) is None
        with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
            b.lpush(s, "x")  # an error from the owner comes back as it is
    # keyless commands run on the connection's own worker
    assert a.ping() and b.echo("hi") == b"hi"


def test_pipeline_alternating_workers_keeps_order(node):
    writer = client_on(node.port, 0)
    data, ready = keys_on(0, 300, "data:"), keys_on(1, 300, "ready:")
    seen: list[str] = []
    stop = threading.Event()

    def check():  # a second client: `ready` is never set without `data`
        r = client_of(node.port)
        i = 0
        while not stop.is_set():
            k = i % len(data)
            if r.get(ready[k]) is not None and r.get(data[k]) is None:
                seen.append(ready[k])
            i += 1

    t = threading.Thread(target=check)
    t.start()
    try:
        p = writer.pipeline(transaction=False)
        for k in range(len(data)):
            p.set(data[k], "x")
            p.set(ready[k], "1")
            p.incr("order:" + data[0])  # worker 0
            p.incrby("order:" + ready[0], 10)  # worker 1
        replies = p.execute()
    finally:
        stop.set()
        t.join(DEADLINE)
    assert not seen, f"read ready without data: {seen[:5]}"
    assert replies[2::4] == list(range(1, len(data) + 1))
    assert replies[3::4] == list(range(10, 10 * len(data) + 1, 10))
    assert all(r is True for r in replies[0::4] + replies[1::4])


def raw_on(port: int, worker: int) -> redis.Connection:
    """A bare redis-py connection on ``worker``, for a subscriber (a ``PubSub`` object
    would take a connection from a pool, on either worker)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        conn = redis.Connection(host="127.0.0.1", port=port, socket_timeout=DEADLINE)
        conn.send_command("CLIENT", "ID")
        if conn.read_response() % SHARDS == worker:
            return conn
        conn.disconnect()
    raise AssertionError(f"no connection landed on worker {worker}")


def sock_on(port: int, worker: int) -> socket.socket:
    """A plain socket connected to ``worker`` (its CLIENT ID reply read)."""
    deadline = time.monotonic() + DEADLINE
    while time.monotonic() < deadline:
        s = socket.create_connection(("127.0.0.1", port), timeout=DEADLINE)
        s.sendall(b"CLIENT ID\r\n")
        got = b""
        while not got.endswith(b"\r\n"):
            got += s.recv(64)
        if int(got[1:]) % SHARDS == worker:
            return s
        s.close()
    raise AssertionError(f"no connection landed on worker {worker}")


def read_push(conn: redis.Connection):
    assert conn.can_read(timeout=DEADLINE), "no message within the deadline"
    return conn.read_response(push_request=True)


@pytest.mark.parametrize("protocol", [2, 3])
def test_node_wide_commands_see_every_worker(node, tmp_path, protocol):
    """DBSIZE, KEYS, SCAN, RANDOMKEY, INFO, DEBUG DIGEST and the rest answer for the whole
    node from either worker (docs/shards.md slice 3)."""
    a, b = client_on(node.port, 0, protocol=protocol), client_on(node.port, 1, protocol=protocol)
    assert a.flushall() is True
    assert a.dbsize() == b.dbsize() == 0 and a.randomkey() is None and b.keys("*") == []
    names = keys_on(0, 20, "w0:") + keys_on(1, 30, "w1:")
    for i, k in enumerate(names):
        (a if i % 2 else b).set(k, i)
    hkey = keys_on(1, 1, "w1:h")[0]
    a.hset(hkey, "f", "v")
    everything = {k.encode() for k in names} | {hkey.encode()}
    for c in (a, b):
        assert c.dbsize() == 51
        assert set(c.keys("*")) == everything
        assert set(c.keys("w0:*")) == {k for k in everything if k.startswith(b"w0:")}
        assert c.randomkey() in everything
        cursors, seen = [], []
        cursor = 0
        while True:  # a cursor crosses from worker 0's partitions to worker 1's
            cursor, page = c.scan(cursor, count=7)
            seen += page
            cursors.append(cursor)
            if cursor == 0:
                break
        assert set(seen) == everything and len(seen) == len(everything)
        assert any(0 < x < 2048 for x in cursors) and any(x >= 2048 for x in cursors)
        assert list(c.scan_iter(_type="hash")) == [hkey.encode()]
        assert c.scan(5000) == (0, [])  # a cursor marekvs never returned: nothing is left
        with pytest.raises(redis.ResponseError, match="invalid cursor"):
            c.execute_command("SCAN", "x")
    info = wait_until(lambda: (i := b.info()) and i.get("db0", {}).get("keys") == 51 and i,
                      "INFO keyspace to count every worker's keys")
    assert info["connected_clients"] >= 2 and info["shards"] == 2
    assert info["process_id"] == node.pid  # the node's: the supervisor's, whichever worker answers
    stats = a.info("commandstats")
    assert stats["cmdstat_set"]["calls"] >= 50  # commands run on both workers
    # DEBUG DIGEST: what one process holding the same data answers (strings: a collection's
    # digest covers its element records, dots and clocks included, which only replicas share)
    assert a.delete(hkey) == 1
    one = Node(tmp_path / "one", durability="no").start()
    try:
        c1 = client_of(one.port)
        for i, k in enumerate(names):
            c1.set(k, i)
        assert a.execute_command("DEBUG", "DIGEST") == b.execute_command("DEBUG", "DIGEST") \
            == c1.execute_command("DEBUG", "DIGEST") != b"0" * 40
        some = [names[0], names[-1], "absent"]
        assert b.execute_command("DEBUG", "DIGEST-VALUE", *some) == c1.execute_command("DEBUG", "DIGEST-VALUE", *some)
    finally:
        one.stop()
    # CONFIG SET reaches every worker; FLUSHALL empties every worker
    assert a.config_set("maxmemory-policy", "allkeys-lru")
    assert b.config_get("maxmemory-policy") == {"maxmemory-policy": "allkeys-lru"}
    assert b.config_set("maxmemory-policy", "noeviction")
    with pytest.raises(redis.ResponseError, match="Unknown option"):
        a.config_set("no-such-option", "1")
    assert b.flushall() is True and a.dbsize() == 0 and a.keys("*") == []
    assert a.execute_command("DEBUG", "DIGEST") == b"0" * 40


def test_clients_scripts_and_slowlog_of_every_worker(node):
    a, b = client_on(node.port, 0), client_on(node.port, 1)
    ids = {a.client_id(), b.client_id()}
    for c in (a, b):
        assert ids <= {int(x["id"]) for x in c.client_list()}
    victim = client_on(node.port, 1)
    vid = victim.client_id()
    assert a.client_kill_filter(_id=vid) == 1  # from worker 0, a client of worker 1
    with pytest.raises(redis.ConnectionError):
        victim.ping()
    sha = a.script_load("return 1")
    assert b.script_exists(sha) == [True]
    assert a.config_set("slowlog-log-slower-than", 0)
    try:
        a.slowlog_reset()
        assert b.slowlog_len() == 1  # the RESET, once (its parts on the other workers are not logged)
        # entries of either worker come newest first: their ids are one node-wide sequence
        k0, k1 = keys_on(0, 1, "slow:")[0], keys_on(1, 1, "slow:")[0]
        done = []
        for i, k in enumerate((k0, k1, k1, k0, k0, k1)):  # (a's SETs of k1 are carried to worker 1)
            a.set(k, i)
            done.append(f"SET {k} {i}")
        logged = [e for e in b.slowlog_get(50) if e["command"].startswith(b"SET slow:")]
        assert [e["command"].decode() for e in logged] == done[::-1]
        assert [e["id"] for e in logged] == sorted((e["id"] for e in logged), reverse=True)
    finally:
        a.config_set("slowlog-log-slower-than", 10000)


def test_publish_and_keyspace_notifications_reach_subscribers_on_every_worker(node):
    a, b = client_on(node.port, 0), client_on(node.port, 1)
    subs = [raw_on(node.port, w) for w in (0, 1)]
    try:
        for s in subs:
            s.send_command("SUBSCRIBE", "news")
            assert read_push(s)[0] == b"subscribe"
            s.send_command("PSUBSCRIBE", "__keyspace@0__:*")
            assert read_push(s)[0] == b"psubscribe"
        assert a.pubsub_numsub("news") == [(b"news", 2)] and b.pubsub_channels() == [b"news"]
        assert b.publish("news", "hi") == 2  # one subscriber on each worker
        for s in subs:
            assert read_push(s) == [b"message", b"news", b"hi"]
        assert a.config_set("notify-keyspace-events", "K$")
        try:
            for w, writer in ((0, b), (1, a)):  # a key's owner fires its event
                k = keys_on(w, 1, "note:")[0]
                writer.set(k, "x")
                for s in subs:
                    assert read_push(s) == [b"pmessage", b"__keyspace@0__:*", f"__keyspace@0__:{k}".encode(), b"set"]
        finally:
            a.config_set("notify-keyspace-events", "")
    finally:
        for s in subs:
            s.disconnect()


def test_shutdown_stops_every_worker(tmp_path):
    n = start(tmp_path)
    workers = children(n.pid)
    c = client_on(n.port, 1)
    c.shutdown(nosave=True)  # (redis-py: no reply, the connection closed, is success)
    wait_until(lambda: n.proc.poll() is not None, "the node to exit")
    assert not [p for p in workers if alive(p)]
    assert "stopped cleanly (2 shard workers)" in n.log_text()


def test_refused_configurations(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(ROOT))

    def serve(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "marekvs", "serve", "--port", "1", *args], env=env,
                              cwd=str(ROOT), capture_output=True, text=True, timeout=DEADLINE)

    # (a Kafka port with peers is served since 2026-11-29: test_shards_kafka_peers.py)
    # a directory that cannot be resharded (not a RocksDB one) is left as it was (resharding
    # itself: tests/integration/test_shards_reshard.py)
    os.makedirs(tmp_path / "one")
    (tmp_path / "one" / "CURRENT").write_text("MANIFEST-000001\n")
    r = serve("--shards", "2", "--data-dir", str(tmp_path / "one"))
    assert r.returncode == 1 and "from one process (data_dir itself) to 2 shard workers failed, its layout is " \
        "unchanged" in r.stderr
    assert (tmp_path / "one" / "CURRENT").read_text() == "MANIFEST-000001\n"
    assert not (tmp_path / "one" / "shards").exists()


@pytest.mark.parametrize("how", ["--shards auto", "the default"])
def test_shards_auto_starts_a_worker_per_core(tmp_path, how):
    """``--shards auto``, and a node given no shard count (a config file without one, which
    the harness passes on as it is): one worker per core the node may use (here its CPU
    affinity); the data directory's map records the count, and a count of 1 is the single
    process."""
    cores = cfgmod.available_cores()
    conf = tmp_path / "node.toml"
    conf.write_text("durability = \"no\"\n")
    extra = ["--shards", "auto"] if how == "--shards auto" else ["--config", str(conf)]
    n = Node(tmp_path / "data", durability="no", extra=extra).start()
    try:
        if cores > 1:
            workers = wait_until(lambda: len(children(n.pid)) == cores and children(n.pid), "the workers")
            assert len(workers) == cores
            assert json.loads((tmp_path / "data" / "shards" / "map").read_text())["shards"] == cores
        else:
            assert not children(n.pid) and not (tmp_path / "data" / "shards").exists()
        c = n.client()
        c.mset({f"k{i}": i for i in range(50)})
        assert c.dbsize() == 50
    finally:
        assert n.stop(timeout=DEADLINE) == 0


def test_sigterm_leaves_no_process(tmp_path):
    n = start(tmp_path)
    workers = children(n.pid)
    assert n.stop(timeout=DEADLINE) == 0
    assert not [p for p in workers if alive(p)]
    assert "stopped cleanly (2 shard workers)" in n.log_text()


def test_sigkill_of_the_supervisor_leaves_no_orphan(tmp_path):
    n = start(tmp_path)
    workers = children(n.pid)
    n.kill9()
    wait_until(lambda: not [p for p in workers if alive(p)], "the workers to exit after their supervisor")


def test_a_worker_stuck_in_a_script_does_not_outlive_its_supervisor(tmp_path):
    """SIGKILL of the supervisor while a worker runs an endless script (its event loop
    cannot run the SIGTERM handler): the worker still exits (its watchdog)."""
    n = start(tmp_path)
    workers = children(n.pid)
    try:
        c = client_on(n.port, 1)
        w1 = next(p for p in workers if _cmdline(p)[_cmdline(p).index(b"--index") + 1] == b"1")
        before = _cpu_ticks(w1)
        t = threading.Thread(target=_ignore, args=(lambda: c.eval("while true do end", 0),), daemon=True)
        t.start()
        # spinning in the script: a second of CPU (100 ticks) more than before it was sent
        wait_until(lambda: _cpu_ticks(w1) - before >= 100, "worker 1 spinning in the script")
        n.kill9()
        wait_until(lambda: not [p for p in workers if alive(p)], "the workers to exit after their supervisor")
    finally:
        n.kill9()
        for p in workers:
            if alive(p):
                os.kill(p, signal.SIGKILL)


def _cpu_ticks(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        stat = f.read()
    fields = stat[stat.rindex(")") + 2:].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


def test_a_killed_worker_comes_back_and_its_partitions_answer_loading_meanwhile(tmp_path):
    n = start(tmp_path, durability="always")  # (every acknowledged write synced: none lost to SIGKILL)
    try:
        mine, theirs = keys_on(0, 20, "a"), keys_on(1, 20, "b")
        c = client_on(n.port, 0)
        for k in mine + theirs:
            c.set(k, k)
        w1 = next(p for p in children(n.pid) if _cmdline(p)[_cmdline(p).index(b"--index") + 1] == b"1")
        os.kill(n.pid, signal.SIGSTOP)  # the supervisor cannot restart it until SIGCONT
        try:
            os.kill(w1, signal.SIGKILL)
            wait_until(lambda: gone(w1), "worker 1 to die")  # (its listening sockets closed)

            def loading():
                nonlocal c
                try:
                    t0 = time.monotonic()
                    c.get(theirs[0])
                except redis.BusyLoadingError as e:  # (-LOADING: redis-py's name for it)
                    assert str(e).startswith("shard worker for partitions 2048-4095 is restarting"), e
                    assert time.monotonic() - t0 < 10, "a LOADING reply must come at once, not after a wait"
                    return True
                except redis.ConnectionError:  # a command in flight when the link dropped: closed
                    c = client_on(n.port, 0)
                    return False
                return False

            wait_until(loading, "LOADING for worker 1's partitions")
            c = client_on(n.port, 0)  # (redis-py drops a connection that read LOADING)
            for k in theirs:
                with pytest.raises(redis.BusyLoadingError):
                    c.get(k)
            assert [c.get(k) for k in mine] == [k.encode() for k in mine]  # the other worker serves
            with pytest.raises(redis.BusyLoadingError):  # a unit needing worker 1: at once too
                c.mset({mine[0]: "x", theirs[0]: "y"})
            c = client_on(n.port, 0)
            assert c.get(mine[0]) == mine[0].encode()  # (worker 0 was not left locked)
        finally:
            os.kill(n.pid, signal.SIGCONT)
        wait_until(lambda: _get(c, theirs[0]) == theirs[0].encode(), "worker 1 to be back")
        assert [c.get(k) for k in theirs] == [k.encode() for k in theirs]  # its data is there
        assert c.set(theirs[0], "new") and c.get(theirs[0]) == b"new"
        assert c.mset({mine[1]: "m", theirs[1]: "t"}) and c.mget(mine[1], theirs[1]) == [b"m", b"t"]
        assert n.proc.poll() is None and len(children(n.pid)) == SHARDS
    finally:
        n.stop(timeout=DEADLINE)


def _cmdline(pid: int) -> list[bytes]:
    with open(f"/proc/{pid}/cmdline", "rb") as f:
        return f.read().split(b"\0")


def _get(c: redis.Redis, key: str):
    try:
        return c.get(key)
    except (redis.ResponseError, redis.ConnectionError):  # (LOADING is a ConnectionError in redis-py)
        return None


def test_shards_1_opens_a_single_process_directory_unchanged(tmp_path):
    """The default is still one process; its directory has no shards/ layout."""
    n = Node(tmp_path / "d", durability="no").start()
    try:
        c = client_of(n.port)
        assert c.set("k", "v") and c.dbsize() == 1
        assert not [p for p in children(n.pid) if b"worker" in _cmdline(p)]
        assert not (tmp_path / "d" / "shards").exists()
    finally:
        n.stop()


def test_client_pause_holds_the_clients_of_every_worker(node):
    a, b = client_on(node.port, 0), client_on(node.port, 1)
    wa, wb = client_on(node.port, 0), client_on(node.port, 1)
    k0, k1 = keys_on(0, 1, "paused:")[0], keys_on(1, 1, "paused:")[0]
    done: list[float] = []
    writers = [threading.Thread(target=lambda c=c, k=k: (c.set(k, 1), done.append(time.monotonic())))
               for c, k in ((wa, k1), (wb, k0))]  # each writes the other worker's key
    assert a.client_pause(60000, all=False)  # WRITE: writes wait, reads do not
    try:
        for t in writers:
            t.start()
        time.sleep(0.5)  # (nothing to wait for: the writes must NOT happen while paused)
        assert b.get(k0) is None and a.get(k1) is None and not done
    finally:
        unpaused = time.monotonic()
        assert b.client_unpause()
    for t in writers:
        t.join(DEADLINE)
    assert len(done) == 2 and min(done) >= unpaused
    assert a.get(k0) == b.get(k1) == b"1"


def test_multi_key_commands_across_workers_are_atomic(node):
    """MSET/MGET/MSETNX/DEL/EXISTS/UNLINK/TOUCH with keys on both workers run as one unit
    (docs/shards.md slice 4): a reader's MGET never sees a pair written by one MSET
    differ, concurrent units from connections on both workers all finish, and of
    concurrent MSETNX on the same keys exactly one wins."""
    a, b = client_on(node.port, 0), client_on(node.port, 1)
    x, y = keys_on(0, 1, "pair:")[0], keys_on(1, 1, "pair:")[0]
    more = keys_on(0, 3, "more:") + keys_on(1, 3, "more:")
    assert a.mset({x: "0", y: "0", **{k: k for k in more}}) is True
    assert b.mget([more[3], x, "absent", more[0], y]) == [more[3].encode(), b"0", None, more[0].encode(), b"0"]
    assert a.exists(x, y, "absent", x) == 3 and b.touch(*more) == 6
    stop = threading.Event()
    torn: list[tuple[bytes, bytes]] = []
    counts = {"w": 0, "r": 0}
    failures: list[BaseException] = []

    def writer(w: int) -> None:
        c = client_on(node.port, w)
        i = 0
        try:
            while not stop.is_set():
                i += 1
                v = f"{w}-{i}"
                assert c.mset({x: v, y: v}) is True
                counts["w"] += 1
        except BaseException as e:  # noqa: BLE001 - reported below
            failures.append(e)

    def reader(w: int) -> None:
        c = client_on(node.port, w)
        try:
            while not stop.is_set():
                vx, vy = c.mget(x, y)
                if vx != vy:
                    torn.append((vx, vy))
                counts["r"] += 1
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    threads = [threading.Thread(target=f, args=(w,)) for f in (writer, reader) for w in (0, 1)]
    run_until(threads, stop, lambda: counts["w"] >= 300 and counts["r"] >= 300 or failures, "units from both workers")
    assert not failures, failures[:3]
    assert not torn, f"MGET saw one MSET half done: {torn[:5]}"
    assert a.get(x) == b.get(y)
    # single-key reads see a unit whole too: one writer's MSETs count up; a reader that
    # GETs one key then the other never reads the second older than the first (a worker
    # stays locked until every part ran, so the first read cannot see a half-done unit)
    stop.clear()
    counts["w"] = counts["r"] = 0
    assert a.mset({x: 0, y: 0})

    def counting_writer() -> None:
        c = client_on(node.port, 0)
        i = 0
        try:
            while not stop.is_set():
                i += 1
                c.mset({x: i, y: i})
                counts["w"] += 1
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    def get_reader(w: int, first: str, second: str) -> None:
        c = client_on(node.port, w)
        try:
            while not stop.is_set():
                v1 = int(c.get(first))
                v2 = int(c.get(second))
                if v2 < v1:
                    torn.append((first.encode(), b"%d then %d" % (v1, v2)))
                counts["r"] += 1
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    threads = [threading.Thread(target=counting_writer)] + [
        threading.Thread(target=get_reader, args=(w, f, s_)) for w in (0, 1) for f, s_ in ((x, y), (y, x))]
    run_until(threads, stop, lambda: counts["w"] >= 300 and counts["r"] >= 600 or failures, "GETs beside MSETs")
    assert not failures, failures[:3]
    assert not torn, f"a GET saw one MSET half done: {torn[:5]}"
    # MSETNX: of racing clients on both workers, one sets both keys
    n1, n2 = keys_on(0, 1, "nx:")[0], keys_on(1, 1, "nx:")[0]
    wins: list[int] = []
    racers = [threading.Thread(target=lambda w=w, i=i: wins.append(client_on(node.port, w).msetnx({n1: i, n2: i})))
              for i, w in enumerate((0, 1, 0, 1, 0, 1))]
    for t in racers:
        t.start()
    for t in racers:
        t.join(DEADLINE)
    assert sorted(wins) == [False] * 5 + [True]
    v = a.get(n1)
    assert v is not None and b.get(n2) == v
    assert a.msetnx({n1: "again", keys_on(1, 1, "nx2:")[0]: "x"}) is False
    assert b.get(keys_on(1, 1, "nx2:")[0]) is None  # nothing written when one key exists
    assert b.delete(x, y, n1, n2, "absent") == 4 and a.unlink(*more) == 6
    assert a.exists(x, y, *more) == 0
    with pytest.raises(redis.ResponseError, match="wrong number of arguments for 'mset'"):
        a.execute_command("MSET", x, "1", y)


def test_a_worker_killed_amid_units_leaves_no_lock_behind(tmp_path):
    """Units coordinated by worker 1 hold worker 0's lock over and over; SIGKILL worker 1:
    worker 0 releases what its units held (their link dropped) and keeps serving, and
    once worker 1 is back units run again."""
    n = start(tmp_path)
    try:
        x, y = keys_on(0, 1, "k:")[0], keys_on(1, 1, "k:")[0]
        stop = threading.Event()
        done = [0]

        def units() -> None:
            c = None
            while not stop.is_set():
                try:
                    c = c or client_on(n.port, 1)
                    c.mset({x: done[0], y: done[0]})
                    done[0] += 1
                except (redis.ConnectionError, redis.ResponseError, AssertionError):
                    c = None  # (closed, LOADING, or no connection landed on 1 while it was down)

        threads = [threading.Thread(target=units) for _ in range(3)]
        for t in threads:
            t.start()
        try:
            wait_until(lambda: done[0] >= 50, "units running")
            w1 = next(p for p in children(n.pid) if _cmdline(p)[_cmdline(p).index(b"--index") + 1] == b"1")
            os.kill(w1, signal.SIGKILL)
            c0 = client_on(n.port, 0)
            wait_until(lambda: _get(c0, x) is not None, "worker 0 serving its keys")
            at = done[0]
            wait_until(lambda: done[0] >= at + 50, "units running again after worker 1 came back")
        finally:
            stop.set()
            for t in threads:
                t.join(DEADLINE)
        c0 = client_on(n.port, 0)  # (worker 0's own link to worker 1 may reconnect a little later)
        wait_until(lambda: _get(c0, y) is not None, "worker 0 reaching worker 1 again")
        vx, vy = c0.mget(x, y)
        assert vx == vy
    finally:
        n.stop(timeout=DEADLINE)


def test_transactions_across_workers_are_atomic(node):
    """MULTI/EXEC whose commands run on both workers: one unit (docs/shards.md slice 4).
    Concurrent EXECs of INCR a, INCR b from both workers all apply; a reader's EXEC of
    GET a, GET b never sees them differ; WATCH of a key of the connection's worker still
    aborts; a redis-py pipeline (MULTI/EXEC) over keys of both workers works."""
    a, b = client_on(node.port, 0), client_on(node.port, 1)
    x, y = keys_on(0, 1, "tx:")[0], keys_on(1, 1, "tx:")[0]
    a.delete(x, y)
    stop = threading.Event()
    torn: list[list] = []
    failures: list[BaseException] = []
    done = [0]

    def tx(c: redis.Redis, *cmds) -> list:
        c.execute_command("MULTI")
        for cmd in cmds:
            c.execute_command(*cmd)  # QUEUED (redis-py's callbacks read it as their reply type)
        return c.execute_command("EXEC")

    def incr(w: int) -> None:
        c = client_on(node.port, w)
        try:
            for _ in range(150):
                r = tx(c, ("INCR", x), ("INCR", y))
                assert r[0] == r[1], r  # (both counters move together: whole transactions only)
                done[0] += 1
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    def read(w: int) -> None:
        c = client_on(node.port, w)
        try:
            while not stop.is_set():
                vx, vy = tx(c, ("GET", x), ("GET", y))
                if vx != vy:
                    torn.append([vx, vy])
        except BaseException as e:  # noqa: BLE001
            failures.append(e)

    writers = [threading.Thread(target=incr, args=(w,)) for w in (0, 1, 0, 1)]
    readers = [threading.Thread(target=read, args=(w,)) for w in (0, 1)]
    writers_then_readers(writers, readers, stop)
    assert not failures, failures[:3]
    assert not torn, f"EXEC saw a transaction half done: {torn[:5]}"
    assert a.mget(x, y) == [b"600", b"600"]
    # replies keep their types and order; errors of one command are its reply
    h = keys_on(1, 1, "txh:")[0]
    r = tx(b, ("SET", x, "v"), ("HSET", h, "f", "1"), ("GET", x), ("LPUSH", x, "z"), ("HGETALL", h))
    assert r[:3] == [b"OK", 1, b"v"] and isinstance(r[3], redis.ResponseError) and r[4] in ([b"f", b"1"], {b"f": b"1"})
    # WATCH (a key of this worker) aborts when it changed, and nothing of the queue runs
    mine = keys_on(1, 1, "watched:")[0]
    b.execute_command("WATCH", mine)
    a.set(mine, "changed")
    assert tx(b, ("SET", x, "no"), ("SET", y, "no")) is None
    assert a.get(x) == b"v"
    # redis-py's pipeline is MULTI/EXEC
    with client_of(node.port) as c:
        p = c.pipeline()
        p.set(x, 1).set(y, 2).mget(x, y)
        assert p.execute() == [True, True, [b"1", b"2"]]


RATE_LIMITER = ("local n = redis.call('INCR', KEYS[1]) "
                "if n == 1 then redis.call('EXPIRE', KEYS[1], ARGV[2]) end "
                "if n > tonumber(ARGV[1]) then return 0 end return 1")


def test_scripts_run_on_the_worker_of_their_keys(node):
    """EVAL/EVALSHA whose declared keys are on one worker run there, from a connection on
    either; EVAL caches the script on every worker (EVALSHA anywhere after it); a key of
    another worker that the script did not declare is reached too (test_shards_scripts.py)."""
    a, b = client_on(node.port, 0), client_on(node.port, 1)
    k1 = keys_on(1, 1, "limit:")[0]
    k0 = keys_on(0, 1, "limit:")[0]
    a.delete(k0, k1)
    assert [a.eval(RATE_LIMITER, 1, k1, 3, 60) for _ in range(4)] == [1, 1, 1, 0]  # on worker 1, from 0
    assert 0 < b.ttl(k1) <= 60 and b.get(k1) == b"4"
    sha = hashlib.sha1(RATE_LIMITER.encode()).hexdigest()
    assert a.script_exists(sha) == b.script_exists(sha) == [True]
    assert b.evalsha(sha, 1, k0, 1, 60) == 1 and a.evalsha(sha, 1, k0, 1, 60) == 0
    assert a.eval("return redis.call('GET', KEYS[1])", 1, k1) == b"4"
    assert a.eval("return 7", 0) == 7  # no keys: where the connection is
    assert a.eval("return redis.call('GET', ARGV[1])", 0, k1) == b"4"  # undeclared, elsewhere
    assert a.ping() and a.get(k0) == b"2"
    assert a.eval("return redis.call('GET', KEYS[2])", 2, k0, k1) == b"4"  # keys on both workers


def test_blocking_commands_wait_on_the_worker_of_their_keys(node):
    """BLPOP (and the other blocking commands) on keys of another worker wait there:
    woken by a push from any connection, timing out with the nil reply, ended by CLIENT
    UNBLOCK, dropped when the client goes away; the connection's later commands wait."""
    a, b = client_on(node.port, 0), client_on(node.port, 1)
    q, q2 = keys_on(1, 2, "queue:")
    a.delete(q, q2)
    got: list = []
    t = threading.Thread(target=lambda: got.append(a.blpop([q, q2], timeout=60)))
    t.start()
    wait_until(lambda: _blocked(b), "the client to block")
    assert b.rpush(q2, "job") == 1  # from a connection on the worker of the keys
    t.join(DEADLINE)
    assert got == [(q2.encode(), b"job")]
    assert a.blpop([q], timeout=0.2) is None  # its timeout
    assert a.xread({keys_on(1, 1, "s:")[0]: "$"}, block=100) == []  # XREAD BLOCK too
    # CLIENT UNBLOCK from any worker ends it
    c = client_on(node.port, 0)
    cid = c.client_id()
    t = threading.Thread(target=lambda: got.append(c.blpop([q], timeout=60)))
    t.start()
    wait_until(lambda: _blocked(b), "the client to block again")
    assert b.client_unblock(cid) == 1
    t.join(DEADLINE)
    assert got[-1] is None
    # a client that goes away while blocked: its wait is dropped, the element stays
    d = client_on(node.port, 0)
    did = d.client_id()
    t = threading.Thread(target=lambda: _ignore(lambda: d.blpop([q], timeout=60)))
    t.start()
    wait_until(lambda: _blocked(b), "the third client to block")
    assert b.client_kill_filter(_id=did) == 1
    wait_until(lambda: not _blocked(b), "the wait to be dropped")
    assert a.rpush(q, "kept") == 1 and b.lrange(q, 0, -1) == [b"kept"]
    t.join(DEADLINE)


def _blocked(c: redis.Redis) -> int:
    return int(c.info("clients")["blocked_clients"])


def _ignore(fn) -> None:
    try:
        fn()
    except redis.ConnectionError:
        pass


def test_moves_between_workers(node):
    """RENAME, RENAMENX, COPY, LMOVE, RPOPLPUSH and SMOVE from a key of one worker to a key
    of the other: the value moves whole (TTL kept), Redis's replies and errors, and nothing
    moves when a check fails."""
    c = client_on(node.port, 0)
    a, b, t = keys_on(0, 1, "mv:")[0], keys_on(1, 1, "mv:")[0], keys_on(1, 1, "typed:")[0]
    c.delete(a, b, t)
    c.set(a, "v", ex=100)
    assert c.rename(a, b) and c.get(b) == b"v" and 90 < c.ttl(b) <= 100 and c.exists(a) == 0
    with pytest.raises(redis.ResponseError, match="no such key"):
        c.rename(a, b)
    c.set(a, "w")
    assert c.renamenx(a, b) is False and c.get(a) == b"w" and c.get(b) == b"v"
    c.delete(b)
    assert c.renamenx(a, b) is True and c.get(b) == b"w" and c.exists(a) == 0
    c.hset(a, mapping={"f": "1", "g": "2"})
    assert c.copy(a, b) is False and c.get(b) == b"w"  # the destination exists
    assert c.copy(a, b, replace=True) is True and c.hgetall(b) == {b"f": b"1", b"g": b"2"} == c.hgetall(a)
    assert c.copy("absent:" + a, b) is False
    with pytest.raises(redis.ResponseError, match="DB index is out of range"):
        c.copy(a, b, destination_db=3)
    c.delete(a, b)
    c.rpush(a, "1", "2", "3")
    assert c.lmove(a, b, "LEFT", "RIGHT") == b"1" and c.rpoplpush(a, b) == b"3"
    assert c.lrange(a, 0, -1) == [b"2"] and c.lrange(b, 0, -1) == [b"3", b"1"]
    assert c.lmove("absent:" + a, b) is None
    c.set(t, "x")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        c.lmove(a, t)
    assert c.lrange(a, 0, -1) == [b"2"]  # nothing popped
    c.delete(a, b)
    c.sadd(a, "m", "n")
    assert c.smove(a, b, "m") is True and c.smove(a, b, "zz") is False
    assert c.smembers(b) == {b"m"} and c.smembers(a) == {b"n"}
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        c.smove(a, t, "n")
    assert c.smembers(a) == {b"n"} and c.smove("absent:" + a, b, "n") is False


def test_a_half_closed_client_gets_every_reply(node):
    """A client that sends a pipeline over both workers and shuts its writing side (``nc
    -N``) still gets every reply, those from the other worker too, then the close."""
    k0, k1 = keys_on(0, 1, "half:")[0], keys_on(1, 1, "half:")[0]
    for w in (0, 1):
        s = sock_on(node.port, w)
        s.sendall(b"SET %s 1\r\nSET %s 2\r\nPING\r\nMGET %s %s\r\nDBSIZE\r\nGET %s\r\n" % (
            k0.encode(), k1.encode(), k0.encode(), k1.encode(), k1.encode()))
        s.shutdown(socket.SHUT_WR)
        out = b""
        while d := s.recv(65536):
            out += d
        s.close()
        assert out.startswith(b"+OK\r\n+OK\r\n+PONG\r\n*2\r\n$1\r\n1\r\n$1\r\n2\r\n:") and \
            out.endswith(b"\r\n$1\r\n2\r\n"), out


def test_watch_of_keys_of_other_workers(node):
    """WATCH of keys on both workers: a change to either by another client aborts EXEC
    (nothing of the queue runs); unchanged, EXEC runs; UNWATCH and DISCARD drop them."""
    a, b = client_on(node.port, 0), client_on(node.port, 1)
    x, y = keys_on(0, 1, "w:")[0], keys_on(1, 1, "w:")[0]
    a.mset({x: "0", y: "0"})

    def tx(*cmds):
        a.execute_command("MULTI")
        for cmd in cmds:
            a.execute_command(*cmd)
        return a.execute_command("EXEC")

    for changed in (x, y):
        assert a.execute_command("WATCH", x, y)
        b.set(changed, "by b")
        assert tx(("SET", x, "a"), ("SET", y, "a")) is None  # aborted
        assert a.mget(x, y) == ([b"by b", b"0"] if changed == x else [b"0", b"by b"])
        a.mset({x: "0", y: "0"})
    assert a.execute_command("WATCH", y)
    assert tx(("SET", x, "a"), ("SET", y, "a")) == [b"OK", b"OK"]  # unchanged: it runs
    assert a.execute_command("WATCH", y) and a.execute_command("UNWATCH")
    b.set(y, "later")
    assert tx(("INCR", "{w}n"),) == [1]  # unwatched: runs
    assert a.execute_command("WATCH", y)
    a.execute_command("MULTI")
    a.execute_command("DISCARD")
    b.set(y, "after discard")
    assert tx(("GET", y),) == [b"after discard"]
    with pytest.raises(redis.ResponseError, match="WATCH inside MULTI is not allowed"):
        a.execute_command("MULTI")
        try:
            a.execute_command("WATCH", y)
        finally:
            a.execute_command("DISCARD")


def test_set_algebra_over_workers(node):
    """SUNION/SINTER/SDIFF/SINTERCARD and their STORE forms over sets of both workers
    answer as one process does (each worker combines its own keys, the results combine on
    the connection's worker, a STORE writes at the destination's worker)."""
    c = client_on(node.port, 1)
    s0, t0 = keys_on(0, 2, "alg:")
    s1, t1 = keys_on(1, 2, "alg:")
    c.delete(s0, t0, s1, t1)
    c.sadd(s0, "a", "b", "c")
    c.sadd(s1, "b", "c", "d")
    c.sadd(t1, "c", "x")
    assert c.sunion(s0, s1, t1) == {b"a", b"b", b"c", b"d", b"x"}
    assert c.sinter(s0, s1, t1) == {b"c"} and c.sinter(s0, s1, "absent") == set()
    assert c.sdiff(s0, s1) == {b"a"} and c.sdiff(s1, s0, t1) == {b"d"}
    assert c.sintercard(3, [s0, s1, t1]) == 1 and c.sintercard(2, [s0, s1], limit=1) == 1
    assert c.sunionstore(t0, [s1, t1]) == 4 and c.smembers(t0) == {b"b", b"c", b"d", b"x"}
    assert c.sdiffstore(t0, [s0, s1]) == 1 and c.smembers(t0) == {b"a"}
    assert c.sinterstore(t0, [s0, "absent"]) == 0 and c.exists(t0) == 0  # an empty result deletes it
    c.set(t0, "string")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE"):
        c.sunion(s1, t0)
    assert c.sunionstore(t0, [s0, s1]) == 4 and c.type(t0) == b"set"  # a STORE overwrites any type


def test_pfmerge_of_the_destination_alone_runs_where_it_is(node):
    """PFMERGE destkey (no source) has no key for Redis 7.0's key specs, yet reads it."""
    c = client_on(node.port, 0)
    k = keys_on(1, 1, "hll:")[0]
    c.set(k, "not an hll")
    with pytest.raises(redis.ResponseError, match="WRONGTYPE Key is not a valid HyperLogLog string value"):
        c.execute_command("PFMERGE", k)


def _client_id(s: socket.socket) -> int:
    s.sendall(b"CLIENT ID\r\n")
    got = b""
    while not got.endswith(b"\r\n"):
        got += s.recv(64)
    return int(got[1:])


def test_client_ids_grow_and_maxclients_counts_the_node(tmp_path):
    """Client ids grow over the node's connections whatever worker each lands on, and
    maxclients limits the node's clients, not each worker's (shards/clients.py)."""
    n = start(tmp_path)
    held: list[socket.socket] = []
    try:
        ids = []
        for w in (0, 1, 0, 1, 1, 0):
            held.append(sock_on(n.port, w))
            ids.append(_client_id(held[-1]))
        assert ids == sorted(ids) and len(set(ids)) == len(ids) and [i % SHARDS for i in ids] == [0, 1, 0, 1, 1, 0]
        admin = held[0]
        # (sock_on's other tries are closed: wait until the node counts only these)
        wait_until(lambda: _call(admin, b"INFO clients").count(b"connected_clients:6\r\n"), "6 clients")
        assert _call(admin, b"CONFIG SET maxclients 10") == b"+OK\r\n"
        for _ in range(4):  # 10 in all, on either worker
            s = socket.create_connection(("127.0.0.1", n.port), timeout=DEADLINE)
            held.append(s)
            assert _call(s, b"PING") == b"+PONG\r\n"
        for _ in range(4):  # whichever worker it lands on: refused (each holds fewer than 10)
            s = socket.create_connection(("127.0.0.1", n.port), timeout=DEADLINE)
            got = b""
            while chunk := s.recv(256):
                got += chunk
            s.close()
            assert got == b"-ERR max number of clients reached\r\n"
        held.pop().close()
        wait_until(lambda: _call(admin, b"INFO clients").count(b"connected_clients:9\r\n"), "9 clients")
        s = socket.create_connection(("127.0.0.1", n.port), timeout=DEADLINE)
        held.append(s)
        assert _call(s, b"PING") == b"+PONG\r\n"
        assert _client_id(s) > max(ids)
    finally:
        for s in held:
            s.close()
        n.stop()


def _call(s: socket.socket, line: bytes) -> bytes:
    s.sendall(line + b"\r\n")
    got = s.recv(65536)
    if got.startswith(b"$"):  # (a bulk string: all of it)
        size = int(got[1:got.index(b"\r\n")])
        while len(got) < got.index(b"\r\n") + 2 + size + 2:
            got += s.recv(65536)
    return got
