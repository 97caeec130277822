"""Injected faults under a real scheduler + triggerer (PostgreSQL), real Slurm, real SSH (issue 12).

- the triggerer SIGKILLed mid-job and restarted: the job's log is relayed once, every line;
- a job scancelled from outside: the task fails after one try although it has retries, saying
  which job and who; a clear resumes it with attempt 2, attempt 1's files intact;
- Airflow's retry after a FAILED job continues the attempt numbering;
- sshd down 60 s, then slurmctld + slurmdbd down 30 s, while a job runs and logs: it succeeds,
  every line relayed once, one Slurm job, no try spent;
- the triggerer SIGKILLed while a restart loop's no-progress clock runs: the new triggerer judges
  it hung from when it first showed its iteration, not from the restart.

One stack for the module (a stack costs ~30 s to start); the three DAG runs start at once.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.model import naming
from slurm_operator.remote import commands

from tests.fixtures.airflow_env import AirflowEnv
from tests.fixtures.airflow_stack import AirflowStack, start_stack
from tests.fixtures.slurm_cluster import LocalCluster
from tests.fixtures.stack_api import task_instances, xcom
from tests.fixtures.stack_restart import kill_component, restart_component
from tests.slurm_operator.integration.faults import sacct_rows, squeue, stop_daemons, wait_job

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.slow]

DAGS = Path(__file__).with_name("dags")
RUNS = ("ft_relay", "ft_cancel", "ft_retry", "ft_outage")
OUTAGE_LINES = 250
RELAY_LINES = 277
LOOP_TIMEOUT_S = 45  # ft_loop's progress_timeout


@dataclass
class Faulted:
    cluster: LocalCluster
    stack: AirflowStack
    work: Path
    runs: dict[str, str]

    def tis(self, dag_id: str) -> list[dict[str, Any]]:
        return task_instances(self.stack, dag_id, self.runs[dag_id])

    def xcom(self, dag_id: str, key: str = "return_value") -> Any:
        return xcom(self.stack, dag_id, self.runs[dag_id], key=key)


@pytest.fixture(scope="module")
def faulted(
    slurm_cluster: LocalCluster, airflow_env: AirflowEnv, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Faulted]:
    base = tmp_path_factory.mktemp("faults-real")
    work = base / "work"
    work.mkdir()
    dags = base / "dags"
    dags.mkdir()
    shutil.copy(DAGS / "ft_dags.py", dags)
    settings = {"work": str(work), "conn_id": slurm_cluster.conn_id, "loop_timeout_s": LOOP_TIMEOUT_S}
    (dags / "ft.json").write_text(json.dumps(settings))
    stack = None
    try:
        stack = start_stack(
            base / "airflow-home",
            dags,
            {
                # A restarted triggerer takes over the dead one's triggers once its heartbeat is this old.
                "AIRFLOW__TRIGGERER__TRIGGERER_HEALTH_CHECK_THRESHOLD": "10",
                # The default 5 s failed task starts (ReadTimeout from the execution API) on the
                # shared 2-core machine at a load average of 20-40; Airflow's own advice for high load.
                "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
            },
        )
        runs = {dag_id: stack.trigger(dag_id) for dag_id in RUNS}
        yield Faulted(slurm_cluster, stack, work, runs)
    finally:
        if stack is not None:
            stack.stop()
        for row in squeue(slurm_cluster):
            if row.name.startswith("af-ft_"):
                slurm_cluster.ssh(f"scancel {row.job_id}")


def test_triggerer_killed_and_restarted_mid_job_relays_each_line_once(
    faulted: Faulted, figure: Callable[[str], None]
) -> None:
    f = faulted
    # When the 57 lines' record reaches the task log, for the figure of the window (docs).
    seen = _first_seen(f.stack.home / "logs" / "dag_id=ft_relay", "relay line 57")
    row = wait_job(f.cluster, "af-ft_relay-", "RUNNING", timeout=240)
    f.stack.wait_task_state("ft_relay", f.runs["ft_relay"], "job", {"deferred"}, timeout=120)
    (ti,) = f.tis("ft_relay")
    tries = ti["try_number"]  # 1, unless the loaded machine failed a task start (infrastructure)
    log = f.work / "ft_relay" / "run" / f"{row.name}-{row.job_id}.out"
    # The kill comes once the first 57 lines are relayed (in the task log) and their position
    # stored, as in the run. The relay is idle then (the job waits for the release file):
    # a kill between a store and the moment its lines reach the task log loses them (the
    # documented window, measured here), and this test is about what the issue saw: repeats.
    size_57 = len("".join(f"relay line {i}\n" for i in range(1, 58)))
    f.stack.poll(
        "the position of the first 57 lines stored",
        lambda: (f.xcom("ft_relay", "slurm_log_relay") or {}).get("offset") == size_57 or None,
        240,
        interval=0.2,
    )
    f.stack.poll("the first 57 lines in the task log", lambda: seen.get("at"), 60, 0.2)
    committed = _xcom_time(f, "slurm_log_relay")
    window = seen["at"] - committed
    figure(f"57 lines reached the task log {window:.3f} s after their relay position was committed")
    assert len(_relayed(f, row.job_id, tries)) == 57
    assert log.stat().st_size == size_57
    killed_at = kill_component(f.stack, "triggerer")
    (f.work / "release-relay").touch()  # the job prints the other 220 lines while no triggerer runs
    restart_component(f.stack, "triggerer", after=killed_at)
    assert f.stack.wait_run("ft_relay", f.runs["ft_relay"], timeout=300) == "success"
    assert log.read_text() == "".join(f"relay line {i}\n" for i in range(1, RELAY_LINES + 1))
    task_log = f.stack.task_log("ft_relay", f.runs["ft_relay"], "job", try_number=tries)
    relayed = _relayed(f, row.job_id, tries)
    figure(f"triggerer SIGKILL + restart: {len(relayed)} lines relayed for a {RELAY_LINES}-line log")
    assert sorted(relayed) == list(range(1, RELAY_LINES + 1)), f"{len(relayed)} relayed lines"
    trigger_logs = sorted(
        p.name
        for p in (f.stack.home / "logs").rglob(f"attempt={tries}.log.trigger.*.log")
        if "ft_relay" in str(p)
    )
    assert len(trigger_logs) == 2, trigger_logs  # one per triggerer: the restart really happened
    assert "log relay resumes at byte" in task_log
    assert [r[0] for r in sacct_rows(f.cluster, row.name)] == [row.job_id]  # no second job
    figure(f"triggerer SIGKILL + restart: {len(sacct_rows(f.cluster, row.name))} Slurm job for {row.name}")
    (attempt,) = f.xcom("ft_relay")
    assert (attempt["attempt"], attempt["state"], attempt["try_number"]) == (1, "COMPLETED", tries)
    assert f.tis("ft_relay")[0]["try_number"] == tries  # the restart cost no try


def _first_seen(folder: Path, text: str) -> dict[str, float]:
    """Watch the trigger logs below ``folder`` (every 20 ms, in a thread) for ``text``; the result's
    ``at`` is the wall-clock time it was first seen."""
    found: dict[str, float] = {}

    def watch() -> None:
        deadline = time.monotonic() + 600
        while "at" not in found and time.monotonic() < deadline:
            for path in folder.rglob("*.log.trigger.*.log"):
                if text in path.read_text(errors="replace"):
                    found["at"] = time.time()
            time.sleep(0.02)

    threading.Thread(target=watch, daemon=True).start()
    return found


def _xcom_time(f: Faulted, key: str) -> float:
    """When the XCom was last set (the execution API's commit), epoch seconds."""
    path = f"dags/ft_relay/dagRuns/{f.runs['ft_relay']}/taskInstances/job/xcomEntries/{key}"
    return datetime.fromisoformat(f.stack.api("GET", f"{path}?map_index=-1")["timestamp"]).timestamp()


def _relayed(f: Faulted, job_id: str, try_number: int, dag_id: str = "ft_relay") -> list[int]:
    """Line numbers of every relayed ``<word> line N`` in the try's logs (worker's and triggers')."""
    task_log = f.stack.task_log(dag_id, f.runs[dag_id], "job", try_number=try_number)
    return [int(n) for n in re.findall(rf"\[slurm {job_id}\] \w+ line (\d+)\b", task_log)]


def test_external_scancel_ends_the_task_after_one_try_and_a_clear_resumes_with_attempt_2(
    faulted: Faulted, figure: Callable[[str], None]
) -> None:
    f = faulted
    run_id = f.runs["ft_cancel"]
    f.stack.wait_task_state("ft_cancel", run_id, "job", {"deferred"}, timeout=240)
    row = wait_job(f.cluster, "af-ft_cancel-", "RUNNING", timeout=120)
    (ti,) = f.tis("ft_cancel")
    tries = ti["try_number"]  # 1, unless the loaded machine failed a task start (infrastructure)
    copy1 = Path(naming.attempt_script_path(str(f.work / "ft_cancel" / "run"), row.name, 1))
    before = (copy1.read_bytes(), copy1.stat().st_mtime_ns)
    out = subprocess.run(["scancel", row.job_id], env=f.cluster.env(), capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    cancelled = time.monotonic()
    assert f.stack.wait_run("ft_cancel", run_id, timeout=240) == "failed"
    figure(f"outside scancel: the run failed {time.monotonic() - cancelled:.1f} s later, no retry")
    (ti,) = f.tis("ft_cancel")
    assert (ti["state"], ti["try_number"]) == ("failed", tries)  # retries=2, and no retry
    rows = sacct_rows(f.cluster, row.name)
    assert [(r[0], r[2]) for r in rows] == [(row.job_id, "CANCELLED by 0")]
    task_log = f.stack.task_log("ft_cancel", run_id, "job", try_number=tries)
    line = next(ln for ln in task_log.splitlines() if "was cancelled from outside Airflow" in ln)
    for part in (
        f"Slurm job {row.job_id} (attempt 1, log ",
        "was cancelled from outside Airflow by root (uid 0); not retried, since a cancel means stop.",
        "To resume, clear this task",
    ):
        assert part in line, line
    assert not Path(f"{f.work}/ft_cancel/run/{row.name}-{row.job_id}.out.airflow-cancel").exists()

    # The clear: a new try, which submits attempt 2 with a copy of its own.
    f.stack.api(
        "POST",
        "dags/ft_cancel/clearTaskInstances",
        {"dry_run": False, "dag_run_id": run_id, "task_ids": ["job"], "only_failed": True},
    )
    f.stack.poll("the cleared run to start", lambda: f.tis("ft_cancel")[0]["try_number"] > tries or None, 120)
    assert f.stack.wait_run("ft_cancel", run_id, timeout=240) == "success"
    first, second = f.xcom("ft_cancel")
    assert (first["attempt"], first["job_id"], first["state"], first["verdict"]) == (
        1, row.job_id, "CANCELLED", "fail")  # fmt: skip
    assert first["extra"] == {"slurm_state": "CANCELLED by 0", "cancelled_by": "root (uid 0)"}
    assert (second["attempt"], second["state"], second["try_number"]) == (
        2,
        "COMPLETED",
        f.tis("ft_cancel")[0]["try_number"],
    )
    assert second["script_path"] == str(copy1).replace(".attempt001.", ".attempt002.")
    assert (copy1.read_bytes(), copy1.stat().st_mtime_ns) == before  # attempt 1's copy untouched
    assert Path(first["log_path"]).read_text().startswith("started\n")
    assert Path(second["log_path"]).read_text() == "resumed\n"
    assert [r[0] for r in sacct_rows(f.cluster, row.name)] == [row.job_id, second["job_id"]]
    figure(
        f"outside scancel, then clear: attempts 1 and 2, {len(sacct_rows(f.cluster, row.name))} Slurm jobs"
    )


def test_airflow_s_retry_continues_the_attempt_numbering(faulted: Faulted) -> None:
    f = faulted
    assert f.stack.wait_run("ft_retry", f.runs["ft_retry"], timeout=300) == "success"
    (ti,) = f.tis("ft_retry")
    first, second = f.xcom("ft_retry")
    assert [(a["attempt"], a["state"], a["verdict"]) for a in (first, second)] == [
        (1, "FAILED", "fail"),
        (2, "COMPLETED", "succeed"),
    ]
    assert first["try_number"] < second["try_number"] == ti["try_number"]
    assert Path(first["script_path"]).name.endswith(".attempt001.sbatch")
    assert Path(second["script_path"]).name.endswith(".attempt002.sbatch")
    assert Path(first["script_path"]).read_text() == Path(second["script_path"]).read_text()
    assert Path(first["log_path"]).read_text() == "first\n"
    assert Path(second["log_path"]).read_text() == "second\n"


def test_script_copies_are_claimed_over_ssh_without_overwriting(
    slurm_cluster: LocalCluster, tmp_path: Path
) -> None:
    """The history is lost (a claim from 1 again): the next free name is taken, none overwritten."""
    base = naming.attempt_script_base(str(tmp_path / "run"), "af-lost")
    held = commands.AttemptSubmit(base, 1, sbatch_args=["--hold", "--output=/dev/null"])
    with SlurmHook(slurm_cluster.conn_id) as hook:
        first = hook.submit_attempt(held, "#!/bin/bash\necho one\n")
        Path(naming.attempt_script_path(str(tmp_path / "run"), "af-lost", 2)).write_text("kept\n")
        third = hook.submit_attempt(held, "#!/bin/bash\necho three\n")
        for job in (first.job_id, third.job_id):
            hook.cancel(job)
    assert (first.number, third.number) == (1, 3)
    texts = [
        Path(naming.attempt_script_path(str(tmp_path / "run"), "af-lost", n)).read_text() for n in (1, 2, 3)
    ]
    assert texts == ["#!/bin/bash\necho one\n", "kept\n", "#!/bin/bash\necho three\n"]


def test_sshd_down_60_s_then_slurmctld_down_30_s_mid_job_cost_nothing(
    faulted: Faulted, figure: Callable[[str], None]
) -> None:
    """The outages come back to back while the job logs; the trigger reconnects with backoff."""
    f = faulted
    run_id = f.runs["ft_outage"]
    row = wait_job(f.cluster, "af-ft_outage-", "RUNNING", timeout=240)
    f.stack.wait_task_state("ft_outage", run_id, "job", {"deferred"}, timeout=120)
    (ti,) = f.tis("ft_outage")
    tries = ti["try_number"]
    (f.work / "release-outage").touch()
    try:
        started = time.monotonic()
        stop_daemons(f.cluster, "sshd")
        time.sleep(60)
        f.cluster.up()
        sshd_s = time.monotonic() - started
        time.sleep(5)
        started = time.monotonic()
        stop_daemons(f.cluster, "slurmctld", "slurmdbd")
        time.sleep(30)
        f.cluster.up()
        ctld_s = time.monotonic() - started
    finally:
        f.cluster.up()  # whatever failed above, the next tests need the whole cluster
    assert wait_job(f.cluster, "af-ft_outage-", "RUNNING", timeout=30).job_id == row.job_id  # outlived both
    assert f.stack.wait_run("ft_outage", run_id, timeout=300) == "success"
    relayed = _relayed(f, row.job_id, tries, "ft_outage")
    jobs = [r[0] for r in sacct_rows(f.cluster, row.name)]
    figure(
        f"sshd down {sshd_s:.0f} s, then slurmctld+slurmdbd down {ctld_s:.0f} s: success, "
        f"{len(relayed)} lines relayed for a {OUTAGE_LINES}-line log, {len(jobs)} Slurm job, "
        f"try {f.tis('ft_outage')[0]['try_number']} of the task (was {tries})"
    )
    assert sorted(relayed) == list(range(1, OUTAGE_LINES + 1)), f"{len(relayed)} relayed lines"
    assert jobs == [row.job_id]
    assert f.tis("ft_outage")[0]["try_number"] == tries


def test_a_triggerer_restart_keeps_the_no_progress_clock(
    faulted: Faulted, figure: Callable[[str], None]
) -> None:
    """Issue 28's "bounds that survive restarts", at the worst moment: the triggerer is SIGKILLed
    once the restart loop's clock is stored, and is down 20 s. The new trigger reads the clock back
    (the ``slurm_log_relay`` XCom): the attempt is judged hung since the job first showed 37, so
    the time it says it waited reaches back before the kill. A clock started again by the new
    trigger could reach back no further than the restart."""
    f = faulted
    f.runs["ft_loop"] = run_id = f.stack.trigger("ft_loop")
    wait_job(f.cluster, "af-ft_loop-", "RUNNING", timeout=240)

    def clock_stored() -> bool | None:
        clocks = (f.xcom("ft_loop", "slurm_log_relay") or {}).get("clocks") or {}
        return clocks.get("progress_high") == 37 or None

    f.stack.poll("the no-progress clock stored", clock_stored, 120, interval=0.5)
    # When the trigger's verdict reaches the task log (the cancel comes later, from the worker).
    judged = _first_seen(f.stack.home / "logs" / "dag_id=ft_loop", "made no progress for")
    killed_at = kill_component(f.stack, "triggerer")
    time.sleep(20)
    restart_component(f.stack, "triggerer", after=killed_at)
    assert f.stack.wait_run("ft_loop", run_id, timeout=300) == "success"
    first, second = f.xcom("ft_loop")
    assert (first["state"], second["state"]) == ("HUNG", "COMPLETED"), (first, second)
    hung = first["extra"]["hung"]
    assert "its reported progress stayed at 37 while its log went on" in hung, hung
    # watchdog.duration: "45 s", "1 min 5 s", or "2 min" on a whole minute.
    quiet = re.match(rf"job {first['job_id']} made no progress for (?:(\d+) min ?)?(?:(\d+) s)?: ", hung)
    assert quiet is not None, hung
    assert quiet.group(1) or quiet.group(2), hung
    waited = 60 * int(quiet.group(1) or 0) + int(quiet.group(2) or 0)
    clock_start = judged["at"] - waited
    figure(
        f"triggerer SIGKILL + 20 s down during a restart loop: hung after {waited} s without progress "
        f"(progress_timeout {LOOP_TIMEOUT_S} s); its clock started {clock_start - killed_at:+.1f} s from "
        "the kill (+-1 s; a clock started again by the new trigger: +20 s or later)"
    )
    assert clock_start < killed_at + 5, (waited, judged, killed_at)  # kept, not started again
    assert LOOP_TIMEOUT_S <= waited <= LOOP_TIMEOUT_S + 90, hung  # the bound held (a loaded poll is late)
    assert Path(second["log_path"]).read_text() == "resumed\n"
