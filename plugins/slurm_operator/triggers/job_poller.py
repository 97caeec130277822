"""Process-wide job-state poller: all Slurm triggers of one cluster share one batched query per interval."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

from slurm_operator.model.exceptions import SlurmError
from slurm_operator.model.records import JobRecord, JobStates, RemoteStat
from slurm_operator.model.states import SlurmState

log = logging.getLogger(__name__)


class _StatesHook(Protocol):
    async def job_states(self, job_ids: list[str], watch: Sequence[str] = ()) -> JobStates: ...


@dataclass(frozen=True)
class PollResult:
    """What one poll round told one subscriber.

    ``record`` is None when the job was not in the answer (not yet in accounting, or purged);
    ``authoritative`` says whether the answer came from accounting (sacct), where absence means
    something, or from a fallback (squeue/scontrol) that forgets finished jobs. ``error`` is set
    (and ``record`` None) when the round failed; ``failures`` counts consecutive failed rounds.
    ``remote_now`` (the cluster's clock) and ``files`` (stats of the subscription's watched paths)
    are set when this round statted them.
    """

    record: JobRecord | None
    authoritative: bool
    error: str | None = None
    failures: int = 0
    polled_at: float = 0.0
    remote_now: float | None = None
    files: dict[str, RemoteStat] = field(default_factory=dict)


class Subscription:
    """One trigger's interest in one job id (and the files whose change means progress)."""

    def __init__(self, poller: SlurmPoller, job_id: str, interval: float, watch: Sequence[str] = ()) -> None:
        self.poller = poller
        self.job_id = job_id
        self.interval = interval
        self.watch = tuple(watch)
        self._latest: PollResult | None = None
        self._ready = asyncio.Event()

    def _offer(self, result: PollResult) -> None:
        # Only the newest answer matters: a slow consumer skips stale rounds instead of queueing them.
        self._latest = result
        self._ready.set()

    async def next(self) -> PollResult:
        """Wait for the next poll round that included this job."""
        await self._ready.wait()
        self._ready.clear()
        assert self._latest is not None
        return self._latest

    def close(self) -> None:
        """Stop receiving results (the poller stops when nobody subscribes)."""
        self.poller._unsubscribe(self)


class SlurmPoller:
    """Batches the job-state queries of every trigger of one SSH connection id in this process.

    One instance exists per (connection id, event loop): the triggerer runs all triggers on one
    loop, so 1,000 deferred jobs on a cluster cost one ``sacct -j id1,id2,...`` per interval over
    the async hook's one shared SSH connection. The interval is the smallest one any subscriber asked
    for. A failed round is reported to every subscriber (each trigger applies its own failure
    budget) and retried sooner, with exponential backoff and jitter, capped by the interval.
    Watched paths (hang detection) are statted by that same command, except those of jobs the
    previous round saw pending: a queued job cannot hang, and a campaign queues many.
    """

    hook_factory: ClassVar[Callable[[str], _StatesHook] | None] = None
    _instances: ClassVar[dict[tuple[str, int], SlurmPoller]] = {}

    def __init__(self, ssh_conn_id: str, hook: _StatesHook) -> None:
        self.ssh_conn_id = ssh_conn_id
        self.hook = hook
        self.rounds = 0  # batched queries issued, for benchmarks and tests
        self._subs: dict[str, set[Subscription]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._failures = 0
        self._last_state: dict[str, SlurmState] = {}

    @classmethod
    def for_conn(cls, ssh_conn_id: str) -> SlurmPoller:
        """The poller of this connection id on the running event loop (created on first use)."""
        key = (ssh_conn_id, id(asyncio.get_running_loop()))
        poller = cls._instances.get(key)
        if poller is None:
            factory = cls.hook_factory or _default_hook_factory
            poller = cls(ssh_conn_id, factory(ssh_conn_id))
            cls._instances[key] = poller
        return poller

    def subscribe(self, job_id: str, interval: float, watch: Sequence[str] = ()) -> Subscription:
        """Register interest in ``job_id``; results arrive every ``interval`` seconds or sooner.

        ``watch``: paths to stat in the same batched query while the job may be running.
        """
        sub = Subscription(self, job_id, interval, watch)
        self._subs.setdefault(job_id, set()).add(sub)
        if self._task is None or self._task.done():
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"slurm-poller-{self.ssh_conn_id}"
            )
        self._wake.set()
        return sub

    @property
    def job_ids(self) -> list[str]:
        """Job ids currently watched."""
        return sorted(self._subs)

    def _unsubscribe(self, sub: Subscription) -> None:
        subs = self._subs.get(sub.job_id)
        if subs is not None:
            subs.discard(sub)
            if not subs:
                del self._subs[sub.job_id]
                self._last_state.pop(sub.job_id, None)
        if not self._subs:
            self._wake.set()

    def _interval(self) -> float:
        return min((s.interval for subs in self._subs.values() for s in subs), default=60.0)

    async def _run(self) -> None:
        loop_key = (self.ssh_conn_id, id(asyncio.get_running_loop()))
        try:
            last = 0.0
            while self._subs:
                delay = self._next_delay(last)
                if delay > 0:
                    self._wake.clear()
                    with contextlib.suppress(asyncio.TimeoutError):
                        # Woken early by a new subscriber (maybe with a shorter interval) or the last leaving.
                        await asyncio.wait_for(self._wake.wait(), timeout=delay)
                    continue
                last = time.monotonic()
                await self._poll_once()
        finally:
            if self._instances.get(loop_key) is self and not self._subs:
                del self._instances[loop_key]

    def _next_delay(self, last: float) -> float:
        wait = self._interval()
        if self._failures:
            backoff = min(wait, 2.0 ** min(self._failures, 6)) * random.uniform(0.5, 1.0)  # noqa: S311
            wait = backoff
        return last + wait - time.monotonic() if last else 0.0

    async def _poll_once(self) -> None:
        ids = self.job_ids
        if not ids:
            return
        self.rounds += 1
        now = time.time()
        watch = self._watched_paths()
        try:
            states = await self.hook.job_states(ids, watch)
        except Exception as exc:
            # Anything (a SlurmError, or a transport error the hook let through) costs one round,
            # never the poller task itself: every waiting trigger depends on it.
            if not isinstance(exc, SlurmError):
                log.exception("slurm poll of %d job(s) on %s raised", len(ids), self.ssh_conn_id)
            self._failures += 1
            log.warning(
                "slurm poll of %d job(s) on %s failed (%d in a row): %s",
                len(ids),
                self.ssh_conn_id,
                self._failures,
                exc,
            )
            result = PollResult(None, False, error=str(exc), failures=self._failures, polled_at=now)
            for subs in list(self._subs.values()):
                for sub in list(subs):
                    sub._offer(result)
            return
        self._failures = 0
        for job_id, subs in list(self._subs.items()):
            record = states.records.get(job_id)
            if record is not None:
                self._last_state[job_id] = record.state
            for sub in list(subs):
                files = {p: states.files[p] for p in sub.watch if p in states.files}
                sub._offer(
                    PollResult(
                        record,
                        states.authoritative,
                        polled_at=now,
                        remote_now=states.remote_now,
                        files=files,
                    )
                )

    def _watched_paths(self) -> list[str]:
        paths: dict[str, None] = {}
        for job_id, subs in self._subs.items():
            if self._last_state.get(job_id) is SlurmState.PENDING:
                continue
            for sub in subs:
                paths.update(dict.fromkeys(sub.watch))
        return list(paths)


def _default_hook_factory(ssh_conn_id: str) -> Any:
    from slurm_operator.hooks.slurm_async import AsyncSlurmHook

    return AsyncSlurmHook(ssh_conn_id)
