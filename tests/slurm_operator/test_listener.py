"""The stop listener against the real local cluster: a task set to failed while deferred, no triggerer."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from slurm_operator import listener
from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.model import naming
from slurm_operator.model.states import ADOPTABLE_STATES, SlurmState
from slurm_operator.triggers.slurm_job import SlurmJobTrigger

pytestmark = pytest.mark.slurm


def orm_ti(state: str, classpath: str, kwargs: dict[str, Any]) -> Any:
    """What the API server hands a listener: the task instance's row, its trigger reachable."""
    trigger = SimpleNamespace(classpath=classpath, kwargs=kwargs)
    return SimpleNamespace(
        dag_id="d", task_id="t", run_id="r", map_index=-1, state=state, trigger_id=1, trigger=trigger
    )


def sleeper(conn_id: str, tmp_path: Path) -> tuple[SlurmHook, str, str]:
    hook = SlurmHook(conn_id)
    log = str(tmp_path / "job-%j.out")
    job = hook.submit(
        script="#!/bin/bash\nsleep 300\n",
        upload_to=str(tmp_path / "job.sh"),
        sbatch_args=[f"--output={log}", "--job-name=listener-sleeper"],
    )
    return hook, job, log.replace("%j", job)


def trigger_kwargs(conn_id: str, job: str, log: str, **more: Any) -> dict[str, Any]:
    _, kwargs = SlurmJobTrigger(ssh_conn_id=conn_id, job_id=job, log_path=log, **more).serialize()
    return kwargs


@pytest.mark.parametrize("state", ["failed", "success"])
def test_a_task_set_to_a_final_state_while_deferred_gets_its_job_cancelled(
    slurm_cluster: Any, tmp_path: Path, state: str
) -> None:
    hook, job, log = sleeper(slurm_cluster.conn_id, tmp_path)
    try:
        ti = orm_ti(
            state,
            "slurm_operator.triggers.slurm_job.SlurmJobTrigger",
            trigger_kwargs(slurm_cluster.conn_id, job, log),
        )
        thread = listener.stop_deferred_job(ti)
        assert thread is not None
        thread.join(timeout=90)
        assert not thread.is_alive()
        assert hook.job_states([job]).records[job].state in {SlurmState.CANCELLED, SlurmState.COMPLETING}
        # The marker next to the log says the cancel was ours: a clear resubmits, not "a person cancelled".
        assert Path(naming.cancel_marker_path(log)).read_text() == naming.ON_KILL_REASON + "\n"
    finally:
        hook.cancel(job)


def test_nothing_is_cancelled_for_a_retry_a_kept_job_or_a_trigger_of_another_kind(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    hook, job, log = sleeper(slurm_cluster.conn_id, tmp_path)
    try:
        ours = "slurm_operator.triggers.slurm_job.SlurmJobTrigger"
        kwargs = trigger_kwargs(slurm_cluster.conn_id, job, log)
        assert listener.stop_deferred_job(orm_ti("up_for_retry", ours, kwargs)) is None
        kept = trigger_kwargs(slurm_cluster.conn_id, job, log, cancel_on_kill=False)
        thread = listener.stop_deferred_job(orm_ti("failed", ours, kept))
        assert thread is not None
        thread.join(timeout=90)
        other = "airflow.providers.standard.triggers.temporal.TimeDeltaTrigger"
        assert listener.stop_deferred_job(orm_ti("failed", other, {"delta": 1})) is None
        assert listener.stop_deferred_job(orm_ti("failed", "no.such.Trigger", {})) is None
        no_trigger = SimpleNamespace(state="failed", dag_id="d", task_id="t", run_id="r", map_index=-1)
        assert listener.stop_deferred_job(no_trigger) is None  # the task SDK's instance
        assert hook.job_states([job]).records[job].state in ADOPTABLE_STATES  # still queued or running
    finally:
        hook.cancel(job)
