"""Pins the private Airflow API the campaign layer relies on: an Airflow upgrade that moves it fails here."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from autoexp.campaign.dags import airflow_internals

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

    request = airflow_internals.task_states_request("d", "r1", ("a", "b"))
    assert GetTaskStates.model_validate_json(request.model_dump_json()) == request
    assert (request.dag_id, request.task_ids, request.run_ids) == ("d", ["a", "b"], ["r1"])
    answer = TaskStatesResult(task_states={"r1": {"a": "running", "b_3": None}})
    answer = TaskStatesResult.model_validate_json(answer.model_dump_json())
    assert airflow_internals.task_states_in(answer, "r1") == {"a": "running", "b_3": None}
    assert airflow_internals.task_states_in(answer, "other run") == {}
    assert airflow_internals.task_states_in({"task_states": {}}, "r1") is None


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
