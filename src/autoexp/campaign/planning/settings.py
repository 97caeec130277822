"""The optional `airflow:` section of a campaign YAML: its declared schema and one-line errors.

The pydantic dataclasses below (and the sections in their own modules, such as ``loss_spike``) are
the one place each key is declared: type, default, bounds and description. Validation errors become
`FILE:LINE: airflow.KEY: message`; the keys table of docs/config.md is generated from them
(`settings_table`). No Airflow import.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping
from datetime import date
from pathlib import Path
from typing import Annotated, Any, Literal, get_args

import yaml
from pydantic import Field, TypeAdapter, ValidationError, model_validator
from pydantic.dataclasses import dataclass, is_pydantic_dataclass
from pydantic.fields import FieldInfo
from pydantic_core import ErrorDetails

from autoexp.campaign.planning import fields as format_fields
from autoexp.campaign.planning import schedule as schedules
from autoexp.campaign.planning.loss_spike import LossSpikeSettings
from autoexp.campaign.planning.setting_types import (
    SCHEMA,
    Checked,
    Count,
    Exact,
    Flag,
    Parsed,
    Seconds,
    Strings,
    Text,
    VarName,
    rule_error,
)


class SettingsError(ValueError):
    """A bad `airflow:` section; `str()` is the one-line `FILE:LINE: airflow.key: message`."""


NotifierKind = Literal["log", "smtp", "slack"]
NOTIFIER_KINDS: tuple[str, ...] = get_args(NotifierKind)
# A pattern's error and docs text: regexes are not for users.
_PATTERNS = {r"^[A-Za-z0-9_.-]*$": "letters, digits, '_', '.' and '-'"}


def _var(default: str, description: str) -> Any:
    return Field(default=default, description=description)


@dataclass(frozen=True, config=SCHEMA)
class Keys:
    """Names of the variables and labels the planner reads; defaults fit an unchanged AutoExperiment."""

    group: VarName = _var("EXP_NAME", "variable whose value names an experiment (one DAG per distinct value)")
    phase: VarName = _var("PHASE", "variable holding the phase label")
    pretrain: VarName = _var("PRETRAIN", "phase label of the pretraining")
    cooldown: VarName = _var("COOLDOWN", "phase label of a cooldown")
    mode: VarName = _var("MODE", "variable holding the mode label")
    train: VarName = _var("TRAIN", "mode label of a training job")
    convert_eval: VarName = _var("CONVERT_EVAL", "mode label of a checkpoint conversion and evaluation job")
    branch: VarName = _var("CD_SCALE", "variable naming a cooldown branch (its token budget label)")
    run_dir: VarName = _var("RUN_DIR", "variable holding a training's run folder (checkpoints under it)")
    branch_iter: VarName = _var("ITER", "variable holding the pretraining iteration a cooldown starts from")
    save_interval: VarName = _var("SAVE_INTERVAL", "variable holding the checkpoint interval (iterations)")
    train_iters: VarName = _var("TRAIN_ITERS", "variable holding a training's total iterations")
    seq_length: VarName = _var("SEQ_LENGTH", "variable holding the sequence length")
    global_batch_size: VarName = _var("GLOBAL_BATCH_SIZE", "variable holding the global batch size")
    pretrain_tokens: VarName = _var("TOTAL_TOKENS_NUM", "variable holding the pretraining's token budget")
    phase_tokens: VarName = _var("TOTAL_TOKENS_THIS_PHASE", "variable holding a cooldown's token budget")
    time_limit: VarName = _var("TIME", "variable holding a job's Slurm time limit")
    nodes: VarName = _var("NODES", "variable holding a training's node count (the budget gate's estimate)")
    gpus_per_node: VarName = _var("GPUS_PER_NODE", "variable holding a training's GPUs per node (ditto)")


@dataclass(frozen=True, config=SCHEMA)
class NotifierSettings:
    """Where failure alerts go: a log file (default), e-mail over an SMTP connection, or a Slack webhook."""

    kind: NotifierKind = Field(
        default="log", description="`log` appends to a file, `smtp` e-mails, `slack` posts"
    )
    path: Text = Field(
        default="", description="log file of kind log; empty: `$AIRFLOW_HOME/logs/autoexp-alerts.log`"
    )
    to: Strings = Field(default=(), description="recipients of kind smtp (at least one)")
    conn_id: Text = Field(
        default="", description="Airflow connection of the SMTP server, or of the Slack webhook (needed)"
    )
    from_email: Text = Field(
        default="", description="sender of kind smtp; empty: the SMTP connection's `from_email` extra"
    )
    on_retry: Flag = Field(
        default=False,
        description="also alert on each Airflow retry of a task and each Slurm resubmission of a training",
    )
    on_success: Flag = Field(default=False, description="also alert when a campaign run succeeds")
    deadline_secs: Seconds = Field(
        default=0.0,
        ge=0,
        description="alert once when a run is not done this long after it was queued (Airflow deadline "
        "alert); 0: none",
    )

    @model_validator(mode="after")
    def _kind_has_its_target(self) -> NotifierSettings:
        if self.kind == "smtp" and not self.to:
            raise rule_error("to", "kind smtp needs at least one recipient")
        if self.kind == "slack" and not self.conn_id:
            raise rule_error("conn_id", "kind slack needs the Airflow connection id of the webhook")
        return self


@dataclass(frozen=True, config=SCHEMA)
class GateSettings:
    """The budget gate of the campaign trigger DAG: an estimate of a slice's GPU-hours, and when to ask."""

    tflops_per_gpu: Annotated[int | float, Exact("int or float", int, float, unit="TFLOP/s")] = Field(
        default=100,
        gt=0,
        description="sustained training throughput assumed per GPU (10^12 FLOP/s; about a third of an "
        "A100's bf16 peak): GPU-hours = 6 x parameters x tokens / this",
    )
    gpu_hours_threshold: Annotated[int | float, Exact("int or float", int, float, unit="GPU-hours")] = Field(
        default=0,
        ge=0,
        description="a slice estimated above this (or with a training it cannot estimate) waits for an "
        "approval before its experiments start; 0: no threshold",
    )
    always: Flag = Field(
        default=False, description="every slice waits for an approval, whatever its estimate"
    )
    approval_timeout_secs: Seconds = Field(
        default=604800.0,
        gt=0,
        description="how long an approval waits for an answer; past it the trigger run fails and "
        "starts nothing (a cooldown approval: its cooldowns are skipped)",
    )
    cooldowns: Flag = Field(
        default=False,
        description="also an approval in each experiment DAG before its cooldowns start (those that "
        "branch off a pretraining checkpoint), by the same rule on their estimate (so it needs "
        "`gpu_hours_threshold` or `always`); Reject skips them",
    )

    @property
    def enabled(self) -> bool:
        """Whether the trigger DAG has an approval task at all."""
        return self.always or self.gpu_hours_threshold > 0

    @model_validator(mode="after")
    def _cooldowns_have_a_rule(self) -> GateSettings:
        if self.cooldowns and not self.enabled:
            raise rule_error("cooldowns", "needs gpu_hours_threshold above 0 or always: true")
        return self


@dataclass(frozen=True, config=SCHEMA)
class AirflowSettings:
    """Validated `airflow:` section; every key is optional and documented by its field's description.

    String paths may use ``{VAR}`` of the experiment's pretrain job.
    """

    dag_id_prefix: Text = Field(
        default="", pattern=next(iter(_PATTERNS)), description="prefix of every DAG id"
    )
    schedule: Annotated[
        str | None,
        Parsed("cron, preset (@daily), ISO 8601 duration, or null", schedules.checked, str, type(None)),
    ] = Field(
        default=None,
        description="DAG schedule: cron, preset such as `@daily`, or ISO 8601 duration such as `PT6H`; "
        "each run is a sweep that drives the experiment on from where it stands; null: runs only when "
        "triggered",
    )
    start_date: Annotated[
        str, Parsed("a date (YYYY-MM-DD, or an ISO date-time)", schedules.iso_date, str, date)
    ] = Field(default="2024-01-01", description="DAG start date: the first schedule interval starts here")
    tags: Strings = Field(default=("autoexp",), description="DAG tags (one string or a list)")
    owner: Text = Field(default="autoexp", description="owner of every task")
    retries: Count = Field(default=2, ge=0, description="Airflow retries of every task")
    retry_delay_secs: Seconds = Field(default=300.0, ge=0, description="wait between two tries of a task")
    ssh_conn_id: Text = Field(
        default="slurm_default", min_length=1, description="Airflow SSH connection to the cluster"
    )
    pool: Text = Field(
        default="", description="Airflow pool capping concurrent Slurm jobs; empty: `slurm_<ssh_conn_id>`"
    )
    remote_dir: Annotated[str, Checked("str, plain `{VAR}` fields only", format_fields.checked)] = Field(
        default="{RUN_DIR}/autoexp",
        description="cluster folder where rendered scripts and helpers are staged; "
        "`{VAR}`s of the pretrain TRAIN job",
    )
    poll_interval_secs: Seconds = Field(
        default=0.0, ge=0, description="how often Slurm is polled; 0: each job's `check_interval_secs`"
    )
    checkpoint_settle_secs: Seconds = Field(
        default=5.0,
        ge=0,
        description="a checkpoint's files must stay unchanged this long before it counts as saved",
    )
    checkpoint_timeout_secs: Seconds = Field(
        default=0.0,
        ge=0,
        description="how long a checkpoint wait may last; 0 derives it from the training's budget: "
        "(retries + 1) x max_attempts_overall x its Slurm time limit, plus an hour of queueing "
        "(7 days without a time limit)",
    )
    max_attempts: Count = Field(
        default=10,
        ge=1,
        description="Slurm submissions per task try that count: all but a training's time limit or "
        "preemption after which its checkpoint tracker advanced",
    )
    max_attempts_without_progress: Count = Field(
        default=3,
        ge=1,
        description="consecutive submissions without a new checkpoint before a task fails (a preemption "
        "is skipped)",
    )
    max_attempts_overall: Count = Field(
        default=100,
        ge=1,
        description="Slurm submissions per task try whatever their end: bounds a training that keeps "
        "advancing across time limits",
    )
    unknown_timeout: Seconds = Field(
        default=1800.0,
        gt=0,
        description="how long any Slurm job may sit in a state nobody can classify before its task fails "
        "(the job is left running; the retry re-attaches)",
    )
    progress_timeout: Seconds = Field(
        default=3600.0,
        ge=0,
        description="how long a RUNNING training may go without progress (a new iteration in its log, or "
        "a checkpoint tracker change; a log that only grows is not progress) before it is cancelled as "
        "hung and resubmitted; 0 turns this off",
    )
    startup_timeout: Seconds = Field(
        default=7200.0,
        ge=0,
        description="how long a training runs before it can be judged hung at all (NCCL start-up, dataset "
        "index, checkpoint loading can be silent for long)",
    )
    paused: Flag = Field(default=True, description="new DAGs start paused")
    share_conversion_jobs: Flag = Field(
        default=False,
        description="the conversions of a phase whose checkpoints are ready together share one Slurm job "
        "(one job name per phase; each checkpoint stays its own task), for a cap on jobs per user",
    )
    keys: Keys = Field(
        default_factory=Keys,
        description="names of the variables and labels the planner reads; the defaults fit AutoExperiment",
    )
    notify: NotifierSettings = Field(default_factory=NotifierSettings, description="where failure alerts go")
    catchup: Flag = Field(
        default=False,
        description="with a schedule: also run the intervals since `start_date` that never ran "
        "(one sweep each)",
    )
    gate: GateSettings = Field(
        default_factory=GateSettings, description="the budget gate before a campaign slice starts"
    )
    loss_spike: LossSpikeSettings = Field(
        default_factory=LossSpikeSettings, description="stop a training whose loss spikes (off by default)"
    )

    @property
    def pool_name(self) -> str:
        """The pool every Slurm-submitting task uses."""
        return self.pool or "slurm_" + re.sub(r"[^A-Za-z0-9_.-]", "_", self.ssh_conn_id)


_VALIDATOR = TypeAdapter(AirflowSettings)
_DEFAULTS = AirflowSettings()  # frozen, so shared: most configs have no `airflow:` section


def _line_of(config_path: Path | None, dotted: str) -> str:
    """Return ``FILE:LINE`` of ``airflow.<dotted>`` (error path only: the file is composed again)."""
    if config_path is None:
        return "<airflow settings>"
    try:
        node: Any = yaml.compose(config_path.read_text(encoding="utf-8"), Loader=yaml.SafeLoader)
    except (OSError, yaml.YAMLError):
        return str(config_path)
    line = 1
    for part in ["airflow", *dotted.split(".")]:
        if not isinstance(node, yaml.MappingNode):
            break
        match = next(((k, v) for k, v in node.value if getattr(k, "value", None) == part), None)
        if match is None:
            break
        line = match[0].start_mark.line + 1
        node = match[1]
    return f"{config_path}:{line}"


def _is_section(annotation: Any) -> bool:
    return isinstance(annotation, type) and is_pydantic_dataclass(annotation)


def _fields(section: Any) -> dict[str, FieldInfo]:
    if not is_pydantic_dataclass(section):
        raise TypeError(f"{section!r} is not a settings section")
    return section.__pydantic_fields__


def _section(path: list[str]) -> Any:
    """The schema class of the mapping at ``path`` (``[]``: the `airflow:` section itself)."""
    section: Any = AirflowSettings
    for part in path:
        section = _fields(section)[part].annotation
    return section


def _exact(info: FieldInfo) -> Exact | None:
    return next((m for m in info.metadata if isinstance(m, Exact)), None)


def _problem(error: ErrorDetails, info: FieldInfo) -> str:
    """What is wrong with one key's value (and what is allowed), in the words of the pre-schema checks."""
    kind, ctx, got = error["type"], error.get("ctx") or {}, error["input"]
    if kind == "dataclass_type":
        shape = "a mapping of role to variable name" if info.annotation is Keys else "a mapping"
        return f"expected {shape}, got {got!r}"
    if kind == "literal_error":
        return f"{got!r} is not one of {', '.join(map(str, get_args(info.annotation)))}"
    if kind in ("greater_than", "greater_than_equal"):
        bound = f"> {ctx['gt']}" if kind == "greater_than" else f">= {ctx['ge']}"
        exact = _exact(info)
        return f"must be {bound}" + (f" ({exact.unit})" if exact and exact.unit else "")
    if kind == "string_too_short":
        return "must not be empty"
    if kind == "string_pattern_mismatch":
        return f"only {_PATTERNS[ctx['pattern']]} are allowed"
    return error["msg"]  # our own checks (Exact) already read as one line


def _explain(error: ErrorDetails) -> tuple[str, str]:
    """The dotted key and the message of one pydantic error."""
    loc = [str(part) for part in error["loc"]]
    if error["type"] == "autoexp_rule":
        return ".".join([*loc, (error.get("ctx") or {})["field"]]), error["msg"]
    if not loc:
        return "", error["msg"]
    section = _section(loc[:-1])
    if error["type"] in ("unexpected_keyword_argument", "invalid_key"):
        known = sorted(_fields(section))
        close = difflib.get_close_matches(loc[-1], known, n=1)
        hint = f"; did you mean {close[0]}?" if close else ""
        word = "role" if section is Keys else "key"
        return ".".join(loc), f"unknown {word} (known: {', '.join(known)}){hint}"
    return ".".join(loc), _problem(error, _fields(section)[loc[-1]])


def parse_settings(raw: Mapping[str, Any] | None, config_path: Path | None = None) -> AirflowSettings:
    """Validate the raw `airflow:` section (None: all defaults); unknown keys are errors."""
    if raw is None:
        return _DEFAULTS
    if not isinstance(raw, Mapping):
        raise SettingsError(f"{_line_of(config_path, '')}: airflow: expected a mapping, got {raw!r}")
    try:
        return _VALIDATOR.validate_python(dict(raw))
    except ValidationError as exc:
        # One line: the error of the key written first in the file.
        order = {str(key): index for index, key in enumerate(raw)}
        first = min(exc.errors(), key=lambda e: order.get(str(e["loc"][0]) if e["loc"] else "", -1))
        dotted, message = _explain(first)
    raise SettingsError(f"{_line_of(config_path, dotted)}: airflow.{dotted}: {message}")
