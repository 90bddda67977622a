"""A data directory's identity: the node it belongs to, its format and its incarnation.

A new directory is stamped (in ``meta``) with its node id, the format version and a random
incarnation; a directory of another node or another format is refused at open. A node
whose directory was lost starts a new one, so a new incarnation, and peers never mistake
its new log for the old one; replication takes a new incarnation too when it finds the
directory behind its peers (``Engine.new_incarnation``).
"""

from __future__ import annotations

import os
from typing import Any


class StorageError(RuntimeError):
    pass


def new_incarnation() -> int:
    return int.from_bytes(os.urandom(8), "big") >> 1


def check(meta: Any, path: str, node_id: int, format_version: int) -> tuple[bool, int]:
    """(fresh, incarnation) of the directory whose ``meta`` column family is given,
    stamping it if new; StorageError if it belongs to another node or format."""
    stored = meta.get(b"node_id")
    if stored is None:
        meta.put(b"node_id", b"%d" % node_id)
        meta.put(b"format_version", b"%d" % format_version)
        meta.put(b"incarnation", b"%d" % new_incarnation())
        return True, int(meta.get(b"incarnation"))
    if int(stored) != node_id:
        raise StorageError(f"data directory {path} belongs to node {int(stored)}, not {node_id}")
    if int(meta.get(b"format_version") or 0) != format_version:
        raise StorageError(f"data directory {path} has another format version")
    return False, int(meta.get(b"incarnation"))
