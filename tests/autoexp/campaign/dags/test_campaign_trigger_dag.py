"""The campaign trigger DAG as built at parse time: its form, its tasks, its place next to the experiments.
(That it triggers the experiments is tested on a real stack: tests/e2e/test_campaign_ui.py.)"""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException

from autoexp.campaign.dags.approvals import BudgetApproval
from autoexp.campaign.dags.campaign_trigger_dag import build_campaign_trigger_dag, select_task
from autoexp.campaign.dags.factory import register
from tests.e2e.campaign import reduced_config
from tests.support.checkout import REPO_ROOT

DEMO = REPO_ROOT / "config" / "demo.yaml"
AXES = ["EXPERIMENTS", "LR", "BIAS", "PHASE", "CD_SCALE", "DATASET"]


def test_the_form_has_one_multi_select_per_axis_and_defaults_to_everything() -> None:
    dag = build_campaign_trigger_dag(DEMO)
    assert dag.dag_id == "autoexp_campaign_demo"
    schemas = {name: dag.params.get_param(name).schema for name in dag.params}
    assert list(schemas) == ["EXPERIMENTS", "LR", "PHASE", "CD_SCALE", "filters", "wait", "dry_run"]
    # ``examples`` on an array Param is what makes Airflow's form draw a multi-select.
    assert schemas["LR"] == {
        "type": "array",
        "items": {"type": "string", "enum": ["0.002", "0.006", "0.018"]},
        "examples": ["0.002", "0.006", "0.018"],
        "title": "LR",
    }
    assert dag.params.get_param("LR").description == (
        "keep the jobs whose LR is one of these; none picked: every value"
    )
    defaults = dag.params.dump()
    assert defaults == {
        "EXPERIMENTS": [],
        "LR": [],
        "PHASE": [],
        "CD_SCALE": [],
        "filters": "",
        "wait": False,
        "dry_run": False,
    }


def test_one_mapped_trigger_per_experiment_named_by_it() -> None:
    dag = build_campaign_trigger_dag(DEMO)
    assert sorted(dag.task_dict) == ["select", "summary", "trigger"]
    trigger = dag.task_dict["trigger"]
    assert trigger.partial_kwargs["map_index_template"] == "{{ task.trigger_dag_id }}"
    # Waiting for the triggered runs happens in the triggerer, not in a worker slot.
    assert trigger.partial_kwargs["deferrable"] is True
    assert trigger.partial_kwargs["execution_timeout"] == timedelta(days=14)
    assert dag.task_dict["summary"].trigger_rule == "all_done"
    assert dag.task_dict["select"].downstream_task_ids == {"trigger"}


def test_select_turns_the_params_into_one_trigger_per_experiment() -> None:
    params: dict[str, Any] = {"EXPERIMENTS": ["small"], "filters": "PHASE=PRETRAIN", "wait": True}
    chosen = select_task(str(DEMO), AXES, params)
    note = "triggered by autoexp_campaign_demo: slice EXPERIMENTS=small PHASE=PRETRAIN: 3 experiment(s)"
    assert chosen == [
        {
            "trigger_dag_id": dag_id,
            "conf": {"dry_run": False, "phases": ["pretrain"]},
            "wait_for_completion": True,
            "note": note,
        }
        for dag_id in (
            "demo_demo_small_lr0.002_bs4",
            "demo_demo_small_lr0.006_bs4",
            "demo_demo_small_lr0.018_bs4",
        )
    ]


def test_a_bad_or_empty_slice_fails_the_run_with_one_line() -> None:
    with pytest.raises(AirflowException, match=r"^filter SIZE=1: no experiment has SIZE"):
        select_task(str(DEMO), AXES, {"filters": "SIZE=1"})
    with pytest.raises(AirflowException, match=r"^slice LR=0.5: 0 experiment\(s\): nothing to trigger$"):
        select_task(str(DEMO), AXES, {"LR": ["0.5"]})


def test_the_dag_file_registers_it_next_to_the_experiments() -> None:
    namespace: dict[str, Any] = {}
    ids = register(namespace, [DEMO])
    assert ids[-2:] == ["autoexp_campaign_demo", "autoexp_campaign_report_demo"]
    assert len(ids) == 9 + 2  # the demo's experiments, its trigger DAG and its report DAG


class _Ti:
    """The XCom calls of a task instance, recorded (pure logic: what select hands the approval)."""

    def __init__(self, pulled: Any = None) -> None:
        self.pushed: dict[str, Any] = {}
        self.pulled = pulled

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value

    def xcom_pull(self, task_ids: str, key: str) -> Any:
        assert (task_ids, key) == ("select", "estimate")
        return self.pulled


def _gated(tmp_path: Path, gate: str) -> Path:
    return reduced_config(tmp_path, ("  paused: false\n", f"  paused: false\n  gate: {gate}\n"))


def test_without_a_gate_there_is_no_approval_task() -> None:
    dag = build_campaign_trigger_dag(DEMO)
    assert "approve" not in dag.task_dict


def test_a_gate_puts_the_approval_between_select_and_the_triggers(tmp_path: Path) -> None:
    dag = build_campaign_trigger_dag(
        _gated(tmp_path, "{gpu_hours_threshold: 1, approval_timeout_secs: 3600}")
    )
    approve = dag.task_dict["approve"]
    assert isinstance(approve, BudgetApproval)
    # select also feeds the triggers their kwargs; Reject skips approve's downstream, the triggers.
    assert dag.task_dict["trigger"].upstream_task_ids == {"select", "approve"}
    assert approve.upstream_task_ids == {"select"}
    assert approve.downstream_task_ids == {"trigger"}
    assert approve.response_timeout == timedelta(hours=1)


def test_select_hands_the_estimate_and_the_verdict_to_the_approval(tmp_path: Path) -> None:
    config = _gated(tmp_path, "{gpu_hours_threshold: 1.0e-9}")
    ti = _Ti()
    select_task(str(config), AXES, {}, ti)
    estimate = ti.pushed["estimate"]
    assert estimate["approval"] is True
    assert estimate["gpu_hours"] > 1.0e-9
    assert estimate["text"].startswith(f"estimate: {estimate['gpu_hours']:.2g} GPU-hours for 2 training(s)")
    ti = _Ti()
    select_task(str(_gated(tmp_path, "{gpu_hours_threshold: 1000}")), AXES, {}, ti)
    assert ti.pushed["estimate"]["approval"] is False


def test_the_approval_asks_nobody_when_the_estimate_is_below_the_threshold() -> None:
    approve = BudgetApproval(task_id="approve")
    # Returns before it writes any request: nothing waits, the triggers run.
    assert approve.execute({"ti": _Ti({"text": "estimate: 0.0 GPU-hours", "approval": False})}) is None
    assert approve.subject == "Start this slice?"
