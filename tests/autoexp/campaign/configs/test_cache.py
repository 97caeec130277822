"""Expansion cache: a hit plans exactly like a fresh expansion; any change of input is a miss."""

from __future__ import annotations

import os
import zlib
from pathlib import Path

import pytest

from autoexp.campaign.configs import cache
from autoexp.campaign.planning.plan import ExperimentPlan, plan_campaign
from autoexp.campaign.planning.settings import parse_settings
from autoexp.config import expand, load_config
from tests.support.checkout import REPO_ROOT

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
    (tmp_path / "k.json.z").write_text("{not compressed")
    assert cache.load("k", tmp_path) is None
    (tmp_path / "k.json.z").write_bytes(zlib.compress(b"{not json"))
    assert cache.load("k", tmp_path) is None
    (tmp_path / "k.json.z").write_bytes(zlib.compress(b'{"format": 1, "airflow": null, "jobs": []}'))
    assert cache.load("k", tmp_path) is None  # the uncompressed format's version
    assert cache.load("absent", tmp_path) is None


def test_id_lists_follow_the_config_file_and_odd_ones_are_unknown(tmp_path: Path) -> None:
    config = tmp_path / "a.yaml"
    config.write_text("A: 1\n")
    cache.store_ids(config, config.stat(), tmp_path, {"demo_a": "a"})
    assert cache.load_ids(config, tmp_path) == {"demo_a": "a"}
    assert cache.load_ids(config, None) is None
    os.utime(config, ns=(1, 1))  # edited since: not known until its own file plans it again
    assert cache.load_ids(config, tmp_path) is None
    cache.store_ids(config, config.stat(), tmp_path, {"demo_b": "b"})
    assert cache.load_ids(config, tmp_path) == {"demo_b": "b"}
    assert cache.load_ids(tmp_path / "other.yaml", tmp_path) is None
    (ids,) = tmp_path.glob("*.ids")
    ids.write_text("{nope")
    assert cache.load_ids(config, tmp_path) is None


def test_cache_folder_follows_the_environment(tmp_path: Path) -> None:
    assert cache.cache_dir({"AUTOEXP_CACHE_DIR": "off"}) is None
    assert cache.cache_dir({"AUTOEXP_CACHE_DIR": str(tmp_path)}) == tmp_path
    assert cache.cache_dir({"AIRFLOW_HOME": "/af"}) == Path("/af/autoexp-cache")


def test_old_entries_are_pruned(tmp_path: Path) -> None:
    for i in range(40):
        for name in (f"old{i:02d}.json.z", f"old{i:02d}.ids"):
            entry = tmp_path / name
            entry.write_text("{}")
            os.utime(entry, (1000 + i, 1000 + i))
    (tmp_path / "v1.json").write_text("{}")  # the uncompressed format's, oldest of all
    os.utime(tmp_path / "v1.json", (10, 10))
    cache.store("new", tmp_path, None, [])
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert len(kept) == 2 * 31 + 1  # the 32 newest names: the new entry and 31 old entries and id lists
    assert "new.json.z" in kept
    assert not {"old08.json.z", "old08.ids"} & set(kept)  # the oldest went first
    assert {"old09.json.z", "old09.ids"} <= set(kept)
    assert "v1.json" not in kept


def test_the_900_experiment_grid_caches_in_under_a_megabyte(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The seed with 50 learning rates: 10,800 jobs, 19 MB as plain JSON (the format before)."""
    from autoexp.campaign.configs.planned_config import load_plans
    from tests.fixtures.seed_grid import write_grid

    grid = write_grid(tmp_path, 50)
    monkeypatch.setenv("AUTOEXP_CACHE_DIR", str(tmp_path / "cache"))
    plans, _ = load_plans(grid)
    assert len(plans) == 900
    (entry,) = (tmp_path / "cache").glob("*.json.z")
    assert entry.stat().st_size < 1_000_000
    assert len(cache.load_ids(grid, tmp_path / "cache") or {}) == 900
    hit = load_plans(grid)[0]
    assert [p.dag_id for p in hit] == [p.dag_id for p in plans]
