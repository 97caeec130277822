"""Campaign report data: eval scores and training losses per checkpoint -> tables (CSV, JSON), plots."""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_LOSS = re.compile(r"iteration\s+(\d+)\s*/\s*\d+\s*\|.*?lm loss:\s*([0-9.eE+-]+)")
_VAL_LOSS = re.compile(r"validation loss at iteration\s+(\d+).*?lm loss value:\s*([0-9.eE+-]+)")
_PREFERRED = ("acc_norm,none", "acc,none", "exact_match,none")
# Perplexity tasks have no accuracy: their metric is shown in its own column (lower is better) and
# kept out of the mean score, where it would not mean anything.
_PERPLEXITY = ("word_perplexity,none", "byte_perplexity,none", "bits_per_byte,none")
COLUMNS = ("phase", "branch", "iteration", "tokens", "flops", "train_loss", "val_loss", "score")


def losses_from_log(text: str) -> tuple[dict[int, float], dict[int, float]]:
    """Megatron-format training and validation losses by iteration (later lines win: resumed runs)."""
    train = {int(m.group(1)): float(m.group(2)) for m in _LOSS.finditer(text)}
    val = {int(m.group(1)): float(m.group(2)) for m in _VAL_LOSS.finditer(text)}
    return train, val


def _first_metric(results: Mapping[str, Any], names: Sequence[str], accuracy_tasks: bool) -> dict[str, float]:
    """The first of ``names`` each task reports, keyed ``task/metric``; tasks reporting an accuracy-type
    metric are taken (accuracy_tasks) or skipped (the perplexity tasks)."""
    found: dict[str, float] = {}
    for task, metrics in sorted(dict(results.get("results", {})).items()):
        if not isinstance(metrics, Mapping):
            continue
        if not accuracy_tasks and any(name in metrics for name in _PREFERRED):
            continue
        for name in names:
            value = metrics.get(name)
            if isinstance(value, int | float):
                found[f"{task}/{name.split(',')[0]}"] = float(value)
                break
    return found


def scores_from_results(results: Mapping[str, Any]) -> dict[str, float]:
    """One metric per lm-eval task (acc_norm, else acc, else exact_match), keyed ``task/metric``."""
    return _first_metric(results, _PREFERRED, accuracy_tasks=True)


def perplexities_from_results(results: Mapping[str, Any]) -> dict[str, float]:
    """The first perplexity metric of each perplexity task (word, else byte, else bits per byte)."""
    return _first_metric(results, _PERPLEXITY, accuracy_tasks=False)


def _at_or_before(series: Mapping[int, float], iteration: int) -> float | None:
    earlier = [i for i in series if i <= iteration]
    return series[max(earlier)] if earlier else None


def row(
    phase: str,
    branch: str | None,
    iteration: int,
    tokens_per_iter: int | None,
    params_count: int | None,
    losses: tuple[Mapping[int, float], Mapping[int, float]],
    results: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """One table row; the score is the mean of the per-task metrics (None without results)."""
    tokens = iteration * tokens_per_iter if tokens_per_iter else None
    scores = scores_from_results(results) if results else {}
    perplexities = perplexities_from_results(results) if results else {}
    return {
        "phase": phase,
        "branch": branch or "",
        "iteration": iteration,
        "tokens": tokens,
        # Kaplan's 6 N D training compute, the usual x axis of scaling-law plots.
        "flops": 6 * params_count * tokens if params_count and tokens else None,
        "train_loss": _at_or_before(losses[0], iteration),
        "val_loss": losses[1].get(iteration),
        "score": sum(scores.values()) / len(scores) if scores else None,
        **scores,
        **perplexities,
    }


def columns_of(rows: Sequence[Mapping[str, Any]]) -> list[str]:
    """Fixed columns first, then every task metric seen, sorted."""
    extra = sorted({k for r in rows for k in r} - set(COLUMNS))
    return [*COLUMNS, *extra]


def to_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    """The table as CSV text."""
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=columns_of(rows), lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: "" if v is None else v for k, v in r.items()})
    return out.getvalue()


def to_text(rows: Sequence[Mapping[str, Any]]) -> str:
    """A fixed-width table for the task log."""
    cols = [c for c in columns_of(rows) if c != "flops"]

    def fmt(v: Any) -> str:
        if v is None or v == "":
            return "-"
        return f"{v:.4g}" if isinstance(v, float) else str(v)

    cells = [cols, *[[fmt(r.get(c)) for c in cols] for r in rows]]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cols))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)) for line in cells)


def plot(rows: Sequence[Mapping[str, Any]], out_dir: Path, title: str) -> list[Path]:
    """PNG plots of score, loss and each perplexity metric against tokens and against compute, one
    line per phase/branch."""
    import matplotlib

    matplotlib.use("Agg")  # no display on workers
    import matplotlib.pyplot as plt

    written: list[Path] = []
    perplexities = sorted({k for r in rows for k in r if k.endswith("perplexity") and "/" in k})
    labels = {"score": "mean eval score", "train_loss": "training loss"}
    for y in ("score", "train_loss", *perplexities):
        for x in ("tokens", "flops"):
            fig, ax = plt.subplots(figsize=(6, 4))
            for phase in dict.fromkeys(str(r["phase"]) for r in rows):
                pts = sorted(
                    (r[x], r[y]) for r in rows if r["phase"] == phase and r[x] and r.get(y) is not None
                )
                if pts:
                    ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=phase)
            ax.set_xlabel("training tokens" if x == "tokens" else "training compute (6ND FLOPs)")
            ax.set_ylabel(labels.get(y, f"{y} (lower is better)"))
            ax.set_xscale("log")
            if y in perplexities:
                ax.set_yscale("log")
            ax.set_title(title, fontsize=8)
            if ax.lines:
                ax.legend(fontsize=7)
            path = out_dir / f"{y.replace('/', '_')}_vs_{x}.png"
            fig.tight_layout()
            fig.savefig(path, dpi=80)
            plt.close(fig)
            written.append(path)
    return written


def write_tables(rows: Sequence[Mapping[str, Any]], out_dir: Path) -> list[Path]:
    """Write report.csv and report.json into out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path, json_path = out_dir / "report.csv", out_dir / "report.json"
    csv_path.write_text(to_csv(rows), encoding="utf-8")
    json_path.write_text(json.dumps(list(rows), indent=1), encoding="utf-8")
    return [csv_path, json_path]
