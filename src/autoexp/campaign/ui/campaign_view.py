"""What the Campaigns page and ``autoexp status`` show: a config's experiments with the state of
their latest runs (Airflow's REST API), why a waiting training's job pends (its wait's XCom), and
the campaign report's numbers (its files) when present.
No FastAPI here: app.py serves these dicts, cli_status.py prints them.
"""

from __future__ import annotations

import json
import os
import re
import urllib.parse
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from autoexp.campaign.configs.planned_config import load_plans
from autoexp.campaign.planning import campaign_slice as cs
from autoexp.campaign.planning.dag_plan import CONVERT_TASK, TRAIN_TASK
from autoexp.campaign.report.campaign_report_render import answer_sections
from autoexp.campaign.report.cost_text import TITLE as COST_TITLE
from autoexp.campaign.report.cost_text import cost_table, hours_unit
from autoexp.campaign.ui.airflow_api import AirflowApi, ApiError

_ITER = re.compile(r"(\d+)\s*$")
# The XCom where a deferred Slurm wait keeps its state, a pending job's note included
# (slurm_operator.triggers.relay_position.XCOM_KEY; a test holds the two equal: importing it here
# would import Airflow, which ``autoexp status`` does without).
WAIT_XCOM = "slurm_log_relay"


def report_dir(stem: str, environ: Mapping[str, str] | None = None) -> Path:
    """The campaign report's folder (the contract's rule): $AUTOEXP_REPORT_ROOT/<stem>, else
    $AIRFLOW_HOME/autoexp-reports/<stem> (AIRFLOW_HOME defaults to ~/airflow, as in Airflow)."""
    env = os.environ if environ is None else environ
    root = env.get("AUTOEXP_REPORT_ROOT") or str(
        Path(env.get("AIRFLOW_HOME") or Path.home() / "airflow") / "autoexp-reports"
    )
    return Path(root) / stem


def read_report(stem: str, environ: Mapping[str, str] | None = None) -> dict[str, Any] | None:
    """``campaign.json`` of the campaign, or None when there is none (or it is not JSON yet)."""
    try:
        data = json.loads((report_dir(stem, environ) / "campaign.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def run_url(dag_id: str, run_id: str, task_id: str | None = None) -> str:
    """The run's page in Airflow's UI (relative to the UI's root)."""
    url = f"/dags/{urllib.parse.quote(dag_id, safe='')}/runs/{urllib.parse.quote(run_id, safe='')}"
    return url if task_id is None else f"{url}/tasks/{urllib.parse.quote(task_id, safe='')}"


def _phase_progress(tis: Sequence[Mapping[str, Any]], phase: str) -> dict[str, Any]:
    """One phase of one run: its training's state, the checkpoints seen and the evaluations done."""
    by_task: dict[str, list[Mapping[str, Any]]] = {}
    for ti in tis:
        by_task.setdefault(str(ti["task_id"]), []).append(ti)
    train = by_task.get(f"{phase}.{TRAIN_TASK}", [])
    waits = [t for t in by_task.get(f"{phase}.checkpoints.wait", []) if t.get("state") == "success"]
    evals = [t for t in by_task.get(f"{phase}.checkpoints.{CONVERT_TASK}", []) if t.get("state") == "success"]
    iterations = [
        int(m.group(1)) for t in waits if (m := _ITER.search(str(t.get("rendered_map_index") or "")))
    ]
    return {
        "state": (train[0].get("state") if train else None) or "none",
        "latest_checkpoint": max(iterations) if iterations else None,
        "evaluations": len(evals),
        "pending": None,
    }


def pending_note(api: AirflowApi, dag_id: str, run_id: str, phase: str, state: str) -> str | None:
    """Why a training's job still pends and when Slurm expects to start it (``Priority, est. start
    2026-12-03T14:05``), as its deferred wait last stored it; None for a training that is not
    deferred or whose job is not pending, and for a user who may not read XComs (the note is an
    aside: the page still shows the state). One REST read of an XCom, no SSH: the wait's poll
    already asked the cluster (docs/slurm-operator.md, "While a job pends")."""
    if state != "deferred":
        return None
    try:
        value = api.xcom(dag_id, run_id, f"{phase}.{TRAIN_TASK}", WAIT_XCOM)
    except ApiError as exc:
        if exc.status == 403:
            return None
        raise
    if isinstance(value, str):  # a value stored as JSON text
        try:
            value = json.loads(value)
        except ValueError:
            return None
    note = value.get("pending") if isinstance(value, dict) else None
    return note if isinstance(note, str) else None


def campaign_view(
    config_path: str | Path, api: AirflowApi, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The campaign of one config: per experiment its axes, latest run and per-phase cells."""
    path = Path(config_path)
    plans, settings = load_plans(path)
    axes = [a for a in cs.grid_axes(path) if a != settings.keys.mode]
    table = {row["dag_id"]: row for row in cs.slice_table(plans, axes, settings.keys)}
    report = read_report(path.stem, environ)
    reported = {e.get("dag_id"): e for e in (report or {}).get("experiments", []) if isinstance(e, dict)}
    runs = api.latest_runs(p.dag_id for p in plans)
    tis_by_run: dict[str, list[dict[str, Any]]] = {}
    for ti in api.task_instances(runs.values()):
        tis_by_run.setdefault(ti["dag_id"], []).append(ti)
    phases: dict[str, None] = {}
    experiments = []
    for plan in plans:
        run = runs.get(plan.dag_id)
        cells: dict[str, Any] = {}
        for phase in plan.phases:
            phases.setdefault(phase.key, None)
            cell = _phase_progress(tis_by_run.get(plan.dag_id, []), phase.key)
            if run is not None:
                cell["url"] = run_url(plan.dag_id, run["dag_run_id"], f"{phase.key}.{TRAIN_TASK}")
                cell["pending"] = pending_note(api, plan.dag_id, run["dag_run_id"], phase.key, cell["state"])
            numbers = reported.get(plan.dag_id, {}).get("cells", {}).get(phase.key, {})
            cell["final_loss"] = numbers.get("final_loss")
            cell["metrics"] = numbers.get("metrics", {})
            cells[phase.key] = cell
        experiments.append(
            {
                "dag_id": plan.dag_id,
                "experiment": plan.name,
                "axes": table[plan.dag_id]["axes"],
                "run": None
                if run is None
                else {
                    "run_id": run["dag_run_id"],
                    "state": run.get("state"),
                    "url": run_url(plan.dag_id, run["dag_run_id"]),
                },
                "cells": cells,
                "gpu_hours": reported.get(plan.dag_id, {}).get("gpu_hours"),
            }
        )
    return {
        "campaign": path.stem,
        "config": str(path),
        "trigger_dag_id": cs.campaign_dag_id(path),
        "axes": cs.axis_choices(list(table.values()), axes),
        "phases": list(phases),
        "experiments": experiments,
        "report": _report_summary(report, path.stem, environ),
    }


def _report_summary(report: Mapping[str, Any] | None, stem: str, environ: Mapping[str, str] | None) -> Any:
    if report is None:
        return {"missing": f"no report yet (no campaign.json in {report_dir(stem, environ)})"}
    return {
        "generated_at": report.get("generated_at"),
        "answer": _answer(report),
        "hours_unit": hours_unit(report),  # the grid's hours column: CPU-hours where no GPU was allocated
        "frontier": report.get("frontier", []),
        "gpu_hours": report.get("gpu_hours"),
        "plots": [p for p in report.get("plots", []) if isinstance(p, str) and plot_name_ok(p)],
    }


def _answer(report: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The report's answer in words, as the task log and the demo print it: one section per question
    (the fit and its compute-optimal N, D; the held-out check; the optimal-LR law; what it cost, with
    its hours per phase and cause as a table of text cells); a report whose fields cannot be read says
    so in one line instead of failing the page."""
    try:
        sections = answer_sections(report)
    except (KeyError, TypeError, ValueError) as exc:
        return [{"title": "Answer", "lines": [f"the report's answer cannot be read: {exc!r}"]}]
    table = cost_table(report)
    return [
        {"title": title, "lines": lines, **({"table": table} if title == COST_TITLE and table else {})}
        for title, lines in sections
    ]


def plot_name_ok(name: str) -> bool:
    """A file the page may serve from the report folder: a plain PNG name, no path."""
    return bool(re.fullmatch(r"[A-Za-z0-9_.-]+\.png", name)) and not name.startswith(".")


def experiment_view(api: AirflowApi, dag_id: str, run_id: str) -> dict[str, Any]:
    """One experiment's run: per phase its progress, and the rows of its report (loss, evaluations).

    The rows come from the run's report task (its XCom names the files it wrote); a report folder
    on another machine than the API server is named, not read.
    """
    run = {"dag_id": dag_id, "dag_run_id": run_id}
    tis = api.task_instances([run])
    phase_keys = list(dict.fromkeys(str(t["task_id"]).split(".")[0] for t in tis if "." in str(t["task_id"])))
    produced = api.xcom(dag_id, run_id, "report") or {}
    files = [f for f in produced.get("files", []) if isinstance(f, str)] if isinstance(produced, dict) else []
    rows, plots, where = [], [], None
    for name in files:
        local = Path(name)
        if local.name == "report.json" and local.is_file():
            rows = json.loads(local.read_text(encoding="utf-8"))
        elif plot_name_ok(local.name) and local.is_file():
            plots.append(local.name)
        where = str(local.parent)
    phases = {p: _phase_progress(tis, p) for p in phase_keys}
    for phase, progress in phases.items():
        progress["pending"] = pending_note(api, dag_id, run_id, phase, progress["state"])
    note = None
    if not files:
        note = "no report yet: the run's report task has not written one"
    elif not rows:
        note = f"the report is at {where} (not readable from the API server)"
    return {
        "dag_id": dag_id,
        "run_id": run_id,
        "phases": phases,
        "rows": rows,
        "plots": plots,
        "note": note,
    }


def experiment_plot(api: AirflowApi, dag_id: str, run_id: str, name: str) -> Path | None:
    """A PNG the run's report task wrote, when it is readable here (only names its XCom lists)."""
    produced = api.xcom(dag_id, run_id, "report") or {}
    files = produced.get("files", []) if isinstance(produced, dict) else []
    for file in files:
        path = Path(str(file))
        if path.name == name and plot_name_ok(name) and path.is_file():
            return path
    return None
