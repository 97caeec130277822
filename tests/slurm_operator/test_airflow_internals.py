"""What the plugin relies on in Airflow's private API (airflow_internals): a change fails here first."""

from __future__ import annotations

import inspect
from typing import Any

import airflow
import pytest
from airflow.sdk.execution_time.xcom import XCom
from packaging.version import Version
from slurm_operator import airflow_internals
from slurm_operator.airflow_version import AIRFLOW_VERSION


def test_the_deadline_classes_come_from_where_this_version_has_them() -> None:
    """3.2 made ``SyncCallback`` and the deadline classes ``airflow.sdk`` names; 3.1 has them only in its
    deadline module. (``conf`` and the exceptions, public in both: test_airflow_public.)"""
    import airflow.sdk

    moved = ("SyncCallback", "DeadlineAlert", "DeadlineReference")
    home: Any = airflow.sdk
    if Version("3.2") > AIRFLOW_VERSION:
        from airflow.sdk.definitions import deadline as home

        assert not set(moved) & set(airflow.sdk.__all__)
    for name in moved:
        assert getattr(airflow_internals, name) is getattr(home, name), name


def test_the_version_checks_read_the_installed_airflow() -> None:
    assert str(AIRFLOW_VERSION) == airflow.__version__.split("rc")[0].split("+")[0]
    # The async XCom client a trigger needs is there exactly from 3.3 on.
    assert airflow_internals.TRIGGER_XCOMS == hasattr(XCom, "aget_one") == hasattr(XCom, "aset")
    assert (AIRFLOW_VERSION.release[:2] >= (3, 3)) == airflow_internals.TRIGGER_XCOMS


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


def test_a_task_instance_without_its_trigger_relationship_is_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from types import SimpleNamespace

    airflow_internals._changed.cache_clear()
    with caplog.at_level("ERROR", logger=airflow_internals.__name__):
        assert airflow_internals.deferred_trigger(SimpleNamespace(trigger_id=3)) is None
    assert [r.getMessage() for r in caplog.records] == [
        "this Airflow changed a private API the campaign relies on: "
        "a task instance without its trigger relationship: the listener cancels no job"
    ]
    airflow_internals._changed.cache_clear()


def test_the_campaigns_app_gets_the_api_server_s_login() -> None:
    """A plugin's FastAPI app is mounted without the API server's authentication: it adds ``get_user``
    (the bearer token, else the UI's cookie) itself, and forwards that token to the REST API."""
    get_user, cookie = airflow_internals.api_login()
    assert cookie == "_token"
    assert inspect.iscoroutinefunction(get_user)
    assert "request" in inspect.signature(get_user).parameters
    assert "request.cookies.get(COOKIE_NAME_JWT_TOKEN)" in inspect.getsource(get_user)  # the same cookie
