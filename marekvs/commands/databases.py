"""One keyspace: SWAPDB and MOVE answer as a Redis Cluster node does.

The data model has one keyspace (database 0), as a Redis Cluster node has. SELECT of any
other index (``connection.py``), SWAPDB and MOVE give Redis Cluster's errors, and INFO
reports ``cluster_enabled:1`` to match (``admin.py``); docs/divergences.md says what else
of Redis Cluster this is not (no slots, no CLUSTER command: every node serves every key).
"""

from __future__ import annotations

from marekvs.commands import errors
from marekvs.commands.errors import CommandError
from marekvs.commands.table import command


@command("swapdb", 3, "write fast", group="server", acl="keyspace write fast dangerous",
         summary="Swaps two Redis databases", since="4.0.0",
         complexity="O(N) where N is the count of clients watching or blocking on keys from both databases.",
         syntax="index1 index2")
def swapdb(ctx, args: list[bytes]):
    raise CommandError(errors.SWAPDB_CLUSTER)


@command("move", 3, "write fast", specs="RW ACCESS UPDATE index 1 range 0", group="generic",
         acl="keyspace write fast", summary="Move a key to another database", since="1.0.0", complexity="O(1)",
         syntax="key db")
def move(ctx, args: list[bytes]):
    raise CommandError(errors.MOVE_CLUSTER)
