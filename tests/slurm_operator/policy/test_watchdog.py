"""The watchdog's pure judgments: unclassifiable states bounded in time, hangs told from quiet jobs."""

from __future__ import annotations

import pytest
from slurm_operator.model.records import JobRecord, RemoteStat
from slurm_operator.model.states import SlurmState
from slurm_operator.policy.watchdog import (
    Clocks,
    Watchdog,
    duration,
    elapsed_seconds,
    hung_alarm,
    is_unclassified,
    quiet_seconds,
    unknown_alarm,
)

NOW = 1_000_000.0  # the cluster's clock in these tests
LOG = "/r/train-42.out"
TRACKER = "/r/ckpt/latest_checkpointed_iteration.txt"


def _running(elapsed: str, state: SlurmState = SlurmState.RUNNING) -> JobRecord:
    return JobRecord(job_id="42", name="train", state=state, elapsed=elapsed, raw_state=state.value)


def _file(path: str, age: float | None) -> RemoteStat:
    """A watched file last changed ``age`` seconds before NOW (None: it does not exist)."""
    if age is None:
        return RemoteStat(path=path, exists=False)
    return RemoteStat(path=path, exists=True, size=10, mtime=NOW - age)


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("00:00:07", 7.0),  # sacct
        ("0:07", 7.0),  # squeue %M
        ("12:34", 754.0),
        ("1:02:03", 3723.0),
        ("2-03:04:05", 2 * 86400 + 3 * 3600 + 4 * 60 + 5.0),
        ("", None),
        ("INVALID", None),
        ("UNLIMITED", None),
    ],
)
def test_elapsed_seconds_reads_every_slurm_spelling(text: str, seconds: float | None) -> None:
    assert elapsed_seconds(text) == seconds


def test_duration_is_short_and_readable() -> None:
    assert [duration(s) for s in (0.4, 45, 60, 725, 3600, 7380)] == [
        "0 s",
        "45 s",
        "1 min",
        "12 min 5 s",
        "1 h",
        "2 h 3 min",
    ]


def test_only_states_outside_both_named_sets_are_unclassified() -> None:
    unclassified = {s for s in SlurmState if is_unclassified(s)}
    assert unclassified == {SlurmState.UNKNOWN}
    # A state a newer Slurm adds parses to UNKNOWN, so it is bounded too.
    assert is_unclassified(SlurmState.parse("LAUNCH_FAILED"))


def test_unknown_alarm_is_one_line_with_job_raw_state_duration_and_what_to_check() -> None:
    record = JobRecord(job_id="42", name="train", state=SlurmState.UNKNOWN, raw_state="LAUNCH_FAILED")
    assert unknown_alarm(record, 1799, 1800) is None
    alarm = unknown_alarm(record, 1805, 1800)
    assert alarm is not None
    assert alarm.kind == "unknown"
    assert "\n" not in alarm.message
    assert alarm.message.startswith("job 42 has been in state 'LAUNCH_FAILED'")
    assert "for 30 min 5 s (unknown_timeout 30 min)" in alarm.message
    assert "NOT cancelled" in alarm.message
    assert "retry re-attaches" in alarm.message
    assert "`sacct -j 42 -o JobID,State,Reason,NodeList` and the slurmctld log" in alarm.message
    # A known state never raises this alarm, however long it lasts.
    assert unknown_alarm(_running("1-00:00:00"), 10**6, 1) is None


def test_quiet_counts_from_the_newest_change_but_never_from_before_the_start() -> None:
    # Running 100 s; the log changed 30 s ago, the tracker (an earlier attempt's) an hour ago.
    assert quiet_seconds(NOW, 100, [_file(LOG, 30), _file(TRACKER, 3600)]) == 30
    # Nothing changed since the start, or nothing exists yet: quiet since the start.
    assert quiet_seconds(NOW, 100, [_file(LOG, 3600)]) == 100
    assert quiet_seconds(NOW, 100, [_file(LOG, None)]) == 100
    # A file written "in the future" (file server clock ahead): not quiet at all.
    assert quiet_seconds(NOW, 100, [_file(LOG, -5)]) == -5


@pytest.mark.parametrize(
    ("elapsed", "log_age", "tracker_age", "hung"),
    [
        ("00:00:40", 25, None, True),  # past start-up, quiet for 25 s >= 20 s
        ("00:00:40", 19, None, False),  # quiet for less than progress_timeout
        ("00:00:40", 25, 5, False),  # the log is quiet but the progress file moved
        ("00:00:09", 9, None, False),  # still in its start-up allowance (10 s)
        ("00:00:25", 25, None, True),  # an empty log since the start, past both allowances
        ("00:00:15", 15, None, False),  # silent from the start, but only 15 s < progress_timeout
        ("05:00:00", None, None, False),  # no watched file visible at all: cannot judge, never "hung"
    ],
)
def test_hung_judgment(elapsed: str, log_age: float | None, tracker_age: float | None, hung: bool) -> None:
    files = [_file(LOG, log_age), _file(TRACKER, tracker_age)]
    alarm = hung_alarm(_running(elapsed), NOW, files, progress_timeout=20, startup_timeout=10)
    assert (alarm is not None) is hung
    if alarm is not None:
        assert alarm.kind == "hung"
        assert alarm.message.startswith("job 42 made no progress for ")
        assert "none of its 2 watched file(s) changed (progress_timeout 20 s" in alarm.message


def test_startup_allowance_holds_even_when_longer_than_progress_timeout() -> None:
    files = [_file(LOG, 3 * 3600)]
    kw = {"progress_timeout": 60.0, "startup_timeout": 7200.0}
    assert hung_alarm(_running("1:59:59"), NOW, files, **kw) is None
    assert hung_alarm(_running("2:00:00"), NOW, files, **kw) is not None


@pytest.mark.parametrize(
    "state", [SlurmState.PENDING, SlurmState.SUSPENDED, SlurmState.COMPLETING, SlurmState.CONFIGURING]
)
def test_only_running_jobs_can_hang(state: SlurmState) -> None:
    alarm = hung_alarm(
        _running("5:00:00", state), NOW, [_file(LOG, None)], progress_timeout=1, startup_timeout=0
    )
    assert alarm is None


def test_no_judgment_without_the_clusters_clock_or_a_readable_elapsed() -> None:
    files = [_file(LOG, 3 * 3600)]
    assert hung_alarm(_running("5:00:00"), None, files, progress_timeout=1, startup_timeout=0) is None
    assert hung_alarm(_running(""), NOW, files, progress_timeout=1, startup_timeout=0) is None


def test_watchdog_unknown_clock_starts_at_first_sight_and_resets_on_a_known_state() -> None:
    dog = Watchdog(job_id="42", unknown_timeout=30)
    weird = JobRecord(job_id="42", name="train", state=SlurmState.UNKNOWN, raw_state="LAUNCH_FAILED")
    assert dog.observe(weird, now=100) is None
    assert dog.observe(weird, now=129) is None
    assert dog.observe(_running("0:10"), now=130) is None  # classified again: the clock resets
    assert dog.observe(weird, now=140) is None
    alarm = dog.observe(weird, now=170)
    assert alarm is not None
    assert alarm.kind == "unknown"
    assert "for 30 s" in alarm.message


def test_watchdog_judges_hangs_only_on_rounds_that_statted_every_watched_path() -> None:
    dog = Watchdog(
        job_id="42", unknown_timeout=30, progress_timeout=20, startup_timeout=10, paths=(LOG, TRACKER)
    )
    assert dog.watching
    record = _running("00:01:00")
    quiet = {LOG: _file(LOG, 50), TRACKER: _file(TRACKER, None)}
    # A round that did not stat the paths (the job was pending the round before) judges nothing.
    assert dog.observe(record, now=0, remote_now=NOW, files={LOG: quiet[LOG]}) is None
    assert dog.observe(record, now=0, remote_now=NOW, files=None) is None
    alarm = dog.observe(record, now=0, remote_now=NOW, files=quiet)
    assert alarm is not None
    assert alarm.kind == "hung"
    # Hang detection off: never a hang alarm.
    off = Watchdog(job_id="42", unknown_timeout=30, progress_timeout=None, paths=(LOG,))
    assert not off.watching
    assert off.observe(record, now=0, remote_now=NOW, files=quiet) is None


# Megatron-LM's iteration line, the progress the campaign gives as ``progress_pattern``.
ITERATION = r"\biteration\s+(\d+)\s*/\s*\d+\s*\|"


def _line(iteration: int) -> str:
    return f" [2026-12-03 08:00:00] iteration {iteration:>8}/    1200 | lm loss: 2.5 | grad norm: 0.9 |\n"


def _dog() -> Watchdog:
    return Watchdog(
        job_id="42",
        unknown_timeout=60,
        progress_timeout=600,
        startup_timeout=0,
        paths=(LOG, TRACKER),
        progress_pattern=ITERATION,
    )


def test_a_restart_loop_whose_log_keeps_growing_is_hung_once_its_iteration_stops_rising() -> None:
    """It resumes from a checkpoint again and again (30 .. 37, 30 .. 37): the log changes every few
    seconds, the highest iteration it reports does not."""
    dog = _dog()
    fresh_log = {LOG: _file(LOG, 2), TRACKER: _file(TRACKER, 3000)}
    dog.saw_log("".join(_line(i) for i in range(30, 38)), NOW - 700)
    for minute in range(10):
        dog.saw_log(_line(30) + _line(37), NOW - 600 + 60 * minute)
    alarm = dog.observe(_running("2:00:00"), now=0, remote_now=NOW, files=fresh_log)
    assert alarm is not None
    assert alarm.kind == "hung"
    assert "its reported progress stayed at 37 while its log went on" in alarm.message
    assert "11 min 40 s" in alarm.message  # since iteration 37 was first seen


def test_a_rising_iteration_or_a_new_checkpoint_is_progress_however_quiet_the_log() -> None:
    dog = _dog()
    old_log = {LOG: _file(LOG, 590), TRACKER: _file(TRACKER, 3000)}
    dog.saw_log(_line(37), NOW - 5000)
    dog.saw_log(_line(40), NOW - 590)  # a slow but healthy step
    assert dog.observe(_running("2:00:00"), now=0, remote_now=NOW, files=old_log) is None
    saved = {LOG: _file(LOG, 2), TRACKER: _file(TRACKER, 30)}  # the save after the step
    dog.saw_log(_line(40), NOW)
    assert dog.observe(_running("2:00:00"), now=0, remote_now=NOW + 500, files=saved) is None


def test_a_log_that_never_reports_the_pattern_counts_as_progress_as_before() -> None:
    """A trainer printing another format is never judged by a pattern it does not print."""
    dog = _dog()
    dog.saw_log("step 1 loss 2.5\nstep 2 loss 2.4\n", NOW - 5000)
    files = {LOG: _file(LOG, 5), TRACKER: _file(TRACKER, 3000)}
    assert dog.mark is not None
    assert dog.mark.high is None
    assert dog.observe(_running("2:00:00"), now=0, remote_now=NOW, files=files) is None


def test_a_watchdog_rebuilt_from_its_stored_clocks_continues_them() -> None:
    """A triggerer restart rebuilds the watchdog: with the clocks the first one kept, neither the
    unknown clock nor the no-progress clock starts again."""
    first = _dog()
    weird = JobRecord(job_id="42", name="train", state=SlurmState.UNKNOWN, raw_state="LAUNCH_FAILED")
    assert first.observe(weird, now=100) is None
    first.saw_log(_line(37), NOW - 500)
    stored = Clocks.from_value(first.clocks().to_dict())
    assert stored == Clocks(unknown_since=100, progress_high=37, advanced_at=NOW - 500, progress_first=37)

    second = _dog()
    second.saw_log(_line(30) + _line(37), NOW - 10)  # the restart loop reports 37 again
    second.resume(stored)
    assert second.observe(weird, now=150) is None
    alarm = second.observe(weird, now=160)  # 60 s after the first incarnation first saw it
    assert alarm is not None
    assert "for 1 min" in alarm.message
    files = {LOG: _file(LOG, 2), TRACKER: _file(TRACKER, 3000)}
    hung = second.observe(_running("2:00:00"), now=170, remote_now=NOW + 100, files=files)
    assert hung is not None
    assert "made no progress for 10 min" in hung.message  # from NOW - 500, not NOW - 10


def test_stored_clocks_never_lengthen_a_bound_nor_hide_newer_progress() -> None:
    dog = _dog()
    dog.saw_log(_line(40), NOW)
    dog.resume(Clocks(unknown_since=None, progress_high=37, advanced_at=NOW - 900))
    assert dog.mark is not None
    assert (dog.mark.high, dog.mark.advanced_at) == (40, NOW)  # a higher value seen now wins
    late = Watchdog(job_id="42", unknown_timeout=30)
    weird = JobRecord(job_id="42", name="train", state=SlurmState.UNKNOWN)
    late.resume(Clocks(unknown_since=100))
    assert late.observe(_running("0:10"), now=110) is None  # known again: the stored clock is void
    assert late.observe(weird, now=120) is None
    assert late.observe(weird, now=140) is None  # counted from 120


@pytest.mark.parametrize("value", [None, "x", {"unknown_since": "1"}, {"progress_high": True}])
def test_garbled_stored_clocks_are_no_clocks(value: object) -> None:
    assert Clocks.from_value(value) == Clocks()


def test_the_mark_records_where_the_job_started_how_far_it_got_and_when_it_first_reported() -> None:
    dog = _dog()
    assert dog.progress() == {}  # nothing reported: nothing recorded
    dog.saw_log("loading checkpoint\n", NOW - 900, "0:30")
    dog.saw_log(_line(301) + _line(302), NOW - 800, "2:10")  # resumed at 300: start-up took <= 130 s
    dog.saw_log(_line(310) + _line(305), NOW - 700, "3:50")
    assert dog.progress() == {
        "progress": {"progress_at_start": 301, "progress_at_end": 310, "first_progress_s": 130.0}
    }
