"""Airflow's HA mode: the reduced demo on two schedulers and two triggerers sharing one PostgreSQL.

The triggerer that runs the pretraining's job trigger is SIGKILLed while the job runs: the other
triggerer adopts the trigger once the dead one's heartbeat is stale, the run still succeeds, no Slurm
job is submitted twice, and no line of the job's log is relayed twice into the task log.
"""

from __future__ import annotations

import collections
import json
import re
import signal
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.campaign import DAG_ID, demo_job_names, prepare_data, reduced_config, sacct_names, start_stack
from tests.fixtures.stack_api import xcom
from tests.fixtures.stack_restart import kill_component

pytestmark = [pytest.mark.slurm, pytest.mark.airflow, pytest.mark.ml, pytest.mark.slow]

TRIGGERERS = ("triggerer", "triggerer_2")


def _triggerer_ids(stack: Any) -> dict[str, int]:
    """Process key -> triggerer job id: the replica started after the first one heartbeat
    (``AirflowStack.start``), so the lower id of the two live ones is the first's."""
    jobs = stack.api("GET", "jobs?job_type=TriggererJob&is_alive=true")["jobs"]
    ids = sorted(int(job["id"]) for job in jobs)
    return dict(zip(TRIGGERERS, ids, strict=True)) if len(ids) == 2 else {}


def _trigger_logs(stack: Any, dag_run: str, task: str) -> list[Path]:
    """The task's trigger log files, ``attempt=1.log.trigger.<triggerer job id>.log``, oldest first."""
    base = stack.home / "logs" / f"dag_id={DAG_ID}" / f"run_id={dag_run}" / f"task_id={task}"
    return sorted(base.glob("attempt=1.log.trigger.*.log"), key=lambda p: p.stat().st_mtime)


def _holder(stack: Any, dag_run: str, task: str, ids: dict[str, int]) -> str | None:
    """The triggerer that wrote ``task``'s trigger log last (the one that runs its trigger now)."""
    logs = _trigger_logs(stack, dag_run, task)
    if not logs:
        return None
    job = int(logs[-1].name.split(".")[-2])
    return next((key for key, ident in ids.items() if ident == job), None)


def _relayed(log_text: str) -> collections.Counter[str]:
    """Each line the triggers relayed from the Slurm log, from their log files (the worker's part of
    the task log has ``[slurm <id>]`` lines of its own); an event carries several lines."""
    lines: collections.Counter[str] = collections.Counter()
    for record in log_text.splitlines():
        if not record.startswith("{"):
            continue
        event = str(json.loads(record).get("event", ""))
        lines.update(
            re.sub(r"^\[slurm \d+\] ", "", ln) for ln in event.split("\n") if ln.startswith("[slurm ")
        )
    return lines


def _train_job_id(stack: Any, run_id: str) -> str:
    (attempt,) = xcom(stack, DAG_ID, run_id, "pretrain.train")
    return str(attempt["job_id"])


def test_two_schedulers_two_triggerers_survive_a_killed_triggerer(
    tmp_path: Path, slurm_cluster: Any, airflow_stack_factory: Any
) -> None:
    demo_dir = tmp_path / "campaign"
    prepare_data(demo_dir, slurm_cluster)
    config = reduced_config(tmp_path)
    stack = start_stack(airflow_stack_factory, config, demo_dir, {"scheduler": 2, "triggerer": 2})
    assert {"scheduler_2", "triggerer_2"} <= set(stack.procs)
    run_id = stack.trigger(DAG_ID, {"phases": ["pretrain", "cooldown_8K"], "max_attempts": 3}, timeout=300)
    stack.wait_task_state(DAG_ID, run_id, "pretrain.train", {"deferred"}, timeout=300)
    ids = stack.poll("two live triggerers", lambda: _triggerer_ids(stack) or None, 120)
    train = "pretrain.train"
    holder = stack.poll("the triggerer of pretrain.train", lambda: _holder(stack, run_id, train, ids), 120)
    survivor = next(k for k in TRIGGERERS if k != holder)
    kill_component(stack, holder, signal.SIGKILL)
    del stack.procs[holder]  # dead on purpose: the stack's liveness checks watch the others
    stack.poll(
        f"{survivor} to adopt the trigger of pretrain.train",
        lambda: _holder(stack, run_id, train, ids) == survivor or None,
        timeout=240,
        interval=3,
    )
    assert stack.wait_run(DAG_ID, run_id, timeout=900, poll=5) == "success", stack.task_states(DAG_ID, run_id)

    # No job twice: each of the run's jobs, by its run-independent name, was submitted once.
    names = collections.Counter(line.split("|")[1] for line in sacct_names(slurm_cluster, ""))
    expected = demo_job_names(config, demo_dir)
    assert {name: names[name] for name in expected} == dict.fromkeys(expected, 1), names

    # The relay went on from where the dead triggerer stopped: no line of the job's log twice.
    relayed = _relayed("\n".join(p.read_text() for p in _trigger_logs(stack, run_id, train)))
    (job_log,) = (demo_dir / "runs").rglob(f"*-{_train_job_id(stack, run_id)}.out")
    written = collections.Counter(job_log.read_text().splitlines())
    assert any("iteration" in line for line in relayed), relayed
    assert relayed - written == collections.Counter(), relayed - written
