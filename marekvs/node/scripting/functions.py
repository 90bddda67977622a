"""Function libraries: the ``#!lua name=...`` metadata, the in-memory library table, and the
FUNCTION DUMP payload.

A library is stored as one replicated record per name (``core/funclib.py``, tag ``F``). The
node keeps the libraries it has loaded in a ``Catalog``: library name -> ``Library``,
and function name (case-insensitive, as Redis's function dictionary) -> ``Function``.

**Which libraries are loaded** is decided from the live records alone, so every node that
holds the same records loads the same libraries, whatever order they arrived in:
``Catalog.resolve`` takes the live libraries in the order of their record versions
(``(hlc, origin)``, oldest first) and loads each one unless one of its function names is
already taken by an older library. FUNCTION LOAD checks collisions before it writes, so
this only matters when two nodes load colliding libraries at the same time: the older
load keeps the name, the newer library stays stored but unloaded (FUNCTION LIST does not
show it; the node logs it) until the older one is deleted or replaced.

**FUNCTION DUMP** writes Redis 7.0's payload: for each library the RDB opcode
``RDB_OPCODE_FUNCTION2`` (245) and the library code as an RDB string (length-prefixed,
uncompressed), then the RDB version (10, two bytes little endian) and a CRC-64 (Jones,
reflected; eight bytes little endian) of everything before it. Redis 7.0 restores it, and
FUNCTION RESTORE here reads Redis's own dumps too, LZF-compressed strings included.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from marekvs.commands import errors
from marekvs.core import rdb
from marekvs.core.sds import splitargs

ENGINE = "LUA"
RDB_OPCODE_FUNCTION2 = 245
RDB_OPCODE_FUNCTION = 246  # Redis 7.0.0-rc's library record (name, engine, description, code)
FLAG_NAMES = ("no-writes", "allow-oom", "allow-stale", "no-cluster", "allow-cross-slot-keys")
FLAG_BITS = {name: 1 << i for i, name in enumerate(FLAG_NAMES)}
NO_WRITES = FLAG_BITS["no-writes"]
EVAL_COMPAT = 1 << 8  # EVAL without a shebang: the flags Redis 6 scripts had

_NAME_OK = re.compile(rb"[A-Za-z0-9_]+\Z")


def valid_name(name: bytes) -> bool:
    """Library and function names: letters, digits and '_', at least one."""
    return bool(_NAME_OK.match(name))


class MetadataError(ValueError):
    """FUNCTION LOAD's metadata errors (the message is Redis's, without ERR)."""


def library_metadata(code: bytes) -> tuple[bytes, bytes, bytes]:
    """(engine, library name, code after the shebang line, newline kept) of a FUNCTION LOAD
    payload: Redis 7.0's functionExtractLibMetaData."""
    if not code.startswith(b"#!"):
        raise MetadataError(errors.LIBRARY_METADATA_MISSING)
    nl = code.find(b"\n")
    if nl < 0:
        raise MetadataError(errors.LIBRARY_METADATA_INVALID)
    parts = splitargs(code[:nl])
    if not parts:
        raise MetadataError(errors.LIBRARY_METADATA_INVALID)
    engine = parts[0][2:]
    name = None
    for part in parts[1:]:
        if part[:5].lower() == b"name=":
            if name is not None:
                raise MetadataError(errors.LIBRARY_NAME_TWICE)
            name = part[5:]
            continue
        raise MetadataError(errors.library_metadata_value(part))
    if name is None:
        raise MetadataError(errors.LIBRARY_NAME_NOT_GIVEN)
    return engine, name, code[nl:]


def eval_shebang(body: bytes) -> tuple[int, int]:
    """(script flags, length of the shebang line) of an EVAL script: Redis 7.0's
    evalExtractShebangFlags. No shebang: (EVAL_COMPAT, 0). MetadataError with Redis's text."""
    if not body.startswith(b"#!"):
        return EVAL_COMPAT, 0
    nl = body.find(b"\n")
    if nl < 0:
        raise MetadataError(errors.SHEBANG_INVALID)
    parts = splitargs(body[:nl])
    if not parts:
        raise MetadataError(errors.SHEBANG_ENGINE_INVALID)
    if parts[0] != b"#!lua":
        raise MetadataError(errors.shebang_engine(parts[0]))
    flags = 0
    for part in parts[1:]:
        if part.startswith(b"flags="):
            rest = part[6:]
            for f in (rest.split(b",") if rest else []):
                bit = FLAG_BITS.get(f.decode("latin-1"))
                if bit is None:
                    raise MetadataError(errors.shebang_flag(f))
                flags |= bit
        else:
            raise MetadataError(errors.shebang_option(part))
    return flags, nl


# -- libraries ------------------------------------------------------------------------------

@dataclass(eq=False)
class Function:
    name: bytes
    description: bytes | None
    flags: int
    callback: Any  # the Lua function
    library: "Library"

    @property
    def flag_names(self) -> list[bytes]:
        return flag_names(self.flags)


@dataclass(eq=False)
class Library:
    name: bytes
    code: bytes
    functions: dict[bytes, Function] = field(default_factory=dict)  # by name, registration order
    version: bytes = b""  # the record's (hlc, origin) bytes, for resolve's order


def flag_names(flags: int) -> list[bytes]:
    return [n.encode() for n in FLAG_NAMES if flags & FLAG_BITS[n]]


class Catalog:
    """The loaded libraries and the function names they own."""

    def __init__(self) -> None:
        self.libraries: dict[bytes, Library] = {}
        self.functions: dict[bytes, Function] = {}  # lower-case name -> function

    def function(self, name: bytes) -> Function | None:
        return self.functions.get(name.lower())

    def collision(self, lib: Library, replacing: set[bytes] = frozenset()) -> bytes | None:  # type: ignore[assignment]
        """The first function of ``lib`` whose name a loaded library (other than those in
        ``replacing``) owns, or None."""
        for fname in lib.functions:
            owner = self.functions.get(fname.lower())
            if owner is not None and owner.library.name not in replacing:
                return fname
        return None

    def add(self, lib: Library) -> None:
        self.libraries[lib.name] = lib
        for fname, f in lib.functions.items():
            self.functions.setdefault(fname.lower(), f)

    @property
    def function_count(self) -> int:
        return sum(len(lib.functions) for lib in self.libraries.values())


def resolve(libs: list[Library]) -> tuple[Catalog, list[Library]]:
    """The catalog the live libraries ``libs`` make (see the module docstring), and the
    libraries left out because an older one owns one of their function names."""
    cat = Catalog()
    left_out = []
    for lib in sorted(libs, key=lambda x: (x.version, x.name)):
        if cat.collision(lib) is not None:
            left_out.append(lib)
            continue
        cat.add(lib)
    return cat, left_out


# -- FUNCTION DUMP / RESTORE payload ----------------------------------------------------------

def dump(codes: list[bytes]) -> bytes:
    out = bytearray()
    for code in codes:
        out.append(RDB_OPCODE_FUNCTION2)
        out += rdb.encode_length(len(code)) + code
    return rdb.footer(bytes(out))


class PayloadError(ValueError):
    """A FUNCTION RESTORE payload that cannot be read (the message is Redis's)."""


def verify_payload(data: bytes) -> bool:
    """Redis's verifyDumpPayload: a footer with an RDB version we read and a matching CRC."""
    try:
        rdb.check_footer(data)
    except rdb.PayloadError:
        return False
    return True


def read_payload(data: bytes) -> list[bytes]:
    """The library codes of a verified FUNCTION DUMP payload, in payload order."""
    r = rdb.Reader(data[:-10])
    codes = []
    try:
        while r.pos < len(r.buf):
            t = r.byte()
            if t == RDB_OPCODE_FUNCTION2:
                codes.append(r.string())
            elif t == RDB_OPCODE_FUNCTION:  # name, engine, optional description, code
                r.string()
                r.string()
                if r.byte():
                    r.string()
                codes.append(r.string())
            else:
                raise PayloadError(errors.PAYLOAD_NOT_FUNCTION)
    except rdb.RdbError:
        raise PayloadError(errors.PAYLOAD_UNREADABLE) from None
    return codes


