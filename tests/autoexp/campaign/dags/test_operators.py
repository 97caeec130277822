"""Outcome markers of a phase's training task, written over SFTP to the local cluster."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException

from autoexp.campaign.dags.operators import CampaignSlurmOperator, ReportOperator, gate
from autoexp.campaign.planning.run_layout import outcome_path


def train_task(conn_id: str, state_dir: Path) -> CampaignSlurmOperator:
    return CampaignSlurmOperator(
        task_id="train",
        phase="pretrain",
        state_dir=str(state_dir),
        ssh_conn_id=conn_id,
        remote_dir=str(state_dir),
        script_path="/nonexistent.sbatch",
        retries=1,
    )


def context(try_number: int, max_tries: int) -> Any:
    return {"run_id": "manual__1", "ti": SimpleNamespace(try_number=try_number, max_tries=max_tries)}


def boom() -> None:
    raise RuntimeError("3 attempts without progress")


@pytest.mark.slurm
def test_only_the_last_failed_try_leaves_the_failed_marker(slurm_cluster: Any, tmp_path: Path) -> None:
    op = train_task(slurm_cluster.conn_id, tmp_path)
    failed = Path(outcome_path(str(tmp_path), "manual__1", "pretrain", "failed"))
    with pytest.raises(RuntimeError, match="without progress"):
        op._run_marking_outcome(context(1, 1), boom)  # a retry follows: the waits keep waiting
    assert not failed.exists()
    with pytest.raises(RuntimeError, match="without progress"):
        op._run_marking_outcome(context(2, 1), boom)
    assert failed.read_text() == "RuntimeError: 3 attempts without progress\n"


@pytest.mark.slurm
def test_a_failure_without_retry_leaves_the_failed_marker_at_once(slurm_cluster: Any, tmp_path: Path) -> None:
    """AirflowFailException (an outside cancel, an ended training) skips the retries: last try."""
    op = train_task(slurm_cluster.conn_id, tmp_path)

    def cancelled() -> None:
        raise AirflowFailException("Slurm job 7 was cancelled by alice")

    with pytest.raises(AirflowFailException):
        op._run_marking_outcome(context(1, 1), cancelled)
    failed = Path(outcome_path(str(tmp_path), "manual__1", "pretrain", "failed"))
    assert failed.read_text() == "AirflowFailException: Slurm job 7 was cancelled by alice\n"


@pytest.mark.slurm
def test_success_leaves_the_finished_marker(slurm_cluster: Any, tmp_path: Path) -> None:
    op = train_task(slurm_cluster.conn_id, tmp_path)
    assert op._run_marking_outcome(context(1, 1), lambda: ["attempt"]) == ["attempt"]
    assert Path(outcome_path(str(tmp_path), "manual__1", "pretrain", "finished")).read_text() == "done\n"


@pytest.mark.parametrize(
    ("params", "why"),
    [
        ({"phases": ["pretrain"], "dry_run": True}, "dry run"),
        ({"phases": ["cooldown_1B"]}, "not in this run"),
    ],
)
def test_gate_skips_phases_not_selected_and_dry_runs(params: dict[str, Any], why: str) -> None:
    with pytest.raises(AirflowSkipException, match=why):
        gate({"params": params}, "pretrain")  # type: ignore[typeddict-item]
    gate({"params": {"phases": ["pretrain"]}}, "pretrain")  # type: ignore[typeddict-item]


def test_report_of_a_dry_run_is_skipped() -> None:
    report = ReportOperator(task_id="report", report_args={})
    with pytest.raises(AirflowSkipException, match="dry run"):
        report.execute({"params": {"dry_run": True}})  # type: ignore[typeddict-item]
