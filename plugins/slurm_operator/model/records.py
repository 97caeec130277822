"""What the hooks return (a job's accounting record, a batched state answer, a log chunk, a file's
stat, a command's result), each with its JSON form (``json_form``); the task's attempts are in ``ledger``."""

from __future__ import annotations

from dataclasses import dataclass, field

from slurm_operator.model.json_form import JsonForm
from slurm_operator.model.states import SlurmState


@dataclass(frozen=True)
class JobRecord(JsonForm):
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


@dataclass(frozen=True)
class JobStates(JsonForm):
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


@dataclass(frozen=True)
class LogChunk(JsonForm):
    """Bytes ``offset``..``next_offset`` of a remote file, decoded (invalid UTF-8 replaced)."""

    text: str
    offset: int
    next_offset: int


@dataclass(frozen=True)
class RemoteStat(JsonForm):
    """A remote path's metadata; ``exists`` False (and zeros) for a missing path."""

    path: str
    exists: bool
    is_dir: bool = False
    size: int = 0
    mtime: float = 0.0


@dataclass(frozen=True)
class CommandResult(JsonForm):
    """Exit status and decoded output of one remote command."""

    exit_status: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.exit_status == 0
