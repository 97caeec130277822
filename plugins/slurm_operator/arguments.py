"""Checks of a SlurmOperator's rendered arguments (run in execute(): in __init__ templates are unrendered)."""

from __future__ import annotations

import re
from typing import Protocol

from airflow.sdk.exceptions import AirflowException


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
    unknown_timeout: float
    progress_timeout: float | None
    startup_timeout: float
    sbatch_args: list[str]


def check_arguments(op: OperatorArguments) -> None:
    """Raise AirflowException naming the task and the bad value."""
    task = f"task {op.task_id}"
    if (op.script is None) == (op.script_path is None):
        raise AirflowException(f"{task}: give exactly one of script or script_path")
    if not op.remote_dir or not op.remote_dir.startswith("/"):
        raise AirflowException(f"{task}: remote_dir must be an absolute path, got {op.remote_dir!r}")
    if op.output_path is not None and "%j" not in op.output_path:
        raise AirflowException(
            f"{task}: output_path {op.output_path!r} must contain %j (one log per attempt)"
        )
    if op.completion_regex is not None:
        try:
            re.compile(op.completion_regex)
        except re.error as exc:
            raise AirflowException(f"{task}: completion_regex {op.completion_regex!r}: {exc}") from None
    if op.max_attempts < 1 or op.max_attempts_without_progress < 1:
        raise AirflowException(f"{task}: max_attempts and max_attempts_without_progress must be >= 1")
    if op.unknown_timeout <= 0 or op.startup_timeout < 0 or (op.progress_timeout or 0) < 0:
        raise AirflowException(
            f"{task}: unknown_timeout must be > 0, progress_timeout and startup_timeout >= 0 "
            f"(progress_timeout 0 or None: no hang detection), got {op.unknown_timeout!r}, "
            f"{op.progress_timeout!r}, {op.startup_timeout!r}"
        )
    for arg in op.sbatch_args:
        if arg.startswith(("--job-name", "-J", "--output", "-o")):
            raise AirflowException(f"{task}: sbatch_args {arg!r}: set job_name / output_path instead")
