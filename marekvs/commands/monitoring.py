"""SLOWLOG, LATENCY and MONITOR: what the node's monitors kept or show (``node/monitor.py``).

SLOWLOG GET [count] / LEN / RESET / HELP and LATENCY LATEST / HISTORY event / RESET
[event ...] / HELP, as Redis 7.0. LATENCY's events here are ``command`` and
``fast-command`` (a command that ran for at least ``latency-monitor-threshold`` ms); the
other events Redis measures (fork, AOF fsync, expire cycles, ...) have no counterpart in
this engine. LATENCY DOCTOR, GRAPH and HISTOGRAM are not implemented (unknown subcommand).
MONITOR makes the client a monitor, as Redis 7.0's ``monitorCommand``: OK, or no reply at
all if it is one already; refused inside MULTI (a DENY BLOCKING client).
"""

from __future__ import annotations

from marekvs.commands import errors
from marekvs.commands.args import parse_ll
from marekvs.commands.errors import CommandError
from marekvs.commands.reply import NO_REPLY, OK
from marekvs.commands.table import command, container, help_subcommand

LATENCY_SAMPLES = 160  # the samples kept per event (Redis's LATENCY_TS_LEN)

CONTAINERS = (
    container("slowlog", -2, group="server", summary="A container for slow log commands", since="2.2.12",
              acl="slow"),
    container("latency", -2, group="server", summary="A container for latency diagnostics commands",
              since="2.8.13", acl="slow"),
)


@command("monitor", 1, "admin noscript loading stale", group="server", acl="admin slow dangerous",
         summary="Listen for all requests received by the server in real time", since="1.0.0")
def monitor(ctx, args):
    if ctx.deny_blocking:
        raise CommandError(errors.MONITOR_DENY_BLOCKING)
    if ctx.monitor:
        return NO_REPLY
    ctx.node.add_monitor(ctx)
    return OK


@command("get", -2, "admin loading stale", parent="slowlog", group="server", acl="admin slow dangerous",
         summary="Get the slow log's entries", since="2.2.12",
         complexity="O(N) where N is the number of entries returned", syntax="[count]")
def slowlog_get(ctx, args):
    count = 10
    if len(args) > 3:
        raise CommandError(errors.subcommand_syntax("slowlog", args[1]))
    if len(args) == 3:
        n = parse_ll(args[2])  # (Redis: one text for not a number and too small)
        if n is None or n < -1:
            raise CommandError(errors.SLOWLOG_COUNT)
        count = n
    return ctx.node.slowlog.get(count)


@command("len", 2, "admin loading stale", parent="slowlog", group="server", acl="admin slow dangerous",
         summary="Get the slow log's length", since="2.2.12")
def slowlog_len(ctx, args):
    return len(ctx.node.slowlog.entries)


@command("reset", 2, "admin loading stale", parent="slowlog", group="server", acl="admin slow dangerous",
         summary="Clear all entries from the slow log", since="2.2.12",
         complexity="O(N) where N is the number of entries in the slowlog")
def slowlog_reset(ctx, args):
    ctx.node.slowlog.entries.clear()
    return OK


slowlog_help = help_subcommand("slowlog", (
    "SLOWLOG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "GET [<count>]",
    "    Return top <count> entries from the slowlog (default: 10, -1 mean all).",
    "    Entries are made of:",
    "    id, timestamp, time in microseconds, arguments array, client IP and port,",
    "    client name",
    "LEN",
    "    Return the length of the slowlog.",
    "RESET",
    "    Reset the slowlog.",
    "HELP",
    "    Prints this help."), group="server", since="6.2.0", acl="slow")


@command("latest", 2, "admin noscript loading stale", parent="latency", group="server", acl="admin slow dangerous",
         summary="Return the latest latency samples for all events.", since="2.8.13",
         complexity="O(1)")
def latency_latest(ctx, args):
    return ctx.node.latency.latest()


@command("history", 3, "admin noscript loading stale", parent="latency", group="server",
         acl="admin slow dangerous", summary="Return timestamp-latency samples for the event.", since="2.8.13",
         complexity="O(1)", syntax="event")
def latency_history(ctx, args):
    return ctx.node.latency.history(args[2].decode("utf-8", "surrogateescape"))


@command("reset", -2, "admin noscript loading stale", parent="latency", group="server",
         acl="admin slow dangerous", summary="Reset latency data for one or more events.", since="2.8.13",
         complexity="O(1)", syntax="[event [event ...]]")
def latency_reset(ctx, args):
    return ctx.node.latency.reset([a.decode("utf-8", "surrogateescape") for a in args[2:]])


latency_help = help_subcommand("latency", (
    "LATENCY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "HISTORY <event>",
    "    Return time-latency samples for the <event> class.",
    "LATEST",
    "    Return the latest latency samples for all events.",
    "RESET [<event> ...]",
    "    Reset latency data of one or more <event> classes.",
    "    (default: reset all data for all event classes)",
    "HELP",
    "    Prints this help."), group="server", since="2.8.13", acl="slow")
