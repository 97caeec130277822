"""What each training attempt did and cost, from its sacct record and its log's iteration lines.

The Slurm operator keeps the same figures in the training task's attempt history (its XCom), but the
campaign report runs in another DAG and reads one sacct of the whole campaign; so it measures them
again from what the cluster keeps: sacct's start, elapsed time and allocation, and the job's log.
Megatron-LM (and our CPU trainer) stamps each progress line with the local time
(`` [2026-12-03 14:05:00] iteration      310/    1200 | ...``), the same clock sacct's Start uses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from slurm_operator.model.records import JobRecord
from slurm_operator.model.states import FAILED_STATES
from slurm_operator.policy.watchdog import elapsed_seconds
from slurm_operator.remote.parsers import tres_counts

from autoexp.campaign.planning.training_log import ITERATION_PROGRESS
from autoexp.campaign.report.run_states import job_number

_STAMPED = re.compile(r"(?:\[(\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)\]\s*)?" + ITERATION_PROGRESS)
# Causes of lost time measured from the logs (``lost_by_cause``).
START_UP, RECOMPUTED, NO_PROGRESS = "start_up", "recomputed", "no_progress"


@dataclass(frozen=True)
class LogProgress:
    """The iteration lines of one attempt's log: the first and highest iteration, and the stamps of
    the first line and of the highest one (None where the line carries no stamp)."""

    first: int
    last: int
    first_at: str | None
    last_at: str | None


def log_progress(text: str) -> LogProgress | None:
    """The iteration lines of ``text`` (a log, or its head and tail joined); None when it has none."""
    found = [(int(m.group(2)), m.group(1)) for m in _STAMPED.finditer(text)]
    if not found:
        return None
    last = max(found, key=lambda f: f[0])
    return LogProgress(found[0][0], last[0], found[0][1], last[1])


def _seconds_between(start: str | None, end: str | None) -> float | None:
    try:
        return (datetime.fromisoformat(str(end)) - datetime.fromisoformat(str(start))).total_seconds()
    except ValueError:
        return None


def _gpus(record: JobRecord) -> float:
    tres = tres_counts(record.alloc_tres)
    return tres.get("gres/gpu") or sum(v for k, v in tres.items() if k.startswith("gres/gpu:"))


def _why_ended(record: JobRecord, progress: LogProgress | None) -> str:
    words = record.raw_state or record.state.value
    if record.exit_code:
        words += f" (exit {record.exit_code})"
    if progress is None:
        return f"{words}, no iteration reported"
    return (
        f"{words}, no progress past iteration {progress.last}" if progress.last == progress.first else words
    )


def attempt_figures(
    record: JobRecord,
    progress: LogProgress | None,
    tokens_per_iter: int | None,
    previous_end: int | None = None,
) -> dict[str, Any]:
    """One attempt's figures. ``previous_end``: the highest iteration of the training's attempt before
    (an attempt that starts at or below it computes those iterations again).

    start_up_s: sacct's Start to the first iteration line; iterations: highest - first reported
    (the operator's ``progress_at_end - progress_at_start``); tokens_per_s: between the first and the
    highest line (start-up left out), per GPU where it has GPUs; recomputed: iterations at or below
    ``previous_end``, and their seconds at this attempt's pace; all to within one log interval."""
    elapsed = elapsed_seconds(record.elapsed) or 0.0
    gpus = _gpus(record)
    stalled = progress is None or progress.last == progress.first
    out: dict[str, Any] = {
        "job_id": record.job_id,
        "state": record.state.value,
        "elapsed_s": elapsed,
        "gpus": gpus or None,
        "why_ended": _why_ended(record, progress),
        "progress_at_start": None,
        "progress_at_end": None,
        "start_up_s": None,
        "iterations": 0,
        "tokens": 0 if tokens_per_iter else None,
        "tokens_per_s": None,
        "tokens_per_gpu_s": None,
        "recomputed_iterations": 0,
        "recomputed_s": 0.0,
        # the whole attempt when it ended badly without advancing: a failed start, a hang, a restart
        # loop printing the same iteration (its start-up is part of it, not counted again)
        "no_progress_s": elapsed if stalled and record.state in FAILED_STATES else 0.0,
    }
    if progress is None:
        return out
    iterations = progress.last - progress.first
    steady = _seconds_between(progress.first_at, progress.last_at)
    pace = iterations / steady if steady and iterations > 0 else None  # iterations per second
    start_up = _seconds_between(record.start, progress.first_at)
    recomputed = 0 if previous_end is None else max(0, min(previous_end, progress.last) - progress.first)
    out.update(
        progress_at_start=progress.first,
        progress_at_end=progress.last,
        start_up_s=None if start_up is None else max(0.0, min(start_up, elapsed or start_up)),
        iterations=iterations,
        recomputed_iterations=recomputed,
        recomputed_s=recomputed / pace if pace else 0.0,
    )
    if tokens_per_iter:
        out["tokens"] = iterations * tokens_per_iter
        if pace:
            out["tokens_per_s"] = pace * tokens_per_iter
            out["tokens_per_gpu_s"] = pace * tokens_per_iter / gpus if gpus else None
    return out


def training_attempts(
    records: Sequence[JobRecord],
    progress: Mapping[str, LogProgress | None],
    tokens_per_iter: int | None,
) -> list[dict[str, Any]]:
    """The figures of one training's attempts (its sacct records, oldest first; ``progress``: by job
    id), each numbered, with the lost hours of each cause (seconds x GPUs, or CPUs without GPUs)."""
    rows, previous_end = [], None
    for number, record in enumerate(records, 1):
        seen = progress.get(record.job_id)
        row = attempt_figures(record, seen, tokens_per_iter, previous_end)
        tres = tres_counts(record.alloc_tres)
        count = row["gpus"] or tres.get("cpu", 0.0)
        row["attempt"] = number
        start_up = 0.0 if row["no_progress_s"] else row["start_up_s"] or 0.0
        row["lost_hours"] = {
            START_UP: start_up * count / 3600.0,
            RECOMPUTED: row["recomputed_s"] * count / 3600.0,
            NO_PROGRESS: row["no_progress_s"] * count / 3600.0,
        }
        rows.append(row)
        if seen is not None:
            previous_end = max(seen.last, previous_end or 0)
    return rows


def lost_by_cause(trainings: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """Hours lost over every training attempt, by cause. ``recomputed`` is the next attempt's measure of
    what cost.py's wasted hours estimate from checkpoint times (the work after the last save): the
    same hours seen from the other side, not to be added to them."""
    totals = {START_UP: 0.0, RECOMPUTED: 0.0, NO_PROGRESS: 0.0}
    for training in trainings:
        for row in training["attempts"]:
            for cause, hours in row["lost_hours"].items():
                totals[cause] += hours
    return totals


def _fmt(value: Any, unit: str = "") -> str:
    if value is None:
        return "-"
    return f"{value:.4g}{unit}" if isinstance(value, float) else f"{value}{unit}"


def attempts_text(trainings: Sequence[Mapping[str, Any]], lost: Mapping[str, float]) -> list[str]:
    """The per-attempt figures in words, one line per attempt, for the task log."""
    lines = [
        "lost hours measured from the logs: "
        + ", ".join(f"{cause.replace('_', ' ')} {hours:.3g} h" for cause, hours in lost.items())
    ]
    for t in trainings:
        lines.append(f"{t['dag_id']} {t['phase']}:")
        for r in t["attempts"]:
            rate = _fmt(r["tokens_per_s"], " tok/s")
            if r["tokens_per_gpu_s"] is not None:
                rate += f" ({_fmt(r['tokens_per_gpu_s'])}/GPU)"
            lines.append(
                f"  attempt {r['attempt']} job {r['job_id']}: {_fmt(r['elapsed_s'], ' s')}, start-up "
                f"{_fmt(r['start_up_s'], ' s')}, iterations {_fmt(r['progress_at_start'])}.."
                f"{_fmt(r['progress_at_end'])} ({r['iterations']}, {_fmt(r['tokens'])} tokens), {rate}, "
                f"recomputed {r['recomputed_iterations']} it ({_fmt(r['recomputed_s'], ' s')}), "
                f"ended {r['why_ended']}"
            )
    return lines


def _sorted(records: Sequence[JobRecord]) -> list[JobRecord]:
    return sorted(records, key=lambda r: (r.start or "~", job_number(r.job_id)))


def training_logs(specs: Sequence[Any], records: Sequence[JobRecord]) -> dict[str, str]:
    """Job id -> the log of each training attempt of ``specs`` (ExperimentSpec) that ran."""
    patterns = {p.jobs[0]: p.train_log for s in specs for p in s.phases if p.train_log}
    return {
        r.job_id: patterns[r.name].replace("%j", r.job_id)
        for r in records
        if r.name in patterns and r.start and r.start != "Unknown"
    }


def trainings(
    specs: Sequence[Any], records: Sequence[JobRecord], progress: Mapping[str, LogProgress | None]
) -> list[dict[str, Any]]:
    """Per training (experiment and phase) that ran: its attempts' figures (``training_attempts``)."""
    out = []
    for spec in specs:
        for phase in spec.phases:
            mine = _sorted([r for r in records if r.name == phase.jobs[0]])
            if mine:
                rows = training_attempts(mine, progress, phase.tokens_per_iter)
                out.append({"dag_id": spec.dag_id, "phase": phase.key, "attempts": rows})
    return out


TABLE_COLUMNS = (
    "dag_id", "phase", "attempt", "job_id", "elapsed_s", "start_up_s", "progress_at_start",
    "progress_at_end", "tokens", "tokens_per_s", "tokens_per_gpu_s", "recomputed_iterations", "why_ended",
)  # fmt: skip


def table_rows(trainings: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
    """One row per training attempt, in ``TABLE_COLUMNS`` (the report page's table)."""
    return [
        [t["dag_id"], t["phase"], *(r[c] for c in TABLE_COLUMNS[2:])]
        for t in trainings
        for r in t["attempts"]
    ]
