"""A task process builds only the DAG it runs (Airflow's parsing context); the DAG processor builds all."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow.sdk.definitions.context import _AIRFLOW_PARSING_CONTEXT_DAG_ID, _AIRFLOW_PARSING_CONTEXT_TASK_ID

from autoexp.campaign.dags.factory import build_dags, register

DEMO = Path(__file__).resolve().parents[4] / "config" / "demo.yaml"


def test_a_task_process_builds_only_its_own_dag(monkeypatch: pytest.MonkeyPatch) -> None:
    every = [dag.dag_id for dag in build_dags(DEMO)]
    assert len(every) == 4
    # What Airflow's task runner sets around its parse of the DAG file (task_runner.parse).
    monkeypatch.setenv(_AIRFLOW_PARSING_CONTEXT_DAG_ID, every[2])
    monkeypatch.setenv(_AIRFLOW_PARSING_CONTEXT_TASK_ID, "pretrain.train")
    assert [dag.dag_id for dag in build_dags(DEMO)] == [every[2]]
    namespace: dict[str, object] = {}
    register(namespace, [DEMO])
    assert every[2] in namespace
    assert not (set(every) - {every[2]}) & set(namespace)
    monkeypatch.delenv(_AIRFLOW_PARSING_CONTEXT_DAG_ID)  # the DAG processor: no context, every DAG
    assert [dag.dag_id for dag in build_dags(DEMO)] == every
