"""What the hooks return (a job's accounting record, a batched state answer, a log chunk, a file's
stat, a command's result), each with its JSON form; the task's attempts are in ``ledger``."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from slurm_operator.model.states import SlurmState


@dataclass(frozen=True)
class JobRecord:
    """One job (or array task) as the scheduler reports it.

    :param job_id: as Slurm prints it: ``"42"``, or ``"42_3"`` for an array task.
    :param state: the parsed state; ``raw_state`` keeps the text (``"CANCELLED by 0"``).
    :param exit_code: the job script's exit status (``3`` of ``3:0``), None when unknown.
    :param signal: the signal that ended it (``15`` of ``0:15``), None when unknown.
    :param reason: why Slurm holds it (``Priority``, ``Dependency``) or how it ended; while it is
        PENDING, read live from squeue (accounting's copy lags).
    :param expected_start: while PENDING, the start the backfill scheduler estimates
        (``2026-12-03T14:05:00``); None when Slurm has none yet.
    :param cancelled_by_uid: who cancelled it, read once from sacct's ``CANCELLED by 1000``; None
        when Slurm names nobody (a cancel seen by squeue, a state that is no cancel).
    """

    job_id: str
    name: str
    state: SlurmState
    exit_code: int | None = None
    signal: int | None = None
    elapsed: str = ""
    start: str = ""
    end: str = ""
    node_list: str = ""
    alloc_tres: str = ""
    reason: str = ""
    raw_state: str = ""
    expected_start: str | None = None
    cancelled_by_uid: int | None = None

    def pending_note(self) -> str | None:
        """``Priority, est. start 2026-12-03T14:05`` (or ``..., no start estimate yet``): what the
        task log says about a PENDING job, to the minute (a line per change: seconds would only
        repeat it); None for a job that is not pending."""
        if self.state is not SlurmState.PENDING:
            return None
        reason = self.reason or "no reason given yet"
        if not self.expected_start:
            return f"{reason}, no start estimate yet"
        return f"{reason}, est. start {self.expected_start[:16]}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["state"] = self.state.value
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobRecord:
        values = dict(data)
        values["state"] = json_state(values.get("state"))
        return cls(**values)


def json_state(value: Any) -> SlurmState:
    """A state of our JSON forms (an enum value, written by ``to_dict``), not Slurm's text: that was
    parsed once, where it came in (``SlurmState.parse``). Anything else is UNKNOWN."""
    return SlurmState.__members__.get(str(value), SlurmState.UNKNOWN)


@dataclass(frozen=True)
class JobStates:
    """The answer to one batched state query.

    :param source: the command that answered: ``sacct``, ``squeue`` or ``scontrol``.
    :param authoritative: True when the answer came from accounting (sacct), where a missing job
        really is unknown to the cluster; squeue and scontrol forget finished jobs after MinJobAge,
        so absence there means nothing.
    :param remote_now: the cluster's clock (epoch seconds) when watched files were asked for.
    :param files: the watched paths' stats, by path (hang detection), when asked for.
    """

    records: dict[str, JobRecord] = field(default_factory=dict)
    source: str = "sacct"
    authoritative: bool = True
    remote_now: float | None = None
    files: dict[str, RemoteStat] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "records": {k: v.to_dict() for k, v in self.records.items()},
            "source": self.source,
            "authoritative": self.authoritative,
            "remote_now": self.remote_now,
            "files": {k: v.to_dict() for k, v in self.files.items()},
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> JobStates:
        records = {str(k): JobRecord.from_dict(v) for k, v in dict(data.get("records", {})).items()}
        now = data.get("remote_now")
        return cls(
            records=records,
            source=str(data["source"]),
            authoritative=bool(data["authoritative"]),
            remote_now=None if now is None else float(now),
            files={str(k): RemoteStat.from_dict(v) for k, v in dict(data.get("files", {})).items()},
        )


@dataclass(frozen=True)
class LogChunk:
    """Bytes ``offset``..``next_offset`` of a remote file, decoded (invalid UTF-8 replaced)."""

    text: str
    offset: int
    next_offset: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> LogChunk:
        return cls(text=str(data["text"]), offset=int(data["offset"]), next_offset=int(data["next_offset"]))


@dataclass(frozen=True)
class RemoteStat:
    """A remote path's metadata; ``exists`` False (and zeros) for a missing path."""

    path: str
    exists: bool
    is_dir: bool = False
    size: int = 0
    mtime: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RemoteStat:
        return cls(
            path=str(data["path"]),
            exists=bool(data["exists"]),
            is_dir=bool(data.get("is_dir", False)),
            size=int(data.get("size", 0)),
            mtime=float(data.get("mtime", 0.0)),
        )


@dataclass(frozen=True)
class CommandResult:
    """Exit status and decoded output of one remote command."""

    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> CommandResult:
        return cls(
            exit_status=int(data["exit_status"]), stdout=str(data["stdout"]), stderr=str(data["stderr"])
        )
