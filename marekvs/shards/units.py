"""Multi-key commands whose keys are on several shard workers (docs/shards.md §3; issue 33,
slice 4): each becomes one **unit**, its parts run on the workers owning the keys while
every one of those workers is locked for the unit, so no other command sees a state
between two parts (the mesh's lock protocol is in ``server/mesh.py``).

A ``Unit`` says how a command splits (``split``: the workers it needs, and what each
phase needs of the arguments), which commands each worker runs in each phase (``step``,
from the replies of the phases before), and what the reply is (``after``: None to go on
to the next phase, else the reply; an error reply of any part ends the unit with it):

- MSET: ``MSET`` of each worker's pairs; OK.
- MSETNX: ``EXISTS`` of each worker's keys, then (none existing) ``MSET`` of its pairs;
  1, else 0 with nothing written.
- MGET: ``MGET`` of each worker's keys; the values put back in the order asked.
- DEL, UNLINK, EXISTS, TOUCH: the command on each worker's keys; the counts summed
  (EXISTS counts a key named twice twice, as Redis does: each part keeps its repeats).
- RENAME, RENAMENX, COPY: ``DUMP`` and ``PTTL`` of the source (and ``EXISTS`` of the
  destination for RENAMENX and COPY without REPLACE), then ``RESTORE`` of the payload at
  the destination with the TTL left (REPLACE) and, for a rename, ``DEL`` of the source.
  The value moves whole, as Redis's DUMP/RESTORE carries it; keyspace events are those of
  the parts (``restore`` and ``del``, not ``rename_from``/``rename_to``).
- LMOVE, RPOPLPUSH, SMOVE: ``TYPE`` of both keys (a missing source: nil or 0; a key of
  another type: WRONGTYPE, nothing moved), then the pop or ``SREM`` at the source, then
  the push or ``SADD`` at the destination with what moved.

``split`` returns None where the arguments are not the command's (MSET with a key and no
value, COPY with an option it does not know): the connection's worker runs the command
whole, and it answers Redis's error.
"""

from __future__ import annotations

from typing import Any, Sequence

from marekvs.commands import errors
from marekvs.commands.reply import OK, Err, SetReply

Parts = dict[int, Any]  # the workers a unit locks, each with what its parts need
Steps = dict[int, list[list[bytes]]]  # one phase: the commands each worker runs, in order
Got = list[dict[int, list[Any]]]  # the replies of each phase so far, by worker


class Unit:
    """How one command runs as a unit across workers (the module docstring)."""

    name: str
    pairs = False  # its arguments are key value pairs
    phases = 1

    def split(self, args: list[bytes], owner: Sequence[int], pid_of: Any) -> tuple[Parts, Any] | None:
        """(each worker's arguments, the worker of each key in the order given)."""
        step = 2 if self.pairs else 1
        if len(args) < 2 or (self.pairs and len(args) % 2 == 0):
            return None
        parts: Parts = {}
        where: list[int] = []
        for i in range(1, len(args), step):
            j = owner[pid_of(args[i])]
            where.append(j)
            part = parts.get(j)
            if part is None:
                part = parts[j] = []
            part.extend(args[i:i + step])
        return parts, where

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        return {j: [[self.name.upper().encode(), *own]] for j, own in parts.items()}

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        return self.merge({j: r[0] for j, r in got[phase].items()}, where)

    def merge(self, replies: dict[int, Any], where: Any) -> Any:
        raise NotImplementedError


class _Sum(Unit):
    def __init__(self, name: str):
        self.name = name

    def merge(self, replies: dict[int, Any], where: Any) -> Any:
        return sum(replies.values())


class _Mget(Unit):
    name = "mget"

    def merge(self, replies: dict[int, Any], where: Any) -> Any:
        at = dict.fromkeys(replies, 0)
        out = []
        for j in where:
            out.append(replies[j][at[j]])
            at[j] += 1
        return out


class _Mset(Unit):
    name = "mset"
    pairs = True

    def merge(self, replies: dict[int, Any], where: Any) -> Any:
        return OK


class _Msetnx(Unit):
    """EXISTS everywhere, then MSET everywhere if none exists."""

    name = "msetnx"
    pairs = True
    phases = 2

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        if phase == 0:
            return {j: [[b"EXISTS", *own[0::2]]] for j, own in parts.items()}
        return {j: [[b"MSET", *own]] for j, own in parts.items()}

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        if phase == 0:
            return 0 if sum(r[0] for r in got[0].values()) else None
        return 1


class _TwoKeys(Unit):
    """A command from a source key to a destination key on another worker: ``where`` is
    (source worker, destination worker, the arguments)."""

    def split(self, args: list[bytes], owner: Sequence[int], pid_of: Any) -> tuple[Parts, Any] | None:
        if len(args) < 3 or not self.valid(args):
            return None
        js, jd = owner[pid_of(args[1])], owner[pid_of(args[2])]
        return {js: None, jd: None}, (js, jd, args)

    def valid(self, args: list[bytes]) -> bool:
        return True


class _Move(_TwoKeys):
    """RENAME, RENAMENX, COPY: the value DUMPed at the source, RESTOREd at the destination."""

    phases = 2

    def __init__(self, name: str):
        self.name = name
        self.nx = name == "renamenx"
        self.copy = name == "copy"

    def valid(self, args: list[bytes]) -> bool:
        if not self.copy:
            return len(args) == 3
        rest = [a.lower() for a in args[3:]]
        i = 0
        while i < len(rest):  # REPLACE, DB 0 (any other option: the command's own error)
            if rest[i] == b"replace":
                i += 1
            elif rest[i] == b"db" and i + 1 < len(rest) and rest[i + 1] == b"0":
                i += 2
            else:
                return False
        return True

    def _replace(self, args: list[bytes]) -> bool:
        return self.copy and b"replace" in (a.lower() for a in args[3:])

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        js, jd, args = where
        src, dst = args[1], args[2]
        if phase == 0:
            steps: Steps = {js: [[b"DUMP", src], [b"PTTL", src]]}
            if self.nx or (self.copy and not self._replace(args)):
                steps[jd] = [[b"EXISTS", dst]]
            return steps
        payload, pttl = got[0][js]
        steps = {jd: [[b"RESTORE", dst, b"%d" % max(pttl, 0), payload, b"REPLACE"]]}
        if not self.copy:
            steps[js] = [[b"DEL", src]]
        return steps

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        js, jd, args = where
        if phase == 0:
            if got[0][js][0] is None:  # no source
                return 0 if self.copy else Err(errors.NO_SUCH_KEY)
            if jd in got[0] and got[0][jd][0]:  # the destination exists
                return 0
            return None
        return OK if self.name == "rename" else 1


def _wrong_types(got: Got, js: int, jd: int, kind: bytes) -> Any:
    """After the TYPE of both keys: the reply when nothing moves (None: go on)."""
    src_type, dst_type = got[0][js][0], got[0][jd][0]
    if src_type == b"none":
        return Missing
    if src_type != kind or dst_type not in (b"none", kind):
        return Err(errors.WRONGTYPE)
    return None


Missing = object()  # (the source does not exist: the command's own reply for that)


class _ListMove(_TwoKeys):
    """LMOVE source destination LEFT|RIGHT LEFT|RIGHT, RPOPLPUSH source destination."""

    phases = 3

    def __init__(self, name: str):
        self.name = name

    def valid(self, args: list[bytes]) -> bool:
        if self.name == "rpoplpush":
            return len(args) == 3
        return len(args) == 5 and all(a.lower() in (b"left", b"right") for a in args[3:5])

    def _ends(self, args: list[bytes]) -> tuple[bytes, bytes]:
        if self.name == "rpoplpush":
            return b"RPOP", b"LPUSH"
        return (b"LPOP" if args[3].lower() == b"left" else b"RPOP",
                b"LPUSH" if args[4].lower() == b"left" else b"RPUSH")

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        js, jd, args = where
        if phase == 0:
            return {js: [[b"TYPE", args[1]]], jd: [[b"TYPE", args[2]]]}
        pop, push = self._ends(args)
        if phase == 1:
            return {js: [[pop, args[1]]]}
        return {jd: [[push, args[2], got[1][js][0]]]}

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        js, jd, _ = where
        if phase == 0:
            r = _wrong_types(got, js, jd, b"list")
            return _NIL if r is Missing else r
        if phase == 1:
            return _NIL if got[1][js][0] is None else None
        return got[1][js][0]


_NIL = object()  # LMOVE's reply when nothing moved: a null bulk string (None would mean "go on")


class _Smove(_TwoKeys):
    """SMOVE source destination member."""

    name = "smove"
    phases = 3

    def valid(self, args: list[bytes]) -> bool:
        return len(args) == 4

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        js, jd, args = where
        if phase == 0:
            return {js: [[b"TYPE", args[1]]], jd: [[b"TYPE", args[2]]]}
        if phase == 1:
            return {js: [[b"SREM", args[1], args[3]]]}
        return {jd: [[b"SADD", args[2], args[3]]]}

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        js, jd, _ = where
        if phase == 0:
            r = _wrong_types(got, js, jd, b"set")
            return 0 if r is Missing else r
        if phase == 1:
            return 0 if got[1][js][0] == 0 else None
        return 1


class _SetAlgebra(Unit):
    """SUNION, SINTER, SDIFF, SINTERCARD and the STORE forms over keys of several workers:
    each worker combines its own keys (``SUNION``/``SINTER`` of them: the same type checks,
    a missing key an empty set), the results combine here (union and intersection are
    associative; a difference is the first key's members less the union of the others),
    and a STORE writes the result at the destination's worker (``DEL``, then ``SADD`` of
    the members: its events are ``del`` and ``sadd``, not ``sunionstore``)."""

    def __init__(self, name: str):
        self.name = name
        self.op = name[1:6] if name != "sintercard" else "inter"  # union, inter, diff (sdiff: "diff")
        if name.startswith("sdiff"):
            self.op = "diff"
        self.store = name.endswith("store")
        self.phases = 2 if self.store else 1

    def split(self, args: list[bytes], owner: Sequence[int], pid_of: Any) -> tuple[Parts, Any] | None:
        dst = None
        limit = 0
        if self.name == "sintercard":
            n = _int(args[1]) if len(args) > 2 else None
            if n is None or n < 1 or n > len(args) - 2:
                return None
            keys, rest = args[2:2 + n], args[2 + n:]
            while rest:  # LIMIT n, the last one given counting (any other option: its error, whole)
                lim = _int(rest[1]) if len(rest) > 1 and rest[0].lower() == b"limit" else None
                if lim is None or lim < 0:
                    return None
                limit, rest = lim, rest[2:]
        elif self.store:
            if len(args) < 3:
                return None
            dst, keys = args[1], args[2:]
        else:
            if len(args) < 2:
                return None
            keys = args[1:]
        first = owner[pid_of(keys[0])]
        others: dict[int, list[bytes]] = {}
        for k in keys[1:] if self.op == "diff" else keys:
            others.setdefault(owner[pid_of(k)], []).append(k)
        parts: Parts = dict.fromkeys(others)
        parts[first] = None
        jd = owner[pid_of(dst)] if dst is not None else None
        if jd is not None:
            parts[jd] = None
        return parts, (keys[0], first, others, dst, jd, limit)

    def step(self, phase: int, parts: Parts, where: Any, got: Got) -> Steps:
        first_key, first, others, dst, jd, _ = where
        if phase == 0:
            steps: Steps = {}
            if self.op == "diff":
                steps[first] = [[b"SUNION", first_key]]
            cmd = b"SINTER" if self.op == "inter" else b"SUNION"
            for j, keys in others.items():
                steps.setdefault(j, []).append([cmd, *keys])
            return steps
        members = self._result(where, got)
        return {jd: [[b"DEL", dst]] + ([[b"SADD", dst, *members]] if members else [])}

    def _result(self, where: Any, got: Got) -> list[bytes]:
        first_key, first, others, _, _, _ = where
        replies = got[0]
        at = dict.fromkeys(replies, 0)
        if self.op == "diff":
            base = dict.fromkeys(replies[first][0])
            at[first] = 1
        parts = []
        for j in others:
            parts.append(replies[j][at[j]])
            at[j] += 1
        if self.op == "union":
            out: dict[bytes, None] = {}
            for p in parts:
                out.update(dict.fromkeys(p))
            return list(out)
        if self.op == "inter":
            common = set(parts[0])
            for p in parts[1:]:
                common.intersection_update(p)
            return [m for m in parts[0] if m in common]
        for p in parts:
            for m in p:
                base.pop(m, None)
        return list(base)

    def after(self, phase: int, parts: Parts, where: Any, got: Got) -> Any:
        if self.store:
            return None if phase == 0 else len(self._result(where, got))
        members = self._result(where, got)
        if self.name == "sintercard":
            limit = where[5]
            return min(len(members), limit) if limit else len(members)
        return SetReply(members)


def _int(b: bytes) -> int | None:
    try:
        return int(b) if b.lstrip(b"-").isdigit() else None
    except ValueError:
        return None


def final(reply: Any) -> Any:
    """A unit's reply as the client gets it (``_NIL``: the null reply)."""
    return None if reply is _NIL else reply


UNITS: dict[str, Unit] = {u.name: u for u in (
    _Mget(), _Mset(), _Msetnx(), _Sum("del"), _Sum("unlink"), _Sum("exists"), _Sum("touch"),
    _Move("rename"), _Move("renamenx"), _Move("copy"), _ListMove("lmove"), _ListMove("rpoplpush"), _Smove(),
    *(_SetAlgebra(n) for n in ("sunion", "sinter", "sdiff", "sintercard", "sunionstore", "sinterstore",
                               "sdiffstore")),
)}
