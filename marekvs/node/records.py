"""Where the node's node-level records are read and written: ACL users and function
libraries (the registry's NODE_TAGS; ``keyspace/users.py``, ``core/funclib.py``).

A single process holds every record in its own store: ``NodeRecords`` reads with
``Keyspace.get`` and writes through the one apply path (``Keyspace.apply``), whose
``Engine.on_node_change`` reports each change to the node's subscribers (``Acl.records_changed``,
``Scripting._records_changed``), local or replicated alike.

A shard worker (docs/shards.md §4) stores only the records of its own partitions (a
record lives at ``pid(name)``, as the frozen format lays it out) yet must know every user
and library: ``server/mesh.SharedRecords`` replaces this object there. ``write`` then
stores a record at its owner worker and hands every record to every worker, which keeps
the others' in memory (merged as the store would merge them) and tells its subscribers.
``reload_users`` marks ACL LOAD's write: every worker closes the connections of every
user but ``default``, as Redis frees its old users.
"""

from __future__ import annotations

from marekvs.keyspace.keyspace import Keyspace

Records = list[tuple[bytes, bytes]]


class NodeRecords:
    """A single process's node records: its own store."""

    def __init__(self, ks: Keyspace):
        self.ks = ks

    def get(self, ikey: bytes) -> bytes | None:
        """The record stored under ``ikey`` (a tombstone included), or None."""
        return self.ks.get(ikey)

    def write(self, recs: Records, reload_users: bool = False) -> None:
        """Write ``recs`` (``(ikey, record)``) in one apply; the subscribers hear of each
        change through ``Engine.on_node_change``."""
        if recs:
            self.ks.apply(recs)
