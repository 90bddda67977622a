import shutil

import pytest

from tests.helpers import Node, RedisServer


@pytest.fixture
def node_factory(tmp_path):
    """Start marekvs nodes: ``node_factory(durability="always", extra=[...])``."""
    nodes = []

    def make(**kw):
        n = Node(tmp_path / f"data{len(nodes) + 1}", **kw)
        nodes.append(n)
        return n.start()

    yield make
    for n in nodes:
        n.stop()


@pytest.fixture
def node(node_factory):
    return node_factory()


@pytest.fixture(scope="module")
def shared_node(tmp_path_factory):
    """One node for a whole test module (flushed by the tests that need it)."""
    n = Node(tmp_path_factory.mktemp("shared") / "data").start()
    yield n
    n.stop()


@pytest.fixture(scope="module")
def shard_nodes(tmp_path_factory):
    """A node of two shard workers and a single process beside it, per module (the shard
    tests compare the two, and redis-server)."""
    sharded = Node(tmp_path_factory.mktemp("shards2") / "data", extra=["--shards", "2"]).start()
    try:
        single = Node(tmp_path_factory.mktemp("shards1") / "data", extra=["--shards", "1"]).start()
    except BaseException:
        sharded.stop()
        raise
    yield sharded, single
    sharded.stop()
    single.stop()


@pytest.fixture(scope="module")
def real_redis(tmp_path_factory):
    """One stock redis-server for a whole module's side-by-side checks."""
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    r = RedisServer(tmp_path_factory.mktemp("redis")).start()
    yield r
    r.stop()


@pytest.fixture
def redis_server(tmp_path):
    if not RedisServer.available():
        pytest.skip("redis-server is not installed")
    r = RedisServer(tmp_path / "redis").start()
    yield r
    r.stop()


def pytest_configure(config):
    config.addinivalue_line("markers", "needs_redis_cli: uses the redis-cli binary")


@pytest.fixture
def redis_cli():
    path = shutil.which("redis-cli")
    if path is None:
        pytest.skip("redis-cli is not installed")
    return path
