"""The command table: every command declared once, as data.

A handler carries its declaration (``@command``): name, arity (negative = at least,
counting the name), flags, key positions (first, last, step), group, summary and the
argument grammar in Redis's documentation syntax. The dispatcher checks arity from
here before any handler runs; COMMAND, COMMAND COUNT|INFO|DOCS|LIST and redis-cli's
hints are all answered from this one table. Container commands (CLIENT, CONFIG, ...)
declare their subcommands the same way with ``parent=``.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from typing import Any, Callable

from marekvs.commands.reply import Simple

FAMILIES = (
    "marekvs.commands.connection",
    "marekvs.commands.admin",
    "marekvs.commands.introspection",
    "marekvs.commands.strings",
    "marekvs.commands.keys",
    "marekvs.commands.debug",
)


@dataclass(slots=True)
class Command:
    name: str  # lowercase, e.g. "get" or "setname" for CLIENT SETNAME
    handler: Callable[..., Any] | None
    arity: int
    flags: tuple[str, ...]
    first_key: int = 0
    last_key: int = 0
    step: int = 0
    group: str = "generic"
    summary: str = ""
    since: str = "1.0.0"
    complexity: str = "O(1)"
    syntax: str = ""
    parent: str | None = None
    acl: tuple[str, ...] = ()
    subcommands: dict[str, "Command"] = field(default_factory=dict)
    write: bool = field(init=False, default=False)
    no_auth: bool = field(init=False, default=False)

    def __post_init__(self) -> None:
        self.write = "write" in self.flags
        self.no_auth = "no_auth" in self.flags

    @property
    def fullname(self) -> str:
        return f"{self.parent}|{self.name}" if self.parent else self.name

    @property
    def is_write(self) -> bool:
        return self.write

    def keys_of(self, args: list[bytes]) -> list[bytes]:
        if not self.first_key:
            return []
        last = self.last_key if self.last_key >= 0 else len(args) + self.last_key
        return args[self.first_key : last + 1 : self.step or 1]


def command(name: str, arity: int, flags: str = "", keys: tuple[int, int, int] = (0, 0, 0), *,
            group: str = "generic", summary: str = "", since: str = "1.0.0",
            complexity: str = "O(1)", syntax: str = "", parent: str | None = None,
            acl: str = "") -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Attach a command declaration to its handler (no global registry)."""

    def deco(fn: Callable[..., Any]) -> Callable[..., Any]:
        decls = getattr(fn, "__commands__", [])
        decls.append(Command(name, fn, arity, tuple(flags.split()), *keys, group=group,
                             summary=summary, since=since, complexity=complexity, syntax=syntax,
                             parent=parent, acl=tuple(acl.split())))
        fn.__commands__ = decls  # type: ignore[attr-defined]
        return fn

    return deco


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

    def __iter__(self):
        return iter(self.commands.values())


def build_table(families: tuple[str, ...] | None = None) -> CommandTable:
    table = CommandTable()
    for modname in families or FAMILIES:
        table.register_module(importlib.import_module(modname))
    return table
