"""Pins the private Airflow API the campaign layer relies on: an Airflow upgrade that moves it fails here."""

from __future__ import annotations

import asyncio
import inspect
import re
from datetime import timezone
from typing import Any

import pytest
from packaging.version import Version
from slurm_operator import airflow_internals

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


def test_a_task_runner_without_the_channel_is_reported_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from airflow.sdk.execution_time import task_runner

    airflow_internals._changed.cache_clear()
    monkeypatch.setattr(task_runner, "__annotations__", {})
    with caplog.at_level("ERROR", logger=airflow_internals.__name__):
        assert airflow_internals.supervisor_comms() is None
        assert airflow_internals.supervisor_comms() is None
    assert [r.getMessage() for r in caplog.records] == [
        "this Airflow changed a private API the campaign relies on: "
        "no task_runner.SUPERVISOR_COMMS with asend: task states are unknown in triggers"
    ]
    airflow_internals._changed.cache_clear()


def test_the_task_states_request_and_its_answer_round_trip() -> None:
    from airflow.sdk.execution_time.comms import GetTaskStates, TaskStatesResult

    class Comms:
        def __init__(self, answer: Any) -> None:
            self.answer = answer
            self.asked: list[Any] = []

        async def asend(self, msg: Any) -> Any:
            self.asked.append(
                GetTaskStates.model_validate_json(msg.model_dump_json())
            )  # as it crosses the pipe
            return self.answer

    answer = TaskStatesResult(task_states={"r1": {"a": "running", "b_3": None}, "r2": {"a": "failed"}})
    comms = Comms(TaskStatesResult.model_validate_json(answer.model_dump_json()))
    got = asyncio.run(airflow_internals.task_states(comms, "d", ["r1", "r2"], ("a", "b")))
    assert got == {"r1": {"a": "running", "b_3": None}, "r2": {"a": "failed"}}
    (request,) = comms.asked
    assert (request.dag_id, request.task_ids, request.run_ids) == ("d", ["a", "b"], ["r1", "r2"])
    assert asyncio.run(airflow_internals.task_states(Comms({"task_states": {}}), "d", ["r"], ["a"])) is None


# -- the DAG processor's callbacks (alerts: public signals, pinned here as the reason they suffice) ----


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


def test_only_the_process_of_the_try_puts_its_error_in_a_callback_s_context() -> None:
    """What ``messages.tried_here`` tells apart: the task runner (and ``dag.test()``) set
    ``context["exception"]`` before the callbacks; the DAG processor's task and DAG callbacks do not."""
    from airflow.dag_processing import processor
    from airflow.sdk.execution_time import supervisor, task_runner

    in_process = [supervisor.InProcessTestSupervisor.start] if Version("3.3") <= AIRFLOW_VERSION else []
    for where in [task_runner.main, *in_process]:  # dag.test() sets it from 3.3 on
        source = inspect.getsource(where)
        assert 'context["exception"] = error' in source
        assert source.index('context["exception"] = error') < source.index("finalize(")
    for callbacks in (processor._execute_task_callbacks, processor._execute_dag_callbacks):
        source = inspect.getsource(callbacks)
        assert "callback(context)" in source
        assert not re.search(r"""["']exception["']""", source)  # no such key in its contexts


def test_a_failure_from_outside_issues_no_request_the_dag_processor_cannot_serve() -> None:
    from types import SimpleNamespace

    from autoexp.campaign.alerts.messages import failure_of, record_failure

    class TI(SimpleNamespace):
        def xcom_push(self, **_: Any) -> None:
            raise AssertionError("an XCom push would hang the DAG processor")

        def xcom_pull(self, **_: Any) -> str:  # served there
            return "4242"

    class Store:
        def get(self, key: str) -> Any:
            raise AssertionError("the task state store would hang the DAG processor")

    ti = TI(task_id="t", map_index=-1, try_number=1)
    context: Any = {"ti": ti, "task_state_store": Store()}  # as the DAG processor builds it
    record_failure(context)
    assert failure_of(context).job_id == "4242"


# -- the triggerer's copy of the DAG per started task (used by the checkpoint waits) ----------------


def test_release_task_leaves_a_task_instance_without_a_dag_copy_alone() -> None:
    """Before Airflow 3.3 a started trigger's task instance is the workload's: no task, no context."""
    from types import SimpleNamespace

    ti = SimpleNamespace(dag_id="d", run_id="r1", map_index=-1)
    airflow_internals.release_task(ti)
    assert vars(ti) == {"dag_id": "d", "run_id": "r1", "map_index": -1}


def test_a_template_context_no_longer_cached_is_reported_and_the_task_still_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Uncached:
        task = object()

        def get_template_context(self) -> dict[str, Any]:
            return {"dag": self.task}

    airflow_internals._changed.cache_clear()
    with caplog.at_level("ERROR", logger=airflow_internals.__name__):
        for ti in (Uncached(), Uncached()):
            airflow_internals.release_task(ti)
            assert ti.task is None
    assert [r.getMessage() for r in caplog.records] == [
        "this Airflow changed a private API the campaign relies on: "
        "the template context is not cached: a started wait keeps its DAG copy"
    ]
    airflow_internals._changed.cache_clear()


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
