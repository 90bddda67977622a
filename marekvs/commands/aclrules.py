"""ACL users, selectors and rules: Redis 7.0's ``acl.c`` model over the one command table.

A user has flags (``on``/``off``, ``nopass``, the payload-sanitising pair), SHA-256 hashes of
its passwords (a clear password is hashed the moment a rule names it and never kept), and
one or more *selectors*: the root selector (rules outside parentheses) and one per
``(...)`` rule. A selector holds the commands it allows, the key patterns (``~``, ``%R~``,
``%W~``) and the channel patterns (``&``). A command is allowed when ANY selector allows
the command, every key the command's key specs find (with the access the spec's flags
say: ``ACCESS`` reads, ``INSERT``/``DELETE``/``UPDATE`` write) and every channel it
publishes or subscribes to.

Commands are those of the node's command table (``table.py``), with the ACL categories
COMMAND INFO shows (``docs.acl_categories``, held equal to Redis 7.0's by the COMMAND INFO
differential test): ``+@cat`` allows a command of the category and all its subcommands,
then each subcommand of the category, as Redis's ``ACLSetSelectorCommandBitsForCategory``
does. Redis keeps a bitmap per selector; here it is the set of the commands allowed (by
object identity), the ``allcommands`` flag (``+@all`` and nothing removed since: the
check skips the lookup) and the reserved "future commands" bit (set by ``+@all``, cleared
by ``-@all`` only), which ``describe`` reports as a leading ``+@all`` as Redis does.

``describe`` is Redis's ``ACLDescribeUser``: the rules that rebuild the user, command
rules computed from the allowed set by Redis's best-fit category search, then single
commands. Redis visits commands in the order of a hash table seeded at random per
process; this module visits them by name (subcommands after their container), so the
single-command rules of ACL LIST come sorted where Redis's come in an arbitrary order.
The description is what a user record stores (``core/acluser.py``), so every node
rebuilds the same user from it (``user_from_rules``).

Everything here is pure over the table: no node, no connections (``node/acl.py`` keeps
the users, the log and the connections).
"""

from __future__ import annotations

import hashlib
import hmac
from typing import Any, Callable, Iterable, Sequence

from marekvs.commands import docs
from marekvs.commands.args import stringmatch
from marekvs.commands.errors import echo
from marekvs.commands.table import KeyFlag
from marekvs.core.sds import c_str, splitargs

# ACLCommandCategories, in Redis's order (ACL CAT, and the order describe tries them in)
CATEGORIES = ("keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
              "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous",
              "connection", "transaction", "scripting")
_CATEGORY = {c: i for i, c in enumerate(CATEGORIES)}

# user flags (USER_FLAG_*), in the order describe and GETUSER print them
ENABLED, DISABLED, NOPASS, SANITIZE_SKIP, SANITIZE = 1, 2, 4, 8, 16
USER_FLAGS = ((ENABLED, b"on"), (DISABLED, b"off"), (NOPASS, b"nopass"),
              (SANITIZE_SKIP, b"skip-sanitize-payload"), (SANITIZE, b"sanitize-payload"))

# key pattern permissions (ACL_READ_PERMISSION, ACL_WRITE_PERMISSION)
READ, WRITE = 1, 2
ALL_PERMISSION = READ | WRITE

# check results (ACL_OK, ACL_DENIED_*): the numbers order the choice among selectors
OK, DENIED_CMD, DENIED_KEY, DENIED_AUTH, DENIED_CHANNEL = 0, 1, 2, 3, 4

# channel arguments of the Pub/Sub commands (Redis 7.0 db.c ``commands_with_channels``):
# name -> (flags, first position, count or -1 for all the rest)
CH_PATTERN, CH_PUBLISH, CH_SUBSCRIBE, CH_UNSUBSCRIBE = 1, 2, 4, 8
CHANNEL_SPECS = {
    "subscribe": (CH_SUBSCRIBE, 1, -1), "ssubscribe": (CH_SUBSCRIBE, 1, -1),
    "unsubscribe": (CH_UNSUBSCRIBE, 1, -1), "sunsubscribe": (CH_UNSUBSCRIBE, 1, -1),
    "psubscribe": (CH_PATTERN | CH_SUBSCRIBE, 1, -1), "punsubscribe": (CH_PATTERN | CH_UNSUBSCRIBE, 1, -1),
    "publish": (CH_PUBLISH, 1, 1), "spublish": (CH_PUBLISH, 1, 1),
}

HASH_LEN = 64  # a SHA-256 in lower-case hex
_HEX = frozenset(b"0123456789abcdef")
_SPACES = frozenset(b" \t\n\v\f\r\x00")  # isspace() and NUL: ACLStringHasSpaces

# the errno ACLSetUser sets, and ACLSetUserStringError's text for it
_RULE_ERRORS = {
    "ENOENT": "Unknown command or category name in ACL",
    "EINVAL": "Syntax error",
    "EEXIST": ("Adding a pattern after the * pattern (or the 'allkeys' flag) is not valid and does not "
               "have any effect. Try 'resetkeys' to start with an empty list of patterns"),
    "EISDIR": ("Adding a pattern after the * pattern (or the 'allchannels' flag) is not valid and does "
               "not have any effect. Try 'resetchannels' to start with an empty list of channels"),
    "ENODEV": "The password you are trying to remove from the user does not exist",
    "EBADMSG": "The password hash must be exactly 64 characters and contain only lowercase hexadecimal characters",
    "EALREADY": "Duplicate user found. A user can only be defined once in config files",
    "ECHILD": "Allowing first-arg of a subcommand is not supported",
}


class RuleError(ValueError):
    """A rule ACLSetUser refuses; ``kind`` is the errno Redis sets."""

    def __init__(self, kind: str):
        super().__init__(_RULE_ERRORS.get(kind, "Wrong format"))
        self.kind = kind


class UnmatchedParenthesis(ValueError):
    """A selector opened with ``(`` and never closed; ``index`` is the rule that opened it."""

    def __init__(self, index: int):
        super().__init__(index)
        self.index = index


def _word(op: bytes) -> bytes:
    """``op`` as ``strcasecmp`` compares it: a C string, lower case."""
    return c_str(op).lower()


def has_spaces(s: bytes) -> bool:
    """ACLStringHasSpaces: a space, another isspace() byte or a NUL."""
    return not _SPACES.isdisjoint(s)


def hash_password(password: bytes) -> bytes:
    """ACLHashPassword: SHA-256 in lower-case hex."""
    return hashlib.sha256(password).hexdigest().encode()


def _valid_hash(h: bytes) -> bool:
    return len(h) == HASH_LEN and _HEX.issuperset(h)


# -- the command table as ACL rules see it -------------------------------------------------------

class CommandView:
    """The commands of a table, their ACL categories, and what each category rule sets.

    A command is known by ``id(cmd)`` (the table's Command objects live as long as the
    table). ``tree`` is the visiting order of describe and ACL CAT: containers and plain
    commands by name, each container's subcommands by name after it."""

    def __init__(self, table: Any):
        self.table = table
        self.tree: list[tuple[Any, list[Any]]] = [
            (c, sorted(c.subcommands.values(), key=lambda s: s.name))
            for c in sorted(table.commands.values(), key=lambda c: c.name)]
        self.every: list[Any] = []
        for c, subs in self.tree:
            self.every.append(c)
            self.every += subs
        self.ids: frozenset[int] = frozenset(id(c) for c in self.every)
        self.cats: dict[int, int] = {}
        for c in self.every:
            mask = 0
            for name in docs.acl_categories(c):
                if name in _CATEGORY:
                    mask |= 1 << _CATEGORY[name]
            self.cats[id(c)] = mask
        # per category: the commands in it (counted by describe, listed by ACL CAT), and
        # what +@cat / -@cat change: every command of the category with all its
        # subcommands, then each subcommand of the category (ACLChangeSelectorPerm)
        self.members: list[list[Any]] = []
        self.sets: list[frozenset[int]] = []
        self.resets: list[frozenset[int]] = []
        for i in range(len(CATEGORIES)):
            bit = 1 << i
            members: list[Any] = []
            changed: set[int] = set()
            for c, subs in self.tree:
                if self.cats[id(c)] & bit:
                    members.append(c)
                    changed.add(id(c))
                    changed.update(id(s) for s in subs)
                for s in subs:
                    if self.cats[id(s)] & bit:
                        members.append(s)
                        changed.add(id(s))
            self.members.append(members)
            self.sets.append(frozenset(changed))
            self.resets.append(frozenset(id(c) for c in members))
        self.channel_specs = {id(c): CHANNEL_SPECS[c.name] for c in self.every
                              if c.parent is None and c.name in CHANNEL_SPECS}
        # the commands with keys (doesCommandHaveKeys), and those whose keys depend on
        # the number of arguments only (index + range specs, no procedure): their keys
        # and the access each asks for are cached per argument count
        self.keyed: frozenset[int] = frozenset(id(c) for c in self.every if c.has_keys)
        self._by_argc: frozenset[int] = frozenset(
            id(c) for c in self.every if c.getkeys is None and c.key_specs and all(
                s.is_range and not s.flags & (KeyFlag.INCOMPLETE | KeyFlag.VARIABLE_FLAGS) for s in c.key_specs))
        self._keys: dict[tuple[int, int], list[tuple[int, int]]] = {}
        # how ``Command.key_refs`` finds each command's keys, decided once: its specs (then
        # its procedure if they do not fit the arguments), or its procedure alone
        self._by_specs: frozenset[int] = frozenset(
            id(c) for c in self.every if any(not s.flags & KeyFlag.NOT_KEY for s in c.key_specs)
            and not any(s.flags & KeyFlag.VARIABLE_FLAGS for s in c.key_specs))

    def key_access(self, cmd: Any, args: Sequence[bytes]) -> list[tuple[int, int]]:
        """The keys of ``args`` (Redis's getKeysFromCommandWithSpecs: ``key_refs``) as
        (position, READ/WRITE access asked)."""
        cid = id(cmd)
        if cid in self._by_argc:
            k = (cid, len(args))
            got = self._keys.get(k)
            if got is None:
                got = [(pos, access_of(int(f))) for pos, f in cmd.key_refs(args)]
                if len(self._keys) >= 8192:
                    self._keys.clear()
                self._keys[k] = got
            return got
        refs = cmd.spec_key_refs(args) if cid in self._by_specs else None
        if refs is None:
            refs = cmd.getkeys(args) if cmd.getkeys is not None else []
        return [(pos, access_of(int(f))) for pos, f in refs]

    def lookup(self, name: bytes) -> Any:
        """ACLLookupCommand: ``cmd`` or ``container|sub`` (any case), or None."""
        parts = c_str(name).lower().split(b"|")
        if len(parts) > 2:
            return None
        base = self.table.commands.get(parts[0])
        if base is None or len(parts) == 1:
            return base
        if not base.subcommands:
            return None
        return base.subcommands.get(parts[1].decode("latin-1"))

    def lookup_argv(self, argv: Sequence[bytes]) -> Any:
        """lookupCommand(argv): the command, or its subcommand named by the second
        argument when it is a container (None if that subcommand does not exist)."""
        base = self.table.commands.get(argv[0].lower())
        if base is None or len(argv) == 1 or not base.subcommands:
            return base
        return base.subcommands.get(argv[1].lower().decode("latin-1"))

    def category(self, name: bytes) -> int | None:
        """The index of a category name (any case), or None."""
        return _CATEGORY.get(c_str(name).lower().decode("latin-1"))


# -- selectors --------------------------------------------------------------------------------

class Selector:
    """An aclSelector: commands, key patterns and channel patterns."""

    __slots__ = ("root", "allkeys", "allchannels", "allcommands", "future", "allowed", "firstargs",
                 "patterns", "channels")

    def __init__(self, root: bool = False, allchannels: bool = False):
        self.root = root
        self.allkeys = False
        self.allchannels = allchannels
        self.allcommands = False
        self.future = False  # the reserved bit: +@all was the last all-or-nothing rule
        self.allowed: set[int] = set()
        self.firstargs: dict[int, list[bytes]] = {}  # command id -> allowed first arguments
        self.patterns: list[list[Any]] = []  # [pattern, READ|WRITE], in the order added
        self.channels: list[bytes] = []

    def copy(self) -> "Selector":
        s = Selector(self.root, self.allchannels)
        s.allkeys, s.allcommands, s.future = self.allkeys, self.allcommands, self.future
        s.allowed = set(self.allowed)
        s.firstargs = {k: list(v) for k, v in self.firstargs.items()}
        s.patterns = [list(p) for p in self.patterns]
        s.channels = list(self.channels)
        return s

    # -- command bits ------------------------------------------------------------------------
    def _bit(self, cid: int, allow: bool) -> None:
        if allow:
            self.allowed.add(cid)
        else:
            self.allowed.discard(cid)
            self.allcommands = False

    def change(self, cmd: Any, allow: bool) -> None:
        """ACLChangeSelectorPerm: the command and all its subcommands."""
        cid = id(cmd)
        self._bit(cid, allow)
        self.firstargs.pop(cid, None)
        for sub in cmd.subcommands.values():
            self._bit(id(sub), allow)

    def change_category(self, view: CommandView, cat: int, allow: bool) -> None:
        changed = view.sets[cat]
        if allow:
            self.allowed |= changed
        elif changed:
            self.allowed -= changed
            self.allcommands = False
        for cid in view.resets[cat]:
            self.firstargs.pop(cid, None)

    def set_all(self, view: CommandView, allow: bool) -> None:
        self.allowed = set(view.ids) if allow else set()
        self.allcommands = self.future = allow
        self.firstargs = {}

    # -- ACLSetSelector ----------------------------------------------------------------------
    def set(self, op: bytes, view: CommandView) -> None:
        """Apply one selector rule (Redis's ACLSetSelector); RuleError if refused."""
        w = _word(op)
        if w in (b"allkeys", b"~*"):
            self.allkeys = True
            self.patterns = []
        elif w == b"resetkeys":
            self.allkeys = False
            self.patterns = []
        elif w in (b"allchannels", b"&*"):
            self.allchannels = True
            self.channels = []
        elif w == b"resetchannels":
            self.allchannels = False
            self.channels = []
        elif w in (b"allcommands", b"+@all"):
            self.set_all(view, True)
        elif w in (b"nocommands", b"-@all"):
            self.set_all(view, False)
        elif op[:1] in (b"~", b"%"):
            self._add_pattern(op)
        elif op[:1] == b"&":
            if self.allchannels:
                raise RuleError("EISDIR")
            pat = op[1:]
            if has_spaces(pat):
                raise RuleError("EINVAL")
            if pat not in self.channels:
                self.channels.append(pat)
            self.allchannels = False
        elif op[:1] == b"+" and op[1:2] != b"@":
            self._allow(op, view)
        elif op[:1] == b"-" and op[1:2] != b"@":
            cmd = view.lookup(op[1:])
            if cmd is None:
                raise RuleError("ENOENT")
            self.change(cmd, False)
        elif op[:1] in (b"+", b"-") and op[1:2] == b"@":
            cat = view.category(op[2:])
            if cat is None:
                raise RuleError("ENOENT")
            self.change_category(view, cat, op[:1] == b"+")
        else:
            raise RuleError("EINVAL")

    def _add_pattern(self, op: bytes) -> None:
        if self.allkeys:
            raise RuleError("EEXIST")
        flags = 0
        offset = 1
        if op[:1] == b"%":
            while offset < len(op):
                ch = op[offset:offset + 1].upper()
                if ch == b"R" and not flags & READ:
                    flags |= READ
                elif ch == b"W" and not flags & WRITE:
                    flags |= WRITE
                elif ch == b"~":
                    offset += 1
                    break
                else:
                    raise RuleError("EINVAL")
                offset += 1
            if not flags:
                raise RuleError("EINVAL")
        else:
            flags = ALL_PERMISSION
        pat = op[offset:]
        if has_spaces(pat):
            raise RuleError("EINVAL")
        for p in self.patterns:
            if p[0] == pat:
                p[1] |= flags  # the same pattern again: its permissions join
                break
        else:
            self.patterns.append([pat, flags])
        self.allkeys = False

    def _allow(self, op: bytes, view: CommandView) -> None:
        name = c_str(op[1:])
        if b"|" not in name:
            cmd = view.lookup(name)
            if cmd is None:
                raise RuleError("ENOENT")
            self.change(cmd, True)
            return
        base, _, sub = name.rpartition(b"|")
        cmd = view.lookup(base)
        if cmd is None:
            raise RuleError("ENOENT")
        if cmd.parent is not None:
            raise RuleError("ECHILD")
        if not sub:
            raise RuleError("EINVAL")
        if cmd.subcommands:
            cmd = view.lookup(name)
            if cmd is None:
                raise RuleError("ENOENT")
            self.change(cmd, True)
        else:
            # a first argument of an otherwise blocked command (Redis logs a deprecation
            # warning and allows it): kept as given, compared ignoring case
            allowed = self.firstargs.setdefault(id(cmd), [])
            if all(a.lower() != sub.lower() for a in allowed):
                allowed.append(sub)

    # -- describe ------------------------------------------------------------------------------
    def describe(self, view: CommandView) -> bytes:
        """ACLDescribeSelector: key patterns, channel patterns, command rules."""
        out: list[bytes] = []
        if self.allkeys:
            out.append(b"~*")
        else:
            out += [pattern_text(p, f) for p, f in self.patterns]
        if self.allchannels:
            out.append(b"&*")
        else:
            out.append(b"resetchannels")
            out += [b"&" + c for c in self.channels]
        out.append(describe_commands(self, view))
        return b" ".join(out)

    def keys_text(self) -> bytes:
        """GETUSER's ``keys``."""
        if self.allkeys:
            return b"~*"
        return b" ".join(pattern_text(p, f) for p, f in self.patterns)

    def channels_text(self) -> bytes:
        """GETUSER's ``channels``."""
        if self.allchannels:
            return b"&*"
        return b" ".join(b"&" + c for c in self.channels)

    # -- the check ---------------------------------------------------------------------------
    def check(self, view: CommandView, cmd: Any, args: Sequence[bytes], keys: list[Any]) -> tuple[int, int]:
        """ACLSelectorCheckCmd: (result, argument position of a denied key or channel).
        ``keys`` caches the command's keys across selectors ([] until read)."""
        cid = id(cmd)
        if not self.allcommands and cid not in self.allowed and not cmd.no_auth:
            allowed = self.firstargs.get(cid)
            if len(args) < 2 or not allowed:
                return DENIED_CMD, 0
            arg = _word(args[2 if cmd.parent is not None else 1])
            if all(_word(a) != arg for a in allowed):
                return DENIED_CMD, 0
        if not self.allkeys and cid in view.keyed:
            if not keys:
                keys.append(view.key_access(cmd, args))
            for pos, want in keys[0]:
                if not self.key_allowed(args[pos], want):
                    return DENIED_KEY, pos
        if not self.allchannels:
            spec = view.channel_specs.get(cid)
            if spec is not None and spec[0] & (CH_PUBLISH | CH_SUBSCRIBE):
                pattern = bool(spec[0] & CH_PATTERN)
                for pos in channel_positions(spec, len(args)):
                    if not channel_allowed(self.channels, args[pos], pattern):
                        return DENIED_CHANNEL, pos
        return OK, 0

    def key_allowed(self, key: bytes, want: int) -> bool:
        """ACLSelectorCheckKey, ``want`` the READ/WRITE access the key spec asks for
        (``access_of``)."""
        if self.allkeys:
            return True
        for pat, pflags in self.patterns:
            if pflags & want == want and matcher(pat)(key):
                return True
        return False

    @property
    def unrestricted(self) -> bool:
        return self.allcommands and self.allkeys and self.allchannels


def pattern_text(pattern: bytes, flags: int) -> bytes:
    """sdsCatPatternString."""
    if flags == ALL_PERMISSION:
        return b"~" + pattern
    if flags == READ:
        return b"%R~" + pattern
    return b"%W~" + pattern


def channel_positions(spec: tuple[int, int, int], argc: int) -> range:
    _, start, count = spec
    end = argc if count < 0 else min(argc, start + count)
    return range(start, end)


def channel_allowed(channels: Iterable[bytes], channel: bytes, pattern: bool) -> bool:
    """ACLCheckChannelAgainstList: a channel is matched against the patterns; a pattern
    (PSUBSCRIBE) only equals one literally."""
    for p in channels:
        if (pattern and c_str(p) == c_str(channel)) or (not pattern and matcher(p)(channel)):
            return True
    return False


# -- glob patterns, compiled ---------------------------------------------------------------------

_GLOB = frozenset(b"*?[\\")
_MATCHERS: dict[bytes, Callable[[bytes], bool]] = {}


def matcher(pattern: bytes) -> Callable[[bytes], bool]:
    """Redis's ``stringmatchlen(pattern, s)`` as a function of ``s``: the common shapes
    (``*``, a literal, ``prefix*``) as one bytes operation, the others by ``stringmatch``.
    Cached per pattern (patterns come from a few users)."""
    m = _MATCHERS.get(pattern)
    if m is None:
        if pattern == b"*":
            m = _any
        elif _GLOB.isdisjoint(pattern):
            m = pattern.__eq__
        elif pattern.endswith(b"*") and _GLOB.isdisjoint(pattern[:-1]):
            prefix = pattern[:-1]
            m = lambda s: s.startswith(prefix)  # noqa: E731
        else:
            m = lambda s: stringmatch(pattern, s)  # noqa: E731
        if len(_MATCHERS) >= 4096:
            _MATCHERS.clear()
        _MATCHERS[pattern] = m
    return m


def _any(s: bytes) -> bool:
    return True


def access_of(kflags: int) -> int:
    """The permission a key spec's flags ask for: READ for ACCESS, WRITE for INSERT,
    DELETE or UPDATE (ACLSelectorCheckKey)."""
    want = 0
    if kflags & _ACCESS:
        want |= READ
    if kflags & _WRITES:
        want |= WRITE
    return want


_ACCESS = int(KeyFlag.ACCESS)
_WRITES = int(KeyFlag.INSERT | KeyFlag.DELETE | KeyFlag.UPDATE)


# -- describe: the command rules ------------------------------------------------------------------

class _Bits:
    """The bitmap of a scratch selector (describe's fake and temp selectors)."""

    __slots__ = ("allowed",)

    def __init__(self, allowed: set[int]):
        self.allowed = allowed

    def change(self, cmd: Any, allow: bool) -> None:
        ids = [id(cmd)] + [id(s) for s in cmd.subcommands.values()]
        if allow:
            self.allowed.update(ids)
        else:
            self.allowed.difference_update(ids)

    def category(self, view: CommandView, cat: int, allow: bool) -> None:
        if allow:
            self.allowed |= view.sets[cat]
        else:
            self.allowed -= view.sets[cat]


def describe_commands(sel: Selector, view: CommandView) -> bytes:
    """ACLDescribeSelectorCommandRules: ``+@all`` or ``-@all``, the categories that fit
    best (more commands in common than different, fewest differences, then most in
    common), then the single commands and first arguments that make the bitmap exact."""
    additive = not sel.future
    rules = [b"-@all" if additive else b"+@all"]
    fake = _Bits(set() if additive else set(view.ids))
    temp = _Bits(set(sel.allowed))
    applied: set[int] = set()
    while True:
        best, mindiff, maxsame = -1, 1 << 31, 0
        for j, members in enumerate(view.members):
            if j in applied:
                continue
            on = sum(1 for c in members if id(c) in temp.allowed)
            off = len(members) - on
            diff, same = (off, on) if additive else (on, off)
            if same > diff and (diff < mindiff or (diff == mindiff and same > maxsame)):
                best, mindiff, maxsame = j, diff, same
        if best == -1:
            break
        fake.category(view, best, additive)
        temp.category(view, best, not additive)
        rules.append((b"+@" if additive else b"-@") + CATEGORIES[best].encode())
        applied.add(best)
    for cmd, subs in view.tree:
        _single(sel, fake, cmd, rules)
        for sub in subs:
            _single(sel, fake, sub, rules)
        if id(cmd) not in sel.allowed:
            for arg in sel.firstargs.get(id(cmd), ()):
                rules.append(b"+" + cmd.fullname.encode() + b"|" + arg)
    if fake.allowed != sel.allowed:
        # Redis panics here ("No bitmap match"): the rules must rebuild the user exactly
        raise AssertionError(f"ACL rules do not rebuild the command set: {b' '.join(rules)!r}")
    return b" ".join(rules)


def _single(sel: Selector, fake: _Bits, cmd: Any, rules: list[bytes]) -> None:
    userbit = id(cmd) in sel.allowed
    if userbit != (id(cmd) in fake.allowed):
        rules.append((b"+" if userbit else b"-") + cmd.fullname.encode())
        fake.change(cmd, userbit)


# -- users ----------------------------------------------------------------------------------

class User:
    """An ACL user. Connections hold the object: a change is made in place (``copy_from``),
    as Redis's ACLCopyUser, so they see it at once."""

    __slots__ = ("name", "flags", "passwords", "selectors", "restricted")

    def __init__(self, name: bytes, pubsub_all: bool = False):
        self.name = name
        self.flags = DISABLED
        self.passwords: list[bytes] = []
        self.selectors = [Selector(root=True, allchannels=pubsub_all)]
        self.restricted = True

    @property
    def root(self) -> Selector:
        return self.selectors[0]

    @property
    def enabled(self) -> bool:
        return not self.flags & DISABLED

    @property
    def nopass(self) -> bool:
        return bool(self.flags & NOPASS)

    def copy(self, name: bytes | None = None) -> "User":
        u = User(self.name if name is None else name)
        u.copy_from(self)
        return u

    def copy_from(self, other: "User") -> None:
        """ACLCopyUser: the rules of ``other``, the name of this one."""
        self.flags = other.flags
        self.passwords = list(other.passwords)
        self.selectors = [s.copy() for s in other.selectors]
        self.refresh()

    def refresh(self) -> None:
        """After a change: may the dispatcher skip the check for this user?"""
        self.restricted = not (len(self.selectors) == 1 and self.selectors[0].unrestricted)

    def same_rules(self, other: "User") -> bool:
        return self.flags == other.flags and self.passwords == other.passwords and \
            len(self.selectors) == len(other.selectors) and \
            all(_same_selector(a, b) for a, b in zip(self.selectors, other.selectors))

    # -- ACLSetUser ----------------------------------------------------------------------------
    def set(self, op: bytes, view: CommandView, pubsub_all: bool = False) -> None:
        """Apply one rule (Redis's ACLSetUser); RuleError if refused (the user may then be
        half changed: callers stage changes on a copy)."""
        try:
            self._set(op, view, pubsub_all)
        finally:
            self.refresh()

    def _set(self, op: bytes, view: CommandView, pubsub_all: bool) -> None:
        if not op:
            return
        w = _word(op)
        if w == b"on":
            self.flags = (self.flags | ENABLED) & ~DISABLED
        elif w == b"off":
            self.flags = (self.flags | DISABLED) & ~ENABLED
        elif w == b"skip-sanitize-payload":
            self.flags = (self.flags | SANITIZE_SKIP) & ~SANITIZE
        elif w == b"sanitize-payload":
            self.flags = (self.flags | SANITIZE) & ~SANITIZE_SKIP
        elif w == b"nopass":
            self.flags |= NOPASS
            self.passwords = []
        elif w == b"resetpass":
            self.flags &= ~NOPASS
            self.passwords = []
        elif op[:1] in (b">", b"#"):
            if op[:1] == b">":
                h = hash_password(op[1:])
            else:
                h = op[1:]
                if not _valid_hash(h):
                    raise RuleError("EBADMSG")
            if h not in self.passwords:
                self.passwords.append(h)
            self.flags &= ~NOPASS
        elif op[:1] in (b"<", b"!"):
            if op[:1] == b"<":
                h = hash_password(op[1:])
            else:
                h = op[1:]
                if not _valid_hash(h):
                    raise RuleError("EBADMSG")
            if h not in self.passwords:
                raise RuleError("ENODEV")
            self.passwords.remove(h)
        elif op[:1] == b"(" and op[-1:] == b")":
            sel = Selector(allchannels=pubsub_all)
            for rule in splitargs(op[1:-1]) or ():  # unbalanced quotes: an empty selector, as Redis
                sel.set(rule, view)
            self.selectors.append(sel)
        elif w == b"clearselectors":
            del self.selectors[1:]
        elif w == b"reset":
            for rule in (b"resetpass", b"resetkeys", b"resetchannels") + \
                    ((b"allchannels",) if pubsub_all else ()) + \
                    (b"off", b"sanitize-payload", b"clearselectors", b"-@all"):
                self._set(rule, view, pubsub_all)
        else:
            self.root.set(op, view)

    # -- authentication ------------------------------------------------------------------------
    def password_ok(self, password: bytes) -> bool:
        """ACLCheckUserCredentials once the user is found: enabled, and nopass or a
        password whose hash matches (compared in constant time)."""
        if self.flags & DISABLED:
            return False
        if self.flags & NOPASS:
            return True
        h = hash_password(password)
        ok = False
        for p in self.passwords:
            ok |= hmac.compare_digest(h, p)
        return ok

    # -- describe ------------------------------------------------------------------------------
    def flag_names(self) -> list[bytes]:
        return [name for bit, name in USER_FLAGS if self.flags & bit]

    def describe(self, view: CommandView) -> bytes:
        """ACLDescribeUser: the rules ACL LIST prints after ``user <name>``."""
        out = b"".join(name + b" " for name in self.flag_names())
        out += b"".join(b"#" + p + b" " for p in self.passwords)
        for sel in self.selectors:
            d = sel.describe(view)
            out += d if sel.root else b" (" + d + b")"
        return out

    # -- the check ---------------------------------------------------------------------------
    def check(self, view: CommandView, cmd: Any, args: Sequence[bytes]) -> tuple[int, int]:
        """ACLCheckAllUserCommandPerm: (OK, 0) or the denial to report: the command when
        no selector allows it, else the last key or channel no selector could match."""
        relevant, last = DENIED_CMD, 0
        keys: list[Any] = []
        for sel in self.selectors:
            r, pos = sel.check(view, cmd, args, keys)
            if r == OK:
                return OK, 0
            if r > relevant or (r == relevant and pos > last):
                relevant, last = r, pos
        return relevant, last

    def unrestricted_key_access(self, view: CommandView, cmd: Any, args: Sequence[bytes],
                                want: int = READ) -> bool:
        """ACLUserCheckCmdWithUnrestrictedKeyAccess (SORT's BY and GET patterns): a
        selector allows the command and every key (``allkeys``, or the pattern ``*`` with
        the access wanted)."""
        if not self.restricted:
            return True
        keys: list[Any] = []
        for sel in self.selectors:
            if sel.check(view, cmd, args, keys)[0] == OK and (
                    sel.allkeys or any(p == b"*" and f & want == want for p, f in sel.patterns)):
                return True
        return False

    def channel_allowed(self, channel: bytes, pattern: bool) -> bool:
        """ACLUserCheckChannelPerm."""
        for sel in self.selectors:
            if sel.allchannels or channel_allowed(sel.channels, channel, pattern):
                return True
        return False


def _same_selector(a: Selector, b: Selector) -> bool:
    return (a.root, a.allkeys, a.allchannels, a.allcommands, a.future, a.allowed, a.firstargs,
            a.patterns, a.channels) == (b.root, b.allkeys, b.allchannels, b.allcommands, b.future,
                                        b.allowed, b.firstargs, b.patterns, b.channels)


def default_user(view: CommandView) -> User:
    """ACLCreateDefaultUser: ``on nopass ~* &* +@all``."""
    u = User(b"default")
    for rule in (b"+@all", b"~*", b"&*", b"on", b"nopass"):
        u.set(rule, view)
    return u


def merge_selector_args(args: Sequence[bytes]) -> list[bytes]:
    """ACLMergeSelectorArguments: a selector spread over several arguments ("(~a", "+get)")
    becomes one rule; UnmatchedParenthesis if one is never closed."""
    out: list[bytes] = []
    opened = -1
    selector = b""
    for j, op in enumerate(args):
        if opened < 0 and op[:1] == b"(" and op[-1:] != b")":
            selector = op
            opened = j
            continue
        if opened >= 0:
            selector += b" " + c_str(op)
            if op[-1:] == b")":
                opened = -1
                out.append(selector)
            continue
        out.append(op)
    if opened >= 0:
        raise UnmatchedParenthesis(opened)
    return out


# -- records and files ------------------------------------------------------------------------------

def user_from_rules(name: bytes, rules: bytes, view: CommandView) -> tuple[User, list[bytes]]:
    """The user a record (``core/acluser.py``) describes: the rules applied to a new user,
    one space-separated token at a time, a parenthesised selector as one rule whose
    inner rules are split at spaces only (describe never quotes). A rule this node
    cannot apply (a command a newer peer has) is skipped and returned, so one unknown
    command does not cost the whole user."""
    u = User(name)
    skipped: list[bytes] = []
    try:
        ops = merge_selector_args([t for t in rules.split(b" ")])
    except UnmatchedParenthesis:
        ops = [t for t in rules.split(b" ") if t]
    root = [op for op in ops if not (op[:1] == b"(" and op[-1:] == b")")]
    literal = _literal_star(root)
    for op in ops:
        try:
            if op[:1] == b"(" and op[-1:] == b")":
                sel = Selector()
                inner_ops = [x for x in op[1:-1].split(b" ") if x]
                inner_literal = _literal_star(inner_ops)
                for inner in inner_ops:
                    try:
                        if inner == b"~*" and inner_literal:
                            sel._add_pattern(inner)
                        else:
                            sel.set(inner, view)
                    except RuleError:
                        skipped.append(inner)
                u.selectors.append(sel)
            elif op == b"~*" and literal:
                u.root._add_pattern(op)
            else:
                u.set(op, view)
        except RuleError:
            skipped.append(op)
    u.refresh()
    return u, skipped


def _literal_star(ops: Sequence[bytes]) -> bool:
    """Does ``~*`` among these rules stand for the pattern ``*`` (added with ``%RW~*``)
    rather than ``allkeys``? It does when other key patterns come with it: describe prints
    ``allkeys`` as ``~*`` alone. (Redis's ACL LOAD reads it as ``allkeys`` and then refuses
    a later pattern; a user record must rebuild the user it describes.)"""
    return b"~*" in ops and sum(1 for op in ops if op[:1] in (b"~", b"%")) > 1


def set_rules(user: User, ops: Sequence[bytes], view: CommandView, pubsub_all: bool) -> None:
    """Apply rules to ``user`` in order; the first refused one raises RuleError with
    ``op`` set on it."""
    for op in ops:
        try:
            user.set(op, view, pubsub_all)
        except RuleError as e:
            e.op = op  # type: ignore[attr-defined]
            raise


def load_file(text: bytes, filename: str, view: CommandView, pubsub_all: bool) -> tuple[dict[bytes, User], str]:
    """ACLLoadFromFile over the file's bytes: (users by name, "") if every line is valid,
    else ({}, the errors as Redis words them). A file without ``default`` gets the
    default user of a new server, as in Redis."""
    users: dict[bytes, User] = {}
    errors = ""
    lines = text.split(b"\n")
    for i, raw in enumerate(lines):
        linenum = i + 1
        line = raw.strip(b" \t\r\n")
        if not line:
            continue
        argv = line.split(b" ")
        if argv[0] != b"user" or len(argv) < 2:
            errors += f"{filename}:{linenum} should start with user keyword followed by the username. "
            continue
        name = argv[1]
        if has_spaces(name):
            errors += f"'{filename}:{linenum}: username '{echo(name)}' contains invalid characters. "
            continue
        if name in users:
            errors += f"WARNING: Duplicate user '{echo(name)}' found on line {linenum}. "
            continue
        u = users[name] = User(name, pubsub_all)
        try:
            ops = merge_selector_args(argv[2:])
        except UnmatchedParenthesis:
            errors += f"{filename}:{linenum}: Unmatched parenthesis in selector definition."
            ops = []
        syntax_error = False
        for op in ops:
            op = op.strip(b"\t\r\n")
            try:
                u.set(op, view, pubsub_all)
            except RuleError as e:
                if e.kind == "ENOENT":
                    errors += f"{filename}:{linenum}: Error in applying operation '{echo(op)}': {e}. "
                elif not syntax_error:
                    errors += f"{filename}:{linenum}: {e}. "
                    syntax_error = True
    if errors:
        return {}, errors + "WARNING: ACL errors detected, no change to the previously active ACL rules was performed"
    if b"default" not in users:
        users[b"default"] = default_user(view)
    return users, ""


def file_text(users: Iterable[User], view: CommandView) -> bytes:
    """ACLSaveToFile's content: one ``user <name> <rules>`` line per user, by name."""
    return b"".join(b"user " + u.name + b" " + u.describe(view) + b"\n"
                    for u in sorted(users, key=lambda u: u.name))
