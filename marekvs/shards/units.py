"""Multi-key commands whose keys are on several shard workers (docs/shards.md §3; issue 33,
slice 4): each becomes one **unit**, its parts run on the workers owning the keys while
every one of those workers is locked for the unit, so no other command sees a state
between two parts (the mesh's lock protocol is in ``server/mesh.py``).

A ``Unit`` says how a command splits into per-worker parts (``split``: the part's
argument vector for each worker, the keys in the order given) and how the parts'
replies merge into the reply one process gives:

- MSET: ``MSET`` of each worker's pairs; OK.
- MSETNX: ``EXISTS`` of each worker's keys, then (none existing) ``MSET`` of its pairs;
  1, else 0 with nothing written. Both phases under the same locks.
- MGET: ``MGET`` of each worker's keys; the values put back in the order asked.
- DEL, UNLINK, EXISTS, TOUCH: the command on each worker's keys; the counts summed
  (EXISTS counts a key named twice twice, as Redis does: each part keeps its repeats).

``split`` returns None where the arguments are not the command's (MSET with a key and no
value): the connection's worker runs the command whole, and it answers Redis's error.
"""

from __future__ import annotations

from typing import Any, Sequence

Parts = dict[int, list[bytes]]


class Unit:
    """How one command runs as a unit across workers (the module docstring)."""

    name: str
    pairs = False  # its arguments are key value pairs
    phases = 1

    def split(self, args: list[bytes], owner: Sequence[int], pid_of: Any) -> tuple[Parts, list[int]] | None:
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

    def part(self, phase: int, own: list[bytes]) -> list[bytes]:
        """The command a worker runs in ``phase`` on its arguments ``own``."""
        return [self.name.upper().encode(), *own]

    def go_on(self, phase: int, replies: dict[int, Any]) -> Any:
        """After ``phase`` (not the last): None to run the next one, else the reply."""
        return None

    def merge(self, replies: dict[int, Any], where: list[int]) -> Any:
        """The reply from the last phase's replies (none of them an error)."""
        raise NotImplementedError


class _Sum(Unit):
    def __init__(self, name: str):
        self.name = name

    def merge(self, replies: dict[int, Any], where: list[int]) -> Any:
        return sum(replies.values())


class _Mget(Unit):
    name = "mget"

    def merge(self, replies: dict[int, Any], where: list[int]) -> Any:
        at = dict.fromkeys(replies, 0)
        out = []
        for j in where:
            out.append(replies[j][at[j]])
            at[j] += 1
        return out


class _Mset(Unit):
    name = "mset"
    pairs = True

    def merge(self, replies: dict[int, Any], where: list[int]) -> Any:
        return next(iter(replies.values()))  # OK


class _Msetnx(Unit):
    """EXISTS everywhere, then MSET everywhere if none exists."""

    name = "msetnx"
    pairs = True
    phases = 2

    def part(self, phase: int, own: list[bytes]) -> list[bytes]:
        return [b"EXISTS", *own[0::2]] if phase == 0 else [b"MSET", *own]

    def go_on(self, phase: int, replies: dict[int, Any]) -> Any:
        return 0 if sum(replies.values()) else None

    def merge(self, replies: dict[int, Any], where: list[int]) -> Any:
        return 1


UNITS: dict[str, Unit] = {u.name: u for u in (_Mget(), _Mset(), _Msetnx(), _Sum("del"), _Sum("unlink"),
                                               _Sum("exists"), _Sum("touch"))}
