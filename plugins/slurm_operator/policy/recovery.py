"""What a new try of a SlurmOperator task does first: wait for its job, judge its ended job, or submit.

A try (first run, Airflow retry, task clear) starts from the attempt history the task state store
kept (``task_state``). The history is never restarted: attempt numbers continue across tries, so a
retry after a failure, or a clear after a cancel, submits the next attempt with a script copy of its
own, and the returned list shows every job the task instance ran.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from slurm_operator.hooks.slurm import SlurmHook
from slurm_operator.model import naming
from slurm_operator.model.ledger import Attempt, Ledger, Verdict
from slurm_operator.model.records import JobRecord
from slurm_operator.model.states import ADOPTABLE_STATES, TERMINAL_STATES

log = logging.getLogger(__name__)

SUBMIT, WAIT, JUDGE = "submit", "wait", "judge"


@dataclass(frozen=True)
class TryStart:
    """``action`` (SUBMIT, WAIT or JUDGE) on ``ledger``, the history whose current attempt it concerns;
    ``record``: the ledger has a new attempt (re-attached by name) to record before waiting."""

    action: str
    ledger: Ledger
    record: bool = False


def start_try(
    hook: SlurmHook,
    stored: Any,
    name: str,
    *,
    output_pattern: str,
    try_number: int | None,
    probe: Callable[[SlurmHook], str | None],
    adopts_on_submit: bool = False,
) -> TryStart:
    """Decide from the stored history (None when the store lost or never had it) and the cluster.

    - the last attempt is unjudged and its job still active (or in a state nobody can classify):
      WAIT on it again (a previous try died or gave up waiting);
    - it is unjudged and ended (or was recorded hung): JUDGE it now;
    - otherwise the new try starts its budget (``window``) and its progress baseline, and
      re-attaches to an active job of the task's name if there is one (not one already COMPLETING:
      a name may be shared by the task instances of several runs), else SUBMITs. With
      ``adopts_on_submit`` (a locked submit, which adopts such a job itself) it SUBMITs without
      asking, unless the recorded job was not listed at all: that one may still be active.
    """
    history = Ledger.from_stored(stored, name)
    unlisted = False
    if history is not None:
        last = history.current
        if last.verdict is None and last.hung is not None:
            return TryStart(JUDGE, history)  # cancelled as hung and recorded; the try died before judging
        if last.verdict is None and last.state not in TERMINAL_STATES:
            record = hook.job_states([last.job_id]).records.get(last.job_id)
            if record is not None and record.state not in TERMINAL_STATES:
                shown = record.raw_state or record.state.value
                log.info("re-attaching to recorded Slurm job %s (%s)", last.job_id, shown)
                return TryStart(WAIT, history)
            if record is not None:
                log.info("recorded Slurm job %s already ended %s", last.job_id, record.state.value)
                history.update_current(last.ended(record))
                return TryStart(JUDGE, history)
            unlisted = True
        # A recorded terminal state without a verdict comes from before verdicts were recorded:
        # that try judged it (its only way to record a terminal state), like one with a verdict.
    ledger = history if history is not None else Ledger(name)
    if not ledger.attempts or ledger.current.verdict is not Verdict.RESUBMIT:
        # The previous try ended (or there was none): this try gets a budget of its own. After a
        # "resubmit" the try died before submitting: it goes on within the same budget.
        ledger.window = len(ledger.attempts)
        ledger.baseline = probe(hook)
    ledger.log_offset = 0
    if adopts_on_submit and not unlisted:
        return TryStart(SUBMIT, ledger)
    active = [r for r in hook.find_active_jobs(name) if r.state in ADOPTABLE_STATES]
    if not active:
        return TryStart(SUBMIT, ledger)
    if len(active) > 1:
        ids = ", ".join(r.job_id for r in active)
        log.warning("%d active jobs named %s: %s; attaching to the newest", len(active), name, ids)
    newest = max(active, key=_job_number)
    if ledger.attempts and ledger.current.job_id == newest.job_id:
        return TryStart(WAIT, ledger)  # the recorded job after all (accounting had not listed it)
    log.info("re-attaching to active Slurm job %s named %s (%s)", newest.job_id, name, newest.state.value)
    log_path = naming.resolve_output_path(output_pattern, newest.job_id, name)
    attempt = Attempt(
        ledger.next_number(),
        newest.job_id,
        log_path,
        "",
        state=newest.state,
        reattached=True,
        try_number=try_number,
    )
    ledger.add(attempt)
    return TryStart(WAIT, ledger, record=True)


def _job_number(record: JobRecord) -> int:
    return int(re.sub(r"\D.*", "", record.job_id) or 0)
