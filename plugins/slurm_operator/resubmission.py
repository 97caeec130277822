"""Resubmission policy: what one ended Slurm job means for the task, with attempt caps."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from slurm_operator.records import Attempt, Verdict
from slurm_operator.states import RESUBMITTABLE_STATES, SlurmState


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
