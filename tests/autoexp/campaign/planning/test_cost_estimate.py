"""The budget gate's estimate: GPU-hours from 6·N·D per training, numbers worked out by hand here."""

from __future__ import annotations

import pytest

from autoexp.campaign.planning.campaign_slice import Selected
from autoexp.campaign.planning.cost_estimate import describe, needs_approval, slice_cost, training_cost
from autoexp.campaign.planning.plan import ExperimentPlan, PhasePlan
from autoexp.campaign.planning.settings import GateSettings, Keys, SettingsError, parse_settings
from tests.autoexp.campaign.planning.jobs import FakeJob

# N = 12 L H^2 + V H = 12 * 4 * 1000^2 + 0 = 48,000,000 parameters.
SHAPE = {"NUM_LAYERS": 4, "HIDDEN_SIZE": 1000, "NODES": 2, "GPUS_PER_NODE": 4}


def _phase(key: str, train_iters: int, start_iter: int, tokens_per_iter: int | None = 1_000_000) -> PhasePlan:
    train = FakeJob(f"{key}_train", SHAPE)
    convert = FakeJob(f"{key}_convert", {})
    checkpoints = tuple(range(start_iter + 500, train_iters + 1, 500))
    return PhasePlan(
        key, None, train, convert, "/run", train_iters, 500, start_iter, False, checkpoints, tokens_per_iter
    )


def _plan(*phases: PhasePlan) -> ExperimentPlan:
    return ExperimentPlan("exp", "dag_exp", (), phases[0], tuple(phases[1:]), ())


def test_one_training_by_hand() -> None:
    # D = 2,000 iterations x 1,000,000 tokens = 2e9; 6 N D = 6 x 4.8e7 x 2e9 = 5.76e17 FLOPs;
    # at 100 TFLOP/s per GPU: 5,760 GPU-seconds = 1.6 GPU-hours; on 2 nodes x 4 GPUs: 0.2 h.
    cost = training_cost("dag_exp", _phase("pretrain", 2000, 0), Keys(), 100)
    assert (cost.params, cost.tokens, cost.gpus) == (48_000_000, 2_000_000_000, 8)
    assert cost.gpu_hours == pytest.approx(1.6)
    assert cost.wall_hours == pytest.approx(0.2)


def test_a_cooldown_counts_only_the_tokens_after_its_branch_point() -> None:
    # Resumes at 1,500 of 2,000 iterations: D = 500 x 1e6 = 5e8 -> a quarter of 1.6 GPU-hours.
    cost = training_cost("dag_exp", _phase("cooldown_1B", 2000, 1500), Keys(), 100)
    assert cost.tokens == 500_000_000
    assert cost.gpu_hours == pytest.approx(0.4)


def test_a_phase_job_without_the_model_shape_takes_the_pretrainings() -> None:
    cooldown = _phase("cooldown_1B", 2000, 1500)
    bare = PhasePlan(**{**cooldown.__dict__, "train": FakeJob("cooldown_train", {"NUM_LAYERS": None})})
    assert training_cost("dag_exp", bare, Keys(), 100).params is None
    cost = training_cost("dag_exp", bare, Keys(), 100, model=SHAPE)
    assert (cost.params, cost.gpus) == (48_000_000, 8)
    assert cost.gpu_hours == pytest.approx(0.4)


def test_the_slice_sums_its_selected_phases_and_counts_conversions() -> None:
    plan = _plan(_phase("pretrain", 2000, 0), _phase("cooldown_1B", 2000, 1500))
    both = slice_cost(
        [plan], [Selected("dag_exp", "exp", ("pretrain", "cooldown_1B"))], Keys(), GateSettings()
    )
    assert both.gpu_hours == pytest.approx(2.0)
    assert both.conversions == 4 + 1  # checkpoints 500..2000, and 2000 after 1500
    one = slice_cost([plan], [Selected("dag_exp", "exp", ("cooldown_1B",))], Keys(), GateSettings())
    assert one.gpu_hours == pytest.approx(0.4)
    # Twice the throughput, half the GPU-hours.
    fast = slice_cost(
        [plan], [Selected("dag_exp", "exp", ("pretrain",))], Keys(), GateSettings(tflops_per_gpu=200)
    )
    assert fast.gpu_hours == pytest.approx(0.8)


def test_the_threshold_decides_and_an_unknown_training_asks() -> None:
    known = _plan(_phase("pretrain", 2000, 0))
    cost = slice_cost([known], [Selected("dag_exp", "exp", ("pretrain",))], Keys(), GateSettings())
    assert not needs_approval(cost, GateSettings())  # no gate configured
    assert needs_approval(cost, GateSettings(gpu_hours_threshold=1.5))
    assert not needs_approval(cost, GateSettings(gpu_hours_threshold=1.6))
    assert needs_approval(cost, GateSettings(always=True))
    unknown = _plan(_phase("pretrain", 2000, 0, tokens_per_iter=None))
    cost = slice_cost([unknown], [Selected("dag_exp", "exp", ("pretrain",))], Keys(), GateSettings())
    assert cost.gpu_hours == 0
    assert len(cost.unknown) == 1
    assert needs_approval(cost, GateSettings(gpu_hours_threshold=1000))


def test_the_text_says_the_total_the_assumption_and_the_verdict() -> None:
    plan = _plan(_phase("pretrain", 2000, 0))
    gate = GateSettings(gpu_hours_threshold=1)
    text = describe(slice_cost([plan], [Selected("dag_exp", "exp", ("pretrain",))], Keys(), gate), gate)
    assert text.splitlines() == [
        "estimate: 1.6 GPU-hours for 1 training(s) (6·N·D FLOPs at 100 TFLOP/s per GPU)",
        "  longest training: 0.2 h on its GPUs",
        "  4 conversion job(s), one per checkpoint, not costed",
        "  approval: needed (airflow.gate.gpu_hours_threshold: 1)",
        "  dag_exp pretrain: N=48,000,000 D=2,000,000,000 on 8 GPU(s): 1.6 GPU-h",
    ]


def test_the_gate_keys_are_checked_with_one_line() -> None:
    gate = parse_settings({"gate": {"tflops_per_gpu": 312, "gpu_hours_threshold": 50}}).gate
    assert (gate.tflops_per_gpu, gate.gpu_hours_threshold, gate.enabled) == (312, 50, True)
    assert not parse_settings(None).gate.enabled
    with pytest.raises(SettingsError, match=r"airflow.gate.tflops_per_gpu: must be > 0 \(TFLOP/s\)$"):
        parse_settings({"gate": {"tflops_per_gpu": 0}})
    with pytest.raises(SettingsError, match=r"airflow.gate.always: expected bool, got 'yes please'$"):
        parse_settings({"gate": {"always": "yes please"}})


def test_the_seed_campaign_is_113_gpu_hours_at_100_tflops() -> None:
    from autoexp.campaign.configs.planned_config import load_plans
    from autoexp.campaign.planning import campaign_slice as cs
    from tests.support.checkout import REPO_ROOT

    plans, settings = load_plans(REPO_ROOT / "config" / "scaling_exps.yaml")
    everything = cs.select_slice(cs.slice_table(plans, [], settings.keys, every_variable=True), {})
    cost = slice_cost(plans, everything, settings.keys, GateSettings())
    assert (len(cost.trainings), cost.conversions, cost.unknown) == (540, 1980, ())
    assert round(cost.gpu_hours, 1) == 113.3
    # The largest: 50M (N = 40,550,400) on 2,000,158,720 tokens, 1.35 GPU-hours on 4 GPUs.
    assert max(t.wall_hours or 0 for t in cost.trainings) == pytest.approx(
        6 * 40_550_400 * 2_000_158_720 / 1e14 / 3600 / 4
    )
