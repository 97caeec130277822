"""The `airflow:` schedule and notify keys reach the DAG; Slurm tasks get run-independent job names."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.sdk import DAG
from slurm_operator.model.ledger import Attempt
from slurm_operator.model.states import SlurmState

from autoexp.campaign.dags.factory import build_dags
from tests.e2e.campaign import reduced_config


def _dag(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, settings: str) -> DAG:
    monkeypatch.setenv("AUTOEXP_DEMO_DIR", str(tmp_path / "demo"))
    monkeypatch.setenv("AUTOEXP_CACHE_DIR", "off")
    config = reduced_config(tmp_path, ("  paused: false\n", f"  paused: false\n{settings}"))
    (dag,) = build_dags(config)
    return dag


def test_a_duration_schedule_with_catchup_and_an_unquoted_start_date(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dag = _dag(tmp_path, monkeypatch, "  schedule: PT1H\n  catchup: true\n  start_date: 2026-01-01\n")
    assert (dag.schedule, dag.catchup, dag.max_active_runs) == (timedelta(hours=1), True, 1)
    assert dag.start_date == datetime(2026, 1, 1, tzinfo=timezone.utc)


def test_by_default_runs_come_only_from_triggers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dag = _dag(tmp_path, monkeypatch, "")
    assert (dag.schedule, dag.catchup) == (None, False)


def test_slurm_tasks_share_the_experiment_s_lock_and_name_their_jobs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dag = _dag(tmp_path, monkeypatch, "")
    train: Any = dag.get_task("pretrain.train")
    assert train.job_name.startswith("demo_tiny_lr0.003_bs4-pretrain-train-")
    assert train.submit_lock == f"{tmp_path}/demo/runs/demo_tiny_lr0.003_bs4/autoexp/locks/submit.lock"
    convert: Any = dag.get_task("pretrain.checkpoints.convert_eval")
    assert convert.submit_lock == train.submit_lock
    wait: Any = dag.get_task("pretrain.checkpoints.wait")
    assert wait.watch_job_name == train.job_name


def test_on_retry_alerts_each_slurm_resubmission_of_a_training(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _dag(tmp_path, monkeypatch, "").get_task("pretrain.train").resubmit_alert is None  # type: ignore[attr-defined]
    alerts = tmp_path / "alerts.log"
    notify = f"  notify: {{kind: log, path: {alerts}, on_retry: true}}\n"
    train: Any = _dag(tmp_path, monkeypatch, notify).get_task("pretrain.train")
    ended = Attempt(attempt=1, job_id="77", log_path="/runs/x/train-77.out", script_path="s", exit_code=0)
    ended = replace(ended, state=SlurmState.TIMEOUT)
    ti = SimpleNamespace(task_id="pretrain.train", map_index=-1)
    context: Any = {"ti": ti, "dag_run": SimpleNamespace(dag_id="d", run_id="manual__1")}
    # What SlurmOperator._judge calls before the next sbatch (the plugin's test checks it is called).
    train.on_resubmit(context, ended, "job ended TIMEOUT, which is resubmittable")
    text = alerts.read_text()
    assert text.count("autoexp RESUBMIT: experiment=") == 1, text
    assert "task=pretrain.train slurm_job=77 attempt=1" in text
    assert "state=TIMEOUT exit_code=0 log=/runs/x/train-77.out" in text
    assert "resubmitting: job ended TIMEOUT, which is resubmittable" in text
    assert "/dags/d/runs/manual__1" in text
