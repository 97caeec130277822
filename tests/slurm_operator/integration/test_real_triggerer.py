"""SlurmOperator under a real scheduler + triggerer (LocalExecutor, PostgreSQL); TIMEOUT under `dags test`.

dag.test() runs triggers inline and hides trigger import and kwargs problems (notes D1-D3), so the
core cases run here again. Everything is started at once by the module fixture and runs
concurrently; each test then waits for, and checks, its own part.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from slurm_operator.model import naming

from tests.fixtures import checkpoint_layouts
from tests.fixtures.airflow_env import AIRFLOW, AirflowEnv, xcom_value
from tests.fixtures.airflow_stack import AirflowStack, start_stack
from tests.fixtures.slurm_cluster import LocalCluster
from tests.slurm_operator.integration.faults import sacct_rows, squeue, wait_job
from tests.slurm_operator.integration.rt_stack import rt_dags_folder
from tests.slurm_operator.integration.ssh_counter import CountingSshd, start_counting_sshd

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.slow]

MANY_INTERVAL = 5  # seconds between the batched state queries of the 20-job DAG
# rt_ok and rt_exectimeout run in test_triggerer_deferral (the module the older Airflow minors run too).
TRIGGERED = ("rt_fail", "rt_kill", "rt_crash", "rt_many", "rt_sensors")


@dataclass
class RealStack:
    cluster: LocalCluster
    stack: AirflowStack
    sshd: CountingSshd
    work: Path
    runs: dict[str, str]
    dags_test: subprocess.Popen[bytes]
    dags_test_log: Path

    def job_prefix(self, dag_id: str) -> str:
        return f"af-{dag_id}-job-"


@pytest.fixture(scope="module")
def real(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealStack]:
    base = tmp_path_factory.mktemp("real-triggerer")
    work = base / "work"
    work.mkdir()
    sshd = start_counting_sshd(slurm_cluster, base / "sshd")
    dags = rt_dags_folder(base, work, slurm_cluster.conn_id, sshd.conn_id, MANY_INTERVAL)
    checkpoint_layouts.mixed(work / "ckpt")
    (work / "sensor.log").write_text("iteration 1\n[after training is done] at 1\n")
    # The ~90 s TIMEOUT case runs under `airflow dags test` (dag.test) meanwhile, on this worker's database.
    dags_test_log = base / "dags-test-timeout.log"
    with dags_test_log.open("wb") as out:
        dags_test = subprocess.Popen(
            [AIRFLOW, "dags", "test", "rt_timeout"],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=airflow_env.env(AIRFLOW__CORE__DAGS_FOLDER=str(dags)),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    stack = None
    try:
        stack = start_stack(
            base / "airflow-home",
            dags,
            {
                sshd.conn_env_var: sshd.conn_json,
                # A killed task process is noticed by its supervisor at once; this bounds the rest.
                "AIRFLOW__SCHEDULER__TASK_INSTANCE_HEARTBEAT_TIMEOUT": "30",
            },
        )
        runs = {dag_id: stack.trigger(dag_id) for dag_id in TRIGGERED}
        yield RealStack(slurm_cluster, stack, sshd, work, runs, dags_test, dags_test_log)
    finally:
        if stack is not None:
            stack.stop()
        if dags_test.poll() is None:
            os.killpg(dags_test.pid, signal.SIGKILL)
            dags_test.wait()
        sshd.stop()


def _tis(real: RealStack, dag_id: str) -> list[dict[str, Any]]:
    path = f"dags/{dag_id}/dagRuns/{real.runs[dag_id]}/taskInstances"
    tis: list[dict[str, Any]] = real.stack.api("GET", path)["task_instances"]
    return tis


def _xcom(
    real: RealStack, dag_id: str, key: str = "return_value", map_index: int = -1, task_id: str = "job"
) -> Any:
    path = f"dags/{dag_id}/dagRuns/{real.runs[dag_id]}/taskInstances/{task_id}/xcomEntries/{key}"
    return real.stack.api("GET", f"{path}?map_index={map_index}&deserialize=true")["value"]


def test_twenty_deferred_jobs_with_hang_detection_cost_one_ssh_command_per_poll_interval(
    real: RealStack,
) -> None:
    deadline = time.monotonic() + 240
    while True:
        states = [t["state"] for t in _tis(real, "rt_many")]
        if states.count("deferred") == 20:
            break
        assert time.monotonic() < deadline, f"not all 20 deferred: {states}"
        time.sleep(2)
    ids = sorted(r.job_id for r in squeue(real.cluster) if r.name.startswith(real.job_prefix("rt_many")))
    assert len(ids) == 20, ids
    time.sleep(MANY_INTERVAL)  # let the poller settle on the full set
    window = 4 * MANY_INTERVAL
    t0 = time.time()
    time.sleep(window)
    served = real.sshd.commands(t0, t0 + window)
    # Counted by the server: every request it ran in the window (exec and subsystem alike).
    assert window / MANY_INTERVAL - 1 <= len(served) <= window / MANY_INTERVAL + 1, served
    for cmd in served:
        assert "sacct" in cmd.text, cmd.text
        assert all(job_id in cmd.text for job_id in ids), f"not one query for all 20 jobs: {cmd.text}"
        # Hang detection's clock and stats are a section of that same command, not commands of their own.
        assert "date +%s" in cmd.text, cmd.text
        assert "stat -c" in cmd.text, cmd.text
    (real.work / "release-many").touch()
    assert real.stack.wait_run("rt_many", real.runs["rt_many"], timeout=240) == "success"


def test_failed_job_names_exit_code_and_log_tail_in_the_task_log(real: RealStack) -> None:
    assert real.stack.wait_run("rt_fail", real.runs["rt_fail"], timeout=240) == "failed"
    log = real.stack.task_log("rt_fail", real.runs["rt_fail"], "job")
    assert "FAILED (exit code 3), attempt 1: job ended FAILED" in log
    assert "line 30" in log


def test_sensor_triggers_load_and_fire_in_the_real_triggerer(real: RealStack) -> None:
    assert real.stack.wait_run("rt_sensors", real.runs["rt_sensors"], timeout=240) == "success"
    assert _xcom(real, "rt_sensors", task_id="ckpt") == [100, 200]
    assert _xcom(real, "rt_sensors", task_id="log") == "[after training is done] at 1"


def test_mark_failed_while_deferred_cancels_the_job_within_a_poll_interval(real: RealStack) -> None:
    run_id = real.runs["rt_kill"]
    real.stack.wait_task_state("rt_kill", run_id, "job", {"deferred"}, timeout=240)
    row = wait_job(real.cluster, real.job_prefix("rt_kill"), "RUNNING")
    t0 = time.monotonic()
    real.stack.set_task_state("rt_kill", run_id, "job", "failed")
    while True:
        states = {r[2].split()[0] for r in sacct_rows(real.cluster, row.name)}
        if states == {"CANCELLED"}:
            break
        assert time.monotonic() - t0 < 10, f"job {row.job_id} still {states} 10 s (one interval) after"
        time.sleep(0.5)
    assert real.stack.task_states("rt_kill", run_id)["job"] == "failed"
    # Written before the scancel: a later try (a clear) reads it as our cancel, not a person's.
    marker = real.work / "rt_kill" / "run" / f"{row.name}-{row.job_id}.out.airflow-cancel"
    assert marker.read_text() == f"{naming.ON_KILL_REASON}\n"


def test_worker_killed_after_sbatch_the_retry_reattaches(real: RealStack) -> None:
    run_id = real.runs["rt_crash"]
    row = wait_job(real.cluster, real.job_prefix("rt_crash"), "RUNNING", timeout=240)
    task_pid = _task_process(real.stack, str(_tis(real, "rt_crash")[0]["id"]))
    os.kill(task_pid, signal.SIGKILL)
    # The retry starts, finds the recorded job still running and polls it again.
    deadline = time.monotonic() + 120
    while not ((ti := _tis(real, "rt_crash")[0])["try_number"] == 2 and ti["state"] == "running"):
        assert time.monotonic() < deadline, f"no retry running: {ti}"
        time.sleep(1)
    (real.work / "release-crash").touch()
    assert real.stack.wait_run("rt_crash", run_id, timeout=240) == "success"
    (ti,) = _tis(real, "rt_crash")
    assert ti["try_number"] == 2
    (attempt,) = _xcom(real, "rt_crash")
    assert (attempt["job_id"], attempt["state"]) == (row.job_id, "COMPLETED")
    assert [r[0] for r in sacct_rows(real.cluster, row.name)] == [row.job_id]


def _task_process(stack: AirflowStack, ti_id: str, timeout: float = 60) -> int:
    """Pid of the process running the task's code.

    The LocalExecutor worker titles itself `airflow worker -- <ti id>` and forks the task process
    below it (which may or may not keep the title): the deepest process of that subtree.
    """
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        parent: dict[int, int] = {}
        titled: set[int] = set()
        for pid in stack.group_pids():
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
                parent[pid] = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, ValueError):
                continue
            if ti_id in cmdline:
                titled.add(pid)
        below = {p for p in parent if parent[p] in titled} | titled
        leaves = [p for p in below if p not in {parent[q] for q in below}]
        if len(below) >= 2 and len(leaves) == 1:
            return leaves[0]
        time.sleep(0.5)
    raise AssertionError(f"no task process of task instance {ti_id} found")


def test_timeout_is_resubmitted_and_finishes_under_dags_test(real: RealStack) -> None:
    rc = real.dags_test.wait(timeout=300)
    log = real.dags_test_log.read_text(errors="replace")
    assert rc == 0, log[-5000:]
    assert "job ended TIMEOUT, which is resubmittable -> resubmit" in log
    rows = sacct_rows(real.cluster, "af-rt_timeout-job-")
    assert [r[2] for r in rows] == ["TIMEOUT", "COMPLETED"], rows
    # `dags test` ran on this worker's database: its XCom holds both attempts, each with its own log.
    first, second = xcom_value("rt_timeout", _latest_run_id("rt_timeout"), "job")
    assert (first["state"], second["state"]) == ("TIMEOUT", "COMPLETED")
    assert [first["job_id"], second["job_id"]] == [r[0] for r in rows]
    assert Path(first["log_path"]).read_text().startswith("first\n")
    assert "DUE TO TIME LIMIT" in Path(first["log_path"]).read_text()
    assert Path(second["log_path"]).read_text() == "resumed\n"


def _latest_run_id(dag_id: str) -> str:
    from airflow.models import DagRun
    from airflow.utils.session import create_session

    with create_session() as session:
        run = session.query(DagRun).filter(DagRun.dag_id == dag_id).order_by(DagRun.id.desc()).first()
        assert run is not None, f"no run of {dag_id} in this worker's database"
        return str(run.run_id)
