"""What the campaign cost: hours by cause and phase, wasted hours by end state, tokens per hour per size,
on the report tests' sacct fixture (e1: a TIMEOUT then a success, e2: a FAILED 4-GPU pretraining)."""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path

import pytest
from slurm_operator.remote.parsers import parse_sacct

from autoexp.campaign.report import campaign_report as cr
from autoexp.campaign.report import campaign_report_render as render
from autoexp.campaign.report.cost import cost
from autoexp.campaign.report.cost_text import cost_lines
from tests.autoexp.campaign.report.test_campaign_report import REPORTS, SACCT, SPECS, local

# The cooldowns branch at 1,000 tokens: their own training is the tokens after that.
SPECS_BRANCHED = [replace(s, phases=(s.phases[0], replace(s.phases[1], start_tokens=1000))) for s in SPECS]
TIMES = {"/runs/e2/ckpt": [local("2026-12-01T10:30:00"), local("2026-12-01T11:30:00")]}


@pytest.fixture
def summary() -> dict:  # type: ignore[type-arg]
    records = parse_sacct(SACCT)
    attempts = cr.gpu_hours(SPECS_BRANCHED, records, TIMES)
    return cost(attempts, cr.grid(SPECS_BRANCHED, REPORTS, records, attempts))


def test_hours_split_by_cause_phase_and_end_state(summary: dict) -> None:  # type: ignore[type-arg]
    # e1's 2 h TIMEOUT (no checkpoint known) and e2's 2 h after its 11:30 checkpoint are wasted; the
    # conversion job 12 took 0.1 h; the rest trained (e1 1 + 0.2, e2 6 + 1/6, e3 4/3).
    assert summary["by_cause"] == pytest.approx(
        {"training": 8.7, "conversion_evaluation": 0.1, "wasted": 4.0}
    )
    assert list(summary["by_phase"]) == ["pretrain", "cooldown_c1"]
    assert summary["by_phase"]["pretrain"] == pytest.approx(
        {"training": 1 + 6 + 4 / 3, "conversion_evaluation": 0.1, "wasted": 4.0}
    )
    assert summary["by_phase"]["cooldown_c1"] == pytest.approx(
        {"training": 0.2 + 1 / 6, "conversion_evaluation": 0.0, "wasted": 0.0}
    )
    assert summary["wasted_by_state"] == pytest.approx({"TIMEOUT": 2.0, "FAILED": 2.0})


def test_tokens_per_hour_per_model_size(summary: dict) -> None:  # type: ignore[type-arg]
    # e1 (10 params): 1,000 pretraining tokens in 3 h (its TIMEOUT included) + 1,000 cooldown tokens in
    # 0.2 h; e2 has no finished training; e3 (40 params): 1,000 tokens in 4/3 h.
    rows = summary["tokens_per_hour"]
    assert [(r["params"], r["model"], r["tokens"], r["unit"]) for r in rows] == [
        (10, "tiny", 2000, "cpu"),
        (40, "small", 1000, "cpu"),
    ]
    assert [r["hours"] for r in rows] == pytest.approx([3.2, 4 / 3])
    assert [r["tokens_per_hour"] for r in rows] == pytest.approx([625.0, 750.0])


def test_the_report_page_shows_the_split(tmp_path: Path) -> None:
    campaign, _ = cr.build(
        "demo", SPECS_BRANCHED, REPORTS, parse_sacct(SACCT), generated_at="2026-12-01T12:00:00Z"
    )
    page = render.index_html(campaign, tmp_path)
    section = page.split("<h2>What it cost</h2>", 1)[1].split("</pre>", 1)[0]
    assert html.unescape(section).removeprefix("<pre>").splitlines() == cost_lines(campaign)
    assert cost_lines(campaign)[:2] == [  # no checkpoint times: every failed run is wasted
        "what it cost: 12.8 hours, 10 wasted (GPU-hours and CPU-hours of jobs without a GPU, summed: "
        "4.8 CPU-hours, 8 GPU-hours)",
        "by cause: training 2.7, conversion + evaluation 0.1, wasted 10 hours",
    ]
