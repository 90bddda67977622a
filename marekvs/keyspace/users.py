"""ACL users as records: read them all, write one, delete one (``core/acluser.py``).

A user is one LWW record per name under the tag b'U', outside the keyspace of user keys
(iteration, DBSIZE, FLUSHALL and DEBUG DIGEST never see it). The node writes these
records with ``Node.records`` (``node/records.py``: the one apply path on a single process,
the owning shard worker's on a node of several), so they replicate, and the engine reports every change of a
user record, local or from a peer, to ``Engine.on_node_change`` (the node rebuilds its
in-memory user from it: ``node/acl.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from marekvs.core import acluser
from marekvs.core import keys as K
from marekvs.keyspace.keyspace import Keyspace

log = logging.getLogger("marekvs.acl")


def user_records(ks: Keyspace) -> Iterator[tuple[bytes, bytes | None]]:
    """(name, rules) of every user record of the node, rules None for a deleted user, in
    key order (partition, then name). A record whose payload does not parse is logged
    and skipped (replication refuses such records; this one came from an older build)."""
    for ikey, rec in ks.engine.scan_tags(0, K.TAG_USER):
        try:
            yield K.decode_user_key(ikey), acluser.rules_of(rec)
        except ValueError as e:
            log.error("ignoring a malformed ACL user record %r: %s", ikey, e)


def rules_in(rec: bytes | None) -> bytes | None:
    """The rules a user record holds, None for no record or a deleted user."""
    return None if rec is None else acluser.rules_of(rec)


def user_record(ks: Keyspace, name: bytes, rules: bytes) -> tuple[bytes, bytes]:
    """The record creating or changing the user ``name`` (one LWW write, for
    ``Node.records.write``)."""
    return K.encode_user_key(name), acluser.new(rules, ks.stamp(), ks.node_id)


def deleted_user(ks: Keyspace, name: bytes) -> tuple[bytes, bytes]:
    """The record deleting the user ``name`` (an LWW tombstone)."""
    return K.encode_user_key(name), acluser.tombstone(ks.stamp(), ks.node_id)
