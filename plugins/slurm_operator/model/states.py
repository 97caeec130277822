"""Slurm job states and the sets the operator layer decides by."""

from __future__ import annotations

import enum


class SlurmState(str, enum.Enum):
    """A Slurm job state (sacct/squeue/scontrol spelling), plus UNKNOWN for anything else.

    A ``str`` enum whose ``str()`` and ``format()`` give the bare value, as ``enum.StrEnum`` (Python
    3.11+) does: states are written into logs, events and shell strings as Slurm spells them.
    """

    PENDING = "PENDING"
    CONFIGURING = "CONFIGURING"
    RUNNING = "RUNNING"
    COMPLETING = "COMPLETING"
    SUSPENDED = "SUSPENDED"
    REQUEUED = "REQUEUED"
    REQUEUE_FED = "REQUEUE_FED"
    REQUEUE_HOLD = "REQUEUE_HOLD"
    RESIZING = "RESIZING"
    STAGE_OUT = "STAGE_OUT"
    SIGNALING = "SIGNALING"
    STOPPED = "STOPPED"
    RESV_DEL_HOLD = "RESV_DEL_HOLD"
    COMPLETED = "COMPLETED"
    FAILED = "FAILED"
    TIMEOUT = "TIMEOUT"
    CANCELLED = "CANCELLED"
    PREEMPTED = "PREEMPTED"
    NODE_FAIL = "NODE_FAIL"
    OUT_OF_MEMORY = "OUT_OF_MEMORY"
    BOOT_FAIL = "BOOT_FAIL"
    DEADLINE = "DEADLINE"
    SPECIAL_EXIT = "SPECIAL_EXIT"
    REVOKED = "REVOKED"
    UNKNOWN = "UNKNOWN"

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec: str) -> str:
        return self.value.__format__(spec)

    @classmethod
    def parse(cls, raw: str) -> SlurmState:
        """Read a state as any Slurm command prints it; never raises.

        ``CANCELLED by 0`` (sacct -P names who cancelled) and ``CANCELLED+`` (fixed-width sacct
        truncates) are CANCELLED; squeue's short codes (``PD``, ``R``, ``CD``...) are accepted;
        anything else is UNKNOWN, which no caller may treat as success.
        """
        word = raw.strip().split(" ", 1)[0].rstrip("+").upper()
        if word in _SHORT_CODES:
            return _SHORT_CODES[word]
        try:
            return cls(word)
        except ValueError:
            return cls.UNKNOWN

    @property
    def is_active(self) -> bool:
        return self in ACTIVE_STATES

    @property
    def is_terminal(self) -> bool:
        return self in TERMINAL_STATES


# squeue %t codes (man squeue, JOB STATE CODES).
_SHORT_CODES: dict[str, SlurmState] = {
    "PD": SlurmState.PENDING,
    "CF": SlurmState.CONFIGURING,
    "R": SlurmState.RUNNING,
    "CG": SlurmState.COMPLETING,
    "S": SlurmState.SUSPENDED,
    "RQ": SlurmState.REQUEUED,
    "RF": SlurmState.REQUEUE_FED,
    "RH": SlurmState.REQUEUE_HOLD,
    "RS": SlurmState.RESIZING,
    "SO": SlurmState.STAGE_OUT,
    "SI": SlurmState.SIGNALING,
    "ST": SlurmState.STOPPED,
    "RD": SlurmState.RESV_DEL_HOLD,
    "CD": SlurmState.COMPLETED,
    "F": SlurmState.FAILED,
    "TO": SlurmState.TIMEOUT,
    "CA": SlurmState.CANCELLED,
    "PR": SlurmState.PREEMPTED,
    "NF": SlurmState.NODE_FAIL,
    "OOM": SlurmState.OUT_OF_MEMORY,
    "BF": SlurmState.BOOT_FAIL,
    "DL": SlurmState.DEADLINE,
    "SE": SlurmState.SPECIAL_EXIT,
    "RV": SlurmState.REVOKED,
}

# The job is still Slurm's business: queued, starting, running, held, or being requeued.
ACTIVE_STATES: frozenset[SlurmState] = frozenset(
    {
        SlurmState.PENDING,
        SlurmState.CONFIGURING,
        SlurmState.RUNNING,
        SlurmState.COMPLETING,
        SlurmState.SUSPENDED,
        SlurmState.REQUEUED,
        SlurmState.REQUEUE_FED,
        SlurmState.REQUEUE_HOLD,
        SlurmState.RESIZING,
        SlurmState.STAGE_OUT,
        SlurmState.SIGNALING,
        SlurmState.STOPPED,
        SlurmState.RESV_DEL_HOLD,
    }
)
# Active jobs a task instance may take over by name: not one already ending (COMPLETING), whose
# end belongs to whoever cancelled it (another run's stop, most often).
ADOPTABLE_STATES: frozenset[SlurmState] = ACTIVE_STATES - {SlurmState.COMPLETING}
SUCCEEDED_STATES: frozenset[SlurmState] = frozenset({SlurmState.COMPLETED})
FAILED_STATES: frozenset[SlurmState] = frozenset(
    {
        SlurmState.FAILED,
        SlurmState.TIMEOUT,
        SlurmState.CANCELLED,
        SlurmState.PREEMPTED,
        SlurmState.NODE_FAIL,
        SlurmState.OUT_OF_MEMORY,
        SlurmState.BOOT_FAIL,
        SlurmState.DEADLINE,
        SlurmState.SPECIAL_EXIT,
        SlurmState.REVOKED,
    }
)
TERMINAL_STATES: frozenset[SlurmState] = SUCCEEDED_STATES | FAILED_STATES
# Ended through no fault of the job's own code: submitting it again (resuming from its last
# checkpoint) is the right reaction. OUT_OF_MEMORY and FAILED are the job's own doing.
RESUBMITTABLE_STATES: frozenset[SlurmState] = frozenset(
    {SlurmState.TIMEOUT, SlurmState.PREEMPTED, SlurmState.NODE_FAIL, SlurmState.BOOT_FAIL}
)
# Ends the scheduler imposed on a job that may have been advancing (its time limit, another job's
# priority), and a clean stop before the time limit that left the work not done (a job that saves
# and exits ahead of it, on its own clock or on the TERM an sbatch --signal sends): after progress
# (the operator's probe moved) such an end is a job's normal rhythm and does not count toward
# max_attempts (resubmission.decide).
PROGRESS_ENDS: frozenset[SlurmState] = frozenset(
    {SlurmState.TIMEOUT, SlurmState.PREEMPTED, SlurmState.COMPLETED}
)
