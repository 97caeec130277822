"""One process converts a checkpoint and evaluates the export; a failed conversion is not evaluated."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from autoexp_cluster.convert_eval import main

from tests.autoexp_cluster.conftest import INCLUDE, TrainedRun

TASKS = INCLUDE / "autoexp_cluster" / "eval_tasks"


# A job's process: the conversion's logit check sets up a process group (gloo) and megatron's parallel
# state; they are gone before lm-eval starts.
AS_A_JOB = """
import sys
import torch.distributed as dist
from autoexp_cluster.convert_eval import main
rc = main(sys.argv[1:])
print(f"rc {rc}, process group after: {dist.is_initialized()}")
"""


def argv(load: Path, hf: Path, results: Path) -> list[str]:
    return ["--load", str(load), "--save", str(hf), "--tasks", "autoexp-tiny", "--tasks-path", str(TASKS),
            "--output", str(results)]  # fmt: skip


@pytest.mark.ml
def test_the_checkpoint_is_converted_then_evaluated(trained_run: TrainedRun, tmp_path: Path) -> None:
    load = trained_run.checkpoints / "iter_0000015"
    hf, results = tmp_path / "hf" / "iter_15", tmp_path / "eval_results" / "iter_15" / "results.json"
    env = {**os.environ, "PYTHONPATH": str(INCLUDE), "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", AS_A_JOB, *argv(load, hf, results)],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    out = proc.stdout
    assert out.rstrip().endswith("rc 0, process group after: False"), out[-2000:] + proc.stderr
    assert json.loads((hf / "config.json").read_text())["autoexp"]["iteration"] == 15
    scores = json.loads(results.read_text())["results"]
    assert {"autoexp_arith", "autoexp_ppl"} <= set(scores), scores
    assert out.index(f"converted {load} -> {hf}") < out.index(f"evaluating {hf} on autoexp-tiny")


@pytest.mark.ml
def test_a_process_group_the_caller_set_up_is_kept(
    trained_run: TrainedRun, megatron_runtime: Any, tmp_path: Path
) -> None:
    import torch.distributed as dist
    from megatron.core import parallel_state

    results = tmp_path / "results.json"
    assert main(argv(trained_run.checkpoints / "iter_0000060", tmp_path / "hf", results)) == 0
    assert results.is_file()
    assert dist.is_initialized()
    assert parallel_state.model_parallel_is_initialized()


def test_a_failed_conversion_is_its_exit_status_and_nothing_is_evaluated(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "iter_0000004").mkdir()  # no checkpoint files in it
    results = tmp_path / "results.json"
    assert main(argv(tmp_path / "iter_0000004", tmp_path / "hf", results)) == 1
    assert "convert: error:" in capsys.readouterr().err
    assert not results.exists()
    assert not (tmp_path / "hf").exists()
