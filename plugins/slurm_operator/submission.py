"""Submitting one attempt: a script copy of its own, the log's folder, then sbatch."""

from __future__ import annotations

import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from slurm_operator import commands, naming
from slurm_operator.exceptions import SlurmError
from slurm_operator.hooks import SlurmHook
from slurm_operator.records import Attempt
from slurm_operator.resubmission import TaskLog


class SubmitFailed(SlurmError):
    """An attempt could not be submitted; the message names the script copy."""


@dataclass(frozen=True)
class SubmitSpec:
    """What every attempt of a task instance is submitted with.

    :param script: the script text, or None to read ``script_path`` on the cluster.
    :param output_pattern: the ``--output`` pattern (``%j`` in it: one log per attempt).
    :param lock_path: submit only when no active job of ours has ``name``, checked under ``flock``
        on this cluster file (``SlurmHook.submit_once``); otherwise that job is adopted.
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
    """Claim the next script copy (numbered from ``first_number`` on), sbatch it; the new attempt,
    said in ``log`` (the task's logger)."""
    base = naming.attempt_script_base(spec.remote_dir, spec.name)
    pattern = spec.output_pattern
    args = [*spec.sbatch_args, f"--job-name={spec.name}", f"--output={pattern}"]
    script_copy = f"{base}.attempt*.sbatch"
    try:
        text = spec.script if spec.script is not None else hook.read_text(str(spec.script_path))
        # Slurm cannot create the log's folder: a job whose --output folder is missing ends
        # FAILED at once with no log at all, which would read as the job's own failure.
        log_dir = posixpath.dirname(pattern)
        if log_dir and not base.startswith(f"{log_dir.rstrip('/')}/"):
            # (the claim below creates remote_dir/scripts/, and so remote_dir, anyway)
            hook.run(commands.mkdir_p(log_dir))
        # The copy's name is claimed on the cluster (exclusive create): no earlier attempt's
        # copy is overwritten, even when the history numbering them was lost.
        number = hook.claim_script_copy(base, first_number, text)
        script_copy = naming.attempt_script_path(spec.remote_dir, spec.name, number)
        adopted = False
        if spec.lock_path:
            job_id, adopted = hook.submit_once(
                spec.lock_path,
                spec.name,
                script_path=script_copy,
                sbatch_args=args,
                environment=spec.environment,
            )
        else:
            job_id = hook.submit(script_path=script_copy, sbatch_args=args, environment=spec.environment)
    except SlurmError as exc:
        raise SubmitFailed(f"sbatch of {script_copy} failed: {exc}") from None
    log_path = naming.resolve_output_path(pattern, job_id, spec.name)
    if adopted:
        # Another task instance sharing the name submitted it first (an overlapping run).
        log.info(
            "adopted active Slurm job %s named %s, log %s (unused copy %s)",
            job_id,
            spec.name,
            log_path,
            script_copy,
        )
        return Attempt(number, job_id, log_path, "", reattached=True, try_number=try_number)
    log.info("submitted attempt %d as Slurm job %s, log %s", number, job_id, log_path)
    return Attempt(number, job_id, log_path, script_copy, try_number=try_number)
