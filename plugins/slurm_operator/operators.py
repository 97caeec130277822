"""SlurmOperator: submit an sbatch script over SSH, defer while it runs, resubmit by policy."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
from airflow.sdk.exceptions import AirflowException, AirflowFailException

from slurm_operator import cancels, commands, events, naming, recovery
from slurm_operator.arguments import check_arguments
from slurm_operator.attempt_checks import TAIL_LINES, CompletionCheck, completion_ok, log_tail, probe_progress
from slurm_operator.completion import HUNG, Attempt, Verdict, decide, record_end, window
from slurm_operator.events import EventSchemaError, SlurmEvent
from slurm_operator.exceptions import SlurmError
from slurm_operator.hooks import SlurmHook
from slurm_operator.records import JobRecord
from slurm_operator.relay_position import RelayPosition, seed
from slurm_operator.states import SlurmState
from slurm_operator.task_state import XCOM_JOB_ID, recorded_attempt, state_get, state_set
from slurm_operator.triggers import SlurmJobTrigger
from slurm_operator.watchdog import DEFAULT_STARTUP_TIMEOUT, DEFAULT_UNKNOWN_TIMEOUT
from slurm_operator.worker_wait import wait_in_worker


class SlurmOperator(BaseOperator):
    """Run one sbatch script to completion on a Slurm cluster reached over SSH.

    :param ssh_conn_id: Airflow SSH connection of the login node.
    :param script: the sbatch script text (already rendered; not Jinja-templated, since bash's
        ``${#a[@]}`` would read as a Jinja comment); or
    :param script_path: path of the script on the cluster. Either way one copy per attempt is
        written under ``remote_dir/scripts/`` (a name of its own, never overwritten) and submitted.
    :param remote_dir: cluster folder for the per-attempt logs and scripts.
    :param sbatch_args: extra sbatch options (``--time=1`` ...), each quoted by the hook.
    :param environment: variables exported to the job at submit time.
    :param job_name: Slurm job name; default: deterministic from dag, task, map index and run.
    :param output_path: ``--output`` pattern, must contain ``%j`` so attempts keep their own log.
    :param completion_regex: a COMPLETED job is done only if this regex is in its log tail
        (Megatron's ``after training is done``); otherwise it is resubmitted.
    :param completion_command: remote command printing 1 when done (AutoExperiment's termination_cmd).
    :param completion_check: callable ``(hook, attempt) -> bool``, same meaning.
    :param progress_command: remote command whose output changes when the job makes progress (e.g.
        ``cat ckpt/latest_checkpointed_iteration.txt``); enables ``max_attempts_without_progress``.
    :param max_attempts: submissions per task try, in total (numbering continues across tries).
    :param max_attempts_without_progress: consecutive attempts without progress before giving up.
    :param poll_interval: seconds between state polls (batched per cluster in the triggerer).
    :param deferrable: wait in the triggerer (default) or poll in the worker.
    :param stream_logs: relay new job log lines into the task log as ``[slurm <id>] ...``.
    :param failure_budget: seconds the cluster may be unreachable before the wait gives up (the
        job keeps running; the task's retry re-attaches to it).
    :param min_defer_seconds: shortest deferral (see SlurmJobTrigger: works around a scheduler race
        in Airflow 3.3.2 that fails tasks whose trigger fires within seconds).
    :param unknown_timeout: seconds a job may stay in a state the plugin cannot classify before the
        task fails; the job is not cancelled (a retry re-attaches to it).
    :param progress_timeout: seconds a RUNNING job may go without a change of its log or of any
        ``progress_paths`` before it is cancelled as hung and resubmitted (None: off).
    :param startup_timeout: seconds a job runs before it can be judged hung at all.
    :param progress_paths: more remote files whose change means progress (templated).
    """

    template_fields: Sequence[str] = (
        "script_path",
        "remote_dir",
        "sbatch_args",
        "environment",
        "job_name",
        "output_path",
        "completion_regex",
        "completion_command",
        "progress_command",
        "progress_paths",
    )
    ui_color = "#c7e9c0"

    def __init__(
        self,
        *,
        ssh_conn_id: str,
        remote_dir: str,
        script: str | None = None,
        script_path: str | None = None,
        sbatch_args: Sequence[str] = (),
        environment: Mapping[str, str] | None = None,
        job_name: str | None = None,
        output_path: str | None = None,
        completion_regex: str | None = None,
        completion_command: str | None = None,
        completion_check: CompletionCheck | None = None,
        progress_command: str | None = None,
        max_attempts: int = 10,
        max_attempts_without_progress: int = 3,
        poll_interval: float = 60,
        deferrable: bool = True,
        stream_logs: bool = True,
        failure_budget: float = 1800,
        min_defer_seconds: float = 10,
        unknown_timeout: float = DEFAULT_UNKNOWN_TIMEOUT,
        progress_timeout: float | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        progress_paths: Sequence[str] = (),
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.ssh_conn_id = ssh_conn_id
        self.remote_dir = remote_dir
        self.script = script
        self.script_path = script_path
        self.sbatch_args = list(sbatch_args)
        self.environment = dict(environment) if environment else None
        self.job_name = job_name
        self.output_path = output_path
        self.completion_regex = completion_regex
        self.completion_command = completion_command
        self.completion_check = completion_check
        self.progress_command = progress_command
        self.max_attempts = max_attempts
        self.max_attempts_without_progress = max_attempts_without_progress
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self.stream_logs = stream_logs
        self.failure_budget = failure_budget
        self.min_defer_seconds = min_defer_seconds
        self.unknown_timeout = unknown_timeout
        self.progress_timeout = progress_timeout
        self.startup_timeout = startup_timeout
        self.progress_paths = list(progress_paths)
        self._job_id: str | None = None
        self._log_path: str | None = None

    # ----------------------------------------------------------------------------------- entry points
    def execute(self, context: Context) -> list[dict[str, Any]]:
        """Re-attach to this task instance's job if one runs, judge it if it ended, else submit; wait."""
        self._validate()
        hook = self._hook()
        start = self._recover(context, hook)
        carry = start.carry
        if start.action == recovery.JUDGE:
            self._track(carry)
            return self._after_end(context, hook, carry)
        if start.action == recovery.SUBMIT:
            self._submit(context, hook, carry)
        elif start.record:
            self._record(context, carry)
        self._track(carry)
        return self._wait(context, hook, carry)

    def execute_complete(self, context: Context, event: Any = None, **_: Any) -> list[dict[str, Any]]:
        """Resume after the trigger fired; everything needed comes from the event (dag.test drops kwargs)."""
        try:
            ev = SlurmEvent.from_payload(event)
        except EventSchemaError as exc:
            raise AirflowException(f"task {self.task_id}: malformed trigger event: {exc}") from None
        carry = ev.carry
        if not carry.get("attempts"):
            raise AirflowException(f"task {self.task_id}: trigger event has no attempt record: {ev.message}")
        hook = self._hook()
        current = Attempt.from_dict(carry["attempts"][-1])
        self._track(carry)
        if ev.status == events.ERROR:
            # The job itself may be fine; the retry re-attaches to it through the recorded job id.
            raise AirflowException(f"Slurm job {current.job_id} ({current.log_path}): {ev.message}")
        if ev.status == events.PROGRESS:
            self._relay(current.job_id, ev.log_chunk)
            carry["log_offset"] = ev.log_offset
            return self._wait(context, hook, carry)
        if ev.record is None:
            raise AirflowException(f"Slurm job {current.job_id}: final event without accounting record")
        carry["log_offset"] = ev.log_offset
        if ev.status == events.HUNG:
            return self._hung(context, hook, carry, JobRecord.from_dict(ev.record), ev.message)
        record_end(carry, JobRecord.from_dict(ev.record))
        return self._after_end(context, hook, carry)

    def on_kill(self) -> None:
        """Worker-side kill (task failed/cleared/timed out while running): cancel the job we started."""
        if self._job_id is not None:
            self._cancel(self._job_id, self._log_path, "on_kill", cancels.ON_KILL_REASON)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Cancel the job when the deferral timed out (``execution_timeout``), then fail as Airflow does.

        The triggerer calls ``on_kill`` only for user actions, and a timed-out task resumes straight
        into failure: without this the job would run on, unwatched. A trigger *failure* leaves the job
        alone: the job may be fine, and the task's retry re-attaches to it.
        """
        timed_out = (next_kwargs or {}).get("error") == TriggerFailureReason.TRIGGER_TIMEOUT
        if next_method == TRIGGER_FAIL_REPR and timed_out:
            recorded = recorded_attempt(context)
            if recorded is not None:
                self._cancel(*recorded, "deferral timed out", cancels.TIMEOUT_REASON)
        return super().resume_execution(next_method, next_kwargs, context)

    def _cancel(self, job_id: str, log_path: str | None, why: str, reason: str) -> None:
        """scancel a job of ours, with the marker that tells a later try it was us (``cancels``)."""
        self.log.info("%s: scancel %s", why, job_id)
        try:
            cancels.cancel_ours(self._hook(), job_id, log_path, reason)
        except SlurmError as exc:
            self.log.error("could not cancel Slurm job %s: %s", job_id, exc)

    def _track(self, carry: dict[str, Any]) -> None:
        """Remember the current job and its log, for ``on_kill``."""
        self._job_id = carry["attempts"][-1]["job_id"]
        self._log_path = carry["attempts"][-1]["log_path"]

    # ----------------------------------------------------------------------------------- helpers
    def _hook(self) -> SlurmHook:
        return SlurmHook(self.ssh_conn_id)

    def _validate(self) -> None:
        check_arguments(self)

    def _name(self, context: Context) -> str:
        if self.job_name:
            return naming.sanitize(self.job_name)
        ti = context["ti"]
        map_index = getattr(ti, "map_index", -1)
        return naming.job_name(ti.dag_id, ti.task_id, ti.run_id, map_index)

    def _output_pattern(self, name: str) -> str:
        return self.output_path or naming.attempt_output_path(self.remote_dir, name)

    def _recover(self, context: Context, hook: SlurmHook) -> recovery.TryStart:
        """What this try does first, from the history an earlier try stored (``recovery.start_try``)."""
        name = self._name(context)
        command = self.progress_command
        return recovery.start_try(
            hook,
            state_get(context),
            name,
            output_pattern=self._output_pattern(name),
            try_number=getattr(context["ti"], "try_number", None),
            probe=lambda: probe_progress(hook, command) if command else None,
        )

    def _submit(self, context: Context, hook: SlurmHook, carry: dict[str, Any]) -> None:
        name = carry["name"]
        base = naming.attempt_script_base(self.remote_dir, name)
        pattern = self._output_pattern(name)
        args = [*self.sbatch_args, f"--job-name={name}", f"--output={pattern}"]
        script_copy = f"{base}.attempt*.sbatch"
        try:
            text = self.script if self.script is not None else hook.read_text(str(self.script_path))
            # Slurm cannot create the log's folder: a job whose --output folder is missing ends
            # FAILED at once with no log at all, which would read as the job's own failure.
            log_dir = posixpath.dirname(pattern)
            if log_dir and not base.startswith(f"{log_dir.rstrip('/')}/"):
                # (the claim below creates remote_dir/scripts/, and so remote_dir, anyway)
                hook.run(commands.mkdir_p(log_dir))
            # The copy's name is claimed on the cluster (exclusive create): no earlier attempt's
            # copy is overwritten, even when the history numbering them was lost.
            number = hook.claim_script_copy(base, recovery.next_number(carry), text)
            script_copy = naming.attempt_script_path(self.remote_dir, name, number)
            job_id = hook.submit(script_path=script_copy, sbatch_args=args, environment=self.environment)
        except SlurmError as exc:
            raise AirflowException(f"task {self.task_id}: sbatch of {script_copy} failed: {exc}") from None
        log_path = naming.resolve_output_path(pattern, job_id, name)
        try_number = getattr(context["ti"], "try_number", None)
        carry["attempts"].append(
            Attempt(number, job_id, log_path, script_copy, try_number=try_number).to_dict()
        )
        carry["log_offset"] = 0
        self._track(carry)
        # Recorded before anything else can fail, so a rebuilt operator can cancel or re-attach.
        self._record(context, carry)
        self.log.info("submitted attempt %d as Slurm job %s, log %s", number, job_id, log_path)

    def _record(self, context: Context, carry: dict[str, Any]) -> None:
        job_id = carry["attempts"][-1]["job_id"]
        context["ti"].xcom_push(key=XCOM_JOB_ID, value=job_id)
        state_set(context, carry)

    def _wait(self, context: Context, hook: SlurmHook, carry: dict[str, Any]) -> list[dict[str, Any]]:
        current = Attempt.from_dict(carry["attempts"][-1])
        trigger = SlurmJobTrigger(
            ssh_conn_id=self.ssh_conn_id,
            job_id=current.job_id,
            poll_interval=self.poll_interval,
            log_path=current.log_path,
            log_offset=int(carry.get("log_offset", 0)),
            stream_logs=self.stream_logs,
            failure_budget=self.failure_budget,
            carry=carry,
            min_defer_seconds=self.min_defer_seconds,
            unknown_timeout=self.unknown_timeout,
            progress_timeout=self.progress_timeout,
            startup_timeout=self.startup_timeout,
            progress_paths=self.progress_paths,
        )
        if self.deferrable:
            if self.stream_logs:
                position = RelayPosition(current.job_id, current.log_path, trigger.log_offset)
                seed(context["ti"], position)  # where the trigger's relay starts (relay_position)
            self.defer(
                trigger=trigger,
                method_name="execute_complete",
                # Airflow 3.3.2 does not carry execution_timeout over to a deferral (trigger_timeout
                # stays NULL): without this a deferred task would wait forever. It bounds each wait.
                timeout=self.execution_timeout,
            )
        ended = wait_in_worker(hook, trigger, lambda text: self._relay(current.job_id, text))
        carry["log_offset"] = ended.offset
        if ended.hung is not None:
            return self._hung(context, hook, carry, ended.record, ended.hung.message)
        record_end(carry, ended.record)
        return self._after_end(context, hook, carry)

    def _hung(
        self, context: Context, hook: SlurmHook, carry: dict[str, Any], record: JobRecord, why: str
    ) -> list[dict[str, Any]]:
        """Cancel a hung job, record its attempt as HUNG (with why) and judge it like an ended one."""
        self.log.warning("Slurm job %s: %s; cancelling it", record.job_id, why)
        try:
            log_path = carry["attempts"][-1]["log_path"]
            cancels.cancel_ours(hook, record.job_id, log_path, f"{cancels.HUNG_REASON}: {why}")
        except SlurmError as exc:
            # Resubmitting next to a job that may still run would train twice: fail, the retry re-attaches.
            raise AirflowException(
                f"Slurm job {record.job_id} hung ({why}), and scancel failed: {exc}"
            ) from None
        record_end(carry, record)
        last = carry["attempts"][-1]
        last.update(state=HUNG, extra={**last.get("extra", {}), "hung": why})
        return self._after_end(context, hook, carry)

    def _relay(self, job_id: str, text: str) -> None:
        for line in text.splitlines():
            self.log.info("[slurm %s] %s", job_id, line)

    def _after_end(self, context: Context, hook: SlurmHook, carry: dict[str, Any]) -> list[dict[str, Any]]:
        """Judge the attempt that just ended: succeed, resubmit (and wait again) or fail."""
        current = Attempt.from_dict(carry["attempts"][-1])
        state = SlurmState.parse(current.state)
        if state is SlurmState.CANCELLED:
            self._whose_cancel(context, hook, carry)
            current = Attempt.from_dict(carry["attempts"][-1])
        done = (
            completion_ok(
                hook,
                current,
                regex=self.completion_regex,
                command=self.completion_command,
                check=self.completion_check,
            )
            if state is SlurmState.COMPLETED
            else None
        )
        progress = probe_progress(hook, self.progress_command) if self.progress_command else None
        carry["attempts"][-1].update(completion_ok=done, progress=progress)
        decision = decide(
            state,
            window(carry),
            completion_ok=done,
            max_attempts=self.max_attempts,
            max_attempts_without_progress=self.max_attempts_without_progress,
            progress_baseline=carry.get("baseline"),
            progress_probe=self.progress_command is not None,
        )
        self.log.info(
            "Slurm job %s (attempt %d): %s -> %s",
            current.job_id,
            current.attempt,
            decision.reason,
            decision.verdict.value,
        )
        carry["attempts"][-1]["verdict"] = decision.verdict.value
        state_set(context, carry)
        if decision.verdict is Verdict.SUCCEED:
            return list(carry["attempts"])
        if decision.verdict is Verdict.RESUBMIT:
            self._submit(context, hook, carry)
            return self._wait(context, hook, carry)
        tail = log_tail(hook, current.log_path)
        raise AirflowException(
            f"Slurm job {current.job_id} {current.state} (exit code {current.exit_code}), attempt "
            f"{current.attempt}: {decision.reason}; log {current.log_path}; last {TAIL_LINES} lines:\n{tail}"
        )

    def _whose_cancel(self, context: Context, hook: SlurmHook, carry: dict[str, Any]) -> None:
        """A CANCELLED attempt: ours keeps its meaning (``cancels.note_cancel``); one from outside
        ends the task without Airflow's retries (it means stop; a clear resumes)."""
        try:
            outside = cancels.note_cancel(hook, carry)
        except cancels.CancelOriginUnknown as exc:
            raise AirflowException(str(exc)) from None  # nothing recorded: the retry judges it again
        if outside is not None:
            carry["attempts"][-1]["verdict"] = Verdict.FAIL.value
            state_set(context, carry)
            raise AirflowFailException(outside)
