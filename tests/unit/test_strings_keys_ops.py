"""In-process tests of the string and generic keyspace families (strings.py, keys.py).

Commands run in-process through a real node's ``dispatch`` (engine in a temporary
directory, one client context, no listener), exactly as a RESP connection runs them. The
last section is differential: fixed command sequences go to a real ``redis-server``
7.0 and to the handlers, and the encoded RESP replies are compared byte for byte.
"""

from __future__ import annotations

import asyncio
import shutil
import socket
import subprocess
import tempfile
import time

import pytest

from marekvs.commands import args as A
from marekvs.commands import errors, keys, strings
from marekvs.commands.table import CommandTable
from marekvs.config import Config
from marekvs.core import envelope as env
from marekvs.core import head as H
from marekvs.core import keys as K
from marekvs.core import orswot, pncounter
from marekvs.core.envelope import RecordType
from marekvs.core.partition import PARTITIONS
from marekvs.keyspace import Keyspace
from marekvs.keyspace import strings as kstr
from marekvs.keyspace.status import WrongType
from marekvs.node import Node as RealNode
from marekvs.server import resp
from tests.helpers import free_port


# the string and generic families alone (the declarations this module checks)
TABLE = CommandTable()
TABLE.register_module(strings)
TABLE.register_module(keys)


class Error(str):
    """An error reply, kept apart from bulk replies in comparisons."""


class Node:
    """A real node (engine, keyspace, command table, ``dispatch``) in-process, with one
    client context and no listener: commands run as a RESP connection runs them."""

    def __init__(self, path: str, config: dict[str, str] | None = None):
        self.node = RealNode(Config(data_dir=path, node_id=1, durability="no"))
        for name, value in (config or {}).items():
            self.node.set_tunable(name, value)
        self.engine = self.node.engine
        self.ks = self.node.ks
        self.c = self.node.new_context()

    def __call__(self, *argv):
        args = [a if isinstance(a, bytes) else str(a).encode() for a in argv]
        r = self.node.dispatch(self.c, args)
        return Error(r) if isinstance(r, resp.Err) else r

    def encoded(self, *argv) -> bytes:
        r = self(*argv)
        if isinstance(r, Error):
            return resp.encode(resp.Err(r), self.c.proto)
        return resp.encode(r, self.c.proto)

    def record(self, key: bytes) -> bytes | None:
        return self.engine.get(K.encode_string_key(key))

    def close(self) -> None:
        self.node.close()


@pytest.fixture
def r(tmp_path):
    node = Node(str(tmp_path / "db"))
    yield node
    node.close()


@pytest.fixture
def clock(r, monkeypatch):
    """Freeze the command clock (the keyspace's ``now``) at a settable wall-clock ms."""
    state = {"now": r.ks.now()}
    monkeypatch.setattr(r.ks, "now", lambda: state["now"])
    return state


def put_head(node: Node, key: bytes, ctype: int = H.CollectionType.HASH, ttl: int = 0) -> None:
    """A live collection head: enough to make ``key`` a non-string. A hash or a set
    also gets one member (an empty one does not exist, as in Redis:
    ``Keyspace.head_present``)."""
    rec = H.new(ctype, node.ks.stamp(), node.ks.node_id)
    if ttl:
        rec = env.with_ttl(rec, node.ks.stamp(), node.ks.node_id, ttl)
    hk = K.encode_head_key(key)
    recs = [(hk, rec)]
    if ctype in (H.CollectionType.HASH, H.CollectionType.SET):
        tag = K.TAG_HASH if ctype == H.CollectionType.HASH else K.TAG_SET
        recs.append((K.collection_prefix(tag, key) + b"m", orswot.new(ctype, node.ks.stamp(), node.ks.node_id)))
    node.ks.apply(recs)


def put_string(node: Node, key: bytes, value: bytes, ttl: int = 0, hlc: int | None = None) -> None:
    """A raw plain string record (lets a test store a deadline in the past)."""
    rec = env.pack(env.make_flags(RecordType.STRING), hlc or node.ks.stamp(), 1, ttl, value)
    node.ks.apply([(K.encode_string_key(key), rec)])


WRONGTYPE = Error(errors.WRONGTYPE)
SYNTAX = Error(errors.SYNTAX)
NOT_INT = Error(errors.NOT_INTEGER)
NOT_FLOAT = Error(errors.NOT_FLOAT)


# =========================================================================================
# SET family
# =========================================================================================

def test_set_get_and_overwrite(r):
    assert r("SET", "k", "v") == b"OK"
    assert r("GET", "k") == b"v"
    assert r("set", "k", "w") is resp.OK
    assert r("GET", "k") == b"w"
    assert r("GET", "missing") is None


def test_set_nx_xx(r):
    assert r("SET", "k", "1", "XX") is None
    assert r("EXISTS", "k") == 0
    assert r("SET", "k", "1", "NX") == b"OK"
    assert r("SET", "k", "2", "NX") is None
    assert r("GET", "k") == b"1"
    assert r("SET", "k", "3", "xx") == b"OK"
    assert r("GET", "k") == b"3"


def test_set_get_option_returns_old_value(r):
    assert r("SET", "k", "v1", "GET") is None
    assert r("SET", "k", "v2", "GET") == b"v1"
    assert r("SET", "k", "v3", "GET", "GET") == b"v2"  # repeating GET is accepted
    # NX + GET: the old value comes back and nothing is written
    assert r("SET", "k", "v4", "NX", "GET") == b"v3"
    assert r("GET", "k") == b"v3"
    assert r("SET", "n", "v", "NX", "GET") is None
    assert r("GET", "n") == b"v"
    assert r("SET", "x", "v", "XX", "GET") is None
    assert r("EXISTS", "x") == 0


@pytest.mark.parametrize("opts", [
    ["NX", "XX"], ["XX", "NX"], ["EX", "10", "PX", "10"], ["PX", "1", "EX", "1"],
    ["EXAT", "1", "PXAT", "1"], ["KEEPTTL", "EX", "10"], ["EX", "10", "KEEPTTL"],
    ["FOO"], ["EX"], ["PX"], ["PERSIST"], ["GET", "EX"], ["KEEPTTL", "PXAT", "1"],
])
def test_set_syntax_errors(r, opts):
    assert r("SET", "k", "v", *opts) == SYNTAX
    assert r("EXISTS", "k") == 0


@pytest.mark.parametrize("opts", [
    ["EX", "0"], ["EX", "-1"], ["PX", "0"], ["EXAT", "0"], ["PXAT", "-5"],
    ["PX", "9223372036854775807"], ["EX", "9223372036854775807"],
    ["EXAT", "9223372036854776"], ["EX", "9223372036854776"],
])
def test_set_invalid_expire(r, opts):
    assert r("SET", "k", "v", *opts) == Error("ERR invalid expire time in 'set' command")


def test_set_expire_not_an_integer(r):
    assert r("SET", "k", "v", "EX", "1.5") == NOT_INT
    assert r("SET", "k", "v", "PX", "abc") == NOT_INT


def test_set_expire_forms(r, clock):
    now = clock["now"]
    r("SET", "a", "v", "EX", "10")
    r("SET", "b", "v", "PX", "1500")
    r("SET", "c", "v", "EXAT", str(now // 1000 + 100))
    r("SET", "d", "v", "PXAT", str(now + 7000))
    r("SET", "e", "v", "EX", "5", "EX", "7")  # last one wins
    assert r("PTTL", "a") == 10_000
    assert r("PTTL", "b") == 1500
    assert r("PEXPIRETIME", "c") == (now // 1000 + 100) * 1000
    assert r("PTTL", "d") == 7000
    assert r("TTL", "e") == 7


def test_set_drops_ttl_keepttl_keeps_it(r, clock):
    r("SET", "k", "v", "EX", "100")
    r("SET", "k", "v2", "KEEPTTL")
    assert r("TTL", "k") == 100
    r("SET", "k", "v3")
    assert r("TTL", "k") == -1
    r("SET", "k", "v4", "KEEPTTL")  # no TTL to keep
    assert r("TTL", "k") == -1


def test_set_deadline_in_the_past_stores_an_expired_record(r):
    r("SET", "k", "old")
    assert r("SET", "k", "v", "PXAT", "1") == b"OK"
    assert r("GET", "k") is None
    assert r("EXISTS", "k") == 0
    rec = r.record(b"k")
    assert rec is not None and env.ttl_of(rec) == 1 and rec[19:] == b"v"
    assert r("SET", "k", "v", "EXAT", "1", "GET") is None  # the expired value reads as nil


def test_set_over_a_collection(r):
    put_head(r, b"h")
    assert r("SET", "h", "v", "GET") == WRONGTYPE
    assert r("SET", "h", "v", "NX") is None  # the collection counts as existing
    assert r("SET", "h", "v") == b"OK"
    assert r("GET", "h") == b"v"
    assert r("TYPE", "h") == b"string"


def test_set_keepttl_over_collection_keeps_its_ttl(r, clock):
    put_head(r, b"h", ttl=clock["now"] + 50_000)
    r("SET", "h", "v", "KEEPTTL")
    assert r("PTTL", "h") == 50_000


def test_setnx_setex_psetex(r, clock):
    assert r("SETNX", "k", "a") == 1
    assert r("SETNX", "k", "b") == 0
    assert r("GET", "k") == b"a"
    assert r("SETEX", "k", "10", "x") == b"OK"
    assert r("PTTL", "k") == 10_000
    assert r("PSETEX", "k", "1234", "y") == b"OK"
    assert r("PTTL", "k") == 1234
    assert r("GET", "k") == b"y"
    assert r("SETEX", "k", "0", "v") == Error("ERR invalid expire time in 'setex' command")
    assert r("PSETEX", "k", "-5", "v") == Error("ERR invalid expire time in 'psetex' command")
    assert r("SETEX", "k", "abc", "v") == NOT_INT
    assert r("SETEX", "k", "10") == Error(errors.wrong_arity("setex"))


# =========================================================================================
# GET family
# =========================================================================================

def test_read_string_cases(r, clock):
    """keyspace.strings.read (GET's flat path) against the general lookup, case by case."""
    ks, now = r.ks, clock["now"]
    assert kstr.read(ks, b"nope") is None
    r("SET", "s", "v")
    assert kstr.read(ks, b"s") == b"v"
    r("INCRBY", "n", "-7")
    assert kstr.read(ks, b"n") == b"-7"
    r("SET", "t", "v", "PX", "100")
    assert kstr.read(ks, b"t") == b"v"
    clock["now"] = now + 100  # at the deadline: gone
    assert kstr.read(ks, b"t") is None
    assert kstr.read(ks, b"t", now) == b"v"  # a caller's own clock reading wins
    put_head(r, b"h")
    with pytest.raises(WrongType):
        kstr.read(ks, b"h")
    r("SET", "h2", "v", "PX", "50")  # a dead string over a live head: WRONGTYPE
    put_head(r, b"h2")
    clock["now"] += 50
    with pytest.raises(WrongType):
        kstr.read(ks, b"h2")
    for key in (b"s", b"n", b"t", b"nope", b"h", b"h2"):  # the same as string_record
        try:
            rec = kstr.record(ks, key, clock["now"])
            expected = None if rec is None else kstr.string_value(rec)
        except WrongType as e:
            expected = e
        try:
            got = kstr.read(ks, key)
        except WrongType as e:
            got = e
        assert type(got) is type(expected) and (got == expected or isinstance(got, WrongType))


def test_read_string_reads_the_clock_only_when_needed(r, monkeypatch):
    r("SET", "s", "v")
    r("SET", "t", "v", "EX", "100")
    calls = []
    real = r.ks.now
    monkeypatch.setattr(r.ks, "now", lambda: calls.append(1) or real())
    assert r("GET", "s") == b"v" and calls == []  # no deadline, no partition with heads
    assert r("GET", "t") == b"v" and calls == [1]
    assert r("SET", "u", "w") == b"OK" and calls == [1]


def test_getex_options(r, clock):
    now = clock["now"]
    r("SET", "k", "v")
    assert r("GETEX", "k") == b"v"
    assert r("TTL", "k") == -1
    assert r("GETEX", "k", "EX", "100") == b"v"
    assert r("TTL", "k") == 100
    assert r("GETEX", "k", "PX", "2500") == b"v"
    assert r("PTTL", "k") == 2500
    assert r("GETEX", "k", "EXAT", str(now // 1000 + 50)) == b"v"
    assert r("EXPIRETIME", "k") == now // 1000 + 50
    assert r("GETEX", "k", "PXAT", str(now + 999)) == b"v"
    assert r("PTTL", "k") == 999
    assert r("GETEX", "k", "PERSIST") == b"v"
    assert r("TTL", "k") == -1
    assert r("GETEX", "k", "PERSIST") == b"v"


def test_getex_past_deadline_deletes(r):
    r("SET", "k", "v")
    assert r("GETEX", "k", "PXAT", "1") == b"v"
    assert r("EXISTS", "k") == 0


@pytest.mark.parametrize("opts,err", [
    (["PERSIST", "EX", "10"], SYNTAX), (["EX", "10", "PERSIST"], SYNTAX),
    (["KEEPTTL"], SYNTAX), (["NX"], SYNTAX), (["GET"], SYNTAX), (["EX"], SYNTAX),
    (["EX", "0"], Error("ERR invalid expire time in 'getex' command")),
    (["PXAT", "0"], Error("ERR invalid expire time in 'getex' command")),
    (["PX", "9223372036854775807"], Error("ERR invalid expire time in 'getex' command")),
    (["EX", "abc"], NOT_INT),
])
def test_getex_errors(r, opts, err):
    r("SET", "k", "v")
    assert r("GETEX", "k", *opts) == err


def test_getex_missing_key_ignores_bad_expire_but_not_syntax(r):
    assert r("GETEX", "nokey", "EX", "0") is None  # lookup happens before validation
    assert r("GETEX", "nokey", "FOO") == SYNTAX


def test_getdel_getset(r, clock):
    r("SET", "k", "v", "EX", "100")
    assert r("GETSET", "k", "w") == b"v"
    assert r("TTL", "k") == -1  # GETSET drops the TTL
    assert r("GETSET", "new", "x") is None
    assert r("GETDEL", "k") == b"w"
    assert r("GETDEL", "k") is None
    assert r("EXISTS", "k") == 0


def test_mget_mset_msetnx(r):
    assert r("MSET", "a", "1", "b", "2", "a", "3") == b"OK"
    put_head(r, b"h")
    assert r("MGET", "a", "b", "nokey", "h") == [b"3", b"2", None, None]
    assert r("MSET", "a") == Error(errors.wrong_arity("mset"))
    assert r("MSET", "a", "1", "b") == Error("ERR wrong number of arguments for 'mset' command")
    assert r("MSETNX", "a", "1", "b") == Error(errors.wrong_arity("msetnx"))
    assert r("MSETNX", "x", "1", "a", "9") == 0
    assert r("EXISTS", "x") == 0
    assert r("MSETNX", "x", "1", "h", "9") == 0  # a collection counts as existing
    assert r("MSETNX", "x", "1", "y", "2") == 1
    assert r("MGET", "x", "y") == [b"1", b"2"]


def test_mset_keys_land_in_their_partitions(r):
    """MSET computes partition ids inline: hash tags must follow the Redis rule there too."""
    keys = [b"{user1}.a", b"x{user1}y", b"{}b", b"a{}{b}", b"{", b"plain", b"{user1"]
    r("MSET", *[x for k in keys for x in (k, b"v-" + k)])
    for k in keys:
        assert r.engine.get(K.encode_string_key(k))[19:] == b"v-" + k  # the spec's ikey
        assert r("GET", k) == b"v-" + k


def test_multi_key_writes_are_one_apply(r):
    """A command's records go through ONE engine.apply (one replication-log unit)."""
    calls = []
    real_apply = r.engine.apply

    def counting(records, *a, **kw):
        calls.append(len(records))
        return real_apply(records, *a, **kw)

    r.engine.apply = counting
    r.ks.apply = counting
    put_head(r, b"h")
    calls.clear()
    r("MSET", "a", "1", "b", "2", "h", "3")  # 3 strings + the head's tombstone
    assert calls == [4]
    r("DEL", "a", "b", "c", "a")
    assert calls[1:] == [2]
    r("RENAME", "h", "z")
    assert calls[2:] == [2]
    r("COPY", "z", "y")
    r("INCR", "n")
    r("DEL", "nokey")  # nothing to write
    r("EXPIRE", "nokey", "10")
    assert calls[3:] == [1, 1]


def test_wrongtype_from_string_commands(r):
    put_head(r, b"h")
    for cmd in (["GET", "h"], ["GETEX", "h"], ["GETDEL", "h"], ["GETSET", "h", "v"],
                ["APPEND", "h", "x"], ["STRLEN", "h"], ["GETRANGE", "h", "0", "1"],
                ["SETRANGE", "h", "0", "x"], ["INCR", "h"], ["DECRBY", "h", "2"],
                ["INCRBYFLOAT", "h", "1.5"]):
        assert r(*cmd) == WRONGTYPE, cmd
    assert r("LCS", "h", "x") == Error(errors.LCS_NOT_STRINGS)
    assert r("LCS", "x", "h", "BOGUS") == Error(errors.LCS_NOT_STRINGS)


# =========================================================================================
# APPEND, STRLEN, GETRANGE, SETRANGE
# =========================================================================================

def test_append_strlen(r, clock):
    assert r("APPEND", "k", "ab") == 2
    assert r("APPEND", "k", "cd") == 4
    assert r("GET", "k") == b"abcd"
    assert r("STRLEN", "k") == 4
    assert r("STRLEN", "nokey") == 0
    r("EXPIRE", "k", "100")
    r("APPEND", "k", "e")
    assert r("TTL", "k") == 100  # APPEND keeps the TTL


def test_append_limit(tmp_path):
    node = Node(str(tmp_path / "db"), config={"proto-max-bulk-len": "10"})
    try:
        node("SET", "k", "12345")
        assert node("APPEND", "k", "67890") == 10
        assert node("APPEND", "k", "x") == Error(errors.STRING_TOO_LONG)
        assert node("SETRANGE", "k", "10", "x") == Error(errors.STRING_TOO_LONG)
        assert node("SETRANGE", "k", "9", "x") == 10
    finally:
        node.close()


@pytest.mark.parametrize("value,start,end,expected", [
    (b"hello", 0, -1, b"hello"), (b"hello", 0, -100, b"h"), (b"hello", -1, -5, b""),
    (b"hello", 5, 10, b""), (b"hello", -100, -100, b"h"), (b"hello", 1, 3, b"ell"),
    (b"hello", 0, 9223372036854775807, b"hello"), (b"hello", -3, -1, b"llo"),
    (b"hello", 3, 1, b""), (b"hello", -9223372036854775808, 2, b"hel"),
    (b"", 0, -1, b""), (b"", 0, 0, b""),
])
def test_getrange(r, value, start, end, expected):
    r("SET", "k", value)
    assert r("GETRANGE", "k", start, end) == expected
    assert r("SUBSTR", "k", start, end) == expected


def test_getrange_errors_and_missing(r):
    assert r("GETRANGE", "nokey", "0", "1") == b""
    assert r("GETRANGE", "nokey", "a", "1") == NOT_INT
    assert r("GETRANGE", "nokey", "0", "01") == NOT_INT


def test_setrange(r, clock):
    assert r("SETRANGE", "k", "3", "ab") == 5
    assert r("GET", "k") == b"\x00\x00\x00ab"  # zero padding
    assert r("SETRANGE", "k", "1", "XYZW") == 5
    assert r("GET", "k") == b"\x00XYZW"
    assert r("SETRANGE", "k", "0", "") == 5
    assert r("SETRANGE", "nokey", "5", "") == 0
    assert r("EXISTS", "nokey") == 0
    assert r("SETRANGE", "k", "-1", "x") == Error(errors.OFFSET_OUT_OF_RANGE)
    assert r("SETRANGE", "k", "x", "x") == NOT_INT
    assert r("SETRANGE", "k", "536870912", "x") == Error(errors.STRING_TOO_LONG)
    assert r("SETRANGE", "nokey", "536870912", "") == 0
    r("PEXPIRE", "k", "5000")
    r("SETRANGE", "k", "0", "a")
    assert r("PTTL", "k") == 5000  # SETRANGE keeps the TTL


# =========================================================================================
# Counters
# =========================================================================================

def test_incr_family_values(r):
    assert r("INCR", "k") == 1
    assert r("INCR", "k") == 2
    assert r("DECR", "k") == 1
    assert r("INCRBY", "k", "10") == 11
    assert r("DECRBY", "k", "20") == -9
    assert r("INCRBY", "k", "-1") == -10
    assert r("GET", "k") == b"-10"
    assert r("STRLEN", "k") == 3
    assert r("TYPE", "k") == b"string"


@pytest.mark.parametrize("bad", [b"+1", b" 1", b"1 ", b"01", b"-0", b"", b"1.0", b"0x1",
                                 b"9223372036854775808", b"-9223372036854775809", b"1e3",
                                 b"00", b"-", b"123456789012345678901"])
def test_incr_rejects_non_canonical_integers(r, bad):
    r("SET", "k", bad)
    assert r("INCR", "k") == NOT_INT
    assert r("INCRBY", "n", bad) == NOT_INT
    assert r("DECRBY", "n", bad) == NOT_INT
    assert r("GET", "k") == bad  # untouched


@pytest.mark.parametrize("good,value", [(b"0", 0), (b"-1", -1), (b"9223372036854775806", 9223372036854775806),
                                        (b"-9223372036854775808", -9223372036854775808)])
def test_incr_accepts_canonical_integers(r, good, value):
    r("SET", "k", good)
    assert r("INCRBY", "k", "1") == value + 1


def test_incr_overflow(r):
    r("SET", "k", "9223372036854775807")
    assert r("INCR", "k") == Error(errors.OVERFLOW)
    r("SET", "k", "-9223372036854775808")
    assert r("DECR", "k") == Error(errors.OVERFLOW)
    assert r("INCRBY", "k", "9223372036854775807") == -1
    assert r("DECRBY", "k", "-9223372036854775808") == Error(errors.DECREMENT_OVERFLOW)
    assert r("DECRBY", "nokey", "-9223372036854775808") == Error("ERR decrement would overflow")
    assert r("GET", "k") == b"-1"


def test_incr_writes_a_counter_based_on_the_set(r):
    r("SET", "k", "10")
    plain = r.record(b"k")
    r("INCR", "k")
    rec = r.record(b"k")
    assert env.rtype_of(rec) == RecordType.COUNTER
    c = pncounter.PNCounter.from_bytes(rec[19:])
    assert (c.base_hlc, c.base_origin, c.base_value) == (env.hlc_of(plain), env.origin_of(plain), 10)
    assert c.slots == {1: (1, 0)}
    assert r("GET", "k") == b"11"
    r("DECRBY", "k", "3")
    c = pncounter.PNCounter.from_bytes(r.record(b"k")[19:])
    assert c.slots == {1: (1, 3)} and c.value() == 8


def test_fresh_counter_has_zero_base(r):
    r("INCRBY", "k", "5")
    c = pncounter.PNCounter.from_bytes(r.record(b"k")[19:])
    assert (c.base_hlc, c.base_origin, c.base_value) == (0, 0, 0)


def test_counter_after_del_is_based_on_the_tombstone(r):
    r("SET", "k", "100")
    r("DEL", "k")
    tomb = r.record(b"k")
    assert r("INCR", "k") == 1
    c = pncounter.PNCounter.from_bytes(r.record(b"k")[19:])
    assert (c.base_hlc, c.base_origin, c.base_value) == (env.hlc_of(tomb), 1, 0)


def test_counter_after_expiry_is_based_on_the_deadline(r):
    now = r.ks.now()
    old_hlc = (now - 10_000) << 16
    put_string(r, b"k", b"100", ttl=now - 5_000, hlc=old_hlc)  # written, then expired
    assert r("GET", "k") is None
    assert r("INCR", "k") == 1
    c = pncounter.PNCounter.from_bytes(r.record(b"k")[19:])
    assert (c.base_hlc, c.base_origin, c.base_value) == ((now - 5_000) << 16, 1, 0)


def test_counter_on_a_record_stored_already_expired(r):
    r("SET", "k", "5", "PXAT", "1")  # deadline older than the record's own version
    assert r("INCR", "k") == 1
    assert r("GET", "k") == b"1"
    assert r("TTL", "k") == -1


def test_incr_keeps_ttl(r, clock):
    r("SET", "k", "1", "EX", "100")
    r("INCR", "k")
    assert r("TTL", "k") == 100
    r("INCRBY", "k", "5")
    assert r("TTL", "k") == 100
    assert r("GET", "k") == b"7"


def test_set_resets_a_counter(r):
    r("INCRBY", "k", "41")
    r("SET", "k", "1")
    assert env.rtype_of(r.record(b"k")) == RecordType.STRING
    assert r("GET", "k") == b"1"
    assert r("INCR", "k") == 2


@pytest.mark.parametrize("cmd,expected", [
    (["APPEND", "k", "0"], b"420"), (["SETRANGE", "k", "0", "5"], b"52"),
    (["GETSET", "k", "x"], b"x"), (["INCRBYFLOAT", "k", "0.5"], b"42.5"),
    (["SET", "k", "y"], b"y"),
])
def test_writes_freeze_a_counter(r, cmd, expected):
    r("INCRBY", "k", "42")
    r(*cmd)
    assert env.rtype_of(r.record(b"k")) == RecordType.STRING
    assert r("GET", "k") == expected


def test_counter_slot_overflow_rebases(r):
    r("SET", "k", "-9223372036854775808")
    assert r("INCRBY", "k", "9223372036854775807") == -1
    assert r("INCRBY", "k", "1") == 0  # this node's slot would reach 2**63
    rec = r.record(b"k")
    c = pncounter.PNCounter.from_bytes(rec[19:])
    assert (c.base_hlc, c.base_origin, c.base_value, c.slots) == (env.hlc_of(rec), 1, 0, {})
    assert r("INCR", "k") == 1


def test_getdel_and_getrange_of_a_counter(r):
    r("INCRBY", "k", "12345")
    assert r("GETRANGE", "k", "1", "2") == b"23"
    assert r("MGET", "k") == [b"12345"]
    assert r("GETDEL", "k") == b"12345"
    assert r("EXISTS", "k") == 0


# =========================================================================================
# INCRBYFLOAT
# =========================================================================================

@pytest.mark.parametrize("start,incr,expected", [
    (b"10.5", b"0.1", b"10.6"),
    (None, b"0.000003814697265625", b"0.00000381469726562"),  # tie rounds to even
    (None, b"0x10", b"16"), (None, b"+1.5", b"1.5"), (None, b".5", b"0.5"), (None, b"5.", b"5"),
    (None, b"-1e-20", b"0"), (None, b"3.0e-4950", b"0"), (None, b"-0", b"0"),
    (None, b"0x1p-3", b"0.125"),
    (None, b"100000000000000000000000000000000000000000000000",
     b"99999999999999999997324805280232041220908515328"),
    (b"1e3", b"1", b"1001"), (b"5", b"-5", b"0"), (b"3.0", b"1.5", b"4.5"),
    (b"-0.1", b"0", b"-0.1"), (None, b"1E2", b"100"),
])
def test_incrbyfloat_values(r, start, incr, expected):
    if start is not None:
        r("SET", "k", start)
    assert r("INCRBYFLOAT", "k", incr) == expected
    assert r("GET", "k") == expected


@pytest.mark.parametrize("start,incr,err", [
    (None, b"inf", errors.NAN_OR_INF), (None, b"infinity", errors.NAN_OR_INF),
    (None, b"-INF", errors.NAN_OR_INF), (None, b"nan", errors.NOT_FLOAT),
    (None, b" 1", errors.NOT_FLOAT), (None, b"1 ", errors.NOT_FLOAT),
    (None, b"1e-5000", errors.NOT_FLOAT), (None, b"1e5000", errors.NOT_FLOAT),
    (None, b"1e", errors.NOT_FLOAT), (None, b"", errors.NOT_FLOAT), (None, b"abc", errors.NOT_FLOAT),
    (b"v", b"1", errors.NOT_FLOAT), (b"1e3 ", b"1", errors.NOT_FLOAT),
    (b"1e4932", b"1e4932", errors.NAN_OR_INF), (b"1", b"x" * 6000, errors.NOT_FLOAT),
])
def test_incrbyfloat_errors(r, start, incr, err):
    if start is not None:
        r("SET", "k", start)
    assert r("INCRBYFLOAT", "k", incr) == Error(err)
    assert r("GET", "k") == start


def test_incrbyfloat_huge_values_print_every_digit(r):
    out = r("INCRBYFLOAT", "k", "1e400")  # 80-bit long double: exponent range 2**16383
    assert len(out) == 401 and out.startswith(b"100000000000000000002818806839475865145864534")
    assert r("INCRBYFLOAT", "k", "-1e400") == b"0"


def test_incrbyfloat_keeps_ttl_and_writes_plain_string(r, clock):
    r("SET", "k", "1", "EX", "100")
    assert r("INCRBYFLOAT", "k", "1.25") == b"2.25"
    assert r("TTL", "k") == 100
    assert env.rtype_of(r.record(b"k")) == RecordType.STRING


def test_long_double_helpers():
    assert A.format_ld(A.parse_ld(b"1.5")) == b"1.5"
    assert A.parse_ld(b"1\x00junk") is None  # strtold stops at the NUL: not all consumed
    assert A.parse_ld(b"1\x00") is None  # (redis-server 7.0.15: "value is not a valid float")
    assert A.parse_ld(b"0x") is None
    assert A.parse_ld(b"1." + b"0" * 5117) == 1  # long but valid
    assert A.parse_ld(b"1." + b"0" * 5118) is None  # MAX_LONG_DOUBLE_CHARS
    assert A.ld_round(A.parse_ld(b"0.1")) == A.parse_ld(b"0.1")
    tiny = A.parse_ld(b"4e-4951")  # a subnormal long double is accepted
    assert tiny is not None and tiny > 0


# =========================================================================================
# LCS
# =========================================================================================

def test_lcs_forms(r):
    r("MSET", "key1", "ohmytext", "key2", "mynewtext")
    assert r("LCS", "key1", "key2") == b"mytext"
    assert r("LCS", "key1", "key2", "LEN") == 6
    assert r("LCS", "key1", "key2", "IDX") == [
        b"matches", [[[4, 7], [5, 8]], [[2, 3], [0, 1]]], b"len", 6]
    assert r("LCS", "key1", "key2", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN") == [
        b"matches", [[[4, 7], [5, 8], 4]], b"len", 6]
    assert r("LCS", "key1", "key2", "IDX", "WITHMATCHLEN") == [
        b"matches", [[[4, 7], [5, 8], 4], [[2, 3], [0, 1], 2]], b"len", 6]
    assert r("LCS", "key1", "key2", "IDX", "MINMATCHLEN", "-5") == r("LCS", "key1", "key2", "IDX")
    assert r("LCS", "key1", "key2", "LEN", "WITHMATCHLEN") == 6
    assert r("LCS", "key1", "nokey") == b""
    assert r("LCS", "key1", "nokey", "IDX") == [b"matches", [], b"len", 0]


def _lcs_dp(a: bytes, b: bytes) -> list[list[int]]:
    t = [[0] * (len(b) + 1) for _ in range(len(a) + 1)]
    for i in range(1, len(a) + 1):
        for j in range(1, len(b) + 1):
            t[i][j] = t[i - 1][j - 1] + 1 if a[i - 1] == b[j - 1] else max(t[i - 1][j], t[i][j - 1])
    return t


def test_bit_parallel_lcs_table_matches_the_dp_table():
    import random

    rnd = random.Random(3)
    for _ in range(200):
        a = bytes(rnd.choice(b"abc") for _ in range(rnd.randint(0, 12)))
        b = bytes(rnd.choice(b"abcd") for _ in range(rnd.randint(0, 12)))
        t = strings.LcsTable(a, b)
        dp = _lcs_dp(a, b)
        assert all(t(i, j) == dp[i][j] for i in range(len(a) + 1) for j in range(len(b) + 1))


def test_lcs_of_long_strings_is_fast(r):
    import random

    rnd = random.Random(5)
    a = bytes(rnd.choice(b"ACGT") for _ in range(6000))
    b = bytes(rnd.choice(b"ACGT") for _ in range(6000))
    r("MSET", "a", a, "b", b)
    t0 = time.process_time()  # (CPU time: the bound holds on a loaded machine too)
    n = r("LCS", "a", "b", "LEN")
    reply = r("LCS", "a", "b", "IDX", "MINMATCHLEN", "5")
    assert time.process_time() - t0 < 10
    assert reply[3] == n and 3000 < n < 6000


def test_lcs_errors(r):
    r("MSET", "a", "x", "b", "y")
    assert r("LCS", "a", "b", "LEN", "IDX") == Error(errors.LCS_LEN_AND_IDX)
    assert r("LCS", "a", "b", "MINMATCHLEN") == SYNTAX
    assert r("LCS", "a", "b", "MINMATCHLEN", "x") == NOT_INT
    assert r("LCS", "a", "b", "FOO") == SYNTAX


def test_lcs_idx_is_a_map_in_resp3(r):
    r("MSET", "a", "abc", "b", "abc")
    r.c.proto = 3
    assert r.encoded("LCS", "a", "b", "IDX") == (
        b"%2\r\n$7\r\nmatches\r\n*1\r\n*2\r\n*2\r\n:0\r\n:2\r\n*2\r\n:0\r\n:2\r\n$3\r\nlen\r\n:3\r\n")
    r.c.proto = 2
    assert r.encoded("LCS", "a", "b", "IDX").startswith(b"*4\r\n$7\r\nmatches")


def test_lcs_of_a_counter(r):
    r("INCRBY", "a", "12345")
    r("SET", "b", "x234")
    assert r("LCS", "a", "b") == b"234"


# =========================================================================================
# DEL, EXISTS, TYPE, TOUCH
# =========================================================================================

def test_del_unlink_exists_touch(r):
    r("MSET", "a", "1", "b", "2", "c", "3")
    assert r("EXISTS", "a", "a", "nokey", "b") == 3
    assert r("TOUCH", "a", "a", "nokey") == 2
    assert r("DEL", "a", "a", "nokey") == 1
    assert r("UNLINK", "b", "c", "b") == 2
    assert r("EXISTS", "a", "b", "c") == 0
    assert r("DEL", "a") == 0


def test_type(r):
    r("SET", "s", "v")
    r("INCR", "n")
    put_head(r, b"h")
    put_head(r, b"z", H.CollectionType.ZSET)
    put_head(r, b"hll", H.CollectionType.HLL)
    assert r("TYPE", "s") == b"string" and isinstance(r("TYPE", "s"), resp.Simple)
    assert r("TYPE", "n") == b"string"
    assert r("TYPE", "h") == b"hash"
    assert r("TYPE", "z") == b"none"  # a zset head with no member: no key (an HLL exists empty)
    r("ZADD", "z", "1", "a")
    assert r("TYPE", "z") == b"zset"
    assert r("TYPE", "hll") == b"string"
    assert r("TYPE", "nokey") == b"none"


def test_del_collection_and_exists(r):
    put_head(r, b"h")
    assert r("EXISTS", "h") == 1
    assert r("DEL", "h") == 1
    assert r("EXISTS", "h") == 0
    assert r("TYPE", "h") == b"none"


# =========================================================================================
# Expiry
# =========================================================================================

def test_expire_family_and_ttl(r, clock):
    now = clock["now"]
    r("SET", "k", "v")
    assert r("TTL", "k") == -1 and r("PTTL", "k") == -1
    assert r("EXPIRETIME", "k") == -1 and r("PEXPIRETIME", "k") == -1
    assert r("EXPIRE", "k", "100") == 1
    assert r("TTL", "k") == 100 and r("PTTL", "k") == 100_000
    assert r("PEXPIRETIME", "k") == now + 100_000
    assert r("PEXPIRE", "k", "1234") == 1
    assert r("PTTL", "k") == 1234
    assert r("EXPIREAT", "k", str(now // 1000 + 77)) == 1
    assert r("EXPIRETIME", "k") == now // 1000 + 77
    assert r("PEXPIREAT", "k", str(now + 4321)) == 1
    assert r("PEXPIRETIME", "k") == now + 4321
    assert r("TTL", "nokey") == -2 and r("PTTL", "nokey") == -2
    assert r("EXPIRETIME", "nokey") == -2 and r("PEXPIRETIME", "nokey") == -2
    assert r("EXPIRE", "nokey", "10") == 0


@pytest.mark.parametrize("ms,ttl", [(1499, 1), (1500, 2), (499, 0), (500, 1), (1, 0), (999_999, 1000)])
def test_ttl_rounds_like_redis(r, clock, ms, ttl):
    r("SET", "k", "v", "PX", str(ms))
    assert r("TTL", "k") == ttl
    assert r("EXPIRETIME", "k") == (clock["now"] + ms + 500) // 1000


def test_ttl_of_a_key_at_its_deadline(r, clock):
    r("SET", "k", "v", "PX", "100")
    clock["now"] += 99
    assert r("PTTL", "k") == 1
    clock["now"] += 1
    assert r("PTTL", "k") == -2  # now >= deadline: the record reads as a tombstone
    assert r("GET", "k") is None
    assert r("EXISTS", "k") == 0


def test_expire_in_the_past_deletes_and_returns_1(r):
    for cmd in (["EXPIRE", "k", "0"], ["EXPIRE", "k", "-10"], ["PEXPIRE", "k", "-9223372036854775808"],
                ["EXPIREAT", "k", "1"], ["PEXPIREAT", "k", "-1"], ["EXPIRE", "k", "0", "NX"]):
        r("SET", "k", "v")
        assert r(*cmd) == 1, cmd
        assert r("EXISTS", "k") == 0, cmd
        assert env.is_tombstone(r.record(b"k")), cmd


def test_expire_conditions(r, clock):
    r("SET", "k", "v")
    assert r("EXPIRE", "k", "100", "XX") == 0  # no TTL yet
    assert r("EXPIRE", "k", "100", "GT") == 0  # persistent = infinite TTL
    assert r("TTL", "k") == -1
    assert r("EXPIRE", "k", "100", "LT") == 1  # anything is less than infinite
    assert r("EXPIRE", "k", "50", "NX") == 0
    assert r("EXPIRE", "k", "200", "GT") == 1
    assert r("EXPIRE", "k", "200", "GT") == 0  # not strictly greater
    assert r("EXPIRE", "k", "300", "LT") == 0
    assert r("EXPIRE", "k", "150", "lt") == 1
    assert r("EXPIRE", "k", "160", "XX", "GT") == 1
    assert r("TTL", "k") == 160
    assert r("EXPIRE", "k", "-1", "GT") == 0  # a past deadline still obeys GT
    assert r("EXPIRE", "k", "-1", "LT") == 1
    assert r("EXISTS", "k") == 0


@pytest.mark.parametrize("opts,err", [
    (["NX", "XX"], errors.NX_XX_GT_LT), (["NX", "GT"], errors.NX_XX_GT_LT),
    (["LT", "NX"], errors.NX_XX_GT_LT), (["GT", "LT"], errors.GT_LT),
    (["FOO"], "ERR Unsupported option FOO"), (["nx", "bar"], "ERR Unsupported option bar"),
])
def test_expire_option_errors(r, opts, err):
    r("SET", "k", "v")
    assert r("EXPIRE", "k", "100", *opts) == Error(err)


@pytest.mark.parametrize("cmd", [
    ["EXPIRE", "k", "9223372036854775"], ["EXPIRE", "k", "9223372036854776"],
    ["EXPIRE", "k", "-9223372036854776"], ["PEXPIRE", "k", "9223372036854775807"],
    ["EXPIREAT", "k", "9223372036854776"],
])
def test_expire_overflow(r, cmd):
    r("SET", "k", "v")
    assert r(*cmd) == Error(f"ERR invalid expire time in '{cmd[0].lower()}' command")


def test_expire_not_integer_checked_after_options(r):
    assert r("EXPIRE", "k", "abc") == NOT_INT
    assert r("EXPIRE", "k", "abc", "FOO") == Error("ERR Unsupported option FOO")


def test_persist(r, clock):
    r("SET", "k", "v", "EX", "100")
    assert r("PERSIST", "k") == 1
    assert r("TTL", "k") == -1
    assert r("PERSIST", "k") == 0
    assert r("PERSIST", "nokey") == 0


def test_expire_and_persist_on_a_counter_keep_its_value(r, clock):
    r("INCRBY", "n", "7")
    assert r("EXPIRE", "n", "100") == 1
    assert r("TTL", "n") == 100
    assert env.rtype_of(r.record(b"n")) == RecordType.COUNTER
    assert r("INCR", "n") == 8
    assert r("PERSIST", "n") == 1
    assert r("GET", "n") == b"8"


def test_expire_on_a_collection_head(r, clock):
    put_head(r, b"h")
    assert r("EXPIRE", "h", "100") == 1
    assert r("TTL", "h") == 100
    assert r("PERSIST", "h") == 1
    assert r("TTL", "h") == -1


# =========================================================================================
# Glob matching, KEYS, SCAN, RANDOMKEY
# =========================================================================================

@pytest.mark.parametrize("pattern,string,expected", [
    (b"*", b"", True), (b"*", b"anything", True), (b"", b"", True), (b"", b"a", False),
    (b"a*", b"a", True), (b"a*", b"", False), (b"*a", b"bca", True), (b"*a", b"bcab", False),
    (b"h?llo", b"hello", True), (b"h?llo", b"hllo", False), (b"?", b"", False),
    (b"h*llo", b"hllo", True), (b"h*llo", b"heeeello", True), (b"**a**", b"xxaxx", True),
    (b"h[ae]llo", b"hallo", True), (b"h[ae]llo", b"hillo", False),
    (b"h[^e]llo", b"hallo", True), (b"h[^e]llo", b"hello", False),
    (b"h[a-b]llo", b"hbllo", True), (b"h[b-a]llo", b"hallo", True), (b"h[a-b]llo", b"hcllo", False),
    (b"[\\]]", b"]", True), (b"[\\-]", b"-", True), (b"[a\\", b"\\", True), (b"[a\\", b"a", True),
    (b"\\*", b"*", True), (b"\\*", b"a", False), (b"a\\", b"a\\", True), (b"\\", b"\\", True),
    (b"[abc", b"c", True), (b"[abc", b"d", False), (b"[]", b"]", False), (b"[]]", b"]", False),
    (b"[^]", b"a", True), (b"[", b"", False), (b"[", b"a", False), (b"[^", b"a", True),
    (b"[a-]", b"-", False), (b"[a-]", b"a", True), (b"[-a]", b"-", True),
    (b"[a-\xff]", b"b", False), (b"[\x01-\xff]", b"\x00", True), (b"[\xfe-\xff]", b"\xfe", True),
    (b"a*b*c", b"abc", True), (b"a*b*c", b"aXbYc", True), (b"a*b*c", b"acb", False),
    (b"*?", b"", False), (b"*?*", b"x", True), (b"user:*:name", b"user:42:name", True),
    (b"*" * 5 + b"x", b"a" * 50, False), (b"a*" * 1500, b"a" * 1500, False),
    (b"a*" * 900, b"a" * 900, True),
])
def test_stringmatch(pattern, string, expected):
    assert A.stringmatch(pattern, string) is expected


def test_stringmatch_nocase():
    assert A.stringmatch(b"HeLLo", b"hello", nocase=True)
    assert A.stringmatch(b"[A-C]x", b"bX", nocase=True)
    assert not A.stringmatch(b"HeLLo", b"hello")


def test_keys(r):
    r("MSET", "user:1", "a", "user:2", "b", "other", "c", "{t}x", "d")
    r("SET", "gone", "v", "PXAT", "1")
    assert sorted(r("KEYS", "*")) == [b"other", b"user:1", b"user:2", b"{t}x"]
    assert sorted(r("KEYS", "user:*")) == [b"user:1", b"user:2"]
    assert r("KEYS", "user:[^1]") == [b"user:2"]
    assert r("KEYS", "\\{t}*") == [b"{t}x"]
    assert r("KEYS", "nomatch*") == []


def test_a_key_with_a_live_string_and_a_live_head_is_listed_once_as_the_string(r):
    """A SET and a collection write made concurrently on two nodes leave both records
    live; the key reads as the string (the type check reads the string key first), and
    KEYS, SCAN and RANDOMKEY list it once (they listed it twice)."""
    put_head(r, b"both")
    put_string(r, b"both", b"s")
    put_head(r, b"hash-only")
    assert r("TYPE", "both") == resp.Simple(b"string")
    assert sorted(r("KEYS", "*")) == [b"both", b"hash-only"]
    scanned = []
    cursor = b"0"
    while True:
        cursor, found = r("SCAN", cursor, "COUNT", 1000)
        scanned += found
        if cursor == b"0":
            break
    assert sorted(scanned) == [b"both", b"hash-only"]
    assert sorted(k for k, _, _ in r.ks.all_keys(r.ks.now())) == [b"both", b"hash-only"]
    only = [(k, ik[2:3]) for k, ik, _ in r.ks.all_keys(r.ks.now()) if k == b"both"]
    assert only == [(b"both", K.TAG_STRING)]


def test_a_whole_keyspace_pass_steps_through_the_records(r, monkeypatch):
    """all_keys_in_steps hands out one list per STEP_RECORDS key records read (whole
    partitions), and the steps together are all_keys, whatever the step size."""
    for i in range(50):
        put_string(r, b"k%d" % i, b"v", ttl=1 if i % 5 == 0 else 0)  # 10 expired
    put_head(r, b"h")
    now = r.ks.now()
    monkeypatch.setattr(Keyspace, "STEP_RECORDS", 7)
    steps = list(r.ks.all_keys_in_steps(now))
    assert 5 <= len(steps) <= 51 // 7 + 1  # (two keys may share a partition)
    assert sorted(k for step in steps for k, _, _ in step) == sorted(
        [b"k%d" % i for i in range(50) if i % 5] + [b"h"])
    # 8 steps: more than one event-loop turn's worth, so KEYS finishes as a blocking
    # command (the connection waits; other clients run between turns)
    blocked = r("KEYS", "k1*")
    assert type(blocked) is resp.Blocking
    put_string(r, b"k1new", b"v")  # after the pass began: not in its snapshot
    assert sorted(asyncio.run(blocked.awaitable)) == [
        b"k1", b"k11", b"k12", b"k13", b"k14", b"k16", b"k17", b"k18", b"k19"]


def test_scan_visits_every_key_once(r):
    names = [b"k%d" % i for i in range(300)]
    args = ["MSET"]
    for n in names:
        args += [n, b"v"]
    r(*args)
    seen = []
    cursor = b"0"
    calls = 0
    while True:
        cursor, batch = r("SCAN", cursor, "COUNT", "20")
        calls += 1
        assert len(batch) >= 1 or cursor == b"0"
        seen += batch
        if cursor == b"0":
            break
        assert 0 < int(cursor) < PARTITIONS
    assert sorted(seen) == sorted(names)
    assert calls > 5  # COUNT bounds the work per call


def test_scan_reads_at_most_ten_times_count_dead_records_per_call(r):
    """Like Redis's bound on the empty buckets a call visits: a keyspace of tombstones
    and expired records (after FLUSHALL, until gc_grace) is not read in one call."""
    for i in range(400):
        put_string(r, b"dead%d" % i, b"v", ttl=1)  # expired
    put_string(r, b"live", b"v")
    seen, calls, cursor = [], 0, b"0"
    while True:
        cursor, batch = r("SCAN", cursor, "COUNT", "2")
        calls += 1
        seen += batch
        if cursor == b"0":
            break
    assert seen == [b"live"]
    assert calls >= 400 // 22  # each call read about 20 records (whole partitions)


def test_scan_options(r):
    r("MSET", "a1", "x", "a2", "x", "b1", "x")
    put_head(r, b"a3")
    assert sorted(r("SCAN", "0", "COUNT", "10000")[1]) == [b"a1", b"a2", b"a3", b"b1"]
    assert r("SCAN", "0", "COUNT", "10000")[0] == b"0"
    assert sorted(r("SCAN", "0", "MATCH", "a*", "COUNT", "10000")[1]) == [b"a1", b"a2", b"a3"]
    assert sorted(r("SCAN", "0", "TYPE", "STRING", "COUNT", "10000")[1]) == [b"a1", b"a2", b"b1"]
    assert r("SCAN", "0", "TYPE", "hash", "COUNT", "10000")[1] == [b"a3"]
    assert r("SCAN", "0", "TYPE", "nosuchtype", "COUNT", "10000")[1] == []
    assert r("SCAN", "0", "MATCH", "a", "MATCH", "b1", "COUNT", "10000")[1] == [b"b1"]
    assert r("SCAN", "4096") == [b"0", []]
    assert r("SCAN", "-1") == [b"0", []]
    assert r("SCAN", "")[0] == r("SCAN", "0")[0]


@pytest.mark.parametrize("argv,err", [
    (["SCAN", "abc"], errors.INVALID_CURSOR), (["SCAN", " 1"], errors.INVALID_CURSOR),
    (["SCAN", "1 "], errors.INVALID_CURSOR), (["SCAN", "18446744073709551616"], errors.INVALID_CURSOR),
    (["SCAN", "+"], errors.INVALID_CURSOR), (["SCAN", "0", "COUNT", "0"], errors.SYNTAX),
    (["SCAN", "0", "COUNT", "x"], errors.NOT_INTEGER), (["SCAN", "0", "MATCH"], errors.SYNTAX),
    (["SCAN", "0", "FOO", "bar"], errors.SYNTAX), (["SCAN", "abc", "FOO"], errors.INVALID_CURSOR),
])
def test_scan_errors(r, argv, err):
    assert r(*argv) == Error(err)


def test_parse_cursor():
    assert A.parse_cursor(b"+7") == 7
    assert A.parse_cursor(b"007") == 7
    assert A.parse_cursor(b"-1") == A.ULONG_MAX
    assert A.parse_cursor(b"18446744073709551615") == A.ULONG_MAX
    assert A.parse_cursor(b"") == 0
    assert A.parse_cursor(b"5\x00junk") == 5


def test_randomkey(r):
    assert r("RANDOMKEY") is None
    r("SET", "only", "v")
    assert r("RANDOMKEY") == b"only"
    r("MSET", "a", "1", "b", "2")
    assert {r("RANDOMKEY") for _ in range(20)} <= {b"only", b"a", b"b"}


# =========================================================================================
# RENAME, RENAMENX, COPY
# =========================================================================================

def test_rename(r, clock):
    assert r("RENAME", "nokey", "x") == Error(errors.NO_SUCH_KEY)
    assert r("RENAME", "nokey", "nokey") == Error(errors.NO_SUCH_KEY)
    r("SET", "a", "v", "EX", "100")
    assert r("RENAME", "a", "a") == b"OK"
    r("SET", "b", "old")
    assert r("RENAME", "a", "b") == b"OK"
    assert r("GET", "b") == b"v"
    assert r("TTL", "b") == 100  # the TTL moves with the key
    assert r("EXISTS", "a") == 0


def test_rename_counter_and_over_collection(r):
    r("INCRBY", "n", "5")
    put_head(r, b"h")
    assert r("RENAME", "n", "h") == b"OK"
    assert r("TYPE", "h") == b"string"
    assert r("GET", "h") == b"5"
    assert r("INCR", "h") == 6


def test_renamenx(r):
    r("MSET", "a", "1", "b", "2")
    assert r("RENAMENX", "a", "a") == 0
    assert r("RENAMENX", "a", "b") == 0
    assert r("RENAMENX", "a", "c") == 1
    assert r("MGET", "a", "b", "c") == [None, b"2", b"1"]
    assert r("RENAMENX", "nokey", "d") == Error(errors.NO_SUCH_KEY)


def test_rename_and_copy_move_a_collection(r):
    # (every type, with elements: tests/unit/test_collections_move.py)
    put_head(r, b"h")
    assert r("RENAME", "h", "h") == b"OK"
    assert r("RENAME", "h", "x") == b"OK"
    assert r("TYPE", "x") == b"hash" and r("EXISTS", "h") == 0
    assert r("COPY", "x", "y") == 1
    assert r("TYPE", "y") == b"hash" and r("TYPE", "x") == b"hash"


def test_copy(r, clock):
    r("SET", "a", "v", "PX", "5000")
    assert r("COPY", "a", "b") == 1
    assert r("GET", "b") == b"v" and r("PTTL", "b") == 5000
    r("SET", "a", "w")
    assert r("COPY", "a", "b") == 0
    assert r("COPY", "a", "b", "REPLACE") == 1
    assert r("GET", "b") == b"w" and r("TTL", "b") == -1
    assert r("COPY", "nokey", "b") == 0
    assert r("COPY", "a", "c", "DB", "0") == 1
    assert r("GET", "a") == b"w"


@pytest.mark.parametrize("opts,err", [
    (["DB", "1"], errors.DB_OUT_OF_RANGE), (["DB", "-1"], errors.DB_OUT_OF_RANGE),
    (["DB", "x"], errors.NOT_INTEGER),
    (["DB", "99999999999"], "ERR value is out of range, value must between -2147483648 and 2147483647"),
    (["FOO"], errors.SYNTAX), (["DB"], errors.SYNTAX),
])
def test_copy_errors(r, opts, err):
    r("SET", "a", "v")
    assert r("COPY", "a", "b", *opts) == Error(err)
    assert r("COPY", "nokey", "b", *opts) == Error(err)  # options are checked first


def test_copy_same_key(r):
    assert r("COPY", "a", "a") == Error(errors.SAME_OBJECT)


# =========================================================================================
# OBJECT
# =========================================================================================

@pytest.mark.parametrize("value,encoding", [
    (b"123", b"int"), (b"-9223372036854775808", b"int"), (b"9223372036854775808", b"embstr"),
    (b"01", b"embstr"), (b"x" * 44, b"embstr"), (b"x" * 45, b"raw"), (b"", b"embstr"),
])
def test_object_encoding(r, value, encoding):
    r("SET", "k", value)
    assert r("OBJECT", "ENCODING", "k") == encoding


def test_object_subcommands(r):
    r("INCRBY", "n", "7")
    r("SET", "s", "text")
    r("SET", "big", "12345")
    assert r("OBJECT", "ENCODING", "n") == b"int"
    assert r("OBJECT", "ENCODING", "nokey") is None
    assert r("OBJECT", "REFCOUNT", "n") == 2147483647  # shared integer, as Redis
    assert r("OBJECT", "REFCOUNT", "big") == 1
    assert r("OBJECT", "REFCOUNT", "s") == 1
    assert r("OBJECT", "REFCOUNT", "nokey") is None
    assert r("OBJECT", "IDLETIME", "s") == 0
    assert r("OBJECT", "FREQ", "s") == Error(errors.LFU_NOT_SELECTED)
    assert r("OBJECT", "FREQ", "nokey") is None
    help_ = r("OBJECT", "HELP")
    assert help_[0] == b"OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:"
    assert help_[-1] == b"    Prints this help." and all(isinstance(x, resp.Simple) for x in help_)
    assert r("OBJECT", "FOO") == Error("ERR unknown subcommand 'FOO'. Try OBJECT HELP.")
    assert r("OBJECT", "ENCODING") == Error(errors.wrong_arity("object|encoding"))


def test_object_with_lfu_policy(tmp_path):
    node = Node(str(tmp_path / "db"))
    node.node.set_tunable("maxmemory-policy", "allkeys-lfu")
    node.node.set_tunable("maxmemory", "100mb")
    try:
        node("SET", "k", "v")
        assert node("OBJECT", "FREQ", "k") == 0
        assert node("OBJECT", "IDLETIME", "k") == Error(errors.LFU_SELECTED)
    finally:
        node.close()


# =========================================================================================
# Declarations
# =========================================================================================

EXPECTED_ARITY = {
    "set": -3, "get": 2, "getex": -2, "getdel": 2, "getset": 3, "mget": -2, "mset": -3,
    "msetnx": -3, "setnx": 3, "setex": 4, "psetex": 4, "append": 3, "strlen": 2, "getrange": 4,
    "substr": 4, "setrange": 4, "incr": 2, "decr": 2, "incrby": 3, "decrby": 3, "incrbyfloat": 3,
    "lcs": -3, "del": -2, "unlink": -2, "exists": -2, "type": 2, "expire": -3, "pexpire": -3,
    "expireat": -3, "pexpireat": -3, "ttl": -2, "pttl": -2, "expiretime": 2, "pexpiretime": 2,
    "persist": 2, "keys": 2, "scan": -2, "randomkey": 1, "rename": 3, "renamenx": 3, "copy": -3,
    "touch": -2, "object": -2,
}


def test_declarations_are_complete():
    assert {c.name for c in TABLE} == set(EXPECTED_ARITY)
    for cmd in TABLE:
        assert cmd.arity == EXPECTED_ARITY[cmd.name], cmd.name
        assert cmd.summary and cmd.since and cmd.complexity, cmd.name
        assert cmd.group == ("string" if cmd.handler and cmd.handler.__module__.endswith("strings")
                             else "generic"), cmd.name
        for sub in cmd.subcommands.values():
            assert sub.summary and sub.group == "generic" and sub.parent == "object"
    assert set(TABLE.lookup(b"object").subcommands) == {"help", "encoding", "freq", "idletime",
                                                        "refcount"}
    s = TABLE.lookup(b"set")
    assert (s.first_key, s.last_key, s.step) == (1, 1, 1)
    assert s.syntax == ("key value [NX | XX] [GET] [EX seconds | PX milliseconds | "
                        "EXAT unix-time-seconds | PXAT unix-time-milliseconds | KEEPTTL]")
    m = TABLE.lookup(b"mset")
    assert (m.first_key, m.last_key, m.step) == (1, -1, 2)


# =========================================================================================
# Differential: the same sequences against a real redis-server 7.0
# =========================================================================================

class RawRedis:
    """A bare RESP connection: sends a command, returns the reply's exact bytes."""

    def __init__(self, port: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.f = self.sock.makefile("rb")

    def __call__(self, *argv) -> bytes:
        args = [a if isinstance(a, bytes) else str(a).encode() for a in argv]
        self.sock.sendall(b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args))
        return self._read()

    def _read(self) -> bytes:
        line = self.f.readline()
        t = line[:1]
        if t in (b"$", b"="):
            n = int(line[1:-2])
            return line if n < 0 else line + self.f.read(n + 2)
        if t in (b"*", b"%", b"~", b">"):
            n = int(line[1:-2])
            if t == b"%":
                n *= 2
            return line + b"".join(self._read() for _ in range(max(n, 0)))
        return line

    def close(self) -> None:
        self.f.close()
        self.sock.close()


@pytest.fixture(scope="module")
def redis_port():
    exe = shutil.which("redis-server")
    if exe is None:
        pytest.skip("redis-server is not installed")
    port = free_port()
    workdir = tempfile.mkdtemp(prefix="marekvs-redis-")
    proc = subprocess.Popen([exe, "--save", "", "--appendonly", "no", "--port", str(port),
                             "--bind", "127.0.0.1", "--dir", workdir],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.time() + 10
        while True:
            try:
                c = RawRedis(port)
                if c("PING") == b"+PONG\r\n":
                    c.close()
                    break
                c.close()
            except OSError:
                pass
            if time.time() > deadline or proc.poll() is not None:
                pytest.skip("redis-server did not start")
            time.sleep(0.05)
        yield port
    finally:
        proc.terminate()  # by its pid: only the server this fixture started
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        shutil.rmtree(workdir, ignore_errors=True)


@pytest.fixture
def pair(redis_port, tmp_path):
    real = RawRedis(redis_port)
    real("FLUSHALL")
    node = Node(str(tmp_path / "db"))
    yield real, node
    real("HELLO", "2")
    real.close()
    node.close()


def _int_reply(b: bytes) -> int:
    assert b[:1] == b":", b
    return int(b[1:-2])


# A step is argv (exact RESP bytes must match), or ("~", argv) for a time-dependent
# integer reply (equal within 50 ms / 1 s), or ("sorted", argv) for an array reply
# compared as a sorted list of elements.
SEQUENCES = {
    "set_options": [
        ["SET", "k", "v"], ["GET", "k"], ["SET", "k", "v2", "NX"], ["SET", "k", "v3", "XX"],
        ["SET", "n", "v", "XX"], ["SET", "k", "v4", "GET"], ["SET", "k2", "x", "GET"],
        ["SET", "k", "v5", "NX", "GET"], ["SET", "k9", "v5", "XX", "GET"], ["EXISTS", "k9"],
        ["SET", "k", "v", "NX", "XX"], ["SET", "k", "v", "EX", "10", "PX", "10"],
        ["SET", "k", "v", "KEEPTTL", "EX", "1"], ["SET", "k", "v", "EX"], ["SET", "k", "v", "FOO"],
        ["SET", "k", "v", "EX", "0"], ["SET", "k", "v", "PX", "-1"], ["SET", "k", "v", "EX", "x"],
        ["SET", "k", "v", "EXAT", "0"], ["SET", "k", "v", "PX", "9223372036854775807"],
        ["SET", "k", "v", "EX", "9223372036854775"], ["SET", "k", "v", "EXAT", "9223372036854776"],
        ["SET", "k", "v", "PXAT", "1"], ["GET", "k"], ["EXISTS", "k"],
        ["SET", "k", "v", "EX", "100"], ("~", ["TTL", "k"]), ["SET", "k", "w", "KEEPTTL"],
        ("~", ["TTL", "k"]), ["SET", "k", "z"], ["TTL", "k"], ["SET", "k", "v", "GET", "GET"],
        ["SET"], ["SET", "k"], ["GET"], ["GET", "a", "b"],
    ],
    "setnx_setex": [
        ["SETNX", "k", "1"], ["SETNX", "k", "2"], ["GET", "k"], ["SETEX", "k", "100", "x"],
        ("~", ["PTTL", "k"]), ["PSETEX", "k", "5000", "y"], ("~", ["PTTL", "k"]), ["GET", "k"],
        ["SETEX", "k", "0", "x"], ["PSETEX", "k", "-1", "x"], ["SETEX", "k", "x", "v"],
        ["SETEX", "k", "1"],
    ],
    "get_family": [
        ["SET", "k", "v"], ["GETEX", "k"], ["GETEX", "k", "EX", "100"], ("~", ["TTL", "k"]),
        ["GETEX", "k", "PERSIST"], ["TTL", "k"], ["GETEX", "k", "PX", "5000"], ("~", ["PTTL", "k"]),
        ["GETEX", "k", "EX", "0"], ["GETEX", "k", "PERSIST", "EX", "1"], ["GETEX", "k", "KEEPTTL"],
        ["GETEX", "nokey", "EX", "0"], ["GETEX", "nokey", "FOO"], ["GETEX", "k", "PXAT", "1"],
        ["EXISTS", "k"], ["SET", "k", "v", "EX", "100"], ["GETSET", "k", "w"], ["TTL", "k"],
        ["GETSET", "n", "x"], ["GETDEL", "k"], ["GETDEL", "k"], ["MSET", "a", "1", "b", "2"],
        ["MGET", "a", "nokey", "b"], ["MSET", "a"], ["MSET", "a", "1", "b"], ["MSETNX", "a", "1", "b"],
        ["MSETNX", "c", "1", "a", "2"], ["MGET", "c"], ["MSETNX", "c", "1", "d", "2"],
        ["MGET", "a", "b", "c", "d"],
    ],
    "append_ranges": [
        ["APPEND", "k", "hello"], ["APPEND", "k", " world"], ["GET", "k"], ["STRLEN", "k"],
        ["STRLEN", "nokey"], ["GETRANGE", "k", "0", "4"], ["GETRANGE", "k", "-5", "-1"],
        ["GETRANGE", "k", "0", "-100"], ["GETRANGE", "k", "-1", "-5"], ["GETRANGE", "k", "-100", "-100"],
        ["GETRANGE", "k", "5", "1"], ["GETRANGE", "k", "0", "9223372036854775807"],
        ["GETRANGE", "k", "x", "1"], ["GETRANGE", "nokey", "0", "1"], ["SUBSTR", "k", "1", "3"],
        ["SETRANGE", "k", "6", "WORLD"], ["GET", "k"], ["SETRANGE", "k", "15", "!"], ["GET", "k"],
        ["SETRANGE", "p", "3", "x"], ["GET", "p"], ["SETRANGE", "k", "-1", "x"],
        ["SETRANGE", "k", "0", ""], ["SETRANGE", "q", "0", ""], ["EXISTS", "q"],
        ["SETRANGE", "k", "536870912", "x"], ["SETRANGE", "q", "536870912", ""],
        ["SETRANGE", "k", "x", "x"], ["SET", "e", ""], ["GETRANGE", "e", "0", "-1"],
    ],
    "counters": [
        ["INCR", "c"], ["INCR", "c"], ["DECR", "c"], ["INCRBY", "c", "100"], ["DECRBY", "c", "50"],
        ["GET", "c"], ["STRLEN", "c"], ["APPEND", "c", "0"], ["INCR", "c"], ["SET", "c", "10"],
        ["INCRBY", "c", "-20"], ["SET", "c", " 1"], ["INCR", "c"], ["SET", "c", "01"], ["INCR", "c"],
        ["SET", "c", "-0"], ["INCR", "c"], ["INCRBY", "c", "+1"], ["INCRBY", "d", "1.5"],
        ["SET", "c", "9223372036854775807"], ["INCR", "c"], ["SET", "c", "-9223372036854775808"],
        ["DECR", "c"], ["DECRBY", "c", "-9223372036854775808"], ["INCRBY", "c", "9223372036854775807"],
        ["INCRBY", "c", "9223372036854775808"], ["SET", "t", "5", "EX", "100"], ["INCR", "t"],
        ("~", ["TTL", "t"]), ["GETSET", "t", "1"], ["TTL", "t"], ["INCR", "t"],
        ["SETRANGE", "t", "0", "9"], ["INCR", "t"], ["OBJECT", "ENCODING", "t"],
    ],
    "incrbyfloat": [
        ["SET", "f", "10.5"], ["INCRBYFLOAT", "f", "0.1"], ["INCRBYFLOAT", "f", "-5"],
        ["INCRBYFLOAT", "f", "1e3"], ["INCRBYFLOAT", "f", "0x10"], ["INCRBYFLOAT", "f", "inf"],
        ["INCRBYFLOAT", "f", "nan"], ["INCRBYFLOAT", "f", "abc"], ["INCRBYFLOAT", "f", " 1"],
        ["INCRBYFLOAT", "g", "1e400"], ["INCRBYFLOAT", "g", "-1e400"], ["INCRBYFLOAT", "h", "1e5000"],
        ["INCRBYFLOAT", "h", "1e-5000"], ["INCRBYFLOAT", "h", "3e-4950"], ["INCRBYFLOAT", "h", "-1e-20"],
        ["INCRBYFLOAT", "i", "0.000003814697265625"], ["INCRBYFLOAT", "i", "1.7976931348623157e308"],
        ["INCRBYFLOAT", "j", "1"], ["INCRBYFLOAT", "j", "2.5e-1"], ["INCRBYFLOAT", "j", "-1.25"],
        ["INCR", "c"], ["INCRBYFLOAT", "c", "0.5"], ["INCR", "c"], ["SET", "s", "1e3"],
        ["INCRBYFLOAT", "s", "1"], ["SET", "s", "3.0"], ["INCRBYFLOAT", "s", "0"],
        ["INCRBYFLOAT", "s", ".1"], ["INCRBYFLOAT", "s", "5."],
        ["INCRBYFLOAT", "s", "0.3333333333333333333333"],
        ["INCRBYFLOAT", "s", "-1e-18"], ["INCRBYFLOAT", "s", "1E2"], ["INCRBYFLOAT", "s", "0X1P-2"],
    ],
    "lcs": [
        ["MSET", "key1", "ohmytext", "key2", "mynewtext"], ["LCS", "key1", "key2"],
        ["LCS", "key1", "key2", "LEN"], ["LCS", "key1", "key2", "IDX"],
        ["LCS", "key1", "key2", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN"],
        ["LCS", "key1", "key2", "IDX", "WITHMATCHLEN"], ["LCS", "key1", "key2", "LEN", "IDX"],
        ["LCS", "key1", "key2", "MINMATCHLEN"], ["LCS", "key1", "key2", "MINMATCHLEN", "x"],
        ["LCS", "key1", "key2", "FOO"], ["LCS", "key1", "nokey"], ["LCS", "key1", "nokey", "IDX"],
        ["LCS", "key1", "key2", "LEN", "WITHMATCHLEN"], ["MSET", "x", "ABCBDAB", "y", "BDCABA"],
        ["LCS", "x", "y"], ["LCS", "x", "y", "IDX", "WITHMATCHLEN"], ["LCS", "y", "x", "IDX"],
        ["MSET", "p", "aaaaaaaaaa", "q", "aaabaaaa"], ["LCS", "p", "q", "IDX", "MINMATCHLEN", "2"],
        ["INCRBY", "n", "123456"], ["SET", "m", "x3456"], ["LCS", "n", "m", "IDX"],
    ],
    "keyspace": [
        ["MSET", "a", "1", "b", "2", "c", "3"], ["EXISTS", "a", "a", "nokey", "b"],
        ["TOUCH", "a", "a", "nokey"], ["DEL", "a", "a", "nokey"], ["UNLINK", "b", "c", "b"],
        ["EXISTS", "a", "b", "c"], ["SET", "s", "v"], ["TYPE", "s"], ["TYPE", "nokey"],
        ["INCR", "n"], ["TYPE", "n"], ["DEL"], ["DEL", "n"], ["RANDOMKEY"], ["DEL", "s"],
        ["RANDOMKEY"], ["KEYS", "*"], ["SCAN", "0"],
    ],
    "expire": [
        ["SET", "k", "v"], ["TTL", "k"], ["PTTL", "k"], ["EXPIRETIME", "k"], ["PEXPIRETIME", "k"],
        ["EXPIRE", "k", "100", "XX"], ["EXPIRE", "k", "100", "GT"], ["EXPIRE", "k", "100", "LT"],
        ("~", ["TTL", "k"]), ["EXPIRE", "k", "50", "NX"], ["EXPIRE", "k", "200", "GT"],
        ["EXPIRE", "k", "300", "LT"], ["EXPIRE", "k", "100", "NX", "XX"],
        ["EXPIRE", "k", "100", "GT", "LT"], ["EXPIRE", "k", "100", "NX", "GT"],
        ["EXPIRE", "k", "100", "foo"], ["EXPIRE", "k", "abc"], ["EXPIRE", "k", "9223372036854775"],
        ["EXPIRE", "k", "-9223372036854776"], ["PEXPIRE", "k", "9223372036854775807"],
        ["EXPIRE", "nokey", "0"], ["PEXPIREAT", "k", "9223372036854775807"], ["PEXPIRETIME", "k"],
        ["EXPIRETIME", "k"], ["PERSIST", "k"], ["PERSIST", "k"], ["PERSIST", "nokey"],
        ["EXPIRETIME", "k"], ["TTL", "nokey"], ["PTTL", "nokey"], ["EXPIRETIME", "nokey"],
        ["EXPIREAT", "k", "1"], ["EXISTS", "k"], ["SET", "k", "v"], ["EXPIRE", "k", "0", "NX"],
        ["EXISTS", "k"], ["SET", "k", "v"], ["PEXPIRE", "k", "-9223372036854775808"], ["EXISTS", "k"],
        ["SET", "k", "v"], ["EXPIREAT", "k", "9999999999"], ["EXPIRETIME", "k"],
        ["PEXPIREAT", "k", "9999999999500"], ["EXPIRETIME", "k"], ["EXPIRE", "k"],
    ],
    "rename_copy": [
        ["RENAME", "nokey", "a"], ["RENAME", "nokey", "nokey"], ["SET", "a", "v"],
        ["RENAME", "a", "a"], ["RENAMENX", "a", "a"], ["SET", "b", "w", "EX", "100"],
        ["RENAME", "b", "c"], ("~", ["TTL", "c"]), ["EXISTS", "b"], ["RENAMENX", "a", "c"],
        ["RENAMENX", "a", "d"], ["MGET", "a", "c", "d"], ["RENAME", "d", "c"], ["TTL", "c"],
        ["COPY", "c", "c"], ["COPY", "c", "e"], ["GET", "e"], ["COPY", "c", "e"], ["SET", "c", "new"],
        ["COPY", "c", "e", "REPLACE"], ["GET", "e"], ["COPY", "c", "f", "DB", "16"],
        ["COPY", "c", "f", "DB", "x"], ["COPY", "c", "f", "DB", "99999999999"], ["COPY", "c", "f", "FOO"],
        ["COPY", "c", "f", "DB"], ["COPY", "nokey", "f"], ["COPY", "nokey", "f", "DB", "16"],
        ["INCRBY", "n", "5"], ["RENAME", "n", "m"], ["INCR", "m"], ["COPY", "m", "o"], ["INCR", "o"],
        ["MGET", "m", "o"],
    ],
    "object": [
        ["SET", "i", "123"], ["SET", "i2", "12345"], ["SET", "e", "hello"], ["SET", "r", "x" * 45],
        ["SET", "neg", "-5"], ["SET", "z", "01"], ["SET", "e44", "y" * 44],
        ["OBJECT", "ENCODING", "i"], ["OBJECT", "ENCODING", "i2"], ["OBJECT", "ENCODING", "e"],
        ["OBJECT", "ENCODING", "r"], ["OBJECT", "ENCODING", "z"], ["OBJECT", "ENCODING", "e44"],
        ["OBJECT", "ENCODING", "nokey"], ["OBJECT", "REFCOUNT", "i"], ["OBJECT", "REFCOUNT", "i2"],
        ["OBJECT", "REFCOUNT", "e"], ["OBJECT", "REFCOUNT", "neg"], ["OBJECT", "REFCOUNT", "nokey"],
        ("int", ["OBJECT", "IDLETIME", "e"]), ["OBJECT", "IDLETIME", "nokey"], ["OBJECT", "FREQ", "e"],
        ["OBJECT", "FREQ", "nokey"], ["OBJECT", "HELP"], ["OBJECT", "FOO"], ["OBJECT", "ENCODING"],
        ["OBJECT", "ENCODING", "a", "b"], ["OBJECT"], ["INCR", "cnt"], ["OBJECT", "ENCODING", "cnt"],
        ["OBJECT", "REFCOUNT", "cnt"],
    ],
    "keys_glob": [
        ["MSET", "hello", "1", "hallo", "1", "hxllo", "1", "hllo", "1", "heeeello", "1",
         "h]llo", "1", "h-llo", "1", "h\\llo", "1", "*", "1", "a*b", "1", "[x", "1", "", "1"],
        ("sorted", ["KEYS", "*"]), ("sorted", ["KEYS", "h?llo"]), ("sorted", ["KEYS", "h*llo"]),
        ("sorted", ["KEYS", "h[ae]llo"]), ("sorted", ["KEYS", "h[^e]llo"]),
        ("sorted", ["KEYS", "h[a-b]llo"]), ("sorted", ["KEYS", "h[\\]]llo"]),
        ("sorted", ["KEYS", "h[\\-]llo"]), ("sorted", ["KEYS", "h\\\\llo"]), ("sorted", ["KEYS", "\\*"]),
        ("sorted", ["KEYS", "a\\*b"]), ("sorted", ["KEYS", "[[]x"]), ("sorted", ["KEYS", "\\[x"]),
        ("sorted", ["KEYS", "[x"]), ("sorted", ["KEYS", ""]), ("sorted", ["KEYS", "h[a-]llo"]),
        ("sorted", ["KEYS", "h[]-a]llo"]), ("sorted", ["KEYS", "h[^]llo"]), ("sorted", ["KEYS", "?"]),
        ("sorted", ["KEYS", "h*l*o"]), ("sorted", ["KEYS", "*[o"]), ("sorted", ["KEYS", "h[e"]),
        ("sorted", ["SCAN", "0", "MATCH", "nomatch", "COUNT", "100000"]),
        ["SCAN", "abc"], ["SCAN", "0", "COUNT", "0"], ["SCAN", "0", "COUNT", "x"],
        ["SCAN", "0", "MATCH"], ["SCAN", "0", "foo", "bar"], ["SCAN", "18446744073709551616"],
        ["SCAN", " 1"],
    ],
}


def _sorted_array(raw: bytes) -> list[bytes]:
    """Elements of a flat or [cursor, [keys]] array reply, sorted (order-free compare)."""
    elems = []
    lines = raw.split(b"\r\n")
    i = 1
    while i < len(lines) - 1:
        if lines[i][:1] == b"$":
            elems.append(lines[i + 1])
            i += 2
        else:
            i += 1
    return sorted(elems)


@pytest.mark.parametrize("name", sorted(SEQUENCES))
def test_differential_against_redis(pair, name):
    real, node = pair
    for step in SEQUENCES[name]:
        mode, argv = ("exact", step) if isinstance(step, list) else step
        want = real(*argv)
        got = node.encoded(*argv)
        if mode == "~":
            slack = 50 if argv[0].upper().startswith("P") else 1
            assert abs(_int_reply(got) - _int_reply(want)) <= slack, (argv, got, want)
        elif mode == "sorted":
            assert _sorted_array(got) == _sorted_array(want), (argv, got, want)
        elif mode == "int":  # a clock reading (seconds idle): each server's own, any count
            assert _int_reply(got) >= 0 and _int_reply(want) >= 0, (argv, got, want)
        else:
            assert got == want, (argv, got, want)


def test_differential_resp3(pair):
    real, node = pair
    real("HELLO", "3")
    node.c.proto = 3
    for argv in (["MSET", "a", "ohmytext", "b", "mynewtext"], ["LCS", "a", "b", "IDX"],
                 ["LCS", "a", "b", "IDX", "WITHMATCHLEN"], ["GET", "nokey"], ["MGET", "a", "nokey"],
                 ["SET", "a", "v", "NX"], ["OBJECT", "ENCODING", "nokey"], ["TYPE", "a"],
                 ["GETEX", "nokey"], ["INCRBYFLOAT", "f", "1.5"], ["SCAN", "0", "MATCH", "nokey"]):
        assert node.encoded(*argv) == real(*argv), argv


def test_differential_random_lcs(pair):
    """Random strings over small alphabets: LCS, LEN and IDX agree with Redis byte for
    byte (including which of several longest subsequences the backtrack picks)."""
    import random

    real, node = pair
    rnd = random.Random(11)
    for _ in range(150):
        a = bytes(rnd.choice(b"abc") for _ in range(rnd.randint(0, 15)))
        b = bytes(rnd.choice(b"abc") for _ in range(rnd.randint(0, 15)))
        for cmd in (["MSET", "a", a, "b", b], ["LCS", "a", "b"], ["LCS", "a", "b", "LEN"],
                    ["LCS", "a", "b", "IDX", "WITHMATCHLEN"],
                    ["LCS", "a", "b", "IDX", "MINMATCHLEN", str(rnd.randint(0, 3))]):
            assert node.encoded(*cmd) == real(*cmd), (a, b, cmd)


def test_differential_random_incrbyfloat(pair):
    """Long double arithmetic and %.17Lf formatting agree with Redis on random input."""
    import random

    real, node = pair
    rnd = random.Random(13)

    def number() -> str:
        kind = rnd.random()
        if kind < 0.4:
            return f"{rnd.uniform(-1e6, 1e6):.{rnd.randint(0, 25)}f}"
        if kind < 0.7:
            return f"{rnd.randint(-99999, 99999)}e{rnd.randint(-40, 40)}"
        if kind < 0.8:
            return f"{rnd.uniform(-1, 1):.{rnd.randint(1, 30)}f}"
        if kind < 0.9:
            return rnd.choice(["0x1p-", "0x1.8p", "-0x3p"]) + str(rnd.randint(0, 70))
        return str(rnd.randint(-(2**63), 2**63 - 1))

    for _ in range(400):
        key = rnd.choice(["f1", "f2", "f3"])
        cmd = ["INCRBYFLOAT", key, number()] if rnd.random() < 0.9 else ["SET", key, number()]
        assert node.encoded(*cmd) == real(*cmd), cmd


def test_differential_random_set_options(pair):
    """Random SET / GETEX option lists: same parse errors and replies as Redis."""
    import random

    real, node = pair
    rnd = random.Random(17)
    tokens = ["NX", "XX", "GET", "KEEPTTL", "EX", "PX", "EXAT", "PXAT", "PERSIST", "10",
              "0", "-1", "9999999999999", "FOO", "ex", "get"]
    for _ in range(500):
        opts = [rnd.choice(tokens) for _ in range(rnd.randint(0, 4))]
        key = rnd.choice(["k1", "k2"])
        cmd = (["SET", key, str(rnd.randint(0, 9))] if rnd.random() < 0.7 else ["GETEX", key]) + opts
        assert node.encoded(*cmd) == real(*cmd), cmd
        if rnd.random() < 0.1:
            assert node.encoded("DEL", key) == real("DEL", key)


def test_differential_random_ranges(pair):
    """GETRANGE / SETRANGE index arithmetic on random offsets."""
    import random

    real, node = pair
    rnd = random.Random(19)
    for _ in range(400):
        i = rnd.choice([rnd.randint(-12, 12), rnd.randint(-(2**63), 2**63 - 1)])
        j = rnd.randint(-12, 12)
        if rnd.random() < 0.3:
            cmd = ["SETRANGE", "s", str(abs(i) % 20 if rnd.random() < 0.9 else i),
                   "xyz"[: rnd.randint(0, 3)]]
        else:
            cmd = [rnd.choice(["GETRANGE", "SUBSTR"]), "s", str(i), str(j)]
        assert node.encoded(*cmd) == real(*cmd), cmd


def test_differential_random_glob(pair):
    """Random patterns over a fixed alphabet agree with Redis's stringmatchlen."""
    import random

    real, node = pair
    rnd = random.Random(7)
    alphabet = b"ab-]^\\[*?"
    keys_ = {bytes(rnd.choice(b"ab-]^\\[") for _ in range(rnd.randint(0, 4))) for _ in range(60)}
    args = ["MSET"]
    for k in keys_:
        args += [k, b"1"]
    assert node.encoded(*args) == real(*args)
    for i in range(400):
        pat = bytes(rnd.choice(alphabet) for _ in range(rnd.randint(0, 6)))
        want = _sorted_array(real("KEYS", pat))
        if i % 40 == 0:  # the whole command now and then; stringmatch alone otherwise
            got = _sorted_array(node.encoded("KEYS", pat))
        else:
            got = sorted(k for k in keys_ if A.stringmatch(pat, k))
        assert got == want, pat

