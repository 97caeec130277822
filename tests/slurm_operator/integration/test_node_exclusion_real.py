"""A NODE_FAIL's node is left out of the resubmission, on a real two-node local cluster (issue 28).

Real: two slurmd (the second in a network namespace of its own, tests/fixtures/two_node_cluster.py),
the SlurmOperator under ``dag.test()`` (its trigger runs inline) over real SSH, slurmctld noticing
the dead node by its own pings and failing the job NODE_FAIL, sacct's NodeList read by the batched
state query, ``policy.nodes`` and the ``sbatch --exclude`` the plugin adds (read back from sacct's
SubmitLine), Slurm placing the second attempt on the other node.

Forced: the fault (the job's node loses its slurmd and the job's processes to SIGKILL, as a crashed
node does); SlurmdTimeout cut from Slurm's 300 s to 10 s (slurm.conf + ``scontrol reconfigure``) so
the real detection takes ~30 s, not ~5 min; the sbatch argument ``--no-requeue`` (with Slurm's
default JobRequeue=1 slurmctld requeues the job itself, same id, and it never ends NODE_FAIL); and
the failed node brought back (slurmd restarted, ReturnToService=2 returns it idle) in
``on_resubmit``, before the resubmission's sbatch: both nodes are free then, and Slurm, which
picks the first node of equal ones, would have chosen the failed one again without ``--exclude``.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any, ClassVar

import pytest
from airflow.sdk import DAG
from slurm_operator.operators.slurm import SlurmOperator
from slurm_operator.remote import commands

from tests.fixtures.airflow_env import AirflowEnv, run_dag_test, xcom_value
from tests.fixtures.two_node_cluster import TwoNodeCluster, two_node_cluster
from tests.slurm_operator.integration.faults import fault_in_background

__all__ = ["two_node_cluster"]  # the fixture, imported so that pytest finds it here

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.slow, pytest.mark.timeout(600)]

# Not the session cluster's slurm_local: a trigger's poller is shared per connection id in a process.
CONN_ID = "slurm_two_nodes"
SLURMD_TIMEOUT_S = 10


class _NodeBackBeforeResubmit(SlurmOperator):
    """Runs ``before_resubmit`` (set by the test) in ``on_resubmit``, just before the resubmission's
    sbatch, and notes when the resubmission was decided and when those actions were done."""

    before_resubmit: ClassVar[list[Callable[[], None]]] = []
    notes: ClassVar[dict[str, float]] = {}

    def on_resubmit(self, context: Any, ended: Any, reason: str) -> None:
        self.notes["decided"] = time.time()
        for action in self.before_resubmit:
            action()
        self.notes["done"] = time.time()


def slurm(two: TwoNodeCluster, *args: str) -> str:
    """A Slurm command against the two-node cluster, run here (its state folder is this machine's)."""
    return subprocess.run(
        list(args), capture_output=True, text=True, env=two.cluster.env(), timeout=60, check=True
    ).stdout


def node_state(two: TwoNodeCluster, node: str) -> str:
    return slurm(two, "sinfo", "-h", "-n", node, "-o", "%t").split()[0]


def wait_idle(two: TwoNodeCluster, node: str, deadline_s: float = 60) -> None:
    deadline = time.monotonic() + deadline_s
    while (state := node_state(two, node)) != "idle":
        assert time.monotonic() < deadline, f"{node} is {state}, not idle, after {deadline_s} s"
        time.sleep(0.2)


def bring_node_back(two: TwoNodeCluster, node: str) -> None:
    """Restart whatever slurmd is missing (``up``, which rewrites slurm.conf as generated) and wait
    until ``node`` is idle; resume it should ReturnToService not have."""
    two.cluster.up()
    with contextlib.suppress(AssertionError):
        wait_idle(two, node, deadline_s=20)
        return
    slurm(two, "scontrol", "update", f"nodename={node}", "state=resume")
    wait_idle(two, node)


def crash_node_of_first_run(two: TwoNodeCluster, runs: Path, crashed: dict[str, Any]) -> None:
    """Once the first run started (its line in ``runs``), SIGKILL its node's slurmd and every process
    of the job (its slurmstepd and what that started); note the node and when."""
    deadline = time.monotonic() + 120
    while not (runs.exists() and runs.read_text().strip()):
        assert time.monotonic() < deadline, "the first attempt never ran"
        time.sleep(0.2)
    job, node = runs.read_text().split()[:2]
    table = subprocess.run(["ps", "-eo", "pid=,ppid=,args="], capture_output=True, text=True).stdout
    rows = [(int(pid), int(ppid), args) for pid, ppid, args in (f.split(None, 2) for f in table.splitlines())]
    children: dict[int, list[int]] = {}
    for pid, ppid, _ in rows:
        children.setdefault(ppid, []).append(pid)
    # ps shows a slurmstepd as "slurmstepd: [JOB.batch]" (and one per step). Job ids restart at 1 in
    # every cluster, and another test's cluster may run its own job 1 now (a two-node training was
    # killed so): a step is this cluster's when it runs in its folder (slurmd's cwd: its log folder).
    ours = str(two.cluster.base_dir)
    doomed: list[int] = []
    for stepd in (pid for pid, _, args in rows if args.startswith(f"slurmstepd: [{job}.")):
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/{stepd}/cwd").startswith(f"{ours}/"):
                doomed.append(stepd)
    for pid in doomed:  # (grows as it goes: the whole tree)
        doomed += children.get(pid, [])
    assert doomed, f"no slurmstepd of job {job} in {ours}: {table}"
    slurmd = int((two.cluster.base_dir / "run" / f"slurmd-{node}.pid").read_text())
    crashed.update(job=job, node=node, at=time.time())
    for pid in [slurmd, *doomed]:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def sacct(two: TwoNodeCluster, *jobs: str) -> dict[str, dict[str, str]]:
    fields = ("JobID", "State", "NodeList", "Submit", "Start", "End", "ElapsedRaw", "SubmitLine")
    out = slurm(two, "sacct", "-X", "-n", "-P", "-j", ",".join(jobs), "-o", ",".join(fields))
    rows = [dict(zip(fields, line.split("|", len(fields) - 1), strict=True)) for line in out.splitlines()]
    return {row["JobID"]: row for row in rows}


def at(stamp: str) -> float:
    """sacct's local-time stamp (whole seconds) as an epoch."""
    return datetime.fromisoformat(stamp).timestamp()


def test_a_node_fail_resubmits_the_job_without_its_node_onto_the_other_node(
    two_node_cluster: TwoNodeCluster,
    airflow_env: AirflowEnv,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    figure: Any,
) -> None:
    two, started = two_node_cluster, time.monotonic()
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", two.cluster.airflow_conn_json)
    conf = two.cluster.slurm_conf
    conf.write_text(conf.read_text() + f"SlurmdTimeout={SLURMD_TIMEOUT_S}\n")
    slurm(two, "scontrol", "reconfigure")
    assert f"SlurmdTimeout           = {SLURMD_TIMEOUT_S} sec" in slurm(two, "scontrol", "show", "config")
    runs = tmp_path / "runs"
    # The first run waits for its node to die; a later one finishes in seconds.
    script = (
        f'#!/bin/bash\necho "$SLURM_JOB_ID $SLURMD_NODENAME" >> {runs}\necho "on $SLURMD_NODENAME"\n'
        f'if [ "$(wc -l < {runs})" = 1 ]; then sleep 300; fi\nsleep 2\necho "finished on $SLURMD_NODENAME"\n'
    )
    crashed: dict[str, Any] = {}
    back_at_submit: list[str] = []

    def node_back() -> None:
        bring_node_back(two, crashed["node"])
        back_at_submit.append(node_state(two, crashed["node"]))

    monkeypatch.setattr(_NodeBackBeforeResubmit, "before_resubmit", [node_back])
    monkeypatch.setattr(_NodeBackBeforeResubmit, "notes", {})
    with DAG("node_exclusion", schedule=None, start_date=datetime(2026, 1, 1), catchup=False) as dag:
        _NodeBackBeforeResubmit(
            task_id="job",
            ssh_conn_id=CONN_ID,
            script=script,
            remote_dir=str(tmp_path / "run"),
            sbatch_args=["--time=5", f"--chdir={tmp_path}", "--no-requeue"],
            poll_interval=1,
            min_defer_seconds=0,  # dag.test() has no scheduler to race
            max_attempts=3,
        )
    # Each sbatch command as the hook builds it: the fallback for a SubmitLine slurmdbd left empty.
    built: list[str] = []
    build = commands.submit_attempt

    def keep(spec: commands.AttemptSubmit) -> str:
        built.append(build(spec))
        return built[-1]

    monkeypatch.setattr(commands, "submit_attempt", keep)
    try:
        with fault_in_background(lambda: crash_node_of_first_run(two, runs, crashed), two.cluster):
            run = run_dag_test(dag)
    finally:
        # The module's cluster whole again: both slurmd up, both nodes idle, SlurmdTimeout as generated.
        two.cluster.up()
        slurm(two, "scontrol", "reconfigure")
        for node in two.nodes:
            bring_node_back(two, node)

    bad, job1 = crashed["node"], crashed["job"]
    (good,) = set(two.nodes) - {bad}
    attempts = xcom_value(run.dag_id, run.run_id, "job")
    assert [(a["job_id"], a["state"], a["node_list"]) for a in attempts[:1]] == [(job1, "NODE_FAIL", bad)]
    job2 = attempts[1]["job_id"]
    assert [(a["state"], a["node_list"]) for a in attempts[1:]] == [("COMPLETED", good)], attempts
    assert attempts[1]["extra"]["excluded_nodes"] == f"{bad} (job {job1} ended NODE_FAIL on it)"
    out = capfd.readouterr().out
    assert f"excluding node(s) {bad} (job {job1} ended NODE_FAIL on it)" in out
    assert runs.read_text().split() == [job1, bad, job2, good]
    # The failed node was idle again when the resubmission went in: only --exclude kept it off.
    assert back_at_submit == ["idle"]
    jobs = sacct(two, job1, job2)
    # Slurm's own record of the command; twice, under load, slurmdbd stored an empty SubmitLine for
    # the second job (its other fields right): then the second sbatch command the hook built says it.
    assert len(built) == 2, built
    submitted = jobs[job2]["SubmitLine"] or built[1]
    assert re.search(rf"(^|[\s'\"])--exclude={re.escape(bad)}([\s'\"]|$)", submitted), (jobs[job2], submitted)
    assert (jobs[job1]["State"], jobs[job2]["NodeList"]) == ("NODE_FAIL", good)

    notes = _NodeBackBeforeResubmit.notes
    fault, node_fail = crashed["at"], at(jobs[job1]["End"])
    node_back_s = notes["done"] - notes["decided"]
    resubmitted = at(jobs[job2]["Submit"])
    figure(
        f"fault -> NODE_FAIL {node_fail - fault:.0f} s (slurmctld's pings, SlurmdTimeout "
        f"{SLURMD_TIMEOUT_S} s); NODE_FAIL -> resubmission decided {notes['decided'] - node_fail:.1f} s; "
        f"fault -> resubmitted {resubmitted - fault - node_back_s:.0f} s without the {node_back_s:.1f} s "
        f"the test took to bring the node back"
    )
    figure(
        f"job-seconds lost: {jobs[job1]['ElapsedRaw']} (attempt 1 on {bad}, {node_fail - fault:.0f} of "
        f"them on a dead node); attempt 2 on {good}: {jobs[job2]['ElapsedRaw']} s; "
        f"test body {time.monotonic() - started:.0f} s (the two-node cluster's start: {two.start_s:.0f} s)"
    )
