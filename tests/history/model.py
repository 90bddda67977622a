"""The reference model of the history checker: what the data model says a cluster holds
after a history of concurrent operations (crates_ref/DATA_MODEL.md).

A history is a list of operations (``Op``): a command (its argv) run on one node at one
time, its reply, and the operations that node knew of when it ran it (``known``: a
causally closed set, since the drivers deliver whole operations in causal order). The
model never looks at records or merges: from the argv, the reply and the *view* of the
running node (the model's own state of the keys computed from the operations it knew),
it derives each operation's effects in the vocabulary of the specification, and it
computes the state of a key from any causally closed set of operations by the
specification's rules, stated over whole histories instead of pairwise joins:

- Stamps. Operations take their stamps in the order the drivers run them (each runs
  at a later millisecond than the one before, on whichever node), so a stamp is
  ``(ms, op id, sub)`` and versions compare as tuples. An expiry at deadline ``d`` is the
  clock ``(d, -1, origin)``: below every stamp taken in that millisecond.
- Heads. A collection's head is a last-writer-wins register (creation, EXPIRE, PERSIST,
  DEL) with a delete clock: the greatest DEL stamp, every clock a re-creation folded
  in, and the head's own death (its DEL, or its expiry once passed).
- Observed-remove elements (hash fields, set and zset members): an add is a dot with a
  value; a remove (HDEL, SREM, SPOP, ZREM, ZPOP..., SMOVE's source) covers the adds its
  node knew of; a dot is live if no remove covered it and fewer than four newer adds of
  the element exist (the lattice's cap, DATA_MODEL 15); the element is live if it has a
  live dot newer than the delete clock and its header (the newest add, remove or TTL
  write) has not expired. Its value is its newest live dot's.
- Last-writer-wins elements (list positions, stream entries): the newest write of the
  slot decides; live if it is a value newer than the delete clock. List positions are
  the data model's (LIST_CENTER, first - 1, last + 1, rebuilds compacted from the
  center).
- Strings: the newest *base* wins whole (SET, APPEND, DEL, a counter's start); the
  increments made on that base all count (PN counter); the envelope (TTL, tombstone)
  is the newest write on that base.
- HyperLogLog: a PFADD's registers carry the delete clock its node saw (its
  generation); a register counts if its generation is the key's delete clock now.
- One rule for every collection type: a collection exists if its head is live and it
  keeps its empty self (streams and HyperLogLogs, as in Redis) or has a live element,
  or if its head is dead and it has a live element (an add its DEL did not gate). No
  removal of elements deletes a key; only DEL (and RENAME's source, FLUSHALL, a STORE
  with an empty result, expiry) do.
- Streams: the last id is the greatest id added since the delete clock; ``*`` mints
  above it; consumer groups are live if created after the delete clock; an entry is
  pending in a group if some read delivered it and no XACK acknowledged it.

``Model.run`` returns what it found wrong with a reply (an acknowledged write the model
cannot explain); ``Model.state`` is the public state of a key, the same shape the
drivers read from a node (``observe``).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable

from marekvs.core import hll as core_hll

CENTER = 1 << 63
U64 = (1 << 64) - 1
MAX_ID = (U64, U64)
LIVE_CAP = 4
Version = tuple[int, int, int]
NO_VERSION: Version = (0, 0, 0)

# the types of the key pools (a pool's keys only ever hold its type)
POOL_TYPES = {b"s": "string", b"h": "hash", b"S": "set", b"z": "zset", b"l": "list", b"x": "stream",
              b"p": "hll"}
KEEPS_EMPTY = frozenset(("stream", "hll"))


def pool_of(key: bytes) -> bytes:
    return key.split(b":", 1)[0].rsplit(b"}", 1)[-1]


def type_of(key: bytes) -> str:
    return POOL_TYPES[pool_of(key)]


@dataclass
class Op:
    id: int
    node: int
    t: int  # the node's wall clock (ms) when it ran the op
    argv: list[bytes]
    reply: Any = None
    known: frozenset[int] = frozenset()  # the ops its node knew of (causally closed)
    deadline: int | None = None  # a TTL the op set, as the node computed it (None: t + the TTL)

    def v(self, sub: int = 0) -> Version:
        return (self.t, self.id, sub)


class Error(Exception):
    """A reply the model finds wrong."""


# =========================================================================================
# Per-type states computed from effects
# =========================================================================================

@dataclass
class Head:
    alive: bool = False  # a live head record (not deleted, not expired)
    deadline: int = 0  # its TTL, when alive
    dc: Version = NO_VERSION  # the delete clock
    written: bool = False  # any head record at all


@dataclass
class OrElem:
    value: bytes
    deadline: int
    dots: set[Version]  # every add dot (for a remove to cover)


@dataclass
class KeyState:
    """A key as the model computes it: internal detail for deriving effects, and the
    public view (``public``)."""

    kind: str
    head: Head = field(default_factory=Head)
    exists: bool = False
    deadline: int = 0
    # strings
    value: bytes | None = None
    base: Version = NO_VERSION
    base_value: int = 0
    counter: bool = False
    str_version: Version = NO_VERSION
    str_origin: int = 0
    # observed-remove collections: element -> (value, deadline, every dot)
    elems: dict[bytes, OrElem] = field(default_factory=dict)
    all_dots: dict[bytes, set[Version]] = field(default_factory=dict)
    # lists: position -> value (live); streams: id -> fields
    slots: dict[Any, Any] = field(default_factory=dict)
    last_id: tuple[int, int] = (0, 0)
    groups: dict[bytes, tuple[tuple[int, int], set]] = field(default_factory=dict)  # g -> (start, pending)
    delivered: dict[bytes, set] = field(default_factory=dict)
    registers: dict[int, int] = field(default_factory=dict)

    def public(self) -> Any:
        if not self.exists:
            return None
        k = self.kind
        if k == "string":
            return ("string", self.value, self.deadline)
        if k == "hash":
            return ("hash", {f: e.value for f, e in self.elems.items()}, self.deadline,
                    {f: e.deadline for f, e in self.elems.items() if e.deadline})
        if k == "set":
            return ("set", frozenset(self.elems), self.deadline)
        if k == "zset":
            return ("zset", zorder(self.elems), self.deadline)
        if k == "list":
            return ("list", [self.slots[p] for p in sorted(self.slots)], self.deadline)
        if k == "stream":
            return ("stream", [(i, self.slots[i]) for i in sorted(self.slots)], self.deadline, self.last_id,
                    {g: sorted(p) for g, (_, p) in sorted(self.groups.items())})
        if k == "hll":
            return ("hll", core_hll.count(self.registers), self.deadline)
        raise AssertionError(k)


def zorder(elems: dict[bytes, OrElem]) -> list[tuple[bytes, float]]:
    return sorted(((m, float(e.value)) for m, e in elems.items()), key=lambda x: (x[1], x[0]))


def _expiry_clock(deadline: int, origin: int) -> Version:
    return (deadline, -1, origin)


class Model:
    def __init__(self) -> None:
        self.ops: dict[int, Op] = {}
        self.effects: dict[bytes, list[tuple[int, tuple]]] = defaultdict(list)
        self.keys: set[bytes] = set()

    # -- the state of a key ----------------------------------------------------------------
    def state(self, key: bytes, known: frozenset[int] | set[int], now: int) -> KeyState:
        kind = type_of(key)
        effs = [e for oid, e in self.effects.get(key, ()) if oid in known]
        st = KeyState(kind)
        if kind == "string":
            _string_state(st, effs, now, lambda v: self.ops[v[1]].node if v[1] in self.ops else 0)
            return st
        st.head = h = _head_state(effs, now)
        if kind in ("hash", "set", "zset"):
            _or_state(st, effs, h.dc, now)
            n = len(st.elems)
        elif kind == "list":
            st.slots = _lww_live(effs, "pos", h.dc)
            n = len(st.slots)
        elif kind == "stream":
            _stream_state(st, effs, h.dc)
            n = len(st.slots)
        else:
            _hll_state(st, effs, h.dc)
            n = len(st.registers)
        # the one rule: see the module docstring
        st.exists = (h.alive and (kind in KEEPS_EMPTY or n > 0)) or (not h.alive and n > 0)
        st.deadline = h.deadline if (st.exists and h.alive) else 0
        return st

    def public(self, key: bytes, known: frozenset[int] | set[int], now: int) -> Any:
        return self.state(key, known, now).public()

    # -- running an op ---------------------------------------------------------------------
    def run(self, op: Op) -> None:
        """Record ``op`` (already run, reply known) and its effects; Error if its reply
        is not one the specification allows from its node's view."""
        self.ops[op.id] = op
        name = op.argv[0].decode().lower()
        fn: Callable[[Op], None] = getattr(self, "op_" + name)
        fn(op)

    def view(self, op: Op, key: bytes) -> KeyState:
        self.keys.add(key)
        return self.state(key, op.known, op.t)

    def emit(self, op: Op, key: bytes, effect: tuple) -> None:
        self.keys.add(key)
        self.effects[key].append((op.id, effect))

    def expect(self, op: Op, cond: bool, what: str) -> None:
        if not cond:
            raise Error(f"op {op.id} on node {op.node} {[a.decode(errors='replace') for a in op.argv]}: "
                        f"{what} (reply {op.reply!r})")

    def err(self, op: Op) -> bool:
        return isinstance(op.reply, Exception) or (isinstance(op.reply, str) and op.reply.startswith("ERR")) \
            or type(op.reply).__name__ == "Err"

    # -- whole keys ----------------------------------------------------------------------------
    def create(self, op: Op, key: bytes, st: KeyState, sub: int = 0) -> None:
        """A write to a collection that does not exist: a new head when the stored one
        is dead or carries a TTL (the key was gone), folding in its delete clock."""
        if not st.exists and (not st.head.alive or st.head.deadline):
            self.emit(op, key, ("head", op.v(sub), 0, st.head.dc))

    def delete(self, op: Op, key: bytes, st: KeyState, sub: int = 0) -> None:
        if st.kind == "string":
            self.emit(op, key, ("str", op.v(sub), op.v(sub), "tomb", None, 0))
        else:
            self.emit(op, key, ("del", op.v(sub)))

    def op_del(self, op: Op) -> None:
        n = 0
        for key in dict.fromkeys(op.argv[1:]):
            st = self.view(op, key)
            if st.exists:
                self.delete(op, key, st)
                n += 1
        self.expect(op, op.reply == n, f"DEL should count {n}")

    op_unlink = op_del

    def op_flushall(self, op: Op) -> None:
        for key in sorted(self.keys):
            st = self.view(op, key)
            if st.exists:
                self.delete(op, key, st)

    def deadline(self, op: Op, ms: int) -> int:
        return op.deadline if op.deadline is not None else op.t + ms

    def op_pexpire(self, op: Op) -> None:
        key, ms = op.argv[1], int(op.argv[2])
        st = self.view(op, key)
        self.expect(op, op.reply == int(st.exists), "PEXPIRE answers whether the key exists")
        if st.exists:
            self.ttl(op, key, st, self.deadline(op, ms))

    def op_persist(self, op: Op) -> None:
        key = op.argv[1]
        st = self.view(op, key)
        has = st.exists and st.deadline != 0
        self.expect(op, op.reply == int(has), "PERSIST answers whether a TTL was removed")
        if has:
            self.ttl(op, key, st, 0)

    def ttl(self, op: Op, key: bytes, st: KeyState, deadline: int) -> None:
        if st.kind == "string":
            if st.counter:
                self.emit(op, key, ("str", op.v(), st.base, "ttl", None, deadline))
            else:
                self.emit(op, key, ("str", op.v(), op.v(), "val", st.value, deadline))
        else:
            self.emit(op, key, ("head", op.v(), deadline, st.head.dc))

    def op_rename(self, op: Op) -> None:
        src, dst = op.argv[1], op.argv[2]
        st = self.view(op, src)
        if not st.exists:
            self.expect(op, self.err(op), "RENAME of a missing key is an error")
            return
        self.expect(op, not self.err(op), "RENAME of an existing key works")
        if src == dst:
            return
        self.copy(op, st, dst)
        self.delete(op, src, st, sub=1 << 20)

    def op_copy(self, op: Op) -> None:
        src, dst = op.argv[1], op.argv[2]
        replace = len(op.argv) > 3
        st = self.view(op, src)
        dt = self.view(op, dst)
        ok = st.exists and src != dst and (replace or not dt.exists)
        if src == dst:
            self.expect(op, self.err(op), "COPY to itself is an error")
            return
        self.expect(op, op.reply == int(ok), f"COPY answers {int(ok)}")
        if ok:
            self.copy(op, st, dst)

    def copy(self, op: Op, st: KeyState, dst: bytes) -> None:
        """``dst`` becomes what ``st`` shows (RENAME, COPY): a new head whose delete
        clock is its own stamp (the destination's old contents die), then the contents
        re-written with fresh stamps."""
        self.keys.add(dst)
        v0 = op.v()
        if st.kind == "string":
            if st.counter:  # a counter is copied as its value
                self.emit(op, dst, ("str", v0, v0, "val", st.value, st.deadline))
            else:
                self.emit(op, dst, ("str", v0, v0, "val", st.value, st.deadline))
            return
        self.emit(op, dst, ("head", v0, st.deadline, v0))
        sub = 1
        if st.kind in ("hash", "set", "zset"):
            for m, e in sorted(st.elems.items()):
                self.emit(op, dst, ("add", m, op.v(sub), e.value, e.deadline))
                sub += 1
        elif st.kind == "list":
            for p in sorted(st.slots):
                self.emit(op, dst, ("pos", p, op.v(sub), st.slots[p]))
                sub += 1
        elif st.kind == "stream":
            for i in sorted(st.slots):
                self.emit(op, dst, ("entry", i, op.v(sub), st.slots[i]))
                sub += 1
            self.emit(op, dst, ("xlast", st.last_id, op.v(sub)))
            for g, (start, pending) in st.groups.items():
                sub += 1
                self.emit(op, dst, ("grp", g, op.v(sub), start))
                for i in sorted(st.delivered.get(g, ())):
                    sub += 1
                    self.emit(op, dst, ("dlv", g, i, op.v(sub)))
                for i in sorted(st.delivered.get(g, set()) - pending):
                    sub += 1
                    self.emit(op, dst, ("ack", g, i, op.v(sub)))
        else:
            for b, r in st.registers.items():
                self.emit(op, dst, ("reg", v0, b, r, op.v(sub)))
                sub += 1

    # -- strings ---------------------------------------------------------------------------------
    def op_set(self, op: Op) -> None:
        key, value = op.argv[1], op.argv[2]
        deadline = self.deadline(op, int(op.argv[4])) if len(op.argv) > 4 else 0
        self.view(op, key)
        self.emit(op, key, ("str", op.v(), op.v(), "val", value, deadline))

    def op_append(self, op: Op) -> None:
        key, more = op.argv[1], op.argv[2]
        st = self.view(op, key)
        value = (st.value if st.exists else b"") + more  # type: ignore[operator]
        self.expect(op, op.reply == len(value), "APPEND answers the new length")
        self.emit(op, key, ("str", op.v(), op.v(), "val", value, st.deadline if st.exists else 0))

    def op_setbit(self, op: Op) -> None:
        """A bitmap is a string: SETBIT writes the whole new value (LWW, its deadline kept),
        and only when the string is created, grows or the bit flips."""
        key, offset, on = op.argv[1], int(op.argv[2]), int(op.argv[3])
        st = self.view(op, key)
        old = st.value if st.exists else b""
        value = bytearray(old)  # type: ignore[arg-type]
        byte, mask = offset >> 3, 0x80 >> (offset & 7)
        if byte >= len(value):
            value.extend(bytes(byte + 1 - len(value)))
        was = 1 if value[byte] & mask else 0
        self.expect(op, op.reply == was, f"SETBIT answers the old bit ({was})")
        value[byte] = value[byte] | mask if on else value[byte] & ~mask
        if not st.exists or bytes(value) != old:
            self.emit(op, key, ("str", op.v(), op.v(), "val", bytes(value), st.deadline if st.exists else 0))

    def op_incrby(self, op: Op) -> None:
        key, by = op.argv[1], int(op.argv[2])
        st = self.view(op, key)
        if st.exists and not st.counter:
            try:
                start = int(st.value)  # type: ignore[arg-type]
                ok = st.value == b"%d" % start
            except ValueError:
                ok = False
            if not ok:
                self.expect(op, self.err(op), "INCRBY of a non-integer is an error")
                return
            base, base_value, deadline = st.str_version, start, st.deadline
        elif st.exists:
            base, base_value, deadline = st.base, st.base_value, st.deadline
        else:
            base, base_value, deadline = (st.base if st.base is not None else op.v()), 0, 0
        now = (int(st.value) if st.exists else 0) + by  # type: ignore[arg-type]
        self.expect(op, op.reply == now, f"INCRBY answers {now}")
        # the node's slot grows by ``by``; the first increment on a base starts it
        self.emit(op, key, ("str", op.v(), base, "incr", (base_value, by), deadline))

    # -- observed-remove collections ------------------------------------------------------------
    def _add(self, op: Op, key: bytes, st: KeyState, m: bytes, value: bytes, deadline: int, sub: int) -> None:
        self.emit(op, key, ("add", m, op.v(sub), value, deadline))

    def _remove(self, op: Op, key: bytes, st: KeyState, m: bytes, sub: int) -> None:
        self.emit(op, key, ("rem", m, op.v(sub), frozenset(st.all_dots.get(m, ()))))

    def op_sadd(self, op: Op) -> None:
        key, ms = op.argv[1], list(dict.fromkeys(op.argv[2:]))
        st = self.view(op, key)
        self.expect(op, op.reply == sum(1 for m in ms if m not in st.elems), "SADD counts new members")
        self.create(op, key, st)
        for i, m in enumerate(ms):
            e = st.elems.get(m)
            self._add(op, key, st, m, b"", e.deadline if e is not None else 0, 1 + i)

    def op_srem(self, op: Op) -> None:
        key, ms = op.argv[1], list(dict.fromkeys(op.argv[2:]))
        st = self.view(op, key)
        gone = [m for m in ms if m in st.elems]
        self.expect(op, op.reply == len(gone), "SREM counts removed members")
        for i, m in enumerate(gone):
            self._remove(op, key, st, m, 1 + i)

    def op_spop(self, op: Op) -> None:
        key = op.argv[1]
        st = self.view(op, key)
        popped = op.reply if isinstance(op.reply, list) else ([] if op.reply is None else [op.reply])
        self.expect(op, set(popped) <= set(st.elems) and len(set(popped)) == len(popped), "SPOP pops members")
        want = min(int(op.argv[2]) if len(op.argv) > 2 else 1, len(st.elems))
        self.expect(op, len(popped) == want, f"SPOP pops {want}")
        for i, m in enumerate(popped):
            self._remove(op, key, st, m, 1 + i)

    def op_smove(self, op: Op) -> None:
        src, dst, m = op.argv[1], op.argv[2], op.argv[3]
        st = self.view(op, src)
        dt = self.view(op, dst)
        moved = m in st.elems
        self.expect(op, op.reply == int(moved), "SMOVE answers whether it moved")
        if moved and src != dst:
            self._remove(op, src, st, m, 1)
            self.create(op, dst, dt, 2)
            self._add(op, dst, dt, m, b"", 0, 3)

    def op_hset(self, op: Op) -> None:
        key = op.argv[1]
        pairs = dict(zip(op.argv[2::2], op.argv[3::2]))
        st = self.view(op, key)
        self.expect(op, op.reply == sum(1 for f in pairs if f not in st.elems), "HSET counts new fields")
        self.create(op, key, st)
        for i, (f, v) in enumerate(pairs.items()):
            self._add(op, key, st, f, v, 0, 1 + i)  # HSET drops the field's TTL

    def op_hdel(self, op: Op) -> None:
        key, fs = op.argv[1], list(dict.fromkeys(op.argv[2:]))
        st = self.view(op, key)
        gone = [f for f in fs if f in st.elems]
        self.expect(op, op.reply == len(gone), "HDEL counts removed fields")
        for i, f in enumerate(gone):
            self._remove(op, key, st, f, 1 + i)

    def op_hincrby(self, op: Op) -> None:
        key, f, by = op.argv[1], op.argv[2], int(op.argv[3])
        st = self.view(op, key)
        e = st.elems.get(f)
        now = (int(e.value) if e is not None else 0) + by
        self.expect(op, op.reply == now, f"HINCRBY answers {now}")
        self.create(op, key, st)
        self._add(op, key, st, f, b"%d" % now, e.deadline if e is not None else 0, 1)

    def op_hpexpire(self, op: Op) -> None:  # HPEXPIRE key ms FIELDS 1 f
        key, ms, f = op.argv[1], int(op.argv[2]), op.argv[5]
        st = self.view(op, key)
        e = st.elems.get(f)
        if e is None:
            self.expect(op, op.reply == ([-2] if st.exists else [-2]), "HPEXPIRE of a missing field: -2")
            return
        self.expect(op, op.reply == [1], "HPEXPIRE sets the field's TTL")
        self.emit(op, key, ("hdr", f, op.v(), self.deadline(op, ms)))

    def op_hpersist(self, op: Op) -> None:  # HPERSIST key FIELDS 1 f
        key, f = op.argv[1], op.argv[4]
        st = self.view(op, key)
        e = st.elems.get(f)
        if e is None:
            self.expect(op, op.reply == [-2], "HPERSIST of a missing field: -2")
        elif not e.deadline:
            self.expect(op, op.reply == [-1], "HPERSIST of a field without TTL: -1")
        else:
            self.expect(op, op.reply == [1], "HPERSIST removes the field's TTL")
            self.emit(op, key, ("hdr", f, op.v(), 0))

    def op_zadd(self, op: Op) -> None:
        key, score, m = op.argv[1], op.argv[2], op.argv[3]
        st = self.view(op, key)
        self.expect(op, op.reply == int(m not in st.elems), "ZADD counts new members")
        self.create(op, key, st)
        self._add(op, key, st, m, _score(float(score)), 0, 1)  # a re-add too (as SADD)

    def op_zincrby(self, op: Op) -> None:
        key, by, m = op.argv[1], float(op.argv[2]), op.argv[3]
        st = self.view(op, key)
        e = st.elems.get(m)
        now = (float(e.value) if e is not None else 0.0) + by
        self.expect(op, float(op.reply) == now, f"ZINCRBY answers {now}")
        self.create(op, key, st)
        self._add(op, key, st, m, _score(now), 0, 1)

    def op_zrem(self, op: Op) -> None:
        key, ms = op.argv[1], list(dict.fromkeys(op.argv[2:]))
        st = self.view(op, key)
        gone = [m for m in ms if m in st.elems]
        self.expect(op, op.reply == len(gone), "ZREM counts removed members")
        for i, m in enumerate(gone):
            self._remove(op, key, st, m, 1 + i)

    def op_zpopmin(self, op: Op) -> None:
        key, n = op.argv[1], int(op.argv[2])
        st = self.view(op, key)
        want = zorder(st.elems)[:n]
        got = [(op.reply[i], float(op.reply[i + 1])) for i in range(0, len(op.reply), 2)]
        self.expect(op, got == want, f"ZPOPMIN pops {want}")
        for i, (m, _) in enumerate(want):
            self._remove(op, key, st, m, 1 + i)

    def op_zremrangebyscore(self, op: Op) -> None:
        key, lo, hi = op.argv[1], float(op.argv[2]), float(op.argv[3])
        st = self.view(op, key)
        gone = [m for m, s in zorder(st.elems) if lo <= s <= hi]
        self.expect(op, op.reply == len(gone), "ZREMRANGEBYSCORE counts")
        for i, m in enumerate(gone):
            self._remove(op, key, st, m, 1 + i)

    # -- lists ------------------------------------------------------------------------------------
    def _push(self, op: Op, key: bytes, st: KeyState, values: list[bytes], left: bool, sub: int) -> int:
        ps = sorted(st.slots)
        if ps:
            pos = ps[0] - 1 if left else ps[-1] + 1
        else:
            pos = CENTER
        for v in values:
            self.emit(op, key, ("pos", pos, op.v(sub), v))
            sub += 1
            pos += -1 if left else 1
        return sub

    def _pop(self, op: Op, key: bytes, st: KeyState, n: int, left: bool, sub: int) -> list[bytes]:
        ps = sorted(st.slots)
        take = ps[:n] if left else ps[::-1][:n]
        for p in take:
            self.emit(op, key, ("pos", p, op.v(sub), None))
            sub += 1
        return [st.slots[p] for p in take]

    def op_lpush(self, op: Op, left: bool = True) -> None:
        key, values = op.argv[1], op.argv[2:]
        st = self.view(op, key)
        self.expect(op, op.reply == len(st.slots) + len(values), "a push answers the new length")
        self.create(op, key, st)
        self._push(op, key, st, values, left, 1)

    def op_rpush(self, op: Op) -> None:
        self.op_lpush(op, left=False)

    def op_lpop(self, op: Op, left: bool = True) -> None:
        key = op.argv[1]
        n = int(op.argv[2]) if len(op.argv) > 2 else None
        st = self.view(op, key)
        if not st.exists:
            self.expect(op, op.reply is None, "a pop of a missing list answers nil")
            return
        got = self._pop(op, key, st, n or 1, left, 1)
        self.expect(op, op.reply == (got if n is not None else got[0]), f"the pop answers {got}")

    def op_rpop(self, op: Op) -> None:
        self.op_lpop(op, left=False)

    def op_lset(self, op: Op) -> None:
        key, i, v = op.argv[1], int(op.argv[2]), op.argv[3]
        st = self.view(op, key)
        ps = sorted(st.slots)
        if not -len(ps) <= i < len(ps):
            self.expect(op, self.err(op), "LSET out of range is an error")
            return
        self.expect(op, not self.err(op), "LSET in range works")
        self.emit(op, key, ("pos", ps[i], op.v(), v))

    def op_lmove(self, op: Op) -> None:
        src, dst = op.argv[1], op.argv[2]
        left_from, left_to = op.argv[3] == b"LEFT", op.argv[4] == b"LEFT"
        st = self.view(op, src)
        if not st.exists:
            self.expect(op, op.reply is None, "LMOVE from a missing list answers nil")
            return
        ps = sorted(st.slots)
        p = ps[0] if left_from else ps[-1]
        value = st.slots[p]
        self.expect(op, op.reply == value, f"LMOVE moves {value!r}")
        if src == dst:
            if len(ps) == 1 or left_from == left_to:
                return
            self.emit(op, src, ("pos", p, op.v(0), None))
            rest = dict(st.slots)
            del rest[p]
            to = min(rest) - 1 if left_to else max(rest) + 1
            self.emit(op, src, ("pos", to, op.v(1), value))
            return
        self.emit(op, src, ("pos", p, op.v(0), None))
        dt = self.view(op, dst)
        self.create(op, dst, dt, 1)
        self._push(op, dst, dt, [value], left_to, 2)

    def _rebuild(self, op: Op, key: bytes, st: KeyState, keep: list[bytes]) -> None:
        old = sorted(st.slots.items())
        current = dict(old)
        new_pos = range(CENTER, CENTER + len(keep))
        sub = 0
        for p, v in zip(new_pos, keep):
            if current.get(p) != v:
                self.emit(op, key, ("pos", p, op.v(sub), v))
                sub += 1
        for p, _ in old:
            if p not in new_pos:
                self.emit(op, key, ("pos", p, op.v(sub), None))
                sub += 1

    def _remove_ranks(self, op: Op, key: bytes, st: KeyState, gone: list[int]) -> None:
        """LREM's and LTRIM's removals: at the ends only, tombstones there; else a rebuild."""
        ps = sorted(st.slots)
        n, k = len(ps), len(gone)
        at_head = 0
        while at_head < k and gone[at_head] == at_head:
            at_head += 1
        if all(r == n - k + i for i, r in enumerate(gone[at_head:], at_head)):
            for i, r in enumerate(gone):
                self.emit(op, key, ("pos", ps[r], op.v(i), None))
            return
        drop = set(gone)
        self._rebuild(op, key, st, [st.slots[p] for r, p in enumerate(ps) if r not in drop])

    def op_lrem(self, op: Op) -> None:
        key, count, v = op.argv[1], int(op.argv[2]), op.argv[3]
        st = self.view(op, key)
        ps = sorted(st.slots)
        order = range(len(ps) - 1, -1, -1) if count < 0 else range(len(ps))
        gone: list[int] = []
        for r in order:
            if st.slots[ps[r]] == v:
                gone.append(r)
                if count and len(gone) == abs(count):
                    break
        self.expect(op, op.reply == len(gone), f"LREM removes {len(gone)}")
        if gone:
            self._remove_ranks(op, key, st, sorted(gone))

    def op_ltrim(self, op: Op) -> None:
        key, start, stop = op.argv[1], int(op.argv[2]), int(op.argv[3])
        st = self.view(op, key)
        n = len(st.slots)
        if start < 0:
            start += n
        if stop < 0:
            stop += n
        start = max(start, 0)
        if start > stop or start >= n:
            keep = range(0)
        else:
            keep = range(start, min(stop, n - 1) + 1)
        gone = [r for r in range(n) if r not in keep]
        if gone:
            self._remove_ranks(op, key, st, gone)

    def op_linsert(self, op: Op) -> None:
        key, before, pivot, v = op.argv[1], op.argv[2] == b"BEFORE", op.argv[3], op.argv[4]
        st = self.view(op, key)
        if not st.exists:
            self.expect(op, op.reply == 0, "LINSERT into a missing list answers 0")
            return
        ps = sorted(st.slots)
        vals = [st.slots[p] for p in ps]
        if pivot not in vals:
            self.expect(op, op.reply == -1, "LINSERT without its pivot answers -1")
            return
        at = vals.index(pivot) + (0 if before else 1)
        self.expect(op, op.reply == len(vals) + 1, "LINSERT answers the new length")
        if at == 0 or at == len(vals):
            self._push(op, key, st, [v], at == 0, 0)
            return
        vals.insert(at, v)
        self._rebuild(op, key, st, vals)

    # -- streams -------------------------------------------------------------------------------
    def op_xadd(self, op: Op) -> None:
        key, spec = op.argv[1], op.argv[2]
        fields = tuple(op.argv[3:])
        st = self.view(op, key)
        last = st.last_id if st.exists else (0, 0)
        if self.err(op):
            text = str(op.reply)
            if "exhausted" in text:
                self.expect(op, last == MAX_ID, "XADD exhausted only after the greatest id")
            else:
                self.expect(op, spec != b"*" and _parse_id(spec) <= last, "XADD refused an id above the top")
            return
        sid = _parse_id(op.reply)
        self.expect(op, sid > last, f"XADD's id is above the stream's last id {last}")
        if spec != b"*":
            self.expect(op, sid == _parse_id(spec), "XADD takes the explicit id")
        self.create(op, key, st)
        self.emit(op, key, ("entry", sid, op.v(1), fields))
        self.emit(op, key, ("xlast", sid, op.v(1)))

    def op_xdel(self, op: Op) -> None:
        key, ids = op.argv[1], [_parse_id(a) for a in dict.fromkeys(op.argv[2:])]
        st = self.view(op, key)
        gone = [i for i in ids if i in st.slots]
        self.expect(op, op.reply == len(gone), "XDEL counts")
        for n, i in enumerate(gone):
            self.emit(op, key, ("entry", i, op.v(n), None))

    def op_xtrim(self, op: Op) -> None:  # XTRIM key MAXLEN n
        key, n = op.argv[1], int(op.argv[3])
        st = self.view(op, key)
        ids = sorted(st.slots)
        gone = ids[:max(0, len(ids) - n)]
        self.expect(op, op.reply == len(gone), f"XTRIM trims {len(gone)}")
        for k, i in enumerate(gone):
            self.emit(op, key, ("entry", i, op.v(k), None))

    def op_xgroup(self, op: Op) -> None:  # XGROUP CREATE key g id|$ [MKSTREAM]
        key, g, spec = op.argv[2], op.argv[3], op.argv[4]
        mk = len(op.argv) > 5
        st = self.view(op, key)
        if not st.exists and not mk:
            self.expect(op, self.err(op), "XGROUP CREATE without a stream is an error")
            return
        if st.exists and g in st.groups:
            self.expect(op, self.err(op) and "BUSYGROUP" in str(op.reply), "BUSYGROUP")
            return
        self.expect(op, not self.err(op), "XGROUP CREATE works")
        if not st.exists:
            self.create(op, key, st)
        start = st.last_id if spec == b"$" else _parse_id(spec)
        self.emit(op, key, ("grp", g, op.v(1), start))

    def op_xreadgroup(self, op: Op) -> None:  # XREADGROUP GROUP g c COUNT n STREAMS key >
        g, n, key = op.argv[2], int(op.argv[5]), op.argv[7]
        st = self.view(op, key)
        if not st.exists or g not in st.groups:
            self.expect(op, self.err(op), "XREADGROUP of a missing group is an error")
            return
        start, _ = st.groups[g]
        done = st.delivered.get(g, set())
        candidates = [i for i in sorted(st.slots) if i > start and i not in done][:n]
        got = _read_ids(op.reply)
        self.expect(op, got == candidates, f"XREADGROUP > delivers {candidates}")
        for k, i in enumerate(got):
            self.emit(op, key, ("dlv", g, i, op.v(k)))

    def op_xack(self, op: Op) -> None:
        key, g, ids = op.argv[1], op.argv[2], [_parse_id(a) for a in dict.fromkeys(op.argv[3:])]
        st = self.view(op, key)
        pending = st.groups.get(g, (None, set()))[1] if st.exists else set()
        acked = [i for i in ids if i in pending]
        self.expect(op, op.reply == len(acked), f"XACK acknowledges {len(acked)}")
        for k, i in enumerate(acked):
            self.emit(op, key, ("ack", g, i, op.v(k)))

    # -- HyperLogLog -----------------------------------------------------------------------------
    def op_pfadd(self, op: Op) -> None:
        key, elements = op.argv[1], op.argv[2:]
        st = self.view(op, key)
        regs = dict(st.registers)
        raised = False
        for e in elements:
            b, r = core_hll.observe(e)
            if r > regs.get(b, 0):
                regs[b] = r
                raised = True
        self.expect(op, op.reply == int(raised or not st.exists), "PFADD answers whether it changed the HLL")
        self.create(op, key, st)
        gen = st.head.dc  # the delete clock the node sees (a new head folds it in)
        for k, e in enumerate(elements):
            b, r = core_hll.observe(e)
            self.emit(op, key, ("reg", gen, b, r, op.v(1 + k)))

    def op_pfmerge(self, op: Op) -> None:
        dst, srcs = op.argv[1], op.argv[2:]
        dt = self.view(op, dst)
        regs: dict[int, int] = {}
        for s in srcs:
            for b, r in self.view(op, s).registers.items():
                regs[b] = max(regs.get(b, 0), r)
        self.create(op, dst, dt)
        gen = dt.head.dc
        for k, (b, r) in enumerate(sorted(regs.items())):
            self.emit(op, dst, ("reg", gen, b, r, op.v(1 + k)))


def _score(x: float) -> bytes:
    return repr(float(x)).encode()


def _parse_id(text: Any) -> tuple[int, int]:
    if isinstance(text, tuple):
        return text
    s = text.decode() if isinstance(text, bytes) else str(text)
    ms, _, seq = s.partition("-")
    return int(ms), int(seq or 0)


def _read_ids(reply: Any) -> list[tuple[int, int]]:
    """The ids of an XREADGROUP reply (RESP2 arrays or a RESP3 map)."""
    if not reply:
        return []
    if isinstance(reply, dict):
        entries = next(iter(reply.values()))
    else:
        entries = reply[0][1]
    return [_parse_id(e[0]) for e in entries or ()]


# =========================================================================================
# The states
# =========================================================================================

def _head_state(effs: list[tuple], now: int) -> Head:
    h = Head()
    best: tuple | None = None
    dc = NO_VERSION
    for e in effs:
        if e[0] == "head":
            _, v, deadline, fold = e
            dc = max(dc, fold)
            if best is None or v > best[0]:
                best = (v, "head", deadline)
        elif e[0] == "del":
            v = e[1]
            dc = max(dc, v)
            if best is None or v > best[0]:
                best = (v, "del", 0)
    if best is None:
        return h
    h.written = True
    v, what, deadline = best
    if what == "del":
        dc = max(dc, v)
    elif deadline and now >= deadline:
        dc = max(dc, _expiry_clock(deadline, 0))
    else:
        h.alive = True
        h.deadline = deadline
    h.dc = dc
    return h


def _or_state(st: KeyState, effs: list[tuple], dc: Version, now: int) -> None:
    adds: dict[bytes, list[tuple[Version, bytes]]] = defaultdict(list)
    covered: dict[bytes, set[Version]] = defaultdict(set)
    headers: dict[bytes, tuple[Version, int]] = {}

    def header(m: bytes, v: Version, deadline: int) -> None:
        if m not in headers or v > headers[m][0]:
            headers[m] = (v, deadline)

    for e in effs:
        if e[0] == "add":
            _, m, v, value, deadline = e
            adds[m].append((v, value))
            header(m, v, deadline)
        elif e[0] == "rem":
            _, m, v, observed = e
            covered[m] |= observed
            header(m, v, 0)
        elif e[0] == "hdr":
            _, m, v, deadline = e
            header(m, v, deadline)
    for m, al in adds.items():
        st.all_dots[m] = {v for v, _ in al}
        versions = sorted((v for v, _ in al), reverse=True)
        rank = {v: i for i, v in enumerate(versions)}  # adds newer than it
        live = [(v, val) for v, val in al if v not in covered[m] and rank[v] < LIVE_CAP]
        if not live:
            continue
        top, value = max(live)
        deadline = headers[m][1]
        if top > dc and (not deadline or now < deadline):
            st.elems[m] = OrElem(value, deadline, st.all_dots[m])


def _lww_live(effs: list[tuple], tag: str, dc: Version) -> dict:
    best: dict[Any, tuple[Version, Any]] = {}
    for e in effs:
        if e[0] == tag:
            _, slot, v, value = e
            if slot not in best or v > best[slot][0]:
                best[slot] = (v, value)
    return {s: val for s, (v, val) in best.items() if val is not None and v > dc}


def _stream_state(st: KeyState, effs: list[tuple], dc: Version) -> None:
    st.slots = _lww_live(effs, "entry", dc)
    last = (0, 0)
    groups: dict[bytes, tuple[Version, tuple[int, int]]] = {}
    for e in effs:
        if e[0] == "xlast" and e[2] > dc:
            last = max(last, e[1])
        elif e[0] == "grp" and e[2] > dc:
            if e[1] not in groups or e[2] > groups[e[1]][0]:
                groups[e[1]] = (e[2], e[3])
    st.last_id = last
    delivered: dict[bytes, set] = defaultdict(set)
    acked: dict[bytes, set] = defaultdict(set)
    for e in effs:
        if e[0] in ("dlv", "ack"):
            _, g, i, v = e
            if g in groups and v > groups[g][0]:
                (delivered if e[0] == "dlv" else acked)[g].add(i)
    st.groups = {g: (start, delivered[g] - acked[g]) for g, (_, start) in groups.items()}
    st.delivered = {g: set(delivered[g]) for g in groups}


def _hll_state(st: KeyState, effs: list[tuple], dc: Version) -> None:
    regs: dict[int, int] = {}
    for e in effs:
        if e[0] == "reg":
            _, gen, b, r, v = e
            if gen == dc and r > regs.get(b, 0):
                regs[b] = r
    st.registers = regs


def _string_state(st: KeyState, effs: list[tuple], now: int, origin: Callable[[Version], int]) -> None:
    """Strings and PN counters (DATA_MODEL 6.4, 9). ``st.base`` is what an increment
    made now would count from: the live counter's base, a live string's own version, or
    the dead record's clock (a tombstone's version, an expiry's ``(deadline, origin)``)."""
    writes = [e for e in effs if e[0] == "str"]
    if not writes:
        return
    base = max(e[2] for e in writes)
    group = [e for e in writes if e[2] == base]
    top = max(group, key=lambda e: e[1])
    incrs = [e for e in group if e[3] == "incr"]
    plain = [e for e in group if e[3] == "val" and e[1] == base]
    st.str_version = top[1]
    deadline = top[5]
    if incrs:
        start = incrs[0][4][0]
        value: bytes | None = b"%d" % (start + sum(e[4][1] for e in incrs))
        st.counter = True
        st.base_value = start
    elif top[3] == "tomb":
        value = None
    else:
        value = plain[0][4] if plain else top[4]
    if value is None:  # a tombstone: an increment starts from its version
        st.base = top[1]
        st.counter = False
        return
    if deadline and now >= deadline:  # expired: from the expiry's clock
        dead = _expiry_clock(deadline, origin(top[1]))
        st.base = dead if dead > base else None  # type: ignore[assignment]  (None: re-based at the op)
        st.counter = False
        return
    st.base = base
    st.exists = True
    st.value = value
    st.deadline = deadline


# =========================================================================================
# What a node holds, read through commands
# =========================================================================================

def observe(run: Callable[..., Any], key: bytes) -> Any:
    """The public state of ``key`` on a node, read with commands (``run(*argv)``
    returns the reply): the same shape as ``KeyState.public``."""
    t = run(b"TYPE", key)
    t = t.decode() if isinstance(t, bytes) else str(t)
    if t == "none":
        return None
    deadline = _deadline(run(b"PEXPIRETIME", key))
    kind = type_of(key)
    if kind == "string":
        assert t == "string", (key, t)
        return ("string", run(b"GET", key), deadline)
    if kind == "hll":
        assert t == "string", (key, t)
        return ("hll", run(b"PFCOUNT", key), deadline)
    assert t == kind, (key, t, kind)
    if kind == "hash":
        flat = run(b"HGETALL", key)
        pairs = dict(flat.items()) if isinstance(flat, dict) else dict(zip(flat[::2], flat[1::2]))
        ttls = {}
        for f in pairs:
            d = run(b"HPEXPIRETIME", key, b"FIELDS", b"1", f)[0]
            if d > 0:
                ttls[f] = d
        return ("hash", pairs, deadline, ttls)
    if kind == "set":
        return ("set", frozenset(run(b"SMEMBERS", key)), deadline)
    if kind == "zset":
        flat = run(b"ZRANGE", key, b"0", b"-1", b"WITHSCORES")
        if flat and isinstance(flat[0], (list, tuple)):
            return ("zset", [(m, float(s)) for m, s in flat], deadline)
        return ("zset", [(flat[i], float(flat[i + 1])) for i in range(0, len(flat), 2)], deadline)
    if kind == "list":
        return ("list", list(run(b"LRANGE", key, b"0", b"-1")), deadline)
    entries = [(_parse_id(i), tuple(f)) for i, f in run(b"XRANGE", key, b"-", b"+")]
    info = run(b"XINFO", b"STREAM", key)
    info = dict(info.items()) if isinstance(info, dict) else dict(zip(info[::2], info[1::2]))
    last = _parse_id(info[b"last-generated-id"])
    groups = {}
    for g in run(b"XINFO", b"GROUPS", key):
        g = dict(g.items()) if isinstance(g, dict) else dict(zip(g[::2], g[1::2]))
        name = g[b"name"]
        pend = run(b"XPENDING", key, name, b"-", b"+", b"100000")
        groups[name] = sorted(_parse_id(p[0]) for p in pend)
    return ("stream", entries, deadline, last, dict(sorted(groups.items())))


def _deadline(reply: Any) -> int:
    return reply if isinstance(reply, int) and reply > 0 else 0
