"""A Kafka-wire gateway over marekvs streams: Kafka producers, consumers and admin tools work
unchanged against any node of a cluster, on the data Redis clients see as streams.

Modules, each with its part of the design:

- ``protocol.py``: frames, request headers, the API table (what ApiVersions advertises is
  what is implemented), error codes; the structs are kafka-python's, generated from the
  Kafka project's JSON message schemas.
- ``records.py``: record batches <-> stream entries (kafka-python's ``kafka.record`` codec).
- ``offsets.py``: Kafka offsets as stream ids with the origin dropped, minted in per-node
  lanes so they are exact, unique and ordered on an active-active cluster.
- ``topics.py``: Korvet's storage layout and partition leadership.
- ``partitions.py``: append, read, high watermark (what acks=all would acknowledge), log
  start, retention.
- ``producers.py``: idempotent producers (producer ids, the sequence state that stores a
  retried batch once).
- ``handlers.py``: the APIs.
- ``server.py``: the listener and its connections, each a client of ``node.dispatch`` (SASL
  PLAIN as marekvs ACL users), who may lead, the retention pass.
- ``rounds.py``: on a node of shard workers, worker 0 serves the port and each step of a
  request runs its commands where their keys are, in rounds that lock every worker.
- ``replicas.py``: what the peers acknowledged of each worker's replication log (acks=all,
  the high watermark), which peers are live and whether the node caught up with them.

docs/kafka.md is the operator's page (how to run it, APIs and versions, semantics on a
cluster, differences from Kafka).
"""

from marekvs.gateway.kafka.server import KafkaGateway

__all__ = ["KafkaGateway"]
