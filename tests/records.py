"""Collections built from core's record constructors, for tests of what every collection
type shares (RENAME/COPY, OBJECT ENCODING, DEL, TTLs, the sweeper) on a branch where a type's
own commands may not exist yet.

``build(ks, key, ctype, n)`` writes, through the keyspace's one apply path, a collection of
type ``ctype`` with ``n`` elements, records exactly as the data model lays them out (a zset's
members and their score index, a stream's entries and its head's last id, ...).
``content(ks, key)`` reads any collection back as plain values, so two collections (or one
before and after a move) compare with ``==``.
"""

from __future__ import annotations

from marekvs.core import envelope as env
from marekvs.core import head, hll, listelem, lww, orswot, registry, stream, zset
from marekvs.core import keys as K
from marekvs.core.envelope import RecordType
from marekvs.core.head import CollectionType as CT
from marekvs.keyspace import Keyspace
from marekvs.storage.engine import prefix_end

TYPES = {"hash": CT.HASH, "set": CT.SET, "zset": CT.ZSET, "list": CT.LIST, "stream": CT.STREAM, "hll": CT.HLL}


def element_records(ks: Keyspace, key: bytes, ctype: int, n: int, ttl: int = 0,
                    start: int = 0) -> list[tuple[bytes, bytes]]:
    """``n`` element records of a collection of type ``ctype`` at ``key`` (values derived
    from ``start + i``), each stamped with a new version; ``ttl`` as per-member TTL (hashes,
    sets, zsets)."""
    out: list[tuple[bytes, bytes]] = []
    node = ks.node_id
    for i in range(start, start + n):
        s = ks.stamp()
        if ctype == CT.HASH:
            out.append((K.encode_hash_field_key(key, b"f%d" % i), orswot.add(
                None, RecordType.HASH_FIELD, s, node, b"v%d" % i, ttl)))
        elif ctype == CT.SET:
            out.append((K.encode_set_member_key(key, b"%d" % i), orswot.add(
                None, RecordType.SET_MEMBER, s, node, b"", ttl)))
        elif ctype == CT.ZSET:
            member, score = b"m%d" % i, float(i) / 2
            out.append((K.encode_zset_member_key(key, member), orswot.add(
                None, RecordType.ZSET_MEMBER, s, node, zset.encode_value(score), ttl)))
            out.append((K.encode_zset_score_key(key, score, member), lww.new(RecordType.ZSET_MEMBER, s, node, b"")))
        elif ctype == CT.LIST:
            out.append((K.encode_list_key(key, K.LIST_CENTER + i), listelem.new(b"item%d" % i, s, node)))
        elif ctype == CT.STREAM:
            out.append((K.encode_stream_key(key, 1000 + i, node << 20),
                        stream.new([(b"f", b"%d" % i), (b"g", b"x")], s, node)))
        elif ctype == CT.HLL:
            bucket, rank = hll.observe(b"element%d" % i)
            out.append((K.encode_hll_key(key, bucket), hll.new(rank, s, node)))
        else:
            raise ValueError(ctype)
    return out


def build(ks: Keyspace, key: bytes, ctype: int, n: int, head_ttl: int = 0, member_ttl: int = 0,
          config: bytes = b"") -> bytes:
    """Write a collection of ``n`` elements at ``key`` (a new head, or onto its live head);
    returns the head record."""
    hk = K.encode_head_key(key)
    now = ks.now()
    h = ks.get(hk)
    recs = []
    if h is None or not env.is_live(h, now):
        h = head.new(ctype, ks.stamp(), ks.node_id, prior=h, now_ms=now, ttl_deadline_ms=head_ttl, config=config)
    elems = element_records(ks, key, ctype, n, member_ttl)
    if ctype == CT.STREAM and n:
        h = head.with_last_id(h, 1000 + n - 1, ks.node_id << 20, ks.stamp(), ks.node_id)
    recs.append((hk, h))
    ks.apply(recs + elems)
    return ks.get(hk)


def content(ks: Keyspace, key: bytes) -> dict | None:
    """A collection as plain values: its type, head TTL, stream state and, per element
    kind, (suffix, value, TTL) of every live element; None if no live collection."""
    now = ks.now()
    found = ks.live_record(key, now)
    if found is None or found[0][K.TAG_AT] != K.ORD_HEAD:
        return None
    h = found[1]
    payload = head.head_of(h)
    out: dict = {"type": head.type_name(h), "ctype": payload.ctype, "ttl": env.ttl_of(h),
                 "last_id": (payload.last_ms, payload.last_seq), "config": payload.config}
    for kind in registry.element_kinds(payload.ctype):
        items = []
        for suffix, rec in ks.elements(kind.tag, key, h, now):
            if kind.merge is orswot.merge:
                value = orswot.value(rec, now)
            elif kind.merge is hll.merge:
                value = bytes((hll.value(rec),))  # (the rank: the generation is the head's)
            else:
                value = rec[env.HEADER:]
            items.append((suffix, value, env.ttl_of(rec)))
        out[kind.name] = items
    return out


def element_versions(ks: Keyspace, key: bytes) -> list[tuple[int, int]]:
    """(hlc, origin) of every live element record of the collection ``key``."""
    now = ks.now()
    found = ks.live_record(key, now)
    assert found is not None
    out = []
    for kind in registry.element_kinds(head.ctype_of(found[1])):
        for _, rec in ks.elements(kind.tag, key, found[1], now):
            out.append((env.hlc_of(rec), env.origin_of(rec)))
    return out


def stored(ks: Keyspace, key: bytes) -> list[bytes]:
    """Every stored internal key of ``key``'s records (live or not), all tags."""
    keys = [K.encode_string_key(key), K.encode_head_key(key)]
    out = [k for k in keys if ks.get(k) is not None]
    for kind in registry.KINDS:
        if kind.is_key:
            continue
        prefix = kind.prefix(key)
        out += [k for k, _ in ks.engine.scan(prefix, prefix_end(prefix))]
    return out
