"""Fatal log rules: the spec's three shapes, m consecutive matching progress lines, a spike over a median."""

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


def _spike(**spec: object) -> dict[str, object]:
    return {"D": [{"pattern": "v (.*)", "above_median": 3, **spec}]}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"D": [{"pattern": "x", "repeats": 0}]}, r"\['D'\]\[0\]\.repeats: expected an integer >= 1"),
        ({"D": [{"pattern": "x", "times": 2}]}, r"\['D'\]\[0\]: expected a regex or \{\"pattern\""),
        ({"D": [{"pattern": 3}]}, r"^fatal_patterns\['D'\]\[0\]\.pattern: expected a regex string, got 3"),
        ({"D": ["ok", "(x"]}, r"^fatal_patterns\['D'\]\[1\] '\(x': missing \)"),
        ({"D": "x"}, r"^fatal_patterns\['D'\]: expected a list of patterns"),
        ({"D": [{"pattern": "x", "window": 5}]}, r"^fatal_patterns\[.D.\]\[0\]\.window: only with above_"),
        (_spike(above_median=1), r"\[0\]\.above_median: expected a number > 1, got 1$"),
        (_spike(above_median="3"), r"\.above_median: expected a number > 1, got '3'"),
        (_spike(above_median=float("inf")), r"\.above_median: expected a number > 1, got inf"),
        (_spike(above_median=True), r"\.above_median: expected a number > 1, got True"),
        (_spike(window=0), r"\.window: expected an integer >= 1, got 0"),
        (_spike(window=2.5), r"\.window: expected an integer >= 1, got 2.5"),
        (_spike(pattern="v .*"), r"\[0\] 'v \.\*': above_median needs one capture group .*, not 0$"),
        (_spike(pattern="(v) (.*)"), r"needs one capture group \(the number\), not 2$"),
        (_spike(median=2), r"\[0\]: expected a regex or .* or \{\"pattern\": regex, \"above_median\": k"),
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


# ---- above_median: a number that leaves its level --------------------------------------------------
LOSS = r"lm loss: ([^\s|]+)"


def _spike_scan(k: float, repeats: int, window: int) -> FatalScan:
    spec = {"pattern": LOSS, "above_median": k, "repeats": repeats, "window": window}
    return FatalScan(parse_rules({"SPIKE": [spec]}), ITERATION)


def _losses(*values: str, start: int = 1) -> str:
    return "".join(_line(start + i, v) for i, v in enumerate(values))


def test_the_spike_shape_parses_with_its_defaults() -> None:
    spec = {
        "SPIKE": [
            {"pattern": LOSS, "above_median": 3, "repeats": 2, "window": 4},
            {"pattern": LOSS, "above_median": 2.5},
        ]
    }
    assert parse_rules(spec)[0].patterns == (FatalPattern(LOSS, 2, 3.0, 4), FatalPattern(LOSS, 1, 2.5, 20))


def test_m_consecutive_values_above_k_times_the_median_match_across_reads() -> None:
    """k = 3 over a window of 4 (median 2.0): 7.0 is a spike, a value at the level breaks the run."""
    scan = _spike_scan(3, 2, 4)
    assert scan.feed(_losses("2.0", "2.1", "1.9", "2.0")) is None  # the window is full
    assert scan.feed(_losses("7.0", "2.0", "5.9", start=5)) is None  # one spike, broken; 5.9 < 3 x 2.0
    assert scan.feed(_losses("8.0", start=8)) is None  # one of two
    assert scan.feed("saving checkpoint\n" + _losses("6.1", start=9)) == ("SPIKE", _line(9, "6.1").strip())


def test_nothing_is_judged_before_the_window_is_full() -> None:
    """The first w values of a run are not judged (a median of one value is noise); nor are those of
    a re-created trigger's scan: the window lives in the trigger, like a ``repeats`` count."""
    scan = _spike_scan(3, 1, 3)
    assert scan.feed(_losses("2.0", "50.0", "2.0")) is None  # 50 is not judged: 1 value before it
    assert scan.feed(_losses("9.0", start=4)) == ("SPIKE", _line(4, "9.0").strip())  # median(2, 50, 2)
    assert _spike_scan(3, 1, 3).feed(_losses("9.0", start=4)) is None  # a new scan starts empty


def test_the_median_is_of_the_last_w_values_and_a_spike_stays_out_of_it() -> None:
    """A loss falling from 10 to 2: against the last 3 values (2, 2, 2), 7 is a spike; and spikes
    do not lift the median, so the third 7 in a row still is one."""
    scan = _spike_scan(3, 3, 3)
    assert scan.feed(_losses("10", "10", "10", "2", "2", "2", "7", "7")) is None
    assert scan.feed(_losses("7", start=9)) == ("SPIKE", _line(9, "7").strip())


@pytest.mark.parametrize("text", ["nan", "NAN", "inf", "-INF"])
def test_a_value_that_is_not_finite_is_a_spike_even_before_the_window_is_full(text: str) -> None:
    scan = _spike_scan(3, 2, 5)
    assert scan.feed(_losses("2.0", text)) is None
    assert scan.feed(_losses(text, start=3)) == ("SPIKE", _line(3, text).strip())
    # ... and never enters the window: two finite values later it is still not full (5 values).
    scan = _spike_scan(3, 1, 3)
    assert scan.feed(_losses("2.0", "2.0")) is None
    assert scan.feed(_losses(text, start=3)) == ("SPIKE", _line(3, text).strip())


def test_a_value_that_is_not_a_number_neither_counts_nor_breaks_the_run() -> None:
    scan = _spike_scan(3, 2, 2)
    assert scan.feed(_losses("2.0", "2.0", "9.0", "n/a")) is None
    assert scan.feed(_losses("9.0", start=5)) == ("SPIKE", _line(5, "9.0").strip())


def test_a_value_outside_a_progress_line_is_not_judged() -> None:
    """A warning that quotes a value is not a log interval: it neither feeds the window nor counts."""
    scan = _spike_scan(3, 2, 2)
    assert scan.feed(_losses("2.0", "2.0") + "WARN lm loss: 50 |\n" + "WARN lm loss: 1 |\n") is None
    assert scan.feed(_losses("9.0", "2.0", "9.0", start=3)) is None  # broken by 2.0 (window: 2, 2)
    assert scan.feed(_losses("9.0", start=6)) == ("SPIKE", _line(6, "9.0").strip())
