"""The optional `airflow.loss_spike:` keys: stop a training whose loss leaves its level (off by default).

A training loss above `factor` x the median of its last `window` logged values, `intervals` log
intervals in a row, is recorded DIVERGED like a NaN loss (``divergence``): never resubmitted nor
retried. Off by default: a healthy run's loss can jump for a while (a hard data shard, the end of a
warm-up), and how far is too far is the user's call for their runs. No Airflow import.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, model_validator
from pydantic.dataclasses import dataclass

from autoexp.campaign.planning.setting_types import SCHEMA, Count, Exact, rule_error

Factor = Annotated[int | float, Exact("int or float", int, float)]


@dataclass(frozen=True, config=SCHEMA)
class LossSpikeSettings:
    """When a training's loss counts as spiking: `factor` x its running median, for `intervals`."""

    factor: Factor = Field(
        default=0,
        ge=0,
        description="a training whose loss is above this many times the median of its last `window` "
        "logged losses for `intervals` log intervals in a row is stopped as DIVERGED (never resubmitted "
        "nor retried); 0: off; else > 1 (e.g. 3)",
    )
    intervals: Count = Field(
        default=3, ge=1, description="log intervals in a row above the bar before the training is stopped"
    )
    window: Count = Field(
        default=20,
        ge=1,
        description="logged losses the running median is taken over (a spike's own stay out of it); "
        "nothing is judged before there are this many",
    )

    @model_validator(mode="after")
    def _off_or_above_one(self) -> LossSpikeSettings:
        if 0 < self.factor <= 1:
            raise rule_error("factor", f"must be 0 (off) or > 1, got {self.factor!r}")
        return self

    @property
    def enabled(self) -> bool:
        """Whether trainings get the spike rule at all."""
        return self.factor > 0
