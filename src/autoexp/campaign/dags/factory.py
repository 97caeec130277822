"""DAG factory: DAG plans -> Airflow DAGs (the only module that builds DAGs; it decides nothing)."""

from __future__ import annotations

import logging
from collections.abc import Callable, MutableMapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG, Asset, TaskGroup, get_parsing_context, task_group

from autoexp.campaign.alerts.notifier import dag_alerts, resubmit_alerts, rollback_alerts, task_alerts
from autoexp.campaign.configs.config_set import clash_message, clashes
from autoexp.campaign.configs.config_source import config_hash, env_values
from autoexp.campaign.configs.planned_config import PlannedConfig
from autoexp.campaign.dags.dag_params import experiment_params
from autoexp.campaign.dags.gc_pause import gc_paused
from autoexp.campaign.dags.mapped_instances import Instances
from autoexp.campaign.planning import task_priority as rank
from autoexp.campaign.planning.campaign_slice import campaign_dag_id, campaign_report_dag_id
from autoexp.campaign.planning.dag_docs import doc_md, phase_choices
from autoexp.campaign.planning.dag_plan import (
    ARM_WAITS_TASK,
    CONVERT_TASK,
    TRAIN_TASK,
    CheckpointsPlan,
    DagPlan,
    PhaseTasksPlan,
    WaitPlan,
)
from autoexp.campaign.planning.plan import config_errors
from autoexp.campaign.planning.settings import AirflowSettings
from autoexp.campaign.tasks.operators import (
    CampaignSlurmOperator,
    CheckpointWait,
    ReportOperator,
    StageOperator,
)

log = logging.getLogger(__name__)
_MAX_ACTIVE_TASKS = 64


class CampaignConfigError(Exception):
    """Raised by a broken config's placeholder DAG at validation; Airflow shows it as an import error."""


class BrokenConfigDag(DAG):
    """Stands in for the DAGs of a config that failed to load.

    Airflow bags the DAGs of a file one by one and records an import error for each DAG whose
    ``validate()`` raises; so a broken config shows its one-line error in the UI while the DAGs of
    the other configs in the same file are still registered.
    """

    def validate(self) -> None:
        raise CampaignConfigError(self.description or "broken config")


def _wait_task(
    task_id: str,
    wait: WaitPlan,
    iteration: Any,
    ssh_conn_id: str,
    priority: int,
    label: str | None = None,
    iterations: Sequence[int] = (),
    trigger_rule: str = "all_success",
) -> CheckpointWait:
    return CheckpointWait(
        task_id=task_id,
        priority_weight=priority,
        trigger_rule=trigger_rule,
        map_index_template=label,
        phase=wait.phase,
        ssh_conn_id=ssh_conn_id,
        checkpoint_dir=wait.checkpoint_dir,
        iteration=iteration,
        state_dir=wait.state_dir,
        watch_phase=wait.watch_phase,
        watch_output=wait.watch_output,
        watch_job_name=wait.watch_job_name,
        timeout_secs=wait.timeout_secs,
        poll_interval=wait.poll_interval,
        settle_seconds=wait.settle_seconds,
        iterations=iterations,
    )


def _checkpoint_group(
    phase: PhaseTasksPlan, group: CheckpointsPlan, settings: AirflowSettings, dag_plan: DagPlan, train: Any
) -> Any:
    """Mapped task group: one instance per expected iteration, wait for the checkpoint, then convert+eval."""

    def label(iteration: str) -> str:
        # Rendered per instance after its templated fields (mapped arguments) are resolved, so
        # ``task`` holds this instance's values; Airflow stores it as the TI's rendered_map_index.
        return f"{{% set iteration = {iteration} | int %}}{group.label}"

    # Clearing the training (with its downstream tasks, the UI's default) must re-arm the waits its
    # stop ended; they run beside it, which only "always" allows, and Airflow refuses that trigger
    # rule inside a mapped group: so an empty task that runs "always" leads to them.
    arm = EmptyOperator(task_id=ARM_WAITS_TASK, trigger_rule="always", priority_weight=rank.CHECKPOINT_WAIT)
    train >> arm
    iterations = [int(values["iteration"]) for values in group.instances]
    # A shared job's environment names no iteration: the instance's comes from its map index.
    convert_iteration = (
        f"{iterations}[ti.map_index]" if group.shared_environment else "task.environment.CKPT_ITER"
    )

    # Each argument is resolved per instance from its dict of ``group.instances``.
    @task_group(group_id="checkpoints")
    def checkpoints(iteration: Any, ckpt_iter: Any, completion: Any, output_path: Any, job_name: Any) -> None:
        wait = _wait_task(
            "wait",
            group.wait,
            iteration,
            settings.ssh_conn_id,
            rank.CHECKPOINT_WAIT,
            label("task.iteration"),
            iterations,
        )
        convert = CampaignSlurmOperator(
            task_id=CONVERT_TASK,
            priority_weight=rank.CONVERT,
            map_index_template=label(convert_iteration),
            phase=phase.key,
            ssh_conn_id=settings.ssh_conn_id,
            script_path=group.script_path,
            remote_dir=dag_plan.remote_dir,
            # The operator copies the mapping at build time; the value inside is resolved per instance.
            environment=dict(group.shared_environment) or {"CKPT_ITER": ckpt_iter},
            completion_command=completion,
            output_path=output_path,
            job_name=job_name,
            submit_lock=dag_plan.submit_lock,
            max_attempts=settings.max_attempts,
            max_attempts_without_progress=settings.max_attempts_without_progress,
            max_attempts_overall=settings.max_attempts_overall,
            poll_interval=phase.poll_interval,
            unknown_timeout=settings.unknown_timeout,
            pool=settings.pool_name,
        )
        wait >> convert

    mapped = checkpoints.expand_kwargs(Instances(dict(values) for values in group.instances))
    arm >> mapped
    return mapped


def _phase_tasks(
    phase: PhaseTasksPlan, dag_plan: DagPlan, settings: AirflowSettings
) -> tuple[Any, list[Any], Any, Any]:
    """Branch wait, training, mapped conversion -> (group, last tasks, training, branch wait).

    No gate or start-condition tasks: the phase tasks check the ``phases`` Param themselves and the
    training runs the start condition before submitting (fewer tasks to build at parse time).
    Every wait is downstream of the training it watches (see ``_wait_task``).
    """
    state_dir, train_plan = dag_plan.state_dir, phase.train
    with TaskGroup(group_id=phase.key) as group:
        head = None
        if phase.branch_wait is not None:
            branch = phase.branch_wait
            # Downstream of the training it watches (so that clearing that training re-arms it),
            # and "always": it runs beside it.
            head = _wait_task(
                "wait_branch_checkpoint",
                branch,
                branch.iteration,
                settings.ssh_conn_id,
                rank.BRANCH_WAIT,
                trigger_rule="always",
            )
        train = CampaignSlurmOperator(
            task_id=TRAIN_TASK,
            priority_weight=rank.TRAIN,
            phase=phase.key,
            start_condition=train_plan.start_condition,
            state_dir=state_dir,
            ssh_conn_id=settings.ssh_conn_id,
            script_path=train_plan.script_path,
            remote_dir=dag_plan.remote_dir,
            output_path=train_plan.output_path,
            job_name=train_plan.job_name,
            submit_lock=dag_plan.submit_lock,
            completion_regex=train_plan.completion_regex,
            completion_command=train_plan.completion_command,
            progress_command=train_plan.progress_command,
            max_attempts=settings.max_attempts,
            max_attempts_without_progress=settings.max_attempts_without_progress,
            max_attempts_overall=settings.max_attempts_overall,
            # A diverged training is recorded DIVERGED and not resubmitted nor retried.
            fatal_patterns={name: list(p) for name, p in train_plan.fatal_patterns.items()},
            poll_interval=phase.poll_interval,
            unknown_timeout=settings.unknown_timeout,
            # A hung training (NCCL deadlock, stuck file system) shows as a log and a checkpoint
            # tracker that stop changing while Slurm says RUNNING; conversions are not watched.
            progress_timeout=settings.progress_timeout or None,
            startup_timeout=settings.startup_timeout,
            progress_paths=list(train_plan.progress_paths),
            progress_pattern=train_plan.progress_pattern,
            pool=settings.pool_name,
            resubmit_alert=resubmit_alerts(dag_plan.experiment.name, settings.notify),
            rollback_alert=rollback_alerts(
                dag_plan.experiment.name, settings.notify, train_plan.checkpoint_dir
            ),
        )
        last: list[Any] = [train]
        if phase.checkpoints is not None:
            last.append(_checkpoint_group(phase, phase.checkpoints, settings, dag_plan, train))
        if head is not None:
            head >> train
    return group, last, train, head


def materialize(
    dag_plan: DagPlan, settings: AirflowSettings, config_path: Path, digest: str, env: dict[str, str | None]
) -> DAG:
    """Build the DAG of one planned experiment (``env``: the variables the config read, see stage)."""
    plan = dag_plan.experiment
    with DAG(
        dag_id=plan.dag_id,
        schedule=dag_plan.schedule,
        start_date=datetime.fromisoformat(settings.start_date),
        catchup=settings.catchup,
        max_active_runs=1,
        # Explicit values: each one left out is a configuration lookup per DAG at parse time.
        max_active_tasks=_MAX_ACTIVE_TASKS,
        max_consecutive_failed_dag_runs=0,
        tags=list(settings.tags),
        is_paused_upon_creation=settings.paused,
        default_args={
            "owner": settings.owner,
            "retries": settings.retries,
            "retry_delay": timedelta(seconds=settings.retry_delay_secs),
            "weight_rule": "absolute",  # the ranks of planning/task_priority.py, not downstream counts
            **task_alerts(plan.name, settings.notify),
        },
        # One alert per failed run (the tasks only record their failures), plus the opted-in ones.
        **dag_alerts(plan.name, settings.notify),
        description=f"{plan.name}: {len(plan.cooldowns)} cooldown branches, {config_path.name}",
    ) as dag:
        stage = StageOperator(
            task_id="stage",
            priority_weight=rank.STAGE,
            stage_args={
                "config_path": str(config_path),
                "expected_hash": digest,
                "expected_env": env,
                "scripts": dict(dag_plan.scripts),
                "copies": dict(dag_plan.copies),
                "ssh_conn_id": settings.ssh_conn_id,
            },
        )
        ends: list[Any] = []
        trains: dict[str, Any] = {}
        branches: list[tuple[str, Any]] = []
        branch_waits: list[tuple[str, Any]] = []  # (cooldown, its branch wait)
        for phase in dag_plan.phases:
            _, last, trains[phase.key], head = _phase_tasks(phase, dag_plan, settings)
            ends += last
            if head is not None and phase.branch_wait is not None:
                branches.append((phase.branch_wait.watch_phase, head))
                branch_waits.append((phase.key, head))
        # The waits run "always": only the trainings need the staged scripts.
        stage >> list(trains.values())  # one call: each >> hashes the DAG of every task it links
        for watched, head in branches:
            trains[watched] >> head
        if dag_plan.cooldown_gate is not None:  # Airflow's HITL modules (~4 ms a parse): gated DAGs only
            from autoexp.campaign.dags.approvals import gate_cooldowns

            gate_cooldowns(dag_plan.cooldown_gate, dict(branch_waits), trains)
        report = ReportOperator(
            task_id="report",
            priority_weight=rank.REPORT,
            trigger_rule="none_failed",
            outlets=[
                Asset(
                    name=f"autoexp.{plan.dag_id}.eval_results",
                    uri=f"slurm://{settings.ssh_conn_id}{dag_plan.eval_results_dir}",
                )
            ],
            report_args={
                "ssh_conn_id": settings.ssh_conn_id,
                "experiment": plan.name,
                "phases": [dict(p) for p in dag_plan.report_phases],
                "out_dir": dag_plan.report_dir,
            },
        )
        ends >> report
    # Set after the tasks: every operator built inside a DAG deep-copies the DAG's Params (once per
    # class in its hierarchy), and the task runner merges the DAG's Params into each task's anyway.
    dag.params = experiment_params(phase_choices(plan), settings)
    dag.doc_md = doc_md(dag_plan, str(config_path), digest)
    return dag


def build_dags(
    config_path: str | Path,
    overrides: Sequence[str] = (),
    earlier: Sequence[Path] = (),
    planned: PlannedConfig | None = None,
) -> list[DAG]:
    """Load, expand, plan and materialize one config; raises ConfigError, SettingsError or PlanError, or
    DuplicateDagIds (after building the rest) when a config of ``earlier`` already builds a DAG id.
    ``planned``: the config already planned (with no overrides) by this parse."""
    path = Path(config_path).absolute()
    planned = planned or PlannedConfig.load(path, overrides)
    own = {plan.dag_id: plan.name for plan in planned.plans}
    taken = clashes(own, earlier)
    digest, env = config_hash(path), env_values(path)
    wanted = _wanted_by_this_parse()
    dags = [
        materialize(planned.dag_plan(plan), planned.settings, path, digest, env)
        for plan in planned.plans
        if plan.dag_id not in taken and wanted(plan.dag_id)
    ]
    if taken:
        raise DuplicateDagIds(clash_message(path, own, taken), dags)
    return dags


def _wanted_by_this_parse() -> Callable[[str], bool]:
    """Whether this parse of the DAG file needs the DAG of an id.

    A task process parses the file only for its own DAG (Airflow sets the parsing context): building
    all 90 of the seed cost each task ~2 s of CPU, over a minute with 8 task processes on 2 busy cores
    (bench/bench_seed_campaign.py). The DAG processor has no context and builds them all, also in a
    parse that only runs callbacks (no public API names the DAGs those need): a wait the triggerer
    ends sends a success callback that is never run, one such parse per batch of ended waits.
    """
    running = get_parsing_context().dag_id
    return lambda dag_id: running in (None, dag_id)


class DuplicateDagIds(Exception):
    """Two configs build the same DAG id: ``dags`` are the others of the later config."""

    def __init__(self, message: str, dags: list[DAG]) -> None:
        super().__init__(message)
        self.dags = dags


def register(
    namespace: MutableMapping[str, Any], paths: Sequence[Path], earlier: Sequence[Path] = ()
) -> list[str]:
    """Put every config's DAGs into a DAG file's globals; a broken config becomes an import error only.

    ``earlier``: the configs other DAG files build before these; a DAG id one of them (or a config
    before in ``paths``) already builds is an import error, not a second DAG.
    """
    ids: list[str] = []
    for i, path in enumerate(paths):
        try:
            with gc_paused():
                planned = PlannedConfig.load(path)  # once for the experiment and campaign DAGs
                try:
                    dags = build_dags(path, earlier=[*earlier, *paths[:i]], planned=planned)
                except DuplicateDagIds as exc:  # the clashing ids only are left out
                    dags = exc.dags
                    name, dag_id = f"duplicate_{path.stem}", f"autoexp_duplicate_dag_ids_{path.stem}"
                    _broken(namespace, name, dag_id, str(exc))
                dags += _campaign_dags(planned)
        except config_errors() as exc:  # evaluated only when an exception propagates
            message = str(exc) if not isinstance(exc, OSError) else f"{path}: {exc.strerror or exc}"
            _broken(namespace, f"broken_{path.stem}", f"autoexp_broken_config_{path.stem}", message)
            continue
        for dag in dags:
            namespace[dag.dag_id] = dag
            ids.append(dag.dag_id)
    return ids


def _campaign_dags(planned: PlannedConfig) -> list[DAG]:
    """The config's campaign trigger and report DAGs, where this parse needs them.

    A task process of an experiment's DAG builds neither, nor imports their modules: they pull in
    Airflow's server-side DAG models (TriggerDagRunOperator) and the report's numerics. Measured on
    the seed's config: a task process's parse of the DAG file fell from 1.47 to 0.33 s of CPU.
    """
    wanted, path = _wanted_by_this_parse(), planned.path
    dags: list[DAG] = []
    if wanted(campaign_dag_id(path)):
        from autoexp.campaign.dags.campaign_trigger_dag import build_campaign_trigger_dag

        dags.append(build_campaign_trigger_dag(path, planned))
    if wanted(campaign_report_dag_id(path)):
        from autoexp.campaign.dags.campaign_report_dag import campaign_report_dag

        dags.append(campaign_report_dag(path, planned))
    return dags


def _broken(namespace: MutableMapping[str, Any], name: str, dag_id: str, message: str) -> None:
    namespace[name] = BrokenConfigDag(dag_id=dag_id, description=message, schedule=None)
    log.error("%s", message)
