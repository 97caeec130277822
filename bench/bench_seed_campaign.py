"""Benchmark (not CI): the seed campaign, config/scaling_exps.yaml, run at once against the local cluster.

Everything is real but the work of the jobs: Airflow 3 (api-server, scheduler with LocalExecutor,
DAG processor, triggerer) on its own PostgreSQL, the local Slurm cluster, SSH through a counting sshd
in front of it. The training is FAKE_TRAINER of tests/e2e/test_sweeps.py (Megatron-layout checkpoints,
tracker and iteration lines, 1 s per save) run by the seed's own training template; the conversion
and evaluation is FAKE_CONVERT (marker and results). The seed's token budgets are scaled down with
the ``-f`` overrides in seed_campaign_lib.SCALE_OVERRIDES. All 90 DAGs are parsed; ``--experiments``
of them (default all; fewer are spread over the sorted DAG ids) are triggered at once.

Prints one JSON line of figures: DAG runs succeeded/total, Slurm jobs submitted vs expected and
duplicate job names (sacct), SSH requests per poll interval (server-counted), CPU seconds and peak
RSS of the scheduler / triggerer / DAG-processor process trees (sampled from /proc every 2 s),
database size, wall time, and training end -> its last conversion's submission (median, p95).

    .venv/bin/python bench/bench_seed_campaign.py --experiments 8 --timeout 1500
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path[:0] = [
    str(REPO),
    str(REPO / "bench"),
    str(REPO / "plugins"),
    str(REPO / "src"),
    str(REPO / "scripts" / "lib"),
]

from tests.fixtures import session  # noqa: E402

session.set_up()  # a PostgreSQL server and a session folder, stopped and removed at exit

from seed_campaign_lib import (  # noqa: E402
    SCALE_OVERRIDES,
    TreeSampler,
    expected_jobs,
    final_converts,
    latency_figures,
    local_overrides,
    sacct,
    wait_for,
    workload_figures,
    write_config,
)

from tests.e2e.test_sweeps import FAKE_CONVERT, FAKE_TRAINER  # noqa: E402
from tests.fixtures.airflow_stack import AirflowStack, start_stack  # noqa: E402
from tests.fixtures.slurm_cluster import start_cluster, stop_cluster  # noqa: E402
from tests.slurm_operator.integration.ssh_counter import CountingSshd, start_counting_sshd  # noqa: E402

POOL = "slurm_bench"


def _runs(stack: AirflowStack) -> dict[str, str]:
    """DAG id -> state of its latest run, every DAG at once (one API call)."""
    got = stack.api("GET", "dags/~/dagRuns?limit=1000")
    return {r["dag_id"]: r["state"] for r in got["dag_runs"]}


def _deferred(stack: AirflowStack) -> int:
    """Task instances deferred now, in every run (the waits and the Slurm jobs in the triggerer)."""
    got = stack.api("GET", "dags/~/dagRuns/~/taskInstances?state=deferred&limit=1")
    return int(got["total_entries"])


def _parsed(stack: AirflowStack, dag_ids: set[str]) -> bool | None:
    try:
        got = stack.api("GET", "dags?limit=1000")
    except OSError:
        return None
    return dag_ids <= {d["dag_id"] for d in got["dags"]} or None


def _ssh_figures(sshd: CountingSshd, t0: float, t1: float, interval: float) -> dict[str, Any]:
    served = sshd.commands(t0, t1)
    intervals = (t1 - t0) / interval
    kinds = Counter(
        "path-batch"
        if "#path-batch" in c.text
        else "sftp"
        if "sftp-server" in c.text
        else "sbatch"
        if "sbatch" in c.text
        else "sacct/squeue"
        if "sacct" in c.text or "squeue" in c.text
        else "other"
        for c in served
    )
    return {
        "requests": len(served),
        "per_interval": round(len(served) / intervals, 2),
        "per_interval_by_kind": {k: round(v / intervals, 2) for k, v in sorted(kinds.items())},
    }


def _progress(
    elapsed: float, states: dict[str, str], deferred_peak: int, cluster_env: dict[str, str], since: float
) -> None:
    """One line a minute, so a long run shows where it is (stderr; the figures stay on stdout)."""
    by_state = Counter(states.values())
    submitted = len(sacct(cluster_env, since))
    print(
        f"# {elapsed:6.0f} s: runs {dict(sorted(by_state.items()))}, Slurm jobs submitted {submitted},"
        f" deferred peak {deferred_peak}",
        file=sys.stderr,
        flush=True,
    )


def _db_mb(stack: AirflowStack) -> float:
    name = stack.database_url.rsplit("/", 1)[-1].split("?")[0]
    ((size,),) = session.server().query("SELECT pg_database_size(%s)", name)
    return round(size / 2**20, 1)


def run(args: argparse.Namespace, base: Path) -> dict[str, Any]:
    cluster = start_cluster(prefix="bench-seed-cluster-")
    sshd = start_counting_sshd(cluster, base / "sshd", conn_id="slurm_bench")
    stack = None
    try:
        trainer, convert = base / "fake_trainer.py", base / "fake_convert.sh"
        trainer.write_text(FAKE_TRAINER.replace("time.sleep(6)", f"time.sleep({args.save_seconds})"))
        convert.write_text(FAKE_CONVERT)
        overrides = [
            *SCALE_OVERRIDES,
            *local_overrides(base, trainer, convert, sshd.conn_id, POOL, args.poll),
        ]
        config = write_config(base / "scaling_exps_local.yaml", overrides)
        jobs = expected_jobs(config)
        step = max(1, len(jobs) // args.experiments)  # spread over the grid
        chosen = sorted(jobs)[::step][: args.experiments]
        print(f"# config {config}: {len(jobs)} DAGs, triggering {len(chosen)}; overrides:", flush=True)
        for o in SCALE_OVERRIDES:
            print(f"#   -f {o}", flush=True)
        env = {
            sshd.conn_env_var: sshd.conn_json,
            "AUTOEXP_CONFIGS": str(config),
            "AIRFLOW__CORE__PARALLELISM": str(args.parallelism),
            "AIRFLOW__CORE__DAGBAG_IMPORT_TIMEOUT": "120",
            "AIRFLOW__DAG_PROCESSOR__DAG_FILE_PROCESSOR_TIMEOUT": "180",
        }
        stack = start_stack(base / "airflow", REPO / "dags", env)
        subprocess.run(
            [
                str(REPO / ".venv/bin/airflow"),
                "pools",
                "set",
                POOL,
                str(args.slots),
                "bench",
                "--include-deferred",
            ],
            check=True,
            env=stack.env(),
            capture_output=True,
            timeout=120,
        )
        samplers = {c: TreeSampler(stack.procs[c].pid) for c in ("scheduler", "triggerer", "dag-processor")}
        t_parse = time.monotonic()
        wait_for(f"{len(jobs)} DAGs to be parsed", lambda: _parsed(stack, set(jobs)), 600)
        parse_s = time.monotonic() - t_parse
        t0_wall, t0 = time.time(), time.monotonic()
        for s in samplers.values():
            s.cpu.clear()
            s.sample()
        base_cpu = {c: dict(s.cpu) for c, s in samplers.items()}
        for dag_id in chosen:
            stack.api("POST", f"dags/{dag_id}/dagRuns", {"logical_date": None, "conf": {}})
        states: dict[str, str] = {}
        deferred_peak = 0
        deadline = t0 + args.timeout
        last_poll = last_progress = time.monotonic()
        while time.monotonic() < deadline:
            stack.check_alive()
            for s in samplers.values():
                s.sample()
            if time.monotonic() - last_poll > 10:
                last_poll = time.monotonic()
                with contextlib.suppress(OSError):  # api-server busy: ask again next round
                    states = _runs(stack)
                    deferred_peak = max(deferred_peak, _deferred(stack))
                if all(states.get(d) in ("success", "failed") for d in chosen):
                    break
            if time.monotonic() - last_progress > 60:
                last_progress = time.monotonic()
                _progress(time.monotonic() - t0, states, deferred_peak, cluster.env(), t0_wall)
            time.sleep(2)
        wall, t1_wall = time.monotonic() - t0, time.time()
        rows = sacct(cluster.env(), t0_wall)
        ours = [r for r in rows if any(r["name"] in jobs[d] for d in chosen)]
        names = Counter(r["name"] for r in ours)
        expected = set().union(*(jobs[d] for d in chosen))
        comp: dict[str, Any] = {}
        for c, s in samplers.items():
            for pid, cpu in base_cpu[c].items():  # CPU before the trigger (parse, start-up) is not counted
                s.cpu[pid] -= cpu
            comp[c] = s.figures(wall)
        return {
            "experiments_triggered": len(chosen),
            "dags_parsed": len(jobs),
            "parse_wait_s": round(parse_s, 1),
            "dag_runs_success": sum(states.get(d) == "success" for d in chosen),
            "dag_runs_total": len(chosen),
            "dag_runs_not_success": {d: states.get(d) for d in chosen if states.get(d) != "success"},
            "slurm_jobs_expected": len(expected),
            "slurm_jobs_submitted": len(ours),
            "slurm_job_names_submitted": len(names),
            "duplicate_job_names": {n: k for n, k in names.items() if k > 1},
            "missing_job_names": sorted(expected - set(names))[:10],
            "jobs_not_completed": [f"{r['name']}={r['state']}" for r in ours if r["state"] != "COMPLETED"],
            "ssh": _ssh_figures(sshd, t0_wall, t1_wall, args.poll),
            "poll_interval_s": args.poll,
            "components": comp,
            "deferred_task_instances_peak": deferred_peak,
            "database_mb": _db_mb(stack),
            "wall_s": round(wall, 1),
            "train_end_to_last_convert_submit": latency_figures(rows, final_converts(config, set(chosen))),
            "task_processes": workload_figures(stack.log_file("scheduler")),
            "pool_slots": args.slots,
            "parallelism": args.parallelism,
        }
    finally:
        if stack is not None:
            stack.stop()
        sshd.stop()
        stop_cluster(cluster)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--experiments", type=int, default=90, help="DAGs to trigger, spread over the grid")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds to wait for the runs to end")
    ap.add_argument("--poll", type=float, default=5.0, help="the DAGs' poll_interval_secs")
    ap.add_argument("--slots", type=int, default=8, help="Slurm pool slots (the node declares 8 CPUs)")
    ap.add_argument("--parallelism", type=int, default=8, help="Airflow core.parallelism")
    ap.add_argument("--save-seconds", type=float, default=1.0, help="stand-in training seconds per save")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="bench-seed-"))
    base.chmod(0o755)
    result = run(args, base)
    print(json.dumps(result, indent=1), flush=True)
    if os.environ.get("BENCH_KEEP") is None:
        subprocess.run(["rm", "-rf", str(base / "runs")], check=False)


if __name__ == "__main__":
    main()
