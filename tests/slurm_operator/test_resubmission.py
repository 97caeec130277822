"""Tests for the resubmission policy (pure logic: every ending, both caps) and the judgment of an ended
attempt built on it (what it asks the cluster, what it returns for the operator to record)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from slurm_operator import resubmission
from slurm_operator.exceptions import RemotePathNotFoundError
from slurm_operator.records import HUNG, Attempt, CommandResult, Verdict
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


class _Cluster:
    """The sync hook's verbs a judgment uses: the progress probe and the cancel marker."""

    def __init__(self, probe: str = "") -> None:
        self.probe = probe
        self.ran: list[str] = []

    def run(self, command: str, **_: Any) -> CommandResult:
        self.ran.append(command)
        return CommandResult(0, self.probe, "") if command == "cat /r/progress" else CommandResult(2, "", "")

    def read_text(self, path: str) -> str:
        raise RemotePathNotFoundError(path)


class _Log:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def info(self, event: Any, *args: Any, **kw: Any) -> None:
        self.lines.append(event % args)

    def warning(self, event: Any, *args: Any, **kw: Any) -> None:
        self.lines.append(event % args)


def _judge(cluster: _Cluster, attempts: list[Attempt], **kw: Any) -> tuple[Attempt, resubmission.Decision]:
    caps = resubmission.Caps(10, 2, kw.pop("progress_command", None))
    args: dict[str, Any] = {"baseline": None, "work_done": None, "caps": caps, "log": _Log(), **kw}
    return resubmission.judge(cluster, attempts, **args)  # type: ignore[arg-type]


def test_the_work_done_answer_is_asked_only_of_a_completed_attempt_that_did_not_hang() -> None:
    done = replace(_attempts(None)[0], state=SlurmState.COMPLETED)
    assert resubmission.asks_work_done(done)
    assert not resubmission.asks_work_done(replace(done, hung="no progress"))
    assert not resubmission.asks_work_done(replace(done, state=SlurmState.TIMEOUT))


def test_judge_records_the_callers_work_done_answer_the_probe_and_the_verdict() -> None:
    cluster, log = _Cluster(probe="200\n"), _Log()
    ended = [*_attempts("100"), replace(_attempts(None)[0], attempt=2, state=SlurmState.COMPLETED)]
    judged, decision = _judge(
        cluster, ended, baseline="0", work_done=False, progress_command="cat /r/progress", log=log
    )
    assert (judged.completion_ok, judged.progress, judged.verdict) == (False, "200", Verdict.RESUBMIT)
    assert decision.reason == "job COMPLETED but the completion check says not done"
    assert cluster.ran == ["cat /r/progress"]  # the only question it asked the cluster
    assert log.lines == [
        "Slurm job 100 (attempt 2): job COMPLETED but the completion check says not done -> resubmit"
    ]


def test_judge_counts_the_budget_it_is_given_with_the_ended_attempt_as_judged() -> None:
    # 100 -> 200 -> 200, and the probe says 200 after the ended attempt: the cap of 2 is reached.
    ended = [*_attempts("200", "200"), replace(_attempts(None)[0], attempt=3, state=SlurmState.TIMEOUT)]
    judged, decision = _judge(
        _Cluster(probe="200"), ended, baseline="100", progress_command="cat /r/progress"
    )
    assert (judged.progress, judged.verdict) == ("200", Verdict.FAIL)
    assert "the last 2 attempt(s) made no progress" in decision.reason


def test_a_cancel_from_outside_raises_with_the_attempt_to_record() -> None:
    cancelled = replace(_attempts(None)[0], state=SlurmState.CANCELLED, raw_state="CANCELLED by 0")
    with pytest.raises(
        resubmission.CancelledFromOutside, match="cancelled from outside Airflow by uid 0;"
    ) as err:
        _judge(_Cluster(), [cancelled])
    assert (err.value.attempt.cancelled_by, err.value.attempt.verdict) == ("uid 0", Verdict.FAIL)
