"""Compiled or pure: which form of the compiled modules this process imports.

setup.py compiles the modules it lists in ``NATIVE`` with mypyc into C extensions beside
their ``.py`` files, and writes ``marekvs/_native.json``: each compiled module with the
SHA-256 of the source it was compiled from. Python prefers an extension to a source file
of the same name, so an extension built before its source was edited would run the old
code. ``marekvs/__init__.py`` calls ``install()`` before anything imports those modules:

- every listed source still hashes as compiled and ``MAREKVS_PURE`` is not ``1``: the
  extensions are imported (``STATE = "compiled"``);
- otherwise every listed module is imported from its ``.py`` (``STATE = "pure: <why>"``):
  all of them, not only the edited one, because one compiled module calls another's
  compiled code directly, not through the module object.

No manifest, or one that lists no module (a pure build: no C compiler, ``MAREKVS_PURE=1``
at build time), leaves imports as they are: there is nothing compiled to choose. Reading
and hashing the sources costs well under a millisecond per process.
"""

from __future__ import annotations

import hashlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import os
import sys
from collections.abc import Sequence
from types import ModuleType

PURE_ENV = "MAREKVS_PURE"
MANIFEST = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_native.json")
ROOT = os.path.dirname(os.path.dirname(MANIFEST))  # the directory that holds marekvs/

STATE = "pure: not compiled"  # set by install()
MODULES: tuple[str, ...] = ()  # the modules the manifest lists


class _Sources(importlib.abc.MetaPathFinder):
    """Finds the listed modules as their ``.py`` files, ahead of the extensions."""

    def __init__(self, modules: Sequence[str]) -> None:
        self.modules = frozenset(modules)

    def find_spec(self, fullname: str, path: Sequence[str] | None,
                  target: ModuleType | None = None) -> importlib.machinery.ModuleSpec | None:
        if fullname not in self.modules:
            return None
        return importlib.util.spec_from_file_location(fullname, source_of(fullname))


def source_of(module: str) -> str:
    return os.path.join(ROOT, *module.split(".")) + ".py"


def _stale(modules: dict[str, str]) -> str | None:
    """The first listed module whose source no longer hashes as compiled, if any."""
    for module, digest in sorted(modules.items()):
        try:
            with open(source_of(module), "rb") as f:
                if hashlib.sha256(f.read()).hexdigest() != digest:
                    return module
        except OSError:
            return module
    return None


def install() -> str:
    """Decide once per process (see the module docstring); returns ``STATE``."""
    global STATE, MODULES
    try:
        with open(MANIFEST, encoding="utf-8") as f:
            modules: dict[str, str] = json.load(f)["modules"]
    except (OSError, ValueError, KeyError, TypeError):
        return STATE
    if not modules:
        return STATE
    MODULES = tuple(sorted(modules))
    if os.environ.get(PURE_ENV) == "1":
        STATE = f"pure: {PURE_ENV}=1"
    else:
        stale = _stale(modules)
        STATE = "compiled" if stale is None else f"pure: {stale} changed since it was compiled (make native)"
    if STATE != "compiled":
        sys.meta_path.insert(0, _Sources(MODULES))
    return STATE
