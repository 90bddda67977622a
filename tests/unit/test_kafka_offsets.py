"""Kafka offsets of stream ids (marekvs/gateway/kafka/offsets.py): a produced batch gets
consecutive offsets, nodes mint in lanes of their own so offsets never collide, and the
Kafka order of one millisecond's entries is their counter order, one entry per offset."""

from marekvs.gateway.kafka import offsets as O


def test_a_batch_gets_consecutive_offsets_above_everything_the_stream_had():
    sid = O.mint((0, 0), 1000, 1, 5)
    assert sid == (1000, 1 << 20 | O.lane(1)[0])
    offs = [O.of_id((sid[0], sid[1] + i)) for i in range(5)]
    assert offs == list(range(offs[0], offs[0] + 5))
    nxt = O.mint((sid[0], sid[1] + 4), 1000, 1, 3)  # the same node continues its run in that ms
    assert O.of_id(nxt) == offs[-1] + 1
    assert O.mint((sid[0], sid[1] + 4), 999, 2, 1)[0] == 1001  # another node takes the next ms
    assert O.mint((5000, 3 << 20), 1000, 1, 1) == (5001, 1 << 20 | O.lane(1)[0])  # ids stay above the top


def test_lanes_keep_nodes_apart_and_above_redis_counters():
    lanes = [O.lane(n) for n in range(O.LANES)]
    assert all(a[1] < b[0] for a, b in zip(lanes, lanes[1:]))
    assert all(lo >= O.LANE_BASE for lo, _ in lanes)


def test_one_milliseconds_entries_are_read_in_counter_order_one_per_offset():
    ms = 7
    entries = [((ms, 1 << 20 | O.lane(1)[0]), "gw1"), ((ms, 1 << 20 | O.lane(1)[0] + 1), "gw1b"),
               ((ms, 2 << 20 | 0), "redis-on-2"), ((ms, 3 << 20 | 0), "redis-on-3"), ((ms + 1, 2 << 20), "next")]
    got = O.sort_ms(entries)
    assert [v for _, _, v in got] == ["redis-on-2", "gw1", "gw1b", "next"]  # the tie keeps the smaller id
    assert [o for o, _, _ in got] == sorted(o for o, _, _ in got)
    for off, sid, _ in got:
        assert O.first_id(off)[0] == sid[0] and O.of_id(sid) == off
