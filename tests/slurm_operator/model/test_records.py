"""What the hooks return round-trips through JSON primitives; unknown states read as UNKNOWN."""

from __future__ import annotations

import json
from dataclasses import replace

from slurm_operator.model.records import CommandResult, JobRecord, JobStates, LogChunk, RemoteStat
from slurm_operator.model.states import SlurmState


def _roundtrip(obj: object) -> object:
    data = obj.to_dict()  # type: ignore[attr-defined]
    return type(obj).from_dict(json.loads(json.dumps(data)))  # type: ignore[attr-defined]


def test_job_record_roundtrip() -> None:
    rec = JobRecord(
        job_id="7_2",
        name="train",
        state=SlurmState.CANCELLED,
        exit_code=0,
        signal=15,
        elapsed="00:01:02",
        node_list="node01",
        raw_state="CANCELLED by 0",
    )
    assert rec.to_dict()["state"] == "CANCELLED"
    assert _roundtrip(rec) == rec


def test_job_states_roundtrip() -> None:
    states = JobStates(
        records={"1": JobRecord(job_id="1", name="a", state=SlurmState.RUNNING)},
        source="squeue",
        authoritative=False,
    )
    assert _roundtrip(states) == states
    watched = JobStates(
        records={"1": JobRecord(job_id="1", name="a", state=SlurmState.RUNNING)},
        remote_now=1700000100.0,
        files={"/r/log": RemoteStat(path="/r/log", exists=True, size=6, mtime=1700000000.0)},
    )
    assert _roundtrip(watched) == watched


def test_unknown_state_in_dict_reads_as_unknown() -> None:
    rec = JobRecord.from_dict({"job_id": "1", "name": "a", "state": "WEIRD"})
    assert rec.state is SlurmState.UNKNOWN


def test_small_records_roundtrip() -> None:
    for obj in (
        LogChunk(text="héllo\n", offset=10, next_offset=17),
        RemoteStat(path="/x", exists=True, is_dir=False, size=3, mtime=1.5),
        CommandResult(exit_status=3, stdout="out", stderr="err"),
    ):
        assert _roundtrip(obj) == obj
    assert not CommandResult(1, "", "").ok


def test_a_pending_job_s_note_names_its_reason_and_estimate_to_the_minute() -> None:
    pending = JobRecord("5", "n", SlurmState.PENDING, reason="Priority", expected_start="2026-12-03T14:05:41")
    assert pending.pending_note() == "Priority, est. start 2026-12-03T14:05"
    assert replace(pending, expected_start=None, reason="Resources").pending_note() == (
        "Resources, no start estimate yet"
    )
    assert replace(pending, reason="").pending_note() == "no reason given yet, est. start 2026-12-03T14:05"
    assert replace(pending, state=SlurmState.RUNNING).pending_note() is None
    assert _roundtrip(pending) == pending
    assert JobRecord.from_dict({"job_id": "5", "name": "n", "state": "PENDING"}).expected_start is None
