"""SlurmOperator checks that need no cluster: argument validation, the resume method's event checks."""

from __future__ import annotations

from typing import Any

import pytest
from airflow.sdk.exceptions import AirflowException
from slurm_operator.events import SlurmEvent
from slurm_operator.operators import SlurmOperator


def _op(**kwargs: Any) -> SlurmOperator:
    base: dict[str, Any] = {
        "task_id": "train",
        "ssh_conn_id": "c",
        "script": "#!/bin/bash\ntrue\n",
        "remote_dir": "/scratch/run",
    }
    return SlurmOperator(**{**base, **kwargs})


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"script_path": "/x.sbatch"}, "give exactly one of script or script_path"),
        ({"script": None}, "give exactly one of script or script_path"),
        ({"remote_dir": "run"}, "remote_dir must be an absolute path, got 'run'"),
        ({"output_path": "/r/train.out"}, r"output_path '/r/train.out' must contain %j"),
        ({"completion_regex": "(unclosed"}, r"completion_regex '\(unclosed': missing \)"),
        ({"max_attempts": 0}, "max_attempts and max_attempts_without_progress must be >= 1"),
        ({"sbatch_args": ["--job-name=x"]}, "sbatch_args '--job-name=x': set job_name / output_path"),
        ({"sbatch_args": ["-o", "/x"]}, "sbatch_args '-o': set job_name / output_path"),
    ],
)
def test_validation_names_the_task_and_the_bad_value(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(AirflowException, match=f"^task train: {message}"):
        _op(**kwargs)._validate()


def test_valid_arguments_pass() -> None:
    _op(output_path="/r/train-%j.out", completion_regex="after training is done")._validate()


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ("done", "malformed trigger event: event: expected a dict, got str"),
        ({"status": "maybe", "message": "m"}, "malformed trigger event: event.status: 'maybe' is not one of"),
        ({"status": "success", "message": "m"}, "trigger event has no attempt record: m"),
    ],
)
def test_resume_rejects_events_off_the_schema(event: Any, message: str) -> None:
    with pytest.raises(AirflowException, match=f"^task train: {message}"):
        _op().execute_complete({}, event=event)  # type: ignore[arg-type]


def test_resume_turns_an_error_event_into_an_error_naming_job_and_log() -> None:
    carry = {"attempts": [{"attempt": 1, "job_id": "42", "log_path": "/r/a-42.out", "script_path": "/s"}]}
    event = SlurmEvent(status="error", message="no answer from the cluster for 1800 s", carry=carry)
    with pytest.raises(AirflowException, match=r"^Slurm job 42 \(/r/a-42.out\): no answer from the cluster"):
        _op().execute_complete({}, event=event.to_payload())  # type: ignore[arg-type]


class _Store:
    def __init__(self, value: Any) -> None:
        self.value = value

    def get(self, key: str) -> Any:
        assert key == "slurm_operator"
        return self.value


class _Hook:
    def __init__(self) -> None:
        self.cancelled: list[str] = []

    def cancel(self, job_id: str) -> None:
        self.cancelled.append(job_id)


@pytest.mark.parametrize(("error", "cancelled"), [("Trigger timeout", ["7"]), ("Trigger failure", [])])
def test_a_timed_out_deferral_cancels_the_job_a_failed_trigger_does_not(
    error: str, cancelled: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Trigger timeouts need a scheduler: the decision is checked here, the real run in integration/."""
    op = _op()
    hook = _Hook()
    monkeypatch.setattr(op, "_hook", lambda: hook)
    carry = {"attempts": [{"attempt": 1, "job_id": "7", "log_path": "/r/a-7.out", "script_path": "/s"}]}
    context: Any = {"task_state_store": _Store(carry)}
    with pytest.raises(AirflowException, match=f"^{error}$"):
        op.resume_execution("__fail__", {"error": error}, context)
    assert hook.cancelled == cancelled
