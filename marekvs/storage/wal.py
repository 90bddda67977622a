"""Durability ``everysec``: a thread that fsyncs the write-ahead log once a second.

Like Redis's ``appendfsync``: ``always`` syncs the WAL with every batch (the engine's
write options), ``everysec`` syncs it from this thread once per second, ``no`` leaves it
to the OS. Every commit already wrote its batch to the WAL file (RocksDB flushes the WAL
buffer on each write), so a pass does what ``flush_wal(sync)`` does, without taking
RocksDB's WAL lock: ``os.fsync`` releases the GIL and commits on the event loop never
wait behind it. The thread touches no Python state of the engine.
"""

from __future__ import annotations

import logging
import os
import threading
import time

log = logging.getLogger("marekvs.storage")


class WalSyncer:
    def __init__(self, path: str):
        self.path = path
        self.thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._active = False

    def start(self) -> None:
        self._active = True
        if self.thread is None:
            self.thread = threading.Thread(target=self._run, name="wal-sync", daemon=True)
            self.thread.start()

    def pause(self) -> None:
        """Another durability mode: the thread stays, idle."""
        self._active = False

    def stop(self) -> None:
        self._stop.set()
        if self.thread is not None:
            self.thread.join(timeout=2)

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            if not self._active:
                continue
            try:
                self.fsync_wal_files()
            except Exception:  # the db may be closing
                log.exception("WAL sync failed")

    def fsync_wal_files(self) -> None:
        """fsync the WAL files written in the last seconds, and their directory."""
        cutoff = time.time() - 5
        for name in os.listdir(self.path):
            if not name.endswith(".log"):
                continue
            path = os.path.join(self.path, name)
            try:
                if os.stat(path).st_mtime < cutoff:
                    continue  # unchanged since an earlier pass synced it
                fd = os.open(path, os.O_RDONLY)
            except FileNotFoundError:
                continue  # obsoleted by a flush meanwhile
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fd = os.open(self.path, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
