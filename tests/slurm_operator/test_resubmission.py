"""Tests for the resubmission policy (pure logic: every ending, both caps)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from slurm_operator.records import HUNG, Attempt, Verdict
from slurm_operator.resubmission import completion_command_says_done, completion_regex_matches, decide
from slurm_operator.states import SlurmState


def _attempts(*progress: str | None) -> list[Attempt]:
    return [Attempt(i + 1, str(100 + i), f"/l/{100 + i}.out", "", progress=p) for i, p in enumerate(progress)]


def _decide(state: SlurmState, attempts: list[Attempt], **kw: object) -> tuple[Verdict, str]:
    """The policy's answer for ``attempts`` whose last one ended in ``state``."""
    args: dict[str, object] = {"completion_ok": None, "max_attempts": 10, "max_attempts_without_progress": 3}
    args.update(kw)
    ended = [*attempts[:-1], replace(attempts[-1], state=state)]
    d = decide(ended, **args)  # type: ignore[arg-type]
    return d.verdict, d.reason


@pytest.mark.parametrize(
    "state", [SlurmState.TIMEOUT, SlurmState.PREEMPTED, SlurmState.NODE_FAIL, SlurmState.BOOT_FAIL]
)
def test_resubmittable_states_are_resubmitted(state: SlurmState) -> None:
    verdict, reason = _decide(state, _attempts(None))
    assert verdict is Verdict.RESUBMIT
    assert state.value in reason


@pytest.mark.parametrize(
    "state", [SlurmState.FAILED, SlurmState.OUT_OF_MEMORY, SlurmState.CANCELLED, SlurmState.UNKNOWN]
)
def test_failures_end_the_task(state: SlurmState) -> None:
    assert _decide(state, _attempts(None)) == (Verdict.FAIL, f"job ended {state.value}")


def test_completed_with_and_without_completion_check() -> None:
    assert _decide(SlurmState.COMPLETED, _attempts(None))[0] is Verdict.SUCCEED
    assert _decide(SlurmState.COMPLETED, _attempts(None), completion_ok=True)[0] is Verdict.SUCCEED
    verdict, reason = _decide(SlurmState.COMPLETED, _attempts(None), completion_ok=False)
    assert verdict is Verdict.RESUBMIT
    assert "completion check says not done" in reason


def test_total_attempt_cap() -> None:
    verdict, reason = _decide(SlurmState.TIMEOUT, _attempts(*[None] * 3), max_attempts=3)
    assert verdict is Verdict.FAIL
    assert "max_attempts=3 is reached" in reason


def test_no_progress_cap_stops_a_poison_job() -> None:
    # Progress moved 0 -> 100 -> 200, then stuck at 200 for two more attempts.
    kw = {"progress_probe": True, "progress_baseline": "0", "max_attempts_without_progress": 2}
    assert _decide(SlurmState.TIMEOUT, _attempts("100", "200"), **kw)[0] is Verdict.RESUBMIT
    assert _decide(SlurmState.TIMEOUT, _attempts("100", "200", "200"), **kw)[0] is Verdict.RESUBMIT
    verdict, reason = _decide(
        SlurmState.COMPLETED, _attempts("100", "200", "200", "200"), completion_ok=False, **kw
    )
    assert verdict is Verdict.FAIL
    assert "last 2 attempt(s) made no progress" in reason
    # A probe that prints nothing counts as no progress.
    assert _decide(SlurmState.TIMEOUT, _attempts(None, None), **kw)[0] is Verdict.FAIL
    # Without a probe only the total cap applies.
    assert _decide(SlurmState.TIMEOUT, _attempts(None, None, None))[0] is Verdict.RESUBMIT


def test_completion_checks() -> None:
    log = "iteration 10\n[after training is done] ...\nsaving\n"
    assert completion_regex_matches(r"^\[after training is done\]", log)
    assert not completion_regex_matches(r"after training is done$", "after training is done soon")
    assert completion_command_says_done("1\n")
    assert not completion_command_says_done("0\n")
    assert not completion_command_says_done("10")


def _hung(attempts: list[Attempt], *which: int) -> list[Attempt]:
    """The attempts with those (1-based) numbers recorded HUNG, as the operator records them."""
    return [Attempt.from_dict({**a.to_dict(), "state": HUNG}) if a.attempt in which else a for a in attempts]


def test_a_hung_attempt_is_resubmitted_whatever_slurm_says_of_the_cancelled_job() -> None:
    verdict, reason = _decide(SlurmState.CANCELLED, _hung(_attempts(None), 1))
    assert verdict is Verdict.RESUBMIT
    assert reason == "job hung (its watched files stopped changing) and was cancelled"


def test_hung_attempts_count_toward_the_no_progress_cap_even_without_a_probe() -> None:
    kw = {"max_attempts_without_progress": 2}
    assert _decide(SlurmState.CANCELLED, _hung(_attempts(None), 1), **kw)[0] is Verdict.RESUBMIT
    verdict, reason = _decide(SlurmState.CANCELLED, _hung(_attempts(None, None), 1, 2), **kw)
    assert verdict is Verdict.FAIL
    assert reason == (
        "job hung (its watched files stopped changing) and was cancelled, but the last 2 attempt(s) "
        "made no progress (max_attempts_without_progress=2)"
    )
    # A TIMEOUT between two hangs breaks the run when there is no probe to say otherwise.
    mixed = _hung(_attempts(None, None, None), 1, 3)
    assert _decide(SlurmState.CANCELLED, mixed, **kw)[0] is Verdict.RESUBMIT


def test_a_hang_counts_even_when_the_probe_moved_before_it() -> None:
    # The tracker moved 0 -> 100 -> 200, but both attempts then hung: the cap of 2 is reached.
    kw = {"progress_probe": True, "progress_baseline": "0", "max_attempts_without_progress": 2}
    attempts = _attempts("100", "200")
    assert _decide(SlurmState.CANCELLED, _hung(attempts, 2), **kw)[0] is Verdict.RESUBMIT
    assert _decide(SlurmState.CANCELLED, _hung(attempts, 1, 2), **kw)[0] is Verdict.FAIL


def test_hung_attempts_count_toward_max_attempts() -> None:
    verdict, reason = _decide(SlurmState.CANCELLED, _hung(_attempts("1", "2", "3"), 3), max_attempts=3)
    assert verdict is Verdict.FAIL
    assert reason.endswith("but max_attempts=3 is reached")
