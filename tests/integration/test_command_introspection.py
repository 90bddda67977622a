"""Differential test: COMMAND INFO, COMMAND GETKEYS, COMMAND GETKEYSANDFLAGS and the key
arguments of COMMAND DOCS, for every command and subcommand marekvs has, sent to a marekvs
node and to a stock redis-server 7.0.15 side by side, in RESP2 and RESP3. Replies are
compared as typed RESP trees (a set is not an array, a simple string is not a bulk string),
GETKEYS replies byte for byte.

The intended divergences are listed below, each with its reason; anything else that
differs fails.
"""

from __future__ import annotations

import socket

import hiredis
import pytest

from tests.helpers import mb

# -- intended divergences -------------------------------------------------------------------

# COMMAND INFO's 8th element: marekvs declares no command tips (request/response policies
# and nondeterministic_output are hints for cluster clients; marekvs is not a Redis Cluster)
TIPS_NOT_DECLARED = True
# subcommands Redis 7.0 has and marekvs does not implement (yet)
NOT_IMPLEMENTED = {
    "config|rewrite", "latency|doctor", "latency|graph", "latency|histogram",
    "script|debug",  # the Lua debugger (LDB)
}
# marekvs commands Redis 7.0.15 does not have: CLIENT SETINFO came with Redis 7.2; marekvs's
# DEBUG is a container of its own subcommands (Redis's DEBUG is one command with no keys)
NOT_IN_REDIS = {"client|setinfo", "debug|digest", "debug|digest-value", "debug|sleep", "debug|help",
                # Redis 7.4's hash field TTLs and KeyDB's per-member TTL (docs/divergences.md)
                "hexpire", "hpexpire", "hexpireat", "hpexpireat", "httl", "hpttl", "hexpiretime",
                "hpexpiretime", "hpersist", "expiremember", "expirememberat", "pexpirememberat"}
# arities wider than Redis 7.0's: KeyDB's TTL key [member] and PTTL key [member] (-2 where
# Redis 7.0 has 2); ZRANK and ZREVRANK take Redis 7.2's WITHSCORE (-3 where 7.0 has 3)
ARITY_EXTENDED = {"ttl": -2, "pttl": -2, "zrank": -3, "zrevrank": -3}


# -- a connection that keeps the types of RESP3 ------------------------------------------------

class Conn:
    def __init__(self, port: int, proto: int):
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.buf = b""
        if proto == 3:
            assert self.call(b"HELLO", b"3")[:1] == b"%"

    def call(self, *args: bytes) -> bytes:
        """One command; its reply's raw bytes."""
        self.sock.sendall(mb(*args))
        reader = hiredis.Reader()
        reader.feed(self.buf)
        while True:
            if reader.gets() is not False:
                break
            data = self.sock.recv(1 << 16)
            assert data, "connection closed"
            self.buf += data
            reader.feed(data)
        n = _reply_len(self.buf, 0)
        raw, self.buf = self.buf[:n], self.buf[n:]
        return raw

    def typed(self, *args: bytes):
        raw = self.call(*args)
        value, end = parse(raw, 0)
        assert end == len(raw)
        return value

    def close(self) -> None:
        self.sock.close()


_AGGREGATES = {ord("*"): "*", ord("%"): "%", ord("~"): "~", ord(">"): ">", ord("|"): "|"}


def parse(buf: bytes, i: int):
    """A RESP2/RESP3 reply as a tree of (type, value): aggregates keep their marker."""
    t = buf[i]
    nl = buf.index(b"\r\n", i)
    head = buf[i + 1:nl]
    i = nl + 2
    if t in _AGGREGATES:
        n = int(head)
        if n < 0:
            return (chr(t), None), i
        if t in (ord("%"), ord("|")):
            n *= 2
        items = []
        for _ in range(n):
            item, i = parse(buf, i)
            items.append(item)
        return (_AGGREGATES[t], items), i
    if t in (ord("$"), ord("="), ord("!")):
        n = int(head)
        if n < 0:
            return ("$", None), i
        return (chr(t), buf[i:i + n]), i + n + 2
    if t == ord(":"):
        return (":", int(head)), i
    return (chr(t), head), i


def _reply_len(buf: bytes, i: int) -> int:
    return parse(buf, i)[1]


def plain(node):
    """A typed tree without its types (for messages and names)."""
    t, v = node
    if isinstance(v, list):
        return [plain(x) for x in v]
    return v


# -- the commands marekvs has --------------------------------------------------------------------

@pytest.fixture(scope="module")
def arities(shared_node) -> dict[str, int]:
    """Every command and subcommand marekvs has, with its arity (from COMMAND)."""
    c = Conn(shared_node.port, 2)
    try:
        out = {}
        for info in plain(c.typed(b"COMMAND")):
            out[info[0].decode()] = info[1]
            out.update((s[0].decode(), s[1]) for s in info[9])
        return out
    finally:
        c.close()


@pytest.fixture(scope="module")
def names(arities) -> list[str]:
    return sorted(arities)


@pytest.fixture(scope="module", params=[2, 3], ids=["resp2", "resp3"])
def conns(request, shared_node, real_redis):
    mvs, red = Conn(shared_node.port, request.param), Conn(real_redis.port, request.param)
    yield mvs, red
    mvs.close()
    red.close()


def _sub_names(info) -> dict[str, object]:
    return {plain(s)[0].decode(): s for s in info[1][9][1]}


def _compare_info(name: str, got, want, bad: dict) -> None:
    g, w = got[1], want[1]
    for i, what in enumerate(["name", "arity", "flags", "first key", "last key", "step", "acl categories"]):
        if what == "arity" and name in ARITY_EXTENDED and plain(g[i]) == ARITY_EXTENDED[name]:
            continue
        if g[i] != w[i]:
            bad[f"{name} {what}"] = (plain(g[i]), plain(w[i]))
    if TIPS_NOT_DECLARED:
        if plain(g[7]):
            bad[f"{name} tips"] = (plain(g[7]), plain(w[7]))
    elif g[7] != w[7]:
        bad[f"{name} tips"] = (plain(g[7]), plain(w[7]))
    if g[8] != w[8]:
        bad[f"{name} key specs"] = (plain(g[8]), plain(w[8]))
    gs, ws = _sub_names(got), _sub_names(want)
    for sub in sorted(set(gs) | set(ws)):
        if sub not in ws:
            if sub not in NOT_IN_REDIS:
                bad[f"{sub}"] = "only marekvs has it"
        elif sub not in gs:
            if sub not in NOT_IMPLEMENTED:
                bad[f"{sub}"] = "only redis has it"
        else:
            _compare_info(sub, gs[sub], ws[sub], bad)


def _missing(reply) -> bool:
    return reply[0] == "_" or reply[1] is None


def test_command_info_of_every_command_is_redis_s(conns, names):
    # by name and, for subcommands, by full name ("client|list"); a container's reply
    # carries its subcommands, compared one by one
    mvs, red = conns
    bad: dict = {}
    for name in names:
        if name in NOT_IN_REDIS:
            assert _missing(red.typed(b"COMMAND", b"INFO", name.encode())[1][0]), f"redis-server has {name} now"
            continue
        got = mvs.typed(b"COMMAND", b"INFO", name.encode())[1][0]
        want = red.typed(b"COMMAND", b"INFO", name.encode())[1][0]
        assert not _missing(want), f"redis-server has no {name}"
        _compare_info(name, got, want, bad)
    assert not bad, bad


def test_command_info_of_unknown_names_is_null(conns):
    mvs, red = conns
    args = (b"COMMAND", b"INFO", b"get", b"nosuchcommand", b"client|nosuch", b"get|x", b"GET")
    assert mvs.call(*args) == red.call(*args)


# -- COMMAND GETKEYS / GETKEYSANDFLAGS ------------------------------------------------------------

def _argvs(name: str, arity: int) -> list[list[bytes]]:
    """Argument lists for ``name`` (``container|sub`` as two words): the minimum the arity
    allows and a few more, one too few and one too many, with words a key search may meet."""
    words = [w.encode() for w in name.split("|")]
    n = abs(arity)
    counts = {max(len(words), n - 1), n, n + 1, n + 2, n + 3} if arity < 0 else {n - 1, n, n + 1}
    fillers = [b"k1", b"v1", b"k2", b"v2", b"GET", b"k3", b"KEYS", b"STORE", b"7"]
    out = []
    for total in sorted(c for c in counts if c >= len(words)):
        out.append(words + fillers[:total - len(words)])
    return out


def _debug_without_subcommand(argv: list[bytes], arities: dict[str, int]) -> bool:
    """``DEBUG <not a subcommand> ...``: Redis's DEBUG is one command ("The command has no
    key arguments"); marekvs's is a container ("Invalid command specified", as for OBJECT
    NOSUCH). One of the DEBUG divergences listed in NOT_IN_REDIS."""
    return argv[0] == b"debug" and len(argv) > 1 and f"debug|{argv[1].decode()}" not in arities


# argument lists the generated ones would not reach
EXTRA_ARGVS = [
    [b"set", b"k", b"v", b"NX", b"get"], [b"set", b"k", b"v", b"GeT\x00x"], [b"set", b"k", b"v", b"GETX"],
    [b"mset", b"a", b"1", b"b"], [b"lcs", b"a", b"b", b"LEN", b"IDX"], [b"GET", b"a"], [b"OBJECT", b"ENCODING", b"k"],
    [b"object|encoding", b"k"], [b"nosuchcommand", b"k"], [b"object", b"nosuch", b"k"],
    [b"copy", b"a", b"b", b"DB", b"1"], [b"command", b"getkeys", b"get", b"k"], [b"debug", b"digest-value", b"k"],
]


def test_getkeys_and_getkeysandflags_of_every_command_are_redis_s(conns, arities):
    mvs, red = conns
    argvs = [argv for name in sorted(arities) if name != "client|setinfo"  # (not in Redis 7.0)
             and name not in NOT_IN_REDIS
             for argv in _argvs(name, arities[name])
             if name not in ARITY_EXTENDED or len(argv) <= abs(ARITY_EXTENDED[name])  # not the wider forms
             if not _debug_without_subcommand(argv, arities)] + EXTRA_ARGVS
    for argv in argvs:
        for sub in (b"GETKEYS", b"GETKEYSANDFLAGS"):
            got, want = mvs.call(b"COMMAND", sub, *argv), red.call(b"COMMAND", sub, *argv)
            assert got == want, (sub, argv, got, want)
    assert len(argvs) > 200


# -- COMMAND DOCS: the key arguments and the spec each points at ----------------------------------

def _key_args(args, out: list) -> list:
    for a in args:
        m = dict(zip(a[::2], a[1::2]))
        if m[b"type"] == b"key":
            out.append((m[b"name"], m.get(b"key_spec_index")))
        _key_args(m.get(b"arguments", []), out)
    return out


def test_docs_key_arguments_are_redis_s(conns, names):
    mvs, red = conns
    bad = {}
    for name in names:
        if name in NOT_IN_REDIS:
            continue
        got = plain(mvs.typed(b"COMMAND", b"DOCS", name.encode()))
        want = plain(red.typed(b"COMMAND", b"DOCS", name.encode()))
        g = _key_args(dict(zip(got[1][::2], got[1][1::2])).get(b"arguments", []), [])
        w = _key_args(dict(zip(want[1][::2], want[1][1::2])).get(b"arguments", []), [])
        if g != w:
            bad[name] = (g, w)
    assert not bad, bad
