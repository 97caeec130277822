"""deferrable=False: the wait for a Slurm job in the worker, with the trigger's log relay and watchdog."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from airflow.sdk.exceptions import AirflowException

from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.model.exceptions import RemotePathNotFoundError, SlurmError
from slurm_operator.model.records import JobRecord
from slurm_operator.model.states import TERMINAL_STATES, SlurmState
from slurm_operator.policy.resubmission import TaskLog
from slurm_operator.policy.watchdog import Alarm
from slurm_operator.remote.log_window import complete_lines
from slurm_operator.triggers.slurm_job import SlurmJobTrigger

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Ended:
    """How the wait ended: the job's last record, the log offset relayed up to, and a hang or fatal
    alarm (the job still runs then: the caller cancels it)."""

    record: JobRecord
    offset: int
    hung: Alarm | None = None
    fatal: Alarm | None = None
    progress: dict[str, Any] = field(default_factory=dict)  # ``ProgressMark.summary`` of the job


def wait_in_worker(
    hook: SlurmHook,
    spec: SlurmJobTrigger,
    relay: Callable[[str], None],
    *,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
    wall: Callable[[], float] = time.time,
) -> Ended:
    """Poll ``spec.job_id`` until it ends or hangs, with the settings the deferred wait would use.

    ``spec`` is the trigger the operator would defer to: one set of settings, one watchdog for both
    ways of waiting. Raises AirflowException (the job is left alone) when the cluster does not
    answer for ``failure_budget`` seconds, accounting does not know the job for ``missing_polls``
    polls, or the job stays in an unclassifiable state for ``unknown_timeout`` seconds.
    """
    dog = spec.watchdog()
    watch = list(dog.paths) if dog.watching else []
    offset = spec.log_offset
    last_ok = clock()
    missing = 0
    pending: str | None = None  # the pending note last logged: one line per change
    while True:
        try:
            states = hook.job_states([spec.job_id], watch)
            last_ok = clock()
        except SlurmError as exc:
            if clock() - last_ok > spec.failure_budget:
                raise AirflowException(
                    f"Slurm job {spec.job_id}: no answer from the cluster: {exc}"
                ) from None
            log.warning("poll of Slurm job %s failed, will retry: %s", spec.job_id, exc)
            sleep(spec.poll_interval)
            continue
        record = states.records.get(spec.job_id)
        if record is None:
            # squeue/scontrol forget finished jobs: only accounting's silence counts as missing.
            missing = missing + 1 if states.authoritative else 0
            if missing >= spec.missing_polls:
                raise AirflowException(f"Slurm job {spec.job_id} is unknown to Slurm after {missing} polls")
            sleep(spec.poll_interval)
            continue
        missing = 0
        note, pending = pending, record.pending_note()
        if pending is not None and pending != note:
            log.info("Slurm job %s pending: %s", spec.job_id, pending)
        terminal = record.state in TERMINAL_STATES
        if spec.stream_logs and spec.log_path and record.state is not SlurmState.PENDING:
            text, offset = _relay(hook, spec.log_path, offset, relay, final=terminal)
            dog.saw_log(text, states.remote_now, record.elapsed)
        seen = dog.progress().get("progress", {})
        if terminal:
            return Ended(record, offset, progress=seen)
        alarm = dog.observe(record, now=wall(), remote_now=states.remote_now, files=states.files)
        if alarm is not None and alarm.kind == "hung":
            return Ended(record, offset, alarm, progress=seen)
        if alarm is not None and alarm.kind == "fatal":
            return Ended(record, offset, fatal=alarm, progress=seen)
        if alarm is not None:
            raise AirflowException(f"Slurm job {spec.job_id} ({spec.log_path}): {alarm.message}")
        sleep(spec.poll_interval)


def relay_lines(logger: TaskLog, job_id: str) -> Callable[[str], None]:
    """Relay text into ``logger`` line by line, each prefixed ``[slurm <id>]``."""

    def relay(text: str) -> None:
        for line in text.splitlines():
            logger.info("[slurm %s] %s", job_id, line)

    return relay


def _relay(
    hook: SlurmHook, path: str, offset: int, relay: Callable[[str], None], *, final: bool
) -> tuple[str, int]:
    """Relay the log's new complete lines; -> (them, the offset past them)."""
    try:
        chunk = hook.read_log(path, offset)
    except (RemotePathNotFoundError, SlurmError):
        return "", offset  # not there yet, or unreadable this time: the next poll tries again
    text, next_offset = complete_lines(chunk, final=final)
    relay(text)
    return text, next_offset
