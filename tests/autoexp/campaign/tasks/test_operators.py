"""Outcome markers of a phase's training task, written over SFTP to the local cluster."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from slurm_operator.airflow_public import AirflowFailException, AirflowSkipException
from slurm_operator.model.records import CommandResult
from slurm_operator.operators.slurm import SlurmOperator

from autoexp.campaign.planning.run_layout import outcome_path, remove_file
from autoexp.campaign.tasks import task_callables
from autoexp.campaign.tasks.operators import CampaignSlurmOperator, ReportOperator, gate


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


class DoneCluster:
    """The hook calls of a training task up to submitting: commands run, markers written."""

    def __init__(self, done: str) -> None:
        self.done = done
        self.ran: list[str] = []
        self.written: dict[str, str] = {}

    def run(self, command: str, **_: Any) -> CommandResult:
        self.ran.append(command)
        return CommandResult(0, self.done if command.endswith("check-done") else "", "")

    def write_text(self, path: str, text: str) -> None:
        self.written[path] = text


def _sweep(done: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> tuple[Any, DoneCluster, list[str]]:
    cluster = DoneCluster(done)
    op = train_task("slurm_x", tmp_path)
    op.completion_command = "check-done"
    op.start_condition = "start-ok"
    monkeypatch.setattr(op, "_hook", lambda: cluster)
    monkeypatch.setattr(task_callables, "check_start_condition", lambda *a: cluster.ran.append("start"))
    submitted: list[str] = []
    monkeypatch.setattr(SlurmOperator, "execute", lambda self, ctx: submitted.append("execute") or ["job"])
    ctx = {**context(1, 1), "params": {"phases": ["pretrain"]}}
    return op.execute(ctx), cluster, submitted  # type: ignore[arg-type]


def test_work_another_run_finished_is_not_submitted_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    result, cluster, submitted = _sweep("1\n", monkeypatch, tmp_path)
    assert (result, submitted) == ([], [])
    stale = [outcome_path(str(tmp_path), "manual__1", "pretrain", o) for o in ("failed", "stopped")]
    # An earlier try's verdict is removed in the same command that asks: nothing else ran.
    assert cluster.ran == [f"{remove_file(*stale)}; check-done"]
    finished = outcome_path(str(tmp_path), "manual__1", "pretrain", "finished")
    assert cluster.written == {finished: "done\n"}  # this run's waits see the training as done


def test_work_not_done_goes_on_to_the_start_condition_and_the_job(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    result, cluster, submitted = _sweep("0\n", monkeypatch, tmp_path)
    assert (result, submitted) == (["job"], ["execute"])
    assert [c.rsplit("; ", 1)[-1] for c in cluster.ran] == ["check-done", "start"]


@pytest.mark.slurm
async def test_a_training_that_succeeds_in_the_triggerer_leaves_the_finished_marker(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    # What the worker writes on success (above), written by the job trigger that ends the task.
    from slurm_operator.hooks.slurm_async import AsyncSlurmHook

    op = train_task(slurm_cluster.conn_id, tmp_path)
    assert op.end_task_on_success  # the campaign's tasks all let the trigger end them
    op._run_id = "manual__1"
    trigger = op.make_job_trigger(ssh_conn_id=slurm_cluster.conn_id, job_id="7", log_path=None)
    finished = Path(outcome_path(str(tmp_path), "manual__1", "pretrain", "finished"))
    assert trigger.serialize()[1]["finished_path"] == str(finished)
    await trigger.on_success(AsyncSlurmHook(slurm_cluster.conn_id))
    assert await asyncio.to_thread(finished.read_text) == "done\n"


def test_config_text_reaches_the_cluster_verbatim_and_mapped_values_are_resolved() -> None:
    """Jinja misread shell before: a termination_cmd with bash's ``${#a[@]}`` failed the task at
    rendering ("Missing end of comment tag"), and ``{{`` would have been evaluated."""
    import jinja2
    from airflow.sdk import DAG, task_group

    command = 'a=(1 2); [ ${#a[@]} -eq 2 ] && awk "{{print}}" /dev/null; echo 1'

    @task_group(group_id="g")
    def group(name: Any) -> None:
        CampaignSlurmOperator(
            task_id="t",
            phase="pretrain",
            ssh_conn_id="c",
            remote_dir="/r",
            script_path="/s {#",
            completion_command=command,
            completion_regex=r"done \d{2}",
            job_name=name,
            environment={"X": "{{ ds }}"},
        )

    with DAG("verbatim", schedule=None) as dag:
        group.expand_kwargs([{"name": "job-a"}, {"name": "job-b"}])
    task = dag.task_dict["g.t"]
    context: Any = {"ds": "2026-12-02", "ti": SimpleNamespace(map_index=1)}
    task.render_template_fields(context, jinja_env=jinja2.Environment())
    assert task.completion_command == command
    assert (task.script_path, task.completion_regex) == ("/s {#", r"done \d{2}")
    assert task.environment == {"X": "{{ ds }}"}
    assert task.job_name == "job-b"
