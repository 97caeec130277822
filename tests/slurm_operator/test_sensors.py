"""Sensor argument checks that need no cluster (the sensors' real runs are in integration/)."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException
from slurm_operator.sensors import CheckpointSensor, SlurmLogSensor


def test_sensors_reject_bad_pattern_and_iteration() -> None:
    log_sensor = SlurmLogSensor(task_id="wait", ssh_conn_id="c", path="/r/log", pattern="[")
    with pytest.raises(AirflowException, match=r"^task wait: pattern '\[': unterminated character set"):
        log_sensor.execute({})  # type: ignore[arg-type]
    ckpt = CheckpointSensor(task_id="ckpt", ssh_conn_id="c", checkpoint_dir="/c", iteration=-1)
    with pytest.raises(AirflowException, match=r"^task ckpt: iteration must be >= 0, got -1"):
        ckpt.execute({})  # type: ignore[arg-type]
