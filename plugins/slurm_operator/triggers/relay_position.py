"""Where a job's log relay position and watchdog clocks outlive the trigger: a task instance XCom.

A restarted triggerer rebuilds a trigger from the kwargs stored at deferral time, so its
``log_offset`` is the one of the deferral: everything relayed since would be relayed again. A
running trigger can keep state only in its task instance's XComs (docs/slurm-operator.md
#airflow-332-workarounds). So the position goes there, keyed by the job and its log, where a
re-created trigger on this or any other triggerer of the same database finds it. A new try of the task starts
with its XComs cleared, and that try's wait relays from its own deferral's offset again.

The watchdog's clocks (``watchdog.Clocks``: since when the job is unclassifiable, its progress
high and when it was reached) ride in the same value, written by the same single writer: a
re-created trigger continues them instead of restarting every bound.

While the job is PENDING the value also says why and until when (``pending``: the record's
``JobRecord.pending_note()``, e.g. ``Priority, est. start 2026-12-03T14:05``); the first poll that
sees it running drops it. The value is therefore what a UI reads to show a waiting job's note
without asking the cluster: one XCom read, no SSH (the Campaigns page does).
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from slurm_operator import airflow_internals

log = logging.getLogger(__name__)

XCOM_KEY = "slurm_log_relay"  # renaming it makes in-flight waits relay their logs again
# Seconds a store may take to answer before it counts as failed. Generous: a triggerer's supervisor
# answers its first requests only once its in-process API is up (20-30 s were seen on a busy box).
STORE_TIMEOUT = 90.0


@dataclass(frozen=True)
class RelayPosition:
    """Bytes of ``log_path`` (job ``job_id``'s log) relayed so far: every line before ``offset``;
    ``clocks``: the wait's watchdog clocks (JSON, read by ``watchdog.Clocks.from_value``);
    ``pending``: while the job pends, why and its estimated start (``JobRecord.pending_note()``)."""

    job_id: str
    log_path: str
    offset: int
    clocks: dict[str, Any] = field(default_factory=dict)
    pending: str | None = None

    def to_dict(self) -> dict[str, Any]:
        value: dict[str, Any] = {"job_id": self.job_id, "log_path": self.log_path, "offset": self.offset}
        if self.clocks:
            value["clocks"] = self.clocks
        if self.pending is not None:
            value["pending"] = self.pending
        return value

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
        clocks, pending = value.get("clocks"), value.get("pending")
        return cls(
            job,
            path,
            offset,
            dict(clocks) if isinstance(clocks, dict) else {},
            pending if isinstance(pending, str) else None,
        )


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
        (``dag.test()`` runs triggers inline without it, unit tests build triggers bare) or where
        a trigger cannot reach XComs (Airflow before 3.3: the position is then kept in memory)."""
        if task_instance is None or not airflow_internals.TRIGGER_XCOMS:
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
        return RelayPosition.from_value(await airflow_internals.xcom_get(**self._where()))

    async def save(self, position: RelayPosition) -> None:
        await airflow_internals.xcom_set(position.to_dict(), **self._where())


def seed(ti: Any, position: RelayPosition) -> None:
    """Store the position a deferral starts at (the operator, before deferring): the trigger's first
    read then finds a value (a missing XCom is logged as an error by Airflow's client)."""
    ti.xcom_push(key=XCOM_KEY, value=position.to_dict())


@dataclass
class RelayBook:
    """One wait's relay position: the stored one first, then each new position stored before its lines.

    :param job_id: the job whose log is relayed.
    :param log_path: its log.
    :param offset: where this wait starts relaying (the deferral's ``log_offset``).
    :param store: where positions are kept (None: in memory only, as under ``dag.test()``).
    :param logger: the trigger's logger (its lines land in the task's log).
    """

    job_id: str
    log_path: str
    offset: int
    store: PositionStore | None = None
    logger: Any = log
    saves: int = 0
    failures: int = 0
    slowest_save: float = 0.0
    clocks: dict[str, Any] = field(default_factory=dict)  # as stored (an earlier run's, once known)
    pending: str | None = None  # the pending note as stored
    _loading: asyncio.Task[RelayPosition | None] | None = field(default=None, repr=False)
    _known: bool = False

    @property
    def known(self) -> bool:
        """Whether the stored value has been read (or will never be: no store, no answer in time)."""
        return self._known or self.store is None

    async def ready(self, *, wait: bool) -> bool:
        """True once the stored position is known and applied; never guesses while it is not.

        The read runs in the background: a freshly started triggerer's supervisor answers its first
        requests only after tens of seconds on a busy machine, and the wait for the job goes on
        meanwhile. With ``wait`` (the job ended: its last lines are due) it is awaited for up to
        ``STORE_TIMEOUT``; if there is still no answer, relaying starts from the deferral's offset,
        which repeats whatever an earlier incarnation relayed (said in the log).
        """
        if self._known or self.store is None:
            return True
        if self._loading is None:
            self._loading = asyncio.ensure_future(self.store.load())
        if wait:
            await asyncio.wait({self._loading}, timeout=STORE_TIMEOUT)
        if not self._loading.done():
            if not wait:
                return False
            self._loading.cancel()
            self.logger.warning(
                "Slurm job %s: no stored log relay position after %.0f s; relaying from byte %d, "
                "which may repeat lines an earlier run of this trigger relayed",
                self.job_id,
                STORE_TIMEOUT,
                self.offset,
            )
            self._known = True
            return True
        loading, self._loading = self._loading, None
        try:
            stored = loading.result()
        except Exception as exc:  # the next poll asks again
            self.logger.warning(
                "Slurm job %s: cannot read the stored log relay position: %s", self.job_id, exc
            )
            return False
        self._known = True
        ours = stored is not None and (stored.job_id, stored.log_path) == (self.job_id, self.log_path)
        # (else another attempt's job; and a deferral further on than the store wins)
        if ours and stored is not None:
            self.clocks, self.pending = dict(stored.clocks), stored.pending
        if ours and stored is not None and stored.offset > self.offset:
            self.logger.info(
                "Slurm job %s: log relay resumes at byte %d of %s (relayed up to there before this "
                "trigger was re-created, e.g. by a triggerer restart)",
                self.job_id,
                stored.offset,
                self.log_path,
            )
            self.offset = stored.offset
        return True

    async def keep(self, clocks: dict[str, Any], pending: str | None = None) -> None:
        """Store ``clocks`` and the job's ``pending`` note (None: it is not pending) with the current
        position, once the stored value is known (before, it would overwrite an earlier run's clocks
        it has not read yet). A failed store is retried by the next call."""
        changed = (clocks, pending) != (self.clocks, self.pending)
        if self._known and self.store is not None and changed:
            await self.advance(self.offset, clocks=clocks, pending=pending)

    async def advance(
        self,
        offset: int,
        *,
        final: bool = False,
        clocks: dict[str, Any] | None = None,
        pending: str | None = None,
    ) -> bool:
        """Store ``offset`` (and ``clocks``, when given; ``pending``: the job's pending note, None
        for a job that is not pending, as every job whose log is relayed); True when the lines up
        to it may be emitted now (the caller then emits).

        Stored first, a line is never relayed twice. A store that fails or does not answer within
        ``STORE_TIMEOUT`` holds the lines back (False: the next poll reads them again), except for
        the last read (``final``), whose lines go out anyway.
        """
        clocks = self.clocks if clocks is None else clocks
        if (offset, clocks, pending) == (self.offset, self.clocks, self.pending):
            return True
        if self.store is not None:
            started = time.monotonic()
            try:
                position = RelayPosition(self.job_id, self.log_path, offset, clocks, pending)
                await asyncio.wait_for(self.store.save(position), STORE_TIMEOUT)
            except Exception as exc:
                self.failures += 1
                self.logger.warning("Slurm job %s: cannot store the log relay position: %s", self.job_id, exc)
                if not final:
                    return False
            else:
                self.saves += 1
                self.slowest_save = max(self.slowest_save, time.monotonic() - started)
        self.offset, self.clocks, self.pending = offset, clocks, pending
        return True

    def close(self) -> None:
        """Stop a read still running (the wait ended)."""
        if self._loading is not None:
            self._loading.cancel()

    def summary(self) -> str:
        """One line for the end of the wait: how often the position was stored, and how fast."""
        if self.store is None:
            return f"relayed up to byte {self.offset} (position kept in memory only)"
        return (
            f"relayed up to byte {self.offset}; position stored {self.saves} time(s), slowest store "
            f"{self.slowest_save * 1000:.0f} ms, {self.failures} failed"
        )
