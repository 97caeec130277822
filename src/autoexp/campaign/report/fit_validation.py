"""Held-out check of the scaling-law fit: fit without the largest model size, predict its points."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from autoexp.campaign.report.scaling_fit import FitError, Point, fit_law

MIN_HOLDOUT_SIZES = 4  # the fit without the largest size still needs 3 sizes


def holdout(points: Sequence[Point]) -> dict[str, Any]:
    """Fit the law without the largest model size and compare its prediction with each held-out point.

    Returns ``{"held_out_params", "fitted_points", "points": [{"params", "tokens", "predicted",
    "observed", "relative_error"}], "max_abs_relative_error"}``, relative error = (predicted -
    observed) / observed; or ``{"missing": one line}`` with fewer than 4 sizes or when the fit on the
    smaller sizes cannot be made. No bootstrap: only the point estimate is checked.
    """
    sizes = sorted({p.params for p in points})
    if len(sizes) < MIN_HOLDOUT_SIZES:
        return {
            "missing": f"{len(sizes)} sizes: too few to hold the largest out; needs >= {MIN_HOLDOUT_SIZES}"
        }
    largest = sizes[-1]
    kept = [p for p in points if p.params < largest]
    try:
        fit = fit_law(kept, bootstrap=0)
    except FitError as exc:
        return {"missing": f"no held-out check: without the largest size (N = {largest:.3g}): {exc}"}
    rows = []
    for p in sorted((p for p in points if p.params == largest), key=lambda p: p.tokens):
        predicted = fit.predict(p.params, p.tokens)
        rows.append(
            {
                "params": p.params,
                "tokens": p.tokens,
                "predicted": predicted,
                "observed": p.loss,
                "relative_error": (predicted - p.loss) / p.loss,
            }
        )
    return {
        "held_out_params": largest,
        "fitted_points": len(kept),
        "fitted_values": dict(fit.values),
        "points": rows,
        "max_abs_relative_error": max(abs(r["relative_error"]) for r in rows),
    }


def holdout_text(data: Mapping[str, Any]) -> list[str]:
    """The held-out check in words, one line each (the report's and ``autoexp fit``'s wording)."""
    if "missing" in data:
        return [f"held-out check: {data['missing']}"]
    lines = [
        f"held-out check: fitted without the largest size (N = {data['held_out_params']:.3g}, "
        f"{data['fitted_points']} points left); its {len(data['points'])} points predicted with "
        f"at most {100 * data['max_abs_relative_error']:.2f}% relative error"
    ]
    for r in data["points"]:
        lines.append(
            f"  N = {r['params']:.3g}, D = {r['tokens']:.3g}: predicted {r['predicted']:.4g}, "
            f"observed {r['observed']:.4g}, relative error {100 * r['relative_error']:+.2f}%"
        )
    return lines


def fit_text(fit: Mapping[str, Any]) -> list[str]:
    """The fitted parameters with their bootstrap intervals and, beside them, their range across the
    optimizer's starts (a wide range where few starts reached the best objective: a flat or multiple
    optimum)."""
    lines = [
        f"{fit['points']} points, {fit['bootstrap']} bootstrap resamples (95% intervals), "
        f"{fit['starts']} L-BFGS starts ({fit['starts_at_best']} reached the best objective; range over all)"
    ]
    spread = fit.get("start_spread") or {}
    for name, value in fit["values"].items():
        low, high = fit["intervals"].get(name) or (float("nan"), float("nan"))
        s_low, s_high = spread.get(name) or (float("nan"), float("nan"))
        lines.append(f"{name:>5} = {value:.4g}  [{low:.4g}, {high:.4g}]  starts {s_low:.4g} to {s_high:.4g}")
    return lines
