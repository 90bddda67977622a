"""Key specs (``table.py``) against Redis 7.0.15: the spec model and its grammar, Redis's
getKeysUsingKeySpecs and getKeysFromCommandWithSpecs, the legacy first/last/step derived
from the specs, and the COMMAND INFO / GETKEYS / GETKEYSANDFLAGS replies built from them.

Every expected reply here is a literal recorded from a stock redis-server 7.0.15 (none runs
in these tests): ``COMMAND INFO <name>`` and ``COMMAND GETKEYS|GETKEYSANDFLAGS <argv>`` for
the same arguments, decoded from RESP2. The commands marekvs does not have yet (ZUNIONSTORE,
XREAD, EVAL, LMPOP, SINTERCARD, GEORADIUS, MIGRATE, SORT, BITFIELD) are declared below as
Redis declares them; once a family adds one, the node's own declaration is the one checked.
``tests/integration/test_command_introspection.py`` compares every command marekvs has
with a live redis-server.
"""

from __future__ import annotations

import hiredis
import pytest

from marekvs.commands import docs
from marekvs.commands.table import (GETKEYS_PROCS, UNKNOWN, Command, KeyFlag, KeySpec, command, index,
                                    keynum, keyword, legacy_range, parse_specs, range_)
from marekvs.config import Config
from marekvs.node import Node
from marekvs.server import resp


class E(str):
    """An error reply (its text, as redis-server sends it)."""


def wire(value, proto: int = 2):
    """A reply value as a client decodes it from the wire (errors as ``E``)."""
    reader = hiredis.Reader()
    reader.feed(resp.encode(value, proto))
    out = reader.gets()
    return E(str(out)) if isinstance(out, hiredis.ReplyError) else out


def spec(text: str) -> KeySpec:
    return KeySpec.parse(text)


# -- the grammar ------------------------------------------------------------------------------

def test_grammar_reads_every_form():
    assert spec("RW ACCESS DELETE index 1 range 0") == KeySpec(
        KeyFlag.RW | KeyFlag.ACCESS | KeyFlag.DELETE, index(1), range_(0, 1, 0))
    assert spec("OW UPDATE index 1 range -1 2") == KeySpec("OW UPDATE", index(1), range_(-1, 2))
    assert spec("RO ACCESS keyword STREAMS 1 range -1 1 2") == KeySpec(
        "RO ACCESS", keyword("STREAMS", 1), range_(-1, 1, 2))
    assert spec("RO ACCESS index 2 keynum 0 1 1") == KeySpec("RO ACCESS", index(2), keynum(0, 1, 1))
    assert spec("RW ACCESS DELETE INCOMPLETE keyword KEYS -2 range -1") == KeySpec(
        "RW ACCESS DELETE INCOMPLETE", keyword("KEYS", -2), range_(-1))
    assert spec("OW UPDATE unknown unknown") == KeySpec("OW UPDATE", UNKNOWN, UNKNOWN)
    assert spec("NOT_KEY index 1 range 0").flags == KeyFlag.NOT_KEY


def test_grammar_notes_in_parentheses():
    s = spec("RW ACCESS UPDATE VARIABLE_FLAGS index 1 range 0 (RW and ACCESS due to the optional `GET` argument)")
    assert s.notes == "RW and ACCESS due to the optional `GET` argument"
    assert s.flags == KeyFlag.RW | KeyFlag.ACCESS | KeyFlag.UPDATE | KeyFlag.VARIABLE_FLAGS
    assert spec("RO index 1 range 0").notes == ""


@pytest.mark.parametrize("text", [
    "RX index 1 range 0",  # no such flag
    "RO access index 1 range 0",  # flags are upper case
    "RO index 1",  # no find_keys
    "RO range 0",  # no begin_search
    "RO index 1 range 0 1 0 9",  # left over
    "RO index 0 range 0",  # argument 0 is the command name
    "RO index 1 range 0 0",  # keystep 0 would never end
    "RO index 1 range -2 1 2",  # a limit needs lastkey -1 (Redis asserts it)
    "RO index 1 keynum 0 0 1",  # the keys come after their count
    "RO index 1 keynum 0 1",  # keynum has three numbers
    "RO keyword STREAMS range -1",  # keyword needs startfrom
])
def test_grammar_rejects_at_declaration(text):
    with pytest.raises(ValueError):
        spec(text)


def test_parse_specs_takes_one_or_several():
    one = parse_specs("RO ACCESS index 1 range 0")
    assert one == (spec("RO ACCESS index 1 range 0"),)
    several = parse_specs(["OW UPDATE index 1 range 0", KeySpec("RO ACCESS", index(2), keynum(0, 1, 1))])
    assert [s.find_keys for s in several] == [range_(0), keynum(0, 1, 1)]


def test_legacy_keys_tuple_becomes_one_range_spec():
    w = Command("w", None, -3, ("write",), 1, -1, 2)
    assert w.key_specs == (KeySpec(KeyFlag.RW, index(1), range_(-1, 2)),)
    assert (w.first_key, w.last_key, w.step) == (1, -1, 2)
    r = Command("r", None, 3, ("readonly",), 1, 2, 1)
    assert r.key_specs == (KeySpec(KeyFlag.RO, index(1), range_(1)),)
    assert (r.first_key, r.last_key, r.step) == (1, 2, 1)
    assert Command("n", None, 1, ()).key_specs == ()


def test_specs_and_keys_tuple_are_exclusive():
    with pytest.raises(ValueError):
        Command("x", None, 2, ("write",), 1, 1, 1, key_specs=parse_specs("RW index 1 range 0"))


# -- getKeysUsingKeySpecs ------------------------------------------------------------------------

def argv(*words: str) -> list[bytes]:
    return [w.encode() for w in words]


def positions(text: str, *words: str):
    found = spec(text).positions(argv(*words))
    return None if found is None else list(found)


def test_keyword_search_forwards_stops_before_the_last_argument():
    s = "RO keyword STREAMS 1 range -1 1 2"
    assert positions(s, "xread", "STREAMS", "a", "0") == [2]
    assert positions(s, "xread", "count", "1", "streams", "a", "b", "0", "0") == [4, 5]
    # the last argument is never compared: a keyword there would have no keys after it
    assert positions(s, "xread", "COUNT", "2", "a", "STREAMS") == []
    # a keyword that is not there skips the spec (an empty result, not an invalid one)
    assert positions(s, "xread", "COUNT", "2", "NOSTREAMS", "a", "b") == []
    # the first match wins, even as an option's value
    assert positions(s, "xread", "COUNT", "STREAMS", "STREAMS", "s1", "0") == [3]


def test_keyword_compares_as_strcasecmp_on_c_strings():
    s = spec("RO keyword STREAMS 1 range -1 1 2")
    assert list(s.positions([b"xread", b"sTrEaMs\x00junk", b"a", b"0"])) == [2]
    assert list(s.positions([b"xread", b"STREAMSX", b"a", b"0"])) == []


def test_keyword_search_backwards_from_the_end():
    s = "RW INCOMPLETE keyword KEYS -2 range -1"
    # from argc-2 down to 2 (argument 1 is never compared)
    assert positions(s, "migrate", "h", "p", "", "0", "5000", "KEYS", "a", "b") == [7, 8]
    assert positions(s, "migrate", "h", "p", "", "0", "5000", "KEYS", "a", "KEYS", "b") == [9]
    assert positions(s, "migrate", "h", "p", "", "0", "5000", "COPY", "KEYS") == []
    assert positions(s, "x", "KEYS", "a") == []  # argument 1 is not searched


def test_range_last_key_negative_counts_from_the_end():
    assert positions("RM index 1 range -1", "del", "a", "b", "c") == [1, 2, 3]
    assert positions("OW index 1 range -1 2", "mset", "a", "1", "b") == [1, 3]
    assert positions("RO index 1 range -2", "x", "a", "b", "c") == [1, 2]
    assert positions("RO index 1 range 1", "lcs", "a", "b", "LEN") == [1, 2]


def test_range_limit_takes_a_share_of_the_rest():
    s = "RO keyword STREAMS 1 range -1 1 2"
    assert positions(s, "xread", "STREAMS", "a", "b", "c", "1", "2", "3") == [2, 3, 4]
    assert positions(s, "xread", "STREAMS", "a", "b", "1") == [2]  # 3 // 2 = 1 key
    assert positions(s, "xread", "COUNT", "1", "STREAMS", "a") is None  # 1 // 2 = no key: invalid
    assert positions("RO index 1 range -1 1 3", "x", "a", "b", "c", "d", "e", "f") == [1, 2]


def test_keynum_bounds():
    s = "RO ACCESS index 2 keynum 0 1 1"
    assert positions(s, "eval", "s", "2", "k1", "k2", "a1") == [3, 4]
    assert positions(s, "eval", "s", "0") is None  # no keys: last < first
    assert positions(s, "eval", "s", "3", "k1", "k2") is None  # past the end
    assert positions(s, "eval", "s", "-1", "k1") is None
    for bad in ("01", " 2", "2 ", "+2", "x", "1\x00", "", "99999999999999999999"):
        assert positions(s, "eval", "s", bad, "k1", "k2") is None, bad  # string2ll refuses
    # Redis casts the count to an int: 2**32 + 2 keys is 2 keys
    assert positions(s, "eval", "s", "4294967298", "k1", "k2") == [3, 4]
    assert positions(s, "eval") is None  # no count argument at all
    # the count is of arguments from the first key, whatever the step (Redis's arithmetic)
    assert positions("RO index 1 keynum 0 1 2", "x", "4", "a", "v", "b", "v") == [2, 4]
    assert positions("RO index 1 keynum 0 1 2", "x", "2", "a", "v", "b", "v") == [2]


def test_unknown_steps_are_invalid():
    assert spec("RO unknown unknown").positions(argv("sort", "k")) is None
    assert spec("RO index 1 unknown").positions(argv("sort", "k")) is None


def test_spec_key_refs_invalid_incomplete_partial_and_not_key():
    zunion = Command("zunionstore", None, -4, ("write",), key_specs=parse_specs(
        ["OW UPDATE index 1 range 0", "RO ACCESS index 2 keynum 0 1 1"]))
    a = argv("zunionstore", "d", "2", "a", "b")
    assert zunion.spec_key_refs(a) == [(1, KeyFlag.OW | KeyFlag.UPDATE), (3, KeyFlag.RO | KeyFlag.ACCESS),
                                       (4, KeyFlag.RO | KeyFlag.ACCESS)]
    bad = argv("zunionstore", "d", "5", "a", "b")
    assert zunion.spec_key_refs(bad) is None  # one invalid spec: no keys at all
    assert zunion.spec_key_refs(bad, partial=True) == [(1, KeyFlag.OW | KeyFlag.UPDATE)]

    migrate = Command("migrate", None, -6, ("write",), key_specs=parse_specs(
        ["RW ACCESS DELETE index 3 range 0", "RW ACCESS DELETE INCOMPLETE keyword KEYS -2 range -1"]))
    m = argv("migrate", "h", "p", "", "0", "5000", "KEYS", "a", "b")
    assert migrate.spec_key_refs(m) is None  # incomplete: only the getkeys procedure knows
    assert [i for i, _ in migrate.spec_key_refs(m, partial=True)] == [3, 7, 8]
    assert [i for i, _ in migrate.spec_key_refs(argv("migrate", "h", "p", "k", "0", "5000"))] == [3]

    fake = Command("f", None, -2, (), key_specs=parse_specs(["NOT_KEY index 1 range 0", "RO index 2 range 0"]))
    assert [i for i, _ in fake.spec_key_refs(argv("f", "chan", "k"))] == [2]
    assert [i for i, _ in fake.spec_key_refs(argv("f", "chan", "k"), not_keys=True)] == [1, 2]
    assert fake.has_keys
    only_fake = Command("g", None, -2, (), key_specs=parse_specs("NOT_KEY index 1 range 0"))
    assert not only_fake.has_keys and only_fake.key_refs(argv("g", "x")) == []


def test_key_refs_prefers_reliable_specs_then_the_getkeys_procedure():
    # VARIABLE_FLAGS: the specs are not used even when valid
    set_ = Command("set", None, -3, ("write",), key_specs=parse_specs(
        "RW ACCESS UPDATE VARIABLE_FLAGS index 1 range 0"), getkeys=GETKEYS_PROCS["set"])
    assert set_.key_refs(argv("set", "k", "v")) == [(1, KeyFlag.OW | KeyFlag.UPDATE)]
    # without a procedure, an invalid spec means no keys
    bare = Command("z", None, -4, ("write",), key_specs=parse_specs(
        ["OW UPDATE index 1 range 0", "RO ACCESS index 2 keynum 0 1 1"]))
    assert bare.key_refs(argv("z", "d", "1x", "a")) == []
    with_proc = Command("z", None, -4, ("write",), key_specs=bare.key_specs,
                        getkeys=GETKEYS_PROCS["zunion_inter_diff_store"])
    assert with_proc.key_refs(argv("z", "d", "1x", "a")) == [(3, KeyFlag(0)), (1, KeyFlag(0))]
    assert with_proc.keys_of(argv("z", "d", "2", "a", "b")) == [b"d", b"a", b"b"]


# -- the legacy (first, last, step) and movablekeys --------------------------------------------

@pytest.mark.parametrize("specs, legacy", [
    ([], (0, 0, 0)),
    (["RO index 1 range 0"], (1, 1, 1)),
    (["OW index 1 range -1 2"], (1, -1, 2)),  # one range spec shows as it is, step and all
    (["RO index 1 range 1"], (1, 2, 1)),
    (["RW index 1 range 0", "OW index 2 range 0"], (1, 2, 1)),  # RENAME: glued
    (["OW index 2 range 0", "RO index 3 range -1"], (2, -1, 1)),  # BITOP: a negative last wins
    (["RO index 1 range -1", "OW index 2 range 0"], (1, -1, 1)),  # (compared unsigned)
    (["OW index 1 range 0", "RO index 2 range -1 2"], (0, 0, 0)),  # a step of 2 among several
    (["OW index 1 range 0", "RO index 2 keynum 0 1 1"], (1, 1, 1)),  # ZUNIONSTORE
    (["RO keyword STREAMS 1 range -1 1 2"], (0, 0, 0)),  # XREAD
    (["RO index 2 keynum 0 1 1"], (0, 0, 0)),  # EVAL
    (["RW index 3 range 0", "RW INCOMPLETE keyword KEYS -2 range -1"], (3, 3, 1)),  # MIGRATE
    (["RO index 1 range 0", "RO unknown unknown", "OW unknown unknown"], (1, 1, 1)),  # SORT
    (["RO index 3 range 0", "RO index 1 range 0"], (1, 3, 1)),  # order does not matter here
])
def test_legacy_range_as_redis_populates_it(specs, legacy):
    assert legacy_range(parse_specs(specs)) == legacy


# -- commands declared as Redis 7.0.15 declares them, COMMAND INFO recorded from it ------------

def redis_like(name, arity, flags, acl, specs, getkeys=None) -> Command:
    return Command(name, None, arity, tuple(flags.split()), acl=tuple(acl.split()),
                   key_specs=parse_specs(specs), getkeys=GETKEYS_PROCS[getkeys] if getkeys else None)


REDIS_LIKE = {c.name: c for c in [
    redis_like("zunionstore", -4, "write denyoom", "write sortedset slow",
               ["OW UPDATE index 1 range 0", "RO ACCESS index 2 keynum 0 1 1"], "zunion_inter_diff_store"),
    redis_like("xread", -4, "readonly blocking", "read stream slow blocking",
               "RO ACCESS keyword STREAMS 1 range -1 1 2", "xread"),
    redis_like("eval", -3, "noscript stale skip_monitor may_replicate no_mandatory_keys", "slow scripting",
               "RW ACCESS UPDATE index 2 keynum 0 1 1 (We cannot tell how the keys will be used so we "
               "assume the worst, RW and UPDATE)", "eval"),
    redis_like("lmpop", -4, "write", "write list slow", "RW ACCESS DELETE index 1 keynum 0 1 1", "lmpop"),
    redis_like("sintercard", -3, "readonly", "read set slow", "RO ACCESS index 1 keynum 0 1 1", "sintercard"),
    redis_like("georadius", -6, "write denyoom", "write geo slow",
               ["RO ACCESS index 1 range 0", "OW UPDATE keyword STORE 6 range 0",
                "OW UPDATE keyword STOREDIST 6 range 0"], "georadius"),
    redis_like("migrate", -6, "write", "keyspace write slow dangerous",
               ["RW ACCESS DELETE index 3 range 0", "RW ACCESS DELETE INCOMPLETE keyword KEYS -2 range -1"],
               "migrate"),
    redis_like("sort", -2, "write denyoom", "write set sortedset list slow dangerous",
               ["RO ACCESS index 1 range 0",
                "RO ACCESS unknown unknown (For the optional BY/GET keyword. It is marked 'unknown' because "
                "the key names derive from the content of the key we sort)",
                "OW UPDATE unknown unknown (For the optional STORE keyword. It is marked 'unknown' because the "
                "keyword can appear anywhere in the argument array)"], "sort"),
    redis_like("bitfield", -2, "write denyoom", "write bitmap slow",
               "RW ACCESS UPDATE VARIABLE_FLAGS index 1 range 0 (This command allows both access and "
               "modification of the key)", "bitfield"),
]}

# COMMAND INFO <name>, recorded (RESP2). Element 7, the command tips, is not compared: marekvs
# does not model tips (MIGRATE's is "nondeterministic_output").
REDIS_COMMAND_INFO = {
    'zunionstore':
        [b'zunionstore', -4, [b'write', b'denyoom', b'movablekeys'], 1, 1, 1,
         [b'@write', b'@sortedset', b'@slow'], [],
         [[b'flags', [b'OW', b'update'], b'begin_search', [b'type', b'index', b'spec', [b'index', 1]],
           b'find_keys', [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]],
          [b'flags', [b'RO', b'access'], b'begin_search', [b'type', b'index', b'spec', [b'index', 2]],
           b'find_keys', [b'type', b'keynum', b'spec', [b'keynumidx', 0, b'firstkey', 1, b'keystep', 1]]]],
         []],
    'xread':
        [b'xread', -4, [b'readonly', b'blocking', b'movablekeys'], 0, 0, 0,
         [b'@read', b'@stream', b'@slow', b'@blocking'], [],
         [[b'flags', [b'RO', b'access'], b'begin_search',
           [b'type', b'keyword', b'spec', [b'keyword', b'STREAMS', b'startfrom', 1]], b'find_keys',
           [b'type', b'range', b'spec', [b'lastkey', -1, b'keystep', 1, b'limit', 2]]]],
         []],
    'eval':
        [b'eval', -3, [b'noscript', b'stale', b'skip_monitor', b'no_mandatory_keys', b'movablekeys'], 0, 0,
         0, [b'@slow', b'@scripting'], [],
         [[b'notes', b'We cannot tell how the keys will be used so we assume the worst, RW and UPDATE',
           b'flags', [b'RW', b'access', b'update'], b'begin_search',
           [b'type', b'index', b'spec', [b'index', 2]], b'find_keys',
           [b'type', b'keynum', b'spec', [b'keynumidx', 0, b'firstkey', 1, b'keystep', 1]]]],
         []],
    'lmpop':
        [b'lmpop', -4, [b'write', b'movablekeys'], 0, 0, 0, [b'@write', b'@list', b'@slow'], [],
         [[b'flags', [b'RW', b'access', b'delete'], b'begin_search',
           [b'type', b'index', b'spec', [b'index', 1]], b'find_keys',
           [b'type', b'keynum', b'spec', [b'keynumidx', 0, b'firstkey', 1, b'keystep', 1]]]],
         []],
    'sintercard':
        [b'sintercard', -3, [b'readonly', b'movablekeys'], 0, 0, 0, [b'@read', b'@set', b'@slow'], [],
         [[b'flags', [b'RO', b'access'], b'begin_search', [b'type', b'index', b'spec', [b'index', 1]],
           b'find_keys', [b'type', b'keynum', b'spec', [b'keynumidx', 0, b'firstkey', 1, b'keystep', 1]]]],
         []],
    'georadius':
        [b'georadius', -6, [b'write', b'denyoom', b'movablekeys'], 1, 1, 1, [b'@write', b'@geo', b'@slow'],
         [],
         [[b'flags', [b'RO', b'access'], b'begin_search', [b'type', b'index', b'spec', [b'index', 1]],
           b'find_keys', [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]],
          [b'flags', [b'OW', b'update'], b'begin_search',
           [b'type', b'keyword', b'spec', [b'keyword', b'STORE', b'startfrom', 6]], b'find_keys',
           [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]],
          [b'flags', [b'OW', b'update'], b'begin_search',
           [b'type', b'keyword', b'spec', [b'keyword', b'STOREDIST', b'startfrom', 6]], b'find_keys',
           [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]]],
         []],
    'migrate':
        [b'migrate', -6, [b'write', b'movablekeys'], 3, 3, 1,
         [b'@keyspace', b'@write', b'@slow', b'@dangerous'], [b'nondeterministic_output'],
         [[b'flags', [b'RW', b'access', b'delete'], b'begin_search',
           [b'type', b'index', b'spec', [b'index', 3]], b'find_keys',
           [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]],
          [b'flags', [b'RW', b'access', b'delete', b'incomplete'], b'begin_search',
           [b'type', b'keyword', b'spec', [b'keyword', b'KEYS', b'startfrom', -2]], b'find_keys',
           [b'type', b'range', b'spec', [b'lastkey', -1, b'keystep', 1, b'limit', 0]]]],
         []],
    'sort':
        [b'sort', -2, [b'write', b'denyoom', b'movablekeys'], 1, 1, 1,
         [b'@write', b'@set', b'@sortedset', b'@list', b'@slow', b'@dangerous'], [],
         [[b'flags', [b'RO', b'access'], b'begin_search', [b'type', b'index', b'spec', [b'index', 1]],
           b'find_keys', [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]],
          [b'notes',
           b"For the optional BY/GET keyword. It is marked 'unknown' because the key names derive from th"
           b'e content of the key we sort',
           b'flags', [b'RO', b'access'], b'begin_search', [b'type', b'unknown', b'spec', []], b'find_keys',
           [b'type', b'unknown', b'spec', []]],
          [b'notes',
           b"For the optional STORE keyword. It is marked 'unknown' because the keyword can appear anywhe"
           b're in the argument array',
           b'flags', [b'OW', b'update'], b'begin_search', [b'type', b'unknown', b'spec', []], b'find_keys',
           [b'type', b'unknown', b'spec', []]]],
         []],
    'bitfield':
        [b'bitfield', -2, [b'write', b'denyoom'], 1, 1, 1, [b'@write', b'@bitmap', b'@slow'], [],
         [[b'notes', b'This command allows both access and modification of the key', b'flags',
           [b'RW', b'access', b'update', b'variable_flags'], b'begin_search',
           [b'type', b'index', b'spec', [b'index', 1]], b'find_keys',
           [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]]],
         []],
}


@pytest.mark.parametrize("name", sorted(REDIS_LIKE))
def test_command_info_of_redis_declarations_matches_redis(name):
    got = wire(docs.info_reply(REDIS_LIKE[name]))
    want = REDIS_COMMAND_INFO[name]
    assert got[:7] == want[:7]  # name, arity, flags (movablekeys derived), legacy keys, ACL
    assert got[8:] == want[8:]  # the key specs, notes and all; subcommands
    assert got[7] == []  # tips: not modelled


def test_a_family_declares_a_keynum_command_in_one_declaration():
    # what a sorted-set family will write for ZUNIONSTORE: the decorator is all it takes
    @command("zunionstore", -4, "write denyoom", group="sorted-set", acl="write sortedset slow",
             specs=("OW UPDATE index 1 range 0", "RO ACCESS index 2 keynum 0 1 1"),
             getkeys="zunion_inter_diff_store")
    def zunionstore(ctx, args):
        raise AssertionError("not run")

    (cmd,) = zunionstore.__commands__
    got, want = wire(docs.info_reply(cmd)), REDIS_COMMAND_INFO["zunionstore"]
    assert got[:7] + got[8:] == want[:7] + want[8:]
    assert cmd.keys_of(argv("zunionstore", "d", "2", "a", "b", "WEIGHTS", "1", "2")) == [b"d", b"a", b"b"]
    assert cmd.keys_of(argv("zunionstore", "d", "01", "a")) == [b"a", b"d"]  # Redis's procedure


def test_movablekeys_is_derived_from_the_specs():
    # Redis 7.0.15: a spec other than index+range makes the keys movable; getkeys
    # procedures and VARIABLE_FLAGS do not (SET and BITFIELD are not movablekeys)
    assert {n for n, c in REDIS_LIKE.items() if c.movablekeys} == {
        "zunionstore", "xread", "eval", "lmpop", "sintercard", "georadius", "migrate", "sort"}
    assert "movablekeys" not in docs.command_flags(REDIS_LIKE["bitfield"])


# -- COMMAND GETKEYS / GETKEYSANDFLAGS through a node ---------------------------------------------

@pytest.fixture(scope="module")
def node(tmp_path_factory):
    """A real node whose table also has the Redis declarations above (the ones it lacks)."""
    n = Node(Config(data_dir=str(tmp_path_factory.mktemp("keyspecs") / "db"), node_id=1, durability="no"))
    for name, cmd in REDIS_LIKE.items():
        if name.encode() not in n.table.commands:
            n.table.add(cmd)
    yield n
    n.close()


def run(node, *args: bytes, proto: int = 2):
    ctx = node.new_context()
    ctx.proto = proto
    try:
        return wire(node.dispatch(ctx, list(args)), proto)
    finally:
        node.drop_context(ctx)


# (argv, COMMAND GETKEYS argv, COMMAND GETKEYSANDFLAGS argv), as redis-server 7.0.15 answered
GETKEYS_CASES = [
    # ZUNIONSTORE: destination at 1, then numkeys at 2 (keynum)
    ([b'zunionstore', b'd', b'2', b'a', b'b', b'WEIGHTS', b'1', b'2'],
     [b'd', b'a', b'b'],
     [(b'd', ['OW', 'update']), (b'a', ['RO', 'access']), (b'b', ['RO', 'access'])]),
    ([b'zunionstore', b'd', b'0', b'a'],
     E('ERR Invalid arguments specified for command'),
     E('ERR Invalid arguments specified for command')),
    ([b'zunionstore', b'd', b'3', b'a', b'b'],
     E('ERR Invalid arguments specified for command'),
     E('ERR Invalid arguments specified for command')),
    ([b'zunionstore', b'd', b'-1', b'a'],
     E('ERR Invalid arguments specified for command'),
     E('ERR Invalid arguments specified for command')),
    ([b'zunionstore', b'd', b'1x', b'a'],
     [b'a', b'd'],
     [(b'a', []), (b'd', [])]),
    ([b'zunionstore', b'd', b' 2', b'a', b'b'],
     [b'a', b'b', b'd'],
     [(b'a', []), (b'b', []), (b'd', [])]),
    ([b'zunionstore', b'd', b'01', b'a'],
     [b'a', b'd'],
     [(b'a', []), (b'd', [])]),
    ([b'zunionstore', b'd', b'4294967297', b'a'],
     [b'd', b'a'],
     [(b'd', ['OW', 'update']), (b'a', ['RO', 'access'])]),
    ([b'zunionstore', b'd', b'1', b'a', b'AGGREGATE', b'MIN'],
     [b'd', b'a'],
     [(b'd', ['OW', 'update']), (b'a', ['RO', 'access'])]),
    # XREAD: keyword STREAMS from 1, range -1 step 1 limit 2 (half of the rest)
    ([b'xread', b'COUNT', b'2', b'STREAMS', b's1', b's2', b'0', b'0'],
     [b's1', b's2'],
     [(b's1', ['RO', 'access']), (b's2', ['RO', 'access'])]),
    ([b'xread', b'COUNT', b'2', b'STREAMS', b's1', b's2', b'0'],
     [b's1'],
     [(b's1', ['RO', 'access'])]),
    ([b'xread', b'COUNT', b'1', b'STREAMS', b's1'],
     E('ERR Invalid arguments specified for command'),
     E('ERR Invalid arguments specified for command')),
    ([b'xread', b'BLOCK', b'0', b'streams', b'a', b'b', b'1', b'2'],
     [b'a', b'b'],
     [(b'a', ['RO', 'access']), (b'b', ['RO', 'access'])]),
    ([b'xread', b'COUNT', b'2', b'STREAMS', b'streams', b's2', b'0', b'0'],
     [b'streams', b's2'],
     [(b'streams', ['RO', 'access']), (b's2', ['RO', 'access'])]),
    ([b'xread', b'COUNT', b'STREAMS', b'STREAMS', b's1', b'0'],
     [b'STREAMS'],
     [(b'STREAMS', ['RO', 'access'])]),
    ([b'xread', b'COUNT', b'2', b'NOSTREAMS', b'a', b'b'],
     E('ERR Invalid arguments specified for command'),
     E('ERR Invalid arguments specified for command')),
    ([b'xread', b'COUNT', b'2', b'a', b'STREAMS'],
     E('ERR Invalid arguments specified for command'),
     E('ERR Invalid arguments specified for command')),
    ([b'xread', b'COUNT', b'2', b'STREAMS\x00x', b's1', b'0'],
     [b's1'],
     [(b's1', ['RO', 'access'])]),
    ([b'xread', b'STREAMS', b'a', b'b', b'c', b'1', b'2', b'3'],
     [b'a', b'b', b'c'],
     [(b'a', ['RO', 'access']), (b'b', ['RO', 'access']), (b'c', ['RO', 'access'])]),
    # EVAL: keynum at 2; no_mandatory_keys (no keys is an empty array)
    ([b'eval', b'return 1', b'2', b'k1', b'k2', b'a1'],
     [b'k1', b'k2'],
     [(b'k1', ['RW', 'access', 'update']), (b'k2', ['RW', 'access', 'update'])]),
    ([b'eval', b'return 1', b'0'],
     [],
     []),
    ([b'eval', b'return 1', b'3', b'k1', b'k2'],
     [],
     []),
    ([b'eval', b'return 1', b'x', b'k1'],
     [],
     []),
    ([b'eval', b'return 1', b'-1', b'k1'],
     [],
     []),
    ([b'eval', b'return 1', b'01', b'k1', b'k2'],
     [b'k1'],
     [(b'k1', [])]),
    ([b'eval', b'return 1', b'4294967298', b'k1', b'k2'],
     [b'k1', b'k2'],
     [(b'k1', ['RW', 'access', 'update']), (b'k2', ['RW', 'access', 'update'])]),
    ([b'eval', b'return 1', b'1', b'k1', b'k2'],
     [b'k1'],
     [(b'k1', ['RW', 'access', 'update'])]),
    ([b'eval', b'return 1', b'99999999999999999999', b'k1'],
     [],
     []),
    # LMPOP / SINTERCARD: keynum at 1
    ([b'lmpop', b'2', b'a', b'b', b'LEFT'],
     [b'a', b'b'],
     [(b'a', ['RW', 'access', 'delete']), (b'b', ['RW', 'access', 'delete'])]),
    ([b'lmpop', b'0', b'a', b'LEFT'],
     E('ERR Invalid arguments specified for command'),
     E('ERR Invalid arguments specified for command')),
    ([b'lmpop', b'3', b'a', b'b', b'LEFT'],
     [b'a', b'b', b'LEFT'],
     [(b'a', ['RW', 'access', 'delete']), (b'b', ['RW', 'access', 'delete']), (b'LEFT', ['RW', 'access', 'delete'])]),
    ([b'lmpop', b'1', b'a', b'RIGHT', b'COUNT', b'2'],
     [b'a'],
     [(b'a', ['RW', 'access', 'delete'])]),
    ([b'sintercard', b'2', b'a', b'b'],
     [b'a', b'b'],
     [(b'a', ['RO', 'access']), (b'b', ['RO', 'access'])]),
    ([b'sintercard', b'2', b'a', b'b', b'LIMIT', b'1'],
     [b'a', b'b'],
     [(b'a', ['RO', 'access']), (b'b', ['RO', 'access'])]),
    ([b'sintercard', b'3', b'a', b'b'],
     E('ERR Invalid arguments specified for command'),
     E('ERR Invalid arguments specified for command')),
    ([b'sintercard', b'1', b'a'],
     [b'a'],
     [(b'a', ['RO', 'access'])]),
    # GEORADIUS: index 1, keywords STORE / STOREDIST searched from 6
    ([b'georadius', b'k', b'0', b'0', b'1', b'km', b'STORE', b'd'],
     [b'k', b'd'],
     [(b'k', ['RO', 'access']), (b'd', ['OW', 'update'])]),
    ([b'georadius', b'k', b'0', b'0', b'1', b'km', b'STORE', b'd', b'STOREDIST', b'd2'],
     [b'k', b'd', b'd2'],
     [(b'k', ['RO', 'access']), (b'd', ['OW', 'update']), (b'd2', ['OW', 'update'])]),
    ([b'georadius', b'k', b'0', b'0', b'1', b'km', b'STORE'],
     [b'k'],
     [(b'k', ['RO', 'access'])]),
    ([b'georadius', b'k', b'0', b'0', b'1', b'km', b'WITHDIST'],
     [b'k'],
     [(b'k', ['RO', 'access'])]),
    ([b'georadius', b'k', b'0', b'0', b'1', b'STORE', b'x'],
     [b'k'],
     [(b'k', ['RO', 'access'])]),
    ([b'georadius', b'k', b'0', b'0', b'1', b'km', b'storedist', b'd', b'store', b'e'],
     [b'k', b'e', b'd'],
     [(b'k', ['RO', 'access']), (b'e', ['OW', 'update']), (b'd', ['OW', 'update'])]),
    # MIGRATE: index 3, INCOMPLETE keyword KEYS searched backwards from -2
    ([b'migrate', b'h', b'p', b'k', b'0', b'5000'],
     [b'k'],
     [(b'k', ['RW', 'access', 'delete'])]),
    ([b'migrate', b'h', b'p', b'', b'0', b'5000', b'KEYS', b'a', b'b'],
     [b'a', b'b'],
     [(b'a', ['RW', 'access', 'delete']), (b'b', ['RW', 'access', 'delete'])]),
    ([b'migrate', b'h', b'p', b'k', b'0', b'5000', b'KEYS', b'a', b'b'],
     E('ERR Invalid arguments specified for command'),
     E('ERR Invalid arguments specified for command')),
    ([b'migrate', b'h', b'p', b'', b'0', b'5000'],
     [b''],
     [(b'', ['RW', 'access', 'delete'])]),
    ([b'migrate', b'h', b'p', b'', b'0', b'5000', b'COPY', b'KEYS'],
     [b''],
     [(b'', ['RW', 'access', 'delete'])]),
    ([b'migrate', b'h', b'p', b'', b'0', b'5000', b'REPLACE', b'keys', b'a'],
     [b'a'],
     [(b'a', ['RW', 'access', 'delete'])]),
    # SORT: unknown specs -> Redis's sortGetKeys
    ([b'sort', b'k'],
     [b'k'],
     [(b'k', ['RO', 'access'])]),
    ([b'sort', b'k', b'STORE', b'd'],
     [b'k', b'd'],
     [(b'k', ['RO', 'access']), (b'd', ['OW', 'update'])]),
    ([b'sort', b'k', b'LIMIT', b'0', b'1', b'STORE', b'd'],
     [b'k', b'd'],
     [(b'k', ['RO', 'access']), (b'd', ['OW', 'update'])]),
    ([b'sort', b'k', b'STORE'],
     [b'k'],
     [(b'k', ['RO', 'access'])]),
    ([b'sort', b'k', b'GET', b'#', b'STORE', b'd', b'BY', b'x', b'STORE', b'e'],
     [b'k', b'e'],
     [(b'k', ['RO', 'access']), (b'e', ['OW', 'update'])]),
    ([b'sort', b'k', b'GET', b'store', b'd'],
     [b'k'],
     [(b'k', ['RO', 'access'])]),
    ([b'sort', b'k', b'STORE', b'limit', b'1', b'2'],
     [b'k', b'limit'],
     [(b'k', ['RO', 'access']), (b'limit', ['OW', 'update'])]),
    # BITFIELD: VARIABLE_FLAGS -> Redis's bitfieldGetKeys
    ([b'bitfield', b'k', b'GET', b'u8', b'0'],
     [b'k'],
     [(b'k', ['RO', 'access'])]),
    ([b'bitfield', b'k', b'SET', b'u8', b'0', b'1'],
     [b'k'],
     [(b'k', ['RW', 'access', 'update'])]),
    ([b'bitfield', b'k', b'GET', b'u8'],
     [b'k'],
     [(b'k', ['RW', 'access', 'update'])]),
    ([b'bitfield', b'k', b'SET', b'u8', b'0', b'1', b'GET', b'u8', b'0'],
     [b'k'],
     [(b'k', ['RW', 'access', 'update'])]),
    # more of MIGRATE (options skipped before KEYS), BITFIELD and SORT
    ([b'migrate', b'h', b'p', b'', b'0', b'5000', b'AUTH', b'keys', b'KEYS', b'a'],
     [b'a'],
     [(b'a', ['RW', 'access', 'delete'])]),
    ([b'migrate', b'h', b'p', b'', b'0', b'5000', b'AUTH2', b'u', b'keys', b'KEYS', b'a', b'b'],
     [b'a', b'b'],
     [(b'a', ['RW', 'access', 'delete']), (b'b', ['RW', 'access', 'delete'])]),
    ([b'migrate', b'h', b'p', b'', b'0', b'5000', b'KEYS'],
     [b''],
     [(b'', ['RW', 'access', 'delete'])]),
    ([b'migrate', b'h', b'p', b'', b'0', b'5000', b'KEYS', b'a', b'KEYS', b'b'],
     [b'a', b'KEYS', b'b'],
     [(b'a', ['RW', 'access', 'delete']), (b'KEYS', ['RW', 'access', 'delete']), (b'b', ['RW', 'access', 'delete'])]),
    ([b'bitfield', b'k'],
     [b'k'],
     [(b'k', ['RO', 'access'])]),
    ([b'bitfield', b'k', b'GET', b'u8', b'0', b'OVERFLOW', b'WRAP', b'GET', b'i8', b'1'],
     [b'k'],
     [(b'k', ['RO', 'access'])]),
    ([b'bitfield', b'k', b'OVERFLOW'],
     [b'k'],
     [(b'k', ['RW', 'access', 'update'])]),
    ([b'bitfield', b'k', b'GET', b'u8', b'0', b'INCRBY', b'u8', b'0', b'1'],
     [b'k'],
     [(b'k', ['RW', 'access', 'update'])]),
    ([b'bitfield', b'k', b'get', b'u8', b'0', b'get'],
     [b'k'],
     [(b'k', ['RW', 'access', 'update'])]),
    ([b'sort', b'k', b'by'],
     [b'k'],
     [(b'k', ['RO', 'access'])]),
    ([b'sort', b'k', b'store', b'd', b'limit'],
     [b'k', b'd'],
     [(b'k', ['RO', 'access']), (b'd', ['OW', 'update'])]),
    # SET: VARIABLE_FLAGS -> Redis's setGetKeys
    ([b'set', b'k', b'v'],
     [b'k'],
     [(b'k', ['OW', 'update'])]),
    ([b'set', b'k', b'v', b'GET'],
     [b'k'],
     [(b'k', ['RW', 'access', 'update'])]),
    ([b'set', b'k', b'v', b'NX', b'get', b'EX', b'10'],
     [b'k'],
     [(b'k', ['RW', 'access', 'update'])]),
    ([b'set', b'k', b'v', b'GeT\x00x'],
     [b'k'],
     [(b'k', ['RW', 'access', 'update'])]),
    ([b'set', b'k', b'v', b'GETX'],
     [b'k'],
     [(b'k', ['OW', 'update'])]),
    ([b'set', b'k', b'get'],
     [b'k'],
     [(b'k', ['OW', 'update'])]),
    # marekvs's own commands
    ([b'get', b'a'],
     [b'a'],
     [(b'a', ['RO', 'access'])]),
    ([b'GET', b'a'],
     [b'a'],
     [(b'a', ['RO', 'access'])]),
    ([b'mset', b'a', b'1', b'b', b'2'],
     [b'a', b'b'],
     [(b'a', ['OW', 'update']), (b'b', ['OW', 'update'])]),
    ([b'mset', b'a', b'1', b'b'],
     [b'a', b'b'],
     [(b'a', ['OW', 'update']), (b'b', ['OW', 'update'])]),
    ([b'msetnx', b'a', b'1', b'b', b'2'],
     [b'a', b'b'],
     [(b'a', ['OW', 'insert']), (b'b', ['OW', 'insert'])]),
    ([b'del', b'a', b'b', b'c'],
     [b'a', b'b', b'c'],
     [(b'a', ['RM', 'delete']), (b'b', ['RM', 'delete']), (b'c', ['RM', 'delete'])]),
    ([b'unlink', b'a'],
     [b'a'],
     [(b'a', ['RM', 'delete'])]),
    ([b'exists', b'a', b'a'],
     [b'a', b'a'],
     [(b'a', ['RO']), (b'a', ['RO'])]),
    ([b'touch', b'a', b'b'],
     [b'a', b'b'],
     [(b'a', ['RO']), (b'b', ['RO'])]),
    ([b'rename', b'a', b'b'],
     [b'a', b'b'],
     [(b'a', ['RW', 'access', 'delete']), (b'b', ['OW', 'update'])]),
    ([b'renamenx', b'a', b'b'],
     [b'a', b'b'],
     [(b'a', ['RW', 'access', 'delete']), (b'b', ['OW', 'insert'])]),
    ([b'copy', b'a', b'b', b'DB', b'1', b'REPLACE'],
     [b'a', b'b'],
     [(b'a', ['RO', 'access']), (b'b', ['OW', 'update'])]),
    ([b'lcs', b'a', b'b', b'LEN'],
     [b'a', b'b'],
     [(b'a', ['RO', 'access']), (b'b', ['RO', 'access'])]),
    ([b'object', b'encoding', b'k'],
     [b'k'],
     [(b'k', ['RO'])]),
    ([b'OBJECT', b'ENCODING', b'k'],
     [b'k'],
     [(b'k', ['RO'])]),
    ([b'object', b'freq', b'k'],
     [b'k'],
     [(b'k', ['RO'])]),
    ([b'getdel', b'k'],
     [b'k'],
     [(b'k', ['RW', 'access', 'delete'])]),
    ([b'getex', b'k', b'PERSIST'],
     [b'k'],
     [(b'k', ['RW', 'access', 'update'])]),
    ([b'getset', b'k', b'v'],
     [b'k'],
     [(b'k', ['RW', 'access', 'update'])]),
    ([b'append', b'k', b'v'],
     [b'k'],
     [(b'k', ['RW', 'insert'])]),
    ([b'setnx', b'k', b'v'],
     [b'k'],
     [(b'k', ['OW', 'insert'])]),
    ([b'setex', b'k', b'10', b'v'],
     [b'k'],
     [(b'k', ['OW', 'update'])]),
    ([b'incr', b'k'],
     [b'k'],
     [(b'k', ['RW', 'access', 'update'])]),
    ([b'expire', b'k', b'10'],
     [b'k'],
     [(b'k', ['RW', 'update'])]),
    ([b'type', b'k'],
     [b'k'],
     [(b'k', ['RO'])]),
    ([b'strlen', b'k'],
     [b'k'],
     [(b'k', ['RO'])]),
    ([b'ttl', b'k'],
     [b'k'],
     [(b'k', ['RO', 'access'])]),
    # the errors, in Redis's order of checks
    ([b'nosuch', b'a'],
     E('ERR Invalid command specified'),
     E('ERR Invalid command specified')),
    ([b'time', b'x'],
     E('ERR The command has no key arguments'),
     E('ERR The command has no key arguments')),
    ([b'get', b'a', b'b'],
     E('ERR Invalid number of arguments specified for command'),
     E('ERR Invalid number of arguments specified for command')),
    ([b'object', b'nosuch', b'k'],
     E('ERR Invalid command specified'),
     E('ERR Invalid command specified')),
    ([b'object|encoding', b'k'],
     E('ERR Invalid command specified'),
     E('ERR Invalid command specified')),
    ([b'debug', b'digest-value', b'k'],
     E('ERR The command has no key arguments'),
     E('ERR The command has no key arguments')),
    ([b'client', b'setname', b'x'],
     E('ERR The command has no key arguments'),
     E('ERR The command has no key arguments')),
    ([b'command', b'getkeys', b'get', b'a'],
     E('ERR The command has no key arguments'),
     E('ERR The command has no key arguments')),
    ([b'ping', b'x'],
     E('ERR The command has no key arguments'),
     E('ERR The command has no key arguments')),
    ([b'get'],
     E("ERR wrong number of arguments for 'command|getkeys' command"),
     E("ERR wrong number of arguments for 'command|getkeysandflags' command")),
    ([b'rename', b'a'],
     E('ERR Invalid number of arguments specified for command'),
     E('ERR Invalid number of arguments specified for command')),
    ([b'object', b'encoding'],
     E('ERR Invalid number of arguments specified for command'),
     E('ERR Invalid number of arguments specified for command')),
    ([b'set', b'k'],
     E('ERR Invalid number of arguments specified for command'),
     E('ERR Invalid number of arguments specified for command')),
    ([b'config', b'get', b'x'],
     E('ERR The command has no key arguments'),
     E('ERR The command has no key arguments')),
    ([b'echo', b'x'],
     E('ERR The command has no key arguments'),
     E('ERR The command has no key arguments')),
]


@pytest.mark.parametrize("args, keys, keys_and_flags", GETKEYS_CASES,
                         ids=[b" ".join(c[0]).decode("latin-1") for c in GETKEYS_CASES])
def test_getkeys_and_getkeysandflags_answer_like_redis(node, args, keys, keys_and_flags):
    assert run(node, b"COMMAND", b"GETKEYS", *args) == keys
    got = run(node, b"COMMAND", b"GETKEYSANDFLAGS", *args)
    if isinstance(keys_and_flags, E):
        assert got == keys_and_flags
    else:
        assert [(k, [f.decode() for f in flags]) for k, flags in got] == keys_and_flags


def test_getkeysandflags_in_resp3_is_a_set_of_flags(node):
    # recorded from redis-server 7.0.15 after HELLO 3
    ctx = node.new_context()
    ctx.proto = 3
    try:
        got = resp.encode(node.dispatch(ctx, [b"COMMAND", b"GETKEYSANDFLAGS", b"lmpop", b"2", b"a", b"b",
                                              b"LEFT"]), 3)
    finally:
        node.drop_context(ctx)
    assert got == (b"*2\r\n*2\r\n$1\r\na\r\n~3\r\n+RW\r\n+access\r\n+delete\r\n"
                   b"*2\r\n$1\r\nb\r\n~3\r\n+RW\r\n+access\r\n+delete\r\n")


def test_command_help_lists_getkeysandflags_as_redis_does(node):
    assert run(node, b"COMMAND", b"HELP") == [
        b"COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
        b"(no subcommand)",
        b"    Return details about all Redis commands.",
        b"COUNT",
        b"    Return the total number of commands in this Redis server.",
        b"LIST",
        b"    Return a list of all commands in this Redis server.",
        b"INFO [<command-name> ...]",
        b"    Return details about multiple Redis commands.",
        b"    If no command names are given, documentation details for all",
        b"    commands are returned.",
        b"DOCS [<command-name> ...]",
        b"    Return documentation details about multiple Redis commands.",
        b"    If no command names are given, documentation details for all",
        b"    commands are returned.",
        b"GETKEYS <full-command>",
        b"    Return the keys from a full Redis command.",
        b"GETKEYSANDFLAGS <full-command>",
        b"    Return the keys and the access flags from a full Redis command.",
        b"HELP",
        b"    Prints this help.",
    ]


# COMMAND INFO <name>'s key specs (element 8), recorded (RESP2)
REDIS_KEY_SPECS = {
    'get':
        [[b'flags', [b'RO', b'access'], b'begin_search', [b'type', b'index', b'spec', [b'index', 1]],
          b'find_keys', [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]]],
    'set':
        [[b'notes', b'RW and ACCESS due to the optional `GET` argument', b'flags',
          [b'RW', b'access', b'update', b'variable_flags'], b'begin_search',
          [b'type', b'index', b'spec', [b'index', 1]], b'find_keys',
          [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]]],
    'mset':
        [[b'flags', [b'OW', b'update'], b'begin_search', [b'type', b'index', b'spec', [b'index', 1]],
          b'find_keys', [b'type', b'range', b'spec', [b'lastkey', -1, b'keystep', 2, b'limit', 0]]]],
    'del':
        [[b'flags', [b'RM', b'delete'], b'begin_search', [b'type', b'index', b'spec', [b'index', 1]],
          b'find_keys', [b'type', b'range', b'spec', [b'lastkey', -1, b'keystep', 1, b'limit', 0]]]],
    'rename':
        [[b'flags', [b'RW', b'access', b'delete'], b'begin_search',
          [b'type', b'index', b'spec', [b'index', 1]], b'find_keys',
          [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]],
         [b'flags', [b'OW', b'update'], b'begin_search', [b'type', b'index', b'spec', [b'index', 2]],
          b'find_keys', [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]]],
    'copy':
        [[b'flags', [b'RO', b'access'], b'begin_search', [b'type', b'index', b'spec', [b'index', 1]],
          b'find_keys', [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]],
         [b'flags', [b'OW', b'update'], b'begin_search', [b'type', b'index', b'spec', [b'index', 2]],
          b'find_keys', [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]]],
    'lcs':
        [[b'flags', [b'RO', b'access'], b'begin_search', [b'type', b'index', b'spec', [b'index', 1]],
          b'find_keys', [b'type', b'range', b'spec', [b'lastkey', 1, b'keystep', 1, b'limit', 0]]]],
    'object|encoding':
        [[b'flags', [b'RO'], b'begin_search', [b'type', b'index', b'spec', [b'index', 2]], b'find_keys',
          [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]]],
    'getdel':
        [[b'flags', [b'RW', b'access', b'delete'], b'begin_search',
          [b'type', b'index', b'spec', [b'index', 1]], b'find_keys',
          [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]]],
    'getex':
        [[b'notes', b'RW and UPDATE because it changes the TTL', b'flags', [b'RW', b'access', b'update'],
          b'begin_search', [b'type', b'index', b'spec', [b'index', 1]], b'find_keys',
          [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]]],
    'msetnx':
        [[b'flags', [b'OW', b'insert'], b'begin_search', [b'type', b'index', b'spec', [b'index', 1]],
          b'find_keys', [b'type', b'range', b'spec', [b'lastkey', -1, b'keystep', 2, b'limit', 0]]]],
    'renamenx':
        [[b'flags', [b'RW', b'access', b'delete'], b'begin_search',
          [b'type', b'index', b'spec', [b'index', 1]], b'find_keys',
          [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]],
         [b'flags', [b'OW', b'insert'], b'begin_search', [b'type', b'index', b'spec', [b'index', 2]],
          b'find_keys', [b'type', b'range', b'spec', [b'lastkey', 0, b'keystep', 1, b'limit', 0]]]],
    'exists':
        [[b'flags', [b'RO'], b'begin_search', [b'type', b'index', b'spec', [b'index', 1]], b'find_keys',
          [b'type', b'range', b'spec', [b'lastkey', -1, b'keystep', 1, b'limit', 0]]]],
}


# COMMAND DOCS <name>: (name, key_spec_index) of its key arguments, depth first, recorded
REDIS_DOC_KEY_ARGS = {
    'get': [('key', 0)],
    'set': [('key', 0)],
    'mset': [('key', 0)],
    'del': [('key', 0)],
    'rename': [('key', 0), ('newkey', 1)],
    'renamenx': [('key', 0), ('newkey', 1)],
    'copy': [('source', 0), ('destination', 1)],
    'lcs': [('key1', 0), ('key2', 0)],
    'object|encoding': [('key', 0)],
    'getdel': [('key', 0)],
    'exists': [('key', 0)],
}


# -- marekvs's own commands: the specs they declare, against Redis's --------------------------

def lookup(node, fullname: str) -> Command:
    parent, _, sub = fullname.partition("|")
    cmd = node.table.commands[parent.encode()]
    return cmd.subcommands[sub] if sub else cmd


@pytest.mark.parametrize("name", sorted(REDIS_KEY_SPECS))
def test_key_specs_of_marekvs_commands_match_redis(node, name):
    assert run(node, b"COMMAND", b"INFO", name.encode())[0][8] == REDIS_KEY_SPECS[name]


@pytest.mark.parametrize("name", sorted(REDIS_DOC_KEY_ARGS))
def test_docs_key_arguments_point_at_their_specs(node, name):
    def key_args(args, out):
        for a in args:
            m = dict(zip(a[::2], a[1::2]))
            if m[b"type"] == b"key":
                out.append((m[b"name"].decode(), m[b"key_spec_index"]))
            key_args(m.get(b"arguments", []), out)
        return out

    reply = run(node, b"COMMAND", b"DOCS", name.encode())
    doc = dict(zip(reply[1][::2], reply[1][1::2]))
    assert key_args(doc[b"arguments"], []) == REDIS_DOC_KEY_ARGS[name]
    assert len(lookup(node, name).key_specs) > max(i for _, i in REDIS_DOC_KEY_ARGS[name])
