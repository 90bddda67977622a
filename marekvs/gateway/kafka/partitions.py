"""Partition logs: produce (append), fetch (read), the high watermark and the log start.

Append. The leader mints the ids of a produced record set itself (``offsets.mint``) and
adds one entry per record with ``XADD key <ms>-<seq> ...`` through ``node.dispatch``, all in
the same event-loop tick, so they are one commit. The response waits for that commit
(acks=1) or, for acks=all, until every in-sync peer acknowledged the replication-log
position of the last entry, as WAIT does, and the in-sync peers with the leader are a
majority of the nodes it knows (``acked_all``; ``replicas.py``: on a node of shard workers
the position is in the log of the worker holding the stream).

High watermark. What a consumer may read is what acks=all would acknowledge: the leader
keeps, per partition, its own appends that ``acked_all`` does not cover yet, and the high
watermark stops at the first of them (Kafka's: the offset replicated to every in-sync
replica). So a consumer never reads a record that a failover to another node would not
have. Entries this node did not append (replicated from the partition's former leader, which
counted them the same way before it acknowledged them) count at once. With no peers the high
watermark is the log end.

Log end and start. The log end offset is one past the greatest offset of the stream: of its
last id (``Stream.last_id``, from the per-origin counters: at least every live entry's id,
and it stays when entries are trimmed or deleted, so the log end never goes back; it starts
over only when the stream itself is deleted, with its topic) and of the other entries of
that millisecond (another origin's may have a greater counter, ``offsets.sort_ms``). The log
start offset is 0 while nothing was ever removed from the stream (no XDEL: XINFO's
max-deleted-entry-id is 0-0; no trimming: entries-added is the length), and else the first
live entry's offset (the log end when none is left): a consumer
that fetches from 0 on a fresh topic reads from the first record, and one whose position was
trimmed away by retention gets OFFSET_OUT_OF_RANGE and applies its reset policy, as on Kafka.

Read. A fetch from offset ``o`` reads the stream from the first id of ``o``'s millisecond,
puts each millisecond's entries in offset order (``offsets.sort_ms``), and returns those from
``o`` below the high watermark; the read ends with whole milliseconds.
"""

from __future__ import annotations

import collections
from typing import Any

from marekvs.core.hlc import physical_ms, wall_ms
from marekvs.gateway.kafka import offsets, records
from marekvs.gateway.kafka.replicas import REPLICAS
from marekvs.gateway.kafka.topics import StoreError
from marekvs.keyspace import streams

CHUNK = 256  # entries one XRANGE reads


def _sid(b: bytes) -> tuple[int, int]:
    ms, _, seq = b.partition(b"-")
    return int(ms), int(seq)


class Logs:
    def __init__(self, gw: Any):
        self.gw = gw
        self.node = gw.node
        self.layout = gw.layout
        # stream key -> deque of (first offset, replication-log position of the last entry:
        # ``replicas.py``) of this node's appends that ``acked_all`` does not cover yet
        self.unacked: dict[bytes, collections.deque[tuple[int, dict[int, int]]]] = {}

    # -- offsets -----------------------------------------------------------------------------------
    def _stream(self, key: bytes) -> streams.Stream | None:
        return streams.lookup(self.node.ks, key, wall_ms())

    def _remote(self, key: bytes) -> bool:
        """Is ``key`` on another shard worker (``rounds.py``)? Its stream is then read
        with XINFO STREAM and XRANGE, carried to its worker."""
        mesh = self.gw.mesh
        return mesh is not None and mesh.shards.shard_of_key(key) != mesh.index

    def _info(self, key: bytes) -> dict[bytes, Any] | None:
        """XINFO STREAM of ``key`` on its worker (None: no stream)."""
        try:
            flat = self.layout.cached(self.gw.sys, b"XINFO", b"STREAM", key)
        except StoreError as e:
            if e.text.startswith("ERR no such key"):
                return None
            raise
        return dict(zip(flat[::2], flat[1::2]))

    def _top_ms_end(self, key: bytes, top: tuple[int, int]) -> int:
        """One past the greatest offset of the entries of ``top``'s millisecond (another
        origin's may have a greater counter than ``top``'s: ``offsets.sort_ms``)."""
        end = offsets.of_id(top) + 1
        if not self._remote(key):
            for sid, _ in streams.range_entries(self.node.ks, self._stream(key), (top[0], 0),
                                                (top[0], streams.U64_MAX)):
                end = max(end, offsets.of_id(sid) + 1)
            return end
        got = self.layout.call(self.gw.sys, b"XRANGE", key, b"%d-0" % top[0], b"%d-%d" % (top[0], streams.U64_MAX))
        for sid, _ in got:
            end = max(end, offsets.of_id(_sid(sid)) + 1)
        return end

    def last_id(self, key: bytes) -> tuple[int, int]:
        """The stream's last id (MIN_ID when there is none)."""
        if self._remote(key):
            info = self._info(key)
            return streams.MIN_ID if info is None else _sid(info[b"last-generated-id"])
        st = self._stream(key)
        return streams.MIN_ID if st is None else st.last_id

    def log_end(self, key: bytes) -> int:
        top = self.last_id(key)
        if top == streams.MIN_ID:
            return 0
        return self._top_ms_end(key, top)

    def high_watermark(self, key: bytes) -> int:
        end = self.log_end(key)
        q = self.unacked.get(key)
        if q:
            self._settle(key, q)
            if q:
                return min(end, q[0][0])
        return end

    def _settle(self, key: bytes, q: collections.deque[tuple[int, dict[int, int]]]) -> None:
        while q and self.acked_all(q[0][1]):
            q.popleft()
        if not q:
            self.unacked.pop(key, None)

    def log_start(self, key: bytes) -> int:
        if self._remote(key):
            info = self._info(key)
            if info is None:
                return 0
            if _sid(info[b"max-deleted-entry-id"]) == streams.MIN_ID and info[b"entries-added"] <= info[b"length"]:
                return 0  # nothing ever removed
            first = info[b"first-entry"]
            return offsets.of_id(_sid(first[0])) if first else self.log_end(key)
        st = self._stream(key)
        if st is None:
            return 0
        tot = st.totals()
        if tot.max_deleted == streams.MIN_ID and tot.added <= st.length:  # nothing ever removed
            return 0
        first = streams.first_entry(self.node.ks, st)
        return offsets.of_id(first[0]) if first is not None else self.log_end(key)

    def acked_all(self, position: dict[int, int]) -> bool:
        """Has every in-sync peer acknowledged this node's replication log (each worker's)
        up to ``position``, and are they, with this node, a majority of the nodes it knows?
        (``Replicas.acked``)"""
        repl = self.node.replication
        if repl is None or not position or not repl.peers:
            return True
        return bool(self.gw.replicas.acked(position))

    def pending(self) -> bool:
        """Are appends of this node not acknowledged yet (their partitions' high watermarks
        stop below them)? Those acknowledged since are dropped first."""
        for key, q in list(self.unacked.items()):
            self._settle(key, q)
        return bool(self.unacked)

    # -- append ------------------------------------------------------------------------------------
    def append(self, ctx: Any, key: bytes, recs: list[tuple[Any, Any, int, list]]) -> tuple[int, dict[int, int], int]:
        """Add ``recs`` (key, value, timestamp, headers) to the stream ``key``; returns the
        first offset, the replication-log position of the last entry (``replicas.py``: in
        the log of the worker holding ``key``) and the log start offset after it."""
        remote = self._remote(key)
        if remote:  # the start after it, from the XINFO read before it (one XINFO less)
            info = self._info(key)
            emptied = info is not None and not info[b"first-entry"] and (
                _sid(info[b"max-deleted-entry-id"]) != streams.MIN_ID or info[b"entries-added"] > info[b"length"])
            start = -1 if emptied else self.log_start(key)  # (emptied: the first appended, below)
        top = self.last_id(key)
        ms, seq = offsets.mint(top, physical_ms(self.node.hlc.now()), self.node.config.node_id, len(recs))
        pos = self.layout.call_many(ctx, key, [[b"XADD", key, b"%d-%d" % (ms, seq + i),
                                                *records.entry_fields(k, v, ts, headers)]
                                               for i, (k, v, ts, headers) in enumerate(recs)], tail=REPLICAS)
        first = offsets.of_id((ms, seq))
        replicas = self.gw.replicas
        if remote:
            j = replicas.worker_of(key)  # (the batch's position there: its ``~replicas`` after the XADDs)
            position = {j: replicas.took(j, pos)}
            self.gw.wake(key)  # (the change feed here tells only this worker's writes)
            if start < 0:  # (records were removed and none was left: its start was its end)
                start = first
        else:
            position = {replicas.index: ctx.last_write_seq}
            start = self.log_start(key)
        if self.node.replication is not None and self.node.replication.peers:
            self.unacked.setdefault(key, collections.deque()).append((first, position))
        return first, position, start

    # -- read ----------------------------------------------------------------------------------------
    def read(self, ctx: Any, key: bytes, start: int, end: int, max_bytes: int) -> list[tuple[int, Any, list]]:
        """Entries with ``start <= offset < end`` in offset order, about ``max_bytes`` of
        them (at least one), ending with a whole millisecond."""
        raw: list[tuple[tuple[int, int], list[bytes]]] = []
        lo = b"%d-0" % offsets.first_id(start)[0]
        hi = b"%d-%d" % ((end - 1) >> offsets.SEQ_BITS, streams.U64_MAX)
        size = 0
        call = self.layout.call
        while True:
            got = call(ctx, b"XRANGE", key, lo, hi, b"COUNT", b"%d" % CHUNK)
            for sid, flat in got:
                raw.append((_sid(sid), flat))
                size += sum(len(x) for x in flat) + 24
            if len(got) < CHUNK:
                break
            last = raw[-1][0]
            if size >= max_bytes:  # finish the last millisecond, then stop
                rest = call(ctx, b"XRANGE", key, b"(%d-%d" % last, b"%d-%d" % (last[0], streams.U64_MAX))
                raw += [(_sid(s), f) for s, f in rest]
                break
            lo = b"(%d-%d" % last
        return [e for e in offsets.sort_ms(raw) if start <= e[0] < end]

    # -- retention -------------------------------------------------------------------------------------
    def trim(self, ctx: Any, key: bytes, retention_ms: int, retention_bytes: int, now_ms: int) -> int:
        """Trim the partition ``key`` to its retention (-1: none): entries appended more than
        ``retention_ms`` ago (the id's milliseconds: the append time), and the oldest entries
        beyond the newest ``retention_bytes`` (field and value bytes; the newest entry always
        stays). One XTRIM MINID, replicated like any write; returns how many went."""
        cut = (max(now_ms - retention_ms, 0), 0) if retention_ms >= 0 else streams.MIN_ID
        call = self.layout.call
        if retention_bytes >= 0:
            kept = 0
            hi = b"+"
            oldest: bytes | None = None
            while True:
                got = call(ctx, b"XREVRANGE", key, hi, b"-", b"COUNT", b"%d" % CHUNK)
                for sid, flat in got:
                    kept += sum(len(x) for x in flat)
                    if kept > retention_bytes and oldest is not None:
                        cut = max(cut, _sid(oldest))
                        break
                    oldest = sid
                else:
                    if len(got) == CHUNK:
                        hi = b"(" + got[-1][0]
                        continue
                break
        if cut == streams.MIN_ID:
            return 0
        return call(ctx, b"XTRIM", key, b"MINID", b"%d-%d" % cut)
