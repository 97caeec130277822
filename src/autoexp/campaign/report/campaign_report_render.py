"""Campaign report files: grid.csv, gpu_hours.csv, campaign.json, a text table, PNG plots, index.html."""

from __future__ import annotations

import base64
import csv
import html
import io
import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autoexp.campaign.report import attempts as per_attempt
from autoexp.campaign.report.cost_text import TITLE as COST_TITLE
from autoexp.campaign.report.cost_text import cost_lines, cost_table
from autoexp.campaign.report.fit_validation import fit_text, holdout_text
from autoexp.campaign.report.lr_optimum import law_text
from autoexp.campaign.report.lr_optimum_plots import optimum_plots
from autoexp.campaign.report.scaling_fit import compute_optimal

HOURS_COLUMNS = (
    "dag_id", "experiment", "phase", "attempt", "job_id", "job_name", "state", "unit", "allocated",
    "elapsed_s", "hours", "wasted_hours",
)  # fmt: skip
_COLOURS = {"done": "#c7e9c0", "running": "#c6dbef", "failed": "#fcbba1", "missing": "#eeeeee"}


def _fmt(value: Any) -> str:
    if value is None or value == "":
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def phase_keys(experiments: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(k for e in experiments for k in e["cells"]))


def _axis_names(experiments: Sequence[Mapping[str, Any]]) -> list[str]:
    return list(dict.fromkeys(k for e in experiments for k in e["axes"]))


def grid_csv(experiments: Sequence[Mapping[str, Any]]) -> str:
    """One row per experiment; per phase its state, final loss and every metric."""
    axes, phases = _axis_names(experiments), phase_keys(experiments)
    metrics = {
        p: sorted({m for e in experiments for m in e["cells"].get(p, {}).get("metrics", {})}) for p in phases
    }
    header = ["dag_id", "experiment", *axes, "params", "gpu_hours"]
    for p in phases:
        header += [f"{p}:state", f"{p}:tokens", f"{p}:final_loss", *(f"{p}:{m}" for m in metrics[p])]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(header)
    for e in experiments:
        row: list[Any] = [e["dag_id"], e["experiment"], *(e["axes"].get(a, "") for a in axes)]
        row += [e["params"] or "", round(float(e["gpu_hours"]), 6)]
        for p in phases:
            c = e["cells"].get(p, {"state": "missing", "metrics": {}})
            row += [c["state"], c.get("tokens") or "", _blank(c.get("final_loss"))]
            row += [_blank(c["metrics"].get(m)) for m in metrics[p]]
        writer.writerow(row)
    return out.getvalue()


def _blank(value: Any) -> Any:
    return "" if value is None else value


def hours_csv(rows: Sequence[Mapping[str, Any]]) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, fieldnames=HOURS_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for r in rows:
        writer.writerow({k: r.get(k, "") for k in HOURS_COLUMNS})
    return out.getvalue()


def text_table(experiments: Sequence[Mapping[str, Any]]) -> str:
    """The grid for the task log: one line per experiment, ``state loss`` per phase."""
    axes, phases = _axis_names(experiments), phase_keys(experiments)
    lines = [["experiment", *axes, *phases, "hours"]]
    for e in experiments:
        cells = [e["cells"].get(p, {"state": "missing"}) for p in phases]
        lines.append(
            [
                e["experiment"],
                *(e["axes"].get(a, "-") for a in axes),
                *(f"{c['state']} {_fmt(c.get('final_loss'))}" for c in cells),
                _fmt(float(e["gpu_hours"])),
            ]
        )
    widths = [max(len(line[i]) for line in lines) for i in range(len(lines[0]))]
    return "\n".join(
        "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)).rstrip() for line in lines
    )


LAW = "L(N, D) = E + A/N^alpha + B/D^beta"


def answer_sections(campaign: Mapping[str, Any]) -> list[tuple[str, list[str]]]:
    """The campaign's answer as (title, lines): the fit with its intervals and start spread (or why
    there is none) and the compute-optimal N, D of each asked budget; the held-out check; the
    optimal-LR law (and the batch law when the grid varies it); what it cost. The task log, the demo's
    printout and the Campaigns page all show these lines."""
    fit = campaign["fit"]
    lines = (
        ["scaling-law fit: " + fit["missing"]] if "missing" in fit else ["scaling-law fit:", *fit_text(fit)]
    )
    for compute, opt in fit.get("compute_optimal", {}).items():
        lines.append(
            f"C = {compute} FLOPs: N_opt = {opt['params']:.3g} {_range(opt.get('params_interval'))}, "
            f"D_opt = {opt['tokens']:.3g} {_range(opt.get('tokens_interval'))} (compute-optimal, 95%)"
        )
    sections = [(f"Scaling law {LAW}", lines)]
    sections.append(("Held-out check", holdout_text(campaign.get("holdout") or {"missing": "not computed"})))
    titles = {"lr_optimum": "Optimal learning rate", "batch_optimum": "Optimal batch size"}
    sections += [(title, law_text(campaign[key])) for key, title in titles.items() if key in campaign]
    sections.append((COST_TITLE, cost_lines(campaign)))
    return sections


def answer_text(campaign: Mapping[str, Any]) -> str:
    """:func:`answer_sections` as text, one line each (the task log's and the demo's)."""
    return "\n".join(line for _, lines in answer_sections(campaign) for line in lines)


def _range(interval: Sequence[float] | None) -> str:
    return f"[{interval[0]:.3g}, {interval[1]:.3g}]" if interval else "[no interval]"


def plots(
    campaign: Mapping[str, Any], reports: Mapping[str, Sequence[Mapping[str, Any]]], out_dir: Path
) -> list[str]:
    """Loss vs tokens per model, loss vs compute with frontier and fit, best LR vs size, hours per model,
    fit residuals; returns the file names written."""
    import matplotlib

    matplotlib.use("Agg")  # no display on workers
    import matplotlib.pyplot as plt

    experiments = campaign["experiments"]
    models = list(dict.fromkeys(_model(e) for e in experiments))
    colour = {m: f"C{i % 10}" for i, m in enumerate(models)}
    written: list[str] = []

    def save(fig: Any, name: str) -> None:
        fig.tight_layout()
        fig.savefig(out_dir / name, dpi=80)
        plt.close(fig)
        written.append(name)

    fig, ax = plt.subplots(figsize=(6, 4))
    for e in experiments:
        for phase in dict.fromkeys(str(r.get("phase")) for r in reports.get(e["dag_id"], ())):
            pts = sorted(
                (r["tokens"], r["train_loss"])
                for r in reports.get(e["dag_id"], ())
                if r.get("phase") == phase and r.get("tokens") and r.get("train_loss") is not None
            )
            if pts:
                ax.plot(*zip(*pts, strict=True), marker=".", color=colour[_model(e)], alpha=0.7)
    for m in models:
        ax.plot([], [], color=colour[m], label=m)
    _axes(ax, "training tokens", "training loss", "loss vs tokens, one colour per model")
    save(fig, "loss_vs_tokens.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    for e in experiments:
        pts = [
            (6 * e["params"] * c["tokens"], c["final_loss"])
            for c in e["cells"].values()
            if e["params"] and c.get("tokens") and c.get("final_loss") is not None
        ]
        if pts:
            xs, ys = zip(*pts, strict=True)
            ax.scatter(xs, ys, color=colour[_model(e)], s=14)
    front = campaign["frontier"]
    if front:
        ax.plot([f["compute"] for f in front], [f["loss"] for f in front], "k--", label="frontier")
    fit = campaign["fit"]
    if "values" in fit and front:
        cs = [
            front[0]["compute"] * (front[-1]["compute"] / front[0]["compute"]) ** (i / 40) for i in range(41)
        ]
        v = fit["values"]
        opt = [compute_optimal(v, c) for c in cs]
        law = [v["E"] + v["A"] / n ** v["alpha"] + v["B"] / d ** v["beta"] for n, d in opt]
        ax.plot(cs, law, "r-", label="fit at compute-optimal N, D")
    for m in models:
        ax.scatter([], [], color=colour[m], label=m)
    _axes(ax, "training compute C = 6 N D (FLOPs)", "final training loss", "loss vs compute")
    save(fig, "loss_vs_compute.png")

    best = [b for b in campaign["best"] if _number(b.get("LR")) is not None]
    if best:
        fig, ax = plt.subplots(figsize=(6, 4))
        for tokens in sorted({b["tokens"] for b in best}):
            pts = sorted((b["params"], _number(b["LR"])) for b in best if b["tokens"] == tokens)
            ax.plot(*zip(*pts, strict=True), marker="o", label=f"{tokens:.3g} tokens")
        ax.set_yscale("log")
        _axes(ax, "parameters N", "best learning rate", "best LR vs model size")
        save(fig, "best_lr_vs_size.png")

    fig, ax = plt.subplots(figsize=(6, 4))
    per_model = {m: sum(e["gpu_hours"] for e in experiments if _model(e) == m) for m in models}
    ax.bar(list(per_model), list(per_model.values()), color=[colour[m] for m in per_model])
    unit = "/".join(sorted(campaign["gpu_hours"].get("by_unit", {}))) or "gpu"
    ax.set_ylabel(f"{unit}-hours")
    ax.set_title("hours per model (elapsed x allocated GPUs, CPUs where no GPU)", fontsize=8)
    save(fig, "gpu_hours_per_model.png")

    for key in ("lr_optimum", "batch_optimum"):
        if key in campaign:
            optimum_plots(campaign[key], plt, save)

    if fit.get("residuals"):
        fig, ax = plt.subplots(figsize=(6, 3))
        ax.axhline(0, color="k", lw=0.5)
        ax.plot(fit["residuals"], "o")
        ax.set_xlabel("point")
        ax.set_ylabel("log L_fit - log L")
        ax.set_title("fit residuals", fontsize=8)
        save(fig, "fit_residuals.png")
    return written


def _axes(ax: Any, xlabel: str, ylabel: str, title: str) -> None:
    ax.set_xscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=8)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _model(e: Mapping[str, Any]) -> str:
    return str(e["axes"].get("MODEL") or (f"{e['params']:.3g}" if e["params"] else e["experiment"]))


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def _table(header: Sequence[str], rows: Sequence[Sequence[Any]], styles: Sequence[str] = ()) -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = []
    for i, r in enumerate(rows):
        style = f' style="background:{styles[i]}"' if i < len(styles) and styles[i] else ""
        body.append(f"<tr{style}>" + "".join(f"<td>{html.escape(_fmt(v))}</td>" for v in r) + "</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def index_html(campaign: Mapping[str, Any], out_dir: Path) -> str:
    """One self-contained page: the grid coloured by state, best runs, frontier, fit, hours, plots inline."""
    experiments = campaign["experiments"]
    axes, phases = _axis_names(experiments), phase_keys(experiments)
    grid_rows = []
    for e in experiments:
        cells = []
        for p in phases:
            c = e["cells"].get(p, {"state": "missing"})
            colour = _COLOURS.get(c["state"], "")
            text = html.escape(f"{c['state']} {_fmt(c.get('final_loss'))}")
            cells.append(f'<td style="background:{colour}">{text}</td>')
        named = "".join(f"<td>{html.escape(str(e['axes'].get(a, '-')))}</td>" for a in axes)
        grid_rows.append(
            f"<tr><td>{html.escape(e['experiment'])}</td>{named}{''.join(cells)}"
            f"<td>{_fmt(float(e['gpu_hours']))}</td></tr>"
        )
    head = "".join(f"<th>{html.escape(h)}</th>" for h in ["experiment", *axes, *phases, "hours"])
    fit = campaign["fit"]
    if "values" in fit:
        spread = fit.get("start_spread", {})
        fit_html = _table(
            [
                "parameter",
                "value",
                f"95% interval ({fit['bootstrap']} bootstrap resamples)",
                f"range across {fit.get('starts', 0)} L-BFGS starts ({fit.get('starts_at_best', 0)} at best)",
            ],
            [
                [
                    k,
                    v,
                    " - ".join(_fmt(x) for x in fit["intervals"].get(k, [])),
                    " - ".join(_fmt(x) for x in spread.get(k, [])),
                ]
                for k, v in fit["values"].items()
            ],
        )
    else:
        fit_html = f"<p>{html.escape(str(fit.get('missing', 'no fit')))}</p>"
    answer_html = "".join(
        f"<h2>{title}</h2><pre>{html.escape(chr(10).join(lines))}</pre>"
        for title, lines in (
            (
                "Held-out check (fit without the largest model size)",
                holdout_text(campaign.get("holdout") or {}),
            ),
            ("Optimal learning rate", law_text(campaign["lr_optimum"]) if "lr_optimum" in campaign else []),
            (
                "Optimal batch size",
                law_text(campaign["batch_optimum"]) if "batch_optimum" in campaign else [],
            ),
            (COST_TITLE, cost_lines(campaign)),
        )
        if lines
    )
    best = campaign["best"]
    best_cols = list(dict.fromkeys(k for b in best for k in b))
    best_html = _table(best_cols, [[b.get(c) for c in best_cols] for b in best])
    front_cols = ["compute", "params", "tokens", "loss", "dag_id", "phase"]
    front_html = _table(front_cols, [[f[k] for k in front_cols] for f in campaign["frontier"]])
    costs = cost_table(campaign)
    cost_html = (
        ""
        if costs is None
        else f"<p>{html.escape(costs['caption'])}</p>" + _table(costs["header"], costs["rows"])
    )
    trainings = campaign.get("training_attempts") or []
    lost = ", ".join(
        f"{k.replace('_', ' ')} {_fmt(float(v))}"
        for k, v in campaign.get("cost", {}).get("lost_by_cause", {}).items()
    )
    attempts_html = (
        f"<h2>What each training attempt did</h2><p>hours lost: {html.escape(lost)}</p>"
        + _table(per_attempt.TABLE_COLUMNS, per_attempt.table_rows(trainings))
        if trainings
        else ""
    )
    images = "".join(
        f'<figure><img alt="{html.escape(name)}" src="data:image/png;base64,'
        f'{base64.b64encode((out_dir / name).read_bytes()).decode()}"></figure>'
        for name in campaign["plots"]
    )
    title = f"Campaign {campaign['campaign']}"
    return f"""<!doctype html>
<html><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<style>body{{font-family:sans-serif;margin:1em}}table{{border-collapse:collapse;font-size:12px}}
td,th{{border:1px solid #ccc;padding:2px 6px}}figure{{display:inline-block;margin:4px}}</style></head>
<body><h1>{html.escape(title)}</h1><p>generated {html.escape(campaign["generated_at"])}</p>
<h2>Grid</h2><table><tr>{head}</tr>{"".join(grid_rows)}</table>
<h2>Best learning rate / batch per model size and token budget</h2>{best_html}
<h2>Loss-vs-compute frontier</h2>{front_html}
<h2>Scaling-law fit L(N, D) = E + A/N^&alpha; + B/D^&beta;</h2>{fit_html}
{answer_html}{cost_html}
{attempts_html}
<h2>Plots</h2>{images}
</body></html>
"""


def _write(path: Path, text: str) -> None:
    """Write through a temporary name and rename: the UI never reads a half-written file."""
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)


def write_files(
    campaign: dict[str, Any],
    attempts: Sequence[Mapping[str, Any]],
    reports: Mapping[str, Sequence[Mapping[str, Any]]],
    out_dir: Path,
) -> list[Path]:
    """grid.csv, gpu_hours.csv, the plots, campaign.json (naming the plots) and index.html, in out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    _write(out_dir / "grid.csv", grid_csv(campaign["experiments"]))
    _write(out_dir / "gpu_hours.csv", hours_csv(attempts))
    campaign["plots"] = plots(campaign, reports, out_dir)
    _write(out_dir / "campaign.json", json.dumps(campaign, indent=1, default=_json_default) + "\n")
    _write(out_dir / "index.html", index_html(campaign, out_dir))
    names = ["grid.csv", "gpu_hours.csv", *campaign["plots"], "campaign.json", "index.html"]
    return [out_dir / n for n in names]


def _json_default(value: Any) -> Any:
    return str(value)
