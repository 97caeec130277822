"""Tests for what both batching pollers share (pure scheduling logic, no hook is called)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from slurm_operator.triggers.batch_poller import BatchPoller, Mailbox
from slurm_operator.triggers.job_poller import SlurmPoller
from slurm_operator.triggers.path_poller import PathPoller


async def test_a_mailbox_hands_only_the_newest_answer_to_a_slow_listener() -> None:
    box: Mailbox[int] = Mailbox()
    for n in (1, 2, 3):
        box._offer(n)
    assert await box.next() == 3
    with pytest.raises(asyncio.TimeoutError):
        await asyncio.wait_for(box.next(), 0.05)  # nothing new: no stale round comes after


async def test_each_kind_of_poller_has_its_own_instance_per_connection(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(BatchPoller, "hook_factory", staticmethod(lambda conn: f"hook of {conn}"))
    job, path = SlurmPoller.for_conn("c1"), PathPoller.for_conn("c1")
    assert type(job) is SlurmPoller
    assert type(path) is PathPoller
    assert SlurmPoller.for_conn("c1") is job
    assert PathPoller.for_conn("c1") is path
    assert job.hook == "hook of c1"
    SlurmPoller._instances.clear()
    PathPoller._instances.clear()


class _Counting(BatchPoller):
    def __init__(self, conn: str, hook: Any, interval: float = 0.01) -> None:
        super().__init__(conn, hook)
        self.interval = interval
        self.polls = 0

    def _listening(self) -> bool:
        return self.polls < 3

    def _interval(self) -> float:
        return self.interval

    async def _poll(self) -> None:
        self.polls += 1
        self._failures = self.polls  # every round fails


def test_failed_rounds_back_off_exponentially_with_jitter_capped_by_the_interval(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    poller = _Counting("c", None, interval=10.0)
    assert poller._wait() == 10.0
    for failures, low in ((1, 1.0), (2, 2.0), (3, 4.0), (4, 5.0)):
        poller._failures = failures
        monkeypatch.setattr("random.uniform", lambda a, b: a)
        assert poller._wait() == low
        monkeypatch.setattr("random.uniform", lambda a, b: b)
        assert poller._wait() == min(10.0, 2.0 * low)


async def test_the_loop_runs_while_anyone_listens_then_ends_and_forgets_itself() -> None:
    poller = _Counting.for_conn("c")
    poller._started()
    assert poller._task is not None
    await asyncio.wait_for(poller._task, 10)
    assert poller.polls == 3
    assert not _Counting._instances
