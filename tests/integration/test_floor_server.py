"""bench/floor_server.py answers the benchmarked commands correctly in both models.

The floor bounds marekvs's benchmark ratios (bench/README.md, "The floor"); a floor that
answered wrongly, or skipped the data model's work, would bound nothing. Real process, real
RocksDB, redis-py over a socket.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import redis
from rocksdict import Options, Rdict

from marekvs.core import keys as K
from marekvs.core import pncounter
from tests.helpers import free_port, wait_port

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.parametrize("model", ["bare", "data"])
def test_floor_server_answers_and_stores(tmp_path, model):
    port, data = free_port(), str(tmp_path / "floor")
    proc = subprocess.Popen([sys.executable, os.path.join(ROOT, "bench", "floor_server.py"),
                             "--port", str(port), "--data-dir", data, "--model", model])
    try:
        wait_port(port, proc)
        r = redis.Redis(port=port, protocol=2)  # (no HELLO: the floor answers four commands)
        assert r.set("a", "1") is True
        assert r.get("a") == b"1" and r.get("missing") is None
        assert [r.execute_command("INCR", "n") for _ in range(3)] == [1, 2, 3]  # (redis-py's incr is INCRBY)
        assert r.mset({"k1": "v1", "k2": "v2"}) is True
        assert [r.get("k1"), r.get("k2")] == [b"v1", b"v2"]
        r.close()
    finally:
        proc.terminate()
        proc.wait(10)
    db = Rdict(data, Options(raw_mode=True))  # the group commits reached RocksDB
    try:
        if model == "bare":
            assert db[b"n"][19:] == b"3"
            return
        n = db[K.encode_string_key(b"n")]  # the data model: internal key, PN-counter record
        assert n[0] == pncounter.FLAGS and pncounter.value(n, 0) == b"3"
        assert db[K.encode_string_key(b"k2")][19:] == b"v2"
        assert sum(1 for k in db.keys() if k[:1] == b"\xff") >= 1  # replication-log entries
    finally:
        db.close()
