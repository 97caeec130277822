"""The cooldown approval in an experiment DAG: there only with `airflow.gate.cooldowns`, after the first
branch checkpoint, before every branching cooldown's training."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest

from autoexp.campaign.configs.cache import CACHE_ENV
from autoexp.campaign.dags.approvals import CooldownApproval
from autoexp.campaign.dags.factory import build_dags
from tests.support.checkout import REPO_ROOT

DEMO = REPO_ROOT / "config" / "demo.yaml"
GATE = "airflow.gate={gpu_hours_threshold: 1.0e-9, cooldowns: true, approval_timeout_secs: 3600}"


@pytest.fixture(autouse=True)
def _no_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))


@pytest.mark.parametrize("overrides", [(), ("airflow.gate={gpu_hours_threshold: 1}",)])
def test_without_the_key_there_is_no_cooldown_approval(overrides: tuple[str, ...]) -> None:
    for dag in build_dags(DEMO, overrides):
        assert "approve_cooldowns" not in dag.task_dict
        assert dag.task_dict["cooldown_16K.train"].upstream_task_ids == {
            "stage",
            "cooldown_16K.wait_branch_checkpoint",
        }


def test_the_approval_sits_after_the_branch_waits_and_before_the_cooldown_trainings() -> None:
    dags = build_dags(DEMO, (GATE,))
    assert len(dags) == 9
    for dag in dags:
        approve = dag.task_dict["approve_cooldowns"]
        assert isinstance(approve, CooldownApproval)
        cooldowns = ["cooldown_16K", "cooldown_24K"]
        assert approve.upstream_task_ids == {f"{c}.wait_branch_checkpoint" for c in cooldowns}
        # The first branch checkpoint saved is when a cooldown is about to start.
        assert approve.trigger_rule == "one_success"
        # Reject skips these, its direct downstream tasks; nothing of the pretraining waits for it.
        assert approve.downstream_task_ids == {f"{c}.train" for c in cooldowns}
        assert dag.task_dict["cooldown_16K.train"].upstream_task_ids == {
            "stage",
            "cooldown_16K.wait_branch_checkpoint",
            "approve_cooldowns",
        }
        assert not any(t.startswith("pretrain.") for t in approve.get_flat_relative_ids(upstream=False))
        # No answer in time is a Reject.
        assert (approve.response_timeout, approve.defaults) == (timedelta(hours=1), ["Reject"])
        assert approve.gate_plan.cooldowns == ("cooldown_16K", "cooldown_24K")
