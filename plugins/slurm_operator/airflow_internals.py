"""The private Airflow API the Slurm plugin relies on, in one place (pinned by its test).

Airflow 3.3.2 has no public API for either need:

- a deferral that timed out resumes into ``resume_execution`` with the sentinel method name
  ``TRIGGER_FAIL_REPR`` and a ``TriggerFailureReason`` in its kwargs; telling a timeout from a
  trigger failure (the job is cancelled on the first only) means comparing with both;
- a trigger cannot tell a triggerer from ``dag.test()``'s inline run, where an event that ends the
  task reaches the resume method as a bare state string; only a triggerer's channel to its parent
  (``task_runner.SUPERVISOR_COMMS``) has the coroutine ``asend``;
- a running trigger cannot update its own kwargs, and its supervisor does not serve the
  ``task_state_store``; it does serve the task instance's XComs through the task SDK's ``XCom``
  client (``relay_position`` keeps the log relay position there);
- a listener told of a task instance's new state (``on_task_instance_failed``/``_success``) gets
  the API server's ORM row, whose trigger (class path and decrypted kwargs) is reachable only
  through the ORM relationship ``TaskInstance.trigger``.

Supported: Airflow 3.1 to 3.3. What differs between them is decided here, from the installed version:

- the task SDK's async XCom client (``XCom.aget_one``/``aset``) exists from 3.3 on: before, a
  trigger keeps its log relay position in memory only (``TRIGGER_XCOMS``; a restarted triggerer
  then relays a job's log again from the deferral's offset);
- the exceptions a task raises moved to ``airflow.sdk.exceptions`` in 3.2 (3.1 has them in
  ``airflow.exceptions``, which 3.2+ keeps as deprecated aliases of the same classes).
"""

from __future__ import annotations

from typing import Any

import airflow
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
from packaging.version import Version

try:  # Airflow 3.2+
    from airflow.sdk.exceptions import (
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowSkipException,
    )
except ImportError:  # Airflow 3.1: the classes its task runner catches
    from airflow.exceptions import (  # type: ignore[attr-defined,assignment,no-redef,unused-ignore]
        AirflowFailException,
        AirflowNotFoundException,
        AirflowSensorTimeout,
        AirflowSkipException,
    )

__all__ = [
    "AIRFLOW_VERSION",
    "TRIGGER_FAIL_REPR",
    "TRIGGER_XCOMS",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "TriggerFailureReason",
    "deferral_timed_out",
    "deferred_trigger",
    "in_triggerer",
    "xcom_get",
    "xcom_set",
]


# The installed Airflow's release (3.3.2, not 3.3.2rc1 or a local build suffix).
AIRFLOW_VERSION = Version(Version(airflow.__version__).base_version)
# Whether a trigger can read and write its task instance's XComs (the async client is 3.3+).
TRIGGER_XCOMS = Version("3.3") <= AIRFLOW_VERSION


def deferral_timed_out(next_method: str, next_kwargs: dict[str, Any] | None) -> bool:
    """True when ``resume_execution`` was called because the deferral's timeout passed."""
    timed_out = (next_kwargs or {}).get("error") == TriggerFailureReason.TRIGGER_TIMEOUT
    return next_method == TRIGGER_FAIL_REPR and timed_out


async def xcom_get(*, key: str, dag_id: str, task_id: str, run_id: str, map_index: int) -> Any:
    """One XCom of a task instance, read through the triggerer's supervisor (None when absent).

    Airflow 3.3+ only (``TRIGGER_XCOMS``); callers check it first.
    """
    # Imported here: the module is the task SDK's client, which only a running task or trigger has.
    from airflow.sdk.execution_time.xcom import XCom

    return await XCom.aget_one(key=key, dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index)


async def xcom_set(value: Any, *, key: str, dag_id: str, task_id: str, run_id: str, map_index: int) -> None:
    """Write one XCom of a task instance; returns once the execution API has committed the row."""
    from airflow.sdk.execution_time.xcom import XCom

    await XCom.aset(key=key, value=value, dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index)


def in_triggerer() -> bool:
    """True inside a triggerer (False in ``dag.test()``'s inline trigger run, or outside Airflow)."""
    from airflow.sdk.execution_time import task_runner

    return callable(getattr(getattr(task_runner, "SUPERVISOR_COMMS", None), "asend", None))


def deferred_trigger(ti: Any) -> tuple[str, dict[str, Any]] | None:
    """(class path, kwargs) of the trigger a listener's task instance still points at, else None.

    None for the task SDK's runtime instance (a task's own process has no trigger row) and for a
    task instance that is not deferred any more.
    """
    if getattr(ti, "trigger_id", None) is None:
        return None
    row = getattr(ti, "trigger", None)  # lazy-loaded through the session that set the state
    if row is None:
        return None
    return str(row.classpath), dict(row.kwargs)
