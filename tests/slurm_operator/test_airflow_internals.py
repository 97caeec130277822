"""What the plugin relies on in Airflow's private API (airflow_internals): a change fails here first."""

from __future__ import annotations

import inspect

import airflow
import pytest
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


def test_the_version_checks_read_the_installed_airflow() -> None:
    assert str(airflow_internals.AIRFLOW_VERSION) == airflow.__version__.split("rc")[0].split("+")[0]
    # The async XCom client a trigger needs is there exactly from 3.3 on.
    assert airflow_internals.TRIGGER_XCOMS == hasattr(XCom, "aget_one") == hasattr(XCom, "aset")
    assert (airflow_internals.AIRFLOW_VERSION.release[:2] >= (3, 3)) == airflow_internals.TRIGGER_XCOMS


def test_the_exceptions_are_the_ones_the_task_runner_catches() -> None:
    from airflow.sdk.execution_time import task_runner

    source = inspect.getsource(task_runner)
    for name in ("AirflowFailException", "AirflowSkipException", "AirflowSensorTimeout"):
        cls = getattr(airflow_internals, name)
        assert getattr(task_runner, name, cls) is cls  # where the runner imports it, the same class
        assert name in source


@pytest.mark.skipif(not airflow_internals.TRIGGER_XCOMS, reason="Airflow before 3.3: no async XCom client")
def test_the_task_sdk_xcom_client_takes_the_arguments_the_relay_position_passes() -> None:
    where = {"key", "dag_id", "task_id", "run_id", "map_index"}
    assert inspect.iscoroutinefunction(XCom.aget_one)
    assert inspect.iscoroutinefunction(XCom.aset)
    assert where <= set(inspect.signature(XCom.aget_one).parameters)
    assert where | {"value"} <= set(inspect.signature(XCom.aset).parameters)


def test_a_listener_s_task_instance_reaches_its_trigger_row_through_the_orm() -> None:
    """What ``deferred_trigger`` reads: the API server hands listeners its ORM row, whose ``trigger``
    relationship holds the class path and the decrypted kwargs."""
    from types import SimpleNamespace

    from airflow.models.taskinstance import TaskInstance
    from airflow.models.trigger import Trigger

    assert TaskInstance.trigger.property.mapper.class_ is Trigger
    assert {"trigger_id", "state"} <= set(TaskInstance.__table__.columns.keys())
    assert isinstance(Trigger.kwargs, property)
    assert "classpath" in Trigger.__table__.columns
    row = SimpleNamespace(
        classpath="slurm_operator.triggers.slurm_job.SlurmJobTrigger", kwargs={"job_id": "7"}
    )
    found = airflow_internals.deferred_trigger(SimpleNamespace(trigger_id=3, trigger=row))
    assert found == ("slurm_operator.triggers.slurm_job.SlurmJobTrigger", {"job_id": "7"})
    assert airflow_internals.deferred_trigger(SimpleNamespace(trigger_id=None, trigger=row)) is None
    assert airflow_internals.deferred_trigger(SimpleNamespace(map_index=-1)) is None  # the task SDK's


def test_the_api_server_tells_listeners_of_a_state_it_sets() -> None:
    """``slurm_operator.listener`` relies on the API server's own listener calls for a PATCH."""
    from airflow.api_fastapi.core_api.services.public import task_instances

    source = inspect.getsource(task_instances)  # 3.3 calls them in a helper of its own
    assert "on_task_instance_failed" in source
    assert "on_task_instance_success" in source
