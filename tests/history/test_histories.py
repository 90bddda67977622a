"""Random concurrent histories on three in-process nodes, checked against the model.

A hypothesis state machine interleaves commands on any node (chosen from what that node
sees, ``workload.py``) with causal deliveries of earlier commands' records, duplicates,
full-state syncs (repairs), restarts and the passing of time; at the end every command
reaches every node and each node must hold exactly the state the reference model
(``model.py``) computes from the history and its causality. Every reply is checked on the
way (an acknowledged write the model cannot explain fails at once).

``HISTORY_PROFILE=long`` (``make histories``) runs many more and longer histories.
"""

from __future__ import annotations

import os
import random
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from tests.history import inproc
from tests.history.checker import History, note_history

N = 3
LONG = os.environ.get("HISTORY_PROFILE") == "long"
_CLUSTER: list[inproc.InProcessCluster] = []
_DIR: list[str] = []
_SERIAL = [0]


def cluster() -> inproc.InProcessCluster:
    if not _CLUSTER:
        _DIR.append(tempfile.mkdtemp(prefix="histories-"))
        _CLUSTER.append(inproc.InProcessCluster(_DIR[0], N))
    return _CLUSTER[0]


def teardown_module() -> None:
    for c in _CLUSTER:
        c.close()
    for d in _DIR:
        shutil.rmtree(d, ignore_errors=True)


NODE = st.integers(0, N - 1)


class Histories(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.c = cluster()
        _SERIAL[0] += 1
        self.h = History(N, b"%d" % _SERIAL[0])
        self.batches: dict[int, tuple[int, list, frozenset]] = {}  # op -> (origin, records, deps)

    # -- commands ------------------------------------------------------------------------------
    @rule(node=NODE, seed=st.integers(0, 1 << 32))
    def command(self, node: int, seed: int) -> None:
        t = inproc.advance(1)
        # (the step number mixed in: hypothesis draws small seeds, 0 most of all, and the
        # same seed would pick the same command every time)
        argv = self.h.pick(random.Random(seed * 1_000_003 + len(self.h.ops)), node, t)
        reply, records = self.c.run(node, argv)
        deps = frozenset(self.h.known[node])
        op = self.h.record(node, t, argv, reply)
        self.batches[op.id] = (node, records, deps)

    # -- the network ------------------------------------------------------------------------------
    def _deliverable(self) -> list[tuple[int, int]]:
        out = []
        for oid, (_, _, deps) in self.batches.items():
            for j in range(N):
                if oid not in self.h.known[j] and deps <= self.h.known[j]:
                    out.append((oid, j))
        return out

    def _deliver(self, oid: int, j: int) -> None:
        self.c.apply(j, self.batches[oid][1])
        self.h.known[j].add(oid)

    @rule(pick=st.integers(0, 1 << 16), times=st.integers(1, 4))
    def deliver(self, pick: int, times: int) -> None:
        for _ in range(times):
            ready = self._deliverable()
            if not ready:
                return
            self._deliver(*ready[pick % len(ready)])

    @precondition(lambda self: self.batches)
    @rule(pick=st.integers(0, 1 << 16), j=NODE)
    def duplicate(self, pick: int, j: int) -> None:
        """A batch arrives again (a resend after a reconnect), at a node that had it."""
        done = [oid for oid in self.batches if oid in self.h.known[j]]
        if done:
            self.c.apply(j, self.batches[done[pick % len(done)]][1])

    @rule(src=NODE, dst=NODE)
    def sync(self, src: int, dst: int) -> None:
        if src != dst:
            self.c.sync(src, dst)
            self.h.known[dst] |= self.h.known[src]

    @rule(node=NODE)
    def restart(self, node: int) -> None:
        self.c.restart(node)

    @rule(ms=st.sampled_from([1, 2, 5, 50]))
    def tick(self, ms: int) -> None:
        inproc.advance(ms)

    # -- the end -------------------------------------------------------------------------------------
    def teardown(self) -> None:
        while True:
            ready = self._deliverable()
            if not ready:
                break
            for oid, j in ready:
                if oid not in self.h.known[j] and self.batches[oid][2] <= self.h.known[j]:
                    self._deliver(oid, j)
        self.h.check(lambda i: lambda *argv: self.c.read(i, *argv), inproc.clock(), list(range(N)))
        note_history("in-process", len(self.h.ops))


Histories.TestCase.settings = settings(
    max_examples=400 if LONG else 40, stateful_step_count=120 if LONG else 50, deadline=None,
    derandomize=not LONG, suppress_health_check=list(HealthCheck), print_blob=True)
TestHistories = Histories.TestCase


@pytest.fixture(autouse=True, scope="module")
def _close():
    yield
    teardown_module()
