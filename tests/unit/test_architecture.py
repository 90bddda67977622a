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


# -- the node as the commands see it (commands/context.NodeApi) -----------------------------

def _api_members() -> set[str]:
    from marekvs.commands.context import NodeApi

    return {n for c in NodeApi.__mro__ if c.__module__ == NodeApi.__module__ for n in
            list(getattr(c, "__annotations__", {})) + [k for k, v in vars(c).items() if callable(v)]
            if not n.startswith("_")}


def test_the_node_satisfies_the_interface_the_commands_use(tmp_path):
    from marekvs.commands.context import NodeApi
    from marekvs.config import Config
    from marekvs.node import Node

    node = Node(Config(data_dir=str(tmp_path / "d"), node_id=1, durability="no"))
    try:
        assert isinstance(node, NodeApi)
        assert not [n for n in _api_members() if not hasattr(node, n)]
    finally:
        node.close()


def test_the_commands_use_the_node_only_through_its_interface():
    """Every ``node.<name>`` (``ctx.node.<name>``, or the node passed on as ``node``) in
    commands/ names a member of NodeApi: a new use of the node is a new line there."""
    import re

    members = _api_members()
    used: dict[str, str] = {}
    for path in sorted((ROOT / "marekvs" / "commands").glob("*.py")):
        for m in re.finditer(r"\bnode\.([A-Za-z_]\w*)", path.read_text()):
            used.setdefault(m.group(1), path.name)
    assert {n: f for n, f in used.items() if n not in members} == {}
