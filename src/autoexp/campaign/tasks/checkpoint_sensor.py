"""CheckpointSensor: the Slurm plugin's remote-path sensor waiting for a complete Megatron checkpoint."""

from __future__ import annotations

from typing import Any

from airflow.sdk.exceptions import AirflowException
from slurm_operator.sensors.remote_path import RemotePathSensor
from slurm_operator.triggers.remote_path import RemotePathTrigger

from autoexp.campaign.triggerer.checkpoint_wait import checkpoint_condition


class CheckpointSensor(RemotePathSensor):
    """Wait until a Megatron checkpoint folder holds a complete ``iteration``; returns the complete ones.

    Complete by the files its format writes last, never by sizes or age (``checkpoint_layout``,
    docs/checkpoints.md): the tracker is at ``iteration`` or beyond and ``iter_%07d`` holds
    torch_dist's ``metadata.json`` and ``.metadata``, or legacy ``*.pt`` files that each end with
    their zip directory; the probe must then read the same for ``settle_seconds``.
    Returns the sorted list of complete iterations up to the tracker (for ``.expand()``).

    :param checkpoint_dir: Megatron's ``--save`` folder.
    :param iteration: the iteration to wait for.
    :param settle_seconds: how long the complete iteration's marker files must stay unchanged.
    Other parameters: ``RemotePathSensor``'s (``ssh_conn_id``, ``poll_interval``, ``deferrable``...).
    """

    template_fields = ("checkpoint_dir",)

    def __init__(
        self, *, checkpoint_dir: str, iteration: int, settle_seconds: float = 30, **kwargs: Any
    ) -> None:
        super().__init__(**kwargs)
        self.checkpoint_dir = checkpoint_dir
        self.iteration = iteration
        self.settle_seconds = settle_seconds

    def validate(self) -> None:
        if int(self.iteration) < 0:
            raise AirflowException(f"task {self.task_id}: iteration must be >= 0, got {self.iteration}")

    def trigger(self) -> RemotePathTrigger:
        condition = checkpoint_condition(int(self.iteration), self.settle_seconds)
        return self.path_trigger(self.checkpoint_dir, **condition)

    def result(self, data: dict[str, Any]) -> list[int]:
        return [int(i) for i in data.get("iterations", [])]
