"""What both batching pollers share: one instance per (SSH connection id, event loop), one background
task that runs while anyone listens, backoff after failed rounds, and a mailbox per listener.

The triggerer runs every trigger on one event loop, so a poller per (connection, loop) turns N waits
into one remote command per interval over the async hook's one shared SSH connection, whatever N is.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections.abc import Callable
from typing import Any, ClassVar, Generic, TypeVar

R = TypeVar("R")
P = TypeVar("P", bound="BatchPoller")


class Mailbox(Generic[R]):
    """One listener's latest answer: a slow listener skips stale rounds instead of queueing them."""

    def __init__(self) -> None:
        self._latest: R | None = None
        self._ready = asyncio.Event()

    def _offer(self, result: R) -> None:
        self._latest = result
        self._ready.set()

    async def next(self) -> R:
        """Wait for the next round that answered this listener."""
        await self._ready.wait()
        self._ready.clear()
        assert self._latest is not None
        return self._latest


class BatchPoller:
    """The shared loop; a subclass says who listens (``_listening``), how often (``_interval``) and
    what one round does (``_poll``).

    A failed round is the subclass's to report to its listeners (each applies its own failure
    budget); it counts in ``_failures``, and the next round comes sooner, with exponential backoff and
    jitter, capped by the interval.
    """

    hook_factory: ClassVar[Callable[[str], Any] | None] = None
    _instances: ClassVar[dict[tuple[str, int], Any]] = {}
    task_name: ClassVar[str] = "poller"

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls._instances = {}  # each kind of poller has its own per-connection instances

    def __init__(self, ssh_conn_id: str, hook: Any) -> None:
        self.ssh_conn_id = ssh_conn_id
        self.hook = hook
        self.rounds = 0  # remote commands issued, for benchmarks and tests
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failures = 0

    @classmethod
    def for_conn(cls: type[P], ssh_conn_id: str) -> P:
        """The poller of this connection id on the running event loop (created on first use)."""
        key = (ssh_conn_id, id(asyncio.get_running_loop()))
        poller = cls._instances.get(key)
        if poller is None:
            factory = cls.hook_factory or _default_hook_factory
            poller = cls._instances[key] = cls(ssh_conn_id, factory(ssh_conn_id))
        return poller

    def _listening(self) -> bool:
        raise NotImplementedError

    def _interval(self) -> float:
        raise NotImplementedError

    async def _poll(self) -> None:
        raise NotImplementedError

    def _started(self) -> None:
        """A listener joined: run the loop if it is not running, and wake it to recompute the interval."""
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"{self.task_name}-{self.ssh_conn_id}"
            )
        self._wake.set()

    async def _run(self) -> None:
        loop_key = (self.ssh_conn_id, id(asyncio.get_running_loop()))
        try:
            last = 0.0
            while self._listening():
                delay = self._next_delay(last)
                if delay > 0:
                    self._wake.clear()
                    with contextlib.suppress(asyncio.TimeoutError):
                        # Woken early by a new listener (maybe with a shorter interval) or the last leaving.
                        await asyncio.wait_for(self._wake.wait(), timeout=delay)
                    continue
                last = time.monotonic()
                await self._poll()
        finally:
            if self._instances.get(loop_key) is self and not self._listening():
                del self._instances[loop_key]

    def _wait(self) -> float:
        """Seconds between rounds: the interval, or the backoff after failed rounds."""
        wait = self._interval()
        if self._failures:
            wait = min(wait, 2.0 ** min(self._failures, 6)) * random.uniform(0.5, 1.0)  # noqa: S311
        return wait

    def _next_delay(self, last: float) -> float:
        return last + self._wait() - time.monotonic() if last else 0.0


def _default_hook_factory(ssh_conn_id: str) -> Any:
    from slurm_operator.hooks.slurm_async import AsyncSlurmHook

    return AsyncSlurmHook(ssh_conn_id)
