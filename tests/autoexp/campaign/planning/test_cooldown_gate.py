"""The budget gate before a cooldown fan-out, planned: which cooldowns wait, their estimate, when it asks."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from autoexp.campaign.planning.cooldown_gate import plan_cooldown_gate
from autoexp.campaign.planning.cost_estimate import training_cost
from autoexp.campaign.planning.dag_plan import plan_dag
from autoexp.campaign.planning.plan import ExperimentPlan, plan_campaign
from autoexp.campaign.planning.settings import AirflowSettings, GateSettings, SettingsError, parse_settings
from tests.autoexp.campaign.planning.jobs import FakeJob, campaign

# N = 12 L H^2 = 48,000,000 parameters (as in test_cost_estimate.py), on the pretraining's jobs only.
SHAPE = {"NUM_LAYERS": 4, "HIDDEN_SIZE": 1000}
# s0 trains from scratch (ITER 0); s1 resumes at 4 and trains to 12, s2 at 8 to 16: D = 8 x 16 tokens each.
BRANCHES = {"s0": (0, 12), "s1": (4, 12), "s2": (8, 16)}
ALL = ["pretrain", "cooldown_s0", "cooldown_s1", "cooldown_s2"]
# 6 N D / 100 TFLOP/s: 6 x 4.8e7 x 128 / 1e14 / 3600 GPU-hours per branching cooldown.
ONE = 6 * 48_000_000 * 128 / 1e14 / 3600


def _plan(branches: dict[str, tuple[int, int]] = BRANCHES, shape: dict[str, Any] = SHAPE) -> ExperimentPlan:
    jobs: list[FakeJob] = [
        dataclasses.replace(job, params={**job.params, **shape}) if "PRETRAIN" in job.name else job
        for job in campaign(exps=("a",), branches=branches)
    ]
    return plan_campaign(jobs, AirflowSettings())[0]


def _settings(**gate: Any) -> AirflowSettings:
    return AirflowSettings(gate=GateSettings(**gate))


def test_no_gate_without_the_key_or_without_a_cooldown_that_branches() -> None:
    assert plan_cooldown_gate(_plan(), AirflowSettings()) is None
    assert plan_cooldown_gate(_plan(), _settings(gpu_hours_threshold=1)) is None  # the campaign gate only
    on = _settings(gpu_hours_threshold=1, cooldowns=True)
    assert plan_cooldown_gate(_plan(branches={}), on) is None
    # A cooldown from scratch starts with the run, like the pretraining: nothing fans out.
    assert plan_cooldown_gate(_plan(branches={"s0": (0, 12)}), on) is None
    assert plan_dag(_plan(), AirflowSettings()).cooldown_gate is None


def test_the_gate_holds_the_branching_cooldowns_and_their_estimate() -> None:
    plan = _plan()
    gate = plan_cooldown_gate(
        plan, _settings(gpu_hours_threshold=1, cooldowns=True, approval_timeout_secs=60)
    )
    assert gate is not None
    assert (gate.experiment, gate.cooldowns, gate.timeout_secs) == ("a", ("cooldown_s1", "cooldown_s2"), 60.0)
    # Each one's estimate is the campaign gate's: only the tokens after its branch point, the
    # pretraining's model shape.
    s1 = plan.cooldowns[1]
    assert gate.trainings[0] == training_cost(
        plan.dag_id, s1, AirflowSettings().keys, 100, plan.pretrain.train.params
    )
    assert [t.tokens for t in gate.trainings] == [128, 128]
    estimate = gate.estimate(ALL)
    assert estimate.gpu_hours == pytest.approx(2 * ONE)
    assert estimate.text.splitlines()[0] == (
        f"estimate: {2 * ONE:.2g} GPU-hours for 2 training(s) (6·N·D FLOPs at 100 TFLOP/s per GPU)"
    )
    # Checkpoints 8 and 12 of s1, 12 and 16 of s2.
    assert "  4 conversion job(s), one per checkpoint, not costed" in estimate.text.splitlines()
    # A run that drives one of them estimates that one.
    assert gate.estimate(["pretrain", "cooldown_s2"]).gpu_hours == pytest.approx(ONE)


def test_it_asks_by_the_campaign_gates_rule_on_the_cooldowns_the_run_drives() -> None:
    plan = _plan()

    def asks(phases: list[str], **gate: Any) -> bool:
        planned = plan_cooldown_gate(plan, _settings(cooldowns=True, **gate))
        assert planned is not None
        return planned.estimate(phases).approval

    threshold = 1.5 * ONE
    assert asks(ALL, gpu_hours_threshold=threshold)  # both: 2 x ONE
    assert not asks(["pretrain", "cooldown_s1"], gpu_hours_threshold=threshold)  # one: ONE
    assert not asks(ALL, gpu_hours_threshold=3 * ONE)
    assert asks(["cooldown_s1"], always=True, gpu_hours_threshold=3 * ONE)
    assert not asks(["pretrain", "cooldown_s0"], always=True)  # none of the gated ones: nothing to ask
    # A cooldown that cannot be estimated asks, as in the campaign gate.
    unknown = plan_cooldown_gate(_plan(shape={}), _settings(cooldowns=True, gpu_hours_threshold=1000))
    assert unknown is not None
    assert unknown.estimate(ALL).approval


def test_a_gated_cooldowns_checkpoint_waits_also_allow_for_the_approval() -> None:
    plan = _plan()
    plain = plan_dag(plan, _settings(gpu_hours_threshold=1))
    gated = plan_dag(plan, _settings(gpu_hours_threshold=1, cooldowns=True, approval_timeout_secs=600))
    assert gated.cooldown_gate is not None
    assert gated.cooldown_gate.cooldowns == ("cooldown_s1", "cooldown_s2")
    budgets = {}
    for before, after in zip(plain.phases, gated.phases, strict=True):
        assert before.branch_wait == after.branch_wait  # the branch waits start with the run, as before
        assert before.checkpoints is not None
        assert after.checkpoints is not None
        budgets[after.key] = after.checkpoints.wait.timeout_secs - before.checkpoints.wait.timeout_secs
    # Their training may wait that long for an answer before it starts.
    assert budgets == {"pretrain": 0, "cooldown_s0": 0, "cooldown_s1": 600, "cooldown_s2": 600}


def test_the_cooldowns_key_is_checked_with_one_line(tmp_path: Path) -> None:
    assert parse_settings({"gate": {"always": True, "cooldowns": True}}).gate.cooldowns is True
    assert parse_settings(None).gate.cooldowns is False
    config = tmp_path / "camp.yaml"
    config.write_text("airflow:\n  gate:\n    tflops_per_gpu: 150\n    cooldowns: true\n")
    with pytest.raises(
        SettingsError,
        match=r"camp.yaml:4: airflow.gate.cooldowns: needs gpu_hours_threshold above 0 or always: true$",
    ):
        parse_settings({"gate": {"tflops_per_gpu": 150, "cooldowns": True}}, config)
    with pytest.raises(SettingsError, match=r"airflow.gate.cooldowns: expected bool, got 'yes'$"):
        parse_settings({"gate": {"always": True, "cooldowns": "yes"}})
