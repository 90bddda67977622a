"""The compiled build of the hot modules (setup.py: ``NATIVE``, mypyc) and its pure-Python
fallback, on real server processes.

- Where the build compiled them (``make test`` runs ``make native`` first), a node runs them
  compiled: the extension of every compiled module is mapped into the server process. With
  ``MAREKVS_REQUIRE_NATIVE=1`` (.ci/run sets it) a pure build is a failure, not a skip.
- The fallback (CI's path through the pure modules): with ``MAREKVS_PURE=1`` a node maps no
  extension of ours and answers every family's write as the compiled node does, and the
  core's and the RESP codec's tests pass with every listed module imported from its ``.py``.
- A source edited after its build is never shadowed by its stale extension.
- setup.py falls back to a pure build, with its reason, without a compiler, and a pure
  build removes what an earlier compiled build left beside the sources.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.helpers import ROOT, Node, load_setup_py

MANIFEST = ROOT / "marekvs" / "_native.json"
EXT = sysconfig.get_config_var("EXT_SUFFIX")
PURE = {"MAREKVS_PURE": "1"}
# one write and one read per family: each goes through the RESP codec, the record codecs,
# the merge of its lattice and the registry
SMOKE: list[tuple[bytes, ...]] = [
    (b"SET", b"s", b"v"), (b"GET", b"s"), (b"INCRBY", b"n", b"5"), (b"DECR", b"n"), (b"GET", b"n"),
    (b"HSET", b"h", b"f", b"1", b"g", b"2"), (b"HGETALL", b"h"), (b"SADD", b"set", b"a", b"b"),
    (b"SCARD", b"set"), (b"ZADD", b"z", b"1.5", b"m", b"-2", b"k"), (b"ZRANGE", b"z", b"0", b"-1", b"WITHSCORES"),
    (b"RPUSH", b"l", b"x", b"y"), (b"LRANGE", b"l", b"0", b"-1"), (b"XADD", b"x", b"1-1", b"f", b"v"),
    (b"XRANGE", b"x", b"-", b"+"), (b"PFADD", b"p", b"a", b"b", b"c"), (b"PFCOUNT", b"p"),
    (b"DEL", b"h", b"set"), (b"EXISTS", b"h", b"set", b"z"), (b"TYPE", b"l"),
]
# the fallback runs these test files again under MAREKVS_PURE=1 (about 15 s)
FALLBACK_TESTS = ["tests/unit/test_core_format.py", "tests/unit/test_format_vectors.py",
                  "tests/unit/test_resp_codec.py", "tests/merge_laws/test_registry.py"]


def compiled_modules() -> dict[str, str]:
    """The modules the last build compiled ({} for a pure build, or none yet)."""
    try:
        return json.loads(MANIFEST.read_text())["modules"]
    except (OSError, ValueError, KeyError):
        return {}


def need_compiled() -> dict[str, str]:
    modules = compiled_modules()
    if not modules:
        try:
            reason = json.loads(MANIFEST.read_text()).get("pure_reason")
        except (OSError, ValueError):
            reason = "not built (make native)"
        if os.environ.get("MAREKVS_REQUIRE_NATIVE") == "1":
            pytest.fail(f"MAREKVS_REQUIRE_NATIVE=1 but the hot modules are not compiled: {reason}")
        pytest.skip(f"the hot modules are not compiled here: {reason}")
    return modules


def mapped_extensions(pid: int) -> set[str]:
    """Our extension modules mapped into process ``pid``, as module names."""
    root = str(ROOT / "marekvs") + os.sep
    out = set()
    with open(f"/proc/{pid}/maps") as f:
        for line in f:
            path = line.rstrip("\n").split(maxsplit=5)[-1]
            if path.startswith(root) and path.endswith(EXT):
                out.add(path[len(str(ROOT)) + 1:-len(EXT)].replace(os.sep, "."))
    return out


def smoke(node: Node) -> list[object]:
    c = node.client()
    try:
        return [c.execute_command(*cmd) for cmd in SMOKE]
    finally:
        c.close()


def imported_files(modules, cwd: Path, env: dict[str, str]) -> dict[str, object]:
    """STATE and each module's file, as a fresh interpreter in ``cwd`` imports them."""
    code = ("import importlib, json, sys, marekvs; "
            "print(json.dumps({'state': marekvs._native.STATE, "
            "'files': {m: importlib.import_module(m).__file__ for m in sys.argv[1:]}}))")
    r = subprocess.run([sys.executable, "-c", code, *modules], cwd=str(cwd), env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_node_runs_the_compiled_modules_and_the_fallback_answers_the_same(tmp_path):
    modules = need_compiled()
    native = Node(tmp_path / "native", env={"MAREKVS_PURE": "0"}).start()  # even under MAREKVS_PURE=1 make test
    try:
        want = smoke(native)
        mapped = mapped_extensions(native.pid)
    finally:
        assert native.stop() == 0
    assert set(modules) <= mapped, f"not mapped into the server: {sorted(set(modules) - mapped)}"

    pure = Node(tmp_path / "pure", env=PURE).start()
    try:
        got = smoke(pure)
        assert mapped_extensions(pure.pid) == set()
    finally:
        assert pure.stop() == 0
    assert got == want


def test_the_pure_fallback_passes_the_core_and_codec_tests(tmp_path):
    env = {**os.environ, **PURE}
    hook = load_setup_py()
    listed = sorted(compiled_modules()) or [hook.module_of(p) for p in hook.NATIVE]
    seen = imported_files(listed, ROOT, env)
    assert all(f.endswith(".py") for f in seen["files"].values()), seen
    r = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *FALLBACK_TESTS],
                       cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-3000:]


def test_an_edited_source_is_never_shadowed_by_its_stale_extension(tmp_path):
    modules = sorted(need_compiled())
    shutil.copytree(ROOT / "marekvs", tmp_path / "marekvs", ignore=shutil.ignore_patterns("__pycache__"))
    env = {**{k: v for k, v in os.environ.items() if k != "MAREKVS_PURE"}, "PYTHONPATH": str(tmp_path)}
    seen = imported_files(modules, tmp_path, env)
    assert seen["state"] == "compiled"
    assert all(f == str(tmp_path / m.replace(".", os.sep)) + EXT for m, f in seen["files"].items()), seen

    edited = tmp_path / "marekvs" / "core" / "lww.py"
    edited.write_text(edited.read_text() + "\n# edited after the build\n")
    seen = imported_files(modules, tmp_path, env)
    assert seen["state"] == "pure: marekvs.core.lww changed since it was compiled (make native)"
    # all of them: a compiled module calls another's compiled code directly
    assert all(f == str(tmp_path / m.replace(".", os.sep)) + ".py" for m, f in seen["files"].items()), seen


def test_a_build_without_a_compiler_is_pure_and_leaves_no_extension_behind(tmp_path):
    hook = load_setup_py()
    assert hook.native_plan({"MAREKVS_PURE": "1"}) == "MAREKVS_PURE=1"
    reason = hook.native_plan({"CC": str(tmp_path / "no-such-cc")})
    assert reason is not None and reason.startswith("no C compiler"), reason
    # what a compiled build left under a build root, then a pure build over it
    core = tmp_path / "marekvs" / "core"
    core.mkdir(parents=True)
    left = [core / f"lww{EXT}", core / f"lww__mypyc{EXT}", core / f"merge{EXT}"]
    for f in left:
        f.write_bytes(b"\x7fELF")
    manifest = hook.write_manifest(tmp_path, [], reason)
    assert not any(f.exists() for f in left)
    assert json.loads(manifest.read_text()) == {"modules": {}, "pure_reason": reason}


def test_a_module_taken_out_of_native_loses_its_extension(tmp_path):
    """A module the previous build compiled and this one leaves out: its extension would
    shadow its source with no manifest entry to check it against, so the build removes it."""
    hook = load_setup_py()
    pkg = tmp_path / "marekvs" / "storage"
    pkg.mkdir(parents=True)
    left = [pkg / f"engine{EXT}", pkg / f"engine__mypyc{EXT}"]
    for f in left:
        f.write_bytes(b"\x7fELF")
    (tmp_path / "marekvs" / "_native.json").write_text(json.dumps({"modules": {"marekvs.storage.engine": "0"},
                                                                    "pure_reason": None}))
    kept = hook.NATIVE[0]
    manifest = hook.write_manifest(tmp_path, [kept], None)
    assert not any(f.exists() for f in left)
    assert list(json.loads(manifest.read_text())["modules"]) == [hook.module_of(kept)]
