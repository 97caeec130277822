"""Where a SlurmOperator task instance records its attempt history so that a later try can find its job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import Context

from slurm_operator.model.ledger import Ledger

STATE_KEY = "slurm_operator"  # task_state_store key; renaming it breaks re-attach of in-flight tasks
XCOM_JOB_ID = "slurm_job_id"
XCOM_JOB_LOG = "slurm_job_log"  # only where no state store keeps the ledger (before Airflow 3.3, dag.test())


def recorded_attempt(context: Context) -> tuple[str, str | None] | None:
    """The job id and log of the current attempt as recorded at submission (state store, else the
    XCom job id alone)."""
    stored = state_get(context)
    if isinstance(stored, dict) and stored.get("attempts"):
        last = Ledger.from_dict(stored).current
        return last.job_id, last.log_path or None
    ti = context["ti"]
    value = ti.xcom_pull(task_ids=ti.task_id, key=XCOM_JOB_ID, map_indexes=ti.map_index)
    if value is None:
        return None
    log_path = ti.xcom_pull(task_ids=ti.task_id, key=XCOM_JOB_LOG, map_indexes=ti.map_index)
    return str(value), str(log_path) if log_path else None


def record(context: Context, ledger: Ledger) -> None:
    """The current job as XCom ``slurm_job_id`` and the ledger in the state store; where no store keeps
    it, the job's log path as XCom ``slurm_job_log`` too, so that a deferral that times out still
    knows where to leave its cancel marker (the same try: XComs do not outlive it)."""
    ti, current = context["ti"], ledger.current
    ti.xcom_push(key=XCOM_JOB_ID, value=current.job_id)
    if not state_set(context, ledger) and current.log_path:
        ti.xcom_push(key=XCOM_JOB_LOG, value=current.log_path)


def state_get(context: Context) -> Any:
    """The ledger (as JSON) a previous try stored, or None."""
    store = context.get("task_state_store")
    if store is None:
        return None
    try:
        return store.get(STATE_KEY)
    except Exception:  # the store is new in 3.3 and absent in some runners (dag.test); XCom still works
        return None


def state_set(context: Context, ledger: Ledger) -> bool:
    """Store the ledger for later tries; False where this runner has no store to keep it."""
    store = context.get("task_state_store")
    if store is None:
        return False
    try:
        store.set(STATE_KEY, ledger.to_dict(), retention=timedelta(days=30))
    except Exception as exc:
        log = context["ti"].log if hasattr(context["ti"], "log") else None
        if log is not None:
            log.warning("task_state_store unavailable, re-attach will rely on the job name: %s", exc)
        return False
    return True


def try_number(context: Context) -> int | None:
    """The Airflow try running now (None where a runner gives no task instance try)."""
    return getattr(context["ti"], "try_number", None)
