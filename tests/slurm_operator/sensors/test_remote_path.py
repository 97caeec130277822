"""Sensor argument checks that need no cluster (the sensors' real runs are in integration/)."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException
from slurm_operator.sensors.remote_path import SlurmLogSensor


def test_log_sensor_rejects_a_bad_pattern() -> None:
    log_sensor = SlurmLogSensor(task_id="wait", ssh_conn_id="c", path="/r/log", pattern="[")
    with pytest.raises(AirflowException, match=r"^task wait: pattern '\[': unterminated character set"):
        log_sensor.execute({})  # type: ignore[arg-type]


def test_a_timed_out_wait_says_what_it_waited_for() -> None:
    sensor = SlurmLogSensor(task_id="wait", ssh_conn_id="c", path="/r/log", pattern="done", timeout=60)
    assert sensor._timed_out() == (
        "task wait: timed out after 60 s waiting for 'done' in /r/log; "
        "check that the job writing it runs and that the path is right"
    )
