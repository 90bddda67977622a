"""Anti-entropy inside a node: the gRPC service, the background exchange and the digest
verifier, with their figures for INFO antientropy and the Prometheus metrics.

``AntiEntropy(node, replication)`` registers the service on replication's gRPC server
and itself as a companion of replication (started once the server is up, stopped before
it). Two background tasks then run on the node's event loop:

- the **exchange**: every ``antientropy_interval`` seconds (default 5; 0 turns it off),
  one exchange (``exchange.py``) between this node and its next peer in turn: compare
  the roots of all 4096 partitions (32 KB each way), drill into at most
  ``antientropy_partitions`` mismatched ones (default 256; the next exchange starts where
  this one stopped), pull what this node lacks and push what the peer lacks. Differences
  younger than ``antientropy_settle`` seconds (default 2) are log shipping's business.
  With N nodes each pair is compared every ~(N-1) x interval seconds, by both sides.
  On a node of several shard workers (docs/shards.md §6) every worker runs its own
  exchange over its own partitions (its ``LocalReplica``) against the peers' node ports,
  and ``antientropy_partitions`` is per worker; the service answers from a
  ``routed.RoutedReplica`` (the node's partitions, each part from its owner worker), so a
  peer sees the node as one replica.
- the **verifier**: recomputes the kept digest of each partition from its records and
  corrects it where it differs (a record deleted or changed behind the engine's back, a
  disk that lost files: what no write told the digest), logging a warning. A whole pass
  takes about ``digest_verify_interval`` seconds (default 3600; 0 turns it off); the first
  pass after a start runs faster (``FIRST_PASS_RECORDS`` records or
  ``FIRST_PASS_PARTITIONS`` partitions per ``FIRST_PASS_STEP`` seconds: ~25 s per million
  records), since a restart is when files are found missing. It walks the partitions of
  the node's engine (``Engine.partitions``: all 4096, or a shard worker's range), as
  ``DigestVerifier``. A partition bigger than a step is read over several steps, and
  started again when a write changes it in between (``DigestVerifier.step``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from marekvs.antientropy import exchange as X
from marekvs.antientropy.remote import GrpcReplica, ReplicaError
from marekvs.antientropy.replica import LocalReplica, Replica
from marekvs.antientropy.report import Report
from marekvs.antientropy.routed import RoutedReplica
from marekvs.antientropy.service import SERVICE, AntiEntropyService
from marekvs.core.partition import PARTITIONS, PartitionRange
from marekvs.replication.gen import antientropy_v1_pb2_grpc as pbg

log = logging.getLogger("marekvs.antientropy")

FIRST_PASS_RECORDS = 2000  # records the verifier reads per step of its first pass ...
FIRST_PASS_STEP = 0.05  # ... every this many seconds (at most ~40k records/s)
STEP = 0.5  # seconds between the verifier's later steps
MIN_STEP_RECORDS = 200
FIRST_PASS_PARTITIONS = 256  # partitions per step at most (an empty one still costs an iterator)
MIN_STEP_PARTITIONS = 8
RESTARTS = 3  # writes that may restart the verification of one partition within a pass


class DigestVerifier:
    """The verifier's walk over a range of partitions (default: the local replica's, which
    is its engine's), one step at a time: ``step`` verifies partitions from ``pid`` on,
    within the range, wrapping from its last back to its first (a pass: ``cycles``)."""

    def __init__(self, local: LocalReplica, partitions: PartitionRange | None = None):
        self.local = local
        self.partitions = r = local.partitions if partitions is None else partitions
        if not (local.partitions.holds(r.first) and local.partitions.holds(r.last)):
            raise ValueError(f"digest verifier over partitions {r}, outside the replica's {local.partitions}")
        self.pid = r.first  # the next partition to verify
        self.cycles = 0  # whole passes over the range
        self.cycle_records = 0  # records read in the pass under way ...
        self.last_cycle = 0  # ... and in the last whole one
        # a partition bigger than a step, verified over several: the segments of what was
        # read, the last key read, the kept root then, and how often writes restarted it
        self._acc: list[int] | None = None
        self._after: bytes | None = None
        self._kept = 0
        self._restarts = 0
        self.skipped = 0  # partitions left to the next pass (written through every try)

    def budget(self, interval: float) -> tuple[int, int]:
        """(records, partitions) of the next step: the first pass runs faster (see the
        module docstring); later ones take the share of the last pass that makes a whole
        pass last about ``interval`` seconds."""
        if self.cycles == 0:
            return FIRST_PASS_RECORDS, FIRST_PASS_PARTITIONS
        share = STEP / interval  # of a whole pass, per step
        return (max(MIN_STEP_RECORDS, int(self.last_cycle * share)),
                max(MIN_STEP_PARTITIONS, int(self.partitions.count * share) + 1))

    def step(self, budget: int, parts: int) -> int:
        """Verify (and correct) partitions until ``budget`` records were read, ``parts``
        partitions were verified or the pass ended; return the records read.

        A partition bigger than what is left of the budget is read over several steps (one
        collection is one partition: read whole, a 1M-member zset held the event loop for
        seconds). Its segments are summed step by step, and the sum stands for the
        partition only while no write changed it: a step that finds the partition's kept
        root moved since the last one starts it again, and after ``RESTARTS`` such
        restarts it is left to the next pass (``skipped``)."""
        read = 0
        r = self.partitions
        local = self.local
        while read < budget and parts > 0:
            parts -= 1
            pid = self.pid
            kept = local.kept_root(pid)
            if self._acc is not None and kept != self._kept:  # written since the last step
                self._acc, self._after = None, None
                self._restarts += 1
            if self._restarts > RESTARTS:
                log.info("digest verifier: partition %d was written during every try; verified next pass", pid)
                self.skipped += 1
            else:
                segs, last, n = local.read_segments(pid, self._after, budget - read)
                read += n
                self.cycle_records += n
                if self._acc is not None:
                    segs = [a ^ b for a, b in zip(self._acc, segs)]
                if last is not None:  # the partition goes on: the next step reads on
                    self._acc, self._after, self._kept = segs, last, kept
                    break
                if local.check(pid, segs, correct=True):
                    log.warning("the kept digest of partition %d differed from its records (changed behind "
                                "the engine's back?): corrected; anti-entropy will repair the difference", pid)
            self._acc, self._after, self._restarts = None, None, 0
            self.pid = r.after(pid)
            if self.pid == r.first:
                self.cycles += 1
                self.last_cycle, self.cycle_records = self.cycle_records, 0
                break
        return read


class AntiEntropy:
    def __init__(self, node: Any, replication: Any):
        self.node = node
        self.config = node.config
        self.replication = replication
        resp = f"{replication.advertise_host}:{self.config.client_port}"
        self.local = LocalReplica(node.engine, node.hlc, self.config, resp, address=replication.grpc_addr)
        # what the service answers from: this process's partitions, or (a shard worker) the
        # node's, each part from its worker (routed.py)
        self.replica: Replica = self.local
        workers = replication.workers
        if workers is not None:
            self.replica = RoutedReplica(self.local, workers.shards, workers.index,
                                         lambda: [s.grpc_port for s in workers.read()], self.config)
        self.service = AntiEntropyService(self.replica, self.config)
        replication.services.append(lambda server: pbg.add_AntiEntropyServicer_to_server(self.service, server))
        replication.companions.append(self)
        self._tasks: list[asyncio.Task] = []
        self.total = Report()  # every background exchange of this node, added up
        self.last: Report | None = None
        self.exchanges = 0
        self.errors = 0
        self.last_error = ""
        self.last_peer = 0
        self.last_at = 0.0
        self._turn = 0
        self._start = self.local.partitions.first  # where the next exchange drills in first
        self.verifier = DigestVerifier(self.local)

    # -- life cycle -------------------------------------------------------------------------
    def start(self) -> None:
        loop = asyncio.get_running_loop()
        if self.config.antientropy_interval > 0:
            self._tasks.append(loop.create_task(self._exchange_loop()))
        if self.config.digest_verify_interval > 0:
            self._tasks.append(loop.create_task(self._verify_loop()))

    def stop(self) -> None:
        for t in self._tasks:
            t.cancel()
        self._tasks = []

    # -- the background exchange ------------------------------------------------------------
    def _next_peer(self) -> Any:
        peers = sorted(self.replication.peers.values(), key=lambda p: p.node_id)
        up = [p for p in peers if p.state == "streaming"] or peers
        if not up:
            return None
        p = up[self._turn % len(up)]
        self._turn += 1
        return p

    async def _exchange_loop(self) -> None:
        warned: set[int] = set()
        while True:
            await asyncio.sleep(self.config.antientropy_interval)
            p = self._next_peer()
            if p is None:
                continue
            try:
                await self.exchange_with(p.node_id, p.grpc_addr)
                warned.discard(p.node_id)
            except (ReplicaError, X.IncompatibleReplicas) as e:
                self.errors += 1
                self.last_error = str(e)
                if p.node_id not in warned:
                    log.warning("anti-entropy exchange with peer %d failed: %s", p.node_id, e)
                    warned.add(p.node_id)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                self.errors += 1
                self.last_error = repr(e)
                log.exception("anti-entropy exchange with peer %d failed", p.node_id)

    async def exchange_with(self, peer_id: int, addr: str) -> Report:
        """One exchange between this node (a shard worker: its partitions) and the peer at
        ``addr`` (see the module docstring)."""
        c = self.config
        mine = self.local.partitions
        opts = X.Options(settle_ms=int(c.antientropy_settle * 1000), max_partitions=c.antientropy_partitions,
                         start=self._start, chunk=PARTITIONS)
        remote = GrpcReplica(addr, c, caller_id=c.node_id)
        try:
            rep = await X.exchange([self.local, remote], mine.first, mine.count, opts=opts)
        finally:
            await remote.close()
        self._start = mine.first + (self._start - mine.first + c.antientropy_partitions) % mine.count
        self.exchanges += 1
        self.last = rep
        self.last_peer = peer_id
        self.last_at = time.monotonic()
        self.total.add(rep)
        if rep.records_repaired_total:
            log.info("anti-entropy with peer %d: %d mismatched partitions, %d records repaired (%s)", peer_id,
                     rep.partitions_mismatched, rep.records_repaired_total, rep.records_repaired)
        return rep

    # -- the digest verifier ----------------------------------------------------------------
    async def _verify_loop(self) -> None:
        await asyncio.sleep(1.0)
        v = self.verifier
        while True:
            first = v.cycles == 0
            try:
                v.step(*v.budget(self.config.digest_verify_interval))
            except Exception:
                log.exception("digest verification failed")
            await asyncio.sleep(FIRST_PASS_STEP if first else STEP)

    # -- figures ------------------------------------------------------------------------------
    def refused_calls(self) -> int:
        """Calls to the service refused: by the cluster secret check before they reached
        it, and by the service itself (cluster name, bad arguments or records)."""
        return self.replication.secret_check.refused[SERVICE] + self.service.refused

    def info_fields(self) -> list[tuple[str, object]]:
        t, last, loc = self.total, self.last, self.local
        age = int((time.monotonic() - self.last_at) * 1000) if self.last_at else -1
        pulled = t.records_repaired.get(str(self.config.node_id), 0)
        return [
            ("antientropy_interval_s", self.config.antientropy_interval),
            ("exchanges", self.exchanges), ("exchange_errors", self.errors),
            ("last_exchange_peer", self.last_peer), ("last_exchange_age_ms", age),
            ("last_exchange_ms", int(last.wall_seconds * 1000) if last else -1),
            ("last_exchange_mismatched_partitions", last.partitions_mismatched if last else 0),
            ("partitions_compared", t.partitions_compared), ("mismatched_partitions", t.partitions_mismatched),
            ("segments_mismatched", t.segments_mismatched), ("keys_differing", t.keys_differing),
            ("keys_in_flight", t.keys_in_flight),
            ("records_repaired", t.records_repaired_total), ("records_pulled", pulled),
            ("records_pushed", t.records_repaired_total - pulled),
            ("records_past_gc_grace", sum(t.records_past_gc_grace.values())),
            ("records_removed_past_gc_grace", loc.removed_past_gc_grace),
            ("pushes_received", loc.pushes), ("pushed_records_applied", loc.pushed_applied),
            ("pushed_records_past_gc_grace", loc.pushed_past_gc_grace),
            ("calls_served", self.service.calls), ("calls_refused", self.refused_calls()),
            ("digest_verify_cycles", self.verifier.cycles), ("digest_verified_partitions", loc.verified),
            ("digest_corrected_partitions", loc.corrected),
            ("digest_rebuilt_at_open", int(self.node.engine.digest.rebuilt_at_open)),
            ("last_exchange_error", self.last_error.replace(" ", "_")[:200]),
        ]

    def metrics(self) -> list[tuple[str, dict[str, str], float]]:
        t, loc = self.total, self.local
        me = str(self.config.node_id)
        return [
            ("marekvs_antientropy_exchanges_total", {}, self.exchanges),
            ("marekvs_antientropy_exchange_errors_total", {}, self.errors),
            ("marekvs_antientropy_partitions_compared_total", {}, t.partitions_compared),
            ("marekvs_antientropy_mismatched_partitions_total", {}, t.partitions_mismatched),
            ("marekvs_antientropy_records_repaired_total", {"direction": "pulled"}, t.records_repaired.get(me, 0)),
            ("marekvs_antientropy_records_repaired_total", {"direction": "pushed"},
             t.records_repaired_total - t.records_repaired.get(me, 0)),
            ("marekvs_antientropy_keys_in_flight_total", {}, t.keys_in_flight),
            ("marekvs_antientropy_pushed_records_applied_total", {}, loc.pushed_applied),
            ("marekvs_antientropy_records_removed_past_gc_grace_total", {}, loc.removed_past_gc_grace),
            ("marekvs_antientropy_calls_refused_total", {}, self.refused_calls()),
            ("marekvs_digest_verified_partitions_total", {}, loc.verified),
            ("marekvs_digest_corrected_partitions_total", {}, loc.corrected),
        ]
