"""Random and mutated RESP frames against a real node (tests/fuzz_resp.py): after every
round of batches a separate client gets PONG within a second and the keys written before
the run still hold their values. A long run: ``python -m tests.fuzz_resp --frames N``."""

from __future__ import annotations

from tests import fuzz_resp


def test_fuzzed_frames_never_stop_or_corrupt_the_node(node):
    fuzz_resp.write_sentinels(node.port)
    report = fuzz_resp.run(node.port, frames=40_000, seed=20261124, connections=16,
                           alive=lambda: node.proc.poll() is None)
    assert report.ok(), report.problems
    assert report.frames == 40_000
    assert report.closed_by_node > 0  # the batches were answered and the node closed them
    assert node.proc.poll() is None


def test_fuzzer_corpus_mutations_reach_the_defect_shapes():
    # the generator must actually produce the inputs that broke nodes before: NULs in
    # inline lines, huge declared sizes, deep nesting
    import random

    rng = random.Random(7)
    frames = [fuzz_resp.frame(rng) for _ in range(20_000)]
    assert any(b"\x00" in f and not f.startswith(b"*") for f in frames)
    assert any(f.startswith(b"*2147483647") for f in frames)
    assert any(f.count(b"*1\r\n") >= 64 for f in frames)
