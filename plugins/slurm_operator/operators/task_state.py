"""Where a SlurmOperator task instance records its attempt history so that a later try can find its job."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from airflow.sdk import Context

from slurm_operator.model.ledger import Ledger

STATE_KEY = "slurm_operator"  # task_state_store key; renaming it breaks re-attach of in-flight tasks
XCOM_JOB_ID = "slurm_job_id"


def recorded_attempt(context: Context) -> tuple[str, str | None] | None:
    """The job id and log of the current attempt as recorded at submission (state store, else the
    XCom job id alone)."""
    stored = state_get(context)
    if isinstance(stored, dict) and stored.get("attempts"):
        last = Ledger.from_dict(stored).current
        return last.job_id, last.log_path or None
    ti = context["ti"]
    value = ti.xcom_pull(task_ids=ti.task_id, key=XCOM_JOB_ID, map_indexes=ti.map_index)
    return None if value is None else (str(value), None)


def state_get(context: Context) -> Any:
    """The ledger (as JSON) a previous try stored, or None."""
    store = context.get("task_state_store")
    if store is None:
        return None
    try:
        return store.get(STATE_KEY)
    except Exception:  # the store is new in 3.3 and absent in some runners (dag.test); XCom still works
        return None


def state_set(context: Context, ledger: Ledger) -> None:
    """Store the ledger for later tries."""
    store = context.get("task_state_store")
    if store is None:
        return
    try:
        store.set(STATE_KEY, ledger.to_dict(), retention=timedelta(days=30))
    except Exception as exc:
        log = context["ti"].log if hasattr(context["ti"], "log") else None
        if log is not None:
            log.warning("task_state_store unavailable, re-attach will rely on the job name: %s", exc)


def try_number(context: Context) -> int | None:
    """The Airflow try running now (None where a runner gives no task instance try)."""
    return getattr(context["ti"], "try_number", None)
