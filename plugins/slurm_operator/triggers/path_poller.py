"""Process-wide remote-path poller: all path waits of one cluster share one batched command per interval."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from slurm_operator.model.exceptions import SlurmError
from slurm_operator.model.records import CommandResult
from slurm_operator.remote import parsers, path_batch
from slurm_operator.remote.path_batch import Answer, Read
from slurm_operator.triggers.batch_poller import BatchPoller, Mailbox

log = logging.getLogger(__name__)

# A round whose answers sent a wait looking further (a tracker that moved: list the folder, then the
# new iteration's files...) is followed at once by rounds for those waits only, batched again; the
# chain is bounded so that one interval costs at most 1 + FOLLOW_UPS commands, for any number of waits.
FOLLOW_UPS = 4
# How long a round waits for its waits to have looked at the answers before it follows up.
REPORT_WAIT = 2.0


class _RunHook(Protocol):
    async def run(
        self, command: str, *, stdin: str | None = None, limit_s: float | None = None
    ) -> CommandResult: ...


@dataclass(frozen=True)
class PathRound:
    """What one round told one wait: ``answers``, or ``error`` (``failures`` rounds failed in a row);
    ``read_at``: monotonic time the round's command was sent (nothing in it is older)."""

    answers: Mapping[Read, Answer] = field(default_factory=dict)
    error: str | None = None
    failures: int = 0
    read_at: float = field(default_factory=time.monotonic)

    @functools.cached_property
    def index(self) -> path_batch.AnswerIndex:
        """The answers by path, built once for every wait of the round."""
        return path_batch.AnswerIndex.of(self.answers)


class PathWatch(Mailbox[PathRound]):
    """One wait's interest: what it reads every round (``reads()`` and what its last check asked)."""

    def __init__(self, poller: PathPoller, interval: float, reads: Callable[[], Iterable[Read]]) -> None:
        super().__init__()
        self.poller = poller
        self.interval = interval
        self._reads = reads
        self._asked: tuple[Read, ...] = ()
        self.missed = False
        self.due: float | None = None  # monotonic time of an early round this wait asked for

    def requests(self) -> list[Read]:
        """This round's requests: the declared ones, and the last check's (a file's older read
        windows dropped: a log read on from a new offset replaces the old one)."""
        declared = list(self._reads())
        moved = {r.path for r in declared if r.kind == "read"}
        kept = [r for r in self._asked if not (r.kind == "read" and r.path in moved)]
        return list(dict.fromkeys([*declared, *kept]))

    def _offer(self, result: PathRound) -> None:
        self.missed = False
        super()._offer(result)

    def report(self, asked: Iterable[Read] | None, missed: bool) -> None:
        """After a check: what it asked (the next rounds repeat it; None: as before) and whether
        something was missing."""
        if asked is not None:
            self._asked = tuple(asked)
        self.missed = missed
        self.poller._reported(self)

    def soon(self, seconds: float) -> None:
        """Ask for a round in ``seconds`` (e.g. when a quiet period ends), if sooner than the
        interval; the poller keeps at least half an interval between rounds."""
        self.due = time.monotonic() + max(0.0, seconds)
        self.poller._wake.set()

    def hurry(self) -> None:
        """Ask for a round now (something outside the files may have changed the outcome)."""
        self.poller._hurry = True
        self.poller._wake.set()

    def close(self) -> None:
        """Stop receiving rounds (the poller stops when nobody watches)."""
        self.poller._unwatch(self)


class PathPoller(BatchPoller):
    """Batches the remote-path reads of every wait of one SSH connection id in this process.

    Like the job-state ``SlurmPoller``, N waits cost one ``path_batch`` command per interval (plus a
    bounded chain of follow-ups when waits need more than they asked for); the interval is the
    smallest any wait asked for. A failed round is offered to every wait.
    """

    task_name = "path-poller"

    def __init__(self, ssh_conn_id: str, hook: _RunHook) -> None:
        super().__init__(ssh_conn_id, hook)
        self._watches: dict[PathWatch, None] = {}
        self._waiting: set[PathWatch] = set()
        self._all_reported = asyncio.Event()
        self._hurry = False

    def watch(self, interval: float, reads: Callable[[], Iterable[Read]]) -> PathWatch:
        """Register a wait; rounds arrive every ``interval`` seconds or sooner."""
        w = PathWatch(self, interval, reads)
        self._watches[w] = None
        # Woken to recompute the interval only: a new wait joins the next round (the first one of
        # a poller comes at once), so waits deferring all the time never add commands.
        self._started()
        return w

    def _unwatch(self, w: PathWatch) -> None:
        self._watches.pop(w, None)
        self._reported(w)
        if not self._watches:
            self._wake.set()

    def _reported(self, w: PathWatch) -> None:
        self._waiting.discard(w)
        if not self._waiting:
            self._all_reported.set()

    def _interval(self) -> float:
        return min((w.interval for w in self._watches), default=60.0)

    def _listening(self) -> bool:
        return bool(self._watches)

    async def _poll(self) -> None:
        await asyncio.sleep(0)  # waits created in the same breath join this round
        self._hurry = False
        pending = list(self._watches)
        for _ in range(1 + FOLLOW_UPS):
            pending = await self._round(pending)
            if not pending or self._failures:
                break

    def _next_delay(self, last: float) -> float:
        if self._hurry or not last:
            return 0.0
        wait = self._wait()
        at = last + wait
        due = min((w.due for w in self._watches if w.due is not None), default=None)
        if due is not None:  # an early round, at most one per half interval: <= 2 commands per interval
            at = min(at, max(due, last + wait / 2))
        return at - time.monotonic()

    async def _round(self, watches: list[PathWatch]) -> list[PathWatch]:
        """One batched command for ``watches``; returns those that found something missing."""
        requests = list(dict.fromkeys(r for w in watches for r in w.requests()))
        for w in watches:
            w.due = None
        result = PathRound()
        if requests:
            self.rounds += 1
            try:
                result = PathRound(await self._query(requests), read_at=result.read_at)
                self._failures = 0
            except Exception as exc:
                # Anything costs one round, never the poller task: every waiting trigger depends on it.
                if not isinstance(exc, SlurmError):
                    log.exception("path poll of %d request(s) on %s raised", len(requests), self.ssh_conn_id)
                self._failures += 1
                log.warning("path poll on %s failed (%d in a row): %s", self.ssh_conn_id, self._failures, exc)
                result = PathRound(error=str(exc), failures=self._failures)
        self._waiting = set(watches)
        self._all_reported.clear()
        for w in watches:
            w._offer(result)
        if result.error is not None:
            return []
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(self._all_reported.wait(), REPORT_WAIT)
        return [w for w in watches if w.missed and w in self._watches]

    async def _query(self, requests: list[Read]) -> dict[Read, Answer]:
        command = path_batch.batch_command()
        result = await self.hook.run(command, stdin=path_batch.batch_input(requests))
        what = f"batched path query of {len(requests)} path(s)"
        parsers.check_command(command, result.exit_status, result.stdout, result.stderr, what)
        return path_batch.parse_batch(result.stdout, requests)
