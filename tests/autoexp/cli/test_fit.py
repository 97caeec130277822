"""`autoexp fit CSV`: prints the fit with intervals, writes JSON, and one line (exit 2) on bad input."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from autoexp.cli.main import main

# Stated tolerances of `autoexp fit` on a CSV with an lr column (also in docs/campaign-report.md):
# 4 sizes 1e8-1.6e10 x 3 budgets 2e9-4e11 x 7 LRs 1e-4-1e-1, loss = Chinchilla's L(N, D) +
# 0.02 (ln LR - ln LR*)^2 with LR* = 300 N^-0.4 D^-0.1, 0.3% log-normal noise: E within 0.05, alpha
# and beta within 0.05, LR exponents a within 0.05 and b within 0.03, the held-out size predicted
# within 2%.
CLI_TOL = {"E": 0.05, "alpha": 0.05, "beta": 0.05, "exponent_n": 0.05, "exponent_d": 0.03, "holdout": 0.02}


def write_csv(path: Path, rows: list[tuple[object, ...]], header: str = "run,params,tokens,loss") -> Path:
    path.write_text(header + "\n" + "".join(",".join(map(str, r)) + "\n" for r in rows), encoding="utf-8")
    return path


def chinchilla_rows() -> list[tuple[object, ...]]:
    rng = np.random.default_rng(5)
    rows: list[tuple[object, ...]] = []
    for n in np.geomspace(7e7, 1.6e10, 6):
        for d in np.geomspace(1e9, 4e11, 5):
            loss = (1.69 + 406.4 / n**0.34 + 410.7 / d**0.28) * math.exp(rng.normal(0, 0.005))
            rows.append((f"r{len(rows)}", n, d, loss))
    return rows


def test_fit_prints_parameters_and_writes_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv_path = write_csv(tmp_path / "runs.csv", chinchilla_rows())
    out_json = tmp_path / "fit.json"
    code = main(
        ["fit", str(csv_path), "--json", str(out_json), "--budgets", "1e21,5.76e23", "--bootstrap", "10"]
    )
    out, err = capsys.readouterr()
    assert (code, err) == (0, "")
    lines = out.splitlines()
    assert lines[0].startswith("30 points, 10 bootstrap resamples (95% intervals), 6 L-BFGS starts (")
    assert [line.split()[0] for line in lines[1:6]] == ["E", "A", "B", "alpha", "beta"]
    assert lines[6].startswith("C = 1e+21 FLOPs: N_opt = ")
    assert lines[-2] == "no LR law: the CSV has no lr column"
    data = json.loads(out_json.read_text())
    assert data["values"]["E"] == pytest.approx(1.69, abs=0.05)
    assert data["values"]["alpha"] == pytest.approx(0.34, abs=0.05)
    assert set(data["compute_optimal"]) == {"1e+21", "5.76e+23"}
    assert data["frontier_laws"]["params"]["exponent"] > 0
    assert data["holdout"]["held_out_params"] == pytest.approx(1.6e10)
    assert data["lr_optimum"] == {"missing": "no LR law: the CSV has no lr column"}
    assert data["starts"] == 6


@pytest.mark.parametrize(
    ("rows", "header", "message"),
    [
        ([("a", 1e8, 1e9, 3.0)], "run,params,loss", r"runs.csv:1: missing column\(s\) tokens"),
        (
            [("a", 1e8, 1e9, "nan")],
            "run,params,tokens,loss",
            r"runs.csv:2: loss = 'nan': needs a finite positive",
        ),
        (
            [("a", -5, 1e9, 3.0)],
            "run,params,tokens,loss",
            r"runs.csv:2: params = '-5': needs a finite positive",
        ),
        ([("a", "big", 1e9, 3.0)], "run,params,tokens,loss", r"runs.csv:2: params = 'big' is not a number"),
        (
            [("a", 1e8, d, 3.0 - d / 1e12) for d in (1e9, 2e9, 4e9, 8e9, 1.6e10, 3.2e10)],
            "run,params,tokens,loss",
            r"no fit: 6 points, 1 model sizes \(1e\+08\)",
        ),
    ],
)
def test_bad_input_is_one_line_exit_2(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    rows: list[tuple[object, ...]],
    header: str,
    message: str,
) -> None:
    code = main(["fit", str(write_csv(tmp_path / "runs.csv", rows, header))])
    out, err = capsys.readouterr()
    assert (code, out) == (2, "")
    assert err.count("\n") == 1
    assert err.startswith("autoexp fit: ")
    assert re.search(message, err), err


def test_missing_file_and_bad_budgets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["fit", str(tmp_path / "none.csv")]) == 2
    assert capsys.readouterr().err == f"autoexp fit: {tmp_path / 'none.csv'}: No such file or directory\n"
    csv_path = write_csv(tmp_path / "runs.csv", chinchilla_rows())
    assert main(["fit", str(csv_path), "--budgets", "1e21,x"]) == 2
    assert "--budgets '1e21,x': expected FLOPs" in capsys.readouterr().err


def sweep_rows(seed: int = 3) -> list[tuple[object, ...]]:
    rng = np.random.default_rng(seed)
    rows: list[tuple[object, ...]] = []
    for n in np.geomspace(1e8, 1.6e10, 4):
        for d in np.geomspace(2e9, 4e11, 3):
            best = 300.0 * n**-0.4 * d**-0.1
            for lr in np.geomspace(1e-4, 1e-1, 7):
                clean = 1.69 + 406.4 / n**0.34 + 410.7 / d**0.28 + 0.02 * math.log(lr / best) ** 2
                rows.append((f"r{len(rows)}", n, d, lr, clean * math.exp(rng.normal(0, 0.003))))
    return rows


def test_fit_with_an_lr_column_recovers_the_law_the_lr_law_and_the_held_out_size(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    csv_path = write_csv(tmp_path / "runs.csv", sweep_rows(), header="run,params,tokens,lr,loss")
    out_json = tmp_path / "fit.json"
    assert main(["fit", str(csv_path), "--json", str(out_json), "--bootstrap", "5"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out_json.read_text())
    assert data["points"] == 12  # the best run per (N, D)
    for name in ("E", "alpha", "beta"):
        truth = {"E": 1.69, "alpha": 0.34, "beta": 0.28}[name]
        assert abs(data["values"][name] - truth) < CLI_TOL[name], name
    lr = data["lr_optimum"]
    assert set(lr) >= {"coefficient", "exponent_n", "exponent_d", "intervals", "points"}
    assert abs(lr["exponent_n"] + 0.4) < CLI_TOL["exponent_n"]
    assert abs(lr["exponent_d"] + 0.1) < CLI_TOL["exponent_d"]
    assert lr["interval_method"].startswith("delta method")
    assert len(lr["points"]) == 12
    held = data["holdout"]
    assert [set(p) for p in held["points"]] == [
        {"params", "tokens", "predicted", "observed", "relative_error"}
    ] * 3
    assert held["max_abs_relative_error"] < CLI_TOL["holdout"]
    lines = out.splitlines()
    assert lines[0] == "84 runs, the best per (N, D) fitted"
    assert any(
        line.startswith("held-out check: fitted without the largest size (N = 1.6e+10") for line in lines
    )
    assert any(line.startswith("LR*(N, D) = ") and " * D^" in line for line in lines)
    assert "batch_optimum" not in data  # the CSV does not vary the batch


def test_fit_with_three_sizes_says_why_there_is_no_held_out_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = [r for r in sweep_rows() if float(str(r[1])) < 1e10]
    csv_path = write_csv(tmp_path / "runs.csv", rows, header="run,params,tokens,lr,loss")
    out_json = tmp_path / "fit.json"
    assert main(["fit", str(csv_path), "--json", str(out_json), "--bootstrap", "0"]) == 0
    out = capsys.readouterr().out
    assert "held-out check: 3 sizes: too few to hold the largest out; needs >= 4\n" in out
    assert json.loads(out_json.read_text())["holdout"] == {
        "missing": "3 sizes: too few to hold the largest out; needs >= 4"
    }


def test_fit_with_a_batch_column_fits_the_batch_law(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows: list[tuple[object, ...]] = []
    for n in np.geomspace(1e8, 1.6e10, 4):
        for d in np.geomspace(2e9, 4e11, 3):
            best = 0.5 * n**0.3  # ~125 to 580
            for batch in (32, 64, 128, 256, 512, 1024):
                loss = 1.69 + 406.4 / n**0.34 + 410.7 / d**0.28 + 0.01 * math.log(batch / best) ** 2
                rows.append((f"r{len(rows)}", n, d, batch, loss))
    csv_path = write_csv(tmp_path / "runs.csv", rows, header="run,params,tokens,batch,loss")
    out_json = tmp_path / "fit.json"
    assert main(["fit", str(csv_path), "--json", str(out_json), "--bootstrap", "0"]) == 0
    out = capsys.readouterr().out
    data = json.loads(out_json.read_text())
    assert data["lr_optimum"] == {"missing": "no LR law: the CSV has no lr column"}
    assert data["batch_optimum"]["exponent_n"] == pytest.approx(0.3, abs=1e-6)
    assert data["batch_optimum"]["coefficient"] == pytest.approx(0.5, rel=1e-4)
    assert (
        "\nBATCH*(N, D) = 0.5 * N^0.300 * D^-0.000 (" in out
        or "\nBATCH*(N, D) = 0.5 * N^0.300 * D^0.000 (" in out
    )
