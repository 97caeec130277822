"""100 checkpoint and log waits over 10 run folders in one event loop, counted by the SSH server.

As in the triggerer: every trigger's ``run()`` on one loop, the real local cluster behind a counting
sshd. Per poll interval the server must run one batched path command for all 100 waits and one
job-state command (a training's job trigger alongside), nothing else (no SFTP session); a
half-written checkpoint is never reported complete, and the waits end when their files come.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import pytest
from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.model.events import SlurmEvent
from slurm_operator.triggers import path_poller
from slurm_operator.triggers.remote_path import RemotePathTrigger
from slurm_operator.triggers.slurm_job import SlurmJobTrigger

from autoexp.campaign.triggerer.checkpoint_wait import PhaseCheckpointTrigger
from tests.fixtures import checkpoint_layouts as layouts
from tests.slurm_operator.integration.ssh_counter import start_counting_sshd

pytestmark = [pytest.mark.slurm, pytest.mark.slow]

INTERVAL = 3.0
ITERATIONS = (20, 30, 40)


def waits(conn_id: str, run: Path) -> list[RemotePathTrigger]:
    """Ten waits on one run folder: three checkpoint iterations (two waits each), four log markers."""
    common: dict[str, Any] = {"poll_interval": INTERVAL, "min_defer_seconds": 0}
    out: list[RemotePathTrigger] = [
        PhaseCheckpointTrigger(
            conn_id,
            str(run / "checkpoints"),
            it,
            failed_path=str(run / "state" / "train.failed"),
            finished_path=str(run / "state" / "train.finished"),
            stopped_path=str(run / "state" / "train.stopped"),
            settle_seconds=0.5,
            grace=1.0,
            **common,
        )
        for it in ITERATIONS
        for _ in range(2)
    ]
    out += [
        RemotePathTrigger(conn_id, str(run / "train.log"), pattern=f"^eval {k} done", **common)
        for k in range(4)
    ]
    return out


async def first(trigger: Any) -> SlurmEvent:
    async for ev in trigger.run():
        return SlurmEvent.from_payload(ev.payload)
    raise AssertionError("no event")


async def until_done(tasks: list[asyncio.Task[SlurmEvent]], count: int, limit_s: float) -> None:
    async def all_done() -> None:
        while sum(t.done() for t in tasks) < count:
            await asyncio.wait([t for t in tasks if not t.done()], return_when=asyncio.FIRST_COMPLETED)

    await asyncio.wait_for(all_done(), limit_s)  # asyncio.timeout is Python 3.11+


async def test_a_hundred_waits_cost_one_path_command_and_one_state_command_per_interval(
    slurm_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sshd = start_counting_sshd(slurm_cluster, tmp_path / "sshd")
    monkeypatch.setenv(sshd.conn_env_var, sshd.conn_json)
    hook = SlurmHook(slurm_cluster.conn_id)
    job = hook.submit(
        script="#!/bin/bash\nsleep 300\n", sbatch_args=["--job-name=batched-waits", "--output=/dev/null"]
    )
    runs = [tmp_path / f"run{i}" for i in range(10)]
    for run in runs:
        layouts.legacy(run / "checkpoints", 10)
        (run / "train.log").write_text("iteration 10\n")
    triggers: list[Any] = [t for run in runs for t in waits(sshd.conn_id, run)]
    assert len(triggers) == 100
    triggers.append(SlurmJobTrigger(sshd.conn_id, job, poll_interval=INTERVAL, stream_logs=False))
    tasks = [asyncio.create_task(first(t)) for t in triggers]
    try:
        await asyncio.sleep(2 * INTERVAL)  # connection up, first rounds and their follow-ups done
        t0 = time.time()
        await asyncio.sleep(4 * INTERVAL)
        served = sshd.commands(t0, time.time())
        paths = [c for c in served if "#path-batch" in c.text]
        states = [c for c in served if "sacct" in c.text]
        assert len(paths) + len(states) == len(served), [c.text[:80] for c in served]  # no SFTP, nothing else
        # At most one of each per interval (+1 for the window's edges), however many waits. Fewer is
        # the loaded machine: a round that outlasts the interval delays the next (seen at load 25).
        assert 1 <= len(paths) <= 5, (
            f"{len(paths)} path commands in 4 intervals: {[round(c.at - t0, 2) for c in paths]}"
        )
        assert 1 <= len(states) <= 5, f"{len(states)} state commands in 4 intervals"
        assert not any(t.done() for t in tasks)

        # run0: iteration 20 saved up to its last file (tracker already moved): never complete.
        ckpt0 = runs[0] / "checkpoints"
        layouts.torch_dist(ckpt0, 20, stop_before="metadata.json", tracker=False)
        layouts.set_tracker(ckpt0, 20)
        # run1: 20 and 30 complete; run2: a log marker; run3: the training failed.
        layouts.legacy(runs[1] / "checkpoints", 20)
        layouts.legacy(runs[1] / "checkpoints", 30)
        with (runs[2] / "train.log").open("a") as log:
            log.write("eval 2 done at 10\n")
        (runs[3] / "state").mkdir()
        (runs[3] / "state" / "train.failed").write_text("OOM in step 12\n")
        t1 = time.time()
        # Bounded by rounds below, not by the clock: on a loaded box 18 s were too few (seen at load 25).
        await until_done(tasks, 11, 40 * INTERVAL)
        await asyncio.sleep(2 * INTERVAL)
        done = {i: tasks[i].result() for i, t in enumerate(tasks) if t.done()}
        assert sorted(done) == [10, 11, 12, 13, 28, *range(30, 36)], sorted(done)
        # Every complete iteration up to the tracker (30), for the conversions mapped over them.
        assert all(done[i].data == {"iterations": [10, 20, 30]} for i in (10, 11, 12, 13))
        assert done[28].data == {"match": "eval 2 done at 10"}
        for i in range(30, 36):  # the failed training's marker, read through the batch too
            assert done[i].status == "error", done[i].message
            assert "its training failed" in done[i].message
            assert "OOM in step 12" in done[i].message
        served = sshd.commands(t1, time.time())
        paths = [c for c in served if "#path-batch" in c.text]
        rounds = (time.time() - t1) / INTERVAL
        assert len(paths) <= (rounds + 1) * (1 + path_poller.FOLLOW_UPS), len(paths)

        (ckpt0 / "iter_0000020" / "metadata.json").write_text('{"sharded_backend": "torch_dist"}')
        await asyncio.wait_for(asyncio.wait(tasks[:2]), 40 * INTERVAL)
        assert tasks[0].result().data == {"iterations": [10, 20]}
        assert not tasks[2].done()  # iteration 30 of run0 is still to come
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        hook.cancel(job)
        hook.close()
        sshd.stop()
