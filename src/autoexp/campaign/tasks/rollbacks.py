"""A training's checkpoint rollbacks: claimed once from ckpt_check's record, noted in its attempt, alerted.

ckpt_check (include/autoexp_cluster/ckpt_check.py), run by each training job before the trainer,
appends one line per corrupt checkpoint it set aside to ``.autoexp_rollbacks`` in the checkpoint
folder. The training task reads the lines it has not alerted yet and marks them alerted in ONE remote
command (``run_layout.rollbacks_unalerted``, under ``flock``), wherever its code runs after a job may
have started: at the start of each try (a retry, a clear) and of each resume (a job ended: success
judged by the task, failure, resubmission). A success the job trigger would end in the triggerer is
left to the task when its record has unalerted lines (``CampaignJobTrigger.on_success``), so no
rollback waits for a task process that never comes.

Once: the mark is on the cluster, next to the record, where every try, every run sharing the job and
every triggerer finds it. A line is marked before it is sent: a task process killed between the two
loses that alert rather than sending it twice.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from airflow.sdk import Context
from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.model.exceptions import SlurmCommandError

from autoexp.campaign.planning import run_layout

# The attempt's ``extra`` key of the rollbacks its job made: ckpt_check's lines, as the history shows them.
HISTORY_KEY = "rollbacks"


class RollbackAlerter(Protocol):
    """What a training operator is given to alert its rollbacks (``alerts.notifier.RollbackAlert``)."""

    @property
    def checkpoint_dir(self) -> str: ...

    def __call__(self, context: Context, log_path: str, records: Sequence[str]) -> int: ...


def claim(hook: SlurmHook, checkpoint_dir: str) -> list[str]:
    """The lines of ``checkpoint_dir``'s rollback record not alerted yet, marked alerted (one command)."""
    command = run_layout.rollbacks_unalerted(checkpoint_dir, claim=True)
    result = hook.run(command)
    if not result.ok:
        said = (result.stderr or result.stdout).strip()[-500:]
        raise SlurmCommandError(
            f"reading the rollback record of {checkpoint_dir} failed (exit {result.exit_status}): {said!r}",
            command=command,
            exit_status=result.exit_status,
            stderr=result.stderr,
        )
    return [line for line in result.stdout.splitlines() if line.strip()]


def current_log(ledger: Any) -> str:
    """The log of a JSON ledger's current attempt ("" for no ledger or no attempt)."""
    attempts = ledger.get("attempts") if isinstance(ledger, Mapping) else None
    if not attempts or not isinstance(attempts[-1], Mapping):
        return ""
    return str(attempts[-1].get("log_path") or "")


def noted(ledger: Mapping[str, Any], records: Sequence[str]) -> dict[str, Any]:
    """A copy of the JSON ledger whose current attempt lists ``records`` under ``extra.rollbacks``
    (the job that ran last is the one whose start made them, as far as the task can tell)."""
    out = copy.deepcopy(dict(ledger))
    attempts = out.get("attempts")
    if not attempts:
        return out
    extra = attempts[-1].setdefault("extra", {})
    known = list(extra.get(HISTORY_KEY) or [])
    extra[HISTORY_KEY] = known + [r for r in records if r not in known]
    return out


def in_event(event: Any, records: Sequence[str]) -> Any:
    """A trigger event payload whose ``carry`` (the ledger) notes ``records``; others as they are."""
    if not records or not isinstance(event, Mapping) or not isinstance(event.get("carry"), Mapping):
        return event
    return {**event, "carry": noted(event["carry"], records)}
