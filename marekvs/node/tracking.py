"""Client-side caching: CLIENT TRACKING and the invalidation messages (Redis 7.0 ``tracking.c``).

Default mode: the node remembers which keys each tracking client read (the keys of every
read-only command it runs, from the command table's key specs; with OPTIN only after
``CLIENT CACHING yes``, with OPTOUT not after ``CLIENT CACHING no``). When one of them
changes, the client gets ``invalidate [key]`` once and the key is forgotten until it reads
it again. BCAST mode: the client gets every change of a key that starts with one of its
prefixes (any key without prefixes), gathered per prefix and sent at the end of the
event-loop tick, after the tick's replies, as Redis sends them before it sleeps. NOLOOP:
not for changes the client made itself.

Changes are every record the apply path changed (the node's change feed): a write on this
node or a record merged from a peer, so a client caching reads from this node is told when
a write on another node replaced a value, once that write has replicated. A RESP3 client
gets the message as a push (``>2 invalidate [keys]``); a RESP2 client names a REDIRECT
client, which gets it as a Pub/Sub message on ``__redis__:invalidate`` (if it subscribed)
or as a push (RESP3). The client whose own command changed a key gets its invalidation
after that command's reply, as in Redis. FLUSHALL/FLUSHDB send ``invalidate`` with a null.
"""

from __future__ import annotations

from typing import Any

from marekvs.commands.context import Context, TrackingState  # noqa: F401 - the state kept on a context
from marekvs.commands.reply import Push
from marekvs.keyspace.changes import Change, user_keys

INVALIDATE_CHANNEL = b"__redis__:invalidate"


class Tracking:
    def __init__(self, node: Any):
        self.node = node
        self.table: dict[bytes, dict[int, None]] = {}  # key -> ids of the clients that read it
        self.bcast: dict[int, Context] = {}
        self.clients = 0
        self.suppress = False  # a FLUSHALL already told everybody
        self.pending: dict[tuple[int, bytes], list[bytes]] = {}  # BCAST: (client, prefix) -> keys
        self._subscribed = False

    # -- clients ---------------------------------------------------------------------------
    def enable(self, ctx: Context, state: TrackingState) -> None:
        if ctx.tracking is None:
            self.clients += 1
        ctx.tracking = state
        if state.bcast:
            self.bcast[ctx.id] = ctx
        if not self._subscribed:
            self.node.changes.subscribe(self._changed)
            self._subscribed = True

    def disable(self, ctx: Context) -> None:
        if ctx.tracking is None:
            return
        ctx.tracking = None
        self.clients -= 1
        self.bcast.pop(ctx.id, None)
        if not self.clients and self._subscribed:
            self.node.changes.unsubscribe(self._changed)
            self._subscribed = False
            self.table.clear()

    # -- reads -------------------------------------------------------------------------------
    def after_read(self, ctx: Context, cmd: Any, args: list[bytes]) -> None:
        """A read-only command of a tracking client ran: remember its keys."""
        state = ctx.tracking
        caching, state.caching = state.caching, None  # CLIENT CACHING covers one command
        if state.bcast or (state.optin and not caching) or (state.optout and caching is False):
            return
        for key in cmd.keys_of(args):
            self.table.setdefault(key, {})[ctx.id] = None

    # -- writes --------------------------------------------------------------------------------
    def _changed(self, changes: list[Change]) -> None:
        if self.suppress:
            return
        writer = self.node.current
        clients = self.node.clients
        for key in user_keys(changes):
            ids = self.table.pop(key, None)
            if ids:
                for cid in ids:
                    c = clients.get(cid)
                    if c is not None and c.tracking is not None and not (c.tracking.noloop and c is writer):
                        self._invalidate(c, [key], writer)
            for c in list(self.bcast.values()):
                st = c.tracking
                if st is None or (st.noloop and c is writer):
                    continue
                if not st.prefixes:
                    self.pending.setdefault((c.id, b""), []).append(key)
                    continue
                for p in st.prefixes:
                    if key.startswith(p):
                        self.pending.setdefault((c.id, p), []).append(key)
                        break
        if self.pending:
            self.node.request_tick()

    def flush_bcast(self) -> None:
        """End of the tick: one invalidation per client and prefix with its keys."""
        pending, self.pending = self.pending, {}
        clients = self.node.clients
        for (cid, _), keys in pending.items():
            c = clients.get(cid)
            if c is not None and c.tracking is not None:
                self._invalidate(c, list(dict.fromkeys(keys)), None)

    def flush_all(self) -> None:
        """FLUSHALL / FLUSHDB: every tracking client gets ``invalidate`` with a null."""
        self.table.clear()
        writer = self.node.current
        for c in list(self.node.clients.values()):
            if c.tracking is not None:
                self._invalidate(c, None, writer)

    def _invalidate(self, c: Context, keys: list[bytes] | None, writer: Context | None) -> None:
        target = c
        if c.tracking is not None and c.tracking.redirect:
            found = self.node.clients.get(c.tracking.redirect)
            if found is None:
                return  # the redirect client is gone: Redis reports it broken (TRACKINGINFO)
            target = found
        if target.proto == 3:
            msg: Any = Push([b"invalidate", keys])
        elif INVALIDATE_CHANNEL in target.channels:
            msg = Push([b"message", INVALIDATE_CHANNEL, keys])
        else:
            return  # RESP2 without a redirect: nowhere to say it
        if target is writer and target.deferred is not None:
            target.deferred.append(msg)  # after the writing command's own reply
        elif target is writer:
            target.deferred = [msg]
        elif target.on_push is not None:
            target.on_push(msg)

    # -- INFO ----------------------------------------------------------------------------------
    def info(self) -> list[tuple[str, object]]:
        return [("tracking_total_keys", len(self.table)),
                ("tracking_total_items", sum(len(v) for v in self.table.values())),
                ("tracking_total_prefixes", len({p for c in self.bcast.values() if c.tracking
                                                 for p in c.tracking.prefixes}))]
