"""The keyspace: what every type shares, between the commands and the storage engine.

A ``Keyspace`` is one node's view of its records: lookups that resolve a user key to the
record that holds it, type resolution with the WRONGTYPE check, liveness, deletes and TTLs
of whole keys, collection heads, element scans, and iteration over every key. The type
modules beside it (``strings``, and one per collection type) hold the operations of their
type as functions taking the Keyspace. Nothing here builds a reply: operations return
values or raise a typed status (``status.py``).

Every write goes through the ONE apply path (``Engine.apply``), stamped with the node's
HLC and id. Type resolution follows the spec's "What a TYPE check reads": the string key
first, then the collection head. A record is live under core's rule
(``envelope.is_live``): not a tombstone, deadline not passed; an expired record reads as
a tombstone whose clock is the deadline. An element of a collection is live if it is
live itself and newer than its head's delete clock (``head.element_live``).

Hot paths inline the liveness rule, slicing the header with core's named bounds
(``record[envelope.TTL_AT:envelope.HEADER]`` ...: literal slices, which mypyc compiles;
it mis-compiles an index by a ``slice`` object); tests/unit/test_keyspace.py pins each
inlined copy to ``envelope.is_live``.
"""

from __future__ import annotations

from typing import Callable, ClassVar, Final, Iterator, TypeVar

from marekvs.core import envelope as env
from marekvs.core import head
from marekvs.core import keys as K
from marekvs.core import registry
from marekvs.core import lww
from marekvs.core.envelope import RecordType
from marekvs.core.hlc import HLC
from marekvs.keyspace import counts, members
from marekvs.keyspace.changes import ChangeFeed
from marekvs.keyspace.counts import content_prefix
from marekvs.keyspace.status import WrongType
from marekvs.storage.engine import Engine, prefix_end

_TTL_AT: Final = env.TTL_AT  # record[_TTL_AT:_HEADER] is the deadline
_HEADER: Final = env.HEADER
_NO_TTL: Final = env.NO_TTL
_TOMB = env.FLAG_TOMBSTONE
_ORD_STRING = K.ORD_STRING
_ORD_HEAD = K.ORD_HEAD
_TAG_AT = K.TAG_AT
_USERKEY_AT = K.STRING_USERKEY_AT

KeyRecord = tuple[bytes, bytes, bytes]  # (user key, ikey, record) of a live key
T = TypeVar("T")


is_live = env.is_live
HOMES_KEPT = 4096  # typed homes ``Keyspace.lookup`` remembers


class Home:
    """What a command needs of a collection key (``Keyspace.lookup``): its string key (a
    live string there makes the key a string), head key, head record (live, or dead: the
    typed home of elements written after its death; ``Keyspace.collection``), content
    prefix (``counts.content_prefix``) and delete clock."""

    __slots__ = ("ik", "hk", "head", "prefix", "dc", "stable")

    def __init__(self, ik: bytes, hk: bytes, h: bytes, prefix: bytes, dc: int, stable: bool):
        self.ik, self.hk, self.head, self.prefix, self.dc = ik, hk, h, prefix, dc
        # a live head without a deadline: what ``Keyspace.head_for_write`` would return
        # as it is (so a write may use it), and what ``lookup`` remembers
        self.stable = stable


class Keyspace:
    """One node's keyspace: the engine it writes through, the clock it stamps with."""

    def __init__(self, engine: Engine, hlc: HLC, node_id: int):
        self.engine = engine
        self.hlc = hlc
        self.node_id = node_id
        # the command clock (ms): the wall clock the HLC reads, so TTL deadlines and
        # stamps agree (tests freeze it by replacing this attribute)
        self.now = hlc.wall
        self.hits = self.misses = 0  # INFO stats keyspace_hits / keyspace_misses (reads)
        self.on_miss: Callable[[bytes], None] | None = None  # keyspace notification 'keymiss'
        self.apply = engine.apply
        self.get = engine.get
        self.head_pids = engine.head_pids
        # which records changed, whoever wrote them (keyspace/changes.py): the state each
        # type keeps beside its records follows it, and so do the node's followers
        self.changes = ChangeFeed(engine)
        # live elements per collection, kept from the change feed (keyspace/counts.py):
        # sizes, and whether a collection exists; the cursors of HSCAN/SSCAN in progress
        self.counts = counts.Counts(self)
        self.cursors = members.Cursors()
        # (user key, ctype) -> its typed home, while its head record stays (``lookup``)
        self.homes: dict[tuple[bytes, int], Home] = {}
        # in-memory state a type module keeps beside the records, by its name (the list
        # hints of keyspace/lists.py, the zset mirrors of keyspace/zsets.py, the stream
        # summaries, the HLL register caches): ``extension``. Each follows ``changes``
        # itself, while it holds something.
        self.extensions: dict[str, object] = {}

    def stamp(self) -> int:
        return self.hlc.now()

    # -- per-type state ------------------------------------------------------------------
    def extension(self, name: str, factory: Callable[["Keyspace"], T]) -> T:
        """State a type module keeps with this keyspace (caches, an index it maintains),
        made by ``factory(self)`` on first use: one per node, gone with it. The factory's
        state follows ``self.changes`` on its own (the one feed of every record the apply
        path changed, local or replicated): no caller wires it."""
        x = self.extensions.get(name)
        if x is None:
            x = self.extensions[name] = factory(self)
        return x  # type: ignore[return-value]

    # -- lookups -------------------------------------------------------------------
    def live_head(self, pid: int, string_ik: bytes, now: int) -> tuple[bytes, bytes] | None:
        """(head key, record) of the collection that holds the user key whose string key
        is ``string_ik`` (``present``), or None; no read in a partition that never held a
        head. A dead head whose collection exists (a live element newer than its death)
        comes as the live head a write to it would re-create (``revived_head``)."""
        if not self.head_pids[pid]:
            return None
        hk = K.head_key_of_string_key(string_ik)
        h = self.get(hk)
        if h is None or not self.present(hk, h, now):
            return None
        return (hk, h) if is_live(h, now) else self.revived_head(hk, h, now)

    def head_under(self, pid: int, ik: bytes, now: int) -> tuple[bytes, bytes] | None:
        """The live collection head a string write to the string key ``ik`` replaces
        (a live string there means there is none)."""
        return None if is_live(self.get(ik), now) else self.live_head(pid, ik, now)

    def live_record(self, key: bytes, now: int) -> tuple[bytes, bytes] | None:
        """(ikey, record) of the live record that holds ``key``, of any type."""
        pid, ik = K.locate_string(key)
        rec = self.get(ik)
        if rec is not None and is_live(rec, now):
            return ik, rec
        return self.live_head(pid, ik, now)

    def read_record(self, key: bytes, now: int) -> tuple[bytes, bytes] | None:
        """``live_record`` for a read command: counted as a keyspace hit or miss (INFO)."""
        found = self.live_record(key, now)
        self.counted(key, found is not None)
        return found

    # -- reads as Redis counts them (INFO stats keyspace_hits / keyspace_misses) ----------
    # Redis counts one hit or miss per key a read command looks up (``lookupKeyRead``): a
    # key that exists is a hit, whatever its type (a WRONGTYPE error is a hit too), an
    # absent key a miss, which also fires the 'keymiss' notification. ``counted`` is the
    # one place that counts; ``read`` and ``found`` apply it to the typed lookup.
    def counted(self, key: bytes, exists: bool, event: bool = True) -> None:
        """A read command looked ``key`` up and found it (``exists``) or not; ``event``
        False: a miss fires no 'keymiss' (OBJECT's lookup, as Redis's)."""
        if exists:
            self.hits += 1
        else:
            self.misses += 1
            if event and self.on_miss is not None:
                self.on_miss(key)

    def type_name(self, key: bytes, now: int) -> str:
        found = self.read_record(key, now)
        if found is None:
            return "none"
        ikey, rec = found
        return "string" if ikey[_TAG_AT] == _ORD_STRING else head.type_name(rec)

    def exists(self, key: bytes, now: int) -> bool:
        return self.live_record(key, now) is not None

    # -- collections -------------------------------------------------------------------
    def collection(self, key: bytes, ctype: int, now: int) -> tuple[bytes, bytes | None]:
        """(head key, head record or None) of the collection ``key`` of type ``ctype``:
        its *typed home*, the head record of this type stored at the key, live or dead,
        whether or not the collection exists (``present`` says; reads gate every element
        by the head's delete clock, ``head_for_write`` re-creates a dead or emptied head);
        None when the key holds no head of this type. WrongType if a live string or an
        existing collection of another type holds the key."""
        hk, h, _ = self.typed_head(key, ctype, now)
        return hk, h

    def typed_head(self, key: bytes, ctype: int, now: int) -> tuple[bytes, bytes | None, bytes | None]:
        """``collection``'s answer and the head record it read at the head key (of any
        type; None when there is none), which a write carries forward (``head_to_write``):
        each record is read once per command."""
        pid, ik = K.locate_string(key)
        s = self.get(ik)
        if s is not None and is_live(s, now):
            raise WrongType()
        hk = K.head_key_of_string_key(ik)
        raw = self.get(hk) if self.head_pids[pid] else None
        if raw is None:
            return hk, None, None
        if head.ctype_of(raw) == ctype:
            return hk, raw, raw
        if self.present(hk, raw, now):
            raise WrongType()
        return hk, None, raw  # another type's head that stands for no key

    def existing(self, key: bytes, ctype: int, now: int) -> tuple[bytes, bytes] | None:
        """(head key, head record) of the collection ``key`` of type ``ctype`` if it
        exists (``present``; its head live, or dead with live elements), else None.
        WrongType as ``collection``."""
        hk, h = self.collection(key, ctype, now)
        if h is None or not self.present(hk, h, now):
            return None
        return hk, h

    def lookup(self, key: bytes, ctype: int, now: int) -> Home | None:
        """The typed home of the collection ``key`` of type ``ctype`` (``collection``),
        with what the commands need of it: its content prefix and delete clock. None when
        the key holds no head of this type; WrongType as ``collection``. Remembered per
        (key, type) while the head record stays the same object in the engine's cache
        (any change of the head, local or replicated, stores a new one), it has no
        deadline and no live string appeared at the key: a hit costs two dict reads and
        one point read of the string key instead of the partition hash, two key builds
        and the delete clock. The one lookup every collection family reads through."""
        r = self._remembered(key, ctype, now)
        if r is not None:
            return r
        hk, h = self.collection(key, ctype, now)  # (WrongType from here)
        return None if h is None else self._home(key, ctype, hk, h, now)

    def _remembered(self, key: bytes, ctype: int, now: int) -> Home | None:
        """``lookup``'s remembered home, if it still holds."""
        r = self.homes.get((key, ctype))
        if r is not None:
            g = self.get
            s = g(r.ik)
            if g(r.hk) is r.head and (s is None or not is_live(s, now)):
                return r
            del self.homes[(key, ctype)]
        return None

    def _home(self, key: bytes, ctype: int, hk: bytes, h: bytes, now: int, stored: bool = True) -> Home:
        """The ``Home`` of head ``h`` at ``hk``, remembered when it is stable (and ``stored``:
        a head a write is about to create is neither, until it is in the engine)."""
        stable = stored and h[_TTL_AT:_HEADER] == _NO_TTL and is_live(h, now)
        r = Home(K.string_key_in(K.pid_of_ikey(hk), key), hk, h, content_prefix(hk, h), head.delete_clock(h, now),
                 stable)
        if stable:
            homes = self.homes
            if len(homes) >= HOMES_KEPT:
                homes.clear()
            homes[(key, ctype)] = r
        return r

    def read(self, key: bytes, ctype: int, now: int) -> Home | None:
        """``lookup`` for a read command. A key of another type is counted as a hit
        (WrongType raised), no home as a miss; a home is counted by the caller once it
        has read (``found``): whether the collection exists may take its element."""
        try:
            r = self.lookup(key, ctype, now)
        except WrongType:
            self.counted(key, True)
            raise
        if r is None:
            self.counted(key, False)
        return r

    def found(self, key: bytes, r: Home, hit: bool, now: int) -> None:
        """Count the read of ``key`` (home ``r``) that found an element (``hit``: the key
        exists) or not: then a hit only if the collection exists (``present``)."""
        self.counted(key, hit or self.present(r.hk, r.head, now))

    def read_existing(self, key: bytes, ctype: int, now: int) -> tuple[bytes, bytes] | None:
        """``existing`` for a read command, counted (a key of another type: a hit)."""
        r = self.read(key, ctype, now)
        if r is None:
            return None
        exists = self.present(r.hk, r.head, now)
        self.counted(key, exists)
        return (r.hk, r.head) if exists else None

    def head_for_write(self, key: bytes, ctype: int, now: int) -> tuple[bytes, bytes, bool]:
        """(head key, head record, created) for a write to the collection ``key``: its
        live head, or a new head (carrying a dead head's delete clock forward) that the
        caller writes in the same apply as the first element. WrongType as
        ``collection``. A live head is kept while the collection exists or has no TTL;
        an emptied collection with a TTL, and one whose head is dead, get a new head
        without one (the key was gone, as in Redis)."""
        hk, h, raw = self.typed_head(key, ctype, now)
        return self.head_to_write(hk, h, raw, ctype, now)

    def head_to_write(self, hk: bytes, h: bytes | None, raw: bytes | None, ctype: int,
                    now: int) -> tuple[bytes, bytes, bool]:
        """``head_for_write`` of ``typed_head``'s answer."""
        if h is not None and is_live(h, now) and (h[_TTL_AT:_HEADER] == _NO_TTL or self.present(hk, h, now)):
            return hk, h, False
        return hk, head.new(ctype, self.hlc.now(), self.node_id, prior=raw, now_ms=now), True

    def write_home(self, key: bytes, ctype: int, now: int) -> tuple[Home, bool]:
        """(the typed home a write to the collection ``key`` goes to, whether its head is
        new: ``head_for_write``, the caller writes it in the same apply as its first
        element). A remembered home (``lookup``) is written as it is: the hot path of
        every collection write, and each record is read once either way."""
        r = self._remembered(key, ctype, now)
        if r is not None:
            return r, False
        hk, h, raw = self.typed_head(key, ctype, now)  # (WrongType from here)
        hk, h, created = self.head_to_write(hk, h, raw, ctype, now)
        return self._home(key, ctype, hk, h, now, not created), created

    def elements(self, tag: bytes, key: bytes, head_rec: bytes | None, now: int,
                 start: bytes = b"") -> Iterator[tuple[bytes, bytes]]:
        """(element key suffix, record) of every live element of the collection ``key``
        under ``tag`` from the suffix ``start`` on, in key order (a prefix scan filtered
        by liveness against the head's delete clock)."""
        prefix = K.collection_prefix(tag, key)
        n = len(prefix)
        for ek, ev in self.engine.scan(prefix + start, prefix_end(prefix)):
            if is_live(ev, now) and head.element_live(head_rec, ev, now):
                yield ek[n:], ev

    # -- existence: one rule for every collection type (core/head.py, "Existence") ------
    # Removing elements never deletes a collection (no head tombstone is written when
    # one becomes empty: it would also gate an add made concurrently on another node);
    # a collection exists while its head is live and its type keeps an empty collection
    # (streams, HyperLogLogs) or it has a live element. A dead head (DEL, FLUSHALL,
    # expiry of the key) with an element newer than its death stands for an existing key
    # too: an add made on a node that had not seen the DEL yet writes no head (the head
    # was live there), and the data model keeps such an element ("DEL beats the older
    # elements, not one written after it"), so the key exists everywhere once both
    # arrive. It reads as a key without TTL; the next write re-creates its head.
    def present(self, hk: bytes, h: bytes, now: int) -> bool:
        """The collection whose head (live or dead) is ``h`` at ``hk`` exists."""
        if is_live(h, now) and head.ctype_of(h) in head.KEEPS_EMPTY:
            return True
        return self.counts.nonempty(hk, h, now)

    def revived_head(self, hk: bytes, h: bytes, now: int) -> tuple[bytes, bytes]:
        """(head key, the live head a write would re-create) for the dead head ``h`` of
        an existing collection (``present``)."""
        return hk, head.new(head.ctype_of(h), self.hlc.now(), self.node_id, prior=h, now_ms=now)

    # -- whole keys ------------------------------------------------------------------
    def delete_records(self, key: bytes, now: int) -> list[tuple[bytes, bytes]]:
        """Tombstones for whatever live record holds ``key`` (none if absent): a
        string's LWW tombstone, or ONE head tombstone for a whole collection."""
        found = self.live_record(key, now)
        return [] if found is None else self.tombstones(found)

    def tombstones(self, found: tuple[bytes, bytes]) -> list[tuple[bytes, bytes]]:
        """``delete_records`` of the live record ``found`` (``live_record``'s answer) the
        caller already read."""
        ikey, rec = found
        if ikey[_TAG_AT] == _ORD_STRING:
            return [(ikey, lww.tombstone(RecordType.STRING, self.hlc.now(), self.node_id))]
        return [self.head_tombstone(ikey, rec)]

    def head_tombstone(self, hk: bytes, head_rec: bytes) -> tuple[bytes, bytes]:
        return hk, head.tombstone(head_rec, self.hlc.now(), self.node_id)

    def delete(self, key: bytes, now: int) -> bool:
        recs = self.delete_records(key, now)
        if recs:
            self.apply(recs)
        return bool(recs)

    def set_ttl(self, key: bytes, deadline: int, now: int) -> bool:
        """EXPIRE/PERSIST: an LWW rewrite of the envelope, payload unchanged."""
        found = self.live_record(key, now)
        if found is None:
            return False
        self.write_ttl(found, deadline)
        return True

    def write_ttl(self, found: tuple[bytes, bytes], deadline: int) -> None:
        """``set_ttl`` of the live record ``found`` (``live_record``'s answer) the caller
        already read: each record read once per command."""
        ikey, rec = found
        self.apply([(ikey, env.with_ttl(rec, self.hlc.now(), self.node_id, deadline))])

    # -- iteration -------------------------------------------------------------------
    # A user key can have a live string record and a live collection head at once (a
    # SET and a collection write made concurrently on two nodes). It reads as the
    # string (the spec's type check reads the string key first), so the iterations
    # below list it once, as the string ('M' sorts before 's' within a partition: a
    # partition's heads are held until its strings have been seen).
    # key records read per step of a whole-keyspace pass (a class-level setting: ClassVar, so
    # that compiled code reads it from the class, as interpreted code does)
    STEP_RECORDS: ClassVar[int] = 1024

    def key_runs(self, first_pid: int, now: int,
                 last_pid: int | None = None) -> Iterator[tuple[int, int, list[KeyRecord]]]:
        """(pid, key records read, live keys as (user key, ikey, record)) of every
        partition from ``first_pid`` to ``last_pid`` (default: the last of the engine's
        range, ``Engine.partitions``) that holds a string or head record, live or not,
        in order. One iterator (``Engine.scan_tags``): element records and empty
        partitions are skipped by seeks."""
        cur = -1
        n = 0
        keys: list[KeyRecord] = []
        heads: dict[bytes, KeyRecord] = {}
        for ikey, rec in self.engine.scan_tags(first_pid, registry.KEY_TAGS, last_pid):
            pid = K.pid_of_ikey(ikey)
            if pid != cur:
                if n:
                    keys.extend(heads.values())
                    yield cur, n, keys
                cur, n, keys, heads = pid, 0, [], {}
            n += 1
            if ikey[_TAG_AT] == _ORD_STRING:
                if not is_live(rec, now):
                    continue
                key = ikey[_USERKEY_AT:]
                if heads:
                    heads.pop(key, None)
                keys.append((key, ikey, rec))
            elif self.present(ikey, rec, now):
                key = K.user_key_of(ikey)
                heads[key] = (key, ikey, rec)  # (a dead head as stored: see revived_head)
        if n:
            keys.extend(heads.values())
            yield cur, n, keys

    def all_keys(self, now: int) -> Iterator[KeyRecord]:
        """(user key, ikey, record) of every live key, in partition order."""
        for step in self.all_keys_in_steps(now):
            yield from step

    def all_keys_in_steps(self, now: int) -> Iterator[list[KeyRecord]]:
        """``all_keys`` as one list per step of whole partitions holding at least
        ``STEP_RECORDS`` key records (the last one fewer), so that a caller can pause
        between them (``commands/stepwise.py``). One iterator, opened at the first
        step, reads one snapshot of the data."""
        out: list[KeyRecord] = []
        n = 0
        step = self.STEP_RECORDS
        for _, records, keys in self.key_runs(0, now):
            out += keys
            n += records
            if n >= step:
                yield out
                out = []
                n = 0
        yield out
