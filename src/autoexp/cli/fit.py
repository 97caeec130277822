"""``autoexp fit CSV``: the scaling-law fit of a CSV of runs (params, tokens, loss, lr, batch); no Airflow."""

from __future__ import annotations

import argparse
import csv
import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from autoexp.campaign.report.lr_optimum import SweepPoint
    from autoexp.campaign.report.scaling_fit import Point

EXIT_BAD_INPUT = 2
_COLUMNS = ("params", "tokens", "loss")
_SWEPT = ("lr", "batch")


def add_parser(sub: Any) -> None:
    """The ``fit`` subcommand's arguments."""
    text = (
        "fit L(N,D) = E + A/N^alpha + B/D^beta to a CSV with columns params,tokens,loss (optional: lr, "
        "batch for the optimal-LR and -batch laws, flops; others ignored)"
    )
    cmd = sub.add_parser("fit", help=text, description=text)
    cmd.add_argument("csv", type=Path, help="one row per finished run")
    cmd.add_argument("--json", type=Path, metavar="OUT", help="also write the fit as JSON to OUT")
    cmd.add_argument(
        "--budgets", default="", metavar="C1,C2", help="compute budgets (FLOPs) to predict N, D for"
    )
    cmd.add_argument("--bootstrap", type=int, default=100, help="bootstrap resamples for the intervals")
    cmd.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")


def read_points(path: Path) -> list[Point]:
    """Rows of the CSV as points; a bad cell raises FitError naming file, line and column."""
    return [point for point, _ in read_rows(path)]


def read_rows(path: Path) -> list[tuple[Point, dict[str, float]]]:
    """Each row's point and its optional ``lr`` and ``batch`` (absent when the cell is empty)."""
    from autoexp.campaign.report.scaling_fit import FitError, Point

    try:
        with path.open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            missing = [c for c in _COLUMNS if c not in (reader.fieldnames or [])]
            if missing:
                raise FitError(
                    f"{path}:1: missing column(s) {', '.join(missing)} (needs {','.join(_COLUMNS)})"
                )
            rows = []
            for row in reader:
                values = [_number(path, reader.line_num, c, row[c]) for c in _COLUMNS]
                optional = {
                    c: _number(path, reader.line_num, c, row[c])
                    for c in ("flops", *_SWEPT)
                    if row.get(c) not in (None, "")
                }
                point = Point(values[0], values[1], values[2], flops=optional.pop("flops", None))
                rows.append((point, optional))
    except OSError as exc:
        raise FitError(f"{path}: {exc.strerror or exc}") from None
    return rows


def _sweep(rows: list[tuple[Point, dict[str, float]]], name: str) -> list[SweepPoint]:
    from autoexp.campaign.report.lr_optimum import SweepPoint

    other = next(c for c in _SWEPT if c != name)
    return [
        SweepPoint(p.params, p.tokens, swept[name], p.loss, swept.get(other))
        for p, swept in rows
        if name in swept
    ]


def _best_per_cell(points: list[Point]) -> list[Point]:
    best: dict[tuple[float, float], Point] = {}
    for p in points:
        if (p.params, p.tokens) not in best or p.loss < best[(p.params, p.tokens)].loss:
            best[(p.params, p.tokens)] = p
    return [best[k] for k in sorted(best)]


def _number(path: Path, line: int, column: str, text: str | None) -> float:
    from autoexp.campaign.report.scaling_fit import FitError

    try:
        value = float(text or "")
    except ValueError:
        raise FitError(f"{path}:{line}: {column} = {text!r} is not a number") from None
    if not math.isfinite(value) or value <= 0:
        raise FitError(f"{path}:{line}: {column} = {text!r}: needs a finite positive number")
    return value


def _budgets(text: str) -> list[float]:
    from autoexp.campaign.report.scaling_fit import FitError

    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise FitError(f"--budgets {text!r}: expected FLOPs separated by commas, e.g. 1e21,5.76e23") from None
    if any(not math.isfinite(v) or v <= 0 for v in values):
        raise FitError(f"--budgets {text!r}: budgets must be positive")
    return values


def run(args: argparse.Namespace) -> int:
    """Print the fit with its intervals, the held-out check and the optimal-LR (and batch) law; exit 2
    with one line on bad or too little input."""
    # numpy/scipy load here only: the other subcommands start fast.
    from autoexp.campaign.report.fit_validation import fit_text, holdout, holdout_text
    from autoexp.campaign.report.lr_optimum import law_text, optimum_law
    from autoexp.campaign.report.scaling_fit import FitError, fit_law, frontier_laws

    try:
        rows = read_rows(args.csv)
        budgets = _budgets(args.budgets)
        points = [p for p, _ in rows]
        swept = [c for c in _SWEPT if any(c in s for _, s in rows)]
        if swept:  # a sweep's worse runs are not the law's: the best run per (N, D) is, as in the report
            points = _best_per_cell(points)
        fit = fit_law(points, bootstrap=args.bootstrap, seed=args.seed, budgets=budgets)
    except FitError as exc:
        print(f"autoexp fit: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    data = fit.to_dict()
    if swept:
        print(f"{len(rows)} runs, the best per (N, D) fitted")
    print("\n".join(fit_text(data)))
    for compute, opt in fit.optima.items():
        print(f"C = {compute:.3g} FLOPs: N_opt = {opt['params']:.3g}, D_opt = {opt['tokens']:.3g}")
    laws = frontier_laws(points)
    if isinstance(laws, str):
        print(laws)
        data["frontier_laws"] = {"missing": laws}
    else:
        for name, law in laws.items():
            print(f"frontier: {name}_opt = {law.coef:.3g} * C^{law.exponent:.3f} ({law.points} points)")
        data["frontier_laws"] = {k: {"coef": v.coef, "exponent": v.exponent} for k, v in laws.items()}
    data["holdout"] = holdout(points)
    print("\n".join(holdout_text(data["holdout"])))
    if "lr" in swept:
        data["lr_optimum"] = optimum_law(_sweep(rows, "lr"), "lr")
    else:
        data["lr_optimum"] = {"missing": "no LR law: the CSV has no lr column"}
    print("\n".join(law_text({"hyperparameter": "lr", "points": [], **data["lr_optimum"]})))
    if len({s["batch"] for _, s in rows if "batch" in s}) > 1:
        data["batch_optimum"] = optimum_law(_sweep(rows, "batch"), "batch")
        print("\n".join(law_text(data["batch_optimum"])))
    if args.json is not None:
        args.json.write_text(json.dumps(data, indent=1, default=_nan_free) + "\n", encoding="utf-8")
        print(f"wrote {args.json}")
    return 0


def _nan_free(value: Any) -> Any:
    return None if isinstance(value, float) and not math.isfinite(value) else str(value)
