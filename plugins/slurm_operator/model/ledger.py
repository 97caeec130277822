"""The ledger of a task instance's Slurm job: every attempt (``Attempt``) and what the operator did
after each (``Verdict``). Its JSON form, in one place, is the XCom result, the stored history and the
trigger's ``carry``."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from slurm_operator.model.events import SlurmEvent
from slurm_operator.model.json_form import JsonForm, json_state
from slurm_operator.model.records import JobRecord
from slurm_operator.model.states import SlurmState

# The JSON state of an attempt the operator cancelled as hung. Not a Slurm state: Slurm says
# CANCELLED for such a job, which would read as a user's cancel.
HUNG = "HUNG"
CANCELLED_BY_AIRFLOW = "cancelled_by_airflow"
# ``extra`` keys of the JSON form, each a typed field of Attempt.
_EXTRA_FIELDS = {
    "slurm_state": "raw_state",
    "hung": "hung",
    "cancelled_by": "cancelled_by",
    CANCELLED_BY_AIRFLOW: "cancelled_by_airflow",
    "fatal": "fatal",
    "fatal_line": "fatal_line",
    "excluded_nodes": "excluded_nodes",
    "progress_at_start": "progress_at_start",
    "progress_at_end": "progress_at_end",
    "first_progress_s": "first_progress_s",
    "why_ended": "why_ended",
}
# What the wait saw the job report (``watchdog.ProgressMark.summary``), as the event carries it.
PROGRESS_KEYS = ("progress_at_start", "progress_at_end", "first_progress_s")


class Verdict(enum.Enum):
    """What the operator did after a job ended."""

    SUCCEED = "succeed"
    RESUBMIT = "resubmit"
    FAIL = "fail"
    # The job's log matched a fatal rule (e.g. the training diverged): failed, and never run again
    # by this try nor its retries (a clear starts afresh).
    FATAL = "fatal"


@dataclass(frozen=True)
class Attempt:
    """One submission of the task's sbatch script (or a job re-attached to by name).

    :param state: Slurm's state, parsed once where the scheduler's text comes in.
    :param raw_state: Slurm's own words when they say more than the state (``CANCELLED by 1000``).
    :param hung: why the plugin cancelled the job as hung; None when it did not.
    :param elapsed: and ``alloc_tres``, ``node_list``: sacct's accounting, for GPU-hour reports.
    :param progress: the progress probe's output after the job ended (e.g. the value of a file the
        job rewrites as it progresses).
    :param completion_ok: the "is the work done" check's answer for a COMPLETED job.
    :param cancelled_by: who cancelled the job from outside Airflow.
    :param cancelled_by_uid: the uid sacct named for its cancel (``JobRecord.cancelled_by_uid``),
        taken with the job's end; not in the JSON form: the end is judged in the process that read
        it, and the judgment records ``cancelled_by``.
    :param cancelled_by_airflow: why the plugin itself cancelled it (on_kill, a timed-out deferral).
    :param fatal: the name of the fatal rule its log matched (``DIVERGED``), None when none did.
    :param fatal_line: the log line that matched it.
    :param excluded_nodes: the nodes it was submitted without (``--exclude``), comma-separated, each
        with why (``policy.nodes``): ``n3 (job 41 ended NODE_FAIL on it)``; None when none.
    :param progress_at_start: and ``progress_at_end``: the first and the highest progress value
        its log reported (a caller's ``progress_pattern``, e.g. an iteration): units done = end -
        start; None when it reported none (or nothing read its log).
    :param first_progress_s: the job's run time when its first progress line was read: the cost
        of its start-up, late by at most one poll interval.
    :param why_ended: the judgment of its end, in one line (the decision's reason).
    :param extra: keys of a stored history this version does not know, kept as they were.
    :param try_number: the Airflow try that submitted (or re-attached to) the job.
    :param verdict: the operator's judgment of its end; None while unjudged: a later try
        re-attaches to or judges an attempt without one, and submits after one with.
    """

    attempt: int
    job_id: str
    log_path: str
    script_path: str
    state: SlurmState = SlurmState.PENDING
    raw_state: str = ""
    hung: str | None = None
    exit_code: int | None = None
    elapsed: str | None = None
    alloc_tres: str | None = None
    node_list: str | None = None
    progress: str | None = None
    completion_ok: bool | None = None
    reattached: bool = False
    cancelled_by: str | None = None
    cancelled_by_uid: int | None = None
    cancelled_by_airflow: str | None = None
    fatal: str | None = None
    fatal_line: str | None = None
    excluded_nodes: str | None = None
    progress_at_start: int | None = None
    progress_at_end: int | None = None
    first_progress_s: float | None = None
    why_ended: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
    try_number: int | None = None
    verdict: Verdict | None = None

    @property
    def shown_state(self) -> str:
        """The state as messages and the JSON form say it: ``HUNG`` for a job cancelled as hung."""
        return HUNG if self.hung is not None else self.state.value

    def ended(self, record: JobRecord) -> Attempt:
        """This attempt with the final accounting of its job."""
        words = record.raw_state if record.raw_state and record.raw_state != record.state.value else ""
        return replace(
            self,
            state=record.state,
            # Slurm's words say more than the parsed state: `CANCELLED by 1000` names who.
            raw_state=words or self.raw_state,
            cancelled_by_uid=record.cancelled_by_uid,
            exit_code=record.exit_code,
            elapsed=record.elapsed,
            alloc_tres=record.alloc_tres,
            node_list=record.node_list,
        )

    def with_progress(self, seen: Mapping[str, Any] | None) -> Attempt:
        """This attempt with what the wait saw its job report (``PROGRESS_KEYS``; others ignored)."""
        values = {k: seen[k] for k in PROGRESS_KEYS if isinstance(seen, Mapping) and seen.get(k) is not None}
        return replace(self, **values) if values else self

    def to_dict(self) -> dict[str, Any]:
        """JSON primitives: the task's XCom result and the stored history keep this form."""
        extra = dict(self.extra)
        for key, name in _EXTRA_FIELDS.items():
            value = getattr(self, name)
            if value or (value == 0 and not isinstance(value, bool) and key in PROGRESS_KEYS):
                extra[key] = value
        return {
            "attempt": self.attempt,
            "job_id": self.job_id,
            "log_path": self.log_path,
            "script_path": self.script_path,
            "state": self.shown_state,
            "exit_code": self.exit_code,
            "elapsed": self.elapsed,
            "alloc_tres": self.alloc_tres,
            "node_list": self.node_list,
            "progress": self.progress,
            "completion_ok": self.completion_ok,
            "reattached": self.reattached,
            "extra": extra,
            "try_number": self.try_number,
            "verdict": None if self.verdict is None else self.verdict.value,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Attempt:
        """Inverse of to_dict(); unknown keys are rejected by the constructor."""
        values = dict(data)
        extra = dict(values.pop("extra", None) or {})
        typed = {name: extra.pop(key) for key, name in _EXTRA_FIELDS.items() if key in extra}
        state = str(values.pop("state", SlurmState.PENDING.value))
        if state == HUNG:
            typed.setdefault("hung", "")
            state = SlurmState.CANCELLED.value  # the plugin cancelled it
        verdict = values.pop("verdict", None)
        return cls(
            **values,
            **typed,
            state=json_state(state),
            extra=extra,
            verdict=None if verdict is None else Verdict(verdict),
        )


@dataclass
class Ledger(JsonForm):
    """A task instance's job history: every attempt of every try (numbering never restarts).

    :param name: the deterministic Slurm job name of the task instance ("" in a trigger's carry
        that has none).
    :param baseline: the progress probe's output when the current try's budget opened.
    :param log_offset: bytes of the current attempt's log already relayed.
    :param window: index of the first attempt the current try's caps count (see ``budget``).
    """

    name: str = ""
    attempts: list[Attempt] = field(default_factory=list)
    baseline: str | None = None
    log_offset: int = 0
    window: int = 0

    @property
    def current(self) -> Attempt:
        """The last attempt (the ledger of a submitted or re-attached job has one)."""
        return self.attempts[-1]

    def update_current(self, attempt: Attempt) -> None:
        self.attempts[-1] = attempt

    def end_current(
        self,
        record: JobRecord,
        *,
        offset: int,
        progress: Mapping[str, Any] | None = None,
        fatal: str | None = None,
        fatal_line: str = "",
    ) -> Attempt:
        """Record the current attempt's end: as its job's ``record`` says (the accounting row parsed
        once, who cancelled it included), with what the wait saw (its progress; ``fatal``: the rule a
        log line matched, and the line) and relayed (``offset``, bytes of its log); -> it."""
        ended = self.current.ended(record).with_progress(progress)
        if fatal:
            ended = replace(ended, fatal=fatal, fatal_line=fatal_line)
        self.update_current(ended)
        self.log_offset = offset
        return ended

    @classmethod
    def resumed(cls, event: SlurmEvent) -> Ledger:
        """The ledger a job trigger's ``event`` carries, its current attempt ended as the event says
        when it carries the job's record (see ``end_current``; an error event may have none)."""
        ledger = cls.from_dict(event.carry)
        if event.record is not None:
            fatal = event.data.get("fatal")
            ledger.end_current(
                event.record,
                offset=event.log_offset,
                progress=event.data.get("progress"),
                fatal=str(fatal) if fatal else None,
                fatal_line=str(event.data.get("fatal_line", "")),
            )
        return ledger

    def add(self, attempt: Attempt) -> None:
        """A new attempt, relayed from the start of its log."""
        self.attempts.append(attempt)
        self.log_offset = 0

    def next_number(self) -> int:
        """The attempt number after the highest (the script copy claim may skip further)."""
        return max((a.attempt for a in self.attempts), default=0) + 1

    def budget(self) -> list[Attempt]:
        """The attempts the current try's caps count: from ``window`` on. A try that ended with a
        verdict closes its window; the next try opens a new one, so retries and clears each get
        ``max_attempts`` while the numbering continues."""
        return self.attempts[self.window :]

    def results(self) -> list[dict[str, Any]]:
        """The task's XCom result: every attempt, as JSON."""
        return [a.to_dict() for a in self.attempts]

    @classmethod
    def from_stored(cls, stored: Any, name: str) -> Ledger | None:
        """The history a store kept for job ``name``; None for nothing, another name, or no attempts."""
        if not isinstance(stored, dict) or not stored.get("attempts") or stored.get("name") != name:
            return None
        return cls.from_dict(stored)
