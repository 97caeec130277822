"""Where a task instance records its job: the state store where the runner has one, XComs always."""

from __future__ import annotations

from typing import Any

import pytest
from slurm_operator.model.ledger import Ledger
from slurm_operator.operators import task_state

LEDGER = Ledger.from_dict(
    {"name": "n", "attempts": [{"attempt": 1, "job_id": "7", "log_path": "/r/n-7.out", "script_path": "/s"}]}
)


class _Ti:
    task_id, map_index = "t", 2

    def __init__(self) -> None:
        self.xcoms: dict[str, Any] = {}

    def xcom_push(self, key: str, value: Any) -> None:
        self.xcoms[key] = value

    def xcom_pull(self, task_ids: str, key: str, map_indexes: int) -> Any:
        assert (task_ids, map_indexes) == ("t", 2)
        return self.xcoms.get(key)


class _Store:
    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def set(self, key: str, value: Any, retention: Any = None) -> None:
        self.values[key] = value

    def get(self, key: str) -> Any:
        return self.values.get(key)


@pytest.mark.parametrize("has_store", [True, False])
def test_the_recorded_job_and_its_log_are_found_again_with_or_without_a_state_store(has_store: bool) -> None:
    """Airflow before 3.3 (and dag.test()) gives no state store: the log path then goes to an XCom,
    so that a deferral timing out can still leave the cancel marker next to the job's log."""
    ti = _Ti()
    context: Any = {"ti": ti, **({"task_state_store": _Store()} if has_store else {})}
    task_state.record(context, LEDGER)
    assert task_state.recorded_attempt(context) == ("7", "/r/n-7.out")
    if has_store:
        assert ti.xcoms == {"slurm_job_id": "7"}
        assert task_state.state_get(context) == LEDGER.to_dict()
    else:
        assert ti.xcoms == {"slurm_job_id": "7", "slurm_job_log": "/r/n-7.out"}


def test_nothing_recorded_is_no_attempt() -> None:
    assert task_state.recorded_attempt({"ti": _Ti()}) is None  # type: ignore[typeddict-item]
