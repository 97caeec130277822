"""SlurmOperator under dag.test() against the real local cluster (triggers run inline), faults included."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG
from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.operators.slurm import SlurmOperator

from tests.fixtures.airflow_env import AirflowEnv, run_dag_test, xcom_value
from tests.fixtures.slurm_cluster import LocalCluster
from tests.slurm_operator.integration.faults import fault_in_background, sacct_rows, stop_daemons, wait_job

pytestmark = [pytest.mark.slurm, pytest.mark.airflow]

MARKER = "after training is done"


class _NotingResubmits(SlurmOperator):
    """Writes each on_resubmit call to a file (the operator instance may be rebuilt between calls)."""

    def on_resubmit(self, context: Any, ended: Any, reason: str) -> None:
        with open(Path(self.remote_dir) / "resubmits.log", "a") as out:
            out.write(f"{ended.attempt} {ended.job_id} {ended.state.value} {reason}\n")
        if ended.attempt == 1:
            raise RuntimeError("alert channel down")  # must not cost the job its next attempt


def _dag(
    dag_id: str, cluster: LocalCluster, tmp: Path, script: str, op_class: type = SlurmOperator, **op: Any
) -> DAG:
    with DAG(dag_id, schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        op_class(
            task_id="job",
            ssh_conn_id=cluster.conn_id,
            script=script,
            remote_dir=str(tmp / "run"),
            sbatch_args=["--time=5", f"--chdir={tmp}"],
            poll_interval=1,
            # dag.test() has no scheduler, so none of the race min_defer_seconds guards against.
            min_defer_seconds=0,
            **op,
        )
    return dag


def _attempts(run: Any) -> list[dict[str, Any]]:
    value = xcom_value(run.dag_id, run.run_id, "job")
    assert isinstance(value, list), value
    return value


def test_success_returns_attempt_records_and_streams_the_log(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    run = run_dag_test(_dag("so_ok", slurm_cluster, tmp_path, "#!/bin/bash\necho hello from $SLURM_JOB_ID\n"))
    (attempt,) = _attempts(run)
    job = attempt["job_id"]
    assert (attempt["state"], attempt["exit_code"], attempt["reattached"]) == ("COMPLETED", 0, False)
    assert attempt["log_path"].endswith(f"-{job}.out")
    assert Path(attempt["log_path"]).is_file()
    assert attempt["elapsed"]
    assert "cpu=" in attempt["alloc_tres"]
    # The job log was relayed into the task log, prefixed with the job id.
    assert f"[slurm {job}] hello from {job}" in capfd.readouterr().out
    # One script copy per attempt, kept next to the logs.
    assert Path(attempt["script_path"]).name.endswith(".attempt001.sbatch")
    # (the DB helper decodes the JSON string "1" to 1; the task pushed the id as a string)
    assert str(xcom_value(run.dag_id, run.run_id, "job", key="slurm_job_id")) == job


def test_failed_job_fails_the_task_with_exit_code_and_log_tail(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    script = "#!/bin/bash\nfor i in $(seq 1 30); do echo line $i; done\nexit 3\n"
    run_dag_test(_dag("so_fail", slurm_cluster, tmp_path, script), expect="failed")
    out = capfd.readouterr().out
    assert "FAILED (exit code 3), attempt 1: job ended FAILED" in out
    assert "last 20 lines:\nline 11\n" in out
    assert "line 30" in out
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
    dag = _dag(
        "so_resubmit",
        slurm_cluster,
        tmp_path,
        script,
        op_class=_NotingResubmits,
        completion_regex=MARKER,
        max_attempts=5,
    )
    attempts = _attempts(run_dag_test(dag))
    # on_resubmit ran once per resubmission, before it, with the attempt that ended; its failure
    # on the first call did not stop the second submission.
    calls = (tmp_path / "run" / "resubmits.log").read_text().splitlines()
    assert [c.split()[:3] for c in calls] == [
        [str(a["attempt"]), a["job_id"], "COMPLETED"] for a in attempts[:2]
    ], calls
    assert all("completion" in c for c in calls), calls
    assert [(a["attempt"], a["state"], a["completion_ok"]) for a in attempts] == [
        (1, "COMPLETED", False),
        (2, "COMPLETED", False),
        (3, "COMPLETED", True),
    ]
    assert len({a["job_id"] for a in attempts}) == 3
    # Every attempt kept its own log and script copy.
    assert all(Path(a["log_path"]).read_text().startswith(f"run {a['attempt']}") for a in attempts)
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
    assert (
        "the last 2 attempt(s) made no progress (max_attempts_without_progress=2)" in capfd.readouterr().out
    )
    assert len(list((tmp_path / "run").glob("*.out"))) == 2


@pytest.mark.parametrize("deferrable", [True, False], ids=["deferred", "in-worker"])
def test_a_job_that_always_hangs_fails_the_task_at_the_no_progress_cap(
    slurm_cluster: LocalCluster,
    airflow_env: AirflowEnv,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    deferrable: bool,
) -> None:
    """Prints one line, then hangs: each attempt is cancelled as hung; no progress probe is
    configured, yet the second hang in a row stops the task (max_attempts_without_progress=2)."""
    dag_id = f"so_hang_{'deferred' if deferrable else 'worker'}"
    script = "#!/bin/bash\necho started\nsleep 300\n"
    dag = _dag(
        dag_id,
        slurm_cluster,
        tmp_path,
        script,
        deferrable=deferrable,
        progress_timeout=4,
        startup_timeout=2,
        max_attempts=10,
        max_attempts_without_progress=2,
    )
    run_dag_test(dag, expect="failed")
    out = capfd.readouterr().out
    rows = sacct_rows(slurm_cluster, f"af-{dag_id}-job-")
    assert [r[2].split()[0] for r in rows] == ["CANCELLED", "CANCELLED"], rows
    (reason,) = {line for line in out.splitlines() if f"Slurm job {rows[1][0]} HUNG (exit code None)" in line}
    assert (
        "attempt 2: job hung (its watched files stopped changing) and was cancelled, but the last 2 "
        "attempt(s) made no progress (max_attempts_without_progress=2); log "
    ) in reason
    assert reason.endswith(f"-{rows[1][0]}.out; last 20 lines:")
    assert f"Slurm job {rows[0][0]}: job {rows[0][0]} made no progress for " in out


def test_reattaches_to_an_active_job_of_the_same_name_instead_of_submitting(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """An earlier try submitted the job and died before recording anything but the name (the
    worker was killed right after sbatch): the new try finds the job by name and waits for it."""
    name = f"reattach-{uuid.uuid4().hex[:8]}"
    (tmp_path / "run").mkdir()
    release = tmp_path / "release"
    # The earlier job runs until the new try has re-attached (a fixed sleep ends before dag.test
    # starts on a loaded machine), 120 s at most.
    wait = f"for i in $(seq 240); do [ -e {release} ] && break; sleep 0.5; done"
    script = f"#!/bin/bash\n{wait}\necho from the earlier try\n"
    with SlurmHook(slurm_cluster.conn_id) as hook:
        earlier = hook.submit(
            script=script,
            sbatch_args=[f"--job-name={name}", f"--output={tmp_path}/run/{name}-%j.out"],
        )
    caplog.set_level(logging.INFO, logger="slurm_operator.policy.recovery")

    def release_once_reattached() -> None:
        deadline = time.monotonic() + 120
        while (
            f"re-attaching to active Slurm job {earlier}" not in caplog.text and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        release.touch()

    threading.Thread(target=release_once_reattached, daemon=True).start()
    run = run_dag_test(_dag("so_reattach", slurm_cluster, tmp_path, "#!/bin/bash\nexit 9\n", job_name=name))
    (attempt,) = _attempts(run)
    assert (attempt["job_id"], attempt["state"], attempt["reattached"]) == (earlier, "COMPLETED", True)
    # slurmdbd records a job a moment after it ends: wait for the row (30 s at most), then compare.
    deadline = time.monotonic() + 30
    while not (rows := sacct_rows(slurm_cluster, name)) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert [r[0] for r in rows] == [earlier]
    assert not (tmp_path / "run" / "scripts").exists()  # nothing was uploaded, nothing submitted


def test_task_survives_sshd_restart_while_deferred(
    slurm_cluster: LocalCluster,
    airflow_env: AirflowEnv,
    tmp_path: Path,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    sshd_before = slurm_cluster.pid("sshd")

    def drop_sshd() -> None:
        wait_job(slurm_cluster, "af-so_sshd-job", "RUNNING")
        stop_daemons(slurm_cluster, "sshd")
        time.sleep(3)  # at least two poll intervals without a cluster
        slurm_cluster.up()

    with fault_in_background(drop_sshd, slurm_cluster):
        run = run_dag_test(_dag("so_sshd", slurm_cluster, tmp_path, "#!/bin/bash\nsleep 10\necho survived\n"))
    assert slurm_cluster.pid("sshd") not in (None, sshd_before)
    (attempt,) = _attempts(run)
    assert attempt["state"] == "COMPLETED"
    out = capfd.readouterr().out + caplog.text
    assert "reconnecting" in out or "slurm poll of 1 job(s)" in out  # the outage was seen, and survived
    assert f"[slurm {attempt['job_id']}] survived" in out


def test_task_survives_slurmctld_and_slurmdbd_restart_while_the_job_runs(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path: Path
) -> None:
    ctld_before = slurm_cluster.pid("slurmctld")

    def restart_controller() -> None:
        wait_job(slurm_cluster, "af-so_ctld-job", "RUNNING")
        stop_daemons(slurm_cluster, "slurmctld", "slurmdbd")
        time.sleep(3)
        slurm_cluster.up()

    with fault_in_background(restart_controller, slurm_cluster):
        run = run_dag_test(_dag("so_ctld", slurm_cluster, tmp_path, "#!/bin/bash\nsleep 12\necho survived\n"))
    assert slurm_cluster.pid("slurmctld") not in (None, ctld_before)
    (attempt,) = _attempts(run)
    assert (attempt["state"], attempt["exit_code"]) == ("COMPLETED", 0)
    assert Path(attempt["log_path"]).read_text() == "survived\n"
