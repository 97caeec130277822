"""Resubmission policy: what one ended Slurm job means for the task, with attempt caps."""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from slurm_operator.records import JobRecord
from slurm_operator.states import RESUBMITTABLE_STATES, SlurmState

# The attempt state the operator records for a job it cancelled as hung. Not a Slurm state: Slurm
# says CANCELLED for such a job, which would read as a user's cancel.
HUNG = "HUNG"
# Key of ``Attempt.extra`` holding why the plugin itself cancelled a job (on_kill, a timed-out
# deferral) that a later try found CANCELLED: that try resumes the work instead of failing.
CANCELLED_BY_AIRFLOW = "cancelled_by_airflow"


class Verdict(enum.Enum):
    """What the operator does after a job ends."""

    SUCCEED = "succeed"
    RESUBMIT = "resubmit"
    FAIL = "fail"


@dataclass(frozen=True)
class Decision:
    """A verdict and the one-line reason for it (logged, and put into the task error)."""

    verdict: Verdict
    reason: str


@dataclass(frozen=True)
class Attempt:
    """One submission of the task's sbatch script, kept in the operator's XCom result.

    ``progress`` is the progress probe's output after the job ended (e.g. a training's checkpoint
    tracker value); ``elapsed``/``alloc_tres`` come from sacct for GPU-hour accounting.
    ``try_number`` is the Airflow try that submitted (or re-attached to) the job; ``verdict`` the
    operator's judgment of its end (``Verdict`` value), None while it is not judged: a later try
    re-attaches to or judges an attempt without one, and submits after one with.
    """

    attempt: int
    job_id: str
    log_path: str
    script_path: str
    state: str = "PENDING"
    exit_code: int | None = None
    elapsed: str | None = None
    alloc_tres: str | None = None
    node_list: str | None = None
    progress: str | None = None
    completion_ok: bool | None = None
    reattached: bool = False
    extra: dict[str, Any] = field(default_factory=dict)
    try_number: int | None = None
    verdict: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON primitives (XCom, trigger carry, task state store)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attempt:
        """Inverse of to_dict(); unknown keys are rejected by the constructor."""
        return cls(**data)


def record_end(carry: dict[str, Any], record: JobRecord) -> None:
    """Copy the final accounting of the carry's current attempt (last in ``carry["attempts"]``)."""
    last = carry["attempts"][-1]
    last.update(
        state=record.state.value,
        exit_code=record.exit_code,
        elapsed=record.elapsed,
        alloc_tres=record.alloc_tres,
        node_list=record.node_list,
    )
    if record.raw_state and record.raw_state != record.state.value:
        # Slurm's own words say more than the parsed state: `CANCELLED by 1000` names who.
        last["extra"] = {**last.get("extra", {}), "slurm_state": record.raw_state}


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
        if attempt.state != HUNG and (moved or not probe):
            break
        count += 1
    return count


def decide(
    state: SlurmState,
    attempts: Sequence[Attempt],
    *,
    completion_ok: bool | None,
    max_attempts: int,
    max_attempts_without_progress: int,
    progress_baseline: str | None = None,
    progress_probe: bool = False,
) -> Decision:
    """Decide what to do after the last of ``attempts`` ended in ``state``.

    ``completion_ok`` is the completion check's answer for a COMPLETED job (None = no check
    configured). Resubmission is capped by ``max_attempts`` in total and, when a progress probe is
    configured, by ``max_attempts_without_progress`` consecutive attempts that moved nothing — a
    poison job (crashes at the same step, exits 0 without saving) stops instead of looping. An
    attempt recorded ``HUNG`` (``state`` is then whatever Slurm says of the cancelled job) is
    resubmittable and counts as one without progress, with or without a probe. So is a job the
    plugin cancelled itself when an earlier try was stopped or timed out (``CANCELLED_BY_AIRFLOW``
    in its ``extra``). ``attempts`` are those of this try's budget (see ``window``).
    """
    hung = bool(attempts) and attempts[-1].state == HUNG
    if hung:
        reason = "job hung (its watched files stopped changing) and was cancelled"
    elif state is SlurmState.COMPLETED:
        if completion_ok is None:
            return Decision(Verdict.SUCCEED, "job COMPLETED")
        if completion_ok:
            return Decision(Verdict.SUCCEED, "job COMPLETED and the completion check passed")
        reason = "job COMPLETED but the completion check says not done"
    elif state in RESUBMITTABLE_STATES:
        reason = f"job ended {state.value}, which is resubmittable"
    elif state is SlurmState.CANCELLED and CANCELLED_BY_AIRFLOW in attempts[-1].extra:
        reason = (
            f"job was cancelled by Airflow in an earlier try ({attempts[-1].extra[CANCELLED_BY_AIRFLOW]})"
        )
    else:
        return Decision(Verdict.FAIL, f"job ended {state.value}")
    if len(attempts) >= max_attempts:
        return Decision(Verdict.FAIL, f"{reason}, but max_attempts={max_attempts} is reached")
    if progress_probe or hung:
        stuck = _trailing_without_progress(progress_baseline, attempts, progress_probe)
        if stuck >= max_attempts_without_progress:
            return Decision(
                Verdict.FAIL,
                f"{reason}, but the last {stuck} attempt(s) made no progress "
                f"(max_attempts_without_progress={max_attempts_without_progress})",
            )
    return Decision(Verdict.RESUBMIT, reason)


def window(carry: dict[str, Any]) -> list[Attempt]:
    """The attempts the current try's caps count: from ``carry["window"]`` (where the try's budget
    started) on. A try that ended with a verdict closes its window; the next try opens a new one,
    so retries and clears each get ``max_attempts`` while the numbering continues."""
    return [Attempt.from_dict(a) for a in carry["attempts"][int(carry.get("window", 0)) :]]
