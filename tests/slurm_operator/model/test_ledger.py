"""The ledger round-trips through JSON primitives, keeps the keys users read, and does its bookkeeping."""

from __future__ import annotations

import json

import pytest
from slurm_operator.model.ledger import HUNG, Attempt, Ledger, Verdict
from slurm_operator.model.records import JobRecord
from slurm_operator.model.states import SlurmState


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
