"""Commands that visit the whole keyspace without stopping the node.

DBSIZE, KEYS and DEBUG DIGEST read every record. Redis answers DBSIZE in O(1) and
blocks everything for the others; here all three are O(N) (there is no key count kept
beside the records: see docs/divergences.md), and a pass over a million keys takes about
a second of the event loop. Run in one go, that second would stall every other client
(and the replication links) of the node.

So such a command is written as a generator, ``work``, that does one step (whole
partitions, about ``Keyspace.STEP_RECORDS`` key records) and yields, and returns the
reply at the end. ``in_steps(work)`` runs up to ``FIRST_STEPS`` steps at once: a keyspace
that small (about 4,000 records) is answered at once, exactly as before. Otherwise the
command becomes blocking (``resp.Blocking``, as WAIT): the client's later commands wait
behind it in order, and the rest runs as many steps as fit in ``TURN_SECONDS`` per
event-loop turn, so other clients are served between turns. Measured on a million keys:
DBSIZE 0.75 s, KEYS 1.5 s, DEBUG DIGEST 1.55 s, while another client's PINGs took 5-7 ms
(p50; max 11 ms) instead of waiting for the whole pass.

What a long pass sees: the iterator is opened once, on a RocksDB snapshot taken when the
command starts (after the pending batch is committed), so DBSIZE, KEYS and DEBUG DIGEST
answer for the dataset as it was at that moment, however long they run. FLUSHDB and
FLUSHALL do not run in steps: they stay one atomic batch (a crash never leaves half a
flush), blocking the node for their duration as Redis's FLUSHALL SYNC does.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any, Generator

from marekvs.commands import reply

FIRST_STEPS = 4
TURN_SECONDS = 0.002

Work = Generator[None, None, Any]


def in_steps(ctx: Any, work: Work) -> Any:
    """The reply of ``work`` if it ends within ``FIRST_STEPS`` steps (or at once, for a
    context that must not block: MULTI/EXEC, scripts), else a Blocking reply that
    finishes it over the next event-loop turns."""
    try:
        if ctx.deny_blocking:
            while True:
                next(work)
        for _ in range(FIRST_STEPS):
            next(work)
    except StopIteration as done:
        return done.value
    return reply.Blocking(_rest(work))


async def _rest(work: Work) -> Any:
    clock = time.perf_counter
    try:
        while True:
            await asyncio.sleep(0)  # one loop turn: other clients run
            end = clock() + TURN_SECONDS
            next(work)
            while clock() < end:
                next(work)
    except StopIteration as done:
        return done.value
    finally:
        work.close()  # (cancelled at shutdown: release the iterator at once)
