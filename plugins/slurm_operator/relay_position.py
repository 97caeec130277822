"""Where a job's log relay position outlives the trigger: an XCom of the deferred task instance.

A restarted triggerer rebuilds a trigger from the kwargs stored at deferral time, so its
``log_offset`` is the one of the deferral: everything relayed since would be relayed again. Airflow
3.3.2 gives a running trigger no way to update its own kwargs, and its supervisor does not serve the
``task_state_store``; it does serve the task instance's XComs (``GetXCom``/``SetXCom``, the same
messages a task sends). So the position goes there, keyed by the job and its log, where a re-created
trigger on this or any other triggerer of the same database finds it. A new try of the task starts
with its XComs cleared, and that try's wait relays from its own deferral's offset again.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any, Protocol

log = logging.getLogger(__name__)

XCOM_KEY = "slurm_log_relay"  # renaming it makes in-flight waits relay their logs again
# A store that does not answer in this time is treated as failed (the relay goes on, unrecorded).
STORE_TIMEOUT = 30.0


@dataclass(frozen=True)
class RelayPosition:
    """Bytes of ``log_path`` (job ``job_id``'s log) relayed so far: every line before ``offset``."""

    job_id: str
    log_path: str
    offset: int

    def to_dict(self) -> dict[str, Any]:
        return {"job_id": self.job_id, "log_path": self.log_path, "offset": self.offset}

    @classmethod
    def from_value(cls, value: Any) -> RelayPosition | None:
        """Read a stored value; anything else (a foreign or garbled value) is None, never an error."""
        if not isinstance(value, dict):
            return None
        job, path, offset = value.get("job_id"), value.get("log_path"), value.get("offset")
        if not isinstance(job, str) or not isinstance(path, str):
            return None
        if not isinstance(offset, int) or isinstance(offset, bool) or offset < 0:
            return None
        return cls(job, path, offset)


class PositionStore(Protocol):
    """Where positions are kept; ``save`` returns once the position is durable."""

    async def load(self) -> RelayPosition | None: ...

    async def save(self, position: RelayPosition) -> None: ...


@dataclass(frozen=True)
class XComPositionStore:
    """The XCom ``slurm_log_relay`` of one task instance, through the triggerer's supervisor."""

    dag_id: str
    task_id: str
    run_id: str
    map_index: int

    @classmethod
    def of(cls, task_instance: Any) -> XComPositionStore | None:
        """The store of the trigger's task instance; None where the trigger runs without one
        (``dag.test()`` runs triggers inline without it, unit tests build triggers bare)."""
        if task_instance is None:
            return None
        try:
            return cls(
                dag_id=str(task_instance.dag_id),
                task_id=str(task_instance.task_id),
                run_id=str(task_instance.run_id),
                map_index=int(task_instance.map_index),
            )
        except (AttributeError, TypeError, ValueError):
            return None

    def _where(self) -> dict[str, Any]:
        return {
            "key": XCOM_KEY,
            "dag_id": self.dag_id,
            "task_id": self.task_id,
            "run_id": self.run_id,
            "map_index": self.map_index,
        }

    async def load(self) -> RelayPosition | None:
        from airflow.sdk.execution_time.xcom import XCom

        return RelayPosition.from_value(await XCom.aget_one(**self._where()))

    async def save(self, position: RelayPosition) -> None:
        from airflow.sdk.execution_time.xcom import XCom

        # Answered by the supervisor only after the execution API has committed the row.
        await XCom.aset(value=position.to_dict(), **self._where())


@dataclass
class RelayBook:
    """One wait's relay position: the stored one first, then each new position stored before its lines.

    :param job_id: the job whose log is relayed.
    :param log_path: its log.
    :param offset: where this wait starts relaying (the deferral's ``log_offset``).
    :param store: where positions are kept (None: in memory only, as under ``dag.test()``).
    """

    job_id: str
    log_path: str
    offset: int
    store: PositionStore | None = None
    saves: int = 0
    failures: int = 0
    slowest_save: float = 0.0

    async def resume(self) -> int:
        """The offset to relay from: the stored position of this job's log if it is further on."""
        if self.store is None:
            return self.offset
        try:
            stored = await asyncio.wait_for(self.store.load(), STORE_TIMEOUT)
        except Exception as exc:  # no store answer must not stop the wait; it may repeat lines then
            log.warning("Slurm job %s: cannot read the stored log relay position: %s", self.job_id, exc)
            return self.offset
        if stored is None or (stored.job_id, stored.log_path) != (self.job_id, self.log_path):
            return self.offset  # nothing stored yet, or the position of an earlier attempt's job
        if stored.offset > self.offset:
            log.info(
                "Slurm job %s: log relay resumes at byte %d of %s (relayed up to there before this "
                "trigger was re-created, e.g. by a triggerer restart)",
                self.job_id,
                stored.offset,
                self.log_path,
            )
            self.offset = stored.offset
        return self.offset

    async def advance(self, offset: int) -> None:
        """Store ``offset`` before the lines up to it are emitted (the caller emits them after this).

        Stored first, a line is never relayed twice: a trigger killed after the store commits and
        before its lines reach the task log loses them (the window is one store round trip); one
        killed earlier relays them again from the old position, once. A store that fails or does
        not answer is logged and skipped: the lines are relayed anyway, and only a restart before
        the next successful store would repeat them.
        """
        if offset == self.offset:
            return
        if self.store is not None:
            started = time.monotonic()
            try:
                await asyncio.wait_for(
                    self.store.save(RelayPosition(self.job_id, self.log_path, offset)), STORE_TIMEOUT
                )
            except Exception as exc:
                self.failures += 1
                log.warning("Slurm job %s: cannot store the log relay position: %s", self.job_id, exc)
            else:
                self.saves += 1
                self.slowest_save = max(self.slowest_save, time.monotonic() - started)
        self.offset = offset

    def summary(self) -> str:
        """One line for the end of the wait: how often the position was stored, and how fast."""
        if self.store is None:
            return f"relayed up to byte {self.offset} (position kept in memory only)"
        return (
            f"relayed up to byte {self.offset}; position stored {self.saves} time(s), slowest store "
            f"{self.slowest_save * 1000:.0f} ms, {self.failures} failed"
        )
