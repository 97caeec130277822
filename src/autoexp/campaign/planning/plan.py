"""Pure planner: a config's expanded jobs -> experiments -> phases, cooldown branches and expected
checkpoints (configs/planned_config.py loads a config file into plans)."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from autoexp.campaign.planning import run_layout
from autoexp.campaign.planning.settings import AirflowSettings, Keys, SettingsError

PRETRAIN = "pretrain"


class PlanError(ValueError):
    """A campaign the factory cannot turn into DAGs; `str()` is one line naming file:line and the key."""


class JobLike(Protocol):
    """What the planner reads from a config-engine `Job` (the contract's frozen dataclass)."""

    @property
    def name(self) -> str: ...
    @property
    def params(self) -> Mapping[str, Any]: ...
    @property
    def template(self) -> Path | None: ...
    @property
    def output_file(self) -> str: ...
    @property
    def check_interval_secs(self) -> int | float: ...
    @property
    def start_condition_cmd(self) -> str: ...
    @property
    def termination_str(self) -> str: ...
    @property
    def termination_cmd(self) -> str: ...

    def origin(self, var: str) -> str: ...


@dataclass(frozen=True)
class PhasePlan:
    """One training run (pretrain, or one cooldown branch) with its conversion/evaluation job.

    :param key: ``pretrain`` or ``cooldown_<branch>``; used in task ids.
    :param branch: the cooldown branch label (``CD_SCALE`` value), None for pretraining.
    :param start_iter: the pretrain iteration the branch starts from; 0 for pretraining.
    :param from_scratch: a cooldown branch whose ITER is 0: nothing to link, it trains from scratch.
    :param checkpoints: iterations this run is expected to save (and to convert and evaluate).
    :param tokens_per_iter: SEQ_LENGTH x GLOBAL_BATCH_SIZE when both are defined, else None.
    :param time_limit_secs: the training job's Slurm time limit (``TIME``), None when not given.
    """

    key: str
    branch: str | None
    train: JobLike
    convert: JobLike | None
    run_dir: str
    train_iters: int
    save_interval: int
    start_iter: int
    from_scratch: bool
    checkpoints: tuple[int, ...]
    tokens_per_iter: int | None
    time_limit_secs: int | None = None

    @property
    def checkpoint_dir(self) -> str:
        """Megatron's ``--save`` folder (see run_layout.CHECKPOINTS_SUBDIR)."""
        return run_layout.checkpoint_dir(self.run_dir)


@dataclass(frozen=True)
class ExperimentPlan:
    """All jobs of one experiment (one DAG): pretraining, its cooldown branches, the notes to show."""

    name: str
    dag_id: str
    jobs: tuple[JobLike, ...]
    pretrain: PhasePlan
    cooldowns: tuple[PhasePlan, ...]
    notes: tuple[str, ...]

    @property
    def phases(self) -> tuple[PhasePlan, ...]:
        """Pretraining first, then the cooldown branches in config order."""
        return (self.pretrain, *self.cooldowns)


_DAG_ID_BAD = re.compile(r"[^A-Za-z0-9_.-]")
_TASK_KEY_BAD = re.compile(r"[^A-Za-z0-9_]")


def dag_id_for(prefix: str, name: str) -> str:
    """Airflow allows letters, digits, '_', '.', '-' in DAG ids; anything else becomes '_'."""
    return (prefix + _DAG_ID_BAD.sub("_", name))[:250]


def _where(job: JobLike, var: str) -> str:
    try:
        return job.origin(var)
    except (KeyError, LookupError):
        return str(job.name)


def _error(job: JobLike, var: str, message: str) -> PlanError:
    return PlanError(f"{_where(job, var)}: {var}: {message} (job {job.name})")


def _param(job: JobLike, var: str) -> Any:
    if var not in job.params:
        raise PlanError(
            f"{job.name}: {var}: not defined for this job (set it, or name another variable "
            f"in the airflow.keys section)"
        )
    return job.params[var]


def _as_int(job: JobLike, var: str) -> int:
    value = _param(job, var)
    if isinstance(value, bool):
        raise _error(job, var, f"expected an integer, got {value!r}")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*-?\d+\s*", value):
        return int(value)
    raise _error(job, var, f"expected an integer, got {value!r}")


def _optional_int(job: JobLike, var: str) -> int | None:
    return _as_int(job, var) if var in job.params else None


_SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def slurm_time_secs(value: Any) -> int | None:
    """Seconds of a Slurm ``--time`` value (minutes, ``MM:SS``, ``HH:MM:SS``, ``D-HH[:MM[:SS]]``)."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float):
        return int(value * 60) if value > 0 else None
    m = _SLURM_TIME.match(str(value).strip())
    if m is None:
        return None
    days, a, b, c = m.groups()
    if days is not None:  # D-HH, D-HH:MM, D-HH:MM:SS
        hms = [int(a), int(b or 0), int(c or 0)]
        return int(days) * 86400 + hms[0] * 3600 + hms[1] * 60 + hms[2]
    parts = [int(p) for p in (a, b, c) if p is not None]
    if len(parts) == 1:
        return parts[0] * 60
    if len(parts) == 2:
        return parts[0] * 60 + parts[1]
    return parts[0] * 3600 + parts[1] * 60 + parts[2]


def expected_checkpoints(start_iter: int, train_iters: int, save_interval: int) -> tuple[int, ...]:
    """Iterations a Megatron run saves: multiples of the interval after the start, and the last one."""
    first = (start_iter // save_interval + 1) * save_interval
    iters = list(range(first, train_iters + 1, save_interval))
    if not iters or iters[-1] != train_iters:
        iters.append(train_iters)
    return tuple(iters)


def _check_tokens(job: JobLike, keys: Keys, budget_var: str, train_iters: int, tpi: int | None) -> None:
    """TRAIN_ITERS must cover the token budget with less than one iteration to spare."""
    budget = _optional_int(job, budget_var)
    if budget is None or tpi is None:
        return
    if budget <= 0:
        raise _error(job, budget_var, f"token budget must be positive, got {budget}")
    covered = train_iters * tpi
    if covered < budget or covered - tpi >= budget:
        needed = -(-budget // tpi)
        raise _error(
            job,
            keys.train_iters,
            f"{train_iters} iterations x {tpi} tokens = {covered} tokens, but {budget_var}={budget} "
            f"needs {needed} iterations",
        )


def _plan_phase(
    keys: Keys, key: str, branch: str | None, train: JobLike, convert: JobLike | None, pretrain_iters: int
) -> PhasePlan:
    train_iters = _as_int(train, keys.train_iters)
    save_interval = _as_int(train, keys.save_interval)
    if save_interval <= 0:
        raise _error(train, keys.save_interval, f"must be positive, got {save_interval}")
    if train_iters <= 0:
        raise _error(train, keys.train_iters, f"must be positive, got {train_iters}")
    seq, gbs = _optional_int(train, keys.seq_length), _optional_int(train, keys.global_batch_size)
    tpi = seq * gbs if seq is not None and gbs is not None else None
    start = 0
    if branch is not None:
        start = _as_int(train, keys.branch_iter)
        if start < 0 or start % save_interval:
            raise _error(
                train,
                keys.branch_iter,
                f"cooldown {keys.branch}={branch} branches at iteration {start}, which is not a "
                f"multiple of {keys.save_interval}={save_interval}: no checkpoint will exist there",
            )
        if start > pretrain_iters:
            raise _error(
                train,
                keys.branch_iter,
                f"cooldown {keys.branch}={branch} branches at iteration {start}, beyond pretraining's "
                f"{keys.train_iters}={pretrain_iters}",
            )
        if start >= train_iters:
            raise _error(
                train,
                keys.train_iters,
                f"cooldown {keys.branch}={branch} ends at iteration {train_iters}, not after its branch "
                f"iteration {keys.branch_iter}={start}",
            )
        _check_tokens(train, keys, keys.phase_tokens, train_iters, tpi)
    else:
        _check_tokens(train, keys, keys.pretrain_tokens, train_iters, tpi)
    run_dir = str(_param(train, keys.run_dir))
    if convert is not None and str(_param(convert, keys.run_dir)) != run_dir:
        raise _error(
            convert,
            keys.run_dir,
            f"{convert.name} converts {convert.params[keys.run_dir]!r}, but its "
            f"training job {train.name} writes {run_dir!r}",
        )
    return PhasePlan(
        key=key,
        branch=branch,
        train=train,
        convert=convert,
        run_dir=run_dir,
        train_iters=train_iters,
        save_interval=save_interval,
        start_iter=start,
        from_scratch=branch is not None and start == 0,
        checkpoints=expected_checkpoints(start, train_iters, save_interval),
        tokens_per_iter=tpi,
        time_limit_secs=slurm_time_secs(train.params.get(keys.time_limit)),
    )


def _single_job(jobs: Sequence[JobLike], what: str, keys: Keys, required: bool) -> JobLike | None:
    if len(jobs) > 1:
        names = ", ".join(j.name for j in jobs)
        raise _error(jobs[1], keys.mode, f"{what} has {len(jobs)} jobs for one mode ({names})")
    if required and not jobs:
        raise PlanError(f"{what}: no {keys.mode}={keys.train} job")
    return jobs[0] if jobs else None


def _plan_experiment(name: str, jobs: Sequence[JobLike], settings: AirflowSettings) -> ExperimentPlan:
    keys = settings.keys
    pre: dict[str, list[JobLike]] = {keys.train: [], keys.convert_eval: []}
    branches: dict[str, dict[str, list[JobLike]]] = {}
    for job in jobs:
        phase, mode = str(_param(job, keys.phase)), str(_param(job, keys.mode))
        if mode not in (keys.train, keys.convert_eval):
            raise _error(
                job, keys.mode, f"unknown mode {mode!r} (expected {keys.train} or {keys.convert_eval})"
            )
        if phase == keys.pretrain:
            pre[mode].append(job)
        elif phase == keys.cooldown:
            branch = str(_param(job, keys.branch))
            branches.setdefault(branch, {keys.train: [], keys.convert_eval: []})[mode].append(job)
        else:
            raise _error(
                job, keys.phase, f"unknown phase {phase!r} (expected {keys.pretrain} or {keys.cooldown})"
            )
    what = f"experiment {name}"
    train = _single_job(pre[keys.train], f"{what} {keys.pretrain}", keys, required=True)
    assert train is not None  # required=True raised otherwise
    # pretrain_iters only bounds cooldown branches; pretraining itself has no branch iteration.
    pretrain = _plan_phase(
        keys, PRETRAIN, None, train, _single_job(pre[keys.convert_eval], what, keys, False), 0
    )
    cooldowns: list[PhasePlan] = []
    notes: list[str] = []
    seen: dict[str, str] = {}
    for branch, by_mode in branches.items():
        cd_train = _single_job(by_mode[keys.train], f"{what} {keys.cooldown} {branch}", keys, required=True)
        assert cd_train is not None
        key = "cooldown_" + _TASK_KEY_BAD.sub("_", branch)
        if key in seen:
            raise _error(
                cd_train, keys.branch, f"branches {seen[key]!r} and {branch!r} give the same task id"
            )
        seen[key] = branch
        convert = _single_job(by_mode[keys.convert_eval], f"{what} {keys.cooldown} {branch}", keys, False)
        cooldown = _plan_phase(keys, key, branch, cd_train, convert, pretrain.train_iters)
        if cooldown.run_dir == pretrain.run_dir:
            raise _error(
                cd_train, keys.run_dir, f"cooldown {branch} writes into pretraining's {cooldown.run_dir}"
            )
        if cooldown.from_scratch:
            notes.append(
                f"{_where(cd_train, keys.branch_iter)}: cooldown {keys.branch}={branch} has "
                f"{keys.branch_iter}=0: no pretrain checkpoint to branch from, it trains from scratch"
            )
        cooldowns.append(cooldown)
    return ExperimentPlan(
        name=name,
        dag_id=dag_id_for(settings.dag_id_prefix, name),
        jobs=tuple(jobs),
        pretrain=pretrain,
        cooldowns=tuple(cooldowns),
        notes=tuple(notes),
    )


def plan_campaign(jobs: Sequence[JobLike], settings: AirflowSettings) -> list[ExperimentPlan]:
    """Group jobs by the experiment key (config order kept) and plan each; raises PlanError."""
    groups: dict[str, list[JobLike]] = {}
    for job in jobs:
        groups.setdefault(str(_param(job, settings.keys.group)), []).append(job)
    plans = [_plan_experiment(name, members, settings) for name, members in groups.items()]
    by_id: dict[str, str] = {}
    for plan in plans:
        if plan.dag_id in by_id:
            raise _error(
                plan.pretrain.train,
                settings.keys.group,
                f"experiments {by_id[plan.dag_id]!r} and {plan.name!r} map to the same DAG id "
                f"{plan.dag_id!r}",
            )
        by_id[plan.dag_id] = plan.name
    return plans


def config_errors() -> tuple[type[Exception], ...]:
    """What a broken config raises. A cache hit never imports the config engine (20 ms of a fresh
    DAG processor's parse), so neither does this until an exception is matched."""
    from autoexp.config import ConfigError

    return (ConfigError, SettingsError, PlanError, OSError)
