"""In-process tests of ACL users on real nodes (engine in a temporary directory, contexts
with no socket): the records ACL commands write, users rebuilt from records merged from a
peer (and the connections closed when Redis closes them), users staying out of the
keyspace, the check in dispatch (MULTI, EXEC, scripts), the log, requirepass, the aclfile,
protected mode's decision.
"""

from __future__ import annotations

import hashlib

import pytest

from marekvs.commands.context import LUA
from marekvs.commands.reply import Err
from marekvs.config import Config
from marekvs.core import acluser, registry
from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.node import Node


class Client:
    """A context of a node, with a kill hook that records being closed."""

    def __init__(self, node: Node):
        self.node = node
        self.ctx = node.new_context(addr="127.0.0.1:5000")
        self.killed = False
        self.ctx.on_kill = self._killed

    def _killed(self) -> None:
        self.killed = True

    def __call__(self, *argv):
        return self.node.dispatch(self.ctx, [a if isinstance(a, bytes) else str(a).encode() for a in argv])


def make(tmp_path, name="n1", node_id=1, **cfg) -> Node:
    return Node(Config(data_dir=str(tmp_path / name), node_id=node_id, durability="no", **cfg))


@pytest.fixture
def nodes(tmp_path):
    made = []

    def factory(name="n1", node_id=1, **cfg):
        n = make(tmp_path, name, node_id, **cfg)
        made.append(n)
        return n

    yield factory
    for n in made:
        n.close()


def user_records(node: Node) -> list[tuple[bytes, bytes]]:
    return list(node.engine.scan_tags(0, K.TAG_USER))


def ship(src: Node, dst: Node) -> None:
    """What replication does: every user record of ``src`` merged into ``dst``'s engine
    (no log entry), as the receiver applies a peer's batch."""
    dst.engine.apply(user_records(src), log_entry=False)


# -- records ---------------------------------------------------------------------------------------

def test_setuser_writes_one_user_record_through_the_apply_path(nodes):
    n = nodes()
    c = Client(n)
    seq = n.engine.next_seq
    assert c("ACL", "SETUSER", "alice", "on", ">pw", "~app:*", "+get") == b"OK"
    recs = user_records(n)
    assert [ik for ik, _ in recs] == [K.encode_user_key(b"alice")]
    ikey, rec = recs[0]
    assert registry.check_record(ikey, rec) is registry.ACL_USER
    pw = hashlib.sha256(b"pw").hexdigest().encode()
    assert acluser.rules_of(rec) == b"on #" + pw + b" ~app:* resetchannels -@all +get"
    assert env.origin_of(rec) == 1 and b"pw " not in rec
    assert list(n.engine.pending_log) == [ikey] and n.engine.next_seq == seq + 1  # one log entry
    # the same rules again: nothing to write, nothing to replicate
    n.end_tick()
    assert c("ACL", "SETUSER", "alice", "on") == b"OK"
    assert not n.engine.pending


def test_a_refused_rule_changes_nothing(nodes):
    n = nodes()
    c = Client(n)
    c("ACL", "SETUSER", "alice", "on", "+get")
    before = user_records(n)
    r = c("ACL", "SETUSER", "alice", "+set", "~k", "+nocmd")
    assert r == Err("ERR Error in ACL SETUSER modifier '+nocmd': Unknown command or category name in ACL")
    assert user_records(n) == before
    assert c("ACL", "DRYRUN", "alice", "set", "k", "v") == b"This user has no permissions to run the 'set' command"
    r = c("ACL", "SETUSER", "bob", "on", "(~a", "+get")
    assert r == Err("ERR Unmatched parenthesis in acl selector starting at '(~a'.")
    assert c("ACL", "SETUSER", "b b") == Err("ERR Usernames can't contain spaces or null characters")
    assert c("ACL", "USERS") == [b"alice", b"default"]


def test_deluser_is_a_tombstone(nodes):
    n = nodes()
    c = Client(n)
    c("ACL", "SETUSER", "alice")
    assert c("ACL", "DELUSER", "default") == Err("ERR The 'default' user cannot be removed")
    assert c("ACL", "DELUSER", "alice", "nobody", "alice") == 1
    [(ikey, rec)] = user_records(n)
    assert env.is_tombstone(rec) and acluser.rules_of(rec) is None
    assert c("ACL", "GETUSER", "alice") is None


def test_users_are_not_keys(nodes):
    n = nodes()
    c = Client(n)
    c("SET", "k", "v")
    digest = c("DEBUG", "DIGEST")
    for name in ("alice", "k", "bob"):
        c("ACL", "SETUSER", name, "on")
    assert c("DBSIZE") == 1 and c("KEYS", "*") == [b"k"] and c("DEBUG", "DIGEST") == digest
    assert c("SCAN", "0", "COUNT", "1000")[1] == [b"k"]
    assert c("FLUSHALL") == b"OK"
    assert c("ACL", "USERS") == [b"alice", b"bob", b"default", b"k"]
    assert c("EXISTS", "alice") == 0


def test_acl_changes_do_not_touch_watched_keys(nodes):
    n = nodes()
    c = Client(n)
    assert c("WATCH", "alice") == b"OK"
    c("ACL", "SETUSER", "alice", "on")
    c("ACL", "DELUSER", "alice")
    c("MULTI")
    c("SET", "alice", "1")
    assert c("EXEC") == [b"OK"]


def test_users_survive_a_restart(tmp_path):
    n = make(tmp_path)
    c = Client(n)
    c("ACL", "SETUSER", "alice", "on", ">pw", "~a*", "+@read", "(%W~w* +set)")
    c("ACL", "SETUSER", "gone")
    c("ACL", "DELUSER", "gone")
    before = c("ACL", "LIST")
    n.close()
    n = make(tmp_path)
    try:
        c = Client(n)
        assert c("ACL", "LIST") == before
        assert c("AUTH", "alice", "pw") == b"OK" and c.ctx.user.name == b"alice"
        assert c("GET", "a1") is None and c("SET", "w1", "v") == b"OK"
    finally:
        n.close()


# -- replicated: a user created, changed, deleted on one node ------------------------------------

def test_a_user_created_on_one_node_authenticates_on_another(nodes):
    a, b = nodes("a", 1), nodes("b", 2)
    Client(a)("ACL", "SETUSER", "alice", "on", ">pw", "~app:*", "+get")
    cb = Client(b)
    assert cb("AUTH", "alice", "pw") == Err("WRONGPASS invalid username-password pair or user is disabled.")
    ship(a, b)
    assert cb("AUTH", "alice", "pw") == b"OK"
    assert cb("GET", "app:1") is None
    assert cb("GET", "other") == Err("NOPERM this user has no permissions to access one of the keys used as arguments")
    assert Client(b)("ACL", "LIST") == Client(a)("ACL", "LIST")


def test_node_records_reach_every_subscriber_and_users_take_their_own_tag(nodes, caplog):
    """The node-record feed has several subscribers (ACL users here, function libraries
    on the scripting side): each sees every node record, and ACL ignores other tags."""
    a, b = nodes("a", 1), nodes("b", 2)
    seen: list[bytes] = []
    b.changes.on_node_records(lambda changes: seen.extend(ik for ik, _ in changes))
    Client(a)("ACL", "SETUSER", "alice", "on", ">pw")
    ship(a, b)
    assert seen == [K.encode_user_key(b"alice")]
    assert b"alice" in b.acl.users  # (the ACL subscriber still ran)
    users = dict(b.acl.users)
    with caplog.at_level("WARNING", logger="marekvs.acl"):
        b.acl.records_changed([(b"\x00\x00F" + b"alice", b"not a user record")])  # another node tag
    assert b.acl.users == users and not caplog.records  # (not taken for a malformed user)

def test_a_change_from_a_peer_takes_effect_on_connected_clients(nodes):
    a, b = nodes("a", 1), nodes("b", 2)
    Client(a)("ACL", "SETUSER", "alice", "on", "nopass", "~*", "+get")
    ship(a, b)
    cb = Client(b)
    cb("AUTH", "alice", "x")
    assert cb("SET", "k", "v") == Err("NOPERM this user has no permissions to run the 'set' command")
    Client(a)("ACL", "SETUSER", "alice", "+set")
    ship(a, b)
    assert cb("SET", "k", "v") == b"OK" and not cb.killed  # the same connection, new rules
    Client(a)("ACL", "SETUSER", "alice", "off")  # as Redis: off refuses new AUTHs only
    ship(a, b)
    assert cb("GET", "k") == b"v" and not cb.killed
    assert Client(b)("AUTH", "alice", "x") == Err("WRONGPASS invalid username-password pair or user is disabled.")


def test_a_user_deleted_on_a_peer_is_refused_and_its_connections_closed(nodes):
    a, b = nodes("a", 1), nodes("b", 2)
    Client(a)("ACL", "SETUSER", "alice", "on", "nopass", "+@all", "~*")
    ship(a, b)
    bob, carol = Client(b), Client(b)
    bob("AUTH", "alice", "x")
    Client(a)("ACL", "DELUSER", "alice")
    ship(a, b)
    assert bob.killed and not carol.killed
    assert bob.ctx.user is b.acl.default and not bob.ctx.authed
    assert carol("AUTH", "alice", "x") == Err("WRONGPASS invalid username-password pair or user is disabled.")


def test_deleting_ones_own_user_closes_after_the_reply(nodes):
    n = nodes()
    c = Client(n)
    c("ACL", "SETUSER", "alice", "on", "nopass", "+@all", "~*")
    c("AUTH", "alice", "x")
    assert c("ACL", "DELUSER", "alice") == 1
    assert c.ctx.closing and not c.killed  # the reply goes out first


def test_revoked_channels_close_only_the_subscribers_they_refuse(nodes):
    a, b = nodes("a", 1), nodes("b", 2)
    Client(a)("ACL", "SETUSER", "alice", "on", "nopass", "+@all", "~*", "resetchannels", "&news.*", "&sport")
    ship(a, b)
    news, sport, idle = Client(b), Client(b), Client(b)
    for c in (news, sport, idle):
        c("AUTH", "alice", "x")
    news("SUBSCRIBE", "news.1")
    sport("SUBSCRIBE", "sport")
    Client(a)("ACL", "SETUSER", "alice", "resetchannels", "&news.*")
    ship(a, b)
    assert sport.killed and not news.killed and not idle.killed
    # from every channel (&*) to some: a subscriber is checked too (Redis 7.0.15)
    Client(a)("ACL", "SETUSER", "bob", "on", "nopass", "+@all", "~*", "&*")
    ship(a, b)
    c = Client(b)
    c("AUTH", "bob", "x")
    c("PSUBSCRIBE", "x*")
    Client(a)("ACL", "SETUSER", "bob", "resetchannels", "&y")
    ship(a, b)
    assert c.killed


def test_concurrent_changes_of_one_user_converge_to_the_newest(nodes):
    a, b = nodes("a", 1), nodes("b", 2)
    Client(a)("ACL", "SETUSER", "alice", "on", "+get")
    Client(b)("ACL", "SETUSER", "alice", "on", "+set")  # later HLC on the shared clock
    ship(a, b)
    ship(b, a)
    assert Client(a)("ACL", "LIST") == Client(b)("ACL", "LIST")
    assert user_records(a) == user_records(b)


# -- the check in dispatch ----------------------------------------------------------------------------

def test_the_unrestricted_default_user_is_never_checked(nodes, monkeypatch):
    n = nodes()
    c = Client(n)

    def boom(*a):
        raise AssertionError("checked")

    monkeypatch.setattr(n.acl, "check", boom)
    assert c("SET", "k", "v") == b"OK" and c("GET", "k") == b"v"
    c("ACL", "SETUSER", "default", "-flushall")
    with pytest.raises(AssertionError):
        c("GET", "k")


def test_multi_refuses_at_queue_time_and_rechecks_at_exec(nodes):
    n = nodes()
    admin, c = Client(n), Client(n)
    admin("ACL", "SETUSER", "alice", "on", "nopass", "~k*", "+@all")
    c("AUTH", "alice", "x")
    c("MULTI")
    assert c("GET", "x") == Err("NOPERM this user has no permissions to access one of the keys used as arguments")
    assert c("EXEC") == Err("EXECABORT Transaction discarded because of previous errors.")
    c("MULTI")
    assert c("GET", "k1") == b"QUEUED" and c("SET", "k2", "v") == b"QUEUED"
    admin("ACL", "SETUSER", "alice", "-get", "resetkeys", "~k1")
    assert c("EXEC") == [
        Err("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. "
            "This command is no longer allowed for the following reason: no permission to execute the command "
            "or subcommand"),
        Err("NOPERM ACLs rules changed between the moment the transaction was accumulated and the EXEC call. "
            "This command is no longer allowed for the following reason: no permission to touch the specified "
            "keys")]
    log = admin("ACL", "LOG")
    assert [(e[3], e[5], e[7], e[9]) for e in log][:2] == [(b"key", b"multi", b"k2", b"alice"),
                                                             (b"command", b"multi", b"get", b"alice")]


def test_a_script_context_gets_the_script_texts(nodes):
    """What a script engine gets from node.dispatch for a redis.call its user may not make
    (the context carries the caller's user and acl_context LUA)."""
    n = nodes()
    caller = Client(n)
    caller("ACL", "SETUSER", "alice", "on", "nopass", "~k*", "-@all", "+get", "+publish", "resetchannels")
    caller("AUTH", "alice", "x")
    c = Client(n)  # the script engine's own context, running for the caller
    c.ctx.user, c.ctx.acl_context, c.ctx.script_caller = caller.ctx.user, LUA, caller.ctx
    assert c("GET", "x") == Err("ERR The user executing the script can't access at least one of the keys "
                                "mentioned in the command arguments")
    assert c("SET", "k", "v") == Err("ERR The user executing the script can't run this command or subcommand")
    assert c("PUBLISH", "ch", "m") == Err("ERR The user executing the script can't publish to the channel "
                                          "mentioned in the command")
    assert c("GET", "k") is None
    entries = n.acl.log
    assert [(e.reason, e.context, e.object) for e in entries] == [
        (b"channel", "lua", b"ch"), (b"command", "lua", b"set"), (b"key", "lua", b"x")]
    assert all(f"id={caller.ctx.id} ".encode() in e.cinfo and b" user=alice " in e.cinfo for e in entries)


def test_log_groups_similar_entries_and_keeps_acllog_max_len(nodes):
    n = nodes()
    admin, c = Client(n), Client(n)
    admin("ACL", "SETUSER", "alice", "on", "nopass", "~k*", "+get")
    c("AUTH", "alice", "x")
    for _ in range(3):
        c("GET", "x")
    c("GET", "y")
    log = admin("ACL", "LOG")
    assert [(e[1], e[7]) for e in log] == [(1, b"y"), (3, b"x")]
    entry = dict(zip(log[1][::2], log[1][1::2]))
    assert entry[b"reason"] == b"key" and entry[b"context"] == b"toplevel" and entry[b"username"] == b"alice"
    assert b" cmd=get user=alice " in entry[b"client-info"]
    admin("CONFIG", "SET", "acllog-max-len", "2")
    for k in ("a", "b", "c"):
        c("GET", k)
    assert [e[7] for e in admin("ACL", "LOG")] == [b"c", b"b"]
    assert admin("ACL", "LOG", "1")[0][7] == b"c" and admin("ACL", "LOG", "-3") == []
    assert admin("ACL", "LOG", "RESET") == b"OK" and admin("ACL", "LOG") == []
    assert c("AUTH", "alice2", "x") == Err("WRONGPASS invalid username-password pair or user is disabled.")
    [e] = admin("ACL", "LOG")
    assert (e[3], e[7], e[9]) == (b"auth", b"AUTH", b"alice2")


# -- the default user, requirepass, the aclfile ----------------------------------------------------------

def test_requirepass_is_the_default_users_password(nodes):
    n = nodes(requirepass="secret")
    c = Client(n)
    assert not c.ctx.authed
    assert c("GET", "k") == Err("NOAUTH Authentication required.")
    assert c("AUTH", "wrong") == Err("WRONGPASS invalid username-password pair or user is disabled.")
    assert c("AUTH", "secret") == b"OK" and c("AUTH", "default", "secret") == b"OK"
    assert c("CONFIG", "SET", "requirepass", "other") == b"OK"
    assert c("AUTH", "secret") == Err("WRONGPASS invalid username-password pair or user is disabled.")
    assert c("AUTH", "other") == b"OK"
    [(ikey, rec)] = user_records(n)
    assert acluser.rules_of(rec).startswith(b"on #" + hashlib.sha256(b"other").hexdigest().encode())
    assert c("CONFIG", "SET", "requirepass", "") == b"OK"
    assert c("AUTH", "x") == Err("ERR AUTH <password> called without any password configured for the default "
                                 "user. Are you sure your configuration is correct?")
    assert Client(n).ctx.authed


def test_an_unauthenticated_client_runs_once_the_default_user_has_nopass(nodes):
    n = nodes(requirepass="secret")
    c = Client(n)
    Client(n)("AUTH", "secret")
    admin = Client(n)
    admin("AUTH", "secret")
    admin("ACL", "SETUSER", "default", "nopass")
    assert not c.ctx.authed and c("PING") == b"PONG"  # (Redis's authRequired: no)
    admin("ACL", "SETUSER", "default", "off")
    assert c("PING") == Err("NOAUTH Authentication required.")


def test_the_aclfile_is_loaded_at_the_first_start_only(tmp_path):
    f = tmp_path / "users.acl"
    f.write_bytes(b"user alice on nopass ~* +@all\nuser default on nopass ~* &* +@all\n")
    n = make(tmp_path, aclfile=str(f))
    c = Client(n)
    assert c("ACL", "USERS") == [b"alice", b"default"]
    c("ACL", "SETUSER", "bob", "on")
    n.close()
    f.write_bytes(b"user carol on\n")
    n = make(tmp_path, aclfile=str(f))
    try:
        c = Client(n)
        assert c("ACL", "USERS") == [b"alice", b"bob", b"default"]  # the records are the truth now
        assert c("ACL", "LOAD") == b"OK"  # ... until ACL LOAD
        assert c("ACL", "USERS") == [b"carol", b"default"]
        c("ACL", "SETUSER", "dave", "on", ">pw")
        assert c("ACL", "SAVE") == b"OK"
        assert f.read_bytes().splitlines()[1].startswith(b"user dave on #")
    finally:
        n.close()


def test_a_bad_aclfile_stops_the_first_start(tmp_path):
    from marekvs.node.acl import StartupError

    f = tmp_path / "users.acl"
    f.write_bytes(b"user alice on +nocmd\n")
    with pytest.raises(StartupError, match="Error in applying operation '[+]nocmd'"):
        make(tmp_path, aclfile=str(f))
    with pytest.raises(StartupError, match="opening file"):
        make(tmp_path, name="n2", aclfile=str(tmp_path / "missing.acl"))


def test_acl_load_and_save_errors(nodes, tmp_path):
    n = nodes()
    c = Client(n)
    assert c("ACL", "SAVE") == Err(
        "ERR This Redis instance is not configured to use an ACL file. You may want to specify users via the ACL "
        "SETUSER command and then issue a CONFIG REWRITE (assuming you have a Redis configuration file set) in "
        "order to store users in the Redis configuration.")
    f = tmp_path / "u.acl"
    f.write_bytes(b"")
    c = Client(nodes("m", aclfile=str(f)))
    f.write_bytes(b"user a on\nuser b foo\n")
    before = c("ACL", "LIST")
    assert c("ACL", "LOAD") == Err(f"ERR {f}:2: Syntax error. WARNING: ACL errors detected, no change to the "
                                   "previously active ACL rules was performed")
    assert c("ACL", "LIST") == before
    f.unlink()
    assert c("ACL", "LOAD") == Err(f"ERR Error loading ACLs, opening file '{f}': No such file or directory")


# -- protected mode ------------------------------------------------------------------------------------

def test_protected_mode_refuses_non_loopback_clients_while_the_default_user_has_no_password(nodes):
    n = nodes()
    acl = n.acl
    assert acl.protected_from("192.0.2.7") and acl.protected_from("10.1.2.3") and acl.protected_from("fd00::2")
    assert not any(acl.protected_from(h) for h in ("127.0.0.1", "127.3.4.5", "::1", "::ffff:127.0.0.1"))
    c = Client(n)
    c("CONFIG", "SET", "protected-mode", "no")
    assert not acl.protected_from("192.0.2.7")
    c("CONFIG", "SET", "protected-mode", "yes")
    c("ACL", "SETUSER", "default", ">pw")
    assert not acl.protected_from("192.0.2.7")
    assert not nodes("p", protected_mode="no").acl.protected_from("192.0.2.7")


def test_anti_entropy_carries_user_records_older_than_gc_grace():
    """A user record is not an element: anti-entropy must not refuse an old one for lack
    of a collection head (it does refuse headless elements older than the horizon)."""
    from marekvs.antientropy.plan import refused

    now = 10_000_000
    old = acluser.new(b"on nopass ~* +@all", (now - 7_200_000) << 16, 2)
    ikey = K.encode_user_key(b"alice")
    assert refused({}, [(ikey, old)], now, 3_600_000) == set()
    element = K.encode_set_member_key(b"alice", b"m")
    from marekvs.core import orswot
    stale = orswot.new(env.RecordType.SET_MEMBER, (now - 7_200_000) << 16, 2, b"")
    assert refused({}, [(element, stale)], now, 3_600_000) == {element}
