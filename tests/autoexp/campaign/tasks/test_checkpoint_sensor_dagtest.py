"""CheckpointSensor under dag.test() against the real cluster over SSH."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import pytest
from airflow.sdk import DAG

from autoexp.campaign.tasks.checkpoint_sensor import CheckpointSensor
from tests.fixtures import checkpoint_layouts as layouts
from tests.fixtures.airflow_env import AirflowEnv, run_dag_test, xcom_value
from tests.fixtures.slurm_cluster import LocalCluster

pytestmark = [pytest.mark.slurm, pytest.mark.airflow]


def wait_dag(dag_id: str, cluster: LocalCluster, folder: Path) -> DAG:
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        CheckpointSensor(
            task_id="wait",
            ssh_conn_id=cluster.conn_id,
            checkpoint_dir=str(folder),
            iteration=200,
            poll_interval=0.5,
            settle_seconds=1,
            timeout=60,
            min_defer_seconds=0,  # dag.test() has no scheduler to race with
        )
    return dag


def test_checkpoint_sensor_lists_complete_iterations_of_both_formats(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    layouts.mixed(tmp_path / "ckpt")
    run = run_dag_test(wait_dag("sensor_ckpt", slurm_cluster, tmp_path / "ckpt"))
    assert xcom_value("sensor_ckpt", run.run_id, "wait") == [100, 200]


def test_checkpoint_sensor_rejects_a_garbled_tracker_with_the_path(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "latest_checkpointed_iteration.txt").write_text("two hundred\n")
    run_dag_test(wait_dag("sensor_ckpt_bad", slurm_cluster, tmp_path / "ckpt"), expect="failed")
    out = capfd.readouterr().out
    assert f"{tmp_path / 'ckpt'}:" in out
    assert "two hundred" in out
