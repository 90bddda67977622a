"""The scripting engine of a node: EVAL scripts and function libraries, as Redis 7.0 runs
them (``eval.c``, ``script.c``, ``functions.c``, ``function_lua.c``).

``Scripting`` is what ``node.scripting`` is: the commands (``commands/scripting.py``)
parse their arguments and call it; it returns reply values (``Err`` for errors).

**Running a script.** A script runs to completion on the event-loop thread, inside the
command that started it, so it is atomic on the node the way MULTI/EXEC is: every command
it calls goes through ``node.dispatch`` with the engine's own context (the "Lua client":
blocking commands answer at once, RESP2 unless ``redis.setresp(3)``), its writes join the
tick's pending batch, and the tick commits as ONE RocksDB WriteBatch with ONE
replication-log entry. Peers receive the records the script produced (effects
replication, Redis 7's only mode), never the script: no peer runs it again, and
``redis.set_repl`` has nothing to switch off (it validates its argument and does nothing).
Time is frozen for the script's duration (``ks.now``, as Redis's script time snapshot),
so a key does not expire between two commands of one script. ``math.random`` is Redis's
generator, one per node as in Redis 7.0 (no per-script reseeding): scripts may be random,
peers receive what they wrote.

**Checks before a command runs** (``scriptCall``): unknown command, arity, ``noscript``
commands, writes from a read-only run (EVAL_RO, FCALL_RO, ``no-writes``), each with
Redis's text; a write marks the run dirty (SCRIPT KILL then answers UNKILLABLE).

**Busy scripts.** The Lua count hook calls ``_hook`` every 100,000 instructions. Past
``busy-reply-threshold`` (``lua-time-limit``) milliseconds the run is *busy*: the hook
calls ``busy_poll``, which the RESP server installs, to answer other clients (BUSY to all
but the commands Redis allows: SCRIPT KILL, FUNCTION KILL, FUNCTION STATS, SHUTDOWN
NOSAVE, MULTI, AUTH, ...; ``busy_dispatch``). SCRIPT KILL / FUNCTION KILL set ``killed``
and the hook raises "Script killed by user with SCRIPT KILL..." in the script.

**Function libraries** are records (``core/funclib.py``) that replicate to every peer;
``_records_changed`` (the engine's report of changed node-level records, local or from a
peer, or from a sibling shard worker: ``node/records.py``) re-resolves the loaded set
(``functions.resolve``); the libraries are written through ``Node.records``, so on a node
of several shard workers each library is stored at its name's worker and loaded on every
one. SCRIPT LOAD stays on the node
that ran it, as Redis 7 keeps its script cache local: EVALSHA on another node answers
NOSCRIPT until the script is loaded or EVAL'd there.
"""

from __future__ import annotations

import logging
import sys
import time
from typing import Any, Callable

from marekvs.commands import aclrules, errors
from marekvs.commands.args import parse_ll
from marekvs.commands.context import LUA, Context
from marekvs.commands.reply import Err, Simple
from marekvs.commands.table import Command
from marekvs.core import envelope as env
from marekvs.core import funclib
from marekvs.core import keys as K
from marekvs.node.scripting import functions as F
from marekvs.node.scripting import libs
from marekvs.node.scripting.runtime import LuaError, LuaMemoryError, LuaRaise, LuaVM, error_text

log = logging.getLogger("marekvs.scripting")

# A script may return a reply nested as deep as Redis's Lua stack allows (~8,000 levels);
# the RESP encoder and the conversions recurse once per level.
RECURSION_LIMIT = 20_000
DEFAULT_MAX_MEMORY = 1 << 30  # per interpreter: a runaway script fails instead of exhausting the node
LOAD_TIMEOUT = 0.5  # FUNCTION LOAD's library code runs for at most this long (Redis's 500 ms)
_LOG_LEVELS = (logging.DEBUG, logging.DEBUG, logging.INFO, logging.WARNING)
# what a shard worker carries to the worker whose script is busy (busy_dispatch)
_FORWARDED_WHILE_BUSY = frozenset(("script|kill", "function|kill", "function|stats", "shutdown"))



class _Error:
    """An error of a command called by a script: the text of its ``{err=...}`` table and
    whether it was counted already (``ignore_error_stats_update``)."""

    __slots__ = ("msg", "ignore")

    def __init__(self, msg: bytes, ignore: bool):
        self.msg = msg
        self.ignore = ignore


def _tonumber(v: Any) -> float | int | None:
    return libs._tonumber(v)


class ScriptRun:
    """The script that is running now (Redis's scriptRunCtx)."""

    __slots__ = ("caller", "name", "eval_mode", "start", "read_only", "dirty", "killed", "busy", "resp",
                 "argv", "loading")

    def __init__(self, caller: Context | None, name: bytes, eval_mode: bool, read_only: bool,
                 argv: list[bytes]):
        self.caller = caller
        self.name = name
        self.eval_mode = eval_mode
        self.start = time.monotonic()
        self.read_only = read_only
        self.dirty = False
        self.killed = False
        self.busy = False
        self.resp = 2
        self.argv = argv
        self.loading = False


class Script:
    __slots__ = ("body", "flags", "fn")

    def __init__(self, body: bytes, flags: int, fn: Any):
        self.body = body
        self.flags = flags
        self.fn = fn


class Scripting:
    def __init__(self, node: Any, max_memory: int = DEFAULT_MAX_MEMORY):
        self.node = node
        self.max_memory = max_memory
        if sys.getrecursionlimit() < RECURSION_LIMIT:
            sys.setrecursionlimit(RECURSION_LIMIT)
        self.rng = libs.Rand48()
        self.running: ScriptRun | None = None
        self.in_lua = False  # user code is running (not one of our callbacks)
        # installed by the RESP server: answer other clients while a script is busy, and
        # end the process at once (SHUTDOWN NOSAVE while busy)
        self.busy_poll: Callable[[], None] | None = None
        self.hard_exit: Callable[[], None] | None = None
        # installed by a shard worker's mesh (server/mesh.py): run a script's admitted command
        # where its keys are (carried to another worker, synchronously), and the end of a run
        self.route: Callable[[Context, Command, list[bytes]], Any] | None = None
        self.run_ended: Callable[[ScriptRun], None] | None = None
        # ... a run of this worker became busy (the siblings answer BUSY meanwhile); a script
        # of another worker is busy (its kind: "eval"/"function"), and how to carry a
        # command that must reach it (SCRIPT KILL, FUNCTION KILL, FUNCTION STATS, SHUTDOWN)
        self.busy_notice: Callable[[ScriptRun], None] | None = None
        self.busy_elsewhere: str | None = None
        self.forward_busy: Callable[[Context, list[bytes]], Any] | None = None
        self.busy_fds: Callable[[], dict[int, Callable[[], None]]] | None = None  # (its siblings' sockets)
        self.ctx = Context(node, 0)  # the "Lua client" the script's commands run as
        self.ctx.deny_blocking = True
        self.ctx.acl_context = LUA  # (ACL: each call is checked, denials get the script's texts)
        self.ctx.name = b""
        self.ctx.addr = ""
        self._cmd_cache: dict[int, tuple[bool, bool]] = {}  # id(cmd) -> (noscript, write-like)
        self.scripts: dict[bytes, Script] = {}
        self.eval_vm = self._new_vm("eval")
        self.func_vm = self._new_vm("function")
        self.catalog = F.Catalog()
        self.records: dict[bytes, bytes] = {}  # library name -> live record
        self._compiled: dict[bytes, F.Library] = {}  # library name -> its compiled library
        self.left_out: list[bytes] = []
        node.changes.on_node_records(self._records_changed)
        self._load_records()

    def _new_vm(self, kind: str) -> LuaVM:
        return LuaVM(kind, {"call": self._call, "pcall": self._pcall, "hook": self._hook, "log": self._log,
                            "setresp": self._setresp, "sha1hex": self._sha1hex, "set_repl": self._set_repl,
                            "acl_check": self._acl_check},
                     self.max_memory, self.node.config.redis_version, self.rng)

    # =====================================================================================
    # callbacks from Lua
    # =====================================================================================

    def _hook(self) -> bytes | None:
        """Every 100,000 Lua instructions: None to go on, or the error to raise."""
        run = self.running
        if run is None or not self.in_lua:
            return None
        if run.killed:
            return errors.SCRIPT_KILLED.encode()
        now = time.monotonic()
        if run.loading:
            if now - run.start > LOAD_TIMEOUT:
                return errors.FUNCTION_LOAD_TIMEOUT.encode()
            return None
        if not run.busy:
            threshold = int(self.node.tunable("busy-reply-threshold"))
            if threshold <= 0 or (now - run.start) * 1000 < threshold:
                return None
            run.busy = True
            if self.busy_notice is not None:
                self.busy_notice(run)
            log.warning("Slow script detected: still in execution after %d milliseconds. You can try killing "
                        "the script using the %s command. Script name is: %s.", (now - run.start) * 1000,
                        "SCRIPT KILL" if run.eval_mode else "FUNCTION KILL", run.name.decode("latin-1"))
        poll = self.busy_poll
        if poll is not None:
            self.in_lua = False
            try:
                poll()
            except Exception:
                log.exception("serving clients while a script is busy failed")
            finally:
                self.in_lua = True
        if run.killed:
            log.warning("Lua script killed by user with SCRIPT KILL.")
            return errors.SCRIPT_KILLED.encode()
        return None

    def _raise(self, msg: bytes, ignore: bool = False) -> LuaRaise:
        """The Lua error ``{err=msg}`` (luaPushError), to raise from a callback."""
        run = self.running
        vm = self.eval_vm if run is None or run.eval_mode else self.func_vm
        return LuaRaise(vm.new_err(msg, ignore))

    def _call(self, *args: Any) -> Any:
        """redis.call: the reply as a Lua value; errors are raised."""
        r = self._command(args)
        if type(r) is _Error:
            raise self._raise(r.msg, r.ignore)
        return r

    def _pcall(self, *args: Any) -> Any:
        """redis.pcall: errors are returned as ``{err=...}``."""
        r = self._command(args)
        if type(r) is _Error:
            return self.vm_of(self.running).new_err(r.msg, r.ignore) if self.running else \
                self.eval_vm.new_err(r.msg, r.ignore)
        return r

    def _command(self, args: tuple) -> Any:
        """luaRedisGenericCommand: run one command for the script."""
        run = self.running
        if run is None:
            return _Error(errors.LUA_CALL_OUTSIDE_SCRIPT.encode(), False)
        if not args:
            return _Error(errors.LUA_NO_ARGUMENTS.encode(), False)
        argv = []
        for a in args:
            t = type(a)
            if t is bytes:
                argv.append(a)
            elif t is int:
                argv.append(b"%d" % a if -10**17 < a < 10**17 else b"%.17g" % a)
            elif t is float:
                argv.append(b"%.17g" % a)
            else:
                return _Error(errors.LUA_ARGUMENT_TYPE.encode(), False)
        node = self.node
        cmd = self._resolve(argv)
        if type(cmd) is str:
            return self._reject(None, cmd)
        info = self._cmd_cache.get(id(cmd))
        if info is None:
            info = self._cmd_cache[id(cmd)] = ("noscript" in cmd.flags, cmd.may_replicate)
        if info[0]:
            return self._reject(cmd, errors.LUA_NOSCRIPT_COMMAND)
        if run.read_only and info[1]:
            if self.ctx.user.restricted:  # (scriptCall checks the ACL before the write flag)
                denied = node.acl.check(self.ctx, cmd, argv)
                if denied is not None:
                    return _Error(error_text(node.rejected(self.ctx, cmd, denied)), True)
            return self._reject(cmd, errors.LUA_WRITE_IN_READ_ONLY)
        if cmd.write:
            run.dirty = True
        self.in_lua = False
        try:
            route = self.route
            if route is None:
                r = node.dispatch(self.ctx, argv)
            else:  # (a shard worker: admitted here, run where its keys are)
                r = node.admit(self.ctx, argv)
                if isinstance(r, Command):
                    r = route(self.ctx, r, argv)
            caller = run.caller
            if caller is not None and caller.tracking is not None and cmd.readonly:
                node.tracking.after_read(caller, cmd, argv)
            t = type(r)
            if t is bytes or t is int:
                return r
            vm = self.vm_of(run)
            if t is Err:
                return _Error(error_text(r), True)
            if t is Simple:
                return vm.new_map(b"ok", bytes(r))
            return vm.to_lua(r, run.resp == 3)
        except LuaRaise:
            raise
        except Exception:
            log.exception("redis.call failed")
            return _Error(errors.INTERNAL.encode(), False)
        finally:
            self.in_lua = True

    def _resolve(self, argv: list[bytes]) -> Any:
        """scriptCall's lookup: the command (or subcommand), or the error text."""
        table = self.node.table
        cmd = table.dispatch.get(argv[0])
        if cmd is None:
            cmd = table.commands.get(argv[0].lower())
            if cmd is None:
                return errors.LUA_UNKNOWN_COMMAND
        if cmd.subcommands and len(argv) >= 2:
            cmd = cmd.subcommands.get(argv[1].lower().decode("latin-1"))
            if cmd is None:
                return errors.LUA_UNKNOWN_COMMAND
        a, n = cmd.arity, len(argv)
        if (a > 0 and n != a) or n < -a:
            return errors.LUA_COMMAND_ARITY
        return cmd

    def _reject(self, cmd: Any, text: str) -> "_Error":
        """A command refused before it ran: counted as Redis counts it (errorstats, the
        command's rejected_calls), raised without counting again."""
        err = self.node.rejected(self.ctx, cmd, text)
        return _Error(error_text(err), True)

    def _log(self, *args: Any) -> None:
        """redis.log(level, message...)."""
        if len(args) < 2:
            raise self._raise(errors.LUA_LOG_ARGUMENTS.encode())
        level = _tonumber(args[0])
        if level is None:
            raise self._raise(errors.LUA_LOG_LEVEL_NOT_NUMBER.encode())
        level = int(level)
        if not 0 <= level <= 3:
            raise self._raise(errors.LUA_LOG_LEVEL.encode())
        parts = []
        for j, v in enumerate(args[1:]):
            if type(v) is bytes or type(v) in (int, float):
                s = v if type(v) is bytes else libs._num_to_lua_string(v)
                parts.append((b" " if j else b"") + s)
        log.log(_LOG_LEVELS[level], "%s", b"".join(parts).decode("utf-8", "replace"))

    def _setresp(self, *args: Any) -> None:
        if len(args) != 1:
            raise self._raise(errors.LUA_SETRESP_ARGUMENTS.encode())
        n = _tonumber(args[0])
        if n is None or int(n) not in (2, 3):
            raise self._raise(errors.LUA_SETRESP_VERSION.encode())
        if self.running is not None:
            self.running.resp = int(n)
            self.ctx.proto = int(n)  # the commands it calls answer in that protocol's shapes

    def _sha1hex(self, *args: Any) -> bytes:
        if len(args) != 1:
            raise self._raise(errors.LUA_SHA1HEX_ARGUMENTS.encode())
        v = args[0]
        s = v if type(v) is bytes else (libs._num_to_lua_string(v) if type(v) in (int, float) else b"")
        return libs.sha1hex(s)

    def _set_repl(self, *args: Any) -> None:
        """redis.set_repl: validated, and nothing else (effects replication is the only
        mode, and a script's writes always reach every peer)."""
        if len(args) != 1:
            raise self._raise(errors.LUA_SET_REPL_ARGUMENTS.encode())
        n = _tonumber(args[0])
        if n is None or not 0 <= int(n) <= 3:
            raise self._raise(errors.LUA_SET_REPL_FLAGS.encode())

    def _acl_check(self, *args: Any) -> bool:
        if not args:
            raise self._raise(errors.LUA_NO_ARGUMENTS.encode())
        argv = []
        for a in args:
            if type(a) is bytes:
                argv.append(a)
            elif type(a) in (int, float):
                argv.append(b"%.17g" % a)
            else:
                raise self._raise(errors.LUA_ARGUMENT_TYPE.encode())
        cmd = self._resolve(argv)
        if type(cmd) is str:
            raise self._raise(errors.LUA_ACL_CHECK_COMMAND.encode())
        user = self.ctx.user  # (the caller's: ACLCheckAllUserCommandPerm, no log entry)
        if not user.restricted:
            return True
        return bool(user.check(self.node.acl.view, cmd, argv)[0] == aclrules.OK)

    def vm_of(self, run: ScriptRun) -> LuaVM:
        return self.eval_vm if run.eval_mode else self.func_vm

    # =====================================================================================
    # running
    # =====================================================================================

    def _run(self, caller: Context, vm: LuaVM, fn: Any, nkeys: int, command: list[bytes], name: bytes,
             eval_mode: bool, read_only: bool) -> Any:
        """Run a script or function (luaCallFunction) for ``caller``'s ``command``; its
        reply value."""
        # (the arguments are pushed under the scripts' cap: there must be room for them)
        if not vm.room(sum(map(len, command)) + 64 * len(command)):
            return Err(errors.script_out_of_memory(name))
        run = ScriptRun(caller, name, eval_mode, read_only, command)
        node = self.node
        ks = node.ks
        snapshot = ks.now()
        wall = ks.now
        ks.now = lambda: snapshot  # the script's time snapshot: no key expires while it runs
        sctx = self.ctx
        sctx.proto = 2
        sctx.db = caller.db
        sctx.user = caller.user  # the calls run as the caller's ACL user (ACL LOG shows the caller)
        sctx.script_caller = caller
        self.running = run
        self.in_lua = True
        try:
            if eval_mode:
                r = vm.run_eval(fn, nkeys, command[3:])
            else:
                r = vm.run_function(fn, nkeys, command[3:])
            ok, value = r if type(r) is tuple else (r, None)
        except LuaMemoryError:
            ok, value = False, b"not enough memory"
        except LuaError as e:
            ok, value = False, str(e).encode()
        finally:
            self.in_lua = False
            ks.now = wall
        memory_error = not ok and value == b"not enough memory"
        try:
            if ok:
                reply = vm.to_reply(value, run.resp == 3)
                if type(reply) is Err:
                    self._uncount_if_flagged(vm, value, reply)
            else:
                reply, counted = self._error_reply(vm, value, name)
                if counted:
                    self._uncount(reply)
        except LuaMemoryError:
            memory_error = True
            reply = Err(errors.script_out_of_memory(name))
        finally:
            self.running = None
            node.current = caller
            sctx.script_caller = None
            if run.killed:
                vm.reset_hook()
            if memory_error:
                vm.gc()
            else:
                vm.after_run()
            if run.dirty:
                caller.last_write_seq = node.engine.next_seq
            if self.run_ended is not None:
                self.run_ended(run)
        return reply

    def _error_reply(self, vm: LuaVM, value: Any, name: bytes) -> tuple[Err, bool]:
        """The reply of a script that raised ``value`` (luaCallFunction), and whether the
        error was counted already (a command's error that the script re-raised)."""
        is_table, msg, source, line, ignore = vm.error_info(value)
        if not is_table:
            text = msg.decode("utf-8", "surrogateescape") if type(msg) is bytes else \
                ("execution failure" if msg is None else str(msg))
            return Err(errors.script_failed(name, text)), False
        out = _text(msg) if msg is not None else errors.SCRIPT_ERROR_WITHOUT_MESSAGE
        if line is not None and source is not None:
            out += errors.script_error_place(name, _text(source), _text(line))
        return Err(out), ignore

    def _uncount_if_flagged(self, vm: LuaVM, value: Any, reply: Err) -> None:
        """A script that returns the error table redis.pcall gave it: that error was
        counted when the command failed (Redis's ignore_error_stats_update)."""
        try:
            r = vm.classify(value)
        except LuaError:
            return
        if type(r) is tuple and r[0] == b"err" and vm.error_info(r[1])[4]:
            self._uncount(reply)

    def _uncount(self, err: Err) -> None:
        """The dispatcher will count this reply as an error; it already was."""
        stats = self.node.stats
        stats.error_replies -= 1
        code = err.split(" ", 1)[0]
        codes = self.node.error_codes
        codes[code] = codes.get(code, 0) - 1

    # -- EVAL ----------------------------------------------------------------------------------
    def eval(self, ctx: Context, args: list[bytes], evalsha: bool, ro: bool) -> Any:
        if evalsha and len(args[1]) != 40:
            return Err(errors.NOSCRIPT)
        numkeys = parse_ll(args[2])
        if numkeys is None:
            return Err(errors.NOT_INTEGER)
        if numkeys > len(args) - 3:
            return Err(errors.NUMKEYS_TOO_MANY)
        if numkeys < 0:
            return Err(errors.NUMKEYS_NEGATIVE)
        if evalsha:
            sha = args[1].lower()
            script = self.scripts.get(sha)
            if script is None:
                return Err(errors.NOSCRIPT)
        else:
            sha = libs.sha1hex(args[1])
            script = self.scripts.get(sha)
            if script is None:
                created = self._create(args[1], sha)
                if type(created) is Err:
                    return created
                script = created
        flags = script.flags
        compat = bool(flags & F.EVAL_COMPAT)
        if not compat and not flags & F.NO_WRITES and ro:
            return Err(errors.SCRIPT_RO_WRITE_FLAG)
        read_only = ro or (not compat and bool(flags & F.NO_WRITES))
        return self._run(ctx, self.eval_vm, script.fn, numkeys, args, sha, True, read_only)

    def _create(self, body: bytes, sha: bytes) -> Script | Err:
        """luaCreateFunction: compile and cache a script."""
        try:
            flags, shebang_len = F.eval_shebang(body)
        except F.MetadataError as e:
            return Err(errors.err(str(e)))
        try:
            if not self.eval_vm.room(len(body) * 4):
                raise LuaMemoryError("not enough memory")
            fn, err = self.eval_vm.compile(body[shebang_len:], b"@user_script")
        except LuaMemoryError:
            self.eval_vm.gc()
            fn, err = None, b"not enough memory"
        if fn is None:
            msg = (err or b"").decode("utf-8", "surrogateescape").replace("\r", " ").replace("\n", " ")
            return Err(errors.script_compile_failed(msg))
        script = Script(body, flags, fn)
        self.scripts[sha] = script
        return script

    def script_load(self, body: bytes) -> Any:
        sha = libs.sha1hex(body)
        if sha in self.scripts:
            return sha
        created = self._create(body, sha)
        return created if type(created) is Err else sha

    def script_exists(self, shas: list[bytes]) -> list[int]:
        return [1 if s.lower() in self.scripts else 0 for s in shas]

    def script_flush(self) -> None:
        """SCRIPT FLUSH: the cache and the whole eval interpreter (its memory with it)."""
        self.scripts = {}
        self.eval_vm = self._new_vm("eval")

    def kill(self, is_eval: bool) -> Any:
        run = self.running
        if run is None:
            return Err(errors.NOTBUSY)
        if run.dirty:
            return Err(errors.UNKILLABLE)
        if is_eval and not run.eval_mode:
            return Err(errors.BUSY_FUNCTION)
        if not is_eval and run.eval_mode:
            return Err(errors.BUSY_EVAL)
        run.killed = True
        return True

    def may_write(self, args: list[bytes]) -> bool:
        """May this EVAL / EVALSHA / FCALL write? (Redis's evalGetCommandFlags and
        fcallGetCommandFlags: a script flagged no-writes does not; a script or function
        not known yet, or without flags, may.)"""
        name = args[0].lower()
        if len(args) < 2:
            return True
        if name == b"fcall":
            f = self.catalog.function(args[1])
            return f is None or not f.flags & F.NO_WRITES
        if name == b"evalsha":
            script = self.scripts.get(args[1].lower())
            if script is None:
                return True
            flags = script.flags
        else:
            script = self.scripts.get(libs.sha1hex(args[1]))
            if script is not None:
                flags = script.flags
            else:
                try:
                    flags = F.eval_shebang(args[1])[0]
                except F.MetadataError:
                    return True
        return bool(flags & F.EVAL_COMPAT) or not flags & F.NO_WRITES

    def busy_error(self) -> str:
        run = self.running
        if run is None:
            return errors.BUSY_FUNCTION if self.busy_elsewhere == "function" else errors.BUSY_EVAL
        return errors.BUSY_EVAL if run.eval_mode else errors.BUSY_FUNCTION

    def busy_dispatch(self, ctx: Context, args: list[bytes]) -> Any:
        """A command of another client while a script is busy (processCommand's busy
        check): what would be refused anyway is refused as usual (unknown command, arity,
        NOAUTH); commands flagged ``allow_busy`` run; everything else gets BUSY (and, in a
        transaction, makes EXEC fail). SHUTDOWN runs only with NOSAVE, which ends the
        process at once."""
        node = self.node
        table = node.table
        cmd = table.dispatch.get(args[0]) or table.commands.get(args[0].lower())
        if cmd is not None and cmd.subcommands and len(args) >= 2:
            cmd = cmd.subcommands.get(args[1].lower().decode("latin-1"))
        if cmd is None:
            return node.dispatch(ctx, args)
        a, n = cmd.arity, len(args)
        if (a > 0 and n != a) or n < -a or (not ctx.authed and not cmd.no_auth):
            return node.dispatch(ctx, args)
        if "allow_busy" not in cmd.flags:
            return node.rejected(ctx, cmd, self.busy_error())
        if self.running is None and self.forward_busy is not None and cmd.fullname in _FORWARDED_WHILE_BUSY:
            return self.forward_busy(ctx, args)  # (the busy script is another shard worker's)
        if cmd.name == "shutdown" and cmd.parent is None:
            if any(x.lower() == b"nosave" for x in args[1:]) and self.hard_exit is not None:
                self.hard_exit()
            return node.rejected(ctx, cmd, self.busy_error())
        return node.dispatch(ctx, args)

    # -- FCALL ----------------------------------------------------------------------------------
    def fcall(self, ctx: Context, args: list[bytes], ro: bool) -> Any:
        f = self.catalog.function(args[1])
        if f is None:
            return Err(errors.FUNCTION_NOT_FOUND)
        numkeys = parse_ll(args[2])
        if numkeys is None:
            return Err(errors.BAD_NUMKEYS)
        if numkeys > len(args) - 3:
            return Err(errors.NUMKEYS_TOO_MANY)
        if numkeys < 0:
            return Err(errors.NUMKEYS_NEGATIVE)
        if not f.flags & F.NO_WRITES and ro:
            return Err(errors.SCRIPT_RO_WRITE_FLAG)
        read_only = ro or bool(f.flags & F.NO_WRITES)
        return self._run(ctx, self.func_vm, f.callback, numkeys, args, f.name, False, read_only)

    # =====================================================================================
    # function libraries
    # =====================================================================================

    def _compile_library(self, code: bytes) -> F.Library | str:
        """Compile and run a library's code; the library, or the error text (no ERR)."""
        try:
            engine, name, body = F.library_metadata(code)
        except F.MetadataError as e:
            return str(e)
        if not F.valid_name(name):
            return errors.LIBRARY_NAME_CHARS
        if engine.upper() != F.ENGINE.encode():
            return errors.library_engine_not_found(engine)
        return self._run_library(name, code, body)

    def _run_library(self, name: bytes, code: bytes, body: bytes) -> F.Library | str:
        if not self.func_vm.room(len(code) * 4):
            return errors.LIBRARY_OUT_OF_MEMORY
        run = ScriptRun(None, name, False, True, [])
        run.loading = True
        prev = self.running
        self.running = run
        self.in_lua = True
        try:
            ok, a, b = self.func_vm.load_library(body)
        except LuaMemoryError:
            self.func_vm.gc()
            return errors.LIBRARY_OUT_OF_MEMORY
        except LuaError as e:
            return errors.library_register_failed(errors.err(str(e)))
        finally:
            self.in_lua = False
            self.running = prev
            if run.killed or run.loading:
                self.func_vm.reset_hook()
        if not ok and b == b"not enough memory":
            self.func_vm.gc()
        if not ok:
            if a == b"compile":
                return errors.function_compile_failed(_text(b))
            is_table, msg, _, _, _ = self.func_vm.error_info(b)
            if not is_table:
                text = errors.err(_text(msg))
            else:
                text = _text(msg) if msg is not None else errors.LIBRARY_UNKNOWN_ERROR
            return errors.library_register_failed(text)
        lib = F.Library(name, code)
        for fname, cb, desc, flags in a:
            lib.functions[fname] = F.Function(fname, desc, int(flags), cb, lib)
        if not lib.functions:
            return errors.NO_FUNCTIONS_REGISTERED
        return lib

    def function_load(self, code: bytes, replace: bool) -> Any:
        lib = self._compile_library(code)
        if isinstance(lib, str):
            return Err(errors.err(lib))
        if lib.name in self.catalog.libraries and not replace:
            return Err(errors.library_exists(lib.name))
        clash = self.catalog.collision(lib, {lib.name})
        if clash is not None:
            return Err(errors.function_exists(clash))
        self._write({lib.name: lib})
        return lib.name

    def function_delete(self, name: bytes) -> Any:
        if name not in self.catalog.libraries:
            return Err(errors.LIBRARY_NOT_FOUND)
        self._write({name: None})
        return True

    def function_flush(self) -> None:
        names = set(self.records) | set(self.catalog.libraries)
        if names:
            self._write({n: None for n in names})

    def function_dump(self) -> bytes:
        return F.dump([self.catalog.libraries[n].code for n in sorted(self.catalog.libraries)])

    def function_restore(self, payload: bytes, policy: str) -> Any:
        if not F.verify_payload(payload):
            return Err(errors.DUMP_PAYLOAD)
        try:
            codes = F.read_payload(payload)
        except F.PayloadError as e:
            return Err(errors.err(str(e)))
        new: dict[bytes, F.Library] = {}
        staged = F.Catalog()
        for code in codes:
            lib = self._compile_library(code)
            if isinstance(lib, str):
                return Err(errors.err(lib))
            if lib.name in new:
                return Err(errors.library_exists(lib.name))
            clash = staged.collision(lib)
            if clash is not None:
                return Err(errors.function_exists(clash))
            staged.add(lib)
            new[lib.name] = lib
        writes: dict[bytes, F.Library | None] = dict(new)
        if policy == "flush":
            for name in set(self.records) | set(self.catalog.libraries):
                writes.setdefault(name, None)
        else:
            current = self.catalog.libraries
            for name in new:
                if name in current and policy == "append":
                    return Err(errors.library_exists_unquoted(name))
            replacing = set(new) if policy == "replace" else set()
            for lib in new.values():
                clash = self.catalog.collision(lib, replacing)
                if clash is not None:
                    return Err(errors.function_exists(clash))
        self._write(writes)
        return True

    def _write(self, libs_: dict[bytes, F.Library | None]) -> None:
        """Write library records (None: a tombstone) in one apply; the engine reports them
        back to ``_records_changed``, which loads them."""
        ks = self.node.ks
        recs = []
        for name, lib in libs_.items():
            stamp = ks.hlc.now()
            if lib is None:
                recs.append((K.encode_function_key(name), funclib.tombstone(stamp, ks.node_id)))
            else:
                self._compiled[name] = lib
                recs.append((K.encode_function_key(name), funclib.new(lib.code, stamp, ks.node_id)))
        self.node.records.write(recs)

    def _load_records(self) -> None:
        """At start: every function-library record in the store."""
        now = self.node.ks.now()
        for ikey, rec in self.node.engine.scan_tags(0, K.TAG_FUNCTION):
            if env.is_live(rec, now):
                self.records[K.decode_function_key(ikey)] = rec
        if self.records:
            self._resolve_libraries()

    def _records_changed(self, changed: list[tuple[bytes, bytes]]) -> None:
        now = self.node.ks.now()
        for ikey, rec in changed:
            if ikey[K.TAG_AT] != K.ORD_FUNCTION:
                continue
            name = K.decode_function_key(ikey)
            if env.is_live(rec, now):
                self.records[name] = rec
            else:
                self.records.pop(name, None)
                self._compiled.pop(name, None)
        self._resolve_libraries()

    def _resolve_libraries(self) -> None:
        now = self.node.ks.now()
        libs_: list[F.Library] = []
        for name, rec in self.records.items():
            code = funclib.code_of(rec, now)
            if code is None:
                continue
            lib = self._compiled.get(name)
            if lib is None or lib.code != code:
                compiled = self._compile_library(code)
                if isinstance(compiled, str):
                    log.error("function library %r cannot be loaded: %s", name, compiled)
                    continue
                lib = self._compiled[name] = compiled
            lib.version = rec[env.VERSION]
            libs_.append(lib)
        self.catalog, left_out = F.resolve(libs_)
        for lib in left_out:
            log.warning("function library %r is not loaded: a function of it belongs to an older library",
                        lib.name)
        self.left_out = [lib.name for lib in left_out]

    # -- introspection -------------------------------------------------------------------------
    def stats(self) -> tuple[Any, int, int]:
        """(running function (name, argv, ms) or None, libraries, functions)."""
        run = self.running
        running = None
        if run is not None and not run.loading:
            running = (run.name, list(run.argv), int((time.monotonic() - run.start) * 1000))
        return running, len(self.catalog.libraries), self.catalog.function_count

    def memory(self) -> tuple[int, int]:
        return self.eval_vm.memory(), self.func_vm.memory()


def _text(v: Any) -> str:
    if type(v) is bytes:
        return v.decode("utf-8", "surrogateescape")
    if type(v) is int:
        return str(v)
    if type(v) is float:
        return libs._num_to_lua_string(v).decode()
    return str(v)
