"""DAG factory: config -> planned experiments -> one Airflow DAG each (the only module that builds DAGs)."""

from __future__ import annotations

import contextlib
import gc
import glob
import logging
import os
import posixpath
from collections.abc import Iterable, Iterator, Mapping, MutableMapping, Sequence
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from airflow.sdk import DAG, Asset, Param, TaskGroup
from airflow.sdk.definitions._internal.expandinput import ListOfDictsExpandInput, MappedArgument
from airflow.sdk.definitions.param import ParamsDict
from airflow.sdk.definitions.taskgroup import MappedTaskGroup

from autoexp.experiment import cache, commands, tasks
from autoexp.experiment.docs import doc_md
from autoexp.experiment.notify import CampaignNotifier
from autoexp.experiment.operators import (
    TRAIN_TASK,
    CampaignSlurmOperator,
    CheckpointWait,
    ReportOperator,
    StageOperator,
    state_dir_of,
)
from autoexp.experiment.paths import ensure_default_env
from autoexp.experiment.plan import ExperimentPlan, JobLike, PhasePlan, PlanError, plan_campaign
from autoexp.experiment.report import param_count
from autoexp.experiment.settings import AirflowSettings, SettingsError, parse_settings

log = logging.getLogger(__name__)
CONFIGS_ENV = "AUTOEXP_CONFIGS"
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


def _format(template: str, job: JobLike, what: str) -> str:
    try:
        return template.format_map(dict(job.params))
    except (KeyError, IndexError, ValueError) as exc:
        raise PlanError(f"{job.name}: airflow.{what}: cannot fill {template!r}: {exc!r}") from None


def _stem(path: str) -> str:
    base = posixpath.basename(path)
    return base.rsplit(".", 1)[0] if "." in base else base


def _train_completion(phase: PhasePlan) -> tuple[str, list[str]]:
    """Done = the tracker reached TRAIN_ITERS, and the YAML's own check where it still works."""
    checks = [commands.tracker_reached(phase.checkpoint_dir, phase.train_iters)]
    notes: list[str] = []
    cmd = phase.train.termination_cmd
    if cmd and phase.train.output_file and phase.train.output_file in cmd:
        # The operator keeps one log per attempt, so a grep of the shared output_file would never match.
        notes.append(
            f"{phase.key}: termination_cmd greps {phase.train.output_file}; replaced by the checkpoint "
            f"tracker reaching {phase.train_iters} (logs are per attempt)"
        )
    elif cmd:
        checks.append(cmd)
    if phase.convert is not None and phase.convert.start_condition_cmd:
        notes.append(
            f"{phase.key}: CONVERT_EVAL start_condition_cmd is replaced by a checkpoint sensor per iteration"
        )
    return commands.all_say_one(checks), notes


_UNBOUNDED_WAIT = 7 * 86400.0
_QUEUE_SLACK = 3600.0


def wait_budget(phase: PhasePlan, settings: AirflowSettings) -> float:
    """Seconds a wait for one of ``phase``'s checkpoints may last (see checkpoint_timeout_secs)."""
    if settings.checkpoint_timeout_secs:
        return settings.checkpoint_timeout_secs
    if phase.time_limit_secs is None:
        return _UNBOUNDED_WAIT
    attempts = (settings.retries + 1) * settings.max_attempts
    return attempts * phase.time_limit_secs + _QUEUE_SLACK


def _train_output(phase: PhasePlan) -> str:
    """The ``--output`` pattern of a phase's training (its waits derive the cancel marker from it)."""
    out = phase.train.output_file
    return f"{posixpath.dirname(out) or phase.run_dir}/{_stem(out) or 'train'}-%j.out"


def _checkpoint_group(
    phase: PhasePlan, settings: AirflowSettings, script_path: str, remote_dir: str, poll: float
) -> Any:
    """Mapped task group: one instance per expected iteration, wait for the checkpoint, then convert+eval."""
    assert phase.convert is not None
    out_dir = posixpath.dirname(phase.convert.output_file) or phase.run_dir
    out_stem = _stem(phase.convert.output_file) or "convert"
    state_dir = state_dir_of(remote_dir)
    budget = wait_budget(phase, settings)

    values = [
        {
            "iteration": it,
            "ckpt_iter": str(it),
            "completion": commands.marker_exists(phase.run_dir, it),
            "output_path": f"{out_dir}/{out_stem}-iter{it}-%j.out",
        }
        for it in phase.checkpoints
    ]
    # What ``@task_group`` + ``expand_kwargs`` build, built directly: the decorator inspects the
    # function's signature, binds its arguments and walks the values for XCom references, for
    # each of the ~540 groups of the seed (the values here are plain, they hold no XComArg).
    expand_input = ListOfDictsExpandInput(values)

    def arg(key: str) -> Any:
        return MappedArgument(input=expand_input, key=key)

    with MappedTaskGroup(
        group_id="checkpoints", add_suffix_on_collision=True, expand_input=expand_input
    ) as group:
        wait = CheckpointWait(
            task_id="wait",
            phase=phase.key,
            ssh_conn_id=settings.ssh_conn_id,
            checkpoint_dir=phase.checkpoint_dir,
            iteration=arg("iteration"),
            state_dir=state_dir,
            watch_phase=phase.key,
            watch_output=_train_output(phase),
            timeout_secs=budget,
            poll_interval=poll,
            settle_seconds=settings.checkpoint_settle_secs,
        )
        convert = CampaignSlurmOperator(
            task_id="convert_eval",
            phase=phase.key,
            ssh_conn_id=settings.ssh_conn_id,
            script_path=script_path,
            remote_dir=remote_dir,
            # The operator copies the mapping at build time; the value inside is resolved per instance.
            environment={"CKPT_ITER": arg("ckpt_iter")},
            completion_command=arg("completion"),
            output_path=arg("output_path"),
            max_attempts=settings.max_attempts,
            max_attempts_without_progress=settings.max_attempts_without_progress,
            poll_interval=poll,
            unknown_timeout=settings.unknown_timeout,
            pool=settings.pool_name,
        )
        wait >> convert
    return group


def _phase_tasks(
    phase: PhasePlan,
    plan: ExperimentPlan,
    settings: AirflowSettings,
    scripts: Mapping[str, str],
    remote_dir: str,
) -> tuple[Any, list[Any], list[str]]:
    """Branch wait, training, mapped conversion -> (group, last tasks, notes).

    No gate or start-condition tasks: the phase tasks check the ``phases`` Param themselves and the
    training runs the start condition before submitting (fewer tasks to build at parse time).
    """
    poll = settings.poll_interval_secs or float(phase.train.check_interval_secs)
    state_dir = state_dir_of(remote_dir)
    heads: list[Any] = []
    with TaskGroup(group_id=phase.key) as group:
        if phase.branch is not None and not phase.from_scratch:
            heads = [
                CheckpointWait(
                    task_id="wait_branch_checkpoint",
                    phase=phase.key,
                    ssh_conn_id=settings.ssh_conn_id,
                    checkpoint_dir=plan.pretrain.checkpoint_dir,
                    iteration=phase.start_iter,
                    state_dir=state_dir,
                    watch_phase=plan.pretrain.key,
                    watch_output=_train_output(plan.pretrain),
                    timeout_secs=wait_budget(plan.pretrain, settings),
                    poll_interval=poll,
                    settle_seconds=settings.checkpoint_settle_secs,
                )
            ]
        completion, notes = _train_completion(phase)
        train = CampaignSlurmOperator(
            task_id=TRAIN_TASK,
            phase=phase.key,
            start_condition=phase.train.start_condition_cmd,
            state_dir=state_dir,
            ssh_conn_id=settings.ssh_conn_id,
            script_path=scripts[phase.train.name],
            remote_dir=remote_dir,
            output_path=_train_output(phase),
            completion_regex=phase.train.termination_str or None,
            completion_command=completion,
            progress_command=commands.tracker_value(phase.checkpoint_dir),
            max_attempts=settings.max_attempts,
            max_attempts_without_progress=settings.max_attempts_without_progress,
            poll_interval=poll,
            unknown_timeout=settings.unknown_timeout,
            # A hung training (NCCL deadlock, stuck file system) shows as a log and a checkpoint
            # tracker that stop changing while Slurm says RUNNING; conversions are not watched.
            progress_timeout=settings.progress_timeout or None,
            startup_timeout=settings.startup_timeout,
            progress_paths=[commands.tracker_path(phase.checkpoint_dir)],
            pool=settings.pool_name,
        )
        last: list[Any] = [train]
        mapped = None
        if phase.convert is not None:
            mapped = _checkpoint_group(phase, settings, scripts[phase.convert.name], remote_dir, poll)
            last.append(mapped)
        for head in heads:
            head >> [t for t in (train, mapped) if t is not None]
    return group, last, notes


def _report_phases(plan: ExperimentPlan) -> list[dict[str, Any]]:
    count = param_count(plan.pretrain.train.params)
    return [
        {
            "key": p.key,
            "branch": p.branch,
            "train_task": f"{p.key}.train",
            "checkpoints": list(p.checkpoints),
            "results": p.run_dir.replace("{", "{{").replace("}", "}}")
            + "/eval_results/iter_{iteration}/results.json",
            "tokens_per_iter": p.tokens_per_iter,
            "param_count": count,
        }
        for p in plan.phases
        if p.convert is not None
    ]


def materialize(plan: ExperimentPlan, settings: AirflowSettings, config_path: Path, digest: str) -> DAG:
    """Build the DAG of one planned experiment."""
    remote_dir = _format(settings.remote_dir, plan.pretrain.train, "remote_dir").rstrip("/")
    scripts: dict[str, str] = {}
    copies: dict[str, str] = {}
    for phase in plan.phases:
        for job in (phase.train, phase.convert):
            if job is not None:
                scripts[job.name] = f"{remote_dir}/scripts/{job.name}.sbatch"
                log_dir = posixpath.dirname(job.output_file)
                copies[job.name] = f"{log_dir}/{job.name}.sbatch" if log_dir else ""
    notifier = CampaignNotifier(
        kind=settings.notify.kind,
        experiment=plan.name,
        path=settings.notify.path,
        to=settings.notify.to,
        conn_id=settings.notify.conn_id,
    )
    keys = [p.key for p in plan.phases]
    all_notes: list[str] = []
    with DAG(
        dag_id=plan.dag_id,
        schedule=settings.schedule,
        start_date=datetime.fromisoformat(settings.start_date),
        catchup=False,
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
            "on_failure_callback": notifier,
        },
        description=f"{plan.name}: {len(plan.cooldowns)} cooldown branches, {config_path.name}",
    ) as dag:
        stage = StageOperator(
            task_id="stage",
            stage_args={
                "config_path": str(config_path),
                "expected_hash": digest,
                "scripts": scripts,
                "copies": copies,
                "helpers_dir": str(tasks.HELPERS_DIR),
                "ssh_conn_id": settings.ssh_conn_id,
            },
        )
        ends: list[Any] = []
        groups: list[Any] = []
        for phase in plan.phases:
            group, last, notes = _phase_tasks(phase, plan, settings, scripts, remote_dir)
            all_notes += notes
            groups.append(group)
            ends += last
        stage >> groups  # one call: each >> hashes the DAG of every task it links
        report = ReportOperator(
            task_id="report",
            trigger_rule="none_failed",
            outlets=[
                Asset(
                    name=f"autoexp.{plan.dag_id}.eval_results",
                    uri=f"slurm://{settings.ssh_conn_id}{plan.pretrain.run_dir}/eval_results",
                )
            ],
            report_args={
                "ssh_conn_id": settings.ssh_conn_id,
                "experiment": plan.name,
                "phases": _report_phases(plan),
                "out_dir": f"{plan.pretrain.run_dir}/report",
            },
        )
        ends >> report
    # Set after the tasks: every operator built inside a DAG deep-copies the DAG's Params (once per
    # class in its hierarchy), and the task runner merges the DAG's Params into each task's anyway.
    dag.params = ParamsDict(
        {
            "phases": Param(
                keys,
                type="array",
                items={"type": "string", "enum": keys},
                description="phases to run (others are skipped)",
            ),
            "dry_run": Param(False, type="boolean", description="render and log the scripts, submit nothing"),
            "max_attempts": Param(
                settings.max_attempts, type="integer", minimum=1, description="Slurm submissions per task try"
            ),
        }
    )
    dag.doc_md = doc_md(plan, str(config_path), digest, all_notes)
    return dag


def _plain(raw: Any) -> Any:
    if raw is None or isinstance(raw, Mapping):
        return raw
    from autoexp.config.yamlio import to_plain

    return to_plain(raw)


def load_plans(
    config_path: str | Path, overrides: Sequence[str] = ()
) -> tuple[list[ExperimentPlan], AirflowSettings]:
    """Load, expand and plan one config (through the expansion cache); raises ConfigError, SettingsError,
    PlanError or OSError."""
    ensure_default_env()
    path = Path(config_path).absolute()
    folder = cache.cache_dir()
    key = cache.cache_key(path.read_bytes(), overrides, path) if folder is not None else ""
    hit = cache.load(key, folder) if folder is not None else None
    if hit is not None:
        raw, slim_jobs = hit
        settings = parse_settings(raw, path)
        return plan_campaign(slim_jobs, settings), settings
    from autoexp.config import expand, load_config

    config = load_config(path, overrides)
    raw = _plain(config.airflow)
    settings = parse_settings(raw, path)
    jobs = expand(config)
    plans = plan_campaign(jobs, settings)  # the full jobs: errors name the file and line
    if folder is not None:
        cache.store(key, folder, raw, cache.slim(jobs, settings))
    return plans, settings


def build_dags(config_path: str | Path, overrides: Sequence[str] = ()) -> list[DAG]:
    """Load, expand, plan and materialize one config; raises ConfigError, SettingsError or PlanError."""
    path = Path(config_path).absolute()
    plans, settings = load_plans(path, overrides)
    digest = tasks.config_hash(path)
    return [materialize(plan, settings, path, digest) for plan in plans]


def config_paths(default_dir: Path, env: Mapping[str, str] | None = None) -> list[Path]:
    """Configs to build: ``$AUTOEXP_CONFIGS`` (os.pathsep-separated paths or globs), else dir/*.yaml."""
    spec = (env if env is not None else os.environ).get(CONFIGS_ENV, "")
    patterns: Iterable[str] = [p for p in spec.split(os.pathsep) if p] or [str(default_dir / "*.yaml")]
    found: list[Path] = []
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) or [pattern]  # a missing file is reported, not skipped
        found += [Path(m) for m in matches]
    return found


def _config_errors() -> tuple[type[Exception], ...]:
    """What a broken config raises. A cache hit never imports the config engine (20 ms of a fresh
    DAG processor's parse), so neither does this until an exception is matched."""
    from autoexp.config import ConfigError

    return (ConfigError, SettingsError, PlanError, OSError)


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while the DAGs are built.

    Building the seed's 2,100 operators allocates enough objects to trigger full collections,
    each of which walks every object of the process (Airflow's modules included): 0.3-0.5 s
    apiece on this machine, more than a third of a parse. What is built stays alive anyway;
    the little cyclic garbage is collected after the parse.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def register(namespace: MutableMapping[str, Any], paths: Sequence[Path]) -> list[str]:
    """Put every config's DAGs into a DAG file's globals; a broken config becomes an import error only."""
    ids: list[str] = []
    for path in paths:
        try:
            with _gc_paused():
                dags = build_dags(path)
        except _config_errors() as exc:  # evaluated only when an exception propagates
            message = str(exc) if not isinstance(exc, OSError) else f"{path}: {exc.strerror or exc}"
            namespace[f"broken_{_stem(str(path))}"] = BrokenConfigDag(
                dag_id=f"autoexp_broken_config_{_stem(str(path))}", description=message, schedule=None
            )
            log.error("%s", message)
            continue
        for dag in dags:
            namespace[dag.dag_id] = dag
            ids.append(dag.dag_id)
    return ids
