"""The phase checkpoint wait against the real local cluster: a checkpoint, a failed or finished training."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk.module_loading import import_string
from airflow.triggers.base import TaskSkippedEvent, TaskSuccessEvent, TriggerEvent
from slurm_operator.model.events import SlurmEvent

from autoexp.campaign.tasks.operators import CheckpointWait
from autoexp.campaign.triggerer import ti_states
from autoexp.campaign.triggerer.checkpoint_wait import CampaignJobTrigger, PhaseCheckpointTrigger
from tests.fixtures import checkpoint_layouts as layouts

pytestmark = pytest.mark.slurm


def make_trigger(
    conn_id: str, base: Path, iteration: int = 20, end_task: bool = False
) -> PhaseCheckpointTrigger:
    return PhaseCheckpointTrigger(
        ssh_conn_id=conn_id,
        path=str(base / "checkpoints"),
        iteration=iteration,
        failed_path=str(base / "state" / "pretrain.failed"),
        finished_path=str(base / "state" / "pretrain.finished"),
        stopped_path=str(base / "state" / "pretrain.stopped"),
        watch_task_id="pretrain.train",
        watch_job_name="exp-pretrain-train-0123456789",
        settle_seconds=0.3,
        poll_interval=0.2,
        grace=1.0,
        min_defer_seconds=0.5,
        end_task=end_task,
    )


async def first_raw_event(trigger: PhaseCheckpointTrigger, limit_s: float = 60) -> TriggerEvent:
    async def event() -> TriggerEvent:
        async for event in trigger.run():
            return event
        raise AssertionError("the trigger ended without an event")

    return await asyncio.wait_for(event(), limit_s)  # asyncio.timeout is Python 3.11+


async def first_event(trigger: PhaseCheckpointTrigger) -> SlurmEvent:
    return SlurmEvent.from_payload((await first_raw_event(trigger)).payload)


def save_legacy_checkpoint(checkpoints: Path, iteration: int) -> None:
    """What Megatron leaves for a legacy-format save: the iteration folder, then the tracker."""
    layouts.legacy(checkpoints, iteration)


def test_serialize_round_trips_through_an_importable_classpath(tmp_path: Path) -> None:
    trigger = make_trigger("c", tmp_path)
    path, kwargs = trigger.serialize()
    assert path == "autoexp.campaign.triggerer.checkpoint_wait.PhaseCheckpointTrigger"
    assert kwargs["watch_job_name"] == "exp-pretrain-train-0123456789"
    assert import_string(path)(**kwargs).serialize() == (path, kwargs)


async def test_complete_checkpoint_is_reported(slurm_cluster: Any, tmp_path: Path) -> None:
    save_legacy_checkpoint(tmp_path / "checkpoints", 20)
    event = await first_event(make_trigger(slurm_cluster.conn_id, tmp_path))
    assert event.status == "success", event.message
    assert event.data["iterations"] == [20]


async def test_a_wait_that_ends_its_task_succeeds_from_the_triggerer(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    # What the DAGs' waits do: no task process resumes to turn the event into a success.
    save_legacy_checkpoint(tmp_path / "checkpoints", 20)
    trigger = make_trigger(slurm_cluster.conn_id, tmp_path, end_task=True)
    assert trigger.serialize()[1]["end_task"] is True
    event = await first_raw_event(trigger)
    assert isinstance(event, TaskSuccessEvent)
    # An error still resumes the task (its message and the no-retry verdict are the worker's).
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "pretrain.failed").write_text("AirflowException: gave up\n")
    failed = await first_raw_event(make_trigger(slurm_cluster.conn_id, tmp_path, iteration=40, end_task=True))
    assert not isinstance(failed, TaskSuccessEvent)
    assert SlurmEvent.from_payload(failed.payload).status == "error"


async def test_failed_training_ends_the_wait_at_once(slurm_cluster: Any, tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "pretrain.failed").write_text("AirflowException: 3 attempts without progress\n")
    loop = asyncio.get_running_loop()
    start = loop.time()
    event = await first_event(make_trigger(slurm_cluster.conn_id, tmp_path))
    assert event.status == "error"
    assert event.data == {"training_ended": True}
    assert "its training failed" in event.message
    assert "3 attempts without progress" in event.message
    assert loop.time() - start < 20  # the grace period, not the wait budget


async def test_finished_training_without_the_iteration_ends_the_wait(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    save_legacy_checkpoint(tmp_path / "checkpoints", 20)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "pretrain.finished").write_text("done\n")
    event = await first_event(make_trigger(slurm_cluster.conn_id, tmp_path, iteration=40))
    assert event.status == "error"
    assert event.data == {"training_ended": True}
    assert "iteration 40" in event.message
    assert "without saving it" in event.message


async def test_a_half_written_checkpoint_is_never_reported_however_far_the_tracker_moved(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    ckpts = tmp_path / "checkpoints"
    layouts.legacy(ckpts, 400)
    layouts.cut_short(layouts.legacy(ckpts, 500) / "mp_rank_00" / "model_optim_rng.pt")
    layouts.legacy(ckpts, 800)
    event = await first_event(make_trigger(slurm_cluster.conn_id, tmp_path, iteration=800))
    assert (event.status, event.data["iterations"]) == ("success", [400, 800])
    with pytest.raises(asyncio.TimeoutError):  # over SSH, many polls: never complete
        await first_raw_event(make_trigger(slurm_cluster.conn_id, tmp_path, iteration=500), limit_s=5)


class FakeTI:
    """The task instance the triggerer attaches to a trigger (only what the triggers read)."""

    dag_id, task_id, run_id, map_index = "d", "pretrain.train", "r1", -1


class FakeComms:
    """The triggerer runner's async channel to its parent (``TriggerCommsDecoder.asend``).

    ``delay``: seconds before the answer (None: never, like a parent busy building its API app).
    """

    def __init__(self, states: dict[str, str | None], delay: float | None = 0.0) -> None:
        self.states, self.delay, self.asked = states, delay, 0

    async def asend(self, msg: Any) -> Any:
        from airflow.sdk.execution_time.comms import GetTaskStates, TaskStatesResult

        if not isinstance(msg, GetTaskStates):
            return None  # the connection lookup's MaskSecret messages: nothing to answer
        self.asked += 1
        assert msg.run_ids == ["r1"]
        await asyncio.sleep(3600 if self.delay is None else self.delay)
        return TaskStatesResult(task_states={"r1": {t: self.states.get(t) for t in msg.task_ids}})


@pytest.fixture
def comms(monkeypatch: pytest.MonkeyPatch) -> Any:
    from airflow.sdk.execution_time import task_runner

    def install(states: dict[str, str | None], delay: float | None = 0.0) -> FakeComms:
        fake = FakeComms(states, delay)
        monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", fake, raising=False)
        return fake

    return install


@pytest.mark.parametrize("state", ["failed", "success", "skipped"])
async def test_a_stopped_training_skips_the_wait_at_once(
    slurm_cluster: Any, tmp_path: Path, comms: Any, state: str
) -> None:
    (tmp_path / "checkpoints").mkdir()
    comms({"pretrain.train": state})
    waits = [make_trigger(slurm_cluster.conn_id, tmp_path, iteration=it) for it in (20, 40, 60)]
    for wait in waits:
        wait.task_instance = FakeTI()  # type: ignore[assignment]
    loop = asyncio.get_running_loop()
    start = loop.time()
    events = await asyncio.gather(*(first_raw_event(w) for w in waits))
    assert all(isinstance(e, TaskSkippedEvent) for e in events), events
    assert loop.time() - start < 30  # one poll (seconds; more with load 30 here), not the wait budget


@pytest.mark.parametrize("state", ["failed", "success"])
async def test_a_checkpoint_saved_just_before_the_stop_is_still_reported(
    slurm_cluster: Any, tmp_path: Path, comms: Any, state: str
) -> None:
    """The training saved iteration 20 and then stopped (or succeeded) before the checkpoint had
    settled: its wait succeeds; the wait for 40 (beyond the tracker) is skipped."""
    save_legacy_checkpoint(tmp_path / "checkpoints", 20)
    comms({"pretrain.train": state})
    saved, beyond = (make_trigger(slurm_cluster.conn_id, tmp_path, iteration=it) for it in (20, 40))
    for wait in (saved, beyond):
        wait.settle_seconds = 1.0  # several polls: the stop is seen while the checkpoint settles
        wait.condition_kwargs["settle_seconds"] = 1.0
        wait.grace = 30.0
        wait.task_instance = FakeTI()  # type: ignore[assignment]
    first, second = await asyncio.gather(first_raw_event(saved), first_raw_event(beyond))
    assert isinstance(second, TaskSkippedEvent), second
    event = SlurmEvent.from_payload(first.payload)
    assert (event.status, event.data["iterations"]) == ("success", [20])


async def test_a_stop_is_decided_on_a_reading_taken_after_it(
    slurm_cluster: Any, tmp_path: Path, comms: Any
) -> None:
    """The round's tracker said 10 (read before the save of 20), the task state says success now:
    the wait does not skip on that old reading but reads again, finds 20 and reports it."""
    save_legacy_checkpoint(tmp_path / "checkpoints", 10)
    comms({"pretrain.train": "success"})
    wait = make_trigger(slurm_cluster.conn_id, tmp_path, iteration=20)
    wait.grace = 30.0
    wait.task_instance = FakeTI()  # type: ignore[assignment]
    original = wait.not_yet

    async def save_then_look(hook: Any, files: Any, read_at: float) -> Any:
        if not (tmp_path / "checkpoints" / "iter_0000020").exists():
            save_legacy_checkpoint(tmp_path / "checkpoints", 20)  # written after this round's reads
        return await original(hook, files, read_at)

    wait.not_yet = save_then_look  # type: ignore[method-assign]
    event = SlurmEvent.from_payload((await first_raw_event(wait)).payload)
    assert (event.status, event.data["iterations"]) == ("success", [10, 20])


async def test_the_waits_of_a_run_share_one_answer_per_half_poll(comms: Any) -> None:
    fake = comms({"pretrain.train": "running"}, delay=0.2)
    ask = [ti_states.shared_task_state("d", "r1", "pretrain.train", max_age=30) for _ in range(20)]
    assert await asyncio.gather(*ask) == ["running"] * 20
    assert fake.asked == 1
    assert await ti_states.shared_task_state("d", "r1", "pretrain.train", max_age=0) == "running"
    assert fake.asked == 2


class ManyRunsComms:
    """Answers GetTaskStates for any runs; records each request's (dag, runs, tasks)."""

    def __init__(self, states: dict[tuple[str, str], str]) -> None:
        self.states, self.requests = states, list[tuple[str, list[str], list[str]]]()

    async def asend(self, msg: Any) -> Any:
        from airflow.sdk.execution_time.comms import TaskStatesResult

        self.requests.append((msg.dag_id, list(msg.run_ids), list(msg.task_ids)))
        await asyncio.sleep(0.1)
        answer = {r: {t: self.states.get((r, t)) for t in msg.task_ids} for r in msg.run_ids}
        return TaskStatesResult(task_states=answer)


async def test_the_waits_of_every_run_of_a_dag_share_one_request(monkeypatch: pytest.MonkeyPatch) -> None:
    """The seed's 90 runs x 6 trainings asked one request each per poll: the parent fell behind."""
    from airflow.sdk.execution_time import task_runner

    fake = ManyRunsComms({("r1", "pretrain.train"): "running", ("r2", "cooldown.train"): "failed"})
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", fake, raising=False)
    pairs = [(r, t) for r in ("r1", "r2", "r3") for t in ("pretrain.train", "cooldown.train")]
    ask = [ti_states.shared_task_state("many", r, t, max_age=30) for r, t in pairs for _ in range(5)]
    got = await asyncio.gather(*ask)
    # The callers of one loop turn join one request, which asks for all their pairs.
    assert fake.requests == [("many", ["r1", "r2", "r3"], ["cooldown.train", "pretrain.train"])]
    expected = {("r1", "pretrain.train"): "running", ("r2", "cooldown.train"): "failed"}
    assert got == [expected.get(p, "none") for p in pairs for _ in range(5)]
    before = len(fake.requests)
    assert await ti_states.shared_task_state("many", "r3", "cooldown.train", max_age=30) == "none"
    assert len(fake.requests) == before  # fresh and covered: no request
    assert await ti_states.shared_task_state("other dag", "r9", "pretrain.train", max_age=30) == "none"
    assert fake.requests[-1] == ("other dag", ["r9"], ["pretrain.train"])
    assert await ti_states.shared_task_state("many", "r4", "pretrain.train", max_age=30) == "none"
    assert fake.requests[-1] == ("many", ["r1", "r2", "r3", "r4"], ["cooldown.train", "pretrain.train"])


async def test_a_loop_asks_at_most_its_rate_however_many_dags_it_watches(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """20 DAGs whose waits ask every 0.1 s: the answers grow staler instead (19 others / 2 per s)."""
    from airflow.sdk.execution_time import task_runner

    fake = ManyRunsComms({})
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", fake, raising=False)
    loop = asyncio.get_running_loop()
    start = loop.time()
    while loop.time() - start < 3:
        await asyncio.gather(
            *(ti_states.shared_task_state(f"d{i}", "r1", "t", max_age=0.1) for i in range(20))
        )
        await asyncio.sleep(0.1)
    took = loop.time() - start
    # One first request per DAG; after that, at most MAX_STATE_REQUESTS_PER_S (plus one in flight).
    assert len(fake.requests) <= 20 + ti_states.MAX_STATE_REQUESTS_PER_S * took + 1, len(fake.requests)
    # One DAG alone is asked as often as its waits want (a stop is seen within a poll).
    single = ManyRunsComms({})
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", single, raising=False)
    ti_states._by_dag.clear()
    for _ in range(5):
        await ti_states.shared_task_state("alone", "r1", "t", max_age=0.1)
        await asyncio.sleep(0.25)
    assert len(single.requests) == 5


async def test_a_cleared_or_retrying_training_keeps_the_wait(
    slurm_cluster: Any, tmp_path: Path, comms: Any
) -> None:
    (tmp_path / "checkpoints").mkdir()
    fake = comms({"pretrain.train": "up_for_retry"})
    wait = make_trigger(slurm_cluster.conn_id, tmp_path)
    wait.task_instance = FakeTI()  # type: ignore[assignment]
    with pytest.raises(asyncio.TimeoutError):
        await first_raw_event(wait, limit_s=3)
    # ~15 polls of 0.2 s: at most one question per half poll, whatever the number of waits.
    assert 1 <= fake.asked <= 3 / 0.1 + 1


async def test_the_stop_marker_skips_the_wait_without_the_task_state(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "pretrain.stopped").write_text("Slurm job 7 cancelled: the task was failed\n")
    event = await first_raw_event(make_trigger(slurm_cluster.conn_id, tmp_path))  # no task instance at all
    assert isinstance(event, TaskSkippedEvent)


@pytest.mark.parametrize("marker", ["pretrain.stopped", "pretrain.failed"])
async def test_a_marker_of_a_try_before_a_clear_does_not_end_the_re_armed_wait(
    slurm_cluster: Any, tmp_path: Path, comms: Any, marker: str
) -> None:
    """Cleared, the training runs again; its new try removes the old try's markers only once it
    starts, and the waits cleared with it may look first: while the task runs, a marker is stale."""
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / marker).write_text("Slurm job 7 cancelled: the task was failed\n")
    fake = comms({"pretrain.train": "running"})
    wait = make_trigger(slurm_cluster.conn_id, tmp_path)
    wait.task_instance = FakeTI()  # type: ignore[assignment]
    with pytest.raises(asyncio.TimeoutError):
        await first_raw_event(wait, limit_s=3)
    fake.states["pretrain.train"] = "failed"  # the marker is this try's: it ends the wait
    event = await first_raw_event(make_trigger_for(wait), limit_s=60)
    assert isinstance(event, TaskSkippedEvent) or SlurmEvent.from_payload(event.payload).status == "error"


def make_trigger_for(wait: PhaseCheckpointTrigger) -> PhaseCheckpointTrigger:
    classpath, kwargs = wait.serialize()
    fresh = import_string(classpath)(**kwargs)
    fresh.task_instance = FakeTI()
    return fresh  # type: ignore[no-any-return]


async def test_a_stop_seen_by_the_training_s_trigger_ends_its_waits_at_once(
    slurm_cluster: Any, tmp_path: Path, comms: Any
) -> None:
    """The announcement alone suffices: no stop marker yet (written after it, and its write may be
    slow or fail), and a stale task state that still says running."""
    (tmp_path / "checkpoints").mkdir()
    comms({"pretrain.train": "running"})
    wait = make_trigger(slurm_cluster.conn_id, tmp_path)
    wait.poll_interval = 300  # without the wake-up, the next look would be minutes away
    wait.task_instance = FakeTI()  # type: ignore[assignment]
    pending = asyncio.ensure_future(first_raw_event(wait, limit_s=60))
    await asyncio.sleep(3)  # the first poll is done, the wait naps
    assert not pending.done()
    loop = asyncio.get_running_loop()
    start = loop.time()
    ti_states.announce_stop("d", "r1", "pretrain.train")
    assert isinstance(await pending, TaskSkippedEvent)
    assert loop.time() - start < 10


async def test_a_stop_announced_before_the_wait_started_is_not_its_own(
    slurm_cluster: Any, tmp_path: Path, comms: Any
) -> None:
    """The training was stopped, then cleared and runs again; the waits cleared with it must wait."""
    (tmp_path / "checkpoints").mkdir()
    comms({"pretrain.train": "running"})
    ti_states.announce_stop("d", "r1", "pretrain.train")
    wait = make_trigger(slurm_cluster.conn_id, tmp_path)
    wait.task_instance = FakeTI()  # type: ignore[assignment]
    with pytest.raises(asyncio.TimeoutError):
        await first_raw_event(wait, limit_s=3)


def submit_sleeper(conn_id: str, tmp_path: Path, name: str = "sleeper") -> tuple[Any, str]:
    from slurm_operator.hooks.slurm import SlurmHook

    hook = SlurmHook(conn_id)
    job = hook.submit(
        script="#!/bin/bash\nsleep 120\n",
        upload_to=str(tmp_path / "job.sh"),
        sbatch_args=["--output=/dev/null", f"--job-name={name}"],
    )
    return hook, job


@pytest.mark.parametrize("given_name", [False, True])
async def test_a_training_stopped_without_its_on_kill_is_cancelled_by_its_waits(
    slurm_cluster: Any, tmp_path: Path, comms: Any, given_name: bool
) -> None:
    """Marked failed while its trigger was not running (a triggerer restarting or frozen): no on_kill.

    The job is found by the name the campaign gives it (``watch_job_name``, the same in every run),
    or else by the plugin's per-run default name.
    """
    from slurm_operator.model import naming

    (tmp_path / "checkpoints").mkdir()
    comms({"p9.train": "failed"})  # not pretrain.train: the e2e tests look for those jobs by name
    name = f"exp-p9-train-{time.time_ns()}" if given_name else naming.job_name("d", "p9.train", "r1")
    hook, job = submit_sleeper(slurm_cluster.conn_id, tmp_path, name)
    try:
        wait = make_trigger(slurm_cluster.conn_id, tmp_path)
        wait.watch_job_name = name if given_name else ""
        wait.watch_task_id = "p9.train"
        wait.watch_output = str(tmp_path / "train-%j.out")
        wait.task_instance = FakeTI()  # type: ignore[assignment]
        assert isinstance(await first_raw_event(wait), TaskSkippedEvent)
        assert hook.job_states([job]).records[job].state.value == "CANCELLED"
        # The cancel marker says the cancel was ours: a later clear resubmits instead of reading
        # it as a person's cancel (which would end the task without a retry).
        marker = tmp_path / f"train-{job}.out.airflow-cancel"
        assert marker.read_text() == naming.ON_KILL_REASON + "\n"
    finally:
        hook.cancel(job)


def job_trigger(conn_id: str, job: str, tmp_path: Path) -> CampaignJobTrigger:
    trigger = CampaignJobTrigger(
        ssh_conn_id=conn_id,
        job_id=job,
        stopped_path=str(tmp_path / "state" / "pretrain.stopped"),
        state_timeout=2,
    )
    trigger.task_instance = FakeTI()  # type: ignore[assignment]
    return trigger


@pytest.mark.parametrize(("state", "cancelled"), [(None, False), ("restarting", False), ("failed", True)])
async def test_clearing_keeps_the_job_and_marking_failed_cancels_it(
    slurm_cluster: Any, tmp_path: Path, comms: Any, state: str | None, cancelled: bool
) -> None:
    # The triggerer answers from the metadata DB; this test has none, so it answers what a clear
    # (no state, restarting) or a mark-failed leaves there.
    comms({"pretrain.train": state})
    hook, job = submit_sleeper(slurm_cluster.conn_id, tmp_path)
    try:
        trigger = job_trigger(slurm_cluster.conn_id, job, tmp_path)
        path, kwargs = trigger.serialize()
        assert path == "autoexp.campaign.triggerer.job_trigger.CampaignJobTrigger"
        # A row written before the move still rebuilds.
        assert (
            import_string("autoexp.campaign.triggerer.checkpoint_wait.CampaignJobTrigger")
            is CampaignJobTrigger
        )
        assert import_string(path)(**kwargs).serialize() == (path, kwargs)
        stop = ti_states.stop_event("d", "r1", "pretrain.train")  # what this triggerer's waits hold
        await trigger.on_kill()
        record = hook.job_states([job]).records[job]
        assert (record.state.value == "CANCELLED") is cancelled, record
        assert stop.is_set() is cancelled
        marker = tmp_path / "state" / "pretrain.stopped"
        assert marker.exists() is cancelled
        if cancelled:
            assert marker.read_text() == f"Slurm job {job} cancelled: the task was failed\n"
    finally:
        hook.cancel(job)


async def test_a_state_that_does_not_come_in_time_cancels_within_the_limit(
    slurm_cluster: Any, tmp_path: Path, comms: Any
) -> None:
    comms({}, delay=None)  # the parent never answers (it was seen silent for 36 s)
    hook, job = submit_sleeper(slurm_cluster.conn_id, tmp_path)
    try:
        loop = asyncio.get_running_loop()
        start = loop.time()
        await job_trigger(slurm_cluster.conn_id, job, tmp_path).on_kill()
        took = loop.time() - start
        assert hook.job_states([job]).records[job].state.value == "CANCELLED"
        assert 2 <= took < 10, took  # state_timeout, then scancel; far from the triggerer's 30 s
        assert "state unknown" in (tmp_path / "state" / "pretrain.stopped").read_text()
    finally:
        hook.cancel(job)


async def test_a_stop_is_announced_before_the_marker_whose_write_may_hang(
    slurm_cluster: Any, tmp_path: Path, comms: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The triggerer cuts on_kill off after 30 s: a marker write stuck past that must not cost this
    process's waits their announcement (they then waited for the task-state fallback)."""
    from slurm_operator.hooks.slurm_async import AsyncSlurmHook

    async def stuck(self: Any, path: str, text: str) -> None:
        await asyncio.sleep(3600)

    comms({"pretrain.train": "failed"})
    hook, job = submit_sleeper(slurm_cluster.conn_id, tmp_path)
    try:
        monkeypatch.setattr(AsyncSlurmHook, "write_text", stuck)
        stop = ti_states.stop_event("d", "r1", "pretrain.train")
        with pytest.raises(asyncio.TimeoutError):
            await asyncio.wait_for(job_trigger(slurm_cluster.conn_id, job, tmp_path).on_kill(), 15)
        assert stop.is_set()
        assert hook.job_states([job]).records[job].state.value == "CANCELLED"
    finally:
        hook.cancel(job)


async def test_outside_a_triggerer_the_state_is_unknown() -> None:
    assert await ti_states.task_state("d", "r1", "t") is None


class StartedTI(FakeTI):
    """What the triggerer attaches to a trigger that starts its task (``start_from_trigger``)."""

    def __init__(self, map_index: int, params: dict[str, Any]) -> None:
        self.map_index, self.params = map_index, params
        # Stands in for the task of the triggerer's copy of the DAG.
        self.task: object | None = SimpleNamespace(template_ext=(), start_trigger_args=None)
        self._cached_template_context: dict[str, Any] | None = None

    def get_template_context(self) -> dict[str, Any]:
        if self._cached_template_context is None:
            self._cached_template_context = {"params": self.params, "task": self.task}
        return self._cached_template_context


def started_wait(conn_id: str, base: Path, ti: StartedTI) -> PhaseCheckpointTrigger:
    """The trigger the scheduler creates from a mapped CheckpointWait's start arguments."""
    op = CheckpointWait(
        task_id="wait",
        phase="pretrain",
        ssh_conn_id=conn_id,
        checkpoint_dir=str(base / "checkpoints"),
        iteration="{{ mapped }}",  # a mapped argument: the trigger picks from ``iterations``
        iterations=[20, 40],
        state_dir=str(base / "state"),
        watch_phase="pretrain",
        timeout_secs=60,
        settle_seconds=0.3,
        poll_interval=0.2,
    )
    assert op.start_from_trigger
    args = op.start_trigger_args
    assert args is not None
    assert args.trigger_kwargs is not None
    trigger = import_string(args.trigger_cls)(**args.trigger_kwargs)
    trigger.task_instance = ti
    return trigger  # type: ignore[no-any-return]


async def test_a_wait_started_by_the_scheduler_decides_what_its_task_would_have(
    slurm_cluster: Any, tmp_path: Path, comms: Any
) -> None:
    fake = comms({"pretrain.train": "running"})
    drives = {"phases": ["pretrain"], "dry_run": False}
    # A phase the run does not drive, or a dry run: skipped at once, nothing read on the cluster.
    for params in ({"phases": ["cooldown_8K"], "dry_run": False}, {**drives, "dry_run": True}):
        event = await first_raw_event(started_wait("no-such-connection", tmp_path, StartedTI(0, params)), 5)
        assert isinstance(event, TaskSkippedEvent)
    # Its iteration by map index, then success straight from the triggerer.
    save_legacy_checkpoint(tmp_path / "checkpoints", 40)
    second = started_wait(slurm_cluster.conn_id, tmp_path, StartedTI(1, drives))
    loop = asyncio.get_running_loop()
    start = loop.time()
    event = await first_raw_event(second)
    assert isinstance(event, TaskSuccessEvent)
    assert second.iteration == 40
    # Its Params read, the wait gives back the triggerer's copy of the DAG (task and context).
    started = second.task_instance
    assert started.task is None
    assert started._cached_template_context == {}
    # No deferring worker process, so no shortest deferral (10 s by default): the event comes at once.
    assert loop.time() - start < 9
    # The outcome markers of its own run: the training of run r1 failed, iteration 60 never comes.
    failed = tmp_path / "state" / "r1" / "pretrain.failed"
    failed.parent.mkdir(parents=True)
    failed.write_text("AirflowException: gave up\n")
    fake.states["pretrain.train"] = "failed"  # as the marker says (while it runs, a marker is stale)
    wait = started_wait(slurm_cluster.conn_id, tmp_path, StartedTI(0, drives))
    wait.iterations = [60]
    ended = SlurmEvent.from_payload((await first_raw_event(wait)).payload)
    assert (ended.status, ended.data) == ("error", {"training_ended": True})
