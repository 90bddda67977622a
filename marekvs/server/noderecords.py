"""ACL users and function libraries on a node of several shard workers (docs/shards.md §4;
issue 33): every worker knows every one, each record is stored by one.

A node-level record (``node/records.py``) lives at the partition of its name, as the frozen
format lays it out (``core/keys.encode_user_key``, ``encode_function_key``), so it is stored
by the worker owning that partition: its RocksDB, its replication log, nothing moves when
partitions do. Every worker still needs every user (a connection of any worker may AUTH as
it) and every library (FCALL runs where its keys are). So ``SharedRecords``, the worker's
``Node.records``:

- ``write(recs)`` (ACL SETUSER, DELUSER, LOAD, CONFIG SET requirepass, FUNCTION LOAD,
  DELETE, FLUSH, RESTORE, all through ``Acl`` and ``Scripting``) applies the records here
  at once (``apply``: those of this worker's partitions through its one apply path, the
  others merged into ``foreign`` as the store would merge them, and the subscribers told
  of what changed), then sends them to every sibling (``RECORDS``), which applies them the
  same way: the owner stores them, the others keep them in memory. The command's reply
  waits for every sibling's acknowledgement, sent after its commit (``acks``, awaited by
  ``ShardConnection``), so a user changed or deleted through one worker is changed on
  every worker before the client hears OK, and a deleted user's connections on every
  worker are closed (``Acl.records_changed``). A write whose record's owner is down is
  refused with LOADING before anything changes (it could not be stored);
- merging (LWW, the records' own merge) makes the workers agree whatever order two
  concurrent changes reach them in: each ends with the newest of each record;
- ``gather()``: a starting worker (the first start, or one the supervisor restarts) asks
  each sibling for the records it stores (``GATHER``) and applies them, before it loads its
  settings (aclfile, requirepass: ``Acl.load_settings``) and before it serves a client.

Every worker applies its configured aclfile (first start of its directory) and
requirepass itself: they give every worker the same users, and the records of the same
rules written by several workers merge to one.
"""

from __future__ import annotations

import asyncio
from typing import Any

import msgpack

from marekvs.commands.errors import CommandError
from marekvs.commands.reply import Err
from marekvs.core import envelope
from marekvs.core import keys as K
from marekvs.core import merge
from marekvs.node.records import NodeRecords, Records

RECORDS = 1 << 20  # a mesh entry's command index: apply these records ([reload_users, records]); +OK
GATHER = RECORDS + 1  # ... the node-level records this worker stores, packed


class SharedRecords(NodeRecords):
    """A shard worker's node-level records (the module docstring)."""

    def __init__(self, mesh: Any):
        node = mesh.node
        super().__init__(node.ks)
        self.mesh = mesh
        self.node = node
        r = node.engine.partitions
        self.first, self.last = r.first, r.last
        self.foreign: dict[bytes, bytes] = {}  # records of the siblings' partitions, merged
        self.acks: list[asyncio.Future[Any]] = []  # the siblings' acknowledgements of this command's writes

    def owner(self, ikey: bytes) -> int:
        return int(self.mesh.shards.owner[K.pid_of_ikey(ikey)])

    def mine(self, ikey: bytes) -> bool:
        return self.first <= K.pid_of_ikey(ikey) <= self.last

    def get(self, ikey: bytes) -> bytes | None:
        return self.ks.get(ikey) if self.mine(ikey) else self.foreign.get(ikey)

    def write(self, recs: Records, reload_users: bool = False) -> None:
        if not recs:
            return
        mesh = self.mesh
        for ikey, _ in recs:
            j = self.owner(ikey)
            if j != mesh.index and mesh.links[j] is None:
                raise CommandError(mesh.loading_err[j])
        self.apply(recs)
        loop = self.node.loop
        assert loop is not None  # (links exist once the worker runs)
        entry = [[0, 0, RECORDS, [reload_users, recs]]]
        for link in mesh.links:
            if link is None:
                continue
            fut: asyncio.Future[Any] = loop.create_future()
            link.send(entry, lambda replies, f=fut: f.done() or f.set_result(replies))
            self.acks.append(fut)

    def apply(self, recs: Records) -> None:
        """Records written here or by a sibling: this worker's stored, the others merged
        into ``foreign``; the subscribers hear of every change."""
        # the receive rule of the records' clocks: a later change through this worker is
        # stamped above them (each worker has its own clock; a FUNCTION RESTORE through
        # worker 1 right after a FLUSH through worker 0, in the same millisecond, lost the
        # merge to the older tombstone when its logical counter was the lower)
        if recs:
            self.node.hlc.observe(max(envelope.hlc_of(r) for _, r in recs))
        mine = [(k, r) for k, r in recs if self.mine(k)]
        if mine:
            self.ks.apply(mine)  # (Engine.on_node_change tells the subscribers)
        changed = []
        foreign = self.foreign
        for ikey, rec in recs:
            if self.mine(ikey):
                continue
            cur = foreign.get(ikey)
            new = merge.merge(ikey, cur, rec)
            if new != cur:
                foreign[ikey] = new
                changed.append((ikey, new))
        if changed:
            self.node.changes.publish_node(changed)

    def share(self, recs: Records) -> None:
        """Records a peer's batch or snapshot stored here (replication, a shard worker's
        ``on_node_records``): to every sibling, without waiting (a sibling down now gathers
        them when it starts again)."""
        entry = [[0, 0, RECORDS, [False, recs]]]
        for link in self.mesh.links:
            if link is not None:
                link.send(entry, lambda replies: None)

    def received(self, ci: int, args: Any) -> bytes:
        """A sibling's ``RECORDS`` or ``GATHER`` entry: its reply."""
        if ci == GATHER:
            stored = [[k, r] for tag in (K.TAG_USER, K.TAG_FUNCTION) for k, r in self.node.engine.scan_tags(0, tag)]
            return bytes(msgpack.packb(stored))
        reload_users, recs = args
        if reload_users:
            self.node.acl.kill_all_but_default()
        self.apply([(k, r) for k, r in recs])
        return b"+OK\r\n"

    async def gather(self) -> None:
        """At start, every link up: the records each sibling stores."""
        loop = asyncio.get_running_loop()
        waits = []
        for link in self.mesh.links:
            if link is not None:
                fut: asyncio.Future[Any] = loop.create_future()
                link.send([[0, 0, GATHER, None]], lambda replies, f=fut: f.done() or f.set_result(replies))
                waits.append(fut)
        for fut in waits:
            got = await fut
            if got is None:
                raise RuntimeError("a sibling shard worker went away while this one started")
            self.apply([(k, r) for k, r in msgpack.unpackb(got[0], raw=False)])

    def take_acks(self) -> Any:
        """The awaitable of the acknowledgements of what the command just run wrote, or
        None (then it wrote nothing)."""
        acks, self.acks = self.acks, []
        if not acks:
            return None

        async def acked() -> Err | None:
            for fut in acks:
                if await fut is None:
                    return Err("LOADING a shard worker stopped while the change was shared: it may not hold it yet")
            return None
        return acked()
