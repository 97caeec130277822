"""SlurmOperator: submit an sbatch script over SSH, defer while it runs, resubmit by policy."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from airflow.sdk import BaseOperator, Context
from airflow.sdk.exceptions import AirflowException

from slurm_operator.airflow_public import AirflowFailException, TaskDeferralTimeout
from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.model import events, naming
from slurm_operator.model.events import EventSchemaError
from slurm_operator.model.exceptions import SlurmError
from slurm_operator.model.ledger import Attempt, Ledger, Verdict
from slurm_operator.operators import task_state
from slurm_operator.operators.arguments import check_arguments, ending_kwargs, job_trigger_kwargs, submit_spec
from slurm_operator.operators.submission import SubmitFailed, submit_attempt, without_bad_nodes
from slurm_operator.operators.worker_wait import relay_lines, wait_in_worker
from slurm_operator.policy import cancels, completion, error_lines, recovery, resubmission
from slurm_operator.policy.completion import CompletionRule
from slurm_operator.policy.fatal import FatalSpec, parse_rules
from slurm_operator.policy.resubmission import CompletionCheck, probe_progress
from slurm_operator.policy.watchdog import DEFAULT_STARTUP_TIMEOUT, DEFAULT_UNKNOWN_TIMEOUT
from slurm_operator.triggers.relay_position import RelayPosition, seed
from slurm_operator.triggers.slurm_job import SlurmJobTrigger


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
    :param completion_regex: a COMPLETED job is done only if this regex is in its log tail (e.g. a
        line the program prints when it finished its work); otherwise it is resubmitted.
    :param completion_command: remote command printing 1 when done (AutoExperiment's termination_cmd).
    :param completion_check: callable ``(hook, attempt) -> bool``, same (or override ``is_work_done``).
    :param progress_command: remote command whose output changes when the job makes progress (e.g.
        ``cat`` of a file the job rewrites as it progresses); enables ``max_attempts_without_progress``.
    :param max_attempts: submissions per task try that count (numbering continues across tries): all
        but a TIMEOUT or PREEMPTED one after which ``progress_command``'s output changed (a long
        job's time-limit cycles are not failures; see ``resubmission``).
    :param max_attempts_without_progress: consecutive attempts without progress before giving up
        (a PREEMPTED attempt is skipped: neither counted nor a progress).
    :param max_attempts_overall: submissions per task try whatever their end (a job that keeps advancing).
    :param fatal_patterns: name -> patterns (``policy.fatal``: a regex, ``{"pattern", "repeats"}`` or
        ``{"pattern", "above_median", "repeats", "window"}``), searched in the log the wait relays
        (the trigger cancels the job at the match) and in an ended job's tail unless it COMPLETED its
        work: a match records ``Attempt.fatal`` and the line, verdict FATAL, and fails the task
        without resubmission nor retry (AirflowFailException): the same input would end the same way.
    :param poll_interval: seconds between state polls (batched per cluster in the triggerer).
    :param deferrable: wait in the triggerer (default) or poll in the worker.
    :param stream_logs: relay new job log lines into the task log as ``[slurm <id>] ...``.
    :param failure_budget: seconds the cluster may be unreachable before the wait gives up (the
        job keeps running; the task's retry re-attaches to it).
    :param min_defer_seconds: shortest deferral (docs/slurm-operator.md#airflow-332-workarounds).
    :param unknown_timeout: seconds a job may stay in a state the plugin cannot classify before the
        task fails; the job is not cancelled (a retry re-attaches to it).
    :param progress_timeout: seconds a RUNNING job may go without a change of its log or of any
        ``progress_paths`` before it is cancelled as hung and resubmitted (None: off).
    :param startup_timeout: seconds a job runs before it can be judged hung at all.
    :param progress_paths: more remote files whose change means progress (templated).
    :param progress_pattern: a regex whose group 1 is the progress the job's log reports (an
        integer, e.g. a training iteration); once it matched, only a new high of it or a change of
        ``progress_paths`` is progress: a log that grows without it (a restart loop) is hung.
    :param submit_lock: cluster file to ``flock`` around "an active job has this name? adopt it, else
        sbatch" (one remote command): task instances sharing a ``job_name`` never both submit. None:
        submit without it (a new try still re-attaches to an active job by name).
    :param max_excluded_nodes: nodes a resubmission is sent away from at most (``sbatch --exclude``;
        which ones: ``policy.nodes``), kept across attempts and tries, the latest found kept. 0: no
        exclusion. Keep it below the partition's nodes minus the job's.
    :param end_task_on_success: let the trigger end the task when the job COMPLETED and
        ``completion_regex``/``completion_command`` pass (no task process resumes to judge it; see
        ``SlurmJobTrigger``). Needs one of them, and neither ``completion_check`` nor an
        ``is_work_done`` of a subclass (the trigger cannot run those).
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
        "submit_lock",
    )
    ui_color = "#c7e9c0"
    #: A failed job's error shows its log's error lines, not its launcher's (a subclass names them).
    log_patterns: error_lines.LogPatterns = error_lines.GENERIC

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
        max_attempts_overall: int = 100,
        fatal_patterns: FatalSpec | None = None,
        poll_interval: float = 60,
        deferrable: bool = True,
        stream_logs: bool = True,
        failure_budget: float = 1800,
        min_defer_seconds: float = 10,
        unknown_timeout: float = DEFAULT_UNKNOWN_TIMEOUT,
        progress_timeout: float | None = None,
        startup_timeout: float = DEFAULT_STARTUP_TIMEOUT,
        progress_paths: Sequence[str] = (),
        progress_pattern: str | None = None,
        submit_lock: str | None = None,
        end_task_on_success: bool = False,
        max_excluded_nodes: int = 4,
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
        self.max_attempts_overall = max_attempts_overall
        # (a bare string is kept as given, for the check to name, not split into characters)
        self.fatal_patterns = {
            str(k): v if isinstance(v, str) else list(v) for k, v in (fatal_patterns or {}).items()
        }
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self.stream_logs = stream_logs
        self.failure_budget = failure_budget
        self.min_defer_seconds = min_defer_seconds
        self.unknown_timeout = unknown_timeout
        self.progress_timeout = progress_timeout
        self.startup_timeout = startup_timeout
        self.progress_paths = list(progress_paths)
        self.progress_pattern = progress_pattern
        self.submit_lock = submit_lock
        self.end_task_on_success = end_task_on_success
        self.max_excluded_nodes = max_excluded_nodes
        self._ledger: Ledger | None = None  # the job history of the try running here, for on_kill

    # ----------------------------------------------------------------------------------- entry points
    def execute(self, context: Context) -> list[dict[str, Any]]:
        """Re-attach to this task instance's job if one runs, judge it if it ended, else submit; wait."""
        self._validate()
        hook, name = self._hook(), self._name(context)
        pattern, try_number = self._output_pattern(name), task_state.try_number(context)
        stored = task_state.state_get(context)
        probe = self._probe_progress
        start = recovery.start_try(
            hook,
            stored,
            name,
            output_pattern=pattern,
            try_number=try_number,
            probe=probe,
            adopts_on_submit=self.submit_lock is not None,
        )
        ledger = self._ledger = start.ledger
        if start.action == recovery.JUDGE:
            return self._judge(context, hook, ledger)
        if start.action == recovery.SUBMIT:
            self._submit(context, hook, ledger)
        elif start.record:
            task_state.record(context, ledger)
        return self._wait(context, hook, ledger)

    def execute_complete(self, context: Context, event: Any = None, **_: Any) -> list[dict[str, Any]]:
        """Resume after the trigger fired; everything needed comes from the event (dag.test drops kwargs)."""
        try:
            ev = events.resume_event(event, self.task_id)
        except EventSchemaError as exc:
            raise AirflowException(str(exc)) from None
        if not ev.carry.get("attempts"):
            raise AirflowException(f"task {self.task_id}: trigger event has no attempt record: {ev.message}")
        # The carried ledger, its attempt ended as the event's record (parsed once, in the poll) says.
        ledger = self._ledger = Ledger.resumed(ev)
        current = ledger.current
        if ev.status == events.ERROR:
            # The job itself may be fine; the retry re-attaches to it through the recorded job id.
            raise AirflowException(f"Slurm job {current.job_id} ({current.log_path}): {ev.message}")
        if ev.record is None:
            raise AirflowException(f"Slurm job {current.job_id}: final event without accounting record")
        hung = ev.message if ev.status == events.HUNG else None
        if ev.status == events.FATAL:  # the wait saw a fatal line and (data: cancelled) cancelled the job
            current = resubmission.stop_fatal(self._hook(), current, bool(ev.data.get("cancelled")), self.log)
        return self._ended(context, self._hook(), ledger, current, hung)

    def on_kill(self) -> None:
        """Worker-side kill (task failed/cleared/timed out while running): cancel the job we started."""
        if self._ledger is not None and self._ledger.attempts:
            current = self._ledger.current
            # A connection of its own: on_kill runs in another thread than the one using the task's.
            own = SlurmHook(self.ssh_conn_id)
            self._cancel(current.job_id, current.log_path, "on_kill", cancels.ON_KILL_REASON, own)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Cancel the job when the deferral timed out (``execution_timeout``), then fail as Airflow does.

        The triggerer calls ``on_kill`` only for user actions, and a timed-out task resumes straight
        into failure: without this the job would run on, unwatched. A trigger *failure* leaves the job
        alone: the job may be fine, and the task's retry re-attaches to it.
        """
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except TaskDeferralTimeout:
            recorded = task_state.recorded_attempt(context)
            if recorded is not None:
                self._cancel(*recorded, "deferral timed out", cancels.TIMEOUT_REASON)
            raise

    # ----------------------------------------------------------------------------------- extension points
    def make_job_trigger(self, **kwargs: Any) -> SlurmJobTrigger:
        """The trigger a wait defers to (and whose settings the worker-side wait uses); subclasses
        return a SlurmJobTrigger subclass built from the same ``kwargs``."""
        return SlurmJobTrigger(**kwargs)

    def is_work_done(self, hook: SlurmHook, attempt: Attempt) -> bool | None:
        """Whether a COMPLETED attempt finished the work (None: no rule configured, COMPLETED is done).

        Asked before the resubmission policy runs, which resubmits a COMPLETED job whose work is not
        done. Default: every configured ``completion_regex``, ``completion_command`` and
        ``completion_check`` agrees.
        """
        done = completion.check(hook, self._completion_rule(), attempt.log_path)
        if self.completion_check is None:
            return done
        return bool(self.completion_check(hook, attempt)) and done is not False

    def on_resubmit(self, context: Context, ended: Attempt, reason: str) -> None:
        """Called once per resubmission within a try, after ``ended`` was judged and before the next
        sbatch (e.g. to alert: an Airflow retry callback never sees these). Default: nothing. An
        exception here is logged and does not stop the resubmission."""

    # ----------------------------------------------------------------------------------- helpers
    def _own_rule(self) -> bool:
        """Whether the work-done rule is one the trigger cannot run (a subclass's or a callable)."""
        own = type(self).is_work_done is not SlurmOperator.is_work_done
        return own or self.completion_check is not None

    def _completion_rule(self) -> CompletionRule:
        return CompletionRule(regex=self.completion_regex, command=self.completion_command)

    def _hook(self) -> SlurmHook:
        """This task process's one connection to the cluster: every hook opens its own SSH connection,
        and a training's checks, submission and wait took four (key exchange each, on both ends)."""
        hook = self.__dict__.get("_slurm_hook")
        if hook is None:
            hook = SlurmHook(self.ssh_conn_id)
            # Past BaseOperator.__setattr__: not an operator argument, never serialized or templated.
            object.__setattr__(self, "_slurm_hook", hook)
        return hook

    def _validate(self) -> None:
        check_arguments(self)

    def _name(self, context: Context) -> str:
        if self.job_name:
            return naming.sanitize(self.job_name)
        ti = context["ti"]
        return naming.job_name(ti.dag_id, ti.task_id, ti.run_id, getattr(ti, "map_index", -1))

    def _output_pattern(self, name: str) -> str:
        return self.output_path or naming.attempt_output_path(self.remote_dir, name)

    def _probe_progress(self, hook: SlurmHook) -> str | None:
        return probe_progress(hook, self.progress_command) if self.progress_command else None

    def _cancel(
        self, job_id: str, log_path: str | None, why: str, reason: str, hook: SlurmHook | None = None
    ) -> None:
        """scancel a job of ours, with the marker that tells a later try it was us (``cancels``)."""
        self.log.info("%s: scancel %s", why, job_id)
        try:
            cancels.cancel_ours(hook or self._hook(), job_id, log_path, reason)
        except SlurmError as exc:
            self.log.error("could not cancel Slurm job %s: %s", job_id, exc)

    def _submit(self, context: Context, hook: SlurmHook, ledger: Ledger) -> None:
        spec = submit_spec(self, ledger.name, self._output_pattern(ledger.name))
        spec, excluded = without_bad_nodes(spec, ledger.attempts, self.max_excluded_nodes, self.log)
        number, try_number = ledger.next_number(), task_state.try_number(context)
        try:
            attempt = submit_attempt(hook, spec, number, try_number, self.log)
        except SubmitFailed as exc:
            raise AirflowException(f"task {self.task_id}: {exc}") from None
        ledger.add(replace(attempt, excluded_nodes=excluded))
        # Recorded before anything else can fail, so a rebuilt operator can cancel or re-attach.
        task_state.record(context, ledger)

    def _wait(self, context: Context, hook: SlurmHook, ledger: Ledger) -> list[dict[str, Any]]:
        current = ledger.current
        trigger = self.make_job_trigger(
            **job_trigger_kwargs(self, ledger),
            **ending_kwargs(self, self._completion_rule(), self._own_rule()),
        )
        if self.deferrable:
            # Where the trigger's relay starts and its watchdog clocks are kept (relay_position).
            seed(context["ti"], RelayPosition(current.job_id, current.log_path, trigger.log_offset))
            # timeout: execution_timeout bounds each wait (docs/slurm-operator.md#airflow-332-workarounds).
            self.defer(trigger=trigger, method_name="execute_complete", timeout=self.execution_timeout)
        ended = wait_in_worker(hook, trigger, relay_lines(self.log, current.job_id))
        hung = ended.hung.message if ended.hung is not None else None
        fatal = ended.fatal
        attempt = ledger.end_current(
            ended.record,
            offset=ended.offset,
            progress=ended.progress,
            fatal=None if fatal is None else fatal.rule,
            fatal_line="" if fatal is None else fatal.line or "",
        )
        if fatal is not None:
            attempt = resubmission.stop_fatal(hook, attempt, False, self.log)
        return self._ended(context, hook, ledger, attempt, hung)

    def _ended(
        self, context: Context, hook: SlurmHook, ledger: Ledger, ended: Attempt, hung: str | None
    ) -> list[dict[str, Any]]:
        """Record the current attempt's end (a hung job: cancelled first) and judge it."""
        if hung is not None:
            try:
                ended = resubmission.cancel_hung(hook, ended, hung, self.log)
            except resubmission.HungNotCancelled as exc:
                raise AirflowException(str(exc)) from None
        ledger.update_current(ended)
        return self._judge(context, hook, ledger)

    def _judge(self, context: Context, hook: SlurmHook, ledger: Ledger) -> list[dict[str, Any]]:
        """Judge the attempt that just ended: succeed, resubmit (and wait again) or fail."""
        current = ledger.current
        # Asked here, and given to the policy: the policy never calls back into the operator.
        done = self.is_work_done(hook, current) if resubmission.asks_work_done(current) else None
        caps = resubmission.Caps(
            self.max_attempts,
            self.max_attempts_without_progress,
            self.progress_command,
            self.max_attempts_overall,
            parse_rules(self.fatal_patterns),
            self.progress_pattern,
        )
        try:
            _, decision = resubmission.judge(hook, ledger, work_done=done, caps=caps, log=self.log)
        except resubmission.CancelledFromOutside as exc:
            task_state.state_set(context, ledger)  # as judged (a clear resumes the work)
            raise AirflowFailException(str(exc)) from None
        except cancels.CancelOriginUnknown as exc:
            raise AirflowException(str(exc)) from None  # nothing recorded: the retry judges it again
        task_state.state_set(context, ledger)
        if decision.verdict is Verdict.SUCCEED:
            return ledger.results()
        if decision.verdict is Verdict.RESUBMIT:
            try:
                self.on_resubmit(context, ledger.current, decision.reason)
            except Exception:  # an alert that cannot be sent must not cost the training its next attempt
                self.log.exception("on_resubmit failed; resubmitting anyway")
            self._submit(context, hook, ledger)
            return self._wait(context, hook, ledger)
        message = resubmission.failure_message(hook, ledger.current, decision, self.log_patterns)
        if decision.verdict is Verdict.FATAL:
            raise AirflowFailException(message)  # no Airflow retry: it would end the same way
        raise AirflowException(message)
