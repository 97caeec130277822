"""Reduced demo (one experiment, one cooldown budget) through a real scheduler + triggerer over REST."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.campaign import (
    DAG_ID,
    demo_job_names,
    job_name,
    prepare_data,
    reduced_config,
    sacct_names,
    start_stack,
)
from tests.scripts.test_campaign_run import driver

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


@pytest.mark.timeout(1500)  # the campaign report runs after the experiment
def test_reduced_demo_runs_to_success_and_reattaches_after_clear(
    campaign: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
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
    # The checkpoint waits ran in the triggerer only: no task process started or resumed them
    # (docs/performance.md); the Slurm tasks ran in task processes.
    tis = stack.api("GET", f"dags/{DAG_ID}/dagRuns/{run_id}/taskInstances?limit=100")["task_instances"]
    waits = [
        t for t in tis if t["task_id"].endswith("wait") or t["task_id"].endswith("wait_branch_checkpoint")
    ]
    assert len(waits) == 4, tis  # the branch point and the 3 checkpoints of the phases run
    assert all((t["state"], t["pid"], t["hostname"]) == ("success", None, "") for t in waits), waits
    assert all(t["pid"] for t in tis if t["task_id"].endswith("convert_eval") and t["state"] == "success")
    wait_log = stack.task_log(DAG_ID, run_id, "pretrain.checkpoints.wait")
    assert "started by the scheduler: waits for iteration" in wait_log, wait_log[-3000:]
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
    check_campaign_report(campaign, capsys)


def sacct_hours(cluster: Any, names: list[str]) -> tuple[float, list[str]]:
    """Sum of elapsed x allocated CPUs (no GPU on the local cluster) over sacct's rows for ``names``,
    computed here apart from the report's code; also each row's state."""
    out = subprocess.run(
        ["sacct", "-X", "-D", "-n", "-P", "-o", "JobName,Elapsed,AllocTRES,State", "-S", "2024-01-01",
         f"--name={','.join(names)}"],
        capture_output=True, text=True, check=True, env=cluster.env(), timeout=60,
    ).stdout  # fmt: skip
    total, states = 0.0, []
    for line in out.splitlines():
        name, elapsed, tres, state = line.split("|")
        days, _, clock = elapsed.rpartition("-")
        h, m, sec = ([0, *map(int, clock.split(":"))])[-3:]
        cpus = next(int(v.split("=")[1]) for v in tres.split(",") if v.startswith("cpu="))
        total += ((int(days or 0) * 24 + h) * 3600 + m * 60 + sec) * cpus / 3600
        states.append(f"{name}|{state}")
    return total, states


def check_campaign_report(campaign: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """The experiment's report Asset refreshed the campaign report; a run on demand then matches sacct."""
    stack, cluster, config = campaign["stack"], campaign["cluster"], campaign["config"]
    report_dag = f"autoexp_campaign_report_{config.stem}"

    def asset_run() -> str | None:
        runs = stack.api("GET", f"dags/{report_dag}/dagRuns")["dag_runs"]
        done = [r for r in runs if r["run_type"] == "asset_triggered" and r["state"] in ("success", "failed")]
        return str(done[0]["state"]) if done else None

    assert stack.poll(f"an asset-triggered run of {report_dag}", asset_run, 300, 5) == "success"
    names = demo_job_names(config, campaign["dir"])
    # Accounting has every job ended (slurmdbd lags), then the report is asked for on demand.
    ended = ("|COMPLETED", "|FAILED", "|CANCELLED", "|TIMEOUT")
    stack.poll(
        "sacct to show every demo job ended",
        lambda: all(s.endswith(ended) for s in sacct_hours(cluster, names)[1]) or None,
        120,
        2,
    )
    # What the demo does once its experiments ended (scripts/lib/campaign_run.py): ask for the
    # report, then print its table, the fit or why there is none, and the GPU-hours.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("AIRFLOW_HOME", stack.env()["AIRFLOW_HOME"])
        run_id = driver.print_campaign_report(driver.Api(stack.port), config, {"budgets": [1e18]}, 300)
    assert run_id is not None
    printed = capsys.readouterr().out
    assert f"== campaign {config.stem}" in printed, printed
    assert "scaling-law fit: none: " in printed, printed  # one model size, one budget: no fit
    expected, states = sacct_hours(cluster, names)
    assert len(states) >= len(names), states
    out_dir = Path(stack.env()["AIRFLOW_HOME"]) / "autoexp-reports" / config.stem
    assert f"report: {out_dir / 'index.html'}" in printed, printed
    data = json.loads((out_dir / "campaign.json").read_text())
    (experiment,) = data["experiments"]
    assert experiment["dag_id"] == DAG_ID
    assert {k: c["state"] for k, c in experiment["cells"].items()} == {
        "pretrain": "done",
        "cooldown_8K": "done",
    }
    assert all(c["final_loss"] > 0 for c in experiment["cells"].values())
    assert data["gpu_hours"]["total"] == pytest.approx(expected, rel=1e-9)
    assert experiment["gpu_hours"] == pytest.approx(expected, rel=1e-9)
    assert data["fit"]["missing"].startswith("no fit: 2 points, 1 model sizes")
    for name in ("grid.csv", "gpu_hours.csv", "index.html", *data["plots"]):
        assert (out_dir / name).stat().st_size > 0, name
    assert len(data["plots"]) >= 3
    assert "data:image/png;base64," in (out_dir / "index.html").read_text()
    log = stack.task_log(report_dag, run_id, "campaign_report")
    assert f"campaign {config.stem} (" in log
