"""Every private Airflow API the campaign layer uses, and the public names that moved between Airflow 3.1
and 3.3 (imported from where each version has them). Each private use says why no public API does it
and checks that the installed Airflow still has it: a change is logged once as an error, never silent."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

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
