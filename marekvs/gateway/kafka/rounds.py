"""The gateway on a node of several shard workers (``--shards N``, N > 1): rounds.

Design (docs/kafka.md, "On a node of shard workers"). Worker 0 alone serves the Kafka port
(the other workers open no Kafka listener), so everything the gateway keeps in memory is in
one process, as on a node of one process: the group coordinator (``groups.py``), the
partitions' appends not yet acknowledged by the peers and the long-poll fetches
(``partitions.py``, ``server.py``), the leadership claims. Its data is not: a partition's
stream, its producers' state, the topic's hash, a group's commits each live on the worker
owning their key's partition (docs/shards.md §2).

So every step of the gateway that reads or writes keys runs in a *round*: worker 0 locks
itself (``Mesh.open_session(every=False)``: its clients' commands and siblings' frames
wait meanwhile), and the step runs its commands synchronously where their keys are
(``Mesh.route``: here, or carried to the owner over the blocking socket of that worker
pair and answered after its commit; the records of one produced batch in one frame,
``Mesh.carry``). A sibling is locked when the round's first command reaches it
(``Mesh._hold``, as a script's undeclared keys are) and held until the round ends, so
what a round reads and writes on it is atomic as if every worker were held, and a worker
the round never reaches is not held at all: its RESP clients go on meanwhile. Worker 0
holds itself first, and on two workers that is the whole lock order (a unit over both
locks worker 0 first, so it cannot hold worker 1 while it waits for worker 0). On more, a
round that took a higher worker first can meet a unit holding a lower one and waiting
for the higher: the round's lock waits at most ``mesh.LOCK_WAIT_S`` (worker 0 waits
synchronously, as a script does) and its command fails (the request's partitions there
get KAFKA_STORAGE_ERROR, or its connection closes when it was a record every request reads;
clients retry). A step is what a task of the
gateway runs from the moment the round lets it in to its next suspension (the response's
commit barrier, a produce waiting for acks=all, a fetch or a join waiting): so a
partition's read of its last id and the appends that mint above it are atomic, as within
one tick of one process, and the steps of a request never hold the workers while it
waits. The requests waiting for a round when one starts all run in it (one lock of each
worker for all of them, like a group commit); those that come while it runs wait for the
next. Writes the gateway records outside a request (a group's generation when a
rebalance completes on a timer) run in the next round.

Reads of another worker's records that requests repeat (a topic's hash, its leaders, the
brokers, a stream's XINFO) are carried once per round (``Layout.read``, ``Layout.cached``):
the round holds that worker from then on, so only the gateway's own writes, which drop
them, change them meanwhile. The topics', leaders' and brokers' records are also kept
across rounds for ``topics.KEEP_S`` (``Layout.read`` says why that is safe), so a request
whose partitions are on worker 0 does not lock another worker for them. While a worker
restarts, those records it holds are taken as last read, so the other workers'
partitions are served meanwhile.

Cost (bench/README.md, "Kafka on shard workers"): a lock round trip per sibling the round
reaches, then one round trip per command carried (a produce to a partition of another
worker: its XINFO STREAM and its batch's XADDs and ``~replicas`` in one frame).
"""

from __future__ import annotations

import asyncio
from typing import Any



class Rounds:
    def __init__(self, mesh: Any):
        self.mesh = mesh
        self.waiting: list[asyncio.Future[None]] = []
        self.running = False
        self.active = False  # a round holds the workers now: steps may run their commands
        self.inside = 0  # the tasks let in to this round whose step has not ended yet
        self.ended: asyncio.Future[None] | None = None
        # reads of other workers' records carried once per round (``Layout.read``)
        self.cache: dict[bytes, dict[tuple[bytes, ...], Any]] | None = None  # key -> (argv -> reply)
        self.task: asyncio.Task[None] | None = None

    async def enter(self) -> None:
        """Return inside a round: the caller's step, up to its next suspension, may run
        commands on keys of any worker."""
        loop = asyncio.get_running_loop()
        if self.active:  # (a step of the round running: joins it)
            self._let_in(loop)
            return
        fut: asyncio.Future[None] = loop.create_future()
        self.waiting.append(fut)
        if not self.running:
            self.running = True
            self.task = loop.create_task(self._run())
        try:
            await fut
        finally:
            if fut.done() and not fut.cancelled():  # (counted by the round: it ends with this step)
                loop.call_soon(self._left)

    def _let_in(self, loop: asyncio.AbstractEventLoop) -> None:
        self.inside += 1
        loop.call_soon(self._left)

    def _left(self) -> None:
        self.inside -= 1
        if self.inside <= 0 and self.ended is not None and not self.ended.done():
            self.ended.set_result(None)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        mesh = self.mesh
        try:
            while self.waiting:
                session = await mesh.open_session(every=False)
                try:
                    batch, self.waiting = self.waiting, []
                    self.active = True
                    self.cache = {}
                    self.ended = loop.create_future()
                    for fut in batch:
                        if not fut.done():
                            self.inside += 1
                            fut.set_result(None)
                    if self.inside > 0:
                        await self.ended
                finally:
                    self.active = False
                    self.cache = None
                    self.ended = None
                    mesh.close_session(session)
        finally:
            self.running = False
            for fut in self.waiting:  # (stopping: nobody runs them)
                fut.cancel()

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
