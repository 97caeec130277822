"""Deferrable SSH sensors: a regex in a remote log, a complete Megatron checkpoint iteration."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from slurm_operator import events
from slurm_operator.async_hook import AsyncSlurmHook
from slurm_operator.checkpoints import SettleTracker, TrackerParseError
from slurm_operator.events import EventSchemaError, SlurmEvent
from slurm_operator.exceptions import SlurmError
from slurm_operator.triggers import RemotePathTrigger


def _resume(task_id: str, event: Any) -> SlurmEvent:
    try:
        ev = SlurmEvent.from_payload(event)
    except EventSchemaError as exc:
        raise AirflowException(f"task {task_id}: malformed trigger event: {exc}") from None
    if ev.status != events.SUCCESS:
        raise AirflowException(f"task {task_id}: {ev.message}")
    return ev


class SlurmLogSensor(BaseSensorOperator):
    """Wait until ``pattern`` (a regex) appears in the remote file ``path``; returns the matching line.

    :param ssh_conn_id: SSH connection of the cluster.
    :param path: remote file, read incrementally (never re-read from the start).
    :param pattern: Python regex, searched line-wise (``re.MULTILINE``).
    :param poll_interval: seconds between reads.
    :param deferrable: wait in the triggerer (default) instead of a worker slot.
    :param min_defer_seconds: shortest deferral (see SlurmJobTrigger: a 3.3.2 scheduler race).
    Timeouts and ``soft_fail`` are BaseSensorOperator's.
    """

    template_fields = ("path", "pattern")

    def __init__(
        self,
        *,
        ssh_conn_id: str,
        path: str,
        pattern: str,
        poll_interval: float = 60,
        deferrable: bool = True,
        min_defer_seconds: float = 10,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.min_defer_seconds = min_defer_seconds
        self.ssh_conn_id = ssh_conn_id
        self.path = path
        self.pattern = pattern
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self._offset = 0
        self._pending = ""

    def _validate(self) -> None:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise AirflowException(f"task {self.task_id}: pattern {self.pattern!r}: {exc}") from None

    def execute(self, context: Context) -> Any:
        """Defer to a RemotePathTrigger, or poke in the worker when not deferrable."""
        self._validate()
        if not self.deferrable:
            return super().execute(context)
        self.defer(
            trigger=self._trigger(), method_name="execute_complete", timeout=timedelta(seconds=self.timeout)
        )

    def _trigger(self) -> RemotePathTrigger:
        return RemotePathTrigger(
            ssh_conn_id=self.ssh_conn_id,
            path=self.path,
            mode="regex",
            pattern=self.pattern,
            poll_interval=self.poll_interval,
            min_defer_seconds=self.min_defer_seconds,
        )

    def execute_complete(self, context: Context, event: Any = None, **_: Any) -> str:
        """Return the matching line."""
        return str(_resume(self.task_id, event).data.get("match", ""))

    def poke(self, context: Context) -> bool | PokeReturnValue:
        """Read what was appended since the last poke and search it (the trigger's own scan)."""
        found, self._offset, self._pending = asyncio.run(
            self._trigger().scan(AsyncSlurmHook(self.ssh_conn_id), self._offset, self._pending)
        )
        return False if found is None else PokeReturnValue(True, found)


class CheckpointSensor(BaseSensorOperator):
    """Wait until a Megatron checkpoint folder holds a complete ``iteration``.

    Complete by the markers its format writes last, never by sizes or age (see ``checkpoints``):
    the tracker is at ``iteration`` or beyond and ``iter_%07d`` holds torch_dist's ``metadata.json``
    and ``.metadata``, or legacy ``*.pt`` files that each end with their zip directory; the probe
    must then read the same for ``settle_seconds``.
    Returns the sorted list of complete iterations up to the tracker (for ``.expand()``).
    ``min_defer_seconds``: shortest deferral (see SlurmJobTrigger: a 3.3.2 scheduler race).
    """

    template_fields = ("checkpoint_dir",)

    def __init__(
        self,
        *,
        ssh_conn_id: str,
        checkpoint_dir: str,
        iteration: int,
        poll_interval: float = 60,
        settle_seconds: float = 30,
        deferrable: bool = True,
        min_defer_seconds: float = 10,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.min_defer_seconds = min_defer_seconds
        self.ssh_conn_id = ssh_conn_id
        self.checkpoint_dir = checkpoint_dir
        self.iteration = iteration
        self.poll_interval = poll_interval
        self.settle_seconds = settle_seconds
        self.deferrable = deferrable
        self._settle = SettleTracker.new(settle_seconds)

    def execute(self, context: Context) -> Any:
        """Defer to a RemotePathTrigger in checkpoint mode, or poke in the worker."""
        if int(self.iteration) < 0:
            raise AirflowException(f"task {self.task_id}: iteration must be >= 0, got {self.iteration}")
        if not self.deferrable:
            return super().execute(context)
        self.defer(
            trigger=self._trigger(), method_name="execute_complete", timeout=timedelta(seconds=self.timeout)
        )

    def _trigger(self) -> RemotePathTrigger:
        return RemotePathTrigger(
            ssh_conn_id=self.ssh_conn_id,
            path=self.checkpoint_dir,
            mode="checkpoint",
            iteration=int(self.iteration),
            settle_seconds=self.settle_seconds,
            poll_interval=self.poll_interval,
            min_defer_seconds=self.min_defer_seconds,
        )

    def execute_complete(self, context: Context, event: Any = None, **_: Any) -> list[int]:
        """Return the complete iterations."""
        return [int(i) for i in _resume(self.task_id, event).data.get("iterations", [])]

    def poke(self, context: Context) -> bool | PokeReturnValue:
        """One look at the folder (the settle timer spans pokes, which run in one worker process)."""
        try:
            done = asyncio.run(
                self._trigger().check_checkpoints(AsyncSlurmHook(self.ssh_conn_id), self._settle)
            )
        except (TrackerParseError, SlurmError) as exc:
            raise AirflowException(f"task {self.task_id}: {self.checkpoint_dir}: {exc}") from None
        return False if done is None else PokeReturnValue(True, done)
