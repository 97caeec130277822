"""Tests for the shared poller's batching (pure scheduling logic).

The hook is a fake here: what is under test is that N subscribers cost one query per round and that
a failed round reaches everyone. The real server-side command count is measured against the local
cluster in tests/slurm_operator/integration and bench/bench_triggerer.py.
"""

from __future__ import annotations

import asyncio

import pytest
from slurm_operator.model.states import SlurmState
from slurm_operator.triggers.job_poller import SlurmPoller

from tests.support.fake_slurm import FakeSlurm


@pytest.fixture
def fake_hook(monkeypatch: pytest.MonkeyPatch) -> FakeSlurm:
    hook = FakeSlurm()
    monkeypatch.setattr(SlurmPoller, "hook_factory", staticmethod(lambda _conn: hook))
    return hook


async def test_one_query_per_round_for_many_subscribers(fake_hook: FakeSlurm) -> None:
    fake_hook.states = [{str(i): SlurmState.RUNNING for i in range(20)}]
    poller = SlurmPoller.for_conn("c1")
    # 5 s: every wait reads the first round before a second can start (0.01 s polled twice under load)
    subs = [poller.subscribe(str(i), 5) for i in range(20)]
    assert SlurmPoller.for_conn("c1") is poller
    results = await asyncio.gather(*(s.next() for s in subs))
    assert [r.record.state for r in results if r.record] == [SlurmState.RUNNING] * 20
    assert len(fake_hook.calls) == 1
    assert sorted(fake_hook.calls[0]) == sorted(str(i) for i in range(20))
    for s in subs:
        s.close()
    await asyncio.sleep(0.05)  # let the poller notice it has nobody left
    assert poller._task is not None
    assert poller._task.done()
    assert SlurmPoller.for_conn("c1") is not poller


async def test_failed_round_reaches_every_subscriber_and_recovers(fake_hook: FakeSlurm) -> None:
    fake_hook.states = [{"1": SlurmState.COMPLETED}]
    fake_hook.down = 1
    poller = SlurmPoller.for_conn("c2")
    # A 5 s interval: the retry after the failed round comes 1-2 s later (backoff), so both waits
    # read the failed round (a wait reads only the newest round: with 0.01 s, a loaded machine
    # handed one of them the retry's instead).
    a, b = poller.subscribe("1", 5), poller.subscribe("2", 5)
    ra, rb = await asyncio.gather(a.next(), b.next())
    assert ra.error == rb.error == "ssh: connection refused"
    assert ra.failures == 1
    # The backoff after one failure (2 s at most) is shorter than the interval: the retry succeeds.
    ra = await asyncio.wait_for(a.next(), 5)
    assert ra.record is not None
    assert ra.record.state is SlurmState.COMPLETED
    assert ra.failures == 0
    rb = await asyncio.wait_for(b.next(), 5)
    assert rb.record is None
    assert rb.authoritative
    a.close()
    b.close()


async def test_watched_paths_ride_on_the_same_query_and_skip_pending_jobs(fake_hook: FakeSlurm) -> None:
    fake_hook.states = [{"1": SlurmState.RUNNING, "2": SlurmState.PENDING, "3": SlurmState.RUNNING}]
    fake_hook.clock = 10.0
    poller = SlurmPoller.for_conn("c3")
    one = poller.subscribe("1", 0.01, ["/r/1.out", "/r/ckpt"])
    two = poller.subscribe("2", 0.01, ["/r/2.out", "/r/ckpt"])
    three = poller.subscribe("3", 0.01)  # no hang detection: nothing to stat
    first = await asyncio.gather(one.next(), two.next(), three.next())
    # One command per round carries every watched path (shared ones once)...
    assert len(fake_hook.calls) == 1
    assert fake_hook.watched[0] == ["/r/1.out", "/r/ckpt", "/r/2.out"]
    # ...and each subscriber gets the cluster's clock and the stats of its own paths only.
    assert [sorted(r.files) for r in first] == [["/r/1.out", "/r/ckpt"], ["/r/2.out", "/r/ckpt"], []]
    assert first[0].remote_now == 10.0
    # Job 2 was pending: the next round does not stat its own paths (the shared one stays for job 1).
    await asyncio.gather(one.next(), two.next(), three.next())
    assert fake_hook.watched[1] == ["/r/1.out", "/r/ckpt"]
    for sub in (one, two, three):
        sub.close()
