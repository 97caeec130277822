"""Held-out check: the fit without the largest size predicts its points; one line with too few sizes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from autoexp.campaign.report.fit_validation import fit_text, holdout, holdout_text
from autoexp.campaign.report.scaling_fit import Point, fit_law

CHINCHILLA = {"E": 1.69, "A": 406.4, "B": 410.7, "alpha": 0.34, "beta": 0.28}
# Stated tolerance (also in docs/campaign-report.md): the law fitted without the largest of 8 sizes
# (70M-16B x 7 budgets 1B-400B, 0.5% log-normal noise) predicts each of the 16B points within 2%;
# noise-free, within 0.1%.
NOISY_TOL, EXACT_TOL = 0.02, 0.001


def law(n: float, d: float) -> float:
    v = CHINCHILLA
    return v["E"] + v["A"] / n ** v["alpha"] + v["B"] / d ** v["beta"]


def grid(sizes: int, noise: float, seed: int = 1) -> list[Point]:
    rng = np.random.default_rng(seed)
    return [
        Point(n, d, law(n, d) * math.exp(rng.normal(0, noise)))
        for n in np.geomspace(7e7, 1.6e10, sizes)
        for d in np.geomspace(1e9, 4e11, 7)
    ]


def test_noise_free_law_predicts_the_held_out_size_exactly() -> None:
    data = holdout(grid(4, noise=0.0))
    assert data["held_out_params"] == pytest.approx(1.6e10)
    assert data["fitted_points"] == 21
    assert len(data["points"]) == 7
    for row in data["points"]:
        assert row["observed"] == pytest.approx(law(row["params"], row["tokens"]))
        assert row["relative_error"] == pytest.approx((row["predicted"] - row["observed"]) / row["observed"])
    assert data["max_abs_relative_error"] < EXACT_TOL


def test_noisy_law_predicts_the_held_out_size_within_stated_tolerance() -> None:
    data = holdout(grid(8, noise=0.005))
    assert data["fitted_points"] == 49
    assert data["max_abs_relative_error"] < NOISY_TOL
    lines = holdout_text(data)
    assert lines[0].startswith(
        "held-out check: fitted without the largest size (N = 1.6e+10, 49 points left);"
    )
    assert lines[1].startswith("  N = 1.6e+10, D = 1e+09: predicted ")
    assert len(lines) == 8


@pytest.mark.parametrize("sizes", [1, 3])
def test_too_few_sizes_is_one_plain_line(sizes: int) -> None:
    points = [Point(n, d, 3.0) for n in (1e7, 1e8, 1e9)[:sizes] for d in (1e9, 1e10)]
    data = holdout(points)
    assert data == {"missing": f"{sizes} sizes: too few to hold the largest out; needs >= 4"}
    assert holdout_text(data) == [
        f"held-out check: {sizes} sizes: too few to hold the largest out; needs >= 4"
    ]


def test_a_fit_that_cannot_be_made_without_the_largest_size_says_why() -> None:
    points = [Point(n, 1e9 * (1 + i), 3.0) for i, n in enumerate((1e7, 1e8, 1e9, 1e10))]
    assert holdout(points)["missing"].startswith(
        "no held-out check: without the largest size (N = 1e+10): no fit: 3 points, 3 model sizes"
    )


def test_spread_across_starts_is_reported_beside_the_bootstrap() -> None:
    fit = fit_law(grid(4, noise=0.0), bootstrap=3, seed=0)
    assert fit.starts == 6
    assert 1 <= fit.starts_at_best <= fit.starts
    for name, value in fit.values.items():
        low, high = fit.start_spread[name]
        assert low <= value <= high
    lines = fit_text(fit.to_dict())
    assert lines[0] == (
        f"28 points, 3 bootstrap resamples (95% intervals), 6 L-BFGS starts "
        f"({fit.starts_at_best} reached the best objective; range over all)"
    )
    assert [line.split()[0] for line in lines[1:]] == ["E", "A", "B", "alpha", "beta"]
    assert " starts " in lines[1]
