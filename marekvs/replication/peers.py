"""Peers: who they are, how to reach them (TLS), what a link to one is doing, and the
cluster secret every call to this node's gRPC server must carry.

The secret is checked once, by ``ClusterSecret``: a ``grpc.aio`` server interceptor that
``server`` installs, so every service on the port (replication, Pub/Sub relay,
anti-entropy, any added later) refuses a call without it before its handler runs, with
UNAUTHENTICATED "wrong cluster secret", logged with the caller's address and counted per
service (INFO antientropy's ``calls_refused`` includes its share).
"""

from __future__ import annotations

import asyncio
import collections
import hmac
import logging
import os
import re
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

import grpc

from marekvs.config import Config
from marekvs.core.partition import PARTITIONS
from marekvs.storage.identity import new_incarnation  # noqa: F401 - the one way to draw one

SECRET_HEADER = "x-marekvs-secret"
MAX_MESSAGE = 64 * 1024 * 1024
_OPTIONS = [("grpc.max_receive_message_length", MAX_MESSAGE), ("grpc.max_send_message_length", MAX_MESSAGE)]

log = logging.getLogger("marekvs.replication")


class PeerRefused(Exception):
    """The peer is not part of this cluster (name, id, format or partitions differ)."""


@dataclass
class PeerState:
    node_id: int
    grpc_addr: str
    resp_addr: str = ""
    state: str = "connecting"
    acked_seq: int = 0
    sent_seq: int = 0
    bytes_shipped: int = 0
    entries_shipped: int = 0
    batches_shipped: int = 0
    needs_resync: bool = False
    last_error: str = ""
    last_ack: float = 0.0
    wake: asyncio.Event = field(default_factory=asyncio.Event)
    acked: asyncio.Event = field(default_factory=asyncio.Event)
    # inbound: what we applied from this peer
    applied_seq: int = 0
    # the peer's log end at its last Hello, per incarnation of the peer's calling worker (a
    # peer of several workers: each says Hello for its own log; the Kafka gateway's catch-up:
    # gateway/kafka/replicas.py)
    hellos: dict[int, int] = field(default_factory=dict)
    applied_entries: int = 0
    applied_bytes: int = 0
    skipped_entries: int = 0  # received at or below the high-water mark (at-least-once)
    incarnation: int = 0  # of the peer's data directory, from its last handshake
    rechecked: float = 0.0  # monotonic time of the last handshake redone on a rival's claim
    # A peer of several shard workers (its Hello names them: docs/shards.md §5): this log
    # ships to each of them on a link of its own, a ``PeerState`` per worker (``parts``,
    # each with its ``parent`` and the worker's range ``first``..``last``); the peer's
    # own ``acked_seq``, ``sent_seq`` and ``state`` are then the parts' lowest and worst.
    parts: list["PeerState"] = field(default_factory=list)
    parent: "PeerState | None" = None
    first: int = 0
    last: int = PARTITIONS - 1
    incarnations: frozenset[int] = frozenset()  # of every worker of the peer (its map)
    retired: bool = False  # a part whose link is being stopped (see ``Sender._run_parts``)

    @property
    def whole(self) -> bool:
        """This link's receiver holds every partition (a node of one worker)."""
        return self.first == 0 and self.last == PARTITIONS - 1

    def sync_parts(self) -> None:
        """The peer's figures from its parts': the lowest ack, the worst state."""
        parts = self.parts
        if not parts:
            return
        self.acked_seq = min(q.acked_seq for q in parts)
        self.sent_seq = min(q.sent_seq for q in parts)
        self.needs_resync = any(q.needs_resync for q in parts)
        states = {q.state for q in parts}
        self.state = "streaming" if states == {"streaming"} else next(
            (s for s in ("refused", "behind", "needs_resync", "down", "connecting") if s in states), "connecting")


def parse_peer(spec: str) -> tuple[int, str]:
    """``id@host:port`` -> (id, "host:port")."""
    try:
        nid, addr = spec.split("@", 1)
        host, port = addr.rsplit(":", 1)
        int(port)
        return int(nid), addr
    except ValueError:
        raise ValueError(f"peer {spec!r} is not of the form id@host:grpc_port") from None


def default_grpc_port(resp_port: int) -> int:
    """RESP port + 10000, or - 10000 where + would leave the port range."""
    return resp_port + 10000 if resp_port + 10000 <= 65535 else resp_port - 10000


# -- TLS -----------------------------------------------------------------------------------

def _read(path: str) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as fh:
        return fh.read()


def _read_key(path: str) -> bytes | None:
    """A private key for gRPC, which takes no passphrase: an encrypted one is refused with
    a reason (tls-key-file-pass serves the RESP port only)."""
    key = _read(path)
    if key is not None and b"ENCRYPTED" in key:
        raise ValueError(f"peer links need an unencrypted private key; {path} is encrypted "
                         "(set tls_key to an unencrypted copy)")
    return key


class ClusterSecret(grpc.aio.ServerInterceptor):
    """Refuses every call whose ``x-marekvs-secret`` metadata is not the configured cluster
    secret (read per call, compared in constant time): the caller gets UNAUTHENTICATED
    "wrong cluster secret" and the service's handler never runs. ``refused`` counts the
    refusals per service (its full name, e.g. ``marekvs.antientropy.v1.AntiEntropy``)."""

    def __init__(self, config: Config):
        self.config = config
        self.refused: collections.Counter[str] = collections.Counter()

    async def intercept_service(self, continuation: Callable[[grpc.HandlerCallDetails], Awaitable[Any]],
                                details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        got = dict(details.invocation_metadata or ()).get(SECRET_HEADER, "")
        if handler is None or hmac.compare_digest(str(got).encode(), self.config.cluster_secret.encode()):
            return handler  # (no handler: gRPC answers UNIMPLEMENTED, as without the check)
        return self._refusal(handler, details.method)

    def _refusal(self, handler: grpc.RpcMethodHandler, method: str) -> grpc.RpcMethodHandler:
        """A handler of the same kind as ``handler`` (so the request is read as before)
        that refuses the call."""
        service = method.strip("/").rpartition("/")[0]

        async def refuse(request: Any, context: grpc.aio.ServicerContext) -> None:
            self.refused[service] += 1
            log.error("refused a call to %s from %s: wrong cluster secret", method, context.peer())
            await context.abort(grpc.StatusCode.UNAUTHENTICATED, "wrong cluster secret")

        codec = {"request_deserializer": handler.request_deserializer,
                 "response_serializer": handler.response_serializer}
        if handler.request_streaming and handler.response_streaming:
            return grpc.stream_stream_rpc_method_handler(refuse, **codec)
        if handler.request_streaming:
            return grpc.stream_unary_rpc_method_handler(refuse, **codec)
        if handler.response_streaming:
            return grpc.unary_stream_rpc_method_handler(refuse, **codec)
        return grpc.unary_unary_rpc_method_handler(refuse, **codec)


def server(config: Config, secret: ClusterSecret) -> grpc.aio.Server:
    """This node's gRPC server: every call passes ``secret`` first."""
    return grpc.aio.server(options=_OPTIONS, interceptors=[secret])


def peer_ca_bundle(config: Config) -> bytes | None:
    """The CA certificates peers are verified against: ``tls_ca`` (with tls_replication yes,
    ``tls_ca_cert_file``), else with tls_replication yes every PEM certificate in the files
    of ``tls_ca_cert_dir`` (gRPC takes one bundle, not a directory)."""
    ca = config.peer_tls_files()[2]
    if ca or config.tls_replication != "yes" or not config.tls_ca_cert_dir:
        return _read(ca)
    found = []
    for name in sorted(os.listdir(config.tls_ca_cert_dir)):
        path = os.path.join(config.tls_ca_cert_dir, name)
        if os.path.isfile(path):
            with open(path, "rb") as fh:
                found += _PEM_CERT.findall(fh.read())
    return b"\n".join(found) or None


_PEM_CERT = re.compile(rb"-----BEGIN CERTIFICATE-----.+?-----END CERTIFICATE-----\s*", re.S)


def server_credentials(config: Config) -> grpc.ServerCredentials | None:
    cert, key, _ = config.peer_tls_files()
    if not cert:
        return None
    ca = peer_ca_bundle(config)
    return grpc.ssl_server_credentials([(_read_key(key), _read(cert))],
                                       root_certificates=ca, require_client_auth=ca is not None)


def channel(config: Config, addr: str) -> grpc.aio.Channel:
    opts = list(_OPTIONS)
    cert, key, _ = config.peer_tls_files()
    ca_bundle = peer_ca_bundle(config)
    if not cert and ca_bundle is None:
        return grpc.aio.insecure_channel(addr, options=opts)
    creds = grpc.ssl_channel_credentials(root_certificates=ca_bundle, private_key=_read_key(key),
                                         certificate_chain=_read(cert))
    if config.tls_server_name:
        opts.append(("grpc.ssl_target_name_override", config.tls_server_name))
    return grpc.aio.secure_channel(addr, creds, options=opts)
