"""Geohash math of Redis's GEO commands, ported from Redis 7.0 (``geohash.c``,
``geohash_helper.c`` and the pure parts of ``geo.c``) so that scores, distances and
search areas match Redis's to the last digit it prints.

A position is stored as a sorted-set score: a 52-bit interleaved geohash (26 steps of
longitude and latitude, latitude in the even bits, longitude in the odd bits) over
Redis's Web Mercator limits, longitude -180..180 and latitude -85.05112878..85.05112878,
as an exact double. GEOHASH re-encodes the decoded position over the standard latitude
range -90..90 and prints 11 base-32 characters (the last one always '0').

Searches (GEOSEARCH, GEORADIUS) follow ``geohashCalculateAreasByShapeWGS84``: estimate a
step from the radius (or half the box diagonal), take the cell of the centre and its 8
neighbours at that step (one step coarser when a neighbour does not reach the edge of
the shape's bounding box), drop the neighbours that are wholly useless, and scan each
remaining cell as a score range ``[cell << (52 - 2*step), (cell + 1) << ...)``. A
candidate is kept if its haversine distance (Redis's Earth radius 6372797.560856 m) is
within the radius, or within half the box's width and height along the parallel and the
meridian. C's unsigned 64-bit and 32-bit truncations are reproduced explicitly.

Everything here is pure; the order in which results come out (cells in Redis's order,
scores ascending within a cell) is the caller's to keep.
"""

from __future__ import annotations

import math
from typing import NamedTuple

GEO_STEP_MAX = 26  # 26 * 2 = 52 bits
GEO_LAT_MIN = -85.05112878
GEO_LAT_MAX = 85.05112878
GEO_LONG_MIN = -180.0
GEO_LONG_MAX = 180.0

D_R = math.pi / 180.0
DEG_TO_RAD = 0.017453292519943295769236907684886
EARTH_RADIUS_IN_METERS = 6372797.560856
MERCATOR_MAX = 20037726.37

ALPHABET = b"0123456789bcdefghjkmnpqrstuvwxyz"
_U64 = (1 << 64) - 1
_U32 = (1 << 32) - 1


class Bits(NamedTuple):
    bits: int
    step: int


ZERO = Bits(0, 0)


class Range(NamedTuple):
    min: float
    max: float


class Area(NamedTuple):
    hash: Bits
    longitude: Range
    latitude: Range


LONG_RANGE = Range(GEO_LONG_MIN, GEO_LONG_MAX)
LAT_RANGE = Range(GEO_LAT_MIN, GEO_LAT_MAX)
STANDARD_LAT_RANGE = Range(-90.0, 90.0)


# -- bit interleaving (geohash.c) -------------------------------------------------------------

_B = (0x5555555555555555, 0x3333333333333333, 0x0F0F0F0F0F0F0F0F,
      0x00FF00FF00FF00FF, 0x0000FFFF0000FFFF)
_S = (1, 2, 4, 8, 16)


def _spread(v: int) -> int:
    v &= _U32
    v = (v | (v << _S[4])) & _B[4]
    v = (v | (v << _S[3])) & _B[3]
    v = (v | (v << _S[2])) & _B[2]
    v = (v | (v << _S[1])) & _B[1]
    v = (v | (v << _S[0])) & _B[0]
    return v


def interleave64(xlo: int, ylo: int) -> int:
    """x (latitude) in the even bits, y (longitude) in the odd bits."""
    return _spread(xlo) | (_spread(ylo) << 1)


def _squeeze(v: int) -> int:
    v &= _B[0]
    v = (v | (v >> _S[0])) & _B[1]
    v = (v | (v >> _S[1])) & _B[2]
    v = (v | (v >> _S[2])) & _B[3]
    v = (v | (v >> _S[3])) & _B[4]
    v = (v | (v >> _S[4])) & 0x00000000FFFFFFFF
    return v


def deinterleave64(interleaved: int) -> int:
    """``[longitude bits << 32 | latitude bits]``."""
    return _squeeze(interleaved) | (_squeeze(interleaved >> 1) << 32)


def _c_uint32(x: float) -> int:
    """A double converted to uint32_t as the C call does (truncation; the values here
    are never negative or beyond 2**32)."""
    return int(x) & _U32


def encode(long_range: Range, lat_range: Range, longitude: float, latitude: float,
           step: int) -> Bits | None:
    """``geohashEncode``: None where Redis returns 0 (out of the supported limits or of
    the given ranges)."""
    if step > 32 or step == 0:
        return None
    if (longitude > GEO_LONG_MAX or longitude < GEO_LONG_MIN
            or latitude > GEO_LAT_MAX or latitude < GEO_LAT_MIN):
        return None
    if (latitude < lat_range.min or latitude > lat_range.max
            or longitude < long_range.min or longitude > long_range.max):
        return None
    lat_offset = (latitude - lat_range.min) / (lat_range.max - lat_range.min)
    long_offset = (longitude - long_range.min) / (long_range.max - long_range.min)
    lat_offset *= float(1 << step)
    long_offset *= float(1 << step)
    return Bits(interleave64(_c_uint32(lat_offset), _c_uint32(long_offset)) & _U64, step)


def encode_wgs84(longitude: float, latitude: float, step: int = GEO_STEP_MAX) -> Bits | None:
    return encode(LONG_RANGE, LAT_RANGE, longitude, latitude, step)


def decode(long_range: Range, lat_range: Range, h: Bits) -> Area | None:
    """``geohashDecode``: the cell of ``h`` (None for the zero hash)."""
    if h.bits == 0 and h.step == 0:
        return None
    step = h.step
    sep = deinterleave64(h.bits)
    lat_scale = lat_range.max - lat_range.min
    long_scale = long_range.max - long_range.min
    ilato = sep & _U32
    ilono = (sep >> 32) & _U32
    div = float(1 << step)
    return Area(h,
                Range(long_range.min + (ilono * 1.0 / div) * long_scale,
                      long_range.min + (((ilono + 1) & _U32) * 1.0 / div) * long_scale),
                Range(lat_range.min + (ilato * 1.0 / div) * lat_scale,
                      lat_range.min + (((ilato + 1) & _U32) * 1.0 / div) * lat_scale))


def area_center(area: Area) -> tuple[float, float]:
    """``geohashDecodeAreaToLongLat``: the centre of a cell, clamped to the limits."""
    x = (area.longitude.min + area.longitude.max) / 2
    x = min(max(x, GEO_LONG_MIN), GEO_LONG_MAX)
    y = (area.latitude.min + area.latitude.max) / 2
    y = min(max(y, GEO_LAT_MIN), GEO_LAT_MAX)
    return x, y


def c_double_to_u64(x: float) -> int:
    """``(uint64_t) x`` as gcc compiles it for x86-64 (cvttsd2si, with 2**63 subtracted
    first at and above 2**63; an out-of-range conversion gives 0x8000000000000000): what
    Redis decodes a score that is not a geohash (a negative or huge one) as."""
    indefinite = 1 << 63
    if x != x:
        return indefinite
    if x < 2.0**63:
        return (int(x) & _U64) if -(2.0**63) <= x else indefinite
    y = x - 2.0**63
    v = int(y) if y < 2.0**63 else indefinite
    return (v ^ indefinite) & _U64


def decode_score(score: float) -> tuple[float, float] | None:
    """``decodeGeohash``: the (longitude, latitude) a 52-bit score stands for."""
    area = decode(LONG_RANGE, LAT_RANGE, Bits(c_double_to_u64(score), GEO_STEP_MAX))
    return None if area is None else area_center(area)


def score_of(longitude: float, latitude: float) -> float:
    """The 52-bit score GEOADD stores (``geohashAlign52Bits`` of a step-26 hash)."""
    h = encode_wgs84(longitude, latitude, GEO_STEP_MAX)
    assert h is not None, "callers validate the position first"
    return float(align52(h))


def align52(h: Bits) -> int:
    return (h.bits << (52 - h.step * 2)) & _U64


def geohash_string(score: float) -> bytes | None:
    """GEOHASH's 11 characters for a stored score (None if it does not decode)."""
    xy = decode_score(score)
    if xy is None:
        return None
    h = encode(LONG_RANGE, STANDARD_LAT_RANGE, xy[0], xy[1], GEO_STEP_MAX)
    bits = 0 if h is None else h.bits
    out = bytearray()
    for i in range(11):
        idx = 0 if i == 10 else (bits >> (52 - (i + 1) * 5)) & 0x1F
        out.append(ALPHABET[idx])
    return bytes(out)


# -- neighbours (geohash.c) ---------------------------------------------------------------------

def _move_x(h: Bits, d: int) -> Bits:
    if d == 0:
        return h
    x = h.bits & 0xAAAAAAAAAAAAAAAA
    y = h.bits & 0x5555555555555555
    zz = 0x5555555555555555 >> (64 - h.step * 2)
    if d > 0:
        x = (x + (zz + 1)) & _U64
    else:
        x = x | zz
        x = (x - (zz + 1)) & _U64
    x &= 0xAAAAAAAAAAAAAAAA >> (64 - h.step * 2)
    return Bits(x | y, h.step)


def _move_y(h: Bits, d: int) -> Bits:
    if d == 0:
        return h
    x = h.bits & 0xAAAAAAAAAAAAAAAA
    y = h.bits & 0x5555555555555555
    zz = 0xAAAAAAAAAAAAAAAA >> (64 - h.step * 2)
    if d > 0:
        y = (y + (zz + 1)) & _U64
    else:
        y = y | zz
        y = (y - (zz + 1)) & _U64
    y &= 0x5555555555555555 >> (64 - h.step * 2)
    return Bits(x | y, h.step)


class Neighbors(NamedTuple):
    north: Bits
    east: Bits
    west: Bits
    south: Bits
    north_east: Bits
    south_east: Bits
    north_west: Bits
    south_west: Bits


def neighbors(h: Bits) -> Neighbors:
    return Neighbors(
        north=_move_y(_move_x(h, 0), 1),
        east=_move_y(_move_x(h, 1), 0),
        west=_move_y(_move_x(h, -1), 0),
        south=_move_y(_move_x(h, 0), -1),
        north_east=_move_y(_move_x(h, 1), 1),
        south_east=_move_y(_move_x(h, 1), -1),
        north_west=_move_y(_move_x(h, -1), 1),
        south_west=_move_y(_move_x(h, -1), -1),
    )


# -- distances (geohash_helper.c) ---------------------------------------------------------------

def _deg_rad(ang: float) -> float:
    return ang * D_R


def _rad_deg(ang: float) -> float:
    return ang / D_R


def distance(lon1d: float, lat1d: float, lon2d: float, lat2d: float) -> float:
    """``geohashGetDistance`` (Redis 7.0): haversine on a sphere of Redis's radius."""
    lat1r = _deg_rad(lat1d)
    lon1r = _deg_rad(lon1d)
    lat2r = _deg_rad(lat2d)
    lon2r = _deg_rad(lon2d)
    u = math.sin((lat2r - lat1r) / 2)
    v = math.sin((lon2r - lon1r) / 2)
    return 2.0 * EARTH_RADIUS_IN_METERS * math.asin(math.sqrt(u * u + math.cos(lat1r) * math.cos(lat2r) * v * v))


def distance_if_in_radius(x1: float, y1: float, x2: float, y2: float, radius: float) -> float | None:
    d = distance(x1, y1, x2, y2)
    return None if d > radius else d


def distance_if_in_rectangle(width_m: float, height_m: float, x1: float, y1: float,
                             x2: float, y2: float) -> float | None:
    """``geohashGetDistanceIfInRectangle`` (Redis 7.0): (x1, y1) is the box's centre."""
    lon_distance = distance(x2, y2, x1, y2)
    lat_distance = distance(x2, y2, x2, y1)
    if lon_distance > width_m / 2 or lat_distance > height_m / 2:
        return None
    return distance(x1, y1, x2, y2)


# -- the search area (geohash_helper.c) --------------------------------------------------------

class Shape(NamedTuple):
    """A search shape: centre (longitude, latitude), ``conversion`` = metres per unit, and
    either ``radius`` (BYRADIUS) or ``width``/``height`` (BYBOX), in the unit."""

    longitude: float
    latitude: float
    conversion: float
    radius: float | None = None
    width: float = 0.0
    height: float = 0.0

    @property
    def circular(self) -> bool:
        return self.radius is not None


def estimate_steps_by_radius(range_meters: float, lat: float) -> int:
    if range_meters == 0:
        return 26
    step = 1
    while range_meters < MERCATOR_MAX:
        range_meters *= 2
        step += 1
    step -= 2  # make sure the range is included in most of the base cases
    if lat > 66 or lat < -66:
        step -= 1
        if lat > 80 or lat < -80:
            step -= 1
    return min(max(step, 1), 26)


def bounding_box(shape: Shape) -> tuple[float, float, float, float]:
    """``geohashBoundingBox``: (min longitude, min latitude, max longitude, max latitude)."""
    longitude, latitude = shape.longitude, shape.latitude
    if shape.radius is not None:
        height = width = shape.conversion * shape.radius
    else:
        height = shape.conversion * (shape.height / 2)
        width = shape.conversion * (shape.width / 2)
    lat_delta = _rad_deg(height / EARTH_RADIUS_IN_METERS)
    long_delta_top = _rad_deg(width / EARTH_RADIUS_IN_METERS / math.cos(_deg_rad(latitude + lat_delta)))
    long_delta_bottom = _rad_deg(width / EARTH_RADIUS_IN_METERS / math.cos(_deg_rad(latitude - lat_delta)))
    southern = latitude < 0
    min_lon = longitude - long_delta_bottom if southern else longitude - long_delta_top
    max_lon = longitude + long_delta_bottom if southern else longitude + long_delta_top
    return min_lon, latitude - lat_delta, max_lon, latitude + lat_delta


class SearchArea(NamedTuple):
    hash: Bits
    neighbors: Neighbors
    area: Area


def areas_by_shape(shape: Shape) -> SearchArea:
    """``geohashCalculateAreasByShapeWGS84``: the centre cell and its neighbours (zeroed
    where useless) covering ``shape``."""
    min_lon, min_lat, max_lon, max_lat = bounding_box(shape)
    longitude, latitude = shape.longitude, shape.latitude
    if shape.radius is not None:
        radius_meters = shape.radius
    else:
        radius_meters = math.sqrt((shape.width / 2) * (shape.width / 2) + (shape.height / 2) * (shape.height / 2))
    radius_meters *= shape.conversion
    steps = estimate_steps_by_radius(radius_meters, latitude)

    def cell(step: int) -> tuple[Bits, Neighbors, Area]:
        h = encode(LONG_RANGE, LAT_RANGE, longitude, latitude, step)
        assert h is not None, "the centre was validated"
        a = decode(LONG_RANGE, LAT_RANGE, h)
        assert a is not None
        return h, neighbors(h), a

    h, nb, area = cell(steps)
    north = decode(LONG_RANGE, LAT_RANGE, nb.north)
    south = decode(LONG_RANGE, LAT_RANGE, nb.south)
    east = decode(LONG_RANGE, LAT_RANGE, nb.east)
    west = decode(LONG_RANGE, LAT_RANGE, nb.west)
    decrease = ((north is not None and north.latitude.max < max_lat)
                or (south is not None and south.latitude.min > min_lat)
                or (east is not None and east.longitude.max < max_lon)
                or (west is not None and west.longitude.min > min_lon))
    if steps > 1 and decrease:
        steps -= 1
        h, nb, area = cell(steps)
    if steps >= 2:
        d = nb._asdict()
        if area.latitude.min < min_lat:
            d["south"] = d["south_west"] = d["south_east"] = ZERO
        if area.latitude.max > max_lat:
            d["north"] = d["north_east"] = d["north_west"] = ZERO
        if area.longitude.min < min_lon:
            d["west"] = d["south_west"] = d["north_west"] = ZERO
        if area.longitude.max > max_lon:
            d["east"] = d["south_east"] = d["north_east"] = ZERO
        nb = Neighbors(**d)
    return SearchArea(h, nb, area)


def search_ranges(shape: Shape) -> list[tuple[int, int]]:
    """The score ranges ``[min, max)`` to scan for ``shape``, in Redis's order (the centre,
    N, S, E, W, NE, NW, SE, SW; zero cells skipped; a cell equal to the one scanned just
    before skipped, as ``membersOfAllNeighbors`` does, never comparing with the centre)."""
    sa = areas_by_shape(shape)
    nb = sa.neighbors
    cells = [sa.hash, nb.north, nb.south, nb.east, nb.west,
             nb.north_east, nb.north_west, nb.south_east, nb.south_west]
    out: list[tuple[int, int]] = []
    last = 0
    for i, c in enumerate(cells):
        if c.bits == 0 and c.step == 0:
            continue
        if last and c == cells[last]:
            continue
        out.append((align52(c), align52(Bits(c.bits + 1, c.step))))
        last = i
    return out


def distance_in_shape(shape: Shape, longitude: float, latitude: float) -> float | None:
    """``geoWithinShape``: the distance in metres of a point inside ``shape``, else None."""
    if shape.radius is not None:
        return distance_if_in_radius(shape.longitude, shape.latitude, longitude, latitude,
                                     shape.radius * shape.conversion)
    return distance_if_in_rectangle(shape.width * shape.conversion, shape.height * shape.conversion,
                                    shape.longitude, shape.latitude, longitude, latitude)
