"""Blocking commands: clients waiting for keys to change (BLPOP, BZPOPMIN, XREAD BLOCK, ...).

A blocking command first tries once, as the non-blocking form would. If it has nothing to
return it calls ``node.blocking.block(ctx, keys, attempt, timeout, on_timeout)`` and
returns the ``Blocking`` value it gets: the connection then holds its later commands, in
order, until the wait ends. The wait ends when

- one of ``keys`` changed (by any client, or by a record merged from a peer: the change
  feed reports both) and ``attempt()`` now returns a value (not None): that is the reply;
- ``timeout`` seconds passed (0 waits forever): ``on_timeout()`` is the reply;
- CLIENT UNBLOCK ends it (the timeout reply, or the UNBLOCKED error);
- the client disconnects (the wait is dropped).

Fairness as Redis: waiters on one key are served first blocked, first served. The ready
keys are served on the event-loop turn after the change (``loop.call_soon``), never inside
another command's execution; an attempt's writes go into the pending batch like any
command's, and the reply leaves after the commit that holds them. Two nodes can serve the
same pushed element to waiters of their own (the data model has no coordination): an
at-least-once duplicate, as docs/compatibility.md says.

Inside MULTI/EXEC or a script (``ctx.deny_blocking``) ``block`` returns the timeout reply
at once, as Redis does.
"""

from __future__ import annotations

import asyncio
from collections import deque
from typing import Any, Callable

from marekvs.commands import errors
from marekvs.commands.context import Context
from marekvs.commands.reply import Blocking, Err
from marekvs.keyspace.changes import Change, ChangeFeed, user_keys

Attempt = Callable[[], Any]  # the reply value once the command can be served, else None


class Waiter:
    __slots__ = ("ctx", "keys", "attempt", "on_timeout", "future", "timer")

    def __init__(self, ctx: Context, keys: list[bytes], attempt: Attempt, on_timeout: Callable[[], Any],
                 future: asyncio.Future):
        self.ctx = ctx
        self.keys = keys
        self.attempt = attempt
        self.on_timeout = on_timeout
        self.future = future
        self.timer: asyncio.TimerHandle | None = None


class BlockingRegistry:
    def __init__(self, feed: ChangeFeed, engine: Any):
        self.feed = feed
        self.engine = engine
        self.by_key: dict[bytes, deque[Waiter]] = {}
        self.by_client: dict[int, Waiter] = {}
        self.ready: dict[bytes, None] = {}
        self._scheduled = False
        self.loop: asyncio.AbstractEventLoop | None = None
        # who is writing while an attempt runs (the node's ``current``; events, tracking)
        self.current_setter: Callable[[Context | None], None] = lambda ctx: None

    def __len__(self) -> int:
        return len(self.by_client)

    def block(self, ctx: Context, keys: list[bytes], attempt: Attempt, timeout: float,
              on_timeout: Callable[[], Any]) -> Any:
        """A ``Blocking`` reply that ends with ``attempt()``'s value once one of ``keys``
        changed and it has one, or with ``on_timeout()`` after ``timeout`` s (0: never)."""
        if ctx.deny_blocking:
            return on_timeout()
        loop = self.loop or asyncio.get_event_loop()
        w = Waiter(ctx, list(dict.fromkeys(keys)), attempt, on_timeout, loop.create_future())
        for k in w.keys:
            self.by_key.setdefault(k, deque()).append(w)
        self.by_client[ctx.id] = w
        if timeout > 0:
            w.timer = loop.call_later(timeout, self._expire, w)
        if len(self.by_client) == 1:
            self.feed.subscribe(self._changed)
        return Blocking(self._wait(w))

    async def _wait(self, w: Waiter) -> Any:
        try:
            return await w.future
        finally:
            self._drop(w)

    # -- ending a wait -------------------------------------------------------------------
    def _finish(self, w: Waiter, value: Any) -> None:
        self._drop(w)
        if not w.future.done():
            w.future.set_result(value)

    def _drop(self, w: Waiter) -> None:
        if self.by_client.get(w.ctx.id) is not w:
            return
        del self.by_client[w.ctx.id]
        if w.timer is not None:
            w.timer.cancel()
        for k in w.keys:
            q = self.by_key.get(k)
            if q is not None:
                try:
                    q.remove(w)
                except ValueError:
                    pass
                if not q:
                    del self.by_key[k]
        if not self.by_client:
            self.feed.unsubscribe(self._changed)

    def _expire(self, w: Waiter) -> None:
        self._finish(w, w.on_timeout())

    def unblock(self, client_id: int, error: bool) -> bool:
        """CLIENT UNBLOCK: end a client's wait with its timeout reply, or with the
        UNBLOCKED error. False if the client is not blocked here."""
        w = self.by_client.get(client_id)
        if w is None:
            return False
        self._finish(w, Err(errors.UNBLOCKED) if error else w.on_timeout())
        return True

    def drop_client(self, ctx: Context) -> None:
        """The client disconnected: forget its wait."""
        w = self.by_client.get(ctx.id)
        if w is not None:
            self._drop(w)
            if not w.future.done():
                w.future.cancel()

    # -- serving ---------------------------------------------------------------------------
    def _changed(self, changes: list[Change]) -> None:
        by_key = self.by_key
        for key in user_keys(changes):
            if key in by_key:
                self.ready[key] = None
        if self.ready and not self._scheduled:
            self._scheduled = True
            (self.loop or asyncio.get_event_loop()).call_soon(self.serve)

    def serve(self) -> None:
        """Serve the waiters of every ready key, first blocked first: each one that can be
        served now (its attempt returns a value) is answered and leaves the queue; the
        others keep waiting in their place."""
        self._scheduled = False
        while self.ready:
            key = next(iter(self.ready))
            del self.ready[key]
            for w in list(self.by_key.get(key, ())):
                if self.by_client.get(w.ctx.id) is not w:
                    continue  # served through another of its keys meanwhile
                self.current_setter(w.ctx)
                try:
                    value = w.attempt()
                finally:
                    self.current_setter(None)
                if value is not None:
                    w.ctx.last_write_seq = self.engine.next_seq  # (WAIT after a blocking pop)
                    self._finish(w, value)
