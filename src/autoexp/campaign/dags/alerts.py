"""What an alert says: the root cause of a failed run (first failed task, its Slurm job), retries, success."""

from __future__ import annotations

import logging
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from airflow.sdk import BaseNotifier, Context, conf
from slurm_operator.records import Attempt, Ledger
from slurm_operator.task_state import XCOM_JOB_ID, state_get

from autoexp.campaign.dags.airflow_internals import in_dag_processor_callback

log = logging.getLogger(__name__)
FAILURE_KEY = "autoexp_failure"  # XCom a failed task leaves for its run's one alert
_MAX_TAIL = 4000


@dataclass(frozen=True)
class Failure:
    """One task instance's final failure: when, its error, and its Slurm job's last attempt.

    :param at: when the failure was recorded (ISO, UTC): the earliest one is the run's root cause.
    :param error: the task's error; the Slurm operators' errors end with the log's last lines.
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
        return f"task={self.where()} try={self.try_number} {slurm}\n{self.error}"


def failure_of(context: Context) -> Failure:
    """The failure of the task instance in ``context``, with its recorded Slurm attempt, if any."""
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    failure = Failure(
        task=ti.task_id,
        map_index=-1 if map_index is None else map_index,
        try_number=ti.try_number,
        at=datetime.now(UTC).isoformat(),
        error=str(context.get("exception") or "")[-_MAX_TAIL:],
    )
    # The DAG processor's channel serves no task state store: asking would hang (airflow_internals).
    stored = None if in_dag_processor_callback() else state_get(context)
    if isinstance(stored, dict) and stored.get("attempts"):
        last = Ledger.from_dict(stored).current
        return _with_job(failure, last.job_id, last.shown_state, last.exit_code, last.log_path)
    try:  # no stored history (a runner without the state store): the job id the operator pushed
        job_id = ti.xcom_pull(task_ids=ti.task_id, key=XCOM_JOB_ID, map_indexes=ti.map_index)
    except Exception as exc:  # an alert must go out even when XCom is unreachable
        log.warning("could not read the Slurm job id of %s: %s", ti.task_id, exc)
        job_id = None
    return _with_job(failure, None if job_id is None else str(job_id), None, None, None)


def _with_job(
    failure: Failure, job_id: str | None, state: str | None, exit_code: int | None, log_path: str | None
) -> Failure:
    return replace(failure, job_id=job_id, state=state, exit_code=exit_code, log_path=log_path)


def record_failure(context: Context) -> None:
    """Task ``on_failure_callback``: leave the failure for the run's alert; sends nothing itself.

    Every task of a failed training fails (the train task, then each checkpoint wait): one alert per
    task would be dozens for one cause, so the DAG's failure callback sends one naming the earliest.
    """
    if in_dag_processor_callback():
        # A task failed from outside (marked failed, killed): the DAG processor serves no XCom push
        # (asking would hang its parse, see airflow_internals); the run's alert names it by its state.
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
    """The failure recorded first in this DAG run; without records, the task Airflow reported last
    (None: the run failed without a failed task)."""
    ti = context.get("ti")
    if ti is None:  # a run failed without a failed task (e.g. dagrun_timeout)
        return None
    dag_id, run_id = ti.dag_id, ti.run_id
    try:
        states = ti.get_task_states(dag_id=dag_id, run_ids=[run_id]).get(run_id, {})
        dag = context["dag"]
        failed = sorted(
            {
                key if key in dag.task_dict else key.rsplit("_", 1)[0]
                for key, s in states.items()
                if s == "failed"
            }
        )
        pulled = (
            ti.xcom_pull(task_ids=failed, key=FAILURE_KEY, dag_id=dag_id, run_id=run_id) if failed else []
        )
    except Exception as exc:  # the alert still goes out, naming the task Airflow reported last
        log.warning("could not read the failures of %s/%s: %s", dag_id, run_id, exc)
        pulled = []
    records = [Failure.from_dict(v) for v in _flatten(pulled) if isinstance(v, dict)]
    if records:
        return min(records, key=lambda f: f.at)
    return failure_of(context)


def _flatten(values: Any) -> list[Any]:
    """xcom_pull of several tasks gives a value per unmapped task and a list per mapped one."""
    if not isinstance(values, list):
        return [values]
    return [item for value in values for item in _flatten(value)]


def run_link(dag_id: str, run_id: str) -> str:
    """The run's page in the Airflow UI (``[api] base_url``)."""
    base = conf.get("api", "base_url", fallback="http://localhost:8080/").rstrip("/")
    return f"{base}/dags/{quote(dag_id)}/runs/{quote(run_id)}"


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
        body = f"{subject}\nroot cause (the task that failed first): {cause.summary()}"
    return subject, f"{body}\n{run_link(dag_id, run_id)}"


def retry_alert(context: Context, experiment: str) -> tuple[str, str]:
    """Subject and body of a task's retry (the retry re-attaches to or resubmits its Slurm job)."""
    failure = failure_of(context)
    dag_id, run_id = _run_of(context)
    subject = (
        f"autoexp RETRY: experiment={experiment} task={failure.where()} slurm_job={failure.job_id or '-'}"
    )
    return subject, f"{subject}\n{failure.summary()}\n{run_link(dag_id, run_id)}"


def resubmit_alert(context: Context, experiment: str, ended: Attempt, reason: str) -> tuple[str, str]:
    """Subject and body of a Slurm resubmission within one try (time limit, node failure...)."""
    dag_id, run_id = _run_of(context)
    ti = context["ti"]
    map_index = getattr(ti, "map_index", -1)
    where = ti.task_id + (f"[{map_index}]" if map_index is not None and map_index >= 0 else "")
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
