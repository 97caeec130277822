"""Alerts: tasks record their failures, one alert per failed run, sent to a log, real SMTP and Slack.

The DAG callback of a dag.test() run executes outside any task supervisor, where the SDK cannot read
task states or XComs: the alert then names the task Airflow reported last, without its Slurm details.
Choosing the earliest recorded failure is checked against the XComs the run really left (read from
the DB); tests/e2e/test_failed_trainings.py checks the whole mail on the real stack.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.standard.operators.python import PythonOperator
from airflow.sdk import DAG
from airflow.sdk.definitions.deadline import DeadlineReference
from airflow.sdk.exceptions import AirflowException

from autoexp.campaign.alerts.messages import FAILURE_KEY, root_cause
from autoexp.campaign.alerts.notifier import (
    CampaignNotifier,
    Target,
    dag_alerts,
    deadline_missed,
    task_alerts,
)
from autoexp.campaign.planning.settings import NotifierSettings
from tests.airflow_versions import DagSerialization
from tests.fixtures.airflow_env import AirflowEnv, run_dag_test, task_states, xcom_value
from tests.fixtures.alert_sinks import SlackSink, SmtpSink, mail_text

pytestmark = [pytest.mark.airflow]

ERROR = (
    "Slurm job 4242 FAILED (exit code 3), attempt 1: failed; log /runs/exp/train.log; last 20 lines:\n"
    "OOM here"
)
DAG_ID = "alerts_failing"


def _train(ti: Any) -> None:
    ti.xcom_push(key="slurm_job_id", value="4242")
    raise AirflowException(ERROR)


def _wait() -> None:
    time.sleep(1)  # fails after the training, as a checkpoint wait that saw its failed marker
    raise AirflowException("its training failed")


@dataclass
class FailedRun:
    run_id: str
    alerts: Path
    smtp: SmtpSink
    slack: SlackSink


@pytest.fixture(scope="module")
def failed_run(airflow_env: AirflowEnv, tmp_path_factory: pytest.TempPathFactory) -> Iterator[FailedRun]:
    """One dag.test() run: a training that fails (retried once), then a wait that fails because of it;
    its failure alert goes to a log file, a local SMTP server and a local Slack endpoint."""
    alerts = tmp_path_factory.mktemp("alerts") / "alerts.log"
    smtp, slack = SmtpSink(), SlackSink()
    smtp.controller.start()
    slack.start()
    mp = pytest.MonkeyPatch()
    mp.setenv("AIRFLOW_CONN_ALERTS_SMTP", smtp.connection())
    mp.setenv("AIRFLOW_CONN_ALERTS_SLACK", slack.connection())
    notify = NotifierSettings(path=str(alerts), on_retry=True)
    targets = [
        Target(path=str(alerts)),
        Target(kind="smtp", to=("ops@example.org",), conn_id="alerts_smtp"),
        Target(kind="slack", conn_id="alerts_slack"),
    ]
    default_args = {"retries": 0, **task_alerts("exp", notify)}
    try:
        with DAG(
            DAG_ID,
            schedule=None,
            start_date=datetime(2026, 1, 1),
            default_args=default_args,
            on_failure_callback=[
                CampaignNotifier(event="failure", experiment="exp", target=t) for t in targets
            ],
        ) as dag:
            train = PythonOperator(
                task_id="train", python_callable=_train, retries=1, retry_delay=timedelta(0)
            )
            train >> PythonOperator(task_id="wait", python_callable=_wait, trigger_rule="all_done")
        run = run_dag_test(dag, expect="failed")
        yield FailedRun(run.run_id, alerts, smtp, slack)
    finally:
        mp.undo()
        smtp.controller.stop()
        slack.stop()


def test_each_failed_task_records_its_failure(failed_run: FailedRun) -> None:
    train = xcom_value(DAG_ID, failed_run.run_id, "train", key=FAILURE_KEY)
    wait = xcom_value(DAG_ID, failed_run.run_id, "wait", key=FAILURE_KEY)
    assert (train["task"], train["try_number"], train["job_id"]) == ("train", 2, "4242")
    assert train["error"] == ERROR
    assert wait["error"] == "its training failed"
    assert train["at"] < wait["at"]


class _RecordedRun:
    """The two reads root_cause makes through the SDK, answered from the run's DB rows."""

    def __init__(self, run_id: str, last_failed: str) -> None:
        self.dag_id, self.run_id, self.task_id, self.map_index, self.try_number = (
            DAG_ID,
            run_id,
            last_failed,
            -1,
            1,
        )

    def get_task_states(self, dag_id: str, run_ids: list[str]) -> dict[str, dict[str, Any]]:
        return {self.run_id: task_states(dag_id, self.run_id)}

    def xcom_pull(self, task_ids: list[str], key: str, dag_id: str, run_id: str) -> list[Any]:
        return [xcom_value(dag_id, run_id, task_id, key=key) for task_id in task_ids]


def test_the_root_cause_is_the_failure_recorded_first(failed_run: FailedRun) -> None:
    dag = DAG(DAG_ID, schedule=None)
    for task_id in ("train", "wait"):
        PythonOperator(task_id=task_id, python_callable=_wait, dag=dag)
    cause = root_cause({"ti": _RecordedRun(failed_run.run_id, "wait"), "dag": dag})  # type: ignore[typeddict-item]
    assert cause is not None
    assert (cause.task, cause.job_id, cause.error) == ("train", "4242", ERROR)


def test_one_alert_per_failed_run_through_each_notifier(failed_run: FailedRun) -> None:
    text = failed_run.alerts.read_text()
    assert text.count("autoexp FAILED") == 1, text
    assert text.count("autoexp RETRY: experiment=exp task=train slurm_job=4242") == 1, text
    assert "OOM here" in text  # the retry alert carries the error
    (mail,) = failed_run.smtp.mails
    assert (mail["From"], mail["To"]) == ("autoexp@example.org", "ops@example.org")
    (post,) = failed_run.slack.posts
    link = f"/dags/{DAG_ID}/runs/"
    for body in (mail_text(mail), post["text"]):
        assert f"autoexp FAILED: experiment=exp run={failed_run.run_id}" in body
        assert link in body


def test_success_alert_is_opt_in(airflow_env: AirflowEnv, tmp_path: Path) -> None:
    alerts = tmp_path / "alerts.log"
    notify = NotifierSettings(path=str(alerts), on_success=True)
    with DAG(
        "alerts_success", schedule=None, start_date=datetime(2026, 1, 1), **dag_alerts("exp", notify)
    ) as dag:
        PythonOperator(task_id="ok", python_callable=lambda: None)
    run = run_dag_test(dag)
    assert alerts.read_text().count(f"autoexp SUCCEEDED: experiment=exp run={run.run_id}") == 1


def test_by_default_only_the_run_failure_alerts() -> None:
    assert set(dag_alerts("exp", NotifierSettings())) == {"on_failure_callback"}
    assert set(task_alerts("exp", NotifierSettings())) == {"on_failure_callback"}


def test_the_deadline_alert_is_airflows_and_serializes(tmp_path: Path) -> None:
    notify = NotifierSettings(path=str(tmp_path / "alerts.log"), deadline_secs=3600)
    deadline = dag_alerts("exp", notify)["deadline"]
    assert deadline.reference == DeadlineReference.DAGRUN_QUEUED_AT
    assert deadline.interval == timedelta(hours=1)
    assert deadline.callback.path == "autoexp.campaign.alerts.notifier.deadline_missed"
    with DAG("alerts_deadline", schedule=None, start_date=datetime(2026, 1, 1), deadline=deadline) as dag:
        PythonOperator(task_id="ok", python_callable=lambda: None)
    assert DagSerialization.serialize_dag(dag)["deadline"]
    # What the scheduler passes when the deadline is missed: the run as JSON, plus our kwargs.
    context = {"dag_run": {"dag_id": "d", "dag_run_id": "manual__1", "state": "running"}, "deadline": {}}
    deadline_missed(context, **deadline.callback.kwargs)
    text = (tmp_path / "alerts.log").read_text()
    assert "autoexp LATE: experiment=exp run=manual__1 not done 3600 s after queueing" in text
    assert "/dags/d/runs/manual__1" in text
