"""The Kafka APIs: one handler per request type, returning the response's fields.

``handle(conn, req)`` returns the encoded response frame, None when no response is due
(Produce with acks=0), or a coroutine of either (a produce waiting for replication, a
long-poll fetch). Errors are Kafka's per-topic or per-partition codes, as a broker returns
them; a command refused by the node's ACL (NOPERM for the user the connection
authenticated as) is TOPIC_AUTHORIZATION_FAILED.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import Any

from marekvs.core.hlc import wall_ms
from marekvs.gateway.kafka import producers, records, replicas
from marekvs.gateway.kafka.protocol import Error, Request, api_versions, encode
from marekvs.gateway.kafka.topics import (COMPRESSIONS, DEFAULT_MESSAGE_BYTES, LEGAL_NAME, StoreError, Topic,
                                          rendezvous)

ZERO_UUID = uuid.UUID(int=0)
_NO_TXN = "transactions are not supported by this gateway"
# topic configs CreateTopics accepts (and DescribeConfigs reports), with the values allowed
TOPIC_CONFIGS = ("retention.ms", "retention.bytes", "compression.type", "max.message.bytes", "cleanup.policy",
                 "message.timestamp.type")

log = logging.getLogger("marekvs.kafka")


def handle(conn: Any, req: Request) -> Any:
    if req.body is None:  # ApiVersions of a version we do not know: answered in v0
        return encode(req, {"error_code": Error.UNSUPPORTED_VERSION, "api_keys": api_versions()}, version=0)
    return HANDLERS[req.api.key](conn, req)


def _denied(e: StoreError) -> int:
    return Error.TOPIC_AUTHORIZATION_FAILED if e.denied else Error.KAFKA_STORAGE_ERROR


def _topic(conn: Any, name: str) -> tuple[Topic | None, int]:
    """The topic ``name`` and the error its partitions get when there is none."""
    try:
        return conn.gw.layout.topic(conn.ctx, name.encode()), Error.UNKNOWN_TOPIC_OR_PARTITION
    except StoreError as e:
        return None, _denied(e)


# -- ApiVersions, Metadata ----------------------------------------------------------------------

def api_versions_(conn: Any, req: Request) -> bytes:
    return encode(req, {"error_code": Error.NONE, "api_keys": api_versions(), "throttle_time_ms": 0})


def metadata(conn: Any, req: Request) -> bytes:
    gw, ctx, b, v = conn.gw, conn.ctx, req.body, req.version
    brokers = gw.brokers()
    live = sorted(brokers)
    names: list[tuple[bytes | None, uuid.UUID | None]]
    if b.topics is None or (v == 0 and not b.topics):
        names = [(n, None) for n in gw.layout.topic_names(ctx)]
        explicit = False
    else:
        names = [(t.name.encode() if t.name is not None else None, getattr(t, "topic_id", None)) for t in b.topics]
        explicit = True
    auto = gw.auto_create and (v < 4 or b.allow_auto_topic_creation)
    topics = []
    for name, tid in names:
        try:
            if name is None and tid is not None:
                name = gw.layout.topic_by_id(ctx, tid)
                if name is None:
                    topics.append({"error_code": Error.UNKNOWN_TOPIC_ID, "name": None, "topic_id": tid,
                                   "partitions": []})
                    continue
            t = gw.layout.topic(ctx, name)
            if t is None and explicit and auto:
                if not LEGAL_NAME.match(name):
                    topics.append({"error_code": Error.INVALID_TOPIC_EXCEPTION, "name": name.decode(errors="replace"),
                                   "partitions": []})
                    continue
                t = create(conn, name, gw.default_partitions, {})
            if t is None:
                topics.append({"error_code": Error.UNKNOWN_TOPIC_OR_PARTITION, "name": name.decode(errors="replace"),
                               "partitions": []})
                continue
            leaders = gw.leaders(t.name, t.partitions, brokers)
        except StoreError as e:
            topics.append({"error_code": _denied(e), "name": (name or b"").decode(errors="replace"), "partitions": []})
            continue
        topics.append({"error_code": Error.NONE, "name": t.name.decode(errors="replace"), "topic_id": t.id,
                       "is_internal": False, "partitions": [
                           {"error_code": Error.NONE if n >= 0 else Error.LEADER_NOT_AVAILABLE,
                            "partition_index": p, "leader_id": n, "leader_epoch": e,
                            "replica_nodes": live, "isr_nodes": live, "offline_replicas": []}
                           for p, (n, e) in sorted(leaders.items())]})
    return encode(req, {"throttle_time_ms": 0,
                        "brokers": [{"node_id": n, "host": h, "port": p, "rack": None}
                                    for n, (h, p) in sorted(brokers.items())],
                        "cluster_id": gw.node.config.cluster_name, "controller_id": min(live),
                        "topics": topics, "error_code": Error.NONE})


# -- CreateTopics, DeleteTopics -------------------------------------------------------------------

class ConfigError(Exception):
    pass


def topic_of(name: bytes, partitions: int, configs: dict[str, str | None]) -> Topic:
    t = Topic(name=name, id=uuid.uuid4(), partitions=partitions)
    for k, val in configs.items():
        if k not in TOPIC_CONFIGS:
            raise ConfigError(f"Unknown topic config name: {k}")
        if val is None:
            raise ConfigError(f"Null value not supported for topic config {k}")
        try:
            if k == "retention.ms":
                t.retention_ms = int(val)
            elif k == "retention.bytes":
                t.retention_bytes = int(val)
            elif k == "max.message.bytes":
                t.message_bytes = int(val)
            elif k == "compression.type":
                if val not in COMPRESSIONS:
                    raise ValueError
                t.compression = val
            elif k == "cleanup.policy" and val != "delete":
                raise ConfigError("cleanup.policy: only delete is supported (no log compaction)")
            elif k == "message.timestamp.type" and val != "CreateTime":
                raise ConfigError("message.timestamp.type: only CreateTime is supported")
        except ValueError:
            raise ConfigError(f"Invalid value {val} for configuration {k}") from None
    return t


def create(conn: Any, name: bytes, partitions: int, configs: dict[str, str | None],
           assignments: dict[int, int] | None = None, validate_only: bool = False) -> Topic:
    gw = conn.gw
    t = topic_of(name, partitions, configs)
    if not validate_only:
        live = sorted(gw.brokers())
        leaders = assignments or {p: rendezvous(name, p, live) for p in range(partitions)}
        gw.layout.create_topic(conn.ctx, t, leaders)
    return t


def topic_configs(t: Topic) -> list[tuple[str, str]]:
    return [("retention.ms", str(t.retention_ms)), ("retention.bytes", str(t.retention_bytes)),
            ("compression.type", t.compression), ("max.message.bytes", str(t.message_bytes)),
            ("cleanup.policy", "delete"), ("message.timestamp.type", "CreateTime")]


def create_topics(conn: Any, req: Request) -> bytes:
    gw, ctx, b = conn.gw, conn.ctx, req.body
    live = gw.brokers()
    out = []
    created: list[dict[str, Any]] = []
    for ct in b.topics:
        name = ct.name.encode()
        res: dict[str, Any] = {"name": ct.name, "topic_id": ZERO_UUID, "error_code": Error.NONE, "error_message": None}
        out.append(res)
        n = ct.num_partitions
        rf = ct.replication_factor
        assignments = None
        if ct.assignments:
            if n != -1 or rf != -1:
                res.update(error_code=Error.INVALID_REQUEST,
                           error_message="Both numPartitions or replicationFactor and replicasAssignments were set.")
                continue
            assignments = {a.partition_index: (a.broker_ids[0] if a.broker_ids else -1) for a in ct.assignments}
            n = len(assignments)
            if sorted(assignments) != list(range(n)) or any(x not in live for x in assignments.values()):
                res.update(error_code=Error.INVALID_REQUEST, error_message="Invalid replica assignment.")
                continue
        if n == -1:
            n = gw.default_partitions
        if not LEGAL_NAME.match(name) or name in (b".", b".."):
            res.update(error_code=Error.INVALID_TOPIC_EXCEPTION, error_message=f"Topic name {ct.name!r} is illegal")
            continue
        if n < 1:
            res.update(error_code=Error.INVALID_PARTITIONS, error_message="Number of partitions must be larger than 0.")
            continue
        if rf == 0 or rf < -1 or rf > len(live):
            res.update(error_code=Error.INVALID_REPLICATION_FACTOR,
                       error_message=f"Replication factor: {rf} larger than available brokers: {len(live)}."
                       if rf > 0 else "Replication factor must be larger than 0, or -1 to use the default value.")
            continue
        try:
            if gw.layout.topic(ctx, name) is not None:
                res.update(error_code=Error.TOPIC_ALREADY_EXISTS, error_message=f"Topic '{ct.name}' already exists.")
                continue
            t = create(conn, name, n, {c.name: c.value for c in ct.configs}, assignments, b.validate_only)
        except ConfigError as e:
            res.update(error_code=Error.INVALID_CONFIG, error_message=str(e))
            continue
        except StoreError as e:
            res.update(error_code=_denied(e), error_message=e.text)
            continue
        if not b.validate_only:
            created.append(res)
        res.update(topic_id=t.id, num_partitions=n, replication_factor=len(live),
                   configs=[{"name": k, "value": val, "read_only": False, "config_source": 5, "is_sensitive": False}
                            for k, val in topic_configs(t)])
    if created and b.timeout_ms > 0:  # answered once the topics are on the in-sync peers (timeout 0: at
        return _created(conn, req, out, created, b.timeout_ms, gw.written(ctx))  # once, as Kafka), so any
    return encode(req, {"throttle_time_ms": 0, "topics": out})  # node then knows them


async def _created(conn: Any, req: Request, out: list, created: list, timeout_ms: int,
                   position: dict[int, int]) -> bytes:
    code, message = await replicated(conn, position, timeout_ms, leading=False)
    if code != Error.NONE:
        for res in created:
            res.update(error_code=code, error_message=message)
    return encode(req, {"throttle_time_ms": 0, "topics": out})


def delete_topics(conn: Any, req: Request) -> bytes:
    gw, ctx, b = conn.gw, conn.ctx, req.body
    if req.version >= 6:
        wanted = [(t.name, t.topic_id) for t in b.topics]
    else:
        wanted = [(n, None) for n in b.topic_names]
    out = []
    for name, tid in wanted:
        res: dict[str, Any] = {"name": name, "topic_id": tid or ZERO_UUID, "error_code": Error.NONE,
                               "error_message": None}
        out.append(res)
        try:
            bname = name.encode() if name is not None else None
            if bname is None and tid is not None and tid != ZERO_UUID:
                bname = gw.layout.topic_by_id(ctx, tid)
                if bname is None:
                    res["error_code"] = Error.UNKNOWN_TOPIC_ID
                    continue
                res["name"] = bname.decode(errors="replace")
            t = gw.layout.topic(ctx, bname) if bname else None
            if t is None:
                res["error_code"] = Error.UNKNOWN_TOPIC_OR_PARTITION
                continue
            res["topic_id"] = t.id
            gw.layout.delete_topic(ctx, t)
        except StoreError as e:
            res.update(error_code=_denied(e), error_message=e.text)
    return encode(req, {"throttle_time_ms": 0, "responses": out})


# -- Produce ----------------------------------------------------------------------------------------

def _partition_leader(conn: Any, t: Topic, p: int, brokers: dict) -> tuple[int, int]:
    return conn.gw.leaders(t.name, t.partitions, brokers).get(p, (-1, -1))


def _led_here(conn: Any, t: Topic | None, index: int, brokers: dict, res: dict[str, Any], code: int) -> int | None:
    """The leader epoch of partition ``index`` of ``t`` when this node leads it; else None,
    with the error in ``res`` (``code`` when there is no such partition; NOT_LEADER_OR_FOLLOWER
    with the current leader when another node leads it)."""
    if t is None or not 0 <= index < t.partitions:
        res["error_code"] = code
        return None
    leader, epoch = _partition_leader(conn, t, index, brokers)
    if leader != conn.gw.node_id:
        res["error_code"] = Error.NOT_LEADER_OR_FOLLOWER
        res["current_leader"] = {"leader_id": leader, "leader_epoch": epoch}
        return None
    return epoch


def _endpoints(brokers: dict) -> list[dict[str, Any]]:
    return [{"node_id": n, "host": h, "port": port, "rack": None} for n, (h, port) in sorted(brokers.items())]


def _refused(req: Request, code: int, message: str) -> list[dict[str, Any]]:
    """Every partition of a produce request answered with ``code``."""
    return [{"name": td.name, "partition_responses": [
        {"index": pd.index, "error_code": code, "base_offset": -1, "log_append_time_ms": -1, "log_start_offset": -1,
         "record_errors": [], "error_message": message} for pd in td.partition_data]} for td in req.body.topic_data]


def produce(conn: Any, req: Request) -> Any:
    gw, b, v = conn.gw, req.body, req.version
    failing = gw.storage_error()
    if failing is not None:  # a full disk: nothing is appended (RESP clients get MISCONF)
        if b.acks == 0:
            return None
        return encode(req, {"responses": _refused(req, Error.KAFKA_STORAGE_ERROR, failing), "throttle_time_ms": 0})
    brokers = gw.brokers()
    topics_out = []
    position: dict[int, int] = {}  # (what acks=all waits for: replicas.py)
    appended: list[dict[str, Any]] = []
    moved = False
    for td in b.topic_data:
        parts: list[dict[str, Any]] = []
        topics_out.append({"name": td.name, "partition_responses": parts})
        name = td.name.encode()
        t, code = _topic(conn, td.name)
        if t is None and code == Error.UNKNOWN_TOPIC_OR_PARTITION and gw.auto_create and LEGAL_NAME.match(name):
            try:
                t = create(conn, name, gw.default_partitions, {})
            except StoreError as e:
                code = _denied(e)
        for pd in td.partition_data:
            res: dict[str, Any] = {"index": pd.index, "error_code": Error.NONE, "base_offset": -1,
                                   "log_append_time_ms": -1, "log_start_offset": -1, "record_errors": [],
                                   "error_message": None}
            parts.append(res)
            if v < APIS_PRODUCE_SERVED:
                res["error_code"] = Error.UNSUPPORTED_VERSION
                continue
            if _led_here(conn, t, pd.index, brokers, res, code) is None:
                moved = moved or "current_leader" in res
                continue
            if b.transactional_id is not None:
                res.update(error_code=Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED, error_message=_NO_TXN)
                continue
            try:
                pos = _append(conn, t, pd, res, b.acks == -1)
            except records.BadBatch as e:
                res.update(error_code=e.code, error_message=str(e))
                continue
            except ValueError as e:  # more records than one request may add to one partition
                res.update(error_code=Error.RECORD_LIST_TOO_LARGE, error_message=str(e))
                continue
            except StoreError as e:
                res.update(error_code=_denied(e), error_message=e.text)
                continue
            if pos:
                replicas.extend(position, pos)
                appended.append(res)
    if b.acks == 0:
        conn.node.request_tick()
        return None
    fields = {"responses": topics_out, "throttle_time_ms": 0}
    if moved and v >= 10:
        fields["node_endpoints"] = _endpoints(brokers)
    if b.acks != -1 or not appended or gw.logs.acked_all(position):
        return encode(req, fields)
    return _produce_all(conn, req, fields, appended, position, b.timeout_ms)


def _append(conn: Any, t: Topic, pd: Any, res: dict[str, Any], acks_all: bool = False) -> dict[int, int]:
    """Store one partition's record set (``res``: its response); the replication-log
    position acks=all waits for (``replicas.py``; empty: nothing to wait for, ``res`` says
    why): with ``acks_all``, an idempotent producer's state record's too (on a node of
    shard workers it may be on another worker than the stream, in another log)."""
    gw, ctx = conn.gw, conn.ctx
    if pd.records is None:
        raise records.BadBatch(Error.INVALID_RECORD, "no records")
    batches = records.decode(pd.records, Error.CORRUPT_MESSAGE, Error.INVALID_RECORD)
    for bt in batches:
        if bt.size > t.message_bytes:
            raise records.BadBatch(Error.MESSAGE_TOO_LARGE, f"batch of {bt.size} bytes is larger than "
                                                            f"max.message.bytes {t.message_bytes}")
        if bt.transactional:
            raise records.BadBatch(Error.INVALID_RECORD, _NO_TXN)
    key = gw.layout.stream_key(t.name, pd.index)
    idem = batches[0].producer_id >= 0
    if idem:  # an idempotent producer (producers.py)
        if len(batches) != 1:
            raise records.BadBatch(Error.INVALID_RECORD, "an idempotent producer sends one batch per partition")
        bt = batches[0]
        pkey, pid = gw.layout.producers_key(t.name, pd.index), b"%d" % bt.producer_id
        state = producers.decode(gw.layout.call(gw.sys, b"HGET", pkey, pid))
        last = (bt.base_sequence + len(bt.records) - 1) % producers.SEQ_MOD
        verdict = producers.check(state, bt.producer_epoch, bt.base_sequence, last)
        if verdict.error:
            res["error_code"] = verdict.error
            return {}
        if verdict.duplicate_of >= 0:  # a retry: stored once, answered with where it went
            res.update(base_offset=verdict.duplicate_of, log_start_offset=gw.logs.log_start(key))
            return gw.position_of(key)  # (acks=all: what its worker has, the original included)
    first, pos, start = gw.logs.append(ctx, key, [r for bt in batches for r in bt.records])
    if idem:
        gw.record("a producer's sequence", b"HSET", pkey, pid, producers.appended(
            state, bt.producer_epoch, bt.base_sequence, last, first, wall_ms()).encode())
        if acks_all:
            pos = dict(pos)
            replicas.extend(pos, gw.written_at(pkey))
    res.update(base_offset=first, log_start_offset=start)
    return pos


async def replicated(conn: Any, position: dict[int, int], timeout_ms: int, leading: bool) -> tuple[int, str | None]:
    """Wait, as WAIT does, until every in-sync peer has this node's log up to ``position``
    (on a node of shard workers, each worker's log up to its part: ``replicas.py``) and
    they make a majority with it (``Logs.acked_all``): (NONE, None), or the error and its
    message: KAFKA_STORAGE_ERROR when the commit failed, REQUEST_TIMED_OUT after
    ``timeout_ms``, and, for a partition's leader (``leading``), NOT_LEADER_OR_FOLLOWER at
    once if this node may no longer lead (``KafkaGateway.can_lead``)."""
    gw = conn.gw
    if not await conn._committed():
        return Error.KAFKA_STORAGE_ERROR, gw.storage_error()
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(timeout_ms, 0) / 1000
    reps = gw.replicas
    elsewhere = any(j != reps.index for j in position)  # (a sibling's acks come with its next poll)
    reps.waiting += 1
    try:
        while True:
            if leading and not gw.can_lead():  # (no majority any more: the records may be on this node only)
                return Error.NOT_LEADER_OR_FOLLOWER, "this node lost the majority it needs to lead"
            if gw.logs.acked_all(position):
                return Error.NONE, None
            left = deadline - loop.time()
            if left <= 0:
                return Error.REQUEST_TIMED_OUT, "not acknowledged by every in-sync peer in time"
            if elsewhere:
                await reps.polled(min(left, 0.1))
                continue
            try:  # an ack, or a peer going down (checked every 100 ms), ends the wait
                await asyncio.wait_for(conn.node.ack_waiter().wait(), min(left, 0.1))
            except asyncio.TimeoutError:
                pass
    finally:
        reps.waiting -= 1


async def _produce_all(conn: Any, req: Request, fields: dict, appended: list, position: dict[int, int],
                       timeout_ms: int) -> bytes:
    """acks=all: answer once the appends are replicated (``replicated``)."""
    code, message = await replicated(conn, position, timeout_ms, leading=True)
    if code != Error.NONE:
        for res in appended:
            res.update(error_code=code, base_offset=-1, error_message=message)
    return encode(req, fields)


# -- Fetch ------------------------------------------------------------------------------------------

def _fetch_once(conn: Any, req: Request, brokers: dict) -> tuple[list, int, list[bytes], bool]:
    gw, ctx, b, v = conn.gw, conn.ctx, req.body, req.version
    budget = b.max_bytes if v >= 3 else 1 << 30
    total = 0
    out = []
    keys = []
    errors = False
    for ft in b.topics:
        parts: list[dict[str, Any]] = []
        out.append({"topic": ft.topic, "partitions": parts})
        t, code = _topic(conn, ft.topic)
        for fp in ft.partitions:
            res: dict[str, Any] = {"partition_index": fp.partition, "error_code": Error.NONE, "high_watermark": -1,
                                   "last_stable_offset": -1, "log_start_offset": -1, "aborted_transactions": None,
                                   "preferred_read_replica": -1, "records": b""}
            parts.append(res)
            epoch = _led_here(conn, t, fp.partition, brokers, res, code)
            if epoch is None:
                errors = True
                continue
            cle = getattr(fp, "current_leader_epoch", -1)
            if cle is not None and cle >= 0 and cle != epoch:
                res["error_code"] = Error.UNKNOWN_LEADER_EPOCH if cle > epoch else Error.FENCED_LEADER_EPOCH
                errors = True
                continue
            key = gw.layout.stream_key(t.name, fp.partition)
            try:
                hw = gw.logs.high_watermark(key)
                start = gw.logs.log_start(key)
            except StoreError as e:  # (its shard worker restarting: LOADING)
                res["error_code"] = _denied(e)
                errors = True
                continue
            keys.append(key)
            res.update(high_watermark=hw, last_stable_offset=hw, log_start_offset=start)
            o = fp.fetch_offset
            if o < start or o > hw:
                res["error_code"] = Error.OFFSET_OUT_OF_RANGE
                errors = True
                continue
            if o == hw or (budget <= 0 and total):
                continue
            limit = min(fp.partition_max_bytes, budget) if total else fp.partition_max_bytes
            try:
                entries = gw.logs.read(ctx, key, o, hw, limit)
            except StoreError as e:
                res["error_code"] = _denied(e)
                errors = True
                continue
            data, _ = records.encode(entries, records.CODECS.get(t.compression, 0), epoch, limit)
            res["records"] = data
            total += len(data)
            budget -= len(data)
    return out, total, keys, errors


async def _fetch(conn: Any, req: Request) -> bytes:
    gw, b = conn.gw, req.body
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(b.max_wait_ms, 0) / 1000
    brokers = gw.brokers()
    first = True
    while True:
        if not first:  # (on a node of shard workers: the reads of another step run in a round, rounds.py)
            await gw.round()
        first = False
        out, total, keys, errors = _fetch_once(conn, req, brokers)
        left = deadline - loop.time()
        if total >= max(b.min_bytes, 1) or errors or left <= 0 or not keys:
            break
        ev = asyncio.Event()
        gw.watch(keys, ev)
        try:
            await asyncio.wait_for(ev.wait(), left)
        except asyncio.TimeoutError:
            pass
        finally:
            gw.unwatch(keys, ev)
    return encode(req, {"throttle_time_ms": 0, "error_code": Error.NONE, "session_id": 0, "responses": out})


def fetch(conn: Any, req: Request) -> Any:
    b = req.body
    if req.version >= 7 and b.session_epoch not in (-1, 0):
        return encode(req, {"throttle_time_ms": 0, "error_code": 70, "session_id": 0, "responses": []})
    return _fetch(conn, req)


# -- ListOffsets ------------------------------------------------------------------------------------

LATEST, EARLIEST = -1, -2


def offset_for_time(conn: Any, key: bytes, ts: int, end: int) -> tuple[int, int]:
    """(offset, timestamp) of the first record whose timestamp is at least ``ts``, (-1, -1)
    if none is (a scan from the log start: the records carry their own timestamps)."""
    gw = conn.gw
    start = gw.logs.log_start(key)
    while start < end:
        entries = gw.logs.read(conn.ctx, key, start, end, 1 << 20)
        if not entries:
            break
        for off, sid, flat in entries:
            rts = records.record_of(sid[0], flat)[2]
            if rts >= ts:
                return off, rts
        start = entries[-1][0] + 1
    return -1, -1


def list_offsets(conn: Any, req: Request) -> bytes:
    gw, b = conn.gw, req.body
    brokers = gw.brokers()
    out = []
    for lt in b.topics:
        parts: list[dict[str, Any]] = []
        out.append({"name": lt.name, "partitions": parts})
        t, code = _topic(conn, lt.name)
        for lp in lt.partitions:
            res: dict[str, Any] = {"partition_index": lp.partition_index, "error_code": Error.NONE,
                                   "timestamp": -1, "offset": -1, "leader_epoch": -1}
            parts.append(res)
            if t is None or not 0 <= lp.partition_index < t.partitions:
                res["error_code"] = code
                continue
            leader, epoch = _partition_leader(conn, t, lp.partition_index, brokers)
            if leader != gw.node_id and b.replica_id != -2:
                res["error_code"] = Error.NOT_LEADER_OR_FOLLOWER
                continue
            key = gw.layout.stream_key(t.name, lp.partition_index)
            res["leader_epoch"] = epoch
            try:
                if lp.timestamp == LATEST:
                    res["offset"] = gw.logs.high_watermark(key)
                elif lp.timestamp == EARLIEST:
                    res["offset"] = gw.logs.log_start(key)
                elif lp.timestamp >= 0:
                    res["offset"], res["timestamp"] = offset_for_time(conn, key, lp.timestamp,
                                                                      gw.logs.high_watermark(key))
                else:
                    res["error_code"] = Error.INVALID_REQUEST
            except StoreError as e:
                res["error_code"] = _denied(e)
    return encode(req, {"throttle_time_ms": 0, "topics": out})


APIS_PRODUCE_SERVED = 3
HANDLERS = {0: produce, 1: fetch, 2: list_offsets, 3: metadata, 18: api_versions_, 19: create_topics,
            20: delete_topics}


# -- groups -----------------------------------------------------------------------------------------

GROUP, TRANSACTION = 0, 1


def find_coordinator(conn: Any, req: Request) -> bytes:
    gw, b, v = conn.gw, req.body, req.version
    brokers = gw.brokers()

    def one(key: str, key_type: int) -> dict[str, Any]:
        if key_type == TRANSACTION:  # no transaction coordinator: transactions are not served
            return {"key": key, "error_code": Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                    "error_message": _NO_TXN, "node_id": -1, "host": "", "port": -1}
        if key_type != GROUP:
            return {"key": key, "error_code": Error.INVALID_REQUEST, "error_message": None, "node_id": -1,
                    "host": "", "port": -1}
        node = gw.groups.coordinator_of(key)
        host, port = brokers.get(node, ("", -1))
        return {"key": key, "error_code": Error.NONE if port != -1 else Error.COORDINATOR_NOT_AVAILABLE,
                "error_message": None, "node_id": node if port != -1 else -1, "host": host, "port": port}

    key_type = b.key_type if v >= 1 else GROUP
    if v >= 4:
        return encode(req, {"throttle_time_ms": 0, "coordinators": [one(k, key_type) for k in b.coordinator_keys]})
    r = one(b.key, key_type)
    r.pop("key")
    return encode(req, dict(r, throttle_time_ms=0))


_ERROR_NAMES = {v: k for k, v in vars(Error).items() if isinstance(v, int)}


def _group_said(what: str, b: Any, code: int, generation: Any = "") -> None:
    """A group request's answer, logged at debug level (``log_level debug``): what a member was told."""
    if log.isEnabledFor(logging.DEBUG):
        log.debug("%s group %s member %s generation %s: %s%s", what, b.group_id, b.member_id or "(new)",
                  getattr(b, "generation_id", "-"), _ERROR_NAMES.get(code, code),
                  f" (generation {generation})" if generation != "" else "")


async def join_group(conn: Any, req: Request) -> bytes:
    res = await conn.gw.groups.join(conn, req.body, req.version)
    _group_said("JoinGroup", req.body, res["error_code"], res["generation_id"])
    return encode(req, dict(res, throttle_time_ms=0))


async def sync_group(conn: Any, req: Request) -> bytes:
    res = await conn.gw.groups.sync(req.body)
    _group_said("SyncGroup", req.body, res["error_code"])
    return encode(req, dict(res, throttle_time_ms=0))


def heartbeat(conn: Any, req: Request) -> bytes:
    code = conn.gw.groups.heartbeat(req.body)
    _group_said("Heartbeat", req.body, code)
    return encode(req, {"throttle_time_ms": 0, "error_code": code})


def leave_group(conn: Any, req: Request) -> bytes:
    b = req.body
    ids = [b.member_id] if req.version < 3 else [m.member_id for m in b.members]
    code, codes = conn.gw.groups.leave(b.group_id, ids)
    if req.version < 3:
        return encode(req, {"throttle_time_ms": 0, "error_code": code or (codes[0] if codes else 0)})
    return encode(req, {"throttle_time_ms": 0, "error_code": code,
                        "members": [{"member_id": m, "group_instance_id": None, "error_code": c}
                                    for m, c in zip(ids, codes)]})


def offset_commit(conn: Any, req: Request) -> bytes:
    gw, ctx, b = conn.gw, conn.ctx, req.body
    code = gw.groups.commit_check(b)
    group = b.group_id.encode()
    out = []
    wrote = False
    for tt in b.topics:
        parts: list[dict[str, Any]] = []
        out.append({"name": tt.name, "partitions": parts})
        t, tcode = _topic(conn, tt.name) if code == Error.NONE else (None, code)
        for pp in tt.partitions:
            pc = code
            if pc == Error.NONE:
                if t is None or not 0 <= pp.partition_index < t.partitions:
                    pc = tcode
                else:
                    try:
                        gw.layout.call(ctx, b"SET", gw.layout.commit_key(t.name, pp.partition_index, group),
                                       b"%d" % pp.committed_offset)
                        wrote = True
                    except StoreError as e:
                        pc = Error.GROUP_AUTHORIZATION_FAILED if e.denied else Error.KAFKA_STORAGE_ERROR
            parts.append({"partition_index": pp.partition_index, "error_code": pc})
    if wrote:
        gw.record("a group's name", b"SADD", gw.layout.groups_key, group)
    if log.isEnabledFor(logging.DEBUG):
        log.debug("OffsetCommit group %s member %s generation %s: %s %s", b.group_id, b.member_id or "-",
                  b.generation_id_or_member_epoch, _ERROR_NAMES.get(code, code),
                  [(tt.name, pp.partition_index, pp.committed_offset) for tt in b.topics for pp in tt.partitions])
    return encode(req, {"throttle_time_ms": 0, "topics": out})


def _committed(conn: Any, group: str, topics: Any) -> tuple[int, list[dict[str, Any]]]:
    """(error, topics with their partitions' committed offsets) of ``group``; ``topics``
    None: every partition of every topic with a commit."""
    gw, ctx = conn.gw, conn.ctx
    lay = gw.layout
    gb = group.encode()
    wanted: list[tuple[str, list[int] | None]]
    if topics is None:
        wanted = [(n.decode(errors="replace"), None) for n in lay.topic_names(ctx)]
    else:
        wanted = [(t.name, list(t.partition_indexes)) for t in topics]
    out = []
    for name, parts in wanted:
        try:
            t = lay.topic(ctx, name.encode())
        except StoreError as e:
            return _denied(e), []
        idx = parts if parts is not None else (list(range(t.partitions)) if t else [])
        keys = [lay.commit_key(name.encode(), p, gb) for p in idx]
        try:
            vals = lay.call(ctx, b"MGET", *keys) if keys else []
        except StoreError as e:
            return (Error.GROUP_AUTHORIZATION_FAILED if e.denied else Error.KAFKA_STORAGE_ERROR), []
        rows = [{"partition_index": p, "committed_offset": int(v) if v is not None else -1,
                 "committed_leader_epoch": -1, "metadata": "", "error_code": Error.NONE}
                for p, v in zip(idx, vals)]
        if parts is None:
            rows = [r for r in rows if r["committed_offset"] >= 0]
            if not rows:
                continue
        out.append({"name": name, "partitions": rows})
    return Error.NONE, out


def offset_fetch(conn: Any, req: Request) -> bytes:
    b, v = req.body, req.version
    if v >= 8:
        groups = []
        for g in b.groups:
            code, topics = _committed(conn, g.group_id, g.topics)
            groups.append({"group_id": g.group_id, "topics": topics, "error_code": code})
        return encode(req, {"throttle_time_ms": 0, "groups": groups})
    code, topics = _committed(conn, b.group_id, b.topics)
    return encode(req, {"throttle_time_ms": 0, "topics": topics, "error_code": code})


def describe_groups(conn: Any, req: Request) -> bytes:
    return encode(req, {"throttle_time_ms": 0, "groups": [conn.gw.groups.describe(g) for g in req.body.groups]})


def list_groups(conn: Any, req: Request) -> bytes:
    b = req.body
    states = set(b.states_filter or ()) if req.version >= 4 else set()
    return encode(req, {"throttle_time_ms": 0, "error_code": Error.NONE, "groups": [
        {"group_id": n, "protocol_type": pt, "group_state": st}
        for n, pt, st in conn.gw.groups.listed() if not states or st in states]})


HANDLERS.update({8: offset_commit, 9: offset_fetch, 10: find_coordinator, 11: join_group, 12: heartbeat,
                 13: leave_group, 14: sync_group, 15: describe_groups, 16: list_groups})


# -- InitProducerId, SASL, DescribeConfigs -------------------------------------------------------------

def init_producer_id(conn: Any, req: Request) -> bytes:
    gw, b = conn.gw, req.body
    out: dict[str, Any] = {"throttle_time_ms": 0, "error_code": Error.NONE, "producer_id": -1, "producer_epoch": -1}
    if b.transactional_id is not None:
        return encode(req, dict(out, error_code=Error.TRANSACTIONAL_ID_AUTHORIZATION_FAILED))
    pid, epoch = (b.producer_id, b.producer_epoch + 1) if req.version >= 3 else (-1, 0)
    if pid < 0 or not 0 <= epoch < 1 << 15:  # a new producer (or one whose epochs ran out)
        try:
            n = gw.layout.call(gw.sys, b"INCR", gw.layout.producer_ids_key(gw.node_id))
        except StoreError:  # (a full disk) retriable for the client
            return encode(req, dict(out, error_code=Error.COORDINATOR_NOT_AVAILABLE))
        pid, epoch = producers.producer_id(n, gw.node_id), 0
    return encode(req, dict(out, producer_id=pid, producer_epoch=epoch))


PLAIN = "PLAIN"


def sasl_handshake(conn: Any, req: Request) -> bytes:
    """SaslHandshake: PLAIN, the one mechanism served. After v0 the client sends the
    token as a bare frame (``Connection``); after v1 in SaslAuthenticate."""
    ok = req.body.mechanism == PLAIN and not conn.sasl_done
    if ok:
        conn.sasl_mechanism = PLAIN
        conn.raw_sasl = req.version == 0
    code = Error.NONE if ok else (Error.ILLEGAL_SASL_STATE if conn.sasl_done
                                  else Error.UNSUPPORTED_SASL_MECHANISM)
    return encode(req, {"error_code": code, "mechanisms": [PLAIN]})


def sasl_authenticate(conn: Any, req: Request) -> bytes:
    if conn.sasl_mechanism is None or conn.raw_sasl:
        conn.close_after_response = True
        return encode(req, {"error_code": Error.ILLEGAL_SASL_STATE, "auth_bytes": b"", "session_lifetime_ms": 0,
                            "error_message": "SaslAuthenticate without a SaslHandshake v1 first"})
    failed = conn.authenticate(bytes(req.body.auth_bytes))
    if failed:
        conn.close_after_response = True
    return encode(req, {"error_code": Error.SASL_AUTHENTICATION_FAILED if failed else Error.NONE,
                        "error_message": failed, "auth_bytes": b"", "session_lifetime_ms": 0})


TOPIC_RESOURCE, BROKER_RESOURCE = 2, 4
# DescribeConfigs config sources and types (org.apache.kafka.common.requests.DescribeConfigsResponse)
DYNAMIC_TOPIC_CONFIG, STATIC_BROKER_CONFIG, DEFAULT_CONFIG = 1, 4, 5
CONFIG_TYPES = {"BOOLEAN": 1, "STRING": 2, "INT": 3, "LONG": 5, "LIST": 7}
_TOPIC_DEFAULTS = dict(topic_configs(topic_of(b"-", 1, {})))
_TOPIC_TYPES = {"retention.ms": "LONG", "retention.bytes": "LONG", "max.message.bytes": "INT"}


def broker_configs(gw: Any) -> list[tuple[str, str, str]]:
    """(name, value, type) of the broker settings DescribeConfigs reports for this node."""
    cfg = gw.node.config
    return [("broker.id", str(gw.node_id), "INT"),
            ("auto.create.topics.enable", "true" if gw.auto_create else "false", "BOOLEAN"),
            ("num.partitions", str(gw.default_partitions), "INT"),
            ("socket.request.max.bytes", str(gw.max_request), "INT"),
            ("message.max.bytes", str(DEFAULT_MESSAGE_BYTES), "INT"),
            ("group.initial.rebalance.delay.ms", str(cfg.kafka_group_initial_rebalance_delay_ms), "INT"),
            ("replica.lag.time.max.ms", str(cfg.kafka_replica_lag_time_max_ms), "LONG"),
            ("log.retention.check.interval.ms", str(cfg.kafka_retention_check_interval_ms), "LONG"),
            ("producer.id.expiration.ms", str(producers.EXPIRATION_MS), "INT"),
            ("sasl.enabled.mechanisms", PLAIN, "LIST")]


def describe_configs(conn: Any, req: Request) -> bytes:
    gw, b = conn.gw, req.body
    out = []
    for r in b.resources:
        res: dict[str, Any] = {"error_code": Error.NONE, "error_message": None, "resource_type": r.resource_type,
                               "resource_name": r.resource_name, "configs": []}
        out.append(res)
        if r.resource_type == TOPIC_RESOURCE:
            t, code = _topic(conn, r.resource_name)
            if t is None:
                res["error_code"] = code
                continue
            rows = [(k, val, DEFAULT_CONFIG if _TOPIC_DEFAULTS.get(k) == val else DYNAMIC_TOPIC_CONFIG,
                     _TOPIC_TYPES.get(k, "STRING")) for k, val in topic_configs(t)]
        elif r.resource_type == BROKER_RESOURCE:
            if r.resource_name not in ("", str(gw.node_id)):
                res.update(error_code=Error.INVALID_REQUEST, error_message=f"this is broker {gw.node_id}")
                continue
            rows = [(k, val, STATIC_BROKER_CONFIG, ty) for k, val, ty in broker_configs(gw)]
        else:
            res.update(error_code=Error.INVALID_REQUEST, error_message=f"resource type {r.resource_type} "
                                                                      "has no configs here")
            continue
        wanted = set(r.configuration_keys) if r.configuration_keys is not None else None
        res["configs"] = [{"name": k, "value": val, "read_only": r.resource_type == BROKER_RESOURCE,
                           "config_source": src, "is_sensitive": False,
                           "synonyms": [{"name": k, "value": val, "source": src}] if b.include_synonyms else [],
                           "config_type": CONFIG_TYPES[ty], "documentation": None}
                          for k, val, src, ty in rows if wanted is None or k in wanted]
    return encode(req, {"throttle_time_ms": 0, "results": out})


HANDLERS.update({22: init_producer_id, 17: sasl_handshake, 36: sasl_authenticate, 32: describe_configs})
