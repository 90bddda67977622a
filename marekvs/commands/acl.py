"""ACL: SETUSER, GETUSER, DELUSER, LIST, USERS, WHOAMI, CAT, GENPASS, LOG, DRYRUN, SAVE,
LOAD, HELP (Redis 7.0 ``aclCommand``).

The rules and users are ``aclrules.py``'s; the node's users, log and checks are
``ctx.node.acl`` (``node/acl.py``). A change (SETUSER, DELUSER, LOAD) is written as user
records, so it reaches every node of the cluster; the reply comes once this node holds it.
The ACL LOG is this node's own, as Redis's is per server.
"""

from __future__ import annotations

import secrets
import time

from marekvs.commands import aclrules, errors, reply
from marekvs.commands.aclrules import RuleError, UnmatchedParenthesis
from marekvs.commands.args import parse_ll
from marekvs.commands.errors import CommandError
from marekvs.commands.table import command, container, help_subcommand

CONTAINERS = (
    container("acl", -2, group="server", acl="slow", summary="A container for Access List Control commands",
              since="6.0.0"),
)

_ADMIN = "admin noscript loading stale"
_ADMIN_ACL = "admin slow dangerous"
_ACL = dict(parent="acl", group="server", since="6.0.0")
GENPASS_MAX_BITS = 4096


@command("setuser", -3, _ADMIN, acl=_ADMIN_ACL, summary="Modify or create the rules for a specific ACL user",
         complexity="O(N). Where N is the number of rules provided.", syntax="username [rule [rule ...]]", **_ACL)
def acl_setuser(ctx, args):
    name = args[2]
    if aclrules.has_spaces(name):
        raise CommandError(errors.ACL_USERNAME_SPACES)
    try:
        ops = aclrules.merge_selector_args(args[3:])
    except UnmatchedParenthesis as e:
        raise CommandError(errors.acl_unmatched_parenthesis(args[3 + e.index])) from None
    try:
        ctx.node.acl.set_user(name, ops)
    except RuleError as e:
        raise CommandError(errors.acl_setuser_modifier(e.op, str(e))) from None  # type: ignore[attr-defined]
    return reply.OK


@command("deluser", -3, _ADMIN, acl=_ADMIN_ACL, summary="Remove the specified ACL users and the associated rules",
         complexity="O(1) amortized time considering the typical user.", syntax="username [username ...]", **_ACL)
def acl_deluser(ctx, args):
    if b"default" in args[2:]:
        raise CommandError(errors.ACL_DEFAULT_UNDELETABLE)
    return ctx.node.acl.delete_users(list(dict.fromkeys(args[2:])))


def _selector_fields(sel, view) -> list:
    return [b"commands", aclrules.describe_commands(sel, view), b"keys", sel.keys_text(),
            b"channels", sel.channels_text()]


@command("getuser", 3, _ADMIN, acl=_ADMIN_ACL, summary="Get the rules for a specific ACL user",
         complexity="O(N). Where N is the number of password, command and pattern rules that the user has.",
         syntax="username", **_ACL)
def acl_getuser(ctx, args):
    acl = ctx.node.acl
    u = acl.users.get(args[2])
    if u is None:
        return None
    return reply.Map([b"flags", reply.SetReply(u.flag_names()), b"passwords", list(u.passwords)]
                     + _selector_fields(u.root, acl.view)
                     + [b"selectors", [reply.Map(_selector_fields(s, acl.view)) for s in u.selectors[1:]]])


@command("list", 2, _ADMIN, acl=_ADMIN_ACL, summary="List the current ACL rules in ACL config file format",
         complexity="O(N). Where N is the number of configured users.", **_ACL)
def acl_list(ctx, args):
    acl = ctx.node.acl
    return [b"user " + u.name + b" " + u.describe(acl.view) for _, u in sorted(acl.users.items())]


@command("users", 2, _ADMIN, acl=_ADMIN_ACL, summary="List the username of all the configured ACL rules",
         complexity="O(N). Where N is the number of configured users.", **_ACL)
def acl_users(ctx, args):
    return sorted(ctx.node.acl.users)


@command("whoami", 2, "noscript loading stale", acl="slow",
         summary="Return the name of the user associated to the current connection", **_ACL)
def acl_whoami(ctx, args):
    return ctx.user.name


@command("cat", -2, "noscript loading stale", acl="slow",
         summary="List the ACL categories or the commands inside a category",
         complexity="O(1) since the categories and commands are a fixed set.", syntax="[categoryname]", **_ACL)
def acl_cat(ctx, args):
    if len(args) > 3:
        raise CommandError(errors.subcommand_syntax("acl", args[1]))
    if len(args) == 2:
        return [c.encode() for c in aclrules.CATEGORIES]
    view = ctx.node.acl.view
    cat = view.category(args[2])
    if cat is None:
        raise CommandError(errors.acl_unknown_category(args[2]))
    return [c.fullname.encode() for c in view.members[cat]]


@command("genpass", -2, "noscript loading stale", acl="slow",
         summary="Generate a pseudorandom secure password to use for ACL users",
         complexity="O(N) where N is the number of bits generated.", syntax="[bits]", **_ACL)
def acl_genpass(ctx, args):
    if len(args) > 3:
        raise CommandError(errors.subcommand_syntax("acl", args[1]))
    bits = 256
    if len(args) == 3:
        bits = parse_ll(args[2])
        if bits is None:
            raise CommandError(errors.NOT_INTEGER)
    if bits <= 0 or bits > GENPASS_MAX_BITS:
        raise CommandError(errors.ACL_GENPASS_BITS)
    chars = (bits + 3) // 4
    return secrets.token_hex((chars + 1) // 2)[:chars].encode()


@command("log", -2, _ADMIN, acl=_ADMIN_ACL, summary="List latest events denied because of ACLs in place",
         complexity="O(N) with N being the number of entries shown.", syntax="[count | RESET]", **_ACL)
def acl_log(ctx, args):
    if len(args) > 3:
        raise CommandError(errors.subcommand_syntax("acl", args[1]))
    acl = ctx.node.acl
    count = 10
    if len(args) == 3:
        if args[2].lower() == b"reset":
            acl.log.clear()
            return reply.OK
        count = parse_ll(args[2])
        if count is None:
            raise CommandError(errors.NOT_INTEGER)
        count = max(count, 0)
    now = int(time.time() * 1000)
    return [reply.Map([b"count", e.count, b"reason", e.reason, b"context", e.context.encode(),
                       b"object", e.object, b"username", e.username,
                       b"age-seconds", reply.Double((now - e.ctime) / 1000), b"client-info", e.cinfo])
            for e in acl.log[:count]]


@command("dryrun", -4, _ADMIN, acl=_ADMIN_ACL,
         summary="Returns whether the user can execute the given command without executing the command.",
         since="7.0.0", complexity="O(1).", syntax="username command [arg [arg ...]]",
         parent="acl", group="server")
def acl_dryrun(ctx, args):
    acl = ctx.node.acl
    u = acl.users.get(args[2])
    if u is None:
        raise CommandError(errors.acl_user_not_found(args[2]))
    argv = args[3:]
    cmd = acl.view.lookup_argv(argv)
    if cmd is None:
        raise CommandError(errors.acl_command_not_found(args[3]))
    if (cmd.arity > 0 and cmd.arity != len(argv)) or len(argv) < -cmd.arity:
        raise CommandError(errors.wrong_arity(cmd.fullname))
    result, pos = u.check(acl.view, cmd, argv)
    if result == aclrules.DENIED_CMD:
        return errors.dryrun_command(cmd.fullname).encode()
    if result == aclrules.DENIED_KEY:
        return errors.dryrun_key(argv[pos]).encode("utf-8", "surrogateescape")
    if result == aclrules.DENIED_CHANNEL:
        return errors.dryrun_channel(argv[pos]).encode("utf-8", "surrogateescape")
    return reply.OK


@command("load", 2, _ADMIN, acl=_ADMIN_ACL, summary="Reload the ACLs from the configured ACL file",
         complexity="O(N). Where N is the number of configured users.", **_ACL)
def acl_load(ctx, args):
    acl = ctx.node.acl
    if not ctx.node.config.aclfile:
        raise CommandError(errors.ACL_NO_FILE)
    err = acl.load_file()
    if err is not None:
        raise CommandError(err)
    return reply.OK


@command("save", 2, _ADMIN, acl=_ADMIN_ACL, summary="Save the current ACL rules in the configured ACL file",
         complexity="O(N). Where N is the number of configured users.", **_ACL)
def acl_save(ctx, args):
    if not ctx.node.config.aclfile:
        raise CommandError(errors.ACL_NO_FILE)
    if not ctx.node.acl.save_file():
        raise CommandError(errors.ACL_SAVE_FAILED)
    return reply.OK


# Redis 7.0's ACL HELP, word for word
acl_help = help_subcommand("acl", (
    "ACL <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CAT [<category>]",
    "    List all commands that belong to <category>, or all command categories",
    "    when no category is specified.",
    "DELUSER <username> [<username> ...]",
    "    Delete a list of users.",
    "DRYRUN <username> <command> [<arg> ...]",
    "    Returns whether the user can execute the given command without executing the command.",
    "GETUSER <username>",
    "    Get the user's details.",
    "GENPASS [<bits>]",
    "    Generate a secure 256-bit user password. The optional `bits` argument can",
    "    be used to specify a different size.",
    "LIST",
    "    Show users details in config file format.",
    "LOAD",
    "    Reload users from the ACL file.",
    "LOG [<count> | RESET]",
    "    Show the ACL log entries.",
    "SAVE",
    "    Save the current config to the ACL file.",
    "SETUSER <username> <attribute> [<attribute> ...]",
    "    Create or modify a user with the specified attributes.",
    "USERS",
    "    List all the registered usernames.",
    "WHOAMI",
    "    Return the current connection username.",
    "HELP",
    "    Prints this help."), group="server", since="6.0.0", acl="slow")
