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

On a node of several shard workers (docs/shards.md §4) the table lives at each key's owner:
a read carried to another worker runs there on the client's proxy context, which carries
the client's tracking state (``proxy_state``), and registers the client's id there. A key
changed on a worker whose table names a client of another worker is told to that
worker (``remote``: the client's id, the keys, and whether the client's own command made
the change, so its worker sends the message after that command's reply); that worker
resolves the REDIRECT (to a client of a third worker: ``forward``). A BCAST client's
prefixes are announced to every worker (``on_bcast``), which gathers the keys of its own
changes for it (``remote_bcast``) and tells them to the client's worker at the tick's end.
"""

from __future__ import annotations

from typing import Any, Callable

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
        # a shard worker's (server/mesh.py): the invalidation of keys for a client of another
        # worker (client id, keys or None, its own write?), a message for a REDIRECT client of
        # another worker (client id, keys), this worker's BCAST clients changing (client id,
        # [prefixes, noloop] or None); other workers' BCAST clients: id -> (prefixes, noloop)
        self.remote: Callable[[int, list[bytes] | None, bool], None] | None = None
        self.forward: Callable[[int, list[bytes] | None], None] | None = None
        self.on_bcast: Callable[[int, Any], None] | None = None
        self.remote_bcast: dict[int, tuple[list[bytes], bool]] = {}
        self.pending_own: set[int] = set()  # BCAST clients of other workers whose own command changed a key
        self.proxied = False  # clients of other workers read here: keep the table
        self.elsewhere: set[int] = set()  # a client of another worker CLIENT TRACKING REDIRECT names, found there

    # -- clients ---------------------------------------------------------------------------
    def enable(self, ctx: Context, state: TrackingState) -> None:
        if ctx.tracking is None:
            self.clients += 1
        ctx.tracking = state
        if state.bcast:
            self.bcast[ctx.id] = ctx
            if self.on_bcast is not None:
                self.on_bcast(ctx.id, [state.prefixes, state.noloop])
        self._subscribe()

    def _subscribe(self) -> None:
        if not self._subscribed:
            self.node.changes.subscribe(self._changed)
            self._subscribed = True

    def disable(self, ctx: Context) -> None:
        if ctx.tracking is None:
            return
        ctx.tracking = None
        self.clients -= 1
        if self.bcast.pop(ctx.id, None) is not None and self.on_bcast is not None:
            self.on_bcast(ctx.id, None)
        if not self.clients and self._subscribed and not self.proxied and not self.remote_bcast:
            self.node.changes.unsubscribe(self._changed)
            self._subscribed = False
            self.table.clear()

    def proxy_state(self, ctx: Context, state: list[Any] | None) -> None:
        """The tracking state of a client of another worker, on its proxy context here
        (``[redirect, noloop, optin, optout, caching]``, default mode; None: off)."""
        if state is None:
            ctx.tracking = None
            return
        st = ctx.tracking = TrackingState(state[0], False, [], state[2], state[3], state[1])
        st.caching = state[4]
        self.proxied = True
        self._subscribe()

    def bcast_of(self, cid: int, state: list[Any] | None) -> None:
        """A BCAST client of another worker began (``[prefixes, noloop]``) or ended (None)."""
        if state is None:
            self.remote_bcast.pop(cid, None)
            return
        self.remote_bcast[cid] = (list(state[0]), state[1])
        self._subscribe()

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
        remote = self.remote
        wid = -1 if writer is None else writer.id
        for key in user_keys(changes):
            ids = self.table.pop(key, None)
            if ids:
                for cid in ids:
                    c = clients.get(cid)
                    if c is not None:
                        if c.tracking is not None and not (c.tracking.noloop and c is writer):
                            self._invalidate(c, [key], writer)
                    elif remote is None:
                        continue
                    elif cid != wid or writer.tracking is None:  # type: ignore[union-attr]
                        remote(cid, [key], cid == wid)  # (a client of another worker: told there)
                    elif not writer.tracking.noloop:  # type: ignore[union-attr]
                        if writer.tracking.redirect:  # type: ignore[union-attr]
                            remote(cid, [key], True)
                        else:  # its own command here, for it (its proxy): right after that reply
                            self.send(writer, [key], writer)  # type: ignore[arg-type]
            for cid, (prefixes, noloop) in self.remote_bcast.items():
                if cid == wid:
                    if noloop:
                        continue
                    self.pending_own.add(cid)  # (its message goes after its command's reply)
                if not prefixes:
                    self.pending.setdefault((cid, b""), []).append(key)
                    continue
                for p in prefixes:
                    if key.startswith(p):
                        self.pending.setdefault((cid, p), []).append(key)
                        break
            for c in list(self.bcast.values()):
                st = c.tracking
                if st is None or (st.noloop and c is writer):
                    continue
                if c is writer and self.remote is not None:
                    self.pending_own.add(c.id)
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
            if c is not None and c.tracking is not None:  # (its own command on the mesh: after its reply)
                self._invalidate(c, list(dict.fromkeys(keys)), c if c.blocked and cid in self.pending_own else None)
            elif c is None and self.remote is not None and cid in self.remote_bcast:
                self.remote(cid, list(dict.fromkeys(keys)), cid in self.pending_own)
        self.pending_own.clear()

    def take_remote(self) -> list[tuple[int, bytes, list[bytes], bool]]:
        """The BCAST invalidations gathered for clients of other workers, taken out of this
        tick's (``(client id, prefix, keys, own)``): a call a script on another worker
        carried here sends them back with its reply (server/mesh.py), since that worker,
        waiting for the reply, reads nothing else."""
        out = []
        pending, clients = self.pending, self.node.clients
        for k in [k for k in pending if k[0] not in clients and k[0] in self.remote_bcast]:
            out.append((k[0], k[1], list(dict.fromkeys(pending.pop(k))), k[0] in self.pending_own))
        return out

    def flush_all(self) -> None:
        """FLUSHALL / FLUSHDB: every tracking client gets ``invalidate`` with a null."""
        self.table.clear()
        writer = self.node.current
        for c in list(self.node.clients.values()):
            if c.tracking is not None:
                self._invalidate(c, None, writer)

    def invalidated(self, cid: int, keys: list[bytes] | None, own: bool) -> None:
        """Keys changed on another worker for our client ``cid`` (``remote`` there): told
        to it, after the reply of the command that changed them when it was its own and
        that reply is still on its way (``deferred``)."""
        c = self.node.clients.get(cid)
        if c is None or c.tracking is None:
            return
        self._invalidate(c, keys, c if own and c.blocked else None)

    def _invalidate(self, c: Context, keys: list[bytes] | None, writer: Context | None) -> None:
        target = c
        if c.tracking is not None and c.tracking.redirect:
            found = self.node.clients.get(c.tracking.redirect)
            if found is None:
                if self.forward is not None:  # (a client of another worker, or gone)
                    self.forward(c.tracking.redirect, keys)
                return  # the redirect client is gone: Redis reports it broken (TRACKINGINFO)
            target = found
        self.send(target, keys, writer)

    def send(self, target: Context, keys: list[bytes] | None, writer: Context | None) -> None:
        """The invalidation message to ``target`` (a push in RESP3, a Pub/Sub message on
        ``__redis__:invalidate`` in RESP2 if it subscribed)."""
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
