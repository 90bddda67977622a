"""Shard workers: one node's partitions served by several processes (docs/shards.md).

Slice 1 has the router (``router.py``): which shard a command runs on, from its keys
and its class. The workers, the mesh and the supervisor come in the next slices."""
