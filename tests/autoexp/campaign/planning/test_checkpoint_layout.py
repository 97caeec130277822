"""Checkpoint completeness by format: complete folders are listed, half-written ones never are."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from autoexp.campaign.planning import checkpoint_layout as ck
from tests.fixtures import checkpoint_layouts as lay
from tests.fixtures.megatron_checkpoints import generate


async def listed(base: Path, iteration: int, settle: float = 0) -> list[int] | None:
    return await ck.complete_iterations(
        lay.LocalFiles(), str(base), iteration, ck.SettleTracker.new(settle), 0
    )


def test_tracker_parsing() -> None:
    assert ck.parse_tracker("1200\n") == 1200
    assert ck.parse_tracker("release") is None
    with pytest.raises(ck.TrackerParseError, match=r"latest_checkpointed_iteration.txt: .*'12a'"):
        ck.parse_tracker("12a")


def test_iteration_and_rank_folders() -> None:
    assert ck.iteration_dirs(["iter_0000100", "iter_0000200", "iter_12", "tmp", "iter_0000100.tmp"]) == {
        100: "iter_0000100",
        200: "iter_0000200",
    }
    assert ck.iteration_dir(100) == "iter_0000100"
    names = ["mp_rank_01", "mp_rank_00_001", "mp_rank_00", "mp_rank_x", "common.pt"]
    assert ck.rank_dirs(names) == ("mp_rank_00", "mp_rank_00_001", "mp_rank_01")


def test_torch_dist_needs_both_metadata_files_and_a_whole_metadata_json() -> None:
    entries = ["common.pt", "__0_0.distcp", ".metadata", "metadata.json"]
    whole = '{"sharded_backend": "torch_dist", "sharded_backend_version": 1}'
    assert ck.torch_dist_finished(entries, whole)
    assert not ck.torch_dist_finished(entries, whole[:20])  # json.dump cut short
    assert not ck.torch_dist_finished(entries, "{}")
    assert not ck.torch_dist_finished([e for e in entries if e != ".metadata"], whole)
    assert not ck.torch_dist_finished(entries, None)


def test_settle_tracker_needs_unchanged_markers_for_the_settle_time() -> None:
    t = ck.SettleTracker.new(10)
    snap1 = ck.snapshot({"a": (1, 5.0)})
    snap2 = ck.snapshot({"a": (2, 6.0)})
    assert ck.snapshot({"a": (1, 5.0), "b": None}) is None
    assert t.remaining(100, now=0) is None  # never seen complete: no early look
    assert not t.observe(100, snap1, now=0)
    assert t.remaining(100, now=4) == 6
    assert not t.observe(100, snap2, now=5)  # rewritten: the clock restarts
    assert t.remaining(100, now=5) == 10
    assert not t.observe(100, snap2, now=14)
    assert t.observe(100, snap2, now=15)
    assert not t.observe(100, None, now=16)  # a marker vanished
    assert ck.SettleTracker.new(0).observe(1, snap1, now=0)


async def test_both_formats_are_listed_up_to_the_tracker(tmp_path: Path) -> None:
    lay.legacy(tmp_path, 100, ranks=("mp_rank_00", "mp_rank_01"))
    lay.torch_dist(tmp_path, 200)
    lay.legacy(tmp_path, 300, tracker=False)  # complete files, but the tracker never got there
    assert await listed(tmp_path, 100) == [100, 200]
    assert await listed(tmp_path, 200) == [100, 200]
    assert await listed(tmp_path, 300) is None


async def test_a_cut_short_legacy_file_is_never_listed_however_far_the_tracker_moved(tmp_path: Path) -> None:
    lay.legacy(tmp_path, 400)
    half = lay.legacy(tmp_path, 500)
    lay.cut_short(half / "mp_rank_00" / "model_optim_rng.pt")
    lay.legacy(tmp_path, 800)
    assert await listed(tmp_path, 800) == [400, 800]
    assert await listed(tmp_path, 500) is None
    # Old and unchanged for ever: still not complete (no size/mtime rule can make it so).
    settle = ck.SettleTracker.new(1)
    for now in (0.0, 10.0, 1e6):
        assert await ck.complete_iterations(lay.LocalFiles(), str(tmp_path), 500, settle, now) is None


async def test_legacy_before_the_tracker_needs_every_rank_the_tracker_s_iteration_has(tmp_path: Path) -> None:
    ranks = ("mp_rank_00", "mp_rank_01")
    lay.legacy(tmp_path, 100, ranks=ranks[:1])  # rank 1 never started writing
    folder = lay.legacy(tmp_path, 150, ranks=ranks)
    (folder / "mp_rank_01" / "model_optim_rng.pt").unlink()  # an empty rank folder
    lay.legacy(tmp_path, 200, ranks=ranks)
    assert await listed(tmp_path, 200) == [200]
    assert await listed(tmp_path, 100) is None
    assert await listed(tmp_path, 150) is None


@pytest.mark.parametrize("stop_before", ["__0_0.distcp", ".metadata", "metadata.json"])
async def test_a_torch_dist_save_without_its_last_files_is_never_listed(
    tmp_path: Path, stop_before: str
) -> None:
    lay.torch_dist(tmp_path, 100, stop_before=stop_before, tracker=False)
    lay.torch_dist(tmp_path, 200)
    assert await listed(tmp_path, 200) == [200]
    assert await listed(tmp_path, 100) is None


async def test_a_cut_short_metadata_json_is_not_complete(tmp_path: Path) -> None:
    folder = lay.torch_dist(tmp_path, 100)
    lay.cut_short(folder / "metadata.json")
    assert await listed(tmp_path, 100) is None


async def test_an_empty_tracker_is_megatron_rewriting_it_not_an_error(tmp_path: Path) -> None:
    lay.legacy(tmp_path, 100)
    (tmp_path / ck.TRACKER_FILE).write_text("")  # open(..., "w") before the write
    assert await listed(tmp_path, 100) is None
    lay.set_tracker(tmp_path, "release")
    assert await listed(tmp_path, 100) == [100]


async def test_while_waiting_only_the_awaited_iteration_is_read(tmp_path: Path) -> None:
    for it in range(100, 1100, 100):
        lay.legacy(tmp_path, it)
    lay.cut_short(lay.iter_dir(tmp_path, 1000) / "mp_rank_00" / "model_optim_rng.pt")
    files = lay.LocalFiles()
    assert await ck.complete_iterations(files, str(tmp_path), 1000, ck.SettleTracker.new(0), 0) is None
    assert all("iter_0001000" in p or p.endswith(ck.TRACKER_FILE) for p in files.reads), files.reads


@pytest.fixture(scope="module")
def trainer_checkpoints(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What include/autoexp_cluster/checkpointing.py writes, both formats, iterations 1 and 2."""
    return generate(tmp_path_factory.mktemp("trainer") / "out")


@pytest.mark.ml
@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["torch", "torch_dist"])
async def test_the_trainer_s_own_checkpoints_and_a_half_written_copy(
    trainer_checkpoints: Path, tmp_path: Path, fmt: str
) -> None:
    base = tmp_path / fmt
    shutil.copytree(trainer_checkpoints / fmt, base)
    assert await listed(base, 1) == [1, 2]
    # Iteration 3 cut short mid-save (the tracker is at 2; then moved on past it to 4).
    shutil.copytree(base / "iter_0000002", base / "iter_0000003")
    shutil.copytree(base / "iter_0000002", base / "iter_0000004")
    half = base / "iter_0000003"
    if fmt == "torch":
        lay.cut_short(half / "mp_rank_00" / "model_optim_rng.pt")
    else:
        (half / "metadata.json").unlink()
        lay.cut_short(half / "__0_1.distcp")
    assert await listed(base, 3) is None
    lay.set_tracker(base, 4)
    assert await listed(base, 4) == [1, 2, 4]
    assert await listed(base, 3) is None
