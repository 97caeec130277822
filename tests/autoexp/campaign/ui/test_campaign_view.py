"""The Campaigns page's data: the campaign's answer in words (never its raw JSON), and why a waiting
training's job pends (from its wait's XCom, no SSH)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from slurm_operator.remote.parsers import parse_sacct
from slurm_operator.triggers import relay_position
from slurm_operator.triggers.relay_position import RelayPosition

from autoexp.campaign.report import campaign_report as cr
from autoexp.campaign.ui import campaign_view as cv
from autoexp.campaign.ui.airflow_api import ApiError
from tests.autoexp.campaign.report.test_campaign_report import full_grid


def test_the_answer_is_the_reports_words_section_by_section() -> None:
    specs, reports, sacct = full_grid()  # 4 sizes x 3 LRs x 3 budgets on a known law
    campaign, _ = cr.build("full", specs, reports, parse_sacct(sacct), generated_at="now", bootstrap=5)
    summary = cv._report_summary(campaign, "demo", {})
    titles = [s["title"] for s in summary["answer"]]
    assert titles == [
        "Scaling law L(N, D) = E + A/N^alpha + B/D^beta",
        "Held-out check",
        "Optimal learning rate",
        "What it cost",
    ]
    fit, held, lr, cost = (s["lines"] for s in summary["answer"])
    assert fit[0] == "scaling-law fit:"
    assert fit[2].lstrip().startswith("E = ")
    assert held[0].startswith("held-out check: fitted without the largest size (N = 1e+10")
    assert lr[0].startswith("LR*(N, D) = 0.3 * N^-0.250")
    assert "fit" not in summary  # the page shows words, not the fit's JSON
    assert summary["hours_unit"] == "CPU-hours"  # the grid's column: no job of this grid had a GPU
    assert cost[0] == "what it cost: 0.6 CPU-hours, 0 wasted (no GPU was allocated: elapsed x allocated CPUs)"
    table = summary["answer"][-1]["table"]  # hours per phase x cause, as text cells
    assert (table["caption"], table["header"]) == (
        "CPU-hours by phase and cause",
        ["phase", "training", "conversion + evaluation", "wasted", "total"],
    )
    assert table["rows"][-1] == ["all phases", "0.6", "0", "0", "0.6"]
    assert all("table" not in s for s in summary["answer"][:-1])


def test_an_older_report_without_cost_fields_says_so_in_its_cost_section() -> None:
    specs, reports, sacct = full_grid()
    campaign, _ = cr.build("full", specs, reports, parse_sacct(sacct), generated_at="now", bootstrap=5)
    del campaign["cost"]
    *answer, cost = cv._report_summary(campaign, "demo", {})["answer"]
    assert [s["title"] for s in answer][1:] == ["Held-out check", "Optimal learning rate"]
    assert cost == {
        "title": "What it cost",
        "lines": [
            "what it cost: 0.6 CPU-hours, 0 wasted (no GPU was allocated: elapsed x allocated CPUs); "
            "no split by phase and cause (this campaign.json has no cost)"
        ],
    }


def test_a_report_it_cannot_read_is_one_line_not_a_broken_page() -> None:
    report: dict[str, Any] = {"fit": "garbage", "plots": []}
    summary = cv._report_summary(report, "demo", {})
    (section,) = summary["answer"]
    assert section["title"] == "Answer"
    assert section["lines"][0].startswith("the report's answer cannot be read: ")


class FakeApi:
    """The REST API of one demo run: its trainings in the given states; the waits' XComs."""

    def __init__(self, states: dict[str, str], xcoms: dict[str, Any]) -> None:
        self.states, self.xcoms = states, xcoms
        self.xcom_reads: list[tuple[str, str, str, str]] = []

    def latest_runs(self, dag_ids: Any) -> dict[str, dict[str, Any]]:
        return {DAG: {"dag_id": DAG, "dag_run_id": RUN, "state": "running"}}

    def task_instances(self, runs: Any) -> list[dict[str, Any]]:
        return [{"dag_id": DAG, "task_id": f"{p}.train", "state": s} for p, s in self.states.items()]

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        self.xcom_reads.append((dag_id, run_id, task_id, key))
        return self.xcoms.get(task_id)


DAG, RUN = "demo_demo_tiny_lr0.002_bs4", "manual__2026-12-03T13:00:00+00:00"
DEMO = Path(__file__).resolve().parents[4] / "config" / "demo.yaml"
HELD = "JobHeldUser, no start estimate yet"


def test_a_waiting_training_s_cell_says_why_its_job_pends_read_from_its_wait_s_xcom() -> None:
    """The note is what the deferred wait stored (relay_position): one XCom read per deferred
    training, none for the others, no SSH. A wait whose job runs stored no note."""
    waits = {
        "pretrain.train": RelayPosition("41", "/r/41.out", 0, pending=HELD).to_dict(),
        "cooldown_16K.train": json.dumps(
            RelayPosition("42", "/r/42.out", 0, pending="Priority, est. start 2026-12-03T14:05").to_dict()
        ),  # JSON text, as some XCom paths keep it
        "cooldown_24K.train": RelayPosition("43", "/r/43.out", 100).to_dict(),
    }
    api = FakeApi({"pretrain": "deferred", "cooldown_16K": "deferred", "cooldown_24K": "deferred"}, waits)
    view = cv.campaign_view(DEMO, api, {})  # type: ignore[arg-type]
    cells = next(e for e in view["experiments"] if e["dag_id"] == DAG)["cells"]
    assert {p: c["pending"] for p, c in cells.items()} == {
        "pretrain": HELD,
        "cooldown_16K": "Priority, est. start 2026-12-03T14:05",
        "cooldown_24K": None,  # running: the wait dropped the note
    }
    assert cv.WAIT_XCOM == relay_position.XCOM_KEY
    assert [r[2:] for r in api.xcom_reads] == [(f"{p}.train", cv.WAIT_XCOM) for p in cells]
    tab = cv.experiment_view(api, DAG, RUN)  # type: ignore[arg-type]
    assert tab["phases"]["pretrain"] == {"state": "deferred", "latest_checkpoint": None, "evaluations": 0,
                                         "pending": HELD}  # fmt: skip


def test_only_a_deferred_training_costs_a_read() -> None:
    stale = {"pretrain.train": RelayPosition("41", "/r/41.out", 0, pending=HELD).to_dict()}
    api = FakeApi({"pretrain": "running", "cooldown_16K": "success", "cooldown_24K": "scheduled"}, stale)
    view = cv.campaign_view(DEMO, api, {})  # type: ignore[arg-type]
    cells = next(e for e in view["experiments"] if e["dag_id"] == DAG)["cells"]
    assert [c["pending"] for c in cells.values()] == [None, None, None]
    assert api.xcom_reads == []
    garbled = FakeApi({"pretrain": "deferred"}, {"pretrain.train": "not json"})
    assert cv.pending_note(garbled, DAG, RUN, "pretrain", "deferred") is None  # type: ignore[arg-type]


def test_a_user_who_may_not_read_xcoms_sees_the_state_without_the_note() -> None:
    class NoXComs(FakeApi):
        def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
            status = 403 if "24K" in task_id else 502
            raise ApiError(f"GET .../xcomEntries/{key}: HTTP {status}", status)

    api = NoXComs({"cooldown_24K": "deferred"}, {})
    view = cv.campaign_view(DEMO, api, {})  # type: ignore[arg-type]
    cell = next(e for e in view["experiments"] if e["dag_id"] == DAG)["cells"]["cooldown_24K"]
    assert (cell["state"], cell["pending"]) == ("deferred", None)
    with pytest.raises(ApiError, match="HTTP 502"):  # any other failure is the page's error, as before
        cv.pending_note(api, DAG, RUN, "pretrain", "deferred")  # type: ignore[arg-type]
