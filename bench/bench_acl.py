#!/usr/bin/env python3
"""What the ACL check costs per command, in-process (``.venv/bin/python bench/bench_acl.py``).

A real node (engine in a temporary directory, durability ``no``) runs commands through
``Node.dispatch`` as a RESP connection does, for the default user (every permission: the
dispatcher skips the check) and for restricted users: key patterns only, single commands
and key patterns, and two selectors. Each figure is the best of ``--repeat`` runs of
``--n`` calls, in microseconds per command (the best is the least disturbed by other load
on the machine). ``make bench``'s SET and GET rows measure the default user end to end.
"""

from __future__ import annotations

import argparse
import tempfile
import time

from marekvs.config import Config
from marekvs.node import Node

USERS = {
    "default (all permissions)": None,
    "~k:* +@all": [b"on", b"nopass", b"~k:*", b"+@all", b"&*"],
    "-@all +get +set ~k:*": [b"on", b"nopass", b"~k:*", b"-@all", b"+get", b"+set", b"+mset"],
    "two selectors": [b"on", b"nopass", b"~x:*", b"+@read", b"(~k:* +@all)"],
}
COMMANDS = {
    "GET k:1": [b"GET", b"k:1"],
    "SET k:1 v": [b"SET", b"k:1", b"v" * 64],
    "MSET 10 keys": [b"MSET"] + [x for i in range(10) for x in (b"k:%d" % i, b"v")],
}


def per_call_us(node: Node, ctx, args: list[bytes], n: int, repeat: int) -> float:
    best = float("inf")
    dispatch = node.dispatch
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(n):
            dispatch(ctx, args)
        best = min(best, (time.perf_counter() - t0) / n)
        node.engine.commit()
    return best * 1e6


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=50_000, help="calls per run")
    p.add_argument("--repeat", type=int, default=7, help="runs per figure (the best is kept)")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as d:
        node = Node(Config(data_dir=d, durability="no"))
        try:
            admin = node.new_context()
            rows = []
            for label, rules in USERS.items():
                ctx = node.new_context()
                if rules is not None:
                    name = label.replace(" ", "_").encode()
                    node.dispatch(admin, [b"ACL", b"SETUSER", name, *rules])
                    assert node.dispatch(ctx, [b"AUTH", name, b"x"]) == b"OK"
                row = [label]
                for argv in COMMANDS.values():
                    r = node.dispatch(ctx, argv)
                    assert not isinstance(r, str), (label, argv, r)
                    row.append(f"{per_call_us(node, ctx, argv, args.n, args.repeat):.2f}")
                rows.append(row)
            head = ["user"] + list(COMMANDS)
            widths = [max(len(str(r[i])) for r in rows + [head]) for i in range(len(head))]
            for r in [head] + rows:
                print("  ".join(str(c).ljust(w) for c, w in zip(r, widths)))
            print(f"(us per command through Node.dispatch; best of {args.repeat} runs of {args.n})")
        finally:
            node.close()


if __name__ == "__main__":
    main()
