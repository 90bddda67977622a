"""Geo commands (Redis 7.0 ``geo.c``): positions stored as sorted-set members.

GEOADD is ZADD with the 52-bit geohash of each position as its score (so it writes, and
replicates, exactly as ZADD does); GEOPOS, GEOHASH and GEODIST decode scores;
GEOSEARCH[STORE] and GEORADIUS[BYMEMBER][_RO] scan the search area's score ranges
(``keyspace/geo.py``). Arguments are parsed in Redis's order, so the same error wins;
distances print with four decimals (``%.4f``), coordinates as ``%.17Lf`` trimmed of its
zeros (a double in RESP3). Results are sorted as Redis sorts them (a stable sort by
distance); with COUNT smaller than the result Redis uses a partial quicksort, whose order
among members at exactly the same distance this port does not reproduce.

GEOADD fires ZADD's events; the STORE forms fire ``geosearchstore`` / ``georadiusstore``
(or ``del`` for an empty result), as Redis does; every form reads its source as a counted
lookup (a keyspace hit or miss), the STORE forms too.
"""

from __future__ import annotations

from fractions import Fraction

from marekvs.commands import args as A
from marekvs.commands import errors
from marekvs.commands.errors import CommandError
from marekvs.commands.reply import NULL_ARRAY, DoubleText
from marekvs.commands.table import command
from marekvs.commands.zsets import _z, add_items, double_arg, ordered, store_entries
from marekvs.core import geohash as G
from marekvs.keyspace import geo as KG
from marekvs.keyspace import zsets as Z

_ACL_R = "read geo slow"
_ACL_W = "write geo slow"
_UNITS = {b"m": 1.0, b"km": 1000.0, b"ft": 0.3048, b"mi": 1609.34}
_SEARCH_COMPLEXITY = ("O(N+log(M)) where N is the number of elements in the grid-aligned bounding box area around "
                      "the shape provided as the filter and M is the number of items inside the shape")
_RADIUS_COMPLEXITY = ("O(N+log(M)) where N is the number of elements inside the bounding box of the circular area "
                      "delimited by center and radius and M is the number of items inside the index.")

# georadiusGeneric's flags
COORDS, MEMBER, NOSTORE, SEARCH, SEARCHSTORE = 1, 2, 4, 8, 16


# =========================================================================================
# Internal API: arguments and replies
# =========================================================================================

def long_lat(a: bytes, b: bytes) -> tuple[float, float]:
    """``extractLongLatOrReply``."""
    x, y = double_arg(a), double_arg(b)
    if x < G.GEO_LONG_MIN or x > G.GEO_LONG_MAX or y < G.GEO_LAT_MIN or y > G.GEO_LAT_MAX:
        raise CommandError(errors.geo_invalid_pair(x, y))
    return x, y


def unit(b: bytes) -> float:
    """``extractUnitOrReply``: metres per unit."""
    v = _UNITS.get(b.lower())
    if v is None:
        raise CommandError(errors.GEO_UNIT)
    return v


def distance_arg(a: bytes, u: bytes) -> tuple[float, float]:
    """``extractDistanceOrReply``: (radius, metres per unit)."""
    d = double_arg(a, errors.GEO_NEED_RADIUS)
    if d < 0:
        raise CommandError(errors.GEO_RADIUS_NEGATIVE)
    return d, unit(u)


def box_arg(w: bytes, h: bytes, u: bytes) -> tuple[float, float, float]:
    """``extractBoxOrReply``: (width, height, metres per unit)."""
    width = double_arg(w, errors.GEO_NEED_WIDTH)
    height = double_arg(h, errors.GEO_NEED_HEIGHT)
    if height < 0 or width < 0:
        raise CommandError(errors.GEO_HEIGHT_WIDTH_NEGATIVE)
    return width, height, unit(u)


def human(x: float) -> DoubleText:
    """``addReplyHumanLongDouble`` of a double: ``%.17Lf`` without trailing zeros."""
    return DoubleText(A.format_ld(Fraction(x)))


def distance_text(d: float) -> bytes:
    """``addReplyDoubleDistance``: four decimals."""
    return b"%.4f" % d


# =========================================================================================
# Commands
# =========================================================================================

_GEOADD_FLAGS = {b"nx": 1, b"xx": 2, b"ch": 4}


@command("geoadd", -5, "write denyoom", specs="RW UPDATE index 1 range 0", group="geo", acl=_ACL_W,
         since="3.2.0",
         summary="Add one or more geospatial items in the geospatial index represented using a sorted set",
         complexity="O(log(N)) for each item added, where N is the number of elements in the sorted set.",
         syntax="key [NX | XX] [CH] longitude latitude member [longitude latitude member ...]")
def geoadd(ctx, args: list[bytes]):
    flags, i = A.leading_flags(args, 2, _GEOADD_FLAGS)
    nx, xx, ch = bool(flags & 1), bool(flags & 2), bool(flags & 4)
    if (len(args) - i) % 3 or (xx and nx):
        raise CommandError(errors.SYNTAX)
    items = []
    for j in range(i, len(args), 3):
        x, y = long_lat(args[j], args[j + 1])
        items.append((G.score_of(x, y), args[j + 2]))
    if not items:  # (ZADD with no pair)
        raise CommandError(errors.SYNTAX)
    return add_items(ctx, args[1], items, Z.AddFlags(nx=nx, xx=xx), ch)


@command("geodist", -4, "readonly", specs="RO ACCESS index 1 range 0", group="geo", acl=_ACL_R, since="3.2.0",
         summary="Returns the distance between two members of a geospatial index", complexity="O(log(N))",
         syntax="key member1 member2 [M | KM | FT | MI]")
def geodist(ctx, args: list[bytes]):
    to_meter = 1.0
    if len(args) == 5:
        to_meter = unit(args[4])
    elif len(args) > 5:
        raise CommandError(errors.SYNTAX)
    z, now = _z(ctx), ctx.ks.now()
    zs = Z.read_lookup(z, args[1], now)
    if zs is None:
        return None
    a, b = KG.position(z, zs, args[2], now), KG.position(z, zs, args[3], now)
    if a is None or b is None:
        return None
    return distance_text(G.distance(a[0], a[1], b[0], b[1]) / to_meter)


@command("geohash", -2, "readonly", specs="RO ACCESS index 1 range 0", group="geo", acl=_ACL_R, since="3.2.0",
         summary="Returns members of a geospatial index as standard geohash strings",
         complexity="O(log(N)) for each member requested, where N is the number of elements in the sorted set.",
         syntax="key [member [member ...]]")
def geohash(ctx, args: list[bytes]):
    z, now = _z(ctx), ctx.ks.now()
    zs = Z.read_lookup(z, args[1], now)
    out: list = []
    for m in args[2:]:
        s = None if zs is None else Z.score(z, zs, m, now)
        out.append(None if s is None else G.geohash_string(s))
    return out


@command("geopos", -2, "readonly", specs="RO ACCESS index 1 range 0", group="geo", acl=_ACL_R, since="3.2.0",
         summary="Returns longitude and latitude of members of a geospatial index",
         complexity="O(N) where N is the number of members requested.", syntax="key [member [member ...]]")
def geopos(ctx, args: list[bytes]):
    z, now = _z(ctx), ctx.ks.now()
    zs = Z.read_lookup(z, args[1], now)
    out: list = []
    for m in args[2:]:
        xy = None if zs is None else KG.position(z, zs, m, now)
        out.append(NULL_ARRAY if xy is None else [human(xy[0]), human(xy[1])])
    return out


def georadius_generic(ctx, args: list[bytes], src: int, flags: int):
    """georadiusGeneric: the shape, then the options, then the checks, in Redis's order."""
    z, now = _z(ctx), ctx.ks.now()
    zs = Z.read_lookup(z, args[src], now)
    storekey: bytes | None = None
    storedist = False
    xy: tuple[float, float] | None = None
    radius: float | None = None
    width = height = 0.0
    conversion = 1.0
    if flags & COORDS:
        base = 6
        xy = long_lat(args[2], args[3])
        radius, conversion = distance_arg(args[4], args[5])
    elif flags & MEMBER and zs is None:
        base = 5
    elif flags & MEMBER:
        base = 5
        assert zs is not None
        xy = KG.position(z, zs, args[2], now)
        if xy is None:
            raise CommandError(errors.GEO_MEMBER_MISSING)
        radius, conversion = distance_arg(args[3], args[4])
    else:
        base = 2
        if flags & SEARCHSTORE:
            base = 3
            storekey = args[1]
    withdist = withhash = withcoords = False
    frommember = fromloc = byradius = bybox = False
    sort = 0  # 0 none, 1 asc, -1 desc
    any_ = False
    count = 0
    p = A.Options(args, base)
    while p.more():
        if p.accept(b"withdist"):
            withdist = True
        elif p.accept(b"withhash"):
            withhash = True
        elif p.accept(b"withcoord"):
            withcoords = True
        elif p.accept(b"any"):
            any_ = True
        elif p.accept(b"asc"):
            sort = 1
        elif p.accept(b"desc"):
            sort = -1
        elif p.accept(b"count", 1):
            count = p.integer()
            if count <= 0:
                p.fail(errors.GEO_COUNT_POSITIVE)
        elif not flags & (NOSTORE | SEARCH) and p.accept(b"store", 1):
            storekey, storedist = p.value(), False
        elif not flags & (NOSTORE | SEARCH) and p.accept(b"storedist", 1):
            storekey, storedist = p.value(), True
        elif flags & SEARCH and flags & SEARCHSTORE and p.accept(b"storedist"):
            storedist = True
        elif flags & SEARCH and not fromloc and p.accept(b"frommember", 1):
            member = p.value()
            if zs is not None:  # (no key: the options are parsed on, the reply is empty)
                xy = KG.position(z, zs, member, now)
                if xy is None:
                    p.fail(errors.GEO_MEMBER_MISSING)
            frommember = True
        elif flags & SEARCH and not frommember and p.accept(b"fromlonlat", 2):
            xy = long_lat(p.value(), p.value())
            fromloc = True
        elif flags & SEARCH and not bybox and p.accept(b"byradius", 2):
            radius, conversion = distance_arg(p.value(), p.value())
            byradius = True
        elif flags & SEARCH and not byradius and p.accept(b"bybox", 3):
            width, height, conversion = box_arg(p.value(), p.value(), p.value())
            radius = None
            bybox = True
        else:
            p.fail(errors.SYNTAX)
    if storekey is not None and (withdist or withhash or withcoords):
        p.fail(errors.geo_store_with_options(bool(flags & SEARCHSTORE)))
    if flags & SEARCH and not (frommember or fromloc):
        p.fail(errors.geo_from_required(args[0]))
    if flags & SEARCH and not (byradius or bybox):
        p.fail(errors.geo_by_required(args[0]))
    if any_ and not count:
        p.fail(errors.GEO_ANY_WITHOUT_COUNT)
    p.check()
    event = b"geosearchstore" if flags & SEARCH else b"georadiusstore"
    if zs is None:
        if storekey is not None:
            return store_entries(ctx, storekey, event, ())
        return []
    if count and not sort and not any_:
        sort = 1
    assert xy is not None
    shape = G.Shape(xy[0], xy[1], conversion, radius, width, height)
    points = KG.search(z, zs, shape, count if any_ else 0, now)
    if not points and storekey is None:
        return []
    if sort:
        points.sort(key=lambda p: p.dist, reverse=sort < 0)
    if count:
        points = points[:count]
    if storekey is not None:
        entries = sorted(((p.dist / conversion if storedist else p.score), p.member) for p in points)
        return store_entries(ctx, storekey, event, entries)
    if not (withdist or withhash or withcoords):
        return [p.member for p in points]
    out = []
    for p in points:
        item: list = [p.member]
        if withdist:
            item.append(distance_text(p.dist / conversion))
        if withhash:
            item.append(int(p.score))
        if withcoords:
            item.append([human(p.longitude), human(p.latitude)])
        out.append(item)
    return out


_GEORADIUS_SPECS = ("RO ACCESS index 1 range 0", "OW UPDATE keyword STORE 6 range 0",
                    "OW UPDATE keyword STOREDIST 6 range 0")
_GEORADIUSBYMEMBER_SPECS = ("RO ACCESS index 1 range 0", "OW UPDATE keyword STORE 5 range 0",
                            "OW UPDATE keyword STOREDIST 5 range 0")
_SHAPE_OPTS = "[WITHCOORD] [WITHDIST] [WITHHASH] [COUNT count [ANY]] [ASC | DESC]"


@command("georadius", -6, "write denyoom", specs=_GEORADIUS_SPECS, getkeys="georadius", group="geo", acl=_ACL_W,
         since="3.2.0",
         summary="Query a sorted set representing a geospatial index to fetch members matching a given maximum "
                 "distance from a point",
         complexity=_RADIUS_COMPLEXITY,
         syntax="key longitude latitude radius M | KM | FT | MI " + _SHAPE_OPTS + " [STORE key | STOREDIST key]")
def georadius(ctx, args: list[bytes]):
    return georadius_generic(ctx, args, 1, COORDS)


@command("georadius_ro", -6, "readonly", specs="RO ACCESS index 1 range 0", group="geo", acl=_ACL_R,
         since="3.2.10", summary="A read-only variant for GEORADIUS", complexity=_RADIUS_COMPLEXITY,
         syntax="key longitude latitude radius M | KM | FT | MI " + _SHAPE_OPTS)
@ordered
def georadius_ro(ctx, args: list[bytes]):
    return georadius_generic(ctx, args, 1, COORDS | NOSTORE)


@command("georadiusbymember", -5, "write denyoom", specs=_GEORADIUSBYMEMBER_SPECS, getkeys="georadius",
         group="geo", acl=_ACL_W, since="3.2.0",
         summary="Query a sorted set representing a geospatial index to fetch members matching a given maximum "
                 "distance from a member",
         complexity=_RADIUS_COMPLEXITY,
         syntax="key member radius M | KM | FT | MI " + _SHAPE_OPTS + " [STORE key | STOREDIST key]")
def georadiusbymember(ctx, args: list[bytes]):
    return georadius_generic(ctx, args, 1, MEMBER)


@command("georadiusbymember_ro", -5, "readonly", specs="RO ACCESS index 1 range 0", group="geo", acl=_ACL_R,
         since="3.2.10", summary="A read-only variant for GEORADIUSBYMEMBER", complexity=_RADIUS_COMPLEXITY,
         syntax="key member radius M | KM | FT | MI " + _SHAPE_OPTS)
@ordered
def georadiusbymember_ro(ctx, args: list[bytes]):
    return georadius_generic(ctx, args, 1, MEMBER | NOSTORE)


_SEARCH_SHAPE = ("FROMMEMBER member | FROMLONLAT longitude latitude BYRADIUS radius M | KM | FT | MI | BYBOX width "
                 "height M | KM | FT | MI [ASC | DESC] [COUNT count [ANY]]")


@command("geosearch", -7, "readonly", specs="RO ACCESS index 1 range 0", group="geo", acl=_ACL_R, since="6.2.0",
         summary="Query a sorted set representing a geospatial index to fetch members inside an area of a box or a "
                 "circle.",
         complexity=_SEARCH_COMPLEXITY,
         syntax="key " + _SEARCH_SHAPE + " [WITHCOORD] [WITHDIST] [WITHHASH]")
@ordered
def geosearch(ctx, args: list[bytes]):
    return georadius_generic(ctx, args, 1, SEARCH | NOSTORE)


@command("geosearchstore", -8, "write denyoom", specs=("OW UPDATE index 1 range 0", "RO ACCESS index 2 range 0"),
         group="geo", acl=_ACL_W, since="6.2.0",
         summary="Query a sorted set representing a geospatial index to fetch members inside an area of a box or a "
                 "circle, and store the result in another key.",
         complexity=_SEARCH_COMPLEXITY,
         syntax="destination source " + _SEARCH_SHAPE + " [STOREDIST]")
def geosearchstore(ctx, args: list[bytes]):
    return georadius_generic(ctx, args, 2, SEARCH | SEARCHSTORE)
