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

**Watches for a blocking command over keys of several shard workers** (``watch``; issue 33,
slice 5, ``server/mesh.py``): the waiter of such a client on a worker does not pop; the
first change of one of its keys ends it (``woke(client id, 1)``) and *holds* that key: the
key's other waiters are not served until the client's worker ran its attempt across the
workers and ``release``d the hold (so the client first blocked is served first, and no
other waiter takes the element it was woken for). A client whose attempt got nothing
watches again in its place (``again``: at the head of the queue of the key that woke it).
CLIENT UNBLOCK ends a watch with ``woke(id, None)`` (the timeout reply) or the UNBLOCKED
error; on the client's own worker it also ends a command between two rounds
(``unblock_rounds``).
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
HOLD = object()  # an attempt's answer: wake the waiter and hold the key until ``release``


def _hold() -> Any:
    return HOLD


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
        # watches (the module docstring): the key each client holds, keys changed while held,
        # and where a watch's end goes (the mesh)
        self.held: dict[bytes, int] = {}
        self.holds: dict[int, list[bytes]] = {}
        self.changed_held: set[bytes] = set()
        self.skip: dict[bytes, int] = {}  # a key released by a client that found nothing: not it again
        self.woke: Callable[[int, Any], None] = lambda cid, value: None
        # CLIENT UNBLOCK of a client of ours blocked over several workers but watching
        # nowhere at this moment (between two rounds): the mesh ends its command
        self.unblock_rounds: Callable[[int, bool], bool] = lambda cid, error: False

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

    def watch(self, ctx: Context, keys: list[bytes], again: bool) -> None:
        """A blocking command over keys of several shard workers watches its keys here (the
        module docstring). A client still watching here keeps its place; its holds are
        released (its attempt got nothing)."""
        self.release(ctx.id, False)
        old = self.by_client.get(ctx.id)
        if old is not None and old.attempt is _hold:
            return
        loop = self.loop or asyncio.get_event_loop()
        w = Waiter(ctx, list(dict.fromkeys(keys)), _hold, lambda: None, loop.create_future())
        for k in w.keys:
            q = self.by_key.setdefault(k, deque())
            q.appendleft(w) if again else q.append(w)
        self.by_client[ctx.id] = w
        if len(self.by_client) == 1:
            self.feed.subscribe(self._changed)
        cid = ctx.id
        w.future.add_done_callback(lambda f: None if f.cancelled() else self.woke(cid, f.result()))

    def unwatch(self, cid: int) -> None:
        """The client's blocking command ended (served, timed out, gone): its watch here
        ends, and what it held is served to the next waiters."""
        w = self.by_client.get(cid)
        if w is not None and w.attempt is _hold:
            self._drop(w)
            w.future.cancel()
        self.release(cid, True)

    def release(self, cid: int, served: bool) -> None:
        """End ``cid``'s holds: the keys' other waiters are served (a client that found
        nothing is not woken again for the same change: ``served`` False)."""
        for key in self.holds.pop(cid, ()):
            if self.held.get(key) == cid:
                del self.held[key]
                if not served and key not in self.changed_held:
                    self.skip[key] = cid
                self.changed_held.discard(key)
                self.ready[key] = None
        if self.ready and not self._scheduled:
            self._scheduled = True
            (self.loop or asyncio.get_event_loop()).call_soon(self.serve)

    def taken(self, cid: int, keys: list[bytes]) -> bool:
        """Whether another client comes first for one of ``keys``: it holds it, or the key
        changed and its waiters are not served yet."""
        held, ready, by_key = self.held, self.ready, self.by_key
        for k in keys:
            if held.get(k, cid) != cid:
                return True
            if k in ready and any(w.ctx.id != cid for w in by_key.get(k, ())):
                return True
        return False

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
            return self.unblock_rounds(client_id, error)
        self._finish(w, Err(errors.UNBLOCKED) if error else w.on_timeout())
        return True

    def drop_client(self, ctx: Context) -> None:
        """The client disconnected: forget its wait."""
        w = self.by_client.get(ctx.id)
        if w is not None:
            self._drop(w)
            if not w.future.done():
                w.future.cancel()
        if ctx.id in self.holds:
            self.release(ctx.id, True)

    # -- serving ---------------------------------------------------------------------------
    def _changed(self, changes: list[Change]) -> None:
        by_key = self.by_key
        for key in user_keys(changes):
            if key in by_key:
                self.ready[key] = None
                if self.skip:
                    self.skip.pop(key, None)  # (a new change: every waiter is considered)
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
            if key in self.held:  # a watching client's attempt is on its way: after it
                self.changed_held.add(key)
                continue
            skip = self.skip.pop(key, None) if self.skip else None
            for w in list(self.by_key.get(key, ())):
                if self.by_client.get(w.ctx.id) is not w or w.ctx.id == skip:
                    continue  # served through another of its keys meanwhile (or found nothing)
                self.current_setter(w.ctx)
                try:
                    value = w.attempt()
                finally:
                    self.current_setter(None)
                if value is HOLD:
                    self.held[key] = w.ctx.id
                    self.holds.setdefault(w.ctx.id, []).append(key)
                    self._finish(w, 1)
                    break
                if value is not None:
                    w.ctx.last_write_seq = self.engine.next_seq  # (WAIT after a blocking pop)
                    self._finish(w, value)
