"""What the shard workers of one node share about their clients (docs/shards.md §4): the
last client id given, so that ids grow over the whole node as on one process, and each
worker's number of connected clients, so that ``maxclients`` limits the node.

A small file the supervisor creates anew at each start (``data_dir/shards/clients``:
``CLIENTS_FILE``), mapped by every worker: the last id (8 bytes), the last SLOWLOG entry
id (8 bytes: entry ids grow over the node too, so SLOWLOG GET merges the workers' entries
in the order they were logged; a slow command is rare, so its ``flock`` costs nothing
measurable), then one count per worker (8 bytes each). A worker writes only its own count (one aligned 8-byte store: a
reader sees the old or the new value), so a worker that dies and starts again simply
writes its count anew; the id is taken under ``flock`` (one client id per connection: two
system calls, nothing per command). A client of worker ``i`` gets the smallest id above
the last one with ``id % N == i``: the node routes by ``id % N`` (``CLIENT ID % N`` is
the worker), and ids still grow across the node.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import struct
from typing import Callable

CLIENTS_FILE = "clients"
_Q = struct.Struct("<q")
_CLIENT_ID, _SLOWLOG_ID, _COUNTS = 0, 8, 2  # (offsets of the two ids; the counts start at slot 2)


def create(path: str, n: int) -> None:
    """The supervisor's: a new file for ``n`` workers (no id given, no client)."""
    with open(path, "wb") as f:
        f.write(bytes(8 * (_COUNTS + n)))


class SharedClients:
    """Worker ``index`` of ``n``'s view of the file at ``path``."""

    def __init__(self, path: str, index: int, n: int):
        self.fd = os.open(path, os.O_RDWR)
        self.mm = mmap.mmap(self.fd, 8 * (_COUNTS + n))
        self.index, self.n = index, n
        self.slot = 8 * (_COUNTS + index)
        self.set_count(0)  # (a worker started again: its clients went with it)

    def next_id(self) -> int:
        """A new client id of this worker, above every id the node gave."""
        return self._take(_CLIENT_ID, lambda last: last + 1 + (self.index - last - 1) % self.n)

    def next_slowlog_id(self) -> int:
        """The id of a new SLOWLOG entry of the node (from 0)."""
        return self._take(_SLOWLOG_ID, lambda last: last + 1) - 1

    def _take(self, at: int, after: Callable[[int], int]) -> int:
        fcntl.flock(self.fd, fcntl.LOCK_EX)
        try:
            new = after(_Q.unpack_from(self.mm, at)[0])
            _Q.pack_into(self.mm, at, new)
        finally:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
        return new

    def set_count(self, count: int) -> None:
        _Q.pack_into(self.mm, self.slot, count)

    def total(self) -> int:
        """The clients connected to the node (every worker's count)."""
        mm = self.mm
        return sum(int(_Q.unpack_from(mm, 8 * (_COUNTS + i))[0]) for i in range(self.n))

    def close(self) -> None:
        self.mm.close()
        os.close(self.fd)
