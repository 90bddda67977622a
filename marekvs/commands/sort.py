"""SORT and SORT_RO (Redis 7.0's ``sort.c``), on lists, sets and sorted sets.

The options are read as Redis reads them (its loop, its order of checks, its errors),
then the elements are read, scored and sorted by Redis's ``sortCompare``:

- numeric (the default): each element's score is ``strtod`` of the element, or of the
  value ``BY`` names (0 when that key or field is missing); an element whose score is not
  a whole number, overflows or is NaN makes the reply "One or more scores can't be
  converted into double"; equal scores order by the elements' bytes;
- ``ALPHA``: the elements (or the ``BY`` values, missing ones first) compared as C strings
  (``strcoll`` in the C locale: up to the first NUL), or as whole byte strings with STORE;
- ``DESC`` reverses; ``BY`` a pattern without ``*`` does not sort (a list or zset keeps its
  order, read from the ``LIMIT`` range directly, DESC from the other end; a set keeps
  marekvs's member order, byte order, where Redis's is its hash table's; with STORE a set
  is sorted ALPHA, as Redis does);
- ``LIMIT offset count`` as Redis clamps it; ``GET`` patterns per element (``#``: the
  element itself), nil where the key or field is missing;
- ``STORE`` writes the result as a list (replacing whatever the key held, no TTL; an empty
  result deletes the key) through the apply path, and answers its length.

Patterns (``lookupKeyByPattern``): the first ``*`` is replaced by the element; a ``->``
after it (followed by at least one byte) names a hash field. Each BY or GET lookup is a
key lookup of its own, counted as a keyspace hit or miss. Keys spread over partitions: a
pattern's keys are not where the sorted key is (unless a hash tag puts them there), so BY
costs one point read (two for a hash field) per element in the partition of each
substituted key, and GET the same per element returned and pattern. Redis Cluster refuses
BY and GET patterns (its keys live on other nodes); every marekvs node holds every key,
so they work here (docs/divergences.md).

On a node of several shard workers (docs/shards.md §3) the pattern keys may be on any
worker: ``shards/units.py`` runs SORT with BY or GET patterns (or a STORE on another
worker) as a unit over every worker, in phases: ``sort_keys`` at the sorted key's worker
names every pattern key its elements may look up, each worker reads its own
(``read_pattern_key``), then ``_sort`` runs at the sorted key's worker with those values
(``lookup``) and, for a destination elsewhere, hands its result back (``capture``) to be
written there (``store_list``).
"""

from __future__ import annotations

from marekvs.commands import args as A
from marekvs.commands import errors
from marekvs.commands.dump import values
from marekvs.commands.errors import CommandError, c_str
from marekvs.commands.lists import lists
from marekvs.commands.table import command
from marekvs.core import head
from marekvs.core import keys as K
from marekvs.core.head import CollectionType
from marekvs.core.strtod import strtod
from marekvs.keyspace import hashes as kh
from marekvs.keyspace import lists as kl
from marekvs.keyspace import sets as ksets
from marekvs.keyspace import strings as kstr
from marekvs.keyspace import values as kv
from marekvs.keyspace import zsets as Z
from marekvs.keyspace.status import WrongType

_SORTABLE = frozenset((CollectionType.LIST, CollectionType.SET, CollectionType.ZSET))
_COMPLEXITY = ("O(N+M*log(M)) where N is the number of elements in the list or set to sort, and M the number "
               "of returned elements. When the elements are not sorted, complexity is O(N).")
_BY_GET_NOTES = ("For the optional BY/GET keyword. It is marked 'unknown' because the key names derive from the "
                 "content of the key we sort")
_STORE_NOTES = ("For the optional STORE keyword. It is marked 'unknown' because the keyword can appear anywhere "
                "in the argument array")


def _is_self(pattern: bytes) -> bool:
    return pattern[:1] == b"#" and (len(pattern) == 1 or pattern[1] == 0)


def pattern_key(pattern: bytes, subst: bytes) -> tuple[bytes, bytes | None] | None:
    """The key (and hash field) ``pattern`` names for ``subst`` (None: ``#``, or no ``*``)."""
    if _is_self(pattern):
        return None
    cs = c_str(pattern)
    star = cs.find(b"*")
    if star < 0:
        return None
    f = cs.find(b"->", star + 1)
    field: bytes | None = None
    fieldlen = 0
    if f >= 0 and f + 2 < len(cs):
        field = pattern[f + 2:]
        fieldlen = len(field)
    postfixlen = len(pattern) - (star + 1) - (fieldlen + 2 if fieldlen else 0)
    return pattern[:star] + subst + pattern[star + 1:star + 1 + postfixlen], field


def lookup_by_pattern(ctx, pattern: bytes, subst: bytes, now: int) -> bytes | None:
    """Redis's ``lookupKeyByPattern``: the string at the key the pattern names for
    ``subst`` (or the hash field after ``->``), None if missing or of another type."""
    if _is_self(pattern):
        return subst
    named = pattern_key(pattern, subst)
    return None if named is None else read_pattern_key(ctx, named[0], named[1], now)


def read_pattern_key(ctx, key: bytes, field: bytes | None, now: int, counted: bool = True) -> bytes | None:
    """The string at ``key``, or its hash's ``field``: None if missing or of another type
    (a keyspace hit or miss, unless not ``counted``)."""
    ks = ctx.ks
    found = ks.read_record(key, now) if counted else ks.live_record(key, now)
    if found is None:
        return None
    ikey, rec = found
    if field is not None:
        if ikey[K.TAG_AT] == K.ORD_STRING or head.ctype_of(rec) != CollectionType.HASH:
            return None
        return kv.quiet(ks, kh.get, ks, key, field, now)
    if ikey[K.TAG_AT] != K.ORD_STRING:
        return None
    return kstr.string_value(rec)


def _elements(ctx, key: bytes, ctype: int, dontsort: bool, desc: bool, start: int, end: int,
              now: int) -> list[bytes]:
    """The vector to sort: every element, or (a list or zset that is not sorted) just
    ranks ``start..end`` in the order asked."""
    ks = ctx.ks
    if ctype == CollectionType.SET:
        return ksets.all_members(ks, key, now)
    if ctype == CollectionType.LIST:
        lx = lists(ctx)
        n = kl.op_len(lx, key, now)
        if not dontsort:
            return kl.op_range(lx, key, 0, n - 1, now)  # (point reads of a dense list's records)
        if end < start:
            return []
        if desc:
            return kl.op_range(lx, key, n - 1 - end, n - 1 - start, now)[::-1]
        return kl.op_range(lx, key, start, end, now)
    z = Z.state(ks)
    zs = Z.lookup(z, key, now)
    if zs is None:
        return []
    o = Z.order_of(z, zs, now)
    if not dontsort:
        return list(o.scores)
    if end < start:
        return []
    return [m for _, m in Z.rank_range(o, start, end, desc)]


def full_key_access(ctx, args: list[bytes], cmd=None) -> bool:
    """May the user read any key with this command? BY and GET patterns name keys no key
    spec lists, so Redis 7.0 allows them only then (ACLUserCheckCmdWithUnrestrictedKeyAccess)."""
    user = ctx.user
    return not user.restricted or user.unrestricted_key_access(ctx.node.acl.view, cmd or ctx.last_cmd, args)


def store_key(args: list[bytes]) -> bytes | None:
    """SORT's STORE destination as its key spec finds it (the last STORE with a value)."""
    dst = None
    i = 2
    while i < len(args) - 1:
        if args[i].lower() == b"store":
            dst = args[i + 1]
            i += 1
        i += 1
    return dst


def _sort(ctx, args: list[bytes], readonly: bool, full: bool | None = None, lookup=None, collect: bool = False,
          capture: bool = False):
    """SORT (the module docstring). A unit's parts (``shards/units.py``): ``full`` is the
    user's full key access, decided where the command came in; ``lookup(pattern, element,
    now)`` reads a pattern's key; ``collect`` answers the (key, field) pairs of every
    pattern for every element, sorted or not; ``capture`` answers a STORE's [length,
    items] instead of writing them."""
    if full is None:
        full = full_key_access(ctx, args)
    if lookup is None:
        def lookup(pattern, subst, now):
            return lookup_by_pattern(ctx, pattern, subst, now)
    desc = alpha = dontsort = False
    limit_start, limit_count = 0, -1
    sortby: bytes | None = None
    storekey: bytes | None = None
    gets: list[bytes] = []
    p = A.Options(args, 2)
    while p.more():
        if p.accept(b"asc"):
            desc = False
        elif p.accept(b"desc"):
            desc = True
        elif p.accept(b"alpha"):
            alpha = True
        elif p.accept(b"limit", 2):
            limit_start, limit_count = p.integer(), p.integer()
        elif not readonly and p.accept(b"store", 1):
            storekey = p.value()
        elif p.accept(b"by", 1):
            sortby = p.value()
            if b"*" not in c_str(sortby):
                dontsort = True  # BY a constant: no sorting
            elif not full:
                p.fail(errors.SORT_BY_DENIED)
        elif p.accept(b"get", 1):
            if not full:
                p.fail(errors.SORT_GET_DENIED)
            gets.append(p.value())
        else:
            p.fail(errors.SYNTAX)
    p.check()

    ks = ctx.ks
    now = ks.now()
    key = args[1]
    found = ks.live_record(key, now) if collect else ks.read_record(key, now)  # (counted once: by the run)
    ctype = CollectionType.LIST  # a missing key sorts as an empty list
    if found is not None:
        ikey, rec = found
        if ikey[K.TAG_AT] == K.ORD_STRING or head.ctype_of(rec) not in _SORTABLE:
            raise WrongType()
        ctype = head.ctype_of(rec)
        if ctype == CollectionType.SET and dontsort and storekey is not None:
            dontsort, alpha, sortby = False, True, None  # a stored set is sorted, for replicas

    n = 0 if found is None else kv.quiet(ks, _length, ctx, key, ctype, now)
    start = max(limit_start, 0)
    end = n - 1 if limit_count < 0 else _wrap(start + limit_count - 1)
    if start >= n:
        start, end = n - 1, n - 2
    if end >= n:
        end = n - 1

    vector = [] if found is None else kv.quiet(ks, _elements, ctx, key, ctype, dontsort, desc, start, end, now)
    if collect:
        patterns = gets if dontsort or sortby is None else [sortby, *gets]
        return [list(named) for e in vector for pt in patterns if (named := pattern_key(pt, e)) is not None]
    if dontsort and ctype != CollectionType.SET:
        end -= start  # the vector is the range already
        start = 0
    elif not dontsort:
        vector = _sorted(ctx, vector, sortby, alpha, desc, storekey is not None, now, lookup)

    out: list[bytes | None] = []
    for elem in vector[start:end + 1] if end >= start else []:
        if not gets:
            out.append(elem)
        for pattern in gets:
            out.append(lookup(pattern, elem, now))
    if storekey is None:
        return out
    items = [b"" if v is None else v for v in out]
    if capture:
        return [len(items), items]
    return store_list(ctx, storekey, items, now)


def store_list(ctx, storekey: bytes, items: list[bytes], now: int) -> int:
    """SORT ... STORE's write: the list, or the key deleted for none."""
    if items:
        kv.write_list(values(ctx), storekey, items, now)
        ctx.fire("l", b"sortstore", storekey)
    elif ctx.ks.delete(storekey, now):
        ctx.fire("g", b"del", storekey)
    return len(items)


def _wrap(v: int) -> int:
    v &= (1 << 64) - 1
    return v - (1 << 64) if v >= 1 << 63 else v


def _length(ctx, key: bytes, ctype: int, now: int) -> int:
    if ctype == CollectionType.LIST:
        return kl.op_len(lists(ctx), key, now)
    if ctype == CollectionType.SET:
        return ksets.cardinality(ctx.ks, key, now)
    return Z.card(Z.state(ctx.ks), key, now)


def _sorted(ctx, vector: list[bytes], sortby: bytes | None, alpha: bool, desc: bool, store: bool,
            now: int, lookup) -> list[bytes]:
    """``vector`` in ``sortCompare``'s order."""
    if alpha:
        if sortby is None:
            keyf = (lambda e: e) if store else c_str
            return sorted(vector, key=keyf, reverse=desc)
        keyed = []
        for e in vector:
            v = lookup(sortby, e, now)
            keyed.append(((0, b"") if v is None else (1, v if store else c_str(v)), e))
        keyed.sort(key=lambda x: x[0], reverse=desc)
        return [e for _, e in keyed]
    vals = vector if sortby is None else [lookup(sortby, e, now) for e in vector]
    bad: list[bytes] = []

    def slow(v: bytes | None) -> float:
        if v is None:
            return 0.0  # a missing BY key scores 0
        score, used, erange = strtod(v)
        if used != len(c_str(v)) or erange or score != score:
            bad.append(v)
        return score

    # (unsigned integers, most scores, are read directly: strtod would read them the same)
    scored = [(float(v) if v is not None and len(v) < 300 and v.isdigit() else slow(v), e)
              for v, e in zip(vals, vector)]
    if bad:
        raise CommandError(errors.SORT_NOT_DOUBLE)
    scored.sort(reverse=desc)
    return [e for _, e in scored]


_SYNTAX = ("key [BY pattern@1] [LIMIT offset count] [GET pattern@1 [GET pattern@1 ...]] [ASC | DESC] [ALPHA]")


@command("sort", -2, "write denyoom",
         specs=("RO ACCESS index 1 range 0", f"RO ACCESS unknown unknown ({_BY_GET_NOTES})",
                f"OW UPDATE unknown unknown ({_STORE_NOTES})"),
         getkeys="sort", group="generic", acl="write set sortedset list slow dangerous",
         summary="Sort the elements in a list, set or sorted set", since="1.0.0", complexity=_COMPLEXITY,
         syntax=_SYNTAX + " [STORE destination]")
def sort(ctx, args: list[bytes]):
    return _sort(ctx, args, readonly=False)


@command("sort_ro", -2, "readonly",
         specs=("RO ACCESS index 1 range 0", f"RO ACCESS unknown unknown ({_BY_GET_NOTES})"),
         getkeys="sort_ro", group="generic", acl="read set sortedset list slow dangerous",
         summary="Sort the elements in a list, set or sorted set. Read-only variant of SORT.", since="7.0.0",
         complexity=_COMPLEXITY, syntax=_SYNTAX)
def sort_ro(ctx, args: list[bytes]):
    return _sort(ctx, args, readonly=True)


def sort_part(ctx, args: list[bytes], readonly: bool, full: bool, prefetched: dict | None, collect: bool,
              capture: bool):
    """SORT as a part of a unit across shard workers (``shards/units.py``): the pattern
    keys' values ``prefetched`` ((key, field) -> (whether the key exists, value)), read by
    their workers."""
    lookup = None
    if prefetched is not None:
        def lookup(pattern, subst, now):
            if _is_self(pattern):
                return subst
            named = pattern_key(pattern, subst)
            if named is None:
                return None
            exists, value = prefetched[named]
            ctx.ks.counted(named[0], exists)  # (each lookup a hit or miss, as on one process)
            return value
    return _sort(ctx, args, readonly, full, lookup, collect, capture)
