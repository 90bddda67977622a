"""COMMAND and its subcommands, answered from the one command table (``table.py``):
COUNT, INFO, DOCS, LIST, GETKEYS, GETKEYSANDFLAGS (docs.py builds the INFO and DOCS
replies; the keys come from each command's key specs)."""

from __future__ import annotations

from marekvs.commands import docs, errors, reply
from marekvs.commands.args import stringmatch
from marekvs.commands.errors import CommandError
from marekvs.commands.table import command, container, help_subcommand

CONTAINERS = (
    container("command", -1, "loading stale", group="server", acl="connection slow",
              summary="Returns detailed information about all commands.", since="2.8.13",
              handler=lambda ctx, args: [docs.info_reply(x) for x in _all_commands(ctx.node.table)]),
)


def _all_commands(table):
    return sorted(table, key=lambda x: x.name)


@command("count", 2, "loading stale", parent="command", group="server", acl="connection slow",
         summary="Returns a count of commands.", since="2.8.13")
def command_count(ctx, args):
    return len(ctx.node.table)


@command("info", -2, "loading stale", parent="command", group="server", acl="connection slow",
         summary="Returns information about one, multiple or all commands.", since="2.8.13",
         syntax="[command-name [command-name ...]]")
def command_info(ctx, args):
    table = ctx.node.table
    if len(args) == 2:
        return [docs.info_reply(x) for x in _all_commands(table)]
    out = []
    for name in args[2:]:
        cmd = table.lookup(name)
        out.append(docs.info_reply(cmd) if cmd else None)
    return out


@command("docs", -2, "loading stale", parent="command", group="server", acl="connection slow",
         summary="Returns documentary information about one, multiple or all commands.", since="7.0.0",
         syntax="[command-name [command-name ...]]")
def command_docs(ctx, args):
    table = ctx.node.table
    names = args[2:] or [x.name.encode() for x in _all_commands(table)]
    out: list = []
    for name in names:
        cmd = table.lookup(name)
        if cmd is not None:
            out += [cmd.name.encode(), docs.doc_reply(cmd)]
    return reply.Map(out)


@command("list", -2, "loading stale", parent="command", group="server", acl="connection slow",
         summary="Returns a list of command names.", since="7.0.0",
         syntax="[FILTERBY MODULE module-name | ACLCAT category | PATTERN pattern]")
def command_list(ctx, args):
    """Every command and subcommand by full name (``config|get``), as Redis 7.0's
    commandListWithFilter: ACLCAT a category name (an unknown one matches nothing),
    PATTERN a glob on the full name, any case; MODULE nothing (no modules)."""
    cmds = list(ctx.node.table.all_commands())
    if len(args) > 2:
        if len(args) != 5 or args[2].upper() != b"FILTERBY":
            raise CommandError(errors.SYNTAX)
        kind, val = args[3].upper(), args[4]
        if kind == b"MODULE":
            cmds = []
        elif kind == b"ACLCAT":
            cat = val.decode("utf-8", "replace").lower()
            cmds = [x for x in cmds if cat in docs.acl_categories(x)]
        elif kind == b"PATTERN":
            cmds = [x for x in cmds if stringmatch(val, x.fullname.encode(), nocase=True)]
        else:
            raise CommandError(errors.SYNTAX)
    return [x.fullname.encode() for x in cmds]


def _getkeys_target(table, argv: list[bytes]):
    """The command a GETKEYS full command names, as Redis's lookupCommand finds it: the
    first word, or its subcommand named by the second word when it is a container (no
    ``container|sub`` form here)."""
    base = table.commands.get(argv[0].lower())
    if base is None or not base.subcommands or len(argv) == 1:
        return base
    return base.subcommands.get(argv[1].lower().decode("latin-1"))


def _getkeys(ctx, args, with_flags: bool):
    """COMMAND GETKEYS / GETKEYSANDFLAGS (Redis's getKeysSubcommandImpl): the checks in
    Redis's order, then the keys the command's specs (or getkeys procedure) find."""
    sub = args[2:]
    cmd = _getkeys_target(ctx.node.table, sub)
    if cmd is None:
        raise CommandError(errors.INVALID_COMMAND)
    if not cmd.has_keys:
        raise CommandError(errors.NO_KEY_ARGUMENTS)
    if (cmd.arity > 0 and len(sub) != cmd.arity) or len(sub) < -cmd.arity:
        raise CommandError(errors.INVALID_COMMAND_ARITY)
    refs = cmd.key_refs(sub)
    if not refs and "no_mandatory_keys" not in cmd.flags:
        raise CommandError(errors.INVALID_ARGUMENTS)
    if not with_flags:
        return [sub[i] for i, _ in refs]
    return [[sub[i], docs.key_flags_reply(flags)] for i, flags in refs]


@command("getkeys", -4, "loading stale", parent="command", group="server", acl="connection slow",
         summary="Extract keys given a full Redis command", since="2.8.13",
         complexity="O(N) where N is the number of arguments to the command",
         syntax="command [arg [arg ...]]")
def command_getkeys(ctx, args):
    return _getkeys(ctx, args, with_flags=False)


@command("getkeysandflags", -4, "loading stale", parent="command", group="server", acl="connection slow",
         summary="Extract keys and access flags given a full Redis command", since="7.0.0",
         complexity="O(N) where N is the number of arguments to the command",
         syntax="command [arg [arg ...]]")
def command_getkeysandflags(ctx, args):
    return _getkeys(ctx, args, with_flags=True)


command_help = help_subcommand("command", (
    "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "(no subcommand)",
    "    Return details about all Redis commands.",
    "COUNT",
    "    Return the total number of commands in this Redis server.",
    "LIST",
    "    Return a list of all commands in this Redis server.",
    "INFO [<command-name> ...]",
    "    Return details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "DOCS [<command-name> ...]",
    "    Return documentation details about multiple Redis commands.",
    "    If no command names are given, documentation details for all",
    "    commands are returned.",
    "GETKEYS <full-command>",
    "    Return the keys from a full Redis command.",
    "GETKEYSANDFLAGS <full-command>",
    "    Return the keys and the access flags from a full Redis command.",
    "HELP",
    "    Prints this help."), group="server", acl="connection slow")
