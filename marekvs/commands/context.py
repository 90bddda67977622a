"""The command context: one client's state as the commands see it, with no socket behind it.

Every handler is ``handler(ctx, args) -> value``. ``ctx`` carries the connection state a
command reads or changes (protocol, name, auth, the last write for WAIT, ...) and the node
services (``ctx.node``: the keyspace, the table, configuration, statistics, the client
registry, replication figures). A RESP connection owns one; so can a transaction, a
script or a gateway: they call ``node.dispatch(ctx, argv)`` and get the value back.

What a transport must do when the state changes is a hook, not a reference to it: ``kill``
(CLIENT KILL) and ``auth_changed`` (AUTH lifts the parser's unauthenticated limits, RESET
restores them) call functions the transport installed, if any. ``deny_blocking`` is set
inside MULTI/EXEC and scripts: a command that would block (WAIT, DEBUG SLEEP, a pass over
the whole keyspace in steps) answers at once there, as Redis does. ``user`` is the ACL
user the commands run as and ``acl_context`` where they run (``LUA`` in a script: the
dispatcher then checks each call and answers a denial with the script's text); a script
engine's context carries the caller's ``user`` and, in ``script_caller``, the caller.
"""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Callable, Protocol, runtime_checkable

if TYPE_CHECKING:
    from marekvs.commands.table import CommandTable
    from marekvs.config import Config, Limits
    from marekvs.core.hlc import HLC
    from marekvs.keyspace import Keyspace
    from marekvs.keyspace.changes import ChangeFeed
    from marekvs.storage.engine import Engine
    from marekvs.storage.sweeper import Sweeper


@runtime_checkable
class NodeApi(Protocol):
    """What the commands use of the node: the composition root (``marekvs/node/``)
    satisfies it, and nothing in commands/ reaches the node another way
    (tests/unit/test_architecture.py checks both). The services defined in node/ itself
    (ACL, scripting, Pub/Sub, blocking, notifications, tracking, WATCH, the monitors,
    CLIENT PAUSE) are typed ``Any`` here: the layers forbid commands/ to import them;
    their modules name what they offer."""

    # configuration and identity
    config: Config
    config_file: str | None
    run_id: str
    started_mono: float
    maxclients: int
    limits: Limits
    tunables: dict[str, str]
    tls_prepare: Callable[[Config], Callable[[], None]] | None
    # the data and its clock
    ks: Keyspace
    engine: Engine
    hlc: HLC
    changes: ChangeFeed
    sweeper: Sweeper
    table: CommandTable
    # the services of node/ (see the docstring)
    acl: Any
    scripting: Any
    pubsub: Any
    blocking: Any
    events: Any
    tracking: Any
    watches: Any
    slowlog: Any
    latency: Any
    ops: Any
    client_pause: Any
    replication: Any  # attached by the process (replication/manager.py); None in tests
    antientropy: Any  # attached by the process (antientropy/background.py); None in tests
    # clients and statistics
    clients: dict[int, Context]
    stats: Any
    error_codes: dict[str, int]
    memory_peak: int
    last_save: int

    def dispatch(self, ctx: Context, args: list[bytes]) -> Any: ...
    def tunable(self, name: str) -> str: ...
    def set_tunable(self, name: str, value: str, given: str | None = None) -> None: ...
    def set_durability(self, mode: str) -> None: ...
    def set_maxclients(self, n: int) -> None: ...
    def reset_stats(self) -> None: ...
    def save(self) -> None: ...
    def request_shutdown(self) -> None: ...
    def add_monitor(self, ctx: Context) -> None: ...
    def drop_monitor(self, ctx: Context) -> None: ...
    def ack_waiter(self) -> asyncio.Event: ...
    def memory_rss(self) -> int: ...


class Context:
    __slots__ = ("node", "ks", "id", "proto", "authed", "name", "lib_name", "lib_ver", "addr", "laddr",
                 "fd", "created", "last_active", "last_cmd", "no_evict", "db", "blocked", "trying", "last_write_seq",
                 "deny_blocking", "closing", "on_kill", "on_auth", "query_buffer", "reply_mode",
                 "channels", "patterns", "shard_channels", "in_pubsub", "on_push", "soft_limit_since",
                 "tracking", "deferred", "multi", "multi_error", "watched", "watch_dirty", "user", "acl_context",
                 "script_caller", "monitor")

    def __init__(self, node: NodeApi, client_id: int, *, authed: bool = True, addr: str = "?", laddr: str = "?",
                 fd: int = -1):
        self.node = node
        self.ks = node.ks
        self.id = client_id
        self.proto = 2
        self.authed = authed
        self.name = b""
        self.lib_name = self.lib_ver = b""
        self.addr, self.laddr, self.fd = addr, laddr, fd
        self.created = self.last_active = time.monotonic()
        self.last_cmd: Any = None  # the Command last run (CLIENT LIST shows its name)
        self.no_evict = False
        self.db = 0
        self.blocked = False  # a blocking command is pending: the transport holds later ones
        # a blocking command over several shard workers whose first try has not run yet: not
        # waiting yet (INFO blocked_clients does not count it)
        self.trying = False
        self.last_write_seq = 0  # log seq of this client's last write (WAIT)
        self.deny_blocking = False
        self.reply_mode = 0  # CLIENT REPLY: 0 on, 1 off, 2 skip this reply and the next
        # Pub/Sub: this client's subscriptions (node/pubsub.py keeps the index), whether it
        # has any (RESP2 subscribed mode), how its transport takes a push (returning the
        # bytes it still holds), and since when it is over the soft output limit
        self.channels: dict[bytes, None] = {}
        self.patterns: dict[bytes, None] = {}
        self.shard_channels: dict[bytes, None] = {}
        self.in_pubsub = False
        self.on_push: Callable[[Any], int] | None = None
        self.soft_limit_since = 0.0
        self.tracking: TrackingState | None = None  # CLIENT TRACKING (node/tracking.py); None: off
        self.deferred: list[Any] | None = None  # pushes to send after this command's reply
        # MULTI: the queued (command, argv) pairs (None: not in a transaction); a command
        # refused while queueing makes EXEC fail (EXECABORT). WATCH (node/watch.py): the
        # watched keys (-> whether each existed) and whether one changed since.
        self.multi: list[tuple[Any, list[bytes]]] | None = None
        self.multi_error = False
        self.watched: dict[bytes, bool] | None = None
        self.watch_dirty = False
        self.closing = False
        self.on_kill: Callable[[], None] | None = None
        self.on_auth: Callable[[bool], None] | None = None
        self.query_buffer: Callable[[], int] = _zero  # bytes of requests not yet complete
        # ACL (node/acl.py): the user this client runs as (the default user until AUTH; an
        # object changed in place when its rules change), and where its commands run as
        # the ACL check and ACL LOG see it: TOPLEVEL, MULTI while EXEC runs the queue, LUA
        # for the commands a script calls
        self.user: Any = node.acl.default
        self.acl_context = TOPLEVEL
        # a script engine's own context: the client whose script runs (ACL LOG's
        # client-info shows it, as Redis shows server.script_caller)
        self.script_caller: Context | None = None
        self.monitor = False  # MONITOR: shown every command the node runs (node/monitor.py)

    def close_after_reply(self) -> None:
        """QUIT, SHUTDOWN, CLIENT KILL of oneself: close once the reply is sent."""
        self.closing = True

    def kill(self) -> None:
        """Close now (CLIENT KILL, an idle timeout)."""
        self.closing = True
        if self.on_kill is not None:
            self.on_kill()

    def fire(self, cls: str, event: bytes, key: bytes) -> None:
        """A keyspace notification of this client's command (``node/events.py``)."""
        ev = self.node.events
        if ev.on:
            ev.fire(cls, event, key)

    def set_authed(self, authed: bool) -> None:
        self.authed = authed
        if self.on_auth is not None:
            self.on_auth(authed)


TOPLEVEL, MULTI, LUA = "toplevel", "multi", "lua"  # ACL LOG's context names


def _zero() -> int:
    return 0


class TrackingState:
    __slots__ = ("redirect", "bcast", "prefixes", "optin", "optout", "noloop", "caching")

    def __init__(self, redirect: int, bcast: bool, prefixes: list[bytes], optin: bool, optout: bool,
                 noloop: bool):
        self.redirect = redirect
        self.bcast = bcast
        self.prefixes = prefixes
        self.optin = optin
        self.optout = optout
        self.noloop = noloop
        self.caching: bool | None = None  # CLIENT CACHING yes/no for the next command

    def flags(self) -> list[bytes]:
        out = [b"on"]
        if self.bcast:
            out.append(b"bcast")
        if self.optin:
            out.append(b"optin")
            if self.caching:
                out.append(b"caching-yes")
        if self.optout:
            out.append(b"optout")
            if self.caching is False:
                out.append(b"caching-no")
        if self.noloop:
            out.append(b"noloop")
        return out
