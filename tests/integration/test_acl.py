"""ACL side by side: a marekvs node and a stock redis-server 7.0.15, both with an ACL file,
get the same commands; their replies are compared byte for byte in RESP2 and RESP3 (ACL
texts, NOPERM cases, GETUSER shapes), or field by field where a reply holds what differs
by nature (an ACL LOG entry's age and client details, ACL CAT's order, which is a random
hash order in Redis). Then AUTH/HELLO, connections of deleted and changed users, ACL
LOAD/SAVE, redis-cli, CONFIG SET requirepass, and protected mode on a real non-loopback
address of the machine.

Every test starts from the same state on both servers: an empty ACL file loaded (only the
default user, on nopass ~* &* +@all).

The intended differences, each checked below where it shows:
- ACL LIST / GETUSER's command rules: Redis lists single commands in the random order of
  a hash table; marekvs in name order. Users whose rules name at most one single command
  per selector read the same; others are compared as sets of rules. The category a
  description starts from depends on the commands the server has: only rules made of
  +@all/-@all and single commands (or categories marekvs implements whole) are compared
  as text.
- ACL CAT: the commands marekvs implements (and, in a category, marekvs's own commands
  that Redis 7.0 does not have: Redis 7.4's hash field TTLs, KeyDB's EXPIREMEMBER, CLIENT
  SETINFO, DEBUG's subcommands).
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess

import hiredis
import pytest
import redis

from tests.cluster import wait_for
from tests.helpers import ROOT, Node, RedisServer, mb

WRONGPASS = "WRONGPASS invalid username-password pair or user is disabled."


# -- a raw connection: replies as bytes ---------------------------------------------------------

class Raw:
    def __init__(self, port: int, proto: int = 2, host: str = "127.0.0.1"):
        self.sock = socket.create_connection((host, port), timeout=15)
        self.buf = b""
        if proto == 3:
            assert self.call(b"HELLO", b"3")[:1] == b"%"

    def call(self, *args) -> bytes:
        self.sock.sendall(mb(*[a if isinstance(a, bytes) else str(a).encode() for a in args]))
        return self.reply()

    def reply(self) -> bytes:
        while True:
            end = _reply_end(self.buf, 0)
            if end is not None:
                out, self.buf = self.buf[:end], self.buf[end:]
                return out
            data = self.sock.recv(1 << 16)
            if not data:
                raise ConnectionError("closed")
            self.buf += data

    def closed(self, timeout: float = 30.0) -> bool:
        """Does the server close this connection (within ``timeout``)?"""
        self.sock.settimeout(timeout)
        try:
            while True:
                d = self.sock.recv(1 << 16)
                if not d:
                    return True
        except (ConnectionResetError, BrokenPipeError):
            return True
        except socket.timeout:
            return False

    def close(self) -> None:
        self.sock.close()


def _reply_end(buf: bytes, i: int) -> int | None:
    """Where the RESP2/RESP3 reply starting at ``i`` ends, None if it is not whole yet."""
    nl = buf.find(b"\r\n", i)
    if nl < 0:
        return None
    t, head, j = buf[i:i + 1], buf[i + 1:nl], nl + 2
    if t in b"$=!":
        n = int(head)
        return j if n < 0 else (j + n + 2 if len(buf) >= j + n + 2 else None)
    if t in b"*%~>|":
        n = int(head)
        for _ in range(max(n, 0) * (2 if t in b"%|" else 1)):
            j = _reply_end(buf, j)
            if j is None:
                return None
        return j
    return j


# -- the two servers ----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def servers(tmp_path_factory):
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    d = tmp_path_factory.mktemp("acl")
    (d / "redis.acl").write_bytes(b"")
    (d / "mvs.acl").write_bytes(b"")
    red = RedisServer(d / "redis", extra=["--save", "", "--appendonly", "no", "--aclfile", str(d / "redis.acl")])
    red.start()
    mvs = Node(d / "data", extra=["--aclfile", str(d / "mvs.acl")]).start()
    yield mvs, red, d
    mvs.stop()
    red.stop()


@pytest.fixture
def both(servers):
    """Both servers reset to the default user alone (an empty ACL file loaded)."""
    mvs, red, d = servers
    for name, port in (("mvs.acl", mvs.port), ("redis.acl", red.port)):
        (d / name).write_bytes(b"")
        c = Raw(port)
        assert c.call(b"ACL", b"LOAD") == b"+OK\r\n"
        c.call(b"CONFIG", b"SET", b"acllog-max-len", b"128")
        c.call(b"ACL", b"LOG", b"RESET")
        c.call(b"FLUSHALL")
        c.close()
    return mvs, red


class Pair:
    """The same connection to each server: ``same(...)`` asserts equal raw replies."""

    def __init__(self, both, proto: int = 2):
        self.m, self.r = Raw(both[0].port, proto), Raw(both[1].port, proto)

    def same(self, *args) -> bytes:
        a, b = self.m.call(*args), self.r.call(*args)
        assert a == b, f"{args}:\n marekvs: {a!r}\n redis:   {b!r}"
        return a

    def both(self, *args) -> tuple[bytes, bytes]:
        return self.m.call(*args), self.r.call(*args)

    def close(self) -> None:
        self.m.close()
        self.r.close()


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def pair(request, both):
    p = Pair(both, request.param)
    yield p
    p.close()


def _values(raw: bytes, proto: int = 3):
    r = hiredis.Reader(notEnoughData=False) if proto == 2 else hiredis.Reader()
    r.feed(raw)
    return r.gets()


# -- SETUSER: accepted and refused rules, exact texts, nothing changed ---------------------------------

BAD_RULES = [
    ["foo"], ["+nocmd"], ["+@nocat"], ["#abc"], ["<nopw"], ["!" + "0" * 64], ["+get|x|y"], ["+client|nosub"],
    ["+config|get|x"], ["%X~a"], ["%~a"], ["(~a"], ["(~a +get"], ["(foo)"], ["-get|x"], ["on", "~a b"],
    ["allkeys", "~a"], ["allchannels", "&a"], ["+get", "(~a", "+get"], ["on", ">pw", "bad"], ["+@READ", "-@nope"],
    ["~x", "(", "+get", "~y"], ["#" + "A" * 64], ["+|"],
]
GOOD_RULES = [
    ["on", ">pw", "~foo*", "%R~bar*", "&ch*", "+get"],
    ["on", "nopass", "allkeys", "allchannels", "allcommands", "-flushall"],
    ["off", "~a*", "%RW~a", "%R", "( )", "()", "+select|1"],
    ["on", "(~a", "+get)", "(+set ~b)", "resetpass", "#" + "a" * 64],
    ["on", "+@all", "-@dangerous", "~*", "&*"],
    ["reset"], ["on", ">p1", ">p2", "<p1", "clearselectors", "%W~w*"], ["skip-sanitize-payload", "-@all", "+ping"],
]


def test_setuser_refusals_are_redis_s_and_change_nothing(pair):
    pair.same("ACL", "SETUSER", "alice", "on", ">secret", "~k*", "+get")
    for rules in BAD_RULES:
        pair.same("ACL", "SETUSER", "alice", *rules)
        pair.same("ACL", "SETUSER", "newbie", *rules)
        pair.same("ACL", "LIST")
        pair.same("ACL", "GETUSER", "alice")
    pair.same("ACL", "SETUSER", "bad name")
    pair.same("ACL", "SETUSER", "bad\x00name")
    pair.same("ACL", "SETUSER", "bad\tname", "on")
    pair.same("ACL", "USERS")


def test_getuser_list_users_of_accepted_rules(pair):
    for i, rules in enumerate(GOOD_RULES):
        pair.same("ACL", "SETUSER", f"user{i}", *rules)
        pair.same("ACL", "GETUSER", f"user{i}")
    pair.same("ACL", "SETUSER", "user0", "+set")  # two single commands: compared as a set below
    pair.same("ACL", "GETUSER", "nobody")
    pair.same("ACL", "USERS")
    a, b = pair.both("ACL", "LIST")
    assert a != b"" and _rule_sets(a) == _rule_sets(b)
    pair.same("ACL", "DELUSER", "user1", "nobody", "user1", "user2")
    pair.same("ACL", "DELUSER", "user3", "default")
    pair.same("ACL", "USERS")


def _rule_sets(raw: bytes):
    """ACL LIST lines as sets of rules per selector (Redis's single-command order is random)."""
    out = []
    for line in _values(raw, 2):
        parts = re.split(rb" (?=\()", line)
        out.append([frozenset(p.strip(b"()").split()) for p in parts])
    return out


def test_acl_cat_lists_every_category_and_its_commands(both):
    mvs, red = (Raw(both[0].port), Raw(both[1].port))
    assert mvs.call("ACL", "CAT") == red.call("ACL", "CAT")
    assert mvs.call("ACL", "CAT", "nocat") == red.call("ACL", "CAT", "nocat")
    ours, theirs = _all_names(mvs), _all_names(red)
    common = ours & theirs
    assert len(common) > 200
    for cat in _values(red.call("ACL", "CAT"), 2):
        a = set(_values(mvs.call("ACL", "CAT", cat), 2))
        b = set(_values(red.call("ACL", "CAT", cat.upper()), 2))
        assert a & common == b & common, (cat, sorted(a & common ^ b & common))
        assert a <= ours
    mvs.close()
    red.close()


def _all_names(c: Raw) -> set[bytes]:
    names = set()
    for info in _values(c.call("COMMAND"), 2):
        names.add(info[0])
        names.update(s[0] for s in info[9])
    return names


# -- the check: NOPERM -------------------------------------------------------------------------------

def test_noperm_cases_are_redis_s(pair):
    pair.same("ACL", "SETUSER", "app", "on", ">pw", "~app:*", "%R~ro:*", "%W~wo:*", "resetchannels", "&news.*",
              "-@all", "+@string", "+@hash", "+multi", "+exec", "+discard", "+publish", "+subscribe",
              "+psubscribe", "+ping", "+lmove", "(~tmp:* +@list)")
    pair.same("AUTH", "app", "pw")
    for cmd in (["GET", "app:1"], ["GET", "other"], ["SET", "ro:1", "v"], ["GET", "ro:1"], ["SET", "wo:1", "v"],
                ["GET", "wo:1"], ["APPEND", "wo:1", "v"], ["HSET", "app:h", "f", "v"], ["MSET", "app:1", "1", "x", "2"],
                ["LPUSH", "tmp:l", "a"], ["LPUSH", "app:l", "a"], ["LMOVE", "tmp:l", "app:l", "LEFT", "LEFT"],
                ["LRANGE", "tmp:l", "0", "-1"], ["ZADD", "app:z", "1", "m"], ["PUBLISH", "news.1", "m"],
                ["PUBLISH", "sport", "m"], ["ACL", "WHOAMI"], ["CONFIG", "GET", "port"], ["FLUSHALL"],
                ["NOSUCHCMD", "x"], ["GET"], ["PING"], ["EXISTS", "x"]):
        pair.same(*cmd)
    # MULTI: refused when queued (EXEC aborts), DISCARD, and allowed ones queue
    pair.same("MULTI")
    pair.same("GET", "other")
    pair.same("GET", "app:1")
    pair.same("EXEC")
    pair.same("MULTI")
    pair.same("SET", "app:2", "v")
    pair.same("EXEC")
    pair.same("SUBSCRIBE", "news.a", "sport")
    pair.same("PSUBSCRIBE", "news.*")


def test_exec_rechecks_rules_changed_after_queueing(both):
    admin, c = Pair(both), Pair(both)
    admin.same("ACL", "SETUSER", "app", "on", "nopass", "~*", "+@all")
    c.same("AUTH", "app", "x")
    c.same("MULTI")
    c.same("GET", "k1")
    c.same("SET", "k2", "v")
    c.same("PING")
    admin.same("ACL", "SETUSER", "app", "-get", "resetkeys", "~k1")
    c.same("EXEC")
    admin.close()
    c.close()


def test_acl_log_entries_are_redis_s(both):
    admin, c = Pair(both), Pair(both)
    admin.same("ACL", "SETUSER", "app", "on", ">pw", "~app:*", "resetchannels", "&ch", "-@all", "+get", "+multi",
               "+publish", "+psubscribe")
    c.same("AUTH", "app", "wrong")
    c.same("AUTH", "nobody", "x")
    c.same("HELLO", "2", "AUTH", "app", "wrong")
    c.same("AUTH", "app", "pw")
    c.same("GET", "x")
    c.same("GET", "x")
    c.same("SET", "app:1", "v")
    c.same("PUBLISH", "other", "m")
    c.same("PSUBSCRIBE", "ch*")
    c.same("MULTI")
    c.same("GET", "y")
    admin.same("ACL", "LOG", "0")
    for proto in (2, 3):
        a, b = Raw(both[0].port, proto), Raw(both[1].port, proto)
        ours, theirs = a.call("ACL", "LOG", "20"), b.call("ACL", "LOG", "20")
        assert _log_shape(ours) == _log_shape(theirs)
        assert _log_fields(ours, proto) == _log_fields(theirs, proto)
        assert _log_fields(a.call("ACL", "LOG", "2"), proto) == _log_fields(b.call("ACL", "LOG", "2"), proto)
        a.close()
        b.close()
    admin.same("ACL", "LOG", "RESET")
    admin.same("ACL", "LOG")
    admin.same("ACL", "LOG", "x")
    admin.same("ACL", "LOG", "1", "2")
    admin.close()
    c.close()


def test_a_scripts_calls_are_checked_one_by_one(both):
    """EVAL and FCALL: each redis.call is checked against the caller's user, with Redis's
    script texts (the script's position appended), and logged with context lua and the
    caller's client-info."""
    admin, c = Pair(both), Pair(both)
    admin.same("ACL", "SETUSER", "app", "on", ">pw", "~app:*", "resetchannels", "&ch", "-@all", "+get", "+eval",
               "+evalsha", "+eval_ro", "+fcall", "+function|load", "+publish")
    admin.same("SET", "app:1", "v")
    c.same("AUTH", "app", "pw")
    c.same("EVAL", "return redis.call('get', KEYS[1])", "1", "app:1")
    c.same("EVAL", "return redis.call('get', 'other')", "0")
    c.same("EVAL", "return redis.call('set', 'app:1', 'x')", "0")
    c.same("EVAL", "return redis.call('publish', 'news', 'x')", "0")
    c.same("EVAL", "return redis.pcall('set', 'app:1', 'x')", "0")
    c.same("EVAL_RO", "return redis.call('set', 'app:1', 'x')", "0")  # (the ACL first, then read-only)
    c.same("EVAL_RO", "return redis.call('get', 'other')", "0")
    c.same("EVAL", "return redis.call('acl', 'whoami')", "0")
    for args in (("'get', 'app:1'",), ("'get', 'other'",), ("'set', 'app:1', 'v'",), ("'nosuch'",)):
        c.same("EVAL", f"return redis.acl_check_cmd({args[0]})", "0")
    c.same("FUNCTION", "LOAD", "#!lua name=acllib\n"
           "redis.register_function('peek', function(keys, args) return redis.call('get', keys[1]) end)")
    c.same("FCALL", "peek", "1", "app:1")
    c.same("FCALL", "peek", "1", "other")
    admin.same("FUNCTION", "FLUSH")
    for proto in (2, 3):
        a, b = Raw(both[0].port, proto), Raw(both[1].port, proto)
        ours, theirs = a.call("ACL", "LOG"), b.call("ACL", "LOG")
        assert _log_shape(ours) == _log_shape(theirs)
        assert _log_fields(ours, proto) == _log_fields(theirs, proto)
        a.close()
        b.close()
    admin.close()
    c.close()


def test_sort_by_and_get_patterns_need_access_to_every_key(both):
    """SORT's BY and GET patterns name keys no key spec lists: Redis 7.0 allows them only
    to a selector that allows SORT and every key (allkeys, or %R~*)."""
    admin = Pair(both)
    admin.same("ACL", "SETUSER", "u", "on", "nopass", "~app:*", "+@all")
    admin.same("ACL", "SETUSER", "v", "on", "nopass", "%R~*", "+@all")
    admin.same("ACL", "SETUSER", "w", "on", "nopass", "~app:*", "+@all", "(~* -sort)")
    admin.same("RPUSH", "app:l", "1", "2")
    admin.same("SET", "w_1", "2")
    for user in ("u", "v", "w", "default"):
        c = Pair(both)
        c.same("AUTH", user, "x")
        for cmd in (["SORT", "app:l", "BY", "w_*"], ["SORT", "app:l", "GET", "app:*"], ["SORT", "app:l", "BY", "k"],
                    ["SORT_RO", "app:l", "GET", "#"], ["SORT", "app:l", "GET", "#", "BY", "w_*", "STORE", "app:o"],
                    ["SORT", "app:l", "LIMIT", "x", "1", "GET", "#"], ["SORT", "app:l", "GET", "#", "LIMIT", "x", "1"],
                    ["SORT", "other", "GET", "#"]):
            c.same(*cmd)
        c.close()
    admin.close()


_CLIENT_FIELDS = ("flags", "db", "sub", "psub", "multi", "cmd", "user", "resp", "name")


def _log_fields(raw: bytes, proto: int):
    out = []
    for entry in _values(raw, proto):
        if isinstance(entry, dict):
            entry = [x for kv in entry.items() for x in kv]
        e = dict(zip(entry[::2], entry[1::2]))
        age = float(e.pop(b"age-seconds"))
        assert 0 <= age < 60
        info = dict(f.split(b"=", 1) for f in e.pop(b"client-info").split())
        e[b"client"] = {k: info[k.encode()] for k in _CLIENT_FIELDS}
        out.append(e)
    return out


def _log_shape(raw: bytes) -> bytes:
    """The reply's RESP structure: type markers and lengths of aggregates and fields, with
    the bulk strings of age-seconds and client-info left out."""
    return re.sub(rb"(age-seconds\r\n)[$,][^\r]*\r\n([^\r]*\r\n)?", rb"\1",
                  re.sub(rb"\$\d+\r\nid=[^\r]*\r\n", b"", raw))


# -- DRYRUN, WHOAMI, GENPASS, HELP ------------------------------------------------------------------

def test_dryrun_whoami_genpass_help(pair):
    pair.same("ACL", "SETUSER", "t1", "on", "nopass", "~k*", "%R~r*", "&c*", "-@all", "+get", "+set",
              "+publish", "+subscribe", "+config|get")
    for cmd in (["get", "k1"], ["get", "x"], ["set", "r1", "v"], ["get", "r1"], ["publish", "c1", "m"],
                ["publish", "d1", "m"], ["subscribe", "c1", "d1"], ["config", "get", "x"], ["config", "set", "x", "y"],
                ["client", "nosub"], ["client", "id"], ["get"], ["nocmd"], ["hget", "k", "f"]):
        pair.same("ACL", "DRYRUN", "t1", *cmd)
    pair.same("ACL", "DRYRUN", "nobody", "get", "x")
    pair.same("ACL", "DRYRUN", "t1")
    pair.same("ACL", "WHOAMI")
    pair.same("ACL", "GETUSER")
    pair.same("ACL", "GENPASS", "0")
    pair.same("ACL", "GENPASS", "4097")
    pair.same("ACL", "GENPASS", "x")
    pair.same("ACL", "GENPASS", "1", "2")
    for bits in (None, 1, 5, 64, 255, 4096):
        a, b = pair.both("ACL", "GENPASS", *([] if bits is None else [bits]))
        assert len(a) == len(b) and re.fullmatch(rb"\$\d+\r\n[0-9a-f]+\r\n", a)
    pair.same("ACL", "HELP")
    pair.same("ACL", "NOSUB")
    pair.same("ACL")
    pair.same("AUTH", "t1", "x")
    pair.same("ACL", "WHOAMI")


# -- AUTH, HELLO, RESET, requirepass -----------------------------------------------------------------

def test_auth_hello_reset(pair):
    pair.same("AUTH", "x")
    pair.same("AUTH", "default", "anything")
    pair.same("AUTH", "a", "b", "c")
    pair.same("ACL", "SETUSER", "alice", "on", ">pw", "+@all", "~*")
    pair.same("ACL", "SETUSER", "off", "off", ">pw", "+@all", "~*")
    pair.same("AUTH", "alice", "bad")
    pair.same("AUTH", "off", "pw")
    pair.same("AUTH", "nobody", "pw")
    pair.same("HELLO", "2", "AUTH", "alice", "bad")
    pair.same("HELLO", "2", "AUTH", "alice", "pw", "SETNAME", "bad name")
    pair.same("HELLO", "2", "AUTH", "alice", "pw", "BADOPT")
    pair.same("ACL", "WHOAMI")
    pair.same("CLIENT", "GETNAME")
    pair.same("CLIENT", "KILL", "USER", "nobody")
    pair.same("AUTH", "alice", "pw")
    pair.same("ACL", "WHOAMI")
    pair.same("RESET")
    pair.same("ACL", "WHOAMI")
    # the default user with a password: RESET leaves the connection unauthenticated
    pair.same("ACL", "SETUSER", "default", ">dpw")
    pair.same("RESET")
    pair.same("GET", "k")
    pair.same("HELLO", "2")
    pair.same("AUTH", "x")
    pair.same("AUTH", "dpw")
    pair.same("ACL", "SETUSER", "default", "nopass")


def test_config_set_requirepass_is_the_default_users_password(both):
    p = Pair(both)
    try:
        p.same("CONFIG", "SET", "requirepass", "s3cret")
        p.same("ACL", "GETUSER", "default")
        q = Pair(both)
        q.same("PING")
        q.same("AUTH", "wrong")
        q.same("AUTH", "s3cret")
        q.same("PING")
        q.close()
        p.same("CONFIG", "SET", "requirepass", "")
        p.same("ACL", "GETUSER", "default")
        p.same("CONFIG", "GET", "acllog-max-len")
        p.same("CONFIG", "GET", "acl-pubsub-default")
        p.same("CONFIG", "SET", "acl-pubsub-default", "nope")
        p.same("CONFIG", "SET", "acllog-max-len", "-1")
        p.same("CONFIG", "SET", "aclfile", "/x")
    finally:
        p.close()


def test_acl_pubsub_default_applies_to_new_users(pair):
    pair.same("CONFIG", "SET", "acl-pubsub-default", "allchannels")
    try:
        pair.same("ACL", "SETUSER", "a", "on", "(+get)")
        pair.same("ACL", "LIST")
        pair.same("ACL", "SETUSER", "a", "reset")
        pair.same("ACL", "LIST")
    finally:
        pair.same("CONFIG", "SET", "acl-pubsub-default", "resetchannels")


# -- connections of deleted and changed users ------------------------------------------------------

def test_connections_of_a_deleted_user_are_closed(both):
    admin = Pair(both)
    admin.same("ACL", "SETUSER", "gone", "on", "nopass", "+@all", "~*")
    users, others = Pair(both), Pair(both)
    users.same("AUTH", "gone", "x")
    admin.same("ACL", "DELUSER", "gone")
    assert users.m.closed() and users.r.closed()
    assert not others.m.closed(0.2) and not others.r.closed(0.2)
    others.same("PING")
    # deleting oneself: the reply comes, then the connection closes
    admin.same("ACL", "SETUSER", "self", "on", "nopass", "+@all", "~*")
    me = Pair(both)
    me.same("AUTH", "self", "x")
    me.same("ACL", "DELUSER", "self")
    assert me.m.closed() and me.r.closed()
    for p in (admin, users, others, me):
        p.close()


def test_a_changed_user_keeps_its_connections_but_loses_revoked_subscriptions(both):
    admin = Pair(both)
    admin.same("ACL", "SETUSER", "sub", "on", "nopass", "+@all", "~*", "resetchannels", "&news.*", "&sport")
    news, sport, plain = Pair(both), Pair(both), Pair(both)
    for p in (news, sport, plain):
        p.same("AUTH", "sub", "x")
    news.same("SUBSCRIBE", "news.1")
    sport.same("SUBSCRIBE", "sport")
    admin.same("ACL", "SETUSER", "sub", "resetchannels", "&news.*", "off", "-flushall")
    assert sport.m.closed() and sport.r.closed()
    assert not news.m.closed(0.2) and not news.r.closed(0.2)
    plain.same("FLUSHALL")
    plain.same("PING")
    admin.same("PUBLISH", "news.1", "hello")
    a, b = news.m.reply(), news.r.reply()
    assert a == b
    for p in (admin, news, sport, plain):
        p.close()


# -- ACL LOAD and SAVE ----------------------------------------------------------------------------

def test_acl_load_and_save(both, servers):
    mvs, red, d = servers
    p = Pair(both)
    files = {mvs.port: d / "mvs.acl", red.port: d / "redis.acl"}
    text = (b"user a on +nocmd\nuser b on foo >x\n# comment\nuser a on\nuser \"x y\" on\nusr c\n"
            b"user d (~x\n\nuser e on +get +nocat2 ~k\n")
    for f in files.values():
        f.write_bytes(text)
    a, b = p.both("ACL", "LOAD")
    assert a.replace(str(files[mvs.port]).encode(), b"F") == b.replace(str(files[red.port]).encode(), b"F")
    assert a.startswith(b"-ERR ") and b"no change to the previously active ACL rules" in a
    p.same("ACL", "USERS")
    # a valid file: its users replace the others (and the connections of users not kept go)
    p.same("ACL", "SETUSER", "old", "on", "nopass", "+@all", "~*")
    old = Pair(both)
    old.same("AUTH", "old", "x")
    for f in files.values():
        f.write_bytes(b"user alice on #5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8 ~a* "
                      b"+get\n  \nuser bob off\n")
    p.same("ACL", "LOAD")
    p.same("ACL", "LIST")
    assert old.m.closed() and old.r.closed()
    p.same("AUTH", "alice", "password")
    p.same("GET", "a1")
    p.same("ACL", "SAVE")
    assert files[mvs.port].read_bytes() == files[red.port].read_bytes()
    files[mvs.port].unlink()
    files[red.port].unlink()
    a, b = p.both("ACL", "LOAD")
    assert a.replace(str(files[mvs.port]).encode(), b"F") == b.replace(str(files[red.port]).encode(), b"F")
    for f in files.values():
        f.write_bytes(b"")
    p.close()
    old.close()


# -- redis-cli ----------------------------------------------------------------------------------------

def test_redis_cli_side_by_side(both):
    cli = shutil.which("redis-cli")
    if cli is None:
        pytest.skip("redis-cli is not installed")
    p = Pair(both)
    p.same("ACL", "SETUSER", "cli", "on", ">clipw", "~app:*", "+@read", "+@write", "-@dangerous")
    p.close()

    def run(port: int, *args: str) -> str:
        out = subprocess.run([cli, "-p", str(port), *args], capture_output=True, text=True, timeout=30)
        return out.stdout + out.stderr

    for args in (["--user", "cli", "--pass", "clipw", "--no-auth-warning", "SET", "app:1", "v"],
                 ["--user", "cli", "--pass", "clipw", "--no-auth-warning", "GET", "app:1"],
                 ["--user", "cli", "--pass", "clipw", "--no-auth-warning", "GET", "other"],
                 ["--user", "cli", "--pass", "clipw", "--no-auth-warning", "FLUSHALL"],
                 ["--user", "cli", "--pass", "bad", "--no-auth-warning", "PING"],
                 ["ACL", "DRYRUN", "cli", "GET", "other"],
                 ["ACL", "USERS"], ["ACL", "WHOAMI"], ["ACL", "GETUSER", "nobody"]):
        assert run(both[0].port, *args) == run(both[1].port, *args), args


# -- protected mode -------------------------------------------------------------------------------

class AnyAddressNode(Node):
    """A node bound to every address (it logs ``listening on 0.0.0.0:<port>``)."""

    def start(self, timeout: float = 20.0) -> "Node":
        env = dict(os.environ)
        env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.args(), cwd=str(ROOT), env=env, stdout=self._log,
                                     stderr=subprocess.STDOUT)
        wait_for(lambda: f"listening on 0.0.0.0:{self.port} " in self.log_text() or self.proc.poll() is not None,
                 timeout, "the node listens")
        assert self.proc.poll() is None, self.log_text()
        return self


def _local_address() -> str | None:
    """A non-loopback IPv4 address of this machine, if it has one."""
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    try:
        s.connect(("192.0.2.123", 9))  # (no packet is sent: this only picks the route's source)
        addr = s.getsockname()[0]
    except OSError:
        return None
    finally:
        s.close()
    return None if addr.startswith("127.") else addr


def test_protected_mode_refuses_non_loopback_clients_with_redis_s_message(tmp_path):
    addr = _local_address()
    if addr is None:
        pytest.skip("this machine has no non-loopback address (tests/unit/test_acl_ops.py checks the rule)")
    red = RedisServer(tmp_path / "redis", extra=["--save", "", "--appendonly", "no", "--bind", "0.0.0.0"])
    # (RedisServer adds --bind 127.0.0.1 first; the later --bind wins)
    mvs = AnyAddressNode(tmp_path / "data", extra=["--bind", "0.0.0.0"])
    try:
        red.start()
        mvs.start()
        replies = []
        for port in (mvs.port, red.port):
            c = Raw(port, host=addr)
            # (sending nothing: the refusal comes at once)
            data = b""
            while True:
                d = c.sock.recv(1 << 16)
                if not d:
                    break
                data += d
            c.close()
            replies.append(data)
        assert replies[0] == replies[1]
        assert replies[0].startswith(b"-DENIED Redis is running in protected mode") and replies[0].endswith(b"\r\n")
        # loopback clients are served; with a password the outside ones are too
        for port in (mvs.port, red.port):
            local = Raw(port)
            assert local.call("PING") == b"+PONG\r\n"
            assert local.call("CONFIG", "SET", "requirepass", "pw") == b"+OK\r\n"
            outside = Raw(port, host=addr)
            assert outside.call("PING") == b"-NOAUTH Authentication required.\r\n"
            assert outside.call("AUTH", "pw") == b"+OK\r\n"
            assert outside.call("CONFIG", "SET", "protected-mode", "no") == b"+OK\r\n"
            assert outside.call("CONFIG", "SET", "requirepass", "") == b"+OK\r\n"
            again = Raw(port, host=addr)
            assert again.call("PING") == b"+PONG\r\n"
            for c in (local, outside, again):
                c.close()
    finally:
        mvs.stop()
        red.stop()


def test_redis_py_acl_methods(both):
    """redis-py's own ACL methods against both servers: the parsed results agree."""
    m, r = both[0].client(), both[1].client()
    for c in (m, r):
        assert c.acl_setuser("py", enabled=True, passwords=["+pw"], keys=["k*"], commands=["+get", "+set"],
                             channels=["ch"]) is True
    gm, gr = m.acl_getuser("py"), r.acl_getuser("py")
    assert {k: v for k, v in gm.items() if k != "commands"} == {k: v for k, v in gr.items() if k != "commands"}
    assert sorted(gm["commands"]) == sorted(gr["commands"])
    assert m.acl_users() == r.acl_users() and m.acl_whoami() == r.acl_whoami()
    assert m.acl_dryrun("py", "get", "x") == r.acl_dryrun("py", "get", "x")
    assert m.acl_deluser("py") == r.acl_deluser("py") == 1
    assert len(m.acl_genpass()) == len(r.acl_genpass())
    with pytest.raises(redis.AuthenticationError):
        both[0].client(username="nobody", password="x").ping()
    m.close()
    r.close()
