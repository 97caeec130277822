"""Optimal-hyperparameter laws: a parabola in log(LR) per (N, D), its minimum LR*, and LR* = c N^a D^b.

The same for the batch size. Contract:

- per (N, D) with >= ``MIN_VALUES`` distinct values, loss = c2 x^2 + c1 x + c0 with x = ln(value),
  least squares; its minimum x* = -c1 / (2 c2) is the optimum. A parabola that opens downwards has no
  minimum (``not convex``); a minimum outside the swept values is reported (``below sweep`` /
  ``above sweep``) and left out of the law, never extrapolated into it;
- the optimum's 95% interval is the delta method on the parabola's least-squares covariance (its
  curvature and the residual scatter, Student t with n - 3 degrees of freedom): none with exactly 3
  values, where the parabola passes through every point;
- the law is log-linear least squares over the in-sweep optima: ln v* = ln c + a ln N per token
  budget with >= ``MIN_LAW_SIZES`` sizes, and ln v* = ln c + a ln N + b ln D when every size has
  >= 2 budgets; 95% intervals from the same covariance (Student t, n - p degrees of freedom).

When the grid varies the other hyperparameter too (batch when sweeping LR), the runs of one (N, D)
are compared at equal values of it: the group with >= 3 values and the lowest loss is taken.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MIN_VALUES = 3  # a parabola has 3 coefficients
MIN_LAW_SIZES = 3  # c and a from 3 sizes leave one degree of freedom for the intervals
INTERVAL_METHOD = (
    "delta method on the parabola's least-squares covariance (its curvature and residual scatter)"
)
LAW_METHOD = "log-linear least squares over the in-sweep optima, Student t intervals"
LABELS = {"lr": "learning rate", "batch": "batch size"}


@dataclass(frozen=True)
class SweepPoint:
    """One finished run of a sweep.

    params, tokens: N and D; value: the swept hyperparameter (LR or batch); loss: final loss;
    other: the other hyperparameter's value (runs of one (N, D) are compared at equal ``other``).
    """

    params: float
    tokens: float
    value: float
    loss: float
    other: float | None = None


@dataclass(frozen=True)
class Optimum:
    """The parabola's minimum at one (N, D); status: in sweep, below sweep, above sweep, not convex."""

    params: float
    tokens: float
    optimum: float | None
    interval: tuple[float, float] | None
    status: str
    swept: tuple[float, float]
    parabola: tuple[float, float, float]  # c2, c1, c0 of loss = c2 x^2 + c1 x + c0, x = ln(value)
    observed: tuple[tuple[float, float], ...]  # (value, loss)
    other: float | None = None

    @property
    def usable(self) -> bool:
        return self.status == "in sweep"

    def to_dict(self) -> dict[str, Any]:
        return {
            "params": self.params,
            "tokens": self.tokens,
            "optimum": self.optimum,
            "interval": list(self.interval) if self.interval else None,
            "status": self.status,
            "swept": list(self.swept),
            "parabola": list(self.parabola),
            "observed": [list(o) for o in self.observed],
            "other": self.other,
        }


@dataclass(frozen=True)
class OptimumLaw:
    """v*(N[, D]) = coefficient * N^exponent_n [* D^exponent_d]; ``tokens`` is the budget of a per-budget
    law (None for the joint law); ``intervals`` are 95% (None with no degree of freedom left)."""

    coefficient: float
    exponent_n: float
    exponent_d: float | None
    intervals: Mapping[str, tuple[float, float] | None]
    points: int
    tokens: float | None = None

    def at(self, params: float, tokens: float) -> float:
        return float(self.coefficient * params**self.exponent_n * tokens ** (self.exponent_d or 0.0))

    def to_dict(self) -> dict[str, Any]:
        return {
            "coefficient": self.coefficient,
            "exponent_n": self.exponent_n,
            "exponent_d": self.exponent_d,
            "intervals": {k: list(v) if v else None for k, v in self.intervals.items()},
            "points": self.points,
            "tokens": self.tokens,
        }


def _t_quantile(dof: int) -> float:
    # Imported here: scipy costs ~0.6 s to import, and every Airflow task process that parses the
    # campaign DAG files imports this module (through the campaign report) without fitting.
    from scipy.stats import t

    return float(t.ppf(0.975, dof))


def parabola_optimum(points: Sequence[SweepPoint]) -> Optimum:
    """The parabola in ln(value) through the points of one (N, D); needs >= MIN_VALUES distinct values."""
    x = np.log([p.value for p in points])
    loss = np.array([p.loss for p in points])
    design = np.stack([x * x, x, np.ones_like(x)], axis=1)
    coef, *_ = np.linalg.lstsq(design, loss, rcond=None)
    c2, c1, c0 = (float(c) for c in coef)
    swept = (float(np.exp(x.min())), float(np.exp(x.max())))
    observed = tuple(sorted((p.value, p.loss) for p in points))
    first = points[0]
    if c2 <= 0:
        return Optimum(
            first.params, first.tokens, None, None, "not convex", swept, (c2, c1, c0), observed, first.other
        )
    vertex = -c1 / (2 * c2)
    status = "below sweep" if vertex < x.min() else "above sweep" if vertex > x.max() else "in sweep"
    interval = None
    dof = len(points) - 3
    if dof > 0:
        rss = float(((design @ coef - loss) ** 2).sum())
        cov = rss / dof * np.linalg.inv(design.T @ design)
        grad = np.array([c1 / (2 * c2 * c2), -1 / (2 * c2), 0.0])
        half = _t_quantile(dof) * math.sqrt(max(float(grad @ cov @ grad), 0.0))
        interval = (math.exp(vertex - half), math.exp(vertex + half))
    return Optimum(
        first.params,
        first.tokens,
        math.exp(vertex),
        interval,
        status,
        swept,
        (c2, c1, c0),
        observed,
        first.other,
    )


def optima(points: Sequence[SweepPoint]) -> list[Optimum]:
    """One optimum per (N, D) that has >= MIN_VALUES distinct values at one value of ``other``."""
    groups: dict[tuple[float, float, float | None], dict[float, SweepPoint]] = {}
    for p in points:
        best = groups.setdefault((p.params, p.tokens, p.other), {})
        if p.value not in best or p.loss < best[p.value].loss:  # repeated runs: the best one counts
            best[p.value] = p
    chosen: dict[tuple[float, float], list[SweepPoint]] = {}
    for (n, d, _), by_value in sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1])):
        runs = list(by_value.values())
        current = chosen.get((n, d))
        lowest = min(r.loss for r in runs)
        if len(runs) >= MIN_VALUES and (current is None or lowest < min(r.loss for r in current)):
            chosen[(n, d)] = runs
    return [parabola_optimum(runs) for _, runs in sorted(chosen.items())]


def _loglinear(found: Sequence[Optimum], joint: bool) -> OptimumLaw:
    y = np.log([o.optimum for o in found if o.optimum is not None])
    columns = [np.ones_like(y), np.log([o.params for o in found])]
    if joint:
        columns.append(np.log([o.tokens for o in found]))
    design = np.stack(columns, axis=1)
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    names = ["coefficient", "exponent_n", "exponent_d"][: design.shape[1]]
    dof = len(y) - design.shape[1]
    intervals: dict[str, tuple[float, float] | None] = dict.fromkeys(names)
    if dof > 0:
        rss = float(((design @ coef - y) ** 2).sum())
        se = np.sqrt(np.maximum(np.diag(rss / dof * np.linalg.inv(design.T @ design)), 0.0))
        t = _t_quantile(dof)
        for i, name in enumerate(names):
            low, high = float(coef[i] - t * se[i]), float(coef[i] + t * se[i])
            intervals[name] = (math.exp(low), math.exp(high)) if i == 0 else (low, high)
    return OptimumLaw(
        math.exp(float(coef[0])),
        float(coef[1]),
        float(coef[2]) if joint else None,
        intervals,
        len(y),
        None if joint else found[0].tokens,
    )


def _nums(values: Sequence[float]) -> str:
    return ", ".join(f"{v:.3g}" for v in values) or "none"


def optimum_law(points: Sequence[SweepPoint], name: str = "lr") -> dict[str, Any]:
    """The optima per (N, D), the law per budget and the joint law, as JSON primitives.

    ``coefficient``, ``exponent_n``, ``exponent_d`` and ``intervals`` are the joint law's when every
    size has >= 2 budgets, else the per-budget law of the largest budget that has one (``exponent_d``
    None); ``missing`` says in one line what is missing when there is no law.
    """
    label = LABELS.get(name, name)
    found = optima(points)
    data: dict[str, Any] = {
        "hyperparameter": name,
        "interval_method": INTERVAL_METHOD,
        "law_method": LAW_METHOD,
        "coefficient": None,
        "exponent_n": None,
        "exponent_d": None,
        "intervals": {},
        "points": [o.to_dict() for o in found],
        "per_budget": [],
        "joint": None,
    }
    if not found:
        counts: dict[tuple[float, float, float | None], set[float]] = {}
        for p in points:
            counts.setdefault((p.params, p.tokens, p.other), set()).add(p.value)
        most = max((len(v) for v in counts.values()), default=0)
        data["missing"] = f"no {name.upper()} law: no (N, D) has >= {MIN_VALUES} {label}s (at most {most})"
        return data
    usable = [o for o in found if o.usable]
    laws = []
    for tokens in sorted({o.tokens for o in usable}):
        at = [o for o in usable if o.tokens == tokens]
        if len({o.params for o in at}) >= MIN_LAW_SIZES:
            laws.append(_loglinear(at, joint=False))
    data["per_budget"] = [law.to_dict() for law in laws]
    sizes = sorted({o.params for o in usable})
    per_size = [len({o.tokens for o in usable if o.params == n}) for n in sizes]
    if len(sizes) >= MIN_LAW_SIZES and min(per_size) >= 2:
        joint = _loglinear(usable, joint=True)
        data["joint"] = joint.to_dict()
        top: OptimumLaw | None = joint
    else:
        top = laws[-1] if laws else None
    if top is None:
        left_out = len(found) - len(usable)
        outside = f" ({left_out} optima outside the sweep or not convex, left out)" if left_out else ""
        data["missing"] = (
            f"no {name.upper()} law: {name.upper()}* inside the sweep at {len(sizes)} model sizes "
            f"({_nums(sizes)}) at any one budget at most; needs >= {MIN_LAW_SIZES}{outside}"
        )
        return data
    data.update(
        {
            "coefficient": top.coefficient,
            "exponent_n": top.exponent_n,
            "exponent_d": top.exponent_d,
            "intervals": {k: list(v) if v else None for k, v in top.intervals.items()},
            "law_tokens": top.tokens,
        }
    )
    return data


def law_text(data: Mapping[str, Any]) -> list[str]:
    """The law and each optimum in words, one line each (the report's and ``autoexp fit``'s wording)."""
    name = str(data["hyperparameter"]).upper()
    lines = []
    if data.get("missing"):
        lines.append(str(data["missing"]))
    else:
        ivs = data["intervals"]
        law = f"{name}*(N, D) = {data['coefficient']:.3g} * N^{_number(data['exponent_n'], '.3f')}"
        parts = [f"a in {_interval(ivs.get('exponent_n'), '.3f')}"]
        if data["exponent_d"] is not None:
            law += f" * D^{_number(data['exponent_d'], '.3f')}"
            parts.append(f"b in {_interval(ivs.get('exponent_d'), '.3f')}")
        else:
            law = law.replace("(N, D)", "(N)") + f" at D = {data['law_tokens']:.3g}"
        parts.append(f"c in {_interval(ivs.get('coefficient'), '.3g')}")
        used = sum(1 for p in data["points"] if p["status"] == "in sweep")
        lines.append(f"{law} ({', '.join(parts)}; 95%, {used} optima)")
    for p in data["points"]:
        where = f"N = {p['params']:.3g}, D = {p['tokens']:.3g}"
        swept = f"swept {p['swept'][0]:.3g} to {p['swept'][1]:.3g}"
        if p["status"] == "not convex":
            lines.append(f"  {where}: no minimum (loss not convex in log {name}; {swept})")
        elif p["status"] == "in sweep":
            ci = _interval(p["interval"], ".3g") if p["interval"] else "no interval (3 values)"
            lines.append(f"  {where}: {name}* = {p['optimum']:.3g} {ci} ({swept})")
        else:
            lines.append(
                f"  {where}: parabola minimum {p['optimum']:.3g} is {p['status']} ({swept}): not used"
            )
    return lines


def _interval(value: Sequence[float] | None, spec: str) -> str:
    return f"[{_number(value[0], spec)}, {_number(value[1], spec)}]" if value else "[no interval]"


def _number(value: float, spec: str) -> str:
    """``value`` in ``spec``, without the sign of one that rounds to zero: an exponent fitted as zero up
    to rounding noise, whose sign differs between numpy and scipy releases, reads 0.000, not -0.000."""
    text = f"{value:{spec}}"
    return text[1:] if text.startswith("-") and float(text) == 0 else text
