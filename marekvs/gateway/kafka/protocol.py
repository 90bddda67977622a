"""The Kafka wire: frames, request headers, the APIs this gateway serves and their versions.

The message structs are kafka-python's (``kafka.protocol``), generated from the Kafka
project's JSON message schemas: every version of every API, flexible versions (compact
strings and arrays, tagged fields) included, decoded and encoded by one schema-driven
codec, here used from the server's side (decode requests, encode responses).

``APIS`` is the one table of what is served: per API key its request and response
structs and the versions implemented. ApiVersions answers with exactly this table (so
what a client negotiates is what the handlers implement). As Apache Kafka 4.0 does,
Produce is listed from version 0 because librdkafka refuses a broker whose ApiVersions
omits the old Produce versions (KAFKA-18659); versions 0 to 2 (the legacy message
formats) are then refused with UNSUPPORTED_VERSION.

Bad input: a frame larger than the request limit, a frame that does not parse, or an API
key or version not in ``APIS`` closes the connection, as Kafka's broker does (it cannot
know the response's shape); an ApiVersions request of a version it does not know gets the
version-0 answer with UNSUPPORTED_VERSION, as Kafka's, so the client can retry with one it
does.
"""

from __future__ import annotations

import struct
from typing import Any, NamedTuple

from kafka.protocol import admin, consumer, metadata, producer, sasl
from kafka.protocol.api_header import RequestHeader

_HEAD = struct.Struct(">hhi")  # api key, api version, correlation id


class ProtocolError(Exception):
    """A request this gateway cannot answer: the connection is closed."""


class Api(NamedTuple):
    key: int
    name: str
    request: Any
    response: Any
    min_version: int
    max_version: int
    served_from: int  # the lowest version the handler implements (below: UNSUPPORTED_VERSION)


def _api(request: Any, response: Any, lo: int, hi: int, served_from: int | None = None) -> Api:
    return Api(request.API_KEY, request.name[:-len("Request")], request, response, lo, hi,
               lo if served_from is None else served_from)


APIS: dict[int, Api] = {a.key: a for a in (
    _api(producer.ProduceRequest, producer.ProduceResponse, 0, 11, served_from=3),
    _api(consumer.FetchRequest, consumer.FetchResponse, 4, 12),
    _api(consumer.ListOffsetsRequest, consumer.ListOffsetsResponse, 1, 6),
    _api(metadata.MetadataRequest, metadata.MetadataResponse, 0, 12),
    _api(metadata.ApiVersionsRequest, metadata.ApiVersionsResponse, 0, 3),
    _api(admin.CreateTopicsRequest, admin.CreateTopicsResponse, 2, 7),
    _api(admin.DeleteTopicsRequest, admin.DeleteTopicsResponse, 1, 6),
    _api(consumer.OffsetCommitRequest, consumer.OffsetCommitResponse, 2, 8),
    _api(consumer.OffsetFetchRequest, consumer.OffsetFetchResponse, 1, 8),
    _api(metadata.FindCoordinatorRequest, metadata.FindCoordinatorResponse, 0, 4),
    _api(consumer.JoinGroupRequest, consumer.JoinGroupResponse, 0, 9),
    _api(consumer.HeartbeatRequest, consumer.HeartbeatResponse, 0, 4),
    _api(consumer.LeaveGroupRequest, consumer.LeaveGroupResponse, 0, 5),
    _api(consumer.SyncGroupRequest, consumer.SyncGroupResponse, 0, 5),
    _api(admin.DescribeGroupsRequest, admin.DescribeGroupsResponse, 0, 5),
    _api(admin.ListGroupsRequest, admin.ListGroupsResponse, 0, 4),
    _api(producer.InitProducerIdRequest, producer.InitProducerIdResponse, 0, 4),
    _api(sasl.SaslHandshakeRequest, sasl.SaslHandshakeResponse, 0, 1),
    _api(sasl.SaslAuthenticateRequest, sasl.SaslAuthenticateResponse, 0, 2),
    _api(admin.DescribeConfigsRequest, admin.DescribeConfigsResponse, 1, 4),
)}
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
API_VERSIONS = 18


class Error:
    """Kafka's error codes (org.apache.kafka.common.protocol.Errors) that this gateway sends."""

    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    ILLEGAL_GENERATION = 22
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    TOPIC_AUTHORIZATION_FAILED = 29
    GROUP_AUTHORIZATION_FAILED = 30
    CLUSTER_AUTHORIZATION_FAILED = 31
    UNSUPPORTED_SASL_MECHANISM = 33
    ILLEGAL_SASL_STATE = 34
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    INVALID_PARTITIONS = 37
    INVALID_REPLICATION_FACTOR = 38
    INVALID_CONFIG = 40
    INVALID_REQUEST = 42
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45
    DUPLICATE_SEQUENCE_NUMBER = 46
    INVALID_PRODUCER_EPOCH = 47
    TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
    KAFKA_STORAGE_ERROR = 56
    SASL_AUTHENTICATION_FAILED = 58
    UNKNOWN_PRODUCER_ID = 59
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    MEMBER_ID_REQUIRED = 79
    INVALID_RECORD = 87
    UNKNOWN_TOPIC_ID = 100


class Request(NamedTuple):
    api: Api
    version: int
    correlation_id: int
    client_id: str | None
    body: Any  # the decoded request struct; None for an ApiVersions of an unknown version


def decode(frame: bytes | memoryview) -> Request:
    """One request frame (without its length prefix) -> ``Request``; ``ProtocolError``
    for what cannot be answered (the connection closes)."""
    if len(frame) < _HEAD.size:
        raise ProtocolError("request shorter than its header")
    key, version, correlation_id = _HEAD.unpack_from(frame)
    api = APIS.get(key)
    if api is None:
        raise ProtocolError(f"unknown API key {key}")
    if not api.min_version <= version <= api.max_version:
        if key == API_VERSIONS:  # answered in version 0, whatever it is
            return Request(api, version, correlation_id, None, None)
        raise ProtocolError(f"{api.name} version {version} is not supported")
    try:
        body = api.request.decode(frame, version=version, header=True)
    except Exception as e:  # the codec raises whatever a truncated or garbled field gives
        raise ProtocolError(f"malformed {api.name} v{version} request: {e!r}") from None
    header: RequestHeader = body.header
    return Request(api, version, correlation_id, header.client_id, body)


def encode(req: Request, fields: dict[str, Any], version: int | None = None) -> bytes:
    """The response frame (length prefix, header, body) to ``req`` with ``fields``
    (nested structs as dicts and lists of dicts; absent fields take their defaults)."""
    resp = message(req.api.response, fields, req.version if version is None else version)
    resp.with_header(correlation_id=req.correlation_id)
    return bytes(resp.encode(header=True, framed=True))


def message(cls: Any, fields: dict[str, Any], version: int) -> Any:
    """The kafka-python message ``cls`` (a request or response struct) of ``version`` with
    ``fields`` (nested structs as dicts and lists of dicts)."""
    return cls(**_convert(cls._struct, fields, top=True), version=version)


def _convert(field: Any, d: dict[str, Any], top: bool = False) -> Any:
    out = {}
    fields = field.fields
    for k, v in d.items():
        f = fields[k]
        if v is None:
            pass
        elif f.is_struct_array():
            v = [_convert(f, x) if isinstance(x, dict) else x for x in v]
        elif f.is_struct() and isinstance(v, dict):
            v = _convert(f, v)
        out[k] = v
    return out if top else field.data_class(**out)


def api_versions() -> list[dict[str, int]]:
    return [{"api_key": a.key, "min_version": a.min_version, "max_version": a.max_version}
            for a in sorted(APIS.values())]
