"""What a campaign cost: hours per Slurm attempt from one sacct, split by phase and cause (training,
conversion and evaluation, wasted), and the tokens each model size trained per hour."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any, Protocol

from slurm_operator.model.records import JobRecord
from slurm_operator.model.states import FAILED_STATES
from slurm_operator.policy.watchdog import elapsed_seconds
from slurm_operator.remote.parsers import tres_counts

from autoexp.campaign.report.run_states import job_number

# A run ended in one of these lost the time after its last checkpoint (hung runs end CANCELLED).
WASTED_STATES = frozenset(s.value for s in FAILED_STATES)
# The causes of the split. A phase's checkpoint job converts and then evaluates in one Slurm job:
# sacct gives one elapsed time for both, so they are one cause.
TRAINING, CONVERSION_EVALUATION, WASTED = "training", "conversion_evaluation", "wasted"


class _Phase(Protocol):
    @property
    def key(self) -> str: ...
    @property
    def jobs(self) -> tuple[str, ...]: ...
    @property
    def checkpoint_dir(self) -> str: ...


class _Spec(Protocol):
    @property
    def dag_id(self) -> str: ...
    @property
    def experiment(self) -> str: ...
    @property
    def phases(self) -> Sequence[Any]: ...


def _timestamp(text: str) -> float | None:
    try:  # sacct prints the cluster's local time without zone; read as this machine's local time
        return datetime.fromisoformat(text).timestamp()
    except ValueError:
        return None


def attempt_hours(record: JobRecord, checkpoint_times: Iterable[float] = ()) -> dict[str, Any]:
    """Hours of one Slurm run: elapsed x allocated GPUs (CPUs when none); wasted when it failed, timed
    out, was preempted or cancelled (a hung run is cancelled): the time after its last checkpoint."""
    tres = tres_counts(record.alloc_tres)
    gpus = tres.get("gres/gpu") or sum(v for k, v in tres.items() if k.startswith("gres/gpu:"))
    unit, count = ("gpu", gpus) if gpus else ("cpu", tres.get("cpu", 0.0))
    seconds = elapsed_seconds(record.elapsed) or 0.0
    wasted_seconds = 0.0
    if record.state in FAILED_STATES:
        start, end = _timestamp(record.start), _timestamp(record.end)
        saved = [t for t in checkpoint_times if start is not None and end is not None and start <= t <= end]
        wasted_seconds = seconds if not saved or end is None else min(seconds, max(0.0, end - max(saved)))
    return {
        "job_id": record.job_id,
        "job_name": record.name,
        "state": record.state.value,
        "unit": unit,
        "allocated": count,
        "elapsed_s": seconds,
        "hours": seconds * count / 3600.0,
        "wasted_hours": wasted_seconds * count / 3600.0,
    }


def gpu_hours(
    specs: Sequence[_Spec],
    records: Sequence[JobRecord],
    checkpoint_times: Mapping[str, Sequence[float]] | None = None,
) -> list[dict[str, Any]]:
    """One row per attempt (experiment, phase, job, attempt number), from one sacct of the campaign.

    ``checkpoint_times``: epoch seconds of each phase's saved checkpoints, keyed by its checkpoint_dir.
    """
    where = {job: (s, p) for s in specs for p in s.phases for job in p.jobs}
    rows: list[dict[str, Any]] = []
    seen: dict[str, int] = {}
    for record in sorted(records, key=lambda r: (r.start or "~", job_number(r.job_id))):
        if record.name not in where:
            continue
        spec, phase = where[record.name]
        seen[record.name] = seen.get(record.name, 0) + 1
        times = (checkpoint_times or {}).get(phase.checkpoint_dir, ())
        rows.append(
            {
                "dag_id": spec.dag_id,
                "experiment": spec.experiment,
                "phase": phase.key,
                "attempt": seen[record.name],
                "cause": TRAINING if record.name == phase.jobs[0] else CONVERSION_EVALUATION,
                **attempt_hours(record, times if record.name == phase.jobs[0] else ()),
            }
        )
    return rows


def hours_totals(rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """Total and wasted hours, and hours per unit (gpu or cpu)."""
    units: dict[str, float] = {}
    for r in rows:
        units[r["unit"]] = units.get(r["unit"], 0.0) + r["hours"]
    return {
        "total": sum(r["hours"] for r in rows),
        "wasted": sum(r["wasted_hours"] for r in rows),
        "by_unit": units,
    }


def _split() -> dict[str, float]:
    return {TRAINING: 0.0, CONVERSION_EVALUATION: 0.0, WASTED: 0.0}


def cost(attempts: Sequence[Mapping[str, Any]], experiments: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The hours of ``gpu_hours``'s attempts by cause, by phase key (``pretrain``, each
    ``cooldown_<branch>``, summed over experiments) and, for the wasted ones, by how the attempt ended;
    and per model size the tokens its finished trainings added per training hour (``experiments``: the
    grid, whose cells carry ``tokens`` and ``start_tokens``). Wasted: a failed, timed-out, hung or
    preempted attempt's hours after its last checkpoint (recomputed by the next one), or all of them."""
    by_cause, by_phase, by_state = _split(), dict[str, dict[str, float]](), dict[str, float]()
    for a in attempts:
        wasted = float(a["wasted_hours"])
        phase = by_phase.setdefault(a["phase"], _split())
        for split in (by_cause, phase):
            split[a["cause"]] += float(a["hours"]) - wasted
            split[WASTED] += wasted
        if wasted:
            by_state[a["state"]] = by_state.get(a["state"], 0.0) + wasted
    return {
        "by_cause": by_cause,
        "by_phase": by_phase,
        "wasted_by_state": by_state,
        "tokens_per_hour": tokens_per_hour(attempts, experiments),
    }


def tokens_per_hour(
    attempts: Sequence[Mapping[str, Any]], experiments: Sequence[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    """Per model size: tokens trained by its done cells / the hours of their trainings (all attempts,
    wasted ones included: what a token cost), smallest model first."""
    hours: dict[tuple[str, str], float] = {}
    units: dict[tuple[str, str], set[str]] = {}
    for a in attempts:
        if a["cause"] == TRAINING:
            key = (a["dag_id"], a["phase"])
            hours[key] = hours.get(key, 0.0) + float(a["hours"])
            units.setdefault(key, set()).add(a["unit"])
    sizes: dict[int, dict[str, Any]] = {}
    for e in experiments:
        for phase, c in e["cells"].items():
            spent = hours.get((e["dag_id"], phase), 0.0)
            if c["state"] != "done" or not e["params"] or not c.get("tokens") or not spent:
                continue
            size = sizes.setdefault(
                int(e["params"]),
                {"params": int(e["params"]), "model": e["axes"].get("MODEL", ""), "tokens": 0, "hours": 0.0},
            )
            size["tokens"] += int(c["tokens"]) - int(c.get("start_tokens") or 0)
            size["hours"] += spent
            size.setdefault("units", set()).update(units[(e["dag_id"], phase)])
    return [
        {**{k: v for k, v in s.items() if k != "units"}, "unit": "/".join(sorted(s["units"])),
         "tokens_per_hour": s["tokens"] / s["hours"]}
        for _, s in sorted(sizes.items())
    ]  # fmt: skip
