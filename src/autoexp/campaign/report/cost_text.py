"""What a campaign cost, in words and as a phase x cause table: the answer's "What it cost" section."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

TITLE = "What it cost"
CAUSES = {"training": "training", "conversion_evaluation": "conversion + evaluation", "wasted": "wasted"}
LOST = {"start_up": "start-up", "recomputed": "recomputed", "no_progress": "no progress"}
_UNITS = {"gpu": "GPU-hours", "cpu": "CPU-hours"}


def _n(value: Any) -> str:
    """A figure as read: 3 significant digits, whole thousands with separators (``951,329``)."""
    number = float(value)
    return f"{number:,.0f}" if 1e3 <= abs(number) < 1e6 else f"{number:.3g}"


def _unit(by_unit: Mapping[str, Any]) -> tuple[str, str]:
    """The hours' unit and, where it is not GPUs, why: sacct allocated no GPU (the local cluster)."""
    units = sorted(by_unit)
    if units == ["cpu"]:
        return "CPU-hours", " (no GPU was allocated: elapsed x allocated CPUs)"
    if len(units) > 1:
        split = ", ".join(f"{_n(by_unit[u])} {_UNITS.get(u, u + '-hours')}" for u in units)
        return "hours", f" (GPU-hours and CPU-hours of jobs without a GPU, summed: {split})"
    return "GPU-hours", ""


def hours_unit(campaign: Mapping[str, Any]) -> str:
    """The unit of a report's hours (``CPU-hours`` where no job had a GPU), for a column header."""
    by_unit = (
        campaign.get("gpu_hours", {}).get("by_unit")
        if isinstance(campaign.get("gpu_hours"), Mapping)
        else None
    )
    return _unit(by_unit)[0] if isinstance(by_unit, Mapping) and by_unit else "GPU-hours"


def cost_lines(campaign: Mapping[str, Any]) -> list[str]:
    """The section's lines: total and wasted hours in their unit; the split by cause, then per phase;
    the time lost in training attempts by cause; tokens per hour per model size. A report without
    the cost fields (written before them) or with unreadable ones gets one line saying so."""
    try:
        return _lines(campaign)
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return [f"what it cost: this report's cost fields cannot be read ({exc!r})"]


def _lines(campaign: Mapping[str, Any]) -> list[str]:
    if "gpu_hours" not in campaign:
        return ["what it cost: not in this report (its campaign.json has no gpu_hours)"]
    hours = campaign["gpu_hours"]
    unit, why = _unit(hours.get("by_unit") or {})
    total = f"{_n(hours['total'])} {unit}, {_n(hours['wasted'])} wasted{why}"
    if "cost" not in campaign:
        return [f"what it cost: {total}; no split by phase and cause (this campaign.json has no cost)"]
    cost = campaign["cost"]
    lines = [f"what it cost: {total}", f"by cause: {_split(cost['by_cause'])} {unit}"]
    lines += [f"  {phase}: {_split(split)}" for phase, split in cost["by_phase"].items()]
    if cost.get("wasted_by_state"):
        states = ", ".join(f"{s} {_n(h)}" for s, h in sorted(cost["wasted_by_state"].items()))
        lines.append(f"wasted by how the attempt ended: {states} {unit}")
    if "lost_by_cause" in cost:
        lost = ", ".join(f"{LOST.get(k, k)} {_n(v)}" for k, v in cost["lost_by_cause"].items())
        lines.append(f"lost in training attempts (from their logs, within the hours above): {lost} {unit}")
    rates = cost.get("tokens_per_hour") or []
    lines.append("tokens per hour: no finished training" if not rates else "tokens per hour of training:")
    for r in rates:
        per = _UNITS.get(r["unit"], f"{r['unit']}-hours")
        lines.append(
            f"  {r['model'] or 'model'} ({_n(r['params'])} params): {_n(r['tokens_per_hour'])} tokens per "
            f"{per.removesuffix('s')} ({_n(r['tokens'])} tokens in {_n(r['hours'])} {per})"
        )
    return lines


def _split(split: Mapping[str, Any]) -> str:
    return ", ".join(f"{CAUSES.get(cause, cause)} {_n(hours)}" for cause, hours in split.items())


def cost_table(campaign: Mapping[str, Any]) -> dict[str, Any] | None:
    """Hours per phase (rows, then all phases) and cause (columns, then their total), as text cells:
    ``{"caption", "header", "rows"}``; None when the report has no readable split."""
    try:
        cost, by_unit = campaign["cost"], campaign["gpu_hours"].get("by_unit") or {}
        phases = [*cost["by_phase"].items(), ("all phases", cost["by_cause"])]
        rows = [
            [phase, *(_n(split.get(c, 0.0)) for c in CAUSES), _n(sum(float(v) for v in split.values()))]
            for phase, split in phases
        ]
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    unit = _unit(by_unit)[0]
    return {
        "caption": f"{unit} by phase and cause",
        "header": ["phase", *CAUSES.values(), "total"],
        "rows": rows,
    }
