"""Every checkpoint rollback a training makes is alerted exactly once and kept in its attempt history:
a success the triggerer would end, a failure, a retry or clear, a re-created trigger.

The cluster here is a local shell (``sh -c``) over a tmp folder: the rollback commands are shell run
on the login node, and the local Slurm cluster is that same shell on the same file system (behind
sshd); what Slurm would say about the job comes in the trigger event, as the real trigger sends it.
The shared fake (tests/support/fake_slurm.py) answers every command with one fixed text, which would
not run the record's ``flock``/``awk``. The real cluster is in tests/include/test_resume_local.py.
"""

from __future__ import annotations

import asyncio
import subprocess
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import TaskSuccessEvent
from slurm_operator.model.events import ENDED, SlurmEvent
from slurm_operator.model.ledger import Attempt, Ledger
from slurm_operator.model.records import CommandResult, JobRecord, LogChunk, RemoteStat
from slurm_operator.model.states import SlurmState
from slurm_operator.operators.slurm import SlurmOperator
from slurm_operator.operators.task_state import STATE_KEY
from slurm_operator.triggers import job_success

from autoexp.campaign.alerts.notifier import RollbackAlert, Target
from autoexp.campaign.planning.run_layout import outcome_path
from autoexp.campaign.tasks.operators import CampaignSlurmOperator
from autoexp.campaign.triggerer.job_trigger import CampaignJobTrigger
from tests.support.rollbacks import roll_back

NAME = "exp-pretrain-train"


class Shell:
    """The task's hook, on a local shell (see the module docstring)."""

    def run(self, command: str, **_: Any) -> CommandResult:
        done = subprocess.run(["sh", "-c", command], capture_output=True, text=True, timeout=30)
        return CommandResult(done.returncode, done.stdout, done.stderr)

    def write_text(self, path: str, text: str) -> None:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text)

    def stat(self, path: str) -> RemoteStat:
        p = Path(path)
        return RemoteStat(path, exists=p.exists(), size=p.stat().st_size if p.exists() else 0)

    def read_log(self, path: str, offset: int = 0, max_bytes: int = 1 << 20) -> LogChunk:
        data = Path(path).read_bytes()[offset : offset + max_bytes]
        return LogChunk(data.decode(), offset, offset + len(data))


class AsyncShell:
    """The trigger's hook, on the same shell."""

    async def run(self, command: str, **_: Any) -> CommandResult:
        return await asyncio.to_thread(Shell().run, command)

    async def write_text(self, path: str, text: str) -> None:
        await asyncio.to_thread(Shell().write_text, path, text)


class Store:
    """The task state store: what a retry or a clear finds of the tries before."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str) -> Any:
        return self.values.get(key)

    def set(self, key: str, value: Any, retention: timedelta | None = None) -> None:
        self.values[key] = value


class Run:
    """One training task instance: its operator, store, contexts, alert log and checkpoint folder."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, done: str = "1") -> None:
        self.ckpt, self.alerts, self.state = (
            tmp_path / "checkpoints",
            tmp_path / "alerts.log",
            tmp_path / "st",
        )
        self.ckpt.mkdir()
        self.op = CampaignSlurmOperator(
            task_id="train",
            phase="pretrain",
            state_dir=str(self.state),
            ssh_conn_id="local",
            remote_dir=str(tmp_path),
            script_path="/x.sbatch",
            job_name=NAME,
            completion_command=f"echo {done}",
            rollback_alert=RollbackAlert("exp", Target(path=str(self.alerts)), str(self.ckpt)),
            retries=1,
        )
        monkeypatch.setattr(self.op, "_hook", Shell)
        self.store = Store()
        self.log = str(tmp_path / "train-42.out")

    def context(self, try_number: int) -> Any:
        ti = SimpleNamespace(
            task_id="pretrain.train", map_index=-1, try_number=try_number, max_tries=1, log=None
        )
        return {
            "run_id": "r1",
            "params": {"phases": ["pretrain"]},
            "ti": ti,
            "dag_run": SimpleNamespace(dag_id="exp_dag", run_id="r1"),
            "task_state_store": self.store,
        }

    def deferred(self) -> Ledger:
        """The ledger of a submitted job, as the operator stores it and hands it to its trigger."""
        ledger = Ledger(NAME, [Attempt(1, "42", self.log, "/s/a001.sbatch", try_number=1)])
        self.store.set(STATE_KEY, ledger.to_dict())
        return ledger

    def trigger(self, ledger: Ledger) -> CampaignJobTrigger:
        self.op._run_id = "r1"
        trigger = self.op.make_job_trigger(
            ssh_conn_id="local",
            job_id="42",
            log_path=self.log,
            carry=ledger.to_dict(),
            end_task_on_success=True,
            completion_command=self.op.completion_command,
        )
        assert isinstance(trigger, CampaignJobTrigger)
        trigger.task_instance = SimpleNamespace(
            dag_id="exp_dag", task_id="pretrain.train", run_id="r1", map_index=-1
        )
        return trigger

    def sent(self) -> list[str]:
        text = self.alerts.read_text() if self.alerts.exists() else ""
        return [line for line in text.splitlines() if "autoexp ROLLBACK" in line]

    def stored_rollbacks(self) -> list[str]:
        return list(Ledger.from_dict(self.store.values[STATE_KEY]).current.extra.get("rollbacks", []))

    def finished(self) -> Path:
        return Path(outcome_path(str(self.state), "r1", "pretrain", "finished"))


def ended(state: SlurmState, ledger: Ledger) -> dict[str, Any]:
    """The trigger's event for the job's end (``SlurmJobTrigger._final``)."""
    record = JobRecord("42", NAME, state, exit_code=1 if state is SlurmState.FAILED else 0)
    return SlurmEvent(
        status=ENDED, message=f"Slurm job 42 ended {state.value}", job_id="42", slurm_state=state.value,
        exit_code=record.exit_code, record=record, carry=ledger.to_dict(),
    ).to_payload()  # fmt: skip


@pytest.fixture
def xcoms(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The XCom a success ended in the triggerer writes (Airflow's triggerer channel is not here)."""
    written: list[Any] = []

    async def xcom_set(value: Any, **_: Any) -> None:
        written.append(value)

    monkeypatch.setattr(job_success.airflow_internals, "xcom_set", xcom_set)
    monkeypatch.setattr(job_success.airflow_internals, "TRIGGER_XCOMS", True)  # as on 3.3, on every version
    return written


async def test_a_success_with_a_rollback_is_left_to_the_task_which_alerts_it_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xcoms: list[Any]
) -> None:
    run = Run(tmp_path, monkeypatch)
    ledger = run.deferred()
    record = roll_back(run.ckpt, 10, 20)  # the job's ckpt_check, before its trainer resumed
    trigger = run.trigger(ledger)
    assert trigger.serialize()[1]["checkpoint_dir"] == str(run.ckpt)
    completed = JobRecord("42", NAME, SlurmState.COMPLETED, exit_code=0)
    # The job completed its work, but the triggerer does not end the task: no task process would
    # run after it to alert the rollback.
    assert await job_success.end_task_here(trigger, AsyncShell(), completed, 0) is None
    assert (xcoms, run.sent(), run.finished().exists()) == ([], [], False)
    # So the task process resumes and judges it: success, and the one alert.
    results = run.op.execute_complete(run.context(1), ended(SlurmState.COMPLETED, ledger))
    assert results[-1]["extra"]["rollbacks"] == [record]  # the XCom result: the attempt history
    assert results[-1]["verdict"] == "succeed"
    assert run.stored_rollbacks() == [record]
    (alert,) = run.sent()
    assert alert.endswith("ROLLBACK: experiment=exp task=pretrain.train checkpoint=iter_0000020")
    assert f"log={run.log}" in run.alerts.read_text()
    assert run.finished().read_text() == "done\n"
    # A clear (its work is done: nothing submitted) and a trigger re-created for the same job alert
    # nothing again, and the triggerer now ends such a success itself.
    assert run.op.execute(run.context(2)) == []
    rebuilt = CampaignJobTrigger(**trigger.serialize()[1])
    rebuilt.task_instance = trigger.task_instance
    assert isinstance(await job_success.end_task_here(rebuilt, AsyncShell(), completed, 0), TaskSuccessEvent)
    assert len(run.sent()) == 1


async def test_a_rollback_alerted_by_a_clear_lets_the_triggerer_end_the_success(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, xcoms: list[Any]
) -> None:
    """Cleared while its job runs (after the job's rollback): the new try alerts it and re-attaches;
    the success then ends in the triggerer, across a triggerer restart, with no second alert."""
    run = Run(tmp_path, monkeypatch, done="0")
    ledger = run.deferred()
    record = roll_back(run.ckpt, 10, 20)
    attached: list[Any] = []
    monkeypatch.setattr(SlurmOperator, "execute", lambda self, ctx: attached.append(ctx) or ["job"])
    assert run.op.execute(run.context(2)) == ["job"]  # re-attaches (the plugin's part, not run here)
    assert len(run.sent()) == 1
    assert run.stored_rollbacks() == [record]  # what the re-attach defers with: its trigger's carry
    restarted = CampaignJobTrigger(**run.trigger(ledger).serialize()[1])
    restarted.task_instance = SimpleNamespace(
        dag_id="exp_dag", task_id="pretrain.train", run_id="r1", map_index=-1
    )
    restarted.completion_command = "echo 1"  # the job did its work
    completed = JobRecord("42", NAME, SlurmState.COMPLETED, exit_code=0)
    assert isinstance(
        await job_success.end_task_here(restarted, AsyncShell(), completed, 0), TaskSuccessEvent
    )
    assert run.finished().read_text() == "done\n"
    assert len(run.sent()) == 1


def test_a_failed_training_alerts_its_rollback_once_and_its_retry_not_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = Run(tmp_path, monkeypatch, done="0")
    Path(run.log).write_text("[autoexp] checkpoint iter_0000020 is corrupt ...\nTraceback: boom\n")
    ledger = run.deferred()
    record = roll_back(run.ckpt, 10, 20)
    with pytest.raises(AirflowException, match="Slurm job 42"):
        run.op.execute_complete(run.context(1), ended(SlurmState.FAILED, ledger))
    assert len(run.sent()) == 1
    assert run.stored_rollbacks() == [record]
    # The retry (and, the same, a clear) submits the next attempt: nothing to alert again.
    monkeypatch.setattr(SlurmOperator, "execute", lambda self, ctx: ["job"])
    assert run.op.execute(run.context(2)) == ["job"]
    assert len(run.sent()) == 1
    # The next attempt's job rolls back again: that one is alerted, once, when it ends.
    retried = Ledger(NAME, [*ledger.attempts, replace(ledger.current, attempt=2, job_id="43")])
    second = roll_back(run.ckpt, 30, 40, minute=1)
    with pytest.raises(AirflowException, match="Slurm job 43"):
        run.op.execute_complete(run.context(2), ended(SlurmState.FAILED, retried))
    assert len(run.sent()) == 2
    assert run.stored_rollbacks() == [second]
    assert "checkpoint=iter_0000040" in run.sent()[-1]
