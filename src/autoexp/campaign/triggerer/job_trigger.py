"""The campaign's training trigger: tells a clear from a stop, and leaves the stop for the waits."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

from airflow.triggers.base import TriggerEvent
from slurm_operator.hooks.slurm_async import AsyncSlurmHook
from slurm_operator.model.exceptions import SlurmError
from slurm_operator.triggers.serialization import arguments, class_path
from slurm_operator.triggers.slurm_job import SlurmJobTrigger

from autoexp.campaign.planning import run_layout
from autoexp.campaign.triggerer import ti_states


class RollbacksToAlert(Exception):
    """A success left to the task process: its training's rollback record has lines not alerted yet."""


class CampaignJobTrigger(SlurmJobTrigger):
    """SlurmJobTrigger whose ``on_kill`` tells a clear from a stop, never waiting long to do so.

    Airflow calls ``on_kill`` both when a user marks the deferred task failed or success and when
    the user clears it. Cancelling the job on a clear would turn "clear to re-run" into "kill the
    training and start over"; so the job is kept only when the task instance's state, read within
    ``state_timeout`` seconds, says cleared. A stop, or no answer in time: ``scancel``, then the
    ``stopped_path`` marker that ends the phase's checkpoint waits.

    :param stopped_path: marker written after a cancel for a stop ("" for none).
    :param finished_path: the training's success marker, written before the task succeeds from here
        (``end_task_on_success``), as its operator writes it on success ("" for none).
    :param state_timeout: seconds to wait for the task's state before cancelling (the triggerer's
        whole ``on_kill`` gets 30 s; the scancel must fit in what is left).
    :param checkpoint_dir: the training's checkpoint folder ("" for none): a success whose ckpt_check
        record there has lines not alerted yet is not ended here but left to the task process, which
        alerts them (``autoexp.campaign.tasks.rollbacks``); one command, at the success only.
    """

    def __init__(
        self,
        *args: Any,
        stopped_path: str = "",
        state_timeout: float = ti_states.STATE_TIMEOUT,
        finished_path: str = "",
        checkpoint_dir: str = "",
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.stopped_path = stopped_path
        self.state_timeout = state_timeout
        self.finished_path = finished_path
        self.checkpoint_dir = checkpoint_dir

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """This class's import path and every argument, ``SlurmJobTrigger``'s (passed on) included."""
        return class_path(type(self)), arguments(self, type(self))

    async def on_success(self, hook: AsyncSlurmHook) -> None:
        """Raises RollbacksToAlert (the task process then judges the end: ``end_task_here``) while a
        rollback is not alerted; else the success marker."""
        if self.checkpoint_dir:
            result = await hook.run(run_layout.rollbacks_unalerted(self.checkpoint_dir, claim=False))
            if not result.ok or result.stdout.strip():
                said = result.stdout.strip() or f"exit {result.exit_status}: {result.stderr.strip()[-300:]}"
                raise RollbacksToAlert(f"checkpoint rollback(s) to alert by the task process: {said}")
        if self.finished_path:  # the phase's checkpoint waits stop waiting for iterations not saved
            await hook.write_text(self.finished_path, "done\n")

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
        if self.cancel_on_kill:
            await self._cancel("task killed while deferred")
        self.log.info("Slurm job %s cancelled %.1f s into on_kill", self.job_id, time.monotonic() - started)
        ti = self.task_instance
        if ti is not None:  # this process's waits end now; the marker below is for the others
            ti_states.announce_stop(ti.dag_id, ti.run_id, ti.task_id)
        if self.cancel_on_kill and self.stopped_path:
            await self._leave_stopped(state)
        if self.cancel_on_kill:  # within on_kill's 30 s: state <= 5 s, cancel, marker, then this
            await self.relay_last_lines()

    async def on_task_stopped(self, state: str) -> None:
        """Cancelled for a stop seen outside the triggerer; the marker then ends the phase's waits."""
        await super().on_task_stopped(state)
        if self.cancel_on_kill and self.stopped_path:
            await self._leave_stopped(state)

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
