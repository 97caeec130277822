"""The answer's "What it cost" section: its words and its phase x cause table on a hand-made report,
and the one line a report without (readable) cost fields gets."""

from __future__ import annotations

import copy
import html
from pathlib import Path
from typing import Any

import pytest

from autoexp.campaign.report import campaign_report_render as render
from autoexp.campaign.report.cost_text import cost_lines, cost_table

# A CPU-only campaign (the local cluster): 5 CPU-hours, 0.25 of them wasted by a TIMEOUT; the
# Campaigns page's browser test shows the same (tests/e2e/test_campaign_ui.py).
REPORT: dict[str, Any] = {
    "gpu_hours": {"total": 5.0, "wasted": 0.25, "by_unit": {"cpu": 5.0}},
    "cost": {
        "by_cause": {"training": 3.5, "conversion_evaluation": 1.25, "wasted": 0.25},
        "by_phase": {
            "pretrain": {"training": 2.5, "conversion_evaluation": 1.0, "wasted": 0.25},
            "cooldown_8K": {"training": 1.0, "conversion_evaluation": 0.25, "wasted": 0.0},
        },
        "wasted_by_state": {"TIMEOUT": 0.25},
        "tokens_per_hour": [
            {
                "params": 36864,
                "model": "tiny",
                "tokens": 40960,
                "hours": 0.5,
                "unit": "cpu",
                "tokens_per_hour": 81920.0,
            },
            {
                "params": 2_000_000_000,
                "model": "",
                "tokens": 6e9,
                "hours": 3.0,
                "unit": "cpu",
                "tokens_per_hour": 2e9,
            },
        ],
        "lost_by_cause": {"start_up": 0.125, "recomputed": 0.0625, "no_progress": 0.0},
    },
}


def test_the_cost_in_words() -> None:
    assert cost_lines(REPORT) == [
        "what it cost: 5 CPU-hours, 0.25 wasted (no GPU was allocated: elapsed x allocated CPUs)",
        "by cause: training 3.5, conversion + evaluation 1.25, wasted 0.25 CPU-hours",
        "  pretrain: training 2.5, conversion + evaluation 1, wasted 0.25",
        "  cooldown_8K: training 1, conversion + evaluation 0.25, wasted 0",
        "wasted by how the attempt ended: TIMEOUT 0.25 CPU-hours",
        "lost in training attempts (from their logs, within the hours above): start-up 0.125, "
        "recomputed 0.0625, no progress 0 CPU-hours",
        "tokens per hour of training:",
        "  tiny (36,864 params): 81,920 tokens per CPU-hour (40,960 tokens in 0.5 CPU-hours)",
        "  model (2e+09 params): 2e+09 tokens per CPU-hour (6e+09 tokens in 3 CPU-hours)",
    ]


def test_gpu_hours_are_named_so_and_mixed_units_say_they_are_summed() -> None:
    gpu = copy.deepcopy(REPORT)
    gpu["gpu_hours"]["by_unit"] = {"gpu": 5.0}
    assert cost_lines(gpu)[:2] == [
        "what it cost: 5 GPU-hours, 0.25 wasted",
        "by cause: training 3.5, conversion + evaluation 1.25, wasted 0.25 GPU-hours",
    ]
    gpu["gpu_hours"]["by_unit"] = {"gpu": 4.5, "cpu": 0.5}
    assert cost_lines(gpu)[0] == (
        "what it cost: 5 hours, 0.25 wasted (GPU-hours and CPU-hours of jobs without a GPU, summed: "
        "0.5 CPU-hours, 4.5 GPU-hours)"
    )


def test_the_hours_per_phase_and_cause_as_a_table() -> None:
    assert cost_table(REPORT) == {
        "caption": "CPU-hours by phase and cause",
        "header": ["phase", "training", "conversion + evaluation", "wasted", "total"],
        "rows": [
            ["pretrain", "2.5", "1", "0.25", "3.75"],
            ["cooldown_8K", "1", "0.25", "0", "1.25"],
            ["all phases", "3.5", "1.25", "0.25", "5"],
        ],
    }


@pytest.mark.parametrize(
    ("report", "line"),
    [
        (
            {"gpu_hours": {"total": 5.0, "wasted": 0.25}},
            "what it cost: 5 GPU-hours, 0.25 wasted; no split by phase and cause "
            "(this campaign.json has no cost)",
        ),
        ({}, "what it cost: not in this report (its campaign.json has no gpu_hours)"),
        (
            {**REPORT, "cost": {"by_cause": "garbage"}},
            "what it cost: this report's cost fields cannot be read (AttributeError(\"'str' object has no "
            "attribute 'items'\"))",
        ),
    ],
    ids=["older report, no cost", "no hours at all", "unreadable"],
)
def test_a_report_without_readable_cost_fields_says_so_in_one_line(report: dict[str, Any], line: str) -> None:
    assert cost_lines(report) == [line]
    assert cost_table(report) is None


def test_the_answer_ends_with_the_cost_and_index_html_shows_it_with_its_table(tmp_path: Path) -> None:
    campaign = {
        **REPORT,
        "campaign": "demo",
        "generated_at": "now",
        "experiments": [],
        "best": [],
        "frontier": [],
        "fit": {"missing": "no done cell"},
        "holdout": {"missing": "no fit"},
        "plots": [],
    }
    assert render.answer_sections(campaign)[-1] == ("What it cost", cost_lines(REPORT))
    assert render.answer_text(campaign).splitlines()[-len(cost_lines(REPORT)) :] == cost_lines(REPORT)
    page = render.index_html(campaign, tmp_path)
    section = page.split("<h2>What it cost</h2><pre>", 1)[1].split("</pre>", 1)[0]
    assert html.unescape(section).splitlines() == cost_lines(REPORT)
    assert "<p>CPU-hours by phase and cause</p><table><tr><th>phase</th><th>training</th>" in page
    assert "<tr><td>all phases</td><td>3.5</td><td>1.25</td><td>0.25</td><td>5</td></tr>" in page
    assert '{"cpu"' not in html.unescape(page)  # the hours' units in words, not as JSON
