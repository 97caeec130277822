"""SlurmOperator under dag.test() against the real local cluster (triggers run inline)."""

from __future__ import annotations

import subprocess
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from slurm_operator.operators import SlurmOperator

from tests.fixtures.airflow_env import AirflowEnv, run_dag_test
from tests.fixtures.slurm_cluster import LocalCluster

pytestmark = [pytest.mark.slurm, pytest.mark.airflow]

MARKER = "after training is done"


def _dag(dag_id: str, cluster: LocalCluster, tmp: Path, script: str, **op: Any) -> DAG:
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        SlurmOperator(
            task_id="job",
            ssh_conn_id=cluster.conn_id,
            script=script,
            remote_dir=str(tmp / "run"),
            sbatch_args=["--time=5", f"--chdir={tmp}"],
            poll_interval=1,
            **op,
        )
    return dag


def _sacct_names(cluster: LocalCluster, name_prefix: str) -> list[str]:
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-a", "-o", "JobName,State", "-S", "now-1hour"],
        capture_output=True,
        text=True,
        env=cluster.env(),
        check=True,
    ).stdout
    return [line for line in out.splitlines() if line.startswith(name_prefix)]


def test_success_returns_attempt_records_and_streams_the_log(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    dag = _dag("so_ok", slurm_cluster, tmp_path, "#!/bin/bash\necho hello from $SLURM_JOB_ID\n")
    run = run_dag_test(dag)
    (ti,) = run.get_task_instances()
    attempts = ti.xcom_pull(task_ids="job") if hasattr(ti, "xcom_pull") else None
    out = capfd.readouterr().out
    assert "[slurm " in out
    assert "hello from" in out
    logs = sorted((tmp_path / "run").glob("af-so_ok-job-*.out"))
    assert len(logs) == 1
    scripts = sorted((tmp_path / "run" / "scripts").glob("*.sbatch"))
    assert [p.name.rsplit(".", 2)[-2] for p in scripts] == ["attempt001"]
    if attempts is not None:
        assert attempts[0]["state"] == "COMPLETED"


def test_failed_job_fails_the_task_with_exit_code_and_log_tail(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    script = "#!/bin/bash\nfor i in $(seq 1 30); do echo line $i; done\nexit 3\n"
    run_dag_test(_dag("so_fail", slurm_cluster, tmp_path, script), expect="failed")
    out = capfd.readouterr().out
    assert "FAILED (exit code 3), attempt 1: job ended FAILED" in out
    assert "line 30" in out
    assert "last 20 lines" in out
    # Nothing was resubmitted: FAILED is not a resubmittable ending.
    assert len(list((tmp_path / "run").glob("*.out"))) == 1


def test_completed_without_marker_is_resubmitted_until_done(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    # Like Megatron with --exit-duration-in-mins: exits 0 twice before finishing on the third run.
    script = (
        "#!/bin/bash\nn=$(cat count 2>/dev/null || echo 0); n=$((n+1)); echo $n > count\n"
        f"echo run $n\nif [ $n -ge 3 ]; then echo '{MARKER}'; fi\n"
    )
    dag = _dag("so_resubmit", slurm_cluster, tmp_path, script, completion_regex=MARKER, max_attempts=5)
    run_dag_test(dag)
    assert (tmp_path / "count").read_text().strip() == "3"
    assert len(list((tmp_path / "run").glob("*.out"))) == 3
    assert len(list((tmp_path / "run" / "scripts").glob("*.sbatch"))) == 3


def test_poison_job_stops_at_the_no_progress_cap(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    # Exits 0 without the marker and without moving the checkpoint tracker: stop after 2 such attempts.
    (tmp_path / "tracker").write_text("100\n")
    dag = _dag(
        "so_poison",
        slurm_cluster,
        tmp_path,
        "#!/bin/bash\necho nothing\n",
        completion_regex=MARKER,
        progress_command=f"cat {tmp_path / 'tracker'}",
        max_attempts=10,
        max_attempts_without_progress=2,
    )
    run_dag_test(dag, expect="failed")
    assert "last 2 attempt(s) made no progress" in capfd.readouterr().out
    assert len(list((tmp_path / "run").glob("*.out"))) == 2


def test_retry_reattaches_to_the_running_job_by_name(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    """A job of this task instance already runs (the worker died after sbatch): no second submission."""
    dag = _dag("so_reattach", slurm_cluster, tmp_path, "#!/bin/bash\nsleep 4\necho first\n")
    op = dag.get_task("job")
    assert isinstance(op, SlurmOperator)
    # Submit "the earlier try's" job by hand under the name the operator derives for this run.
    captured: dict[str, str] = {}
    original = SlurmOperator._name

    def name_spy(self: SlurmOperator, context: Any) -> str:
        captured["name"] = original(self, context)
        return captured["name"]

    mp = pytest.MonkeyPatch()
    mp.setattr(SlurmOperator, "_name", name_spy)
    mp.setattr(SlurmOperator, "_submit", _fail_submit)
    # The run id is only known inside dag.test(), so the pre-existing job is submitted by the
    # first _recover() call through the real hook (exactly what an earlier try would have done).
    original_recover = SlurmOperator._recover

    def recover_after_foreign_submit(self: SlurmOperator, context: Any, hook: Any) -> Any:
        name = self._name(context)
        hook.submit(
            script="#!/bin/bash\nsleep 4\necho first\n",
            upload_to=str(tmp_path / "pre.sbatch"),
            sbatch_args=[f"--job-name={name}", f"--output={tmp_path}/run/{name}-%j.out"],
        )
        return original_recover(self, context, hook)

    mp.setattr(SlurmOperator, "_recover", recover_after_foreign_submit)
    try:
        run_dag_test(dag)
    finally:
        mp.undo()
    rows = _sacct_names(slurm_cluster, captured["name"])
    assert len(rows) == 1, rows


def _fail_submit(self: SlurmOperator, *args: Any) -> None:
    raise AssertionError("the operator submitted although a job of this task instance was active")
