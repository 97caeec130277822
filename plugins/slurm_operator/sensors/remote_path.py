"""Deferrable SSH sensors: any remote-path condition (``RemotePathSensor``), a regex in a remote log."""

from __future__ import annotations

import asyncio
import re
from datetime import timedelta
from typing import Any

from airflow.sdk import BaseSensorOperator, Context, PokeReturnValue
from airflow.sdk.exceptions import AirflowException

from slurm_operator.airflow_public import AirflowSensorTimeout, TaskDeferralTimeout
from slurm_operator.hooks.slurm_async import AsyncSlurmHook
from slurm_operator.model import events
from slurm_operator.model.exceptions import SlurmError
from slurm_operator.triggers.remote_path import PathCondition, RemotePathTrigger


class RemotePathSensor(BaseSensorOperator):
    """Wait until a ``RemotePathTrigger`` condition holds: deferred, or poked in the worker by the same check.

    Subclasses build the trigger (``trigger``, with ``path_trigger``) and turn the success event's
    data into the return value (``result``).

    :param ssh_conn_id: SSH connection of the cluster.
    :param poll_interval: seconds between checks.
    :param deferrable: wait in the triggerer (default) instead of a worker slot.
    :param min_defer_seconds: shortest deferral (see docs/slurm-operator.md#airflow-332-workarounds).
    Timeouts and ``soft_fail`` are BaseSensorOperator's.
    """

    def __init__(
        self,
        *,
        ssh_conn_id: str,
        poll_interval: float = 60,
        deferrable: bool = True,
        min_defer_seconds: float = 10,
        **kwargs: Any,
    ) -> None:
        kwargs.setdefault("poke_interval", poll_interval)
        super().__init__(**kwargs)
        self.ssh_conn_id = ssh_conn_id
        self.poll_interval = poll_interval
        self.deferrable = deferrable
        self.min_defer_seconds = min_defer_seconds
        self._poked: PathCondition | None = None  # one condition across pokes (one worker process)

    def trigger(self) -> RemotePathTrigger:
        """The trigger of this wait (arguments rendered)."""
        raise NotImplementedError

    def result(self, data: dict[str, Any]) -> Any:
        """The return value, from the success event's data."""
        return data

    def validate(self) -> None:
        """Check the rendered arguments; raise AirflowException naming the task."""

    def path_trigger(self, path: str, **condition: Any) -> RemotePathTrigger:
        """A RemotePathTrigger on ``path`` with this sensor's settings and ``condition`` (pattern=...)."""
        return RemotePathTrigger(
            ssh_conn_id=self.ssh_conn_id,
            path=path,
            poll_interval=self.poll_interval,
            min_defer_seconds=self.min_defer_seconds,
            **condition,
        )

    def execute(self, context: Context) -> Any:
        """Defer to the trigger, or poke in the worker when not deferrable."""
        self.validate()
        if not self.deferrable:
            try:
                return super().execute(context)
            except AirflowSensorTimeout:
                self.log.error("%s", self._timed_out())
                raise
        timeout = timedelta(seconds=self.timeout)
        self.defer(trigger=self.trigger(), method_name="execute_complete", timeout=timeout)

    def resume_execution(self, next_method: str, next_kwargs: dict[str, Any] | None, context: Context) -> Any:
        """Say what the wait was for when its deferral timed out, then fail (or skip) as Airflow does.

        The sensor base turns the ``TaskDeferralTimeout`` into a sensor timeout, or a skip with
        ``soft_fail``, raised from it: the cause chain tells a timeout from a failed trigger.
        """
        try:
            return super().resume_execution(next_method, next_kwargs, context)
        except Exception as error:
            cause: BaseException | None = error
            while cause is not None and not isinstance(cause, TaskDeferralTimeout):
                cause = cause.__cause__
            if cause is not None:
                self.log.error("%s", self._timed_out())
            raise

    def _timed_out(self) -> str:
        trigger = self.trigger()
        what = trigger.build_condition().waits_for(trigger.path)
        return (
            f"task {self.task_id}: timed out after {self.timeout:.0f} s waiting for {what}; "
            "check that the job writing it runs and that the path is right"
        )

    def execute_complete(self, context: Context, event: Any = None, **_: Any) -> Any:
        """The result of the success event; any other event fails the task with its message."""
        ev = events.resume_event(event, self.task_id)  # malformed: fails the task with its message
        if ev.status != events.SUCCESS:
            raise AirflowException(f"task {self.task_id}: {ev.message}")
        return self.result(ev.data)

    def poke(self, context: Context) -> bool | PokeReturnValue:
        """One check of the trigger's own condition (state such as a read offset spans pokes)."""
        trigger = self.trigger()
        if self._poked is None:
            self._poked = trigger.build_condition()
        ends: tuple[type[Exception], ...] = (*self._poked.fatal, SlurmError)
        try:
            data = asyncio.run(self._poked.check(AsyncSlurmHook(self.ssh_conn_id), trigger.path))
        except ends as exc:
            raise AirflowException(f"task {self.task_id}: {trigger.path}: {exc}") from None
        return False if data is None else PokeReturnValue(True, self.result(data))


class SlurmLogSensor(RemotePathSensor):
    """Wait until ``pattern`` (a regex) appears in the remote file ``path``; returns the matching line.

    :param path: remote file, read incrementally (never re-read from the start).
    :param pattern: Python regex, searched line-wise (``re.MULTILINE``).
    Other parameters: ``RemotePathSensor``'s.
    """

    template_fields = ("path", "pattern")

    def __init__(self, *, path: str, pattern: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.path = path
        self.pattern = pattern

    def validate(self) -> None:
        try:
            re.compile(self.pattern)
        except re.error as exc:
            raise AirflowException(f"task {self.task_id}: pattern {self.pattern!r}: {exc}") from None

    def trigger(self) -> RemotePathTrigger:
        return self.path_trigger(self.path, pattern=self.pattern)

    def result(self, data: dict[str, Any]) -> str:
        return str(data.get("match", ""))
