"""The phase checkpoint wait against the real local cluster: a checkpoint, a failed or finished training."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk._shared.module_loading import import_string
from slurm_operator.events import SlurmEvent

from autoexp.experiment.triggers import PhaseCheckpointTrigger

pytestmark = pytest.mark.slurm


def make_trigger(conn_id: str, base: Path, iteration: int = 20) -> PhaseCheckpointTrigger:
    return PhaseCheckpointTrigger(
        ssh_conn_id=conn_id,
        path=str(base / "checkpoints"),
        iteration=iteration,
        failed_path=str(base / "state" / "pretrain.failed"),
        finished_path=str(base / "state" / "pretrain.finished"),
        settle_seconds=0.3,
        poll_interval=0.2,
        grace=1.0,
        min_defer_seconds=0.5,
    )


async def first_event(trigger: PhaseCheckpointTrigger) -> SlurmEvent:
    async with asyncio.timeout(60):
        async for event in trigger.run():
            return SlurmEvent.from_payload(event.payload)
    raise AssertionError("the trigger ended without an event")


def save_legacy_checkpoint(checkpoints: Path, iteration: int) -> None:
    """What Megatron leaves for a legacy-format save: the iteration folder, then the tracker."""
    rank = checkpoints / f"iter_{iteration:07d}" / "mp_rank_00"
    rank.mkdir(parents=True)
    (rank / "model_optim_rng.pt").write_bytes(b"weights")
    (checkpoints / "latest_checkpointed_iteration.txt").write_text(str(iteration))


def test_serialize_round_trips_through_an_importable_classpath(tmp_path: Path) -> None:
    trigger = make_trigger("c", tmp_path)
    path, kwargs = trigger.serialize()
    assert path == "autoexp.experiment.triggers.PhaseCheckpointTrigger"
    assert import_string(path)(**kwargs).serialize() == (path, kwargs)


async def test_complete_checkpoint_is_reported(slurm_cluster: Any, tmp_path: Path) -> None:
    save_legacy_checkpoint(tmp_path / "checkpoints", 20)
    event = await first_event(make_trigger(slurm_cluster.conn_id, tmp_path))
    assert event.status == "success", event.message
    assert event.data["iterations"] == [20]


async def test_failed_training_ends_the_wait_at_once(slurm_cluster: Any, tmp_path: Path) -> None:
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "pretrain.failed").write_text("AirflowException: 3 attempts without progress\n")
    loop = asyncio.get_running_loop()
    start = loop.time()
    event = await first_event(make_trigger(slurm_cluster.conn_id, tmp_path))
    assert event.status == "error"
    assert event.data == {"training_ended": True}
    assert "its training failed" in event.message
    assert "3 attempts without progress" in event.message
    assert loop.time() - start < 20  # the grace period, not the wait budget


async def test_finished_training_without_the_iteration_ends_the_wait(
    slurm_cluster: Any, tmp_path: Path
) -> None:
    save_legacy_checkpoint(tmp_path / "checkpoints", 20)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "pretrain.finished").write_text("done\n")
    event = await first_event(make_trigger(slurm_cluster.conn_id, tmp_path, iteration=40))
    assert event.status == "error"
    assert event.data == {"training_ended": True}
    assert "iteration 40" in event.message
    assert "without saving it" in event.message


class FakeTI:
    """The task instance the triggerer attaches to a trigger (only what on_kill reads)."""

    dag_id, task_id, run_id, map_index = "d", "pretrain.train", "r1", -1


@pytest.mark.parametrize(("state", "cancelled"), [(None, False), ("restarting", False), ("failed", True)])
async def test_clearing_keeps_the_job_and_marking_failed_cancels_it(
    slurm_cluster: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: str | None, cancelled: bool
) -> None:
    from airflow.sdk.execution_time.task_runner import RuntimeTaskInstance
    from slurm_operator.hooks import SlurmHook

    from autoexp.experiment.triggers import CampaignJobTrigger

    def states(**kwargs: Any) -> dict[str, dict[str, str | None]]:
        # The triggerer answers from the metadata DB; this test has none, so it answers what a clear
        # (no state, restarting) or a mark-failed leaves there.
        assert kwargs["task_ids"] == ["pretrain.train"]
        return {"r1": {"pretrain.train": state}}

    monkeypatch.setattr(RuntimeTaskInstance, "get_task_states", staticmethod(states))
    hook = SlurmHook(slurm_cluster.conn_id)
    job = hook.submit(
        script="#!/bin/bash\nsleep 120\n",
        upload_to=str(tmp_path / "job.sh"),
        sbatch_args=["--output=/dev/null"],
    )
    try:
        trigger = CampaignJobTrigger(ssh_conn_id=slurm_cluster.conn_id, job_id=job)
        trigger.task_instance = FakeTI()  # type: ignore[assignment]
        assert trigger.serialize()[0] == "autoexp.experiment.triggers.CampaignJobTrigger"
        await trigger.on_kill()
        record = hook.job_states([job]).records[job]
        assert (record.state.value == "CANCELLED") is cancelled, record
    finally:
        hook.cancel(job)
