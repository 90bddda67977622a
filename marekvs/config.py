"""Node configuration: defaults < config file < environment < command-line flags.

The config file is TOML (``marekvs serve --config node.toml``) with the option names
below as keys; environment variables are ``MAREKVS_<NAME>`` in upper case (e.g.
``MAREKVS_PORT=6380``). Every option is documented in ``marekvs serve --help`` and in
the README. Defaults bind to 127.0.0.1.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field, fields
from typing import Any

PROTO_MAX_BULK_LEN = 512 * 1024 * 1024
CLIENT_QUERY_BUFFER_LIMIT = 1024 * 1024 * 1024


class Limits:
    """The request limits of one server, shared by its connections' parsers and changed
    by CONFIG SET: proto-max-bulk-len and client-query-buffer-limit."""

    __slots__ = ("max_bulk", "max_query")

    def __init__(self, max_bulk: int = PROTO_MAX_BULK_LEN, max_query: int = CLIENT_QUERY_BUFFER_LIMIT):
        self.max_bulk = max_bulk
        self.max_query = max_query




@dataclass
class Config:
    port: int = 6379
    bind: str = "127.0.0.1"
    data_dir: str = "./data"
    node_id: int = 1
    requirepass: str = ""
    aclfile: str = ""  # ACL users file (ACL LOAD / ACL SAVE); loaded at the first start
    protected_mode: str = "yes"  # yes: no password -> only loopback clients (Redis's protected-mode)
    durability: str = "everysec"  # always | everysec | no  (Redis: appendfsync)
    gc_grace: int = 3600  # seconds a tombstone / expired record is kept before physical removal
    max_clock_drift: int = 5000  # ms a remote HLC may lead the local wall clock
    shards: int = 4
    cache_entries: int = 500_000
    sweep_interval: float = 0.1  # seconds between expiry-sweeper steps
    log_level: str = "info"
    cluster_name: str = "marekvs"
    grpc_port: int = 0  # 0 = RESP port + 10000
    peers: list[str] = field(default_factory=list)  # id@host:grpc_port
    advertise_host: str = ""  # host peers use to reach this node (default: bind)
    cluster_secret: str = ""
    replog_max_entries: int = 2_000_000
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    tls_server_name: str = ""
    metrics_port: int = 0
    clock_offset_ms: int = 0
    # anti-entropy (marekvs/antientropy/)
    antientropy_interval: float = 5.0  # seconds between background exchanges (one peer each); 0 = off
    antientropy_partitions: int = 256  # mismatched partitions one background exchange repairs at most
    antientropy_settle: float = 2.0  # differences younger than this are left to log shipping
    digest_verify_interval: float = 3600.0  # seconds per pass checking the kept digest against the data
    redis_version: str = "7.0.15"
    # the Kafka gateway (marekvs/gateway/kafka/, docs/kafka.md)
    kafka_port: int = 0  # 0 = off
    kafka_advertise_host: str = ""
    kafka_prefix: str = "korvet"
    kafka_auto_create_topics: str = "yes"
    kafka_num_partitions: int = 1
    kafka_max_request_bytes: int = 104857600
    kafka_group_initial_rebalance_delay_ms: int = 3000

    HELP = {
        "port": "RESP TCP port",
        "bind": "address to listen on (default loopback only)",
        "data_dir": "RocksDB data directory (created if missing)",
        "node_id": "this node's id (u16, unique in the cluster); stamped as origin on every record",
        "requirepass": "password of the default user, set at every start (empty = leave it as it is)",
        "aclfile": "ACL file (user lines as ACL SAVE writes them): ACL LOAD reads it, ACL SAVE writes "
                   "it; loaded at the first start of a data directory",
        "protected_mode": "yes | no: with yes and no password for the default user, only loopback "
                          "clients are served (Redis's protected-mode)",
        "durability": "WAL sync policy, like Redis appendfsync: always | everysec | no",
        "gc_grace": "seconds tombstones and expired records are kept before physical removal",
        "max_clock_drift": "ms a peer's HLC may lead our wall clock before it is clamped",
        "shards": "shard count reported in INFO (one process serves all 4096 partitions: "
                  "shard workers are not built yet)",
        "cache_entries": "records kept in the write-through cache in front of RocksDB",
        "sweep_interval": "seconds between expiry-sweeper steps",
        "log_level": "debug | info | warning | error",
        "cluster_name": "cluster name; peers with another name are refused",
        "grpc_port": "gRPC port for peer replication (0 = port + 10000)",
        "peers": "comma-separated peers, each id@host:grpc_port",
        "advertise_host": "host name/address new peers use to reach this node (default: bind)",
        "cluster_secret": "shared secret peers authenticate with",
        "replog_max_entries": "replication log cap; peers further behind are marked for resync",
        "tls_cert": "PEM certificate for peer gRPC links (enables TLS)",
        "tls_key": "PEM private key of tls_cert",
        "tls_ca": "PEM CA bundle to verify peers; with tls_cert it enables mutual TLS",
        "tls_server_name": "expected TLS name of peers (override when connecting by IP)",
        "metrics_port": "Prometheus text exporter port on the bind address (0 = off)",
        "clock_offset_ms": "testing only: shift this node's HLC wall clock by this many ms",
        "antientropy_interval": "seconds between background anti-entropy exchanges, each with one peer (0 = off)",
        "antientropy_partitions": "mismatched partitions one background exchange repairs at most (throttle)",
        "antientropy_settle": "seconds a difference may be log shipping's before anti-entropy repairs it",
        "digest_verify_interval": "seconds per background pass recomputing the kept digests from the data "
                                  "(the first pass after start runs faster; 0 = off)",
        "redis_version": "the Redis version HELLO and INFO report (clients pick features by it; "
                         "redis-py's client-side cache wants 7.4.0 or later)",
        "kafka_port": "Kafka protocol listener port on the bind address (0 = off; docs/kafka.md)",
        "kafka_advertise_host": "host Kafka clients are told to connect to (default: advertise_host, else bind)",
        "kafka_prefix": "key prefix of the Kafka topics' layout (Korvet's keyspace name)",
        "kafka_auto_create_topics": "yes | no: create a topic on first use (Kafka's auto.create.topics.enable)",
        "kafka_num_partitions": "partitions of an auto-created topic, or of CreateTopics with -1 (num.partitions)",
        "kafka_max_request_bytes": "largest Kafka request accepted; a larger one closes the connection "
                                   "(socket.request.max.bytes)",
        "kafka_group_initial_rebalance_delay_ms": "how long a new consumer group waits for more members before "
                                                  "its first rebalance (group.initial.rebalance.delay.ms)",
    }

    def validate(self) -> None:
        if not 0 < self.port < 65536:
            raise ValueError(f"port {self.port} out of range")
        if not 0 <= self.node_id < 65536:
            raise ValueError("node_id must fit in a u16")
        if self.durability not in ("always", "everysec", "no"):
            raise ValueError("durability must be always, everysec or no")
        if self.shards < 1 or self.shards > 4096:
            raise ValueError("shards must be between 1 and 4096")
        if self.gc_grace < 0 or self.max_clock_drift < 0:
            raise ValueError("gc_grace and max_clock_drift must be >= 0")
        if self.protected_mode not in ("yes", "no"):
            raise ValueError("protected_mode must be yes or no")
        if not 0 <= self.kafka_port < 65536 or (self.kafka_port and self.kafka_port == self.port):
            raise ValueError("kafka_port must be 0 (off) or a port other than the RESP port")
        if self.kafka_auto_create_topics not in ("yes", "no"):
            raise ValueError("kafka_auto_create_topics must be yes or no")
        if self.kafka_num_partitions < 1 or self.kafka_max_request_bytes < 1024 or not self.kafka_prefix:
            raise ValueError("kafka_num_partitions must be >= 1, kafka_max_request_bytes >= 1024, "
                             "kafka_prefix not empty")
        if (self.antientropy_interval < 0 or self.antientropy_partitions < 1 or self.antientropy_settle < 0
                or self.digest_verify_interval < 0):
            raise ValueError("antientropy_interval, antientropy_settle and digest_verify_interval must be >= 0, "
                             "antientropy_partitions >= 1")


def _coerce(name: str, value: Any) -> Any:
    f = {x.name: x for x in fields(Config)}[name]
    if f.type in ("int", int):
        return int(value)
    if f.type in ("float", float):
        return float(value)
    if name == "peers":
        if isinstance(value, str):
            return [p.strip() for p in value.split(",") if p.strip()]
        return list(value)
    return str(value)


def load(file: str | None = None, env: dict[str, str] | None = None,
         overrides: dict[str, Any] | None = None) -> Config:
    values: dict[str, Any] = {}
    if file:
        with open(file, "rb") as fh:
            data = tomllib.load(fh)
        for k, v in data.items():
            k = k.replace("-", "_")
            if k not in Config.HELP:
                raise ValueError(f"unknown option {k!r} in {file}")
            values[k] = _coerce(k, v)
    env = os.environ if env is None else env
    for name in Config.HELP:
        v = env.get("MAREKVS_" + name.upper())
        if v is not None:
            values[name] = _coerce(name, v)
    for k, v in (overrides or {}).items():
        if v is not None:
            values[k] = _coerce(k, v)
    cfg = Config(**values)
    cfg.validate()
    return cfg
