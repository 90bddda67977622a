"""Random concurrent histories on three real nodes (processes, gRPC through fault-injecting
proxies, RocksDB), checked against the reference model of tests/history/model.py.

The history runs in rounds, which makes every command's causality exact without looking
inside the nodes:

- a *partitioned* round cuts every link (background anti-entropy goes through them too),
  runs random commands on random nodes, each seeing what every node had before the round
  plus its own node's commands of the round, then heals the links (or, every other time,
  leaves them cut and runs ``marekvs repair`` among the three nodes, the anti-entropy
  exchange, before healing) and waits until the nodes converge (DEBUG DIGEST equal);
- a *connected* round runs commands with the links up, each followed by WAIT for both
  peers, so each sees everything before it;
- between rounds a node is sometimes restarted (SIGKILL, ``durability always``: nothing
  acknowledged may be lost, or SIGTERM).

The driver runs one command at a time and starts each in a later millisecond than the one
before ended, so the nodes' stamps (one wall clock on one machine) follow the history's
order, as the model assumes. TTLs are long (nothing expires during a history; expiry is
exact in the in-process checker, which owns its clock), and each TTL a command sets is read
back from its node (PEXPIRETIME, HPEXPIRETIME) for the model. At the end every node must
hold exactly the state the model computes for every key.

``HISTORY_PROFILE=long`` (``make histories``) runs several longer histories.
"""

from __future__ import annotations

import os
import random
import time

import pytest
import redis

from tests.antientropy_helpers import grpc_nodes, marekvs
from tests.cluster import Cluster, wait_links
from tests.history.checker import History, note_history

pytestmark = pytest.mark.timeout(1800 if os.environ.get("HISTORY_PROFILE") == "long" else 600)

LONG = os.environ.get("HISTORY_PROFILE") == "long"
LINKS = [(a, b) for a in (1, 2, 3) for b in (1, 2, 3) if a != b]
AE_OFF = ["--antientropy-interval", "0"]
TTL = 10_000_000  # ms: set, read back and compared, never passed during a history


class Err(str):
    """An error reply (the model tells errors by this type's name, as the node's Err)."""


def raw(client: redis.Redis, *argv: bytes):
    """One command's RESP2 reply without redis-py's parsing callbacks; errors as Err."""
    conn = client.connection_pool.get_connection()
    try:
        conn.send_command(*argv)
        try:
            return conn.read_response()
        except redis.ResponseError as e:
            return Err(str(e))
    finally:
        client.connection_pool.release(conn)


def next_ms(after: int) -> int:
    """Wait (busy, at most a millisecond) until the wall clock is past ``after``."""
    while True:
        now = time.time_ns() // 1_000_000
        if now > after:
            return now


def _deadline(client: redis.Redis, argv: list[bytes]):
    """The TTL a command set, as its node computed it (None if it sets none)."""
    name = argv[0].upper()
    if name == b"PEXPIRE" or (name == b"SET" and b"PX" in argv):
        d = raw(client, b"PEXPIRETIME", argv[1])
        return d if isinstance(d, int) and d > 0 else None
    if name == b"HPEXPIRE":
        d = raw(client, b"HPEXPIRETIME", argv[1], b"FIELDS", b"1", argv[5])
        return d[0] if isinstance(d, list) and d and d[0] > 0 else None
    return None


class Driver:
    def __init__(self, cluster: Cluster, seed: int):
        self.c = cluster
        self.rng = random.Random(seed)
        self.h = History(3, b"c%d" % seed, ttls=(TTL,))
        self.clients = {i: cluster.client(i, protocol=2) for i in cluster.ids}
        self.last_ms = 0

    def command(self, i: int, connected: bool) -> None:
        node = i - 1
        t = next_ms(self.last_ms)
        argv = self.h.pick(self.rng, node, t)
        reply = raw(self.clients[i], *argv)
        deadline = _deadline(self.clients[i], argv)
        if connected:
            assert raw(self.clients[i], b"WAIT", b"2", b"60000") == 2, "a peer did not acknowledge"
        self.last_ms = time.time_ns() // 1_000_000
        self.h.record(node, t, argv, reply, deadline)

    def everyone_knows_everything(self) -> None:
        every = self.h.all_known()
        for k in self.h.known:
            k |= every

    def partitioned_round(self, ops: int, repair: bool) -> None:
        for a, b in LINKS:
            self.c.proxy(a, b).cut()
        wait_links(self.c, LINKS, up=False)
        for _ in range(ops):
            self.command(self.rng.choice(self.c.ids), connected=False)
        if repair:  # the anti-entropy exchange alone brings the nodes together
            r = marekvs("repair", "--nodes", grpc_nodes(self.c), "--settle", "0")
            assert r.returncode in (0, 1), r.stdout + r.stderr
            self.c.wait_converged(120)
        for a, b in LINKS:
            self.c.proxy(a, b).heal()
        wait_links(self.c, LINKS, up=True)
        self.c.wait_converged(120)
        self.everyone_knows_everything()

    def connected_round(self, ops: int) -> None:
        for _ in range(ops):
            self.command(self.rng.choice(self.c.ids), connected=True)
            self.everyone_knows_everything()

    def restart(self) -> None:
        i = self.rng.choice(self.c.ids)
        self.clients[i].close()
        if self.rng.random() < 0.5:
            self.c.kill9(i)  # (durability always: nothing acknowledged is lost)
        else:
            self.c[i].stop()  # SIGTERM
        self.c.start_node(i)
        self.clients[i] = self.c.client(i, protocol=2)
        wait_links(self.c, LINKS, up=True)
        self.c.wait_converged(120)

    def check(self) -> None:
        self.h.check(lambda node: lambda *argv: raw(self.clients[node + 1], *argv),
                     time.time_ns() // 1_000_000, [0, 1, 2])

    def close(self) -> None:
        for cl in self.clients.values():
            cl.close()


def run_history(cluster: Cluster, seed: int, rounds: int, ops: int) -> int:
    d = Driver(cluster, seed)
    try:
        for r in range(rounds):
            if r % 3 == 2:
                d.connected_round(ops // 2)
            else:
                d.partitioned_round(ops, repair=r % 2 == 1)
            if r % 4 == 3:
                d.restart()
        d.check()
        return len(d.h.ops)
    finally:
        d.close()


def test_histories_on_three_real_nodes_hold_what_the_model_computes(tmp_path):
    seeds = range(4) if LONG else range(1)
    with Cluster.with_proxies(tmp_path, LINKS, n=3, extra=AE_OFF, durability="always") as c:
        c.wait_streaming(60)
        for seed in seeds:
            n = run_history(c, int(os.environ.get("HISTORY_SEED", "0")) + seed,
                            rounds=12 if LONG else 5, ops=60 if LONG else 30)
            note_history("cluster", n)
            print(f"history {seed}: {n} commands on 3 nodes")
