"""What an ended attempt means and what the task does next: succeed, resubmit or fail.

The one place an end is judged. The operator hands over its ledger (the ended attempt is the
current one; its try's caps count ``Ledger.budget``, from the ledger's progress baseline) and, for a
COMPLETED job, its own answer to "is the work done" (``SlurmOperator.is_work_done``, asked before
the policy runs); the policy asks the cluster only what that leaves open (whose cancel it was, the
progress probe, a failure's log tail), records the attempt as judged in the ledger, and returns the
decision, for the operator to act on and store. It calls nothing back.

The rules, in order (``decide``):

- a job whose log tail matches one of the caller's fatal patterns (``FatalRules``: e.g. a training
  that diverged) is FATAL: never resubmitted, and the task fails without retries, since the same
  input ends the same way; a COMPLETED job whose work is done still succeeds;
- a COMPLETED job succeeds when its work is done; one that is not, a hung job, a resubmittable end
  (``RESUBMITTABLE_STATES``) and a job the plugin cancelled in an earlier try are resubmitted;
  anything else fails;
- **progress is not failure**: with a progress probe, a TIMEOUT or PREEMPTED attempt after which
  the probe moved (``PROGRESS_ENDS``) does not count toward ``max_attempts``: a long training
  needs many time-limit cycles. Every attempt counts toward ``max_attempts_overall``, the bound
  that stops even a training that keeps advancing;
- ``max_attempts_without_progress`` caps the trailing attempts that hung or after which the probe
  did not move; a PREEMPTED attempt is not the job's doing and neither counts nor breaks the run.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.model.exceptions import SlurmError
from slurm_operator.model.ledger import Attempt, Ledger, Verdict
from slurm_operator.model.naming import fatal_marker
from slurm_operator.model.states import PROGRESS_ENDS, RESUBMITTABLE_STATES, TERMINAL_STATES, SlurmState
from slurm_operator.policy import cancels, error_lines
from slurm_operator.policy.completion import read_tail
from slurm_operator.policy.fatal import FatalRules

logger = logging.getLogger(__name__)

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
    """The resubmission caps and the progress probe (see ``decide``); ``fatal``: the fatal rules, in
    the order they are tried."""

    max_attempts: int
    max_attempts_without_progress: int
    progress_command: str | None
    max_attempts_overall: int | None = None
    fatal: tuple[FatalRules, ...] = ()
    progress_pattern: str | None = None  # the lines a fatal pattern's ``repeats`` counts (``fatal``)


# ----------------------------------------------------------------------------------- the policy
@dataclass(frozen=True)
class Decision:
    """A verdict and the one-line reason for it (logged, and put into the task error)."""

    verdict: Verdict
    reason: str


def _moves(baseline: str | None, attempts: Sequence[Attempt], probe: bool) -> list[bool]:
    """Per attempt: the progress probe moved across it (False without a probe or an output)."""
    values = [baseline, *(a.progress for a in attempts)]
    return [probe and after is not None and after != before for before, after in itertools.pairwise(values)]


def _trailing_without_progress(baseline: str | None, attempts: Sequence[Attempt], probe: bool) -> int:
    """Count the most recent attempts that hung or (with a probe) after which it showed no change.

    A hung attempt counts even when the probe moved before the hang: a job that hangs every time
    must stop, and without a probe a hang is the only sign of no progress there is. A PREEMPTED
    attempt that moved nothing is skipped: another job took its nodes, not its own fault.
    """
    count = 0
    for attempt, moved in zip(reversed(attempts), reversed(_moves(baseline, attempts, probe)), strict=True):
        if attempt.hung is None and (moved or not probe):
            break
        if attempt.hung is None and attempt.state is SlurmState.PREEMPTED:
            continue
        count += 1
    return count


def _counted(baseline: str | None, attempts: Sequence[Attempt], probe: bool) -> int:
    """The attempts ``max_attempts`` counts: all but one that ended in ``PROGRESS_ENDS`` after which
    the probe moved (and that was not cancelled as hung), and one the plugin cancelled because its
    try was stopped (a user's stop is not the job's failure, and the clear after it must resume)."""
    moves = _moves(baseline, attempts, probe)
    return sum(
        1
        for attempt, moved in zip(attempts, moves, strict=True)
        if not (moved and attempt.hung is None and attempt.state in PROGRESS_ENDS)
        and not (attempt.state is SlurmState.CANCELLED and attempt.cancelled_by_airflow)
    )


def match_fatal(
    rules: Sequence[FatalRules], attempt: Attempt, log_tail: str, progress_pattern: str | None = None
) -> Attempt:
    """``attempt`` with the first rule whose pattern a line of ``log_tail`` matches, and that line."""
    for rule in rules:
        line = rule.first_match(log_tail, progress_pattern)
        if line is not None:
            return replace(attempt, fatal=rule.name, fatal_line=line)
    return attempt


def fatal_reason(name: str, line: str) -> str:
    """The reason of a FATAL verdict: the rule's name and the log line that matched."""
    return f"{name}: its log says {line!r}; not resubmitted (a rerun would end the same way)"


def decide(
    attempts: Sequence[Attempt],
    *,
    completion_ok: bool | None,
    max_attempts: int,
    max_attempts_without_progress: int,
    progress_baseline: str | None = None,
    progress_probe: bool = False,
    max_attempts_overall: int | None = None,
) -> Decision:
    """Decide what to do after the last of ``attempts`` ended (the one place a state is judged).

    ``completion_ok`` is the "is the work done" check's answer for a COMPLETED job (None = no check
    configured). Resubmission is capped by ``max_attempts`` (attempts that count: not a TIMEOUT or
    PREEMPTED one after which the probe moved), by ``max_attempts_overall`` (every attempt; None: no
    such bound) and, when a progress probe is configured, by ``max_attempts_without_progress``
    consecutive attempts that moved nothing — a poison job (crashes at the same step, exits 0
    without saving) stops instead of looping. An attempt cancelled as hung (whatever Slurm says of
    the cancelled job) is resubmittable and counts as one without progress, with or without a
    probe. So is a job the plugin cancelled itself when an earlier try was stopped or timed out
    (``cancelled_by_airflow``). An attempt whose log matched a fatal rule (``fatal``, recorded by
    ``judge``) is FATAL unless it COMPLETED its work. ``attempts`` are those of this try's budget
    (``Ledger.budget``).
    """
    last = attempts[-1]
    state = last.state
    done = state is SlurmState.COMPLETED and last.hung is None and completion_ok is not False
    if last.fatal is not None and not done:
        return Decision(Verdict.FATAL, fatal_reason(last.fatal, last.fatal_line or ""))
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
    if max_attempts_overall is not None and len(attempts) >= max_attempts_overall:
        return Decision(Verdict.FAIL, f"{reason}, but max_attempts_overall={max_attempts_overall} is reached")
    counted = _counted(progress_baseline, attempts, progress_probe)
    if counted >= max_attempts:
        return Decision(Verdict.FAIL, f"{reason}, but max_attempts={max_attempts} is reached")
    if progress_probe or last.hung is not None:
        stuck = _trailing_without_progress(progress_baseline, attempts, progress_probe)
        if stuck >= max_attempts_without_progress:
            return Decision(
                Verdict.FAIL,
                f"{reason}, but the last {stuck} attempt(s) made no progress "
                f"(max_attempts_without_progress={max_attempts_without_progress})",
            )
    stopped = sum(1 for a in attempts if a.state is SlurmState.CANCELLED and a.cancelled_by_airflow)
    if counted + stopped < len(attempts):
        skipped = len(attempts) - counted - stopped
        ends = "a time limit, a preemption or a clean stop"
        reason += f" ({skipped} attempt(s) that advanced before {ends} not counted)"
    return Decision(Verdict.RESUBMIT, reason)


# ----------------------------------------------------------------------------------- an ended attempt
def asks_work_done(attempt: Attempt) -> bool:
    """Whether the policy needs the "is the work done" answer for ``attempt``: a COMPLETED job that
    was not cancelled as hung (the caller asks its rule only then, and passes the answer to judge)."""
    return attempt.state is SlurmState.COMPLETED and attempt.hung is None


def judge(
    hook: SlurmHook,
    ledger: Ledger,
    *,
    work_done: bool | None,
    caps: Caps,
    log: TaskLog,
) -> tuple[Attempt, Decision]:
    """Judge the ledger's current attempt, which ended, against its try's budget: recorded in the
    ledger with its check answers and verdict; -> it and the decision. The verdict is said in
    ``log``, the task's logger.

    ``work_done`` is the caller's answer for a COMPLETED job (see ``asks_work_done``), else None.
    Raises CancelledFromOutside (the attempt recorded, verdict FAIL) for a cancel from outside, and
    ``cancels.CancelOriginUnknown`` (nothing recorded) when whose cancel it was cannot be read.
    """
    attempts = ledger.budget()
    current = attempts[-1]
    if current.state is SlurmState.CANCELLED and current.hung is None and not current.cancelled_by_airflow:
        current, outside = cancels.note_cancel(hook, current)
        if outside is not None:
            ledger.update_current(replace(current, verdict=Verdict.FAIL))
            raise CancelledFromOutside(outside, ledger.current)
    progress = probe_progress(hook, caps.progress_command) if caps.progress_command else None
    current = replace(current, completion_ok=work_done, progress=progress)
    done = current.state is SlurmState.COMPLETED and current.hung is None and work_done is not False
    if caps.fatal and not done and current.fatal is None:  # (the wait may have seen it already)
        tail = read_tail(hook, current.log_path)
        current = match_fatal(caps.fatal, current, tail, caps.progress_pattern)
    decision = decide(
        [*attempts[:-1], current],
        completion_ok=work_done,
        max_attempts=caps.max_attempts,
        max_attempts_without_progress=caps.max_attempts_without_progress,
        progress_baseline=ledger.baseline,
        progress_probe=caps.progress_command is not None,
        max_attempts_overall=caps.max_attempts_overall,
    )
    log.info("Slurm job %s (attempt %d): %s -> %s", current.job_id, current.attempt, decision.reason,
             decision.verdict.value)  # fmt: skip
    judged = replace(current, verdict=decision.verdict, why_ended=f"{current.shown_state}: {decision.reason}")
    ledger.update_current(judged)
    return judged, decision


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


def stop_fatal(hook: SlurmHook, attempt: Attempt, cancelled: bool, log: TaskLog) -> Attempt:
    """The running job whose log matched a fatal rule, cancelled (here, unless the wait did:
    ``cancelled``), with its rule. A failed scancel is logged: the task fails anyway (never
    resubmitted), and the job's own end or time limit stops it.

    Recorded as Slurm's accounting says once the cancel is sent: a job that printed its fatal line
    and exited (a trainer's NaN assertion) often ends between the poll that saw the line and the
    scancel, which Slurm then ignores; that job is FAILED with its exit code, not CANCELLED by us."""
    reason = fatal_marker(attempt.fatal or "", attempt.fatal_line or "")
    if not cancelled:
        log.warning("Slurm job %s: %s; cancelling it", attempt.job_id, reason)
        try:
            cancels.cancel_ours(hook, attempt.job_id, attempt.log_path, reason)
        except SlurmError as exc:
            log.warning("could not cancel Slurm job %s: %s", attempt.job_id, exc)
    try:
        record = hook.job_states([attempt.job_id]).records.get(attempt.job_id)
    except SlurmError as exc:
        log.warning("Slurm job %s: state after the cancel not read: %s", attempt.job_id, exc)
        record = None
    if record is not None and record.state in TERMINAL_STATES and record.state is not SlurmState.CANCELLED:
        return attempt.ended(record)
    by_us = f"{attempt.fatal} (fatal pattern)"
    return replace(attempt, state=SlurmState.CANCELLED, cancelled_by_airflow=by_us)


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
def probe_progress(hook: SlurmHook, command: str) -> str | None:
    """The progress command's output (stripped); None when it failed: unknown, never "no change"."""
    try:
        result = hook.run(command)
    except SlurmError as exc:
        logger.warning("progress command failed: %s", exc)
        return None
    return result.stdout.strip() if result.exit_status == 0 else None
