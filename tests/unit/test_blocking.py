"""The blocking registry (marekvs/node/blocking.py) in-process: waits end when a key
changes (by a local command or a replicated record), in the order clients blocked, on
timeout, on CLIENT UNBLOCK, and not at all for a client that left."""

from __future__ import annotations

import asyncio

import pytest

from marekvs.commands.reply import Blocking, Err
from marekvs.config import Config
from marekvs.core import keys as K
from marekvs.core import lww
from marekvs.core.envelope import RecordType
from marekvs.keyspace import strings as kstr
from marekvs.node import Node


@pytest.fixture
def node(tmp_path):
    n = Node(Config(data_dir=str(tmp_path / "db"), node_id=1, durability="no"))
    yield n
    n.close()


def run(node, coro):
    async def main():
        node.start(asyncio.get_running_loop())
        try:
            return await coro()
        finally:
            node.sweeper.stop()

    return asyncio.run(main())


def take(node, key):
    """An attempt that consumes the string at ``key`` (GETDEL), None while there is none."""
    def attempt():
        v = kstr.read(node.ks, key)
        if v is not None:
            node.ks.delete(key, node.ks.now())
        return v
    return attempt


def test_a_write_by_another_client_ends_the_wait(node):
    async def go():
        waiter, writer = node.new_context(), node.new_context()
        b = node.blocking.block(waiter, [b"q"], take(node, b"q"), 0, lambda: None)
        assert type(b) is Blocking and len(node.blocking) == 1
        task = asyncio.ensure_future(b.awaitable)
        await asyncio.sleep(0)
        assert not task.done()
        assert node.dispatch(writer, [b"SET", b"q", b"hello"]) is not None
        assert await asyncio.wait_for(task, 5) == b"hello"
        assert kstr.read(node.ks, b"q") is None  # the attempt consumed it
        assert len(node.blocking) == 0 and node.engine.on_change is None  # feed unsubscribed
    run(node, go)


def test_waiters_are_served_first_blocked_first_served(node):
    async def go():
        a, b, w = node.new_context(), node.new_context(), node.new_context()
        ta = asyncio.ensure_future(node.blocking.block(a, [b"q"], take(node, b"q"), 0, lambda: None).awaitable)
        tb = asyncio.ensure_future(node.blocking.block(b, [b"q"], take(node, b"q"), 0, lambda: None).awaitable)
        await asyncio.sleep(0)
        node.dispatch(w, [b"SET", b"q", b"first"])
        assert await asyncio.wait_for(ta, 5) == b"first"
        await asyncio.sleep(0.01)
        assert not tb.done()  # the element went to the first waiter; b keeps its place
        node.dispatch(w, [b"SET", b"q", b"second"])
        assert await asyncio.wait_for(tb, 5) == b"second"
    run(node, go)


def test_a_replicated_record_ends_the_wait(node):
    async def go():
        ctx = node.new_context()
        task = asyncio.ensure_future(node.blocking.block(ctx, [b"r"], take(node, b"r"), 0, lambda: None).awaitable)
        await asyncio.sleep(0)
        rec = lww.new(RecordType.STRING, node.hlc.now() + 1000, 2, b"from-peer")
        node.engine.apply([(K.encode_string_key(b"r"), rec)], log_entry=False)  # a peer's record
        assert await asyncio.wait_for(task, 5) == b"from-peer"
    run(node, go)


def test_timeout_unblock_and_disconnect(node):
    async def go():
        a, b, c = node.new_context(), node.new_context(), node.new_context()
        b_timeout = node.blocking.block(a, [b"x"], take(node, b"x"), 0.05, lambda: "timed out")
        ta = asyncio.ensure_future(b_timeout.awaitable)
        assert await asyncio.wait_for(ta, 5) == "timed out"
        tb = asyncio.ensure_future(node.blocking.block(b, [b"x"], take(node, b"x"), 0, lambda: None).awaitable)
        await asyncio.sleep(0)
        assert node.dispatch(c, [b"CLIENT", b"UNBLOCK", b"%d" % b.id, b"ERROR"]) == 1
        r = await asyncio.wait_for(tb, 5)
        assert type(r) is Err and r.startswith("UNBLOCKED")
        assert node.dispatch(c, [b"CLIENT", b"UNBLOCK", b"%d" % b.id]) == 0  # no longer blocked
        tc = asyncio.ensure_future(node.blocking.block(a, [b"x"], take(node, b"x"), 0, lambda: None).awaitable)
        await asyncio.sleep(0)
        node.drop_context(a)  # the client went away
        assert len(node.blocking) == 0
        node.dispatch(c, [b"SET", b"x", b"v"])
        await asyncio.sleep(0.01)
        assert kstr.read(node.ks, b"x") == b"v"  # nobody took it
        assert tc.cancelled() or tc.done()
    run(node, go)


def test_inside_multi_or_a_script_a_blocking_command_answers_at_once(node):
    ctx = node.new_context()
    ctx.deny_blocking = True
    assert node.blocking.block(ctx, [b"k"], lambda: None, 0, lambda: "nil now") == "nil now"
    assert len(node.blocking) == 0


def test_a_watch_holds_its_key_for_its_client_then_the_next_waiter_is_served(node):
    """A watch (a client blocked over keys of several shard workers) pops nothing: the
    first change wakes it and holds the key, so a waiter behind it is not served until
    the watching client's round released the hold; ``taken`` tells another client's
    round that someone comes first."""
    woken: list = []

    async def go():
        node.blocking.woke = lambda cid, value: woken.append((cid, value))
        watcher, waiter, writer = node.new_context(), node.new_context(), node.new_context()
        node.blocking.watch(watcher, [b"q"], False)
        b = node.blocking.block(waiter, [b"q"], take(node, b"q"), 0, lambda: None)
        task = asyncio.ensure_future(b.awaitable)
        node.dispatch(writer, [b"SET", b"q", b"v"])
        assert node.blocking.taken(waiter.id, [b"q"])  # changed, its waiters not served yet
        for _ in range(5):
            await asyncio.sleep(0)
        assert woken == [(watcher.id, 1)] and not task.done()
        assert node.blocking.taken(waiter.id, [b"q"]) and not node.blocking.taken(watcher.id, [b"q"])
        # its round found nothing (a command of another kind): it watches again, first, and
        # the waiter behind it is served the change (the watcher is not woken for it again)
        node.blocking.watch(watcher, [b"q"], True)
        assert await asyncio.wait_for(task, 5) == b"v"
        for _ in range(5):  # (that pop is a change of q too: the watcher is woken for it)
            await asyncio.sleep(0)
        assert woken == [(watcher.id, 1), (watcher.id, 1)]
        node.blocking.unwatch(watcher.id)  # its command ended
        assert not node.blocking.held and len(node.blocking) == 0
    run(node, go)
