"""The Campaigns page's report section: the campaign's answer in words, never its raw JSON."""

from __future__ import annotations

from typing import Any

from slurm_operator.remote.parsers import parse_sacct

from autoexp.campaign.report import campaign_report as cr
from autoexp.campaign.ui import campaign_view as cv
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
    ]
    fit, held, lr = (s["lines"] for s in summary["answer"])
    assert fit[0] == "scaling-law fit:"
    assert fit[2].lstrip().startswith("E = ")
    assert held[0].startswith("held-out check: fitted without the largest size (N = 1e+10")
    assert lr[0].startswith("LR*(N, D) = 0.3 * N^-0.250")
    assert "fit" not in summary  # the page shows words, not the fit's JSON


def test_a_report_it_cannot_read_is_one_line_not_a_broken_page() -> None:
    report: dict[str, Any] = {"fit": "garbage", "plots": []}
    summary = cv._report_summary(report, "demo", {})
    (section,) = summary["answer"]
    assert section["title"] == "Answer"
    assert section["lines"][0].startswith("the report's answer cannot be read: ")
