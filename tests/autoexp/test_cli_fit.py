"""`autoexp fit CSV`: prints the fit with intervals, writes JSON, and one line (exit 2) on bad input."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest

from autoexp.cli import main


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
    assert lines[0] == "30 points, 10 bootstrap resamples (95% intervals)"
    assert [line.split()[0] for line in lines[1:6]] == ["E", "A", "B", "alpha", "beta"]
    assert lines[6].startswith("C = 1e+21 FLOPs: N_opt = ")
    data = json.loads(out_json.read_text())
    assert data["values"]["E"] == pytest.approx(1.69, abs=0.05)
    assert data["values"]["alpha"] == pytest.approx(0.34, abs=0.05)
    assert set(data["compute_optimal"]) == {"1e+21", "5.76e+23"}
    assert data["frontier_laws"]["params"]["exponent"] > 0


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
