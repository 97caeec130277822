"""Report data: log and results parsing, tables and plots; pure functions, exact values."""

from __future__ import annotations

from pathlib import Path

from autoexp.campaign.report import report_data as report

LOG = """\
 iteration        5/      40 | consumed samples: 20 | lm loss: 5.500000E+00 |
 iteration       20/      40 | consumed samples: 80 | lm loss: 4.250000E+00 |
 validation loss at iteration 40 | lm loss value: 3.900000E+00 |
"""


def test_losses_scores_and_rows() -> None:
    train, val = report.losses_from_log(LOG)
    assert train == {5: 5.5, 20: 4.25}
    assert val == {40: 3.9}
    results = {"results": {"a": {"acc,none": 0.5, "acc_norm,none": 0.75}, "b": {"acc,none": 0.25}}}
    assert report.scores_from_results(results) == {"a/acc_norm": 0.75, "b/acc": 0.25}
    row = report.row("pretrain", None, 30, 256, 1000, (train, val), results)
    assert row["tokens"] == 7680
    assert row["flops"] == 6 * 1000 * 7680
    assert row["train_loss"] == 4.25  # the last logged loss at or before the checkpoint
    assert row["score"] == 0.5
    assert report.to_csv([row]).splitlines()[0].endswith("a/acc_norm,b/acc")


def test_perplexity_tasks_get_their_own_column_outside_the_score() -> None:
    results = {
        "results": {
            "mc": {"acc,none": 0.5, "acc_stderr,none": 0.1},
            "ppl": {
                "word_perplexity,none": 2.5,
                "byte_perplexity,none": 1.2,
                "word_perplexity_stderr,none": "N/A",
            },
        }
    }
    assert report.perplexities_from_results(results) == {"ppl/word_perplexity": 2.5}
    row = report.row("pretrain", None, 10, 8, None, ({}, {}), results)
    assert row["score"] == 0.5  # the mean of accuracy-type metrics only
    assert row["ppl/word_perplexity"] == 2.5
    header = report.to_text([row]).splitlines()[0].split()
    assert header[-2:] == ["mc/acc", "ppl/word_perplexity"]


def test_plots_include_each_perplexity_metric(tmp_path: Path) -> None:
    results = {"results": {"mc": {"acc,none": 0.5}, "ppl": {"word_perplexity,none": 2.5}}}
    rows = [report.row("pretrain", None, i, 8, 100, ({i: 3.0 / i}, {}), results) for i in (10, 20)]
    names = sorted(p.name for p in report.plot(rows, tmp_path, "t"))
    assert names == sorted(
        f"{y}_vs_{x}.png" for y in ("score", "train_loss", "ppl_word_perplexity") for x in ("tokens", "flops")
    )
    assert all((tmp_path / n).stat().st_size > 0 for n in names)
