"""A campaign grid cell's state: done, running, failed, missing from sacct, and diverged from its log.

sacct cannot tell a diverged training from a crash (both FAILED, or CANCELLED when the live rule
stopped it), nor from a finished one when a dead model ran to its end; the training's own log can,
with the same rules the Slurm operator stops it by (``planning.divergence``). A run the live rule
cancelled may show nothing in its tail (a loss spike is no NaN): the cancel marker the plugin left
next to its log (``fatal: DIVERGED: <line>``) says so instead.
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping, Sequence
from typing import Any, Protocol

from slurm_operator.model.naming import cancel_marker_path, parse_fatal_marker
from slurm_operator.model.records import JobRecord
from slurm_operator.model.states import ACTIVE_STATES, FAILED_STATES, SlurmState

from autoexp.campaign.planning.divergence import (
    DIVERGED,
    MEGATRON_DIVERGED,
    dead_model_rule,
    first_repeated_match,
)

DIVERGED_CELL = "diverged"


class _Phase(Protocol):
    @property
    def jobs(self) -> tuple[str, ...]: ...
    @property
    def train_log(self) -> str: ...


def job_number(job_id: str) -> int:
    digits = job_id.split("_")[0]
    return int(digits) if digits.isdigit() else 0


def latest(records: Sequence[JobRecord]) -> dict[str, JobRecord]:
    """The newest run of each job name."""
    found: dict[str, JobRecord] = {}
    for r in sorted(records, key=lambda r: (job_number(r.job_id), r.start or "")):
        found[r.name] = r
    return found


def cell_state(phase: _Phase, newest: Mapping[str, JobRecord], diverged: Collection[str] = ()) -> str:
    """diverged (its training in ``diverged``) / running / failed / done / missing from the latest run
    of each of the phase's jobs."""
    runs = [newest[j] for j in phase.jobs if j in newest]
    if any(r.state in ACTIVE_STATES for r in runs):
        return "running"
    if phase.jobs[0] in diverged:
        return DIVERGED_CELL
    if phase.jobs[0] not in newest:
        return "missing"
    if any(r.state in FAILED_STATES or r.state is SlurmState.UNKNOWN for r in runs):
        return "failed"
    return "done"


def logs_to_check(phases: Sequence[_Phase], newest: Mapping[str, JobRecord]) -> dict[str, str]:
    """Training job name -> the log of its latest run, for each training that ended without success
    (a diverged run FAILED, or was CANCELLED by the live rule): one read each, never one per finished
    training of a large campaign."""
    out: dict[str, str] = {}
    for phase in phases:
        record = newest.get(phase.jobs[0])
        if record is not None and phase.train_log and record.state in FAILED_STATES:
            out[phase.jobs[0]] = phase.train_log.replace("%j", record.job_id)
    return out


def diverged_line(log_tail: str, vocab: int | None = None, tensor_parallel: int = 1) -> str | None:
    """The first line that says the training diverged (a NaN/inf loss, Megatron-LM's NaN check, or the
    dead model's ``repeat``-th flat line when ``vocab`` is known), None when none does."""
    compiled = [re.compile(p) for p in MEGATRON_DIVERGED]
    found = next(
        (
            (n, line.strip())
            for n, line in enumerate(log_tail.splitlines(), 1)
            if any(c.search(line) for c in compiled)
        ),
        None,
    )
    if vocab:
        dead = first_repeated_match(dead_model_rule(vocab, tensor_parallel=tensor_parallel), log_tail)
        if dead is not None and (found is None or dead[0] < found[0]):
            found = dead
    return None if found is None else found[1]


def markers_to_check(logs: Mapping[str, str], newest: Mapping[str, JobRecord]) -> dict[str, str]:
    """Training job name -> the cancel marker next to its latest run's log, for the ``logs``
    (``logs_to_check``) whose run ended CANCELLED: only a cancel of ours leaves one, and a fatal rule's
    says which rule stopped the run. One small read each, of the trainings whose tails are read anyway."""
    return {
        job: cancel_marker_path(path)
        for job, path in logs.items()
        if job in newest and newest[job].state is SlurmState.CANCELLED
    }


def diverged_by_cancel(marker: str) -> str | None:
    """The line a fatal rule named ``DIVERGED`` stopped the training on, from the text of its cancel
    marker (``fatal: DIVERGED: <line>``, ``naming.FATAL_REASON``); None for any other cancel (hung,
    on_kill, a timed-out deferral, a fatal rule of another name) and for no marker ("")."""
    fatal = parse_fatal_marker(marker)
    if fatal is None or fatal[0] != DIVERGED:
        return None
    return fatal[1] or marker.strip()


def diverged_from_logs(
    tails: Mapping[str, str], vocab: Mapping[str, Any], markers: Mapping[str, str] | None = None
) -> dict[str, str]:
    """Training job name -> its diverged line, for the ``tails`` (job -> its log's tail) that have one;
    ``vocab``: job -> (vocabulary size, tensor parallel size) where known; ``markers``: job -> the text
    of its latest run's cancel marker (``markers_to_check``). A DIVERGED rule's cancel gives its line
    (the one the run was stopped on) whatever the tail shows."""
    out: dict[str, str] = {}
    for job, marker in (markers or {}).items():
        line = diverged_by_cancel(marker)
        if line is not None:
            out[job] = line
    for job, tail in tails.items():
        if job in out:
            continue
        size, tp = vocab.get(job) or (None, 1)
        line = diverged_line(tail, size, tp)
        if line is not None:
            out[job] = line
    return out
