"""Build hooks: generate the gRPC modules of ``marekvs.replication.gen`` from ``proto/*.proto``,
and compile the hot modules (``NATIVE``) with mypyc.

gRPC modules
------------

The generated modules are not in the repository. ``make proto`` writes them into the source
tree for development; a package build (``pip install .``, ``pip install -e .``,
``python -m build``, the Dockerfile) runs the same two steps here, so an installed marekvs
needs no separate protoc step:

1. ``python -m grpc_tools.protoc -Iproto --python_out=GEN --grpc_python_out=GEN proto/*.proto``
2. in ``GEN/*_grpc.py``, ``import x_pb2`` becomes ``from . import x_pb2`` (the Makefile's
   ``sed -E 's/^import (\\w+_pb2)/from . import \\1/'``), and ``GEN/__init__.py`` is created.

GEN is ``marekvs/replication/gen`` in the build directory (a wheel), or in the source tree for
an editable install (where the package is imported from the source tree, as after
``make proto``).

grpcio-tools is a build requirement (pyproject.toml, ``[build-system]``). The modules it
generates refuse to import with a grpcio older than grpcio-tools itself, or with a protobuf
runtime outside the range grpcio-tools generates for, so the runtime requirements on grpcio
and protobuf are taken from the grpcio-tools that generated them (``dependencies`` is dynamic
in pyproject.toml for that reason).

Compiled modules
----------------
The modules in ``NATIVE`` (the pure core on every read and write path, the clock, the
keyspace above it, the RESP codec) are compiled with mypyc from the same typed source, as
black and mypy ship themselves: one C extension per module (mypyc's ``separate`` mode) beside
its ``.py``. mypyc trusts the annotations, so a compiled module's types must be true, and a
few rules follow from what mypyc compiles differently: slice ``bytes`` with literal bounds
(``rec[env.TTL_AT:env.HEADER]``), never index them with a ``slice`` object (mypyc compiles
``b[s]`` as an integer index); a constant another module reads is ``Final``; a class
attribute that is set on the class at run time is a ``ClassVar``. mypy is a build
requirement (pyproject.toml); mypyc type-checks them with pyproject's ``[tool.mypy]``
(strict) before it compiles, so ``make lint`` and the build agree.

The build falls back to the pure-Python modules, and says why, when ``MAREKVS_PURE=1`` is
set, mypyc cannot be imported, or there is no C compiler or no ``Python.h`` for this
interpreter (``native_plan``). A compiler that is present but fails is a build error, not a
silent fallback. Either way the build writes ``marekvs/_native.json``: the modules it
compiled, each with the SHA-256 of the source it compiled (none for a pure build), and a
pure build removes compiled files left beside the sources by an earlier build. At import,
``marekvs/_native.py`` compares those hashes with the sources and loads every listed module
from its ``.py`` when any differs (or when ``MAREKVS_PURE=1`` is set at run time), so an
edited source is never shadowed by a stale extension.

Where the extensions go: a wheel (``python -m build``, the Dockerfile's ``pip install .``)
carries them; an editable install (``pip install -e .``) and ``python setup.py build_ext
--inplace`` (the Makefile's ``native`` step, rebuilt whenever a compiled source changes)
put them in the source tree beside the ``.py`` files. mypyc's C sources go to ``build/``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
from importlib import metadata
from pathlib import Path

ROOT = Path(__file__).resolve().parent
PROTO_DIR = "proto"
GEN_DIR = Path("marekvs", "replication", "gen")
PKG_IMPORT = re.compile(r"^import (\w+_pb2)", re.MULTILINE)

BASE_REQUIREMENTS = [
    "rocksdict>=0.3.20",
    "xxhash>=3.4",
    "msgpack>=1.0",
    "uvloop>=0.19",
    "hiredis>=2.3",
    "prometheus_client>=0.17",
    "lupa>=2.0",
    "sortedcontainers>=2.4",  # the sorted sets' order-statistic mirrors (keyspace/zsets.py)
    # the Kafka gateway (marekvs/gateway/kafka/): kafka-python's schema-generated wire structs and
    # record-batch codec, and the codecs' libraries (snappy, lz4, zstd; CRC-32C in C)
    "kafka-python>=3.0", "python-snappy>=0.7", "lz4>=4.0", "zstandard>=0.22", "crc32c>=2.4",
]


def generated_code_requirements() -> list[str]:
    """grpcio >= the generator's version, and protobuf in the range the generator pins."""
    try:
        tools = metadata.version("grpcio-tools")
        reqs = metadata.requires("grpcio-tools") or []
    except metadata.PackageNotFoundError:
        sys.exit("marekvs: building needs grpcio-tools (a build requirement in pyproject.toml)")
    protobuf = [r.split(";")[0].strip() for r in reqs if re.match(r"protobuf\b", r)]
    return [f"grpcio>={tools}", *(protobuf or ["protobuf>=4.25"])]


# The modules compiled with mypyc: pure, typed, on every read and write path. Adding one:
# it must pass `make lint` (pyproject's [tool.mypy] covers these files) and `make test`
# compiled; tests must not monkeypatch its attributes (a compiled module's globals are
# bound at compile time) or a compiled class's methods (an instance attribute declared in
# __init__, like Keyspace.now, may be replaced). Not compiled: storage/engine.py (under
# mypy --strict all the same). As a native class it would refuse what tests do (replace
# Engine.apply and Engine.scan on an instance); compiled as a regular class
# (mypyc_attr(native_class=False)) it measured no gain: its attribute reads lose CPython's
# inline caches, and its time is RocksDB's and the dicts'.
NATIVE = (
    "marekvs/core/envelope.py",
    "marekvs/core/keys.py",
    "marekvs/core/partition.py",
    "marekvs/core/merge.py",
    "marekvs/core/lww.py",
    "marekvs/core/orswot.py",
    "marekvs/core/head.py",
    "marekvs/core/pncounter.py",
    "marekvs/core/hll.py",
    "marekvs/core/zset.py",
    "marekvs/core/stream.py",
    "marekvs/core/registry.py",
    "marekvs/core/hlc.py",
    "marekvs/keyspace/status.py",
    "marekvs/keyspace/changes.py",
    "marekvs/keyspace/values.py",
    "marekvs/keyspace/counts.py",
    "marekvs/keyspace/collections.py",
    "marekvs/keyspace/keyspace.py",
    "marekvs/keyspace/strings.py",
    "marekvs/keyspace/members.py",
    "marekvs/keyspace/hashes.py",
    "marekvs/keyspace/sets.py",
    "marekvs/keyspace/zsets.py",
    "marekvs/keyspace/lists.py",
    "marekvs/keyspace/streams.py",
    "marekvs/keyspace/hll.py",
    "marekvs/keyspace/bitmaps.py",
    "marekvs/keyspace/geo.py",
    "marekvs/keyspace/users.py",
    "marekvs/server/resp.py",
)
# the setup.py commands that build extensions (pip and build run bdist_wheel or editable_wheel)
BUILDS_EXTENSIONS = frozenset(("build", "build_ext", "bdist_wheel", "editable_wheel", "install", "develop",
                               "bdist_egg"))
MANIFEST = Path("marekvs", "_native.json")  # read at import by marekvs/_native.py
PURE_ENV = "MAREKVS_PURE"


def module_of(path: str) -> str:
    return path[:-3].replace("/", ".")


def source_hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def native_plan(env: dict[str, str] | None = None) -> str | None:
    """None if the ``NATIVE`` modules can be compiled here, else why not (the fallback)."""
    env = dict(os.environ) if env is None else env
    if env.get(PURE_ENV) == "1":
        return f"{PURE_ENV}=1"
    try:
        import mypyc.build  # noqa: F401
    except ImportError:
        return "mypyc cannot be imported (mypy is a build requirement in pyproject.toml)"
    cc = shlex.split(env.get("CC") or sysconfig.get_config_var("CC") or "cc")
    if not cc or shutil.which(cc[0]) is None:
        return f"no C compiler ({cc[0] if cc else 'CC is empty'} is not on PATH)"
    include = sysconfig.get_paths()["include"]
    if not Path(include, "Python.h").exists():
        return f"no Python.h in {include} (python3-dev)"
    return None


def compiled_files(root: Path, module: str) -> list[Path]:
    """What a build of ``module`` leaves under ``root``: its extension and its mypyc
    library (``<module>__mypyc``)."""
    *pkg, name = module.split(".")
    where = root.joinpath(*pkg)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    return [p for p in (where / f"{name}{suffix}", where / f"{name}__mypyc{suffix}") if p.exists()]


def write_manifest(root: Path, compiled: list[str], reason: str | None) -> Path:
    """``root/marekvs/_native.json``. Compiled files of a module not compiled now are
    removed: every ``NATIVE`` module's after a pure build (``compiled`` empty), and those of
    a module the previous manifest listed and this build leaves out (taken out of
    ``NATIVE``), which the import-time check would no longer see and which would shadow
    its source."""
    out = root / MANIFEST
    stale = {module_of(p) for p in NATIVE} if not compiled else set()
    try:
        stale |= set(json.loads(out.read_text())["modules"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    for module in stale - {module_of(p) for p in compiled}:
        for f in compiled_files(root, module):
            f.unlink()
    out.parent.mkdir(parents=True, exist_ok=True)
    data = {"modules": {module_of(p): source_hash(ROOT / p) for p in compiled}, "pure_reason": reason}
    text = json.dumps(data, indent=1, sort_keys=True) + "\n"
    if not out.exists() or out.read_text() != text:
        out.write_text(text)
    return out


def requirements() -> list[str]:
    return BASE_REQUIREMENTS + generated_code_requirements()


def generate(out_dir: Path, root: Path = ROOT) -> list[Path]:
    """Generate the gRPC modules of ``root/proto/*.proto`` into ``out_dir``; returns its files."""
    protos = sorted(p.relative_to(root).as_posix() for p in (root / PROTO_DIR).glob("*.proto"))
    if not protos:
        sys.exit(f"marekvs: no .proto files in {root / PROTO_DIR}")
    out_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", f"-I{PROTO_DIR}", f"--python_out={out_dir}",
         f"--grpc_python_out={out_dir}", *protos],
        cwd=root, check=True)
    for f in sorted(out_dir.glob("*_grpc.py")):
        text = f.read_text()
        fixed = PKG_IMPORT.sub(r"from . import \1", text)
        if fixed != text:
            f.write_text(fixed)
    (out_dir / "__init__.py").touch()
    return sorted(out_dir.glob("*.py"))


if __name__ == "__main__":
    from setuptools import setup
    from setuptools.command.build_ext import build_ext
    from setuptools.command.build_py import build_py

    os.chdir(ROOT)  # mypyc takes the module paths and its build/ directory relative to here
    # mypyc type-checks and generates C when setup() is given the extensions: only for the
    # commands that build them, not for the metadata and sdist steps of a build
    building = not BUILDS_EXTENSIONS.isdisjoint(sys.argv[1:])
    PURE_REASON = native_plan()
    if PURE_REASON is None and building:
        from mypyc.build import mypycify

        # separate: one extension per module; in one group mypyc makes every module depend on
        # all the others, and mypy then cannot infer the unannotated module constants that one
        # reads from another
        ext_modules = mypycify(list(NATIVE), opt_level="3", separate=True)
    else:
        if building:
            print(f"marekvs: pure-Python build, not compiling {len(NATIVE)} modules: {PURE_REASON}",
                  file=sys.stderr)
        ext_modules = []

    def output_root(cmd: build_py | build_ext) -> Path:
        """The source tree (editable install, build_ext --inplace) or the build directory."""
        if getattr(cmd, "editable_mode", False) or getattr(cmd, "inplace", False):
            return ROOT
        return Path(cmd.build_lib)

    class BuildPyWithGrpc(build_py):
        """build_py, then the gRPC modules (into the source tree for an editable install);
        a pure build also writes the manifest here (build_ext does not run)."""

        def run(self) -> None:
            super().run()
            if getattr(self, "editable_mode", False):
                out = ROOT / GEN_DIR
            else:
                out = Path(self.build_lib) / GEN_DIR
                shutil.rmtree(out, ignore_errors=True)  # nothing stale copied from the source tree
            self.announce(f"generating gRPC modules from {PROTO_DIR}/*.proto into {out}", level=2)
            self._generated = [str(p) for p in generate(out)]
            if PURE_REASON is not None:
                self._generated.append(str(write_manifest(output_root(self), [], PURE_REASON)))

        def get_outputs(self, include_bytecode: bool = True) -> list[str]:
            outs = super().get_outputs(include_bytecode)
            if getattr(self, "editable_mode", False):
                return outs
            return outs + [p for p in getattr(self, "_generated", []) if p not in outs]

    class BuildExtNative(build_ext):
        """build_ext, then the manifest of what it compiled. Without extensions to build
        (a pure build, e.g. ``MAREKVS_PURE=1 setup.py build_ext --inplace``) it writes the
        manifest of a pure build and removes compiled files left by an earlier build. The
        extensions build in parallel, one compiler per CPU, unless ``-j`` says otherwise."""

        def finalize_options(self) -> None:
            if self.parallel is None:
                self.parallel = True  # os.cpu_count() workers
            super().finalize_options()

        def run(self) -> None:
            super().run()
            self._manifest = str(write_manifest(output_root(self), list(NATIVE) if ext_modules else [],
                                                PURE_REASON))

        def get_outputs(self) -> list[str]:
            outs = super().get_outputs()
            if getattr(self, "editable_mode", False):
                return outs
            return outs + [p for p in [getattr(self, "_manifest", None)] if p and p not in outs]

    setup(install_requires=requirements(), ext_modules=ext_modules,
          cmdclass={"build_py": BuildPyWithGrpc, "build_ext": BuildExtNative})
