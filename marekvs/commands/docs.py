"""COMMAND INFO / COMMAND DOCS replies built from the command table.

The argument grammar of each command is declared once as Redis's documentation
syntax (``key value [NX | XX] [EX seconds | PX milliseconds]``); ``parse_syntax``
turns it into COMMAND DOCS ``arguments`` (name, type, token, flags, nested
arguments for oneof/block), which is what redis-cli 7 uses for its hints.
"""

from __future__ import annotations

import re

from marekvs.commands.table import Command
from marekvs.commands import reply as resp

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


def _arg_for_word(word: str) -> dict:
    if word == "key":
        return {"name": "key", "type": "key", "key_spec_index": 0}
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


def parse_syntax(syntax: str) -> list[dict]:
    return _seq(_P(syntax), None) if syntax.strip() else []


def _arg_reply(a: dict) -> resp.Map:
    out: list = [b"name", a["name"].encode(), b"type", a["type"].encode()]
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
    args = parse_syntax(cmd.syntax)
    if args:
        out += [b"arguments", [_arg_reply(a) for a in args]]
    if cmd.subcommands:
        sub: list = []
        for s in cmd.subcommands.values():
            sub += [s.fullname.encode(), doc_reply(s)]
        out += [b"subcommands", resp.Map(sub)]
    return resp.Map(out)


def _key_specs(cmd: Command) -> list:
    if not cmd.first_key:
        return []
    flags = [resp.Simple(b"RW" if cmd.is_write else b"RO")]
    last = cmd.last_key - cmd.first_key if cmd.last_key >= 0 else cmd.last_key
    return [resp.Map([
        b"flags", flags,
        b"begin_search", resp.Map([b"type", b"index", b"spec", resp.Map([b"index", cmd.first_key])]),
        b"find_keys", resp.Map([b"type", b"range", b"spec",
                                resp.Map([b"lastkey", last, b"keystep", cmd.step or 1, b"limit", 0])]),
    ])]


_INTERNAL_FLAGS = {"sentinel"}  # declared like Redis, not shown by COMMAND INFO
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


def info_reply(cmd: Command) -> list:
    return [
        cmd.fullname.encode(), cmd.arity,
        resp.SetReply(resp.Simple(f.replace("-", "_").encode()) for f in cmd.flags if f not in _INTERNAL_FLAGS),
        cmd.first_key, cmd.last_key, cmd.step,
        resp.SetReply(resp.Simple(("@" + a).encode()) for a in acl_categories(cmd)),
        resp.SetReply(), _key_specs(cmd),
        [info_reply(s) for s in cmd.subcommands.values()],
    ]
