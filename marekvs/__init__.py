"""marekvs: an active-active, Redis-compatible, replicated key-value node."""

__version__ = "0.1.0"
# The Redis version whose command semantics marekvs follows (INFO redis_version).
REDIS_COMPAT_VERSION = "7.0.15"

# Compiled (mypyc) or pure-Python hot modules, decided before any of them is imported:
# marekvs/_native.py
from marekvs import _native  # noqa: E402

_native.install()
