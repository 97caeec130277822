"""Tests for the resubmission policy (pure logic: every ending, both caps) and the judgment of an ended
attempt built on it (what it asks the cluster, what it returns for the operator to record)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from slurm_operator.model.exceptions import RemotePathNotFoundError
from slurm_operator.model.ledger import HUNG, Attempt, Ledger, Verdict
from slurm_operator.model.records import CommandResult
from slurm_operator.model.states import SlurmState
from slurm_operator.policy import resubmission
from slurm_operator.policy.resubmission import decide


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
    ledger = Ledger(attempts=list(attempts), baseline=kw.pop("baseline", None))
    args: dict[str, Any] = {"work_done": None, "caps": caps, "log": _Log(), **kw}
    judged, decision = resubmission.judge(cluster, ledger, **args)  # type: ignore[arg-type]
    assert ledger.current == judged  # recorded in the ledger
    return judged, decision


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
    assert decision.reason == (
        "job COMPLETED but the completion check says not done (1 attempt(s) that advanced before a "
        "time limit, a preemption or a clean stop not counted)"
    )
    assert cluster.ran == ["cat /r/progress"]  # the only question it asked the cluster
    assert log.lines == [f"Slurm job 100 (attempt 2): {decision.reason} -> resubmit"]


def test_judge_counts_the_budget_it_is_given_with_the_ended_attempt_as_judged() -> None:
    # 100 -> 200 -> 200, and the probe says 200 after the ended attempt: the cap of 2 is reached.
    ended = [*_attempts("200", "200"), replace(_attempts(None)[0], attempt=3, state=SlurmState.TIMEOUT)]
    judged, decision = _judge(
        _Cluster(probe="200"), ended, baseline="100", progress_command="cat /r/progress"
    )
    assert (judged.progress, judged.verdict) == ("200", Verdict.FAIL)
    assert "the last 2 attempt(s) made no progress" in decision.reason


def test_a_cancel_from_outside_raises_with_the_attempt_to_record() -> None:
    cancelled = replace(
        _attempts(None)[0], state=SlurmState.CANCELLED, raw_state="CANCELLED by 0", cancelled_by_uid=0
    )
    with pytest.raises(
        resubmission.CancelledFromOutside, match="cancelled from outside Airflow by uid 0;"
    ) as err:
        _judge(_Cluster(), [cancelled])
    assert (err.value.attempt.cancelled_by, err.value.attempt.verdict) == ("uid 0", Verdict.FAIL)


# ----------------------------------------------------------------------------------- progress is not failure
def _ended(*ends: tuple[SlurmState, str | None]) -> list[Attempt]:
    """Attempts that ended in these states with these progress probe outputs."""
    return [
        replace(a, state=state) for a, (state, _) in zip(_attempts(*(p for _, p in ends)), ends, strict=True)
    ]


T, P, F, H = SlurmState.TIMEOUT, SlurmState.PREEMPTED, SlurmState.FAILED, SlurmState.NODE_FAIL
C = SlurmState.COMPLETED
PROBE = {"progress_probe": True, "progress_baseline": "0"}


@pytest.mark.parametrize(
    ("ends", "caps", "verdict", "says"),
    [
        # Five time limits, each after the tracker advanced: none counts toward max_attempts=3.
        (
            [(T, "1"), (T, "2"), (T, "3"), (T, "4"), (T, "5")],
            {"max_attempts": 3},
            Verdict.RESUBMIT,
            "job ended TIMEOUT, which is resubmittable (5 attempt(s) that advanced before a time limit",
        ),
        # The same with preemptions.
        ([(P, "1"), (P, "2"), (P, "3")], {"max_attempts": 3}, Verdict.RESUBMIT, "job ended PREEMPTED"),
        # And with clean stops ahead of the time limit (saved, exit 0, work not done yet).
        (
            [(C, "1"), (C, "2"), (C, "3"), (C, "4")],
            {"max_attempts": 3, "completion_ok": False},
            Verdict.RESUBMIT,
            "job COMPLETED but the completion check says not done (4 attempt(s) that advanced",
        ),
        # A clean stop without progress counts.
        (
            [(C, "1"), (C, "1"), (C, "1")],
            {"max_attempts": 2, "completion_ok": False},
            Verdict.FAIL,
            "but max_attempts=2 is reached",
        ),
        # A time limit without progress counts: 1 + 1 of max_attempts=2 (the advancing ones do not).
        (
            [(T, "1"), (T, "1"), (T, "2"), (T, "2")],
            {"max_attempts": 2},
            Verdict.FAIL,
            "but max_attempts=2 is reached",
        ),
        # A node failure counts even after progress: it is not the scheduler's clock.
        ([(H, "1"), (H, "2")], {"max_attempts": 2}, Verdict.FAIL, "but max_attempts=2 is reached"),
        # The overall bound stops even a training that always advances.
        (
            [(T, "1"), (T, "2"), (T, "3")],
            {"max_attempts_overall": 3},
            Verdict.FAIL,
            "but max_attempts_overall=3 is reached",
        ),
        # Preemptions without progress do not count against the no-progress cap (2) ...
        (
            [(T, "1"), (P, "1"), (P, "1"), (P, "1")],
            {"max_attempts_without_progress": 2},
            Verdict.RESUBMIT,
            "job ended PREEMPTED",
        ),
        # ... but they count toward max_attempts (3 of 3).
        (
            [(T, "1"), (P, "1"), (P, "1"), (P, "1")],
            {"max_attempts": 3},
            Verdict.FAIL,
            "but max_attempts=3 is reached",
        ),
        # Time limits without progress around a preemption: 2 of the no-progress cap 2.
        (
            [(T, "1"), (T, "1"), (P, "1"), (T, "1")],
            {"max_attempts_without_progress": 2},
            Verdict.FAIL,
            "the last 2 attempt(s) made no progress",
        ),
        # A failure is a failure, whatever the progress.
        ([(T, "1"), (F, "2")], {}, Verdict.FAIL, "job ended FAILED"),
    ],
)
def test_progress_is_not_failure(
    ends: list[tuple[SlurmState, str | None]], caps: dict[str, Any], verdict: Verdict, says: str
) -> None:
    args: dict[str, Any] = {"completion_ok": None, "max_attempts": 10, "max_attempts_without_progress": 3}
    d = decide(_ended(*ends), **{**args, **PROBE, **caps})
    assert (d.verdict, says in d.reason) == (verdict, True), d.reason


def test_without_a_probe_every_time_limit_counts() -> None:
    ended = _ended((T, "1"), (T, "2"), (T, "3"))
    d = decide(ended, completion_ok=None, max_attempts=3, max_attempts_without_progress=3)
    assert (d.verdict, d.reason) == (
        Verdict.FAIL,
        "job ended TIMEOUT, which is resubmittable, but max_attempts=3 is reached",
    )


def test_a_hung_attempt_counts_even_when_the_probe_moved() -> None:
    ended = _hung(_ended((T, "1"), (T, "2")), 1, 2)
    d = decide(ended, completion_ok=None, max_attempts=2, max_attempts_without_progress=5, **PROBE)  # type: ignore[arg-type]
    assert d.verdict is Verdict.FAIL
    assert "max_attempts=2 is reached" in d.reason


# ----------------------------------------------------------------------------------- fatal outcomes
DIVERGED = resubmission.FatalRules("DIVERGED", (r"(?i)loss: nan\b",))


@pytest.mark.parametrize(
    ("state", "completion_ok", "verdict"),
    [
        (SlurmState.FAILED, None, Verdict.FATAL),
        (SlurmState.TIMEOUT, None, Verdict.FATAL),  # resubmittable, but it would diverge again
        (SlurmState.COMPLETED, False, Verdict.FATAL),
        (SlurmState.COMPLETED, True, Verdict.SUCCEED),  # the work is done: a NaN on the way is history
        (SlurmState.COMPLETED, None, Verdict.SUCCEED),
    ],
)
def test_a_fatal_match_is_never_resubmitted(
    state: SlurmState, completion_ok: bool | None, verdict: Verdict
) -> None:
    attempt = replace(_attempts(None)[0], state=state, fatal="DIVERGED", fatal_line="it 3 | lm loss: nan |")
    d = decide([attempt], completion_ok=completion_ok, max_attempts=10, max_attempts_without_progress=3)
    assert d.verdict is verdict
    if verdict is Verdict.FATAL:
        assert d.reason == (
            "DIVERGED: its log says 'it 3 | lm loss: nan |'; not resubmitted (a rerun would end the same way)"
        )


def test_a_hung_attempt_whose_log_matched_is_fatal() -> None:
    attempt = replace(_hung(_attempts(None), 1)[0], fatal="DIVERGED", fatal_line="x")
    d = decide([attempt], completion_ok=None, max_attempts=10, max_attempts_without_progress=3)
    assert d.verdict is Verdict.FATAL


def test_fatal_rules_take_the_first_matching_line_of_the_first_rule_that_matches() -> None:
    tail = "it 1 | lm loss: 2.0 |\n  it 2 | lm loss: NaN |\nit 3 | lm loss: nan |\nRuntimeError: boom\n"
    other = resubmission.FatalRules("CRASHED", (r"^RuntimeError",))
    attempt = _attempts(None)[0]
    matched = resubmission.match_fatal((other, DIVERGED), attempt, tail)
    assert (matched.fatal, matched.fatal_line) == ("CRASHED", "RuntimeError: boom")
    matched = resubmission.match_fatal((DIVERGED, other), attempt, tail)
    assert (matched.fatal, matched.fatal_line) == ("DIVERGED", "it 2 | lm loss: NaN |")
    assert resubmission.match_fatal((DIVERGED,), attempt, "it 1 | lm loss: 2.0 |\n") is attempt


def test_the_fatal_fields_survive_the_json_form() -> None:
    attempt = replace(_attempts(None)[0], state=SlurmState.FAILED, fatal="DIVERGED", fatal_line="l",
                      verdict=Verdict.FATAL)  # fmt: skip
    data = attempt.to_dict()
    assert (data["extra"], data["verdict"]) == ({"fatal": "DIVERGED", "fatal_line": "l"}, "fatal")
    assert Attempt.from_dict(data) == attempt


class _LogCluster(_Cluster):
    """A cluster whose every log reads ``text``."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text

    def stat(self, path: str) -> Any:
        from slurm_operator.model.records import RemoteStat

        return RemoteStat(path, True, size=len(self.text))

    def read_log(self, path: str, offset: int, length: int) -> Any:
        from slurm_operator.model.records import LogChunk

        return LogChunk(self.text[offset : offset + length], offset, offset + length)


def test_judge_reads_the_tail_and_records_the_fatal_match() -> None:
    cluster = _LogCluster("it 1 | lm loss: 2.0 |\nit 2 | lm loss: nan |\nAssertionError\n")
    failed = replace(_attempts(None)[0], state=SlurmState.FAILED, exit_code=1)
    caps = resubmission.Caps(10, 2, None, 100, (DIVERGED,))
    judged, decision = resubmission.judge(
        cluster,  # type: ignore[arg-type]
        Ledger(attempts=[failed]),
        work_done=None,
        caps=caps,
        log=_Log(),
    )
    assert (judged.fatal, judged.fatal_line, judged.verdict) == (
        "DIVERGED",
        "it 2 | lm loss: nan |",
        Verdict.FATAL,
    )
    assert decision.reason.startswith("DIVERGED: its log says 'it 2 | lm loss: nan |'")
    message = resubmission.failure_message(cluster, judged, decision)  # type: ignore[arg-type]
    assert message.splitlines()[0] == (
        "Slurm job 100 FAILED (exit code 1), attempt 1: DIVERGED: its log says 'it 2 | lm loss: nan |'; "
        "not resubmitted (a rerun would end the same way); log /l/100.out; last 20 lines:"
    )


def test_judge_does_not_read_the_log_of_a_job_that_finished_its_work() -> None:
    done = replace(_attempts(None)[0], state=SlurmState.COMPLETED)
    cluster = _LogCluster("lm loss: nan\n")
    caps = resubmission.Caps(10, 2, None, 100, (DIVERGED,))
    judged, decision = resubmission.judge(
        cluster,  # type: ignore[arg-type]
        Ledger(attempts=[done]),
        work_done=True,
        caps=caps,
        log=_Log(),
    )
    assert (judged.fatal, decision.verdict) == (None, Verdict.SUCCEED)
