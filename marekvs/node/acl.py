"""The node's ACL: its users, the check every command meets, the ACL log.

Users are cluster-wide records (``core/acluser.py``, ``keyspace/users.py``): one LWW
record per user name holding the user's rules as ACL LIST prints them. Every change of
one, made here (ACL SETUSER, DELUSER, LOAD, CONFIG SET requirepass) or merged from a peer,
comes back through ``Engine.on_node_change`` and the change feed's node-record
subscribers (``ChangeFeed.on_node_records``) to ``records_changed``, which rebuilds the
user from its rules; so every node holds the same users, and this node's own changes take
the same path as a peer's. A user object is changed in place, so the connections
authenticated as it see the new rules at their next command, as in Redis; when a change
revokes channels a subscribed connection of the user uses, that connection is closed
(``ACLKillPubsubClientsIfNeeded``), and a deleted user's connections are closed, on every
node. The ACL log is per node, as Redis's is per server.

Records are read and written through ``Node.records`` (``node/records.py``): a single
process's own store; on a node of several shard workers each record is stored by the
worker owning its name's partition and every worker holds every user
(``server/noderecords.py``): a change through one worker reaches every worker before its
reply, and a worker applies the aclfile and requirepass (``load_settings``) once it holds
its siblings' users.

The check (``check``) runs in ``Node.dispatch`` before a command runs (or is queued in
MULTI), for every client whose user is restricted; the default user with every
permission (``+@all ~* &*``, one selector) is not checked at all. A denial answers with
Redis's text for where the command runs: NOPERM at the top level and when queued in MULTI
(which then makes EXEC abort), the "ACLs rules changed" text when EXEC runs a queued
command its user may no longer run, and the script's text for a command a script calls
(``ctx.acl_context`` is ``LUA``: scripts call ``node.dispatch`` with a context carrying
the caller's user, and the caller in ``ctx.script_caller`` for the log's client-info).

The default user: ``on nopass ~* &* +@all`` until a record says otherwise. ``requirepass``
(at start and by CONFIG SET) makes its password the given one (``resetpass >pw``, or
``nopass`` when empty) and writes the change as a record when it differs, so it reaches
every node. The ``aclfile`` is the import and export format: ACL SAVE writes this node's
users to it, ACL LOAD writes its users as records (which replicate) and deletes the users
it does not name; at start it is loaded once per data directory (the first start), after
which the records are the truth.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any

from marekvs.commands import aclrules, errors
from marekvs.commands.aclrules import CommandView, User
from marekvs.commands.connection import client_line
from marekvs.commands.context import LUA, MULTI, TOPLEVEL
from marekvs.commands.reply import Err
from marekvs.core import acluser
from marekvs.core import keys as K
from marekvs.keyspace import users as stored

log = logging.getLogger("marekvs.acl")

LOG_GROUPING_MS = 60000  # ACL_LOG_GROUPING_MAX_TIME_DELTA
_FILE_LOADED = b"acl:aclfile-loaded"  # meta key: the aclfile was loaded into this data directory

DENIED_TLS_CERT = 5  # Redis 8.6's ACL_DENIED_TLS_CERT: a certificate naming no usable user
_REASON = {aclrules.DENIED_CMD: b"command", aclrules.DENIED_KEY: b"key",
           aclrules.DENIED_CHANNEL: b"channel", aclrules.DENIED_AUTH: b"auth", DENIED_TLS_CERT: b"tls-cert"}
_TOPLEVEL_TEXT = {aclrules.DENIED_KEY: errors.NOPERM_KEY, aclrules.DENIED_CHANNEL: errors.NOPERM_CHANNEL}
_EXEC_TEXT = {aclrules.DENIED_CMD: errors.NOPERM_EXEC_CMD, aclrules.DENIED_KEY: errors.NOPERM_EXEC_KEY,
              aclrules.DENIED_CHANNEL: errors.NOPERM_EXEC_CHANNEL}
_SCRIPT_TEXT = {aclrules.DENIED_CMD: errors.SCRIPT_NOPERM_CMD, aclrules.DENIED_KEY: errors.SCRIPT_NOPERM_KEY,
                aclrules.DENIED_CHANNEL: errors.SCRIPT_NOPERM_CHANNEL}


class StartupError(Exception):
    """The aclfile cannot be loaded at start (Redis exits)."""


class LogEntry:
    """One ACL LOG entry (ACLLogEntry)."""

    __slots__ = ("count", "reason", "context", "object", "username", "ctime", "cinfo")

    def __init__(self, reason: bytes, context: str, obj: bytes, username: bytes, ctime: int, cinfo: bytes):
        self.count = 1
        self.reason = reason
        self.context = context
        self.object = obj
        self.username = username
        self.ctime = ctime
        self.cinfo = cinfo


class Acl:
    def __init__(self, node: Any):
        self.node = node
        self.view = CommandView(node.table)
        self.default: User = aclrules.default_user(self.view)
        self.users: dict[bytes, User] = {b"default": self.default}
        self.log: list[LogEntry] = []  # newest first
        self.found = False  # a user record (a deleted user's included) exists: the aclfile is not loaded
        if node.config.protected_mode == "no":
            node.tunables["protected-mode"] = "no"  # (CONFIG SET protected-mode changes it later)

    # -- settings ------------------------------------------------------------------------
    @property
    def pubsub_all(self) -> bool:
        """acl-pubsub-default: do new users and selectors start with ``allchannels``?"""
        return self.node.tunable("acl-pubsub-default") == "allchannels"

    @property
    def log_max(self) -> int:
        return int(self.node.tunable("acllog-max-len"))

    def auth_required(self) -> bool:
        """A client that has not authenticated may run nothing but AUTH, HELLO, ...: the
        default user has a password, or is off (Redis's authRequired)."""
        d = self.default
        return not d.nopass or not d.enabled

    def default_authed(self) -> bool:
        """A new connection starts authenticated as the default user when that user is
        on and has nopass (clientSetDefaultAuth)."""
        return self.default.nopass and self.default.enabled

    def protected_from(self, host: str) -> bool:
        """Protected mode: is a client connecting from ``host`` refused? Yes when
        protected-mode is on, the default user has nopass and the client is not on the
        loopback interface (Redis's ``connIsLocal``: 127.* or ::1; an IPv4 loopback
        client of a dual-stack socket, ::ffff:127.*, is local too)."""
        if self.node.tunable("protected-mode") != "yes" or not self.default.nopass:
            return False
        return not (host.startswith("127.") or host == "::1" or host.startswith("::ffff:127."))

    # -- start --------------------------------------------------------------------------
    def load(self, settings: bool = True) -> None:
        """At start: the users of the stored records, then (``settings``) the aclfile
        and requirepass. A shard worker loads its settings later (``load_settings``),
        once it holds every worker's users (``server/mesh.SharedRecords.gather``)."""
        for name, rules in stored.user_records(self.node.ks):
            self.found = True
            self._apply_rules(name, rules, kill=False)
        if settings:
            self.load_settings()

    def load_settings(self) -> None:
        """The aclfile (the first start of this data directory only: no user record
        anywhere yet), then requirepass."""
        cfg = self.node.config
        engine = self.node.engine
        if cfg.aclfile and not self.found and engine.get_meta(_FILE_LOADED) is None:
            text, err = self._read_file()
            if err:
                raise StartupError(f"Aborting startup because of ACL errors: {err}")
            users, err = aclrules.load_file(text, cfg.aclfile, self.view, self.pubsub_all)
            if err:
                raise StartupError(f"Aborting startup because of ACL errors: {err}")
            self.replace_all(users, kill=False)
            engine.put_meta(_FILE_LOADED, b"1")
        if cfg.requirepass:
            self.set_requirepass(cfg.requirepass)

    # -- the records ----------------------------------------------------------------------
    def records_changed(self, changes: list[tuple[bytes, bytes]]) -> None:
        """A user record changed (this node's write or a peer's): rebuild the user."""
        for ikey, rec in changes:
            if ikey[K.TAG_AT] != K.ORD_USER:
                continue  # (another node-level record: not a user)
            try:
                name = K.decode_user_key(ikey)
                rules = acluser.rules_of(rec)
            except ValueError as e:
                log.error("ignoring a malformed ACL user record %r: %s", ikey, e)
                continue
            self.found = True
            self._apply_rules(name, rules, kill=True)

    def _apply_rules(self, name: bytes, rules: bytes | None, kill: bool) -> None:
        if rules is None:
            if name == b"default":  # (nothing deletes it; a malformed history resets it)
                self._changed(name, aclrules.default_user(self.view), kill)
                return
            gone = self.users.pop(name, None)
            if gone is not None and kill:
                self._kill_clients_of(gone)
            return
        user, skipped = aclrules.user_from_rules(name, rules, self.view)
        if skipped:
            log.warning("ACL user %r: rules this node does not know were skipped: %s", name,
                        b" ".join(skipped).decode("utf-8", "replace"))
        self._changed(name, user, kill)

    def _changed(self, name: bytes, new: User, kill: bool) -> None:
        old = self.users.get(name)
        if old is None:
            self.users[name] = new
            return
        if kill:
            self._kill_pubsub_if_needed(new, old)
        old.copy_from(new)

    def _record(self, user: User) -> tuple[bytes, bytes] | None:
        """The record making ``user`` (staged on a copy) the cluster's, or None when its
        rules are already those stored (nothing to replicate)."""
        rules = user.describe(self.view)
        current = self.users.get(user.name)
        if current is not None and current.describe(self.view) == rules and \
                stored.rules_in(self.node.records.get(K.encode_user_key(user.name))) == rules:
            return None
        return stored.user_record(self.node.ks, user.name, rules)

    def _write(self, user: User) -> None:
        rec = self._record(user)
        if rec is not None:
            self.node.records.write([rec])

    # -- commands ------------------------------------------------------------------------------
    def staged(self, name: bytes) -> User:
        """A copy of the user ``name`` to change, or a new user (ACLCreateUnlinkedUser)."""
        u = self.users.get(name)
        return u.copy() if u is not None else User(name, self.pubsub_all)

    def set_user(self, name: bytes, ops: list[bytes]) -> None:
        """ACL SETUSER: every rule applies or none does (RuleError names the bad one)."""
        u = self.staged(name)
        aclrules.set_rules(u, ops, self.view, self.pubsub_all)
        self._write(u)

    def delete_users(self, names: list[bytes]) -> int:
        gone = [stored.deleted_user(self.node.ks, name) for name in names if name in self.users]
        self.node.records.write(gone)
        return len(gone)

    def replace_all(self, users: dict[bytes, User], kill: bool = True) -> None:
        """ACL LOAD: the users of the file become the cluster's; the others are deleted.
        As Redis, the connections of every user but ``default`` on this node are closed
        (Redis frees the old users); peers apply the changes as changes."""
        if kill:
            self.kill_all_but_default()
        recs = [stored.deleted_user(self.node.ks, name) for name in self.users if name not in users]
        for u in users.values():
            rec = self._record(u)
            if rec is not None:
                recs.append(rec)
        self.node.records.write(recs, reload_users=kill)

    def kill_all_but_default(self) -> None:
        """ACL LOAD: the connections of every user but ``default`` close."""
        for u in list(self.users.values()):
            if u is not self.default:
                self._kill_clients_of(u)

    def set_requirepass(self, password: str) -> None:
        """requirepass: the default user's password is this one (empty: nopass)."""
        u = self.staged(b"default")
        u.set(b"resetpass", self.view)
        u.set(b">" + password.encode() if password else b"nopass", self.view)
        self._write(u)

    # -- authentication ------------------------------------------------------------------------
    def authenticate(self, ctx: Any, username: bytes, password: bytes, argv0: bytes) -> bool:
        """ACLAuthenticateUser: on success the connection runs as the user; a failure is
        logged (reason ``auth``)."""
        u = self.users.get(username)
        if u is not None and u.password_ok(password):
            ctx.user = u
            ctx.set_authed(True)
            return True
        context = MULTI if ctx.multi is not None or ctx.acl_context == MULTI else TOPLEVEL
        self.add_log(ctx, aclrules.DENIED_AUTH, context, argv0, username)
        return False

    def authenticate_certificate(self, ctx: Any, name: bytes) -> bool:
        """``tls-auth-clients-user CN`` (Redis 8.6): a TLS client whose verified certificate's
        CN names an enabled user runs as that user without AUTH (its password is not asked
        for). A CN naming no user, or a disabled one, leaves the client as it was (the
        default user) and is logged, reason ``tls-cert``."""
        u = self.users.get(name)
        if u is not None and u.enabled:
            ctx.user = u
            ctx.set_authed(True)
            return True
        self.add_log(ctx, DENIED_TLS_CERT, TOPLEVEL, b"", name)
        return False

    def reset_client(self, ctx: Any) -> None:
        """RESET (clientSetDefaultAuth): back to the default user."""
        ctx.user = self.default
        ctx.set_authed(self.default_authed())

    # -- the check -------------------------------------------------------------------------------
    def check(self, ctx: Any, cmd: Any, args: list[bytes]) -> Err | None:
        """Before ``cmd`` runs for ``ctx`` (whose user is restricted): None if the user
        may run it, else the error to answer (logged)."""
        if ctx.multi is not None and cmd.no_multi and cmd.queued_in_multi:
            return None  # refused as not allowed in MULTI first, as Redis
        user = ctx.user
        result, pos = user.check(self.view, cmd, args)
        if result == aclrules.OK:
            return None
        where = ctx.acl_context
        context = where if where != TOPLEVEL else (MULTI if ctx.multi is not None else TOPLEVEL)
        obj = cmd.fullname.encode() if result == aclrules.DENIED_CMD else args[pos]
        ctx.last_cmd = cmd  # (Redis sets it when it looks the command up: the log shows it)
        self.add_log(ctx, result, context, obj, user.name)
        if where == LUA:
            return Err(_SCRIPT_TEXT[result])
        if where == MULTI:
            return Err(_EXEC_TEXT[result])
        if result == aclrules.DENIED_CMD:
            return Err(errors.noperm_command(cmd.fullname))
        return Err(_TOPLEVEL_TEXT[result])

    # -- the log -------------------------------------------------------------------------------
    def add_log(self, ctx: Any, reason: int, context: str, obj: bytes, username: bytes) -> None:
        """addACLLogEntry: a similar entry of the last minute among the newest ten is
        bumped (and moved first) instead of adding one."""
        now = int(time.time() * 1000)
        cinfo = client_line(ctx.script_caller or ctx).encode("utf-8", "surrogateescape")
        why = _REASON[reason]
        for i, e in enumerate(self.log[:10]):
            if e.reason == why and e.context == context and abs(e.ctime - now) <= LOG_GROUPING_MS \
                    and e.object == obj and e.username == username:
                e.count += 1
                e.ctime = now
                e.cinfo = cinfo
                self.log.insert(0, self.log.pop(i))
                return
        self.log.insert(0, LogEntry(why, context, obj, username, now, cinfo))
        del self.log[max(self.log_max, 0):]

    # -- connections ------------------------------------------------------------------------------
    def _kill_clients_of(self, user: User) -> None:
        """ACLFreeUserAndKillClients: the user is gone; its connections go too (the one
        running this command after its reply)."""
        node = self.node
        for ctx in list(node.clients.values()):
            if ctx.user is user:
                ctx.user = self.default
                ctx.authed = False
                if ctx is node.current:
                    ctx.close_after_reply()
                else:
                    ctx.kill()

    def _kill_pubsub_if_needed(self, new: User, old: User) -> None:
        """ACLKillPubsubClientsIfNeeded: when the new rules do not keep every channel
        pattern the old ones had, close the user's subscribed connections whose
        subscriptions the new rules refuse."""
        if any(s.allchannels for s in new.selectors):
            return
        upcoming = [c for s in new.selectors for c in s.channels]
        if all(not s.allchannels and all(c in upcoming for c in s.channels) for s in old.selectors):
            return
        node = self.node
        for ctx in list(node.clients.values()):
            if ctx.user is not old or not ctx.in_pubsub:
                continue
            refused = any(not aclrules.channel_allowed(upcoming, p, True) for p in ctx.patterns) or \
                any(not aclrules.channel_allowed(upcoming, c, False) for c in ctx.channels) or \
                any(not aclrules.channel_allowed(upcoming, c, False) for c in ctx.shard_channels)
            if refused:
                if ctx is node.current:
                    ctx.close_after_reply()
                else:
                    ctx.kill()

    # -- the aclfile ------------------------------------------------------------------------------
    def _read_file(self) -> tuple[bytes, str]:
        path = self.node.config.aclfile
        try:
            with open(path, "rb") as f:
                return f.read(), ""
        except OSError as e:
            return b"", errors.acl_open_failed(path, os.strerror(e.errno or 0))

    def load_file(self) -> str | None:
        """ACL LOAD: None, or the error text (nothing changed)."""
        text, err = self._read_file()
        if err:
            return errors.acl_load_failed(err)
        users, err = aclrules.load_file(text, self.node.config.aclfile, self.view, self.pubsub_all)
        if err:
            return errors.acl_load_failed(err)
        self.replace_all(users)
        return None

    def save_file(self) -> bool:
        """ACL SAVE: this node's users, written to a temporary file renamed over the
        aclfile."""
        path = self.node.config.aclfile
        tmp = f"{path}.tmp-{os.getpid()}-{int(time.time() * 1000)}"
        try:
            with open(tmp, "wb") as f:
                f.write(aclrules.file_text(self.users.values(), self.view))
            os.replace(tmp, path)
            return True
        except OSError as e:
            log.warning("ACL SAVE: %s", e)
            try:
                os.unlink(tmp)
            except OSError:
                pass
            return False
