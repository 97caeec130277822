"""The public Airflow names that moved in 3.2 (airflow_public) come from where this Airflow has them."""

from __future__ import annotations

import inspect
from typing import Any

import airflow.sdk
import pytest
from packaging.version import Version
from slurm_operator import airflow_public
from slurm_operator.airflow_version import AIRFLOW_VERSION

RAISED = (
    "AirflowFailException",
    "AirflowNotFoundException",
    "AirflowSensorTimeout",
    "AirflowSkipException",
    "TaskDeferralTimeout",
)


def test_conf_and_the_exceptions_come_from_where_this_version_has_them() -> None:
    """3.2 made ``conf`` an ``airflow.sdk`` name and moved the exceptions a task raises to
    ``airflow.sdk.exceptions``; 3.1 has them in its core."""
    if Version("3.2") <= AIRFLOW_VERSION:
        from airflow.sdk import exceptions

        assert airflow_public.conf is airflow.sdk.conf
    else:
        from airflow import configuration, exceptions

        assert airflow_public.conf is configuration.conf
        assert "conf" not in airflow.sdk.__all__
    for name in RAISED:
        assert getattr(airflow_public, name) is getattr(exceptions, name), name


def test_the_exceptions_are_the_ones_the_task_runner_catches() -> None:
    from airflow.sdk.execution_time import task_runner

    source = inspect.getsource(task_runner)
    for name in ("AirflowFailException", "AirflowSkipException", "AirflowSensorTimeout"):
        cls = getattr(airflow_public, name)
        assert getattr(task_runner, name, cls) is cls  # where the runner imports it, the same class
        assert name in source


def test_a_timed_out_deferral_resumes_into_this_task_deferral_timeout_and_a_failed_trigger_does_not() -> None:
    """The operator and the sensor tell a deferral's timeout from a trigger failure by this class alone."""
    operator = airflow.sdk.BaseOperator(task_id="t")
    context: Any = {}
    with pytest.raises(airflow_public.TaskDeferralTimeout):
        operator.resume_execution("__fail__", {"error": "Trigger timeout"}, context)
    with pytest.raises(Exception, match=r"^Trigger failure$") as failed:
        operator.resume_execution("__fail__", {"error": "Trigger failure"}, context)
    assert not isinstance(failed.value, airflow_public.TaskDeferralTimeout)
