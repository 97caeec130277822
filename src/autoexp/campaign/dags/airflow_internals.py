"""Every private Airflow API the campaign layer relies on, and nowhere else (pinned by its test).

Each entry says why no public API does the job. Airflow upgrades break here first.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from types import FrameType
from typing import Any

# -- DAG building (used by the factory) -------------------------------------------------------------
# A mapped task group is public only as ``@task_group`` + ``.expand_kwargs()``: the decorator
# inspects the function's signature, binds its arguments and walks the values for XCom references,
# for each of the ~540 groups of config/scaling_exps.yaml. Our values are plain (no XComArg), so the
# factory builds what that decorator builds: the group, its expand input (a list of dicts, one per
# instance) and, per task argument, a reference to one key of it resolved per instance. No public
# name exists for any of the three (``airflow.sdk`` exports only TaskGroup).
from airflow.sdk.definitions._internal.expandinput import ListOfDictsExpandInput as ListOfDictsExpandInput
from airflow.sdk.definitions._internal.expandinput import MappedArgument as MappedArgument
from airflow.sdk.definitions.taskgroup import MappedTaskGroup as MappedTaskGroup

# -- the triggerer's comms (used by ti_states) ----------------------------------------------------
# No public API lets a trigger ask task-instance states asynchronously under its own time limit:
# ``RuntimeTaskInstance.get_task_states`` is synchronous and unbounded (see ti_states). The runner's
# channel to the triggerer's parent and its message types are imported at call time, so that
# importing this module (the DAG files do) loads no execution-time machinery.


def supervisor_comms() -> Any:
    """The triggerer runner's channel to its parent, None outside a triggerer (tests, ``dag.test()``).

    ``task_runner.SUPERVISOR_COMMS``; in a triggerer a ``TriggerCommsDecoder``, whose coroutine
    ``asend`` is what its thread-safe ``send`` wraps.
    """
    from airflow.sdk.execution_time import task_runner

    comms = getattr(task_runner, "SUPERVISOR_COMMS", None)
    return comms if callable(getattr(comms, "asend", None)) else None


def task_states_request(dag_id: str, run_id: str, task_ids: Sequence[str]) -> Any:
    """The ``GetTaskStates`` message asking the states of ``task_ids`` in one run."""
    from airflow.sdk.execution_time.comms import GetTaskStates

    return GetTaskStates(dag_id=dag_id, task_ids=list(task_ids), run_ids=[run_id])


def task_states_in(response: object, run_id: str) -> dict[str, str | None] | None:
    """``{task_id or task_id_mapindex: state or None}`` of a ``TaskStatesResult``, else None."""
    from airflow.sdk.execution_time.comms import TaskStatesResult

    if not isinstance(response, TaskStatesResult):
        return None
    return {str(k): None if v is None else str(v) for k, v in response.task_states.get(run_id, {}).items()}


# -- the DAG processor's callbacks (used by alerts) -------------------------------------------------
# The DAG processor runs the callbacks of a task failed from outside (marked failed, killed) and of a
# DAG run's end. Its channel to its parent serves a few requests only (``processor.ToManager``): no
# task state store, no XCom push. A request of another kind is dropped by the parent and the callback
# waits for an answer forever: the file's parse then times out and its DAGs go stale (their REST
# endpoints answer 404). No public API says where a callback runs; the caller is on the stack.
_DAG_PROCESSOR_FILE = "/airflow/dag_processing/processor.py"


def in_dag_processor_callback() -> bool:
    """Whether this code runs inside a callback the DAG processor executes."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.replace("\\", "/").endswith(_DAG_PROCESSOR_FILE):
            return True
        frame = frame.f_back
    return False
