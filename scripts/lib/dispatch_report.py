"""Readiness -> submission of every Slurm job of a finished local campaign (the demo and the seed
bench print it): sacct's Submit/End, Airflow's task instances (pool slots) and run starts over the
REST API, and the checkpoints' file times on this machine (the local cluster writes them here)."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from dispatch_latency import (
    CHECKPOINT,
    Latency,
    SlotSpan,
    Submission,
    dependencies,
    latencies,
)

from autoexp.campaign.planning.checkpoint_layout import iteration_dir
from autoexp.campaign.planning.dag_plan import DagPlan

Call = Callable[[str, str], Any]  # (method, path) -> the REST API's JSON


def epoch(stamp: str | None) -> float | None:
    if not stamp:
        return None
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:  # sacct's "Unknown" / "None"
        return None


def parse_submissions(sacct_output: str) -> list[Submission]:
    """Rows of ``sacct -X -n -P -o JobName,Submit,End`` (local times, as this machine's sacct prints)."""
    found = []
    for line in sacct_output.splitlines():
        parts = line.split("|")
        if len(parts) != 3:
            continue
        submit = epoch(parts[1])
        if submit is not None:
            found.append(Submission(parts[0], submit, epoch(parts[2])))
    return found


def sacct_submissions(since: float, env: Mapping[str, str] | None = None) -> list[Submission]:
    """The jobs submitted from ``since`` on (sacct's -S also lists jobs that ran then, e.g. of an
    earlier, stopped demo with the same job names)."""
    start = datetime.fromtimestamp(since - 60).strftime("%Y-%m-%dT%H:%M:%S")
    out = subprocess.run(
        ["sacct", "-X", "-n", "-P", "-a", "-S", start, "-o", "JobName,Submit,End"],
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
        env=dict(env) if env is not None else None,
    ).stdout
    return [s for s in parse_submissions(out) if s.submit >= int(since)]


def checkpoint_written(path: str, iteration: int) -> float | None:
    """When the iteration's folder got its last file (None: no such folder here)."""
    folder = Path(path) / iteration_dir(iteration)
    times = [
        os.stat(os.path.join(root, name)).st_mtime for root, _, names in os.walk(folder) for name in names
    ]
    return max(times, default=None)


def slot_spans(call: Call, pool: str, dag_ids: Sequence[str]) -> list[SlotSpan]:
    """Every task instance of ``pool`` in the DAGs' runs: held from its first start or queueing to its end."""
    spans = []
    for dag_id in dag_ids:
        listing = call("GET", f"dags/{dag_id}/dagRuns/~/taskInstances?pool={pool}&limit=1000")
        for ti in listing["task_instances"]:
            starts = [t for t in (epoch(ti.get("queued_when")), epoch(ti.get("start_date"))) if t is not None]
            if starts:
                key = (str(ti["dag_id"]), str(ti["task_id"]), int(ti["map_index"]))
                spans.append(SlotSpan(key, min(starts), epoch(ti.get("end_date"))))
    return spans


def dispatch_latencies(
    call: Call,
    dags: Sequence[DagPlan],
    runs: Mapping[str, str],
    submissions: Sequence[Submission],
    pool: str,
    slots: int,
) -> list[Latency]:
    """Latency of every submission of the runs' DAGs (``runs``: DAG id -> the run that was measured)."""
    deps, ready = {}, {}
    for dag in dags:
        dag_id = dag.experiment.dag_id
        if dag_id not in runs:
            continue
        run_start = epoch(call("GET", f"dags/{dag_id}/dagRuns/{runs[dag_id]}").get("start_date"))
        for name, dep in dependencies(dag).items():
            deps[name] = dep
            when = checkpoint_written(dep.path, dep.iteration) if dep.kind == CHECKPOINT else run_start
            if when is not None:
                ready[name] = when + dep.settle_seconds
    spans = slot_spans(call, pool, list(runs))
    return latencies(submissions, deps, ready, spans, slots)
