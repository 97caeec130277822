"""Sensor argument checks that need no cluster (the sensors' real runs are in integration/)."""

from __future__ import annotations

import pytest
from airflow.sdk.exceptions import AirflowException
from slurm_operator.airflow_public import AirflowSensorTimeout, AirflowSkipException
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


@pytest.mark.parametrize(
    ("soft_fail", "raised"), [(False, AirflowSensorTimeout), (True, AirflowSkipException)]
)
def test_a_timed_out_deferral_logs_what_it_waited_for_and_fails_or_skips(
    soft_fail: bool, raised: type[Exception], capsys: pytest.CaptureFixture[str]
) -> None:
    sensor = SlurmLogSensor(
        task_id="wait", ssh_conn_id="c", path="/r/log", pattern="done", timeout=60, soft_fail=soft_fail
    )
    with pytest.raises(raised):
        sensor.resume_execution("__fail__", {"error": "Trigger timeout"}, {})  # type: ignore[arg-type]
    assert sensor._timed_out() in "".join(capsys.readouterr())  # the task logger writes to the stream
    with pytest.raises(AirflowException, match="^Skipping" if soft_fail else "^Trigger failure$"):
        sensor.resume_execution("__fail__", {"error": "Trigger failure"}, {})  # type: ignore[arg-type]
    assert "timed out" not in "".join(capsys.readouterr())
