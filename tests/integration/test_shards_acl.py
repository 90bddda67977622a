"""ACL users and function libraries on a ``--shards 2`` node (docs/shards.md §4,
server/noderecords.py; issue 33): real processes, redis-py connections landing on each
worker (``client_on``), replies compared with a single process started alike.

The node starts with ``requirepass`` and an ``aclfile``; a user changed or deleted through
one worker is so on the other before the reply (AUTH there at once; a deleted user's
connection on the other worker is closed), ACL LOG merges both workers' entries, ACL
SAVE/LOAD go through the file, CONFIG SET requirepass reaches both; a library loaded
through one worker is called through the other with keys on either; a restart keeps both.
"""

from __future__ import annotations

import time

import pytest
import redis

from tests.helpers import Node, client_of
from tests.integration.test_shards import children, client_on, keys_on, wait_until

PW = "secret"
OK = (True, b"OK")  # (redis-py answers some commands' OK as True)
LIB = """#!lua name=lib1
redis.register_function('setget', function(keys, args)
  redis.call('SET', keys[1], args[1])
  return redis.call('GET', keys[1])
end)
redis.register_function{function_name='ro', callback=function(keys, args) return redis.call('GET', keys[1]) end,
  flags={'no-writes'}}
redis.register_function('nokeys', function(keys, args) return #args end)
"""
ACLFILE = "user alice on >alicepw ~a* +@all\nuser default on nopass ~* &* +@all\n"


def _args(data, aclfile, shards: int) -> Node:
    extra = ["--requirepass", PW, "--aclfile", str(aclfile)]
    if shards > 1:
        extra += ["--shards", str(shards)]
    return Node(data, durability="no", extra=extra)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("shards_acl")
    (d / "users.acl").write_text(ACLFILE)
    (d / "one.acl").write_text(ACLFILE)
    return d


@pytest.fixture(scope="module")
def node(files):
    n = _args(files / "data", files / "users.acl", 2).start()
    wait_until(lambda: len(children(n.pid)) == 2, "the workers")
    yield n
    n.stop()


@pytest.fixture(scope="module")
def one(files):
    n = _args(files / "one", files / "one.acl", 1).start()
    yield n
    n.stop()


def on(node: Node, worker: int, **kw) -> redis.Redis:
    kw.setdefault("password", PW)
    return client_on(node.port, worker, **kw)


def test_requirepass_and_aclfile_at_start_on_both_workers(node, one):
    single = client_of(one.port, password=PW)
    for w in (0, 1):
        c = on(node, w)
        assert c.execute_command("ACL", "WHOAMI") == b"default"
        assert c.execute_command("ACL", "LIST") == single.execute_command("ACL", "LIST")
        assert c.execute_command("ACL", "GETUSER", "alice") == single.execute_command("ACL", "GETUSER", "alice")
        c.execute_command("RESET")  # back to the default user, not authenticated
        with pytest.raises(redis.AuthenticationError):
            c.ping()
        with pytest.raises(redis.AuthenticationError):
            c.execute_command("AUTH", "wrong")
        assert c.execute_command("AUTH", "alice", "alicepw") in OK
        assert c.execute_command("ACL", "WHOAMI") == b"alice"
        with pytest.raises(redis.exceptions.NoPermissionError):
            c.set("bkey", "v")
        assert c.execute_command("HELLO", "3", "AUTH", "default", PW)[b"proto"] == 3
        assert c.execute_command("ACL", "WHOAMI") == b"default"


@pytest.mark.parametrize("there", [0, 1])
def test_setuser_on_one_worker_auth_on_the_other(node, there):
    here = 1 - there
    a, b = on(node, here), on(node, there)
    name = f"bob{here}"
    assert a.execute_command("ACL", "SETUSER", name, "on", ">bobpw", "~b*", "+get", "+set") in OK
    assert b.execute_command("AUTH", name, "bobpw") in OK  # at once: the reply waited for both workers
    k = keys_on(here, 1, "b")[0]
    assert b.set(k, "1") and b.get(k) == b"1"
    with pytest.raises(redis.exceptions.NoPermissionError):
        b.incr(k)
    assert on(node, there).execute_command("ACL", "DRYRUN", name, "get", "bx") in OK
    a.execute_command("ACL", "SETUSER", name, "+incrby")
    assert b.incr(k) == 2  # the changed rules, on the other worker, for a connection already authenticated
    users = a.execute_command("ACL", "USERS")
    assert name.encode() in users and users == on(node, there).execute_command("ACL", "USERS")
    assert a.execute_command("ACL", "GETUSER", name) == on(node, there).execute_command("ACL", "GETUSER", name)


@pytest.mark.parametrize("there", [0, 1])
def test_deluser_closes_the_users_connections_on_the_other_worker(node, there):
    here = 1 - there
    a = on(node, here)
    name = f"carol{here}"
    a.execute_command("ACL", "SETUSER", name, "on", ">cpw", "~*", "+@all")
    victim = client_on(node.port, there, username=name, password="cpw")
    assert victim.execute_command("ACL", "WHOAMI") == name.encode()
    assert a.execute_command("ACL", "DELUSER", name) == 1
    with pytest.raises(redis.ConnectionError):
        victim.ping()
    with pytest.raises(redis.AuthenticationError):
        on(node, there).execute_command("AUTH", name, "cpw")
    assert a.execute_command("ACL", "DELUSER", name) == 0


def test_acl_log_merged_from_both_workers(node):
    a, b = on(node, 0), on(node, 1)
    a.execute_command("ACL", "LOG", "RESET")
    for c, who in ((a, "nobody0"), (b, "nobody1"), (a, "nobody2")):
        with pytest.raises(redis.AuthenticationError):
            c.execute_command("AUTH", who, "x")
        time.sleep(0.25)  # (entries apart in time: each worker reports an entry's age as of its answer)
    for c in (a, b):
        log = c.execute_command("ACL", "LOG")
        assert [e[b"username"] for e in _maps(log)] == \
            [b"nobody2", b"nobody1", b"nobody0"]
        assert [e[b"username"] for e in _maps(c.execute_command("ACL", "LOG", "1"))] == [b"nobody2"]
    assert b.execute_command("ACL", "LOG", "RESET") in OK
    assert a.execute_command("ACL", "LOG") == [] == b.execute_command("ACL", "LOG")


def _maps(log):
    out = []
    for e in log:
        out.append(e if isinstance(e, dict) else dict(zip(e[::2], e[1::2])))
    return out


def test_acl_save_and_load(node, files):
    a, b = on(node, 0), on(node, 1)
    a.execute_command("ACL", "SETUSER", "dave", "on", ">davepw", "~*", "+@all")
    assert b.execute_command("ACL", "SAVE") in OK
    text = (files / "users.acl").read_text()
    assert "user dave on" in text and "user alice on" in text
    alice = client_on(node.port, 1, username="alice", password="alicepw")
    (files / "users.acl").write_text(text.replace("user dave", "user erin"))
    assert a.execute_command("ACL", "LOAD") in OK
    with pytest.raises(redis.ConnectionError):  # ACL LOAD closes every user's connections but default's
        alice.ping()
    for w in (0, 1):
        c = on(node, w)
        assert c.execute_command("AUTH", "erin", "davepw") in OK
        with pytest.raises(redis.AuthenticationError):
            c.execute_command("AUTH", "dave", "davepw")
    (files / "users.acl").write_text(text)
    assert b.execute_command("ACL", "LOAD") in OK
    assert on(node, 0).execute_command("AUTH", "dave", "davepw") in OK


def test_config_set_requirepass_reaches_both_workers(node):
    b = on(node, 1)
    try:
        assert b.config_set("requirepass", "other") is True
        c = client_on(node.port, 0, password="other")
        assert c.execute_command("ACL", "WHOAMI") == b"default"
        with pytest.raises(redis.AuthenticationError):
            c.execute_command("AUTH", PW)
    finally:
        b.config_set("requirepass", PW)
    assert on(node, 0).ping()


def test_a_change_through_one_worker_after_another_s_wins(node):
    """Each worker stamps node-level records with its own clock: a FUNCTION RESTORE through
    worker 1 right after a FLUSH through worker 0 must win everywhere, even within one
    millisecond (a worker observes the clocks of the records its siblings send)."""
    a, b = on(node, 0), on(node, 1)
    a.execute_command("FUNCTION", "FLUSH")
    assert a.execute_command("FUNCTION", "LOAD", LIB) == b"lib1"
    dump = a.execute_command("FUNCTION", "DUMP")
    for i in range(60):
        for c in (a, a, a):  # (a's clock's logical part ahead of b's)
            assert c.execute_command("FUNCTION", "FLUSH") in OK
        assert b.execute_command("FUNCTION", "RESTORE", dump) in OK
        assert a.fcall("nokeys", 0, "x") == 1, i
        assert b.fcall("nokeys", 0, "x") == 1, i


def test_functions_loaded_on_every_worker(node, one):
    single = client_of(one.port, password=PW)
    a, b = on(node, 0), on(node, 1)
    for c in (a, single):
        c.execute_command("FUNCTION", "FLUSH")
        assert c.execute_command("FUNCTION", "LOAD", LIB) == b"lib1"
        with pytest.raises(redis.ResponseError, match="already exists"):
            c.execute_command("FUNCTION", "LOAD", LIB)
        assert c.execute_command("FUNCTION", "LOAD", "REPLACE", LIB) == b"lib1"
    assert a.execute_command("FUNCTION", "LIST") == b.execute_command("FUNCTION", "LIST") == \
        single.execute_command("FUNCTION", "LIST", "WITHCODE")[:0] + single.execute_command("FUNCTION", "LIST")
    for w in (0, 1):  # keys on either worker, from a connection of the other and its own
        k = keys_on(w, 1, "fk")[0]
        for c in (a, b):
            assert c.fcall("setget", 1, k, f"v{w}") == single.fcall("setget", 1, k, f"v{w}") == f"v{w}".encode()
            assert c.fcall_ro("ro", 1, k) == f"v{w}".encode()
            with pytest.raises(redis.ResponseError, match="Can not execute a script with write flag"):
                c.fcall_ro("setget", 1, k, "x")
    assert b.fcall("nokeys", 0, "x", "y") == 2
    both = (keys_on(0, 1, "fk")[0], keys_on(1, 1, "fk")[0])  # keys on both workers: both locked
    assert b.fcall("setget", 2, *both, "v") == single.fcall("setget", 2, *both, "v") == b"v"
    stats = b.execute_command("FUNCTION", "STATS")
    assert stats == single.execute_command("FUNCTION", "STATS")
    dump = b.execute_command("FUNCTION", "DUMP")
    assert dump == single.execute_command("FUNCTION", "DUMP")
    assert a.execute_command("FUNCTION", "FLUSH") in OK
    assert b.execute_command("FUNCTION", "LIST") == []
    with pytest.raises(redis.ResponseError, match="Function not found"):
        b.fcall("nokeys", 0)
    assert b.execute_command("FUNCTION", "RESTORE", dump) in OK
    assert a.fcall("nokeys", 0, "x") == 1
    assert a.execute_command("FUNCTION", "DELETE", "lib1") in OK
    with pytest.raises(redis.ResponseError, match="Library not found"):
        b.execute_command("FUNCTION", "DELETE", "lib1")
    assert b.execute_command("FUNCTION", "LOAD", LIB) == b"lib1"


def test_a_users_scripts_run_as_the_user_on_the_worker_of_their_keys(node, one):
    """A command carried to another worker runs there as the client's user: a script's or
    a function's calls are checked against the same rules as on one process (it ran as
    the default user there, and could write where its user may not)."""
    rules = ["reset", "on", ">dpw", "~*", "+eval", "+evalsha", "+fcall", "+get", "+function", "+client|id"]
    single = client_of(one.port, password=PW)
    single.execute_command("ACL", "SETUSER", "dana", *rules)
    on(node, 0).execute_command("ACL", "SETUSER", "dana", *rules)
    for c in (on(node, 0), single):
        c.execute_command("FUNCTION", "LOAD", "REPLACE", LIB)
    one_dana = client_of(one.port, username="dana", password="dpw")
    script = "return redis.call('SET', KEYS[1], 'x')"
    for w in (0, 1):
        dana = client_on(node.port, w, username="dana", password="dpw")
        for kw in (0, 1):
            k = keys_on(kw, 1, "dk")[0]
            with pytest.raises(redis.ResponseError) as here:
                dana.eval(script, 1, k)
            with pytest.raises(redis.ResponseError) as there:
                one_dana.eval(script, 1, k)
            assert str(here.value) == str(there.value) and "can't run this command" in str(here.value)
            with pytest.raises(redis.ResponseError) as here:
                dana.fcall("setget", 1, k, "v")
            with pytest.raises(redis.ResponseError) as there:
                one_dana.fcall("setget", 1, k, "v")
            assert str(here.value) == str(there.value)
            assert dana.eval("return redis.call('GET', KEYS[1])", 1, k) is None  # what it may do, it does
            assert dana.get(k) is None  # nothing was written
    on(node, 0).execute_command("ACL", "DELUSER", "dana")


def test_a_restart_keeps_users_and_functions(node):
    a = on(node, 0)
    a.execute_command("ACL", "SETUSER", "frank", "on", ">fpw", "~*", "+@all")
    a.execute_command("FUNCTION", "LOAD", "REPLACE", LIB)
    node.stop()
    node.start()
    wait_until(lambda: len(children(node.pid)) == 2, "the workers")
    for w in (0, 1):
        c = client_on(node.port, w, username="frank", password="fpw")
        assert c.fcall("nokeys", 0, "x", "y", "z") == 3
        assert c.fcall("setget", 1, keys_on(1 - w, 1, "r")[0], "v") == b"v"
        users = c.execute_command("ACL", "USERS")
        assert {b"alice", b"default", b"frank", b"dave"} <= set(users)
