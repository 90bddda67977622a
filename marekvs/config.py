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
from typing import Any, Mapping

PROTO_MAX_BULK_LEN = 512 * 1024 * 1024
CLIENT_QUERY_BUFFER_LIMIT = 1024 * 1024 * 1024


# options that take one of a few words (CONFIG SET of the tls-* names checks the same ones)
CHOICES: dict[str, tuple[str, ...]] = {
    "protected_mode": ("yes", "no"),
    "tls_auth_clients": ("no", "yes", "optional"),
    "tls_auth_clients_user": ("off", "CN"),
    "tls_prefer_server_ciphers": ("yes", "no"),
    "tls_session_caching": ("yes", "no"),
    "tls_replication": ("yes", "no"),
    "metrics_tls": ("yes", "no"),
    "kafka_auto_create_topics": ("yes", "no"),
    "kafka_tls": ("yes", "no"),
    "grpc_worker_ports": ("ephemeral", "contiguous"),
}


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
    shards: int = 1  # a Config built in code is one process; every start of a node defaults to auto (LOAD_DEFAULTS)
    cache_entries: int = 500_000
    sweep_interval: float = 0.1  # seconds between expiry-sweeper steps
    log_level: str = "info"
    cluster_name: str = "marekvs"
    grpc_port: int = 0  # 0 = RESP port + 10000
    peers: list[str] = field(default_factory=list)  # id@host:grpc_port
    advertise_host: str = ""  # host peers use to reach this node (default: bind)
    grpc_worker_ports: str = "ephemeral"  # shards > 1: each worker's own gRPC port (replication/workers.py)
    cluster_secret: str = ""
    replog_max_entries: int = 2_000_000
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""
    tls_server_name: str = ""
    # TLS for clients, with Redis's names (tls-port, tls-cert-file ...): server/tls.py builds
    # the context; with tls_replication "yes" they serve peer links too (peer_tls_files)
    tls_port: int = 0
    tls_cert_file: str = ""
    tls_key_file: str = ""
    tls_key_file_pass: str = ""
    tls_ca_cert_file: str = ""
    tls_ca_cert_dir: str = ""
    tls_auth_clients: str = "yes"
    tls_auth_clients_user: str = "off"
    tls_protocols: str = ""
    tls_ciphers: str = ""
    tls_ciphersuites: str = ""
    tls_prefer_server_ciphers: str = "no"
    tls_session_caching: str = "yes"
    tls_session_cache_size: int = 20480
    tls_session_cache_timeout: int = 300
    tls_dh_params_file: str = ""
    tls_replication: str = "no"
    tls_handshake_timeout: float = 10.0
    metrics_port: int = 0
    metrics_tls: str = "no"
    clock_offset_ms: int = 0
    # anti-entropy (marekvs/antientropy/)
    antientropy_interval: float = 5.0  # seconds between background exchanges (one peer each); 0 = off
    antientropy_partitions: int = 256  # mismatched partitions one background exchange repairs at most
    antientropy_settle: float = 2.0  # differences younger than this are left to log shipping
    digest_verify_interval: float = 3600.0  # seconds per pass checking the kept digest against the data
    redis_version: str = "7.0.15"
    # the Kafka gateway (marekvs/gateway/kafka/, docs/kafka.md)
    kafka_port: int = 0  # 0 = off
    kafka_tls: str = "no"  # yes: the Kafka listener serves TLS with the tls-* settings (SSL, SASL_SSL)
    kafka_advertise_host: str = ""
    kafka_advertise_port: int = 0
    kafka_prefix: str = "korvet"
    kafka_auto_create_topics: str = "yes"
    kafka_num_partitions: int = 1
    kafka_max_request_bytes: int = 104857600
    kafka_group_initial_rebalance_delay_ms: int = 3000
    kafka_replica_lag_time_max_ms: int = 30000
    kafka_retention_check_interval_ms: int = 300000

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
        "shards": "shard worker processes: auto is one per core available to the node (its CPU "
                  "affinity and cgroup quota), resolved at each start; N > 1 is N worker processes on "
                  "one port (docs/shards.md); 1 is one process serving all 4096 partitions",
        "cache_entries": "records kept in the write-through cache in front of RocksDB, for the whole "
                         "node (each of N shard workers keeps its share)",
        "sweep_interval": "seconds between expiry-sweeper steps",
        "log_level": "debug | info | warning | error",
        "cluster_name": "cluster name; peers with another name are refused",
        "grpc_port": "gRPC port for peer replication (0 = port + 10000)",
        "peers": "comma-separated peers, each id@host:grpc_port",
        "advertise_host": "host name/address new peers use to reach this node (default: bind)",
        "grpc_worker_ports": "shards > 1: ephemeral (each worker's own gRPC port is one the kernel picks) | "
                             "contiguous (worker i listens on grpc_port + 1 + i, and peers dial it relative "
                             "to the node port they dialled: a proxy, NAT or port mapping of the N+1 ports "
                             "works)",
        "cluster_secret": "shared secret peers authenticate with",
        "replog_max_entries": "replication log cap; peers further behind are marked for resync",
        "tls_cert": "PEM certificate for peer gRPC links (enables TLS); default with tls_replication yes: "
                    "tls_cert_file",
        "tls_key": "PEM private key of tls_cert (with tls_replication yes: tls_key_file)",
        "tls_ca": "PEM CA bundle to verify peers; with tls_cert it enables mutual TLS (with tls_replication "
                  "yes: tls_ca_cert_file, or the certificates in tls_ca_cert_dir)",
        "tls_server_name": "expected TLS name of peers (override when connecting by IP)",
        "tls_port": "RESP port for TLS clients (0 = none); port 0 serves TLS only (Redis's tls-port)",
        "tls_cert_file": "PEM certificate (chain) the TLS port presents",
        "tls_key_file": "PEM private key of tls_cert_file",
        "tls_key_file_pass": "passphrase of an encrypted tls_key_file",
        "tls_ca_cert_file": "PEM CA bundle client certificates are verified against",
        "tls_ca_cert_dir": "directory of CA certificates (OpenSSL c_rehash layout), instead of or besides "
                           "tls_ca_cert_file",
        "tls_auth_clients": "yes | no | optional: must TLS clients present a certificate signed by the CA?",
        "tls_auth_clients_user": "off | CN: a client certificate's CN names the ACL user the client "
                                 "is authenticated as (Redis 8.6)",
        "tls_protocols": "TLS versions served, e.g. \"TLSv1.2 TLSv1.3\" (empty = TLSv1.2 and TLSv1.3)",
        "tls_ciphers": "OpenSSL cipher list for TLSv1.2 and below (empty = Python's secure default)",
        "tls_ciphersuites": "OpenSSL TLSv1.3 ciphersuites (empty = OpenSSL's default)",
        "tls_prefer_server_ciphers": "yes | no: the server's cipher order wins over the client's",
        "tls_session_caching": "yes | no: cache TLS sessions for resumption",
        "tls_session_cache_size": "TLS sessions cached at most",
        "tls_session_cache_timeout": "seconds a cached TLS session may be resumed",
        "tls_dh_params_file": "PEM DH parameters for the DHE ciphers (empty = OpenSSL's built-in)",
        "tls_replication": "yes | no: peer links use tls_cert_file/tls_key_file/tls_ca_cert_file where "
                           "tls_cert/tls_key/tls_ca are not set (Redis's tls-replication)",
        "tls_handshake_timeout": "seconds a TLS client may take to finish its handshake before it is "
                                 "closed",
        "metrics_port": "Prometheus text exporter port on the bind address (0 = off)",
        "metrics_tls": "yes | no: serve the metrics exporter over HTTPS with the TLS port's settings",
        "clock_offset_ms": "testing only: shift this node's HLC wall clock by this many ms",
        "antientropy_interval": "seconds between background anti-entropy exchanges, each with one peer (0 = off)",
        "antientropy_partitions": "mismatched partitions one background exchange repairs at most (throttle)",
        "antientropy_settle": "seconds a difference may be log shipping's before anti-entropy repairs it",
        "digest_verify_interval": "seconds per background pass recomputing the kept digests from the data "
                                  "(the first pass after start runs faster; 0 = off)",
        "redis_version": "the Redis version HELLO and INFO report (clients pick features by it; "
                         "redis-py's client-side cache wants 7.4.0 or later)",
        "kafka_port": "Kafka protocol listener port on the bind address (0 = off; docs/kafka.md)",
        "kafka_tls": "yes | no: the Kafka listener serves TLS only (Kafka's SSL and SASL_SSL), with the TLS "
                     "port's certificate, CA, tls_auth_clients, protocols and ciphers",
        "kafka_advertise_host": "host Kafka clients are told to connect to (default: advertise_host, else bind)",
        "kafka_advertise_port": "port Kafka clients are told to connect to (default: kafka_port; set it when the "
                                "listener is reached through a port mapping or a proxy)",
        "kafka_prefix": "key prefix of the Kafka topics' layout (Korvet's keyspace name)",
        "kafka_auto_create_topics": "yes | no: create a topic on first use (Kafka's auto.create.topics.enable)",
        "kafka_num_partitions": "partitions of an auto-created topic, or of CreateTopics with -1 (num.partitions)",
        "kafka_max_request_bytes": "largest Kafka request accepted; a larger one closes the connection "
                                   "(socket.request.max.bytes)",
        "kafka_group_initial_rebalance_delay_ms": "how long a new consumer group waits for more members before "
                                                  "its first rebalance (group.initial.rebalance.delay.ms)",
        "kafka_replica_lag_time_max_ms": "a peer that has not acknowledged this node's whole log for this long "
                                         "stops counting for acks=all and the high watermark "
                                         "(replica.lag.time.max.ms)",
        "kafka_retention_check_interval_ms": "how often a partition's leader trims it to its retention.ms and "
                                             "retention.bytes (log.retention.check.interval.ms)",
    }

    @property
    def client_port(self) -> int:
        """The RESP port clients are told about: the plaintext port, else the TLS port
        (Redis's INFO tcp_port)."""
        return self.port or self.tls_port

    def listening(self) -> str:
        """The client listeners, as the start-up line names them ("127.0.0.1:6379 (RESP), ...")."""
        kafka = "Kafka over TLS" if self.kafka_tls == "yes" else "Kafka"
        return ", ".join(f"{self.bind}:{p} ({kind})" for p, kind in (
            (self.port, "RESP"), (self.tls_port, "RESP over TLS"), (self.kafka_port, kafka)) if p)

    def peer_tls_files(self) -> tuple[str, str, str]:
        """(certificate, key, CA bundle) of the peer links: tls_cert/tls_key/tls_ca, each
        falling back on its Redis-named counterpart when tls_replication is yes (the CA
        on tls_ca_cert_file; tls_ca_cert_dir is read by ``peer_ca_bundle``)."""
        if self.tls_replication != "yes":
            return self.tls_cert, self.tls_key, self.tls_ca
        return (self.tls_cert or self.tls_cert_file, self.tls_key or self.tls_key_file,
                self.tls_ca or self.tls_ca_cert_file)

    def validate(self) -> None:
        for name in ("port", "tls_port"):
            if not 0 <= getattr(self, name) < 65536:
                raise ValueError(f"{name} {getattr(self, name)} out of range")
        if not self.port and not self.tls_port:
            raise ValueError("port and tls_port are both 0: no port to serve clients on")
        for name, choices in CHOICES.items():  # (any case; kept as spelled in CHOICES)
            canon = {c.lower(): c for c in choices}.get(str(getattr(self, name)).lower())
            if canon is None:
                raise ValueError(f"{name} must be one of {', '.join(choices)}")
            setattr(self, name, canon)
        if self.tls_session_cache_size < 0 or self.tls_session_cache_timeout < 0 or self.tls_handshake_timeout <= 0:
            raise ValueError("tls_session_cache_size and tls_session_cache_timeout must be >= 0, "
                             "tls_handshake_timeout > 0")
        if not 0 <= self.node_id < 65536:
            raise ValueError("node_id must fit in a u16")
        if self.durability not in ("always", "everysec", "no"):
            raise ValueError("durability must be always, everysec or no")
        if self.shards < 1 or self.shards > 4096:
            raise ValueError("shards must be between 1 and 4096")
        if self.gc_grace < 0 or self.max_clock_drift < 0:
            raise ValueError("gc_grace and max_clock_drift must be >= 0")
        if (not 0 <= self.kafka_port < 65536 or not 0 <= self.kafka_advertise_port < 65536
                or (self.kafka_port and self.kafka_port in (self.port, self.tls_port))):
            raise ValueError("kafka_port must be 0 (off) or a port other than the RESP ports; "
                             "kafka_advertise_port a port or 0")
        if self.kafka_tls == "yes" and not self.kafka_port:
            raise ValueError("kafka_tls yes needs a kafka_port to serve TLS on")
        if (self.kafka_num_partitions < 1 or self.kafka_max_request_bytes < 1024 or not self.kafka_prefix
                or self.kafka_replica_lag_time_max_ms < 1 or self.kafka_retention_check_interval_ms < 1):
            raise ValueError("kafka_num_partitions must be >= 1, kafka_max_request_bytes >= 1024, "
                             "kafka_replica_lag_time_max_ms and kafka_retention_check_interval_ms >= 1, "
                             "kafka_prefix not empty")
        if (self.antientropy_interval < 0 or self.antientropy_partitions < 1 or self.antientropy_settle < 0
                or self.digest_verify_interval < 0):
            raise ValueError("antientropy_interval, antientropy_settle and digest_verify_interval must be >= 0, "
                             "antientropy_partitions >= 1")


# the defaults of ``load`` (how every node starts: ``marekvs serve``, the cluster launcher and
# docker use it) that differ from the dataclass's, resolved as the option's value would be
LOAD_DEFAULTS: dict[str, str] = {"shards": "auto"}


def available_cores(cgroup: str = "/sys/fs/cgroup/cpu.max") -> int:
    """The cores this process may use: its CPU affinity, capped by a cgroup v2 CPU quota
    (``cpu.max``: ``max 100000`` or ``<quota> <period>``, a container's ``--cpus``),
    rounded up; at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # (not on Linux)
        cores = os.cpu_count() or 1
    try:
        with open(cgroup) as fh:
            quota, period = fh.read().split()[:2]
        if quota != "max" and int(period) > 0:
            cores = min(cores, -(-int(quota) // int(period)))
    except (OSError, ValueError):
        pass
    return max(1, cores)


def _coerce(name: str, value: Any) -> Any:
    if name == "shards" and isinstance(value, str) and value.strip().lower() == "auto":
        return min(available_cores(), 4096)
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
    variables: Mapping[str, str] = os.environ if env is None else env
    for name in Config.HELP:
        v = variables.get("MAREKVS_" + name.upper())
        if v is not None:
            values[name] = _coerce(name, v)
    for k, v in (overrides or {}).items():
        if v is not None:
            values[k] = _coerce(k, v)
    for k, v in LOAD_DEFAULTS.items():
        if k not in values:
            values[k] = _coerce(k, v)
    cfg = Config(**values)
    cfg.validate()
    return cfg
