"""``autoexp status CONFIG``: one line per experiment of a campaign, from Airflow's REST API.

Where Airflow is and who asks: ``--url`` (``$AUTOEXP_AIRFLOW_URL``, default http://127.0.0.1:8080),
then a token (``$AUTOEXP_AIRFLOW_TOKEN``) or a user and password (``--user``/``$AUTOEXP_AIRFLOW_USER``,
``$AUTOEXP_AIRFLOW_PASSWORD``) exchanged for one at ``/auth/token``; with neither, no login is sent
(a server whose every user is admin needs none).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

DEFAULT_URL = "http://127.0.0.1:8080"
_DONE = ("success", "skipped")


def add_parser(sub: Any) -> None:
    """The ``status`` subcommand's arguments (cli.py registers it)."""
    text = "one line per experiment: phase, latest checkpoint, evaluations, Slurm state, GPU-hours"
    cmd = sub.add_parser("status", help=text, description=f"{text} (from Airflow's REST API)")
    cmd.add_argument("config", type=Path, help="the YAML config")
    cmd.add_argument("--url", help=f"Airflow's URL (default $AUTOEXP_AIRFLOW_URL, else {DEFAULT_URL})")
    cmd.add_argument("--user", help="log in as this user (default $AUTOEXP_AIRFLOW_USER)")


def current_phase(cells: Mapping[str, Mapping[str, Any]]) -> str | None:
    """The first phase not done yet, in plan order; the last one when all are done."""
    keys = list(cells)
    return next((k for k in keys if cells[k]["state"] not in _DONE), keys[-1] if keys else None)


def slurm_state(attempts: Any, job_id: Any) -> str:
    """The last Slurm attempt's state from the training task's result, else the submitted job's id."""
    if isinstance(attempts, list) and attempts and isinstance(attempts[-1], dict):
        last = attempts[-1]
        return f"{last.get('state', '?')} (job {last.get('job_id', '?')})"
    return f"job {job_id}" if job_id else "-"


def status_lines(view: Mapping[str, Any], slurm: Mapping[str, str]) -> list[str]:
    """The table: one row per experiment (``slurm``: DAG id -> its Slurm state text)."""
    rows = [["experiment", "run", "phase", "state", "checkpoint", "evals", "slurm", "gpu-h"]]
    for e in view["experiments"]:
        phase = current_phase(e["cells"])
        cell = e["cells"].get(phase, {}) if phase else {}
        evals = sum(c["evaluations"] for c in e["cells"].values())
        gpu = e.get("gpu_hours")
        job = slurm.get(e["dag_id"], "-")
        if cell.get("pending"):  # why a deferred training's job waits (the Campaigns grid's note)
            job = f"{job}, pending: {cell['pending']}"
        rows.append(
            [
                e["dag_id"],
                e["run"]["state"] if e["run"] else "never run",
                phase or "-",
                cell.get("state", "-"),
                "-" if cell.get("latest_checkpoint") is None else str(cell["latest_checkpoint"]),
                str(evals),
                job,
                "-" if gpu is None else f"{float(gpu):.3g}",
            ]
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]


def run_status(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> int:
    """Print the campaign's status; one line on stderr and exit 1 when Airflow cannot answer."""
    from autoexp.campaign.planning.plan import config_errors
    from autoexp.campaign.ui.airflow_api import AirflowApi, ApiError
    from autoexp.campaign.ui.campaign_view import campaign_view

    env = os.environ if environ is None else environ
    url = args.url or env.get("AUTOEXP_AIRFLOW_URL") or DEFAULT_URL
    user = args.user or env.get("AUTOEXP_AIRFLOW_USER")
    try:
        if token := env.get("AUTOEXP_AIRFLOW_TOKEN"):
            api = AirflowApi(url, token)
        elif user:
            api = AirflowApi.login(url, user, env.get("AUTOEXP_AIRFLOW_PASSWORD", ""))
        else:
            api = AirflowApi(url)
        view = campaign_view(args.config, api)
        slurm = {}
        for e in view["experiments"]:
            phase = current_phase(e["cells"])
            if e["run"] is None or phase is None:
                continue
            task = f"{phase}.train"
            run_id = e["run"]["run_id"]
            attempts = api.xcom(e["dag_id"], run_id, task)
            job_id = None if attempts else api.xcom(e["dag_id"], run_id, task, "slurm_job_id")
            slurm[e["dag_id"]] = slurm_state(attempts, job_id)
    except ApiError as exc:
        print(f"autoexp status: {exc}", file=sys.stderr)
        return 1
    except config_errors() as exc:
        print(exc, file=sys.stderr)
        return 2
    print("\n".join(status_lines(view, slurm)))
    return 0
