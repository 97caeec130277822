"""The log relay position: stored before the lines go out, found again by a re-created trigger.

The supervisor comms are faked (the messages a triggerer's supervisor receives are checked); the
real triggerer, killed and restarted mid-job, is in integration/test_faults_real.py.
"""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from airflow.sdk.execution_time import task_runner
from airflow.sdk.execution_time.comms import GetXCom, SetXCom, XComResult
from slurm_operator import airflow_internals
from slurm_operator.model.events import SlurmEvent
from slurm_operator.model.states import SlurmState
from slurm_operator.triggers import relay_position
from slurm_operator.triggers import slurm_job as triggers
from slurm_operator.triggers.relay_position import XCOM_KEY, RelayBook, RelayPosition, XComPositionStore
from slurm_operator.triggers.slurm_job import SlurmJobTrigger

from tests.slurm_operator.triggers.test_slurm_job import JOB_KWARGS, cluster  # noqa: F401 (fixture)
from tests.support.fake_slurm import FakeSlurm

LOG = "/r/job-42.out"


class MemoryStore:
    """A position store that also notes how many lines had been relayed when each save came."""

    def __init__(self, lines: list[str], value: Any = None) -> None:
        self.value = value
        self.lines = lines
        self.saved_after: list[int] = []
        self.fail: BaseException | None = None
        self.fail_times = 1_000_000
        self.answer = asyncio.Event()  # a load answers only once this is set
        self.answer.set()

    async def load(self) -> RelayPosition | None:
        await self.answer.wait()
        return RelayPosition.from_value(self.value)

    async def save(self, position: RelayPosition) -> None:
        if self.fail is not None and self.fail_times > 0:
            self.fail_times -= 1
            raise self.fail
        self.saved_after.append(len(self.lines))
        self.value = position.to_dict()


class Lines:
    """Stands in for the trigger's logger: keeps the relayed lines, and the records."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines
        self.records: list[str] = []
        self.warnings: list[str] = []
        self.grown = asyncio.Event()

    def info(self, msg: str, *args: Any) -> None:
        text = msg % args
        self.records.append(text)
        relayed = re.findall(r"^\[slurm 42\] (.*)$", text, re.MULTILINE)
        if relayed:
            self.lines.extend(relayed)
            self.grown.set()

    def warning(self, msg: str, *args: Any) -> None:
        self.warnings.append(msg % args)

    def exception(self, *args: Any) -> None: ...


def _trigger(store: MemoryStore, monkeypatch: pytest.MonkeyPatch, **kwargs: Any) -> SlurmJobTrigger:
    monkeypatch.setattr(triggers.XComPositionStore, "of", staticmethod(lambda _ti: store))
    trigger = SlurmJobTrigger(**{**JOB_KWARGS, "log_offset": 0, "progress_timeout": None, **kwargs})
    trigger._log = Lines(store.lines)  # type: ignore[assignment]
    return trigger


@pytest.mark.parametrize(
    "value",
    [None, "x", {}, {"job_id": "42", "log_path": LOG}, {"job_id": 42, "log_path": LOG, "offset": 1},
     {"job_id": "42", "log_path": LOG, "offset": -1}, {"job_id": "42", "log_path": LOG, "offset": True}],
)  # fmt: skip
def test_a_foreign_or_garbled_stored_value_is_no_position(value: Any) -> None:
    assert RelayPosition.from_value(value) is None


def test_a_position_round_trips() -> None:
    pos = RelayPosition("42", LOG, 17)
    assert RelayPosition.from_value(pos.to_dict()) == pos
    waiting = RelayPosition("42", LOG, 0, pending="JobHeldUser, no start estimate yet")
    assert waiting.to_dict()["pending"] == "JobHeldUser, no start estimate yet"
    assert RelayPosition.from_value(waiting.to_dict()) == waiting
    assert RelayPosition.from_value({**pos.to_dict(), "pending": 3}) == pos  # garbled: no note


async def test_the_stored_value_says_why_a_pending_job_waits_until_it_runs(
    cluster: FakeSlurm,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What a UI reads to show a waiting job's note without asking the cluster: stored once per
    change of the note, dropped by the poll that sees the job run."""
    from slurm_operator.model.records import JobRecord, JobStates

    def pending(reason: str, start: str | None = None) -> JobRecord:
        return JobRecord("42", "n", SlurmState.PENDING, reason=reason, expected_start=start)

    # Each state for ten polls: a trigger busy with one round skips the rounds that came meanwhile
    # (it reads the newest), a few per round it handles when the machine is loaded.
    rounds = [
        *[pending("JobHeldUser")] * 10,  # the stored value is not known at the first poll: nothing stored
        *[pending("Priority", "2026-12-03T14:05:00")] * 10,
        *[pending("Priority", "2026-12-03T14:05:40")] * 10,  # the same minute: the same note
        *[JobRecord("42", "n", SlurmState.RUNNING)] * 10,
        JobRecord("42", "n", SlurmState.COMPLETED, exit_code=0),
    ]

    async def job_states(job_ids: list[str], watch: Any = ()) -> JobStates:
        return JobStates(records={"42": rounds.pop(0) if len(rounds) > 1 else rounds[0]})

    monkeypatch.setattr(cluster, "job_states", job_states)
    store = MemoryStore([], {"job_id": "42", "log_path": LOG, "offset": 0})  # as the operator seeds it
    saved: list[Any] = []
    save = store.save

    async def keep_each(position: RelayPosition) -> None:
        await save(position)
        saved.append(position.pending)

    monkeypatch.setattr(store, "save", keep_each)
    (ev,) = await _events(_trigger(store, monkeypatch, stream_logs=False))
    assert ev.slurm_state == "COMPLETED"
    assert saved == ["JobHeldUser, no start estimate yet", "Priority, est. start 2026-12-03T14:05", None]
    assert "pending" not in store.value


async def test_a_re_created_trigger_relays_each_line_once(
    cluster: FakeSlurm,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first trigger is cancelled mid-job (as a triggerer shutdown does); the second one,
    rebuilt from the same kwargs (log_offset 0), continues where the first one stored."""
    lines: list[str] = []
    store = MemoryStore(lines)
    cluster.states = [{"42": SlurmState.RUNNING}]
    cluster.files[LOG] = "".join(f"line {i}\n" for i in range(1, 58)) + "line 5"  # 58 half-written
    trigger = _trigger(store, monkeypatch)
    first = asyncio.create_task(_events(trigger))
    await asyncio.wait_for(trigger._log.grown.wait(), 10)  # type: ignore[union-attr]
    assert len(lines) == 57  # one read relays every complete line
    first.cancel()
    with pytest.raises(asyncio.CancelledError):
        await first
    assert store.value == {"job_id": "42", "log_path": LOG, "offset": len(cluster.files[LOG]) - 6}
    assert store.saved_after == [0]  # stored before any line went out
    assert trigger._log.records[-1].count("\n") == 56  # type: ignore[union-attr]  # one record for the read
    cluster.files[LOG] += "8\n" + "".join(f"line {i}\n" for i in range(59, 278))
    cluster.states = [{"42": SlurmState.RUNNING}, {"42": SlurmState.COMPLETED}]
    (ev,) = await _events(_trigger(store, monkeypatch))
    assert lines == [f"line {i}" for i in range(1, 278)]
    assert store.saved_after == [0, 57]
    assert ev.log_offset == len(cluster.files[LOG])


async def test_the_position_of_another_job_is_ignored(
    cluster: FakeSlurm,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines: list[str] = []
    store = MemoryStore(lines, {"job_id": "41", "log_path": "/r/job-41.out", "offset": 100})
    cluster.states = [{"42": SlurmState.COMPLETED}]
    cluster.files[LOG] = "a\nb\n"
    (ev,) = await _events(_trigger(store, monkeypatch))
    assert lines == ["a", "b"]
    assert store.value == {"job_id": "42", "log_path": LOG, "offset": 4}
    assert ev.log_offset == 4


async def test_lines_whose_position_cannot_be_stored_wait_for_the_next_poll(
    cluster: FakeSlurm,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines: list[str] = []
    store = MemoryStore(lines)
    store.fail, store.fail_times = RuntimeError("execution API answered 500"), 1
    # Running for 20 polls: rounds that come while the trigger is busy are skipped (it reads the
    # newest); with only two, a loaded machine went from the failed store straight to the final read.
    cluster.states = [{"42": SlurmState.RUNNING}] * 20 + [{"42": SlurmState.COMPLETED}]
    cluster.files[LOG] = "a\nb\n"
    trigger = _trigger(store, monkeypatch)
    (ev,) = await _events(trigger)
    assert lines == ["a", "b"]  # held back once, then relayed once
    assert store.saved_after == [0]
    assert ev.log_offset == 4
    assert trigger._log.warnings == [  # type: ignore[union-attr]
        "Slurm job 42: cannot store the log relay position: execution API answered 500"
    ]


async def test_the_last_lines_go_out_even_when_their_position_cannot_be_stored(
    cluster: FakeSlurm,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    lines: list[str] = []
    store = MemoryStore(lines)
    store.fail = RuntimeError("execution API answered 500")
    cluster.states = [{"42": SlurmState.COMPLETED}]
    cluster.files[LOG] = "a\nb"  # the last line unterminated: the final read takes it too
    (ev,) = await _events(_trigger(store, monkeypatch))
    assert lines == ["a", "b"]
    assert ev.log_offset == 3


async def test_no_line_goes_out_before_the_stored_position_is_known(
    cluster: FakeSlurm,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fresh triggerer's supervisor is slow to answer: the relay waits, the state polls go on."""
    lines: list[str] = []
    store = MemoryStore(lines, {"job_id": "42", "log_path": LOG, "offset": 2})
    store.answer.clear()
    cluster.states = [{"42": SlurmState.RUNNING}]
    cluster.files[LOG] = "a\nb\nc\n"
    polled = asyncio.Event()
    answer = cluster.job_states

    async def job_states(job_ids: list[str], watch: Any = ()) -> Any:
        if len(cluster.watched) >= 5:
            polled.set()
        return await answer(job_ids, watch)

    monkeypatch.setattr(cluster, "job_states", job_states)
    task = asyncio.create_task(_events(_trigger(store, monkeypatch)))
    await asyncio.wait_for(polled.wait(), 10)  # the polls go on without an answer from the store
    assert lines == []
    store.answer.set()
    cluster.states = [{"42": SlurmState.COMPLETED}]
    (ev,) = await task
    assert lines == ["b", "c"]
    assert ev.log_offset == 6


async def test_a_store_that_never_answers_lets_the_last_lines_out_after_the_timeout(
    cluster: FakeSlurm,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(relay_position, "STORE_TIMEOUT", 0.01)
    lines: list[str] = []
    store = MemoryStore(lines, {"job_id": "42", "log_path": LOG, "offset": 2})
    store.answer.clear()
    cluster.states = [{"42": SlurmState.COMPLETED}]
    cluster.files[LOG] = "a\nb\n"
    trigger = _trigger(store, monkeypatch)
    await _events(trigger)
    assert lines == ["a", "b"]  # from the deferral's offset: may repeat, and says so
    assert "may repeat lines an earlier run of this trigger relayed" in trigger._log.warnings[0]  # type: ignore[union-attr]


async def test_a_store_cut_off_by_a_dying_supervisor_emits_nothing(
    cluster: FakeSlurm,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The supervisor died: its comms reader cancels the pending request; the lines stay unrelayed
    (a re-created trigger relays them from the stored position)."""
    lines: list[str] = []
    store = MemoryStore(lines)
    store.fail = asyncio.CancelledError("Reader loop exited")
    cluster.states = [{"42": SlurmState.RUNNING}]
    cluster.files[LOG] = "a\nb\n"
    with pytest.raises(asyncio.CancelledError):
        await _events(_trigger(store, monkeypatch))
    assert lines == []


async def test_the_book_resumes_only_forward_and_says_so() -> None:
    lines: list[str] = []
    book = RelayBook("42", LOG, 10, MemoryStore(lines, {"job_id": "42", "log_path": LOG, "offset": 4}))
    assert await book.ready(wait=True)
    assert book.offset == 10  # the deferral is further on (an operator re-deferred)
    book = RelayBook("42", LOG, 0, MemoryStore(lines, {"job_id": "42", "log_path": LOG, "offset": 4}))
    assert await book.ready(wait=True)
    assert book.offset == 4
    assert await book.advance(4)
    assert book.saves == 0  # nothing new: nothing stored
    assert await book.advance(9)
    assert (book.saves, book.offset) == (1, 9)
    assert book.summary().startswith("relayed up to byte 9; position stored 1 time(s), slowest store ")
    assert RelayBook("42", LOG, 3).summary() == "relayed up to byte 3 (position kept in memory only)"


class Comms:
    """The supervisor side of the trigger's comms: records each request, answers GetXCom."""

    def __init__(self, stored: Any) -> None:
        self.sent: list[Any] = []
        self.stored = stored

    async def asend(self, msg: Any) -> Any:
        self.sent.append(msg)
        if isinstance(msg, GetXCom):
            return XComResult(key=msg.key, value=self.stored)
        return None


def test_before_airflow_3_3_a_trigger_keeps_its_position_in_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    class TI:
        dag_id, task_id, run_id, map_index = "d", "train", "manual__1", 3

    monkeypatch.setattr(airflow_internals, "TRIGGER_XCOMS", False)
    assert XComPositionStore.of(TI()) is None
    monkeypatch.setattr(airflow_internals, "TRIGGER_XCOMS", True)
    assert XComPositionStore.of(TI()) is not None


@pytest.mark.skipif(not airflow_internals.TRIGGER_XCOMS, reason="Airflow before 3.3: no async XCom client")
async def test_the_xcom_store_sends_the_task_instance_s_own_xcom_messages(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    comms = Comms({"job_id": "42", "log_path": LOG, "offset": 7})
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", comms, raising=False)

    class TI:
        dag_id, task_id, run_id, map_index = "d", "train", "manual__1", 3

    store = XComPositionStore.of(TI())
    assert store is not None
    assert await store.load() == RelayPosition("42", LOG, 7)
    await store.save(RelayPosition("42", LOG, 9))
    get, put = comms.sent
    assert get == GetXCom(key=XCOM_KEY, dag_id="d", task_id="train", run_id="manual__1", map_index=3)
    assert put == SetXCom(
        key=XCOM_KEY,
        value={"job_id": "42", "log_path": LOG, "offset": 9},
        dag_id="d",
        task_id="train",
        run_id="manual__1",
        map_index=3,
    )
    assert XComPositionStore.of(None) is None
    assert XComPositionStore.of(object()) is None


async def _events(trigger: Any) -> list[SlurmEvent]:
    return [SlurmEvent.from_payload(e.payload) async for e in trigger.run()]


ITERATION_PATTERN = r"\biteration\s+(\d+)\s*/"


async def test_a_trigger_re_created_from_its_serialized_form_continues_the_no_progress_clock(
    cluster: FakeSlurm,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A restart loop (iteration 37 again and again, the log always growing) with progress_timeout
    30 s; the triggerer restarts every 20 s. Each re-created trigger sees 37 anew, yet the clock
    runs from the first sight of 37 (cluster time 1000): hung at 1035. The cluster is the shared
    fake (tests/support/fake_slurm.py): its clock moves only when the test says."""
    store = MemoryStore([])
    cluster.states = [{"42": SlurmState.RUNNING}]
    cluster.started, cluster.clock = 900.0, 1000.0
    cluster.files[LOG] = "iteration 30/ 99\niteration 37/ 99\n"
    cluster.mtimes = {LOG: 1000.0}
    kwargs = {"progress_timeout": 30.0, "progress_pattern": ITERATION_PATTERN, "progress_paths": []}
    first = _trigger(store, monkeypatch, **kwargs)
    task = asyncio.create_task(_events(first))
    await asyncio.wait_for(first._log.grown.wait(), 10)  # type: ignore[union-attr]
    task.cancel()  # the triggerer stops
    with pytest.raises(asyncio.CancelledError):
        await task
    assert store.value["clocks"] == {
        "progress_high": 37,
        "advanced_at": 1000.0,
        "progress_first": 30,  # for the attempt's record: where it started, after 100 s of run time
        "first_progress_s": 100.0,
    }

    classpath, serialized = first.serialize()
    assert classpath.endswith("SlurmJobTrigger")
    cluster.clock = cluster.mtimes[LOG] = 1035.0
    cluster.files[LOG] += "iteration 30/ 99\niteration 37/ 99\n"  # restarted from its checkpoint
    cluster.states = [{"42": SlurmState.RUNNING}] * 3 + [{"42": SlurmState.COMPLETED}]
    (ev,) = await _events(_trigger(store, monkeypatch, **serialized))
    assert ev.status == "hung", ev.message
    assert ev.message.startswith("job 42 made no progress for 35 s: its reported progress stayed at 37")


async def test_a_re_created_trigger_continues_the_unknown_state_clock(
    cluster: FakeSlurm,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The unknown clock is wall-clock time: the first incarnation's start (stored 100 s ago) counts."""
    import time

    start = time.time() - 100
    store = MemoryStore(
        [], {"job_id": "42", "log_path": LOG, "offset": 0, "clocks": {"unknown_since": start}}
    )
    cluster.states = [{"42": SlurmState.parse("LAUNCH_FAILED")}]
    cluster.raw_state = "LAUNCH_FAILED"
    (ev,) = await _events(_trigger(store, monkeypatch, stream_logs=False, unknown_timeout=90.0))
    assert ev.status == "error"
    assert "for 1 min 40 s" in ev.message
