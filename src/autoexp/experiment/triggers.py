"""Checkpoint wait that also watches its training (markers, task state), and the training's job trigger."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TaskSkippedEvent, TriggerEvent
from slurm_operator import events, naming
from slurm_operator.async_hook import AsyncSlurmHook
from slurm_operator.checkpoints import SettleTracker, TrackerParseError
from slurm_operator.events import SlurmEvent
from slurm_operator.exceptions import SlurmError
from slurm_operator.states import SlurmState
from slurm_operator.triggers import RemotePathTrigger, SlurmJobTrigger, arguments

from autoexp.experiment import ti_states


def _event(**kwargs: Any) -> TriggerEvent:
    return TriggerEvent(SlurmEvent(**kwargs).to_payload())  # type: ignore[no-untyped-call]


class PhaseCheckpointTrigger(RemotePathTrigger):
    """RemotePathTrigger in checkpoint mode that also watches the training that writes the checkpoint.

    Each poll, once the iteration is not there: the training's outcome markers (written by its
    task on the cluster), then whether the training was stopped (its ``stopped_path`` marker, or its
    task instance in a stopped state). A stopped training ends the wait at once as *skipped*,
    straight from the triggerer (no worker start-up): the run then finishes and the DAG's next run
    (``max_active_runs=1``) can start.

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
    :param grace: seconds a checkpoint may still take to settle once a marker is seen (default
        three settle periods and three polls); then the wait ends with an error naming the iteration.
    :param min_defer_seconds: the event waits until the trigger has run this long: Airflow 3.3.2's
        scheduler fails a task whose trigger fires before it processed the deferral (a checkpoint
        that is already there), as the Slurm layer's job trigger notes.
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
        **_: Any,
    ) -> None:
        super().__init__(
            ssh_conn_id=ssh_conn_id,
            path=path,
            mode="checkpoint",
            iteration=iteration,
            settle_seconds=settle_seconds,
            poll_interval=poll_interval,
            failure_budget=failure_budget,
        )
        self.failed_path = failed_path
        self.finished_path = finished_path
        self.stopped_path = stopped_path
        self.watch_task_id = watch_task_id
        self.watch_output = watch_output
        self.grace = grace if grace is not None else 3 * settle_seconds + 3 * poll_interval
        self.min_defer_seconds = min_defer_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Classpath in the installed autoexp package (importable by the triggerer) and every argument."""
        return "autoexp.experiment.triggers.PhaseCheckpointTrigger", arguments(self, PhaseCheckpointTrigger)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll checkpoint and training until the iteration is complete or cannot come; one event."""
        started = time.monotonic()
        async for event in self._poll():
            await asyncio.sleep(max(0.0, started + self.min_defer_seconds - time.monotonic()))
            yield event
            return

    async def _poll(self) -> AsyncIterator[TriggerEvent]:
        hook = AsyncSlurmHook(self.ssh_conn_id)
        settle = SettleTracker.new(self.settle_seconds)
        ti = self.task_instance
        # Woken at once when the training's job trigger in this triggerer cancels for a stop.
        stop = (
            ti_states.stop_event(ti.dag_id, ti.run_id, self.watch_task_id)
            if ti and self.watch_task_id
            else None
        )
        last_ok = time.monotonic()
        ended: str | None = None
        ended_at = 0.0
        try:
            while True:
                try:
                    done = await self.check_checkpoints(hook, settle)
                    if done is not None:
                        yield self._done(
                            f"iteration {self.iteration} is complete in {self.path}", 0, {"iterations": done}
                        )
                        return
                    if ended is None:
                        ended = await self._outcome(hook)
                        ended_at = time.monotonic()
                    if ended is None and (why := await self._stopped(hook)) is not None:
                        self.log.info(
                            "iteration %s of %s will not come: %s; skipped", self.iteration, self.path, why
                        )
                        yield TaskSkippedEvent()
                        return
                    # A checkpoint saved just before the end still gets the time to settle.
                    if ended is not None and time.monotonic() - ended_at > self.grace:
                        yield self._ended(ended)
                        return
                    last_ok = time.monotonic()
                except (SlurmError, TrackerParseError) as exc:
                    if isinstance(exc, TrackerParseError) or time.monotonic() - last_ok > self.failure_budget:
                        yield _event(status=events.ERROR, message=f"{self.path}: {exc}")
                        return
                    self.log.warning("polling %s failed, will retry: %s", self.path, exc)
                if stop is None or stop.is_set():
                    await asyncio.sleep(self.poll_interval)
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(stop.wait(), self.poll_interval)
        except Exception as exc:
            self.log.exception("PhaseCheckpointTrigger for %s crashed", self.path)
            yield _event(status=events.ERROR, message=f"trigger crashed: {type(exc).__name__}: {exc}")

    async def _outcome(self, hook: AsyncSlurmHook) -> str | None:
        """Why the iteration cannot come any more (a training outcome marker), or None."""
        if (await hook.stat(self.failed_path)).exists:
            reason = (await hook.read_text(self.failed_path)).strip()[-500:]
            return f"its training failed ({self.failed_path}: {reason})"
        if (await hook.stat(self.finished_path)).exists:
            return f"its training finished ({self.finished_path}) without saving it"
        return None

    async def _stopped(self, hook: AsyncSlurmHook) -> str | None:
        """Why the training was stopped by a user (its marker, or its task state), or None."""
        if self.stopped_path and (await hook.stat(self.stopped_path)).exists:
            return f"its training was stopped ({(await hook.read_text(self.stopped_path)).strip()[-500:]})"
        ti = self.task_instance
        if not self.watch_task_id or ti is None:
            return None
        max_age = self.poll_interval / 2
        state = await ti_states.shared_task_state(ti.dag_id, ti.run_id, self.watch_task_id, max_age)
        if state not in ti_states.STOPPED:
            return None
        await self._cancel_training(hook, naming.job_name(ti.dag_id, self.watch_task_id, ti.run_id))
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

    def _ended(self, why: str) -> TriggerEvent:
        message = f"iteration {self.iteration} of {self.path} will not come: {why}"
        return _event(status=events.ERROR, message=message, data={"training_ended": True})


class CampaignJobTrigger(SlurmJobTrigger):
    """SlurmJobTrigger whose ``on_kill`` tells a clear from a stop, never waiting long to do so.

    Airflow calls ``on_kill`` both when a user marks the deferred task failed or success and when
    the user clears it. Cancelling the job on a clear would turn "clear to re-run" into "kill the
    training and start over"; so the job is kept only when the task instance's state, read within
    ``state_timeout`` seconds, says cleared. A stop, or no answer in time: ``scancel``, then the
    ``stopped_path`` marker that ends the phase's checkpoint waits.

    :param stopped_path: marker written after a cancel for a stop ("" for none).
    :param state_timeout: seconds to wait for the task's state before cancelling (the triggerer's
        whole ``on_kill`` gets 30 s; the scancel must fit in what is left).
    """

    def __init__(
        self,
        *args: Any,
        stopped_path: str = "",
        state_timeout: float = ti_states.STATE_TIMEOUT,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.stopped_path = stopped_path
        self.state_timeout = state_timeout

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Classpath in the installed autoexp package and every argument."""
        kwargs = {**arguments(self, SlurmJobTrigger), "stopped_path": self.stopped_path,
                  "state_timeout": self.state_timeout}  # fmt: skip
        return "autoexp.experiment.triggers.CampaignJobTrigger", kwargs

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """The base wait; first, get the triggerer's slow first state answer out of on_kill's way."""
        ti = self.task_instance
        if ti is not None:
            ti_states.warm_up(ti.dag_id, ti.run_id, ti.task_id)
        async for event in super().run():
            yield event

    async def on_kill(self) -> None:
        started = time.monotonic()
        state = await self._task_state()
        if state is not None and state not in ti_states.STOPPED:
            self.log.info(
                "task is %s (cleared, not stopped): leaving Slurm job %s running for the re-attach",
                state,
                self.job_id,
            )
            return
        if state is None:
            self.log.warning(
                "state of the task unknown after %.1f s: cancelling Slurm job %s (unknown means stop)",
                time.monotonic() - started,
                self.job_id,
            )
        await super().on_kill()
        self.log.info("Slurm job %s cancelled %.1f s into on_kill", self.job_id, time.monotonic() - started)
        if self.cancel_on_kill and self.stopped_path:
            await self._leave_stopped(state)
        ti = self.task_instance
        if ti is not None:
            ti_states.announce_stop(ti.dag_id, ti.run_id, ti.task_id)

    async def _task_state(self) -> str | None:
        """The task instance's state now ("none" for none), None if unknown within state_timeout."""
        ti = self.task_instance
        if ti is None:
            return None
        return await ti_states.task_state(
            ti.dag_id, ti.run_id, ti.task_id, ti.map_index, limit_s=self.state_timeout
        )

    async def _leave_stopped(self, state: str | None) -> None:
        text = f"Slurm job {self.job_id} cancelled: the task was {state or 'stopped (state unknown)'}\n"
        try:
            await AsyncSlurmHook(self.ssh_conn_id).write_text(self.stopped_path, text)
        except SlurmError as exc:  # the waits still see the task's state
            self.log.warning("could not write the stop marker %s: %s", self.stopped_path, exc)
