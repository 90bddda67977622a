"""Idempotent producers: producer ids, and the sequence state that stores a retried batch once.

InitProducerId gives a producer an id that no other node gives: ``n << 16 | node id``, ``n``
from a counter of this node's own (``INCR {p}:producer-ids:{node}``, a replicated key only
this node writes), epoch 0; a producer that asks again with its id and epoch (InitProducerId
v3+, after an error it recovers from) keeps the id with the next epoch. Transactional ids are
refused (TRANSACTIONAL_ID_AUTHORIZATION_FAILED): transactions are not served.

Sequence state, per partition and producer, as Kafka's ProducerStateManager keeps it: the
producer's epoch and its last ``WINDOW`` batches appended (first and last sequence, base
offset), so that a retry of any of the five batches a producer may have in flight is
answered with the offset it was stored at and not stored again. A batch is checked
(``check``) against that state:

- an older epoch than the state's: INVALID_PRODUCER_EPOCH (a fenced producer);
- a batch of the window: a duplicate, answered with its base offset;
- a newer epoch: its first sequence must be 0; the same epoch: the one after the last
  batch's (mod 2^31); else OUT_OF_ORDER_SEQUENCE_NUMBER;
- no state (a new producer for this partition, or one whose state expired): accepted
  whatever its sequence, as Kafka does since KIP-360.

The state is a replicated hash ``{p}:producers:{topic}:{partition}``, field = producer id,
written in the same tick as the batch's entries and right after them in the replication
log, so a new leader after a failover has it for every batch it has. (A leader killed
between shipping a batch's entries and its state record, which usually go in one shipment,
leaves that batch without state on the new leader: the producer's retry stores it again.
Nothing acknowledged is lost either way. On a node of shard workers the state record and
the stream may be on two workers, each shipping its own log: acks=all waits for both,
``handlers._append``, and the window is the time between the two shipments.) State unused for ``EXPIRATION_MS`` (Kafka's
producer.id.expiration.ms, a day) is removed by the retention pass (``server.py``).
"""

from __future__ import annotations

from typing import NamedTuple

from marekvs.gateway.kafka.protocol import Error

WINDOW = 5  # batches a producer may have in flight (max.in.flight.requests.per.connection)
SEQ_MOD = 1 << 31
EXPIRATION_MS = 24 * 3600 * 1000
NODE_BITS = 16


class State(NamedTuple):
    epoch: int
    batches: list[tuple[int, int, int]]  # (first sequence, last sequence, base offset), oldest first
    ms: int  # when the producer last wrote here

    def encode(self) -> bytes:
        return b"%d %d %s" % (self.epoch, self.ms, b",".join(b"%d:%d:%d" % b for b in self.batches))


def decode(raw: bytes | None) -> State | None:
    if not raw:
        return None
    try:
        epoch, ms, *rest = raw.split(b" ")
        batches = [tuple(int(x) for x in b.split(b":")) for b in rest[0].split(b",")] if rest and rest[0] else []
        return State(int(epoch), batches, int(ms))  # type: ignore[arg-type]
    except ValueError:  # written by hand: as if there were none
        return None


def producer_id(n: int, node_id: int) -> int:
    return n << NODE_BITS | node_id


class Verdict(NamedTuple):
    error: int  # NONE: append, unless ``duplicate_of`` >= 0
    duplicate_of: int = -1  # the base offset the batch was stored at


def check(state: State | None, epoch: int, first: int, last: int) -> Verdict:
    """What to do with a batch of sequences ``first``..``last`` of a producer in ``epoch``."""
    if state is None:
        return Verdict(Error.NONE)
    if epoch < state.epoch:
        return Verdict(Error.INVALID_PRODUCER_EPOCH)
    if epoch == state.epoch:
        for f, la, offset in state.batches:
            if (f, la) == (first, last):
                return Verdict(Error.NONE, offset)
        expected = (state.batches[-1][1] + 1) % SEQ_MOD if state.batches else first
    else:
        expected = 0
    return Verdict(Error.NONE if first == expected else Error.OUT_OF_ORDER_SEQUENCE_NUMBER)


def appended(state: State | None, epoch: int, first: int, last: int, offset: int, now_ms: int) -> State:
    """The state after a batch was stored at ``offset``."""
    kept = state.batches if state is not None and state.epoch == epoch else []
    return State(epoch, [*kept, (first, last, offset)][-WINDOW:], now_ms)
