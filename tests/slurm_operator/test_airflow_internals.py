"""What the plugin relies on in Airflow's private API (airflow_internals): a change fails here first."""

from __future__ import annotations

import inspect

from airflow.sdk.execution_time.xcom import XCom
from slurm_operator import airflow_internals
from slurm_operator.airflow_internals import TRIGGER_FAIL_REPR, TriggerFailureReason


def test_a_timed_out_deferral_resumes_into_the_fail_sentinel_with_its_reason() -> None:
    assert TRIGGER_FAIL_REPR == "__fail__"
    assert TriggerFailureReason.TRIGGER_TIMEOUT == "Trigger timeout"
    assert TriggerFailureReason.TRIGGER_FAILURE == "Trigger failure"
    assert airflow_internals.deferral_timed_out("__fail__", {"error": "Trigger timeout"})
    assert not airflow_internals.deferral_timed_out("__fail__", {"error": "Trigger failure"})
    assert not airflow_internals.deferral_timed_out("execute_complete", {"error": "Trigger timeout"})
    assert not airflow_internals.deferral_timed_out("__fail__", None)


def test_the_task_sdk_xcom_client_takes_the_arguments_the_relay_position_passes() -> None:
    where = {"key", "dag_id", "task_id", "run_id", "map_index"}
    assert inspect.iscoroutinefunction(XCom.aget_one)
    assert inspect.iscoroutinefunction(XCom.aset)
    assert where <= set(inspect.signature(XCom.aget_one).parameters)
    assert where | {"value"} <= set(inspect.signature(XCom.aset).parameters)
