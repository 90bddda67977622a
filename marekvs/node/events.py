"""Keyspace notifications (``notify-keyspace-events``), as Redis 7.0 publishes them.

A command that changes a key fires an event of a class: ``g`` generic (del, expire,
rename_from, ...), ``$`` string (set, incrby, append, ...), ``l`` list, ``s`` set, ``h``
hash, ``z`` zset, ``t`` stream, ``x`` expired, ``e`` evicted, ``n`` new key, ``m`` key miss.
With ``K`` the node publishes ``__keyspace@0__:<key>`` with the event name as the message,
with ``E`` ``__keyevent@0__:<event>`` with the key; only the classes enabled fire. The
commands name their events (``fire``), as Redis's do.

A record merged from a peer fires on this node too (the change feed reports it), so a
listener on any node sees the changes made on every node. A record does not know the
command that made it, so its event is derived from what changed (``record_event``): a
string record ``set``, a counter ``incrby``, a tombstone ``del``, a new deadline with the
same value ``expire`` (``persist`` when removed), a collection head tombstone ``del``, a
hash field ``hset``/``hdel``, a set member ``sadd``/``srem``, a zset member
``zadd``/``zrem``, a list element ``lset`` (a push cannot be told from an overwrite) or
``lpop`` for a removed one, a stream entry ``xadd``/``xdel``, an HLL register ``pfadd``.
docs/compatibility.md lists them.

``expired`` fires once per key on each node, when the node finds its deadline passed: a
watcher keeps the deadlines of keys it saw written (locally or from a peer, and those
present when the ``x`` class was turned on) and fires at the deadline if the key still
has it. Messages go to this node's subscribers only (``PubSub.deliver``): every node fires
its own, so they are not relayed.

Member deadlines (Redis 7.4's HEXPIRE, KeyDB's EXPIREMEMBER) are watched the same way: at
a hash field's deadline ``hexpired`` (class h) fires, as Redis 7.4's active expiry fires
it, at a set member's ``srem`` (KeyDB's), once per key for the members that expire
together, then ``del`` (g) if the key went with them. A zset member's expiry fires
nothing (KeyDB fires nothing either). The fields with a deadline present when
notifications are turned on are found by one pass over the hash and set member records.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
from typing import Any, Iterator

from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core import registry
from marekvs.keyspace import members as M
from marekvs.keyspace.changes import Change

CLASSES = "g$lshzxetdmn"
_KEY_CODES = frozenset(registry.KEY_TAGS)
# member tag -> (class, event) its deadline fires (see the module docstring)
_MEMBER_EXPIRY = {K.TAG_HASH[0]: ("h", b"hexpired"), K.TAG_SET[0]: ("s", b"srem")}
_MEMBER_TAGS = K.TAG_HASH + K.TAG_SET
_KIND_EVENTS = {  # element tag -> (class, event when added, event when removed)
    K.TAG_HASH: ("h", b"hset", b"hdel"),
    K.TAG_SET: ("s", b"sadd", b"srem"),
    K.TAG_ZSET: ("z", b"zadd", b"zrem"),
    K.TAG_LIST: ("l", b"lset", b"lpop"),
    K.TAG_STREAM: ("t", b"xadd", b"xdel"),
    K.TAG_HLL: ("$", b"pfadd", b"pfadd"),
}


def parse_flags(value: str) -> tuple[set[str], bool, bool]:
    """(classes, keyspace channel, keyevent channel) of a notify-keyspace-events value."""
    classes = set()
    for ch in value:
        if ch == "A":
            classes.update("g$lshzxet")
        elif ch in CLASSES:
            classes.add(ch)
    return classes, "K" in value, "E" in value


class Events:
    def __init__(self, node: Any):
        self.node = node
        self.classes: set[str] = set()
        self.keyspace = self.keyevent = False
        self.on = False  # any class with a channel: commands check this before firing
        self.deadlines: list[tuple[int, bytes, bytes]] = []  # heap of (deadline, ikey, user key)
        self._timer: asyncio.TimerHandle | None = None
        self._subscribed = False
        self.members = False  # member deadlines are watched (h, s or g on)
        self.fired = 0
        # 'new' keys: the keys a local write command names that did not exist before it
        # (``mark_absent``); one that exists once the command fires an event on it (or
        # ends) was created by it, and fires "new" just before that event (Redis fires
        # "new" as the key is added): MSET interleaves new/set per key. Whether a key exists
        # is the keyspace's one rule, so an emptied collection written again is new too.
        self.pending_new: dict[bytes, None] = {}
        self.new_on = False  # the 'n' class is on

    def configure(self, value: str) -> None:
        self.classes, self.keyspace, self.keyevent = parse_flags(value)
        self.on = bool(self.classes) and (self.keyspace or self.keyevent)
        self.new_on = self.on and "n" in self.classes
        feed = self.node.changes
        if self.on and not self._subscribed:
            feed.subscribe(self._changed)
            self._subscribed = True
        elif not self.on and self._subscribed:
            feed.unsubscribe(self._changed)
            self._subscribed = False
            self.deadlines.clear()
        members = self.on and not self.classes.isdisjoint("hsg")
        if members and not self.members:
            self._watch_existing_members()
        self.members = members
        if self.on and "x" in self.classes:
            self._watch_existing()
        ks = self.node.ks
        ks.on_miss = self._miss if self.on and "m" in self.classes else None

    def _miss(self, key: bytes) -> None:
        self.fire("m", b"keymiss", key)

    # -- firing ----------------------------------------------------------------------------
    def mark_absent(self, keys: list[bytes]) -> None:
        """Before a write command: its keys that do not exist yet (see ``pending_new``)."""
        ks = self.node.ks
        now = ks.now()
        for key in keys:
            if not ks.exists(key, now):
                self.pending_new[key] = None

    def fire(self, cls: str, event: bytes, key: bytes) -> None:
        """A command's event (Redis's notifyKeyspaceEvent)."""
        if self.pending_new and key in self.pending_new and self.node.ks.exists(key, self.node.ks.now()):
            del self.pending_new[key]  # (an event before the key exists, a keymiss, leaves it pending)
            self.fire("n", b"new", key)
        if cls not in self.classes:
            return
        self.fired += 1
        deliver = self.node.pubsub.notify
        if self.keyspace:
            deliver(b"__keyspace@0__:" + key, event)
        if self.keyevent:
            deliver(b"__keyevent@0__:" + event, key)

    @contextlib.contextmanager
    def muted(self) -> Iterator[None]:
        """What runs inside fires no event (no keymiss, no 'new') and counts no keyspace hit
        or miss: a shard worker's part of a command across workers (``~mute``,
        shards/units.py), whose coordinator fires the events the whole command fires."""
        ks = self.node.ks
        saved = self.classes, self.on, self.new_on, self.pending_new, ks.on_miss, ks.hits, ks.misses
        self.classes, self.on, self.new_on, self.pending_new, ks.on_miss = set(), False, False, {}, None
        try:
            yield
        finally:
            self.classes, self.on, self.new_on, self.pending_new, ks.on_miss, ks.hits, ks.misses = saved

    def flush_new(self) -> None:
        """After a command: 'new' keys that no event of the command claimed."""
        pending, self.pending_new = self.pending_new, {}
        ks = self.node.ks
        now = ks.now()
        for key in pending:
            if ks.exists(key, now):
                self.fire("n", b"new", key)

    # -- records from peers, deadlines -------------------------------------------------------
    def _changed(self, changes: list[Change]) -> None:
        replicated = self.node.current is None
        watch = "x" in self.classes
        members = self.members
        now = self.node.ks.now()
        for ikey, old, new in changes:
            if watch:
                self._watch(ikey, new)
            if members and ikey[K.TAG_AT] in _MEMBER_EXPIRY and new[env.TTL] != env.NO_TTL \
                    and not new[0] & env.FLAG_TOMBSTONE and env.ttl_of(new) > now:
                heapq.heappush(self.deadlines, (env.ttl_of(new), ikey, K.user_key_of(ikey)))
                self._arm()
            if replicated and self.new_on and ikey[K.TAG_AT] in _KEY_CODES and env.is_live(new, now) \
                    and (old is None or not env.is_live(old, now)):
                self.fire("n", b"new", K.user_key_of(ikey))  # (a local command's: ``mark_absent``)
            if replicated:
                found = record_event(ikey, old, new, self.node.ks.now())
                if found is not None:
                    key = K.user_key_of(ikey)
                    self.fire(found[0], found[1], key)

    def _watch(self, ikey: bytes, rec: bytes) -> None:
        kind = registry.BY_CODE[ikey[K.TAG_AT]]
        if kind is None or not kind.is_key:
            return
        deadline = env.ttl_of(rec)
        if deadline and not rec[0] & env.FLAG_TOMBSTONE:
            heapq.heappush(self.deadlines, (deadline, ikey, K.user_key_of(ikey)))
            self._arm()

    def _watch_existing(self) -> None:
        now = self.node.ks.now()
        for key, ikey, rec in self.node.ks.all_keys(now):
            if env.ttl_of(rec):
                heapq.heappush(self.deadlines, (env.ttl_of(rec), ikey, key))
        self._arm()

    def _watch_existing_members(self) -> None:
        now = self.node.ks.now()
        for ikey, rec in self.node.engine.scan_tags(0, _MEMBER_TAGS):
            if rec[env.TTL] != env.NO_TTL and not rec[0] & env.FLAG_TOMBSTONE and env.ttl_of(rec) > now:
                heapq.heappush(self.deadlines, (env.ttl_of(rec), ikey, K.user_key_of(ikey)))
        self._arm()

    def _arm(self) -> None:
        loop = self.node.loop
        if not self.deadlines or loop is None:
            return
        if self._timer is not None:
            self._timer.cancel()
        delay = max(0.0, (self.deadlines[0][0] - self.node.ks.now()) / 1000)
        self._timer = loop.call_later(delay + 0.001, self._expire_due)

    def _expire_due(self) -> None:
        self._timer = None
        now = self.node.ks.now()
        get = self.node.engine.get
        seen: set[tuple[int, bytes]] = set()  # (a record pushed twice fires once)
        expired: dict[bytes, tuple[str, bytes]] = {}  # key -> the event of its members expiry
        while self.deadlines and self.deadlines[0][0] <= now:
            deadline, ikey, key = heapq.heappop(self.deadlines)
            if (deadline, ikey) in seen:
                continue
            seen.add((deadline, ikey))
            rec = get(ikey)
            if rec is None or rec[0] & env.FLAG_TOMBSTONE or env.ttl_of(rec) != deadline:
                continue  # no longer the record that had this deadline
            event = _MEMBER_EXPIRY.get(ikey[K.TAG_AT])
            if event is None:
                self.fire("x", b"expired", key)  # still the record that expired: once
            elif self._member_expired(key, rec, deadline):
                expired[key] = event
        ks = self.node.ks
        for key, (cls, event) in expired.items():
            self.fire(cls, event, key)
            if not ks.exists(key, now):
                self.fire("g", b"del", key)
        self._arm()

    def _member_expired(self, key: bytes, rec: bytes, deadline: int) -> bool:
        """The member record ``rec`` of ``key`` was live until its ``deadline`` (not
        removed, nor gated by a delete of its key before then)."""
        h = self.node.engine.get(K.encode_head_key(key))
        before = deadline - 1
        return M.live(rec, M.gate(h, before) if h is not None else 0, before)


def record_event(ikey: bytes, old: bytes | None, new: bytes, now: int) -> tuple[str, bytes] | None:
    """(class, event) a record merged from a peer fires (see the module docstring)."""
    tag = ikey[K.TAG_AT:K.TAG_AT + 1]
    if tag == K.TAG_STRING or tag == K.TAG_HEAD:
        if new[0] & env.FLAG_TOMBSTONE:
            return ("g", b"del") if old is not None and env.is_live(old, now) else None
        if old is not None and env.is_live(old, now) and old[env.HEADER:] == new[env.HEADER:]:
            if env.ttl_of(old) != env.ttl_of(new):
                return ("g", b"expire") if env.ttl_of(new) else ("g", b"persist")
            return None
        if tag == K.TAG_HEAD:
            return None  # a new or re-created collection: its elements fire
        return ("$", b"incrby") if env.rtype_of(new) == env.RecordType.COUNTER else ("$", b"set")
    kind = _KIND_EVENTS.get(tag)
    if kind is None:
        return None
    cls, added, removed = kind
    return (cls, removed) if new[0] & env.FLAG_TOMBSTONE else (cls, added)
