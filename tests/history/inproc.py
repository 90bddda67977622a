"""Real nodes in one process, for the history checker: fast and exactly controlled.

Each node is a ``marekvs.node.Node`` (RocksDB, keyspace, command table, change feed and
the per-type state kept from it) running commands through ``dispatch``, as a client
connection does. The nodes share a fake wall clock that the checker advances (every
command runs one millisecond after the previous one, so stamps follow the history's
order; ``tick`` lets TTLs pass).

What a command wrote travels as replication ships it: the keys of its log entry with the
records the node holds for them once committed, merged at the peer through the same
``Engine.apply`` (no log entry, the peer's clock taking the remote stamps). Delivery is
causal (a command reaches a node only after everything its origin knew when it ran it)
but otherwise in any order, duplicated at will, and held back as long as a partition
lasts; ``sync`` copies every record of one node into another (what a repair does);
``restart`` closes a node and opens it again on its data directory, so everything the
node keeps in memory is rebuilt from its records.
"""

from __future__ import annotations

import os
from typing import Any

from marekvs.commands import reply as R
from marekvs.config import Config
from marekvs.node import Node

_CLOCK = [1_900_000_000_000]  # the fake wall clock (ms), shared and only ever moving on


def clock() -> int:
    return _CLOCK[0]


def advance(ms: int) -> int:
    _CLOCK[0] += ms
    return _CLOCK[0]


def normalize(value: Any) -> Any:
    """A reply as redis-py gives it (RESP2): errors as exceptions' texts, nulls as None."""
    if isinstance(value, R.Err):
        return value
    if isinstance(value, R.NullArray):
        return None
    if isinstance(value, (R.Simple, R.Verbatim, R.BigNumber, R.DoubleText)):
        return bytes(value)
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, float):
        return value
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, str):
        return value.encode()
    return value


class InProcessCluster:
    def __init__(self, base: str, n: int = 3):
        self.base = base
        self.nodes: list[Node] = []
        self.ctx: list[Any] = []
        for i in range(n):
            self.nodes.append(self._open(i))
            self.ctx.append(self.nodes[i].new_context())

    def _open(self, i: int) -> Node:
        node = Node(Config(data_dir=os.path.join(self.base, f"n{i + 1}"), node_id=i + 1, durability="no"))
        node.hlc._clock = clock  # type: ignore[attr-defined]
        node.hlc._wall = False  # type: ignore[attr-defined]
        node.ks.now = clock  # type: ignore[method-assign]
        return node

    def close(self) -> None:
        for n in self.nodes:
            n.close()

    def restart(self, i: int) -> None:
        self.nodes[i].close()
        self.nodes[i] = self._open(i)
        self.ctx[i] = self.nodes[i].new_context()

    def run(self, i: int, argv: list[bytes]) -> tuple[Any, list[tuple[bytes, bytes]]]:
        """Run one command on node ``i``: (its reply, the records it wrote as shipped)."""
        node = self.nodes[i]
        node.engine.commit()
        reply = node.dispatch(self.ctx[i], list(argv))
        keys = list(node.engine.pending_log)
        node.engine.commit()
        return normalize(reply), [(k, node.engine.get(k)) for k in keys]  # type: ignore[misc]

    def read(self, i: int, *argv: bytes) -> Any:
        node = self.nodes[i]
        r = normalize(node.dispatch(self.ctx[i], list(argv)))
        node.engine.commit()
        if isinstance(r, R.Err):
            raise AssertionError(f"{argv}: {r}")
        return r

    def apply(self, i: int, batch: list[tuple[bytes, bytes]]) -> None:
        if not batch:
            return
        node = self.nodes[i]
        node.hlc.update(max(int.from_bytes(v[1:9], "big") for _, v in batch))
        node.engine.apply(batch, log_entry=False)
        node.engine.commit()

    def sync(self, src: int, dst: int) -> None:
        """Every record of node ``src`` merged into node ``dst`` (a repair's effect)."""
        self.nodes[src].engine.commit()
        self.apply(dst, list(self.nodes[src].engine.scan(b"")))
