"""The optional `airflow:` section of a campaign YAML: schema, defaults and validation (no Airflow import)."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml


class SettingsError(ValueError):
    """A bad `airflow:` section; `str()` is the one-line `FILE:LINE: airflow.key: message`."""


@dataclass(frozen=True)
class Keys:
    """Names of the variables and labels the planner reads; defaults fit an unchanged AutoExperiment config.

    :param group: variable whose value names an experiment (one DAG per distinct value).
    :param phase: variable holding the phase label; ``pretrain``/``cooldown`` are its two labels.
    :param mode: variable holding the mode label; ``train``/``convert_eval`` are its two labels.
    :param branch: variable naming a cooldown branch (the token budget label).
    """

    group: str = "EXP_NAME"
    phase: str = "PHASE"
    pretrain: str = "PRETRAIN"
    cooldown: str = "COOLDOWN"
    mode: str = "MODE"
    train: str = "TRAIN"
    convert_eval: str = "CONVERT_EVAL"
    branch: str = "CD_SCALE"
    run_dir: str = "RUN_DIR"
    branch_iter: str = "ITER"
    save_interval: str = "SAVE_INTERVAL"
    train_iters: str = "TRAIN_ITERS"
    seq_length: str = "SEQ_LENGTH"
    global_batch_size: str = "GLOBAL_BATCH_SIZE"
    pretrain_tokens: str = "TOTAL_TOKENS_NUM"
    phase_tokens: str = "TOTAL_TOKENS_THIS_PHASE"
    time_limit: str = "TIME"


NOTIFIER_KINDS = ("log", "smtp", "slack")


@dataclass(frozen=True)
class NotifierSettings:
    """Where failure alerts go: a log file (default), e-mail over an SMTP connection, or a Slack webhook.

    :param path: log file for ``kind: log``; empty means ``$AIRFLOW_HOME/logs/autoexp-alerts.log``.
    :param to: recipients for ``kind: smtp``.
    :param conn_id: Airflow connection of the SMTP server or Slack webhook.
    """

    kind: str = "log"
    path: str = ""
    to: tuple[str, ...] = ()
    conn_id: str = ""


@dataclass(frozen=True)
class AirflowSettings:
    """Validated `airflow:` section. String paths may use ``{VAR}`` of the experiment's pretrain job.

    :param remote_dir: folder on the cluster where rendered scripts and helpers are staged.
    :param pool: Airflow pool capping concurrent Slurm jobs; empty means ``slurm_<ssh_conn_id>``.
    :param poll_interval_secs: 0 means each job's ``check_interval_secs``.
    :param checkpoint_timeout_secs: how long a checkpoint wait may last; 0 derives it from the
        training's time budget: (retries + 1) x max_attempts x its Slurm time limit, plus an hour
        of queueing (7 days when the job has no time limit variable).
    :param unknown_timeout: seconds a Slurm job may sit in a state the Slurm layer cannot classify
        before its task fails (the job is left running; the retry re-attaches). Every Slurm task.
    :param progress_timeout: seconds a RUNNING training may go without its log or its checkpoint
        tracker changing before it is cancelled as hung and resubmitted; 0 turns this off.
    :param startup_timeout: seconds a training runs before it can be judged hung at all (start-up:
        NCCL, dataset index, checkpoint loading can be silent for long).
    """

    keys: Keys = field(default_factory=Keys)
    dag_id_prefix: str = ""
    schedule: str | None = None
    start_date: str = "2024-01-01"
    tags: tuple[str, ...] = ("autoexp",)
    owner: str = "autoexp"
    retries: int = 2
    retry_delay_secs: float = 300.0
    ssh_conn_id: str = "slurm_default"
    pool: str = ""
    remote_dir: str = "{RUN_DIR}/autoexp"
    poll_interval_secs: float = 0.0
    checkpoint_settle_secs: float = 5.0
    checkpoint_timeout_secs: float = 0.0
    max_attempts: int = 10
    max_attempts_without_progress: int = 3
    unknown_timeout: float = 1800.0
    progress_timeout: float = 3600.0
    startup_timeout: float = 7200.0
    paused: bool = True
    notify: NotifierSettings = field(default_factory=NotifierSettings)

    @property
    def pool_name(self) -> str:
        """The pool every Slurm-submitting task uses."""
        return self.pool or "slurm_" + re.sub(r"[^A-Za-z0-9_.-]", "_", self.ssh_conn_id)


_SCALARS: dict[str, type | tuple[type, ...]] = {
    "dag_id_prefix": str,
    "schedule": (str, type(None)),
    "start_date": str,
    "owner": str,
    "retries": int,
    "retry_delay_secs": (int, float),
    "ssh_conn_id": str,
    "pool": str,
    "remote_dir": str,
    "poll_interval_secs": (int, float),
    "checkpoint_settle_secs": (int, float),
    "checkpoint_timeout_secs": (int, float),
    "max_attempts": int,
    "max_attempts_without_progress": int,
    "unknown_timeout": (int, float),
    "progress_timeout": (int, float),
    "startup_timeout": (int, float),
    "paused": bool,
}
_KEY_NAMES = frozenset(f.name for f in fields(Keys))
_DAG_ID_PREFIX = re.compile(r"^[A-Za-z0-9_.-]*$")


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


def _fail(config_path: Path | None, dotted: str, message: str) -> SettingsError:
    return SettingsError(f"{_line_of(config_path, dotted)}: airflow.{dotted}: {message}")


def _type_name(expected: type | tuple[type, ...]) -> str:
    kinds = expected if isinstance(expected, tuple) else (expected,)
    return " or ".join("null" if k is type(None) else k.__name__ for k in kinds)


def _check_scalar(path: Path | None, key: str, value: Any, expected: type | tuple[type, ...]) -> Any:
    kinds = expected if isinstance(expected, tuple) else (expected,)
    # bool is an int subclass: `retries: yes` must not pass as 1.
    if isinstance(value, bool) and bool not in kinds:
        raise _fail(path, key, f"expected {_type_name(expected)}, got {value!r}")
    if not isinstance(value, kinds):
        raise _fail(path, key, f"expected {_type_name(expected)}, got {value!r}")
    return value


def _string_list(path: Path | None, key: str, value: Any) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(path, key, f"expected a list of strings, got {value!r}")
    return tuple(value)


def _parse_keys(path: Path | None, raw: Any) -> Keys:
    if not isinstance(raw, Mapping):
        raise _fail(path, "keys", f"expected a mapping of role to variable name, got {raw!r}")
    for name, value in raw.items():
        if name not in _KEY_NAMES:
            raise _fail(path, f"keys.{name}", f"unknown role (known: {', '.join(sorted(_KEY_NAMES))})")
        if not isinstance(value, str) or not value:
            raise _fail(path, f"keys.{name}", f"expected a variable name, got {value!r}")
    return Keys(**{str(k): str(v) for k, v in raw.items()})


def _parse_notify(path: Path | None, raw: Any) -> NotifierSettings:
    if not isinstance(raw, Mapping):
        raise _fail(path, "notify", f"expected a mapping, got {raw!r}")
    allowed = {"kind", "path", "to", "conn_id"}
    for name in raw:
        if name not in allowed:
            raise _fail(path, f"notify.{name}", f"unknown key (known: {', '.join(sorted(allowed))})")
    kind = _check_scalar(path, "notify.kind", raw.get("kind", "log"), str)
    if kind not in NOTIFIER_KINDS:
        raise _fail(path, "notify.kind", f"{kind!r} is not one of {', '.join(NOTIFIER_KINDS)}")
    notifier = NotifierSettings(
        kind=kind,
        path=_check_scalar(path, "notify.path", raw.get("path", ""), str),
        to=_string_list(path, "notify.to", raw.get("to", [])),
        conn_id=_check_scalar(path, "notify.conn_id", raw.get("conn_id", ""), str),
    )
    if kind == "smtp" and not notifier.to:
        raise _fail(path, "notify.to", "kind smtp needs at least one recipient")
    if kind == "slack" and not notifier.conn_id:
        raise _fail(path, "notify.conn_id", "kind slack needs the Airflow connection id of the webhook")
    return notifier


def parse_settings(raw: Mapping[str, Any] | None, config_path: Path | None = None) -> AirflowSettings:
    """Validate the raw `airflow:` section (None: all defaults); unknown keys are errors."""
    if raw is None:
        return AirflowSettings()
    if not isinstance(raw, Mapping):
        raise SettingsError(f"{_line_of(config_path, '')}: airflow: expected a mapping, got {raw!r}")
    values: dict[str, Any] = {}
    for name, value in raw.items():
        key = str(name)
        if key in _SCALARS:
            values[key] = _check_scalar(config_path, key, value, _SCALARS[key])
        elif key == "tags":
            values[key] = _string_list(config_path, key, value)
        elif key == "keys":
            values[key] = _parse_keys(config_path, value)
        elif key == "notify":
            values[key] = _parse_notify(config_path, value)
        else:
            known = sorted([*_SCALARS, "tags", "keys", "notify"])
            raise _fail(config_path, key, f"unknown key (known: {', '.join(known)})")
    settings = AirflowSettings(**values)
    for key in ("retries", "max_attempts", "max_attempts_without_progress"):
        minimum = 0 if key == "retries" else 1
        if getattr(settings, key) < minimum:
            raise _fail(config_path, key, f"must be >= {minimum}")
    for key in (
        "retry_delay_secs",
        "poll_interval_secs",
        "checkpoint_settle_secs",
        "checkpoint_timeout_secs",
        "progress_timeout",
        "startup_timeout",
    ):
        if getattr(settings, key) < 0:
            raise _fail(config_path, key, "must be >= 0")
    if settings.unknown_timeout <= 0:
        raise _fail(config_path, "unknown_timeout", "must be > 0 (seconds)")
    if not _DAG_ID_PREFIX.match(settings.dag_id_prefix):
        raise _fail(config_path, "dag_id_prefix", "only letters, digits, '_', '.' and '-' are allowed")
    if not settings.ssh_conn_id:
        raise _fail(config_path, "ssh_conn_id", "must not be empty")
    return settings
