"""Scaling-law fits: L(N, D) = E + A/N^alpha + B/D^beta (Chinchilla approach 3) and frontier power laws."""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import product
from typing import Any

import numpy as np
from numpy.typing import NDArray
from threadpoolctl import threadpool_limits

HUBER_DELTA = 1e-3
NAMES = ("E", "A", "B", "alpha", "beta")
MIN_SIZES = 3  # distinct model sizes and distinct token counts: 5 parameters need more than two of each
MIN_POINTS = 6
_TOP_STARTS = 6  # L-BFGS runs from the best grid points (a run per grid point would cost minutes)
_BOOT_STARTS = 2  # a resample also starts from the full fit's optimum: fewer grid starts suffice
# Wide bounds (a, b, e, alpha, beta) keep L-BFGS from wandering off when a resample cannot fix an
# exponent (few sizes): the published fits lie well inside (alpha, beta ~0.3; log A, log B ~6).
_BOUNDS = [(-20.0, 60.0), (-20.0, 60.0), (-5.0, 5.0), (1e-4, 5.0), (1e-4, 5.0)]
# Hoffmann et al.'s initialisation grid, in (a, b, e, alpha, beta) with a = log A, b = log B, e = log E.
_GRID = np.array(
    list(
        product(
            np.arange(0.0, 30.0, 5.0),
            np.arange(0.0, 30.0, 5.0),
            np.arange(-1.0, 1.5, 0.5),
            np.arange(0.0, 2.5, 0.5),
            np.arange(0.0, 2.5, 0.5),
        )
    )
)

Array = NDArray[np.float64]


class FitError(ValueError):
    """A fit that cannot be made from the given points; the message is one line saying why."""


@dataclass(frozen=True)
class Point:
    """One finished run: parameters N, training tokens D, final loss, and its compute if known."""

    params: float
    tokens: float
    loss: float
    flops: float | None = None

    @property
    def compute(self) -> float:
        """FLOPs as given, else Kaplan's 6 N D."""
        return self.flops if self.flops is not None else 6.0 * self.params * self.tokens


@dataclass(frozen=True)
class PowerLaw:
    """y = coef * C^exponent, fitted in log space over the frontier (approach 1)."""

    coef: float
    exponent: float
    points: int

    def at(self, compute: float) -> float:
        return float(self.coef * compute**self.exponent)


@dataclass(frozen=True)
class Fit:
    """Result of :func:`fit_law`; ``intervals`` are bootstrap percentiles (2.5, 97.5) per parameter."""

    values: Mapping[str, float]
    intervals: Mapping[str, tuple[float, float]]
    objective: float
    points: int
    bootstrap: int
    optima: Mapping[float, dict[str, Any]] = field(default_factory=dict)
    residuals: tuple[float, ...] = ()
    # Each L-BFGS start's final values: the range per parameter, and how many starts reached the best
    # objective (within 1%): a wide range there means the optimum is not the only one.
    start_spread: Mapping[str, tuple[float, float]] = field(default_factory=dict)
    starts: int = 0
    starts_at_best: int = 0

    def predict(self, params: float, tokens: float) -> float:
        v = self.values
        return float(v["E"] + v["A"] / params ** v["alpha"] + v["B"] / tokens ** v["beta"])

    def to_dict(self) -> dict[str, Any]:
        return {
            "method": "Hoffmann et al. 2022 approach 3: Huber(delta=1e-3) on log loss, L-BFGS from a grid",
            "values": dict(self.values),
            "intervals": {k: list(v) for k, v in self.intervals.items()},
            "objective": self.objective,
            "points": self.points,
            "bootstrap": self.bootstrap,
            "compute_optimal": {f"{c:.6g}": v for c, v in self.optima.items()},
            "residuals": list(self.residuals),
            "starts": self.starts,
            "starts_at_best": self.starts_at_best,
            "start_spread": {k: list(v) for k, v in self.start_spread.items()},
        }


def check_points(points: Sequence[Point], expected: Iterable[tuple[float, float]] = ()) -> None:
    """Raise FitError (one line) for bad values or too few model sizes / budgets / points.

    ``expected`` are the (N, D) cells a grid planned: those without a point are named.
    """
    for i, p in enumerate(points, start=1):
        for name, value in (("params", p.params), ("tokens", p.tokens), ("loss", p.loss)):
            if not math.isfinite(value) or value <= 0:
                raise FitError(f"point {i}: {name} = {value!r}: needs a finite positive number")
    sizes = sorted({p.params for p in points})
    budgets = sorted({p.tokens for p in points})
    have = {(p.params, p.tokens) for p in points}
    missing = [c for c in expected if c not in have]
    gaps = f"; missing cells (N, D): {_cells(missing)}" if missing else ""
    if len(sizes) < MIN_SIZES or len(budgets) < MIN_SIZES or len(points) < MIN_POINTS:
        raise FitError(
            f"no fit: {len(points)} points, {len(sizes)} model sizes ({_nums(sizes)}), {len(budgets)} "
            f"token budgets ({_nums(budgets)}); needs >= {MIN_SIZES} of each and >= {MIN_POINTS} points{gaps}"
        )


def _nums(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.3g}" for v in values) or "none"


def _cells(cells: Sequence[tuple[float, float]]) -> str:
    shown = ", ".join(f"({n:.3g}, {d:.3g})" for n, d in cells[:10])
    return shown + (f" and {len(cells) - 10} more" if len(cells) > 10 else "")


def _objective(theta: Array, x: Array, y: Array, log_loss: Array) -> tuple[float, Array]:
    """Huber loss of log L_pred - log L and its gradient in (a, b, e, alpha, beta)."""
    a, b, e, alpha, beta = theta
    terms = np.stack([a - alpha * x, b - beta * y, np.full_like(x, e)])
    top = terms.max(axis=0)
    weights = np.exp(terms - top)
    total = weights.sum(axis=0)
    r = top + np.log(total) - log_loss
    weights /= total
    small = np.abs(r) <= HUBER_DELTA
    value = np.where(small, 0.5 * r * r, HUBER_DELTA * (np.abs(r) - 0.5 * HUBER_DELTA)).sum()
    dr = np.where(small, r, HUBER_DELTA * np.sign(r))
    grad = np.array(
        [
            (dr * weights[0]).sum(),
            (dr * weights[1]).sum(),
            (dr * weights[2]).sum(),
            -(dr * weights[0] * x).sum(),
            -(dr * weights[1] * y).sum(),
        ]
    )
    return float(value), grad


def _grid_values(x: Array, y: Array, log_loss: Array) -> Array:
    """Objective at every grid point at once (picks the starts; a full L-BFGS per point is too slow)."""
    g = _GRID[:, :, None]
    terms = np.stack(
        [g[:, 0] - g[:, 3] * x, g[:, 1] - g[:, 4] * y, np.broadcast_to(g[:, 2], (len(g), len(x)))]
    )
    top = terms.max(axis=0)
    r = top + np.log(np.exp(terms - top).sum(axis=0)) - log_loss
    huber = np.where(np.abs(r) <= HUBER_DELTA, 0.5 * r * r, HUBER_DELTA * (np.abs(r) - 0.5 * HUBER_DELTA))
    values: Array = huber.sum(axis=1)
    return values


def _minimise(
    x: Array, y: Array, log_loss: Array, extra: Sequence[Array] = (), top: int = _TOP_STARTS
) -> list[tuple[Array, float]]:
    """Every start's optimum and objective, the best first."""
    # Imported here: scipy.optimize costs ~0.6 s to import, and every Airflow task process that
    # parses the campaign DAG files imports this module (through the campaign report) without fitting.
    from scipy.optimize import minimize

    starts = [_GRID[i] for i in np.argsort(_grid_values(x, y, log_loss))[:top]] + list(extra)
    found: list[tuple[Array, float]] = []
    for start in starts:
        res = minimize(
            _objective,
            start,
            args=(x, y, log_loss),
            jac=True,
            method="L-BFGS-B",
            bounds=_BOUNDS,
            # The objective is ~1e-6 at the optimum: the default tolerances stop far from it.
            options={"maxiter": 1000, "maxfun": 3000, "ftol": 1e-15, "gtol": 1e-12},
        )
        found.append((np.asarray(res.x, dtype=float), float(res.fun)))
    return sorted(found, key=lambda f: f[1])


def _values(theta: Array) -> dict[str, float]:
    a, b, e, alpha, beta = (float(t) for t in theta)
    return {"E": math.exp(e), "A": math.exp(a), "B": math.exp(b), "alpha": alpha, "beta": beta}


def compute_optimal(values: Mapping[str, float], compute: float) -> tuple[float, float]:
    """N_opt, D_opt minimising the fitted law under C = 6 N D (Hoffmann et al. eq. 4)."""
    alpha, beta = values["alpha"], values["beta"]
    if alpha <= 0 or beta <= 0:
        return math.nan, math.nan
    g = (alpha * values["A"] / (beta * values["B"])) ** (1.0 / (alpha + beta))
    n_opt = g * (compute / 6.0) ** (beta / (alpha + beta))
    return n_opt, compute / 6.0 / n_opt


def fit_law(
    points: Sequence[Point],
    *,
    bootstrap: int = 100,
    seed: int = 0,
    budgets: Sequence[float] = (),
    expected: Iterable[tuple[float, float]] = (),
) -> Fit:
    """Fit L(N, D) = E + A/N^alpha + B/D^beta; bootstrap (resampling points, seeded) for intervals.

    BLAS runs on one thread: L-BFGS-B's 5-parameter steps call it, and its worker threads cost 40x in
    wall time on a busy machine (measured: 8.2 s vs 0.2 s for one fit of 9 points).
    """
    with threadpool_limits(limits=1):
        return _fit_law(points, bootstrap, seed, budgets, expected)


def _fit_law(
    points: Sequence[Point],
    bootstrap: int,
    seed: int,
    budgets: Sequence[float],
    expected: Iterable[tuple[float, float]],
) -> Fit:
    check_points(points, expected)
    x = np.log([p.params for p in points])
    y = np.log([p.tokens for p in points])
    log_loss = np.log([p.loss for p in points])
    runs = _minimise(x, y, log_loss)
    theta, objective = runs[0]
    values = _values(theta)
    at_best = [r for r in runs if r[1] <= objective * 1.01 + 1e-12]
    per_start = [_values(r[0]) for r in runs]
    start_spread = {k: (min(v[k] for v in per_start), max(v[k] for v in per_start)) for k in NAMES}
    rng = np.random.default_rng(seed)
    samples: list[dict[str, float]] = []
    for _ in range(bootstrap):
        idx = rng.integers(0, len(points), len(points))
        if len(set(x[idx])) < MIN_SIZES or len(set(y[idx])) < MIN_SIZES:
            continue  # as for the fit itself: too few sizes or budgets leave alpha or beta free
        samples.append(_values(_minimise(x[idx], y[idx], log_loss[idx], [theta], _BOOT_STARTS)[0][0]))
    intervals = {k: _interval([s[k] for s in samples]) for k in NAMES} if samples else {}
    optima: dict[float, dict[str, Any]] = {}
    for c in budgets:
        n_opt, d_opt = compute_optimal(values, c)
        spread = [compute_optimal(s, c) for s in samples]
        optima[c] = {
            "params": n_opt,
            "tokens": d_opt,
            "params_interval": list(_interval([s[0] for s in spread])) if spread else None,
            "tokens_interval": list(_interval([s[1] for s in spread])) if spread else None,
        }
    fit = Fit(values, intervals, objective, len(points), len(samples), optima)
    residuals = tuple(math.log(fit.predict(p.params, p.tokens)) - math.log(p.loss) for p in points)
    return Fit(
        values,
        intervals,
        objective,
        len(points),
        len(samples),
        optima,
        residuals,
        start_spread,
        len(runs),
        len(at_best),
    )


def _interval(values: Sequence[float]) -> tuple[float, float]:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return math.nan, math.nan
    low, high = np.percentile(finite, [2.5, 97.5])
    return float(low), float(high)


def frontier(points: Sequence[Point]) -> list[Point]:
    """Loss-vs-compute Pareto frontier: each point with a lower loss than every cheaper one."""
    best = math.inf
    out: list[Point] = []
    for p in sorted(points, key=lambda p: (p.compute, p.loss)):
        if p.loss < best:
            out.append(p)
            best = p.loss
    return out


def frontier_laws(points: Sequence[Point]) -> dict[str, PowerLaw] | str:
    """N_opt(C) and D_opt(C) power laws over the frontier (approach 1), or one line saying why not."""
    front = frontier(points)
    sizes = {p.params for p in front}
    if len({p.compute for p in front}) < 3 or len(sizes) < 2 or len({p.tokens for p in front}) < 2:
        return (
            f"no frontier law: the frontier has {len(front)} points and {len(sizes)} model sizes; "
            "needs >= 3 compute budgets with >= 2 model sizes and token counts"
        )
    log_c = np.log([p.compute for p in front])
    out: dict[str, PowerLaw] = {}
    for name, values in (("params", [p.params for p in front]), ("tokens", [p.tokens for p in front])):
        slope, intercept = np.polyfit(log_c, np.log(values), 1)
        out[name] = PowerLaw(math.exp(float(intercept)), float(slope), len(front))
    return out
