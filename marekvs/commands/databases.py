"""One database: SWAPDB and MOVE answer as a standalone Redis configured with
``databases 1`` does.

The data model has one keyspace, database 0. A marekvs node is a standalone Redis as far
as clients can tell (INFO ``redis_mode:standalone``, ``cluster_enabled:0``: there is no
CLUSTER command, and every node of a marekvs cluster serves every key), with one
database: SELECT 0 works and any other index is out of range (``connection.py``),
CONFIG GET databases says 1, and SWAPDB, MOVE and COPY ... DB give that Redis's answers.
"""

from __future__ import annotations

from marekvs.commands import args as A
from marekvs.commands import errors
from marekvs.commands.errors import CommandError
from marekvs.commands.table import command


def _db_index(arg: bytes, error: str | None = None) -> int:
    """Redis's getIntFromObjectOrReply for a database index (``error`` replaces its
    integer error text)."""
    try:
        return A.int_range_arg(arg)
    except CommandError:
        if error is None:
            raise
        raise CommandError(error) from None


@command("swapdb", 3, "write fast", group="server", acl="keyspace write fast dangerous",
         summary="Swaps two Redis databases", since="4.0.0",
         complexity="O(N) where N is the count of clients watching or blocking on keys from both databases.",
         syntax="index1 index2")
def swapdb(ctx, args: list[bytes]):
    a = _db_index(args[1], errors.INVALID_FIRST_DB)
    b = _db_index(args[2], errors.INVALID_SECOND_DB)
    if a != 0 or b != 0:
        raise CommandError(errors.DB_OUT_OF_RANGE)
    return b"OK"


@command("move", 3, "write fast", specs="RW ACCESS UPDATE index 1 range 0", group="generic",
         acl="keyspace write fast", summary="Move a key to another database", since="1.0.0", complexity="O(1)",
         syntax="key db")
def move(ctx, args: list[bytes]):
    if _db_index(args[2]) != 0:
        raise CommandError(errors.DB_OUT_OF_RANGE)
    raise CommandError(errors.SAME_OBJECT)
