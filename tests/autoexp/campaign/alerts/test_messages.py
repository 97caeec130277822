"""What an alert says, pure: the failure that ended the run (after a clear, a mark-failed), the
job's error lines rather than the launcher's shutdown report, and links under the API's base URL.

The reads root_cause makes through the SDK (task states, XComs) are answered by a fake task instance
here; test_notifier.py checks them against a real run's rows, tests/e2e/test_failed_trainings.py on the
real stack.
"""

from __future__ import annotations

from dataclasses import asdict
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from airflow.providers.standard.operators.empty import EmptyOperator
from airflow.sdk import DAG

from autoexp.campaign.alerts.messages import (
    FAILURE_KEY,
    Failure,
    failure_alert,
    root_cause,
    run_link,
    shown_error,
)

DATA = Path(__file__).parents[1] / "planning" / "data" / "training_logs"
ENDED = datetime(2026, 12, 3, 8, 30, 5, tzinfo=timezone.utc)


def _dag() -> DAG:
    dag = DAG("alerts_pure", schedule=None)
    for task_id in ("train", "wait", "convert"):
        EmptyOperator(task_id=task_id, dag=dag)
    return dag


class _Run:
    """A run's task states and XComs as the SDK's task instance reads them (the DAG callback's ``ti``:
    the failed task Airflow reported last)."""

    def __init__(self, states: dict[str, str], records: list[Failure], job_ids: dict[str, str]) -> None:
        self.dag_id, self.run_id, self.task_id, self.map_index, self.try_number = (
            "alerts_pure",
            "r1",
            "wait",
            0,
            1,
        )
        self.states, self.records, self.job_ids = states, records, job_ids

    def get_task_states(self, dag_id: str, run_ids: list[str]) -> dict[str, dict[str, str]]:
        return {self.run_id: self.states}

    def xcom_pull(self, task_ids: Any, key: str, **kw: Any) -> Any:
        if key == FAILURE_KEY:  # one value per unmapped task, a list per mapped one
            by_task: dict[str, list[Any]] = {}
            for r in self.records:
                by_task.setdefault(r.task, []).append(asdict(r))
            return [by_task.get(t, [None])[0] if t == "train" else by_task.get(t, []) for t in task_ids]
        return self.job_ids.get(task_ids)


def _cause(states: dict[str, str], *records: Failure, job_ids: dict[str, str] | None = None) -> Failure:
    ti = _Run(states, list(records), job_ids or {})
    context: Any = {"ti": ti, "dag": _dag(), "dag_run": SimpleNamespace(end_date=ENDED, clear_number=1)}
    cause = root_cause(context)
    assert cause is not None
    return cause


def _failure(task: str, map_index: int, at: str, clear_number: int, error: str) -> Failure:
    return Failure(task, map_index, 1, f"2026-12-03T08:{at}+00:00", error, clear_number=clear_number)


TRAIN_1 = _failure("train", -1, "00:00", 0, "Slurm job 7 CANCELLED: cancelled from outside")
WAIT_0 = _failure("wait", 0, "00:10", 0, "its training failed")
TRAIN_2 = _failure("train", -1, "20:00", 1, "Slurm job 9 FAILED: loss is nan")
WAIT_1 = _failure("wait", 1, "20:10", 1, "its training failed")


def test_a_clear_supersedes_the_records_from_before_it() -> None:
    # wait[0] failed before the run was cleared (and was not cleared); the training's new try failed
    cause = _cause({"train": "failed", "wait_0": "failed", "wait_1": "failed"}, WAIT_0, TRAIN_2, WAIT_1)
    assert (cause.task, cause.error) == ("train", "Slurm job 9 FAILED: loss is nan")


def test_a_record_of_an_instance_no_longer_failed_is_dropped() -> None:
    # wait[0] was cleared and succeeded (started by the triggerer: its old XCom stays)
    cause = _cause({"train": "success", "wait_0": "success", "wait_1": "failed"}, WAIT_0, WAIT_1)
    assert (cause.task, cause.map_index) == ("wait", 1)


def test_without_a_clear_the_earliest_failure_is_the_cause() -> None:
    cause = _cause({"train": "failed", "wait_0": "failed"}, TRAIN_1, WAIT_0)
    assert (cause.task, cause.error) == ("train", TRAIN_1.error)


def test_a_mark_failed_names_the_task_and_says_so() -> None:
    # the training was marked failed (its callback ran in the DAG processor: nothing recorded);
    # its waits then failed and recorded "its training failed"
    cause = _cause(
        {"train": "failed", "wait_0": "failed", "convert": "upstream_failed"},
        WAIT_0,
        job_ids={"train": "4711"},
    )
    assert (cause.task, cause.job_id) == ("train", "4711")
    assert cause.error == (
        "marked failed (by a user or the API) or killed at or before 2026-12-03T08:30:05+00:00, "
        "no error recorded"
    )
    context: Any = {
        "ti": _Run({"train": "failed"}, [], {"train": "4711"}),
        "dag": _dag(),
        "dag_run": SimpleNamespace(dag_id="alerts_pure", run_id="r1", end_date=ENDED, clear_number=0),
    }
    subject, body = failure_alert(context, "exp")
    assert subject == "autoexp FAILED: experiment=exp run=r1 task=train slurm_job=4711"
    assert "task=train try=- slurm_job=4711 state=- exit_code=- log=-\nmarked failed (by a user" in body


def test_the_alert_shows_the_jobs_error_lines_not_torchruns_report() -> None:
    log = (DATA / "loss_nan.log").read_text()
    error = (
        f"Slurm job 9 FAILED (exit code 1), attempt 1: job ended FAILED; log /r/9.out; last 20 lines:\n{log}"
    )
    assert shown_error(error) == (
        "Slurm job 9 FAILED (exit code 1), attempt 1: job ended FAILED; log /r/9.out; last 20 lines:\n"
        "iteration 118/400 loss 2.913\niteration 119/400 loss 2.907\niteration 120/400 loss nan\n"
        "loss is nan at iteration 120: stopping"
    )
    assert shown_error("its training failed") == "its training failed"


@pytest.mark.parametrize(
    ("env", "link"),
    [
        ({"AIRFLOW__API__BASE_URL": "https://airflow.example.org/ui/"}, "https://airflow.example.org/ui"),
        ({"AIRFLOW__API__PORT": "28080"}, "http://localhost:28080"),
        ({}, "http://localhost:8080"),
    ],
)
def test_links_are_under_the_apis_base_url(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], link: str
) -> None:
    monkeypatch.delenv("AIRFLOW__API__BASE_URL", raising=False)
    monkeypatch.delenv("AIRFLOW__API__PORT", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert run_link("d", "manual__2026-12-03T08:00:00+00:00") == (
        f"{link}/dags/d/runs/manual__2026-12-03T08%3A00%3A00%2B00%3A00"
    )
