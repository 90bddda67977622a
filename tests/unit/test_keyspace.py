"""The keyspace layer: its inlined hot paths agree with core's rules, and its lookups.

GET, SET and the string lookup inline core's liveness rule (``envelope.is_live``) for
speed (keyspace/strings.py says why); these tests pin every inlined copy to it over
arbitrary records, so the rule has one definition that counts."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from marekvs.config import Config
from marekvs.core import envelope as env
from marekvs.core import head as H
from marekvs.core import keys as K
from marekvs.core import orswot, pncounter
from marekvs.core.envelope import RecordType
from marekvs.keyspace import strings as kstr
from marekvs.keyspace.status import WrongType
from marekvs.node import Node

NOW = 1_800_000_000_000


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    n = Node(Config(data_dir=str(tmp_path_factory.mktemp("ks") / "db"), node_id=1, durability="no"))
    n.ks.now = lambda: NOW
    yield n
    n.close()


RECORDS = st.builds(
    lambda tomb, counter, deadline, hlc: (
        env.pack(env.make_flags(RecordType.STRING, tombstone=True), hlc, 1, deadline) if tomb
        else pncounter.record(pncounter.PNCounter(0, 0, 5), hlc, 1, deadline) if counter
        else env.pack(env.make_flags(RecordType.STRING), hlc, 1, deadline, b"v%d" % hlc)),
    st.booleans(), st.booleans(),
    st.sampled_from([0, NOW - 1, NOW, NOW + 1, 1, (1 << 64) - 1]),
    st.integers(1, 1 << 40))


@settings(max_examples=300, deadline=None, database=None)
@given(rec=RECORDS, with_head=st.booleans())
def test_inlined_string_liveness_is_cores(node, rec, with_head):
    ks = node.ks
    key = b"pin"
    ik = K.encode_string_key(key)
    hk = K.encode_head_key(key)
    ks.engine.cache[ik] = rec  # the record as stored (bypassing the merge, any history)
    ks.engine.cache[hk] = H.new(H.CollectionType.HASH, 1, 1) if with_head else None
    # (a hash exists while it has a field: Keyspace.head_present)
    ks.apply([(K.collection_prefix(K.TAG_HASH, key) + b"f", orswot.new(RecordType.HASH_FIELD, 2, 1))])
    ks.head_pids[K.pid_of_ikey(ik)] = 1
    live = env.is_live(rec, NOW)
    if live:
        assert kstr.read(ks, key, NOW) == kstr.string_value(rec)
        assert kstr.lookup(ks, key, NOW) == (ik, rec)
        assert ks.live_record(key, NOW) == (ik, rec)
    elif with_head:
        with pytest.raises(WrongType):
            kstr.read(ks, key, NOW)
        with pytest.raises(WrongType):
            kstr.lookup(ks, key, NOW)
        assert ks.live_record(key, NOW)[0] == hk
    else:
        assert kstr.read(ks, key, NOW) is None
        assert kstr.lookup(ks, key, NOW) == (ik, None)
        assert ks.live_record(key, NOW) is None
    # SET's fast path replaces a head only when no live string is there (core's rule)
    recs = kstr.records(ks, key, b"new", 0, NOW)
    assert (len(recs) == 2) == (with_head and not live)


def test_collection_lookup_checks_the_type(node):
    ks = node.ks
    kstr.write(ks, b"str", b"v", 0, NOW)
    with pytest.raises(WrongType):
        ks.collection(b"str", H.CollectionType.SET, NOW)
    hk, h, created = ks.head_for_write(b"coll", H.CollectionType.SET, NOW)
    assert created and H.ctype_of(h) == H.CollectionType.SET and hk == K.encode_head_key(b"coll")
    # (with a member: an empty set does not exist, Keyspace.head_present)
    ks.apply([(hk, h), (K.collection_prefix(K.TAG_SET, b"coll") + b"m",
                        orswot.new(RecordType.SET_MEMBER, ks.stamp(), 1))])
    assert ks.collection(b"coll", H.CollectionType.SET, NOW) == (hk, ks.get(hk))
    with pytest.raises(WrongType):
        ks.collection(b"coll", H.CollectionType.HASH, NOW)
    assert ks.type_name(b"coll", NOW) == "set"
    # DEL is one head tombstone; a later write re-creates the head carrying the clock
    ks.delete(b"coll", NOW)
    assert ks.collection(b"coll", H.CollectionType.HASH, NOW) == (hk, None)
    hk2, h2, created2 = ks.head_for_write(b"coll", H.CollectionType.HASH, NOW)
    assert created2 and H.delete_clock(h2, NOW) >= H.delete_clock(ks.get(hk), NOW) > 0
