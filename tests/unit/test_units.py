"""How multi-key commands split into per-worker parts and merge back (shards/units.py)."""

from __future__ import annotations

from marekvs.shards.units import UNITS

OWNER = [0] * 2048 + [1] * 2048


def pid(key: bytes) -> int:  # keys name their partition here: b"<pid>:..."
    return int(key.split(b":")[0])


A, B, C = b"5:a", b"3000:b", b"7:c"  # workers 0, 1, 0


def test_keys_split_by_worker_in_the_order_given():
    parts, where = UNITS["mget"].split([b"MGET", A, B, C, A], OWNER, pid)
    assert parts == {0: [A, C, A], 1: [B]} and where == [0, 1, 0, 0]
    assert UNITS["mget"].part(0, parts[0]) == [b"MGET", A, C, A]
    assert UNITS["mget"].merge({0: [b"va", b"vc", b"va"], 1: [None]}, where) == [b"va", None, b"vc", b"va"]


def test_pairs_and_counts():
    parts, where = UNITS["mset"].split([b"MSET", A, b"1", B, b"2", C, b"3"], OWNER, pid)
    assert parts == {0: [A, b"1", C, b"3"], 1: [B, b"2"]}
    assert UNITS["mset"].part(0, parts[1]) == [b"MSET", B, b"2"]
    assert UNITS["mset"].split([b"MSET", A, b"1", B], OWNER, pid) is None  # its arity error, run whole
    assert UNITS["mset"].split([b"MSET"], OWNER, pid) is None
    for name in ("del", "unlink", "exists", "touch"):
        parts, where = UNITS[name].split([name.encode(), A, B, A], OWNER, pid)
        assert parts == {0: [A, A], 1: [B]}
        assert UNITS[name].merge({0: 2, 1: 0}, where) == 2


def test_msetnx_checks_every_worker_then_sets():
    u = UNITS["msetnx"]
    parts, _ = u.split([b"MSETNX", A, b"1", B, b"2"], OWNER, pid)
    assert u.phases == 2
    assert u.part(0, parts[0]) == [b"EXISTS", A] and u.part(1, parts[0]) == [b"MSET", A, b"1"]
    assert u.go_on(0, {0: 0, 1: 1}) == 0  # a key exists: 0, nothing written
    assert u.go_on(0, {0: 0, 1: 0}) is None and u.merge({0: b"OK", 1: b"OK"}, []) == 1
