"""Records round-trip through JSON primitives."""

from __future__ import annotations

import json

from slurm_operator.records import CommandResult, JobRecord, JobStates, LogChunk, RemoteStat
from slurm_operator.states import SlurmState


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
