"""Each config is imported by its own DAG file: a hung config, a DAG id two configs build, a big grid."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from tests.airflow_versions import dag_bag
from tests.fixtures.seed_grid import release_fifo, relocated, write_grid

REPO = Path(__file__).resolve().parents[2]
DAGS = REPO / "dags"
DEMO = REPO / "config" / "demo.yaml"
DEMO_IDS = [
    f"demo_demo_{size}_lr{lr}_bs4"
    for size in ("medium", "small", "tiny")
    for lr in ("0.002", "0.006", "0.018")
]


@pytest.fixture(autouse=True)
def private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A clean checkout with its own cache (the id lists the DAG files share live there)."""
    for name in ("AUTOEXP_ROOT", "AUTOEXP_DEMO_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AUTOEXP_CACHE_DIR", str(tmp_path / "cache"))


def bag(configs: list[Path], monkeypatch: pytest.MonkeyPatch) -> Any:
    monkeypatch.setenv("AUTOEXP_CONFIGS", os.pathsep.join(map(str, configs)))
    return dag_bag(DAGS)


def experiments(dagbag: Any) -> list[str]:
    """The experiment DAGs' ids (each config also builds its campaign trigger and report DAGs)."""
    return sorted(d for d in dagbag.dags if not d.startswith("autoexp_campaign_"))


def files_of(dagbag: Any, prefix: str) -> set[str]:
    return {Path(dag.fileloc).name for dag_id, dag in dagbag.dags.items() if dag_id.startswith(prefix)}


def test_a_config_hung_past_the_import_timeout_costs_only_its_own_dags(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A FIFO no one writes stands for a config on a file system that never answers (a fault the
    local machine cannot produce otherwise): its read blocks until Airflow's per-file timeout."""
    hung = tmp_path / "hung.yaml"
    os.mkfifo(hung)
    monkeypatch.setenv("AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT", "3")
    dagbag = bag([hung, DEMO], monkeypatch)
    release_fifo(hung)  # the demo's file asked for its DAG ids and stopped waiting; its thread ends
    assert experiments(dagbag) == DEMO_IDS
    assert len(dagbag.dags) == len(DEMO_IDS) + 2
    assert files_of(dagbag, "demo_") == files_of(dagbag, "autoexp_campaign_") == {"autoexp_campaigns_1.py"}
    ((where, error),) = dagbag.import_errors.items()
    assert where == "autoexp_campaigns_0.py"
    assert "DagBag import timeout" in error


def test_a_dag_id_two_configs_build_is_one_error_naming_both(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The demo and a copy sharing one learning rate: the copy's other DAGs load, the shared one is
    built from the demo only, and the copy's file says so."""
    copy = tmp_path / "demo_copy.yaml"
    copy.write_text(relocated(DEMO.read_text().replace("LR: [2e-3, 6e-3, 1.8e-2]", "LR: [2e-3, 2e-2]"), DEMO))
    dagbag = bag([DEMO, copy], monkeypatch)
    shared = "demo_demo_medium_lr0.002_bs4"
    assert experiments(dagbag) == sorted(
        [*DEMO_IDS, *(f"demo_demo_{size}_lr0.02_bs4" for size in ("medium", "small", "tiny"))]
    )
    assert {"autoexp_campaign_demo", "autoexp_campaign_demo_copy"} <= set(dagbag.dags)
    assert Path(dagbag.dags[shared].fileloc).name == "autoexp_campaigns_0.py"
    assert dagbag.import_errors == {
        "autoexp_campaigns_1.py": (
            f"CampaignConfigError: {copy}: experiment 'demo_medium_lr0.002_bs4' gives DAG id {shared!r}, "
            f"which {DEMO} already builds (experiment 'demo_medium_lr0.002_bs4'); it is built from "
            f"{DEMO} only (2 more DAG ids clash likewise). Rename the experiment or set "
            "airflow.dag_id_prefix in one of the two configs"
        )
    }


def test_configs_beyond_the_dag_files_go_to_the_last_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    copies = []
    for i in range(9):  # eight DAG files
        copy = tmp_path / f"demo_{i}.yaml"
        copy.write_text(
            relocated(DEMO.read_text().replace("dag_id_prefix: demo_", f"dag_id_prefix: d{i}_"), DEMO)
        )
        copies.append(copy)
    dagbag = bag(copies, monkeypatch)
    assert dagbag.import_errors == {}
    assert len(experiments(dagbag)) == 81  # 9 configs of 9 experiments
    assert len(dagbag.dags) == 81 + 2 * 9
    assert files_of(dagbag, "d0_") == {"autoexp_campaigns_0.py"}
    assert files_of(dagbag, "d7_") == files_of(dagbag, "d8_") == {"autoexp_campaigns_7.py"}


def test_the_900_experiment_grid_loads_beside_another_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Loading, not speed (bench/bench_dag_parse.py): the import timeout is raised for a busy machine."""
    monkeypatch.setenv("AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT", "600")
    grid = write_grid(tmp_path, 50)
    dagbag = bag([grid, DEMO], monkeypatch)
    assert dagbag.import_errors == {}
    assert len(experiments(dagbag)) == 909
    assert len(dagbag.dags) == 909 + 2 * 2
    assert files_of(dagbag, "demo_") == {"autoexp_campaigns_1.py"}
    assert len(files_of(dagbag, "")) == 2
