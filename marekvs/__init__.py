"""marekvs: an active-active, Redis-compatible, replicated key-value node."""

__version__ = "0.1.0"
# The Redis version whose command semantics marekvs follows (INFO redis_version).
REDIS_COMPAT_VERSION = "7.0.15"
