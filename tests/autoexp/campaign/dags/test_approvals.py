"""The cooldown approval's answers: below the threshold nothing is asked; asked, Reject or no answer in
time skips the cooldown trainings (and nothing else), Approve lets them start.

The task's own logic, run against the DAG the factory builds; the human-in-the-loop round trip
through Airflow's API is the campaign gate's real-stack test (tests/e2e/test_budget_gate.py).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pytest
from airflow.providers.standard.operators.hitl import HITLOperator

from autoexp.campaign.configs.cache import CACHE_ENV
from autoexp.campaign.dags.approvals import CooldownApproval
from autoexp.campaign.dags.factory import build_dags
from tests.airflow_versions import DownstreamTasksSkipped
from tests.support.checkout import REPO_ROOT

DEMO = REPO_ROOT / "config" / "demo.yaml"
ALL = ["pretrain", "cooldown_16K", "cooldown_24K"]


class _Ti:
    """What SkipMixin.skip asks of its task instance."""

    map_index = -1

    def __init__(self) -> None:
        self.pushed: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.pushed[key] = value


def _approval(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, threshold: float) -> CooldownApproval:
    monkeypatch.setenv(CACHE_ENV, str(tmp_path))
    override = f"airflow.gate={{gpu_hours_threshold: {threshold}, cooldowns: true}}"
    task = build_dags(DEMO, (override,))[0].task_dict["approve_cooldowns"]
    assert isinstance(task, CooldownApproval)
    return task


def _context(task: CooldownApproval) -> Any:
    return {"task": task, "ti": _Ti()}


def _answer(option: str, by: Any) -> dict[str, Any]:
    """The resume event of an answer (Airflow's HITLDetail.as_resume_event_payload; ``by`` None: the
    default answer of the scheduler's timeout sweep)."""
    at = datetime(2026, 12, 3, tzinfo=timezone.utc)
    return {"chosen_options": [option], "params_input": {}, "responded_at": at, "responded_by_user": by}


def test_below_the_threshold_nothing_is_asked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    approve = _approval(tmp_path, monkeypatch, 1000)

    def asked(self: HITLOperator, context: Any) -> None:
        raise AssertionError("no request may be written")

    monkeypatch.setattr(HITLOperator, "execute", asked)
    assert approve.execute({"params": {"phases": ALL}}) is None


def test_above_it_the_request_names_the_experiment_and_the_cooldowns_estimate(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    approve = _approval(tmp_path, monkeypatch, 1.0e-9)
    requests: list[tuple[str, str | None]] = []
    monkeypatch.setattr(
        HITLOperator, "execute", lambda self, context: requests.append((self.subject, self.body))
    )
    approve.execute({"params": {"phases": ALL}})
    [(subject, body)] = requests
    estimate = approve.gate_plan.estimate(ALL)
    assert subject == f"Start the cooldowns of demo_tiny_lr0.002_bs4: {estimate.question}?"
    assert body is not None
    head, blank, *bullets = body.splitlines()
    assert (head, blank) == (estimate.text.splitlines()[0], "")
    assert bullets[0].startswith("- longest training: ")
    assert all(line.startswith("- ") for line in bullets)
    assert "for 2 training(s)" in body
    # A run that drives one cooldown is asked about that one.
    requests.clear()
    approve.execute({"params": {"phases": ["pretrain", "cooldown_24K"]}})
    assert "for 1 training(s)" in str(requests[0][1])


@pytest.mark.parametrize("by", [{"id": "admin", "name": "admin"}, None], ids=["reject", "timeout"])
def test_reject_or_no_answer_skips_the_cooldown_trainings_only(
    by: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    approve = _approval(tmp_path, monkeypatch, 1.0e-9)
    # No answer in time: the scheduler answers with the task's defaults.
    option = "Reject" if by is not None else (approve.defaults or [])[0]
    with pytest.raises(DownstreamTasksSkipped) as skipped:
        approve.execute_complete(_context(approve), _answer(option, by))
    # Their checkpoint waits see the skipped training and end skipped; their conversions follow.
    assert sorted(skipped.value.tasks) == ["cooldown_16K.train", "cooldown_24K.train"]


def test_approve_lets_the_cooldowns_start(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    approve = _approval(tmp_path, monkeypatch, 1.0e-9)
    answer = approve.execute_complete(_context(approve), _answer("Approve", {"id": "a"}))
    assert answer["chosen_options"] == ["Approve"]
