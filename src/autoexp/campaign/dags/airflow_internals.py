"""Every private Airflow API the campaign layer relies on, and nowhere else (pinned by its test).

Each entry says why no public API does the job. Airflow upgrades break here first. Public names
that moved between the supported Airflow 3.1 to 3.3 are imported here too, from where each version
has them.
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


class KeyedMappedArgument(MappedArgument):
    """A MappedArgument whose text is its key, not its whole expand input.

    Airflow stores a template field it cannot encode as the value's text (``serialize_template_field``),
    and the default text of a MappedArgument is every instance's values: the five mapped fields of a
    conversion task wrote 5 x 4 KB (the truncation limit) of one list into each serialized DAG, more
    than half of its size. Resolution per instance (``resolve``) is MappedArgument's own.
    """

    def __repr__(self) -> str:
        return f"<mapped {self._key}>"


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


def task_states_request(dag_id: str, run_ids: Sequence[str], task_ids: Sequence[str]) -> Any:
    """The ``GetTaskStates`` message asking the states of ``task_ids`` in the runs ``run_ids``."""
    from airflow.sdk.execution_time.comms import GetTaskStates

    return GetTaskStates(dag_id=dag_id, task_ids=list(task_ids), run_ids=list(run_ids))


def task_states_in(response: object) -> dict[str, dict[str, str | None]] | None:
    """``{run_id: {task_id or task_id_mapindex: state or None}}`` of a ``TaskStatesResult``, else None."""
    from airflow.sdk.execution_time.comms import TaskStatesResult

    if not isinstance(response, TaskStatesResult):
        return None
    return {
        str(run): {str(k): None if v is None else str(v) for k, v in states.items()}
        for run, states in response.task_states.items()
    }


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


# -- the DAG processor's callback-only parses (used by the factory) ---------------------------------
# A task the triggerer ends (a checkpoint wait's TaskSuccessEvent) sends a success callback request;
# the DAG processor parses the whole DAG file for it, only to log "not a failure callback": a task's
# success callbacks are not run there. No parsing context names the DAGs a callback run needs (task
# processes get one); the requests are the ``msg`` of the processor's ``_parse_file`` on the stack.


def callback_dag_ids() -> frozenset[str] | None:
    """In a DAG processor parse that only runs callbacks: the DAG ids those callbacks need (none
    for a task's success). None in any other parse, or for a request naming no DAG (build all)."""
    frame: FrameType | None = sys._getframe(1)
    while frame is not None:
        code = frame.f_code
        if code.co_name == "_parse_file" and code.co_filename.replace("\\", "/").endswith(
            _DAG_PROCESSOR_FILE
        ):
            return _needed(getattr(frame.f_locals.get("msg"), "callback_requests", None) or [])
        frame = frame.f_back
    return None


def _needed(requests: Sequence[Any]) -> frozenset[str] | None:
    if not requests:
        return None  # a parse: every DAG
    ids: set[str] = set()
    for request in requests:
        if type(request).__name__ == "TaskCallbackRequest" and not request.is_failure_callback:
            continue  # skipped by the processor before it looks for the DAG
        dag_id = getattr(getattr(request, "ti", None), "dag_id", None) or getattr(request, "dag_id", None)
        if not isinstance(dag_id, str):
            return None
        ids.add(dag_id)
    return frozenset(ids)


# -- the triggerer's copy of the DAG per started task (used by the checkpoint waits) ----------------
# A trigger that starts its task (``start_from_trigger``) gets a RuntimeTaskInstance built from its
# own deserialized copy of the whole DAG, and its template context, cached in that task instance,
# holds the DAG too: both live as long as the trigger (``TriggerRunner.create_runtime_ti`` and
# ``run_trigger``'s locals). A wait reads its Params and map index once; no public API lets it
# give the copy back.


def release_task(ti: Any) -> None:
    """Drop the DAG copy a started trigger's task instance holds (its task and template context)."""
    context = getattr(ti, "_cached_template_context", None)
    if isinstance(context, dict):
        context.clear()  # the same dict the triggerer's run_trigger holds as ``context``
    if getattr(ti, "task", None) is not None:
        ti.task = None
