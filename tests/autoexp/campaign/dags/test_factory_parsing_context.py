"""A task process builds only the DAG it runs (Airflow's parsing context); the DAG processor builds all."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from airflow.sdk.definitions.context import _AIRFLOW_PARSING_CONTEXT_DAG_ID, _AIRFLOW_PARSING_CONTEXT_TASK_ID

from autoexp.campaign.dags.factory import build_dags, register
from autoexp.campaign.planning.campaign_slice import campaign_dag_id, campaign_report_dag_id

DEMO = Path(__file__).resolve().parents[4] / "config" / "demo.yaml"


def test_a_task_process_builds_only_its_own_dag(monkeypatch: pytest.MonkeyPatch) -> None:
    every = [dag.dag_id for dag in build_dags(DEMO)]
    assert len(every) == 9  # config/demo.yaml: 3 sizes x 3 learning rates
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


_CAMPAIGN_MODULES = (
    "autoexp.campaign.dags.campaign_trigger_dag",
    "autoexp.campaign.dags.campaign_report_dag",
)


def _probed(stdout: str) -> list[str]:
    """The probe's own lines (Airflow 3.2 logs to stdout too, at import)."""
    return [line.removeprefix("probe: ") for line in stdout.splitlines() if line.startswith("probe: ")]


def test_a_task_process_of_an_experiment_skips_the_campaign_dags_and_their_imports() -> None:
    experiment = build_dags(DEMO)[1].dag_id
    # A fresh interpreter: this one may have imported the campaign modules for other tests.
    probe = (
        "import sys, runpy\n"
        "from autoexp.campaign.dags.factory import register\n"
        "ns = {}\n"
        f"register(ns, [__import__('pathlib').Path({str(DEMO)!r})])\n"
        "print('probe:', sorted(k for k, v in ns.items() if k.startswith('autoexp_campaign')))\n"
        f"print('probe:', [m for m in {_CAMPAIGN_MODULES!r} + ('scipy.optimize',) if m in sys.modules])\n"
    )
    env = {**os.environ, _AIRFLOW_PARSING_CONTEXT_DAG_ID: experiment}
    got = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert _probed(got.stdout) == ["[]", "[]"], got.stderr[-2000:]
    # The campaign's own DAGs are built in their own task processes and by the DAG processor.
    for dag_id in (campaign_dag_id(DEMO), campaign_report_dag_id(DEMO)):
        env[_AIRFLOW_PARSING_CONTEXT_DAG_ID] = dag_id
        got = subprocess.run(
            [sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True
        )
        assert _probed(got.stdout)[0] == repr([dag_id]), got.stderr[-2000:]
    namespace: dict[str, object] = {}
    register(namespace, [DEMO])
    assert {campaign_dag_id(DEMO), campaign_report_dag_id(DEMO)} <= set(namespace)
