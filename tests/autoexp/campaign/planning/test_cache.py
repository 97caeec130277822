"""Expansion cache: a hit plans exactly like a fresh expansion; any change of input is a miss."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from autoexp.campaign.planning import cache
from autoexp.campaign.planning.checkout import REPO_ROOT
from autoexp.campaign.planning.plan import ExperimentPlan, plan_campaign
from autoexp.campaign.planning.settings import parse_settings
from autoexp.config import expand, load_config

DEMO = REPO_ROOT / "config" / "demo.yaml"


def summary(plans: list[ExperimentPlan]) -> list[tuple[object, ...]]:
    return [
        (
            p.dag_id,
            dict(p.pretrain.train.params),
            [
                (ph.key, ph.run_dir, ph.checkpoints, ph.start_iter, ph.time_limit_secs, ph.train.output_file)
                for ph in p.phases
            ],
            [(ph.train.termination_str, ph.train.start_condition_cmd) for ph in p.phases],
        )
        for p in plans
    ]


def test_a_cache_hit_plans_like_a_fresh_expansion(tmp_path: Path) -> None:
    config = load_config(DEMO)
    settings = parse_settings(config.airflow, DEMO)
    jobs = expand(config)
    key = cache.cache_key(DEMO.read_bytes(), (), DEMO)
    cache.store(key, tmp_path, config.airflow, cache.slim(jobs, settings))
    hit = cache.load(key, tmp_path)
    assert hit is not None
    raw, slim_jobs = hit
    assert raw == config.airflow
    assert summary(plan_campaign(slim_jobs, parse_settings(raw, DEMO))) == summary(
        plan_campaign(jobs, settings)
    )
    # Only pretraining's TRAIN job keeps every variable (doc_md, remote_dir); the others keep the roles.
    assert len(slim_jobs[1].params) < len(slim_jobs[0].params)


def test_the_key_covers_content_overrides_location_and_the_environment(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    text = b"A: ${oc.env:AUTOEXP_TEST_VAR}\n"
    monkeypatch.setenv("AUTOEXP_TEST_VAR", "one")
    key = cache.cache_key(text, (), tmp_path / "a.yaml")
    assert cache.cache_key(text, (), tmp_path / "a.yaml") == key
    assert cache.cache_key(text + b"B: 1\n", (), tmp_path / "a.yaml") != key
    assert cache.cache_key(text, (), tmp_path / "elsewhere" / "a.yaml") != key
    assert cache.cache_key(text, ("A=2",), tmp_path / "a.yaml") != key
    monkeypatch.setenv("AUTOEXP_TEST_VAR", "two")
    assert cache.cache_key(text, (), tmp_path / "a.yaml") != key


def test_unreadable_entries_are_misses(tmp_path: Path) -> None:
    (tmp_path / "k.json").write_text("{not json")
    assert cache.load("k", tmp_path) is None
    (tmp_path / "k.json").write_text('{"format": 0, "airflow": null, "jobs": []}')
    assert cache.load("k", tmp_path) is None
    assert cache.load("absent", tmp_path) is None


def test_cache_folder_follows_the_environment(tmp_path: Path) -> None:
    assert cache.cache_dir({"AUTOEXP_CACHE_DIR": "off"}) is None
    assert cache.cache_dir({"AUTOEXP_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert cache.cache_dir({"AIRFLOW_HOME": "/af"}) == Path("/af/autoexp-cache")


def test_old_entries_are_pruned(tmp_path: Path) -> None:
    for i in range(40):
        entry = tmp_path / f"old{i:02d}.json"
        entry.write_text("{}")
        os.utime(entry, (1000 + i, 1000 + i))
    cache.store("new", tmp_path, None, [])
    kept = sorted(p.name for p in tmp_path.glob("*.json"))
    assert len(kept) == 32
    assert "new.json" in kept
    assert "old00.json" not in kept  # the oldest went first
