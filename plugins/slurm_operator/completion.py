"""Resubmission policy: what one ended Slurm job means for the task, with attempt caps."""

from __future__ import annotations

import enum
import re
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from slurm_operator.states import RESUBMITTABLE_STATES, SlurmState


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

    ``progress`` is the progress probe's output after the job ended (e.g. Megatron's checkpoint
    tracker value); ``elapsed``/``alloc_tres`` come from sacct for GPU-hour accounting.
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

    def to_dict(self) -> dict[str, Any]:
        """JSON primitives (XCom, trigger carry, task state store)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Attempt:
        """Inverse of to_dict(); unknown keys are rejected by the constructor."""
        return cls(**data)


def completion_regex_matches(pattern: str, log_tail: str) -> bool:
    """True when the completion regex occurs in the log text (multi-line mode)."""
    return re.search(pattern, log_tail, re.MULTILINE) is not None


def completion_command_says_done(stdout: str) -> bool:
    """A completion command says done by printing 1 (AutoExperiment's termination_cmd contract)."""
    return stdout.strip() == "1"


def _trailing_without_progress(baseline: str | None, attempts: Sequence[Attempt]) -> int:
    """Count the most recent attempts after which the progress probe showed no change."""
    count = 0
    values = [baseline, *(a.progress for a in attempts)]
    for before, after in zip(reversed(values[:-1]), reversed(values[1:]), strict=True):
        if after is not None and after != before:
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
    poison job (crashes at the same step, exits 0 without saving) stops instead of looping.
    """
    if state is SlurmState.COMPLETED:
        if completion_ok is None:
            return Decision(Verdict.SUCCEED, "job COMPLETED")
        if completion_ok:
            return Decision(Verdict.SUCCEED, "job COMPLETED and the completion check passed")
        reason = "job COMPLETED but the completion check says not done"
    elif state in RESUBMITTABLE_STATES:
        reason = f"job ended {state.value}, which is resubmittable"
    else:
        return Decision(Verdict.FAIL, f"job ended {state.value}")
    if len(attempts) >= max_attempts:
        return Decision(Verdict.FAIL, f"{reason}, but max_attempts={max_attempts} is reached")
    if progress_probe:
        stuck = _trailing_without_progress(progress_baseline, attempts)
        if stuck >= max_attempts_without_progress:
            return Decision(
                Verdict.FAIL,
                f"{reason}, but the last {stuck} attempt(s) made no progress "
                f"(max_attempts_without_progress={max_attempts_without_progress})",
            )
    return Decision(Verdict.RESUBMIT, reason)
