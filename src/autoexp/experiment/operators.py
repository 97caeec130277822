"""Thin campaign subclasses of the Slurm layer: per-run Params and mapped checkpoint iterations."""

from __future__ import annotations

from typing import Any

from airflow.sdk import Context
from slurm_operator.operators import SlurmOperator
from slurm_operator.sensors import CheckpointSensor


class CampaignSlurmOperator(SlurmOperator):
    """SlurmOperator whose ``max_attempts`` comes from the DAG run's ``max_attempts`` Param.

    Set before submitting and again on every resume, so "Trigger DAG w/ config" governs the
    resubmission cap of a run already in flight.
    """

    def _apply_params(self, context: Context) -> None:
        value = context["params"].get("max_attempts")
        if value is not None:
            self.max_attempts = int(value)

    def execute(self, context: Context) -> list[dict[str, Any]]:
        self._apply_params(context)
        return super().execute(context)

    def execute_complete(self, context: Context, event: Any = None, **kwargs: Any) -> list[dict[str, Any]]:
        self._apply_params(context)
        return super().execute_complete(context, event, **kwargs)


class CheckpointIterationSensor(CheckpointSensor):
    """CheckpointSensor whose iteration may come from a mapped task group (resolved at render time)."""

    # The base annotates its tuple narrowly; widening it is the point of this subclass.
    template_fields = (*CheckpointSensor.template_fields, "iteration")  # type: ignore[assignment]
