"""Anti-entropy: find where replicas differ and repair it, online, without stopping writes.

Log shipping heals what a link lost while the log still held it; this layer heals the
rest (a node restored from an old copy after its peers trimmed their logs, files a disk
lost, a record deleted behind the engine's back, a batch a bug dropped). The pieces:

- ``core/digest.py`` (pure): the digest of a partition, a root over 16 segments over 256
  fine segments of XORed record hashes; ``storage/digest.py`` keeps the roots and the
  segments exact with every commit.
- ``plan.py`` (pure): which partitions and segments differ, and, from the records of the
  differing fine segments of every replica, the merged record (the core lattices) each
  replica lacks. ``report.py`` (pure): what a run found and did.
- ``replica.py``: one replica as the exchange sees it (roots, segments, fine segments,
  records, push); ``LocalReplica`` answers from this node's engine, ``remote.GrpcReplica``
  from a node over gRPC (``service.py`` serves ``proto/antientropy_v1.proto`` on the
  replication server: same port, TLS and cluster secret).
- ``exchange.py``: the one comparison-and-repair procedure over any set of replicas
  (riak_core's exchange takes a pluggable "remote" the same way): the node's background
  exchange with a peer (``background.py``), ``marekvs repair`` (``cli.py``) and each task
  of the PySpark job (``spark_job.py``) all run it.

Nothing here imports the RESP server or the node; ``plan``, ``report`` and the core they
use import no I/O library, so Spark executors load them without RocksDB.
"""
