"""The command table: every command declared once, as data.

A handler carries its declaration (``@command``): name, arity (negative = at least,
counting the name), flags, key specs, group, summary and the argument grammar in Redis's
documentation syntax. The dispatcher checks arity from here before any handler runs;
COMMAND, COMMAND COUNT|INFO|DOCS|LIST|GETKEYS|GETKEYSANDFLAGS and redis-cli's hints are
all answered from this one table. Container commands (CLIENT, CONFIG, ...) declare their
subcommands the same way with ``parent=``.

Keys are described as Redis 7.0 describes them (``keySpec`` in its command table): a
command has a list of key specs, each with flags saying how its keys are accessed, a
``begin_search`` step finding where its keys start (a fixed index, or the argument after a
keyword searched forwards or backwards from ``startfrom``) and a ``find_keys`` step taking
the keys from there (a ``range`` up to ``lastkey``, negative counting from the end, every
``keystep``, the rest divided by ``limit``; or ``keynum``: a count read from an argument).
A declaration says ``specs=`` (the grammar below, or ``KeySpec`` objects), or the legacy
``keys=(first, last, step)``, which becomes one range spec flagged RW or RO after the
command's write flag. Everything about keys derives from the specs, as in Redis: the
legacy first/last/step that COMMAND INFO shows (``populateCommandLegacyRangeSpec``), the
``movablekeys`` flag, COMMAND GETKEYS[ANDFLAGS] (``Command.key_refs``, Redis's
``getKeysFromCommandWithSpecs``) and the ``key_spec_index`` of COMMAND DOCS.

The spec grammar, one string per spec (Redis's words: flags upper case, the rest lower)::

    FLAG... BEGIN FIND [(NOTES)]
    BEGIN = index POS | keyword KEYWORD STARTFROM | unknown
    FIND  = range LASTKEY [KEYSTEP [LIMIT]] | keynum KEYNUMIDX FIRSTKEY KEYSTEP | unknown

    "RW ACCESS DELETE index 1 range 0"                  GETDEL
    "OW UPDATE index 1 range -1 2"                      MSET: every other argument
    ("OW UPDATE index 1 range 0",
     "RO ACCESS index 2 keynum 0 1 1")                  ZUNIONSTORE dest numkeys key...
    "RO ACCESS keyword STREAMS 1 range -1 1 2"          XREAD ... STREAMS key... id...
    "RW ACCESS DELETE INCOMPLETE keyword KEYS -2 range -1"   MIGRATE's KEYS
    "RW ACCESS UPDATE VARIABLE_FLAGS index 1 range 0 (RW and ACCESS due to the optional `GET` argument)"
                                                        SET, with the notes COMMAND INFO shows

A spec that cannot describe every key (INCOMPLETE, ``unknown`` steps) or whose flags
depend on the arguments (VARIABLE_FLAGS) needs the command's ``getkeys=`` procedure, as in
Redis: the procedures of Redis 7.0's db.c are at the end of this module, by name.
"""

from __future__ import annotations

import enum
import importlib
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence, Union

from marekvs.commands.args import parse_ll
from marekvs.commands.reply import Simple
from marekvs.core.sds import c_str


# -- key specs ------------------------------------------------------------------------------

class KeyFlag(enum.IntFlag):
    """A key spec's flags, with Redis's bit values (CMD_KEY_*): the order COMMAND INFO
    and GETKEYSANDFLAGS print them in."""

    RO = 1 << 0  # read only: the value is read, not changed
    RW = 1 << 1  # read and modified
    OW = 1 << 2  # overwritten without being read
    RM = 1 << 3  # deleted
    ACCESS = 1 << 4  # user data is returned, copied or used
    UPDATE = 1 << 5  # the value is updated or replaced
    INSERT = 1 << 6  # data is added, nothing changed or deleted
    DELETE = 1 << 7  # data is deleted
    NOT_KEY = 1 << 8  # a name that routes like a key but is not one (skipped by GETKEYS)
    INCOMPLETE = 1 << 9  # the spec may miss keys: the command's getkeys procedure decides
    VARIABLE_FLAGS = 1 << 10  # the flags depend on the arguments: the getkeys procedure decides

    def reply_names(self) -> list[bytes]:
        """The names as Redis prints them: RO, RW, OW, RM upper case, the rest lower."""
        return [(f.name if f.value <= KeyFlag.RM else f.name.lower()).encode()  # type: ignore[union-attr]
                for f in KeyFlag if f in self]


NO_KEY_FLAGS = KeyFlag(0)


@dataclass(frozen=True, slots=True)
class Index:
    """begin_search: the first key is argument ``pos``."""
    pos: int


@dataclass(frozen=True, slots=True)
class Keyword:
    """begin_search: the keys start after ``keyword`` (any case), searched from argument
    ``startfrom`` forwards, or backwards from the end when negative."""
    keyword: str
    startfrom: int


@dataclass(frozen=True, slots=True)
class Range:
    """find_keys: keys up to ``lastkey`` (relative to the first key; negative: from the
    end of the arguments), every ``keystep``; a ``limit`` (with ``lastkey`` -1) takes
    1/limit of the arguments from the first key on (XREAD's keys, then as many ids)."""
    lastkey: int
    keystep: int = 1
    limit: int = 0


@dataclass(frozen=True, slots=True)
class Keynum:
    """find_keys: the argument ``keynumidx`` after the begin_search position holds the
    number of key arguments, which start ``firstkey`` after that position, one key every
    ``keystep`` of them."""
    keynumidx: int
    firstkey: int
    keystep: int


@dataclass(frozen=True, slots=True)
class Unknown:
    """A begin_search or find_keys step that cannot be described (SORT's BY/GET/STORE)."""


UNKNOWN = Unknown()
BeginSearch = Union[Index, Keyword, Unknown]
FindKeys = Union[Range, Keynum, Unknown]


def index(pos: int) -> Index:
    return Index(pos)


def keyword(word: str, startfrom: int) -> Keyword:
    return Keyword(word, startfrom)


def range_(lastkey: int, keystep: int = 1, limit: int = 0) -> Range:
    return Range(lastkey, keystep, limit)


def keynum(keynumidx: int, firstkey: int, keystep: int) -> Keynum:
    return Keynum(keynumidx, firstkey, keystep)


@dataclass(frozen=True, slots=True)
class KeySpec:
    """One key spec of a command: ``KeySpec("RW ACCESS DELETE", index(1), range_(0))``."""

    flags: KeyFlag
    begin_search: BeginSearch
    find_keys: FindKeys
    notes: str = ""

    def __init__(self, flags: KeyFlag | str, begin_search: BeginSearch, find_keys: FindKeys,
                 notes: str = ""):
        if isinstance(flags, str):
            flags = _key_flags(flags.split())
        object.__setattr__(self, "flags", flags)
        object.__setattr__(self, "begin_search", begin_search)
        object.__setattr__(self, "find_keys", find_keys)
        object.__setattr__(self, "notes", notes)
        self._check()

    @classmethod
    def parse(cls, text: str) -> "KeySpec":
        """A spec in the grammar of this module's docstring."""
        notes = ""
        if text.rstrip().endswith(")") and "(" in text:
            text, _, notes = text.rstrip()[:-1].partition("(")
        words = text.split()
        i = 0
        while i < len(words) and words[i] in KeyFlag.__members__:
            i += 1
        flags = _key_flags(words[:i])
        rest = words[i:]
        try:
            begin, rest = _parse_begin(rest)
            find, rest = _parse_find(rest)
        except (IndexError, ValueError):
            raise ValueError(f"bad key spec {text!r}") from None
        if rest:
            raise ValueError(f"bad key spec {text!r}: {' '.join(rest)!r} left over")
        return cls(flags, begin, find, notes)

    def _check(self) -> None:
        bs, fk = self.begin_search, self.find_keys
        if isinstance(bs, Index) and bs.pos < 1:
            raise ValueError(f"key spec index must be >= 1: {self}")
        if isinstance(fk, (Range, Keynum)) and fk.keystep < 1:
            raise ValueError(f"key spec keystep must be >= 1: {self}")
        if isinstance(fk, Range) and fk.limit and fk.lastkey != -1:
            raise ValueError(f"a key spec limit needs lastkey -1 (as Redis asserts): {self}")
        if isinstance(fk, Keynum) and (fk.keynumidx < 0 or fk.firstkey <= fk.keynumidx):
            raise ValueError(f"key spec keynum: the keys follow the count: {self}")

    @property
    def is_range(self) -> bool:
        """index + range: the only kind the legacy first/last/step can show."""
        return isinstance(self.begin_search, Index) and isinstance(self.find_keys, Range)

    def positions(self, args: Sequence[bytes]) -> range | None:
        """The argument positions of this spec's keys in ``args`` (the command name at
        0), as Redis's getKeysUsingKeySpecs finds them: an empty range when its keyword
        is absent (the spec is skipped), ``None`` when the spec is invalid for these
        arguments (unknown steps, a bad key count, keys past the end)."""
        argc = len(args)
        bs, fk = self.begin_search, self.find_keys
        if isinstance(bs, Index):
            first = bs.pos
        elif isinstance(bs, Keyword):
            first = _keyword_search(args, bs.keyword.encode(), bs.startfrom)
            if not first:
                return range(0)  # keyword not found: nothing from this spec
        else:
            return None
        if isinstance(fk, Range):
            step = fk.keystep
            if fk.lastkey >= 0:
                last = first + fk.lastkey
            elif not fk.limit:
                last = argc + fk.lastkey
            else:
                last = first + (_c_div(argc - first, fk.limit) + fk.lastkey)
        elif isinstance(fk, Keynum):
            step = fk.keystep
            at = first + fk.keynumidx
            # (Redis 7.0 checks keynumidx alone against argc; every built-in command's
            # arity puts the count inside the arguments, so the two agree there)
            if at >= argc:
                return None
            numkeys = parse_ll(args[at])
            if numkeys is None or numkeys < 0:
                return None
            first += fk.firstkey
            last = first + _c_int(numkeys) - 1
        else:
            return None
        if last >= argc or last < first or first >= argc:
            return None  # out of bounds: the command will answer a syntax error
        return range(first, last + 1, step)


def _key_flags(words: Iterable[str]) -> KeyFlag:
    flags = NO_KEY_FLAGS
    for w in words:
        try:
            flags |= KeyFlag[w]
        except KeyError:
            raise ValueError(f"unknown key spec flag {w!r}") from None
    return flags


def _parse_begin(words: list[str]) -> tuple[BeginSearch, list[str]]:
    kind = words[0]
    if kind == "index":
        return Index(int(words[1])), words[2:]
    if kind == "keyword":
        return Keyword(words[1], int(words[2])), words[3:]
    if kind == "unknown":
        return UNKNOWN, words[1:]
    raise ValueError(kind)


def _parse_find(words: list[str]) -> tuple[FindKeys, list[str]]:
    kind = words[0]
    if kind == "range":
        nums = []
        for w in words[1:4]:
            try:
                nums.append(int(w))
            except ValueError:
                break
        if not nums:
            raise ValueError("range needs lastkey")
        return Range(*nums), words[1 + len(nums):]
    if kind == "keynum":
        return Keynum(int(words[1]), int(words[2]), int(words[3])), words[4:]
    if kind == "unknown":
        return UNKNOWN, words[1:]
    raise ValueError(kind)


def _keyword_search(args: Sequence[bytes], word: bytes, startfrom: int) -> int:
    """The position after ``word``, or 0: Redis's loop exactly (forwards from
    ``startfrom`` up to, not including, the last argument; backwards from
    ``argc + startfrom`` down to, not including, argument 1), comparing as strcasecmp
    compares C strings."""
    argc = len(args)
    start = startfrom if startfrom > 0 else argc + startfrom
    end = argc - 1 if startfrom > 0 else 1
    word = word.lower()
    i = start
    while i != end:
        if i >= argc or i < 1:
            break
        if c_str(args[i]).lower() == word:
            return i + 1
        i = i + 1 if start <= end else i - 1
    return 0


def _c_div(a: int, b: int) -> int:
    """C's integer division (truncates towards zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _c_int(v: int) -> int:
    """A long long cast to a 32-bit int, as ``(int)numkeys`` in Redis."""
    v &= 0xFFFFFFFF
    return v - (1 << 32) if v >= 1 << 31 else v


SpecDecl = Union[str, KeySpec]


def parse_specs(decl: SpecDecl | Sequence[SpecDecl]) -> tuple[KeySpec, ...]:
    """``specs=`` of a declaration: one spec (a string or a KeySpec) or several."""
    items = [decl] if isinstance(decl, (str, KeySpec)) else list(decl)
    return tuple(x if isinstance(x, KeySpec) else KeySpec.parse(x) for x in items)


def legacy_specs(first: int, last: int, step: int, write: bool) -> tuple[KeySpec, ...]:
    """A legacy ``keys=(first, last, step)`` as one range spec (RW or RO after the
    command's write flag)."""
    if not first:
        return ()
    lastkey = last - first if last >= 0 else last
    return (KeySpec(KeyFlag.RW if write else KeyFlag.RO, Index(first), Range(lastkey, step or 1)),)


def legacy_range(specs: Sequence[KeySpec]) -> tuple[int, int, int]:
    """(first, last, step) for COMMAND INFO: Redis 7.0's populateCommandLegacyRangeSpec.
    One index+range spec is shown as it is; otherwise the index+range specs with step 1
    are glued (the smallest first key, the largest last key compared as unsigned, so a
    negative one wins), a step other than 1 shows nothing, and other specs are left out.
    (Redis 7.0 never sets the "previous last key" it means to compare each spec with, so
    that check is a no-op there and here.)"""
    if not specs:
        return (0, 0, 0)
    if len(specs) == 1 and specs[0].is_range:
        s = specs[0]
        return _legacy_triplet(s.begin_search.pos, s.find_keys.lastkey, s.find_keys.keystep)  # type: ignore[union-attr]
    firstkey, lastkey = None, 0
    for s in specs:
        if not s.is_range:
            continue
        pos, fk = s.begin_search.pos, s.find_keys  # type: ignore[union-attr]
        if fk.keystep != 1:  # type: ignore[union-attr]
            return (0, 0, 0)
        firstkey = pos if firstkey is None else min(firstkey, pos)
        abs_last = fk.lastkey + pos if fk.lastkey >= 0 else fk.lastkey  # type: ignore[union-attr]
        lastkey = max(lastkey, abs_last, key=lambda v: v & 0xFFFFFFFF)
    if firstkey is None:
        return (0, 0, 0)
    return _legacy_triplet(firstkey, lastkey if lastkey < 0 else lastkey - firstkey, 1)


def _legacy_triplet(pos: int, lastkey: int, keystep: int) -> tuple[int, int, int]:
    return (pos, lastkey + pos if lastkey >= 0 else lastkey, keystep)


# a key found in a command's arguments: (position, flags)
KeyRef = tuple[int, KeyFlag]
GetKeysProc = Callable[[Sequence[bytes]], list[KeyRef]]


# what MULTI does not queue (Redis's processCommand): these run at once
_RUN_IN_MULTI = frozenset(("exec", "discard", "multi", "watch", "quit", "reset"))


@dataclass(slots=True)
class Command:
    name: str  # lowercase, e.g. "get" or "setname" for CLIENT SETNAME
    handler: Callable[..., Any] | None
    arity: int
    flags: tuple[str, ...]
    first_key: int = 0  # legacy (first, last, step): given by keys=, or derived from the specs
    last_key: int = 0
    step: int = 0
    group: str = "generic"
    summary: str = ""
    since: str = "1.0.0"
    complexity: str = "O(1)"
    syntax: str = ""
    parent: str | None = None
    acl: tuple[str, ...] = ()
    key_specs: tuple[KeySpec, ...] = ()
    getkeys: GetKeysProc | None = None  # Redis's getkeys_proc: when the specs cannot tell
    subcommands: dict[str, "Command"] = field(default_factory=dict)
    write: bool = field(init=False, default=False)
    no_auth: bool = field(init=False, default=False)
    movablekeys: bool = field(init=False, default=False)
    fast: bool = field(init=False, default=False)
    readonly: bool = field(init=False, default=False)
    may_replicate: bool = field(init=False, default=False)  # Redis's is_may_replicate_command
    no_multi: bool = field(init=False, default=False)  # refused inside MULTI
    # MONITOR (node/monitor.py): admin commands are never shown; skip_monitor ones (scripts)
    # are shown before they run, the others after; a monitor may not run keyspace ones
    admin: bool = field(init=False, default=False)
    skip_monitor: bool = field(init=False, default=False)
    keyspace: bool = field(init=False, default=False)
    queued_in_multi: bool = field(init=False, default=True)  # False: runs at once inside MULTI
    # INFO commandstats (CONFIG RESETSTAT clears them): runs, their time in ns, and the
    # calls refused before running (arity, auth, ...) or that ended in an error reply
    calls: int = field(init=False, default=0)
    nsec: int = field(init=False, default=0)
    rejected_calls: int = field(init=False, default=0)
    failed_calls: int = field(init=False, default=0)

    def __post_init__(self) -> None:
        self.write = "write" in self.flags
        self.fast = "fast" in self.flags
        self.readonly = "readonly" in self.flags
        self.no_auth = "no_auth" in self.flags
        self.no_multi = "no_multi" in self.flags
        self.admin = "admin" in self.flags
        self.skip_monitor = "skip_monitor" in self.flags
        self.may_replicate = self.write or "may_replicate" in self.flags
        self.keyspace = self.may_replicate or self.readonly
        self.queued_in_multi = self.parent is not None or self.name not in _RUN_IN_MULTI
        if self.key_specs:
            if self.first_key:
                raise ValueError(f"{self.name}: declare specs= or keys=, not both")
        else:
            self.key_specs = legacy_specs(self.first_key, self.last_key, self.step, self.write)
        self.first_key, self.last_key, self.step = legacy_range(self.key_specs)
        # Redis 7.0.15: movablekeys when a spec is not index+range (a keyword or a count)
        self.movablekeys = any(not s.is_range for s in self.key_specs)

    @property
    def fullname(self) -> str:
        return f"{self.parent}|{self.name}" if self.parent else self.name

    @property
    def is_write(self) -> bool:
        return self.write

    @property
    def has_keys(self) -> bool:
        """Redis's doesCommandHaveKeys: a getkeys procedure, or a spec of real keys."""
        return self.getkeys is not None or any(not s.flags & KeyFlag.NOT_KEY for s in self.key_specs)

    def spec_key_refs(self, args: Sequence[bytes], *, not_keys: bool = False,
                      partial: bool = False) -> list[KeyRef] | None:
        """The keys the specs find in ``args`` (the command name at 0): Redis 7.0's
        getKeysUsingKeySpecs. ``None`` when a spec is invalid for these arguments or
        INCOMPLETE; with ``partial`` such specs are skipped and the others' keys kept.
        NOT_KEY specs count only with ``not_keys``."""
        refs: list[KeyRef] = []
        for spec in self.key_specs:
            if spec.flags & KeyFlag.NOT_KEY and not not_keys:
                continue
            found = spec.positions(args)
            if found is None:
                if partial:
                    continue
                return None
            if not found:
                continue  # its keyword is absent (a valid range is never empty)
            refs += [(i, spec.flags) for i in found]
            if spec.flags & KeyFlag.INCOMPLETE and not partial:
                return None
        return refs

    def key_refs(self, args: Sequence[bytes]) -> list[KeyRef]:
        """The keys of ``args`` with their flags, as Redis's getKeysFromCommandWithSpecs
        finds them: the specs when they are reliable (a spec of real keys, none with
        VARIABLE_FLAGS) and valid for these arguments, else the command's getkeys
        procedure, else none."""
        specs = self.key_specs
        if any(not s.flags & KeyFlag.NOT_KEY for s in specs) and \
                not any(s.flags & KeyFlag.VARIABLE_FLAGS for s in specs):
            refs = self.spec_key_refs(args)
            if refs is not None:
                return refs
        if self.getkeys is not None:
            return self.getkeys(args)
        return []

    def keys_named(self, args: Sequence[bytes]) -> list[bytes]:
        """``keys_of``, or where a spec is invalid for these arguments (COMMAND GETKEYS
        refuses them: ``PFMERGE dest`` with no source) the keys of the valid specs."""
        keys = self.keys_of(args)
        if not keys and self.key_specs:
            keys = [args[i] for i, _ in self.spec_key_refs(args, partial=True) or ()]
        return keys

    def keys_of(self, args: Sequence[bytes]) -> list[bytes]:
        """The key names of ``args`` (COMMAND GETKEYS; key routing)."""
        return [args[i] for i, _ in self.key_refs(args)]


def command(name: str, arity: int, flags: str = "", keys: tuple[int, int, int] = (0, 0, 0), *,
            specs: SpecDecl | Sequence[SpecDecl] = (), getkeys: str | GetKeysProc | None = None,
            group: str = "generic", summary: str = "", since: str = "1.0.0",
            complexity: str = "O(1)", syntax: str = "", parent: str | None = None,
            acl: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Attach a command declaration to its handler (no global registry). Keys are
    ``specs=`` (see the module docstring) or the legacy ``keys=(first, last, step)``;
    ``getkeys=`` names one of Redis's getkeys procedures (``GETKEYS_PROCS``) or is one."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        decls = getattr(fn, "__commands__", [])
        decls.append(Command(name, fn, arity, tuple(flags.split()), *keys, group=group,
                             summary=summary, since=since, complexity=complexity, syntax=syntax,
                             parent=parent, acl=tuple(acl.split()), key_specs=parse_specs(specs),
                             getkeys=GETKEYS_PROCS[getkeys] if isinstance(getkeys, str) else getkeys))
        fn.__commands__ = decls  # type: ignore[attr-defined]
        return fn

    return deco
FAMILIES = (
    "marekvs.commands.connection",
    "marekvs.commands.admin",
    "marekvs.commands.introspection",
    "marekvs.commands.strings",
    "marekvs.commands.keys",
    "marekvs.commands.debug",
    "marekvs.commands.monitoring",
    "marekvs.commands.pubsub",
    "marekvs.commands.transactions",
    # hashes, sets and per-member TTL (hashes-sets)
    "marekvs.commands.hashes",
    "marekvs.commands.sets",
    "marekvs.commands.members",
    # -- lists --
    "marekvs.commands.lists",
    # sorted sets and geo
    "marekvs.commands.zsets",
    "marekvs.commands.geo",
    # DUMP/RESTORE, SORT, MEMORY, SWAPDB/MOVE (issue 25)
    "marekvs.commands.dump",
    "marekvs.commands.sort",
    "marekvs.commands.memory",
    "marekvs.commands.databases",
    # HyperLogLog and bitmaps (branch hll-keyspace)
    "marekvs.commands.hll",
    "marekvs.commands.bitmaps",
    # streams and consumer groups
    "marekvs.commands.streams",
    # scripting: EVAL*, SCRIPT, FCALL*, FUNCTION
    "marekvs.commands.scripting",
    # ACL users (acl)
    "marekvs.commands.acl",
)


def help_subcommand(parent: str, lines: tuple[str, ...], *, group: str, since: str = "5.0.0",
                    acl: str = "") -> Callable[..., Any]:
    """The HELP subcommand of the container ``parent``: ``lines`` as an array of simple
    strings, as Redis prints them. Assign the result to a module-level name so the
    table finds it."""
    reply = [Simple(x.encode()) for x in lines]

    def handler(ctx: Any, args: list[bytes]) -> list[Simple]:
        return list(reply)

    handler.__name__ = f"{parent}_help"
    return command("help", 2, "loading stale", parent=parent, group=group, since=since, acl=acl,
                   summary="Returns helpful text about the different subcommands.")(handler)


def container(name: str, arity: int = -2, flags: str = "", *, group: str = "generic",
              summary: str = "", since: str = "1.0.0", acl: str = "",
              handler: Callable[..., Any] | None = None) -> Command:
    """A command whose behaviour lives in its subcommands (CLIENT, CONFIG, ...);
    ``handler`` answers the bare command when it has a meaning (COMMAND)."""
    return Command(name, handler, arity, tuple(flags.split()), group=group, summary=summary,
                   since=since, complexity="Depends on subcommand.", acl=tuple(acl.split()))


class CommandTable:
    def __init__(self) -> None:
        self.commands: dict[bytes, Command] = {}
        # name as clients usually send it (lower or upper case) -> command: the
        # dispatcher's first lookup; mixed case falls back to .lower()
        self.dispatch: dict[bytes, Command] = {}

    def add(self, cmd: Command) -> None:
        if cmd.parent is None:
            name = cmd.name.encode()
            self.commands[name] = cmd
            self.dispatch[name] = self.dispatch[name.upper()] = cmd
            return
        parent = self.commands[cmd.parent.encode()]
        parent.subcommands[cmd.name] = cmd

    def register_module(self, module: Any) -> None:
        for c in getattr(module, "CONTAINERS", ()):
            self.add(c)
        for obj in vars(module).values():
            for decl in getattr(obj, "__commands__", ()):
                self.add(decl)

    def lookup(self, name: bytes) -> Command | None:
        """A command by name, or a subcommand by ``container|sub`` (any case)."""
        name = name.lower()
        parent, _, sub = name.partition(b"|")
        c = self.commands.get(parent)
        if c is not None and sub:
            return c.subcommands.get(sub.decode("latin-1"))
        return c

    def __len__(self) -> int:
        return len(self.commands)

    def all_commands(self) -> Iterator[Command]:
        """Every command and subcommand."""
        for c in self.commands.values():
            yield c
            yield from c.subcommands.values()

    def __iter__(self):
        return iter(self.commands.values())


def build_table(families: tuple[str, ...] | None = None) -> CommandTable:
    table = CommandTable()
    for modname in families or FAMILIES:
        table.register_module(importlib.import_module(modname))
    return table


# -- Redis's getkeys procedures (db.c) --------------------------------------------------------
# What GETKEYS answers for a command whose specs cannot tell (INCOMPLETE, unknown,
# VARIABLE_FLAGS) or are invalid for the arguments: Redis 7.0's procedures, ported as they
# are, quirks included (atoi counts, C-string compares). A declaration names one with
# ``getkeys="..."``. Flags 0 where Redis leaves them 0 ("fully defined keyspec").

def _is(arg: bytes, word: bytes) -> bool:
    """strcasecmp(arg, word) == 0 on a C string."""
    return c_str(arg).lower() == word


def _atoi(b: bytes) -> int:
    """C's atoi as glibc has it: (int) strtol(s, NULL, 10) of the C string."""
    s = c_str(b).lstrip(b" \t\n\v\f\r")
    sign, j = 1, 0
    if s[:1] in (b"+", b"-"):
        sign, j = (-1 if s[:1] == b"-" else 1), 1
    k = j
    while k < len(s) and 48 <= s[k] <= 57:
        k += 1
    v = sign * int(s[j:k]) if k > j else 0
    v = max(-(1 << 63), min(v, (1 << 63) - 1))  # strtol clamps to LONG_MIN/LONG_MAX
    return _c_int(v)


def _numkeys_getkeys(store: int, count: int, first: int, step: int = 1) -> GetKeysProc:
    """Redis's genericGetKeys: COMMAND [destkey] numkeys key [key ...] ... (the
    destination, if any, last)."""

    def proc(args: Sequence[bytes]) -> list[KeyRef]:
        num = _atoi(args[count])
        if num < 1 or num > _c_div(len(args) - first, step):
            return []
        refs = [(first + i * step, NO_KEY_FLAGS) for i in range(num)]
        if store:
            refs.append((store, NO_KEY_FLAGS))
        return refs

    return proc


_RW_ACCESS_UPDATE = KeyFlag.RW | KeyFlag.ACCESS | KeyFlag.UPDATE  # (an enum | costs ~1 us: once)
_OW_UPDATE = KeyFlag.OW | KeyFlag.UPDATE


def _set_getkeys(args: Sequence[bytes]) -> list[KeyRef]:
    """SET key value ...: read (RW) only when GET is among the options (ACL checks every SET
    of a restricted user with this)."""
    if len(args) > 3 and any(_is(a, b"get") for a in args[3:]):
        return [(1, _RW_ACCESS_UPDATE)]
    return [(1, _OW_UPDATE)]


def _bitfield_getkeys(args: Sequence[bytes]) -> list[KeyRef]:
    """BITFIELD key [GET type offset | OVERFLOW how]...: read only when every operation
    is a complete GET (or OVERFLOW); anything else, even a syntax error, writes."""
    i, argc = 2, len(args)
    while i < argc:
        rest = argc - i - 1
        if _is(args[i], b"get") and rest >= 2:
            i += 2
        elif _is(args[i], b"overflow") and rest >= 1:
            i += 1
        else:  # SET, INCRBY, or a syntax error: assume a write
            return [(1, KeyFlag.RW | KeyFlag.ACCESS | KeyFlag.UPDATE)]
        i += 1
    return [(1, KeyFlag.RO | KeyFlag.ACCESS)]


def _sort_ro_getkeys(args: Sequence[bytes]) -> list[KeyRef]:
    return [(1, KeyFlag.RO | KeyFlag.ACCESS)]


def _sort_getkeys(args: Sequence[bytes]) -> list[KeyRef]:
    """SORT key ... [STORE destination]: the last STORE wins; LIMIT skips two
    arguments, GET and BY one, anything else none (Redis's loop, order of tests kept)."""
    refs: list[KeyRef] = [(1, KeyFlag.RO | KeyFlag.ACCESS)]
    store = 0
    i = 2
    while i < len(args):
        a = args[i]
        if _is(a, b"limit"):
            i += 2
        elif _is(a, b"store") and i + 1 < len(args):
            store = i + 1
        elif _is(a, b"get") or _is(a, b"by"):
            i += 1
        i += 1
    if store:
        refs.append((store, KeyFlag.OW | KeyFlag.UPDATE))
    return refs


_MIGRATE_SKIP = {b"copy": 0, b"replace": 0, b"auth": 1, b"auth2": 2}


def _migrate_getkeys(args: Sequence[bytes]) -> list[KeyRef]:
    """MIGRATE host port key|"" db timeout [COPY] [REPLACE] [AUTH pw | AUTH2 user pw]
    [KEYS key...]: the options before KEYS are skipped with their arguments (a password
    may be "keys"); KEYS with a key named in the third argument is an error (no keys)."""
    first, num = 3, 1
    if len(args) > 6:
        i = 6
        while i < len(args):
            if _is(args[i], b"keys"):
                if len(args[3]) > 0:
                    return []
                first, num = i + 1, len(args) - i - 1
                break
            i += _MIGRATE_SKIP.get(c_str(args[i]).lower(), 0) + 1
    return [(first + i, KeyFlag.RW | KeyFlag.ACCESS | KeyFlag.DELETE) for i in range(num)]


def _georadius_getkeys(args: Sequence[bytes]) -> list[KeyRef]:
    """GEORADIUS[BYMEMBER] key ... [STORE key] [STOREDIST key]: the last one wins."""
    stored = -1
    i = 5
    while i < len(args):
        if (_is(args[i], b"store") or _is(args[i], b"storedist")) and i + 1 < len(args):
            stored = i + 1
            i += 1
        i += 1
    return [(1, NO_KEY_FLAGS)] + ([(stored, NO_KEY_FLAGS)] if stored != -1 else [])


def _xread_getkeys(args: Sequence[bytes]) -> list[KeyRef]:
    """XREAD[GROUP] [BLOCK ms] [COUNT n] [GROUP g c] [NOACK] STREAMS key... id...: the
    options parsed up to the first STREAMS (a key or group may be named "streams")."""
    streams = -1
    i = 1
    while i < len(args):
        a = args[i]
        if _is(a, b"block") or _is(a, b"count"):
            i += 1
        elif _is(a, b"group"):
            i += 2
        elif _is(a, b"noack"):
            pass
        elif _is(a, b"streams"):
            streams = i
            break
        else:
            break
        i += 1
    num = len(args) - streams - 1 if streams != -1 else 0
    if streams == -1 or num == 0 or num % 2:
        return []
    return [(p, NO_KEY_FLAGS) for p in range(streams + 1, len(args) - num // 2)]


GETKEYS_PROCS: dict[str, GetKeysProc] = {
    "set": _set_getkeys,
    "bitfield": _bitfield_getkeys,
    "sort": _sort_getkeys,
    "sort_ro": _sort_ro_getkeys,
    "migrate": _migrate_getkeys,
    "georadius": _georadius_getkeys,  # and GEORADIUSBYMEMBER
    "xread": _xread_getkeys,  # and XREADGROUP
    # numkeys commands: (destination, count, first key) positions
    "zunion_inter_diff_store": _numkeys_getkeys(1, 2, 3),  # ZUNIONSTORE ZINTERSTORE ZDIFFSTORE
    "zunion_inter_diff": _numkeys_getkeys(0, 1, 2),  # ZUNION ZINTER ZDIFF ZINTERCARD
    "sintercard": _numkeys_getkeys(0, 1, 2),
    "eval": _numkeys_getkeys(0, 2, 3),  # EVAL[SHA][_RO]; FCALL[_RO] (functionGetKeys)
    "lmpop": _numkeys_getkeys(0, 1, 2),  # LMPOP ZMPOP
    "blmpop": _numkeys_getkeys(0, 2, 3),  # BLMPOP BZMPOP
}
