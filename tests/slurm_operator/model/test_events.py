"""Tests for the single trigger event schema."""

from __future__ import annotations

import json

import pytest
from slurm_operator.model import events
from slurm_operator.model.events import EventSchemaError, SlurmEvent
from slurm_operator.model.records import JobRecord
from slurm_operator.model.states import SlurmState


def test_round_trip_through_json() -> None:
    ev = SlurmEvent(
        status=events.ENDED,
        message="Slurm job 7 ended FAILED",
        job_id="7",
        slurm_state="FAILED",
        exit_code=3,
        log_offset=120,
        record=JobRecord("7", "n", SlurmState.CANCELLED, 0, raw_state="CANCELLED by 0", cancelled_by_uid=0),
        carry={"attempts": [{"job_id": "7"}]},
    )
    payload = json.loads(json.dumps(ev.to_payload()))
    assert payload["record"]["state"] == "CANCELLED"  # the payload holds the record's JSON form
    assert SlurmEvent.from_payload(payload) == ev


def test_an_event_stored_before_the_record_had_its_newer_fields_still_resumes() -> None:
    """A trigger event in the database from before an upgrade: its record lacks the fields added
    since (who cancelled it, the start estimate), which take their defaults."""
    old = {"job_id": "7", "name": "train", "state": "TIMEOUT", "exit_code": 0, "signal": None,
           "elapsed": "01:00:00", "start": "", "end": "", "node_list": "n1", "alloc_tres": "",
           "reason": "", "raw_state": "TIMEOUT"}  # fmt: skip
    payload = {"status": "ended", "message": "m", "job_id": "7", "slurm_state": "TIMEOUT", "exit_code": 0,
               "log_offset": 5, "record": old, "data": {}, "carry": {}}  # fmt: skip
    record = SlurmEvent.from_payload(payload).record
    assert record == JobRecord("7", "train", SlurmState.TIMEOUT, 0, elapsed="01:00:00", node_list="n1",
                               raw_state="TIMEOUT")  # fmt: skip


@pytest.mark.parametrize(
    ("payload", "match"),
    [
        ("done", r"event: expected a dict"),
        ({"status": "done", "message": "x"}, r"event.status: 'done' is not one of"),
        ({"status": "success"}, r"event.message: expected a string"),
        ({"status": "success", "message": "m", "exit_code": "3"}, r"event.exit_code: expected int"),
        ({"status": "success", "message": "m", "exit_code": True}, r"event.exit_code"),
        ({"status": "success", "message": "m", "bogus": 1}, r"unknown keys \['bogus'\]"),
        ({"status": "success", "message": "m", "carry": []}, r"event.carry: expected dict"),
        ({"status": "ended", "message": "m", "record": {"job_id": "7"}}, r"event.record: not a job record"),
        ({"status": "ended", "message": "m", "record": {"bogus": 1}}, r"event.record: not a job record"),
    ],
)
def test_bad_payloads_name_the_key(payload: object, match: str) -> None:
    with pytest.raises(EventSchemaError, match=match):
        SlurmEvent.from_payload(payload)


def test_resume_event_names_the_task_or_returns_the_event() -> None:
    ev = SlurmEvent(status=events.ERROR, message="no answer")
    assert events.resume_event(ev.to_payload(), "train") == ev
    with pytest.raises(
        EventSchemaError, match=r"^task train: malformed trigger event: event.status: 'progress'"
    ):
        events.resume_event({"status": "progress", "message": "m"}, "train")
