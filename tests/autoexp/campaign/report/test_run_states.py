"""A diverged training in the campaign grid: found in its log, shown as "diverged", left out of the fit."""

from __future__ import annotations

from pathlib import Path

import pytest
from slurm_operator.model import naming
from slurm_operator.remote.parsers import parse_sacct

from autoexp.campaign.report import campaign_report as cr
from autoexp.campaign.report import run_states
from tests.autoexp.campaign.report.test_campaign_report import REPORTS, SACCT, SPECS

LOGS = Path(__file__).resolve().parents[1] / "planning" / "data" / "training_logs"
DEAD = (LOGS / "dead_model_lr1e3.log").read_text()  # our CPU trainer at LR 1e3: ln 384 from iteration 5


def test_a_dead_model_or_a_nan_is_diverged_and_a_crash_is_not() -> None:
    tails = {"dead": DEAD, "nan": (LOGS / "torchrun_py311.log").read_text(), "crash": "Segmentation fault\n"}
    vocab = {"dead": (384, 1), "nan": (None, 1)}
    found = run_states.diverged_from_logs(tails, vocab)
    assert set(found) == {"dead", "nan"}
    assert "iteration        9/" in found["dead"]  # the 5th flat interval, before its NaN at 12
    # without the vocabulary only the NaN (iteration 12) says so
    assert "lm loss: NAN" in (run_states.diverged_line(DEAD) or "")


def test_only_the_logs_of_ended_unsuccessful_trainings_are_read() -> None:
    phases = [
        cr.PhaseSpec("pretrain", ("e1_pt",), 1, "/c", "/logs/e1_pt-%j.log"),
        cr.PhaseSpec("pretrain", ("e2_pt",), 1, "/c", "/logs/e2_pt-%j.log"),
        cr.PhaseSpec("cooldown_c1", ("e2_cd",), 1, "/c", "/logs/e2_cd-%j.log"),
    ]
    newest = run_states.latest(parse_sacct(SACCT))
    # e1_pt COMPLETED (its last run, 11), e2_cd is RUNNING: only e2_pt's FAILED job 20
    assert run_states.logs_to_check(phases, newest) == {"e2_pt": "/logs/e2_pt-20.log"}


SPIKE = " [2026-12-01 10:19:40] iteration      370/    1000 | lm loss: 9.512000E+00 | grad norm: 41.2 |"


def test_a_cancel_by_the_divergence_rule_is_diverged_with_its_line() -> None:
    """The loss-spike rule (rule DIVERGED) cancelled the run: its tail shows no NaN, its marker says so."""
    marker = f"{naming.FATAL_REASON}: DIVERGED: {SPIKE}\n"
    assert run_states.diverged_by_cancel(marker) == SPIKE.strip()
    calm = "iteration 360/ 1000 | lm loss: 2.5E+00 | grad norm: 1.0 |\n"
    found = run_states.diverged_from_logs({"spike_pt": calm, "hung_pt": calm}, {}, {"spike_pt": marker})
    assert found == {"spike_pt": SPIKE.strip()}
    # the marker's line is the one the run was stopped on, whatever its tail matches
    nan = run_states.diverged_from_logs({"pt": DEAD}, {"pt": (384, 1)}, {"pt": marker})
    assert nan == {"pt": SPIKE.strip()}


@pytest.mark.parametrize(
    "marker",
    [
        f"{naming.FATAL_REASON}: CUDA_FATAL: RuntimeError: CUDA error: an illegal memory access",
        f"{naming.HUNG_REASON}: no new log line for 600 s",
        naming.ON_KILL_REASON,
        naming.TIMEOUT_REASON,
        "",  # no marker: a cancel from outside Airflow
    ],
)
def test_any_other_cancel_is_not_diverged(marker: str) -> None:
    assert run_states.diverged_by_cancel(marker) is None
    assert run_states.diverged_from_logs({"pt": "Segmentation fault\n"}, {}, {"pt": marker}) == {}


def test_only_the_markers_of_cancelled_trainings_are_read() -> None:
    sacct = "40|e4_pt|CANCELLED by 1000|0:15|00:20:00|2026-12-01T10:00:00|2026-12-01T10:20:00|n1|cpu=2|None\n"
    newest = run_states.latest(parse_sacct(SACCT + sacct))
    logs = {"e2_pt": "/logs/e2_pt-20.log", "e4_pt": "/logs/e4_pt-40.log"}
    # e2_pt FAILED (its tail tells), e4_pt CANCELLED: its marker, next to its log
    assert run_states.markers_to_check(logs, newest) == {
        "e4_pt": naming.cancel_marker_path("/logs/e4_pt-40.log")
    }


def test_a_diverged_cell_is_shown_and_left_out_of_best_frontier_and_fit() -> None:
    """e3's pretraining COMPLETED with the lowest loss (3.0) but its log says it died: without the
    verdict it would be the best (40, 1000) cell and a frontier point."""
    records = parse_sacct(SACCT)
    attempts = cr.gpu_hours(SPECS, records)
    line = DEAD.splitlines()[10].strip()
    experiments = cr.grid(SPECS, REPORTS, records, attempts, {"e3_pt": line, "e2_cd": line})
    cells = {e["dag_id"]: e["cells"] for e in experiments}
    assert (cells["e3"]["pretrain"]["state"], cells["e3"]["pretrain"]["diverged_line"]) == ("diverged", line)
    assert cells["e2"]["cooldown_c1"]["state"] == "running"  # a live job is running, whatever its log said
    assert "diverged_line" not in cells["e2"]["cooldown_c1"]
    assert {(b["params"], b["tokens"]) for b in cr.best_per_size_budget(experiments)} == {
        (10, 1000),
        (10, 2000),
    }
    assert [f["dag_id"] for f in cr.frontier_rows(experiments)] == ["e1", "e1"]
    assert all(e["dag_id"] != "e3" for e, _, _ in cr.points(experiments))


def test_the_spec_carries_the_log_and_vocabulary_through_json() -> None:
    spec = cr.ExperimentSpec(
        "d", "d", {}, 10, "/r", (cr.PhaseSpec("pretrain", ("d_pt",), 1, "/c", "/l-%j.log"),), 384, 2
    )
    assert cr.ExperimentSpec.from_dict(spec.to_dict()) == spec
    old = spec.to_dict()
    del old["vocab"], old["tensor_parallel"], old["phases"][0]["train_log"]  # a spec written before
    assert cr.ExperimentSpec.from_dict(old) == cr.ExperimentSpec(
        "d", "d", {}, 10, "/r", (cr.PhaseSpec("pretrain", ("d_pt",), 1, "/c"),)
    )
