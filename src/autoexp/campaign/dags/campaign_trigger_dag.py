"""The campaign trigger DAG of a config (``autoexp_campaign_<stem>``): select a slice, trigger its DAGs.

Its trigger form offers one multi-select per grid axis (empty = every value) and a free-text filter
in the CLI's syntax; what the slice selects is decided in planning/campaign_slice.py. One mapped
TriggerDagRunOperator instance per selected experiment, named by it; the ``summary`` task logs
and returns what was started. The select task also estimates the slice's GPU-hours
(planning/cost_estimate.py); with ``airflow.gate`` set, an ``approve`` task between select and the
triggers asks a human (Airflow's human-in-the-loop approval: the task waits without a worker slot;
``approvals.BudgetApproval``) when the estimate passes the threshold. Reject, or no answer in time,
and nothing is triggered.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.python import PythonOperator
from airflow.providers.standard.operators.trigger_dagrun import XCOM_RUN_ID, TriggerDagRunOperator
from airflow.sdk import DAG, Param, ParamsDict  # type: ignore[attr-defined,unused-ignore]  # not in its 3.3.2 stub
from airflow.sdk.exceptions import AirflowException

from autoexp.campaign.configs.planned_config import PlannedConfig, load_plans
from autoexp.campaign.dags.approvals import ESTIMATE_KEY, BudgetApproval
from autoexp.campaign.planning import campaign_slice as cs
from autoexp.campaign.planning import cost_estimate
from autoexp.campaign.planning.settings import AirflowSettings

log = logging.getLogger(__name__)
TRIGGER_TASK = "trigger"
# How long a trigger waits for its run when the Wait box is ticked: longer than a pretraining of the
# seed campaign with its resubmissions; past it the trigger task fails, the experiment's run goes on.
WAIT_LIMIT = timedelta(days=14)
FILTERS_PARAM = "filters"
APPROVE_TASK = "approve"


def select_task(
    config_path: str, axes: list[str], params: dict[str, Any], ti: Any = None
) -> list[dict[str, Any]]:
    """The select task: the slice's experiments as TriggerDagRunOperator kwargs (one dict each);
    the slice's estimate goes to the log and, for the approval, to XCom ``estimate``."""
    plans, settings = load_plans(config_path)
    table = cs.slice_table(plans, axes, settings.keys, every_variable=True)
    try:
        filters = cs.merge_filters(
            {a: params.get(a) or [] for a in axes},
            cs.parse_filter_text(str(params.get(FILTERS_PARAM) or "")),
        )
        selected = cs.select_slice(table, filters)
    except cs.SliceError as exc:
        raise AirflowException(str(exc)) from None
    text = cs.summary(selected, filters)
    log.info("%s", text)
    if not selected:
        raise AirflowException(f"{text}: nothing to trigger")
    cost = cost_estimate.slice_cost(plans, selected, settings.keys, settings.gate)
    estimate = cost_estimate.estimate(cost, settings.gate)
    log.info("%s", estimate.text)
    if ti is not None:
        ti.xcom_push(ESTIMATE_KEY, asdict(estimate))  # {"text", "gpu_hours", "approval"}
    note = f"triggered by {cs.campaign_dag_id(config_path)}: {text.splitlines()[0]}"
    conf = {"dry_run": bool(params.get("dry_run"))}
    return [
        {
            "trigger_dag_id": s.dag_id,
            "conf": {**conf, "phases": list(s.phases)},
            "wait_for_completion": bool(params.get("wait")),
            "note": note,
        }
        for s in selected
    ]


def summary_task(ti: Any) -> dict[str, str]:
    """What the run started: experiment DAG id -> its run id (the log says it, the XCom holds it)."""
    kwargs = ti.xcom_pull(task_ids="select") or []
    run_ids = ti.xcom_pull(task_ids=TRIGGER_TASK, key=XCOM_RUN_ID, map_indexes=list(range(len(kwargs))))
    if not isinstance(run_ids, list):
        run_ids = [run_ids]
    started = {k["trigger_dag_id"]: str(r) for k, r in zip(kwargs, run_ids, strict=False) if r}
    lines = [f"  {dag_id}: run {run_id}" for dag_id, run_id in started.items()]
    estimate = ti.xcom_pull(task_ids="select", key=ESTIMATE_KEY) or {}
    log.info(
        "started %d of %d experiment run(s):\n%s\n%s",
        len(started),
        len(kwargs),
        "\n".join(lines),
        estimate.get("text", ""),
    )
    return started


def _params(choices: dict[str, list[str]]) -> ParamsDict:
    params: dict[str, Param] = {
        axis: Param(
            [],
            type="array",
            items={"type": "string", "enum": values},
            # ``examples`` makes the trigger form draw a multi-select (see dag_params.experiment_params).
            examples=values,
            title=axis,
            description=f"keep the jobs whose {axis} is one of these; none picked: every value",
        )
        for axis, values in choices.items()
    }
    params[FILTERS_PARAM] = Param(
        "",
        type="string",
        title="More filters",
        description="as on the command line: KEY=V1,V2 KEY2=V3 (any variable of the config)",
    )
    params["wait"] = Param(
        False, type="boolean", title="Wait", description="this run ends when the triggered runs end"
    )
    params["dry_run"] = Param(
        False, type="boolean", title="Dry run", description="the triggered runs submit nothing"
    )
    return ParamsDict(params)


def build_campaign_trigger_dag(config_path: str | Path, planned: PlannedConfig | None = None) -> DAG:
    """The trigger DAG of one config (raises what load_plans raises: the caller reports it).
    ``planned``: the config as this parse planned it."""
    path = Path(config_path).absolute()
    planned = planned or PlannedConfig.load(path)
    plans, settings = planned.plans, planned.settings
    axes = [a for a in cs.grid_axes(path) if a != settings.keys.mode]
    choices = cs.axis_choices(cs.slice_table(plans, axes, settings.keys), axes)
    return _dag(path, settings, choices, axes, len(plans))


def _dag(
    path: Path, settings: AirflowSettings, choices: dict[str, list[str]], axes: list[str], count: int
) -> DAG:
    with DAG(
        dag_id=cs.campaign_dag_id(path),
        schedule=None,
        start_date=datetime.fromisoformat(settings.start_date),
        catchup=False,
        tags=[*settings.tags, "campaign"],
        is_paused_upon_creation=False,
        default_args={"owner": settings.owner},
        description=f"trigger a slice of the {count} experiments of {path.name} (default: all)",
        doc_md=(
            f"Triggers the experiment DAGs of `{path}` that the filters select (the same filters "
            "as `autoexp list`); each triggered run drives only the selected phases. Trigger with "
            "the defaults to start the whole campaign."
        ),
    ) as dag:
        select = PythonOperator(
            task_id="select",
            python_callable=select_task,
            op_kwargs={"config_path": str(path), "axes": axes},
        )
        trigger = TriggerDagRunOperator.partial(
            task_id=TRIGGER_TASK,
            map_index_template="{{ task.trigger_dag_id }}",
            deferrable=True,
            execution_timeout=WAIT_LIMIT,
            poke_interval=max(5, int(settings.poll_interval_secs)),
            openlineage_inject_parent_info=False,
        ).expand_kwargs(select.output)
        summary = PythonOperator(task_id="summary", python_callable=summary_task, trigger_rule="all_done")
        if settings.gate.enabled:
            approve = BudgetApproval(
                task_id=APPROVE_TASK,
                response_timeout=timedelta(seconds=settings.gate.approval_timeout_secs),
            )
            select >> approve >> trigger
        trigger >> summary
    dag.params = _params(choices)
    return dag
