#!/usr/bin/env python3
"""Generate the golden vectors of marekvs's merge lattices (run by hand).

    python crates_ref/lattices/generate.py           # (re)write the *.jsonl files
    python crates_ref/lattices/generate.py --check   # exit 1 if a file is stale

Each vector is computed with ``marekvs.core`` and, where it is cheap, with an
independent transcription of the layout written here (struct-level packing, the ORSWOT
merge as set union of (adds, covered) followed by the cap rule, a bit loop for the HLL
rank, the stream sequence formula); the generator refuses to write if they disagree.
Conventions as in crates_ref/format: one JSON object per line, bytes as lowercase hex
in ``*_hex`` fields, u64-range integers as decimal strings, small integers as numbers.
"""

from __future__ import annotations

import json
import struct
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import xxhash  # noqa: E402

from marekvs.core import envelope as env  # noqa: E402
from marekvs.core import head, hll, orswot, pncounter, stream, streamgroup  # noqa: E402
from marekvs.core.envelope import RecordType  # noqa: E402

MS = 1_700_000_000_000


def st(ms: int, logical: int = 0) -> int:
    return ms << 16 | logical


def _agree(what: str, ours, ref) -> None:
    if ours != ref:
        raise SystemExit(f"{what}: core {ours!r} != reference {ref!r}")


def _leb128(n: int) -> bytes:
    out = bytearray()
    while True:
        b, n = n & 0x7F, n >> 7
        out.append(b | (0x80 if n else 0))
        if not n:
            return bytes(out)


# -- ORSWOT elements -------------------------------------------------------------------

def ref_element(adds: dict, covered: set) -> bytes:
    """R(A, C) packed by hand: top-4 adds that are not covered, top-255 covered."""
    top = sorted(adds, reverse=True)[:4]
    live = [d for d in top if d not in covered]
    out = bytes([len(live)])
    for hlc, origin in live:
        v = adds[(hlc, origin)]
        out += struct.pack(">HQ", origin, hlc) + _leb128(len(v)) + v
    cov = sorted(covered, reverse=True)[:255]
    out += bytes([len(cov)])
    for hlc, origin in cov:
        out += struct.pack(">HQ", origin, hlc)
    return out


def _element_json(payload: bytes) -> dict:
    e = orswot.from_bytes(payload)
    return {"live": [[o, str(h), v.hex()] for (h, o), v in e.live],
            "covered": [[o, str(h)] for h, o in e.covered]}


ORSWOT_CASES = [
    # name, (A1, C1), (A2, C2): A maps dot -> value, C is a set of dots
    ("concurrent adds", ({(st(MS), 1): b"a"}, set()), ({(st(MS, 1), 2): b"b"}, set())),
    ("remove vs its add", ({(st(MS), 1): b"v"}, {(st(MS), 1)}), ({(st(MS), 1): b"v"}, set())),
    ("remove vs unobserved concurrent add",
     ({(st(MS), 1): b"v"}, {(st(MS), 1)}), ({(st(MS, 5), 3): b"w"}, set())),
    ("overwrite replaces (HSET)",
     ({(st(MS), 1): b"old", (st(MS + 1), 1): b"new"}, {(st(MS), 1)}),
     ({(st(MS), 1): b"old"}, set())),
    ("regression: remove of a dot the receiver never held",
     ({(st(MS), 1): b""}, {(st(MS), 1)}), ({(st(MS, 1), 2): b""}, set())),
    ("live cap: five concurrent adds keep the top four",
     ({(st(MS, i), i): b"v%d" % i for i in range(1, 4)}, set()),
     ({(st(MS, i), i): b"v%d" % i for i in range(4, 6)}, set())),
    ("live cap: an add below four newer (removed) adds is dropped",
     ({(st(MS, i), 1): b"" for i in range(10, 14)}, {(st(MS, i), 1) for i in range(10, 14)}),
     ({(st(MS, 1), 2): b""}, set())),
    ("covered cap: 300 removed dots keep the top 255",
     ({(st(MS, i), 1): b"" for i in range(300)}, {(st(MS, i), 1) for i in range(300)}),
     ({(st(MS + 1), 2): b"x"}, set())),
]


def orswot_vectors() -> list[dict]:
    out = []
    for name, (a1, c1), (a2, c2) in ORSWOT_CASES:
        pa, pb = ref_element(a1, c1), ref_element(a2, c2)
        _agree(f"orswot payload {name}", orswot.to_bytes(orswot.from_bytes(pa)), pa)
        merged = ref_element({**a1, **a2}, c1 | c2)
        _agree(f"orswot join {name}",
               orswot.to_bytes(orswot.join(orswot.from_bytes(pa), orswot.from_bytes(pb))), merged)
        rtype = RecordType.HASH_FIELD
        ra = env.pack(env.make_flags(rtype, tombstone=pa[0] == 0), st(MS + 2), 1, 0, pa)
        rb = env.pack(env.make_flags(rtype, tombstone=pb[0] == 0), st(MS + 2, 1), 2, MS + 9, pb)
        rm = env.pack(env.make_flags(rtype, tombstone=merged[0] == 0), st(MS + 2, 1), 2, MS + 9,
                      merged)
        _agree(f"orswot record merge {name}", orswot.merge(ra, rb), rm)
        out.append({"kind": "merge", "name": name,
                    "a_hex": pa.hex(), "b_hex": pb.hex(), "merged_hex": merged.hex(),
                    "a": _element_json(pa), "b": _element_json(pb), "merged": _element_json(merged),
                    "a_record_hex": ra.hex(), "b_record_hex": rb.hex(),
                    "merged_record_hex": rm.hex()})
    return out


# -- PN counters --------------------------------------------------------------------------

def ref_counter(bh: int, bo: int, bv: int, slots: dict) -> bytes:
    out = struct.pack(">BQHqH", 1, bh, bo, bv, len(slots))
    for node in sorted(slots):
        out += struct.pack(">HQQ", node, *slots[node])
    return out


def counter_vectors() -> list[dict]:
    out = []
    payloads = [
        ("fresh", (0, 0, 0, {})),
        ("from SET 5, +3 on node 1, -2 on node 2", (st(MS), 4, 5, {1: (3, 0), 2: (0, 2)})),
        ("negative base", (st(MS, 7), 65535, -(1 << 63), {65535: ((1 << 64) - 1, 0)})),
    ]
    for name, (bh, bo, bv, slots) in payloads:
        p = ref_counter(bh, bo, bv, slots)
        c = pncounter.PNCounter(bh, bo, bv, slots)
        _agree(f"counter {name}", c.to_bytes(), p)
        out.append({"kind": "payload", "name": name, "base_hlc": str(bh), "base_origin": bo,
                    "base_value": str(bv),
                    "slots": [[n, str(slots[n][0]), str(slots[n][1])] for n in sorted(slots)],
                    "payload_hex": p.hex(), "value": str(c.value())})
    base = env.pack(0, st(MS), 1, 0, b"5")
    a = env.pack(pncounter.FLAGS, st(MS, 1), 1, 0, ref_counter(st(MS), 1, 5, {1: (2, 0)}))
    b = env.pack(pncounter.FLAGS, st(MS, 2), 2, 0, ref_counter(st(MS), 1, 5, {2: (3, 1)}))
    joined = env.pack(pncounter.FLAGS, st(MS, 2), 2, 0,
                      ref_counter(st(MS), 1, 5, {1: (2, 0), 2: (3, 1)}))
    reset = env.pack(0, st(MS, 3), 3, 0, b"100")
    merges = [("same base: slots join", a, b, joined),
              ("counter extends the string it started from", base, a, a),
              ("SET resets: higher base version wins wholesale", joined, reset, reset)]
    for name, x, y, m in merges:
        _agree(f"counter merge {name}", pncounter.merge(x, y), m)
        out.append({"kind": "merge", "name": name, "a_record_hex": x.hex(),
                    "b_record_hex": y.hex(), "merged_record_hex": m.hex(),
                    "value": pncounter.value(m, 0).decode()})
    return out


# -- HyperLogLog ---------------------------------------------------------------------------

def ref_observe(e: bytes) -> tuple[int, int, int]:
    h = xxhash.xxh3_64_intdigest(e)
    rest, rank = h >> 14, 1
    while rank <= 50 and not rest & 1:
        rest >>= 1
        rank += 1
    return h, h & 0x3FFF, rank


def _high_rank_samples() -> list[bytes]:
    """The first 'rank:i' elements whose rank reaches 12, 16 and 20."""
    found, i = {}, 0
    while len(found) < 3:
        e = b"rank:%d" % i
        r = ref_observe(e)[2]
        for t in (12, 16, 20):
            if r >= t and t not in found:
                found[t] = e
        i += 1
    return [found[t] for t in (12, 16, 20)]


def hll_vectors() -> list[dict]:
    out = []
    samples = [b"", b"a", b"hello", b"foo", b"\x00", b"\xff\xfe", "caf\u00e9".encode()]
    samples += [b"element:%d" % i for i in range(10)] + _high_rank_samples()
    for e in samples:
        h, bucket, rank = ref_observe(e)
        _agree(f"hll observe {e!r}", hll.observe(e), (bucket, rank))
        out.append({"kind": "element", "element_hex": e.hex(),
                    "element_text": e.decode("utf-8", "replace"), "xxh3_64": str(h),
                    "bucket": bucket, "rank": rank})
    for n in (0, 1, 10, 100, 1000, 10_000, 100_000):
        regs = hll.pfadd({}, (b"element:%d" % i for i in range(n)))
        out.append({"kind": "count", "elements": f"element:0 .. element:{n - 1}" if n else "",
                    "n": n, "registers": len(regs), "count": hll.count(regs)})
    lo, hi = hll.new(5, st(MS), 1), hll.new(9, st(MS, 1), 2)
    dup = hll.new(5, st(MS, 2), 3)
    gen = st(MS + 50)  # a DEL's delete clock, seen by the writer of the next two
    after = hll.new(3, st(MS + 60), 1, gen)
    after_hi = hll.new(7, st(MS + 61), 2, gen)
    for rec, rank, g in ((lo, 5, 0), (after, 3, gen)):
        _agree("hll register payload", rec[19:], ref_register(rank, g))
        _agree("hll register", hll.from_bytes(rec[19:]), (rank, g))
        out.append({"kind": "register", "rank": rank, "generation": str(g), "payload_hex": rec[19:].hex(),
                    "gate_clock": str(hll.gate_clock(rec))})
    for name, x, y, m in (("higher rank wins with its envelope", lo, hi, hi),
                          ("equal ranks keep the lower version (duplicate PFADD)", dup, lo, lo),
                          ("a later generation wins whole, whatever the ranks", hi, after, after),
                          ("within a generation the higher rank wins", after, after_hi, after_hi)):
        _agree(f"hll merge {name}", hll.merge(x, y), ref_hll_merge(x, y))
        _agree(f"hll merge {name}", hll.merge(x, y), m)
        out.append({"kind": "merge", "name": name, "a_record_hex": x.hex(),
                    "b_record_hex": y.hex(), "merged_record_hex": m.hex()})
    return out


def ref_register(rank: int, generation: int) -> bytes:
    """DATA_MODEL 6.5: the rank byte, then the generation (u64 BE) unless it is 0."""
    return bytes([rank]) + (generation.to_bytes(8, "big") if generation else b"")


def ref_hll_merge(a: bytes, b: bytes) -> bytes:
    """DATA_MODEL 6.5, transcribed: the greater (generation, rank), then the lower version,
    then the smaller bytes."""
    def key(r: bytes) -> tuple:
        gen = int.from_bytes(r[20:28], "big") if len(r) > 20 else 0
        return (gen, r[19], [-x for x in r[1:11]])
    ka, kb = key(a), key(b)
    if ka != kb:
        return a if ka > kb else b
    return min(a, b)


# -- streams -------------------------------------------------------------------------------

def stream_vectors() -> list[dict]:
    out = []
    for origin, counter, ms in ((1, 0, MS), (1, 1, MS), (2, 0, MS), (65535, (1 << 20) - 1, MS),
                                (7, 12345, 0)):
        seq = origin * (1 << 20) + counter
        _agree("stream seq", stream.make_seq(origin, counter), seq)
        out.append({"kind": "seq", "origin": origin, "counter": counter, "ms": str(ms),
                    "seq": str(seq), "id_text": f"{ms}-{seq}"})
    cases = [
        ("new ms: counter restarts", (MS - 1, 3 << 20 | 9), st(MS, 4), 3),
        ("same ms: counter continues", (MS, 3 << 20 | 9), st(MS, 4), 3),
        ("same ms, lower origin used it: start at our base", (MS, 1 << 20 | 9), st(MS), 3),
        ("same ms, higher origin used it: borrow next ms", (MS, 4 << 20), st(MS), 3),
        ("counter overflow: borrow next ms", (MS, 3 << 20 | (1 << 20) - 1), st(MS), 3),
        ("clock behind the last id", (MS + 5, 2 << 20), st(MS), 3),
    ]
    for name, last, hlc, origin in cases:
        ms, seq = stream.next_id(last, hlc, origin)
        out.append({"kind": "next_id", "name": name, "last_ms": str(last[0]),
                    "last_seq": str(last[1]), "hlc": str(hlc), "origin": origin,
                    "ms": str(ms), "seq": str(seq)})
    for fields in ([], [(b"f", b"v")], [(b"temp", b"21.5"), (b"", b"\x00" * 130)]):
        p = b"\x01" + _leb128(len(fields)) + b"".join(
            _leb128(len(f)) + f + _leb128(len(v)) + v for f, v in fields)
        _agree("stream entry", stream.to_bytes(fields), p)
        out.append({"kind": "entry", "fields_hex": [[f.hex(), v.hex()] for f, v in fields],
                    "payload_hex": p.hex()})
    return out


# -- stream counters and consumer groups -----------------------------------------------------

SE = env.make_flags(RecordType.STREAM_ENTRY)  # the flags byte of a live group record (0x14)


def ref_counters(gen: int, epoch: tuple[int, int], added: int, last: tuple[int, int],
                 maxdel: tuple[int, int]) -> bytes:
    return struct.pack(">BQQHQQQQQ", 0x21, gen, *epoch, added, *last, *maxdel)


def ref_group(state: int, clock: int, base: tuple[int, int, int], slots: dict) -> bytes:
    out = struct.pack(">BBQQQQH", 0x22, state, clock, *base, len(slots))
    for o in sorted(slots):
        out += struct.pack(">HQQQ", o, *slots[o])
    return out


def ref_consumer(live: list, covered: list) -> bytes:
    """fmt 0x23, then the OR element: live [(origin, hlc, seen_ms)], covered [(origin, hlc)]
    (both already in descending (hlc, origin) order)."""
    out = bytes([0x23, len(live)])
    for o, hl, seen in live:
        out += struct.pack(">HQ", o, hl) + _leb128(8) + struct.pack(">Q", seen)
    out += bytes([len(covered)])
    for o, hl in covered:
        out += struct.pack(">HQ", o, hl)
    return out


def ref_pending(epoch: tuple[int, int], inc: int, delivered: bool, ms: int, base: tuple[int, int, int],
                slots: dict, consumer: bytes) -> bytes:
    out = struct.pack(">BQHIBQQHQB", 0x24, *epoch, inc, int(delivered), ms, *base, len(slots))
    for o in sorted(slots):
        out += struct.pack(">HQ", o, slots[o])
    return out + consumer


def _merges(out: list, what: str, merge, cases) -> None:
    for name, x, y, m in cases:
        _agree(f"{what} merge {name}", merge(x, y), m)
        _agree(f"{what} merge {name} (swapped)", merge(y, x), m)
        out.append({"kind": f"{what}_merge", "name": name, "a_record_hex": x.hex(),
                    "b_record_hex": y.hex(), "merged_record_hex": m.hex()})


def streamgroup_vectors() -> list[dict]:
    out: list[dict] = []
    G = streamgroup
    # counters (tag 'X')
    for name, args in (("no XSETID", (st(MS), (0, 0), 3, (MS, 1 << 20 | 2), (0, 0))),
                       ("after XSETID", (st(MS), (st(MS, 9), 2), 7, (MS + 5, 0), (MS, 1 << 20)))):
        p = ref_counters(*args)
        c = stream.Counters(*args)
        _agree(f"counters {name}", stream.counters_to_bytes(c), p)
        out.append({"kind": "counters", "name": name, "gen": str(args[0]), "epoch": [str(args[1][0]), args[1][1]],
                    "added": args[2], "last": [str(x) for x in args[3]], "max_deleted": [str(x) for x in args[4]],
                    "payload_hex": p.hex()})
    a = env.pack(SE, st(MS, 1), 1, 0, ref_counters(st(MS), (0, 0), 3, (MS, 1 << 20 | 2), (0, 0)))
    b = env.pack(SE, st(MS, 2), 1, 0, ref_counters(st(MS), (0, 0), 4, (MS, 1 << 20 | 3), (0, 0)))
    newer = env.pack(SE, st(MS, 3), 1, 0, ref_counters(st(MS, 3), (0, 0), 1, (MS + 1, 1 << 20), (0, 0)))
    _merges(out, "counters", stream.merge_counters,
            [("same gen and epoch: counts max", a, b, b), ("a newer gen (after DEL) wins whole", b, newer, newer)])
    # groups (tag 'g')
    create = env.pack(SE, st(MS), 1, 0, ref_group(1, 0, (0, 0, 1), {}))
    on1 = env.pack(SE, st(MS), 1, 0, ref_group(1, 0, (0, 0, 1), {1: (MS, 1 << 20, 2)}))
    on2 = env.pack(SE, st(MS), 1, 0, ref_group(1, 0, (0, 0, 1), {2: (MS + 1, 2 << 20, 0)}))
    both = env.pack(SE, st(MS), 1, 0, ref_group(1, 0, (0, 0, 1), {1: (MS, 1 << 20, 2), 2: (MS + 1, 2 << 20, 0)}))
    setid = env.pack(SE, st(MS, 7), 3, 0, ref_group(1, 0, (5, 0, 0), {}))
    destroyed = env.pack(SE, st(MS, 8), 2, 0, ref_group(0, st(MS, 8), (0, 0, 0), {}))
    again = env.pack(SE, st(MS, 9), 1, 0, ref_group(1, 0, (0, 0, 1), {}))
    again_m = env.pack(SE, st(MS, 9), 1, 0, ref_group(1, st(MS, 8), (0, 0, 1), {}))
    _agree("group payload", G.group_to_bytes(G.group_of(both)), both[env.HEADER:])
    _agree("group deliver", G.deliver_slots(create, {1: G.Position(MS, 1 << 20, 2)}), on1)
    out.append({"kind": "group", "name": "two origins delivered", "state": 1, "destroy_clock": "0",
                "base": ["0", "0", "1"],
                "slots": [[1, str(MS), str(1 << 20), "2"], [2, str(MS + 1), str(2 << 20), "0"]],
                "last_delivered": [str(MS + 1), str(2 << 20)], "payload_hex": both[env.HEADER:].hex()})
    _merges(out, "group", G.merge_group,
            [("deliveries of entries of two origins join", on1, on2, both),
             ("SETID (a new version) resets the slots", both, setid, setid),
             ("DESTROY", setid, destroyed, destroyed),
             ("re-CREATE keeps the destroy clock", destroyed, again, again_m)])
    # consumers (tag 'c')
    seen1 = env.pack(SE, st(MS, 1), 1, 0, ref_consumer([(1, st(MS, 1), MS)], []))
    seen2 = env.pack(SE, st(MS, 2), 2, 0, ref_consumer([(2, st(MS, 2), MS + 7)], [(1, st(MS, 1))]))
    removed = env.pack(SE | 1, st(MS, 3), 1, 0, ref_consumer([], [(1, st(MS, 1))]))
    survives = env.pack(SE, st(MS, 3), 1, 0, ref_consumer([(2, st(MS, 2), MS + 7)], [(1, st(MS, 1))]))
    _agree("consumer touch", G.touch_consumer(None, st(MS, 1), 1, MS), seen1)
    _agree("consumer re-touch", G.touch_consumer(seen1, st(MS, 2), 2, MS + 7), seen2)
    _agree("consumer remove", G.remove_consumer(seen1, st(MS, 3), 1), removed)
    out.append({"kind": "consumer", "name": "seen on node 2 after node 1", "live": [[2, str(st(MS, 2)), str(MS + 7)]],
                "covered": [[1, str(st(MS, 1))]], "payload_hex": seen2[env.HEADER:].hex()})
    _merges(out, "consumer", G.merge_consumer,
            [("a remove covers the add it saw", seen1, removed, removed),
             ("a concurrent add the remove did not see survives", removed, seen2, survives)])
    # pending entries (tag 'p')
    E = (st(MS), 1)
    d1 = env.pack(SE, st(MS, 10), 1, 0, ref_pending(E, 1, True, MS, (0, 0, 0), {1: 1}, b"alice"))
    d2 = env.pack(SE, st(MS, 11), 2, 0, ref_pending(E, 1, True, MS + 1, (0, 0, 0), {2: 1}, b"bob"))
    dup = env.pack(SE, st(MS, 11), 2, 0, ref_pending(E, 1, True, MS + 1, (0, 0, 0), {1: 1, 2: 1}, b"bob"))
    acked = env.pack(SE | 1, st(MS, 12), 1, 0, ref_pending(E, 1, True, MS, (0, 0, 0), {1: 1}, b"alice"))
    late_claim = env.pack(SE, st(MS, 20), 3, 0, ref_pending(E, 1, True, MS + 9, (0, 0, 0), {1: 1, 3: 1}, b"carol"))
    forced = env.pack(SE, st(MS, 13), 1, 0, ref_pending(E, 2, False, MS + 2, (0, 0, 0), {1: 2}, b"dave"))
    _agree("pending deliver", G.deliver_pending(None, E, st(MS, 10), 1, b"alice", MS), d1)
    _agree("pending ack", G.ack_pending(d1, st(MS, 12), 1), acked)
    _agree("pending force after the ack", G.claim_pending(acked, st(MS, 13), 1, b"dave", MS + 2, delivered=False),
           forced)
    out.append({"kind": "pending", "name": "delivered on two nodes", "epoch": [str(E[0]), E[1]], "incarnation": 1,
                "delivered": True, "delivery_ms": str(MS + 1), "base": ["0", 0, "0"], "slots": [[1, "1"], [2, "1"]],
                "consumer_hex": b"bob".hex(), "deliveries": 2, "payload_hex": dup[env.HEADER:].hex()})
    _merges(out, "pending", G.merge_pending,
            [("two concurrent deliveries count 2, owner by version", d1, d2, dup),
             ("an ack beats a later claim of the same incarnation", acked, late_claim, acked),
             ("a new incarnation (FORCE after the ack) beats the ack", acked, forced, forced)])
    return out


# -- heads ---------------------------------------------------------------------------------

def ref_head(ctype: int, clock: int, ms: int, seq: int, config: bytes = b"") -> bytes:
    return struct.pack(">BBQQQ", 1, ctype, clock, ms, seq) + config


def head_vectors() -> list[dict]:
    out = []
    CT = head.CollectionType
    for ctype in sorted(head.TYPE_NAMES):
        p = ref_head(ctype, st(MS), MS if ctype == CT.STREAM else 0, 5 if ctype == CT.STREAM else 0)
        h = head.from_bytes(p)
        _agree("head payload", head.to_bytes(h), p)
        out.append({"kind": "payload", "type": head.TYPE_NAMES[ctype], "ctype": ctype,
                    "delete_clock": str(h.delete_clock), "last_ms": str(h.last_ms),
                    "last_seq": str(h.last_seq), "config_hex": "", "payload_hex": p.hex()})
    hf = env.make_flags(CT.HASH, head=True)
    live = env.pack(hf, st(MS), 1, 0, ref_head(CT.HASH, 0, 0, 0))
    dead = env.pack(hf | 1, st(MS, 5), 2, 0, ref_head(CT.HASH, st(MS, 5), 0, 0))
    again = env.pack(env.make_flags(CT.SET, head=True), st(MS, 9), 3, 0,
                     ref_head(CT.SET, 0, 0, 0))
    merged = env.pack(env.make_flags(CT.SET, head=True), st(MS, 9), 3, 0,
                      ref_head(CT.SET, st(MS, 5), 0, 0))
    for name, x, y, m in (("DEL wins over the older head", live, dead, dead),
                          ("re-creation unaware of the DEL keeps its delete clock", dead, again,
                           merged)):
        _agree(f"head merge {name}", head.merge(x, y), m)
        out.append({"kind": "merge", "name": name, "a_record_hex": x.hex(),
                    "b_record_hex": y.hex(), "merged_record_hex": m.hex()})
    return out


FILES = {
    "orswot.jsonl": orswot_vectors,
    "pncounter.jsonl": counter_vectors,
    "hll.jsonl": hll_vectors,
    "stream.jsonl": stream_vectors,
    "head.jsonl": head_vectors,
    "streamgroup.jsonl": streamgroup_vectors,
}


def render(fn) -> str:
    return "".join(json.dumps(v, ensure_ascii=False) + "\n" for v in fn())


def main(argv: list[str]) -> int:
    check = "--check" in argv
    stale = []
    for name, fn in FILES.items():
        text, path = render(fn), HERE / name
        if check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(name)
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print("stale:", ", ".join(stale))
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
