"""Geo on sorted sets: a position is a member whose score is its 52-bit geohash.

The math is ``core/geohash.py`` (Redis 7.0's, to the last digit). This module runs a
search over one zset's order: the score ranges of the search area's cells, in Redis's
order, each scanned in score order, every candidate kept if it lies inside the shape;
with ``limit`` (COUNT ... ANY) the scan stops once that many are found.
"""

from __future__ import annotations

from typing import NamedTuple

from marekvs.core import geohash as G
from marekvs.keyspace import zsets as Z


class Point(NamedTuple):
    member: bytes
    score: float  # the stored geohash
    longitude: float
    latitude: float
    dist: float  # metres from the centre


def position(z: Z.Zsets, zs: Z.Zset, member: bytes, now: int) -> tuple[float, float] | None:
    """(longitude, latitude) of a member (``longLatFromMember``), None if absent."""
    s = Z.score(z, zs, member, now)
    return None if s is None else G.decode_score(s)


def search(z: Z.Zsets, zs: Z.Zset, shape: G.Shape, limit: int, now: int) -> list[Point]:
    """``membersOfAllNeighbors``: the members inside ``shape``, in scan order."""
    sl = Z.order_of(z, zs, now).sl
    out: list[Point] = []
    for lo, hi in G.search_ranges(shape):
        if out and limit and len(out) >= limit:
            break
        i = sl.bisect_left((float(lo), b""))
        j = sl.bisect_left((float(hi), b""))
        for s, m in sl.islice(i, j):
            xy = G.decode_score(s)
            if xy is not None:
                d = G.distance_in_shape(shape, xy[0], xy[1])
                if d is not None:
                    out.append(Point(m, s, xy[0], xy[1], d))
            if out and limit and len(out) >= limit:
                break
    return out
