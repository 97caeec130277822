"""SlurmLogSensor and CheckpointSensor under dag.test() against the real cluster over SSH."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from airflow.sdk import DAG, BaseOperator
from slurm_operator.hooks import SlurmHook
from slurm_operator.sensors import CheckpointSensor, SlurmLogSensor

from tests.fixtures import checkpoint_layouts as layouts
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


def make_checkpoints(root: Path) -> None:
    """Tracker at 200; iteration 100 legacy, 200 torch_dist, 300 still being written."""
    layouts.legacy(root, 100)
    layouts.torch_dist(root, 200)
    (root / "iter_0000300").mkdir()  # being written: beyond the tracker, never listed


def _ckpt_sensor(cluster: LocalCluster, folder: Path) -> CheckpointSensor:
    return CheckpointSensor(
        task_id="wait",
        ssh_conn_id=cluster.conn_id,
        checkpoint_dir=str(folder),
        iteration=200,
        poll_interval=0.5,
        settle_seconds=1,
        timeout=60,
        min_defer_seconds=0,  # dag.test() has no scheduler to race with
    )


def test_checkpoint_sensor_lists_complete_iterations_of_both_formats(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    make_checkpoints(tmp_path / "ckpt")
    run = run_dag_test(_dag("sensor_ckpt", _ckpt_sensor(slurm_cluster, tmp_path / "ckpt")))
    assert xcom_value("sensor_ckpt", run.run_id, "wait") == [100, 200]


def test_checkpoint_sensor_rejects_a_garbled_tracker_with_the_path(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("two hundred\n")
    run_dag_test(_dag("sensor_ckpt_bad", _ckpt_sensor(slurm_cluster, tmp_path / "ckpt")), expect="failed")
    out = capfd.readouterr().out
    assert f"{tmp_path / 'ckpt'}:" in out
    assert "two hundred" in out


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
