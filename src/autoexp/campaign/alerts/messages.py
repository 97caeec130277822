"""What an alert says: the root cause of a failed run (the failure that ended it, its Slurm job and error
lines), retries, success."""

from __future__ import annotations

import logging
import re
from dataclasses import asdict, dataclass, replace
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseNotifier, Context
from slurm_operator.airflow_public import conf
from slurm_operator.model.ledger import Attempt, Ledger
from slurm_operator.operators.task_state import XCOM_JOB_ID, state_get
from slurm_operator.policy.error_lines import error_text

from autoexp.campaign.planning.training_log import TRAINING_LOG

log = logging.getLogger(__name__)
FAILURE_KEY = "autoexp_failure"  # XCom a failed task leaves for its run's one alert
_MAX_TAIL = 4000
# A task failed from outside its process: its failure callback ran in the DAG processor, which can
# record nothing (see record_failure). Who did it is in Airflow's audit log (the ``log`` table,
# ``GET /api/v2/eventLogs``), which a callback cannot read: the DAG processor's callbacks run with
# the ORM blocked (``supervisor.block_orm_access``) and its channel serves no event-log request.
_FROM_OUTSIDE = "marked failed (by a user or the API) or killed at or before {at}, no error recorded"
# A line of ckpt_check's rollback record (include/autoexp_cluster/ckpt_check.py ``heal``): when, the
# corrupt checkpoint, its new name, why, and where the training resumed (or that it started over).
ROLLBACK_RECORD = re.compile(r"^\S+ (iter_\d+) -> ")
_NO_ERROR = "no error recorded: see the task's log (a task failed from outside, e.g. marked failed, has none)"


@dataclass(frozen=True)
class Failure:
    """One task instance's final failure: when, its error, and its Slurm job's last attempt.

    :param at: when the failure was recorded (ISO, UTC): the earliest one since the run was last
        cleared is the run's root cause.
    :param error: the task's error; the Slurm operators' errors end with the log's error lines.
    :param clear_number: how many times the run had been cleared when this try failed (Airflow's
        ``DagRun.clear_number``): a record from before the run's latest clear is not its cause.
    """

    task: str
    map_index: int
    try_number: int
    at: str
    error: str
    job_id: str | None = None
    state: str | None = None
    exit_code: int | None = None
    log_path: str | None = None
    clear_number: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Failure:
        return cls(**{k: v for k, v in data.items() if k in cls.__dataclass_fields__})

    def where(self) -> str:
        return self.task + (f"[{self.map_index}]" if self.map_index >= 0 else "")

    def summary(self) -> str:
        """The lines naming the task, its Slurm job, state, exit code and log, then the error."""
        slurm = (
            f"slurm_job={self.job_id or '-'} state={self.state or '-'} "
            f"exit_code={'-' if self.exit_code is None else self.exit_code} log={self.log_path or '-'}"
        )
        return f"task={self.where()} try={self.try_number or '-'} {slurm}\n{self.error}"

    def key(self) -> tuple[str, int]:
        return self.task, self.map_index


def tried_here(context: Context) -> bool:
    """Whether this callback runs where the task's try ran (its task process, or ``dag.test()``).

    There Airflow puts the try's error in the context (``exception``, None for none) before the
    callbacks. The DAG processor, which runs the callbacks of a task failed from outside (marked
    failed, killed) and of a run's end, does not, and its channel to its parent serves a few requests
    only (``processor.ToManager``): no task state store, no XCom push. A request of another kind is
    dropped by the parent and the callback waits for an answer forever: the file's parse then times
    out and its DAGs go stale. So those two are used only where the try ran. (``dag.test()`` sets
    it from Airflow 3.3 on: before, its failures are not recorded and the run's alert names the task
    by its state, as one failed from outside.)
    """
    return "exception" in context


def failure_of(context: Context) -> Failure:
    """The failure of the task instance in ``context``, with its recorded Slurm attempt, if any."""
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    failure = Failure(
        task=ti.task_id,
        map_index=-1 if map_index is None else map_index,
        try_number=ti.try_number,
        at=datetime.now(timezone.utc).isoformat(),
        error=shown_error(str(context.get("exception") or ""))[-_MAX_TAIL:] or _NO_ERROR,
        clear_number=getattr(context.get("dag_run"), "clear_number", None),
    )
    # The DAG processor's channel serves no task state store: asking would hang (tried_here).
    stored = state_get(context) if tried_here(context) else None
    if isinstance(stored, dict) and stored.get("attempts"):
        last = Ledger.from_dict(stored).current
        # A job whose log matched a fatal rule shows as that (DIVERGED): Slurm's state is in the error.
        state = last.fatal or last.shown_state
        return _with_job(failure, last.job_id, state, last.exit_code, last.log_path)
    try:  # no stored history (a runner without the state store): the job id the operator pushed
        job_id = ti.xcom_pull(task_ids=ti.task_id, key=XCOM_JOB_ID, map_indexes=ti.map_index)
    except Exception as exc:  # an alert must go out even when XCom is unreachable
        log.warning("could not read the Slurm job id of %s: %s", ti.task_id, exc)
        job_id = None
    return _with_job(failure, None if job_id is None else str(job_id), None, None, None)


def shown_error(error: str) -> str:
    """A task error as an alert shows it: its first line, then the error lines of the log text after
    it (a Slurm operator's error ends with its log's last lines; torchrun's and srun's shutdown
    report are left out, see planning/training_log.py)."""
    head, newline, body = error.partition("\n")
    return head + newline + error_text(body, TRAINING_LOG) if newline else head


def _with_job(
    failure: Failure, job_id: str | None, state: str | None, exit_code: int | None, log_path: str | None
) -> Failure:
    return replace(failure, job_id=job_id, state=state, exit_code=exit_code, log_path=log_path)


def record_failure(context: Context) -> None:
    """Task ``on_failure_callback``: leave the failure for the run's alert; sends nothing itself.

    Every task of a failed training fails (the train task, then each checkpoint wait): one alert per
    task would be dozens for one cause, so the DAG's failure callback sends one naming the earliest.
    """
    if not tried_here(context):
        # A task failed from outside (marked failed, killed): the DAG processor serves no XCom push
        # (asking would hang its parse, see tried_here); the run's alert names it by its state.
        log.info("task %s failed from outside: not recorded, the run's alert names it", context["ti"].task_id)
        return
    try:
        context["ti"].xcom_push(key=FAILURE_KEY, value=asdict(failure_of(context)))
    except Exception as exc:  # e.g. run by the DAG processor for a task killed from outside
        log.warning("could not record the failure of %s: %s", context["ti"].task_id, exc)


class FailureRecorder(BaseNotifier):
    """Every task's ``on_failure_callback``: ``record_failure``.

    An object, not the function: a function's repr holds its address, which the DAG fingerprint pins.
    """

    template_fields = ()

    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        return None  # nothing to render

    def notify(self, context: Context) -> None:
        record_failure(context)


def root_cause(context: Context) -> Failure | None:
    """The failure that ended this DAG run (None: the run failed without a failed task).

    Only the tasks failed now count, each by its latest try: a try's start clears its task's XComs,
    and a record of a task instance no longer failed (a mapped wait cleared and since succeeded, which
    the triggerer started without clearing) is dropped. Of the records left, only those of the run's
    latest clear count (a wait failed before the clear, not cleared itself, is not the cause of the
    training's new failure); the earliest of them is the cause, since a failed training fails its
    waits after it. A failed task with no record failed from outside (marked failed, killed): it
    comes first, as the waits it failed do record theirs. Without any, the task Airflow reported last.
    """
    ti = context.get("ti")
    if ti is None:  # a run failed without a failed task (e.g. dagrun_timeout)
        return None
    dag_id, run_id = ti.dag_id, ti.run_id
    try:
        states = ti.get_task_states(dag_id=dag_id, run_ids=[run_id]).get(run_id, {})
        failed = {_key_of(key, context["dag"].task_dict) for key, s in states.items() if s == "failed"}
        tasks = sorted({task for task, _ in failed})
        pulled = ti.xcom_pull(task_ids=tasks, key=FAILURE_KEY, dag_id=dag_id, run_id=run_id) if tasks else []
    except Exception as exc:  # the alert still goes out, naming the task Airflow reported last
        log.warning("could not read the failures of %s/%s: %s", dag_id, run_id, exc)
        return failure_of(context)
    records = [Failure.from_dict(v) for v in _flatten(pulled) if isinstance(v, dict)]
    records = [r for r in records if r.key() in failed]
    unrecorded = failed - {r.key() for r in records}
    if unrecorded:
        mine = (ti.task_id, _map_index(ti))
        return _failed_from_outside(context, mine if mine in unrecorded else min(unrecorded))
    if not records:
        return failure_of(context)
    latest = max(r.clear_number or 0 for r in records)
    return min((r for r in records if (r.clear_number or 0) == latest), key=lambda r: r.at)


def _key_of(key: str, task_dict: Any) -> tuple[str, int]:
    """``(task_id, map_index)`` of a ``get_task_states`` key (``task_id``, or ``task_id_<index>``)."""
    if key in task_dict:
        return key, -1
    task, _, index = key.rpartition("_")
    return (task, int(index)) if task and index.isdigit() else (key, -1)


def _map_index(ti: Any) -> int:
    map_index = getattr(ti, "map_index", -1)
    return -1 if map_index is None else int(map_index)


def _failed_from_outside(context: Context, key: tuple[str, int]) -> Failure:
    """A task instance failed now that recorded no failure: marked failed, or killed from outside."""
    ti = context["ti"]
    task, map_index = key
    dag_run = context.get("dag_run")
    ended = getattr(dag_run, "end_date", None)
    at = ended.isoformat(timespec="seconds") if isinstance(ended, datetime) else "the run's end"
    mine = (ti.task_id, _map_index(ti)) == key
    try:  # the job id the operator pushed (an XCom read is served in the DAG processor too)
        job_id = ti.xcom_pull(task_ids=task, key=XCOM_JOB_ID, map_indexes=map_index)
    except Exception as exc:  # an alert must go out even when XCom is unreachable
        log.warning("could not read the Slurm job id of %s: %s", task, exc)
        job_id = None
    return Failure(
        task=task,
        map_index=map_index,
        try_number=ti.try_number if mine else 0,
        at=at,
        error=_FROM_OUTSIDE.format(at=at),
        job_id=None if job_id is None else str(job_id),
        clear_number=getattr(dag_run, "clear_number", None),
    )


def _flatten(values: Any) -> list[Any]:
    """xcom_pull of several tasks gives a value per unmapped task and a list per mapped one."""
    if not isinstance(values, list):
        return [values]
    return [item for value in values for item in _flatten(value)]


def run_link(dag_id: str, run_id: str) -> str:
    """The run's page in the Airflow UI: under ``[api] base_url``; unset, under localhost and the
    API server's ``[api] port`` (Airflow's own task links then say localhost:8080 whatever the port)."""
    base = conf.get("api", "base_url", fallback="") or ""
    if not base.strip():
        base = f"http://localhost:{conf.get('api', 'port', fallback='8080') or '8080'}"
    return f"{base.strip().rstrip('/')}/dags/{quote(dag_id)}/runs/{quote(run_id)}"


def _run_of(context: Context) -> tuple[str, str]:
    dag_run = context.get("dag_run")
    if dag_run is not None:
        return dag_run.dag_id, dag_run.run_id
    return context["dag"].dag_id, str(context.get("run_id", ""))


def failure_alert(context: Context, experiment: str) -> tuple[str, str]:
    """Subject and body of the one alert of a failed DAG run."""
    dag_id, run_id = _run_of(context)
    cause = root_cause(context)
    subject = f"autoexp FAILED: experiment={experiment} run={run_id}"
    if cause is None:
        body = f"{subject}\nno task failed; Airflow says: {context.get('reason') or '-'}"
    else:
        subject += f" task={cause.where()} slurm_job={cause.job_id or '-'}"
        body = f"{subject}\nroot cause (the first failure since the run was last cleared): {cause.summary()}"
    return subject, f"{body}\n{run_link(dag_id, run_id)}"


def retry_alert(context: Context, experiment: str) -> tuple[str, str]:
    """Subject and body of a task's retry (the retry re-attaches to or resubmits its Slurm job)."""
    failure = failure_of(context)
    dag_id, run_id = _run_of(context)
    subject = (
        f"autoexp RETRY: experiment={experiment} task={failure.where()} slurm_job={failure.job_id or '-'}"
    )
    return subject, f"{subject}\n{failure.summary()}\n{run_link(dag_id, run_id)}"


def _task_where(context: Context) -> str:
    """The task instance as alerts name it: ``group.task``, ``[index]`` appended when mapped."""
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    return ti.task_id + (f"[{map_index}]" if map_index is not None and map_index >= 0 else "")


def resubmit_alert(context: Context, experiment: str, ended: Attempt, reason: str) -> tuple[str, str]:
    """Subject and body of a Slurm resubmission within one try (time limit, node failure...)."""
    dag_id, run_id = _run_of(context)
    where = _task_where(context)
    subject = (
        f"autoexp RESUBMIT: experiment={experiment} task={where} slurm_job={ended.job_id} "
        f"attempt={ended.attempt}"
    )
    exit_code = "-" if ended.exit_code is None else ended.exit_code
    body = (
        f"{subject}\nslurm_job={ended.job_id} state={ended.shown_state} exit_code={exit_code} "
        f"log={ended.log_path or '-'}\nresubmitting: {reason}"
    )
    return subject, f"{body}\n{run_link(dag_id, run_id)}"


def success_alert(context: Context, experiment: str) -> tuple[str, str]:
    dag_id, run_id = _run_of(context)
    subject = f"autoexp SUCCEEDED: experiment={experiment} run={run_id}"
    return subject, f"{subject}\n{run_link(dag_id, run_id)}"


def deadline_alert(context: dict[str, Any], experiment: str, within_secs: float) -> tuple[str, str]:
    """Subject and body of a missed deadline; ``context`` is the scheduler's: the run as JSON."""
    dag_run = context.get("dag_run") or {}
    dag_id, run_id = str(dag_run.get("dag_id", "")), str(dag_run.get("dag_run_id", dag_run.get("run_id", "")))
    subject = f"autoexp LATE: experiment={experiment} run={run_id} not done {within_secs:g} s after queueing"
    return subject, f"{subject}\nstate: {dag_run.get('state', '-')}\n{run_link(dag_id, run_id)}"


def rollback_alert(
    context: Context, experiment: str, log_path: str, record_path: str, record: str
) -> tuple[str, str]:
    """Subject and body of a corrupt checkpoint set aside by a training's job (one alert each):
    ``record`` is its line in ckpt_check's record ``record_path``; ``log_path`` the log of the job
    that made it, as far as the task knows ("" when it does not)."""
    dag_id, run_id = _run_of(context)
    where = _task_where(context)
    found = ROLLBACK_RECORD.match(record)
    checkpoint = found.group(1) if found else "-"
    subject = f"autoexp ROLLBACK: experiment={experiment} task={where} checkpoint={checkpoint}"
    body = f"{subject}\nlog={log_path or '-'}\n{record_path}: {record}"
    return subject, f"{body}\n{run_link(dag_id, run_id)}"
