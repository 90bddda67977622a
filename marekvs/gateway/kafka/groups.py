"""Consumer groups: Kafka's classic group protocol, one coordinator per group.

Coordinator. As on Kafka, a group's coordinator is the leader of its partition of an
internal ``__consumer_offsets`` topic of 50 partitions (Java's hash of the group id, so a
group maps where Kafka would map it); that leadership is the partitions' (``topics.py``):
sticky, moving to a live successor when its node is not live. FindCoordinator on any node
names it; the group requests sent to another node get NOT_COORDINATOR, and the client asks
again.

Membership lives in the coordinator's memory, as Kafka's group state does between its
writes to ``__consumer_offsets``: members (id, client, host, session and rebalance
timeouts, the protocols they offer with their metadata, their assignment), the state
(Empty, PreparingRebalance, CompletingRebalance, Stable), the generation, the chosen
protocol and the leader. A join (of a new member, or a known one with other metadata), a
leave, or a member missing its session timeout starts a rebalance: the known members are
told by Heartbeat (REBALANCE_IN_PROGRESS) and join again; the join round ends when every
known member has joined or the rebalance timeout passed (the others are removed), after
``group.initial.rebalance.delay.ms`` for a group that was empty; then the generation goes
up, the protocol every member supports that most members prefer is chosen, the leader gets
every member's metadata and sends the assignments with SyncGroup, which the coordinator
relays to each member. The assignors (range, roundrobin, sticky, cooperative-sticky) are
the clients'; the coordinator relays their bytes.

Generations survive a coordinator failover: each is written to ``{p}:group:{group}``
(field ``generation``), and a new coordinator starts above it. The members rejoin the new
coordinator (their member ids are unknown there) and get a new generation; a commit from
the old generation is refused with ILLEGAL_GENERATION.

Committed offsets are ``{p}:commit:{streamKey}:{group}`` strings (Korvet's), replicated like
every key and merged last-writer-wins on the write's clock: a merge never moves a group's
committed offset behind a later commit. OffsetFetch reads them on any node. The commit's
metadata string is not kept (OffsetFetch returns it empty).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from typing import Any

from marekvs.gateway.kafka.protocol import Error

log = logging.getLogger("marekvs.kafka")

OFFSETS_TOPIC = b"__consumer_offsets"
OFFSETS_PARTITIONS = 50
EMPTY, PREPARING, COMPLETING, STABLE, DEAD = "Empty", "PreparingRebalance", "CompletingRebalance", "Stable", "Dead"


def java_hash(s: str) -> int:
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group: str) -> int:
    """Kafka's ``Utils.abs(groupId.hashCode()) % groupMetadataTopicPartitionCount``."""
    return (java_hash(group) & 0x7FFFFFFF) % OFFSETS_PARTITIONS


class Member:
    __slots__ = ("id", "client_id", "host", "session_ms", "rebalance_ms", "protocol_type", "protocols",
                 "assignment", "join", "sync", "seen")

    def __init__(self, mid: str, client_id: str, host: str):
        self.id = mid
        self.client_id = client_id
        self.host = host
        self.session_ms = 10000
        self.rebalance_ms = 300000
        self.protocol_type = ""
        self.protocols: list[tuple[str, bytes]] = []
        self.assignment = b""
        self.join: asyncio.Future | None = None  # pending JoinGroup
        self.sync: asyncio.Future | None = None  # pending SyncGroup
        self.seen = time.monotonic()

    def metadata_for(self, protocol: str) -> bytes:
        for name, md in self.protocols:
            if name == protocol:
                return md
        return b""


class Group:
    def __init__(self, name: str, generation: int):
        self.name = name
        self.state = EMPTY
        self.generation = generation
        self.protocol_type = ""
        self.protocol: str | None = None
        self.leader: str | None = None
        self.members: dict[str, Member] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.pending: dict[str, float] = {}  # member ids given with MEMBER_ID_REQUIRED, not joined yet
        self.delayed = False  # the initial rebalance delay of a group that was empty runs

    def candidates(self) -> set[str]:
        sets = [set(n for n, _ in m.protocols) for m in self.members.values()]
        return set.intersection(*sets) if sets else set()

    def choose_protocol(self) -> str:
        cands = self.candidates()
        votes: dict[str, int] = {}
        for m in self.members.values():
            for name, _ in m.protocols:
                if name in cands:
                    votes[name] = votes.get(name, 0) + 1
                    break
        return max(sorted(votes), key=lambda n: votes[n])


class Coordinator:
    def __init__(self, gw: Any):
        self.gw = gw
        self.groups: dict[str, Group] = {}
        self.initial_delay = gw.node.config.kafka_group_initial_rebalance_delay_ms / 1000
        self._task: asyncio.Task | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._expire_loop())

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()

    # -- who coordinates ----------------------------------------------------------------------------
    def coordinator_of(self, group: str) -> int:
        gw = self.gw
        p = offsets_partition(group)
        return gw.leaders(OFFSETS_TOPIC, OFFSETS_PARTITIONS, gw.brokers(), only=p)[p][0]

    def is_mine(self, group: str) -> bool:
        return self.coordinator_of(group) == self.gw.node_id

    def group(self, name: str) -> Group:
        g = self.groups.get(name)
        if g is None:
            stored = self.gw.layout.call(self.gw.sys, b"HGET", self.gw.layout.group_key(name.encode()), b"generation")
            g = self.groups[name] = Group(name, int(stored) if stored else 0)
        return g

    def _store_generation(self, g: Group) -> None:
        gw = self.gw
        gw.record("a group's generation", b"HSET", gw.layout.group_key(g.name.encode()), b"generation",
                  b"%d" % g.generation, b"protocolType", g.protocol_type.encode())
        gw.record("a group's name", b"SADD", gw.layout.groups_key, g.name.encode())
        gw.node.request_tick()

    # -- the join round ---------------------------------------------------------------------------------
    async def join(self, conn: Any, b: Any, version: int) -> dict[str, Any]:
        name = b.group_id
        out = {"error_code": Error.NONE, "generation_id": -1, "protocol_type": None, "protocol_name": None,
               "leader": "", "skip_assignment": False, "member_id": b.member_id or "", "members": []}
        if not name:
            return dict(out, error_code=Error.INVALID_GROUP_ID)
        if not self.is_mine(name):
            return dict(out, error_code=Error.NOT_COORDINATOR)
        if not 1 <= b.session_timeout_ms <= 30 * 60 * 1000:
            return dict(out, error_code=Error.INVALID_SESSION_TIMEOUT)
        g = self.group(name)
        protocols = [(p.name, bytes(p.metadata)) for p in b.protocols]
        if not protocols or not b.protocol_type or (
                g.members and (b.protocol_type != g.protocol_type
                               or not g.candidates() & {n for n, _ in protocols})):
            return dict(out, error_code=Error.INCONSISTENT_GROUP_PROTOCOL)
        mid = b.member_id
        if not mid:
            mid = f"{conn.client_id}-{uuid.uuid4()}"
            if version >= 4:  # the client must join again with its id (KIP-394)
                g.pending[mid] = time.monotonic()
                return dict(out, error_code=Error.MEMBER_ID_REQUIRED, member_id=mid)
        elif mid not in g.members and g.pending.pop(mid, None) is None:
            return dict(out, error_code=Error.UNKNOWN_MEMBER_ID)
        m = g.members.get(mid)
        if m is None:
            m = g.members[mid] = Member(mid, conn.client_id, conn.ctx.addr.rsplit(":", 1)[0])
        elif g.state == STABLE and m.protocols == protocols and mid != g.leader:
            # a follower joining again with nothing new: its current assignment stands
            return dict(out, generation_id=g.generation, protocol_type=g.protocol_type, protocol_name=g.protocol,
                        leader=g.leader or "", member_id=mid)
        m.session_ms = b.session_timeout_ms
        m.rebalance_ms = b.rebalance_timeout_ms if version >= 1 else b.session_timeout_ms
        m.protocols = protocols
        m.protocol_type = b.protocol_type
        m.seen = time.monotonic()
        g.protocol_type = b.protocol_type
        if m.join is not None and not m.join.done():
            m.join.set_result(dict(out, error_code=Error.UNKNOWN_MEMBER_ID, member_id=mid))
        m.join = asyncio.get_running_loop().create_future()
        fut = m.join
        self._prepare(g)
        self._maybe_complete(g)
        return await fut

    def _prepare(self, g: Group) -> None:
        if g.state == PREPARING:
            return
        was_empty = g.state == EMPTY
        g.state = PREPARING
        for m in g.members.values():
            if m.sync is not None and not m.sync.done():
                m.sync.set_result({"error_code": Error.REBALANCE_IN_PROGRESS, "assignment": b""})
        if g.timer is not None:
            g.timer.cancel()
        loop = asyncio.get_running_loop()
        if was_empty and self.initial_delay > 0:  # more members may come: wait in full
            g.delayed = True
            g.timer = loop.call_later(self.initial_delay, self._delay_over, g)
        else:
            g.delayed = False
            g.timer = loop.call_later(self._rebalance_timeout(g), self._complete, g, True)

    @staticmethod
    def _rebalance_timeout(g: Group) -> float:
        return max((m.rebalance_ms for m in g.members.values()), default=0) / 1000

    def _delay_over(self, g: Group) -> None:
        g.delayed = False
        if g.state == PREPARING:
            g.timer = asyncio.get_running_loop().call_later(self._rebalance_timeout(g), self._complete, g, True)
            self._maybe_complete(g)

    def _maybe_complete(self, g: Group) -> None:
        if g.state == PREPARING and not g.delayed and all(
                m.join is not None and not m.join.done() for m in g.members.values()):
            self._complete(g, False)

    def _complete(self, g: Group, timed_out: bool) -> None:
        if g.state != PREPARING:
            return
        if g.timer is not None:
            g.timer.cancel()
            g.timer = None
        if timed_out:
            for mid in [mid for mid, m in g.members.items() if m.join is None or m.join.done()]:
                del g.members[mid]
        g.generation += 1
        if not g.members:
            g.state = EMPTY
            g.protocol = g.leader = None
            self._store_generation(g)
            return
        g.protocol = g.choose_protocol()
        if g.leader not in g.members:
            g.leader = next(iter(g.members))
        g.state = COMPLETING
        log.info("group %s generation %d: %d members, protocol %s, leader %s", g.name, g.generation,
                 len(g.members), g.protocol, g.leader)
        self._store_generation(g)
        members = [{"member_id": m.id, "group_instance_id": None, "metadata": m.metadata_for(g.protocol)}
                   for m in g.members.values()]
        for m in g.members.values():
            m.seen = time.monotonic()
            res = {"error_code": Error.NONE, "generation_id": g.generation, "protocol_type": g.protocol_type,
                   "protocol_name": g.protocol, "leader": g.leader, "skip_assignment": False, "member_id": m.id,
                   "members": members if m.id == g.leader else []}
            if m.join is not None and not m.join.done():
                m.join.set_result(res)
            m.join = None

    def _remove(self, g: Group, mid: str) -> None:
        m = g.members.pop(mid, None)
        if m is None:
            return
        for fut in (m.join, m.sync):
            if fut is not None and not fut.done():
                fut.set_result({"error_code": Error.UNKNOWN_MEMBER_ID, "generation_id": -1, "member_id": mid,
                                "leader": "", "members": [], "assignment": b""})
        if g.state in (STABLE, COMPLETING):
            self._prepare(g)
        self._maybe_complete(g)
        if g.state == PREPARING and not g.members:
            self._complete(g, False)

    async def _expire_loop(self) -> None:
        while True:
            await asyncio.sleep(0.2)
            now = time.monotonic()
            for g in list(self.groups.values()):
                for mid, t in list(g.pending.items()):
                    if now - t > 300:
                        del g.pending[mid]
                for m in list(g.members.values()):
                    waiting = m.join is not None and not m.join.done()
                    if not waiting and now - m.seen > m.session_ms / 1000:
                        self._remove(g, m.id)

    # -- sync, heartbeat, leave ----------------------------------------------------------------------------
    def _check(self, name: str, mid: str, generation: int) -> tuple[Group | None, int]:
        if not name:
            return None, Error.INVALID_GROUP_ID
        if not self.is_mine(name):
            return None, Error.NOT_COORDINATOR
        g = self.group(name)
        m = g.members.get(mid)
        if m is None:
            return g, Error.UNKNOWN_MEMBER_ID
        if generation != g.generation:
            return g, Error.ILLEGAL_GENERATION
        m.seen = time.monotonic()
        return g, Error.NONE

    async def sync(self, b: Any) -> dict[str, Any]:
        g, code = self._check(b.group_id, b.member_id, b.generation_id)
        out = {"error_code": code, "protocol_type": None, "protocol_name": None, "assignment": b""}
        if code != Error.NONE or g is None:
            return out
        out.update(protocol_type=g.protocol_type, protocol_name=g.protocol)
        if g.state == PREPARING:
            return dict(out, error_code=Error.REBALANCE_IN_PROGRESS)
        m = g.members[b.member_id]
        if g.state == STABLE:
            return dict(out, assignment=m.assignment)
        if b.member_id == g.leader:
            given = {a.member_id: bytes(a.assignment) for a in b.assignments}
            for mm in g.members.values():
                mm.assignment = given.get(mm.id, b"")
            g.state = STABLE
            for mm in g.members.values():
                if mm.sync is not None and not mm.sync.done():
                    mm.sync.set_result(dict(out, assignment=mm.assignment))
                mm.sync = None
            return dict(out, assignment=m.assignment)
        m.sync = asyncio.get_running_loop().create_future()
        res = await m.sync
        return dict(out, **res)

    def heartbeat(self, b: Any) -> int:
        g, code = self._check(b.group_id, b.member_id, b.generation_id)
        if code == Error.NONE and g is not None and g.state == PREPARING:
            return Error.REBALANCE_IN_PROGRESS
        return code

    def leave(self, name: str, member_ids: list[str]) -> tuple[int, list[int]]:
        if not name:
            return Error.INVALID_GROUP_ID, []
        if not self.is_mine(name):
            return Error.NOT_COORDINATOR, []
        g = self.group(name)
        codes = []
        for mid in member_ids:
            if mid in g.members:
                self._remove(g, mid)
                codes.append(Error.NONE)
            else:
                codes.append(Error.UNKNOWN_MEMBER_ID)
        return Error.NONE, codes

    # -- offsets -----------------------------------------------------------------------------------------------
    def commit_check(self, b: Any) -> int:
        """The error of an OffsetCommit as a whole (0: its offsets may be written)."""
        if not b.group_id:
            return Error.INVALID_GROUP_ID
        if not self.is_mine(b.group_id):
            return Error.NOT_COORDINATOR
        g = self.group(b.group_id)
        if b.generation_id_or_member_epoch < 0 and not b.member_id:
            return Error.NONE if not g.members else Error.ILLEGAL_GENERATION  # a commit outside the group
        _, code = self._check(b.group_id, b.member_id, b.generation_id_or_member_epoch)
        if code == Error.NONE and g.state == COMPLETING:
            return Error.REBALANCE_IN_PROGRESS
        return code

    def describe(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = {"error_code": Error.NONE, "group_id": name, "group_state": DEAD, "protocol_type": "",
                               "protocol_data": "", "members": [], "authorized_operations": -2147483648}
        if not self.is_mine(name):
            return dict(out, error_code=Error.NOT_COORDINATOR)
        g = self.groups.get(name)
        if g is None:
            known = self.gw.layout.call(self.gw.sys, b"SISMEMBER", self.gw.layout.groups_key, name.encode())
            return dict(out, group_state=EMPTY if known else DEAD)
        stable = g.state == STABLE
        return dict(out, group_state=g.state, protocol_type=g.protocol_type, protocol_data=g.protocol or "",
                    members=[{"member_id": m.id, "group_instance_id": None, "client_id": m.client_id,
                              "client_host": "/" + m.host, "member_metadata": m.metadata_for(g.protocol or ""),
                              "member_assignment": m.assignment if stable else b""}
                             for m in g.members.values()])

    def listed(self) -> list[tuple[str, str, str]]:
        """(group, protocol type, state) of the groups this node coordinates."""
        gw = self.gw
        names = {n.decode(errors="replace") for n in gw.layout.call(gw.sys, b"SMEMBERS", gw.layout.groups_key)}
        names |= set(self.groups)
        out = []
        for n in sorted(names):
            if not self.is_mine(n):
                continue
            g = self.groups.get(n)
            if g is None:
                out.append((n, "consumer", EMPTY))
            elif g.state != DEAD:
                out.append((n, g.protocol_type, g.state))
        return out
