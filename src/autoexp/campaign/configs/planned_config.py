"""One config's plans, loaded once per parse and shared by every DAG built from it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autoexp.campaign.planning.dag_plan import DagPlan, plan_dag
from autoexp.campaign.planning.plan import ExperimentPlan, load_plans
from autoexp.campaign.planning.settings import AirflowSettings


@dataclass
class PlannedConfig:
    """The experiments' plans of one config and their DAG plans, each decided once.

    A DAG processor's parse builds the experiment DAGs, the campaign trigger DAG and the report DAG of
    every config; planning each config once for all three (not once per DAG kind) was a quarter of a
    warm parse of a 900-experiment config (bench/bench_dag_parse.py).
    """

    path: Path
    plans: list[ExperimentPlan]
    settings: AirflowSettings
    _dag_plans: dict[str, DagPlan] = field(default_factory=dict, repr=False)

    @classmethod
    def load(cls, config_path: str | Path, overrides: Sequence[str] = ()) -> PlannedConfig:
        """Raises what load_plans raises."""
        path = Path(config_path).absolute()
        plans, settings = load_plans(path, overrides)
        return cls(path, plans, settings)

    def dag_plan(self, plan: ExperimentPlan) -> DagPlan:
        found = self._dag_plans.get(plan.dag_id)
        if found is None:
            found = self._dag_plans[plan.dag_id] = plan_dag(plan, self.settings)
        return found

    def dag_plans(self) -> list[DagPlan]:
        return [self.dag_plan(plan) for plan in self.plans]
