"""How multi-key commands split into per-worker parts and merge back (shards/units.py)."""

from __future__ import annotations

from marekvs.commands import errors
from marekvs.commands.reply import Err
from marekvs.shards.units import UNITS, final

OWNER = [0] * 2048 + [1] * 2048


def pid(key: bytes) -> int:  # keys name their partition here: b"<pid>:..."
    return int(key.split(b":")[0])


A, B, C = b"5:a", b"3000:b", b"7:c"  # workers 0, 1, 0


def test_keys_split_by_worker_in_the_order_given():
    parts, where = UNITS["mget"].split([b"MGET", A, B, C, A], OWNER, pid)
    assert parts == {0: [A, C, A], 1: [B]} and where == [0, 1, 0, 0]
    assert UNITS["mget"].step(0, parts, where, []) == {0: [[b"MGET", A, C, A]], 1: [[b"MGET", B]]}
    got = [{0: [[b"va", b"vc", b"va"]], 1: [[None]]}]
    assert UNITS["mget"].after(0, parts, where, got) == [b"va", None, b"vc", b"va"]


def test_pairs_and_counts():
    parts, where = UNITS["mset"].split([b"MSET", A, b"1", B, b"2", C, b"3"], OWNER, pid)
    assert parts == {0: [A, b"1", C, b"3"], 1: [B, b"2"]}
    assert UNITS["mset"].step(0, parts, where, [])[1] == [[b"MSET", B, b"2"]]
    assert UNITS["mset"].split([b"MSET", A, b"1", B], OWNER, pid) is None  # its arity error, run whole
    assert UNITS["mset"].split([b"MSET"], OWNER, pid) is None
    for name in ("del", "unlink", "exists", "touch"):
        parts, where = UNITS[name].split([name.encode(), A, B, A], OWNER, pid)
        assert parts == {0: [A, A], 1: [B]}
        assert UNITS[name].after(0, parts, where, [{0: [2], 1: [0]}]) == 2


def test_msetnx_checks_every_worker_then_sets():
    u = UNITS["msetnx"]
    parts, where = u.split([b"MSETNX", A, b"1", B, b"2"], OWNER, pid)
    assert u.phases == 2
    # (Redis looks the keys up for writing: no keyspace hit, miss or keymiss)
    assert u.step(0, parts, where, []) == {0: [[b"~mute", b"EXISTS", A]], 1: [[b"~mute", b"EXISTS", B]]}
    assert u.step(1, parts, where, []) == {0: [[b"MSET", A, b"1"]], 1: [[b"MSET", B, b"2"]]}
    assert u.after(0, parts, where, [{0: [0], 1: [1]}]) == 0  # a key exists: 0, nothing written
    assert u.after(0, parts, where, [{0: [0], 1: [0]}]) is None and u.after(1, parts, where, []) == 1


def test_a_rename_exports_then_adopts_and_deletes():
    u = UNITS["rename"]
    parts, where = u.split([b"RENAME", A, B], OWNER, pid)
    assert set(parts) == {0, 1}
    # the parts muted; the coordinator fires the command's events (Unit.events)
    assert u.step(0, parts, where, []) == {0: [[b"~mute", b"~export", A]], 1: [[b"~mute", b"EXISTS", B]]}
    exported = [b"ikey", b"record", [[b"tag", [[b"suffix", b"element"]]]]]
    got = [{0: [exported], 1: [0]}]
    assert u.after(0, parts, where, got) is None
    # the destination's records written from the source's, as one process writes them
    assert u.step(1, parts, where, got) == {1: [[b"~mute", b"~adopt", B, *exported]], 0: [[b"~mute", b"DEL", A]]}
    got.append({1: [1], 0: [1]})
    assert u.events(where, got) == [("n", b"new", B), ("g", b"rename_from", A), ("g", b"rename_to", B)]
    assert u.after(0, parts, where, [{0: [None], 1: [0]}]) == Err(errors.NO_SUCH_KEY)
    assert u.events(where, [{0: [None], 1: [0]}]) == []  # (nothing moved: no event)
    copy = UNITS["copy"]
    parts, where = copy.split([b"COPY", A, B], OWNER, pid)
    assert copy.step(0, parts, where, [])[0][0] == [b"~export", A]  # (COPY reads its source as Redis: counted)
    assert copy.events(where, [*got]) == [("n", b"new", B), ("g", b"copy_to", B)]
    assert UNITS["copy"].split([b"COPY", A, B, b"DB", b"1"], OWNER, pid) is None  # its own error, whole


def test_an_lmove_checks_types_pops_then_pushes():
    u = UNITS["lmove"]
    parts, where = u.split([b"LMOVE", A, B, b"left", b"RIGHT"], OWNER, pid)
    assert u.step(0, parts, where, []) == {0: [[b"~mute", b"TYPE", A]], 1: [[b"~mute", b"TYPE", B]]}
    assert final(u.after(0, parts, where, [{0: [b"none"], 1: [b"list"]}])) is None  # no source: nil
    assert u.after(0, parts, where, [{0: [b"list"], 1: [b"hash"]}]) == Err(errors.WRONGTYPE)
    got = [{0: [b"list"], 1: [b"none"]}]
    assert u.after(0, parts, where, got) is None
    assert u.step(1, parts, where, got) == {0: [[b"~mute", b"LPOP", A], [b"~mute", b"EXISTS", A]]}
    got.append({0: [b"x", 0]})
    assert u.step(2, parts, where, got) == {1: [[b"~mute", b"RPUSH", B, b"x"]]}
    assert u.after(2, parts, where, got) == b"x"
    got.append({1: [1]})  # Redis's order: the destination created, the push, the pop, the source emptied
    assert u.events(where, got) == [("n", b"new", B), ("l", b"rpush", B), ("l", b"lpop", A), ("g", b"del", A)]
