"""SlurmLogSensor under dag.test() against the real cluster over SSH."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from airflow.sdk import DAG, BaseOperator
from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.sensors.remote_path import SlurmLogSensor

from tests.fixtures.airflow_env import AirflowEnv, run_dag_test, task_states, xcom_value
from tests.fixtures.slurm_cluster import LocalCluster

pytestmark = [pytest.mark.slurm, pytest.mark.airflow]

MARKER = "after training is done"


def _dag(dag_id: str, *tasks: BaseOperator) -> DAG:
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        for task in tasks:
            dag.add_task(task)
    return dag


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferred", "poke"])
def test_log_sensor_returns_the_line_a_running_job_writes(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path, deferrable: bool
) -> None:
    log = tmp_path / "train.log"
    # The job creates the file late, grows it, and writes the marker without its newline at first.
    with SlurmHook(slurm_cluster.conn_id) as hook:
        hook.submit(
            script=(
                f"#!/bin/bash\nsleep 1\nfor i in 1 2 3; do echo iteration $i >> {log}; sleep 1; done\n"
                f"printf '[{MARKER}] at 3' >> {log}\nsleep 2\necho >> {log}\n"
            ),
            sbatch_args=["--time=2", "--output=/dev/null"],
        )
    dag_id = f"sensor_log_{'deferred' if deferrable else 'poke'}"
    sensor = SlurmLogSensor(
        task_id="wait",
        ssh_conn_id=slurm_cluster.conn_id,
        path=str(log),
        pattern=r"after training is done",
        poll_interval=0.5,
        deferrable=deferrable,
        timeout=120,
        min_defer_seconds=0,  # dag.test() has no scheduler to race with
    )
    run = run_dag_test(_dag(dag_id, sensor))
    assert xcom_value(dag_id, run.run_id, "wait") == f"[{MARKER}] at 3"


@pytest.mark.parametrize(("soft_fail", "state"), [(True, "skipped"), (False, "failed")])
def test_log_sensor_timeout_fails_or_skips(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path, soft_fail: bool, state: str
) -> None:
    (tmp_path / "quiet.log").write_text("nothing to see\n")
    dag_id = f"sensor_timeout_{state}"
    sensor = SlurmLogSensor(
        task_id="wait",
        ssh_conn_id=slurm_cluster.conn_id,
        path=str(tmp_path / "quiet.log"),
        pattern=MARKER,
        poll_interval=0.5,
        timeout=2,
        soft_fail=soft_fail,
        deferrable=False,
        mode="poke",
    )
    run_dag_test(_dag(dag_id, sensor), expect=None)
    assert task_states(dag_id) == {"wait": state}
