"""The process's open-files limit, as Redis adjusts it for ``maxclients``.

RocksDB's files (every SST stays open) share the limit with the clients, so at start the
soft limit goes up to the hard one (``raise_soft``); ``fit`` then says how many clients the
limit allows, raising it first as Redis's ``adjustOpenFilesLimit`` does.
"""

from __future__ import annotations

import logging
import resource

log = logging.getLogger("marekvs.node")

RESERVED_FDS = 32  # Redis's CONFIG_MIN_RESERVED_FDS: descriptors kept for everything but clients


def fit(maxclients: int) -> int:
    """Raise the open-files limit for ``maxclients`` clients as Redis's
    ``adjustOpenFilesLimit`` does, and return how many clients the limit allows:
    ``maxclients`` itself, or the limit less ``RESERVED_FDS`` when it cannot be raised
    that far (logged, as Redis logs it).

    Redis computes the descriptors needed as a 32-bit unsigned sum (so ``maxclients
    4294967295`` needs 31) and, when the soft limit is lower, sets soft and hard limit
    to the first value that works, stepping down by 16 from the need: the largest
    ``need - 16k`` at or under what the process may set (``fs.nr_open`` with the
    privilege, else the hard limit). That value is computed here, not searched."""
    need = (maxclients + RESERVED_FDS) & 0xFFFFFFFF
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY or soft >= need:
        return maxclients
    best = soft
    for ceiling in (need, _nr_open(), hard):
        if ceiling == resource.RLIM_INFINITY or ceiling >= need:
            step = need
        else:
            step = need - -(-(need - ceiling) // 16) * 16
        if step <= soft:
            continue
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (step, step))
        except (ValueError, OSError):
            continue
        best = step
        break
    if best >= need:
        log.info("Increased maximum number of open files to %d (it was originally set to %d).", best, soft)
        return maxclients
    log.warning("You requested maxclients of %d requiring at least %d max file descriptors. "
                "Current maximum open files is %d. maxclients has been reduced to %d to "
                "compensate for low ulimit. If you need higher maxclients increase 'ulimit -n'.",
                maxclients, need, best, best - RESERVED_FDS)
    return max(1, best - RESERVED_FDS)


def raise_soft() -> None:
    """At start: the soft open-files limit up to the hard one; the client count itself
    stays bounded by maxclients."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and (hard == resource.RLIM_INFINITY or soft < hard):
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        except (ValueError, OSError):
            pass


def _nr_open() -> int:
    try:
        with open("/proc/sys/fs/nr_open") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 1 << 20
