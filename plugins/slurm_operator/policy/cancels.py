"""Whose cancel ended a job: ours (a marker next to its log says why) or one from outside Airflow.

Slurm records every cancel as ``CANCELLED by <uid>``, and the plugin cancels as the same user a
person at the login node would, so the uid cannot tell them apart: every cancel of ours writes the
marker ``naming.cancel_marker_path(log)`` first, in the same remote command (``commands.cancel``).
A CANCELLED job without that marker was cancelled from outside (its user, an administrator): that
means "stop", and Airflow must not undo it by retrying. A preemption is not a cancel (PREEMPTED is
resubmitted; a requeued job keeps its id and stays active).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, replace

from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.model import naming
from slurm_operator.model.exceptions import RemotePathNotFoundError, SlurmError
from slurm_operator.model.ledger import Attempt
from slurm_operator.model.naming import (
    FATAL_REASON,
    HUNG_REASON,
    ON_KILL_REASON,
    TIMEOUT_REASON,
    parse_fatal_marker,
)
from slurm_operator.remote import commands, parsers

__all__ = [
    "FATAL_REASON",
    "HUNG_REASON",
    "ON_KILL_REASON",
    "TIMEOUT_REASON",
    "CancelOrigin",
    "cancel_ours",
    "note_cancel",
]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CancelOrigin:
    """Who cancelled a job: ``ours`` with the marker's ``reason``, else ``who`` from outside."""

    ours: bool
    reason: str = ""
    who: str = ""


class CancelOriginUnknown(SlurmError):
    """The marker could not be read (the cluster did not answer): whose cancel it was is unknown."""


def cancel_ours(hook: SlurmHook, job_id: str, log_path: str | None, reason: str) -> None:
    """scancel a job of ours, leaving the marker next to its log (plain scancel without a log path)."""
    marker = naming.cancel_marker_path(log_path) if log_path else None
    hook.cancel(job_id, marker=marker, reason=reason)


def cancel_origin(hook: SlurmHook, attempt: Attempt) -> CancelOrigin:
    """Read the marker of a CANCELLED attempt; without one, name who sacct says cancelled it."""
    marker = naming.cancel_marker_path(attempt.log_path)
    try:
        reason = hook.read_text(marker).strip()
    except RemotePathNotFoundError:
        return CancelOrigin(ours=False, who=who_cancelled(hook, attempt))
    except SlurmError as exc:
        raise CancelOriginUnknown(
            f"cannot read {marker} to tell whose cancel ended job {attempt.job_id}: {exc}"
        ) from exc
    return CancelOrigin(ours=True, reason=reason or "(the marker is empty)")


def note_cancel(hook: SlurmHook, attempt: Attempt) -> tuple[Attempt, str | None]:
    """A CANCELLED ``attempt`` with whose cancel it was recorded, and the task's one-line error for a
    cancel from outside (None for ours).

    Ours as hung (a try that died before recording it hung): recorded hung, judged as such.
    Ours because its log matched a fatal rule (``fatal: <rule>: <line>``): recorded with that rule.
    Ours for another reason (on_kill, a timed-out deferral: the try that cancelled it is over):
    ``cancelled_by_airflow``, resubmitted by the policy. From outside: ``cancelled_by``. Raises
    CancelOriginUnknown if the marker is unreadable.
    """
    origin = cancel_origin(hook, attempt)
    if not origin.ours:
        return replace(attempt, cancelled_by=origin.who), outside_cancel_message(attempt, origin.who)
    if origin.reason.split(":", 1)[0] == HUNG_REASON:
        return replace(attempt, hung=origin.reason.partition(": ")[2] or origin.reason), None
    ours = replace(attempt, cancelled_by_airflow=origin.reason)
    fatal = parse_fatal_marker(origin.reason)
    if fatal is not None and attempt.fatal is None:
        # The wait saw a fatal line and cancelled; judged FATAL again.
        rule, line = fatal
        return replace(ours, fatal=rule or FATAL_REASON, fatal_line=line), None
    return ours, None


def who_cancelled(hook: SlurmHook, attempt: Attempt) -> str:
    """``alice (uid 1000)`` for the uid sacct named (``CANCELLED by 1000``, read into the record
    once; the uid alone when getent cannot name it: one cheap command), or a note that sacct names
    nobody."""
    uid = attempt.cancelled_by_uid
    if uid is None:
        return f"someone sacct does not name (it printed {attempt.raw_state or 'CANCELLED'!r})"
    try:
        result = hook.run(commands.user_name(uid))
    except SlurmError as exc:
        log.warning("cannot look up uid %d: %s", uid, exc)
        return f"uid {uid}"
    name = parsers.parse_passwd_name(result.stdout) if result.ok else None
    return f"{name} (uid {uid})" if name else f"uid {uid}"


def outside_cancel_message(attempt: Attempt, who: str) -> str:
    """The task's one-line error for a job cancelled from outside Airflow."""
    return (
        f"Slurm job {attempt.job_id} (attempt {attempt.attempt}, log {attempt.log_path}) was cancelled "
        f"from outside Airflow by {who}; not retried, since a cancel means stop. To resume, clear this "
        f"task: its next try submits the next attempt (the history and its script copies are kept)."
    )
