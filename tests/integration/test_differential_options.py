"""Differential test of the option grammar of commands with options (``args.Options``),
against a stock redis-server side by side, in RESP2 and RESP3: every reply the same bytes.

Each case is a command written as words ("\\0" stands for a NUL byte, "" for an empty
argument, <lib> a function library), run in order on both servers: options in any case, repeated, conflicting,
missing their values, with values out of range, and keywords followed by a NUL byte
(Redis compares keywords as C strings: ``NX\\0junk`` is NX). Replies that depend on the
clock or on a generated id are avoided (explicit stream ids, errors only for SCAN and
MEMORY USAGE), and so are the documented divergences (docs/divergences.md: ``ms-*`` ids,
one database for COPY ... DB, HSCAN's NOVALUES of Redis 7.4).
"""

from __future__ import annotations

import pytest

from tests.integration.test_differential import fresh_pair

SETUP = [
    "RPUSH l a b a c a", "SADD s1 a b c", "SADD s2 b c d", "HSET h f v g w", "SET str hello", "SET str2 hallo",
    "ZADD z2 1 a 5 b 9 c",
]

CASES = [
    # SET / GETEX
    "SET s v nx", "SET s v NX\\0x", "SET s v xx\\0", "SET s v EX\\0 100", "SET s v ex 100 px 100", "SET s v ex",
    "SET s v ex abc", "SET s v ex 0", "SET s v keepttl ex 10", "SET s v get", "SET s v GET\\0z", "SET s v zz",
    "SET s v nx xx", "SET s v px 100 PX 200", "SET s v KEEPTTL\\0", "SET s v exat 99999999999 keepttl",
    "GETEX s persist", "GETEX s PERSIST\\0", "GETEX s ex 10 persist", "GETEX s ex", "GETEX s nx", "GETEX s get",
    "GETEX s exat 1", "GETEX s",
    # ZADD / ZINCRBY / GEOADD
    "ZADD z NX\\0a 1 m", "ZADD z ch\\0a 2 m", "ZADD z nx xx 1 m", "ZADD z gt lt 1 m", "ZADD z gt nx 1 m",
    "ZADD z incr 1 a 2 b", "ZADD z incr 1 a", "ZADD z 1", "ZADD z nx", "ZADD z xx ch gt 5 m", "ZADD z INCR\\0 1 m",
    "ZADD z 1 a 2 b 3 c 4 d", "ZADD z x a", "ZADD z NaN a", "ZADD z nx nx 9 n", "ZADD z CH 1 a 1 b 7 e",
    "ZADD z LT 0 a", "ZADD z incr gt -1 a", "ZINCRBY z 1 m", "ZINCRBY z x m",
    "GEOADD g nx\\0 1 1 a", "GEOADD g xx nx 1 1 a", "GEOADD g ch 2 2 b", "GEOADD g 1 1", "GEOADD g nx",
    "GEOADD g CH\\0x 3 3 c", "GEOADD g 1 100 d", "GEOADD g XX CH 1.5 1.5 a",
    # GEOSEARCH, GEOSEARCHSTORE, GEORADIUS
    "GEOSEARCH g FROMLONLAT 1 1 BYRADIUS 500 km ASC\\0x", "GEOSEARCH g FROMMEMBER a BYRADIUS 500 km",
    "GEOSEARCH g FROMMEMBER a FROMLONLAT 1 1 BYRADIUS 500 km", "GEOSEARCH g FROMMEMBER zz BYRADIUS 500 km",
    "GEOSEARCH g FROMMEMBER a BYBOX 500 500 km withcoord withdist withhash count 2 desc",
    "GEOSEARCH g FROMMEMBER a BYBOX 500 500 km count 0", "GEOSEARCH g FROMMEMBER a BYBOX 500 500 km count x",
    "GEOSEARCH g FROMMEMBER a BYBOX 500 500 km any", "GEOSEARCH g FROMMEMBER a BYBOX 500 500 km count 1 any",
    "GEOSEARCH g FROMMEMBER a BYRADIUS 500 km BYBOX 1 1 km", "GEOSEARCH g FROMMEMBER a BYBOX 1 1 km BYRADIUS 5 m",
    "GEOSEARCH g FROMMEMBER a", "GEOSEARCH g BYRADIUS 500 km", "GEOSEARCH g FROMMEMBER a BYRADIUS -1 km",
    "GEOSEARCH g FROMMEMBER a BYRADIUS 1 parsec", "GEOSEARCH g FROMMEMBER a BYRADIUS 500 km STORE x",
    "GEOSEARCH g FROMLONLAT 1 BYRADIUS 500 km", "GEOSEARCH g FROMLONLAT 1 200 BYRADIUS 500 km",
    "GEOSEARCH nosuch FROMMEMBER a BYRADIUS 500 km", "GEOSEARCH nosuch FROMMEMBER a BYRADIUS x km",
    "GEOSEARCH g frommember\\0 a byradius\\0 500 km withdist\\0", "GEOSEARCH g FROMMEMBER a BYBOX 1 -1 km",
    "GEOSEARCH g FROMMEMBER a BYRADIUS 500 km STOREDIST", "GEOSEARCH g FROMMEMBER a BYRADIUS 500 km desc asc",
    "GEOSEARCHSTORE dst g FROMMEMBER a BYRADIUS 500 km STOREDIST", "GEOSEARCHSTORE dst g FROMMEMBER a BYRADIUS 500 km",
    "ZRANGE dst 0 -1 WITHSCORES", "GEOSEARCHSTORE dst g FROMMEMBER a BYRADIUS 500 km WITHDIST",
    "GEOSEARCHSTORE dst g FROMMEMBER a BYRADIUS 500 km storedist\\0", "ZRANGE dst 0 -1 WITHSCORES",
    "GEOSEARCHSTORE dst nosuch FROMMEMBER a BYRADIUS 500 km", "EXISTS dst",
    "GEORADIUS g 1 1 500 km WITHDIST STORE dst", "GEORADIUS g 1 1 500 km STORE dst",
    "GEORADIUS g 1 1 500 km STOREDIST dst ASC COUNT 1", "ZRANGE dst 0 -1 WITHSCORES", "GEORADIUS g 1 1 500 km STORE",
    "GEORADIUS_RO g 1 1 500 km STORE dst", "GEORADIUSBYMEMBER g a 500 km withdist count 1",
    "GEORADIUSBYMEMBER g nosuchmember 500 km", "GEORADIUS g 1 1 500 km FROMMEMBER a",
    "GEORADIUS g 1 1 500 km withhash withcoord COUNT 2 ANY", "GEORADIUSBYMEMBER_RO g a 500 km STOREDIST x",
    # XADD / XTRIM
    "XADD x 1-1 f v", "XADD x nomkstream\\0x 2-1 f v", "XADD nx NOMKSTREAM 1-1 f v", "EXISTS nx",
    "XADD x MAXLEN 1 3-1 f v", "XLEN x", "XADD x MAXLEN ~ 1 4-1 f v", "XADD x MAXLEN = 1 5-1 f v",
    "XADD x maxlen -1 6-1 f v", "XADD x maxlen x 6-1 f v", "XADD x maxlen 1 minid 0 6-1 f v",
    "XADD x limit 10 6-1 f v", "XADD x maxlen 1 limit 10 6-1 f v", "XADD x maxlen ~ 1 limit 10 6-1 f v",
    "XADD x MINID ~ 0-1 7-1 f v", "XADD x 0-0 f v", "XADD x MAXLEN\\0 5 8-1 f v", "XADD x MAXLEN ~\\0 5 9-1 f v",
    "XADD x limit -1 10-1 f v", "XADD x maxlen ~ 5 limit x 10-1 f v", "XADD x 10-1 f", "XADD x * f",
    "XADD x NOMKSTREAM MAXLEN 5 NOMKSTREAM 11-1 f v", "XADD x 1-x f v", "XADD x 12 f v",
    "XTRIM x MAXLEN 1", "XTRIM x", "XTRIM x LIMIT 1", "XTRIM x MAXLEN ~ 1 LIMIT 1", "XTRIM x MINID 3-0",
    "XTRIM x MAXLEN = 0 junk", "XTRIM x maxlen\\0 0", "XTRIM x nomkstream maxlen 0", "XTRIM x MAXLEN",
    "XTRIM nosuch MAXLEN 0", "XTRIM x MINID x",
    # ZRANGE family
    "ZRANGE z 0 -1 WITHSCORES\\0y", "ZRANGE z 0 -1 BYSCORE\\0y", "ZRANGE z 0 -1 limit 0 1",
    "ZRANGE z (1 5 byscore limit 0 1 withscores", "ZRANGE z [a [z bylex withscores", "ZRANGE z 5 0 byscore rev",
    "ZRANGE z 0 -1 rev rev", "ZRANGE z 0 -1 byscore bylex", "ZRANGE z 0 -1 limit 0", "ZRANGE z 0 -1 limit x 1",
    "ZRANGE z - + bylex limit 1 2", "ZRANGE z 0 -1 foo", "ZRANGESTORE d z 0 -1 withscores",
    "ZRANGESTORE d z 0 -1 byscore limit 1 1", "ZRANGE d 0 -1 withscores",
    "ZRANGEBYSCORE z -inf +inf WITHSCORES LIMIT 0 2",
    "ZRANGEBYSCORE z -inf +inf REV", "ZREVRANGE z 0 -1 withscores", "ZREVRANGE z 0 -1 byscore",
    "ZRANGEBYLEX z - + LIMIT 0 1", "ZRANGEBYLEX z - + withscores", "ZREVRANGEBYSCORE z +inf -inf withscores limit 1 5",
    "ZRANGE z 0 -1 REV\\0 WITHSCORES",
    # ZUNION, ZINTER, ZDIFF, ZINTERCARD and their STORE forms
    "ZUNION 2 z z2 WEIGHTS 1 2 AGGREGATE max WITHSCORES", "ZUNION 2 z z2 weights 1", "ZUNION 2 z z2 weights 1 x",
    "ZUNION 2 z z2 aggregate avg", "ZUNION 2 z z2 aggregate MIN\\0 withscores", "ZUNION 2 z z2 withscores\\0",
    "ZINTERSTORE d 2 z z2 withscores", "ZINTERSTORE d 2 z z2 aggregate sum weights 2 3", "ZRANGE d 0 -1 WITHSCORES",
    "ZDIFF 2 z z2 weights 1 1", "ZDIFF 2 z z2 withscores", "ZINTERCARD 2 z z2 limit 1", "ZINTERCARD 2 z z2 limit -1",
    "ZINTERCARD 2 z z2 withscores", "ZINTERCARD 2 z z2 LIMIT\\0 0", "ZUNIONSTORE d 2 z z2 AGGREGATE sum",
    "ZUNION 2 z z2 WEIGHTS 1 inf withscores", "ZINTER 2 z z2 aggregate", "ZUNION 2 z z2 weights 1 1 weights 2 2",
    # the SCAN family (errors only: the order of keys differs by design)
    "SCAN 0 count 0", "SCAN 0 count", "SCAN 0 foo", "SCAN 0 count x", "SCAN 0 COUNT\\0 x", "SCAN 0 match",
    "HSCAN h 0 count 0", "HSCAN h 0 COUNT\\0 x", "HSCAN h 0 match", "HSCAN h 0 foo bar",
    "SSCAN s1 0 count 0", "SSCAN s1 0 COUNT\\0 x", "SSCAN s1 0 novalues", "ZSCAN z 0 count 0", "ZSCAN z 0 COUNT\\0 x",
    "ZSCAN nosuch 0 foo", "HSCAN h x",
    # lists
    "LPOS l a rank 0", "LPOS l a RANK\\0 -1", "LPOS l a count -1", "LPOS l a maxlen -1", "LPOS l a rank",
    "LPOS l a foo", "LPOS l a rank 1 count 0 maxlen 0", "LPOS l a rank x", "LPOS l a COUNT\\0 2 RANK 2",
    "LMPOP 1 l left count 0", "LMPOP 1 l left count 1 count 1", "LMPOP 1 l left COUNT\\0 1", "LMPOP 1 l left foo",
    "LMPOP 1 l LEFT\\0", "LMPOP 1 l right count", "ZMPOP 1 z min count 1 count 1", "ZMPOP 1 z MIN count\\0 1",
    "ZMPOP 1 z max count 0",
    # sets, keys, MEMORY USAGE, RESTORE, LCS, EXPIRE
    "SINTERCARD 1 s1 limit -1", "SINTERCARD 2 s1 s2 LIMIT\\0 1", "SINTERCARD 1 s1 foo", "SINTERCARD 1 s1 limit",
    "COPY str str3 db 0 replace", "COPY str str3 DB\\0 0", "COPY str str3 foo",
    "COPY str str3 REPLACE\\0", "COPY str str3 db x", "GET str3",
    "MEMORY USAGE str samples -1", "MEMORY USAGE str SAMPLES\\0 x", "MEMORY USAGE str foo", "MEMORY USAGE str samples",
    "RESTORE r 0 garbage idletime -1", "RESTORE r 0 garbage freq 300", "RESTORE r 0 garbage idletime 1 freq 1",
    "RESTORE r 0 garbage REPLACE\\0", "RESTORE r 0 garbage IDLETIME\\0 -1", "RESTORE r 0 garbage absttl foo",
    "RESTORE r 0 garbage freq x",
    "LCS str str2 len idx", "LCS str str2 MINMATCHLEN x", "LCS str str2 LEN\\0",
    "LCS str str2 idx minmatchlen 1 withmatchlen",
    "LCS str str2 IDX\\0 MINMATCHLEN\\0 -5", "LCS str str2 minmatchlen",
    "EXPIRE str 100 nx xx", "EXPIRE str 100 gt lt", "EXPIRE str 100 foo", "EXPIRE str 100 NX\\0",
    "PEXPIRE str 100 XX GT",
    # SORT
    "SORT l ALPHA LIMIT 0 2", "SORT l limit x 1", "SORT l BY nosort", "SORT l alpha\\0 desc\\0", "SORT l STORE",
    "SORT_RO l ALPHA STORE d", "SORT l GET # ALPHA", "SORT l foo", "SORT l ALPHA STORE sorted", "LRANGE sorted 0 -1",
    # streams: XRANGE, XSETID, XREAD, XGROUP CREATE, XCLAIM, XAUTOCLAIM
    "XRANGE x - + COUNT 1", "XRANGE x - + count x", "XRANGE x - + COUNT\\0 1", "XRANGE x - + foo",
    "XREVRANGE x + - count 1 count 2", "XSETID x 99-0 entriesadded -1", "XSETID x 99-0 maxdeletedid 100-0",
    "XSETID x 99-0 ENTRIESADDED\\0 x", "XSETID x 99-0 foo", "XREAD COUNT 1 STREAMS x 0", "XREAD STREAMS x",
    "XREAD GROUP g c STREAMS x 0", "XREAD NOACK STREAMS x 0", "XREAD COUNT x STREAMS x 0",
    "XREAD count\\0 1 streams\\0 x 0", "XREAD foo", "XREADGROUP STREAMS x 0", "XREAD BLOCK x STREAMS x 0",
    "XREAD COUNT 1", "XGROUP CREATE x g 0 MKSTREAM ENTRIESREAD 0", "XGROUP CREATE x g2 0 foo",
    "XGROUP CREATE x g3 0 ENTRIESREAD\\0 -5", "XGROUP CREATE x g4 0 entriesread", "XGROUP CREATE x g5 $ mkstream\\0",
    "XCLAIM x g c 0 1-1 IDLE x", "XCLAIM x g c 0 1-1 TIME x", "XCLAIM x g c 0 1-1 RETRYCOUNT x",
    "XCLAIM x g c 0 1-1 foo", "XCLAIM x g c 0 1-1 JUSTID\\0", "XCLAIM x g c 0 1-1 FORCE JUSTID LASTID x",
    "XAUTOCLAIM x g c 0 0 COUNT 0", "XAUTOCLAIM x g c 0 0 count x", "XAUTOCLAIM x g c 0 0 foo",
    "XAUTOCLAIM x g c 0 0 JUSTID\\0 COUNT 5",
    # HELLO (errors only: its reply names the connection), CLIENT TRACKING, FUNCTION, SHUTDOWN
    "HELLO 2 foo", "HELLO 2 AUTH a", "HELLO 2 SETNAME", "HELLO 2 SETNAME\\0z", "HELLO 2 AUTH nosuchuser pw",
    "CLIENT TRACKING on redirect x", "CLIENT TRACKING on redirect 999999", "CLIENT TRACKING on foo",
    "CLIENT TRACKING on prefix a", "CLIENT TRACKING on bcast optin", "CLIENT TRACKING on optin optout",
    "FUNCTION LOAD foo <lib>", "FUNCTION LOAD <lib>", "FUNCTION LOAD <lib>", "FUNCTION LOAD replace\\0 <lib>",
    "FUNCTION LOAD REPLACE", "FUNCTION LIST foo", "FUNCTION LIST libraryname", "FUNCTION LIST withcode withcode",
    "FUNCTION LIST LIBRARYNAME\\0 nosuch", "FUNCTION DELETE optlib",
    "SHUTDOWN NOSAVE SAVE", "SHUTDOWN ABORT NOW", "SHUTDOWN ABORT", "SHUTDOWN ABORT ABORT", "SHUTDOWN foo",
    "SHUTDOWN abort\\0",
]
LIBRARY = b"#!lua name=optlib\nredis.register_function('optf', function() return 1 end)"


def words(case: str) -> list[bytes]:
    return [b"" if w == '""' else LIBRARY if w == "<lib>" else w.replace("\\0", "\0").encode("latin-1")
            for w in case.split(" ")]


@pytest.mark.parametrize("proto", [2, 3])
def test_options_answer_like_redis(shared_node, real_redis, proto):
    mvs, red = fresh_pair(shared_node.port, real_redis.port, proto)
    try:
        for case in SETUP:
            assert mvs.call(words(case)) == red.call(words(case)), case
        wrong = []
        for case in CASES:
            args = words(case)
            want, got = red.call(args), mvs.call(args)
            if got != want:
                wrong.append(f"{case!r}\n  marekvs: {got!r}\n  redis:   {want!r}")
        assert not wrong, f"{len(wrong)} of {len(CASES)} replies differ:\n" + "\n".join(wrong)
    finally:
        mvs.close()
        red.close()
