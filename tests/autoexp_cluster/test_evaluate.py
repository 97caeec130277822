"""Evaluator: lm-eval's API on the shipped offline tasks; results.json per iteration; task folder handling."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from autoexp_cluster.convert import convert
from autoexp_cluster.evaluate import EvaluationError, evaluate, materialize_tasks

from tests.autoexp_cluster.conftest import INCLUDE, TrainedRun

TASKS = INCLUDE / "autoexp_cluster" / "eval_tasks"


def test_materialize_tasks_makes_data_paths_absolute(tmp_path: Path) -> None:
    out = materialize_tasks(TASKS, tmp_path / "tasks")
    text = (out / "autoexp_arith.yaml").read_text()
    assert f"test: {TASKS.resolve()}/autoexp_arith.jsonl" in text
    assert "__TASK_DIR__" not in text


@pytest.mark.ml
def test_scores_improve_with_training_and_results_are_written(
    trained_run: TrainedRun, tmp_path: Path
) -> None:
    scores: dict[int, dict[str, Any]] = {}
    for it in (15, 60):
        hf = tmp_path / f"iter_{it}"
        convert(trained_run.checkpoints / f"iter_{it:07d}", hf)
        out = tmp_path / "eval_results" / f"iter_{it}" / "results.json"
        evaluate(hf, ["autoexp-tiny"], TASKS, out, batch_size=16, device="cpu")
        scores[it] = json.loads(out.read_text())["results"]
    early, late = scores[15], scores[60]
    assert late["autoexp_ppl"]["word_perplexity,none"] < 0.8 * early["autoexp_ppl"]["word_perplexity,none"]
    assert late["autoexp_arith"]["acc,none"] >= early["autoexp_arith"]["acc,none"]


def test_unknown_task_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    with pytest.raises(EvaluationError, match=r"unknown lm-eval task\(s\) no_such_task"):
        evaluate(tmp_path / "model", ["no_such_task"], TASKS, tmp_path / "r.json")


def test_missing_model_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EvaluationError, match=r"not a HF model directory"):
        evaluate(tmp_path / "nope", ["autoexp_arith"], TASKS, tmp_path / "r.json")
