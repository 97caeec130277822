"""The demo's driver (scripts/demo runs it): trigger every DAG of a campaign over Airflow's REST API,
wait, print the reports and the orchestration overhead. Not part of the product package."""

from __future__ import annotations

import argparse
import csv
import json
import logging
import os
import subprocess
import sys
import textwrap
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dispatch_latency import summary
from dispatch_report import dispatch_latencies, epoch, sacct_submissions
from slurm_operator.remote.commands import SACCT_FORMAT
from slurm_operator.remote.parsers import parse_sacct

from autoexp.campaign.planning import run_layout

if TYPE_CHECKING:
    from autoexp.campaign.planning.dag_plan import DagPlan

log = logging.getLogger("autoexp.demo")


class Api:
    """Minimal Airflow 3 REST client (with the token scripts/demo gets for its admin user)."""

    def __init__(self, port: int, token: str | None = None) -> None:
        self.base = f"http://127.0.0.1:{port}"
        self.headers = {"Content-Type": "application/json"}
        if token:  # a stack with its login on (the tests'); the demo's needs none
            self.headers["Authorization"] = f"Bearer {token}"

    def call(self, method: str, path: str, body: Any = None) -> Any:
        request = urllib.request.Request(  # noqa: S310 (fixed http://127.0.0.1 base)
            f"{self.base}/api/v2/{path.lstrip('/')}",
            data=None if body is None else json.dumps(body).encode(),
            method=method,
            headers=self.headers,
        )
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310 (fixed http://127.0.0.1)
            raw = response.read()
        return json.loads(raw) if raw else None

    def wait_healthy(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                health = self.call("GET", "monitor/health")
                if all(health.get(p, {}).get("status") == "healthy" for p in ("scheduler", "triggerer")):
                    return
            except (OSError, ValueError):
                pass
            time.sleep(2)
        raise TimeoutError(f"Airflow at {self.base} not healthy after {timeout:.0f} s")

    def wait_dag(self, dag_id: str, timeout: float) -> None:
        """Until the DAG is parsed and not stale: Airflow answers 404 to a trigger of a stale DAG (one
        whose file's last parse was counted but not stored) until the next parse stores it."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                if not self.call("GET", f"dags/{dag_id}").get("is_stale"):
                    return
            except urllib.error.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"DAG {dag_id} was not parsed, or stayed stale, for {timeout:.0f} s: "
                    "see the dag-processor's log"
                )
            time.sleep(2)

    def trigger(self, dag_id: str, conf: dict[str, Any], timeout: float = 300) -> str:
        """A run of ``dag_id``; a 404 (the DAG went stale since wait_dag) waits for the next parse."""
        self.call("PATCH", f"dags/{dag_id}", {"is_paused": False})
        deadline = time.monotonic() + timeout
        while True:
            try:
                run = self.call("POST", f"dags/{dag_id}/dagRuns", {"logical_date": None, "conf": conf})
                return str(run["dag_run_id"])
            except urllib.error.HTTPError as err:
                if err.code != 404 or time.monotonic() > deadline:
                    raise
            time.sleep(2)
            self.wait_dag(dag_id, max(0.0, deadline - time.monotonic()))

    def run_state(self, dag_id: str, run_id: str) -> str:
        return str(self.call("GET", f"dags/{dag_id}/dagRuns/{run_id}")["state"])


def _state_or_busy(api: Api, dag_id: str, run_id: str) -> str:
    """The run's state; "unknown (the API server did not answer)" when a poll times out (asked again)."""
    try:
        return api.run_state(dag_id, run_id)
    except TimeoutError:
        return "unknown (the API server did not answer in time)"


def trigger_campaign(
    api: Api, config: Path, conf: dict[str, Any] | None = None, timeout: float = 300
) -> dict[str, str]:
    """One click: the config's campaign DAG with its defaults (every experiment); -> DAG id -> run id."""
    from autoexp.campaign.planning.campaign_slice import campaign_dag_id

    dag_id = campaign_dag_id(config)
    api.wait_dag(dag_id, timeout)
    run_id = api.trigger(dag_id, dict(conf or {}), timeout)
    deadline = time.monotonic() + timeout
    while (state := _state_or_busy(api, dag_id, run_id)) not in ("success", "failed"):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"{dag_id} run {run_id} still {state} after {timeout:.0f} s: see its task logs"
            )
        time.sleep(2)
    path = f"dags/{dag_id}/dagRuns/{run_id}/taskInstances/summary/xcomEntries/return_value"
    started = api.call("GET", path)["value"] if state == "success" else {}
    if not started:
        raise RuntimeError(
            f"{dag_id} run {run_id} ended {state} and started nothing: see its select task's log"
        )
    return {str(k): str(v) for k, v in started.items()}


def answer_budget(dag_plans: Sequence[DagPlan]) -> float:
    """The compute budget (FLOPs) the demo asks the compute-optimal N, D for: 10 x the largest planned
    cell's C = 6 N D, to one significant figure (a budget just past the grid, as one plans the next run)."""
    from autoexp.campaign.report.campaign_report import experiment_specs

    cells = [
        6.0 * spec.params * phase.tokens
        for spec in experiment_specs(dag_plans)
        for phase in spec.phases
        if spec.params and phase.tokens
    ]
    return float(f"{10 * max(cells, default=1e18):.0e}")


def print_campaign_report(
    api: Api, config: Path, conf: dict[str, Any] | None = None, timeout: float = 600
) -> str | None:
    """Ask for the campaign report now that every experiment ended; print its table, the campaign's
    answer (the fit with intervals and the compute-optimal N, D of each budget in ``conf``, the held-out
    check, the optimal-LR law: ``answer_text``), the GPU-hours and the report's path.
    Returns the report run's id, None when there is no report (the reason is printed)."""
    from autoexp.campaign.report.campaign_report_paths import campaign_report_dir
    from autoexp.campaign.report.campaign_report_render import answer_text, text_table

    dag_id = f"autoexp_campaign_report_{config.stem}"
    run_id = api.trigger(dag_id, dict(conf or {}))
    deadline = time.monotonic() + timeout
    while (state := _state_or_busy(api, dag_id, run_id)) not in ("success", "failed"):
        if time.monotonic() > deadline:
            waited = f"still {state} after {timeout:.0f} s"
            print(f"\ncampaign report: {dag_id} run {run_id} {waited}: see its task logs")
            return None
        time.sleep(3)
    out = campaign_report_dir(config.stem)
    if state != "success" or not (out / "campaign.json").exists():
        print(f"\ncampaign report: {dag_id} run {run_id} {state}, no {out / 'campaign.json'}: see its log")
        return None
    data = json.loads((out / "campaign.json").read_text())
    hours = data.get("gpu_hours") or {}
    print(f"\n== campaign {config.stem}\n{text_table(data['experiments'])}\n\n{answer_text(data)}\n")
    print(
        f"GPU-hours (CPU-hours here: the local cluster has no GPU): {hours.get('total', 0):.4f} total, "
        f"{hours.get('wasted', 0):.4f} wasted\nreport: {out / 'index.html'}"
    )
    return run_id


def sacct_jobs(sacct_output: str) -> list[tuple[str, float, float | None]]:
    """(job name, start, end or None) of every job that started, from ``sacct -P -o SACCT_FORMAT``."""
    jobs: list[tuple[str, float, float | None]] = []
    for record in parse_sacct(sacct_output):
        start = epoch(record.start)
        if start is not None:
            jobs.append((record.name, start, epoch(record.end)))
    return jobs


def _sacct_since(since: float) -> str:
    """Every job of every user since ``since`` (the local cluster's sacct), one line each."""
    start = datetime.fromtimestamp(since).strftime("%Y-%m-%dT%H:%M:%S")
    return subprocess.run(
        ["sacct", "-X", "-n", "-P", "-a", "-S", start, "-o", SACCT_FORMAT],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout


def idle_gaps(
    jobs: list[tuple[str, float, float | None]], since: float, until: float
) -> list[tuple[float, float]]:
    """The spans of [since, until] in which no Slurm job ran, in order."""
    spans = sorted((max(b, since), min(e if e is not None else until, until)) for _, b, e in jobs)
    gaps, cursor = [], since
    for b, e in spans:
        if b > cursor:
            gaps.append((cursor, b))
        cursor = max(cursor, e)
    if until > cursor:
        gaps.append((cursor, until))
    return gaps


def idle_summary(gaps: list[tuple[float, float]], since: float, until: float) -> str:
    """Where the seconds without a running job are: before the first job, between jobs, after the last."""
    inner = [g for g in gaps if g[0] > since and g[1] < until]
    head = sum(e - b for b, e in gaps if b <= since)
    tail = sum(e - b for b, e in gaps if e >= until and b > since)
    between = sum(e - b for b, e in inner)
    longest = max((e - b for b, e in inner), default=0.0)
    return (
        f"{head:.0f} s before the first job started, {between:.0f} s in {len(inner)} gaps between jobs "
        f"(longest {longest:.0f} s), {tail:.0f} s after the last one ended"
    )


def job_seconds(jobs: list[tuple[str, float, float | None]], since: float, until: float) -> float:
    """Sum of every job's time inside [since, until] (what the pool's slots had to run)."""
    return sum(max(0.0, min(e if e is not None else until, until) - max(b, since)) for _, b, e in jobs)


def capacity_bound_seconds(critical: float, work: float, slots: int) -> float:
    """The shortest wall any orchestrator could reach: the longest dependent chain of jobs, or the
    jobs' total time spread over the pool's slots, whichever is longer."""
    return max(critical, work / max(slots, 1))


def critical_path_seconds(dags: Sequence[DagPlan], jobs: list[tuple[str, float, float | None]]) -> float:
    """Longest chain of dependent Slurm job time in any experiment, from sacct durations.

    Chains: pretraining then the conversion of its last checkpoint; and, per cooldown, the part of
    pretraining up to the branch point (pro rata of iterations), the cooldown's training, then the
    conversion of its last checkpoint. Attempts of one task add up; conversions of one phase count
    their longest job. Jobs are told apart by the names the DAG plan gives them (``dag_plan.job_name``).
    """
    now = time.time()
    longest = 0.0
    for dag in dags:
        plan = dag.experiment
        train: dict[str, float] = {}
        convert: dict[str, float] = {}
        tasks = {p.train.job_name: (p.key, True) for p in dag.phases}
        for p in dag.phases:
            tasks.update(
                {i["job_name"]: (p.key, False) for i in (p.checkpoints.instances if p.checkpoints else ())}
            )
        for name, b, e in jobs:
            if name not in tasks:
                continue
            phase, is_train = tasks[name]
            took = (e if e is not None else now) - b
            if is_train:
                train[phase] = train.get(phase, 0.0) + took
            else:
                convert[phase] = max(convert.get(phase, 0.0), took)
        pre = plan.pretrain
        chains = [train.get(pre.key, 0.0) + convert.get(pre.key, 0.0)]
        for cd in plan.cooldowns:
            share = cd.start_iter / pre.train_iters if pre.train_iters else 0.0
            chains.append(train.get(pre.key, 0.0) * share + train.get(cd.key, 0.0) + convert.get(cd.key, 0.0))
        longest = max(longest, *chains)
    return longest


def print_report(report_dir: Path) -> None:
    table = report_dir / "report.csv"
    if not table.exists():
        print(f"  (no report at {table})")
        return
    with table.open() as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        header = list(reader.fieldnames or [])
    # The fixed columns, then every per-task metric the report found (accuracy and perplexity).
    metrics = header[header.index("score") + 1 :] if "score" in header else []
    cols = ["phase", "iteration", "tokens", "train_loss", "score", *metrics]
    cells = [cols, *[[(r.get(c) or "-")[:12] for c in cols] for r in rows]]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cols))]
    for line in cells:
        print("  " + "  ".join(v.ljust(w) for v, w in zip(line, widths, strict=True)))
    for png in sorted(report_dir.glob("*.png")):
        print(f"  plot: {png}")


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    parser = argparse.ArgumentParser(prog="scripts/lib/campaign_run.py", description=__doc__)
    parser.add_argument("--port", type=int, default=8080)
    parser.add_argument("--check", action="store_true", help="only build the config's DAGs and exit")
    parser.add_argument("--config", type=Path, required=True)
    parser.add_argument("--timeout", type=float, default=1800)
    parser.add_argument("--started", type=float, default=time.time(), help="epoch seconds the demo started")
    args = parser.parse_args(argv)

    from autoexp.campaign.configs.planned_config import load_plans
    from autoexp.campaign.planning.dag_plan import plan_dag
    from autoexp.campaign.planning.plan import config_errors

    try:
        plans, settings = load_plans(args.config)
        if args.check:
            from autoexp.campaign.dags.factory import build_dags

            dags = build_dags(args.config)
            print(f"{args.config}: {len(dags)} DAGs: {', '.join(d.dag_id for d in dags)}")
            return 0
    except config_errors() as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    api = Api(args.port, os.environ.get("AUTOEXP_DEMO_TOKEN"))  # scripts/demo logs in for it
    api.wait_healthy(300)
    t0 = time.time()
    for plan in plans:
        api.wait_dag(plan.dag_id, 300)
        api.call("PATCH", f"dags/{plan.dag_id}", {"is_paused": False})  # a paused DAG's run only queues
    runs = trigger_campaign(api, args.config)
    for dag_id, run_id in runs.items():
        log.info("triggered %s (%s)", dag_id, run_id)
    log.info("the Campaigns page: %s/campaigns/ (in Airflow's UI: Campaigns, in the navigation)", api.base)
    states: dict[str, str] = {}
    deadline = time.monotonic() + args.timeout
    while len(states) < len(runs) and time.monotonic() < deadline:
        for dag_id, run_id in runs.items():
            if dag_id not in states:
                state = api.run_state(dag_id, run_id)
                if state in ("success", "failed"):
                    states[dag_id] = state
                    log.info("%s: %s after %.0f s", dag_id, state, time.time() - t0)
        time.sleep(2)  # the wall is measured by this loop
    t1 = time.time()
    dag_plans = [plan_dag(plan, settings) for plan in plans]
    for plan in plans:
        print(f"\n== {plan.dag_id}: {states.get(plan.dag_id, 'not finished')}")
        print_report(Path(run_layout.report_dir(plan.pretrain.run_dir)))
    reported = print_campaign_report(api, args.config, {"budgets": [answer_budget(dag_plans)]})
    log.info("the Campaigns page: %s/campaigns/", api.base)
    jobs = sacct_jobs(_sacct_since(t0))
    gaps = idle_gaps(jobs, t0, t1)
    critical = critical_path_seconds(dag_plans, jobs)
    work = job_seconds(jobs, t0, t1)
    slots = int(api.call("GET", f"pools/{settings.pool_name}")["slots"])
    bound = capacity_bound_seconds(critical, work, slots)
    wall, idle = t1 - t0, sum(e - b for b, e in gaps)
    print(
        f"\ncampaign wall {wall:.0f} s (whole demo incl. set-up {t1 - args.started:.0f} s), {len(jobs)} "
        f"Slurm jobs, {work:.0f} job-seconds\n"
        f"  capacity bound {bound:.0f} s = max(Slurm critical path {critical:.0f} s, job-seconds / "
        f"{slots} pool slots {work / max(slots, 1):.0f} s): wall = {wall / max(bound, 1e-9):.2f} x bound\n"
        f"  no Slurm job running for {idle:.0f} s of the wall ({100 * idle / max(wall, 1e-9):.0f} %): "
        f"{idle_summary(gaps, t0, t1)}"
    )
    found = dispatch_latencies(api.call, dag_plans, runs, sacct_submissions(t0), settings.pool_name, slots)
    poll = float(settings.poll_interval_secs)
    print(f"  readiness -> submission per Slurm job (poll {poll:.0f} s, see docs/performance.md):")
    print(textwrap.indent(summary(found, poll) or "no job measured", "    "))
    ok = len(states) == len(runs) and all(s == "success" for s in states.values())
    return 0 if ok and reported is not None else 1


if __name__ == "__main__":
    sys.exit(main())
