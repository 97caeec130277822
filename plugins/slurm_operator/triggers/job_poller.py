"""Process-wide job-state poller: all Slurm triggers of one cluster share one batched query per interval."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from slurm_operator.model.exceptions import SlurmError
from slurm_operator.model.records import JobRecord, JobStates, RemoteStat
from slurm_operator.model.states import SlurmState
from slurm_operator.triggers.batch_poller import BatchPoller, Mailbox

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


class Subscription(Mailbox[PollResult]):
    """One trigger's interest in one job id (and the files whose change means progress)."""

    def __init__(self, poller: SlurmPoller, job_id: str, interval: float, watch: Sequence[str] = ()) -> None:
        super().__init__()
        self.poller = poller
        self.job_id = job_id
        self.interval = interval
        self.watch = tuple(watch)

    def close(self) -> None:
        """Stop receiving results (the poller stops when nobody subscribes)."""
        self.poller._unsubscribe(self)


class SlurmPoller(BatchPoller):
    """Batches the job-state queries of every trigger of one SSH connection id in this process.

    1,000 deferred jobs on a cluster cost one ``sacct -j id1,id2,...`` per interval; the interval is
    the smallest one any subscriber asked for. A failed round is reported to every subscriber.
    Watched paths (hang detection) are statted by that same command, except those of jobs the
    previous round saw pending: a queued job cannot hang, and a campaign queues many.
    """

    task_name = "slurm-poller"

    def __init__(self, ssh_conn_id: str, hook: _StatesHook) -> None:
        super().__init__(ssh_conn_id, hook)
        self._subs: dict[str, set[Subscription]] = {}
        self._last_state: dict[str, SlurmState] = {}

    def subscribe(self, job_id: str, interval: float, watch: Sequence[str] = ()) -> Subscription:
        """Register interest in ``job_id``; results arrive every ``interval`` seconds or sooner.

        ``watch``: paths to stat in the same batched query while the job may be running.
        """
        sub = Subscription(self, job_id, interval, watch)
        self._subs.setdefault(job_id, set()).add(sub)
        self._started()
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

    def _listening(self) -> bool:
        return bool(self._subs)

    async def _poll(self) -> None:
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
