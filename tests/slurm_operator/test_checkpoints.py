"""Tests for the pure Megatron checkpoint-folder rules used by CheckpointSensor."""

from __future__ import annotations

import pytest
from slurm_operator import checkpoints as ck


def test_tracker_parsing() -> None:
    assert ck.parse_tracker("1200\n") == 1200
    assert ck.parse_tracker("release") is None
    with pytest.raises(ck.TrackerParseError, match=r"latest_checkpointed_iteration.txt: .*'12a'"):
        ck.parse_tracker("12a")


def test_iteration_dirs_and_layouts() -> None:
    assert ck.iteration_dirs(["iter_0000100", "iter_0000200", "iter_12", "tmp", "iter_0000100.tmp"]) == {
        100: "iter_0000100",
        200: "iter_0000200",
    }
    assert ck.iteration_dir(100) == "iter_0000100"
    dist = ck.layout_of(["metadata.json", "__0_0.distcp", "__1_0.distcp", "common.pt"])
    assert dist.kind == "torch_dist"
    assert dist.files == ("metadata.json", "__0_0.distcp", "__1_0.distcp")
    legacy = ck.layout_of(["mp_rank_00", "mp_rank_01"])
    assert legacy.kind == "legacy"
    assert legacy.files == (
        "mp_rank_00/model_optim_rng.pt",
        "mp_rank_01/model_optim_rng.pt",
    )
    # metadata.json alone (distcp shards still being written) is not a checkpoint yet.
    assert not ck.layout_of(["metadata.json"]).recognised
    assert not ck.layout_of([]).recognised


def test_settle_tracker_needs_unchanged_files_for_the_settle_time() -> None:
    t = ck.SettleTracker.new(10)
    snap1 = ck.snapshot({"a": (1, 5.0)})
    snap2 = ck.snapshot({"a": (2, 6.0)})
    assert ck.snapshot({"a": (1, 5.0), "b": None}) is None
    assert not t.observe(100, snap1, now=0)
    assert not t.observe(100, snap2, now=5)  # grew: the clock restarts
    assert not t.observe(100, snap2, now=14)
    assert t.observe(100, snap2, now=15)
    assert not t.observe(100, None, now=16)  # a file vanished
    assert ck.SettleTracker.new(0).observe(1, snap1, now=0)
