"""The ACL model (``commands/aclrules.py``): Redis 7.0's rules, selectors, the permission
check and the description a user record stores.

The central property: a user rebuilt from its description (what a peer does with a user
record) describes itself the same way and allows exactly what the original allows, for any
sequence of rules. The texts and shapes are compared with redis-server in
tests/integration/test_acl.py; here the expected outputs that Redis 7.0.15 printed are
written down where a case needs one.
"""

from __future__ import annotations

import hashlib

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marekvs.commands import aclrules as A
from marekvs.commands.aclrules import RuleError, User
from marekvs.commands.table import build_table

VIEW = A.CommandView(build_table())
CMD = {c.fullname: c for c in VIEW.every}


def user(*rules: str, name: bytes = b"u") -> User:
    u = User(name)
    for r in rules:
        u.set(r.encode(), VIEW)
    return u


def allowed(u: User, *argv: str) -> int:
    args = [a.encode() for a in argv]
    cmd = VIEW.lookup_argv(args)
    return u.check(VIEW, cmd, args)[0]


# -- rules and their errors -------------------------------------------------------------------

@pytest.mark.parametrize("rule, kind", [
    ("foo", "EINVAL"), ("+nocmd", "ENOENT"), ("+@nocat", "ENOENT"), ("#abc", "EBADMSG"),
    ("<nopw", "ENODEV"), ("!" + "0" * 64, "ENODEV"), ("+get|x|y", "ENOENT"), ("+client|nosub", "ENOENT"),
    ("+config|get|x", "ECHILD"), ("%X~a", "EINVAL"), ("%~a", "EINVAL"), ("(foo)", "EINVAL"),
    ("-get|x", "ENOENT"), ("~a b", "EINVAL"), ("+get|", "EINVAL"), ("#" + "A" * 64, "EBADMSG"),
])
def test_refused_rules_and_their_errno(rule, kind):
    with pytest.raises(RuleError) as e:
        user(rule)
    assert e.value.kind == kind


def test_rule_error_texts_are_redis_s():
    assert str(RuleError("ENOENT")) == "Unknown command or category name in ACL"
    assert str(RuleError("EINVAL")) == "Syntax error"
    assert str(RuleError("ECHILD")) == "Allowing first-arg of a subcommand is not supported"
    assert str(RuleError("EBADMSG")).startswith("The password hash must be exactly 64 characters")


def test_patterns_after_all_are_refused_and_all_after_patterns_replaces_them():
    with pytest.raises(RuleError) as e:
        user("allkeys", "~a")
    assert e.value.kind == "EEXIST"
    with pytest.raises(RuleError) as e:
        user("&*", "&a")
    assert e.value.kind == "EISDIR"
    assert user("~a", "~b", "allkeys").root.patterns == []


def test_accepted_odd_rules_as_redis_7_0_15():
    # what ACL LIST printed on redis-server 7.0.15 for: ~a* %RW~a %R ( ) () +select|1
    u = user("~a*", "%RW~a", "%R", "( )", "()", "+select|1", "-config|get")
    assert u.describe(VIEW) == (b"off ~a* ~a %R~ resetchannels -@all +select|1 (resetchannels -@all) "
                                b"(resetchannels -@all)")


def test_a_pattern_given_twice_joins_its_permissions():
    u = user("%R~k", "%W~k")
    assert u.root.patterns == [[b"k", A.ALL_PERMISSION]]
    assert u.root.keys_text() == b"~k"


def test_passwords_are_sha256_and_never_kept_in_clear():
    u = user(">secret", ">secret", "on")
    h = hashlib.sha256(b"secret").hexdigest().encode()
    assert u.passwords == [h]
    assert b"secret" not in u.describe(VIEW).replace(h, b"")
    assert u.password_ok(b"secret") and not u.password_ok(b"other")
    u.set(b"<secret", VIEW)
    assert u.passwords == [] and not u.password_ok(b"secret")
    assert user("nopass", "on").password_ok(b"anything")
    assert not user("nopass", "off").password_ok(b"anything")
    assert not user("nopass", "resetpass", "on").password_ok(b"")


def test_reset_is_redis_s_reset():
    u = user("on", "nopass", "~*", "&*", "+@all", "(~a +get)")
    u.set(b"reset", VIEW)
    assert u.describe(VIEW) == b"off sanitize-payload resetchannels -@all"


def test_merge_selector_args():
    assert A.merge_selector_args([b"(~a", b"+get)", b"on", b"(+set ~b)"]) == [b"(~a +get)", b"on", b"(+set ~b)"]
    with pytest.raises(A.UnmatchedParenthesis) as e:
        A.merge_selector_args([b"on", b"(~a", b"+get"])
    assert e.value.index == 1


def test_selector_rules_are_split_like_sdssplitargs():
    u = user("(~a \"+get\" '%R~b')")  # redis-server 7.0.15: commands "-@all +get", keys "~a %R~b"
    assert u.selectors[1].describe(VIEW) == b"~a %R~b resetchannels -@all +get"
    u = user('(~"a +get)')  # unbalanced quotes: an empty selector, as Redis makes
    assert u.selectors[1].describe(VIEW) == b"resetchannels -@all"


# -- describe: the command rules -----------------------------------------------------------------

@pytest.mark.parametrize("rules, described", [
    (["+@all"], b"+@all"),
    (["-@all"], b"-@all"),
    (["+@all", "-@dangerous"], b"+@all -@dangerous"),
    (["+get", "-@all", "+set", "+@hash", "-hdel"], b"-@all +@hash -hdel +set"),
    (["-@all", "+client|id", "+get", "+set"], b"-@all +client|id +get +set"),
    (["+@all", "-get", "+get"], b"+@all"),
    (["-@all", "+command"], b"-@all +command"),
    (["-@all", "+command", "-command|docs"], b"-@all +command -command|docs"),
])
def test_describe_commands_examples(rules, described):
    assert A.describe_commands(user(*rules).root, VIEW) == described


def test_first_args_are_described_after_their_command():
    u = user("-@all", "+select|0", "+select|1", "+SELECT|0")
    assert A.describe_commands(u.root, VIEW) == b"-@all +select|0 +select|1"
    assert allowed(u, "select", "0") == A.OK and allowed(u, "select", "2") == A.DENIED_CMD
    u.set(b"+select", VIEW)  # the whole command: the first args are forgotten
    assert u.root.firstargs == {}


# -- the check -------------------------------------------------------------------------------------

def test_read_and_write_patterns_follow_the_key_specs_flags():
    u = user("on", "+@all", "%R~r*", "%W~w*", "~rw*")
    assert allowed(u, "get", "r1") == A.OK
    assert allowed(u, "set", "r1", "v") == A.DENIED_KEY
    assert allowed(u, "set", "w1", "v") == A.OK
    assert allowed(u, "get", "w1") == A.DENIED_KEY
    assert allowed(u, "get", "rw1") == A.OK and allowed(u, "set", "rw1", "v") == A.OK
    # LMOVE source (RW ACCESS DELETE) needs read and write; destination (RW INSERT) write
    assert allowed(u, "lmove", "rw1", "w2", "left", "left") == A.OK
    assert allowed(u, "lmove", "w1", "rw2", "left", "left") == A.DENIED_KEY
    # EXISTS reads no value (RO, no ACCESS): any matching pattern will do
    assert allowed(u, "exists", "w1") == A.OK


def test_the_denial_reported_is_redis_s_choice_among_selectors():
    u = user("on", "-@all", "+get", "~a*", "(+set ~b*)")
    assert u.check(VIEW, CMD["hget"], [b"hget", b"a", b"f"]) == (A.DENIED_CMD, 0)
    # the root denies the key, the selector the command: the key (it ranks higher)
    assert u.check(VIEW, CMD["get"], [b"get", b"x"]) == (A.DENIED_KEY, 1)
    assert u.check(VIEW, CMD["set"], [b"set", b"b1", b"v"]) == (A.OK, 0)
    # MSET: the last key no selector could match
    v = user("on", "+@all", "~a*")
    assert v.check(VIEW, CMD["mset"], [b"mset", b"a", b"1", b"x", b"2", b"y", b"3"]) == (A.DENIED_KEY, 3)


def test_channels_are_checked_for_publish_and_subscribe_only():
    u = user("on", "+@all", "~*", "resetchannels", "&news.*")
    assert allowed(u, "publish", "news.1", "m") == A.OK
    assert allowed(u, "publish", "sport", "m") == A.DENIED_CHANNEL
    assert u.check(VIEW, CMD["subscribe"], [b"subscribe", b"news.a", b"x"]) == (A.DENIED_CHANNEL, 2)
    # a pattern subscription must equal an allowed pattern literally
    assert allowed(u, "psubscribe", "news.*") == A.OK
    assert allowed(u, "psubscribe", "news.a*") == A.DENIED_CHANNEL
    assert allowed(u, "unsubscribe", "sport") == A.OK


def test_no_auth_commands_are_always_allowed():
    u = user("on", "-@all")
    assert allowed(u, "auth", "x") == A.OK and allowed(u, "hello") == A.OK
    assert allowed(u, "ping") == A.DENIED_CMD


def test_the_default_user_is_unrestricted_and_skips_the_check():
    d = A.default_user(VIEW)
    assert not d.restricted and d.describe(VIEW) == b"on nopass ~* &* +@all"
    assert user("+@all", "~*", "&*").restricted is False
    assert user("+@all", "~*", "&*", "(+get)").restricted is True  # a second selector
    assert user("+@all", "~*").restricted is True  # no channels
    assert user("+@all", "-get", "~*", "&*").restricted is True


# -- a user rebuilt from its description -----------------------------------------------------------

COMMANDS = sorted(VIEW.every, key=lambda c: c.fullname)
NAMES = [c.fullname for c in COMMANDS]
PATTERNS = st.sampled_from(["*", "a*", "b?", "a", "[ab]*", "x\\*"])
RULE = st.one_of(
    st.sampled_from(["on", "off", "nopass", "resetpass", ">pw", ">pw2", "<pw", "#" + "a" * 64, "reset",
                     "allkeys", "resetkeys", "allchannels", "resetchannels", "+@all", "-@all", "allcommands",
                     "nocommands", "clearselectors", "sanitize-payload", "skip-sanitize-payload"]),
    st.builds(lambda s, c: s + "@" + c, st.sampled_from("+-"), st.sampled_from(A.CATEGORIES)),
    st.builds(lambda s, c: s + c, st.sampled_from("+-"), st.sampled_from(NAMES)),
    st.builds(lambda c, a: f"+{c}|{a}", st.sampled_from(["select", "get", "debug", "echo"]), st.sampled_from("01x")),
    st.builds(lambda p, pat: p + pat, st.sampled_from(["~", "%R~", "%W~", "%RW~", "&"]), PATTERNS),
)
SELECTOR = st.lists(RULE.filter(lambda r: r[0] in "+-~%&" or r in ("allkeys", "resetkeys", "allchannels")),
                    max_size=5).map(lambda rs: "(" + " ".join(rs) + ")")
RULES = st.lists(st.one_of(RULE, RULE, RULE, SELECTOR), max_size=14)
PROBES = [
    ["get", "a1"], ["get", "b1"], ["set", "a", "v"], ["set", "x*", "v"], ["hget", "a", "f"],
    ["lmove", "a1", "b1", "left", "right"], ["mset", "a", "1", "b2", "2"], ["select", "0"], ["select", "1"],
    ["publish", "a", "m"], ["subscribe", "a1", "b2"], ["psubscribe", "a*"], ["client", "id"],
    ["client", "kill", "1.2.3.4:5"], ["config", "get", "x"], ["flushall"], ["ping"], ["acl", "whoami"],
    ["debug", "digest"], ["echo", "x"], ["zadd", "a", "1", "m"], ["exists", "b?"],
]


def apply_all(rules: list[str]) -> User:
    u = User(b"u")
    for r in rules:
        try:
            u.set(r.encode(), VIEW)
        except RuleError:
            pass
    return u


@settings(max_examples=300, deadline=None)
@given(RULES)
def test_a_user_rebuilt_from_its_description_is_the_same_user(rules):
    u = apply_all(rules)
    text = u.describe(VIEW)
    v, skipped = A.user_from_rules(b"u", text, VIEW)
    assert skipped == []
    assert v.describe(VIEW) == text
    assert v.flags == u.flags and v.passwords == u.passwords and len(v.selectors) == len(u.selectors)
    for a, b in zip(u.selectors, v.selectors):
        assert a.allowed == b.allowed and a.future == b.future
        # (first args of an allowed command are never consulted, nor described, as in Redis)
        assert {k: x for k, x in a.firstargs.items() if k not in a.allowed} == b.firstargs
    for probe in PROBES:
        args = [x.encode() for x in probe]
        cmd = VIEW.lookup_argv(args)
        assert u.check(VIEW, cmd, args) == v.check(VIEW, cmd, args), probe


@settings(max_examples=200, deadline=None)
@given(RULES)
def test_setuser_is_all_or_nothing_on_a_copy(rules):
    """ACL SETUSER stages the rules on a copy: a refused rule leaves the user as it was."""
    u = apply_all(["on", "+get", "~a*"])
    before = u.describe(VIEW)
    staged = u.copy()
    try:
        A.set_rules(staged, [r.encode() for r in rules], VIEW, False)
    except RuleError:
        pass
    assert u.describe(VIEW) == before


def test_user_from_rules_skips_a_command_this_node_does_not_know():
    v, skipped = A.user_from_rules(b"u", b"on nopass ~* resetchannels -@all +get +futurecmd (~b* resetchannels -@all "
                                         b"+xfuture +set)", VIEW)
    assert skipped == [b"+futurecmd", b"+xfuture"]
    assert v.describe(VIEW) == b"on nopass ~* resetchannels -@all +get (~b* resetchannels -@all +set)"


# -- the ACL file ----------------------------------------------------------------------------------

def test_acl_file_errors_are_redis_s_word_for_word():
    text = (b"user a on +nocmd\nuser b on foo >x\n# comment\nuser a on\nuser \"x y\" on\nusr c\n"
            b"user d (~x\n\nuser e on +get +nocat2 ~k\n")
    users, err = A.load_file(text, "/f.acl", VIEW, False)
    assert users == {}
    # what redis-server 7.0.15 answered to ACL LOAD of this file (its path replaced)
    assert err == (
        "/f.acl:1: Error in applying operation '+nocmd': Unknown command or category name in ACL. "
        "/f.acl:2: Syntax error. /f.acl:3 should start with user keyword followed by the username. "
        "WARNING: Duplicate user 'a' found on line 4. /f.acl:5: Syntax error. "
        "/f.acl:6 should start with user keyword followed by the username. "
        "/f.acl:7: Unmatched parenthesis in selector definition./f.acl:9: Error in applying operation "
        "'+nocat2': Unknown command or category name in ACL. "
        "WARNING: ACL errors detected, no change to the previously active ACL rules was performed")


def test_acl_file_round_trip():
    users = [user("on", ">pw", "~a*", "+get", name=b"alice"), A.default_user(VIEW),
             user("off", "(%R~x +get)", name=b"bob")]
    text = A.file_text(users, VIEW)
    assert text.startswith(b"user alice on #")
    loaded, err = A.load_file(text, "f", VIEW, False)
    assert err == ""
    assert {n: u.describe(VIEW) for n, u in loaded.items()} == {u.name: u.describe(VIEW) for u in users}
    # a file without the default user gives a new server's default user
    loaded, _ = A.load_file(b"user x on\n", "f", VIEW, False)
    assert loaded[b"default"].describe(VIEW) == b"on nopass ~* &* +@all"


@settings(max_examples=500, deadline=None)
@given(pattern=st.binary(max_size=6).map(lambda b: b.replace(b"\x00", b"*")) | st.sampled_from(
    [b"*", b"a*", b"ab", b"a?c", b"[a-c]*", b"a\\*", b"\\", b"a*b*", b"*a", b""]),
    key=st.sampled_from([b"", b"a", b"ab", b"abc", b"a*", b"b", b"*", b"\\"]) | st.binary(max_size=4))
def test_compiled_patterns_match_as_stringmatch(pattern, key):
    from marekvs.commands.args import stringmatch

    assert A.matcher(pattern)(key) == stringmatch(pattern, key)
