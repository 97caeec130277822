"""Pins the private Airflow API the campaign layer relies on: an Airflow upgrade that moves it fails here."""

from __future__ import annotations

import inspect
from datetime import timezone
from typing import Any

import pytest
from packaging.version import Version

from autoexp.campaign.dags import airflow_internals
from tests.airflow_versions import AIRFLOW_VERSION

# -- the triggerer's comms (used by ti_states) ----------------------------------------------------


def test_the_triggerer_s_channel_has_an_async_send() -> None:
    from airflow.jobs.triggerer_job_runner import TriggerCommsDecoder

    assert inspect.iscoroutinefunction(TriggerCommsDecoder.asend)


def test_the_channel_is_read_from_task_runner_and_absent_outside_a_triggerer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from airflow.sdk.execution_time import task_runner

    assert airflow_internals.supervisor_comms() is None

    class Comms:
        async def asend(self, msg: Any) -> Any: ...

    comms = Comms()
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms, raising=False)
    assert airflow_internals.supervisor_comms() is comms
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", object())  # a sync-only channel: unusable
    assert airflow_internals.supervisor_comms() is None


def test_the_task_states_request_and_its_answer_round_trip() -> None:
    from airflow.sdk.execution_time.comms import GetTaskStates, TaskStatesResult

    request = airflow_internals.task_states_request("d", ["r1", "r2"], ("a", "b"))
    assert GetTaskStates.model_validate_json(request.model_dump_json()) == request
    assert (request.dag_id, request.task_ids, request.run_ids) == ("d", ["a", "b"], ["r1", "r2"])
    answer = TaskStatesResult(task_states={"r1": {"a": "running", "b_3": None}, "r2": {"a": "failed"}})
    answer = TaskStatesResult.model_validate_json(answer.model_dump_json())
    assert airflow_internals.task_states_in(answer) == {
        "r1": {"a": "running", "b_3": None},
        "r2": {"a": "failed"},
    }
    assert airflow_internals.task_states_in({"task_states": {}}) is None


# -- the DAG processor's callbacks (used by alerts) -------------------------------------------------


def test_the_dag_processor_serves_neither_the_task_state_store_nor_xcom_pushes() -> None:
    """Why alerts must not touch them there: such a request would wait forever (the parse times out)."""
    import typing

    from airflow.dag_processing import processor

    union = typing.get_args(processor.ToManager)[0]
    served = {getattr(t, "__name__", "") for t in typing.get_args(union)}
    assert {"GetTaskStates", "GetXCom"} <= served
    assert not {"GetTaskStateStore", "SetXCom"} & served
    assert callable(processor._execute_task_callbacks)  # where task callbacks run
    assert "callback(context)" in inspect.getsource(processor._execute_task_callbacks)


def test_a_callback_run_by_the_dag_processor_is_told_apart() -> None:
    assert airflow_internals.in_dag_processor_callback() is False
    code = compile(
        "def _execute_task_callbacks(probe):\n    return probe()\n",
        "/venv/lib/python3.11/site-packages/airflow/dag_processing/processor.py",
        "exec",
    )
    namespace: dict[str, Any] = {}
    exec(code, namespace)
    assert namespace["_execute_task_callbacks"](airflow_internals.in_dag_processor_callback) is True


# -- the DAG processor's callback-only parses (used by the factory) ---------------------------------


def test_the_processor_parses_for_callbacks_with_the_requests_in_its_msg() -> None:
    from airflow.callbacks.callback_requests import TaskCallbackRequest
    from airflow.dag_processing import processor

    assert "msg" in inspect.signature(processor._parse_file).parameters
    assert "callback_requests" in processor.DagFileParseRequest.model_fields
    # A task's success callback is dropped before its DAG is looked up: no DAG is needed for it.
    source = inspect.getsource(processor._execute_task_callbacks)
    assert source.index("is_failure_callback") < source.index("_get_dag_with_task")
    assert TaskCallbackRequest.__name__ == "TaskCallbackRequest"


class TaskCallbackRequest:  # the processor's, as far as callback_dag_ids reads it
    def __init__(self, dag_id: str, failure: bool) -> None:
        self.ti = type("TI", (), {"dag_id": dag_id})()
        self.is_failure_callback = failure


class DagCallbackRequest:
    def __init__(self, dag_id: str) -> None:
        self.dag_id = dag_id


def _in_processor_parse(requests: list[Any], probe: Any) -> Any:
    """Run ``probe`` as if called from the DAG processor's ``_parse_file`` handling these requests."""
    code = compile(
        "def _parse_file(msg, log):\n    return probe()\n",
        "/venv/lib/python3.11/site-packages/airflow/dag_processing/processor.py",
        "exec",
    )
    namespace: dict[str, Any] = {"probe": probe}
    exec(code, namespace)
    msg = type("Msg", (), {"callback_requests": requests})()
    return namespace["_parse_file"](msg, None)


def test_a_callback_only_parse_names_the_dags_its_callbacks_need() -> None:
    from autoexp.campaign.dags.factory import build_dags
    from tests.support.checkout import REPO_ROOT

    ids = airflow_internals.callback_dag_ids
    assert ids() is None  # not in a DAG processor: every DAG
    assert _in_processor_parse([], ids) is None  # a parse: every DAG
    successes = [TaskCallbackRequest("a", False), TaskCallbackRequest("b", False)]
    assert _in_processor_parse(successes, ids) == frozenset()
    mixed = [*successes, TaskCallbackRequest("c", True), DagCallbackRequest("d")]
    assert _in_processor_parse(mixed, ids) == {"c", "d"}
    assert _in_processor_parse([object()], ids) is None  # names no DAG: build them all
    # The factory builds only those: none for the waits' successes, the failing experiment's DAG.
    demo = REPO_ROOT / "config" / "demo.yaml"
    assert _in_processor_parse(successes, lambda: build_dags(demo)) == []
    failing = [TaskCallbackRequest("demo_demo_small_lr0.01_bs4", True)]
    built = _in_processor_parse(failing, lambda: build_dags(demo))
    assert [d.dag_id for d in built] == ["demo_demo_small_lr0.01_bs4"]


# -- the triggerer's copy of the DAG per started task (used by the checkpoint waits) ----------------


def test_release_task_leaves_a_task_instance_without_a_dag_copy_alone() -> None:
    """Before Airflow 3.3 a started trigger's task instance is the workload's: no task, no context."""
    from types import SimpleNamespace

    ti = SimpleNamespace(dag_id="d", run_id="r1", map_index=-1)
    airflow_internals.release_task(ti)
    assert vars(ti) == {"dag_id": "d", "run_id": "r1", "map_index": -1}


@pytest.mark.skipif(
    Version("3.3") > AIRFLOW_VERSION,
    reason="the triggerer builds a runtime task instance from Airflow 3.3 on",
)
def test_a_started_trigger_s_dag_copy_is_released_with_its_context() -> None:
    """Built as the triggerer builds it (``create_runtime_ti`` from the serialized DAG), the task
    instance holds the DAG through its task and its cached template context; after release_task
    nothing does, and the context the triggerer kept (the same dict) is empty."""
    import gc
    import uuid
    import weakref
    from datetime import datetime

    from airflow.executors.workloads.task import TaskInstanceDTO
    from airflow.jobs.triggerer_job_runner import TriggerRunner
    from airflow.providers.standard.operators.empty import EmptyOperator
    from airflow.sdk import DAG

    from tests.airflow_versions import DagSerialization

    with DAG("internals_release", schedule=None, start_date=datetime(2026, 1, 1)) as dag:
        EmptyOperator(task_id="wait")
    ti = TaskInstanceDTO(
        id=uuid.uuid4(),
        task_id="wait",
        dag_id=dag.dag_id,
        run_id="r1",
        try_number=1,
        dag_version_id=uuid.uuid4(),
        pool_slots=1,
        priority_weight=1,
    )
    now = datetime(2026, 12, 2, tzinfo=timezone.utc)
    run = {"dag_id": dag.dag_id, "run_id": "r1", "logical_date": None, "data_interval_start": None,
           "data_interval_end": None, "run_after": now, "start_date": now, "end_date": None,
           "run_type": "manual", "state": "running", "consumed_asset_events": [],
           "partition_key": None}  # fmt: skip
    runtime = TriggerRunner.create_runtime_ti(ti, DagSerialization.to_dict(dag), run)
    context = runtime.get_template_context()  # what run_trigger holds for the trigger's life
    copy = weakref.ref(runtime.task.dag)
    assert context["dag"] is copy()
    airflow_internals.release_task(runtime)
    gc.collect()
    assert copy() is None
    assert context == {}
    assert runtime.task is None
    assert (runtime.dag_id, runtime.run_id, runtime.map_index) == (dag.dag_id, "r1", -1)
