"""A config file -> its plans (through the expansion cache), loaded once per parse and shared by every DAG
built from it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from autoexp.campaign.configs import cache
from autoexp.campaign.planning.dag_plan import DagPlan, plan_dag
from autoexp.campaign.planning.plan import ExperimentPlan, plan_campaign
from autoexp.campaign.planning.settings import AirflowSettings, parse_settings


def load_plans(
    config_path: str | Path, overrides: Sequence[str] = ()
) -> tuple[list[ExperimentPlan], AirflowSettings]:
    """Load, expand and plan one config (through the expansion cache); raises ConfigError, SettingsError,
    PlanError or OSError."""
    path = Path(config_path).absolute()
    folder = cache.cache_dir()
    st = path.stat()  # before the read: the id list is stamped with what was read, or older
    key = cache.cache_key(path.read_bytes(), overrides, path) if folder is not None else ""
    hit = cache.load(key, folder)
    if hit is not None:
        raw, slim_jobs = hit
        settings = parse_settings(raw, path)
        plans = plan_campaign(slim_jobs, settings)
    else:
        from autoexp.config import expand, load_config  # only a miss pays for importing the engine

        config = load_config(path, overrides)
        settings = parse_settings(config.airflow, path)
        jobs = expand(config)
        plans = plan_campaign(jobs, settings)  # the full jobs: errors name the file and line
        if folder is not None:
            cache.store(key, folder, config.airflow, cache.slim(jobs, settings))
    # Before any DAG is built: the other DAG files check their ids against these (config_set.py).
    if not overrides:  # what the DAG files plan
        cache.store_ids(path, st, folder, {plan.dag_id: plan.name for plan in plans})
    return plans, settings


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
