"""The campaign report DAG of one config (``autoexp_campaign_report_<stem>``): refreshed whenever an
experiment DAG's report task updates its Asset, and triggerable by hand."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, AssetAny, BaseOperator, Context, Param

from autoexp.campaign.configs.planned_config import PlannedConfig
from autoexp.campaign.planning.campaign_slice import campaign_report_dag_id
from autoexp.campaign.planning.dag_plan import DagPlan
from autoexp.campaign.planning.settings import AirflowSettings
from autoexp.campaign.report import campaign_report as cr
from autoexp.campaign.tasks import campaign_report_task


class CampaignReportOperator(BaseOperator):
    """Build the campaign report.

    :param report_args: keyword arguments of ``campaign_report_task.build_campaign_report``.
    """

    ui_color = "#fee8c8"

    def __init__(self, *, report_args: Mapping[str, Any], **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.report_args = dict(report_args)

    def execute(self, context: Context) -> dict[str, Any]:
        return campaign_report_task.build_campaign_report(context=context, **self.report_args)


def eval_asset(dag_plan: DagPlan, settings: AirflowSettings) -> Asset:
    """The Asset an experiment DAG's report task updates (must equal factory.materialize's outlet)."""
    return Asset(
        name=f"autoexp.{dag_plan.experiment.dag_id}.eval_results",
        uri=f"slurm://{settings.ssh_conn_id}{dag_plan.eval_results_dir}",
    )


def report_dag(config_path: Path, dag_plans: list[DagPlan], settings: AirflowSettings) -> DAG:
    """The report DAG of one config's planned experiments."""
    stem = config_path.stem
    assets = [eval_asset(d, settings) for d in dag_plans]
    with DAG(
        dag_id=campaign_report_dag_id(config_path),
        # Any one experiment finishing refreshes the report (a list would wait for all of them).
        schedule=AssetAny(*assets) if assets else None,
        start_date=datetime.fromisoformat(settings.start_date),
        catchup=False,
        max_active_runs=1,
        tags=[*settings.tags, "campaign-report"],
        is_paused_upon_creation=settings.paused,
        default_args={
            "owner": settings.owner,
            "retries": settings.retries,
            "retry_delay": timedelta(seconds=settings.retry_delay_secs),
        },
        params={
            "budgets": Param(
                [],
                type="array",
                items={"type": "number", "exclusiveMinimum": 0},
                title="Compute budgets (FLOPs)",
                description="budgets to predict the compute-optimal N and D for, e.g. 1e21",
            )
        },
        description=f"campaign report of {stem}: grid, frontier, scaling-law fit, GPU-hours",
    ) as dag:
        CampaignReportOperator(
            task_id="campaign_report",
            report_args={
                "stem": stem,
                "ssh_conn_id": settings.ssh_conn_id,
                # sacct lists jobs since this day (without -S it shows only today's).
                "since": settings.start_date[:10],
                "specs": [s.to_dict() for s in cr.experiment_specs(dag_plans)],
            },
        )
    return dag


def campaign_report_dag(config_path: str | Path, planned: PlannedConfig | None = None) -> DAG:
    """The report DAG of one config file (``planned``: the config as this parse planned it)."""
    path = Path(config_path).absolute()
    planned = planned or PlannedConfig.load(path)
    return report_dag(path, planned.dag_plans(), planned.settings)
