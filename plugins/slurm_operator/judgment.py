"""Judging an ended attempt: whose cancel it was, is the work done, did it progress, then the policy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any, Protocol

from slurm_operator import cancels
from slurm_operator.attempt_checks import TAIL_LINES, log_tail, probe_progress
from slurm_operator.exceptions import SlurmError
from slurm_operator.hooks import SlurmHook
from slurm_operator.records import Attempt, JobRecord, Ledger, Verdict
from slurm_operator.resubmission import Decision, decide
from slurm_operator.states import SlurmState


class TaskLog(Protocol):
    """The task's logger (``self.log`` of an operator), where the user reads what happened."""

    def info(self, event: Any, *args: Any, **kw: Any) -> Any: ...

    def warning(self, event: Any, *args: Any, **kw: Any) -> Any: ...


WorkDone = Callable[[SlurmHook, Attempt], "bool | None"]


class HungNotCancelled(SlurmError):
    """A hung job could not be cancelled: not resubmitted (it may still run), the retry re-attaches."""


class CancelledFromOutside(SlurmError):
    """The job was cancelled from outside Airflow: the task stops without retries (a cancel means stop)."""


@dataclass(frozen=True)
class Caps:
    """The resubmission caps and the progress probe (see ``resubmission.decide``)."""

    max_attempts: int
    max_attempts_without_progress: int
    progress_command: str | None


def judge(hook: SlurmHook, ledger: Ledger, work_done: WorkDone, caps: Caps, log: TaskLog) -> Decision:
    """Judge the ledger's current attempt, which ended; its check answers and verdict go on the ledger.

    The verdict is logged to ``log``, the task's logger (where the user reads it).

    Raises CancelledFromOutside (the verdict FAIL recorded) for a cancel from outside, and
    ``cancels.CancelOriginUnknown`` (nothing recorded) when whose cancel it was cannot be read.
    """
    if ledger.current.state is SlurmState.CANCELLED and ledger.current.hung is None:
        outside = cancels.note_cancel(hook, ledger)
        if outside is not None:
            ledger.update_current(replace(ledger.current, verdict=Verdict.FAIL))
            raise CancelledFromOutside(outside)
    current = ledger.current
    done = (
        work_done(hook, current) if current.state is SlurmState.COMPLETED and current.hung is None else None
    )
    progress = probe_progress(hook, caps.progress_command) if caps.progress_command else None
    ledger.update_current(replace(current, completion_ok=done, progress=progress))
    decision = decide(
        ledger.budget(),
        completion_ok=done,
        max_attempts=caps.max_attempts,
        max_attempts_without_progress=caps.max_attempts_without_progress,
        progress_baseline=ledger.baseline,
        progress_probe=caps.progress_command is not None,
    )
    ledger.update_current(replace(ledger.current, verdict=decision.verdict))
    log.info("Slurm job %s (attempt %d): %s -> %s", current.job_id, current.attempt, decision.reason,
             decision.verdict.value)  # fmt: skip
    return decision


def cancel_hung(hook: SlurmHook, ledger: Ledger, record: JobRecord, why: str, log: TaskLog) -> None:
    """Cancel the current attempt's hung job (marker: ours, as hung) and record it hung; said in ``log``.

    Raises HungNotCancelled when scancel fails: resubmitting next to a job that may still run would
    run the work twice.
    """
    log.warning("Slurm job %s: %s; cancelling it", record.job_id, why)
    try:
        cancels.cancel_ours(hook, record.job_id, ledger.current.log_path, f"{cancels.HUNG_REASON}: {why}")
    except SlurmError as exc:
        raise HungNotCancelled(f"Slurm job {record.job_id} hung ({why}), and scancel failed: {exc}") from None
    ledger.update_current(replace(ledger.current.ended(record), hung=why))


def failure_message(hook: SlurmHook, attempt: Attempt, decision: Decision) -> str:
    """The task's error for a failed attempt: job, state, exit code, reason, log and its last lines."""
    tail = log_tail(hook, attempt.log_path)
    return (
        f"Slurm job {attempt.job_id} {attempt.shown_state} (exit code {attempt.exit_code}), attempt "
        f"{attempt.attempt}: {decision.reason}; log {attempt.log_path}; last {TAIL_LINES} lines:\n{tail}"
    )
