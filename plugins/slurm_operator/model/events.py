"""The one event schema every Slurm trigger emits and every resume method checks."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Final

from slurm_operator.model.records import JobRecord

# status values; each event is final: a trigger emits exactly one.
SUCCESS: Final = "success"  # the watched remote condition holds
ENDED: Final = "ended"  # the job reached a terminal state (which: slurm_state); the operator judges it
ERROR: Final = "error"  # the trigger could not find out (connection budget spent, job vanished, bug)
HUNG: Final = "hung"  # the job runs but its watched files stopped changing: cancel and resubmit
# the running job's log matched a fatal pattern: cancelled by the trigger (data: fatal, fatal_line,
# cancelled), never resubmitted
FATAL: Final = "fatal"
STATUSES: Final = frozenset({SUCCESS, ENDED, ERROR, HUNG, FATAL})

_FIELDS: Final = (
    "status",
    "message",
    "job_id",
    "slurm_state",
    "exit_code",
    "log_offset",
    "record",
    "data",
    "carry",
)


class EventSchemaError(ValueError):
    """A trigger event payload that does not follow the schema (names the offending key)."""


@dataclass(frozen=True)
class SlurmEvent:
    """Payload of every trigger event, as JSON primitives.

    :param status: one of ``success``, ``ended``, ``error``, ``hung``, ``fatal``.
    :param message: one human line saying what happened.
    :param job_id: the Slurm job id the event is about (None for path triggers).
    :param slurm_state: the Slurm state name (``COMPLETED``, ``TIMEOUT``...), if known.
    :param exit_code: the job's exit code, if known.
    :param log_offset: byte offset up to which the job log / watched file has been read.
    :param record: the job's record as the poll parsed it, once, from Slurm's accounting row (state,
        exit code, who cancelled it), if any; its JSON form (``JobRecord.to_dict``) in the payload.
    :param data: trigger-specific results (matched line, complete iterations...).
    :param carry: opaque JSON the deferring operator handed to the trigger, echoed back so the
        resume method has its state even where Airflow drops ``defer(kwargs=...)`` (dag.test()).
    """

    status: str
    message: str
    job_id: str | None = None
    slurm_state: str | None = None
    exit_code: int | None = None
    log_offset: int = 0
    record: JobRecord | None = None
    data: dict[str, Any] = field(default_factory=dict)
    carry: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise EventSchemaError(f"event.status: {self.status!r} is not one of {sorted(STATUSES)}")

    def to_payload(self) -> dict[str, Any]:
        """Return the event as a plain dict for ``TriggerEvent``. ``slurm_state`` and ``exit_code`` are
        the record's, for readers of the bare payload."""
        return {**asdict(self), "record": None if self.record is None else self.record.to_dict()}

    @classmethod
    def from_payload(cls, payload: object) -> SlurmEvent:
        """Validate a payload received by a resume method; raise EventSchemaError naming the key."""
        if not isinstance(payload, dict):
            raise EventSchemaError(f"event: expected a dict, got {type(payload).__name__}: {payload!r:.200}")
        unknown = set(payload) - set(_FIELDS)
        if unknown:
            raise EventSchemaError(f"event: unknown keys {sorted(unknown)}")
        for key in ("status", "message"):
            if not isinstance(payload.get(key), str):
                raise EventSchemaError(f"event.{key}: expected a string, got {payload.get(key)!r:.200}")
        _check(payload, "job_id", (str, type(None)))
        _check(payload, "slurm_state", (str, type(None)))
        _check(payload, "exit_code", (int, type(None)))
        _check(payload, "log_offset", (int,))
        _check(payload, "record", (dict, type(None)))
        _check(payload, "data", (dict,))
        _check(payload, "carry", (dict,))
        record = payload.get("record")
        try:
            # Stored by any version: fields it did not have take their defaults.
            parsed = None if record is None else JobRecord.from_dict(record)
        except (TypeError, ValueError) as exc:
            raise EventSchemaError(f"event.record: not a job record: {exc}") from None
        return cls(**{**payload, "record": parsed})


def resume_event(event: object, task_id: str) -> SlurmEvent:
    """The event a resume method got, checked; EventSchemaError names the task and the bad key.

    The one check every resume method (operator, sensors, the campaign's waits) runs; the caller
    turns the error into its framework's task failure.
    """
    try:
        return SlurmEvent.from_payload(event)
    except EventSchemaError as exc:
        raise EventSchemaError(f"task {task_id}: malformed trigger event: {exc}") from None


def _check(payload: dict[str, Any], key: str, types: tuple[type, ...]) -> None:
    if key in payload and (not isinstance(payload[key], types) or isinstance(payload[key], bool)):
        names = " | ".join(t.__name__ for t in types)
        raise EventSchemaError(f"event.{key}: expected {names}, got {payload[key]!r:.200}")
