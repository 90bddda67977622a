"""Scripting commands (Redis 7.0 ``eval.c``, ``functions.c``): EVAL, EVALSHA, EVAL_RO,
EVALSHA_RO, SCRIPT LOAD|EXISTS|FLUSH|KILL|HELP, FCALL, FCALL_RO and FUNCTION
LOAD|DELETE|LIST|FLUSH|DUMP|RESTORE|STATS|KILL|HELP.

The handlers parse arguments and reach the scripting engine through ``ctx.node.scripting``
(``node/scripting/``: the Lua runtime, the script cache, the function libraries), which
returns reply values. A script runs inside its command, on the event-loop thread, and
every write it makes lands in the same batch and replication-log entry (effects
replication: peers get the records, never the script). Function libraries are replicated
records, so a FUNCTION LOAD on one node makes FCALL work on every node; the script cache
of SCRIPT LOAD / EVAL stays on its node, as in Redis (docs/compatibility.md, Scripting).

SCRIPT DEBUG (the Lua debugger) is not implemented.
"""

from __future__ import annotations

from marekvs.commands import args as A
from marekvs.commands import errors, reply
from marekvs.commands.errors import CommandError
from marekvs.commands.table import command, container, help_subcommand

_S = dict(group="scripting")
_WORST = "We cannot tell how the keys will be used so we assume the worst"
_EVAL_SPEC = f"RW ACCESS UPDATE index 2 keynum 0 1 1 ({_WORST}, RW and UPDATE)"
_EVAL_RO_SPEC = f"RO ACCESS index 2 keynum 0 1 1 ({_WORST}, RO and ACCESS)"
_EVAL_FLAGS = "noscript stale skip_monitor no_mandatory_keys"
# EVAL, EVALSHA, FCALL may write (hidden from COMMAND INFO, as Redis hides it): CLIENT
# PAUSE WRITE holds them unless their script is flagged no-writes (node/pause.py)
_MAY_WRITE = _EVAL_FLAGS + " may_replicate"
_EVAL_COMPLEXITY = "Depends on the script that is executed."
_FCALL_COMPLEXITY = "Depends on the function that is executed."

CONTAINERS = (
    container("script", group="scripting", summary="A container for Lua scripts management commands",
              since="2.6.0", acl="slow"),
    container("function", group="scripting", summary="A container for function commands", since="7.0.0",
              acl="slow"),
)


def _unwrap(r):
    if r is True:
        return reply.OK
    return r


# -- EVAL -----------------------------------------------------------------------------------

@command("eval", -3, _MAY_WRITE, specs=_EVAL_SPEC, getkeys="eval", acl="slow scripting",
         summary="Execute a Lua script server side", since="2.6.0", complexity=_EVAL_COMPLEXITY,
         syntax="script numkeys [key [key ...]] [arg [arg ...]]", **_S)
def eval_(ctx, args):
    return ctx.node.scripting.eval(ctx, args, False, False)


@command("evalsha", -3, _MAY_WRITE, specs="RW ACCESS UPDATE index 2 keynum 0 1 1", getkeys="eval",
         acl="slow scripting", summary="Execute a Lua script server side", since="2.6.0",
         complexity=_EVAL_COMPLEXITY, syntax="sha1 numkeys [key [key ...]] [arg [arg ...]]", **_S)
def evalsha(ctx, args):
    return ctx.node.scripting.eval(ctx, args, True, False)


@command("eval_ro", -3, "readonly " + _EVAL_FLAGS, specs=_EVAL_RO_SPEC, getkeys="eval", acl="slow scripting",
         summary="Execute a read-only Lua script server side", since="7.0.0", complexity=_EVAL_COMPLEXITY,
         syntax="script numkeys [key [key ...]] [arg [arg ...]]", **_S)
def eval_ro(ctx, args):
    return ctx.node.scripting.eval(ctx, args, False, True)


@command("evalsha_ro", -3, "readonly " + _EVAL_FLAGS, specs="RO ACCESS index 2 keynum 0 1 1", getkeys="eval",
         acl="slow scripting", summary="Execute a read-only Lua script server side", since="7.0.0",
         complexity=_EVAL_COMPLEXITY, syntax="sha1 numkeys [key [key ...]] [arg [arg ...]]", **_S)
def evalsha_ro(ctx, args):
    return ctx.node.scripting.eval(ctx, args, True, True)


# -- SCRIPT ---------------------------------------------------------------------------------

@command("load", 3, "noscript stale", parent="script", acl="slow scripting",
         summary="Load the specified Lua script into the script cache.", since="2.6.0",
         complexity="O(N) with N being the length in bytes of the script body.", syntax="script", **_S)
def script_load(ctx, args):
    return ctx.node.scripting.script_load(args[2])


@command("exists", -3, "noscript", parent="script", acl="slow scripting",
         summary="Check existence of scripts in the script cache.", since="2.6.0",
         complexity="O(N) with N being the number of scripts to check (so checking a single script is an O(1) "
                    "operation).", syntax="sha1 [sha1 ...]", **_S)
def script_exists(ctx, args):
    return ctx.node.scripting.script_exists(args[2:])


@command("flush", -2, "noscript", parent="script", acl="slow scripting",
         summary="Remove all the scripts from the script cache.", since="2.6.0",
         complexity="O(N) with N being the number of scripts in cache", syntax="[ASYNC | SYNC]", **_S)
def script_flush(ctx, args):
    if len(args) > 3 or (len(args) == 3 and args[2].lower() not in (b"sync", b"async")):
        raise CommandError(errors.SCRIPT_FLUSH_MODE)
    ctx.node.scripting.script_flush()
    return reply.OK


@command("kill", 2, "noscript allow_busy", parent="script", acl="slow scripting",
         summary="Kill the script currently in execution.", since="2.6.0", **_S)
def script_kill(ctx, args):
    return _unwrap(ctx.node.scripting.kill(True))


script_help = help_subcommand("script", (
    "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "EXISTS <sha1> [<sha1> ...]",
    "    Return information about the existence of the scripts in the script cache.",
    "FLUSH [ASYNC|SYNC]",
    "    Flush the Lua scripts cache. Very dangerous on replicas.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the scripts cache.",
    "    * SYNC: Synchronously flush the scripts cache.",
    "KILL",
    "    Kill the currently executing Lua script.",
    "LOAD <script>",
    "    Load a script into the scripts cache without executing it.",
    "HELP",
    "    Prints this help.",
), group="scripting", acl="slow scripting")


# -- FCALL ----------------------------------------------------------------------------------

@command("fcall", -3, _MAY_WRITE, specs=_EVAL_SPEC, getkeys="eval", acl="slow scripting",
         summary="Invoke a function", since="7.0.0", complexity=_FCALL_COMPLEXITY,
         syntax="function numkeys [key [key ...]] [arg [arg ...]]", **_S)
def fcall(ctx, args):
    return ctx.node.scripting.fcall(ctx, args, False)


@command("fcall_ro", -3, "readonly " + _EVAL_FLAGS, specs=_EVAL_RO_SPEC, getkeys="eval", acl="slow scripting",
         summary="Invoke a read-only function", since="7.0.0", complexity=_FCALL_COMPLEXITY,
         syntax="function numkeys [key [key ...]] [arg [arg ...]]", **_S)
def fcall_ro(ctx, args):
    return ctx.node.scripting.fcall(ctx, args, True)


# -- FUNCTION -------------------------------------------------------------------------------

@command("load", -3, "write denyoom noscript", parent="function", acl="write slow scripting",
         summary="Create a function with the given arguments (name, code, description)", since="7.0.0",
         complexity="O(1) (considering compilation time is redundant)", syntax="[REPLACE] function-code", **_S)
def function_load(ctx, args):
    replace = False
    p = A.Options(args, 2, len(args) - 1)  # (the last argument is the code)
    while p.more():
        if p.accept(b"replace"):
            replace = True
        else:
            p.fail(errors.function_load_option(p.value()))
    p.check()
    return ctx.node.scripting.function_load(args[-1], replace)


@command("delete", 3, "write noscript", parent="function", acl="write slow scripting",
         summary="Delete a function by name", since="7.0.0", syntax="library-name", **_S)
def function_delete(ctx, args):
    return _unwrap(ctx.node.scripting.function_delete(args[2]))


@command("flush", -2, "write noscript", parent="function", acl="write slow scripting",
         summary="Deleting all functions", since="7.0.0",
         complexity="O(N) where N is the number of functions deleted", syntax="[ASYNC | SYNC]", **_S)
def function_flush(ctx, args):
    if len(args) > 3:
        raise CommandError(errors.subcommand_syntax("function", args[1]))
    if len(args) == 3 and args[2].lower() not in (b"sync", b"async"):
        raise CommandError(errors.FUNCTION_FLUSH_MODE)
    ctx.node.scripting.function_flush()
    return reply.OK


@command("list", -2, "noscript", parent="function", acl="slow scripting",
         summary="List information about all the functions", since="7.0.0",
         complexity="O(N) where N is the number of functions",
         syntax="[LIBRARYNAME library-name-pattern] [WITHCODE]", **_S)
def function_list(ctx, args):
    with_code = False
    pattern = None
    p = A.Options(args, 2)
    while p.more():
        if not with_code and p.accept(b"withcode"):
            with_code = True
        elif pattern is None and p.accept(b"libraryname"):
            if not p.left():
                p.fail(errors.LIBRARY_NAME_MISSING)
            pattern = p.value()
        else:
            p.fail(errors.function_list_argument(p.value()))
    p.check()
    out = []
    for lib in ctx.node.scripting.catalog.libraries.values():
        if pattern is not None and not A.stringmatch(pattern, lib.name, nocase=True):
            continue
        funcs = []
        for f in lib.functions.values():
            funcs.append(reply.Map([b"name", f.name, b"description", f.description, b"flags",
                                    reply.SetReply(reply.Simple(n) for n in f.flag_names)]))
        entry = [b"library_name", lib.name, b"engine", b"LUA", b"functions", funcs]
        if with_code:
            entry += [b"library_code", lib.code]
        out.append(reply.Map(entry))
    return out


@command("dump", 2, "noscript", parent="function", acl="slow scripting",
         summary="Dump all functions into a serialized binary payload", since="7.0.0",
         complexity="O(N) where N is the number of functions", **_S)
def function_dump(ctx, args):
    return ctx.node.scripting.function_dump()


@command("restore", -3, "write denyoom noscript", parent="function", acl="write slow scripting",
         summary="Restore all the functions on the given payload", since="7.0.0",
         complexity="O(N) where N is the number of functions on the payload",
         syntax="serialized-value [FLUSH | APPEND | REPLACE]", **_S)
def function_restore(ctx, args):
    if len(args) > 4:
        raise CommandError(errors.subcommand_syntax("function", args[1]))
    policy = "append"
    if len(args) == 4:
        p = args[3].lower()
        if p not in (b"append", b"replace", b"flush"):
            raise CommandError(errors.RESTORE_POLICY)
        policy = p.decode()
    return _unwrap(ctx.node.scripting.function_restore(args[2], policy))


@command("stats", 2, "noscript allow_busy", parent="function", acl="slow scripting",
         summary="Return information about the function currently running (name, description, duration)",
         since="7.0.0", **_S)
def function_stats(ctx, args):
    sc = ctx.node.scripting
    run = sc.running
    if run is not None and run.eval_mode:
        raise CommandError(errors.BUSY_EVAL)
    running, nlibs, nfuncs = sc.stats()
    if running is None:
        current = None
    else:
        name, argv, ms = running
        current = reply.Map([b"name", name, b"command", list(argv), b"duration_ms", ms])
    return reply.Map([b"running_script", current,
                      b"engines", reply.Map([b"LUA", reply.Map([b"libraries_count", nlibs,
                                                                b"functions_count", nfuncs])])])


@command("kill", 2, "noscript allow_busy", parent="function", acl="slow scripting",
         summary="Kill the function currently in execution.", since="7.0.0", **_S)
def function_kill(ctx, args):
    return _unwrap(ctx.node.scripting.kill(False))


function_help = help_subcommand("function", (
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION "
    "RESTORE command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
), group="scripting", since="7.0.0", acl="slow scripting")
