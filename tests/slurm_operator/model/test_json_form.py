"""Tests for the records' one JSON form (pure)."""

from __future__ import annotations

import json

from slurm_operator.model.json_form import json_state
from slurm_operator.model.ledger import Attempt, Ledger
from slurm_operator.model.records import JobRecord, JobStates, RemoteStat
from slurm_operator.model.states import SlurmState


def test_a_nested_record_goes_through_json_and_back_unchanged() -> None:
    states = JobStates(
        records={
            "7": JobRecord("7", "n", SlurmState.CANCELLED, raw_state="CANCELLED by 0", cancelled_by_uid=0)
        },
        source="sacct",
        remote_now=12.5,
        files={"/r/a": RemoteStat("/r/a", True, size=3, mtime=1.0)},
    )
    form = json.loads(json.dumps(states.to_dict()))
    assert form["records"]["7"]["state"] == "CANCELLED"
    assert JobStates.from_dict(form) == states


def test_numbers_are_read_as_the_fields_say_and_a_foreign_state_is_unknown() -> None:
    stat = RemoteStat.from_dict({"path": "/r/a", "exists": 1, "size": "3", "mtime": 2})
    assert stat == RemoteStat("/r/a", True, size=3, mtime=2.0)
    assert isinstance(stat.mtime, float)
    assert (
        JobRecord.from_dict({"job_id": "1", "name": "n", "state": "running, maybe"}).state
        is SlurmState.UNKNOWN
    )
    assert json_state("COMPLETED") is SlurmState.COMPLETED


def test_a_ledger_reads_its_attempts_through_their_own_form() -> None:
    ledger = Ledger("job", [Attempt(attempt=1, job_id="42", log_path="/l", script_path="/s")], log_offset=9)
    form = ledger.to_dict()
    assert form["attempts"] == [ledger.attempts[0].to_dict()]
    assert Ledger.from_dict(form) == ledger
    assert Ledger.from_dict({"attempts": form["attempts"]}).name == ""  # a trigger's carry names none
