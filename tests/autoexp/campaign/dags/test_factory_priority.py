"""The scheduler starts a run's stage and trainings before its conversions, and its checkpoint waits last."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from airflow.models.taskinstance import TaskInstance

from autoexp.campaign.dags.factory import build_dags
from tests.airflow_versions import DagSerialization

DEMO = Path(__file__).resolve().parents[4] / "config" / "demo.yaml"


def _rank(dag: Any, task_id: str) -> int:
    """The priority_weight the scheduler gives the task's instances (TaskInstance.insert_mapping)."""
    task = dag.get_task(task_id)
    return int(
        task.weight_rule.get_weight(TaskInstance(task=task, run_id="r", map_index=0, dag_version_id=None))
    )


def test_trainings_outrank_the_checkpoint_waits_that_lead_to_more_tasks() -> None:
    built = next(d for d in build_dags(DEMO) if any(t.endswith("wait_branch_checkpoint") for t in d.task_ids))
    dag = DagSerialization.from_dict(DagSerialization.to_dict(built))
    ids = dag.task_ids
    phases = sorted({t.split(".")[0] for t in ids if t.endswith(".train")})
    cooldown = next(p for p in phases if f"{p}.wait_branch_checkpoint" in ids)
    first = next(p for p in phases if f"{p}.checkpoints.wait" in ids)
    ranks = {
        "stage": _rank(dag, "stage"),
        "train": _rank(dag, f"{first}.train"),
        "branch wait": _rank(dag, f"{cooldown}.wait_branch_checkpoint"),
        "convert": _rank(dag, f"{first}.checkpoints.convert_eval"),
        "report": _rank(dag, "report"),
        "checkpoint wait": _rank(dag, f"{first}.checkpoints.wait"),
    }
    assert list(ranks) == sorted(ranks, key=ranks.__getitem__, reverse=True), ranks
    # Airflow's default (downstream) rule ranks a wait above its training; absolute ranks do not add up.
    assert ranks["checkpoint wait"] < ranks["train"]
    assert {type(t.weight_rule).__name__ for t in dag.tasks} == {"_AbsolutePriorityWeightStrategy"}
