"""What an ended attempt means and what the task does next: succeed, resubmit or fail.

The one place an end is judged. The operator hands over the attempts its try's caps count (the
ended one last), the progress baseline and, for a COMPLETED job, its own answer to "is the work
done" (``SlurmOperator.is_work_done``, asked before the policy runs); the policy asks the cluster
only what that leaves open (whose cancel it was, the progress probe, a failure's log tail), and
returns the attempt as judged with the decision, for the operator to record. It calls nothing back.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from slurm_operator import cancels, error_lines
from slurm_operator.exceptions import RemotePathNotFoundError, SlurmError
from slurm_operator.hooks import SlurmHook
from slurm_operator.records import Attempt, Verdict
from slurm_operator.states import RESUBMITTABLE_STATES, SlurmState

logger = logging.getLogger(__name__)

TAIL_BYTES = 256 * 1024
TAIL_LINES = error_lines.TAIL_LINES

CompletionCheck = Callable[[SlurmHook, Attempt], bool]


class TaskLog(Protocol):
    """The task's logger (``self.log`` of an operator), where the user reads what happened."""

    def info(self, event: Any, *args: Any, **kw: Any) -> Any: ...

    def warning(self, event: Any, *args: Any, **kw: Any) -> Any: ...


class HungNotCancelled(SlurmError):
    """A hung job could not be cancelled: not resubmitted (it may still run), the retry re-attaches."""


class CancelledFromOutside(SlurmError):
    """The job was cancelled from outside Airflow: the task stops without retries (a cancel means stop).

    :param attempt: the attempt as judged (who cancelled it, the verdict FAIL), for the caller to record.
    """

    def __init__(self, message: str, attempt: Attempt) -> None:
        super().__init__(message)
        self.attempt = attempt


@dataclass(frozen=True)
class Caps:
    """The resubmission caps and the progress probe (see ``decide``)."""

    max_attempts: int
    max_attempts_without_progress: int
    progress_command: str | None


# ----------------------------------------------------------------------------------- the policy
@dataclass(frozen=True)
class Decision:
    """A verdict and the one-line reason for it (logged, and put into the task error)."""

    verdict: Verdict
    reason: str


def completion_regex_matches(pattern: str, log_tail: str) -> bool:
    """True when the completion regex occurs in the log text (multi-line mode)."""
    return re.search(pattern, log_tail, re.MULTILINE) is not None


def completion_command_says_done(stdout: str) -> bool:
    """A completion command says done by printing 1 (AutoExperiment's termination_cmd contract)."""
    return stdout.strip() == "1"


def _trailing_without_progress(baseline: str | None, attempts: Sequence[Attempt], probe: bool) -> int:
    """Count the most recent attempts that hung or (with a probe) after which it showed no change.

    A hung attempt counts even when the probe moved before the hang: a job that hangs every time
    must stop, and without a probe a hang is the only sign of no progress there is.
    """
    count = 0
    values = [baseline, *(a.progress for a in attempts)]
    for attempt, before, after in zip(
        reversed(attempts), reversed(values[:-1]), reversed(values[1:]), strict=True
    ):
        moved = probe and after is not None and after != before
        if attempt.hung is None and (moved or not probe):
            break
        count += 1
    return count


def decide(
    attempts: Sequence[Attempt],
    *,
    completion_ok: bool | None,
    max_attempts: int,
    max_attempts_without_progress: int,
    progress_baseline: str | None = None,
    progress_probe: bool = False,
) -> Decision:
    """Decide what to do after the last of ``attempts`` ended (the one place a state is judged).

    ``completion_ok`` is the "is the work done" check's answer for a COMPLETED job (None = no check
    configured). Resubmission is capped by ``max_attempts`` in total and, when a progress probe is
    configured, by ``max_attempts_without_progress`` consecutive attempts that moved nothing — a
    poison job (crashes at the same step, exits 0 without saving) stops instead of looping. An
    attempt cancelled as hung (whatever Slurm says of the cancelled job) is resubmittable and counts
    as one without progress, with or without a probe. So is a job the plugin cancelled itself when
    an earlier try was stopped or timed out (``cancelled_by_airflow``). ``attempts`` are those of
    this try's budget (``Ledger.budget``).
    """
    last = attempts[-1]
    state = last.state
    if last.hung is not None:
        reason = "job hung (its watched files stopped changing) and was cancelled"
    elif state is SlurmState.COMPLETED:
        if completion_ok is None:
            return Decision(Verdict.SUCCEED, "job COMPLETED")
        if completion_ok:
            return Decision(Verdict.SUCCEED, "job COMPLETED and the completion check passed")
        reason = "job COMPLETED but the completion check says not done"
    elif state in RESUBMITTABLE_STATES:
        reason = f"job ended {state.value}, which is resubmittable"
    elif state is SlurmState.CANCELLED and last.cancelled_by_airflow:
        reason = f"job was cancelled by Airflow in an earlier try ({last.cancelled_by_airflow})"
    else:
        return Decision(Verdict.FAIL, f"job ended {state.value}")
    if len(attempts) >= max_attempts:
        return Decision(Verdict.FAIL, f"{reason}, but max_attempts={max_attempts} is reached")
    if progress_probe or last.hung is not None:
        stuck = _trailing_without_progress(progress_baseline, attempts, progress_probe)
        if stuck >= max_attempts_without_progress:
            return Decision(
                Verdict.FAIL,
                f"{reason}, but the last {stuck} attempt(s) made no progress "
                f"(max_attempts_without_progress={max_attempts_without_progress})",
            )
    return Decision(Verdict.RESUBMIT, reason)


# ----------------------------------------------------------------------------------- an ended attempt
def asks_work_done(attempt: Attempt) -> bool:
    """Whether the policy needs the "is the work done" answer for ``attempt``: a COMPLETED job that
    was not cancelled as hung (the caller asks its rule only then, and passes the answer to judge)."""
    return attempt.state is SlurmState.COMPLETED and attempt.hung is None


def judge(
    hook: SlurmHook,
    attempts: Sequence[Attempt],
    *,
    baseline: str | None,
    work_done: bool | None,
    caps: Caps,
    log: TaskLog,
) -> tuple[Attempt, Decision]:
    """Judge the last of ``attempts`` (the try's budget), which ended: it with its check answers and
    verdict, and the decision; the verdict is said in ``log``, the task's logger.

    ``work_done`` is the caller's answer for a COMPLETED job (see ``asks_work_done``), else None.
    Raises CancelledFromOutside (carrying the attempt, verdict FAIL) for a cancel from outside, and
    ``cancels.CancelOriginUnknown`` (nothing to record) when whose cancel it was cannot be read.
    """
    current = attempts[-1]
    if current.state is SlurmState.CANCELLED and current.hung is None:
        current, outside = cancels.note_cancel(hook, current)
        if outside is not None:
            raise CancelledFromOutside(outside, replace(current, verdict=Verdict.FAIL))
    progress = probe_progress(hook, caps.progress_command) if caps.progress_command else None
    current = replace(current, completion_ok=work_done, progress=progress)
    decision = decide(
        [*attempts[:-1], current],
        completion_ok=work_done,
        max_attempts=caps.max_attempts,
        max_attempts_without_progress=caps.max_attempts_without_progress,
        progress_baseline=baseline,
        progress_probe=caps.progress_command is not None,
    )
    log.info("Slurm job %s (attempt %d): %s -> %s", current.job_id, current.attempt, decision.reason,
             decision.verdict.value)  # fmt: skip
    return replace(current, verdict=decision.verdict), decision


def cancel_hung(hook: SlurmHook, attempt: Attempt, why: str, log: TaskLog) -> Attempt:
    """Cancel the ended ``attempt``'s hung job (marker: ours, as hung); it, recorded hung. Said in ``log``.

    Raises HungNotCancelled when scancel fails: resubmitting next to a job that may still run would
    run the work twice.
    """
    log.warning("Slurm job %s: %s; cancelling it", attempt.job_id, why)
    try:
        cancels.cancel_ours(hook, attempt.job_id, attempt.log_path, f"{cancels.HUNG_REASON}: {why}")
    except SlurmError as exc:
        raise HungNotCancelled(
            f"Slurm job {attempt.job_id} hung ({why}), and scancel failed: {exc}"
        ) from None
    return replace(attempt, hung=why)


def failure_message(
    hook: SlurmHook,
    attempt: Attempt,
    decision: Decision,
    patterns: error_lines.LogPatterns = error_lines.GENERIC,
) -> str:
    """The task's error for a failed attempt: job, state, exit code, reason, log and its error lines
    (``error_lines.error_lines`` of its tail: the first error line, then the last TAIL_LINES lines
    that are not boilerplate; ``patterns`` adds the caller's launcher's to srun's)."""
    tail = error_lines.error_text(read_tail(hook, attempt.log_path), patterns)
    return (
        f"Slurm job {attempt.job_id} {attempt.shown_state} (exit code {attempt.exit_code}), attempt "
        f"{attempt.attempt}: {decision.reason}; log {attempt.log_path}; last {TAIL_LINES} lines:\n{tail}"
    )


# ----------------------------------------------------------------------------------- asking the cluster
def completion_ok(
    hook: SlurmHook,
    attempt: Attempt,
    *,
    regex: str | None,
    command: str | None,
    check: CompletionCheck | None,
) -> bool | None:
    """All configured checks pass (True), one fails (False), or none is configured (None)."""
    checks: list[bool] = []
    if regex is not None:
        checks.append(completion_regex_matches(regex, read_tail(hook, attempt.log_path)))
    if command is not None:
        result = hook.run(command)
        checks.append(result.exit_status == 0 and completion_command_says_done(result.stdout))
    if check is not None:
        checks.append(bool(check(hook, attempt)))
    return all(checks) if checks else None


def probe_progress(hook: SlurmHook, command: str) -> str | None:
    """The progress command's output (stripped); None when it failed: unknown, never "no change"."""
    try:
        result = hook.run(command)
    except SlurmError as exc:
        logger.warning("progress command failed: %s", exc)
        return None
    return result.stdout.strip() if result.exit_status == 0 else None


def read_tail(hook: SlurmHook, path: str) -> str:
    """The last TAIL_BYTES of a remote log, or a note saying why it cannot be read."""
    try:
        size = hook.stat(path).size
        return hook.read_log(path, max(0, size - TAIL_BYTES), TAIL_BYTES).text
    except (RemotePathNotFoundError, SlurmError) as exc:
        return f"<log unreadable: {exc}>"
