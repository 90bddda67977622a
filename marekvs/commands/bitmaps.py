"""Bitmap commands (Redis 7.0 ``bitops.c``): SETBIT, GETBIT, BITCOUNT, BITPOS, BITOP,
BITFIELD and BITFIELD_RO, on string keys.

Handlers parse in Redis's order (so the same bad argument gets the same error first:
BITCOUNT and BITPOS look the key up before they parse their range, BITFIELD parses every
operation before it looks the key up) and call ``keyspace/bitmaps.py``, which holds the bit
arithmetic and writes the whole string back (an LWW write of the string register: see that
module for how concurrent bit writes on two nodes resolve). Offsets are limited as in Redis:
``offset >> 3`` must stay below ``proto-max-bulk-len`` (512 MB by default).

A HyperLogLog is a collection here, not a string, so the bit commands answer WRONGTYPE on
one (docs/divergences.md).

Keyspace events and hit/miss counts as Redis 7.0: ``setbit`` when SETBIT created the string,
grew it or flipped the bit, and when a BITFIELD write ran and changed its field (any that ran,
if the string grew); ``set`` on BITOP's destination, ``del`` when an empty result deleted it.
The reads (GETBIT, BITCOUNT, BITPOS, BITFIELD without a write, BITFIELD_RO, BITOP's sources)
count a keyspace hit or miss (``strings.read``), the writes do not.
"""

from __future__ import annotations

from marekvs.commands import args as A
from marekvs.commands import errors
from marekvs.commands.errors import CommandError, c_str
from marekvs.commands.table import command
from marekvs.keyspace import bitmaps as kbit

_GROUP = "bitmap"
_BITOPS = {b"and": kbit.AND, b"or": kbit.OR, b"xor": kbit.XOR, b"not": kbit.NOT}
_OVERFLOWS = {b"wrap": kbit.WRAP, b"sat": kbit.SAT, b"fail": kbit.FAIL}
_FIELD_OPS = {b"get": (kbit.GET, 2), b"set": (kbit.SET, 3), b"incrby": (kbit.INCRBY, 3)}
_FIELD_SYNTAX = "key [GET encoding offset | [OVERFLOW WRAP | SAT | FAIL] SET encoding offset value | INCRBY encoding offset increment ...]"  # noqa: E501


# =========================================================================================
# Argument parsing (Redis's getBitOffsetFromArgument, getBitfieldTypeFromArgument)
# =========================================================================================

def bit_offset(ctx, arg: bytes, hash_form: bool = False, bits: int = 0) -> int:
    """A bit offset: an integer (``#N`` = N * bits for BITFIELD), >= 0 and with
    ``offset >> 3`` below proto-max-bulk-len."""
    usehash = hash_form and bits > 0 and arg[:1] == b"#"
    v = A.parse_ll(arg[1:] if usehash else arg)
    if v is None:
        raise CommandError(errors.BIT_OFFSET)
    if usehash:
        v *= bits
        v = ((v + (1 << 63)) & ((1 << 64) - 1)) - (1 << 63)  # C's long long product wraps
    if v < 0 or (v >> 3) >= A.proto_max_bulk_len(ctx):
        raise CommandError(errors.BIT_OFFSET)
    return v


def field_type(arg: bytes) -> tuple[bool, int]:
    """(signed, bits) of ``i1``..``i64`` / ``u1``..``u63``."""
    kind = arg[:1]
    if kind not in (b"i", b"u"):
        raise CommandError(errors.BITFIELD_TYPE)
    signed = kind == b"i"
    bits = A.parse_ll(c_str(arg[1:]))
    if bits is None or bits < 1 or bits > (64 if signed else 63):
        raise CommandError(errors.BITFIELD_TYPE)
    return signed, bits


def _range_mode(arg: bytes) -> bool:
    """True for BIT, False for BYTE (any case), else a syntax error."""
    word = c_str(arg).lower()
    if word == b"bit":
        return True
    if word == b"byte":
        return False
    raise CommandError(errors.SYNTAX)


def _clamp(start: int, end: int, totlen: int) -> tuple[int, int]:
    """Redis's negative-index conversion of a range over ``totlen`` units."""
    if start < 0:
        start += totlen
    if end < 0:
        end += totlen
    start = max(start, 0)
    end = max(end, 0)
    if end >= totlen:
        end = totlen - 1
    return start, end


# =========================================================================================
# Commands
# =========================================================================================

@command("setbit", 4, "write denyoom", specs="RW ACCESS UPDATE index 1 range 0", group=_GROUP,
         acl="write bitmap slow", summary="Sets or clears the bit at offset in the string value stored at key",
         since="2.2.0", complexity="O(1)", syntax="key offset value")
def setbit(ctx, args: list[bytes]):
    offset = bit_offset(ctx, args[2])
    on = A.parse_ll(args[3])
    if on is None or on & ~1:
        raise CommandError(errors.BIT_VALUE)
    was, changed = kbit.setbit(ctx.ks, args[1], offset, on, ctx.ks.now())
    if changed:
        ctx.fire("$", b"setbit", args[1])
    return was


@command("getbit", 3, "readonly fast", specs="RO ACCESS index 1 range 0", group=_GROUP,
         acl="read bitmap fast", summary="Returns the bit value at offset in the string value stored at key",
         since="2.2.0", complexity="O(1)", syntax="key offset")
def getbit(ctx, args: list[bytes]):
    offset = bit_offset(ctx, args[2])
    value = kbit.read(ctx.ks, args[1], ctx.ks.now())
    return 0 if value is None else kbit.get_bit(value, offset)


@command("bitcount", -2, "readonly", specs="RO ACCESS index 1 range 0", group=_GROUP,
         acl="read bitmap slow", summary="Count set bits in a string", since="2.6.0", complexity="O(N)",
         syntax="key [start end [BYTE | BIT]]")
def bitcount(ctx, args: list[bytes]):
    value = kbit.read(ctx.ks, args[1], ctx.ks.now())
    if value is None:
        return 0
    n = len(args)
    if n == 2:
        return kbit.count_bits(value, 0, len(value) * 8 - 1)
    if n not in (4, 5):
        raise CommandError(errors.SYNTAX)
    start, end = A.int_arg(args[2]), A.int_arg(args[3])
    if start < 0 and end < 0 and start > end:
        return 0
    isbit = _range_mode(args[4]) if n == 5 else False
    start, end = _clamp(start, end, len(value) * (8 if isbit else 1))
    if start > end:
        return 0
    if isbit:
        return kbit.count_bits(value, start, end)
    return kbit.count_bits(value, start * 8, end * 8 + 7)


@command("bitpos", -3, "readonly", specs="RO ACCESS index 1 range 0", group=_GROUP,
         acl="read bitmap slow", summary="Find first bit set or clear in a string", since="2.8.7",
         complexity="O(N)", syntax="key bit [start [end [BYTE | BIT]]]")
def bitpos(ctx, args: list[bytes]):
    bit = A.int_arg(args[2])
    if bit not in (0, 1):
        raise CommandError(errors.BITPOS_BIT)
    value = kbit.read(ctx.ks, args[1], ctx.ks.now())
    if value is None:
        return -1 if bit else 0
    n = len(args)
    end_given = isbit = False
    if n == 3:
        start, end = 0, len(value) - 1
    elif n in (4, 5, 6):
        start = A.int_arg(args[3])
        if n == 6:
            isbit = _range_mode(args[5])
        totlen = len(value) * (8 if isbit else 1)
        if n >= 5:
            end = A.int_arg(args[4])
            end_given = True
        else:
            end = totlen - 1
        start, end = _clamp(start, end, totlen)
    else:
        raise CommandError(errors.SYNTAX)
    if start > end:
        return -1
    first, last = (start, end) if isbit else (start * 8, end * 8 + 7)
    pos = kbit.find_bit(value, bit, first, last)
    if pos < 0 and not bit and not end_given:
        return last + 1  # past the range: the string reads as zero padded
    return pos


@command("bitop", -4, "write denyoom", specs=("OW UPDATE index 2 range 0", "RO ACCESS index 3 range -1"),
         group=_GROUP, acl="write bitmap slow", summary="Perform bitwise operations between strings",
         since="2.6.0", complexity="O(N)", syntax="operation destkey key [key ...]")
def bitop(ctx, args: list[bytes]):
    op = bitop_of(args)
    n, deleted = kbit.bitop_store(ctx.ks, op, args[2], args[3:], ctx.ks.now())
    return bitop_stored(ctx, args[2], n, deleted)


def bitop_of(args: list[bytes]) -> int:
    """BITOP's operation (its errors come before any key is read)."""
    op = _BITOPS.get(c_str(args[1]).lower())
    if op is None:
        raise CommandError(errors.SYNTAX)
    if op == kbit.NOT and len(args) != 4:
        raise CommandError(errors.BITOP_NOT_ONE_KEY)
    return op


def bitop_stored(ctx, dest: bytes, n: int, deleted: bool) -> int:
    """BITOP's events once its result (``n`` bytes long) is stored at ``dest`` (or an empty
    one ``deleted`` it), and its reply."""
    if n:
        ctx.fire("$", b"set", dest)
    elif deleted:
        ctx.fire("g", b"del", dest)
    return n


def _bitfield(ctx, args: list[bytes], readonly_command: bool):
    ops: list[kbit.FieldOp] = []
    owtype = kbit.WRAP
    writes = False
    argc = len(args)
    j = 2
    while j < argc:
        remargs = argc - j - 1
        sub = c_str(args[j]).lower()
        if sub == b"overflow" and remargs >= 1:
            owtype = _OVERFLOWS.get(c_str(args[j + 1]).lower(), -1)
            if owtype < 0:
                raise CommandError(errors.BITFIELD_OVERFLOW)
            j += 2
            continue
        found = _FIELD_OPS.get(sub)
        if found is None or remargs < found[1]:
            raise CommandError(errors.SYNTAX)
        opcode = found[0]
        signed, bits = field_type(args[j + 1])
        offset = bit_offset(ctx, args[j + 2], True, bits)
        value = 0
        if opcode != kbit.GET:
            writes = True
            value = A.int_arg(args[j + 3])
        ops.append(kbit.FieldOp(opcode, signed, bits, offset, value, owtype))
        j += 1 + found[1]
    now = ctx.ks.now()
    if not writes:
        current = kbit.read(ctx.ks, args[1], now)
        return kbit.run_fields(bytearray(current or b""), ops)[0]
    if readonly_command:
        raise CommandError(errors.BITFIELD_RO_GET)
    out, changes = kbit.bitfield(ctx.ks, args[1], ops, now)
    if changes:
        ctx.fire("$", b"setbit", args[1])
    return out


@command("bitfield", -2, "write denyoom", getkeys="bitfield", group=_GROUP, acl="write bitmap slow",
         specs="RW ACCESS UPDATE VARIABLE_FLAGS index 1 range 0 (This command allows both access and "
               "modification of the key)",
         summary="Perform arbitrary bitfield integer operations on strings", since="3.2.0",
         complexity="O(1) for each subcommand specified", syntax=_FIELD_SYNTAX)
def bitfield(ctx, args: list[bytes]):
    return _bitfield(ctx, args, readonly_command=False)


@command("bitfield_ro", -2, "readonly fast", specs="RO ACCESS index 1 range 0", group=_GROUP,
         acl="read bitmap fast",
         summary="Perform arbitrary bitfield integer operations on strings. Read-only variant of BITFIELD",
         since="6.0.0", complexity="O(1) for each subcommand specified",
         syntax="key [GET encoding offset [GET encoding offset ...]]")
def bitfield_ro(ctx, args: list[bytes]):
    return _bitfield(ctx, args, readonly_command=True)
