"""Campaign report, pure: grid of experiments x phases, best LR/batch, frontier, fit, hours from sacct."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from slurm_operator.model.records import JobRecord

from autoexp.campaign.planning.dag_plan import DagPlan
from autoexp.campaign.report import attempts as per_attempt
from autoexp.campaign.report.cost import WASTED_STATES as WASTED_STATES
from autoexp.campaign.report.cost import attempt_hours as attempt_hours
from autoexp.campaign.report.cost import cost, gpu_hours, hours_totals
from autoexp.campaign.report.fit_validation import holdout
from autoexp.campaign.report.lr_optimum import SweepPoint, optimum_law
from autoexp.campaign.report.run_states import cell_state, latest
from autoexp.campaign.report.scaling_fit import FitError, Point, fit_law, frontier

# Axes shown for each experiment when the campaign varies them (the names of config/scaling_exps.yaml).
PREFERRED_AXES = ("MODEL", "LR", "MICRO_BATCH_SIZE", "GLOBAL_BATCH_SIZE", "BIAS_NAME", "DATASET", "DATA_NAME")
_HYPER = ("LR", "MICRO_BATCH_SIZE", "GLOBAL_BATCH_SIZE")
# The swept hyperparameters of the optimum laws and their axes; each is compared at equal values of the other.
_SWEPT = {"lr": "LR", "batch": "GLOBAL_BATCH_SIZE"}


@dataclass(frozen=True)
class PhaseSpec:
    """One phase (cell column) of an experiment: its Slurm job names (training first), token budget,
    and its training's ``--output`` pattern (``%j``: the job id; its log tells a diverged run)."""

    key: str
    jobs: tuple[str, ...]
    tokens: int | None
    checkpoint_dir: str
    train_log: str = ""
    start_tokens: int = 0  # a cooldown's tokens before its branch point: trained by its pretraining
    tokens_per_iter: int | None = None  # GLOBAL_BATCH_SIZE x SEQ_LENGTH: an attempt's tokens


@dataclass(frozen=True)
class ExperimentSpec:
    """One experiment (one DAG, one grid row) as the report reads it; JSON primitives only."""

    dag_id: str
    experiment: str
    axes: Mapping[str, str]
    params: int | None
    report_json: str
    phases: tuple[PhaseSpec, ...]
    # VOCAB_SIZE and TP: the loss of a dead model (divergence.dead_model_rule); None when unknown
    vocab: int | None = None
    tensor_parallel: int = 1

    def to_dict(self) -> dict[str, Any]:
        return {
            "dag_id": self.dag_id,
            "experiment": self.experiment,
            "axes": dict(self.axes),
            "params": self.params,
            "report_json": self.report_json,
            "phases": [
                {
                    "key": p.key,
                    "jobs": list(p.jobs),
                    "tokens": p.tokens,
                    "checkpoint_dir": p.checkpoint_dir,
                    "train_log": p.train_log,
                    "start_tokens": p.start_tokens,
                    "tokens_per_iter": p.tokens_per_iter,
                }
                for p in self.phases
            ],
            "vocab": self.vocab,
            "tensor_parallel": self.tensor_parallel,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExperimentSpec:
        phases = tuple(
            PhaseSpec(
                p["key"],
                tuple(p["jobs"]),
                p["tokens"],
                p["checkpoint_dir"],
                p.get("train_log", ""),
                int(p.get("start_tokens") or 0),
                _int(p.get("tokens_per_iter")),
            )
            for p in data["phases"]
        )
        return cls(
            data["dag_id"],
            data["experiment"],
            dict(data["axes"]),
            data["params"],
            data["report_json"],
            phases,
            data.get("vocab"),
            int(data.get("tensor_parallel") or 1),
        )


def _short(value: Any) -> bool:
    return isinstance(value, str | int | float) and len(str(value)) <= 40 and "/" not in str(value)


def experiment_specs(dag_plans: Sequence[DagPlan]) -> list[ExperimentSpec]:
    """The report's view of a config's planned DAGs (axes: the preferred keys the campaign varies)."""
    params = [dict(d.experiment.pretrain.train.params) for d in dag_plans]
    varying = [k for k in PREFERRED_AXES if len({str(p.get(k)) for p in params}) > 1 or len(params) == 1]
    specs = []
    for dag_plan, values in zip(dag_plans, params, strict=True):
        report = {p["key"]: p for p in dag_plan.report_phases}
        phases = []
        for planned, tasks in zip(dag_plan.experiment.phases, dag_plan.phases, strict=True):
            jobs = [tasks.train.job_name]
            if tasks.checkpoints is not None:
                jobs += [str(i["job_name"]) for i in tasks.checkpoints.instances]
            per_iter = planned.tokens_per_iter
            tokens = per_iter * planned.train_iters if per_iter else None
            phases.append(
                PhaseSpec(
                    planned.key,
                    tuple(jobs),
                    tokens,
                    planned.checkpoint_dir,
                    tasks.train.output_path,
                    per_iter * planned.start_iter if per_iter else 0,
                    per_iter,
                )
            )
        count = next((p["param_count"] for p in report.values()), None)
        axes = {k: str(values[k]) for k in varying if k in values and _short(values[k])}
        specs.append(
            ExperimentSpec(
                dag_plan.experiment.dag_id,
                dag_plan.experiment.name,
                axes,
                count,
                f"{dag_plan.report_dir}/report.json",
                tuple(phases),
                _int(values.get("VOCAB_SIZE")),
                _int(values.get("TP")) or 1,
            )
        )
    return specs


def _int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


# ---- the grid ------------------------------------------------------------------------------------


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def cell(phase: PhaseSpec, rows: Sequence[Mapping[str, Any]], state: str) -> dict[str, Any]:
    """The last checkpoint's training loss and eval metrics of one phase (from the experiment report)."""
    mine = sorted(
        (r for r in rows if r.get("phase") == phase.key), key=lambda r: int(r.get("iteration") or 0)
    )
    last = mine[-1] if mine else {}
    metrics = {k: float(v) for k, v in last.items() if "/" in k and _finite(v) is not None}
    if _finite(last.get("score")) is not None:
        metrics["score"] = float(last["score"])
    return {
        "state": state,
        "final_loss": _finite(last.get("train_loss")),
        "tokens": last.get("tokens") or phase.tokens,
        "metrics": metrics,
    }


def grid(
    specs: Sequence[ExperimentSpec],
    reports: Mapping[str, Sequence[Mapping[str, Any]]],
    records: Sequence[JobRecord],
    attempts: Sequence[Mapping[str, Any]],
    diverged: Mapping[str, str] | None = None,
) -> list[dict[str, Any]]:
    """One entry per experiment with one cell per phase (``reports``: report.json rows by dag id);
    hours per experiment and per cell from the attempts of ``gpu_hours``; ``diverged``: training job
    name -> the log line that says it diverged (``run_states.diverged_from_logs``)."""
    newest, diverged = latest(records), diverged or {}
    per_cell: dict[tuple[str, str], float] = {}
    for a in attempts:
        per_cell[(a["dag_id"], a["phase"])] = per_cell.get((a["dag_id"], a["phase"]), 0.0) + a["hours"]
    entries = []
    for s in specs:
        cells = {}
        for p in s.phases:
            cells[p.key] = cell(p, reports.get(s.dag_id, ()), cell_state(p, newest, diverged))
            if p.jobs[0] in diverged and cells[p.key]["state"] == "diverged":
                cells[p.key]["diverged_line"] = diverged[p.jobs[0]]
            cells[p.key]["gpu_hours"] = per_cell.get((s.dag_id, p.key), 0.0)
            cells[p.key]["start_tokens"] = p.start_tokens
        entries.append(
            {
                "dag_id": s.dag_id,
                "experiment": s.experiment,
                "axes": dict(s.axes),
                "params": s.params,
                "cells": cells,
                "gpu_hours": sum(c["gpu_hours"] for c in cells.values()),
            }
        )
    return entries


def points(experiments: Sequence[Mapping[str, Any]]) -> list[tuple[Mapping[str, Any], str, Point]]:
    """(experiment, phase, point) for every done cell with a final loss, parameter count and token budget
    (a failed or running cell's last loss is not its budget's; a diverged one's is no model's)."""
    out = []
    for e in experiments:
        for key, c in e["cells"].items():
            if c["state"] == "done" and c["final_loss"] and e["params"] and c["tokens"]:
                out.append((e, key, Point(float(e["params"]), float(c["tokens"]), float(c["final_loss"]))))
    return out


def best_per_size_budget(experiments: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """For each (model size, token budget): the experiment with the lowest final loss and its LR/batch."""
    best: dict[tuple[float, float], tuple[Mapping[str, Any], str, Point]] = {}
    for e, key, p in points(experiments):
        current = best.get((p.params, p.tokens))
        if current is None or p.loss < current[2].loss:
            best[(p.params, p.tokens)] = (e, key, p)
    return [
        {
            "params": n,
            "tokens": d,
            "model": e["axes"].get("MODEL", ""),
            "phase": key,
            "dag_id": e["dag_id"],
            "loss": p.loss,
            **{k: e["axes"][k] for k in _HYPER if k in e["axes"]},
        }
        for (n, d), (e, key, p) in sorted(best.items())
    ]


def frontier_rows(experiments: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The loss-vs-compute frontier (C = 6 N D) over every finished cell."""
    found = points(experiments)
    owner = {id(p): (e, key) for e, key, p in found}  # frontier() returns the same Point objects
    return [
        {
            "compute": p.compute,
            "params": p.params,
            "tokens": p.tokens,
            "loss": p.loss,
            "dag_id": owner[id(p)][0]["dag_id"],
            "phase": owner[id(p)][1],
        }
        for p in frontier([p for _, _, p in found])
    ]


def campaign_fit(
    experiments: Sequence[Mapping[str, Any]], budgets: Sequence[float] = (), bootstrap: int = 100
) -> dict[str, Any]:
    """The parametric fit over the best cell per (N, D), or {"missing": why} naming the missing cells."""
    pts = _best_points(experiments)
    expected = {
        (float(e["params"]), float(c["tokens"]))
        for e in experiments
        for c in e["cells"].values()
        if e["params"] and c["tokens"]
    }
    try:
        return fit_law(pts, bootstrap=bootstrap, seed=0, budgets=budgets, expected=sorted(expected)).to_dict()
    except FitError as exc:
        return {"missing": str(exc)}


def _best_points(experiments: Sequence[Mapping[str, Any]]) -> list[Point]:
    return [
        Point(float(b["params"]), float(b["tokens"]), float(b["loss"]))
        for b in best_per_size_budget(experiments)
    ]


def campaign_holdout(experiments: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The fit without the largest model size against its points (best cell per (N, D)), or {"missing"}."""
    return holdout(_best_points(experiments))


def campaign_optimum(experiments: Sequence[Mapping[str, Any]], name: str) -> dict[str, Any]:
    """The optimal-``name`` law (``lr`` or ``batch``) over every done cell, or {"missing": why}."""
    axis, other = _SWEPT[name], next(a for n, a in _SWEPT.items() if n != name)
    sweep = [
        SweepPoint(p.params, p.tokens, value, p.loss, _number(e["axes"].get(other)))
        for e, _, p in points(experiments)
        if (value := _number(e["axes"].get(axis))) is not None
    ]
    if not sweep:
        return {
            "hyperparameter": name,
            "points": [],
            "missing": f"no {name.upper()} law: the campaign does not vary {axis}",
        }
    return optimum_law(sweep, name)


def _number(value: Any) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None


def build(
    stem: str,
    specs: Sequence[ExperimentSpec],
    reports: Mapping[str, Sequence[Mapping[str, Any]]],
    records: Sequence[JobRecord],
    *,
    generated_at: str,
    checkpoint_times: Mapping[str, Sequence[float]] | None = None,
    budgets: Sequence[float] = (),
    bootstrap: int = 100,
    diverged: Mapping[str, str] | None = None,
    progress: Mapping[str, per_attempt.LogProgress | None] | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """campaign.json's content (without ``plots``) and the per-attempt hours rows; ``bootstrap``: the
    fit's resamples; ``diverged``: see ``grid``; ``progress``: each training attempt's iteration lines
    by job id (``attempts.log_progress``), for what each attempt did."""
    attempts = gpu_hours(specs, records, checkpoint_times)
    totals = hours_totals(attempts)
    experiments = grid(specs, reports, records, attempts, diverged)
    trainings = per_attempt.trainings(specs, records, progress or {})
    campaign: dict[str, Any] = {
        "campaign": stem,
        "generated_at": generated_at,
        "experiments": experiments,
        "best": best_per_size_budget(experiments),
        "frontier": frontier_rows(experiments),
        "fit": campaign_fit(experiments, budgets, bootstrap),
        "holdout": campaign_holdout(experiments),
        "lr_optimum": campaign_optimum(experiments, "lr"),
        "gpu_hours": totals,
        "cost": {**cost(attempts, experiments), "lost_by_cause": per_attempt.lost_by_cause(trainings)},
        "training_attempts": trainings,
        "plots": [],
    }
    if len({e["axes"].get(_SWEPT["batch"]) for e in experiments}) > 1:
        campaign["batch_optimum"] = campaign_optimum(experiments, "batch")
    return campaign, attempts
