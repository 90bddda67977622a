"""Build hook: generate the gRPC modules of ``marekvs.replication.gen`` from ``proto/*.proto``.

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
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
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
    from setuptools.command.build_py import build_py

    class BuildPyWithGrpc(build_py):
        """build_py, then the gRPC modules (into the source tree for an editable install)."""

        def run(self) -> None:
            super().run()
            if getattr(self, "editable_mode", False):
                out = ROOT / GEN_DIR
            else:
                out = Path(self.build_lib) / GEN_DIR
                shutil.rmtree(out, ignore_errors=True)  # nothing stale copied from the source tree
            self.announce(f"generating gRPC modules from {PROTO_DIR}/*.proto into {out}", level=2)
            self._generated = [str(p) for p in generate(out)]

        def get_outputs(self, include_bytecode: bool = True) -> list[str]:
            outs = super().get_outputs(include_bytecode)
            if getattr(self, "editable_mode", False):
                return outs
            return outs + [p for p in getattr(self, "_generated", []) if p not in outs]

    setup(install_requires=requirements(), cmdclass={"build_py": BuildPyWithGrpc})
