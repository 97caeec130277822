"""Every private Airflow API autoexp uses, each checked against the installed Airflow (3.1 to 3.3) and
pinned by a test; why each is needed and what differs between versions: docs/airflow-compat.md."""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import airflow
from airflow.sdk.bases.operator import TRIGGER_FAIL_REPR, TriggerFailureReason
from airflow.sdk.execution_time import task_runner  # these three come with the operator module anyway
from airflow.sdk.execution_time.comms import GetTaskStates, TaskStatesResult
from airflow.sdk.execution_time.xcom import XCom
from packaging.version import Version

AIRFLOW_VERSION = Version(Version(airflow.__version__).base_version)  # 3.3.2, not 3.3.2rc1
TRIGGER_XCOMS = Version("3.3") <= AIRFLOW_VERSION  # the task SDK's async XCom client (aget_one, aset)
if TYPE_CHECKING or Version("3.2") <= AIRFLOW_VERSION:  # public from 3.2 on (mypy reads this branch)
    from airflow.sdk import DeadlineAlert, DeadlineReference, SyncCallback, conf  # type: ignore[attr-defined,unused-ignore]
    from airflow.sdk import exceptions as _raised
else:  # 3.1: the core's config and exceptions (the ones its task runner catches), the deadline module
    from airflow import exceptions as _raised
    from airflow.configuration import conf
    from airflow.sdk.definitions.deadline import DeadlineAlert, DeadlineReference, SyncCallback
AirflowFailException = _raised.AirflowFailException
AirflowNotFoundException = _raised.AirflowNotFoundException
AirflowSensorTimeout = _raised.AirflowSensorTimeout
AirflowSkipException = _raised.AirflowSkipException
__all__ = ["TRIGGER_FAIL_REPR", "DeadlineAlert", "DeadlineReference", "SyncCallback", "TriggerFailureReason"]
__all__ += ["conf"]  # imported above; the rest is defined here
log = logging.getLogger(__name__)


@functools.cache  # once per change
def _changed(what: str) -> None:
    log.error("this Airflow changed a private API the campaign relies on: %s", what)


def deferral_timed_out(next_method: str, next_kwargs: dict[str, Any] | None) -> bool:
    """True when ``resume_execution`` was called because the deferral's timeout passed."""
    timed_out = (next_kwargs or {}).get("error") == TriggerFailureReason.TRIGGER_TIMEOUT
    return next_method == TRIGGER_FAIL_REPR and timed_out


async def xcom_get(*, key: str, dag_id: str, task_id: str, run_id: str, map_index: int) -> Any:
    """One XCom of a task instance, None when absent (3.3+)."""
    return await XCom.aget_one(key=key, dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index)


async def xcom_set(value: Any, *, key: str, dag_id: str, task_id: str, run_id: str, map_index: int) -> None:
    """Returns once the execution API has committed the row (3.3+)."""
    await XCom.aset(key=key, value=value, dag_id=dag_id, task_id=task_id, run_id=run_id, map_index=map_index)


def supervisor_comms() -> Any:
    """The triggerer runner's channel to its parent (its coroutine ``asend``), None outside a triggerer."""
    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    if "SUPERVISOR_COMMS" not in getattr(task_runner, "__annotations__", {}) or (
        type(comms).__name__ == "TriggerCommsDecoder" and not hasattr(comms, "asend")
    ):
        _changed("no task_runner.SUPERVISOR_COMMS with asend: task states are unknown in triggers")
    return comms if callable(getattr(comms, "asend", None)) else None


def in_triggerer() -> bool:
    """True inside a triggerer (False in ``dag.test()``'s inline trigger run, or outside Airflow)."""
    return supervisor_comms() is not None


def task_states_request(dag_id: str, run_ids: Sequence[str], task_ids: Sequence[str]) -> Any:
    return GetTaskStates(dag_id=dag_id, task_ids=list(task_ids), run_ids=list(run_ids))


def task_states_in(response: object) -> dict[str, dict[str, str | None]] | None:
    """``{run_id: {task_id or task_id_mapindex: state or None}}`` of a ``TaskStatesResult``, else None."""
    if not isinstance(response, TaskStatesResult):
        return None
    by_run = response.task_states.items()
    return {str(run): {str(k): v if v is None else str(v) for k, v in s.items()} for run, s in by_run}


def deferred_trigger(ti: Any) -> tuple[str, dict[str, Any]] | None:
    """(class path, kwargs) of the trigger row a listener's ORM task instance still points at, else None."""
    if getattr(ti, "trigger_id", None) is None:  # the task SDK's instance, or not deferred any more
        return None
    if not hasattr(ti, "trigger"):
        _changed("a task instance without its trigger relationship: the listener cancels no job")
    row = getattr(ti, "trigger", None)  # lazy-loaded through the session that set the state
    return None if row is None else (str(row.classpath), dict(row.kwargs))


def release_task(ti: Any) -> None:
    """Drop the DAG copy a started trigger's task instance holds (its task, its cached template context)."""
    if getattr(ti, "task", None) is None:  # before 3.3: the workload's task instance, no copy
        return
    context = ti.get_template_context()
    if context is ti.get_template_context():  # cached: the very dict the triggerer holds
        context.clear()
    else:
        _changed("the template context is not cached: a started wait keeps its DAG copy")
    ti.task = None


def pool_model() -> Any:
    """The ORM ``Pool`` (``get_pool``, ``create_or_update_pool``): no public Python API manages pools."""
    from airflow.models.pool import Pool  # the metadata database's models: the CLI's, not a worker's

    return Pool


def api_login() -> tuple[Any, str]:
    """The API server's login dependency and the UI's token cookie, for a plugin app (none by default)."""
    from airflow.api_fastapi.auth.managers.base_auth_manager import COOKIE_NAME_JWT_TOKEN
    from airflow.api_fastapi.core_api.security import get_user

    return get_user, COOKIE_NAME_JWT_TOKEN
