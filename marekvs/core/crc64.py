"""CRC-64/Jones, the checksum of Redis's RDB files and DUMP payloads (Redis's ``crc64.c``).

Parameters (reveng's catalogue calls it CRC-64/REDIS): width 64, polynomial
``0xad93d23594c935a9``, reflected input and output, initial value 0, no final xor; the
check value of ``b"123456789"`` is ``0xe9c6d914c4b8d9ca`` (Redis's own self-test).

Pure Python, table driven and "sliced by 8": eight tables let one step fold eight input
bytes, read as one little-endian u64, instead of eight byte steps. ``crc64(crc, data)``
continues a running checksum as Redis's ``crc64(crc, s, l)`` does.
"""

from __future__ import annotations

POLY = 0xAD93D23594C935A9
_REFLECTED = int(f"{POLY:064b}"[::-1], 2)  # 0x95ac9329ac4bc9b5
_MASK = (1 << 64) - 1


def _tables() -> tuple[list[int], ...]:
    t0 = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ _REFLECTED if c & 1 else c >> 1
        t0.append(c)
    tables = [t0]
    for _ in range(7):
        prev = tables[-1]
        tables.append([(c >> 8) ^ t0[c & 0xFF] for c in prev])
    return tuple(tables)


_T0, _T1, _T2, _T3, _T4, _T5, _T6, _T7 = _tables()


def crc64(crc: int, data: bytes | bytearray | memoryview) -> int:
    """The CRC-64/Jones of ``data`` continuing from ``crc`` (0 to start)."""
    mv = memoryview(data).cast("B")
    n = len(mv)
    whole = n - n % 8
    t0, t1, t2, t3, t4, t5, t6, t7 = _T0, _T1, _T2, _T3, _T4, _T5, _T6, _T7
    if whole:
        for w in mv[:whole].cast("Q"):  # (x86-64 and ARM64 Linux are little-endian)
            x = crc ^ w
            crc = (t7[x & 0xFF] ^ t6[(x >> 8) & 0xFF] ^ t5[(x >> 16) & 0xFF] ^ t4[(x >> 24) & 0xFF]
                   ^ t3[(x >> 32) & 0xFF] ^ t2[(x >> 40) & 0xFF] ^ t1[(x >> 48) & 0xFF] ^ t0[x >> 56])
    for b in mv[whole:]:
        crc = t0[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc & _MASK
