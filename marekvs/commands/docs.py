"""COMMAND INFO / COMMAND DOCS replies built from the command table.

COMMAND INFO is Redis 7.0's addReplyCommandInfo: the flags in Redis's order with
``movablekeys`` derived from the key specs, the legacy first/last/step derived from them
(``table.legacy_range``), the ACL categories in Redis's order, and the key specs themselves
(notes, flags, begin_search, find_keys).

The argument grammar of each command is declared once as Redis's documentation
syntax (``key value [NX | XX] [EX seconds | PX milliseconds]``); ``parse_syntax``
turns it into COMMAND DOCS ``arguments`` (name, type, token, flags, nested
arguments for oneof/block), which is what redis-cli 7 uses for its hints.
"""

from __future__ import annotations

import re

from marekvs.commands import reply as resp
from marekvs.commands.table import (BeginSearch, Command, FindKeys, Index, KeyFlag, Keynum, KeySpec,
                                    Keyword, Range)

_INTEGER_NAMES = {
    "seconds", "milliseconds", "unix-time-seconds", "unix-time-milliseconds", "count", "offset",
    "start", "end", "index", "increment", "decrement", "numreplicas", "timeout", "len", "min-match-len",
    "cursor", "client-id", "protover", "db", "destination-db", "numkeys", "limit",
}
_TOKEN = re.compile(r"\[|\]|\||\.\.\.|[^\s\[\]|]+")


class _P:
    def __init__(self, s: str):
        self.toks = _TOKEN.findall(s)
        self.i = 0

    def peek(self) -> str | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> str:
        t = self.toks[self.i]
        self.i += 1
        return t


# argument names that are keys in Redis's documentation syntax (COPY "source destination",
# LCS "key1 key2", ZRANGESTORE "dst src", BITOP "destkey", PFMERGE "sourcekey"; "destination-db"
# is a number)
_KEY_NAMES = {"key", "key1", "key2", "newkey", "destkey", "source", "destination", "src", "dst", "sourcekey"}


def _arg_for_word(word: str) -> dict:
    if "@" in word:  # "pattern@1": an argument that names keys through key spec 1 (SORT's BY/GET)
        name, _, spec = word.partition("@")
        return dict(_arg_for_word(name), key_spec_index=int(spec))
    if word in _KEY_NAMES:
        return {"name": word, "type": "key"}
    if word.isupper() or not any(ch.islower() for ch in word):
        return {"name": word.lower(), "type": "pure-token", "token": word}
    t = "integer" if word in _INTEGER_NAMES else ("pattern" if word == "pattern" else "string")
    return {"name": word, "type": t}


def _seq(p: _P, closing: str | None) -> list[dict]:
    """Parse alternatives separated by '|' until ``closing``; return a list of args."""
    alts: list[list[dict]] = [[]]
    while True:
        t = p.peek()
        if t is None or t == closing:
            if t is not None:
                p.take()
            break
        p.take()
        if t == "|":
            alts.append([])
            continue
        cur = alts[-1]
        if t == "[":
            inner = _seq(p, "]")
            arg = inner[0] if len(inner) == 1 else {"name": "block", "type": "block", "arguments": inner}
            arg = dict(arg)
            if "multiple" in arg.get("flags", ()) and cur and cur[-1].get("name") == arg["name"]:
                cur[-1] = arg  # "key [key ...]" is one argument: key, multiple
                continue
            if arg["type"] == "block" and _repeats(cur, arg["arguments"]):
                # "key value [key value ...]" is one block of (key, value), multiple
                k = len(arg["arguments"])
                cur[-k:] = [{"name": "data", "type": "block", "flags": ["multiple"],
                             "arguments": cur[-k:]}]
                continue
            arg["flags"] = sorted(set(arg.get("flags", [])) | {"optional"})
            cur.append(arg)
        elif t == "...":
            if cur:
                last = cur[-1]
                if len(cur) >= 2 and cur[-2].get("name") == last.get("name"):
                    cur.pop()  # "key [key ...]": the repeated one becomes multiple
                    last = cur[-1]
                last["flags"] = sorted(set(last.get("flags", [])) - {"optional"} | {"multiple"})
        else:
            arg = _arg_for_word(t)
            if arg["type"] == "pure-token" and p.peek() not in (None, "|", "]", "[", "...") \
                    and not _is_token(p.peek()):
                val = _arg_for_word(p.take())
                val["token"] = t
                arg = val
            cur.append(arg)
    if len(alts) == 1:
        return alts[0]
    choices = [a[0] if len(a) == 1 else {"name": "block", "type": "block", "arguments": a} for a in alts]
    return [{"name": "choice", "type": "oneof", "arguments": choices}]


def _repeats(cur: list[dict], inner: list[dict]) -> bool:
    """``inner`` (the bracketed part, its last item marked multiple by '...') repeats
    the last ``len(inner)`` arguments of ``cur``."""
    k = len(inner)
    if k < 2 or len(cur) < k or "multiple" not in inner[-1].get("flags", ()):
        return False
    return [a["name"] for a in cur[-k:]] == [a["name"] for a in inner]


def _is_token(word: str | None) -> bool:
    return bool(word) and word not in ("[", "]", "|", "...") and not any(ch.islower() for ch in word)


def parse_syntax(syntax: str, nspecs: int = 1) -> list[dict]:
    """COMMAND DOCS ``arguments`` of a syntax line. Key arguments point at the command's
    ``nspecs`` key specs in order (Redis lists arguments in the order of its specs): the
    n-th key argument at spec n, the ones past the last spec at the last (LCS key1 key2:
    one spec). With no specs they are keys without a spec index. ``name@N`` in the
    syntax points an argument at spec N explicitly (and counts as the N-th spec's)."""
    args = _seq(_P(syntax), None) if syntax.strip() else []
    n = 0
    for a in _walk(args):
        if "key_spec_index" in a:
            n = a["key_spec_index"] + 1
        elif a["type"] == "key" and nspecs:
            a["key_spec_index"] = min(n, nspecs - 1)
            n += 1
    return args


def _walk(args: list[dict]):
    for a in args:
        yield a
        yield from _walk(a.get("arguments", ()))


def _arg_reply(a: dict) -> resp.Map:
    out: list = [b"name", a["name"].encode(), b"type", a["type"].encode()]
    if "key_spec_index" in a:
        out += [b"key_spec_index", a["key_spec_index"]]
    if "token" in a:
        out += [b"token", a["token"].encode()]
    if a.get("flags"):
        out += [b"flags", [resp.Simple(f.encode()) for f in a["flags"]]]
    if "arguments" in a:
        out += [b"arguments", [_arg_reply(x) for x in a["arguments"]]]
    return resp.Map(out)


def doc_reply(cmd: Command) -> resp.Map:
    out: list = [b"summary", cmd.summary.encode(), b"since", cmd.since.encode(),
                 b"group", cmd.group.encode(), b"complexity", cmd.complexity.encode()]
    args = parse_syntax(cmd.syntax, len(cmd.key_specs))
    if args:
        out += [b"arguments", [_arg_reply(a) for a in args]]
    if cmd.subcommands:
        sub: list = []
        for s in cmd.subcommands.values():
            sub += [s.fullname.encode(), doc_reply(s)]
        out += [b"subcommands", resp.Map(sub)]
    return resp.Map(out)


def _begin_search_reply(bs: BeginSearch) -> resp.Map:
    if isinstance(bs, Index):
        return resp.Map([b"type", b"index", b"spec", resp.Map([b"index", bs.pos])])
    if isinstance(bs, Keyword):
        return resp.Map([b"type", b"keyword", b"spec",
                         resp.Map([b"keyword", bs.keyword.encode(), b"startfrom", bs.startfrom])])
    return resp.Map([b"type", b"unknown", b"spec", resp.Map()])


def _find_keys_reply(fk: FindKeys) -> resp.Map:
    if isinstance(fk, Range):
        return resp.Map([b"type", b"range", b"spec",
                         resp.Map([b"lastkey", fk.lastkey, b"keystep", fk.keystep, b"limit", fk.limit])])
    if isinstance(fk, Keynum):
        return resp.Map([b"type", b"keynum", b"spec", resp.Map(
            [b"keynumidx", fk.keynumidx, b"firstkey", fk.firstkey, b"keystep", fk.keystep])])
    return resp.Map([b"type", b"unknown", b"spec", resp.Map()])


def key_flags_reply(flags: KeyFlag) -> resp.SetReply:
    """Key flags as Redis's addReplyFlagsForKeyArgs prints them (a set, bit order)."""
    return resp.SetReply(resp.Simple(n) for n in flags.reply_names())


def key_spec_reply(spec: KeySpec) -> resp.Map:
    """One key spec as COMMAND INFO shows it (addReplyCommandKeySpecs)."""
    out: list = [b"notes", spec.notes.encode()] if spec.notes else []
    out += [b"flags", key_flags_reply(spec.flags),
            b"begin_search", _begin_search_reply(spec.begin_search),
            b"find_keys", _find_keys_reply(spec.find_keys)]
    return resp.Map(out)


# COMMAND INFO's flags in Redis 7.0's order (addReplyCommandFlags); may_replicate,
# sentinel, only_sentinel and protected are declared like Redis and hidden like Redis
_FLAG_ORDER = ("write", "readonly", "denyoom", "module", "admin", "pubsub", "noscript", "blocking",
               "loading", "stale", "skip_monitor", "skip_slowlog", "asking", "fast", "no_auth",
               "no_mandatory_keys", "no_async_loading", "no_multi", "movablekeys", "allow_busy")
_INTERNAL_FLAGS = {"sentinel", "only_sentinel", "may_replicate", "protected"}
_FLAG_RANK = {f: i for i, f in enumerate(_FLAG_ORDER)}
# ACL categories in Redis's order (ACL CAT)
_ACL_ORDER = ("keyspace", "read", "write", "set", "sortedset", "list", "hash", "string", "bitmap",
              "hyperloglog", "geo", "stream", "pubsub", "admin", "fast", "slow", "blocking", "dangerous",
              "connection", "transaction", "scripting")
_ACL_RANK = {c: i for i, c in enumerate(_ACL_ORDER)}
_GROUP_CATEGORY = {"string": "string", "generic": "keyspace", "connection": "connection",
                   "server": "admin", "hash": "hash", "set": "set", "sorted-set": "sortedset",
                   "list": "list", "stream": "stream", "hyperloglog": "hyperloglog"}


def acl_categories(cmd: Command) -> tuple[str, ...]:
    """Declared ACL categories, or ones derived from the group and flags."""
    if cmd.acl:
        return cmd.acl
    cats = [_GROUP_CATEGORY.get(cmd.group, "admin")]
    if cmd.is_write:
        cats.append("write")
    elif "readonly" in cmd.flags:
        cats.append("read")
    if "admin" in cmd.flags and cats[0] != "admin":
        cats.append("admin")
    if "admin" in cmd.flags:
        cats.append("dangerous")
    cats.append("fast" if "fast" in cmd.flags else "slow")
    return tuple(cats)


def command_flags(cmd: Command) -> list[str]:
    """COMMAND INFO's flags: the declared ones and movablekeys (derived from the key
    specs), in Redis's order; flags Redis does not know keep their declared order last."""
    flags = [f.replace("-", "_") for f in cmd.flags]
    if cmd.movablekeys:
        flags.append("movablekeys")
    flags = [f for f in dict.fromkeys(flags) if f not in _INTERNAL_FLAGS]
    return sorted(flags, key=lambda f: _FLAG_RANK.get(f, len(_FLAG_RANK)))


def info_reply(cmd: Command) -> list:
    """COMMAND INFO of one command (addReplyCommandInfo): name, arity, flags, the legacy
    first/last/step derived from the key specs, ACL categories, tips, key specs,
    subcommands (the last four sets in RESP3, as Redis 7.0 sends them)."""
    cats = sorted(acl_categories(cmd), key=lambda c: _ACL_RANK.get(c, len(_ACL_RANK)))
    return [
        cmd.fullname.encode(), cmd.arity,
        resp.SetReply(resp.Simple(f.encode()) for f in command_flags(cmd)),
        cmd.first_key, cmd.last_key, cmd.step,
        resp.SetReply(resp.Simple(("@" + a).encode()) for a in cats),
        resp.SetReply(), resp.SetReply(key_spec_reply(s) for s in cmd.key_specs),
        resp.SetReply(info_reply(s) for s in cmd.subcommands.values()),
    ]
