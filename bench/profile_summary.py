#!/usr/bin/env python3
"""Summarize a py-spy profile as text: top frames by self time and by inclusive time.

Input: ``py-spy record --format raw`` (collapsed stacks: ``f1;f2;...;fN count`` per line)
or ``--format speedscope`` JSON. Frames are aggregated per function (``name (file)``)
unless ``--lines`` keeps the line numbers.

    .venv/bin/py-spy record --pid PID --duration 10 --format raw -o /tmp/set16.txt
    .venv/bin/python bench/profile_summary.py /tmp/set16.txt --top 15

Self time = samples where the function is the innermost Python frame (time spent in it
or in C code it called directly: a RocksDB get, ``transport.write``, ...). Inclusive
time = samples where the function is anywhere on the stack. py-spy does not sample
idle threads by default, so the percentages are of the samples in which the process
was running Python code; ``--duration`` x ``--rate`` against the total tells how busy
the event loop was.
"""

from __future__ import annotations

import argparse
import json
import re
import signal
import sys
from collections import Counter

_LINE = re.compile(r"^(?P<name>.*) \((?P<file>[^()]*?)(?::(?P<line>\d+))?\)$")


def frame_key(frame: str, lines: bool) -> str:
    if lines:
        return frame
    m = _LINE.match(frame)
    if not m:
        return frame
    return f"{m.group('name')} ({m.group('file')})"


def load_raw(path: str) -> list[tuple[list[str], int]]:
    stacks = []
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line:
                continue
            stack, _, count = line.rpartition(" ")
            try:
                n = int(count)
            except ValueError:
                continue
            stacks.append((stack.split(";"), n))
    return stacks


def load_speedscope(path: str) -> list[tuple[list[str], int]]:
    with open(path) as f:
        doc = json.load(f)
    frames = doc["shared"]["frames"]
    names = []
    for fr in frames:
        file = fr.get("file", "")
        line = fr.get("line")
        names.append(f"{fr['name']} ({file}:{line})" if line else f"{fr['name']} ({file})")
    stacks = []
    for prof in doc.get("profiles", []):
        if prof.get("type") != "sampled":
            continue
        weights = prof.get("weights") or [1] * len(prof["samples"])
        for sample, w in zip(prof["samples"], weights):
            stacks.append(([names[i] for i in sample], int(w)))
    return stacks


def summarize(stacks: list[tuple[list[str], int]], lines: bool = False,
              drop_roots: tuple[str, ...] = ("process ", "thread "),
              under: str | None = None) -> tuple[int, Counter, Counter, Counter]:
    """``under``: only the samples with a frame of that function name on their stack (e.g.
    ``run_row``: bench_dispatch.py's measured loop, not its imports and setup)."""
    total = 0
    self_c: Counter = Counter()
    incl_c: Counter = Counter()
    file_c: Counter = Counter()
    for frames, n in stacks:
        frames = [fr for fr in frames if not fr.startswith(drop_roots)]
        if not frames or (under is not None and not any(fr.startswith(under + " (") for fr in frames)):
            continue
        total += n
        keys = [frame_key(fr, lines) for fr in frames]
        self_c[keys[-1]] += n
        for k in set(keys):
            incl_c[k] += n
        m = _LINE.match(frames[-1])
        file_c[m.group("file") if m else frames[-1]] += n
    return total, self_c, incl_c, file_c


NOTES = {
    # frames whose self time is native code below them, not their own Python
    "Runner.run": "uvloop's C event loop: epoll, socket reads, callback dispatch",
    "Server.flush": "mostly transport.write: the send syscall, one per client per tick",
}


def report(path: str, top: int = 15, lines: bool = False, out=sys.stdout, roots: float = 0.97,
           under: str | None = None) -> None:
    if path.endswith(".json"):
        stacks = load_speedscope(path)
    else:
        stacks = load_raw(path)
    total, self_c, incl_c, file_c = summarize(stacks, lines, under=under)
    if not total:
        print(f"{path}: no samples", file=out)
        return
    # frames on (nearly) every stack - runpy, main, serve, uvloop.run - say nothing
    hidden = sorted(k for k, n in incl_c.items() if n >= roots * total and self_c[k] < 0.01 * total)
    incl = Counter({k: n for k, n in incl_c.items() if k not in hidden})

    def table(title: str, c: Counter) -> None:
        print(f"\n{title}", file=out)
        print(f"  {'samples':>8} {'%':>6}  frame", file=out)
        for k, n in c.most_common(top):
            print(f"  {n:>8} {100 * n / total:>5.1f}%  {k}", file=out)

    print(f"{path}: {total} samples", file=out)
    table(f"top {top} by SELF time (innermost Python frame)", self_c)
    notes = {name: note for name, note in NOTES.items()
             if any(k.startswith(name + " ") for k, _ in self_c.most_common(top))}
    for name, note in notes.items():
        print(f"  note: {name} self = {note}", file=out)
    table(f"top {top} by INCLUSIVE time (anywhere on the stack)", incl)
    if hidden:
        print(f"  (not shown, on >= {roots:.0%} of stacks: {', '.join(h.split(' (')[0] for h in hidden)})",
              file=out)
    table(f"top {min(top, 10)} files by self time", Counter(dict(file_c.most_common(min(top, 10)))))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("profiles", nargs="+", help="py-spy raw (.txt) or speedscope (.json) files")
    p.add_argument("--top", type=int, default=15)
    p.add_argument("--lines", action="store_true", help="keep line numbers (aggregate per line)")
    p.add_argument("--under", metavar="FUNCTION",
                   help="only samples with FUNCTION on the stack (bench_dispatch.py profiles: run_row)")
    a = p.parse_args(argv)
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # quiet under | head
    rc = 0
    for path in a.profiles:
        try:
            report(path, a.top, a.lines, under=a.under)
        except (OSError, ValueError, KeyError) as e:
            print(f"{path}: cannot read profile: {e}", file=sys.stderr)
            rc = 1
        print()
    return rc


if __name__ == "__main__":
    sys.exit(main())
