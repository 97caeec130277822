"""`-f KEY=VALUE` overrides (YAML values, dotted paths) and positional `KEY=v1,v2` filters."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from autoexp.config import ConfigError, Job, filter_jobs, parse_filters

Jobs = Callable[..., list[Job]]

GRID = 'name: "{P}_{LR}_{S}"\nLR: [1e-3, 3e-3]\nP:\n  - A: {K: 1, S: [x, y]}\n  - B: {K: 2, S: w}\n'


def test_override_value_is_a_yaml_scalar(jobs_of: Jobs) -> None:
    jobs = jobs_of(GRID, overrides=("LR=5e-4",))
    # AutoExperiment's -f gives the string "5e-4" (names with lr5e-4); ours parses YAML: a float.
    assert [j.name for j in jobs] == ["A_0.0005_x", "A_0.0005_y", "B_0.0005_w"]
    assert [type(j.params["LR"]) for j in jobs] == [float] * 3


def test_override_list_changes_the_axis(jobs_of: Jobs) -> None:
    jobs = jobs_of(GRID, overrides=("LR=[0.1]", "P.A.S=z"))
    assert [j.name for j in jobs] == ["A_0.1_z", "B_0.1_w"]
    assert jobs[0].params["S"] == "z"


def test_dotted_override_reaches_nested_key_in_labelled_list(jobs_of: Jobs) -> None:
    jobs = jobs_of(GRID, overrides=("P.B.K=7",))
    assert [j.params["K"] for j in jobs if j.params["P"] == "B"] == [7, 7]
    assert jobs[0].origin("K") == "config.yaml:8"
    assert jobs[-1].origin("K") == "<-f P.B.K=7>:1"


def test_new_top_level_key_is_appended_and_wins_by_document_order(jobs_of: Jobs) -> None:
    jobs = jobs_of(GRID, overrides=("K=9",))
    assert {j.params["K"] for j in jobs} == {9}


def test_override_errors(jobs_of: Jobs) -> None:
    with pytest.raises(ConfigError, match=r"^<-f P\.C\.K=1>:1: P\.C: no list item labelled or numbered 'C'"):
        jobs_of(GRID, overrides=("P.C.K=1",))
    with pytest.raises(ConfigError, match=r"^<-f NOPE\.X=1>:1: NOPE: no such key to descend into$"):
        jobs_of(GRID, overrides=("NOPE.X=1",))
    with pytest.raises(ConfigError, match=r"^<-f LR>:1: an override must look like KEY=VALUE"):
        jobs_of(GRID, overrides=("LR",))
    with pytest.raises(ConfigError, match=r"^<-f LR=null>:1: LR: null value"):
        jobs_of(GRID, overrides=("LR=null",))


def test_filters_keep_matching_jobs_by_str_value(jobs_of: Jobs) -> None:
    jobs = jobs_of(GRID)
    kept = filter_jobs(jobs, parse_filters(["P=A", "LR=0.001,0.003", "S=y"]))
    assert [j.name for j in kept] == ["A_0.001_y", "A_0.003_y"]
    assert [j.name for j in filter_jobs(jobs, {"K": ["2"]})] == ["B_0.001_w", "B_0.003_w"]


def test_filter_on_unknown_key_is_an_error(jobs_of: Jobs) -> None:
    with pytest.raises(
        ConfigError, match=r"^<filter LRR=1>:1: LRR: no job has this variable; did you mean LR\?$"
    ):
        filter_jobs(jobs_of(GRID), parse_filters(["LRR=1"]))
    with pytest.raises(ConfigError, match=r"a filter must look like KEY=VALUE"):
        parse_filters(["LR"])
