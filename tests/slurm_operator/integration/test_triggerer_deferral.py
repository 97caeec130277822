"""The smallest real deferrals through a real scheduler and triggerer (LocalExecutor, PostgreSQL).

One job to success with its log relayed by the triggerer, one deferral that times out and cancels
its job. scripts/check-airflow-matrix runs this module on the older Airflow minors too: there it is
the one check of the trigger's import, kwargs and run inside a real triggerer of that version.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from slurm_operator.model import naming

from tests.fixtures.airflow_stack import AirflowStack, start_stack
from tests.fixtures.slurm_cluster import LocalCluster
from tests.slurm_operator.integration.faults import sacct_rows
from tests.slurm_operator.integration.rt_stack import rt_dags_folder

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.slow]

TRIGGERED = ("rt_ok", "rt_exectimeout")


@dataclass
class Deferrals:
    cluster: LocalCluster
    stack: AirflowStack
    work: Path
    runs: dict[str, str]


@pytest.fixture(scope="module")
def deferrals(slurm_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deferrals]:
    base = tmp_path_factory.mktemp("triggerer-deferral")
    work = base / "work"
    work.mkdir()
    conn = slurm_cluster.conn_id
    dags = rt_dags_folder(base, work, conn, conn, many_interval=5)
    stack = start_stack(base / "airflow-home", dags)
    try:
        yield Deferrals(slurm_cluster, stack, work, {dag_id: stack.trigger(dag_id) for dag_id in TRIGGERED})
    finally:
        stack.stop()


def test_success_streams_the_log_through_the_real_triggerer(deferrals: Deferrals) -> None:
    stack, run_id = deferrals.stack, deferrals.runs["rt_ok"]
    assert stack.wait_run("rt_ok", run_id, timeout=240) == "success"
    path = f"dags/rt_ok/dagRuns/{run_id}/taskInstances/job/xcomEntries/return_value"
    attempts: list[dict[str, Any]] = stack.api("GET", f"{path}?map_index=-1&deserialize=true")["value"]
    (attempt,) = attempts
    assert attempt["state"] == "COMPLETED"
    job = attempt["job_id"]
    lines = (f"[slurm {job}] hello from {job}", f"[slurm {job}] bye")

    def relayed() -> str | None:
        log = stack.task_log("rt_ok", run_id, "job")
        return log if all(line in log for line in lines) else None

    # The triggerer writes the trigger's log lines through its parent process (and on 3.3 ends the
    # task itself, end_task_on_success): under load the file lags the task's success by a few seconds.
    stack.poll(f"the lines {lines} relayed into the task log", relayed, 60)


def test_execution_timeout_while_deferred_cancels_the_job(deferrals: Deferrals) -> None:
    stack, cluster, run_id = deferrals.stack, deferrals.cluster, deferrals.runs["rt_exectimeout"]
    assert stack.wait_run("rt_exectimeout", run_id, timeout=240) == "failed"
    deadline = time.monotonic() + 30
    while {r[2].split()[0] for r in sacct_rows(cluster, "af-rt_exectimeout-job-")} != {"CANCELLED"}:
        assert time.monotonic() < deadline, sacct_rows(cluster, "af-rt_exectimeout-job-")
        time.sleep(1)
    assert "deferral timed out: scancel" in stack.task_log("rt_exectimeout", run_id, "job")
    (marker,) = (deferrals.work / "rt_exectimeout" / "run").glob("*.out.airflow-cancel")
    assert marker.read_text() == f"{naming.TIMEOUT_REASON}\n"
