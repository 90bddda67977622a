"""The wire form of a Batch's entries: round trip, and every malformed shape refused."""

import msgpack
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core.envelope import RecordType
from marekvs.core.partition import hash64
from marekvs.replication.codec import pack_entries, unpack_entries
from marekvs.replication.validate import BadRecord, check_flat, check_record

KEY = K.encode_string_key(b"k")
VAL = env.pack(env.make_flags(RecordType.STRING), 5 << 16, 2, 0, b"v")


def test_round_trip_is_byte_for_byte():
    entries = [(7, [(KEY, VAL)]), (8, [(KEY, VAL), (K.encode_string_key(b"x"), VAL)]), (9, [])]
    assert unpack_entries(pack_entries(entries)) == entries


@pytest.mark.parametrize("payload", [
    b"\xc1",  # never-used msgpack byte
    msgpack.packb({"a": 1}),
    msgpack.packb([[1]]),
    msgpack.packb([["1", []]]),
    msgpack.packb([[1, [KEY]]]),  # odd number of items
    msgpack.packb([[1, ["k", VAL]]]),  # str, not bytes
    msgpack.packb([[1, [KEY, VAL]], [3, [KEY, VAL]]]),  # gap
    msgpack.packb([[2, [KEY, VAL]], [1, [KEY, VAL]]]),  # not ascending
    msgpack.packb([[1, [KEY, VAL[:10]]]]),  # truncated envelope
    msgpack.packb([[1, [b"\x00\x00s" + b"k", VAL]]]),  # pid does not match the key
])
def test_malformed_entries_are_refused(payload):
    with pytest.raises(BadRecord):
        unpack_entries(payload)


# -- the inline check of plain string records agrees with check_record ---------------------
_PIDS = (K.encode_string_key(b"k")[:2], b"\x00\x00", b"{\x01")


@settings(max_examples=400, deadline=None)
@example(user=b"{t}x", pid="whole", tag=b"s", flags=0, size=19)  # hash tag: pid of "t" only
@example(user=b"k", pid="own", tag=b"s", flags=2, size=19)  # head flag on a string key
@example(user=b"k", pid="own", tag=b"s", flags=0x18, size=30)  # a counter: payload parsed
@given(user=st.binary(max_size=12) | st.sampled_from([b"k", b"{t}x", b"a{}b", b"{"]),
       pid=st.sampled_from(_PIDS + ("own",) * 6 + ("whole",) * 2), tag=st.sampled_from([b"s"] * 6 + [b"M", b"h", b"?"]),
       flags=st.sampled_from([0, 1, 2, 3, 4, 0x18, 0x19, 0x20, 0x80]) | st.integers(0, 255),
       size=st.sampled_from([0, 18, 19, 30]) | st.integers(0, 30))
def test_check_flat_refuses_exactly_what_check_record_refuses(user, pid, tag, flags, size):
    if pid == "own":
        pid = K.encode_string_key(user)[:2]
    elif pid == "whole":  # the pid of the whole key, hash tag ignored: wrong if it has one
        pid = (hash64(user) >> 52).to_bytes(2, "big")
    key = pid + tag + user
    value = (bytes((flags,)) + bytes(18) + b"v" * 30)[:size]  # < 19 bytes: a truncated envelope
    try:
        check_record(key, value)
        expected = None
    except BadRecord as e:
        expected = e
    if expected is None:
        assert check_flat([key, value, KEY, VAL]) == [(key, value), (KEY, VAL)]
    else:
        with pytest.raises(BadRecord):
            check_flat([KEY, VAL, key, value])
