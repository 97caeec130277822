"""The factory passes the planner's fatal patterns to every training operator: no loss-spike rule by
default, the one `airflow.loss_spike` asks for when it is set."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_operator.operators.slurm import SlurmOperator

from autoexp.campaign.configs.cache import CACHE_ENV
from autoexp.campaign.dags.factory import build_dags
from autoexp.campaign.planning.divergence import DIVERGED, MEGATRON_LOSS

DEMO = Path(__file__).resolve().parents[4] / "config" / "demo.yaml"


@pytest.mark.parametrize(
    ("overrides", "spike"),
    [
        ((), None),
        (
            ("airflow.loss_spike={factor: 4, intervals: 2}",),
            {"pattern": MEGATRON_LOSS, "above_median": 4.0, "repeats": 2, "window": 20},
        ),
    ],
)
def test_every_training_operator_has_the_spike_rule_only_when_it_is_set(
    overrides: tuple[str, ...],
    spike: dict[str, object] | None,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    trains = [t for dag in build_dags(DEMO, overrides) for t in dag.tasks if t.task_id.endswith(".train")]
    assert len(trains) > 1
    for train in trains:
        assert isinstance(train, SlurmOperator), train
        rules = [p for p in train.fatal_patterns[DIVERGED] if isinstance(p, dict) and "above_median" in p]
        assert rules == ([] if spike is None else [spike]), train.task_id
