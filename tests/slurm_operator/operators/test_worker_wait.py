"""The worker-side wait's own lines (its relay and watchdog are tested with the operator)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from slurm_operator.model.records import JobRecord, JobStates
from slurm_operator.model.states import SlurmState
from slurm_operator.operators.worker_wait import wait_in_worker
from slurm_operator.triggers.slurm_job import SlurmJobTrigger


class _Polls:
    """job_states answers scripted per poll."""

    def __init__(self, records: list[JobRecord]) -> None:
        self.records = records

    def job_states(self, job_ids: list[str], watch: Any = ()) -> JobStates:
        return JobStates(records={"7": self.records.pop(0)})


def test_the_worker_wait_logs_a_pending_job_s_reason_once_per_change(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def pending(reason: str, start: str | None = None) -> JobRecord:
        return JobRecord("7", "n", SlurmState.PENDING, reason=reason, expected_start=start)

    polls = _Polls(
        [
            pending("Dependency"),
            pending("Dependency"),
            pending("Priority", "2026-12-03T14:05:00"),
            JobRecord("7", "n", SlurmState.COMPLETED, exit_code=0),
        ]
    )
    spec = SlurmJobTrigger(ssh_conn_id="c", job_id="7", poll_interval=60, stream_logs=False)
    with caplog.at_level(logging.INFO, logger="slurm_operator.operators.worker_wait"):
        ended = wait_in_worker(polls, spec, lambda _t: None, sleep=lambda _t: None)  # type: ignore[arg-type]
    assert ended.record.state is SlurmState.COMPLETED
    assert [r.getMessage() for r in caplog.records if "pending" in r.getMessage()] == [
        "Slurm job 7 pending: Dependency, no start estimate yet",
        "Slurm job 7 pending: Priority, est. start 2026-12-03T14:05",
    ]
