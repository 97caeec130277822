"""Fatal log rules: the spec's two shapes, and m consecutive matching progress lines."""

from __future__ import annotations

import pytest
from slurm_operator.policy.fatal import FatalPattern, FatalRules, FatalScan, FatalSpecError, parse_rules

ITERATION = r"\biteration\s+(\d+)\s*/"
DEAD = r"lm loss: 5\.95\d* \| grad norm: 0\.000 "


def _line(iteration: int, loss: str = "2.500", grad: str = "0.912") -> str:
    return f" iteration {iteration:>6}/  1200 | lm loss: {loss} | grad norm: {grad} |\n"


def test_both_spec_shapes_parse_in_order() -> None:
    rules = parse_rules({"DIVERGED": [r"loss: nan", {"pattern": DEAD, "repeats": 3}]})
    assert rules == (FatalRules("DIVERGED", (FatalPattern(r"loss: nan"), FatalPattern(DEAD, 3))),)


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"D": [{"pattern": "x", "repeats": 0}]}, r"\['D'\]\[0\]\.repeats: expected an integer >= 1"),
        ({"D": [{"pattern": "x", "times": 2}]}, r"\['D'\]\[0\]: expected a regex or \{\"pattern\""),
        ({"D": [{"pattern": 3}]}, r"^fatal_patterns\['D'\]\[0\]\.pattern: expected a regex string, got 3"),
        ({"D": ["ok", "(x"]}, r"^fatal_patterns\['D'\]\[1\] '\(x': missing \)"),
        ({"D": "x"}, r"^fatal_patterns\['D'\]: expected a list of patterns"),
    ],
)  # fmt: skip
def test_a_bad_spec_is_one_line_naming_the_entry(spec: dict[str, object], message: str) -> None:
    with pytest.raises(FatalSpecError, match=message):
        parse_rules(spec)  # type: ignore[arg-type]


def test_a_plain_pattern_matches_on_its_first_line() -> None:
    scan = FatalScan(parse_rules({"DIVERGED": [r"lm loss: nan"]}), ITERATION)
    assert scan.feed(_line(1) + "warning: x\n") is None
    assert scan.feed(_line(2, loss="nan")) == ("DIVERGED", _line(2, loss="nan").strip())


def test_repeats_count_consecutive_progress_lines_across_reads() -> None:
    """A dead model: loss flat at ln(384) = 5.95 with grad norm 0, for 3 log intervals. Warnings
    in between neither count nor break the run; a healthy interval breaks it."""
    scan = FatalScan(parse_rules({"DEAD": [{"pattern": DEAD, "repeats": 3}]}), ITERATION)
    dead = [_line(i, "5.951", "0.000") for i in range(10, 20)]
    assert scan.feed(dead[0] + dead[1] + _line(12)) is None  # a healthy line breaks the run
    assert scan.feed(dead[3] + "NCCL WARN lm loss: 5.951 | grad norm: 0.000 \n") is None  # no progress line
    assert scan.feed(dead[4]) is None  # two in a row so far, across reads
    assert scan.feed(dead[5] + dead[6]) == ("DEAD", dead[5].strip())


def test_without_a_progress_pattern_every_line_counts_and_breaks() -> None:
    rule = FatalRules("STUCK", (FatalPattern("same", 2),))
    assert rule.first_match("same\nother\nsame\n") is None
    assert rule.first_match("same\nsame\n") == "same"
    assert FatalRules("OLD", ("plain",)).first_match("x\nplain y\n") == "plain y"  # the plain form
