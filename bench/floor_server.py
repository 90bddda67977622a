"""The floor: the leanest server that can answer redis-benchmark's SET, GET, INCR and MSET
on this stack (uvloop, hiredis, rocksdict). A measuring instrument, not a product: it
bounds what any design built on these parts can reach on a given machine, so that
marekvs's figures in ``bench_single.py`` read against what is attainable at all.

``--model bare``: parse with hiredis, keep values in a dict in front of RocksDB, write
one WriteBatch per event-loop tick (group commit), reply; a 19-byte envelope is
prepended to each value and INCR keeps a plain decimal. No validation at all.

``--model data``: ``bare`` plus the work the data model requires of every write
(``../shared/seeds/004``, through ``marekvs.core``): the partition id and internal key,
an HLC stamp, a read of the current record and a merge with it, the changed keys in a
replication-log entry written in the same batch, and INCR as a PN-counter record.
It still has none of a server's other work: no command table, arity or auth checks, no
strict RESP fallback, no TTL, no WRONGTYPE, no statistics; any other command gets
ERR unknown command.

Run it through the benchmark, which starts it in place of ``marekvs serve``:
``.venv/bin/python bench/bench_single.py --floor data`` (or ``--floor bare``).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import struct
import sys

import hiredis
import msgpack
import uvloop
from rocksdict import Options, Rdict, WriteBatch, WriteOptions

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from marekvs.core import envelope as env  # noqa: E402
from marekvs.core import merge as _merge  # noqa: E402
from marekvs.core import pncounter  # noqa: E402
from marekvs.core.hlc import HLC  # noqa: E402
from marekvs.core.partition import partition_of  # noqa: E402

NODE = 1
_U16 = struct.Struct(">H").pack
_U64 = struct.Struct(">Q").pack
_STRING = env.make_flags(env.RecordType.STRING)


class Store:
    """Records in a dict in front of RocksDB; one WriteBatch per tick."""

    def __init__(self, path: str, model: str):
        shutil.rmtree(path, ignore_errors=True)
        opts = Options(raw_mode=True)
        opts.create_if_missing(True)
        opts.set_write_buffer_size(8 << 20)  # as marekvs's data column family
        self.db = Rdict(path, opts)
        self.wopts = WriteOptions()
        self.cache: dict[bytes, bytes] = {}
        self.pending: dict[bytes, bytes] = {}
        self.log: list[bytes] = []
        self.seq = 0
        self.data_model = model == "data"
        self.hlc = HLC()

    def read(self, k: bytes) -> bytes | None:
        v = self.cache.get(k)
        return self.db.get(k) if v is None else v

    def write(self, k: bytes, rec: bytes) -> None:
        if self.data_model:  # read, merge, log the change
            cur = self.read(k)
            rec = _merge.merge(k, cur, rec)
            if rec is cur:
                return
            self.log.append(k)
        self.cache[k] = rec
        self.pending[k] = rec

    def commit(self) -> None:
        if not self.pending:
            return
        wb = WriteBatch(raw_mode=True)
        for k, v in self.pending.items():
            wb.put(k, v)
        if self.log:
            self.seq += 1
            wb.put(b"\xff" + _U64(self.seq), msgpack.packb(self.log))
            self.log = []
        self.db.write(wb, self.wopts)
        self.pending = {}

    def key(self, user_key: bytes) -> bytes:
        return _U16(partition_of(user_key)) + b"s" + user_key if self.data_model else user_key

    def stamp(self) -> int:
        return self.hlc.now() if self.data_model else 0

    # -- the four commands ---------------------------------------------------------
    def set(self, k: bytes, v: bytes) -> None:
        self.write(self.key(k), env.pack(_STRING, self.stamp(), NODE, 0, v))

    def get(self, k: bytes) -> bytes | None:
        rec = self.read(self.key(k))
        return None if rec is None else rec[env.ENVELOPE_SIZE:]

    def incr(self, k: bytes) -> int:
        ik = self.key(k)
        cur = self.read(ik)
        if not self.data_model:
            n = int(cur[env.ENVELOPE_SIZE:]) + 1 if cur is not None else 1
            self.write(ik, env.pack(_STRING, 0, NODE, 0, b"%d" % n))
            return n
        bumped = pncounter.bump(cur, NODE, 1) if cur is not None and cur[0] == pncounter.FLAGS else None
        payload, n = bumped if bumped is not None else (pncounter.fresh(0, 0, 0, NODE, 1), 1)
        self.write(ik, env.pack(pncounter.FLAGS, self.stamp(), NODE, 0, payload))
        return n


class Conn(asyncio.Protocol):
    def __init__(self, srv: "FloorServer"):
        self.srv = srv
        self.reader = hiredis.Reader()
        self.out: list[bytes] = []
        self.queued = False

    def connection_made(self, transport) -> None:  # type: ignore[override]
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        st, out = self.srv.store, self.out
        self.reader.feed(data)
        while (a := self.reader.gets()) is not False:
            name = a[0].lower()
            if name == b"set":
                st.set(a[1], a[2])
                out.append(b"+OK\r\n")
            elif name == b"get":
                v = st.get(a[1])
                out.append(b"$-1\r\n" if v is None else b"$%d\r\n%s\r\n" % (len(v), v))
            elif name == b"incr":
                out.append(b":%d\r\n" % st.incr(a[1]))
            elif name == b"mset":
                for i in range(1, len(a) - 1, 2):
                    st.set(a[i], a[i + 1])
                out.append(b"+OK\r\n")
            elif name == b"ping":
                out.append(b"+PONG\r\n")
            else:  # (redis-benchmark's CONFIG GET and redis-py's CLIENT SETINFO take this)
                out.append(b"-ERR unknown command '%s'\r\n" % a[0][:64])
        self.srv.dirty(self)


class FloorServer:
    def __init__(self, store: Store):
        self.store = store
        self.waiting: list[Conn] = []
        self.scheduled = False

    def dirty(self, c: Conn) -> None:
        if c.out and not c.queued:
            c.queued = True
            self.waiting.append(c)
            if not self.scheduled:
                self.scheduled = True
                asyncio.get_running_loop().call_soon(self.flush)

    def flush(self) -> None:
        """Group commit: one WriteBatch for the tick, then every reply of the tick."""
        self.scheduled = False
        self.store.commit()
        for c in self.waiting:
            c.transport.write(b"".join(c.out))
            c.out = []
            c.queued = False
        self.waiting = []


async def serve(port: int, store: Store) -> None:
    srv = FloorServer(store)
    await asyncio.get_running_loop().create_server(lambda: Conn(srv), "127.0.0.1", port)
    await asyncio.Future()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--data-dir", required=True, help="RocksDB directory (wiped at start)")
    p.add_argument("--model", choices=("bare", "data"), default="data")
    a = p.parse_args()
    uvloop.run(serve(a.port, Store(a.data_dir, a.model)))


if __name__ == "__main__":
    main()
