"""What the node's peers have acknowledged: acks=all, the high watermark, who is live.

On a node of one process the replication log is one: a produce's position is its last
entry's sequence number there, and the peers' acknowledgements of that log
(``PeerState.acked_seq``) say whether acks=all is satisfied. On a node of shard workers
(docs/shards.md §5) each worker has its own log, shipped to the peers on links of its own:
a partition's records are in the log of the worker owning its stream, so acks=all for a
produce waits for the log of *every worker the produce wrote on*, each up to that worker's
position of the produce (docs/kafka.md, "On a node of shard workers").

So a *position* is a mapping worker -> sequence number in that worker's log (``{0: seq}``
on one process), and a worker's *view* is its figures per peer (``fanout.replication_view``:
streaming or not, acked seq of its log, last ack, caught up with the peer's log), with its
log end. Worker 0 (the gateway's) reads its own at once; a sibling's comes back with a
produced batch carried to it (the ``~replicas`` part command after its XADDs, one frame:
that also gives the batch's exact position there) and from a poll over the mesh
(``Mesh.gather_part``): every ``POLL_S`` while a produce waits for acks=all or an append
is not acknowledged yet (the high watermark stops below it), as WAIT polls its workers,
and every ``IDLE_POLL_S`` otherwise (liveness and catch-up, for leadership).

What counts, per worker's view, is what one process counts (``acked``): every in-sync peer
acknowledged the position and the in-sync peers with this node are a majority of the
nodes. A peer is *live* for the node (Metadata's brokers and in-sync replicas, leadership)
while it is streaming on every worker's links (a worker whose view is not known yet, or
that is restarting, does not count), and the node has *caught up* with it (``caught_up``)
once every worker has applied each of the peer's logs up to its end at the peer's last
Hello for it. A peer's worker says Hello at the node port, which any of this node's
workers answers, so the Hellos are gathered from every worker's view, and every worker
must have the marks: the records a claim reads (a topic's leaders) may be on any of them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from marekvs.shards.fanout import FAN_PARTS, replication_view

log = logging.getLogger("marekvs.kafka")

POLL_S = 0.01  # a sibling's view while a produce waits for acks=all (as WAIT polls)
IDLE_POLL_S = 0.1  # ... otherwise
ASK_S = 1.0  # how long a poll waits for a sibling (a unit or a busy script may hold it)
REPLICAS = FAN_PARTS["~replicas"]
_ARGS = [b"~replicas"]

# a peer in a view (``fanout.replication_view``): [node id, streaming, acked seq, last ack
# (monotonic), [[incarnation, log end at its Hello], ...], [[incarnation, mark here], ...] or None]
_ID, _STREAMING, _ACKED, _LAST_ACK, _HELLOS, _MARKS = range(6)


def extend(position: dict[int, int], more: dict[int, int]) -> None:
    """``position`` taken to cover ``more`` too: each worker's the further of the two."""
    for j, seq in more.items():
        if seq > position.get(j, 0):
            position[j] = seq


class View:
    __slots__ = ("log_seq", "peers")

    def __init__(self, raw: list[Any]):
        self.log_seq: int = raw[1]
        self.peers: list[list[Any]] = raw[2]


class Replicas:
    def __init__(self, gw: Any):
        self.gw = gw
        self.node = gw.node
        self.mesh = mesh = gw.mesh
        self.index = 0 if mesh is None else mesh.index
        self.views: list[View | None] = [None] * (1 if mesh is None else len(mesh.shards))
        self.waiting = 0  # produces (and CreateTopics) waiting for acks=all
        self._polled: asyncio.Event = asyncio.Event()
        self._caught: set[tuple[int, int, int, int]] = set()  # (worker, peer, incarnation, log end) reached
        self._task: asyncio.Task | None = None

    # -- views ----------------------------------------------------------------------------------
    def own(self) -> View:
        return View(replication_view(self.node, 0, marks=False))  # (its marks: read as needed)

    def view(self, j: int) -> View | None:
        return self.own() if j == self.index else self.views[j]

    def _views(self) -> list[View]:
        """Every worker's view known now (worker 0's own first)."""
        return [self.own(), *(v for j, v in enumerate(self.views) if j != self.index and v is not None)]

    def took(self, j: int, raw: Any) -> int:
        """A sibling's ``~replicas`` answer (carried after a batch): kept as its view; the
        asking client's last write there (the batch's position)."""
        self.views[j] = View(raw)
        return int(raw[0])

    def fresh(self, j: int) -> View | None:
        """Worker ``j``'s view now (in a round: a sibling is asked over the mesh), None
        while it is restarting."""
        if j == self.index:
            return self.own()
        r = self.gw.layout.carry_part(j, REPLICAS, _ARGS)
        if r is None:
            return None
        self.took(j, r)
        return self.views[j]

    def worker_of(self, key: bytes) -> int:
        mesh = self.mesh
        return 0 if mesh is None else int(mesh.shards.shard_of_key(key))

    # -- what counts ------------------------------------------------------------------------------
    def in_sync(self, p: list[Any], log_seq: int, now: float) -> bool:
        """Does peer ``p`` of a worker's view count for acks=all and the high watermark?
        Streaming, and it has acknowledged that worker's whole log or did so within
        ``kafka_replica_lag_time_max_ms`` (Kafka's replica.lag.time.max.ms: a peer that
        hangs leaves the in-sync set)."""
        gw = self.gw
        return bool(p[_STREAMING]) and (p[_ACKED] >= log_seq or now - max(p[_LAST_ACK], gw.started) < gw.lag_time)

    def acked(self, position: dict[int, int]) -> bool:
        """Has every in-sync peer acknowledged each worker's log up to ``position`` there,
        and are they, with this node, a majority of the nodes it knows? (Kafka's
        min.insync.replicas, here a majority: what acks=all acknowledged and a consumer read
        is on a majority, so any majority that takes over has it.)"""
        now = time.monotonic()
        for j, seq in position.items():
            if not seq:
                continue
            v = self.view(j)
            if v is None:
                return False  # (a worker restarting: what it wrote is not known to be acknowledged)
            synced = [p for p in v.peers if self.in_sync(p, v.log_seq, now)]
            if 2 * (1 + len(synced)) <= 1 + len(v.peers) or any(p[_ACKED] < seq for p in synced):
                return False
        return True

    def live_peers(self) -> list[int]:
        """The peers streaming on the links of every worker whose view is known."""
        views = self._views()
        out = []
        for p in views[0].peers:
            nid = p[_ID]
            if all(any(q[_ID] == nid and q[_STREAMING] for q in v.peers) for v in views):
                out.append(nid)
        return out

    def caught_up(self, nid: int) -> bool:
        """Has every worker applied each log of peer ``nid`` up to its end at the peer's
        last Hello for it (the Hellos any worker received)? False before any Hello, or
        while a sibling's view is not known yet (polled since it started)."""
        mesh = self.mesh
        views: list[tuple[int, View]] = [(self.index, self.own())]
        for j, v in enumerate(self.views):
            if j != self.index:
                if v is None:
                    if mesh is not None and mesh.links[j] is not None:
                        return False  # (not polled yet)
                    continue  # (restarting: it catches up before it serves)
                views.append((j, v))
        hellos: dict[int, int] = {}
        for _, v in views:
            for q in v.peers:
                if q[_ID] == nid:
                    for inc, end in q[_HELLOS]:
                        hellos[inc] = max(hellos.get(inc, -1), end)
        if not hellos:
            return False  # its log has not started to arrive yet
        caught = self._caught
        if len(caught) > 10_000:
            caught.clear()
        for j, v in views:
            for inc, end in hellos.items():
                if (j, nid, inc, end) in caught:
                    continue
                if j == self.index:
                    mark = self.node.replication.hwm(nid, inc)
                else:
                    q = next((q for q in v.peers if q[_ID] == nid), None)
                    mark = max((m for i, m in (q[_MARKS] or ()) if i == inc), default=0) if q else 0
                if mark < end:
                    return False
                caught.add((j, nid, inc, end))  # (a mark only grows: reached once, reached)
        return True

    # -- the poll -----------------------------------------------------------------------------------
    def start(self) -> None:
        if self.mesh is not None:
            self._task = asyncio.get_running_loop().create_task(self._poll())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def polled(self, timeout: float) -> None:
        """Wait for the next poll of the siblings' views (at most ``timeout`` seconds)."""
        try:
            await asyncio.wait_for(self._polled.wait(), timeout)
        except asyncio.TimeoutError:
            pass

    async def _poll(self) -> None:
        mesh, gw = self.mesh, self.gw
        while True:
            try:
                repl = self.node.replication
                got = await mesh.gather_part(gw.sys, REPLICAS, _ARGS, ASK_S) if repl is not None and repl.peers \
                    else []
                moved = False
                for j, raw in enumerate(got):
                    if j == self.index:
                        continue
                    if raw is None:
                        if mesh.links[j] is None:
                            self.views[j] = None  # (restarting: its view will be asked again)
                        continue
                    old = self.views[j]
                    self.views[j] = View(raw)
                    moved = moved or old is None or [p[_ACKED] for p in old.peers] != [p[_ACKED] for p in raw[2]]
                ev, self._polled = self._polled, asyncio.Event()
                ev.set()
                if moved:
                    gw.acks_moved()
            except asyncio.CancelledError:
                raise
            except Exception:
                self.node.stats.unexpected_errors += 1
                log.exception("Kafka gateway: polling the shard workers' replication figures failed")
            await asyncio.sleep(POLL_S if self.waiting or gw.logs.pending() else IDLE_POLL_S)
