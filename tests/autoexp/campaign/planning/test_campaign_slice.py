"""A slice of a campaign: the CLI's filters select experiments and, in each, the phases to drive."""

from __future__ import annotations

import pytest

from autoexp.campaign.configs.planned_config import load_plans
from autoexp.campaign.planning import campaign_slice as cs
from tests.support.checkout import REPO_ROOT

DEMO = REPO_ROOT / "config" / "demo.yaml"
TINY = ("demo_demo_tiny_lr0.002_bs4", "demo_demo_tiny_lr0.006_bs4", "demo_demo_tiny_lr0.018_bs4")
SMALL = ("demo_demo_small_lr0.002_bs4", "demo_demo_small_lr0.006_bs4", "demo_demo_small_lr0.018_bs4")
MEDIUM = ("demo_demo_medium_lr0.002_bs4", "demo_demo_medium_lr0.006_bs4", "demo_demo_medium_lr0.018_bs4")
ALL_PHASES = ("pretrain", "cooldown_16K", "cooldown_24K")


@pytest.fixture(scope="module")
def table() -> list[dict[str, object]]:
    plans, settings = load_plans(DEMO)
    return cs.slice_table(plans, cs.grid_axes(DEMO), settings.keys, every_variable=True)


def _picked(table: list[dict[str, object]], text: str) -> list[tuple[str, tuple[str, ...]]]:
    return [(s.dag_id, s.phases) for s in cs.select_slice(table, cs.parse_filter_text(text))]


def test_the_axes_are_the_list_keys_of_the_yaml_in_document_order() -> None:
    # What `autoexp list` shows as columns (the grid's axes), found without expanding the grid.
    assert cs.grid_axes(DEMO) == ["EXPERIMENTS", "LR", "BIAS", "PHASE", "MODE", "CD_SCALE", "DATASET"]


def test_pick_lists_offer_the_axes_that_vary() -> None:
    plans, settings = load_plans(DEMO)
    axes = cs.grid_axes(DEMO)
    choices = cs.axis_choices(cs.slice_table(plans, axes, settings.keys), axes)
    # BIAS and DATASET have one value each: nothing to pick.
    assert choices == {
        "EXPERIMENTS": ["tiny", "small", "medium"],
        "LR": ["0.002", "0.006", "0.018"],
        "PHASE": ["PRETRAIN", "COOLDOWN"],
        "MODE": ["TRAIN", "CONVERT_EVAL"],
        "CD_SCALE": ["16K", "24K"],
    }


def test_no_filter_is_the_whole_campaign(table: list[dict[str, object]]) -> None:
    assert _picked(table, "") == [(d, ALL_PHASES) for d in (*TINY, *SMALL, *MEDIUM)]


def test_filters_select_experiments_and_phases(table: list[dict[str, object]]) -> None:
    assert _picked(table, "EXPERIMENTS=tiny") == [(d, ALL_PHASES) for d in TINY]
    assert _picked(table, "LR=0.006 PHASE=COOLDOWN") == [
        (TINY[1], ("cooldown_16K", "cooldown_24K")),
        (SMALL[1], ("cooldown_16K", "cooldown_24K")),
        (MEDIUM[1], ("cooldown_16K", "cooldown_24K")),
    ]
    assert _picked(table, "CD_SCALE=24K EXPERIMENTS=small,tiny") == [
        (d, ("cooldown_24K",)) for d in (*TINY, *SMALL)
    ]
    # Any variable, as on the command line (MODEL is not an axis of the demo).
    assert _picked(table, "MODEL=small PHASE=PRETRAIN") == [(d, ("pretrain",)) for d in SMALL]
    assert _picked(table, "MODEL=huge") == []


def test_a_variable_no_job_has_is_one_clear_line(table: list[dict[str, object]]) -> None:
    with pytest.raises(cs.SliceError, match=r"^filter MODLE=tiny: no experiment has MODLE \(the axes: "):
        cs.select_slice(table, {"MODLE": ["tiny"]})
    with pytest.raises(cs.SliceError, match=r"^filter 'EXPERIMENTS': write KEY=VALUE"):
        cs.parse_filter_text("EXPERIMENTS")


def test_pick_lists_and_text_merge_and_an_empty_pick_means_all() -> None:
    merged = cs.merge_filters({"LR": [], "EXPERIMENTS": ["tiny"]}, cs.parse_filter_text("EXPERIMENTS=small"))
    assert merged == {"EXPERIMENTS": ["tiny", "small"]}


def test_the_summary_names_every_triggered_experiment(table: list[dict[str, object]]) -> None:
    filters = cs.parse_filter_text("EXPERIMENTS=tiny CD_SCALE=16K")
    text = cs.summary(cs.select_slice(table, filters), filters)
    assert text.splitlines() == [
        "slice EXPERIMENTS=tiny CD_SCALE=16K: 3 experiment(s)",
        *(f"  {dag_id}: cooldown_16K" for dag_id in TINY),
    ]
    assert cs.campaign_dag_id(DEMO) == "autoexp_campaign_demo"
