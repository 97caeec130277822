"""The campaign's checkpoint wait on the plugin's RemotePathTrigger: arguments, and the condition's answer.

The sensor's real runs over SSH are in test_checkpoint_sensor_dagtest.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException
from airflow.sdk.module_loading import import_string
from slurm_operator.model import events
from slurm_operator.model.events import SlurmEvent
from slurm_operator.triggers import remote_path as path_triggers

from autoexp.campaign.tasks.checkpoint_sensor import CheckpointSensor


def test_the_sensor_rejects_a_negative_iteration() -> None:
    ckpt = CheckpointSensor(task_id="ckpt", ssh_conn_id="c", checkpoint_dir="/c", iteration=-1)
    with pytest.raises(AirflowException, match=r"^task ckpt: iteration must be >= 0, got -1"):
        ckpt.execute({})  # type: ignore[arg-type]


def test_the_sensor_s_trigger_names_the_campaign_condition_and_round_trips() -> None:
    sensor = CheckpointSensor(
        task_id="ckpt", ssh_conn_id="c", checkpoint_dir="/ckpt", iteration=200, settle_seconds=5
    )
    classpath, kwargs = sensor.trigger().serialize()
    assert kwargs["condition"] == "autoexp.campaign.triggerer.checkpoint_wait.CheckpointCondition"
    assert kwargs["condition_kwargs"] == {"iteration": 200, "settle_seconds": 5}
    assert import_string(classpath)(**kwargs).serialize() == (classpath, kwargs)


class Tree:
    """A checkpoint folder: 100 legacy, 200 torch_dist (the tracker's), 300 being written."""

    async def read_text(self, path: str) -> str:
        if path == "/ckpt/iter_0000200/metadata.json":
            return '{"sharded_backend": "torch_dist", "sharded_backend_version": 1}'
        assert path == "/ckpt/latest_checkpointed_iteration.txt"
        return "200\n"

    async def list_dir(self, path: str) -> list[str]:
        return {
            "/ckpt": [
                "iter_0000100",
                "iter_0000200",
                "iter_0000300",
                "latest_checkpointed_iteration.txt",
            ],
            "/ckpt/iter_0000100": ["mp_rank_00"],
            "/ckpt/iter_0000100/mp_rank_00": ["model_optim_rng.pt"],
            "/ckpt/iter_0000200": [".metadata", "__0_0.distcp", "metadata.json"],
            "/ckpt/iter_0000300": ["metadata.json"],
        }[path]

    async def stat(self, path: str) -> Any:
        return type("St", (), {"exists": True, "size": 100, "mtime": 1.0})()

    async def read_log(self, path: str, offset: int, max_bytes: int) -> Any:
        # The last bytes of a whole torch.save (zip) file: its end-of-central-directory record.
        assert (path, offset, max_bytes) == ("/ckpt/iter_0000100/mp_rank_00/model_optim_rng.pt", 78, 22)
        return type("Chunk", (), {"text": "PK\x05\x06" + "\x00" * 18})()


async def test_the_trigger_lists_complete_iterations(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(path_triggers, "AsyncSlurmHook", lambda _c: Tree())
    sensor = CheckpointSensor(
        task_id="ckpt",
        ssh_conn_id="c",
        checkpoint_dir="/ckpt/",
        iteration=200,
        settle_seconds=0,
        poll_interval=0.01,
        min_defer_seconds=0,
    )
    trigger = sensor.trigger()
    trigger.batched = False  # the fake answers SFTP-style calls (batched: test_batched_waits_real.py)
    (ev,) = [SlurmEvent.from_payload(e.payload) async for e in trigger.run()]
    assert (ev.status, ev.message) == (events.SUCCESS, "iteration 200 is complete in /ckpt/")
    assert ev.data == {"iterations": [100, 200]}
    assert sensor.result(ev.data) == [100, 200]
