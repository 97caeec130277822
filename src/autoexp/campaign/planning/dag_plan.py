"""Experiment plan + settings -> everything one DAG's tasks need: paths, commands, wait budgets.

The factory only turns a DagPlan into Airflow objects; every decision (which script, which log,
when a training counts as done, how long a wait may last, what the report reads) is made here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path
from typing import Any, Protocol

from slurm_operator.model import naming

from autoexp.campaign.planning import fields, run_layout, training_log
from autoexp.campaign.planning.cooldown_gate import CooldownGatePlan, plan_cooldown_gate
from autoexp.campaign.planning.divergence import fatal_patterns_of
from autoexp.campaign.planning.model_size import param_count
from autoexp.campaign.planning.plan import ExperimentPlan, JobLike, PhasePlan, PlanError, _where
from autoexp.campaign.planning.schedule import dag_schedule
from autoexp.campaign.planning.settings import AirflowSettings, _line_of

# The training task's id inside its phase's task group (the factory builds it, the waits watch it).
TRAIN_TASK = "train"
# The conversion+evaluation task's id inside a phase's mapped checkpoint group.
CONVERT_TASK = "convert_eval"
# The convert template's variable naming the checkpoints a shared conversion job may process.
SERIES_VAR = "CKPT_SERIES"
# The task between a phase's training and its checkpoint waits: clearing the training clears it,
# and through it the waits and conversions (the factory's _checkpoint_group says why it exists).
ARM_WAITS_TASK = "arm_waits"
# A phase without a Slurm time limit: its waits give up after a week.
_UNBOUNDED_WAIT = 7 * 86400.0
# Time a submission may sit in the queue, on top of the attempts' time limits.
_QUEUE_SLACK = 3600.0


@dataclass(frozen=True)
class WaitPlan:
    """One wait for a checkpoint of ``watch_phase``'s training (a CheckpointWait task).

    :param phase: the phase the wait belongs to (skipped with it).
    :param iteration: the iteration, or None in a mapped group (each instance gets its own).
    :param state_dir: where ``watch_phase``'s training leaves its outcome markers.
    :param watch_output: that training's ``--output`` pattern (a cancel by the wait leaves its marker).
    :param timeout_secs: the wait budget (see ``wait_budget``).
    :param watch_job_name: that training's Slurm job name (a wait cancels it when its task was stopped).
    """

    phase: str
    checkpoint_dir: str
    iteration: int | None
    state_dir: str
    watch_phase: str
    watch_output: str
    timeout_secs: float
    poll_interval: float
    settle_seconds: float
    watch_job_name: str


@dataclass(frozen=True)
class TrainPlan:
    """A phase's training task: its script, log pattern, start condition and completion checks;
    ``job_name``: its Slurm job name, the same in every run (``job_name``); ``progress_pattern``:
    the iteration its log reports, its progress for hang detection; ``fatal_patterns``: the log
    lines that end it without resubmission (``divergence.fatal_patterns_of``: a NaN, a dead model's
    loss for several log intervals, a loss spike when ``airflow.loss_spike`` is on)."""

    script_path: str
    output_path: str
    start_condition: str
    completion_regex: str | None
    completion_command: str
    progress_command: str
    progress_paths: tuple[str, ...]
    job_name: str
    progress_pattern: str = training_log.ITERATION_PROGRESS
    fatal_patterns: Mapping[str, Sequence[str | Mapping[str, Any]]] = field(default_factory=dict)
    # its --save folder, where ckpt_check records the rollbacks the task alerts (tasks/rollbacks.py)
    checkpoint_dir: str = ""


@dataclass(frozen=True)
class CheckpointsPlan:
    """The mapped group of a phase: per expected iteration, wait for the checkpoint, then convert+eval.

    :param instances: one mapping per iteration: ``iteration``, ``ckpt_iter`` (CKPT_ITER),
        ``completion`` (the command printing 1 once converted and evaluated), ``output_path`` and
        ``job_name`` (the same in every run).
    :param label: what the UI calls an instance: a Jinja template over ``iteration`` (an int), e.g.
        ``iter 0000400 (cooldown 2B)``; the factory binds ``iteration`` to each task's own argument.
    :param shared_environment: with ``airflow.share_conversion_jobs``, what every instance's job is
        submitted with (``CKPT_SERIES``: the phase's planned checkpoints), the instances sharing one
        job name and log: one job converts every checkpoint of the phase that is ready and not done,
        each instance still judged by its own ``completion``. Empty: each its own job (``CKPT_ITER``).
    """

    script_path: str
    wait: WaitPlan
    instances: tuple[Mapping[str, Any], ...]
    label: str = ""
    shared_environment: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class PhaseTasksPlan:
    """The task group of one phase; ``branch_wait``: for the pretrain checkpoint a cooldown starts from."""

    key: str
    poll_interval: float
    branch_wait: WaitPlan | None
    train: TrainPlan
    checkpoints: CheckpointsPlan | None
    notes: tuple[str, ...]


@dataclass(frozen=True)
class DagPlan:
    """One experiment's DAG, decided: staging targets, phases, report inputs.

    :param scripts: job name -> where stage uploads its rendered script.
    :param copies: job name -> the script's copy next to its log ("" for none).
    :param report_phases: what the report task reads per phase (JSON primitives only).
    :param submit_lock: the cluster file every Slurm task locks to submit its job at most once.
    :param schedule: the DAG's schedule (``dag_schedule``).
    :param cooldown_gate: the approval before the cooldowns start (``airflow.gate.cooldowns``); None: none.
    """

    experiment: ExperimentPlan
    remote_dir: str
    state_dir: str
    scripts: Mapping[str, str]
    copies: Mapping[str, str]
    phases: tuple[PhaseTasksPlan, ...]
    report_phases: tuple[Mapping[str, Any], ...]
    eval_results_dir: str
    report_dir: str
    submit_lock: str
    schedule: str | timedelta | None
    cooldown_gate: CooldownGatePlan | None = None

    @property
    def notes(self) -> list[str]:
        """Replacements of the YAML's own checks, shown on the DAG page."""
        return [note for phase in self.phases for note in phase.notes]


def job_name(
    plan: ExperimentPlan, remote_dir: str, phase: str, task: str, iteration: int | None = None
) -> str:
    """The Slurm job name of one task of the experiment, the same in every DAG run.

    No run id in it: a second run (re-trigger, backfill interval, overlapping run) finds the job
    the first one left running by this name and adopts it instead of training into the same
    checkpoint folder. Readable in squeue: ``<experiment>-<phase>-<task>[-<iteration>]-<hash>``,
    the experiment's name shortened first; the hash (over the DAG id and staging folder too) keeps
    experiments whose names shorten alike apart.
    """
    tail = f"-{phase}-{task}" + (f"-{iteration:07d}" if iteration is not None else "")
    room = naming.MAX_JOB_NAME - 11 - len(tail)
    short = naming.sanitize(plan.name)[: max(room, 8)].rstrip("_.-")
    identity = (plan.dag_id, remote_dir, phase, task, "" if iteration is None else str(iteration))
    return naming.stable_name(short + tail, identity)


class _Names(Protocol):
    """``job_name`` bound to one experiment and staging folder."""

    def __call__(self, phase: str, task: str, iteration: int | None = None) -> str: ...


def _format(template: str, job: JobLike, what: str) -> str:
    """``template`` (a setting's value, plain ``{VAR}`` fields checked when parsed) filled from ``job``."""
    try:
        return fields.fill(template, job.params)
    except KeyError as exc:
        where = _where(job, "name").rsplit(":", 1)[0]
        raise PlanError(
            f"{_line_of(Path(where), what)}: airflow.{what}: {{{exc.args[0]}}} is not a variable of job "
            f"{job.name}"
        ) from None


def wait_budget(phase: PhasePlan, settings: AirflowSettings) -> float:
    """Seconds a wait for one of ``phase``'s checkpoints may last (see checkpoint_timeout_secs)."""
    if settings.checkpoint_timeout_secs:
        return settings.checkpoint_timeout_secs
    if phase.time_limit_secs is None:
        return _UNBOUNDED_WAIT
    # A try may submit up to max_attempts_overall jobs: time limits after progress do not count
    # toward max_attempts.
    attempts = (settings.retries + 1) * settings.max_attempts_overall
    return attempts * phase.time_limit_secs + _QUEUE_SLACK


def train_completion(phase: PhasePlan) -> tuple[str, list[str]]:
    """Done = the tracker reached TRAIN_ITERS, and the YAML's own check where it still works."""
    notes: list[str] = []
    cmd = phase.train.termination_cmd
    if cmd and phase.train.output_file and phase.train.output_file in cmd:
        # The operator keeps one log per attempt, so a grep of the shared output_file would never match.
        notes.append(
            f"{phase.key}: termination_cmd greps {phase.train.output_file}; replaced by the checkpoint "
            f"tracker reaching {phase.train_iters} (logs are per attempt)"
        )
        cmd = ""
    if phase.convert is not None and phase.convert.start_condition_cmd:
        notes.append(
            f"{phase.key}: CONVERT_EVAL start_condition_cmd is replaced by a checkpoint sensor per iteration"
        )
    return run_layout.training_done(phase.checkpoint_dir, phase.train_iters, also=cmd), notes


def _poll_interval(phase: PhasePlan, settings: AirflowSettings) -> float:
    return settings.poll_interval_secs or float(phase.train.check_interval_secs)


def _wait(
    waiter: PhasePlan,
    watched: PhasePlan,
    iteration: int | None,
    settings: AirflowSettings,
    state_dir: str,
    watch_job_name: str,
    lead_secs: float = 0.0,
) -> WaitPlan:
    """``waiter``'s wait for a checkpoint of ``watched``'s training (``watch_job_name``: its job).

    A wait starts with the run, beside the training it watches; ``lead_secs``: what may pass before
    that training starts (the pretraining's budget, for a cooldown that branches off it).
    """
    return WaitPlan(
        phase=waiter.key,
        checkpoint_dir=watched.checkpoint_dir,
        iteration=iteration,
        state_dir=state_dir,
        watch_phase=watched.key,
        watch_output=run_layout.train_output(watched.train.output_file, watched.run_dir),
        timeout_secs=wait_budget(watched, settings) + lead_secs,
        poll_interval=_poll_interval(waiter, settings),
        settle_seconds=settings.checkpoint_settle_secs,
        watch_job_name=watch_job_name,
    )


def _checkpoints(
    phase: PhasePlan,
    settings: AirflowSettings,
    script_path: str,
    state_dir: str,
    names: _Names,
    lead_secs: float,
) -> CheckpointsPlan:
    assert phase.convert is not None
    out, shared = phase.convert.output_file, settings.share_conversion_jobs
    instances = tuple(
        {
            "iteration": it,
            "ckpt_iter": str(it),
            "completion": run_layout.marker_exists(phase.run_dir, it),
            "output_path": run_layout.convert_batch_output(out, phase.run_dir)
            if shared
            else run_layout.convert_output(out, phase.run_dir, it),
            "job_name": names(phase.key, CONVERT_TASK, None if shared else it),
        }
        for it in phase.checkpoints
    )
    wait = _wait(phase, phase, None, settings, state_dir, names(phase.key, TRAIN_TASK), lead_secs)
    return CheckpointsPlan(
        script_path=script_path,
        wait=wait,
        instances=instances,
        label=checkpoint_label(phase),
        shared_environment=checkpoint_series(phase) if shared else {},
    )


def checkpoint_series(phase: PhasePlan) -> dict[str, str]:
    """The environment of a phase's shared conversion job: ``CKPT_SERIES="START INTERVAL LAST"``,
    the checkpoints ``plan.expected_checkpoints`` plans (every multiple of INTERVAL after START, and
    LAST). Three numbers, not the list: the same for every instance, whatever the phase's length.
    ``autoexp_batch_iters`` (include/helpers/convert_batch.sh) reads it; tests/include/
    test_convert_batch.py holds the two to one table."""
    return {SERIES_VAR: f"{phase.start_iter} {phase.save_interval} {phase.train_iters}"}


def checkpoint_label(phase: PhasePlan) -> str:
    """The UI name of a mapped instance: Megatron's checkpoint folder number, plus the cooldown budget.

    Without it the grid lists Map Index 0, 1, 2 and which checkpoint each is cannot be seen.
    """
    budget = "" if phase.branch is None else f" (cooldown {phase.branch})"
    return "iter {{ '%07d' % iteration }}" + budget.replace("{", "{{ '{' }}")


def _phase_tasks(
    phase: PhasePlan,
    plan: ExperimentPlan,
    settings: AirflowSettings,
    scripts: Mapping[str, str],
    state_dir: str,
    names: _Names,
    gate: CooldownGatePlan | None,
) -> PhaseTasksPlan:
    branch_wait = None
    lead = 0.0  # before this phase's training can start
    if phase.branch is not None and not phase.from_scratch:
        pretrain_job = names(plan.pretrain.key, TRAIN_TASK)
        branch_wait = _wait(phase, plan.pretrain, phase.start_iter, settings, state_dir, pretrain_job)
        lead = branch_wait.timeout_secs
    if gate is not None and phase.key in gate.cooldowns:
        lead += gate.timeout_secs  # the training may also wait that long for its approval
    completion, notes = train_completion(phase)
    train = TrainPlan(
        script_path=scripts[phase.train.name],
        output_path=run_layout.train_output(phase.train.output_file, phase.run_dir),
        start_condition=phase.train.start_condition_cmd,
        completion_regex=phase.train.termination_str or None,
        completion_command=completion,
        progress_command=run_layout.tracker_value(phase.checkpoint_dir),
        progress_paths=(run_layout.tracker_path(phase.checkpoint_dir),),
        job_name=names(phase.key, TRAIN_TASK),
        fatal_patterns=fatal_patterns_of(phase.train.params, settings.loss_spike),
        checkpoint_dir=phase.checkpoint_dir,
    )
    checkpoints = None
    if phase.convert is not None:
        checkpoints = _checkpoints(phase, settings, scripts[phase.convert.name], state_dir, names, lead)
    return PhaseTasksPlan(
        key=phase.key,
        poll_interval=_poll_interval(phase, settings),
        branch_wait=branch_wait,
        train=train,
        checkpoints=checkpoints,
        notes=tuple(notes),
    )


def _report_phases(plan: ExperimentPlan) -> tuple[Mapping[str, Any], ...]:
    count = param_count(plan.pretrain.train.params)
    return tuple(
        {
            "key": p.key,
            "branch": p.branch,
            "train_task": f"{p.key}.{TRAIN_TASK}",
            "train_output": run_layout.train_output(p.train.output_file, p.run_dir),
            "checkpoints": list(p.checkpoints),
            "results": run_layout.results_template(p.run_dir),
            "tokens_per_iter": p.tokens_per_iter,
            "param_count": count,
        }
        for p in plan.phases
        if p.convert is not None
    )


def plan_dag(plan: ExperimentPlan, settings: AirflowSettings) -> DagPlan:
    """Decide every path, command and budget of one experiment's DAG; raises PlanError."""
    remote_dir = _format(settings.remote_dir, plan.pretrain.train, "remote_dir").rstrip("/")
    scripts: dict[str, str] = {}
    copies: dict[str, str] = {}
    for phase in plan.phases:
        for job in (phase.train, phase.convert):
            if job is not None:
                scripts[job.name] = run_layout.script_path(remote_dir, job.name)
                copies[job.name] = run_layout.script_copy(job.output_file, job.name)
    state_dir = run_layout.state_dir(remote_dir)

    def names(phase: str, task: str, iteration: int | None = None) -> str:
        return job_name(plan, remote_dir, phase, task, iteration)

    gate = plan_cooldown_gate(plan, settings)
    return DagPlan(
        experiment=plan,
        remote_dir=remote_dir,
        state_dir=state_dir,
        scripts=scripts,
        copies=copies,
        phases=tuple(
            _phase_tasks(phase, plan, settings, scripts, state_dir, names, gate) for phase in plan.phases
        ),
        report_phases=_report_phases(plan),
        eval_results_dir=run_layout.eval_results_dir(plan.pretrain.run_dir),
        report_dir=run_layout.report_dir(plan.pretrain.run_dir),
        submit_lock=run_layout.submit_lock(remote_dir),
        schedule=dag_schedule(settings.schedule),
        cooldown_gate=gate,
    )
