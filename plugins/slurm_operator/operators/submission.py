"""Submitting one attempt: a script copy of its own, the log's folder, then sbatch: one remote command."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.model import naming
from slurm_operator.model.exceptions import SlurmError
from slurm_operator.model.ledger import Attempt
from slurm_operator.policy import nodes
from slurm_operator.policy.resubmission import TaskLog
from slurm_operator.remote import commands


class SubmitFailed(SlurmError):
    """An attempt could not be submitted; the message names the script copy."""


@dataclass(frozen=True)
class SubmitSpec:
    """What every attempt of a task instance is submitted with.

    :param script: the script text, or None to read ``script_path`` on the cluster.
    :param output_pattern: the ``--output`` pattern (``%j`` in it: one log per attempt).
    :param lock_path: submit only when no active job of ours has ``name``, checked under ``flock``
        on this cluster file (``commands.submit_attempt``); otherwise that job is adopted.
    """

    remote_dir: str
    name: str
    output_pattern: str
    script: str | None
    script_path: str | None
    sbatch_args: Sequence[str]
    environment: Mapping[str, str] | None
    lock_path: str | None = None


def submit_attempt(
    hook: SlurmHook, spec: SubmitSpec, first_number: int, try_number: int | None, log: TaskLog
) -> Attempt:
    """Claim the next script copy (numbered from ``first_number`` on) and sbatch it, in one remote
    command (``SlurmHook.submit_attempt``); the new attempt, said in ``log`` (the task's logger)."""
    base = naming.attempt_script_base(spec.remote_dir, spec.name)
    pattern = spec.output_pattern
    log_dir = posixpath.dirname(pattern)
    command = commands.AttemptSubmit(
        base,
        first_number,
        sbatch_args=[*spec.sbatch_args, f"--job-name={spec.name}", f"--output={pattern}"],
        environment=spec.environment,
        source=None if spec.script is not None else str(spec.script_path),
        # (the claim creates remote_dir/scripts/, and so remote_dir, anyway)
        log_dir=None if not log_dir or base.startswith(f"{log_dir.rstrip('/')}/") else log_dir,
        lock_path=spec.lock_path,
        name=spec.name,
    )
    try:
        done = hook.submit_attempt(command, spec.script)
    except SlurmError as exc:
        raise SubmitFailed(f"submitting {base}.attempt*.sbatch failed: {exc}") from None
    log_path = naming.resolve_output_path(pattern, done.job_id, spec.name)
    if done.number is None:
        # Another task instance sharing the name submitted it first (an overlapping run).
        log.info("adopted active Slurm job %s named %s, log %s", done.job_id, spec.name, log_path)
        return Attempt(first_number, done.job_id, log_path, "", reattached=True, try_number=try_number)
    script_copy = naming.attempt_script_path(spec.remote_dir, spec.name, done.number)
    log.info("submitted attempt %d as Slurm job %s, log %s", done.number, done.job_id, log_path)
    return Attempt(done.number, done.job_id, log_path, script_copy, try_number=try_number)


def without_bad_nodes(
    spec: SubmitSpec, attempts: Sequence[Attempt], cap: int, log: TaskLog
) -> tuple[SubmitSpec, str | None]:
    """``spec`` sent away from the bad nodes of ``attempts`` (``policy.nodes``, at most ``cap``),
    and the attempt's record of them (``n3 (why), ...``; None for none), said in ``log``."""
    bad = nodes.bad_nodes(attempts, cap)
    if not bad:
        return spec, None
    said = ", ".join(f"{node} ({why})" for node, why in bad.items())
    log.warning("excluding node(s) %s", said)
    return replace(spec, sbatch_args=commands.exclude_args(spec.sbatch_args, list(bad))), said
