"""CLIENT PAUSE: commands held until a pause ends, as Redis holds them.

``CLIENT PAUSE ms [WRITE|ALL]`` holds the commands of every client (but the replication
links, which are not clients) until ``ms`` passed or CLIENT UNPAUSE. With WRITE only the
commands that may write wait (Redis's ``may_replicate`` flag): write commands, PUBLISH,
PFCOUNT, an EXEC whose queue holds one, a script not flagged no-writes. As in Redis a second
pause extends the first to the later end, and ALL wins over WRITE.

The connection asks ``holds(ctx, args)`` before each command while a pause is on
(``on``); a held connection keeps the command and those behind it, in order, and gives
``hold`` the function that resumes it when the pause ends.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Callable

from marekvs.commands.context import Context

SCRIPT_RUNNERS = frozenset(("eval", "evalsha", "fcall"))  # their script's flags decide if they write


class ClientPause:
    def __init__(self, node: Any):
        self.node = node
        self.end = 0.0  # monotonic seconds; 0: no pause
        self.writes_only = True
        self._held: list[Callable[[], None]] = []
        self._timer: asyncio.TimerHandle | None = None

    @property
    def on(self) -> bool:
        return self.end != 0.0

    def pause(self, seconds: float, writes_only: bool) -> None:
        end = time.monotonic() + seconds
        self.writes_only = writes_only and (not self.end or self.writes_only)
        if end > self.end:
            self.end = end
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self.node.loop.call_later(seconds, self._over)

    def _over(self) -> None:
        if self.end and time.monotonic() >= self.end - 0.001:
            self.unpause()

    def unpause(self) -> None:
        self.end = 0.0
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        held, self._held = self._held, []
        for resume in held:
            resume()

    def holds(self, ctx: Context, args: list[bytes]) -> bool:
        """Must this command wait for the pause to end? (Asked only while one is on.)"""
        if time.monotonic() >= self.end:
            self.unpause()
            return False
        if not self.writes_only:
            return True
        node = self.node
        cmd = node.table.lookup(args[0])
        if cmd is None:
            return False
        if cmd.subcommands and len(args) > 1:
            cmd = cmd.subcommands.get(args[1].lower().decode("latin-1"), cmd)
        return bool(node.may_write(ctx, cmd, args, cmd.may_replicate))

    def hold(self, resume: Callable[[], None]) -> None:
        """Call ``resume()`` when the pause ends."""
        self._held.append(resume)
