"""Campaign operators: gated Slurm tasks (start condition, outcome markers), waits, stage, report."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from datetime import timedelta
from typing import Any, TypeVar

from airflow.sdk import BaseOperator, Context, TaskInstanceState
from airflow.sdk.exceptions import AirflowException
from airflow.triggers.base import StartTriggerArgs
from slurm_operator.airflow_public import AirflowFailException, AirflowSkipException
from slurm_operator.model import events
from slurm_operator.model.ledger import Attempt, Ledger
from slurm_operator.operators.slurm import SlurmOperator
from slurm_operator.operators.task_state import state_get, state_set
from slurm_operator.policy import completion
from slurm_operator.triggers.serialization import class_path
from slurm_operator.triggers.slurm_job import SlurmJobTrigger

from autoexp.campaign.planning import run_layout
from autoexp.campaign.planning.dag_plan import TRAIN_TASK
from autoexp.campaign.planning.phase_gate import skip_reason
from autoexp.campaign.planning.run_layout import FAILED, FINISHED, STOPPED, outcome_path
from autoexp.campaign.planning.training_log import TRAINING_LOG
from autoexp.campaign.tasks import rollbacks, task_callables
from autoexp.campaign.triggerer.checkpoint_wait import PhaseCheckpointTrigger
from autoexp.campaign.triggerer.job_trigger import CampaignJobTrigger

T = TypeVar("T")


def gate(context: Context, phase: str) -> None:
    """Skip the task when its phase is not in the run's ``phases`` Param, or the run is a dry run."""
    reason = skip_reason(context["params"], phase)
    if reason is not None:
        raise AirflowSkipException(reason)


class CampaignSlurmOperator(SlurmOperator):
    """SlurmOperator for one phase of an experiment.

    A task whose ``completion_command`` already prints 1 submits nothing and succeeds (a sweep
    skips done work); one whose job runs under its name in another run adopts that job
    (``job_name`` and ``submit_lock``, set by the factory).

    :param phase: the phase key (``pretrain``, ``cooldown_<branch>``) checked against the ``phases``
        Param; ``max_attempts`` comes from the run's Param too, set before submitting and on every
        resume, so "Trigger DAG w/ config" governs a run already in flight.
    :param start_condition: the YAML's ``start_condition_cmd``, run as given before (re-)attaching
        (AutoExperiment runs it before every submission; the shipped helpers are idempotent); it
        must print 1.
    :param state_dir: where the outcome markers go (training tasks only). The last try of a failed
        training writes ``<phase>.failed``, a success ``<phase>.finished``, and its job trigger
        ``<phase>.stopped`` when a user stops the task while it waits; the phase's checkpoint waits
        watch them and stop waiting at once instead of for the whole wait budget.
    :param resubmit_alert: called once per Slurm resubmission within a try (``notify.on_retry``).
    :param rollback_alert: alerts the checkpoint rollbacks its jobs made, each once, and names the
        checkpoint folder whose ckpt_check record it reads (``tasks/rollbacks.py``).
    """

    log_patterns = TRAINING_LOG  # a failed job's error shows its lines, not torchrun's report

    def __init__(
        self,
        *,
        phase: str,
        start_condition: str = "",
        state_dir: str = "",
        resubmit_alert: Callable[[Context, Attempt, str], None] | None = None,
        rollback_alert: rollbacks.RollbackAlerter | None = None,
        **kwargs: Any,
    ) -> None:
        # A completed job that passes its checks ends the task in the triggerer (no resume process;
        # the training's outcome marker is written there too: CampaignJobTrigger).
        kwargs.setdefault("end_task_on_success", True)
        super().__init__(**kwargs)
        self.phase = phase
        self.resubmit_alert = resubmit_alert
        self.rollback_alert = rollback_alert
        self.start_condition = start_condition
        self.state_dir = state_dir

    def render_template(
        self, content: Any, context: Context, jinja_env: Any = None, seen_oids: set[int] | None = None
    ) -> Any:
        """The config's text is final: the config layer filled its ``{VAR}`` fields, and Jinja would
        misread shell (bash's ``${#a[@]}`` opens a Jinja comment, ``{{`` would be evaluated). So
        strings pass as they are; mapped arguments are still resolved per instance."""
        if isinstance(content, str):
            return content
        return super().render_template(content, context, jinja_env, seen_oids)

    def _apply_params(self, context: Context) -> None:
        value = context["params"].get("max_attempts")
        if value is not None:
            self.max_attempts = int(value)

    def execute(self, context: Context) -> list[dict[str, Any]]:
        gate(context, self.phase)
        self._apply_params(context)
        self._run_id = str(context["run_id"])
        self._note_rollbacks_in_store(context)  # made by a job an earlier try left, if any
        # A new try (retry or clear): the verdict of an earlier try no longer holds.
        stale = (self._marker(context, FAILED), self._marker(context, STOPPED)) if self.state_dir else ()
        if self._done_already(stale):
            # A sweep (a scheduled, backfilled or re-triggered run) goes on from where the experiment
            # stands: work another run finished is not submitted again.
            self.log.info("work already done (%s printed 1): no Slurm job submitted", self.completion_command)
            return self._run_marking_outcome(context, list)
        if self.start_condition:
            task_callables.check_start_condition(self._hook(), self.start_condition, self.task_id)
        return self._run_marking_outcome(context, lambda: super(CampaignSlurmOperator, self).execute(context))

    def _done_already(self, stale: Sequence[str]) -> bool:
        """The completion command (training: tracker at TRAIN_ITERS; conversion: its done marker and
        results) says done before anything is submitted; a failing command is "not done". The
        ``stale`` markers are removed first, in the same remote command (one less per submission)."""
        clear = run_layout.remove_file(*stale) if stale else ""
        if not self.completion_command:
            if clear:
                self._hook().run(clear)
            return False
        command = f"{clear}; {self.completion_command}" if clear else self.completion_command
        result = self._hook().run(command)
        return completion.command_done(result)

    def execute_complete(self, context: Context, event: Any = None, **kwargs: Any) -> list[dict[str, Any]]:
        self._apply_params(context)
        self._run_id = str(context["run_id"])
        event = self._note_rollbacks_in_event(context, event)  # a job ended: it may have made some
        return self._run_marking_outcome(
            context, lambda: super(CampaignSlurmOperator, self).execute_complete(context, event, **kwargs)
        )

    def make_job_trigger(self, **kwargs: Any) -> SlurmJobTrigger:
        """A CampaignJobTrigger: clearing the task keeps its job for the re-attach, stopping it
        cancels the job and leaves the stop marker for the waits."""
        run_id = getattr(self, "_run_id", None)
        stopped = finished = ""
        if self.state_dir and run_id:
            stopped = outcome_path(self.state_dir, run_id, self.phase, STOPPED)
            finished = outcome_path(self.state_dir, run_id, self.phase, FINISHED)
        checkpoints = self.rollback_alert.checkpoint_dir if self.rollback_alert is not None else ""
        return CampaignJobTrigger(
            **kwargs, stopped_path=stopped, finished_path=finished, checkpoint_dir=checkpoints
        )

    def on_resubmit(self, context: Context, ended: Attempt, reason: str) -> None:
        """The ``notify.on_retry`` alert: a resubmission within one try is a retry to the user."""
        if self.resubmit_alert is not None:
            self.resubmit_alert(context, ended, reason)

    def _alert_rollbacks(self, context: Context, ledger: Any) -> list[str]:
        """Claim and alert the rollbacks not alerted yet (``tasks/rollbacks.py``); -> their records.
        Never fails the training: a record that cannot be read now is read by a later try."""
        if self.rollback_alert is None:
            return []
        folder = self.rollback_alert.checkpoint_dir
        try:
            records = rollbacks.claim(self._hook(), folder)
        except Exception as exc:
            self.log.warning("could not read the checkpoint rollbacks of %s: %s", folder, exc)
            return []
        for record in records:
            self.log.warning("checkpoint rollback in %s: %s", folder, record)
        try:
            if records:
                self.rollback_alert(context, rollbacks.current_log(ledger), records)
        except Exception:  # claimed: logged here, never alerted twice (tasks/rollbacks.py)
            self.log.exception("could not alert the checkpoint rollbacks of %s", folder)
        return records

    def _note_rollbacks_in_store(self, context: Context) -> None:
        """A new try: alert what jobs of earlier tries made, noted in the stored attempt history."""
        if self.rollback_alert is None:
            return
        stored = state_get(context)
        records = self._alert_rollbacks(context, stored)
        if records and isinstance(stored, dict) and stored.get("attempts"):
            state_set(context, Ledger.from_dict(rollbacks.noted(stored, records)))

    def _note_rollbacks_in_event(self, context: Context, event: Any) -> Any:
        """A resume: alert what the ended job made; the event's ledger notes it, stored at once."""
        if self.rollback_alert is None:
            return event
        carry = event.get("carry") if isinstance(event, dict) else None
        records = self._alert_rollbacks(context, carry)
        event = rollbacks.in_event(event, records)
        if records and isinstance(carry, dict) and carry.get("attempts"):
            state_set(context, Ledger.from_dict(event["carry"]))
        return event

    def _marker(self, context: Context, outcome: str) -> str:
        return outcome_path(self.state_dir, str(context["run_id"]), self.phase, outcome)

    def _run_marking_outcome(self, context: Context, step: Callable[[], T]) -> T:
        """Run a step; leave the outcome marker when the task ends (deferral is not an end)."""
        try:
            result = step()
        except Exception as exc:
            ti = context["ti"]
            max_tries = getattr(ti, "max_tries", None)
            last = ti.try_number > (int(self.retries or 0) if max_tries is None else int(max_tries))
            # AirflowFailException ends the task without retries, whatever try this is.
            if self.state_dir and (last or isinstance(exc, AirflowFailException)):
                self._write_marker(context, FAILED, f"{type(exc).__name__}: {exc}"[-2000:])
            raise
        if self.state_dir:
            self._write_marker(context, FINISHED, "done")
        return result

    def _write_marker(self, context: Context, outcome: str, text: str) -> None:
        path = self._marker(context, outcome)
        try:
            self._hook().write_text(path, text + "\n")
        except Exception as exc:  # the waits then fall back to their time budget
            self.log.warning("could not write the %s marker %s: %s", outcome, path, exc)


class CheckpointWait(BaseOperator):
    """Wait (deferred) until a checkpoint iteration is complete; fail fast when its training has ended,
    skip at once when a user stopped it (see PhaseCheckpointTrigger).

    A plain BaseOperator rather than a sensor: it is always deferrable, and building it at parse
    time is cheaper (no sensor settings to read).

    :param phase: the phase this wait belongs to (gate, see ``gate``).
    :param checkpoint_dir: Megatron's ``--save`` folder.
    :param iteration: the iteration (templated: a mapped task group passes it per instance).
    :param state_dir: where the training task of ``watch_phase`` leaves its outcome markers.
    :param watch_phase: the phase whose training writes this checkpoint.
    :param watch_output: that training's ``--output`` pattern (a cancel by the wait leaves its marker).
    :param watch_job_name: that training's Slurm job name (cancelled when its task was stopped).
    :param timeout_secs: the wait budget (derived from the training's time budget).
    :param iterations: in a mapped group, every instance's iteration, in map-index order (the
        trigger that starts the task picks its own; ``iteration`` is then the mapped argument).
    """

    template_fields: Sequence[str] = ("iteration",)
    ui_color = "#fdd0a2"
    start_from_trigger = True

    def __init__(
        self,
        *,
        phase: str,
        ssh_conn_id: str,
        checkpoint_dir: str,
        iteration: int | str,
        state_dir: str,
        watch_phase: str,
        timeout_secs: float,
        watch_output: str = "",
        poll_interval: float = 60,
        settle_seconds: float = 30,
        watch_job_name: str = "",
        iterations: Sequence[int] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.phase = phase
        self.ssh_conn_id = ssh_conn_id
        self.checkpoint_dir = checkpoint_dir
        self.iteration = iteration
        self.state_dir = state_dir
        self.watch_phase = watch_phase
        self.watch_output = watch_output
        self.timeout_secs = timeout_secs
        self.poll_interval = poll_interval
        self.settle_seconds = settle_seconds
        self.watch_job_name = watch_job_name
        # The scheduler hands the wait straight to the triggerer: no task process starts it, and
        # with ``end_task`` none resumes it either (docs/performance.md). ``execute`` stays for
        # runners that ignore this (``dag.test()``).
        self.start_trigger_args = StartTriggerArgs(
            trigger_cls=class_path(PhaseCheckpointTrigger),
            trigger_kwargs={
                "ssh_conn_id": ssh_conn_id,
                "path": checkpoint_dir,
                "iteration": iteration if isinstance(iteration, int) else -1,
                "iterations": [int(i) for i in iterations],
                "settle_seconds": settle_seconds,
                "poll_interval": poll_interval,
                "failed_path": "",
                "finished_path": "",
                "phase": phase,
                "state_dir": state_dir,
                "watch_phase": watch_phase,
                "watch_task_id": f"{watch_phase}.{TRAIN_TASK}",
                "watch_output": watch_output,
                "watch_job_name": watch_job_name,
                "end_task": True,
            },
            next_method="execute_complete",
            next_kwargs=None,
            timeout=timedelta(seconds=timeout_secs),
        )

    def execute(self, context: Context) -> None:
        gate(context, self.phase)
        run_id = str(context["run_id"])
        self.defer(
            trigger=PhaseCheckpointTrigger(
                ssh_conn_id=self.ssh_conn_id,
                path=self.checkpoint_dir,
                iteration=int(self.iteration),
                settle_seconds=self.settle_seconds,
                poll_interval=self.poll_interval,
                failed_path=outcome_path(self.state_dir, run_id, self.watch_phase, FAILED),
                finished_path=outcome_path(self.state_dir, run_id, self.watch_phase, FINISHED),
                stopped_path=outcome_path(self.state_dir, run_id, self.watch_phase, STOPPED),
                watch_task_id=f"{self.watch_phase}.{TRAIN_TASK}",
                watch_output=self.watch_output,
                watch_job_name=self.watch_job_name,
                end_task=True,
            ),
            method_name="execute_complete",
            timeout=timedelta(seconds=self.timeout_secs),
        )

    def execute_complete(self, context: Context, event: Any = None, **_: Any) -> list[int]:
        """Return the complete iterations; an ended training is a failure without retries.

        The triggerer ends a found iteration's task itself; only ``dag.test()``, which runs the
        trigger in line, resumes with that ending's payload (``"success"``).
        """
        if event == TaskInstanceState.SUCCESS:
            return [int(self.iteration)]
        ev = events.resume_event(event, self.task_id)  # malformed: fails the task with its message
        if ev.status == events.SUCCESS:
            return [int(i) for i in ev.data.get("iterations", [])]
        if ev.data.get("training_ended"):
            raise AirflowFailException(f"task {self.task_id}: {ev.message}")
        raise AirflowException(f"task {self.task_id}: {ev.message}")


class StageOperator(BaseOperator):
    """Render every job's sbatch script from the config and upload it with the helpers.

    :param stage_args: keyword arguments of ``task_callables.stage`` (config path, hash, script targets...).
    """

    ui_color = "#deebf7"

    def __init__(self, *, stage_args: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.stage_args = dict(stage_args)

    def execute(self, context: Context) -> dict[str, str]:
        return task_callables.stage(context=context, **self.stage_args)


class ReportOperator(BaseOperator):
    """Collect results and losses of every checkpoint into a table and plots.

    :param report_args: keyword arguments of ``task_callables.build_report`` (experiment, phases, out_dir...).
    """

    ui_color = "#e5f5e0"

    def __init__(self, *, report_args: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.report_args = dict(report_args)

    def execute(self, context: Context) -> dict[str, Any]:
        if context["params"].get("dry_run"):
            raise AirflowSkipException("dry run: nothing ran, nothing to report")
        return task_callables.build_report(context=context, **self.report_args)
