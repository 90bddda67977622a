"""The record-kind registry: one row per internal-key tag, the one table every layer reads.

Each kind of record the data model stores is one ``RecordKind`` row, keyed by the tag
byte after the partition id. The row says everything the layers around core need to
know about the records under that tag:

- the key codec (``encode`` / ``decode`` from ``keys``, the validated ``user_key`` of
  an internal key, and the ``prefix`` of a user key's records under the tag);
- the envelope record types allowed under the tag and whether the collection-head flag
  is required (set for heads, clear for everything else);
- its role: a *key* record (a string or a collection head: what a TYPE check reads,
  what iteration and INFO count as one key), an *element* of a collection, gated by
  its head's delete clock (and then the clock an element is gated by, ``gate_clock``),
  or a *node* record outside the keyspace (an ACL user, a function library: neither a key
  nor gated; the engine reports its changes to the node apart from the change feed);
- its merge function (``merge.merge`` dispatches on it);
- its payload check: a structured payload that merge or a read would parse (counters,
  heads, ORSWOT elements, HLL registers, stream entries, the empty score index) must
  parse, or the record is bad (``check_record``, which replication runs on every record
  a peer ships);
- its sweep rule (``sweep.PartitionSweep`` applies it): when the record may be
  physically removed.

    tag  kind          record types         role     head  merge      payload check            sweep
    's'  string        string, counter      key      no    pncounter  a live counter parses    record
    'M'  head          hash..stream, hll    key      yes   head       head, ctype == rtype     head
    'h'  hash-field    hash-field           element  no    orswot     canonical element        element
    'S'  set-member    set-member           element  no    orswot     canonical element        element
    'z'  zset-member   zset-member          element  no    orswot     element, 8-byte scores   element
    'Z'  zset-score    zset-member          element  no    lww        no payload               index
    'q'  list-element  list                 element  no    lww        (raw bytes)              element
    'H'  hll-register  hll-register         element  no    hll        one byte, rank <= 51     element
    'x'  stream-entry  stream-entry         element  no    lww        a live entry parses      element
    'X'  stream-counters stream-entry       element  no    counters   counters, never a tomb.  element
    'g'  stream-group  stream-entry         element  no    group      group                    element
    'c'  group-consumer stream-entry        element  no    consumer   consumer OR element      element
    'p'  group-pending stream-entry         element  no    pending    pending entry            element
    'U'  acl-user      string               node     no    lww        fmt 1 when live, no TTL  record
    'F'  function-lib  string               node     no    lww        fmt 1 when live          record
    'l'  retired: the whole-list blob. Reserved (``RETIRED``): never written, read or accepted.

Sweep rules (``core/sweep.py`` states and applies them): ``RECORD``, a tombstone or an
expired record once gc_grace has passed; ``ELEMENT``, also an element its head gates once
the delete clock and the element are older than gc_grace; ``HEAD``, as ``RECORD`` but
held while any element of its collection stays; ``INDEX`` (the zset score index), once
older than gc_grace and no live dot of its member record holds its score.

Adding a kind (stream consumer groups, ACL users, ...) is one row here plus its codec in
``keys``; ``tests/merge_laws/test_registry.py`` checks that every tag the codecs define
has a row and that merge, validation and the sweep read the row.
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from marekvs.core import envelope as env
from marekvs.core import acluser, funclib, head, hll, lww, orswot, pncounter, stream, streamgroup, zset
from marekvs.core import keys as K
from marekvs.core.envelope import RecordType
from marekvs.core.partition import partition_of


class Sweep(enum.Enum):
    RECORD = "record"  # tombstone / expiry past gc_grace
    HEAD = "head"  # as RECORD, held while an element of its collection stays
    ELEMENT = "element"  # as RECORD, or gated by its head's delete clock past gc_grace
    INDEX = "index"  # derived: past gc_grace once its source record no longer holds it


class InvalidRecord(ValueError):
    """A record that breaks its kind's key layout, envelope or payload format."""


@dataclass(frozen=True, slots=True)
class RecordKind:
    tag: bytes  # the one tag byte after the partition id
    name: str
    encode: Callable[..., bytes]  # keys.encode_*: (user key, element fields...) -> internal key
    decode: Callable[[bytes], object]  # keys.decode_*: internal key -> its fields (KeyDecodeError)
    user_key: Callable[[bytes], bytes]  # validated user key of an internal key (KeyDecodeError)
    prefix: Callable[[bytes], bytes]  # user key -> the key (string) or prefix of its records
    rtypes: frozenset[int]  # envelope record types allowed under the tag
    is_key: bool  # a key record (string, head), else an element of a collection
    head_flag: bool  # the envelope's collection-head flag must be set (else clear)
    merge: Callable[[bytes, bytes], bytes]
    check_payload: Callable[[bytes], None]  # whole record -> None, ValueError if bad
    sweep: Sweep
    ctype: int | None = None  # elements: the collection type of the head that gates them
    gate_clock: Callable[[bytes], int] | None = None  # elements: compared with the delete clock

    @property
    def code(self) -> int:
        return self.tag[0]

    @property
    def is_node(self) -> bool:
        """A node-level record outside the keyspace (neither a key nor an element)."""
        return not self.is_key and self.ctype is None


# -- payload checks ------------------------------------------------------------------------
# What merge or a read parses must parse. Heads and ORSWOT elements are parsed by their
# merge whatever the tombstone bit says; a tombstone's payload in the LWW kinds is never read.

def _no_check(record: bytes) -> None:
    return None


def _check_string(record: bytes) -> None:
    if pncounter.is_counter(record):
        pncounter.PNCounter.from_bytes(record[env.HEADER:])


def _check_head(record: bytes) -> None:
    h = head.from_bytes(record[env.HEADER:])
    if h.ctype != env.rtype_of(record):
        raise ValueError(f"collection type {h.ctype} differs from the record type {env.rtype_of(record)}")


def _descending(dots: list[orswot.Dot]) -> bool:
    return all(a > b for a, b in zip(dots, dots[1:]))


def _check_element(record: bytes) -> None:
    e = orswot.from_bytes(record[env.HEADER:])
    live = [d for d, _ in e.live]
    covered = list(e.covered)
    if len(live) > orswot.LIVE_CAP:
        raise ValueError(f"{len(live)} live dots (at most {orswot.LIVE_CAP})")
    if not _descending(live) or not _descending(covered):
        raise ValueError("dots not in canonical (strictly descending) order")
    if not set(live).isdisjoint(covered):
        raise ValueError("a dot is both live and covered")
    if bool(record[0] & env.FLAG_TOMBSTONE) == bool(live):
        raise ValueError("tombstone flag disagrees with the live dots")


def _check_zset_member(record: bytes) -> None:
    _check_element(record)
    zset.check_member(record)  # 8-byte binary64 scores, no NaN


def _check_score_index(record: bytes) -> None:
    if len(record) != env.ENVELOPE_SIZE:
        raise ValueError("a zset score index record carries no payload")


def _check_hll(record: bytes) -> None:
    if hll.from_bytes(record[env.HEADER:])[0] > hll.MAX_RANK:
        raise ValueError(f"rank above {hll.MAX_RANK}")


def _check_stream(record: bytes) -> None:
    if not record[0] & env.FLAG_TOMBSTONE:
        stream.from_bytes(record[env.HEADER:])


def _check_function(record: bytes) -> None:
    if not record[0] & env.FLAG_TOMBSTONE:
        funclib.from_bytes(record[env.HEADER:])


# -- rows --------------------------------------------------------------------------------

def _user_key_of(decode: Callable[[bytes], tuple[Any, ...]]) -> Callable[[bytes], bytes]:
    def user_key(ikey: bytes) -> bytes:
        uk: bytes = decode(ikey)[0]
        return uk
    return user_key


def _prefix_of(tag: bytes) -> Callable[[bytes], bytes]:
    def prefix(userkey: bytes) -> bytes:
        return K.collection_prefix(tag, userkey)
    return prefix


def _element(tag: bytes, name: str, encode: Callable[..., bytes],
             decode: Callable[[bytes], tuple[Any, ...]], rtype: int, ctype: int,
             merge: Callable[[bytes, bytes], bytes], check_payload: Callable[[bytes], None],
             gate_clock: Callable[[bytes], int] = env.hlc_of) -> RecordKind:
    return RecordKind(tag, name, encode, decode, _user_key_of(decode), _prefix_of(tag),
                      frozenset((rtype,)), is_key=False, head_flag=False, merge=merge,
                      check_payload=check_payload, sweep=Sweep.ELEMENT, ctype=ctype,
                      gate_clock=gate_clock)


_CT = head.CollectionType

STRING = RecordKind(
    K.TAG_STRING, "string", K.encode_string_key, K.decode_string_key, K.decode_string_key,
    K.encode_string_key, frozenset((RecordType.STRING, RecordType.COUNTER)), is_key=True,
    head_flag=False, merge=pncounter.merge, check_payload=_check_string, sweep=Sweep.RECORD)
HEAD = RecordKind(
    K.TAG_HEAD, "head", K.encode_head_key, K.decode_head_key, K.decode_head_key,
    K.encode_head_key, frozenset(head.TYPE_NAMES), is_key=True, head_flag=True,
    merge=head.merge, check_payload=_check_head, sweep=Sweep.HEAD)
HASH_FIELD = _element(K.TAG_HASH, "hash-field", K.encode_hash_field_key, K.decode_hash_field_key,
                      RecordType.HASH_FIELD, _CT.HASH, orswot.merge, _check_element, orswot.gate_clock)
SET_MEMBER = _element(K.TAG_SET, "set-member", K.encode_set_member_key, K.decode_set_member_key,
                      RecordType.SET_MEMBER, _CT.SET, orswot.merge, _check_element, orswot.gate_clock)
ZSET_MEMBER = _element(K.TAG_ZSET, "zset-member", K.encode_zset_member_key, K.decode_zset_member_key,
                       RecordType.ZSET_MEMBER, _CT.ZSET, orswot.merge, _check_zset_member, orswot.gate_clock)
ZSET_SCORE = dataclasses.replace(
    _element(K.TAG_ZSCORE, "zset-score", K.encode_zset_score_key, K.decode_zset_score_key,
             RecordType.ZSET_MEMBER, _CT.ZSET, lww.merge, _check_score_index),
    sweep=Sweep.INDEX)
LIST_ELEMENT = _element(K.TAG_LIST, "list-element", K.encode_list_key, K.decode_list_key,
                        RecordType.LIST, _CT.LIST, lww.merge, _no_check)
HLL_REGISTER = _element(K.TAG_HLL, "hll-register", K.encode_hll_key, K.decode_hll_key,
                        RecordType.HLL_REGISTER, _CT.HLL, hll.merge, _check_hll, hll.gate_clock)
STREAM_ENTRY = _element(K.TAG_STREAM, "stream-entry", K.encode_stream_key, K.decode_stream_key,
                        RecordType.STREAM_ENTRY, _CT.STREAM, lww.merge, _check_stream)

# Streams beside their entries (core/stream.py, core/streamgroup.py): per-origin counters
# and the consumer groups. They share the stream entries' record type (the 3-bit type has
# no free value); the tag picks the merge and each payload starts with its own format byte.
# Gated by the stream head like every element (by their hlc); a group's own destroy clock
# gates its consumers and pending entries at read time (streamgroup.py).
STREAM_COUNTERS = _element(K.TAG_STREAM_COUNTER, "stream-counters", K.encode_stream_counter_key,
                           K.decode_stream_counter_key, RecordType.STREAM_ENTRY, _CT.STREAM,
                           stream.merge_counters, stream.check_counters)
STREAM_GROUP = _element(K.TAG_GROUP, "stream-group", K.encode_group_key, K.decode_group_key,
                        RecordType.STREAM_ENTRY, _CT.STREAM, streamgroup.merge_group,
                        streamgroup.check_group)
GROUP_CONSUMER = _element(K.TAG_CONSUMER, "group-consumer", K.encode_consumer_key,
                          K.decode_consumer_key, RecordType.STREAM_ENTRY, _CT.STREAM,
                          streamgroup.merge_consumer, streamgroup.check_consumer)
GROUP_PENDING = _element(K.TAG_PENDING, "group-pending", K.encode_pending_key, K.decode_pending_key,
                         RecordType.STREAM_ENTRY, _CT.STREAM, streamgroup.merge_pending,
                         streamgroup.check_pending)

# Node-level records: not keys, not gated by a head; swept as any record once deleted
ACL_USER = RecordKind(
    K.TAG_USER, "acl-user", K.encode_user_key, K.decode_user_key, K.decode_user_key,
    K.encode_user_key, frozenset((acluser.RTYPE,)), is_key=False, head_flag=False, merge=lww.merge,
    check_payload=acluser.check, sweep=Sweep.RECORD)

FUNCTION_LIBRARY = RecordKind(
    K.TAG_FUNCTION, "function-library", K.encode_function_key, K.decode_function_key,
    K.decode_function_key, K.encode_function_key, frozenset((RecordType.STRING,)), is_key=False,
    head_flag=False, merge=lww.merge, check_payload=_check_function, sweep=Sweep.RECORD)

KINDS: tuple[RecordKind, ...] = (STRING, HEAD, HASH_FIELD, SET_MEMBER, ZSET_MEMBER, ZSET_SCORE,
                                 LIST_ELEMENT, HLL_REGISTER, STREAM_ENTRY, STREAM_COUNTERS,
                                 STREAM_GROUP, GROUP_CONSUMER, GROUP_PENDING, ACL_USER, FUNCTION_LIBRARY)

# Tags that no kind may take again. Nothing writes or reads them; a peer shipping one is
# refused; a record found under one locally merges as an LWW register and is swept by
# the RECORD rule, as any record of an unknown tag.
RETIRED: dict[bytes, str] = {
    K.TAG_LIST_RETIRED: "whole-list LWW blob (lists are per-element records under 'q')",
}

BY_TAG: dict[bytes, RecordKind] = {k.tag: k for k in KINDS}
# ikey[2] -> its row, None for a tag without one: the lookup of the hot paths. Built once
# here and never changed by the code (a test patches one slot to add a kind).
BY_CODE: list[RecordKind | None] = [BY_TAG.get(bytes((c,))) for c in range(256)]

# What iteration over keys needs: the tags of key records, sorted (memcmp order within a
# partition), e.g. for ``Engine.scan_tags(first_pid, KEY_TAGS)``.
KEY_TAGS: bytes = bytes(sorted(k.code for k in KINDS if k.is_key))
ELEMENT_TAGS: bytes = bytes(sorted(k.code for k in KINDS if k.ctype is not None))
# Node-level records (ACL users, function libraries): what the engine reports apart from
# the change feed (``Engine.on_node_change``)
NODE_TAGS: bytes = bytes(sorted(k.code for k in KINDS if k.is_node))

# Streams: state kept beside a key's value that Redis changes without "modifying the key"
# (no signalModifiedKey: consumer groups, their consumers and pending entries, the
# counters XSETID sets). WATCH ignores changes to these records, as Redis's does.
UNWATCHED_CODES: frozenset[int] = frozenset(k.code for k in (STREAM_COUNTERS, STREAM_GROUP, GROUP_CONSUMER,
                                                              GROUP_PENDING))


def element_kinds(ctype: int) -> tuple[RecordKind, ...]:
    """The element kinds a collection of type ``ctype`` keeps its records under (a
    zset: members and the score index)."""
    return tuple(k for k in KINDS if k.ctype == ctype)


# The kind whose live records are a collection's elements, per collection type: what
# makes it non-empty (``head.present``), what its size counts. A stream's counters,
# groups, consumers and pending entries, and a zset's score index, are not elements.
CONTENT: dict[int, RecordKind] = {
    _CT.HASH: HASH_FIELD, _CT.SET: SET_MEMBER, _CT.ZSET: ZSET_MEMBER, _CT.LIST: LIST_ELEMENT,
    _CT.STREAM: STREAM_ENTRY, _CT.HLL: HLL_REGISTER,
}
CONTENT_CODES: frozenset[int] = frozenset(k.code for k in CONTENT.values())


# -- validation ----------------------------------------------------------------------------

def check_record(ikey: bytes, value: bytes) -> RecordKind:
    """Validate one record (internal key + stored value) against its kind's row: a known
    tag, its key layout, the partition id of its user key, a whole envelope without
    reserved bits, the head flag, an allowed record type and a payload that parses.
    Returns the row; ``InvalidRecord`` says what is wrong."""
    if len(ikey) < 3:
        raise InvalidRecord(f"internal key of {len(ikey)} bytes is truncated")
    tag = ikey[2:3]
    kind = BY_CODE[ikey[2]]
    if kind is None:
        if tag in RETIRED:
            raise InvalidRecord(f"retired key tag {tag!r}: {RETIRED[tag]}")
        raise InvalidRecord(f"unknown key tag {tag!r}")
    try:
        userkey = kind.user_key(ikey)
    except ValueError as e:
        raise InvalidRecord(f"malformed {tag!r} key: {e}") from None
    if partition_of(userkey) != (ikey[0] << 8 | ikey[1]):
        raise InvalidRecord("key's partition id does not match its user key")
    if len(value) < env.ENVELOPE_SIZE:
        raise InvalidRecord(f"value of {len(value)} bytes is shorter than the 19-byte envelope")
    flags = value[0]
    if flags & 0xE0:
        raise InvalidRecord(f"reserved envelope flag bits set ({flags:#04x})")
    if bool(flags & env.FLAG_HEAD) != kind.head_flag:
        raise InvalidRecord("collection-head flag does not match the key")
    rtype = (flags >> 2) & 7
    if rtype not in kind.rtypes:
        raise InvalidRecord(f"record type {rtype} does not belong under tag {tag!r}")
    try:
        kind.check_payload(value)
    except ValueError as e:
        raise InvalidRecord(f"bad {kind.name} payload: {e}") from None
    return kind
