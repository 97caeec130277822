"""Reduced demo (one experiment, one cooldown budget) through a real scheduler + triggerer over REST."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.campaign import DAG_ID, job_name, prepare_data, reduced_config, sacct_names, start_stack

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.ml, pytest.mark.slow]


@pytest.fixture
def campaign(tmp_path: Path, slurm_cluster: Any, airflow_stack_factory: Any) -> dict[str, Any]:
    demo_dir = tmp_path / "campaign"
    prepare_data(demo_dir, slurm_cluster)
    config = reduced_config(tmp_path)
    stack = start_stack(airflow_stack_factory, config, demo_dir)
    return {"stack": stack, "dir": demo_dir, "cluster": slurm_cluster, "config": config}


def wait_for_jobs(cluster: Any, pattern: str, state: str, timeout: float) -> list[str]:
    """Poll accounting until a job named like ``pattern`` is in ``state`` (slurmdbd records lag)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = sacct_names(cluster, pattern)
        if any(line.endswith(f"|{state}") for line in lines):
            return lines
        if time.monotonic() > deadline:
            raise AssertionError(f"no {state} job matching {pattern!r} after {timeout} s: {lines}")
        time.sleep(1)


def test_reduced_demo_runs_to_success_and_reattaches_after_clear(campaign: dict[str, Any]) -> None:
    stack, demo_dir, cluster = campaign["stack"], campaign["dir"], campaign["cluster"]
    run_id = stack.trigger(DAG_ID, {"phases": ["pretrain", "cooldown_8K"], "max_attempts": 3}, timeout=300)
    # Fault: clear the pretrain task while its Slurm job runs; the retry must re-attach, not resubmit.
    stack.wait_task_state(DAG_ID, run_id, "pretrain.train", {"deferred"}, timeout=300)
    # This campaign's job only: other tests of the session leave pretrain.train jobs in accounting too
    # (names are the same in every run of a DAG, and differ by campaign folder).
    train_job = job_name(campaign["config"], demo_dir)
    before = wait_for_jobs(cluster, train_job, "RUNNING", timeout=120)
    assert len(before) == 1, before
    stack.api(
        "POST",
        f"dags/{DAG_ID}/clearTaskInstances",
        {"dag_run_id": run_id, "task_ids": ["pretrain.train"], "only_failed": False, "dry_run": False},
    )
    state = stack.wait_run(DAG_ID, run_id, timeout=900, poll=5)
    assert state == "success", stack.task_states(DAG_ID, run_id)
    # The cleared task's next try found the job it had recorded; the trigger's on_kill left it running.
    retry_log = stack.task_log(DAG_ID, run_id, "pretrain.train", try_number=2)
    assert "re-attaching to recorded Slurm job" in retry_log
    after = sacct_names(cluster, train_job)
    assert after == [before[0].rsplit("|", 1)[0] + "|COMPLETED"], after  # re-attached, not resubmitted
    run_dir = demo_dir / "runs" / "demo_tiny_lr0.003_bs4"
    for results in (
        run_dir / "eval_results/iter_20/results.json",
        run_dir / "eval_results/iter_40/results.json",
        run_dir / "cooldown_s8K/eval_results/iter_32/results.json",
    ):
        assert json.loads(results.read_text())["results"], results
    report = run_dir / "report"
    assert (report / "report.csv").read_text().count("\n") == 4  # header + 3 checkpoints
    assert (report / "score_vs_tokens.png").stat().st_size > 0
