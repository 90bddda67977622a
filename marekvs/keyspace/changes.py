"""The change feed: which records changed, whoever changed them.

The engine's apply path reports every record it changed, from a local command or from a
peer (``Engine.on_change``). The feed hands those changes to its subscribers. The keyspace
owns it (``Keyspace.changes``): the derived state each type keeps beside its records (the
live-element counts, list hints, zset mirrors, stream summaries, HLL register caches)
subscribes to it from the type module itself, and the node's own followers (blocking
commands, WATCH, keyspace notifications, client-side caching) use the same feed. It is
installed on the engine only while someone subscribes, and each subscriber subscribes
only while it holds something to keep current, so a node with nothing to follow pays
nothing per write.
"""

from __future__ import annotations

from typing import Callable

from marekvs.core import keys as K
from marekvs.storage.engine import Engine

Change = tuple[bytes, bytes | None, bytes]  # (ikey, old record or None, new record)
Subscriber = Callable[[list[Change]], None]
NodeSubscriber = Callable[[list[tuple[bytes, bytes]]], None]  # [(ikey, new record), ...]


def user_keys(changes: list[Change]) -> list[bytes]:
    """The user keys of ``changes``, each once, in order."""
    return list(dict.fromkeys(K.user_key_of(ik) for ik, _, _ in changes))


class ChangeFeed:
    def __init__(self, engine: Engine):
        self.engine = engine
        self.subscribers: list[Subscriber] = []
        self.node_subscribers: list[NodeSubscriber] = []

    def subscribe(self, fn: Subscriber) -> None:
        if fn not in self.subscribers:
            self.subscribers.append(fn)
        self.engine.on_change = self._publish

    def unsubscribe(self, fn: Subscriber) -> None:
        if fn in self.subscribers:
            self.subscribers.remove(fn)
        if not self.subscribers:
            self.engine.on_change = None

    def on_node_records(self, fn: NodeSubscriber) -> None:
        """Call ``fn([(ikey, record), ...])`` when node-level records (the registry's
        NODE_TAGS: ACL users, function libraries) change, locally or from a peer. They are
        not keys, so they never reach the subscribers of the feed; the engine reports them
        apart (``Engine.on_node_change``). Every subscriber sees every node record and
        takes the tags it owns."""
        if fn not in self.node_subscribers:
            self.node_subscribers.append(fn)
        self.engine.on_node_change = self.publish_node

    def publish_node(self, changes: list[tuple[bytes, bytes]]) -> None:
        """Tell the node-record subscribers of ``changes`` (the engine's, or records a
        shard worker holds for a sibling's partitions: ``server/mesh.SharedRecords``)."""
        for fn in list(self.node_subscribers):
            fn(changes)

    def _publish(self, changes: list[Change]) -> None:
        for fn in list(self.subscribers):
            fn(changes)
