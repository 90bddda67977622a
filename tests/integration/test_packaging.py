"""Packaging: a package build generates the gRPC modules itself (setup.py's build hook), so an
installed marekvs serves with no separate ``make proto`` step. A wheel carries the hot modules
compiled (setup.py: ``NATIVE``) wherever the build can compile them; an editable install with
``MAREKVS_PURE=1`` is a pure build, even of a tree where an earlier build left extensions.

Each test installs into a fresh virtualenv and runs ``marekvs serve`` from a directory outside
the repository with no PYTHONPATH, so the source tree is not importable. Building and
installing reach PyPI (pip's cache makes repeated runs quick).
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.helpers import ROOT, free_port, load_setup_py, mb, wait_port

pytestmark = pytest.mark.timeout(600)

GEN = Path("marekvs", "replication", "gen")


def run(*args, cwd: Path, env: dict | None = None, timeout: float = 300) -> subprocess.CompletedProcess:
    r = subprocess.run([str(a) for a in args], cwd=str(cwd), env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert r.returncode == 0, f"{args} failed ({r.returncode}):\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}"
    return r


def clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
    env["PIP_DISABLE_PIP_VERSION_CHECK"] = "1"
    return env


def fresh_venv(path: Path) -> Path:
    """A virtualenv on the interpreter running the tests (no site-packages of ours)."""
    venv.EnvBuilder(with_pip=True, symlinks=True).create(path)
    return path / "bin"


def serve_and_ping(bindir: Path, workdir: Path) -> bytes:
    """Start ``marekvs serve`` of ``bindir`` in ``workdir`` on free loopback ports, PING it,
    stop it by its pid (SIGTERM), and return the PING reply."""
    port, gport = free_port(), free_port()
    log = open(workdir / "serve.log", "wb")
    proc = subprocess.Popen([str(bindir / "marekvs"), "serve", "--port", str(port), "--grpc-port", str(gport),
                             "--data-dir", str(workdir / "data")],
                            cwd=str(workdir), env=clean_env(), stdout=log, stderr=subprocess.STDOUT)
    try:
        try:
            wait_port(port, proc, timeout=30)
        except (RuntimeError, TimeoutError) as e:
            raise AssertionError(f"{e}\n{(workdir / 'serve.log').read_text()}") from None
        import socket

        with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
            s.sendall(mb(b"PING"))
            reply = s.recv(64)
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGTERM)
            try:
                proc.wait(20)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(10)
        log.close()
    assert proc.returncode == 0, (workdir / "serve.log").read_text()
    return reply


def native_state(bindir: Path, workdir: Path, modules: list[str]) -> tuple[str, list[str]]:
    """marekvs._native.STATE in the fresh environment, and where it imports ``modules`` from."""
    r = run(bindir / "python", "-c", "import importlib, sys, marekvs; print(marekvs._native.STATE); "
            "print(*(importlib.import_module(m).__file__ for m in sys.argv[1:]), sep=chr(10))", *modules,
            cwd=workdir, env=clean_env())
    state, *files = r.stdout.splitlines()
    return state, files


def installed_gen(bindir: Path, workdir: Path) -> str:
    """Where the fresh environment imports the generated modules from."""
    r = run(bindir / "python", "-c", "import marekvs.replication.gen.replication_v1_pb2_grpc as m; print(m.__file__)",
            cwd=workdir, env=clean_env())
    return r.stdout.strip()


def test_wheel_from_python_m_build_serves(tmp_path):
    """`python -m build` (an sdist, then a wheel built from it) -> a fresh virtualenv ->
    `marekvs serve` answers PING. The sdist carries proto/ and setup.py, the wheel the
    generated modules and, where this machine can compile them, the compiled hot modules,
    which the installed marekvs imports."""
    hook = load_setup_py()
    compiled = hook.native_plan(clean_env()) is None
    modules = [hook.module_of(p) for p in hook.NATIVE]
    dist = tmp_path / "dist"
    run(sys.executable, "-m", "build", "--outdir", dist, ROOT, cwd=tmp_path, env=clean_env())
    wheels = list(dist.glob("marekvs-*.whl"))
    sdists = list(dist.glob("marekvs-*.tar.gz"))
    assert len(wheels) == 1 and len(sdists) == 1, list(dist.iterdir())
    import tarfile
    import zipfile

    names = zipfile.ZipFile(wheels[0]).namelist()
    for f in ("__init__.py", "replication_v1_pb2.py", "replication_v1_pb2_grpc.py"):
        assert (GEN / f).as_posix() in names, names
    ext = sysconfig.get_config_var("EXT_SUFFIX")
    extensions = {n for n in names if n.endswith(ext)}
    assert extensions == ({m.replace(".", "/") + sfx + ext for m in modules for sfx in ("", "__mypyc")}
                          if compiled else set()), sorted(extensions)
    with tarfile.open(sdists[0]) as t:
        members = {m.split("/", 1)[1] for m in t.getnames() if "/" in m}
    assert {"setup.py", "proto/replication_v1.proto", "pyproject.toml"} <= members

    bindir = fresh_venv(tmp_path / "venv")
    run(bindir / "pip", "install", "-q", wheels[0], cwd=tmp_path, env=clean_env())
    work = tmp_path / "run"
    work.mkdir()
    assert installed_gen(bindir, work).startswith(str(tmp_path / "venv"))
    state, files = native_state(bindir, work, modules)
    assert state == ("compiled" if compiled else "pure: not compiled"), state
    assert all(f.startswith(str(tmp_path / "venv")) and f.endswith(ext if compiled else ".py") for f in files), files
    assert serve_and_ping(bindir, work) == b"+PONG\r\n"


def test_editable_install_of_a_clean_tree_serves(tmp_path):
    """`pip install -e .` on a tree with no generated modules (a fresh clone) generates them in
    the tree, as `make proto` would, and `marekvs serve` answers PING. With MAREKVS_PURE=1 (as
    the Makefile installs) it is a pure build: the extensions an earlier build left in the
    tree (copied here from ours, if any) are removed and every hot module runs as Python."""
    src = tmp_path / "src"
    src.mkdir()
    for f in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md"):
        shutil.copy2(ROOT / f, src / f)
    shutil.copytree(ROOT / "proto", src / "proto")
    shutil.copytree(ROOT / "marekvs", src / "marekvs",
                    ignore=shutil.ignore_patterns("__pycache__", "gen", "*.egg-info"))
    assert not (src / GEN).exists()
    bindir = fresh_venv(tmp_path / "venv")
    run(bindir / "pip", "install", "-q", "-e", src, cwd=tmp_path, env={**clean_env(), "MAREKVS_PURE": "1"})
    assert (src / GEN / "replication_v1_pb2_grpc.py").exists()
    assert not list(src.rglob("*.so"))
    work = tmp_path / "run"
    work.mkdir()
    assert installed_gen(bindir, work) == str(src / GEN / "replication_v1_pb2_grpc.py")
    hook = load_setup_py()
    state, files = native_state(bindir, work, [hook.module_of(p) for p in hook.NATIVE])
    assert state == "pure: not compiled" and files == [str(src / p) for p in hook.NATIVE], (state, files)
    assert serve_and_ping(bindir, work) == b"+PONG\r\n"


def test_build_hook_generates_what_make_proto_does(tmp_path):
    """setup.py's generate() writes byte for byte what the Makefile's `proto` recipe writes
    (protoc, then the sed to package-relative imports), with the same grpcio-tools."""
    pytest.importorskip("grpc_tools")
    by_make = tmp_path / "make" / GEN
    by_make.mkdir(parents=True)
    # the Makefile's recipe, with its output directory moved out of the source tree
    run("sh", "-c", f"{sys.executable} -m grpc_tools.protoc -Iproto --python_out={by_make} "
        f"--grpc_python_out={by_make} proto/*.proto && "
        f"sed -i -E 's/^import (\\w+_pb2)/from . import \\1/' {by_make}/*_grpc.py && touch {by_make}/__init__.py",
        cwd=ROOT)
    hook = load_setup_py()
    by_hook = tmp_path / "hook" / GEN
    hook.generate(by_hook)
    made = sorted(p.name for p in by_make.iterdir())
    assert made == sorted(p.name for p in by_hook.iterdir())
    for name in made:
        assert (by_make / name).read_bytes() == (by_hook / name).read_bytes(), name
    assert b"from . import replication_v1_pb2" in (by_hook / "replication_v1_pb2_grpc.py").read_bytes()
