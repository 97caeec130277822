"""Benchmark: what a checkpoint wait started by the triggerer holds of its DAG, with and without release.

A wait that starts its task (``start_from_trigger``) gets a task instance built, as the triggerer
builds it (``TriggerRunner.create_runtime_ti``), from its own deserialized copy of the whole DAG;
its template context, which the triggerer keeps for the trigger's life, holds the DAG too. For the
largest DAG of config/scaling_exps.yaml this prints the memory each started wait keeps (tracemalloc,
after a full collection) as built, and after ``release_task``; and how many waits the seed defers at
once (every wait of a running DAG run is deferred from the run's start: they run "always").
Run: .venv/bin/python bench/bench_trigger_memory.py
"""

from __future__ import annotations

import gc
import sys
import tracemalloc
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
_WAITS = 40  # started waits measured per case


def _runtime_tis(dag: Any, data: dict[str, Any], task_id: str, count: int) -> list[Any]:
    from airflow.executors.workloads.task import TaskInstanceDTO
    from airflow.jobs.triggerer_job_runner import TriggerRunner

    now = datetime(2026, 12, 2, tzinfo=UTC)
    run = {"dag_id": dag.dag_id, "run_id": "r1", "logical_date": None, "data_interval_start": None,
           "data_interval_end": None, "run_after": now, "start_date": now, "end_date": None,
           "run_type": "manual", "state": "running", "consumed_asset_events": [],
           "partition_key": None}  # fmt: skip
    kept = []
    for index in range(count):
        ti = TaskInstanceDTO(
            id=uuid.uuid4(), task_id=task_id, dag_id=dag.dag_id, run_id="r1", try_number=1,
            map_index=index, dag_version_id=uuid.uuid4(), pool_slots=1, priority_weight=1,
        )  # fmt: skip
        runtime = TriggerRunner.create_runtime_ti(ti, data, run)
        kept.append((runtime, runtime.get_template_context()))  # what the triggerer holds
    return kept


def per_wait(dag: Any, data: dict[str, Any], task_id: str, release: Callable[[Any], None] | None) -> float:
    """Bytes each started wait keeps."""
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    kept = _runtime_tis(dag, data, task_id, _WAITS)
    if release is not None:
        for runtime, _ in kept:
            release(runtime)
    gc.collect()
    after = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    del kept
    return (after - before) / _WAITS


def main() -> int:
    from airflow.serialization.serialized_objects import DagSerialization
    from slurm_operator.airflow_internals import release_task

    from autoexp.campaign.configs.planned_config import PlannedConfig
    from autoexp.campaign.dags import factory

    planned = PlannedConfig.load(REPO / "config" / "scaling_exps.yaml")
    dags = factory.build_dags(planned.path, planned=planned)
    waits = {d.dag_id: [t for t in d.tasks if t.task_id.endswith("wait")] for d in dags}
    deferred = sum(
        (len(p.checkpoints.instances) if p.checkpoints is not None else 0) + (p.branch_wait is not None)
        for dp in planned.dag_plans()
        for p in dp.phases
    )
    largest = max(dags, key=lambda d: len(d.tasks))
    data = DagSerialization.to_dict(largest)
    task_id = next(t.task_id for t in waits[largest.dag_id] if t.task_id.endswith("checkpoints.wait"))
    kept = per_wait(largest, data, task_id, None)
    released = per_wait(largest, data, task_id, release_task)
    print(f"largest DAG {largest.dag_id}: {len(largest.tasks)} tasks")
    print(f"KB kept per started wait: {kept / 1024:.1f} as built, {released / 1024:.1f} after release_task")
    print(
        f"seed: {len(dags)} DAGs, {deferred} checkpoint wait instances deferred when all runs are running:"
        f" ~{deferred * kept / 2**20:.0f} MB vs ~{deferred * released / 2**20:.0f} MB in the triggerer"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
