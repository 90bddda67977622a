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
"""

from __future__ import annotations

from typing import Any, Callable

from marekvs.commands.context import Context
from marekvs.core import keys as K
from marekvs.core import registry
from marekvs.keyspace.changes import Change, user_keys


class Watches:
    def __init__(self, node: Any):
        self.node = node
        self.keys: dict[bytes, dict[int, Context]] = {}  # user key -> the clients watching it
        # a shard worker's mesh: a client of another worker whose watch here became dirty
        # (its worker shows it in CLIENT LIST's flags)
        self.dirtied: Callable[[Context], None] | None = None

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
        if watched is None:
            return
        ctx.watched = None
        ctx.watch_dirty = False
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
                    if not ctx.watch_dirty and self.dirtied is not None:
                        self.dirtied(ctx)
                    ctx.watch_dirty = True
