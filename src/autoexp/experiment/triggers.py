"""Checkpoint wait that also watches its training's outcome markers, so it never outwaits a dead run."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent
from slurm_operator import events
from slurm_operator.async_hook import AsyncSlurmHook
from slurm_operator.checkpoints import SettleTracker, TrackerParseError
from slurm_operator.events import SlurmEvent
from slurm_operator.exceptions import SlurmError
from slurm_operator.triggers import RemotePathTrigger, SlurmJobTrigger

# TI states that mean a user stopped the task (marked it failed/success/skipped): only then does the
# job go too. A cleared task is back to no state / restarting / scheduled: its next try re-attaches.
_STOPPED_BY_USER = frozenset({"failed", "success", "skipped", "removed", "upstream_failed"})


def _event(**kwargs: Any) -> TriggerEvent:
    return TriggerEvent(SlurmEvent(**kwargs).to_payload())  # type: ignore[no-untyped-call]


class PhaseCheckpointTrigger(RemotePathTrigger):
    """RemotePathTrigger in checkpoint mode, plus the outcome markers of the training that writes it.

    :param failed_path: marker the training task writes when its last try failed: the iteration
        will never come, so the wait ends with an error event (``data.training_ended``).
    :param finished_path: marker of a training that succeeded without saving the iteration.
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
        self.grace = grace if grace is not None else 3 * settle_seconds + 3 * poll_interval
        self.min_defer_seconds = min_defer_seconds

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Classpath in the installed autoexp package (importable by the triggerer) and every argument."""
        return (
            "autoexp.experiment.triggers.PhaseCheckpointTrigger",
            {
                "ssh_conn_id": self.ssh_conn_id,
                "path": self.path,
                "iteration": self.iteration,
                "failed_path": self.failed_path,
                "finished_path": self.finished_path,
                "settle_seconds": self.settle_seconds,
                "poll_interval": self.poll_interval,
                "grace": self.grace,
                "failure_budget": self.failure_budget,
                "min_defer_seconds": self.min_defer_seconds,
            },
        )

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll checkpoint and markers until the iteration is complete or cannot come; one event."""
        started = time.monotonic()
        async for event in self._poll():
            await asyncio.sleep(max(0.0, started + self.min_defer_seconds - time.monotonic()))
            yield event
            return

    async def _poll(self) -> AsyncIterator[TriggerEvent]:
        hook = AsyncSlurmHook(self.ssh_conn_id)
        settle = SettleTracker.new(self.settle_seconds)
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
                await asyncio.sleep(self.poll_interval)
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

    def _ended(self, why: str) -> TriggerEvent:
        message = f"iteration {self.iteration} of {self.path} will not come: {why}"
        return _event(status=events.ERROR, message=message, data={"training_ended": True})


class CampaignJobTrigger(SlurmJobTrigger):
    """SlurmJobTrigger whose ``on_kill`` tells a clear from a stop.

    Airflow calls ``on_kill`` both when a user marks the deferred task failed or success and when
    the user clears it. Cancelling the job on a clear would turn "clear to re-run" into "kill the
    training and start over"; so the job is cancelled only when the task instance now holds a
    stopped state. Unknown (the state cannot be read): cancel, as the base trigger does.
    """

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """Classpath in the installed autoexp package and every argument of the base trigger."""
        return "autoexp.experiment.triggers.CampaignJobTrigger", super().serialize()[1]

    async def on_kill(self) -> None:
        state = await self._task_state()
        if state is not None and state not in _STOPPED_BY_USER:
            self.log.info(
                "task is %s (cleared, not stopped): leaving Slurm job %s running for the re-attach",
                state,
                self.job_id,
            )
            return
        await super().on_kill()

    async def _task_state(self) -> str | None:
        """The task instance's state now, via the triggerer's API client; None if unknown."""
        ti = self.task_instance
        if ti is None:
            return None
        try:
            from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
            from asgiref.sync import sync_to_async

            map_index = ti.map_index if ti.map_index is not None and ti.map_index >= 0 else None
            states = await sync_to_async(RuntimeTaskInstance.get_task_states)(
                dag_id=ti.dag_id, task_ids=[ti.task_id], run_ids=[ti.run_id], map_index=map_index
            )
        except Exception as exc:  # never let the check keep a job alive by accident: unknown
            self.log.warning("cannot read the state of %s: %s", ti.task_id, exc)
            return None
        by_task = dict(states.get(ti.run_id, {}))
        key = ti.task_id if map_index is None else f"{ti.task_id}_{map_index}"
        state = by_task.get(key, "none")
        return "none" if state is None else str(state)
