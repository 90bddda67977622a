"""The wire form of a Batch's entries: round trip, and every malformed shape refused."""

import msgpack
import pytest

from marekvs.core import envelope as env
from marekvs.core import keys as K
from marekvs.core.envelope import RecordType
from marekvs.replication.codec import pack_entries, unpack_entries
from marekvs.replication.validate import BadRecord

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
