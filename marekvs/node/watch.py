"""WATCH: optimistic locking for MULTI/EXEC (Redis 7.0 ``multi.c``).

A client that WATCHes keys has its next EXEC abort (a null reply) if any of them changed
in between: a write by any client of this node, a record merged from a peer (the apply
path reports both on the change feed, so a write on another node aborts the transaction
here once it has replicated), a FLUSHALL, or an expiry. Only a record that really changed
counts: a peer's record that loses the merge changes nothing and aborts nothing.

Expiry sends no record (a key past its deadline reads as absent on every replica at once),
so WATCH remembers which keys existed and EXEC aborts when one of them no longer does, as
Redis's ``isWatchedKeyExpired`` does. The feed is subscribed only while some client
watches a key.

On a node of shard workers a client's watches live with each key's worker, on the
client's proxy there; when one of them changes, the client's worker is told
(``elsewhere``), so that CLIENT LIST shows the client dirty there too (its EXEC checks
every worker's watches under its locks anyway).
"""

from __future__ import annotations

from typing import Any, Callable

from marekvs.commands.context import Context
from marekvs.core import keys as K
from marekvs.core import registry
from marekvs.keyspace.changes import Change, user_keys
from marekvs.node.monitor import PROXY_ADDR


class Watches:
    def __init__(self, node: Any):
        self.node = node
        self.keys: dict[bytes, dict[int, Context]] = {}  # user key -> the clients watching it
        self.elsewhere: Callable[[int], None] | None = None  # a shard worker's: a proxy's watch changed

    def watch(self, ctx: Context, keys: list[bytes]) -> None:
        ks = self.node.ks
        now = ks.now()
        if ctx.watched is None:
            ctx.watched = {}
        if not self.keys:
            self.node.changes.subscribe(self._changed)
        for key in keys:
            if key in ctx.watched:
                continue
            ctx.watched[key] = ks.exists(key, now)
            self.keys.setdefault(key, {})[ctx.id] = ctx

    def unwatch_all(self, ctx: Context) -> None:
        watched = ctx.watched
        ctx.watch_dirty = False  # (also when its watches were all on other shard workers)
        if watched is None:
            return
        ctx.watched = None
        for key in watched:
            clients = self.keys.get(key)
            if clients is not None:
                clients.pop(ctx.id, None)
                if not clients:
                    del self.keys[key]
        if not self.keys:
            self.node.changes.unsubscribe(self._changed)

    def still_valid(self, ctx: Context) -> bool:
        """EXEC may run: no watched key changed or expired since WATCH."""
        if ctx.watch_dirty:
            return False
        if ctx.watched:
            ks = self.node.ks
            now = ks.now()
            for key, existed in ctx.watched.items():
                if existed and not ks.exists(key, now):
                    return False
        return True

    def _changed(self, changes: list[Change]) -> None:
        watched = self.keys
        unwatched = registry.UNWATCHED_CODES  # a stream's groups: not a change of the key
        for key in user_keys([c for c in changes if c[0][K.TAG_AT] not in unwatched]):
            clients = watched.get(key)
            if clients:
                for ctx in clients.values():
                    if not ctx.watch_dirty and self.elsewhere is not None and ctx.addr == PROXY_ADDR:
                        self.elsewhere(ctx.id)
                    ctx.watch_dirty = True
