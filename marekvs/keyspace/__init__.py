"""The keyspace layer: one node's records as typed values, between commands and storage.

``keyspace.py`` holds what every type shares (lookups, type resolution, heads, element
scans, whole-key deletes and TTLs, iteration); one module per type holds that type's
operations (``strings``; the collection types next). Operations return values or raise a
typed status (``status.py``), never replies.
"""

from marekvs.keyspace.keyspace import Keyspace, KeyRecord, is_live

__all__ = ["Keyspace", "KeyRecord", "is_live"]
