"""Connection commands: PING, ECHO, HELLO, AUTH, SELECT, QUIT, RESET, CLIENT ..."""

from __future__ import annotations

import time

from marekvs.commands import errors
from marekvs.commands.args import Options, parse_ll
from marekvs.commands.context import TrackingState
from marekvs.commands.errors import CommandError
from marekvs.commands.table import command, container, help_subcommand
from marekvs.commands import reply

CONTAINERS = (container("client", group="connection", summary="A container for client connection commands.",
                        since="2.4.0", acl="slow"),)


@command("ping", -1, "fast sentinel", group="connection", summary="Returns the server's liveliness response.",
         syntax="[message]")
def ping(ctx, args):
    if len(args) > 2:
        raise CommandError(errors.wrong_arity("ping"))
    if ctx.in_pubsub and ctx.proto == 2:  # subscribed mode: an array, as Redis
        return [b"pong", args[1] if len(args) == 2 else b""]
    return reply.PONG if len(args) == 1 else args[1]


@command("echo", 2, "loading stale fast", group="connection", summary="Returns the given string.", syntax="message")
def echo(ctx, args):
    return args[1]


@command("auth", -2, "noscript loading stale fast no_auth sentinel allow_busy", group="connection",
         summary="Authenticates the connection.", since="1.0.0", syntax="[username] password")
def auth(ctx, args):
    if len(args) > 3:
        raise CommandError(errors.SYNTAX)
    acl = ctx.node.acl
    if len(args) == 2:
        if acl.default.nopass:
            raise CommandError(errors.AUTH_NOT_CONFIGURED)
        user, password = b"default", args[1]
    else:
        user, password = args[1], args[2]
    if not acl.authenticate(ctx, user, password, args[0]):
        raise CommandError(errors.WRONGPASS)
    return reply.OK


@command("hello", -1, "noscript loading stale fast no_auth sentinel allow_busy", group="connection",
         summary="Handshakes with the Redis server.", since="6.0.0",
         syntax="[protover [AUTH username password] [SETNAME clientname]]")
def hello(ctx, args):
    proto = ctx.proto
    i = 1
    if len(args) > 1:
        proto = parse_ll(args[1])
        if proto is None:
            raise CommandError(errors.PROTOVER_NOT_INTEGER)
        if proto < 2 or proto > 3:
            raise CommandError(errors.NOPROTO)
        i = 2
    name = None
    credentials = None
    p = Options(args, i)
    while p.more():  # (the options first, then AUTH, then SETNAME: Redis's order)
        if p.accept(b"auth", 2):
            credentials = (p.value(), p.value())
        elif p.accept(b"setname", 1):
            name = p.value()
        else:
            p.fail(errors.hello_option(p.value()))
    p.check()
    if credentials is not None and not ctx.node.acl.authenticate(ctx, *credentials, args[0]):
        raise CommandError(errors.WRONGPASS)
    if not ctx.authed:
        raise CommandError(errors.HELLO_NOAUTH)
    if name is not None:
        ctx.name = _check_name(name)
    ctx.proto = proto
    return reply.Map([
        b"server", b"redis", b"version", ctx.node.config.redis_version.encode(), b"proto", proto,
        b"id", ctx.id, b"mode", b"standalone", b"role", b"master", b"modules", [],
    ])


@command("select", 2, "loading stale fast", group="connection", summary="Changes the selected database.",
         syntax="index")
def select(ctx, args):
    idx = parse_ll(args[1])
    if idx is None:
        raise CommandError(errors.NOT_INTEGER)
    if not -2**31 <= idx < 2**31:
        raise CommandError(errors.value_out_of_range(-2**31, 2**31 - 1))
    if idx != 0:
        raise CommandError(errors.DB_OUT_OF_RANGE)
    return reply.OK


@command("quit", -1, "noscript loading stale fast no_auth allow_busy", group="connection",
         summary="Closes the connection.")
def quit_(ctx, args):
    ctx.close_after_reply()
    return reply.OK


@command("reset", 1, "noscript loading stale fast no_auth allow_busy", group="connection",
         summary="Resets the connection.", since="6.2.0")
def reset(ctx, args):
    ctx.multi = None
    if ctx.monitor:
        ctx.node.drop_monitor(ctx)
    if ctx.watched is not None:
        ctx.node.watches.unwatch_all(ctx)
    if ctx.tracking is not None:
        ctx.node.tracking.disable(ctx)
    if ctx.in_pubsub:
        ctx.node.pubsub.drop_client(ctx)
        ctx.in_pubsub = False
    ctx.reply_mode = 0
    ctx.proto = 2
    ctx.name = b""
    ctx.no_evict = False
    ctx.node.acl.reset_client(ctx)
    return reply.Simple(b"RESET")


# -- CLIENT ---------------------------------------------------------------------------

def _check_name(name: bytes) -> bytes:
    if any(ch < 33 or ch > 126 for ch in name):
        raise CommandError(errors.CLIENT_NAME_CHARS)
    return name


def client_flags(cl) -> str:
    """CLIENT LIST's flags, in Redis's order (``catClientInfoString``)."""
    t = cl.tracking
    f = [c for c, on in (("O", cl.monitor), ("P", cl.in_pubsub), ("x", cl.multi is not None), ("b", cl.blocked),
                         ("t", t is not None), ("B", t is not None and t.bcast), ("d", cl.watch_dirty),
                         ("c", cl.closing), ("e", cl.no_evict)) if on]
    return "".join(f) or "N"


def client_line(cl) -> str:
    now = time.monotonic()
    cmd = cl.last_cmd.fullname if cl.last_cmd is not None else "NULL"
    return (f"id={cl.id} addr={cl.addr} laddr={cl.laddr} fd={cl.fd} name={cl.name.decode('utf-8', 'replace')} "
            f"age={int(now - cl.created)} idle={int(now - cl.last_active)} flags={client_flags(cl)} "
            f"db=0 sub={len(cl.channels)} psub={len(cl.patterns)} ssub={len(cl.shard_channels)} "
            f"multi={-1 if cl.multi is None else len(cl.multi)} qbuf={cl.query_buffer()} qbuf-free=0 argv-mem=0 "
            f"multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={cmd} "
            f"user={cl.user.name.decode('utf-8', 'surrogateescape')} "
            f"redir=-1 resp={cl.proto} lib-name={cl.lib_name.decode('utf-8', 'replace')} "
            f"lib-ver={cl.lib_ver.decode('utf-8', 'replace')}")


@command("id", 2, "noscript loading stale", parent="client", group="connection",
         summary="Returns the unique client ID of the connection.", since="5.0.0")
def client_id(ctx, args):
    return ctx.id


@command("setname", 3, "noscript loading stale", parent="client", group="connection",
         summary="Sets the connection name.", since="2.6.9", syntax="connection-name")
def client_setname(ctx, args):
    ctx.name = _check_name(args[2])
    return reply.OK


@command("getname", 2, "noscript loading stale", parent="client", group="connection",
         summary="Returns the name of the connection.", since="2.6.9")
def client_getname(ctx, args):
    return ctx.name or None


@command("list", -2, "admin noscript loading stale", parent="client", group="connection",
         summary="Lists open connections.", since="2.4.0",
         syntax="[TYPE NORMAL | MASTER | REPLICA | PUBSUB] [ID client-id [client-id ...]]")
def client_list(ctx, args):
    clients = list(ctx.node.clients.values())
    i = 2
    while i < len(args):
        opt = args[i].upper()
        if opt == b"TYPE" and i + 1 < len(args):
            t = args[i + 1].lower()
            if t not in (b"normal", b"master", b"replica", b"slave", b"pubsub"):
                raise CommandError(errors.unknown_client_type(args[i + 1]))
            if t != b"normal":
                clients = []
            i += 2
        elif opt == b"ID" and i + 1 < len(args):
            ids = set()
            for a in args[i + 1:]:
                cid = parse_ll(a)
                if cid is None or cid <= 0:
                    raise CommandError(errors.INVALID_CLIENT_ID)
                ids.add(cid)
            clients = [cl for cl in clients if cl.id in ids]
            i = len(args)
        else:
            raise CommandError(errors.SYNTAX)
    text = "".join(client_line(cl) + "\n" for cl in sorted(clients, key=lambda x: x.id)).encode()
    return reply.Verbatim(text)


@command("info", 2, "noscript loading stale", parent="client", group="connection",
         summary="Returns information about the connection.", since="6.2.0")
def client_info(ctx, args):
    return reply.Verbatim((client_line(ctx) + "\n").encode())


@command("setinfo", 4, "noscript loading stale", parent="client", group="connection",
         summary="Sets information specific to the client or connection.", since="7.2.0",
         syntax="LIB-NAME libname | LIB-VER libver")
def client_setinfo(ctx, args):
    attr = args[2].upper()
    val = args[3]
    if any(ch < 33 or ch > 126 for ch in val):
        raise CommandError(errors.setinfo_chars(attr))
    if attr == b"LIB-NAME":
        ctx.lib_name = val
    elif attr == b"LIB-VER":
        ctx.lib_ver = val
    else:
        raise CommandError(errors.unrecognized_option(args[2]))
    return reply.OK


@command("no-evict", 3, "admin noscript loading stale", parent="client", group="connection",
         summary="Sets the client eviction mode of the connection.", since="7.0.0", syntax="ON | OFF")
def client_no_evict(ctx, args):
    v = args[2].upper()
    if v not in (b"ON", b"OFF"):
        raise CommandError(errors.SYNTAX)
    ctx.no_evict = v == b"ON"
    return reply.OK


@command("kill", -3, "admin noscript loading stale", parent="client", group="connection",
         summary="Terminates open connections.", since="2.4.0",
         syntax="ip:port | [ID client-id] [TYPE NORMAL | MASTER | SLAVE | REPLICA | PUBSUB] "
                "[USER username] [ADDR ip:port] [LADDR ip:port] [SKIPME YES | NO]")
def client_kill(ctx, args):
    clients = list(ctx.node.clients.values())
    if len(args) == 3:  # old form: CLIENT KILL addr:port
        addr = args[2].decode("utf-8", "replace")
        victims = [cl for cl in clients if cl.addr == addr]
        if not victims:
            raise CommandError(errors.NO_SUCH_CLIENT)
        victims[0].kill()
        return reply.OK
    skipme = True
    if (len(args) - 2) % 2:
        raise CommandError(errors.SYNTAX)
    for i in range(2, len(args), 2):
        opt, val = args[i].upper(), args[i + 1]
        if opt == b"ID":
            want = parse_ll(val)
            if want is None or want <= 0:
                raise CommandError(errors.CLIENT_ID_POSITIVE)
            clients = [cl for cl in clients if cl.id == want]
        elif opt == b"ADDR":
            clients = [cl for cl in clients if cl.addr == val.decode("utf-8", "replace")]
        elif opt == b"LADDR":
            clients = [cl for cl in clients if cl.laddr == val.decode("utf-8", "replace")]
        elif opt == b"TYPE":
            t = val.lower()
            if t not in (b"normal", b"master", b"replica", b"slave", b"pubsub"):
                raise CommandError(errors.unknown_client_type(val))
            if t != b"normal":
                clients = []
        elif opt == b"USER":
            user = ctx.node.acl.users.get(val)
            if user is None:
                raise CommandError(errors.no_such_user(val))
            clients = [cl for cl in clients if cl.user is user]
        elif opt == b"SKIPME":
            v = val.upper()
            if v not in (b"YES", b"NO"):
                raise CommandError(errors.SYNTAX)
            skipme = v == b"YES"
        else:
            raise CommandError(errors.SYNTAX)
    n = 0
    for cl in clients:
        if skipme and cl is ctx:
            continue
        if cl is ctx:
            cl.close_after_reply()
        else:
            cl.kill()
        n += 1
    return n


@command("unblock", -3, "admin noscript loading stale", parent="client", group="connection",
         summary="Unblocks a client blocked by a blocking command from a different connection.",
         since="5.0.0", syntax="client-id [TIMEOUT | ERROR]")
def client_unblock(ctx, args):
    if len(args) > 4:
        raise CommandError(errors.subcommand_syntax("client", args[1]))
    error = False
    if len(args) == 4:
        reason = args[3].lower()
        if reason not in (b"timeout", b"error"):
            raise CommandError(errors.UNBLOCK_REASON)
        error = reason == b"error"
    cid = parse_ll(args[2])
    if cid is None:
        raise CommandError(errors.NOT_INTEGER)
    return 1 if ctx.node.blocking.unblock(cid, error) else 0


@command("pause", -3, "admin noscript loading stale", parent="client", group="connection",
         acl="admin slow dangerous connection",
         summary="Suspends commands processing.", since="3.0.0", complexity="O(1)",
         syntax="timeout [WRITE | ALL]")
def client_pause(ctx, args):
    if len(args) > 4:
        raise CommandError(errors.subcommand_syntax("client", args[1]))
    ms = parse_ll(args[2])
    if ms is None:
        raise CommandError(errors.TIMEOUT_NOT_INT)
    if ms < 0:
        raise CommandError(errors.TIMEOUT_NEGATIVE)
    writes_only = False
    if len(args) == 4:
        mode = args[3].lower()
        if mode not in (b"write", b"all"):
            raise CommandError(errors.PAUSE_MODE)
        writes_only = mode == b"write"
    ctx.node.client_pause.pause(ms / 1000, writes_only)
    return reply.OK


@command("unpause", 2, "admin noscript loading stale", parent="client", group="connection",
         acl="admin slow dangerous connection",
         summary="Resumes processing of clients that were paused.", since="6.2.0",
         complexity="O(N) Where N is the number of paused clients")
def client_unpause(ctx, args):
    ctx.node.client_pause.unpause()
    return reply.OK


@command("reply", 3, "noscript loading stale", parent="client", group="connection", acl="slow connection",
         summary="Instructs the server whether to reply to commands.", since="3.2.0", complexity="O(1)",
         syntax="ON | OFF | SKIP")
def client_reply(ctx, args):
    mode = args[2].lower()
    if mode == b"on":
        ctx.reply_mode = 0
        return reply.OK
    if mode == b"off":
        ctx.reply_mode = 1
    elif mode == b"skip":
        ctx.reply_mode = 2  # this reply and the next command's
    else:
        raise CommandError(errors.SYNTAX)
    return reply.NO_REPLY


@command("tracking", -3, "noscript loading stale", parent="client", group="connection", acl="slow connection",
         summary="Controls server-assisted client-side caching for the connection.", since="6.0.0",
         complexity="O(1). Some options may introduce additional complexity.",
         syntax="ON | OFF [REDIRECT client-id] [PREFIX prefix [PREFIX prefix ...]] [BCAST] [OPTIN] [OPTOUT] "
                "[NOLOOP]")
def client_tracking(ctx, args):
    onoff = args[2].lower()
    if onoff not in (b"on", b"off"):
        raise CommandError(errors.SYNTAX)
    redirect, bcast, optin, optout, noloop = 0, False, False, False, False
    prefixes: list[bytes] = []
    p = Options(args, 3)
    while p.more():
        if p.accept(b"redirect", 1):
            if redirect:
                p.fail(errors.TRACKING_ONE_REDIRECT)
                continue
            cid = p.integer()
            if cid not in ctx.node.clients and cid not in ctx.node.tracking.elsewhere:
                p.fail(errors.TRACKING_NO_REDIRECT)
            redirect = cid
        elif p.accept(b"bcast"):
            bcast = True
        elif p.accept(b"optin"):
            optin = True
        elif p.accept(b"optout"):
            optout = True
        elif p.accept(b"noloop"):
            noloop = True
        elif p.accept(b"prefix", 1):
            prefixes.append(p.value())
        else:
            p.fail(errors.SYNTAX)
    p.check()
    tracking = ctx.node.tracking
    if onoff == b"off":
        tracking.disable(ctx)
        return reply.OK
    if prefixes and not bcast:
        raise CommandError(errors.TRACKING_PREFIX_BCAST)
    if ctx.tracking is not None and ctx.tracking.bcast != bcast:
        raise CommandError(errors.TRACKING_SWITCH_BCAST)
    if optin and optout:
        raise CommandError(errors.TRACKING_OPTIN_OPTOUT)
    if bcast and (optin or optout):
        raise CommandError(errors.TRACKING_OPT_BCAST)
    if ctx.tracking is not None and (optin and ctx.tracking.optout or optout and ctx.tracking.optin):
        raise CommandError(errors.TRACKING_SWITCH_OPT)
    for a in prefixes:
        for b in prefixes:
            if a is not b and (a.startswith(b) or b.startswith(a)):
                raise CommandError(errors.tracking_prefix_overlap(a, b))
    if ctx.tracking is not None and bcast:
        prefixes = ctx.tracking.prefixes + [p for p in prefixes if p not in ctx.tracking.prefixes]
    tracking.enable(ctx, TrackingState(redirect, bcast, prefixes, optin, optout, noloop))
    return reply.OK


@command("caching", 3, "noscript loading stale", parent="client", group="connection", acl="slow connection",
         summary="Instructs the server whether to track the keys in the next request.", since="6.0.0",
         complexity="O(1)", syntax="YES | NO")
def client_caching(ctx, args):
    st = ctx.tracking
    if st is None:
        raise CommandError(errors.CACHING_MODE)
    v = args[2].lower()
    if v == b"yes":
        if not st.optin:
            raise CommandError(errors.CACHING_YES)
        st.caching = True
    elif v == b"no":
        if not st.optout:
            raise CommandError(errors.CACHING_NO)
        st.caching = False
    else:
        raise CommandError(errors.SYNTAX)
    return reply.OK


@command("getredir", 2, "noscript loading stale", parent="client", group="connection", acl="slow connection",
         summary="Returns the client ID to which the connection's tracking notifications are redirected.",
         since="6.0.0", complexity="O(1)")
def client_getredir(ctx, args):
    st = ctx.tracking
    return -1 if st is None else st.redirect


@command("trackinginfo", 2, "noscript loading stale", parent="client", group="connection",
         acl="slow connection", summary="Returns information about server-assisted client-side caching for the "
                                        "connection.", since="6.2.0", complexity="O(1)")
def client_trackinginfo(ctx, args):
    st = ctx.tracking
    if st is None:
        return reply.Map([b"flags", reply.SetReply([b"off"]), b"redirect", -1, b"prefixes", []])
    return reply.Map([b"flags", reply.SetReply(st.flags()), b"redirect", st.redirect,
                      b"prefixes", list(st.prefixes)])


# Redis 7.0's CLIENT HELP, word for word; SETINFO (Redis 7.2) is marekvs's addition
client_help = help_subcommand("client", (
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CACHING (YES|NO)", "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
    "GETREDIR", "    Return the client ID we are redirecting to when tracking is enabled.",
    "GETNAME", "    Return the name of the current connection.",
    "ID", "    Return the ID of the current connection.",
    "INFO", "    Return information about the current client connection.",
    "KILL <ip:port>", "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]", "    Kill connections. Options are:",
    "    * ADDR (<ip:port>|<unixsocket>:0)", "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)", "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)", "      Kill connections by type.",
    "    * USER <username>", "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)", "      Skip killing current connection (default: yes).",
    "LIST [options ...]", "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)", "      Return clients of specified type.",
    "UNPAUSE", "    Stop the current client pause, resuming traffic.",
    "PAUSE <timeout> [WRITE|ALL]", "    Suspend all, or just write, clients for <timeout> milliseconds.",
    "REPLY (ON|OFF|SKIP)", "    Control the replies sent to the current connection.",
    "SETNAME <name>", "    Assign the name <name> to the current connection.",
    "SETINFO <option> <value>", "    Set client meta attr. Options are: LIB-NAME, LIB-VER.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]", "    Unblock the specified blocked client.",
    "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
    "         [OPTIN] [OPTOUT] [NOLOOP]", "    Control server assisted client side caching.",
    "TRACKINGINFO", "    Report tracking status for the current connection.",
    "NO-EVICT (ON|OFF)", "    Protect current client connection from eviction.",
    "HELP", "    Prints this help."), group="connection")
