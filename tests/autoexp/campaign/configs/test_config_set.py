"""Which DAG file builds which config; other configs' DAG ids, never waited on for long."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from autoexp.campaign.configs.config_set import claimed_ids, configs_of_file
from autoexp.campaign.configs.config_source import config_paths, default_config_dir
from tests.fixtures.seed_grid import release_fifo
from tests.support.checkout import REPO_ROOT

DEMO = REPO_ROOT / "config" / "demo.yaml"


def dag_files(folder: Path, numbers: list[int]) -> list[Path]:
    files = [folder / f"autoexp_campaigns_{n}.py" for n in numbers]
    for f in files:
        f.write_text("")
    return files


def test_each_file_takes_its_position_and_the_last_takes_the_rest(tmp_path: Path) -> None:
    first, second, last = dag_files(tmp_path, [0, 2, 10])  # by number, not by name order
    configs = [Path(f"c{i}.yaml") for i in range(5)]
    assert configs_of_file(first, configs) == configs[:1]
    assert configs_of_file(second, configs) == configs[1:2]
    assert configs_of_file(last, configs) == configs[2:]
    assert configs_of_file(last, configs[:1]) == []
    with pytest.raises(ValueError, match=r"autoexp_campaigns_<number>\.py"):
        configs_of_file(tmp_path / "campaigns.py", configs)


def test_a_config_listed_twice_is_built_once(tmp_path: Path) -> None:
    for name in ("a.yaml", "b.yaml"):
        (tmp_path / name).write_text("")
    spec = os.pathsep.join([str(tmp_path / "*.yaml"), str(tmp_path / "b.yaml"), str(tmp_path / "gone.yaml")])
    found = config_paths(tmp_path, {"AUTOEXP_CONFIGS": spec})
    assert found == [tmp_path / "a.yaml", tmp_path / "b.yaml", tmp_path / "gone.yaml"]


def test_without_the_variable_the_configs_are_those_beside_the_dags_folder(tmp_path: Path) -> None:
    """The rule the UI shares with the DAG files (``<dag file>/../../config``): the checkout's config/
    for its dags/, $AIRFLOW_HOME/config for Airflow's default folder; never the package's location."""
    assert default_config_dir(REPO_ROOT / "dags") == REPO_ROOT / "config"
    home = tmp_path / "airflow"
    (home / "config").mkdir(parents=True)
    (home / "config" / "mine.yaml").write_text("{}\n")
    assert config_paths(default_config_dir(home / "dags"), {}) == [home / "config" / "mine.yaml"]


def test_ids_of_a_hung_config_are_unknown_within_the_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO no one writes stands for a config on a file system that never answers."""
    monkeypatch.setenv("AUTOEXP_CACHE_DIR", str(tmp_path / "cache"))
    hung = tmp_path / "hung.yaml"
    os.mkfifo(hung)
    start = time.monotonic()
    assert claimed_ids(hung, 0.5) is None
    assert time.monotonic() - start < 5
    release_fifo(hung)


def test_ids_are_planned_once_then_read_from_the_list(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AUTOEXP_CACHE_DIR", str(tmp_path / "cache"))
    ids = claimed_ids(DEMO, 60)
    assert ids is not None
    assert ids["demo_demo_tiny_lr0.002_bs4"] == "demo_tiny_lr0.002_bs4"
    assert len(list((tmp_path / "cache").glob("*.ids"))) == 1
    assert claimed_ids(DEMO, 0) == ids  # no wait: from the list
