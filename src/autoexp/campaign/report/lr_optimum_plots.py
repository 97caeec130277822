"""PNG plots of an optimum law (``lr_optimum.optimum_law``'s JSON): the parabolas and the law."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

SaveFigure = Callable[[Any, str], None]


def optimum_plots(data: Mapping[str, Any], plt: Any, save: SaveFigure) -> None:
    """``<name>_parabolas.png`` (loss against the value per (N, D): the runs, the fitted parabola, its
    minimum) and, when there is a law, ``<name>_law.png`` (the optima with their intervals against N,
    and the law at each budget). ``save(fig, file_name)`` writes and closes a figure."""
    name, found = str(data["hyperparameter"]), data.get("points") or []
    if not found:
        return
    label = name.upper()
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for i, p in enumerate(found):
        colour = f"C{i % 10}"
        xs, ys = zip(*p["observed"], strict=True)
        ax.scatter(xs, ys, color=colour, s=12)
        c2, c1, c0 = p["parabola"]
        low, high = math.log(p["swept"][0]), math.log(p["swept"][1])
        grid = [low + (high - low) * k / 40 for k in range(41)]
        ax.plot([math.exp(x) for x in grid], [c2 * x * x + c1 * x + c0 for x in grid], color=colour, lw=1)
        tag = f"N={p['params']:.3g}, D={p['tokens']:.3g}"
        if p["optimum"] is not None and p["status"] == "in sweep":
            x = math.log(p["optimum"])
            ax.plot([p["optimum"]], [c2 * x * x + c1 * x + c0], marker="*", ms=10, color=colour)
        elif p["status"] != "in sweep":
            tag += f" ({p['status']})"
        ax.plot([], [], color=colour, label=tag)
    ax.set_xscale("log")
    ax.set_xlabel(f"{label} (log scale)")
    ax.set_ylabel("final training loss")
    ax.set_title(f"loss vs {label} per (N, D): parabola in log {label}, * its minimum", fontsize=8)
    ax.legend(fontsize=6)
    save(fig, f"{name}_parabolas.png")

    used = [p for p in found if p["status"] == "in sweep"]
    if data.get("coefficient") is None or not used:
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    budgets = sorted({p["tokens"] for p in used})
    sizes = sorted({p["params"] for p in used})
    c, a, b = data["coefficient"], data["exponent_n"], data["exponent_d"]
    for i, tokens in enumerate(budgets):
        colour = f"C{i % 10}"
        at = sorted((p for p in used if p["tokens"] == tokens), key=lambda p: p["params"])
        lows = [p["optimum"] - p["interval"][0] if p["interval"] else 0.0 for p in at]
        highs = [p["interval"][1] - p["optimum"] if p["interval"] else 0.0 for p in at]
        ax.errorbar(
            [p["params"] for p in at],
            [p["optimum"] for p in at],
            yerr=[lows, highs],
            fmt="o",
            color=colour,
            label=f"D = {tokens:.3g}",
        )
        if b is not None or tokens == data.get("law_tokens"):
            law = [c * n**a * tokens ** (b or 0.0) for n in sizes]
            ax.plot(sizes, law, color=colour, lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("parameters N")
    ax.set_ylabel(f"optimal {label} (parabola minimum, 95% interval)")
    form = f"{label}* = {c:.3g} N^{a:.3f}" + (f" D^{b:.3f}" if b is not None else "")
    ax.set_title(f"{form} (lines), optima per (N, D) (points)", fontsize=8)
    ax.legend(fontsize=7)
    save(fig, f"{name}_law.png")
