"""Evaluator: lm-eval's API on the shipped offline tasks; results.json per iteration; stock lm-eval agrees."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from autoexp_cluster.convert import convert
from autoexp_cluster.evaluate import SHIPPED_REMOTE, EvaluationError, evaluate, remote_code_decision

from tests.autoexp_cluster.conftest import INCLUDE, TrainedRun

TASKS = INCLUDE / "autoexp_cluster" / "eval_tasks"


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


def test_unknown_task_is_a_clear_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text('{"model_type": "llama"}')
    with (
        caplog.at_level(logging.INFO, logger="autoexp_cluster.evaluate"),
        pytest.raises(EvaluationError, match=r"unknown lm-eval task\(s\) no_such_task"),
    ):
        evaluate(tmp_path / "model", ["no_such_task"], TASKS, tmp_path / "r.json")
    # The decision is logged before anything else runs; a stock model gets no remote code.
    assert "trust_remote_code off: config.json has no auto_map (stock model_type 'llama')" in caplog.text


def test_missing_model_dir_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(EvaluationError, match=r"not a HF model directory"):
        evaluate(tmp_path / "nope", ["autoexp_arith"], TASKS, tmp_path / "r.json")


@pytest.mark.ml
def test_stock_lm_eval_cli_on_the_shipped_folder_gives_the_evaluators_numbers(
    trained_run: TrainedRun, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    hf = tmp_path / "hf"
    convert(trained_run.checkpoints / "iter_0000015", hf)
    with caplog.at_level(logging.INFO, logger="autoexp_cluster.evaluate"):
        ours = evaluate(hf, ["autoexp-tiny"], TASKS, tmp_path / "ours.json", batch_size=16, device="cpu")
    assert "trust_remote_code on: config.json auto_map names the shipped remote code" in caplog.text
    # Stock lm-eval, nothing of autoexp on its path, run from an unrelated folder.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1")
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    proc = subprocess.run(
        [sys.executable, "-m", "lm_eval", "run", "--model", "hf",
         "--model_args", f"pretrained={hf},dtype=float32,trust_remote_code=True", "--tasks", "autoexp-tiny",
         "--include_path", str(TASKS), "--device", "cpu", "--batch_size", "16",
         "--output_path", str(cwd / "out")],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    stock = json.loads(next((cwd / "out").rglob("results_*.json")).read_text())["results"]
    for task in ("autoexp_arith", "autoexp_ppl"):
        numbers = {k: v for k, v in ours["results"][task].items() if isinstance(v, float)}
        assert numbers, task
        assert {k: stock[task][k] for k in numbers} == pytest.approx(numbers, rel=1e-6)


def _model_dir(tmp_path: Path, config: dict[str, Any], shipped: bool) -> Path:
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(config))
    for name in ("configuration_autoexp_llama.py", "modeling_autoexp_llama.py") if shipped else ():
        shutil.copy2(SHIPPED_REMOTE / name, model / name)
    return model


AUTO_MAP = {
    "AutoConfig": "configuration_autoexp_llama.AutoexpLlamaConfig",
    "AutoModelForCausalLM": "modeling_autoexp_llama.AutoexpLlamaForCausalLM",
}


def test_a_stock_model_is_evaluated_without_remote_code(tmp_path: Path) -> None:
    model = _model_dir(
        tmp_path, {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"]}, shipped=False
    )
    assert remote_code_decision(model) == (False, "config.json has no auto_map (stock model_type 'qwen3')")


def test_the_shipped_remote_code_is_trusted(tmp_path: Path) -> None:
    model = _model_dir(tmp_path, {"model_type": "autoexp_llama", "auto_map": AUTO_MAP}, shipped=True)
    trust, why = remote_code_decision(model)
    assert trust
    assert "modeling_autoexp_llama.AutoexpLlamaForCausalLM" in why


HUB = "someone/repo--modeling_x.X"


@pytest.mark.parametrize(
    ("auto_map", "written", "named"),
    [
        pytest.param(AUTO_MAP, "modeling_autoexp_llama.py", "modeling_autoexp_llama.py", id="changed"),
        pytest.param({"AutoModelForCausalLM": HUB}, None, HUB, id="hub"),
        pytest.param({"AutoModelForCausalLM": "modeling_x.X"}, "modeling_x.py", "modeling_x.X", id="other"),
    ],
)
def test_other_remote_code_is_refused_in_one_line_and_never_imported(
    auto_map: dict[str, str], written: str | None, named: str, tmp_path: Path
) -> None:
    marker = tmp_path / "imported"
    model = _model_dir(tmp_path, {"model_type": "x", "auto_map": auto_map}, shipped=True)
    if written:
        (model / written).write_text(f"open({str(marker)!r}, 'w').close()\n")
    with pytest.raises(EvaluationError) as err:
        evaluate(model, ["autoexp_arith"], TASKS, tmp_path / "r.json", device="cpu")
    assert "\n" not in str(err.value)
    assert str(err.value).startswith(
        f"{model}: config.json asks for remote code that is not autoexp's shipped"
    )
    assert named in str(err.value)
    assert not marker.exists()
