"""Scaling-law fit: recovers the published Chinchilla law from noisy synthetic runs; one line on bad input."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoexp.campaign.report.scaling_fit import (
    Fit,
    FitError,
    Point,
    check_points,
    compute_optimal,
    fit_law,
    frontier,
    frontier_laws,
)

# Hoffmann et al. 2022, approach 3.
CHINCHILLA = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
# Stated tolerance (also in docs/campaign-report.md): 8 model sizes 70M-16B x 7 budgets 1B-400B tokens,
# log-normal noise of 0.5% on the loss -> E, alpha, beta within these absolute errors, A and B within
# 30% (A and B trade off against alpha and beta: they are the least determined).
ABS_TOL = {"E": 0.05, "alpha": 0.03, "beta": 0.03}
REL_TOL = {"A": 0.3, "B": 0.3}


def law(n: float, d: float, v: dict[str, float] = CHINCHILLA) -> float:
    return v["E"] + v["A"] / n ** v["alpha"] + v["B"] / d ** v["beta"]


def chinchilla_points(seed: int = 1, noise: float = 0.005) -> list[Point]:
    rng = np.random.default_rng(seed)
    return [
        Point(n, d, law(n, d) * math.exp(rng.normal(0, noise)))
        for n in np.geomspace(7e7, 1.6e10, 8)
        for d in np.geomspace(1e9, 4e11, 7)
    ]


@pytest.fixture(scope="module")
def chinchilla_fit() -> Fit:
    return fit_law(chinchilla_points(), bootstrap=30, seed=7, budgets=[5.76e23])


def test_recovers_chinchilla_within_stated_tolerance(chinchilla_fit: Fit) -> None:
    for name, tol in ABS_TOL.items():
        assert abs(chinchilla_fit.values[name] - CHINCHILLA[name]) < tol, name
    for name, tol in REL_TOL.items():
        assert abs(chinchilla_fit.values[name] / CHINCHILLA[name] - 1) < tol, name


def test_bootstrap_intervals_bracket_the_estimate_and_the_truth(chinchilla_fit: Fit) -> None:
    assert chinchilla_fit.bootstrap == 30
    for name, (low, high) in chinchilla_fit.intervals.items():
        assert low <= chinchilla_fit.values[name] <= high, name
        assert low < high, name
    assert chinchilla_fit.intervals["E"][0] <= CHINCHILLA["E"] <= chinchilla_fit.intervals["E"][1]


def test_bootstrap_is_seeded() -> None:
    points = chinchilla_points(seed=3)[::2]
    first = fit_law(points, bootstrap=5, seed=11)
    again = fit_law(points, bootstrap=5, seed=11)
    assert first.intervals == again.intervals


def test_compute_optimal_prediction_matches_the_closed_form(chinchilla_fit: Fit) -> None:
    n_true, _d_true = compute_optimal(CHINCHILLA, 5.76e23)
    opt = chinchilla_fit.optima[5.76e23]
    assert 6 * opt["params"] * opt["tokens"] == pytest.approx(5.76e23)
    assert opt["params"] == pytest.approx(n_true, rel=0.5)
    assert opt["params_interval"][0] < opt["params"] < opt["params_interval"][1]
    # The minimum of the law on the iso-FLOP curve is where the closed form says.
    ns = np.geomspace(n_true / 3, n_true * 3, 2001)
    assert ns[np.argmin([law(n, 5.76e23 / 6 / n) for n in ns])] == pytest.approx(n_true, rel=0.01)


def test_noise_free_points_fit_exactly() -> None:
    points = [Point(n, d, law(n, d)) for n in (1e7, 1e8, 1e9, 1e10) for d in (1e9, 1e10, 1e11, 1e12)]
    fit = fit_law(points, bootstrap=0)
    assert max(abs(r) for r in fit.residuals) < 1e-3
    assert fit.intervals == {}


@pytest.mark.parametrize(
    ("points", "message"),
    [
        (
            [Point(1e8, d, 3.0 - d / 1e12) for d in (1e9, 2e9, 4e9, 8e9, 1.6e10, 3.2e10)],
            r"^no fit: 6 points, 1 model sizes \(1e\+08\), 6 token budgets .* needs >= 3 of each",
        ),
        (
            [Point(n, 1e9, 3.0 - n / 1e12) for n in (1e7, 2e7, 4e7, 8e7, 1.6e8, 3.2e8)],
            r"1 token budgets \(1e\+09\)",
        ),
        ([Point(1e8, 1e9, 3.0), Point(1e9, 1e10, 2.5)], r"^no fit: 2 points"),
        ([Point(1e8, 1e9, math.nan)], r"^point 1: loss = nan: needs a finite positive number$"),
        ([Point(1e8, 1e9, 3.0), Point(-1e8, 1e9, 3.0)], r"^point 2: params = -100000000.0: needs"),
    ],
)
def test_degenerate_inputs_get_one_line(points: list[Point], message: str) -> None:
    with pytest.raises(FitError, match=message) as info:
        fit_law(points, bootstrap=0)
    assert "\n" not in str(info.value)


def test_missing_cells_are_named() -> None:
    points = [Point(n, d, 3.0) for n in (1e7, 1e8) for d in (1e9, 1e10)]
    expected = [(n, d) for n in (1e7, 1e8, 1e9) for d in (1e9, 1e10)]
    with pytest.raises(FitError, match=r"missing cells \(N, D\): \(1e\+09, 1e\+09\), \(1e\+09, 1e\+10\)$"):
        check_points(points, expected)


def test_frontier_keeps_only_improvements_in_compute_order() -> None:
    points = [Point(1e7, 1e9, 4.0), Point(1e8, 1e9, 3.0), Point(1e7, 1e10, 3.5), Point(1e8, 1e10, 2.5)]
    assert [p.loss for p in frontier(points)] == [4.0, 3.0, 2.5]
    assert frontier([Point(1e7, 1e9, 3.0, flops=1e30), Point(1e8, 1e9, 3.5)])[0].loss == 3.5


def test_frontier_laws_follow_the_law_or_say_why_not() -> None:
    laws = frontier_laws(chinchilla_points())
    assert not isinstance(laws, str)
    # Chinchilla: N_opt ~ C^a with a = beta/(alpha+beta) = 0.45; a coarse grid lands near it.
    assert laws["params"].exponent == pytest.approx(0.45, abs=0.1)
    assert laws["params"].exponent + laws["tokens"].exponent == pytest.approx(1.0, abs=1e-9)
    reason = frontier_laws([Point(1e7, 1e9, 3.0), Point(1e7, 1e10, 2.5)])
    assert reason == (
        "no frontier law: the frontier has 2 points and 1 model sizes; "
        "needs >= 3 compute budgets with >= 2 model sizes and token counts"
    )
