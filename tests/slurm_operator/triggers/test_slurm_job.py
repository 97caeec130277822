"""Tests for trigger serialization and the run() loops' decisions.

The SSH side is faked (a dict of job states, an in-memory log) because what is tested is the loop's
logic: one final event, log relay from an offset, failure budget. The same triggers run against
the real cluster and a real triggerer in tests/slurm_operator/integration.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.module_loading import import_string
from airflow.triggers.base import TaskSuccessEvent
from slurm_operator.model import events, naming
from slurm_operator.model.events import SlurmEvent
from slurm_operator.model.records import JobRecord, JobStates
from slurm_operator.model.states import SlurmState
from slurm_operator.triggers import job_success
from slurm_operator.triggers import slurm_job as triggers
from slurm_operator.triggers.job_poller import SlurmPoller
from slurm_operator.triggers.slurm_job import SlurmJobTrigger

from tests.support.fake_slurm import FakeSlurm


@pytest.fixture
def cluster(monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    fake = FakeSlurm()
    monkeypatch.setattr(SlurmPoller, "hook_factory", staticmethod(lambda _c: fake))
    monkeypatch.setattr(triggers, "AsyncSlurmHook", lambda _c: fake)
    return fake


JOB_KWARGS: dict[str, Any] = {
    "ssh_conn_id": "slurm_local",
    "job_id": "42",
    "poll_interval": 0.01,
    "log_path": "/r/job-42.out",
    "log_offset": 5,
    "stream_logs": True,
    "failure_budget": 100.0,
    "missing_polls": 3,
    "cancel_on_kill": True,
    "carry": {"attempts": [{"job_id": "42"}]},
    "min_defer_seconds": 0.0,
    "unknown_timeout": 60.0,
    "progress_timeout": 30.0,
    "startup_timeout": 10.0,
    "progress_paths": ["/r/ckpt/latest_checkpointed_iteration.txt"],
    "end_task_on_success": False,
    "completion_regex": None,
    "completion_command": None,
    "progress_pattern": None,
    "fatal_patterns": None,
}


@pytest.mark.parametrize(("cls", "kwargs"), [(SlurmJobTrigger, JOB_KWARGS)])
def test_serialize_returns_every_argument_and_an_importable_classpath(
    cls: type, kwargs: dict[str, Any]
) -> None:
    classpath, out = cls(**kwargs).serialize()
    assert out == kwargs
    assert classpath == f"slurm_operator.triggers.slurm_job.{cls.__name__}"
    rebuilt = import_string(classpath)(**out)
    assert rebuilt.serialize() == (classpath, kwargs)


async def _events(trigger: Any) -> list[SlurmEvent]:
    return [SlurmEvent.from_payload(e.payload) async for e in trigger.run()]


async def test_job_trigger_relays_log_lines_and_yields_one_final_event(
    cluster: FakeSlurm, capsys: pytest.CaptureFixture[str]
) -> None:
    cluster.states = [{"42": SlurmState.PENDING}, {"42": SlurmState.RUNNING}, {"42": SlurmState.FAILED}]
    cluster.files["/r/job-42.out"] = "skip\nstep 1\nstep 2\nhalf"
    evs = await _events(SlurmJobTrigger(**JOB_KWARGS))
    assert len(evs) == 1
    ev = evs[0]
    assert (ev.status, ev.job_id, ev.slurm_state, ev.exit_code) == (events.ENDED, "42", "FAILED", 3)
    assert ev.log_offset == len("skip\nstep 1\nstep 2\nhalf")
    assert ev.carry == JOB_KWARGS["carry"]
    assert ev.record is not None
    assert ev.record.state is SlurmState.FAILED
    # Airflow routes trigger loggers through structlog to stdout (the task log in a real triggerer).
    relayed = re.findall(r"\[slurm 42\] (\S+(?: \d)?)", capsys.readouterr().out)
    assert relayed == ["step 1", "step 2", "half"]


async def test_job_trigger_gives_up_on_a_vanished_job(cluster: FakeSlurm) -> None:
    cluster.states = [{}]
    (ev,) = await _events(SlurmJobTrigger(**{**JOB_KWARGS, "stream_logs": False}))
    assert ev.status == events.ERROR
    assert "job 42 is unknown to Slurm after 3 polls" in ev.message


async def test_job_trigger_holds_a_quick_final_event_for_min_defer_seconds(
    cluster: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job that ends at once must not fire before the scheduler processed the deferral (3.3.2 race,
    docs/slurm-operator.md#airflow-332-workarounds)."""
    cluster.states = [{"42": SlurmState.COMPLETED}]
    waits: list[float] = []
    real_sleep = triggers.asyncio.sleep

    async def sleep(delay: float) -> None:
        waits.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(triggers.asyncio, "sleep", sleep)
    (ev,) = await _events(SlurmJobTrigger(**{**JOB_KWARGS, "stream_logs": False, "min_defer_seconds": 30.0}))
    assert (ev.status, ev.slurm_state) == (events.ENDED, "COMPLETED")
    assert len(waits) == 1
    assert 29.0 < waits[0] <= 30.0


@pytest.mark.parametrize("inside", [True, False])
async def test_in_a_triggerer_the_final_event_waits_for_the_last_log_records_to_be_read(
    cluster: FakeSlurm, monkeypatch: pytest.MonkeyPatch, inside: bool
) -> None:
    """The triggerer's supervisor drops a trigger's records queued behind its "finished" (the last
    3 lines of a 250-line log were lost that way under load): the event is held LOG_SETTLE_SECONDS
    after the last record. An inline run (dag.test()) has no supervisor to wait for."""
    cluster.states = [{"42": SlurmState.RUNNING}, {"42": SlurmState.COMPLETED}]
    cluster.files["/r/job-42.out"] = "skip\nline 1\nline 2\n"
    waits: list[float] = []
    real_sleep = triggers.asyncio.sleep

    async def sleep(delay: float) -> None:
        waits.append(delay)
        await real_sleep(0)

    monkeypatch.setattr(triggers.asyncio, "sleep", sleep)
    trigger = SlurmJobTrigger(**JOB_KWARGS)
    trigger.task_instance = TI() if inside else None  # type: ignore[assignment]
    monkeypatch.setattr(triggers.XComPositionStore, "of", classmethod(lambda cls, ti: None))  # in memory
    (ev,) = await _events(trigger)
    assert ev.log_offset == len("skip\nline 1\nline 2\n")
    if inside:
        assert triggers.LOG_SETTLE_SECONDS - 1.0 < waits[-1] <= triggers.LOG_SETTLE_SECONDS
    else:
        assert waits[-1] == 0.0


async def test_job_trigger_on_kill_cancels(cluster: FakeSlurm) -> None:
    await SlurmJobTrigger(**JOB_KWARGS).on_kill()
    await SlurmJobTrigger(**{**JOB_KWARGS, "cancel_on_kill": False}).on_kill()
    assert cluster.cancelled == ["42"]
    # The marker next to the log tells a later try this cancel was ours, not a person's.
    assert cluster.marked == [{"marker": "/r/job-42.out.airflow-cancel", "reason": naming.ON_KILL_REASON}]


async def test_on_kill_relays_what_the_cancelled_job_prints_while_it_shuts_down(
    cluster: FakeSlurm, capsys: pytest.CaptureFixture[str]
) -> None:
    """The job's last lines (a final save, the launcher's report of the stop) reach the task log once
    Slurm says it ended; from the relayed offset on, never again what was relayed before."""
    cluster.states = [{"42": SlurmState.COMPLETING}, {"42": SlurmState.CANCELLED}]
    cluster.files["/r/job-42.out"] = "seen\nsaving checkpoint at iteration 637\nexiting on SIGTERM\n"
    trigger = SlurmJobTrigger(**{**JOB_KWARGS, "log_offset": len("seen\n")})
    # A task instance with no usable relay store (positions in memory only, as under dag.test()).
    ti = SimpleNamespace(dag_id="d", task_id="t", run_id="r", map_index="none", try_number=1)
    trigger.task_instance = ti  # type: ignore[assignment]
    await trigger.on_kill()
    assert cluster.cancelled == ["42"]
    out = capsys.readouterr().out
    assert re.findall(r"\[slurm 42\] (\w+ \w+)", out) == ["saving checkpoint", "exiting on"], out


async def test_a_state_nobody_can_classify_ends_the_wait_once_after_unknown_timeout(
    cluster: FakeSlurm,
) -> None:
    """LAUNCH_FAILED (a state of a newer Slurm) through the poll path: one error event, no cancel."""
    cluster.states = [{"42": SlurmState.parse("LAUNCH_FAILED")}]
    cluster.raw_state = "LAUNCH_FAILED"
    trigger = SlurmJobTrigger(**{**JOB_KWARGS, "stream_logs": False, "unknown_timeout": 0.05})
    (ev,) = await _events(trigger)
    assert (ev.status, ev.job_id, ev.slurm_state) == (events.ERROR, "42", "UNKNOWN")
    assert ev.message.startswith(
        "job 42 has been in state 'LAUNCH_FAILED', which is neither active nor ended"
    )
    assert "NOT cancelled" in ev.message
    assert ev.record is not None
    assert ev.record.raw_state == "LAUNCH_FAILED"
    assert ev.carry == JOB_KWARGS["carry"]
    assert cluster.cancelled == []


async def test_a_running_job_whose_files_stopped_changing_ends_the_wait_as_hung(
    cluster: FakeSlurm,
) -> None:
    cluster.states = [{"42": SlurmState.RUNNING}]
    cluster.started, cluster.clock = 1000.0, 1060.0  # running for a minute
    cluster.mtimes = {"/r/job-42.out": 1030.0}  # the log last changed 30 s ago; no tracker yet
    trigger = SlurmJobTrigger(**{**JOB_KWARGS, "stream_logs": False})  # progress_timeout 30, startup 10
    (ev,) = await _events(trigger)
    assert (ev.status, ev.job_id, ev.slurm_state) == (events.HUNG, "42", "RUNNING")
    assert ev.message.startswith("job 42 made no progress for 30 s: none of its 2 watched file(s) changed")
    assert ev.record is not None
    # The log and the extra progress path were statted by the batched state query itself.
    assert cluster.watched[0] == ["/r/job-42.out", "/r/ckpt/latest_checkpointed_iteration.txt"]
    assert cluster.cancelled == []  # cancelling is the operator's decision


async def test_a_quiet_job_whose_progress_file_moved_is_not_hung(cluster: FakeSlurm) -> None:
    cluster.states = [{"42": SlurmState.RUNNING}] * 3 + [{"42": SlurmState.COMPLETED}]
    cluster.started, cluster.clock = 1000.0, 1060.0
    cluster.mtimes = {"/r/job-42.out": 1000.0, "/r/ckpt/latest_checkpointed_iteration.txt": 1050.0}
    (ev,) = await _events(SlurmJobTrigger(**{**JOB_KWARGS, "stream_logs": False}))
    assert (ev.status, ev.slurm_state) == (events.ENDED, "COMPLETED")


async def test_without_progress_timeout_nothing_is_statted(cluster: FakeSlurm) -> None:
    cluster.states = [{"42": SlurmState.RUNNING}, {"42": SlurmState.COMPLETED}]
    cluster.started, cluster.clock = 1000.0, 9000.0
    (ev,) = await _events(SlurmJobTrigger(**{**JOB_KWARGS, "stream_logs": False, "progress_timeout": None}))
    assert (ev.status, ev.slurm_state) == (events.ENDED, "COMPLETED")
    assert cluster.watched == [[], []]


class TI:
    dag_id, task_id, run_id, map_index = "d", "t", "r", 3


ATTEMPT = {"attempt": 1, "job_id": "42", "log_path": "/r/job-42.out", "script_path": "/r/s.sbatch"}
ENDING = {
    **JOB_KWARGS,
    "stream_logs": False,
    "carry": {"name": "n", "attempts": [ATTEMPT]},
    "end_task_on_success": True,
    "completion_regex": "^training done",
    "completion_command": "check",
}


@pytest.mark.parametrize(
    ("log", "out", "in_triggerer", "xcoms", "ends"),
    [
        ("step 1\ntraining done\n", "1\n", True, True, True),
        ("step 1\n", "1\n", True, True, False),  # the regex is not in the log: the operator resubmits
        ("training done\n", "0\n", True, True, False),  # the command says not done
        ("training done\n", "1\n", False, True, False),  # dag.test()'s inline run: the operator judges
        ("training done\n", "1\n", True, False, False),  # before 3.3 no trigger XComs: the operator judges
    ],
)
async def test_a_completed_job_that_passes_its_checks_ends_the_task_from_the_triggerer(
    cluster: FakeSlurm,
    monkeypatch: pytest.MonkeyPatch,
    log: str,
    out: str,
    in_triggerer: bool,
    xcoms: bool,
    ends: bool,
) -> None:
    written: list[tuple[Any, dict[str, Any]]] = []

    async def xcom_set(value: Any, **where: Any) -> None:
        written.append((value, where))

    monkeypatch.setattr(job_success.airflow_internals, "xcom_set", xcom_set)
    monkeypatch.setattr(job_success.airflow_internals, "TRIGGER_XCOMS", xcoms)
    cluster.states = [{"42": SlurmState.RUNNING}, {"42": SlurmState.COMPLETED}]
    cluster.files["/r/job-42.out"], cluster.command_out = log, out
    trigger = SlurmJobTrigger(**ENDING)
    trigger.task_instance = TI() if in_triggerer else None  # type: ignore[assignment]
    (event,) = [e async for e in trigger.run()]
    if not ends:
        assert not isinstance(event, TaskSuccessEvent)
        assert SlurmEvent.from_payload(event.payload).slurm_state == "COMPLETED"
        assert written == []
        return
    assert isinstance(event, TaskSuccessEvent)
    assert cluster.commands == ["check"]
    # What the operator would return (every attempt), written as the task's XCom before it ends.
    ((attempts, where),) = written
    assert where == {"key": "return_value", "dag_id": "d", "task_id": "t", "run_id": "r", "map_index": 3}
    (attempt,) = attempts
    assert (attempt["job_id"], attempt["state"], attempt["verdict"]) == ("42", "COMPLETED", "succeed")
    assert attempt["completion_ok"] is True


async def test_a_failing_success_step_leaves_the_judgment_to_the_operator(
    cluster: FakeSlurm, monkeypatch: pytest.MonkeyPatch
) -> None:
    class Marking(SlurmJobTrigger):
        async def on_success(self, hook: Any) -> None:
            raise OSError("marker not written")

    monkeypatch.setattr(job_success.airflow_internals, "TRIGGER_XCOMS", True)  # the step runs first

    cluster.states = [{"42": SlurmState.COMPLETED}]
    cluster.files["/r/job-42.out"] = "training done\n"
    trigger = Marking(**ENDING)
    trigger.task_instance = TI()  # type: ignore[assignment]
    (event,) = [e async for e in trigger.run()]
    assert not isinstance(event, TaskSuccessEvent)
    assert SlurmEvent.from_payload(event.payload).status == events.ENDED


async def test_a_pending_job_s_reason_and_estimate_are_logged_once_per_change(
    cluster: FakeSlurm, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def pending(reason: str, start: str | None = None) -> JobRecord:
        return JobRecord("42", "n", SlurmState.PENDING, reason=reason, expected_start=start)

    rounds = [
        pending("Priority"),
        pending("Priority"),  # unchanged: no line
        pending("Priority", "2026-12-03T14:05:00"),
        pending("Priority", "2026-12-03T14:05:30"),  # the same minute: no line
        pending("Resources", "2026-12-03T14:05:30"),
        # Leaving the queue (a cancel, seen on a fresh clone): sacct still says PENDING, squeue
        # --start no longer lists it: no line saying "no reason given yet".
        JobRecord("42", "n", SlurmState.PENDING),
        pending("Resources"),  # sacct's reason without squeue --start's estimate: no line either
        JobRecord("42", "n", SlurmState.RUNNING),
        JobRecord("42", "n", SlurmState.COMPLETED, exit_code=0),
    ]

    async def job_states(job_ids: list[str], watch: Sequence[str] = ()) -> JobStates:
        return JobStates(records={"42": rounds.pop(0) if len(rounds) > 1 else rounds[0]})

    monkeypatch.setattr(cluster, "job_states", job_states)
    (ev,) = await _events(SlurmJobTrigger(**{**JOB_KWARGS, "stream_logs": False, "progress_timeout": None}))
    assert ev.slurm_state == "COMPLETED"
    lines = re.findall(r"Slurm job 42 pending: [^\n]*?(?= \[| *$|\n)", capsys.readouterr().out, re.M)
    assert lines == [
        "Slurm job 42 pending: Priority, no start estimate yet",
        "Slurm job 42 pending: Priority, est. start 2026-12-03T14:05",
        "Slurm job 42 pending: Resources, est. start 2026-12-03T14:05",
    ]


async def test_a_fatal_line_in_the_running_job_s_log_cancels_it_at_once(cluster: FakeSlurm) -> None:
    """The log reports a dead model for 3 log intervals: the poll that reads the third cancels the
    job (with our marker, naming the rule and the line) and ends the wait with one ``fatal`` event."""
    dead = "".join(f" iteration {i}/ 99 | lm loss: 5.951 | grad norm: 0.000 |\n" for i in (7, 8, 9))
    cluster.states = [{"42": SlurmState.RUNNING}]
    cluster.files["/r/job-42.out"] = "12345 iteration 6/ 99 | lm loss: 7.1 | grad norm: 3.1 |\n" + dead
    rule = {"pattern": r"lm loss: 5\.95\d* \| grad norm: 0\.000 ", "repeats": 3}
    kwargs = {"progress_pattern": r"\biteration\s+(\d+)/", "fatal_patterns": {"DEAD": [rule]}}
    (ev,) = await _events(SlurmJobTrigger(**{**JOB_KWARGS, **kwargs}))
    assert (ev.status, ev.slurm_state) == (events.FATAL, "RUNNING")
    line = "iteration 9/ 99 | lm loss: 5.951 | grad norm: 0.000 |"
    assert ev.message == f"job 42: DEAD: its log says {line!r} (a fatal pattern); cancelling it"
    assert ev.data == {
        "fatal": "DEAD",
        "fatal_line": line,
        "cancelled": True,
        # For the attempt's record: its first and highest reported iteration, and its run time at
        # the first read (the fake cluster's clock stands still: 0 s).
        "progress": {"progress_at_start": 6, "progress_at_end": 9, "first_progress_s": 0.0},
    }
    assert cluster.cancelled == ["42"]
    assert cluster.marked == [{"marker": "/r/job-42.out.airflow-cancel", "reason": f"fatal: DEAD: {line}"}]


async def test_two_dead_intervals_of_three_do_not_stop_the_job(cluster: FakeSlurm) -> None:
    dead = "".join(f" iteration {i}/ 99 | lm loss: 5.951 | grad norm: 0.000 |\n" for i in (7, 8))
    cluster.states = [{"42": SlurmState.RUNNING}] * 3 + [{"42": SlurmState.COMPLETED}]
    cluster.files["/r/job-42.out"] = "12345" + dead + " iteration 9/ 99 | lm loss: 5.9 | grad norm: 0.2 |\n"
    rule = {"pattern": r"lm loss: 5\.95\d* \| grad norm: 0\.000 ", "repeats": 3}
    kwargs = {"progress_pattern": r"\biteration\s+(\d+)/", "fatal_patterns": {"DEAD": [rule]}}
    (ev,) = await _events(SlurmJobTrigger(**{**JOB_KWARGS, **kwargs}))
    assert (ev.status, ev.slurm_state, "fatal" in ev.data) == (events.ENDED, "COMPLETED", False)
    assert cluster.cancelled == []


async def test_a_value_above_k_times_its_running_median_cancels_the_job(cluster: FakeSlurm) -> None:
    """An ``above_median`` rule, through the trigger's serialized (JSON) form: the loss settles at
    2.0, then 2 log intervals above 3 x 2.0 cancel the job at the second."""
    spike = {"pattern": r"lm loss: ([^\s|]+)", "above_median": 3.0, "repeats": 2, "window": 3}
    kwargs = {"progress_pattern": r"\biteration\s+(\d+)/", "fatal_patterns": {"DIVERGED": [spike]}}
    classpath, stored = SlurmJobTrigger(**{**JOB_KWARGS, **kwargs}).serialize()
    trigger = import_string(classpath)(**json.loads(json.dumps(stored)))
    losses = ["2.1", "2.0", "1.9", "7.5", "2.0", "6.3", "9.9", "2.0"]
    cluster.states = [{"42": SlurmState.RUNNING}]
    cluster.files["/r/job-42.out"] = "12345" + "".join(
        f" iteration {i}/ 99 | lm loss: {v} |\n" for i, v in enumerate(losses, start=1)
    )
    (ev,) = await _events(trigger)
    line = "iteration 7/ 99 | lm loss: 9.9 |"
    assert (ev.status, ev.data["fatal"], ev.data["fatal_line"]) == (events.FATAL, "DIVERGED", line)
    assert cluster.marked == [
        {"marker": "/r/job-42.out.airflow-cancel", "reason": f"fatal: DIVERGED: {line}"}
    ]


async def test_the_final_event_says_what_the_job_reported_for_its_attempt_record(cluster: FakeSlurm) -> None:
    cluster.states = [{"42": SlurmState.RUNNING}, {"42": SlurmState.TIMEOUT}]
    cluster.started, cluster.clock = 1000.0, 1095.0  # the first progress line read after 95 s
    cluster.files["/r/job-42.out"] = "12345loading\n iteration 300/ 99 |\n iteration 310/ 99 |\n"
    kwargs = {"progress_pattern": r"\biteration\s+(\d+)/", "progress_timeout": None}
    (ev,) = await _events(SlurmJobTrigger(**{**JOB_KWARGS, **kwargs}))
    assert (ev.status, ev.slurm_state) == (events.ENDED, "TIMEOUT")
    assert ev.data == {
        "progress": {"progress_at_start": 300, "progress_at_end": 310, "first_progress_s": 95.0}
    }


async def test_a_requeued_job_is_waited_for_in_the_same_wait(cluster: FakeSlurm) -> None:
    """A preempted job that Slurm requeues keeps its id and comes back PENDING: no new attempt,
    nothing counted, one final event when it ends."""
    cluster.states = [{"42": s} for s in (SlurmState.RUNNING, SlurmState.REQUEUED, SlurmState.PENDING,
                                          SlurmState.RUNNING, SlurmState.COMPLETED)]  # fmt: skip
    (ev,) = await _events(SlurmJobTrigger(**{**JOB_KWARGS, "stream_logs": False, "progress_timeout": None}))
    assert (ev.status, ev.slurm_state) == (events.ENDED, "COMPLETED")
    assert len(cluster.calls) == 5
