"""Scripting across three real nodes: a library loaded on node 1 is callable on nodes 2 and 3
(its record replicates and every node loads it), replaced and deleted everywhere; a
script's writes reach the peers as records (effects replication: one log entry, never the
script) and the replicas converge (DEBUG DIGEST); the script cache stays on its node
(EVALSHA elsewhere answers NOSCRIPT, as Redis 7 keeps it local); FLUSHALL leaves the
functions; a restarted node loads its libraries from its store; two nodes loading
libraries with clashing function names at the same time end with the same library loaded."""

from __future__ import annotations

import pytest
import redis

from tests.cluster import Cluster, wait_for

pytestmark = pytest.mark.timeout(300)

LIB = """#!lua name=counters
redis.register_function('bump', function(keys, args)
  local n = redis.call('incrby', keys[1], args[1])
  redis.call('set', keys[2], 'last=' .. n)
  return n
end)
redis.register_function{function_name='peek', callback=function(keys) return redis.call('get', keys[1]) end,
                        flags={'no-writes'}, description='read a counter'}
"""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = Cluster(tmp_path_factory.mktemp("luacluster"), n=3)
    c.wait_streaming()
    yield c
    c.stop()


def _fcall_ok(client, name: str, *args) -> bool:
    try:
        client.fcall(name, *args)
        return True
    except redis.ResponseError:
        return False


def test_a_library_loaded_on_one_node_is_callable_on_every_node(cluster):
    c1, c2, c3 = (cluster.client(i) for i in (1, 2, 3))
    assert c1.function_load(LIB) == b"counters"
    for c in (c2, c3):
        wait_for(lambda c=c: _fcall_ok(c, "peek", 1, "nokey"), 60, "the library reaches every node")
    assert c2.fcall("bump", 2, "{u1}:n", "{u1}:last", 5) == 5
    assert c3.fcall("bump", 2, "{u1}:n", "{u1}:last", 2) in (2, 7)  # node 2's write may not be there yet
    cluster.wait_converged(timeout=60)
    for c in (c1, c2, c3):
        listed = c.function_list()
        assert [lib[1] for lib in listed] == [b"counters"]
        names = sorted(f[1] for f in listed[0][5])
        assert names == [b"bump", b"peek"]
        assert c.fcall_ro("peek", 1, "{u1}:n") == c1.get("{u1}:n")


def test_replace_and_delete_reach_every_node(cluster):
    c1, c2, c3 = (cluster.client(i) for i in (1, 2, 3))
    c1.function_load("#!lua name=rl\nredis.register_function('rlv', function() return 1 end)")
    wait_for(lambda: _fcall_ok(c3, "rlv", 0), 60, "rl reaches node 3")
    c2.function_load("#!lua name=rl\nredis.register_function('rlv', function() return 2 end)", replace=True)
    wait_for(lambda: c1.fcall("rlv", 0) == 2 and c3.fcall("rlv", 0) == 2, 60, "the replacement reaches every node")
    c3.function_delete("rl")
    for c in (c1, c2):
        wait_for(lambda c=c: not _fcall_ok(c, "rlv", 0), 60, "the delete reaches every node")
    with pytest.raises(redis.ResponseError, match="Function not found"):
        c1.fcall("rlv", 0)


def test_a_script_replicates_its_effects_and_the_cache_stays_local(cluster):
    c1, c2, c3 = (cluster.client(i) for i in (1, 2, 3))
    script = """
        local out = {}
        for i = 1, #KEYS do
          redis.call('set', KEYS[i], ARGV[1] .. ':' .. i)
          out[i] = redis.call('get', KEYS[i])
        end
        redis.call('incr', 'script:runs')
        return out
    """
    keys = [f"s:{i}" for i in range(20)]
    assert c2.eval(script, len(keys), *keys, "v") == [f"v:{i + 1}".encode() for i in range(20)]
    sha = c2.script_load(script)
    assert c2.evalsha(sha, 2, "s:a", "s:b", "w") == [b"w:1", b"w:2"]
    with pytest.raises(redis.exceptions.NoScriptError):
        c1.evalsha(sha, 1, "s:c", "x")
    assert c1.script_exists(sha) == [False] and c2.script_exists(sha) == [True]
    cluster.wait_converged(timeout=60)
    for c in (c1, c3):
        assert c.mget(keys) == [f"v:{i + 1}".encode() for i in range(20)]
        assert c.get("script:runs") == b"2"


def test_flushall_keeps_functions_and_a_restarted_node_loads_them(cluster):
    c1 = cluster.client(1)
    c1.function_load("#!lua name=keep\nredis.register_function('kept', function() return 'still here' end)")
    wait_for(lambda: _fcall_ok(cluster.client(3), "kept", 0), 60, "keep reaches node 3")
    c1.flushall()
    assert c1.fcall("kept", 0) == b"still here"
    cluster.restart_node(3)
    c3 = cluster.client(3)
    assert c3.fcall("kept", 0) == b"still here"


def test_clashing_libraries_loaded_at_once_resolve_the_same_everywhere(cluster):
    # two nodes load different libraries that both define 'clash' before either record
    # has arrived at the other: each accepts its own; once both replicate, the older load
    # keeps the function on every node and the newer library stays unloaded
    c1, c2, c3 = (cluster.client(i) for i in (1, 2, 3))
    p1 = c1.pipeline(transaction=False)
    p1.function_load("#!lua name=clash_a\nredis.register_function('clash', function() return 'a' end)")
    p2 = c2.pipeline(transaction=False)
    p2.function_load("#!lua name=clash_b\nredis.register_function('clash', function() return 'b' end)")
    results = []
    for p in (p1, p2):
        try:
            results.append(p.execute())
        except redis.ResponseError as e:  # the other library's record already arrived
            results.append(e)

    def answers():
        out = set()
        for c in (c1, c2, c3):
            try:
                out.add(c.fcall("clash", 0))
            except redis.ResponseError:
                return None
        return out

    wait_for(lambda: answers() is not None and len(answers()) == 1, 60, "every node runs the same 'clash'")
    loaded = {c.fcall("clash", 0) for c in (c1, c2, c3)}
    libs = [sorted(lib[1] for lib in c.function_list() if lib[1].startswith(b"clash")) for c in (c1, c2, c3)]
    assert libs[0] == libs[1] == libs[2] and len(libs[0]) == 1, (results, libs, loaded)
