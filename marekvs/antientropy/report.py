"""What a comparison-and-repair run found and did, the way Cassandra's diff tools report
it (pure: the CLI, the PySpark driver and the node's INFO read it).

A ``Report`` is filled by ``exchange.exchange`` for a range of partitions; reports of
several ranges (the tasks of a Spark job) add up with ``add``. ``status``/``exit_code``:

    0  consistent   every compared partition matched (differences still carried by log
                    shipping, younger than --settle, do not count)
    1  repaired     differences were found and every replica was sent what it lacked
                    (with --dry-run: differences were found, nothing was written)
    2  failed       a replica could not be reached or refused a call
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

STAGES = ("verify", "roots", "segments", "fine", "fetch", "merge", "push")
EXIT_CONSISTENT, EXIT_REPAIRED, EXIT_FAILED = 0, 1, 2


def _add(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = out.get(k, 0) + v
    return out


@dataclass
class Report:
    nodes: dict[str, str] = field(default_factory=dict)  # node id -> address
    dry_run: bool = False
    partitions_compared: int = 0
    partitions_matching: int = 0
    partitions_mismatched: int = 0  # roots differed
    partitions_repaired: int = 0  # ... and some replica was sent records
    segments_mismatched: int = 0  # kept segments (of 16 per partition) that differed
    fine_segments_mismatched: int = 0  # fine segments (of 256) that differed
    keys_compared: int = 0  # internal keys in the differing fine segments
    keys_differing: int = 0
    keys_only_on: dict[str, int] = field(default_factory=dict)  # node id -> keys only it held
    keys_in_flight: int = 0  # differing, younger than settle: left to log shipping
    records_fetched: dict[str, int] = field(default_factory=dict)
    records_to_push: dict[str, int] = field(default_factory=dict)  # what each replica lacked
    records_repaired: dict[str, int] = field(default_factory=dict)  # ... and that changed it
    records_unchanged: dict[str, int] = field(default_factory=dict)  # ... that it had by then
    records_past_gc_grace: dict[str, int] = field(default_factory=dict)  # ... that it refused
    push_batches: int = 0
    bytes_digests: int = 0
    bytes_fetched: int = 0
    bytes_pushed: int = 0
    digests_verified: int = 0  # partitions recomputed from the data (--verify)
    digests_wrong: dict[str, int] = field(default_factory=dict)  # ... whose kept digest was wrong
    stage_seconds: dict[str, float] = field(default_factory=dict)  # summed over tasks
    wall_seconds: float = 0.0
    tasks: int = 0
    error: str = ""

    def add(self, other: Report) -> None:
        for name, value in asdict(other).items():
            mine = getattr(self, name)
            if name in ("nodes", "dry_run", "error", "wall_seconds"):
                continue
            if isinstance(mine, dict):
                setattr(self, name, _add(mine, value))
            else:
                setattr(self, name, mine + value)
        if other.error and not self.error:
            self.error = other.error
        self.nodes.update(other.nodes)

    def timed(self, stage: str, seconds: float) -> None:
        self.stage_seconds[stage] = self.stage_seconds.get(stage, 0.0) + seconds

    @property
    def records_repaired_total(self) -> int:
        return sum(self.records_repaired.values())

    @property
    def status(self) -> str:
        if self.error:
            return "failed"
        found = self.keys_differing - self.keys_in_flight > 0 or sum(self.digests_wrong.values()) > 0
        if not found:
            return "consistent"
        return "differences found (dry run)" if self.dry_run else "repaired"

    @property
    def exit_code(self) -> int:
        return {"consistent": EXIT_CONSISTENT, "failed": EXIT_FAILED}.get(self.status, EXIT_REPAIRED)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["status"] = self.status
        d["exit_code"] = self.exit_code
        d["records_repaired_total"] = self.records_repaired_total
        d["stage_seconds"] = {s: round(self.stage_seconds.get(s, 0.0), 3) for s in STAGES}
        d["wall_seconds"] = round(self.wall_seconds, 3)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=False)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Report:
        names = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in d.items() if k in names})

    def table(self) -> str:
        """The report for a console: one summary block, one row per replica, stage times."""
        ids = sorted(self.nodes, key=lambda x: int(x))
        lines = [
            f"status: {self.status}" + (f" ({self.error})" if self.error else "")
            + ("  [dry run: nothing written]" if self.dry_run else ""),
            f"partitions: {self.partitions_compared} compared, {self.partitions_matching} matching, "
            f"{self.partitions_mismatched} mismatched, {self.partitions_repaired} repaired",
            f"segments mismatched: {self.segments_mismatched} (fine: {self.fine_segments_mismatched});  "
            f"keys in them: {self.keys_compared}, differing {self.keys_differing}, "
            f"left to log shipping {self.keys_in_flight}",
            f"bytes moved: digests {self.bytes_digests:,}, records fetched {self.bytes_fetched:,}, "
            f"records pushed {self.bytes_pushed:,}  ({self.push_batches} repair batches)",
        ]
        if self.digests_verified:
            lines.append(f"digests verified against the data: {self.digests_verified} partitions, wrong "
                         f"{sum(self.digests_wrong.values())}")
        hdr = ("node", "address", "keys only here", "fetched", "lacked", "repaired", "had by then", "past gc_grace")
        rows = [hdr] + [(i, self.nodes.get(i, ""), str(self.keys_only_on.get(i, 0)),
                         str(self.records_fetched.get(i, 0)), str(self.records_to_push.get(i, 0)),
                         str(self.records_repaired.get(i, 0)), str(self.records_unchanged.get(i, 0)),
                         str(self.records_past_gc_grace.get(i, 0))) for i in ids]
        widths = [max(len(r[c]) for r in rows) for c in range(len(hdr))]
        lines.append("")
        for n, r in enumerate(rows):
            lines.append("  ".join(v.ljust(w) if c < 2 else v.rjust(w) for c, (v, w) in enumerate(zip(r, widths))))
            if n == 0:
                lines.append("  ".join("-" * w for w in widths))
        times = ", ".join(f"{s} {self.stage_seconds.get(s, 0.0):.2f}s" for s in STAGES
                          if self.stage_seconds.get(s))
        lines.append("")
        lines.append(f"time: {self.wall_seconds:.2f}s wall" + (f"; per stage (summed over {self.tasks} tasks): "
                                                               f"{times}" if times else ""))
        return "\n".join(lines)


def total(reports: list[Report]) -> Report:
    out = Report()
    for r in reports:
        out.add(r)
    return out
