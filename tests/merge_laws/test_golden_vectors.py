"""The code reproduces the lattice golden vectors in crates_ref/lattices/."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from marekvs.core import head, hll, orswot, pncounter, stream, streamgroup

VECTORS = Path(__file__).resolve().parents[2] / "crates_ref" / "lattices"


def load(name: str, kind: str) -> list[dict]:
    lines = (VECTORS / name).read_text(encoding="utf-8").splitlines()
    out = [v for v in map(json.loads, lines) if v["kind"] == kind]
    assert out, f"no {kind} vectors in {name}"
    return out


def h(x: str) -> bytes:
    return bytes.fromhex(x)


def test_generator_output_is_up_to_date():
    """lattices/generate.py (which re-runs its independent cross-checks) writes exactly
    the files on disk."""
    spec = importlib.util.spec_from_file_location("_marekvs_lattices_generate", VECTORS / "generate.py")
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    assert sorted(gen.FILES) == sorted(p.name for p in VECTORS.glob("*.jsonl"))
    for name, fn in gen.FILES.items():
        assert (VECTORS / name).read_text(encoding="utf-8") == gen.render(fn), f"{name} is stale"


def _element(payload: bytes) -> dict:
    e = orswot.from_bytes(payload)
    return {"live": [[o, str(hl), v.hex()] for (hl, o), v in e.live],
            "covered": [[o, str(hl)] for hl, o in e.covered]}


@pytest.mark.parametrize("v", load("orswot.jsonl", "merge"), ids=lambda v: v["name"])
def test_orswot(v):
    a, b, m = h(v["a_hex"]), h(v["b_hex"]), h(v["merged_hex"])
    for p, key in ((a, "a"), (b, "b"), (m, "merged")):
        assert orswot.to_bytes(orswot.from_bytes(p)) == p
        assert _element(p) == v[key]
    assert orswot.to_bytes(orswot.join(orswot.from_bytes(a), orswot.from_bytes(b))) == m
    ra, rb, rm = h(v["a_record_hex"]), h(v["b_record_hex"]), h(v["merged_record_hex"])
    assert orswot.merge(ra, rb) == rm and orswot.merge(rb, ra) == rm


@pytest.mark.parametrize("v", load("pncounter.jsonl", "payload"), ids=lambda v: v["name"])
def test_pncounter_payload(v):
    slots = {n: (int(p), int(q)) for n, p, q in v["slots"]}
    c = pncounter.PNCounter(int(v["base_hlc"]), v["base_origin"], int(v["base_value"]), slots)
    assert c.to_bytes().hex() == v["payload_hex"]
    assert pncounter.from_bytes(h(v["payload_hex"])) == c
    assert str(c.value()) == v["value"]


@pytest.mark.parametrize("v", load("pncounter.jsonl", "merge"), ids=lambda v: v["name"])
def test_pncounter_merge(v):
    a, b = h(v["a_record_hex"]), h(v["b_record_hex"])
    assert pncounter.merge(a, b).hex() == v["merged_record_hex"]
    assert pncounter.merge(b, a).hex() == v["merged_record_hex"]
    assert pncounter.value(h(v["merged_record_hex"]), 0).decode() == v["value"]


@pytest.mark.parametrize("v", load("hll.jsonl", "element"), ids=lambda v: v["element_hex"])
def test_hll_element(v):
    assert hll.observe(h(v["element_hex"])) == (v["bucket"], v["rank"])


@pytest.mark.parametrize("v", load("hll.jsonl", "count"), ids=lambda v: str(v["n"]))
def test_hll_count(v):
    regs = hll.pfadd({}, (b"element:%d" % i for i in range(v["n"])))
    assert len(regs) == v["registers"] and hll.count(regs) == v["count"]


@pytest.mark.parametrize("v", load("hll.jsonl", "register"), ids=lambda v: f'{v["rank"]}@{v["generation"]}')
def test_hll_register(v):
    payload = h(v["payload_hex"])
    assert hll.from_bytes(payload) == (v["rank"], int(v["generation"]))
    assert hll.to_bytes(v["rank"], int(v["generation"])) == payload
    rec = hll.new(v["rank"], 1, 1, int(v["generation"]))
    assert str(hll.gate_clock(rec)) == v["gate_clock"]


@pytest.mark.parametrize("v", load("hll.jsonl", "merge"), ids=lambda v: v["name"])
def test_hll_merge(v):
    a, b = h(v["a_record_hex"]), h(v["b_record_hex"])
    assert hll.merge(a, b).hex() == hll.merge(b, a).hex() == v["merged_record_hex"]


@pytest.mark.parametrize("v", load("stream.jsonl", "seq"), ids=lambda v: v["id_text"])
def test_stream_seq(v):
    seq = stream.make_seq(v["origin"], v["counter"])
    assert str(seq) == v["seq"] and stream.split_seq(seq) == (v["origin"], v["counter"])
    assert stream.format_id((int(v["ms"]), seq)).decode() == v["id_text"]


@pytest.mark.parametrize("v", load("stream.jsonl", "next_id"), ids=lambda v: v["name"])
def test_stream_next_id(v):
    got = stream.next_id((int(v["last_ms"]), int(v["last_seq"])), int(v["hlc"]), v["origin"])
    assert got == (int(v["ms"]), int(v["seq"]))


@pytest.mark.parametrize("v", load("stream.jsonl", "entry"), ids=lambda v: v["payload_hex"][:16])
def test_stream_entry(v):
    fields = [(h(f), h(x)) for f, x in v["fields_hex"]]
    assert stream.to_bytes(fields).hex() == v["payload_hex"]
    assert stream.from_bytes(h(v["payload_hex"])) == fields


@pytest.mark.parametrize("v", load("head.jsonl", "payload"), ids=lambda v: v["type"])
def test_head_payload(v):
    hd = head.from_bytes(h(v["payload_hex"]))
    assert (hd.ctype, str(hd.delete_clock), str(hd.last_ms), str(hd.last_seq)) == (
        v["ctype"], v["delete_clock"], v["last_ms"], v["last_seq"])
    assert head.to_bytes(hd).hex() == v["payload_hex"]


@pytest.mark.parametrize("v", load("head.jsonl", "merge"), ids=lambda v: v["name"])
def test_head_merge(v):
    a, b = h(v["a_record_hex"]), h(v["b_record_hex"])
    assert head.merge(a, b).hex() == head.merge(b, a).hex() == v["merged_record_hex"]


# -- stream counters and consumer groups (streamgroup.jsonl) ------------------------------------

def test_stream_counters_payload():
    for v in load("streamgroup.jsonl", "counters"):
        c = stream.counters_from_bytes(h(v["payload_hex"]))
        assert (str(c.gen), [str(c.epoch[0]), c.epoch[1]], c.added) == (v["gen"], v["epoch"], v["added"])
        assert ([str(x) for x in c.last], [str(x) for x in c.max_deleted]) == (v["last"], v["max_deleted"])
        assert stream.counters_to_bytes(c).hex() == v["payload_hex"]


def test_group_payload():
    for v in load("streamgroup.jsonl", "group"):
        g = streamgroup.group_from_bytes(h(v["payload_hex"]))
        assert (g.state, str(g.destroy_clock), [str(x) for x in g.base]) == (v["state"], v["destroy_clock"], v["base"])
        assert [[o, *map(str, p)] for o, p in g.slots] == v["slots"]
        assert [str(x) for x in g.position().id] == v["last_delivered"]
        assert streamgroup.group_to_bytes(g).hex() == v["payload_hex"]


def test_consumer_payload():
    for v in load("streamgroup.jsonl", "consumer"):
        e = orswot.from_bytes(h(v["payload_hex"])[1:])
        assert h(v["payload_hex"])[0] == streamgroup.CONSUMER_FMT
        assert [[o, str(hl), str(int.from_bytes(seen, "big"))] for (hl, o), seen in e.live] == v["live"]
        assert [[o, str(hl)] for hl, o in e.covered] == v["covered"]


def test_pending_payload():
    for v in load("streamgroup.jsonl", "pending"):
        p = streamgroup.pending_from_bytes(h(v["payload_hex"]))
        assert ([str(p.epoch[0]), p.epoch[1]], p.incarnation, p.delivered) == (v["epoch"], v["incarnation"],
                                                                                v["delivered"])
        assert (str(p.delivery_ms), [str(p.base[0]), p.base[1], str(p.base[2])]) == (v["delivery_ms"], v["base"])
        assert [[o, str(n)] for o, n in p.slots] == v["slots"] and p.consumer.hex() == v["consumer_hex"]
        assert p.deliveries == v["deliveries"]
        assert streamgroup.pending_to_bytes(p).hex() == v["payload_hex"]


_GROUP_MERGES = {"counters_merge": stream.merge_counters, "group_merge": streamgroup.merge_group,
                 "consumer_merge": streamgroup.merge_consumer, "pending_merge": streamgroup.merge_pending}


@pytest.mark.parametrize("v", [v for k in _GROUP_MERGES for v in load("streamgroup.jsonl", k)],
                         ids=lambda v: f"{v['kind']}: {v['name']}")
def test_stream_group_merges(v):
    merge = _GROUP_MERGES[v["kind"]]
    a, b = h(v["a_record_hex"]), h(v["b_record_hex"])
    assert merge(a, b).hex() == merge(b, a).hex() == v["merged_record_hex"]
