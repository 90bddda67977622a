"""The layers of ../shared/ARCHITECTURE.md hold: imports point downward only.

The contracts are in pyproject.toml ([tool.importlinter]); import-linter builds the real
import graph of the package and checks them. A module that imports against the order
fails this test with the offending import chain in the message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold():
    lint = Path(sys.executable).with_name("lint-imports")
    p = subprocess.run([str(lint), "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    assert " 0 broken" in p.stdout


def test_a_violation_is_caught(tmp_path):
    # the checker is live: an upward import in a copy of the package breaks a contract
    import shutil

    pkg = tmp_path / "marekvs"
    shutil.copytree(ROOT / "marekvs", pkg, ignore=shutil.ignore_patterns("__pycache__", "gen"))
    (pkg / "core" / "bad_upward.py").write_text("from marekvs import node  # noqa\n")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    lint = Path(sys.executable).with_name("lint-imports")
    env = {"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"}
    p = subprocess.run([str(lint), "--no-cache"], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                       env=env)
    assert p.returncode != 0
    assert "marekvs.core.bad_upward -> marekvs.node" in p.stdout
