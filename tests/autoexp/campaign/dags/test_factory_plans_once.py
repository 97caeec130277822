"""A DAG processor's parse plans each config once for its experiment DAGs, trigger DAG and report DAG."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from autoexp.campaign.configs import planned_config
from autoexp.campaign.dags.factory import register
from autoexp.campaign.planning import dag_plan
from autoexp.campaign.planning.campaign_slice import campaign_dag_id, campaign_report_dag_id

DEMO = Path(__file__).resolve().parents[4] / "config" / "demo.yaml"


def _counted(monkeypatch: pytest.MonkeyPatch, module: Any, name: str) -> list[int]:
    calls: list[int] = []
    real = getattr(module, name)

    def counting(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, counting)
    return calls


def test_each_config_is_planned_once_per_parse(monkeypatch: pytest.MonkeyPatch) -> None:
    # Planning three times (once per DAG kind) was a quarter of a warm parse of 900 experiments.
    monkeypatch.setenv("AUTOEXP_CACHE_DIR", "off")
    campaigns = _counted(monkeypatch, planned_config, "plan_campaign")  # as load_plans calls it
    phases = _counted(monkeypatch, dag_plan, "_phase_tasks")
    namespace: dict[str, Any] = {}
    ids = register(namespace, [DEMO])
    campaign = {campaign_dag_id(DEMO), campaign_report_dag_id(DEMO)}
    assert campaign <= set(ids)
    experiments = [namespace[i] for i in ids if i not in campaign]
    assert len(experiments) == 9  # config/demo.yaml: 3 sizes x 3 learning rates
    assert len(campaigns) == 1
    # One DAG plan per experiment: one call per phase of each (a phase is a task group of its DAG).
    groups = sum(len(dag.task_group.children) - 2 for dag in experiments)  # less stage and report
    assert len(phases) == groups
