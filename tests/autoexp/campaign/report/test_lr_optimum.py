"""Optimal-LR law: recovers a known LR*(N) and LR*(N, D) from noisy sweeps; edges and too-few cases."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoexp.campaign.report.lr_optimum import (
    INTERVAL_METHOD,
    SweepPoint,
    law_text,
    optima,
    optimum_law,
    parabola_optimum,
)

# Stated tolerances (also in docs/campaign-report.md), each holding for every one of 20 noise seeds:
# 5 sizes 1e8-1.6e10, 7 LRs 1e-4-1e-1, loss = L(N, D) + 0.02 (ln LR - ln LR*)^2, 0.3% log-normal noise.
PER_BUDGET = {"c": 20.0, "a": -0.35}  # LR*(N) = c N^a at one budget
PER_BUDGET_TOL = {"a": 0.06, "lr": 0.20}  # exponent absolute; the law's LR* at each size, relative
JOINT = {"c": 300.0, "a": -0.4, "b": -0.1}  # LR*(N, D) = c N^a D^b at 3 budgets
JOINT_TOL = {"a": 0.03, "b": 0.015, "lr": 0.10}
SEEDS = range(20)


def chinchilla(n: float, d: float) -> float:
    return 1.69 + 406.4 / n**0.34 + 410.7 / d**0.28


def true_lr(n: float, d: float, joint: bool) -> float:
    return JOINT["c"] * n ** JOINT["a"] * d ** JOINT["b"] if joint else PER_BUDGET["c"] * n ** PER_BUDGET["a"]


def sweep(seed: int, joint: bool, noise: float = 0.003) -> list[SweepPoint]:
    rng = np.random.default_rng(seed)
    budgets = np.geomspace(2e9, 4e11, 3) if joint else [2e10]
    return [
        SweepPoint(
            n,
            d,
            lr,
            (chinchilla(n, d) + 0.02 * math.log(lr / true_lr(n, d, joint)) ** 2)
            * math.exp(rng.normal(0, noise)),
        )
        for n in np.geomspace(1e8, 1.6e10, 5)
        for d in budgets
        for lr in np.geomspace(1e-4, 1e-1, 7)
    ]


def worst_lr_error(data: dict, joint: bool) -> float:  # type: ignore[type-arg]
    """The largest relative error of the fitted law's LR* at the swept (N, D)."""
    c, a, b = data["coefficient"], data["exponent_n"], data["exponent_d"] or 0.0
    return max(
        abs(c * p["params"] ** a * p["tokens"] ** b / true_lr(p["params"], p["tokens"], joint) - 1)
        for p in data["points"]
    )


@pytest.mark.parametrize("seed", SEEDS)
def test_recovers_lr_star_of_n_within_stated_tolerance(seed: int) -> None:
    data = optimum_law(sweep(seed, joint=False), "lr")
    assert data["exponent_d"] is None
    assert data["law_tokens"] == 2e10
    assert abs(data["exponent_n"] - PER_BUDGET["a"]) < PER_BUDGET_TOL["a"]
    assert worst_lr_error(data, joint=False) < PER_BUDGET_TOL["lr"]
    assert [p["status"] for p in data["points"]] == ["in sweep"] * 5


@pytest.mark.parametrize("seed", SEEDS)
def test_recovers_lr_star_of_n_and_d_within_stated_tolerance(seed: int) -> None:
    data = optimum_law(sweep(seed, joint=True), "lr")
    assert abs(data["exponent_n"] - JOINT["a"]) < JOINT_TOL["a"]
    assert abs(data["exponent_d"] - JOINT["b"]) < JOINT_TOL["b"]
    assert worst_lr_error(data, joint=True) < JOINT_TOL["lr"]
    assert len(data["per_budget"]) == 3
    assert data["joint"]["points"] == 15
    low, high = data["intervals"]["exponent_n"]
    assert low < data["exponent_n"] < high


def test_noise_free_parabola_finds_the_exact_minimum_with_a_tight_interval() -> None:
    points = [
        SweepPoint(1e8, 1e9, lr, 3.0 + 0.05 * math.log(lr / 3e-3) ** 2) for lr in np.geomspace(1e-4, 1e-1, 6)
    ]
    found = parabola_optimum(points)
    assert found.status == "in sweep"
    assert found.optimum == pytest.approx(3e-3, rel=1e-9)
    assert found.interval is not None
    assert found.interval == pytest.approx((3e-3, 3e-3), rel=1e-6)
    assert "delta method" in INTERVAL_METHOD


def test_three_values_give_an_optimum_without_interval() -> None:
    points = [SweepPoint(1e8, 1e9, lr, 3.0 + 0.05 * math.log(lr / 1e-3) ** 2) for lr in (1e-4, 1e-3, 1e-2)]
    found = parabola_optimum(points)
    assert (found.optimum, found.interval) == (pytest.approx(1e-3), None)


@pytest.mark.parametrize(("true", "status"), [(1.0, "above sweep"), (1e-6, "below sweep")])
def test_a_minimum_beyond_the_sweep_is_reported_and_left_out(true: float, status: str) -> None:
    lrs = np.geomspace(1e-4, 1e-2, 5)
    edge = [SweepPoint(1e8, 1e9, lr, 3.0 + 0.05 * math.log(lr / true) ** 2) for lr in lrs]
    found = parabola_optimum(edge)
    assert found.status == status
    assert found.optimum == pytest.approx(true, rel=1e-6)  # the vertex is named, never used
    inside = [
        SweepPoint(n, 1e9, lr, 3.0 + 0.05 * math.log(lr / (1e-3 * (1e8 / n) ** 0.25)) ** 2)
        for n in (1e8, 1e9, 1e10)
        for lr in lrs
    ]
    data = optimum_law([*inside, *(SweepPoint(1e11, p.tokens, p.value, p.loss) for p in edge)], "lr")
    assert data["exponent_n"] == pytest.approx(-0.25, abs=1e-6)  # the edge point did not pull the law
    assert data["per_budget"][0]["points"] == 3
    assert law_text(data)[-1] == (
        f"  N = 1e+11, D = 1e+09: parabola minimum {true:.3g} is {status} (swept 0.0001 to 0.01): not used"
    )


def test_a_concave_sweep_has_no_minimum() -> None:
    points = [SweepPoint(1e8, 1e9, lr, 3.0 - 0.05 * math.log(lr / 1e-3) ** 2) for lr in (1e-4, 1e-3, 1e-2)]
    found = parabola_optimum(points)
    assert (found.status, found.optimum) == ("not convex", None)


def test_too_few_learning_rates_or_sizes_is_one_line() -> None:
    two = [SweepPoint(n, 1e9, lr, 3.0) for n in (1e8, 1e9, 1e10) for lr in (1e-3, 1e-2)]
    data = optimum_law(two, "lr")
    assert data["missing"] == "no LR law: no (N, D) has >= 3 learning rates (at most 2)"
    assert law_text(data) == [data["missing"]]
    sizes = [
        SweepPoint(n, 1e9, lr, 3.0 + 0.05 * math.log(lr / 1e-3) ** 2)
        for n in (1e8, 1e9)
        for lr in (1e-4, 1e-3, 1e-2)
    ]
    data = optimum_law(sizes, "lr")
    assert data["missing"] == (
        "no LR law: LR* inside the sweep at 2 model sizes (1e+08, 1e+09) at any one budget at most; "
        "needs >= 3"
    )
    assert len(data["points"]) == 2
    assert data["coefficient"] is None
    batch = optimum_law([SweepPoint(1e8, 1e9, b, 3.0) for b in (64, 128)], "batch")
    assert batch["missing"] == "no BATCH law: no (N, D) has >= 3 batch sizes (at most 2)"


def test_runs_are_compared_at_equal_values_of_the_other_hyperparameter() -> None:
    good = [
        SweepPoint(1e8, 1e9, lr, 3.0 + 0.05 * math.log(lr / 1e-3) ** 2, other=256)
        for lr in (1e-4, 1e-3, 1e-2)
    ]
    worse = [
        SweepPoint(1e8, 1e9, lr, 3.5 + 0.05 * math.log(lr / 1e-2) ** 2, other=64) for lr in (1e-4, 1e-3, 1e-2)
    ]
    (found,) = optima([*worse, *good])
    assert (found.other, found.optimum) == (256, pytest.approx(1e-3))


def test_an_exponent_that_is_zero_up_to_rounding_noise_reads_without_a_sign() -> None:
    # numpy 2.5 / scipy 1.18 (the Airflow 3.2, Python 3.12 venv of scripts/check-airflow-matrix) fit a
    # noise-free grid's D exponent as a tiny negative number, numpy 2.4 / scipy 1.17 as zero or above.
    data = {
        "hyperparameter": "lr",
        "coefficient": 0.3,
        "exponent_n": -0.25,
        "exponent_d": -4e-12,
        "intervals": {"exponent_n": [-0.25, -0.25], "exponent_d": [-4e-12, 3e-12], "coefficient": [0.3, 0.3]},
        "points": [],
    }
    assert law_text(data) == [
        "LR*(N, D) = 0.3 * N^-0.250 * D^0.000 (a in [-0.250, -0.250], b in [0.000, 0.000], c in [0.3, 0.3]; "
        "95%, 0 optima)"
    ]
