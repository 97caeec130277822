"""Records and the ledger round-trip through JSON primitives; the ledger's bookkeeping."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from slurm_operator.model.records import (
    HUNG,
    Attempt,
    CommandResult,
    JobRecord,
    JobStates,
    Ledger,
    LogChunk,
    RemoteStat,
    Verdict,
)
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


def test_attempt_round_trip() -> None:
    a = Attempt(2, "7", "/l/7.out", "/s/a.sbatch", state=SlurmState.TIMEOUT, exit_code=0, alloc_tres="cpu=1")
    assert Attempt.from_dict(json.loads(json.dumps(a.to_dict()))) == a
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        Attempt.from_dict({**a.to_dict(), "bogus": 1})


def test_the_json_form_keeps_the_keys_users_read() -> None:
    a = Attempt(
        1, "9", "/l/9.out", "/s", state=SlurmState.CANCELLED, raw_state="CANCELLED by 0",
        hung="no progress for 1 h", verdict=Verdict.RESUBMIT, extra={"future": 1},
    )  # fmt: skip
    assert a.to_dict() == {
        "attempt": 1, "job_id": "9", "log_path": "/l/9.out", "script_path": "/s", "state": HUNG,
        "exit_code": None, "elapsed": None, "alloc_tres": None, "node_list": None, "progress": None,
        "completion_ok": None, "reattached": False, "try_number": None, "verdict": "resubmit",
        "extra": {"future": 1, "slurm_state": "CANCELLED by 0", "hung": "no progress for 1 h"},
    }  # fmt: skip
    back = Attempt.from_dict(a.to_dict())
    assert (back.state, back.hung, back.raw_state, back.extra) == (
        SlurmState.CANCELLED, "no progress for 1 h", "CANCELLED by 0", {"future": 1}
    )  # fmt: skip


def test_a_stored_state_is_parsed_once_into_the_enum() -> None:
    a = Attempt.from_dict(
        {"attempt": 1, "job_id": "9", "log_path": "/l", "script_path": "", "state": "NEWSTATE"}
    )
    assert a.state is SlurmState.UNKNOWN


def test_ended_takes_the_accounting_and_keeps_slurm_s_words() -> None:
    a = Attempt(1, "12", "/r/a-12.out", "/s")
    a = a.ended(
        JobRecord(
            "12", "n", SlurmState.CANCELLED, exit_code=0, elapsed="00:01:00", raw_state="CANCELLED by 1000"
        )
    )
    assert (a.state, a.elapsed, a.to_dict()["extra"]) == (
        SlurmState.CANCELLED, "00:01:00", {"slurm_state": "CANCELLED by 1000"}
    )  # fmt: skip
    a = a.ended(JobRecord("12", "n", SlurmState.COMPLETED, exit_code=0, raw_state="COMPLETED"))
    assert a.to_dict()["extra"] == {"slurm_state": "CANCELLED by 1000"}  # unchanged, no noise


def test_ledger_round_trip_numbering_and_budget() -> None:
    ledger = Ledger("n", baseline="b", window=1)
    ledger.add(Attempt(1, "7", "/l/7", "/s1", verdict=Verdict.FAIL))
    ledger.log_offset = 30
    ledger.add(Attempt(4, "8", "/l/8", "/s4"))
    assert ledger.log_offset == 0  # a new attempt's log is relayed from its start
    assert ledger.next_number() == 5
    assert [a.job_id for a in ledger.budget()] == ["8"]
    assert Ledger.from_dict(json.loads(json.dumps(ledger.to_dict()))) == ledger
    assert Ledger.from_stored(ledger.to_dict(), "n") == ledger
    assert Ledger.from_stored(ledger.to_dict(), "other") is None
    assert Ledger.from_stored({"name": "n", "attempts": []}, "n") is None
    assert Ledger.from_stored("garbled", "n") is None


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
