"""The history checker: runs random concurrent histories on a cluster and compares what
every node holds in the end with what the reference model (``model.py``) says the
specification makes of the same history.

``History`` keeps the bookkeeping both drivers share: the model, the operations each node
knows of (what its commands observed), and the final comparison. The in-process driver
(``inproc.py``, ``test_histories.py``) delivers each command's records causally, one by
one; the cluster driver (tests/integration/test_histories_cluster.py) runs rounds on
three real nodes cut off from each other and heals them between rounds.
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable
from typing import Any

from tests.history.model import Error, Model, Op, observe
from tests.history.workload import Workload

# how many histories ran (the tests print it; `make histories` reports it)
COUNT_FILE = os.environ.get("MAREKVS_HISTORY_COUNT_FILE", "")


def note_history(kind: str, ops: int) -> None:
    if COUNT_FILE:
        with open(COUNT_FILE, "a") as f:
            f.write(f"{kind} {ops}\n")


class History:
    def __init__(self, n: int, ns: bytes, flushall: bool = True, ttls: tuple[int, ...] | None = None):
        self.n = n
        self.model = Model()
        self.workload = Workload(ns, flushall=flushall, pools=os.environ.get("HISTORY_POOLS", "shSzlxp"),
                                 **({"ttls": ttls} if ttls else {}))
        self.known: list[set[int]] = [set() for _ in range(n)]
        self.next_id = 1
        self.ops: list[Op] = []

    def view(self, node: int, t: int) -> Callable[[bytes], Any]:
        known = frozenset(self.known[node])
        return lambda key: self.model.state(key, known, t)

    def pick(self, rng: random.Random, node: int, t: int) -> list[bytes]:
        return self.workload.next(rng, self.view(node, t))

    def record(self, node: int, t: int, argv: list[bytes], reply: Any, deadline: int | None = None) -> Op:
        """Add a command that ran (with its reply) to the history: Error if the model
        cannot explain the reply."""
        op = Op(self.next_id, node, t, argv, reply, frozenset(self.known[node]), deadline)
        self.next_id += 1
        self.ops.append(op)
        self.known[node].add(op.id)
        try:
            self.model.run(op)
        except Error as e:  # (with the history of its keys, as ``check`` gives)
            raise Error(f"{e}\n{self.transcript(set(argv[1:]))}") from None
        return op

    def all_known(self) -> frozenset[int]:
        return frozenset(op.id for op in self.ops)

    def check(self, read: Callable[[int], Callable[..., Any]], now: int, nodes: list[int]) -> None:
        """Every node in ``nodes`` (which know every op) holds what the model says."""
        everything = self.all_known()
        problems = []
        bad: set[bytes] = set()
        for key in sorted(self.model.keys | set(self.workload.keys())):
            want = self.model.public(key, everything, now)
            for i in nodes:
                got = observe(read(i), key)
                if got != want:
                    problems.append(f"node {i + 1} {key!r}: holds {got!r}, the model says {want!r}")
                    bad.add(key)
        if problems:
            raise Error("\n".join(problems[:12]) + "\n" + self.transcript(bad))

    def transcript(self, keys: set[bytes] | None = None, last: int = 120) -> str:
        """The history (of the ops naming one of ``keys``, with FLUSHALL), for a failure."""
        ops = [op for op in self.ops if keys is None or op.argv[0] == b"FLUSHALL" or set(op.argv[1:]) & keys]
        lines = [f"  #{op.id} n{op.node + 1} t+{op.t % 100000} knew {sorted(op.known)}: "
                 f"{b' '.join(op.argv).decode(errors='replace')} -> {op.reply!r}" for op in ops[-last:]]
        return "history:\n" + "\n".join(lines)
