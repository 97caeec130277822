"""One process converts a checkpoint and evaluates the export; a failed conversion is not evaluated."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from autoexp_cluster.convert_eval import main

from tests.autoexp_cluster.conftest import INCLUDE, TrainedRun

TASKS = INCLUDE / "autoexp_cluster" / "eval_tasks"


@pytest.mark.ml
def test_the_checkpoint_is_converted_then_evaluated(
    trained_run: TrainedRun, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hf, results = tmp_path / "hf" / "iter_15", tmp_path / "eval_results" / "iter_15" / "results.json"
    argv = ["--load", str(trained_run.checkpoints / "iter_0000015"), "--save", str(hf)]
    assert main([*argv, "--tasks", "autoexp-tiny", "--tasks-path", str(TASKS), "--output", str(results)]) == 0
    assert json.loads((hf / "config.json").read_text())["autoexp"]["iteration"] == 15
    scores = json.loads(results.read_text())["results"]
    assert {"autoexp_arith", "autoexp_ppl"} <= set(scores), scores
    printed = capsys.readouterr().out
    assert printed.index(f"converted {argv[1]} -> {hf}") < printed.index(f"evaluating {hf} on autoexp-tiny")


def test_a_failed_conversion_is_its_exit_status_and_nothing_is_evaluated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "iter_0000004").mkdir()  # no checkpoint files in it
    results = tmp_path / "results.json"
    argv = ["--load", str(tmp_path / "iter_0000004"), "--save", str(tmp_path / "hf")]
    assert main([*argv, "--tasks", "autoexp-tiny", "--tasks-path", str(TASKS), "--output", str(results)]) == 1
    assert "convert: error:" in capsys.readouterr().err
    assert not results.exists()
    assert not (tmp_path / "hf").exists()
