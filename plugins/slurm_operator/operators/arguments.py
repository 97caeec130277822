"""A SlurmOperator's rendered arguments: their checks (in execute(): in __init__ templates are
unrendered), and what they give each submission and each wait."""

from __future__ import annotations

import re
from typing import Any, Protocol

from airflow.sdk.exceptions import AirflowException

from slurm_operator.model.ledger import Ledger
from slurm_operator.operators.submission import SubmitSpec
from slurm_operator.policy import fatal
from slurm_operator.policy.completion import CompletionRule


class OperatorArguments(Protocol):
    """The operator attributes the checks read."""

    task_id: str
    script: str | None
    script_path: str | None
    remote_dir: str
    output_path: str | None
    completion_regex: str | None
    max_attempts: int
    max_attempts_without_progress: int
    max_attempts_overall: int
    max_excluded_nodes: int
    fatal_patterns: dict[str, Any]
    unknown_timeout: float
    progress_timeout: float | None
    startup_timeout: float
    sbatch_args: list[str]
    environment: dict[str, str] | None
    ssh_conn_id: str
    poll_interval: float
    stream_logs: bool
    failure_budget: float
    min_defer_seconds: float
    progress_paths: list[str]
    progress_pattern: str | None
    submit_lock: str | None
    end_task_on_success: bool


def check_arguments(op: OperatorArguments) -> None:
    """Raise AirflowException naming the task and the bad value."""
    task = f"task {op.task_id}"
    if (op.script is None) == (op.script_path is None):
        raise AirflowException(f"{task}: give exactly one of script or script_path")
    if not op.remote_dir or not op.remote_dir.startswith("/"):
        raise AirflowException(f"{task}: remote_dir must be an absolute path, got {op.remote_dir!r}")
    if op.submit_lock is not None and not op.submit_lock.startswith("/"):
        raise AirflowException(f"{task}: submit_lock must be an absolute path, got {op.submit_lock!r}")
    if op.output_path is not None and "%j" not in op.output_path:
        raise AirflowException(
            f"{task}: output_path {op.output_path!r} must contain %j (one log per attempt)"
        )
    if op.completion_regex is not None:
        try:
            re.compile(op.completion_regex)
        except re.error as exc:
            raise AirflowException(f"{task}: completion_regex {op.completion_regex!r}: {exc}") from None
    try:
        fatal.parse_rules(op.fatal_patterns)
    except fatal.FatalSpecError as exc:
        raise AirflowException(f"{task}: {exc}") from None
    if op.progress_pattern is not None:
        try:
            if re.compile(op.progress_pattern).groups < 1:
                raise re.error("needs a group: its group 1 is the progress")
        except re.error as exc:
            raise AirflowException(f"{task}: progress_pattern {op.progress_pattern!r}: {exc}") from None
    if min(op.max_attempts, op.max_attempts_without_progress, op.max_attempts_overall) < 1:
        raise AirflowException(
            f"{task}: max_attempts, max_attempts_without_progress and max_attempts_overall must be >= 1"
        )
    if not isinstance(op.max_excluded_nodes, int) or op.max_excluded_nodes < 0:
        raise AirflowException(
            f"{task}: max_excluded_nodes must be an integer >= 0, got {op.max_excluded_nodes!r}"
        )
    if op.unknown_timeout <= 0 or op.startup_timeout < 0 or (op.progress_timeout or 0) < 0:
        raise AirflowException(
            f"{task}: unknown_timeout must be > 0, progress_timeout and startup_timeout >= 0 "
            f"(progress_timeout 0 or None: no hang detection), got {op.unknown_timeout!r}, "
            f"{op.progress_timeout!r}, {op.startup_timeout!r}"
        )
    for arg in op.sbatch_args:
        if arg.startswith(("--job-name", "-J", "--output", "-o")):
            raise AirflowException(f"{task}: sbatch_args {arg!r}: set job_name / output_path instead")


def submit_spec(op: OperatorArguments, name: str, output_pattern: str) -> SubmitSpec:
    """What every attempt of job ``name`` is submitted with."""
    return SubmitSpec(
        op.remote_dir,
        name,
        output_pattern,
        op.script,
        op.script_path,
        op.sbatch_args,
        op.environment,
        op.submit_lock,
    )


def job_trigger_kwargs(op: OperatorArguments, ledger: Ledger) -> dict[str, Any]:
    """The SlurmJobTrigger arguments of a wait for the ledger's current attempt (``carry``: the ledger)."""
    current = ledger.current
    return {
        "ssh_conn_id": op.ssh_conn_id,
        "job_id": current.job_id,
        "poll_interval": op.poll_interval,
        "log_path": current.log_path,
        "log_offset": ledger.log_offset,
        "stream_logs": op.stream_logs,
        "failure_budget": op.failure_budget,
        "carry": ledger.to_dict(),
        "min_defer_seconds": op.min_defer_seconds,
        "unknown_timeout": op.unknown_timeout,
        "progress_timeout": op.progress_timeout,
        "startup_timeout": op.startup_timeout,
        "progress_paths": op.progress_paths,
        "progress_pattern": op.progress_pattern,
        # Only when set: the kwargs of a wait without them stay as they were (DAG fingerprints).
        **({"fatal_patterns": op.fatal_patterns} if op.fatal_patterns else {}),
    }


def ending_kwargs(op: OperatorArguments, rule: CompletionRule, own_rule: bool) -> dict[str, Any]:
    """The trigger arguments that let it end the task on success: the checks it runs itself (none
    when the operator has a rule of its own the trigger cannot run)."""
    if not op.end_task_on_success or own_rule:
        return {}
    checks = {"completion_regex": rule.regex, "completion_command": rule.command}
    return {"end_task_on_success": True, **checks} if rule.configured else {}
