"""Every private Airflow API autoexp relies on, the Slurm plugin's and the campaign layer's, in one
place (pinned by tests/slurm_operator/test_airflow_internals.py and
tests/autoexp/campaign/dags/test_airflow_internals.py). It lives in the plugin, the lowest layer that
imports Airflow, so the plugin still stands alone.

Airflow 3.3.2 has no public API for these needs:

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
  ``airflow.exceptions``, which 3.2+ keeps as deprecated aliases of the same classes);
- ``conf`` and ``SyncCallback`` became ``airflow.sdk`` names in 3.2.

Each private use below the plugin's own says why no public API does it and checks that the installed
Airflow still has it: a change is logged once as an error, never silent.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
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

# -- moved public names ------------------------------------------------------------------------------
# The configuration a task or a notifier reads: ``airflow.sdk.conf`` from 3.2, the core's before.
try:
    from airflow.sdk import conf as conf
except ImportError:  # Airflow 3.1
    from airflow.configuration import conf as conf  # type: ignore[assignment,no-redef,unused-ignore]
# The deadline callback: a module of its own (and an ``airflow.sdk`` export) from 3.2 on.
try:
    from airflow.sdk.definitions.callback import SyncCallback as SyncCallback
except ImportError:  # Airflow 3.1
    from airflow.sdk.definitions.deadline import (  # type: ignore[attr-defined,no-redef,unused-ignore]
        SyncCallback as SyncCallback,
    )

__all__ = [
    "AIRFLOW_VERSION",
    "TRIGGER_FAIL_REPR",
    "TRIGGER_XCOMS",
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "SyncCallback",
    "TriggerFailureReason",
    "conf",
    "deferral_timed_out",
    "deferred_trigger",
    "in_triggerer",
    "release_task",
    "supervisor_comms",
    "task_states_in",
    "task_states_request",
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
    return supervisor_comms() is not None


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


log = logging.getLogger(__name__)


@functools.cache  # once per change
def _changed(what: str) -> None:
    log.error("this Airflow changed a private API the campaign relies on: %s", what)


# -- the triggerer's comms (used by ti_states): the public ``RuntimeTaskInstance.get_task_states`` is
# synchronous and unbounded, no public API lets a trigger ask states under its own limit (ti_states).
def supervisor_comms() -> Any:
    """The triggerer runner's channel to its parent (``task_runner.SUPERVISOR_COMMS``, whose coroutine
    ``asend`` its thread-safe ``send`` wraps); None outside a triggerer (tests, ``dag.test()``)."""
    from airflow.sdk.execution_time import task_runner

    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    if "SUPERVISOR_COMMS" not in getattr(task_runner, "__annotations__", {}) or (
        type(comms).__name__ == "TriggerCommsDecoder" and not hasattr(comms, "asend")
    ):
        _changed("no task_runner.SUPERVISOR_COMMS with asend: task states are unknown in triggers")
    return comms if callable(getattr(comms, "asend", None)) else None


def task_states_request(dag_id: str, run_ids: Sequence[str], task_ids: Sequence[str]) -> Any:
    """The ``GetTaskStates`` message asking the states of ``task_ids`` in the runs ``run_ids``."""
    from airflow.sdk.execution_time.comms import GetTaskStates

    return GetTaskStates(dag_id=dag_id, task_ids=list(task_ids), run_ids=list(run_ids))


def task_states_in(response: object) -> dict[str, dict[str, str | None]] | None:
    """``{run_id: {task_id or task_id_mapindex: state or None}}`` of a ``TaskStatesResult``, else None."""
    from airflow.sdk.execution_time.comms import TaskStatesResult

    if not isinstance(response, TaskStatesResult):
        return None
    by_run = response.task_states.items()
    return {str(run): {str(k): v if v is None else str(v) for k, v in s.items()} for run, s in by_run}


# -- the triggerer's DAG copy per started task (used by the checkpoint waits): a trigger that starts its
# task gets a task instance built from its own copy of the whole DAG, held with the template context the
# triggerer caches in it for the trigger's life. No public API gives it back: 139 KB per started wait,
# 4 KB released: ~310 MB against ~9 MB for the seed's 2,280 waits (bench/bench_trigger_memory.py).
def release_task(ti: Any) -> None:
    """Drop the DAG copy a started trigger's task instance holds (its task and template context).
    Before Airflow 3.3 the triggerer hands the workload's task instance: no copy, nothing to do."""
    if getattr(ti, "task", None) is None:
        return
    context = ti.get_template_context()
    if context is ti.get_template_context():  # cached: the very dict the triggerer holds
        context.clear()
    else:
        _changed("the template context is not cached: a started wait keeps its DAG copy")
    ti.task = None
