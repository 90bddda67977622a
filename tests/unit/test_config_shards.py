"""The ``shards`` option's ``auto`` value: one worker per core the node may use."""

from __future__ import annotations

import os

import pytest

from marekvs import config as cfgmod


def test_auto_is_the_cores_of_the_process_s_affinity(tmp_path):
    cores = len(os.sched_getaffinity(0))
    assert cfgmod.available_cores(str(tmp_path / "absent")) == cores
    for spelling in ("auto", "AUTO", " auto "):
        assert cfgmod.load(env={}, overrides={"shards": spelling}).shards == cores
    assert cfgmod.load(env={"MAREKVS_SHARDS": "auto"}).shards == cores
    conf = tmp_path / "node.toml"
    conf.write_text('shards = "auto"\n')
    assert cfgmod.load(str(conf), env={}).shards == cores
    assert cfgmod.load(env={}, overrides={"shards": "3"}).shards == 3


@pytest.mark.parametrize("cpu_max, expect", [("max 100000\n", None), ("50000 100000\n", 1), ("150000 100000\n", 2),
                                             ("100000000 100000\n", None), ("garbage\n", None)])
def test_a_cgroup_quota_caps_auto(tmp_path, cpu_max, expect):
    f = tmp_path / "cpu.max"
    f.write_text(cpu_max)
    cores = len(os.sched_getaffinity(0))
    assert cfgmod.available_cores(str(f)) == (cores if expect is None else min(cores, expect))


def test_a_node_s_default_is_auto_and_a_config_built_in_code_is_one_process(tmp_path):
    cores = min(cfgmod.available_cores(), 4096)
    assert cfgmod.load(env={}).shards == cores
    conf = tmp_path / "node.toml"
    conf.write_text("port = 7001\n")
    assert cfgmod.load(str(conf), env={}).shards == cores
    conf.write_text("shards = 1\n")
    assert cfgmod.load(str(conf), env={}).shards == 1
    assert cfgmod.load(env={"MAREKVS_SHARDS": "2"}, overrides={"shards": None}).shards == 2
    assert cfgmod.Config().shards == 1


def test_a_bad_shard_count_is_refused():
    for bad in ("0", "4097", "many"):
        with pytest.raises(ValueError):
            cfgmod.load(env={}, overrides={"shards": bad})
