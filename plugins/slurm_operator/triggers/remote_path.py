"""RemotePathTrigger: one wait loop over a remote path and a pluggable condition (built in: a log regex)."""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import re
import time
from abc import ABC, abstractmethod
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any, ClassVar, Protocol

from airflow.triggers.base import BaseTrigger, TriggerEvent

from slurm_operator.hooks.slurm_async import AsyncSlurmHook
from slurm_operator.model import events
from slurm_operator.model.events import SlurmEvent
from slurm_operator.model.exceptions import RemotePathNotFoundError, SlurmError
from slurm_operator.model.records import LogChunk, RemoteStat
from slurm_operator.remote import path_batch
from slurm_operator.remote.path_batch import BatchedFiles, NotFetched, Read
from slurm_operator.triggers.path_poller import PathPoller, PathRound, PathWatch
from slurm_operator.triggers.serialization import arguments, class_path

# Reads per poll are capped so one large file cannot stall the triggerer's shared event loop.
_READ_BYTES = 1 << 20


class RemoteFiles(Protocol):
    """What a condition may read (``AsyncSlurmHook`` over the shared SSH connection, in the trigger)."""

    async def list_dir(self, path: str) -> list[str]: ...
    async def read_text(self, path: str) -> str: ...
    async def stat(self, path: str) -> RemoteStat: ...
    async def read_log(self, path: str, offset: int = 0, max_bytes: int = ...) -> LogChunk: ...


class PathCondition(ABC):
    """A condition on a remote path, checked once per poll by ``RemotePathTrigger``.

    The trigger names it by import path and keyword arguments (JSON primitives), so the triggerer can
    rebuild it; one instance serves one wait, and may keep state between checks (a read offset).
    In a batched wait ``check`` reads from the round's answers: a read they lack raises
    ``NotFetched`` out of ``check``, which runs again on a later round's answers; so change state
    only after the reads it depends on (or idempotently).
    """

    #: Errors that end the wait at once: what the path holds can never satisfy the condition.
    #: A ``SlurmError`` (connection, command) is retried within the trigger's failure budget.
    fatal: ClassVar[tuple[type[Exception], ...]] = ()
    #: How far into the file the condition has read (the event's ``log_offset``).
    offset: int = 0

    @abstractmethod
    def waits_for(self, path: str) -> str:
        """What the wait is for, for the messages that end it."""

    @abstractmethod
    def done_message(self, path: str) -> str:
        """The success event's message."""

    @abstractmethod
    async def check(self, files: RemoteFiles, path: str) -> dict[str, Any] | None:
        """The success event's data once the condition holds, else None."""

    def recheck_in(self) -> float | None:
        """Seconds after which the last unmet check could pass, when the condition knows (a quiet
        period running); a batched wait then asks for an early round. None: the next interval."""
        return None

    def reads(self, path: str) -> list[Read]:
        """What the next batched round should fetch for ``check`` (``path_batch.tree``/``read``).

        Optional: whatever ``check`` asked for last time is fetched again anyway; declaring it
        saves the round that would learn it, and a read whose window moves (a log read on from an
        offset) must be declared, or the stale window would be fetched as well.
        """
        return []


class LogPattern(PathCondition):
    """``pattern`` (a regex, searched line-wise) appears in the file; data ``{"match": the line}``.

    Reads only what was appended since the previous check, from ``offset`` on.
    """

    def __init__(self, pattern: str, offset: int = 0) -> None:
        self.pattern = pattern
        self.offset = offset
        self._pending = ""  # an unterminated last line, searched again with what follows it

    def waits_for(self, path: str) -> str:
        return f"{self.pattern!r} in {path}"

    def done_message(self, path: str) -> str:
        return f"{self.pattern!r} found in {path}"

    def reads(self, path: str) -> list[Read]:
        return [path_batch.read(path, self.offset, _READ_BYTES)]

    async def check(self, files: RemoteFiles, path: str) -> dict[str, Any] | None:
        try:
            chunk = await files.read_log(path, self.offset, _READ_BYTES)
        except RemotePathNotFoundError:
            return None
        self.offset = chunk.next_offset
        text = self._pending + chunk.text
        cut = text.rfind("\n") + 1
        complete, self._pending = text[:cut], text[cut:]
        m = re.search(self.pattern, complete, re.MULTILINE)
        if m is not None:
            start = complete.rfind("\n", 0, m.start()) + 1
            end = complete.find("\n", m.end())
            return {"match": complete[start : end if end >= 0 else None]}
        # An unterminated last line may already hold the marker (the writer may never add "\n").
        if re.search(self.pattern, self._pending) is None:
            return None
        line, self._pending = self._pending, ""
        return {"match": line}


class RemotePathTrigger(BaseTrigger):
    """Wait until a condition on the remote path ``path`` holds, polling over the shared SSH connection.

    Give exactly one of ``pattern`` and ``condition``.

    :param ssh_conn_id: Airflow SSH connection of the cluster's login node.
    :param path: the remote file or folder the condition reads.
    :param pattern: built-in condition: this regex appears in the file ``path`` (``LogPattern``).
    :param condition: import path of any other ``PathCondition`` (importable in the triggerer).
    :param condition_kwargs: its keyword arguments, JSON primitives.
    :param poll_interval: seconds between checks.
    :param log_offset: where ``pattern`` starts reading.
    :param failure_budget: seconds without one successful check before giving up with an error event.
    :param carry: JSON the deferring task needs on resume, echoed in the event.
    :param min_defer_seconds: the event waits until the trigger has run this long
        (see docs/slurm-operator.md#airflow-332-workarounds).
    :param batched: read through the process-wide ``PathPoller`` (one command per interval for
        every path wait of the connection) instead of SFTP calls of its own.
    """

    def __init__(
        self,
        ssh_conn_id: str,
        path: str,
        pattern: str | None = None,
        condition: str | None = None,
        condition_kwargs: dict[str, Any] | None = None,
        poll_interval: float = 60.0,
        log_offset: int = 0,
        failure_budget: float = 1800.0,
        carry: dict[str, Any] | None = None,
        min_defer_seconds: float = 10.0,
        batched: bool = True,
    ) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        if (pattern is None) == (condition is None):
            raise ValueError(f"RemotePathTrigger for {path}: give exactly one of pattern and condition")
        self.ssh_conn_id = ssh_conn_id
        self.path = path
        self.pattern = pattern
        self.condition = condition
        self.condition_kwargs = condition_kwargs or {}
        self.poll_interval = poll_interval
        self.log_offset = log_offset
        self.failure_budget = failure_budget
        self.carry = carry or {}
        self.min_defer_seconds = min_defer_seconds
        self.batched = batched
        self._path_watch: PathWatch | None = None

    def serialize(self) -> tuple[str, dict[str, Any]]:
        """This class's import path and every constructor argument (the subclass's, in a subclass)."""
        return class_path(type(self)), arguments(self, type(self))

    def build_condition(self) -> PathCondition:
        """A fresh condition for one wait."""
        if self.pattern is not None:
            return LogPattern(self.pattern, self.log_offset)
        assert self.condition is not None
        module, _, name = self.condition.rpartition(".")
        cls = getattr(importlib.import_module(module), name, None)
        if not (isinstance(cls, type) and issubclass(cls, PathCondition)):
            raise TypeError(f"condition {self.condition!r} is not a PathCondition")
        return cls(**self.condition_kwargs)

    async def run(self) -> AsyncIterator[TriggerEvent]:
        """Poll until the condition holds (or cannot any more); yield exactly one event."""
        started = time.monotonic()
        async with contextlib.aclosing(self._watch()) as watch:
            event = await anext(watch)
        await asyncio.sleep(max(0.0, started + self.min_defer_seconds - time.monotonic()))
        yield event

    async def not_yet(self, hook: AsyncSlurmHook, files: RemoteFiles, read_at: float) -> TriggerEvent | None:
        """After each check that found the condition unmet: an event ends the wait (a subclass's reasons).

        Read through ``files`` (batched with every other wait), whose answers are no older than
        ``read_at`` (monotonic): a subclass that learns something outside the files can tell a
        reading taken before it from one taken after. ``hook`` is for actions (scancel).
        """
        return None

    async def nap(self) -> None:
        """The pause between two checks of an unbatched wait."""
        await asyncio.sleep(self.poll_interval)

    def reads(self) -> list[Read]:
        """What ``not_yet`` reads every round, declared so that the first round fetches it (see
        ``PathCondition.reads``)."""
        return []

    def hurry(self) -> None:
        """Check again now instead of at the next interval (a batched wait: one round for all)."""
        if self._path_watch is not None:
            self._path_watch.hurry()

    async def _watch(self) -> AsyncGenerator[TriggerEvent, None]:
        condition: PathCondition | None = None
        try:
            condition = self.build_condition()
            hook = AsyncSlurmHook(self.ssh_conn_id)
            if not self.batched:
                async with contextlib.aclosing(self._direct(condition, hook)) as direct:
                    yield await anext(direct)
                return
            watch = self._path_watch = PathPoller.for_conn(self.ssh_conn_id).watch(
                self.poll_interval, lambda: [*condition.reads(self.path), *self.reads()]
            )
            try:
                async with contextlib.aclosing(self._batched(condition, hook, watch)) as batched:
                    yield await anext(batched)
            finally:
                watch.close()
        except Exception as exc:
            # Anything unexpected still ends the wait with one event; the traceback goes to the log.
            self.log.exception("%s for %s crashed", type(self).__name__, self.path)
            offset = self.log_offset if condition is None else condition.offset
            yield self._event(events.ERROR, f"trigger crashed: {type(exc).__name__}: {exc}", offset=offset)

    async def _direct(
        self, condition: PathCondition, hook: AsyncSlurmHook
    ) -> AsyncGenerator[TriggerEvent, None]:
        last_ok = time.monotonic()
        while True:
            try:
                if (event := await self._judge(condition, hook, hook, time.monotonic())) is not None:
                    yield event
                    return
                last_ok = time.monotonic()
            except condition.fatal as exc:
                yield self._event(events.ERROR, f"{self.path}: {exc}", offset=condition.offset)
                return
            except SlurmError as exc:
                if (event := self._failed(condition, last_ok, exc)) is not None:
                    yield event
                    return
            await self.nap()

    async def _batched(
        self, condition: PathCondition, hook: AsyncSlurmHook, watch: PathWatch
    ) -> AsyncGenerator[TriggerEvent, None]:
        last_ok = time.monotonic()
        while True:
            result: PathRound = await watch.next()
            files = BatchedFiles(result.answers, f"connection {self.ssh_conn_id!r}", result.index)
            missed = False
            try:
                if result.error is not None:
                    raise SlurmError(result.error)
                if (event := await self._judge(condition, files, hook, result.read_at)) is not None:
                    yield event
                    return
                last_ok = time.monotonic()
                if (soon := condition.recheck_in()) is not None:
                    watch.soon(soon)
            except NotFetched:
                missed = True  # the next round (a follow-up, at once) fetches it
            except condition.fatal as exc:
                yield self._event(events.ERROR, f"{self.path}: {exc}", offset=condition.offset)
                return
            except SlurmError as exc:
                if (event := self._failed(condition, last_ok, exc)) is not None:
                    yield event
                    return
            # A failed round answered nothing: the next one asks again what the last check asked.
            watch.report(files.asked if result.error is None else None, missed)

    async def _judge(
        self, condition: PathCondition, files: RemoteFiles, hook: AsyncSlurmHook, read_at: float
    ) -> TriggerEvent | None:
        """One check: the success event, a subclass's ending, or None to go on."""
        data = await condition.check(files, self.path)
        if data is not None:
            message = condition.done_message(self.path)
            return self._event(events.SUCCESS, message, data, offset=condition.offset)
        return await self.not_yet(hook, files, read_at)

    def _failed(self, condition: PathCondition, last_ok: float, exc: SlurmError) -> TriggerEvent | None:
        """The error event once the failure budget is spent, else None (logged; retried)."""
        if time.monotonic() - last_ok > self.failure_budget:
            message = (
                f"gave up waiting for {condition.waits_for(self.path)}: no successful check "
                f"for {self.failure_budget:.0f} s, last: {exc}; check the SSH connection "
                f"{self.ssh_conn_id!r} and the path"
            )
            return self._event(events.ERROR, message, offset=condition.offset)
        self.log.warning("polling %s failed, will retry: %s", self.path, exc)
        return None

    def _event(
        self, status: str, message: str, data: dict[str, Any] | None = None, offset: int = 0
    ) -> TriggerEvent:
        payload = SlurmEvent(status, message, log_offset=offset, data=data or {}, carry=self.carry)
        return TriggerEvent(payload.to_payload())  # type: ignore[no-untyped-call]
