"""Every private Airflow API autoexp uses, version-checked and pinned by tests: docs/airflow-compat.md."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from airflow.sdk.execution_time import task_runner  # these three come with the operator module anyway
from airflow.sdk.execution_time.comms import GetTaskStates, TaskStatesResult
from airflow.sdk.execution_time.xcom import XCom
from packaging.version import Version

from slurm_operator.airflow_version import AIRFLOW_VERSION

TRIGGER_XCOMS = Version("3.3") <= AIRFLOW_VERSION  # the task SDK's async XCom client (aget_one, aset)
if TYPE_CHECKING or Version("3.2") <= AIRFLOW_VERSION:  # public from 3.2 on (mypy reads this branch)
    from airflow.sdk import DeadlineAlert, DeadlineReference, SyncCallback  # type: ignore[attr-defined,unused-ignore]
else:
    from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference, SyncCallback
__all__ = ["DeadlineAlert", "DeadlineReference", "SyncCallback"]  # imported; the rest is defined here


@functools.cache  # once per change
def _changed(what: str) -> None:
    logging.getLogger(__name__).error("this Airflow changed a private API the campaign relies on: %s", what)


async def xcom_get(*, key: str, dag_id: str, task_id: str, run_id: str, map_index: int) -> Any:
    return await XCom.aget_one(key=key, dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index)


async def xcom_set(value: Any, *, key: str, dag_id: str, task_id: str, run_id: str, map_index: int) -> None:
    await XCom.aset(key=key, value=value, dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index)


def supervisor_comms() -> Any:
    """The triggerer runner's channel to its parent (its coroutine ``asend``), None outside a triggerer."""
    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    declared = "SUPERVISOR_COMMS" in getattr(task_runner, "__annotations__", {})
    if not declared or (type(comms).__name__ == "TriggerCommsDecoder" and not hasattr(comms, "asend")):
        _changed("no task_runner.SUPERVISOR_COMMS with asend: task states are unknown in triggers")
    return comms if callable(getattr(comms, "asend", None)) else None


async def task_states(comms: Any, dag_id: str, run_ids: Sequence[str], task_ids: Sequence[str]) -> Any:
    """``{run_id: {task_id or task_id_mapindex: state or None}}``, None for an answer of another type."""
    response = await comms.asend(GetTaskStates(dag_id=dag_id, task_ids=list(task_ids), run_ids=list(run_ids)))
    return response.task_states if isinstance(response, TaskStatesResult) else None


def deferred_trigger(ti: Any) -> tuple[str, dict[str, Any]] | None:
    """(class path, kwargs) of the trigger row a listener's ORM task instance still points at, else None."""
    if getattr(ti, "trigger_id", None) is None:  # the task SDK's instance, or not deferred any more
        return None
    if not hasattr(ti, "trigger"):
        _changed("a task instance without its trigger relationship: the listener cancels no job")
    row = getattr(ti, "trigger", None)  # lazy-loaded through the session that set the state
    return None if row is None else (str(row.classpath), dict(row.kwargs))


def release_task(ti: Any) -> None:
    if getattr(ti, "task", None) is None:  # before 3.3: the workload's task instance, no copy
        return
    context = ti.get_template_context()
    if context is not ti.get_template_context():  # not cached: clearing it frees nothing
        _changed("the template context is not cached: a started wait keeps its DAG copy")
    context.clear()  # the very dict the triggerer holds for the trigger's life
    ti.task = None


def api_login() -> tuple[Any, str]:
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.core_api.security import get_user

    return get_user, COOKIE_NAME_JWT_TOKEN
