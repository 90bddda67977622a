"""The merges of node-wide commands on a multi-worker node (marekvs/shards/fanout.py): reply
values cross the mesh with their types, and each merge gives what one process holding all
the workers' data and clients would answer."""

from __future__ import annotations

import pytest

from marekvs.commands import reply
from marekvs.commands.reply import Err
from marekvs.shards.fanout import MERGES, merge_info, pack, unpack

VALUES = [
    None, 0, -5, 2**62, 1.5, True, False, b"", b"bulk", "text", [b"a", [1, None]], reply.OK, reply.Simple(b"PONG"),
    Err("ERR boom"), reply.Map([b"k", 1, b"k2", reply.Map([b"x", b"y"])]), reply.SetReply([b"a", b"b"]),
    reply.Double(2.5), reply.BulkArray([b"m1", b"m2"]), reply.DoubleText(b"1.5"), reply.Verbatim(b"text"),
    reply.BigNumber(b"123456789012345678901234567890"), reply.NULL_ARRAY, [reply.Double(1.0), [reply.OK]],
]


@pytest.mark.parametrize("value", VALUES, ids=[f"{i}-{type(v).__name__}" for i, v in enumerate(VALUES)])
def test_a_reply_crosses_the_mesh_with_its_type(value):
    back = unpack(pack(value))
    assert back == value and type(back) is type(value)
    if value is reply.OK or value is reply.NULL_ARRAY:
        assert back is value  # (the encoder's fast paths test identity)


def test_a_reply_of_an_unknown_type_is_refused():
    with pytest.raises(TypeError):
        pack(object())


def m(name, *replies, args=()):
    return MERGES[name](list(replies), [b"x", *args])


def test_sums_concatenations_and_the_same_change():
    assert m("dbsize", 3, 4) == 7
    assert m("publish", 0, 2, 1) == 3
    assert m("keys", [b"a"], [b"b", b"c"]) == [b"a", b"b", b"c"]
    cl = m("client|list", reply.Verbatim(b"id=1\n"), reply.Verbatim(b"id=2\n"))
    assert cl == b"id=1\nid=2\n" and type(cl) is reply.Verbatim
    assert m("pubsub|channels", [b"a", b"b"], [b"b", b"c"]) == [b"a", b"b", b"c"]
    assert m("config|set", reply.OK, reply.OK) is reply.OK
    assert m("config|set", reply.OK, Err("ERR no")) == Err("ERR no")  # an error anywhere is the reply
    assert m("dbsize", 1, Err("ERR x")) == Err("ERR x")
    assert m("pubsub|numsub", [b"a", 1, b"b", 0], [b"a", 2, b"b", 3]) == [b"a", 3, b"b", 3]


def test_one_of_them():
    assert m("randomkey", None, b"k") == b"k"
    assert m("randomkey", None, None) is None
    assert m("client|kill", Err("ERR No such client"), reply.OK, args=(b"kill", b"1.2.3.4:5")) is reply.OK
    assert m("client|kill", Err("ERR No such client"), Err("ERR No such client"),
             args=(b"kill", b"1.2.3.4:5")) == Err("ERR No such client")
    assert m("client|kill", 0, 1, args=(b"kill", b"id", b"7")) == 1
    assert m("script|kill", Err("NOTBUSY No scripts in execution right now."), reply.OK) is reply.OK
    assert m("lastsave", 20, 10) == 10


def test_digests_combine_as_one_process_computes_them():
    a, b = 0x1234 << 100, 0xFF
    assert m("debug|digest", reply.Simple(b"%040x" % a), reply.Simple(b"%040x" % b)) == reply.Simple(b"%040x" % (a ^ b))
    zero = reply.Simple(b"0" * 40)
    assert m("debug|digest", zero, zero) == zero
    d = reply.Simple(b"ab" * 20)
    assert m("debug|digest-value", [zero, d], [d, zero], args=(b"digest-value", b"k1", b"k2")) == [d, d]


def test_slowlog_get_takes_the_newest_of_every_worker():
    e = lambda i, t: [i, t, 5, [b"GET", b"k"], b"1.2.3.4:5", b""]  # noqa: E731
    # (entry ids are one node-wide sequence: the newest entry has the highest id, whatever its second)
    got = m("slowlog|get", [e(8, 100), e(1, 90)], [e(7, 101)], args=(b"get", b"2"))
    assert got == [e(8, 100), e(7, 101)]
    assert len(m("slowlog|get", [e(i, i) for i in range(8)], [e(i, i) for i in range(8)], args=(b"get",))) == 10
    assert len(m("slowlog|get", [e(1, 1)], [e(2, 2)], args=(b"get", b"-1"))) == 2


INFO_A = (b"# Server\r\nprocess_id:10\r\nuptime_in_seconds:5\r\n\r\n# Clients\r\nconnected_clients:2\r\n"
          b"maxclients:100\r\n\r\n# Memory\r\nused_memory:2048\r\nused_memory_human:2.00K\r\nmaxmemory:0\r\n\r\n"
          b"# Modules\r\n\r\n# Commandstats\r\ncmdstat_get:calls=2,usec=10,usec_per_call=5.00,rejected_calls=0,"
          b"failed_calls=0\r\n\r\n# Keyspace\r\ndb0:keys=3,expires=1,avg_ttl=100\r\n")
INFO_B = (b"# Server\r\nprocess_id:11\r\nuptime_in_seconds:4\r\n\r\n# Clients\r\nconnected_clients:1\r\n"
          b"maxclients:100\r\n\r\n# Memory\r\nused_memory:1024\r\nused_memory_human:1.00K\r\nmaxmemory:0\r\n\r\n"
          b"# Modules\r\n\r\n# Commandstats\r\ncmdstat_get:calls=3,usec=40,usec_per_call=13.33,rejected_calls=0,"
          b"failed_calls=1\r\ncmdstat_set:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,failed_calls=0\r\n\r\n"
          b"# Keyspace\r\ndb0:keys=4,expires=0,avg_ttl=300\r\n")


def test_info_of_one_worker_is_its_own_text():
    assert merge_info([INFO_A]) == INFO_A


def test_info_sums_the_node_counters_and_keeps_the_connection_workers_identity():
    got = merge_info([INFO_A, INFO_B])
    assert got == (b"# Server\r\nprocess_id:10\r\nuptime_in_seconds:5\r\n\r\n"
                   b"# Clients\r\nconnected_clients:3\r\n"
                   b"maxclients:100\r\n\r\n# Memory\r\nused_memory:3072\r\nused_memory_human:3.00K\r\n"
                   b"maxmemory:0\r\n\r\n"
                   b"# Modules\r\n\r\n# Commandstats\r\ncmdstat_get:calls=5,usec=50,usec_per_call=10.00,"
                   b"rejected_calls=0,failed_calls=1\r\ncmdstat_set:calls=1,usec=1,usec_per_call=1.00,rejected_calls=0,"
                   b"failed_calls=0\r\n\r\n# Keyspace\r\ndb0:keys=7,expires=1,avg_ttl=300\r\n")
    v = m("info", reply.Verbatim(INFO_A), reply.Verbatim(INFO_B))
    assert type(v) is reply.Verbatim and v == got


def _repl(worker: int, seq: int, peers: list[bytes], replid: bytes) -> bytes:
    lines = [b"role:master", b"master_replid:" + replid, b"master_repl_offset:%d" % seq, b"node_id:2",
             b"incarnation:%d" % (100 + worker), b"connected_peers:1", b"known_peers:%d" % len(peers),
             b"log_first_seq:%d" % (seq - 1), b"log_last_seq:%d" % seq, b"bootstrapping:%d" % (worker == 1),
             b"log_epoch:%d" % (7 + worker), b"last_incarnation_change:" + (b"x" if worker == 1 else b""),
             b"shard%d:partitions=%d-%d,incarnation=%d,log_epoch=%d,log_first_seq=%d,log_last_seq=%d" % (
                 worker, 2048 * worker, 2048 * worker + 2047, 100 + worker, 7 + worker, seq - 1, seq)]
    lines += [b"peer%d:" % i + p for i, p in enumerate(peers)]
    return b"# Replication\r\n" + b"\r\n".join(lines) + b"\r\n"


def _peer(nid: int, state: bytes, acked: int, ack_ms: int, lag_ms: int) -> bytes:
    return (b"id=%d,addr=h:%d,resp=h:1,state=%s,acked_seq=%d,sent_seq=%d,lag_entries=0,lag_ms=%d,last_ack_ms=%d,"
            b"bytes_shipped=10,needs_resync=0,workers=1" % (nid, nid, state, acked, acked, lag_ms, ack_ms))


def test_info_replication_is_merged_over_the_workers_whichever_answers():
    w0 = _repl(0, 10, [_peer(1, b"streaming", 10, 5, 0)], b"aaa")
    w1 = _repl(1, 20, [_peer(1, b"down", 15, -1, 30), _peer(3, b"streaming", 20, 7, 0)], b"bbb")
    got = merge_info([w1, w0])
    assert got == merge_info([w0, w1])  # (the connection's worker first: the same text)
    # (log_first_seq: the logs as one, each after the other; 9-10 and 19-20 hold 4 entries, as 27-30)
    # (the logs as one, each after the other: 9-10 and 19-20 are 4 entries, 27-30)
    assert got == (b"# Replication\r\nrole:master\r\nmaster_replid:aaa\r\nmaster_repl_offset:30\r\nnode_id:2\r\n"
                   b"incarnation:100\r\nconnected_peers:1\r\nknown_peers:2\r\nlog_first_seq:27\r\n"
                   b"log_last_seq:30\r\nbootstrapping:1\r\nlog_epoch:7\r\nlast_incarnation_change:x\r\n"
                   b"shard0:partitions=0-2047,incarnation=100,log_epoch=7,log_first_seq=9,log_last_seq=10\r\n"
                   b"shard1:partitions=2048-4095,incarnation=101,log_epoch=8,log_first_seq=19,log_last_seq=20\r\n"
                   b"peer0:id=1,addr=h:1,resp=h:1,state=down,acked_seq=25,sent_seq=25,lag_entries=0,lag_ms=30,"
                   b"last_ack_ms=-1,bytes_shipped=20,needs_resync=0,workers=1\r\n"
                   b"peer1:id=3,addr=h:3,resp=h:1,state=streaming,acked_seq=20,sent_seq=20,lag_entries=0,lag_ms=0,"
                   b"last_ack_ms=7,bytes_shipped=10,needs_resync=0,workers=1\r\n")
    one = _repl(0, 10, [], b"aaa").replace(b"shard0:", b"not_a_shard_line:")  # a node of one process
    assert merge_info([one]) == one


def test_info_antientropy_sums_the_workers_and_takes_the_latest_exchange():
    def ae(age: int, peer: int, served: int, cycles: int, err: bytes) -> bytes:
        return (b"# Antientropy\r\nantientropy_interval_s:5.0\r\nexchanges:%d\r\nlast_exchange_peer:%d\r\n"
                b"last_exchange_age_ms:%d\r\ncalls_served:%d\r\ndigest_verify_cycles:%d\r\n"
                b"digest_rebuilt_at_open:0\r\nlast_exchange_error:%s\r\n" % (served, peer, age, served, cycles, err))

    a, b = ae(900, 1, 4, 2, b""), ae(100, 3, 6, 1, b"Roots_failed")
    got = merge_info([a, b])
    assert got == merge_info([b, a]) == (
        b"# Antientropy\r\nantientropy_interval_s:5.0\r\nexchanges:10\r\nlast_exchange_peer:3\r\n"
        b"last_exchange_age_ms:100\r\ncalls_served:10\r\ndigest_verify_cycles:1\r\ndigest_rebuilt_at_open:0\r\n"
        b"last_exchange_error:Roots_failed\r\n")


def test_info_persistence_is_the_node_s_log():
    a = b"# Persistence\r\nrdb_last_save_time:200\r\nappendfsync:everysec\r\nstorage_batches:5\r\n" \
        b"aof_last_write_status:ok\r\nreplog_first_seq:1\r\nreplog_last_seq:10\r\n"
    b = b"# Persistence\r\nrdb_last_save_time:100\r\nappendfsync:everysec\r\nstorage_batches:7\r\n" \
        b"aof_last_write_status:err\r\nreplog_first_seq:4\r\nreplog_last_seq:6\r\n"
    assert merge_info([a, b]) == (b"# Persistence\r\nrdb_last_save_time:100\r\nappendfsync:everysec\r\n"
                                  b"storage_batches:12\r\naof_last_write_status:err\r\nreplog_first_seq:4\r\n"
                                  b"replog_last_seq:16\r\n")  # 10 + 3 entries kept: 16 - 4 + 1
    assert merge_info([a]) == a


def test_memory_stats_and_doctor_from_the_summed_figures():
    from marekvs.commands import memory

    def figures(rss, data, keys, cache=10):
        return {"rss": rss, "peak": rss, "data": data, "replog": 1, "memtables": 2, "block_cache": 3,
                "table_readers": 4, "keys": keys, "queries": 5, "cache": cache, "cache_capacity": 100, "backlog": 0}
    a, b = figures(1000, 300, 3), figures(3000, 100, 1)
    got = m("memory|stats", a, b)
    want = memory.stats_reply(figures(4000, 400, 4) | {"replog": 2, "memtables": 4, "block_cache": 6,
                                                        "table_readers": 8, "queries": 10, "cache_capacity": 200,
                                                        "cache": 20})
    assert got == want and dict(zip(got[::2], got[1::2]))[b"keys.bytes-per-key"] == 100
    assert m("memory|stats", a, Err("LOADING x")) == Err("LOADING x")
    big = 4 << 20  # (each worker's below the 5 MB of an empty instance, the node's above)
    assert b"can't find" in m("memory|doctor", figures(1 << 30, big, 9), figures(1 << 30, big, 9))
    assert b"empty" in m("memory|doctor", figures(1 << 30, big, 9), figures(1 << 30, 0, 0))
    full = m("memory|doctor", figures(1 << 30, big, 9, cache=100), figures(1 << 30, big, 9, cache=100))
    assert b"Record cache full: the 200 records" in full
    assert b"Record cache full" not in m("memory|doctor", figures(1 << 30, big, 9, cache=100),
                                          figures(1 << 30, big, 9, cache=50))


def test_latency_of_the_node():
    latest = m("latency|latest", [[b"command", 100, 5, 9], [b"fast-command", 90, 1, 1]],
               [[b"command", 100, 7, 7], [b"other", 80, 2, 3]])
    assert latest == [[b"command", 100, 7, 9], [b"fast-command", 90, 1, 1], [b"other", 80, 2, 3]]
    assert m("latency|latest", [[b"command", 99, 50, 50]], [[b"command", 100, 7, 7]]) == [[b"command", 100, 7, 50]]
    history = m("latency|history", [[1, 5], [3, 2]], [[2, 4], [3, 8]], args=[b"command"])
    assert history == [[1, 5], [2, 4], [3, 8]]
    assert len(m("latency|history", [[t, 1] for t in range(200)], [[t, 1] for t in range(100, 300)])) == 160
    assert m("latency|reset", ["command", "x"], ["command"]) == 2 and m("latency|reset", [], []) == 0


def test_a_scan_walk_goes_on_while_the_call_wants_more():
    from marekvs.core.partition import ShardMap
    from marekvs.shards.fanout import scan_walk

    ranges = ShardMap.even(3).ranges  # 0-1365, 1366-2730, 2731-4095
    walk = scan_walk(ranges, 0, 7, [b"SCAN", b"7", b"COUNT", b"5"])
    assert next(walk) == (0, [b"~scan", b"7", b"", b"", b"SCAN", b"7", b"COUNT", b"5"])
    assert walk.send([1366, [b"a"], 4, 30]) == (1, [b"~scan", b"1366", b"4", b"30", b"SCAN", b"7", b"COUNT", b"5"])
    with pytest.raises(StopIteration) as done:  # (worker 1 stopped within its range: COUNT collected)
        walk.send([2000, [b"b", b"c"], 0, 20])
    assert done.value.value == [b"2000", [b"a", b"b", b"c"]]
    walk = scan_walk(ranges, 2, 3000, [b"SCAN", b"3000"])
    next(walk)
    with pytest.raises(StopIteration) as done:  # (the last worker's range ended: the scan did)
        walk.send([0, [b"z"], 9, 90])
    assert done.value.value == [b"0", [b"z"]]
    walk = scan_walk(ranges, 0, 0, [b"SCAN", b"0"])
    next(walk)
    with pytest.raises(StopIteration) as done:  # (its bound of records read)
        walk.send([1366, [], 10, 0])
    assert done.value.value == [b"1366", []]
