"""The campaign's checkpoint wait: a Megatron checkpoint, watching the training that writes it."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import BaseTaskEndEvent, TaskSkippedEvent, TaskSuccessEvent, TriggerEvent
from slurm_operator.airflow_internals import release_task
from slurm_operator.hooks.slurm_async import AsyncSlurmHook
from slurm_operator.model import events, naming
from slurm_operator.model.states import SlurmState
from slurm_operator.remote import path_batch
from slurm_operator.remote.path_batch import Read
from slurm_operator.triggers.remote_path import PathCondition, RemoteFiles, RemotePathTrigger
from slurm_operator.triggers.serialization import class_path

from autoexp.campaign.planning.checkpoint_layout import (
    TRACKER_FILE,
    SettleTracker,
    TrackerParseError,
    complete_iterations,
    read_tracker,
)
from autoexp.campaign.planning.phase_gate import skip_reason
from autoexp.campaign.planning.run_layout import FAILED, FINISHED, STOPPED, outcome_path
from autoexp.campaign.triggerer import ti_states

# Trigger rows written before CampaignJobTrigger had a module of its own name this path.
from autoexp.campaign.triggerer.job_trigger import CampaignJobTrigger


class CheckpointCondition(PathCondition):
    """Megatron's checkpoint folder (the path) holds ``iteration``, complete and settled.

    The tracker is at ``iteration`` or beyond and the iteration is complete by the files its format
    writes last (``checkpoint_layout``), which then read the same for ``settle_seconds``. Data:
    ``{"iterations": [...]}``, every complete iteration up to the tracker (for ``.expand()``).
    A garbled tracker ends the wait at once.
    """

    fatal = (TrackerParseError,)

    def __init__(self, iteration: int, settle_seconds: float = 30.0) -> None:
        self.iteration = iteration
        self._settle = SettleTracker.new(settle_seconds)

    def waits_for(self, path: str) -> str:
        return f"iteration {self.iteration} of {path}"

    def done_message(self, path: str) -> str:
        return f"iteration {self.iteration} is complete in {path}"

    def reads(self, path: str) -> list[Read]:
        # Only the tracker while it is short of the iteration; what the check reads once it got
        # there (listings, metadata, stats) is learned from the check itself, in the same interval.
        return [path_batch.read(f"{path.rstrip('/')}/{TRACKER_FILE}")]

    def recheck_in(self) -> float | None:
        return self._settle.remaining(self.iteration, time.monotonic())

    async def check(self, files: RemoteFiles, path: str) -> dict[str, Any] | None:
        base = path.rstrip("/")
        done = await complete_iterations(files, base, self.iteration, self._settle, time.monotonic())
        return None if done is None else {"iterations": done}


def checkpoint_condition(iteration: int, settle_seconds: float) -> dict[str, Any]:
    """``RemotePathTrigger`` arguments of a wait for a complete, settled checkpoint iteration."""
    kwargs = {"iteration": iteration, "settle_seconds": settle_seconds}
    return {"condition": class_path(CheckpointCondition), "condition_kwargs": kwargs}


class PhaseCheckpointTrigger(RemotePathTrigger):
    """Wait for a checkpoint (``CheckpointCondition``) while also watching the training that writes it.

    After each poll that did not find the iteration: the training's outcome markers (written by its
    task on the cluster), then whether the training was stopped (its ``stopped_path`` marker, or its
    task instance in a stopped state). A stopped training ends the wait on the next poll as
    *skipped*, straight from the triggerer (no worker start-up), unless that poll finds the tracker
    at the iteration (then the checkpoint is awaited: see ``not_yet``): the run then finishes and
    the DAG's next run (``max_active_runs=1``) can start.

    :param failed_path: marker the training task writes when its last try failed: the iteration
        will never come, so the wait ends with an error event (``data.training_ended``).
    :param finished_path: marker of a training that succeeded without saving the iteration.
    :param stopped_path: marker the training's job trigger writes when it cancels the job because a
        user stopped the task (marked it failed or success): the wait is skipped.
    :param watch_output: the training's ``--output`` pattern: a cancel by this wait leaves the cancel
        marker next to the job's log, so a later re-attach knows the cancel was ours, not a person's.
    :param watch_task_id: the training's task id in this run; stopped (``ti_states.STOPPED``)
        without a failed/finished marker: the wait is skipped. Read through the triggerer, one
        request per half poll interval for all the waits of a run; "" turns it off.
    :param watch_job_name: the training's Slurm job name (the same in every run), to cancel what
        still runs of a stopped training; "": the plugin's per-run default name.
    :param grace: seconds a checkpoint may still take to settle once a marker is seen (default
        three settle periods and three polls); then the wait ends with an error naming the iteration.
    :param phase: with ``state_dir``, the trigger starts its task itself (``CheckpointWait``'s
        ``start_from_trigger``: no task process at all): it skips a phase the run does not drive
        (``phase_gate``), takes its iteration from ``iterations`` by map index (a mapped wait) and
        the outcome markers of ``watch_phase`` in ``state_dir`` for its run.
    :param end_task: a found iteration ends the task as a success straight from the triggerer
        (``TaskSuccessEvent``): no task process to resume, no
        scheduler round trip before the conversion is scheduled. Errors still resume the task.
    Other parameters: ``RemotePathTrigger``'s and ``CheckpointCondition``'s.
    """

    def __init__(
        self,
        ssh_conn_id: str,
        path: str,
        iteration: int,
        failed_path: str,
        finished_path: str,
        settle_seconds: float = 30.0,
        poll_interval: float = 60.0,
        grace: float | None = None,
        failure_budget: float = 1800.0,
        min_defer_seconds: float = 10.0,
        stopped_path: str = "",
        watch_task_id: str = "",
        watch_output: str = "",
        watch_job_name: str = "",
        end_task: bool = False,
        phase: str = "",
        state_dir: str = "",
        watch_phase: str = "",
        iterations: list[int] | None = None,
        **_: Any,
    ) -> None:
        super().__init__(
            ssh_conn_id,
            path,
            poll_interval=poll_interval,
            failure_budget=failure_budget,
            min_defer_seconds=min_defer_seconds,
            **checkpoint_condition(iteration, settle_seconds),
        )
        self.iteration = iteration
        self.settle_seconds = settle_seconds
        self.failed_path = failed_path
        self.finished_path = finished_path
        self.stopped_path = stopped_path
        self.watch_task_id = watch_task_id
        self.watch_output = watch_output
        self.watch_job_name = watch_job_name
        self.end_task = end_task
        self.phase = phase
        self.state_dir = state_dir
        self.watch_phase = watch_phase
        self.iterations = list(iterations or [])
        self.grace = grace if grace is not None else 3 * settle_seconds + 3 * poll_interval
        self._ended: str | None = None  # why the iteration cannot come any more (an outcome marker)
        self._ended_at = 0.0
        self._stop: asyncio.Event | None = None
        self._since = float("inf")
        self._stop_why: str | None = None  # why the training stopped (learnt outside the files)
        self._stop_seen_at = 0.0
        self._stop_logged = False
        self._condition: PathCondition | None = None

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """The plugin's wait; woken at once when the training's job trigger here cancels for a stop."""
        ti = self.task_instance
        if ti is not None and self.state_dir:
            reason = self._bind(ti)
            # Its own copy of the DAG (~75-100 KB a wait in the triggerer) is not read any more.
            release_task(ti)
            if reason is not None:
                self.log.info("%s", reason)
                yield TaskSkippedEvent()
                return
        hurry = None
        self._since = time.monotonic()  # only a stop announced from now on is this wait's
        if ti and self.watch_task_id:
            self._stop = ti_states.stop_event(ti.dag_id, ti.run_id, self.watch_task_id)
            hurry = asyncio.get_running_loop().create_task(self._hurry_on_stop(self._stop))
        try:
            async for event in super().run():
                yield self._task_end(event)
        finally:
            if hurry is not None:
                hurry.cancel()

    def _bind(self, ti: Any) -> str | None:
        """Started by the scheduler (no ``execute``): what the task would have decided; -> skip reason."""
        params = ti.get_template_context()["params"] if hasattr(ti, "get_template_context") else {}
        reason = skip_reason(params, self.phase)
        if self.iterations:
            self.iteration = int(self.iterations[ti.map_index])
            condition = checkpoint_condition(self.iteration, self.settle_seconds)
            self.condition_kwargs = condition["condition_kwargs"]
        # No task process renders this instance's name (map_index_template): the log says it.
        self.log.info("started by the scheduler: waits for iteration %s of %s", self.iteration, self.path)
        # No worker process deferred this task: the race min_defer_seconds guards against (the late
        # "success" of the deferring process, docs/slurm-operator.md#airflow-332-workarounds) cannot
        # happen, and a stop or a checkpoint already there ends the wait at once, not 10 s later.
        self.min_defer_seconds = 0.0
        run = str(ti.run_id)
        self.failed_path = outcome_path(self.state_dir, run, self.watch_phase, FAILED)
        self.finished_path = outcome_path(self.state_dir, run, self.watch_phase, FINISHED)
        self.stopped_path = outcome_path(self.state_dir, run, self.watch_phase, STOPPED)
        return reason

    def _task_end(self, event: TriggerEvent) -> TriggerEvent:
        payload = event.payload
        if not self.end_task or isinstance(event, BaseTaskEndEvent) or not isinstance(payload, dict):
            return event
        if payload.get("status") != events.SUCCESS:
            return event
        self.log.info("%s: the wait succeeds from the triggerer", payload.get("message"))
        # No XCom: nothing reads a wait's (Airflow 3.3.2 would store a TaskSuccessEvent's as JSON text).
        return TaskSuccessEvent()

    def reads(self) -> list[Read]:
        # The outcome markers not_yet stats every round: fetched from the first round on.
        markers = (self.failed_path, self.finished_path, self.stopped_path)
        return [path_batch.tree(p, 0) for p in markers if p]

    async def _hurry_on_stop(self, stop: asyncio.Event) -> None:
        await stop.wait()
        self.hurry()

    async def not_yet(self, hook: AsyncSlurmHook, files: RemoteFiles, read_at: float) -> TriggerEvent | None:
        """A failed, finished or stopped training ends the wait, but never for an iteration it saved.

        Each ending is decided on one reading: the outcome markers and the tracker of one round.
        A stop learnt outside the files (the task state, the training trigger's announcement) is
        decided on the first round read after it was learnt, so that a checkpoint saved just before
        the stop (or the success) is seen. An iteration saved complete behind the tracker is
        awaited (it settles and the wait succeeds, or ``grace`` ends it); any other is skipped.
        """
        now = time.monotonic()
        if self._ended is None:
            self._ended = await self._outcome(files)
            self._ended_at = now
        if self._ended is None:
            if self._stop_why is None:
                if not (why := self._announced() or await self._stopped(hook, files)):
                    return None
                self._stop_why, self._stop_seen_at = why, now
                self.hurry()  # the reading that decides is the next round's
            if read_at < self._stop_seen_at:
                return None
            return await self._after_stop(files, now)
        # A checkpoint saved just before the end still gets the time to settle.
        if now - self._ended_at > self.grace:
            message = f"iteration {self.iteration} of {self.path} will not come: {self._ended}"
            return self._event(events.ERROR, message, {"training_ended": True})
        return None

    def build_condition(self) -> PathCondition:
        """The plugin's condition, kept: a stop asks it whether the iteration is settling."""
        self._condition = super().build_condition()
        return self._condition

    async def _after_stop(self, files: RemoteFiles, now: float) -> TriggerEvent | None:
        """On a reading taken after the stop: skipped, unless the iteration is saved and settling.

        Saved: the tracker reached it and its files are complete in this very reading (the check
        ran on it first); Megatron moves the tracker only after a complete save, so an incomplete
        iteration behind it will never complete.
        """
        present, latest = await read_tracker(files, self.path.rstrip("/"))
        reached = present and (latest is None or latest >= self.iteration)
        settling = self._condition is not None and self._condition.recheck_in() is not None
        if not (reached and settling):
            self.log.info(
                "iteration %s of %s will not come: %s; skipped", self.iteration, self.path, self._stop_why
            )
            return TaskSkippedEvent()
        if now - self._stop_seen_at > self.grace:
            self.log.warning(
                "iteration %s of %s: saved (tracker %s) but not settled within %.0f s of the stop (%s); "
                "skipped",
                self.iteration,
                self.path,
                latest,
                self.grace,
                self._stop_why,
            )
            return TaskSkippedEvent()
        if not self._stop_logged:
            self._stop_logged = True
            self.log.info(
                "%s, but iteration %s was saved complete (tracker %s): waiting for it to settle",
                self._stop_why,
                self.iteration,
                latest,
            )
        return None

    async def nap(self) -> None:
        stop = self._stop
        if stop is None or stop.is_set():
            await asyncio.sleep(self.poll_interval)
        else:
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(stop.wait(), self.poll_interval)

    async def _outcome(self, files: RemoteFiles) -> str | None:
        """Why the iteration cannot come any more (a training outcome marker), or None."""
        if (await files.stat(self.failed_path)).exists:
            reason = (await files.read_text(self.failed_path)).strip()[-500:]
            why = f"its training failed ({self.failed_path}: {reason})"
        elif (await files.stat(self.finished_path)).exists:
            why = f"its training finished ({self.finished_path}) without saving it"
        else:
            return None
        return None if await self._training_runs_again() else why

    async def _training_runs_again(self) -> bool:
        """The watched training was cleared (or retries) and runs again: an outcome or stop marker of
        its earlier try is stale until the new try removes it, which may come after this wait
        started (a clear re-arms both at once). Unknown state (no answer, no task instance): False."""
        ti = self.task_instance
        if ti is None or not self.watch_task_id:
            return False
        max_age = self.poll_interval / 2
        state = await ti_states.shared_task_state(ti.dag_id, ti.run_id, self.watch_task_id, max_age)
        return state is not None and state not in ti_states.STOPPED

    def _announced(self) -> str | None:
        """The training's own trigger in this process announced its stop after cancelling the job:
        authoritative, needing neither the marker (written after it) nor a task-state answer."""
        ti = self.task_instance
        if ti is None or not self.watch_task_id:
            return None
        if not ti_states.stopped_since(ti.dag_id, ti.run_id, self.watch_task_id, self._since):
            return None
        return "its training was stopped (its job trigger here cancelled the job)"

    async def _stopped(self, hook: AsyncSlurmHook, files: RemoteFiles) -> str | None:
        """Why the training was stopped by a user (its marker, or its task state), or None."""
        if self.stopped_path and (await files.stat(self.stopped_path)).exists:
            text = (await files.read_text(self.stopped_path)).strip()[-500:]
            if not await self._training_runs_again():
                return f"its training was stopped ({text})"
        ti = self.task_instance
        if not self.watch_task_id or ti is None:
            return None
        # The fallback for a stop this triggerer was not told of (the training's trigger here announces
        # its stops at once, and its on_kill leaves the stop marker read above). One answer per DAG
        # per half poll serves every wait of this loop (ti_states.shared_task_state). A 30 s floor
        # here was tried: one e2e run then ended its waits only by this fallback, after 31 s.
        max_age = self.poll_interval / 2
        state = await ti_states.shared_task_state(ti.dag_id, ti.run_id, self.watch_task_id, max_age)
        if state not in ti_states.STOPPED:
            return None
        name = self.watch_job_name or naming.job_name(ti.dag_id, self.watch_task_id, ti.run_id)
        await self._cancel_training(hook, name)
        return f"its training task {self.watch_task_id} is {state}"

    async def _cancel_training(self, hook: AsyncSlurmHook, name: str) -> None:
        """Cancel what still runs of a stopped training (its trigger's ``on_kill`` did not get to it).

        A task stopped while its trigger was not running (the triggerer restarting, dead, or frozen
        by its first API request) never gets an ``on_kill``; the waits, which outlive it in the
        triggerer, see the stop and find the job by its deterministic name.
        """
        for record in await hook.find_active_jobs(name):
            if record.state is SlurmState.COMPLETING:
                continue  # ending already (the on_kill's scancel, most often)
            self.log.warning(
                "training stopped but Slurm job %s (%s) still %s: scancel",
                record.job_id,
                name,
                record.state.value,
            )
            marker = None
            if self.watch_output:
                log_path = naming.resolve_output_path(self.watch_output, record.job_id, name)
                marker = naming.cancel_marker_path(log_path)
            await hook.cancel(record.job_id, marker=marker, reason=naming.ON_KILL_REASON)


__all__ = ["CampaignJobTrigger", "CheckpointCondition", "PhaseCheckpointTrigger", "checkpoint_condition"]
