"""``autoexp status``: its table, and one line when Airflow or the config cannot answer.
(Its lines against a real Airflow: tests/e2e/test_campaign_ui.py.)"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from autoexp.cli.main import main
from autoexp.cli.status import current_phase, slurm_state, status_lines

DEMO = Path(__file__).resolve().parents[3] / "config" / "demo.yaml"


def _cell(state: str, checkpoint: int | None = None, evals: int = 0) -> dict[str, object]:
    return {"state": state, "latest_checkpoint": checkpoint, "evaluations": evals}


def test_the_current_phase_is_the_first_not_done() -> None:
    cells = {"pretrain": _cell("success"), "cooldown_8K": _cell("running"), "cooldown_12K": _cell("none")}
    assert current_phase(cells) == "cooldown_8K"
    assert current_phase({"pretrain": _cell("success"), "cooldown_8K": _cell("skipped")}) == "cooldown_8K"
    assert current_phase({}) is None


def test_slurm_state_is_the_last_attempts_else_the_submitted_job() -> None:
    attempts = [{"state": "TIMEOUT", "job_id": "7"}, {"state": "COMPLETED", "job_id": "9"}]
    assert slurm_state(attempts, None) == "COMPLETED (job 9)"
    assert slurm_state(None, "12") == "job 12"
    assert slurm_state(None, None) == "-"


def test_one_aligned_line_per_experiment() -> None:
    view = {
        "experiments": [
            {
                "dag_id": "exp_a",
                "run": {"state": "running"},
                "cells": {"pretrain": _cell("success", 40, 2), "cooldown_8K": _cell("running", 20, 1)},
                "gpu_hours": 1.23456,
            },
            {
                "dag_id": "exp_longer_name",
                "run": None,
                "cells": {"pretrain": _cell("none")},
                "gpu_hours": None,
            },
        ]
    }
    lines = status_lines(view, {"exp_a": "RUNNING (job 5)"})
    assert [line.split() for line in lines] == [
        ["experiment", "run", "phase", "state", "checkpoint", "evals", "slurm", "gpu-h"],
        ["exp_a", "running", "cooldown_8K", "running", "20", "3", "RUNNING", "(job", "5)", "1.23"],
        ["exp_longer_name", "never", "run", "pretrain", "none", "-", "0", "-", "-"],
    ]
    # Aligned: every column starts where its header does.
    assert lines[1].index("running") == lines[0].index("run")
    assert lines[2].index("pretrain") == lines[0].index("phase")


def test_an_unreachable_airflow_is_one_line_and_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as sock:  # a port nobody listens on
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    assert main(["status", str(DEMO), "--url", f"http://127.0.0.1:{port}"]) == 1
    err = capsys.readouterr().err
    url = f"http://127.0.0.1:{port}/api/v2/dags/~/dagRuns/list"
    assert err.startswith(f"autoexp status: POST {url}: cannot reach Airflow")
    assert len(err.strip().splitlines()) == 1


def test_a_broken_config_is_one_line_and_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = tmp_path / "broken.yaml"
    config.write_text("name: [unclosed\n")
    assert main(["status", str(config), "--url", "http://127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert str(config) in err
    assert len(err.strip().splitlines()) == 1


def test_a_pending_job_says_why_it_waits() -> None:
    """The note the deferred wait keeps (the Campaigns grid shows the same) follows the job."""
    cell = {**_cell("deferred"), "pending": "Priority, est. start 2026-12-03T14:05"}
    view = {"experiments": [{"dag_id": "exp_a", "run": {"state": "running"}, "cells": {"pretrain": cell}}]}
    (_, line) = status_lines(view, {"exp_a": "job 12"})
    assert "job 12, pending: Priority, est. start 2026-12-03T14:05" in line, line
