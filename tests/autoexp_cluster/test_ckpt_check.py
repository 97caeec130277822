"""ckpt_check: a corrupt tracker checkpoint is set aside and the tracker rolled back, never deleted."""

from __future__ import annotations

import pickle
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from autoexp_cluster.ckpt_check import ROLLBACKS, checkpoint_problem, heal, rollbacks_done

from tests.autoexp_cluster.conftest import INCLUDE, megatron_checkpoint
from tests.fixtures.checkpoint_layouts import cut_short, iter_dir, legacy, set_tracker, torch_dist

NOW = datetime(2026, 12, 3, 8, 30, tzinfo=timezone.utc)


def dist_ckpt(checkpoints: Path, iteration: int, shards: tuple[str, ...] = ("__0_0.distcp",)) -> Path:
    """The fixture's torch_dist folder with a ``.metadata`` that is a real pickle naming its shards."""
    folder = torch_dist(checkpoints, iteration)
    (folder / "__0_0.distcp").unlink()
    for name in shards:
        (folder / name).write_bytes(b"shard" * 50)
    (folder / ".metadata").write_bytes(
        pickle.dumps({"storage_data": {i: name for i, name in enumerate(shards)}})
    )
    return folder


def tracker(checkpoints: Path) -> str | None:
    path = checkpoints / "latest_checkpointed_iteration.txt"
    return path.read_text().strip() if path.exists() else None


def test_complete_checkpoints_of_both_layouts_pass(tmp_path: Path) -> None:
    assert checkpoint_problem(legacy(tmp_path, 100, ranks=("mp_rank_00", "mp_rank_01"))) is None
    assert checkpoint_problem(dist_ckpt(tmp_path, 200, ("__0_0.distcp", "__1_0.distcp"))) is None
    assert heal(tmp_path).action == "ok"
    assert tracker(tmp_path) == "200"


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda f: cut_short(f / "mp_rank_00" / "model_optim_rng.pt"), "not a whole torch.save file"),
        (lambda f: cut_short(f / "mp_rank_01" / "model_optim_rng.pt", keep=0.0), "empty"),
        (lambda f: (f / "mp_rank_01" / "model_optim_rng.pt").unlink(),
         "mp_rank_01/model_optim_rng.pt is missing"),
        (lambda f: (f / "mp_rank_00" / "model_optim_rng.pt").write_bytes(b"PK\x05\x06" + bytes(18)),
         "a zip archive with no members"),
    ],
    ids=["truncated", "zero-size", "missing-rank-file", "empty-zip"],
)  # fmt: skip
def test_legacy_damage_is_named(tmp_path: Path, damage: Any, reason: str) -> None:
    folder = legacy(tmp_path, 100, ranks=("mp_rank_00", "mp_rank_01"))
    damage(folder)
    problem = checkpoint_problem(folder)
    assert problem is not None
    assert reason in problem, problem


@pytest.mark.parametrize(
    ("damage", "reason"),
    [
        (lambda f: (f / "__1_0.distcp").unlink(), "shard __1_0.distcp named by .metadata is missing"),
        (lambda f: (f / "__0_0.distcp").write_bytes(b""), "shard __0_0.distcp is empty"),
        (lambda f: cut_short(f / ".metadata"), ".metadata is not a whole pickle"),
        (lambda f: cut_short(f / "metadata.json"), "metadata.json is cut short"),
        (lambda f: (f / "metadata.json").unlink(), "the save never finished"),
        (lambda f: cut_short(f / "common.pt"), "common.pt: not a whole torch.save file"),
    ],
    ids=["missing-shard", "empty-shard", "metadata-cut", "json-cut", "json-missing", "common-cut"],
)  # fmt: skip
def test_torch_dist_damage_is_named(tmp_path: Path, damage: Any, reason: str) -> None:
    folder = dist_ckpt(tmp_path, 200, ("__0_0.distcp", "__1_0.distcp"))
    damage(folder)
    problem = checkpoint_problem(folder)
    assert problem is not None
    assert reason in problem, problem


def test_corrupt_newest_is_set_aside_and_the_tracker_rolls_back_to_the_newest_good(tmp_path: Path) -> None:
    legacy(tmp_path, 100)
    dist_ckpt(tmp_path, 200)
    legacy(tmp_path, 300)
    cut_short(iter_dir(tmp_path, 200) / "__0_0.distcp", keep=0.0)  # also bad: skipped, left in place
    cut_short(iter_dir(tmp_path, 300) / "mp_rank_00" / "model_optim_rng.pt")
    outcome = heal(tmp_path, max_rollbacks=2, now=NOW)
    assert outcome.action == "rolled_back"
    assert outcome.iteration == 100
    assert tracker(tmp_path) == "100"
    assert (
        tmp_path / "iter_0000300.corrupt-20261203T083000Z" / "mp_rank_00" / "model_optim_rng.pt"
    ).is_file()
    assert not iter_dir(tmp_path, 300).exists()
    assert iter_dir(tmp_path, 200).is_dir()  # only the tracker's checkpoint is moved
    assert outcome.message.startswith("[autoexp] checkpoint iter_0000300 is corrupt (mp_rank_00/")
    assert "set aside as iter_0000300.corrupt-20261203T083000Z, resuming from iter_0000100" in outcome.message
    assert "also bad, left in place: iter_0000200 (shard __0_0.distcp is empty)" in outcome.message
    assert "\n" not in outcome.message
    assert rollbacks_done(tmp_path) == 1
    assert heal(tmp_path).action == "ok"  # the next resubmission finds a good one


def test_no_good_checkpoint_left_removes_the_tracker_loudly(tmp_path: Path) -> None:
    legacy(tmp_path, 100)
    cut_short(iter_dir(tmp_path, 100) / "mp_rank_00" / "model_optim_rng.pt")
    outcome = heal(tmp_path, now=NOW)
    assert outcome.action == "started_over"
    assert tracker(tmp_path) is None
    assert "NO good checkpoint left: tracker removed, TRAINING STARTS OVER" in outcome.message
    assert (tmp_path / "iter_0000100.corrupt-20261203T083000Z").is_dir()


def test_a_tracker_naming_a_missing_folder_rolls_back(tmp_path: Path) -> None:
    legacy(tmp_path, 100)
    set_tracker(tmp_path, 200)
    outcome = heal(tmp_path, now=NOW)
    assert (outcome.action, tracker(tmp_path)) == ("rolled_back", "100")
    assert "(the folder is missing)" in outcome.message


def test_at_most_max_rollbacks_per_training_then_exit_3(tmp_path: Path) -> None:
    for it in (100, 200, 300, 400):
        legacy(tmp_path, it)
    for it, minute in ((400, 1), (300, 2)):
        cut_short(iter_dir(tmp_path, it) / "mp_rank_00" / "model_optim_rng.pt")
        assert heal(tmp_path, max_rollbacks=2, now=NOW.replace(minute=minute)).action == "rolled_back"
    cut_short(iter_dir(tmp_path, 200) / "mp_rank_00" / "model_optim_rng.pt")
    outcome = heal(tmp_path, max_rollbacks=2)
    assert outcome.action == "refused"
    assert "2 rollback(s) already made (max 2" in outcome.message
    assert tracker(tmp_path) == "200"
    assert iter_dir(tmp_path, 200).is_dir()
    assert len((tmp_path / ROLLBACKS).read_text().splitlines()) == 2
    proc = subprocess.run(
        [sys.executable, "-m", "autoexp_cluster.ckpt_check", str(tmp_path), "--max-rollbacks", "2"],
        capture_output=True, text=True, env={"PYTHONPATH": str(INCLUDE)}, check=False,
    )  # fmt: skip
    assert proc.returncode == 3, proc.stderr
    assert proc.stdout.count("\n") == 1
    assert proc.stdout.startswith("[autoexp] checkpoint iter_0000200 is corrupt")


def test_no_checkpoint_and_release_are_left_alone(tmp_path: Path) -> None:
    assert heal(tmp_path).action == "none"
    set_tracker(tmp_path, "release")
    assert heal(tmp_path).action == "ok"
    assert tracker(tmp_path) == "release"


@pytest.mark.ml
@pytest.mark.parametrize("fmt", ["torch", "torch_dist"])
def test_the_trainers_own_checkpoints_pass_and_a_truncated_one_fails(
    fmt: str, megatron_runtime: Any, tmp_path: Path
) -> None:
    megatron_checkpoint([], fmt, tmp_path)
    folder = iter_dir(tmp_path, 1)
    assert checkpoint_problem(folder) is None
    victim = (
        folder / "mp_rank_00" / "model_optim_rng.pt" if fmt == "torch" else sorted(folder.glob("*.distcp"))[0]
    )
    if fmt == "torch_dist":
        victim.write_bytes(b"")
    else:
        cut_short(victim, keep=0.9)
    assert checkpoint_problem(folder) is not None
