"""Tests for the single trigger event schema."""

from __future__ import annotations

import json

import pytest
from slurm_operator.model import events
from slurm_operator.model.events import EventSchemaError, SlurmEvent


def test_round_trip_through_json() -> None:
    ev = SlurmEvent(
        status=events.ENDED,
        message="Slurm job 7 ended FAILED",
        job_id="7",
        slurm_state="FAILED",
        exit_code=3,
        log_offset=120,
        record={"job_id": "7"},
        carry={"attempts": [{"job_id": "7"}]},
    )
    payload = json.loads(json.dumps(ev.to_payload()))
    assert SlurmEvent.from_payload(payload) == ev


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
